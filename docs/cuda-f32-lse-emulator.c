/* docs/cuda-f32-lse-emulator.c — a CPU emulation of the forward of
 * kernels/cuda/flash_f32.cu (cuda-flash's CUDA-core f32 path) as an attncheck
 * plugin, to measure its LSE numerics without a GPU (docs/cuda-f32-lse.md).
 * Same arithmetic in the same order: 32-key tiles, one lane per key, scores as
 * an fmaf chain over d, the warp's xor-butterfly max and sum, the online
 * softmax, LSE.  EMU_MODE picks the softmax's base: 0 base 2 (flash_f32.cu
 * before issue 13: scores times f32(scale log2 e), exp2f, LSE = fmaf(m, ln 2,
 * logf l)), 1 base e (after: scores times scale, expf, LSE = m + logf l);
 * add 2 for scores summed as the naive baseline sums them (mul, then add:
 * an ablation).  Claims f32, bhsd, no mask, no varlen, forward only.
 *   cc -O2 -shared -fPIC -ffp-contract=off -I kernels docs/cuda-f32-lse-emulator.c -o libemu.so -lm
 *   EMU_MODE=0 attncheck run --plugin ./libemu.so --kernel emu-flash-f32 --no-backward --case '...' */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attncheck_plugin.h"

#define LN2F 0.6931471805599453f

static int mode;

static float warp_max(const float *v)
{
    float t[32], n[32];
    memcpy(t, v, sizeof t);
    for (int off = 16; off > 0; off >>= 1) {
        for (int i = 0; i < 32; i++)
            n[i] = fmaxf(t[i], t[i ^ off]);
        memcpy(t, n, sizeof t);
    }
    return t[0];
}

static float warp_sum(const float *v)
{
    float t[32], n[32];
    memcpy(t, v, sizeof t);
    for (int off = 16; off > 0; off >>= 1) {
        for (int i = 0; i < 32; i++)
            n[i] = t[i] + t[i ^ off];
        memcpy(t, n, sizeof t);
    }
    return t[0];
}

static float ex(float x) { return mode & 1 ? expf(x) : exp2f(x); }

/* One query row: O (d floats) and its LSE. */
static float row(const float *q, const float *k, const float *v, int d, int nk, float scale, float *o)
{
    float scale_used = mode & 1 ? scale : (float)(scale * 1.4426950408889634), m = -INFINITY, l = 0.f;
    memset(o, 0, (size_t)d * sizeof *o);
    for (int j0 = 0; j0 < nk; j0 += 32) {
        float s[32], p[32], alpha;
        for (int lane = 0; lane < 32; lane++) {
            int j = j0 + lane;
            float acc = 0.f;
            for (int c = 0; c < d && j < nk; c++)
                acc = mode & 2 ? acc + q[c] * k[(size_t)j * d + c] : fmaf(q[c], k[(size_t)j * d + c], acc);
            s[lane] = j < nk ? acc * scale_used : -INFINITY;
        }
        float m_new = fmaxf(m, warp_max(s)), shift = m_new == -INFINITY ? 0.f : m_new;
        alpha = ex(m - shift);
        m = m_new;
        for (int lane = 0; lane < 32; lane++)
            p[lane] = ex(s[lane] - shift);
        l = l * alpha + warp_sum(p);
        for (int c = 0; c < d; c++) {
            o[c] *= alpha;
            for (int jj = 0; jj < 32 && j0 + jj < nk; jj++)
                o[c] = fmaf(p[jj], v[(size_t)(j0 + jj) * d + c], o[c]);
        }
    }
    for (int c = 0; c < d; c++)
        o[c] *= l > 0.f ? 1.f / l : 0.f;
    if (!(l > 0.f))
        return -INFINITY;
    return mode & 1 ? m + logf(l) : fmaf(m, LN2F, logf(l));
}

static int forward(void *user, const attncheck_problem *p, int32_t dtype, const void *q, const void *k, const void *v,
                   void *o, float *lse, char *errbuf, size_t errbuf_len)
{
    (void)user, (void)dtype, (void)errbuf, (void)errbuf_len;
    int d = p->head_dim, nq = p->seqlen_q, nk = p->seqlen_k, group = p->heads_q / p->heads_kv;
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++) {
            size_t kv = ((size_t)b * p->heads_kv + h / group) * nk * d, qh = ((size_t)b * p->heads_q + h) * nq;
            for (int i = 0; i < nq; i++)
                lse[qh + i] = row((const float *)q + (qh + i) * d, (const float *)k + kv, (const float *)v + kv, d, nk,
                                  (float)p->scale, (float *)o + (qh + i) * d);
        }
    return 0;
}

static const attncheck_plugin plugin = {
    .abi_version = ATTNCHECK_PLUGIN_ABI_VERSION,
    .name = "emu-flash-f32",
    .description = "CPU emulation of cuda-flash's f32 forward (EMU_MODE: 0 base 2, 1 base e, +2 mul-add scores)",
    .caps = {.dtypes = 1u << ATTNCHECK_DTYPE_F32,
             .max_head_dim = 256,
             .masks = ATTNCHECK_MASK_NONE,
             .layouts = 1u << ATTNCHECK_LAYOUT_BHSD,
             .gqa = 1},
    .memory = ATTNCHECK_MEM_HOST,
    .forward = forward,
};

const attncheck_plugin *attncheck_plugin_describe(void)
{
    const char *env = getenv("EMU_MODE");
    mode = env ? atoi(env) : 0;
    return &plugin;
}
