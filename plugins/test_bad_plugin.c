/* plugins/test_bad_plugin.c — plugins attncheck must refuse, one per build flag
 * (plugins/meson.build): each is broken in exactly one way, and each forward
 * would leave a trace if it were ever called (the tests check it is not). */
#include <stdio.h>
#include <stdlib.h>

#include "attncheck_plugin.h"

__attribute__((unused)) static int bad_forward(void *user, const attncheck_problem *p, int32_t dtype, const void *q,
                                               const void *k, const void *v, void *o, float *lse, char *errbuf,
                                               size_t errbuf_len)
{
    (void)user, (void)p, (void)dtype, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)errbuf, (void)errbuf_len;
    abort(); /* never called: a refused plugin must not run */
}

__attribute__((unused)) static int bad_forward2(void *user, const attncheck_problem2 *p, const attncheck_fwd_args *a,
                                                char *errbuf, size_t errbuf_len)
{
    (void)user, (void)p, (void)a, (void)errbuf, (void)errbuf_len;
    abort(); /* never called */
}

#ifndef BAD_NO_SYMBOL
static const attncheck_plugin bad = {
#if defined(BAD_ABI)
    .abi_version = 7,
#elif defined(BAD_V2_SIZE) || defined(BAD_V2_NO_FORWARD2) || defined(BAD_V2_VARIANT) || defined(BAD_V2_VK_FP8)
    /* ABI 2, broken in its own fields */
    .abi_version = ATTNCHECK_PLUGIN_ABI_VERSION,
#ifndef BAD_V2_SIZE
    .struct_size = sizeof(attncheck_plugin),
#else
    .struct_size = 8, /* not the size of the descriptor it was built with */
#endif
#ifndef BAD_V2_NO_FORWARD2
    .forward2 = bad_forward2,
#endif
#ifdef BAD_V2_VARIANT
    .variants = 1u << 30, /* a variant no attncheck knows */
#endif
#ifdef BAD_V2_VK_FP8
    .v_from_k = 1, /* V read from K's codes: not with fp8, which the caps below claim */
#endif
#else
    .abi_version = ATTNCHECK_PLUGIN_ABI_V1,
#endif
    .name = "bad-plugin",
    .caps =
        {
#ifdef BAD_V2_VK_FP8
            .dtypes = 1u << ATTNCHECK_DTYPE_F32 | 1u << ATTNCHECK_DTYPE_E4M3,
#else
            .dtypes = 1u << ATTNCHECK_DTYPE_F32,
#endif
            .max_head_dim = 64,
            .masks = ATTNCHECK_MASK_NONE,
#ifdef BAD_V1_THD
            .layouts = 1u << ATTNCHECK_LAYOUT_BHSD | 1u << ATTNCHECK_LAYOUT_THD, /* THD is ABI 2's */
#else
            .layouts = 1u << ATTNCHECK_LAYOUT_BHSD,
#endif
#ifdef BAD_BACKWARD
            .backward = 1, /* claims a backward it does not have */
#endif
        },
    .memory = ATTNCHECK_MEM_HOST,
#if !defined(BAD_NULL_FORWARD) && !defined(BAD_V2_SIZE) && !defined(BAD_V2_NO_FORWARD2) && !defined(BAD_V2_VARIANT) && \
    !defined(BAD_V2_VK_FP8)
    .forward = bad_forward,
#endif
};

const attncheck_plugin *attncheck_plugin_describe(void) { return &bad; }
#else
/* exports something, but not the describe function */
ATTNCHECK_PLUGIN_EXPORT int attncheck_plugin_describe_typo(void);
int attncheck_plugin_describe_typo(void) { return 1; }
#endif
