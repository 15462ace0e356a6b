/* plugins/test_bad_plugin.c — plugins attncheck must refuse, one per build flag
 * (plugins/meson.build): each is broken in exactly one way, and each forward
 * would leave a trace if it were ever called (the tests check it is not). */
#include <stdio.h>
#include <stdlib.h>

#include "attncheck_plugin.h"

__attribute__((unused)) static int bad_forward(void *user, const attncheck_problem *p, int32_t dtype, const void *q, const void *k,
                       const void *v, void *o, float *lse, char *errbuf, size_t errbuf_len)
{
    (void)user, (void)p, (void)dtype, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)errbuf, (void)errbuf_len;
    abort(); /* never called: a refused plugin must not run */
}

#ifndef BAD_NO_SYMBOL
static const attncheck_plugin bad = {
#ifdef BAD_ABI
    .abi_version = 7,
#else
    .abi_version = ATTNCHECK_PLUGIN_ABI_VERSION,
#endif
    .name = "bad-plugin",
    .caps = {
        .dtypes = 1u << ATTNCHECK_DTYPE_F32,
        .max_head_dim = 64,
        .masks = ATTNCHECK_MASK_NONE,
        .layouts = 1u << ATTNCHECK_LAYOUT_BHSD,
#ifdef BAD_BACKWARD
        .backward = 1, /* claims a backward it does not have */
#endif
    },
    .memory = ATTNCHECK_MEM_HOST,
#ifndef BAD_NULL_FORWARD
    .forward = bad_forward,
#endif
};

const attncheck_plugin *attncheck_plugin_describe(void)
{
    return &bad;
}
#else
/* exports something, but not the describe function */
ATTNCHECK_PLUGIN_EXPORT int attncheck_plugin_describe_typo(void);
int attncheck_plugin_describe_typo(void)
{
    return 1;
}
#endif
