/* plugins/hostile_plugin.c — kernels that misbehave on purpose, one per build
 * flag (plugins/meson.build builds libattncheck-hostile-<kind>.so with
 * -DHOSTILE_<KIND>): each computes a correct f32 forward and then does one
 * hostile thing, so the only failure attncheck can find is that thing.
 *
 *   segv        *(int *)0 = 1                      -> kernel:crash
 *   abort       abort()                            -> kernel:crash
 *   exit0       exit(0)                            -> kernel:exited (not a pass)
 *   exit3       exit(3)                            -> kernel:exited (not exit 3)
 *   hang        sleeps forever                     -> kernel:timeout
 *   o-past      writes 64 floats past the end of O -> kernel:out-of-bounds-write
 *   lse-past    writes 16 floats past the end of LSE
 *   o-before    writes 8 floats before the start of O
 *   modify-q    flips a bit of Q[0]                -> kernel:input-modified
 *   errbuf      writes 768 bytes into the 512-byte errbuf and returns 1
 *   crash-nk64  fine up to 64 keys, SIGSEGV beyond -> shrinks to nk=65
 *
 * and on ABI 2, claiming the variant they abuse (their forward is the plain
 * one, their backward writes zeros: the fault is found before any comparison):
 *   dsink-past    the backward writes 16 floats past dSink  -> kernel:out-of-bounds-write
 *   dbias-past    the backward writes 16 entries past dBias
 *   dropout-past  the forward writes 8 bytes past its dropout keep mask
 *   modify-sinks  the forward flips a bit of sinks[0]       -> kernel:input-modified
 *   modify-bias   the forward flips a bit of the bias's first entry
 *
 * The issue that asked for them (13) saw, before isolation: SIGSEGV and
 * SIGABRT with no verdict, exit(0) read as a pass, a hang, heap corruption
 * ("malloc(): corrupted top size") and, under ASan, a PASS. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attncheck_plugin.h"

#if defined(HOSTILE_DSINK_PAST) || defined(HOSTILE_DBIAS_PAST) || defined(HOSTILE_DROPOUT_PAST) || \
    defined(HOSTILE_MODIFY_SINKS) || defined(HOSTILE_MODIFY_BIAS)
#define HOSTILE_ABI2 1
#endif

/* The correct forward: f32, BHSD, no mask, Hq == Hkv; softmax in double. */
static void attention(const attncheck_problem *p, const float *q, const float *k, const float *v, float *o, float *lse)
{
    int d = p->head_dim, nq = p->seqlen_q, nk = p->seqlen_k;
    double *s = malloc(sizeof(double) * (size_t)nk);
    if (!s)
        return; /* outputs stay poisoned: attncheck reports them unwritten */
    for (int bh = 0; bh < p->batch * p->heads_q; bh++) {
        const float *qb = q + (size_t)bh * nq * d, *kb = k + (size_t)bh * nk * d, *vb = v + (size_t)bh * nk * d;
        for (int i = 0; i < nq; i++) {
            double m = -INFINITY, l = 0.0;
            for (int j = 0; j < nk; j++) {
                double dot = 0.0;
                for (int c = 0; c < d; c++)
                    dot += (double)qb[(size_t)i * d + c] * kb[(size_t)j * d + c];
                s[j] = dot * p->scale;
                m = fmax(m, s[j]);
            }
            for (int j = 0; j < nk; j++)
                l += (s[j] = exp(s[j] - m));
            for (int c = 0; c < d; c++) {
                double acc = 0.0;
                for (int j = 0; j < nk; j++)
                    acc += s[j] * vb[(size_t)j * d + c];
                o[((size_t)bh * nq + i) * d + c] = (float)(acc / l);
            }
            lse[(size_t)bh * nq + i] = (float)(m + log(l));
        }
    }
    free(s);
}

static int hostile_forward(void *user, const attncheck_problem *p, int32_t dtype, const void *q, const void *k,
                           const void *v, void *o, float *lse, char *errbuf, size_t errbuf_len)
{
    (void)user, (void)dtype, (void)errbuf, (void)errbuf_len;
    attention(p, q, k, v, o, lse);
    size_t n_o = (size_t)p->batch * p->heads_q * p->seqlen_q * p->head_dim;
    size_t n_lse = (size_t)p->batch * p->heads_q * p->seqlen_q;
    (void)n_o, (void)n_lse;
#if defined(HOSTILE_SEGV)
    *(volatile int *)(uintptr_t)0 = 1;
#elif defined(HOSTILE_ABORT)
    abort();
#elif defined(HOSTILE_EXIT0)
    exit(0);
#elif defined(HOSTILE_EXIT3)
    exit(3);
#elif defined(HOSTILE_HANG)
    for (;;) {
        struct timespec second = {1, 0};
        nanosleep(&second, NULL);
    }
#elif defined(HOSTILE_O_PAST)
    for (size_t i = 0; i < 64; i++)
        ((float *)o)[n_o + i] = 1.0f;
#elif defined(HOSTILE_LSE_PAST)
    for (size_t i = 0; i < 16; i++)
        lse[n_lse + i] = 1.0f;
#elif defined(HOSTILE_O_BEFORE)
    for (int i = 1; i <= 8; i++)
        ((float *)o)[-i] = 1.0f;
#elif defined(HOSTILE_MODIFY_Q)
    ((uint32_t *)(uintptr_t)q)[0] ^= 1u; /* the last bit of Q[0]: a change whatever its value */
#elif defined(HOSTILE_ERRBUF)
    memset(errbuf, 'A', 768); /* errbuf_len is 512, and no NUL */
    return 1;
#elif defined(HOSTILE_CRASH_NK64)
    if (p->seqlen_k > 64)
        *(volatile int *)(uintptr_t)0 = 1;
#elif !defined(HOSTILE_ABI2)
#error "build with one -DHOSTILE_<KIND> (plugins/meson.build)"
#endif
    return 0;
}

#ifdef HOSTILE_ABI2
/* ---- ABI 2: the variants' arrays and outputs abused ---- */

static attncheck_problem as_v1(const attncheck_problem2 *p)
{
    return (attncheck_problem){.batch = p->batch,
                               .heads_q = p->heads_q,
                               .heads_kv = p->heads_kv,
                               .seqlen_q = p->seqlen_q,
                               .seqlen_k = p->seqlen_k,
                               .head_dim = p->head_dim,
                               .layout = p->layout,
                               .scale = p->scale};
}

static int hostile_forward2(void *user, const attncheck_problem2 *p, const attncheck_fwd_args *a, char *errbuf,
                            size_t errbuf_len)
{
    attncheck_problem v1 = as_v1(p);
    int st = hostile_forward(user, &v1, a->dtype, a->q, a->k, a->v, a->o, a->lse, errbuf, errbuf_len);
#if defined(HOSTILE_DROPOUT_PAST)
    size_t bits = (size_t)p->batch * p->heads_q * p->seqlen_q * p->seqlen_k, bytes = (bits + 7) / 8;
    memset(a->dropout_mask, 0xFF, bytes); /* every pair kept */
    memset(a->dropout_mask + bytes, 0xFF, 8);
#elif defined(HOSTILE_MODIFY_SINKS)
    ((uint32_t *)(uintptr_t)p->sinks)[0] ^= 1u;
#elif defined(HOSTILE_MODIFY_BIAS)
    ((uint8_t *)(uintptr_t)p->bias)[0] ^= 1u; /* the last bit of the first entry, whatever its dtype */
#endif
    return st;
}

static int hostile_backward2(void *user, const attncheck_problem2 *p, const attncheck_bwd_args *a, char *errbuf,
                             size_t errbuf_len)
{
    (void)user, (void)errbuf, (void)errbuf_len;
    size_t nq = (size_t)p->batch * p->heads_q * p->seqlen_q * p->head_dim;
    size_t nk = (size_t)p->batch * p->heads_kv * p->seqlen_k * p->head_dim;
    memset(a->dq, 0, nq * sizeof(float)), memset(a->dk, 0, nk * sizeof(float)), memset(a->dv, 0, nk * sizeof(float));
#if defined(HOSTILE_DSINK_PAST)
    for (int h = 0; h < p->heads_q + 16; h++)
        a->dsink[h] = 0.0f;
#elif defined(HOSTILE_DBIAS_PAST)
    size_t n = (size_t)p->bias_batch * p->bias_heads * p->seqlen_q * p->seqlen_k;
    for (size_t x = 0; x < n + 16; x++)
        ((float *)a->dbias)[x] = 0.0f; /* an f32 bias: the plugin claims f32 alone */
#endif
    return 0;
}

static const attncheck_plugin hostile = {
    .abi_version = ATTNCHECK_PLUGIN_ABI_VERSION,
    .name = HOSTILE_NAME,
    .description = "a kernel that abuses a variant on purpose (plugins/hostile_plugin.c)",
    .caps =
        {
            .dtypes = 1u << ATTNCHECK_DTYPE_F32,
            .max_head_dim = 64,
            .masks = ATTNCHECK_MASK_NONE,
            .layouts = 1u << ATTNCHECK_LAYOUT_BHSD,
            .backward = 1,
        },
    .memory = ATTNCHECK_MEM_HOST,
    .struct_size = sizeof(attncheck_plugin),
    .forward2 = hostile_forward2,
    .backward2 = hostile_backward2,
#if defined(HOSTILE_DSINK_PAST) || defined(HOSTILE_MODIFY_SINKS)
    .variants = ATTNCHECK_VARIANT_SINKS,
#elif defined(HOSTILE_DBIAS_PAST) || defined(HOSTILE_MODIFY_BIAS)
    .variants = ATTNCHECK_VARIANT_BIAS,
#else
    .variants = ATTNCHECK_VARIANT_DROPOUT,
#endif
};
#else
static const attncheck_plugin hostile = {
    .abi_version = ATTNCHECK_PLUGIN_ABI_V1,
    .name = HOSTILE_NAME,
    .description = "a kernel that misbehaves on purpose (plugins/hostile_plugin.c)",
    .caps =
        {
            .dtypes = 1u << ATTNCHECK_DTYPE_F32,
            .max_head_dim = 64,
            .masks = ATTNCHECK_MASK_NONE,
            .layouts = 1u << ATTNCHECK_LAYOUT_BHSD,
        },
    .memory = ATTNCHECK_MEM_HOST,
    .forward = hostile_forward,
};
#endif

const attncheck_plugin *attncheck_plugin_describe(void) { return &hostile; }
