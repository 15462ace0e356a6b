/* attncheck_plugin.h — the plugin ABI: an attention kernel in a shared library.
 *
 * A third party includes only this header (it stands alone: no attncheck
 * header, no attncheck library to link), builds a shared library exporting
 *
 *     const attncheck_plugin *attncheck_plugin_describe(void);
 *
 * and runs it with `attncheck fuzz --plugin ./libmine.so --kernel mine` (or run,
 * check, list).  attncheck dlopens the library, calls attncheck_plugin_describe
 * once, checks abi_version == ATTNCHECK_PLUGIN_ABI_VERSION, a non-NULL name and
 * forward, and sane capabilities; a library that fails any check is refused
 * with a message and never called.  The descriptor and everything it points
 * to must stay valid until the process exits (a static const object is best).
 *
 * Conventions (the same as attncheck's built-in kernels):
 *   - tensors hold raw dtype bit patterns (f32: uint32, f16/bf16: uint16 words),
 *     contiguous in the problem's layout:
 *       BHSD: Q, O, dO, dQ (B, Hq, Nq, d); K, V, dK, dV (B, Hkv, Nk, d)
 *       BSHD: Q, O, dO, dQ (B, Nq, Hq, d); K, V, dK, dV (B, Nk, Hkv, d)
 *     LSE is float, natural log, (B, Hq, Nq) contiguous, whatever the layout;
 *   - key j is visible from query i of batch b, head h iff i < nq_b, j < nk_b
 *     (nq_b = seqlens_q ? seqlens_q[b] : seqlen_q; same for k), and, when
 *     windowed, c - window_left <= j <= c + window_right with c = i (top-left)
 *     or c = i + nk_b - nq_b (bottom-right), ATTNCHECK_WINDOW_INF dropping a
 *     side (causal is window (INF, 0)), and, with a dense mask,
 *     dense_mask[((mb * mask_heads + mh) * seqlen_q + i) * seqlen_k + j] != 0
 *     (mb = mask_batch == 1 ? 0 : b, mh = mask_heads == 1 ? 0 : h);
 *   - a row with no visible key: O = 0 and LSE = -inf; padding rows (i >= nq_b)
 *     and keys (j >= nk_b) are never compared;
 *   - GQA: query head h reads K/V head h / (Hq / Hkv); dK, dV sum over the group;
 *   - memory == ATTNCHECK_MEM_CUDA: q, k, v, o, lse, ... are device pointers
 *     (cudaMalloc'd by attncheck); seqlens and dense_mask are always host memory.
 *     The call may be asynchronous on the default stream: attncheck synchronises
 *     after it; a device fault the kernel caused (illegal address, trap, ...) is
 *     a kernel failure (kernel:device-fault) naming the plugin;
 *   - the kernel runs in a worker process (attncheck's README, "Kernels in a worker
 *     process"): a crash, an exit, a hang, a write outside its buffers (or past
 *     errbuf_len) or a change to an input is a failure naming the plugin;
 *   - padding (rows i >= nq_b of q and d_o, keys j >= nk_b of k and v) holds NaN;
 *   - the backward receives the plugin's own O and LSE, as a training step would;
 *   - return 0 on success; nonzero means the kernel could not run (not "wrong
 *     answer"): write a message into errbuf (errbuf_len bytes, NUL-terminated).
 * Entry points may be called from one thread at a time, any number of times. */
#ifndef ATTNCHECK_PLUGIN_H
#define ATTNCHECK_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change to the structs or signatures below. */
#define ATTNCHECK_PLUGIN_ABI_VERSION 1

/* dtypes: bit (1u << ATTNCHECK_DTYPE_*) in caps.dtypes */
#define ATTNCHECK_DTYPE_F32 0
#define ATTNCHECK_DTYPE_F16 1
#define ATTNCHECK_DTYPE_BF16 2

/* layouts: bit (1u << ATTNCHECK_LAYOUT_*) in caps.layouts */
#define ATTNCHECK_LAYOUT_BHSD 0
#define ATTNCHECK_LAYOUT_BSHD 1

#define ATTNCHECK_ALIGN_TOP_LEFT 0
#define ATTNCHECK_ALIGN_BOTTOM_RIGHT 1
#define ATTNCHECK_WINDOW_INF (-1)

/* mask kinds: bits in caps.masks */
#define ATTNCHECK_MASK_NONE (1u << 0)
#define ATTNCHECK_MASK_CAUSAL_TL (1u << 1)
#define ATTNCHECK_MASK_CAUSAL_BR (1u << 2)
#define ATTNCHECK_MASK_WINDOW (1u << 3) /* sliding window, in the alignments claimed for causal */
#define ATTNCHECK_MASK_DENSE (1u << 4)

#define ATTNCHECK_MEM_HOST 0
#define ATTNCHECK_MEM_CUDA 1

#define ATTNCHECK_MAX_LISTED_HEAD_DIMS 16

typedef struct {
    uint32_t dtypes;   /* bit per ATTNCHECK_DTYPE_* */
    /* the listed head dims, or when n_head_dims == 0 any d in 1..max_head_dim */
    int32_t head_dims[ATTNCHECK_MAX_LISTED_HEAD_DIMS];
    int32_t n_head_dims;
    int32_t max_head_dim;
    uint32_t masks;    /* ATTNCHECK_MASK_* */
    uint32_t layouts;  /* bit per ATTNCHECK_LAYOUT_* */
    int32_t gqa;       /* 1: heads_q may differ from heads_kv */
    int32_t varlen;    /* 1: seqlens_q / seqlens_k may be set */
    int32_t backward;  /* 1: backward is set */
    int32_t max_seqlen; /* 0 = no limit of its own */
} attncheck_caps;

/* The attention problem, field by field as attncheck states it. */
typedef struct {
    int32_t batch, heads_q, heads_kv; /* heads_q a multiple of heads_kv */
    int32_t seqlen_q, seqlen_k;       /* padded lengths, the tensors' extent */
    int32_t head_dim;
    int32_t layout;                   /* ATTNCHECK_LAYOUT_* */
    double scale;                     /* softmax scale (default 1/sqrt(d), as f32) */
    int32_t windowed;                 /* 0 or 1 */
    int32_t window_left, window_right; /* >= 0 or ATTNCHECK_WINDOW_INF */
    int32_t align;                    /* ATTNCHECK_ALIGN_* */
    const int32_t *seqlens_q, *seqlens_k; /* (B) or NULL; host memory */
    const uint8_t *dense_mask;        /* (mask_batch, mask_heads, Nq, Nk) or NULL; host memory */
    int32_t mask_batch, mask_heads;   /* 1 or B, 1 or Hq */
} attncheck_problem;

/* O (and LSE) from Q, K, V. */
typedef int (*attncheck_forward_fn)(void *user, const attncheck_problem *p, int32_t dtype, const void *q,
                                    const void *k, const void *v, void *o, float *lse, char *errbuf,
                                    size_t errbuf_len);
/* dQ, dK, dV from Q, K, V, the forward's O and LSE, and dO. */
typedef int (*attncheck_backward_fn)(void *user, const attncheck_problem *p, int32_t dtype, const void *q,
                                     const void *k, const void *v, const void *o, const float *lse,
                                     const void *d_o, void *dq, void *dk, void *dv, char *errbuf,
                                     size_t errbuf_len);

typedef struct {
    uint32_t abi_version;       /* ATTNCHECK_PLUGIN_ABI_VERSION */
    const char *name;           /* the kernel's name in `attncheck list`: [A-Za-z0-9._-], unique */
    const char *description;    /* one line; may be NULL */
    attncheck_caps caps;
    int32_t memory;             /* ATTNCHECK_MEM_HOST or ATTNCHECK_MEM_CUDA */
    attncheck_forward_fn forward;   /* required */
    attncheck_backward_fn backward; /* NULL when caps.backward == 0 */
    void *user;                 /* passed back to every call */
} attncheck_plugin;

#define ATTNCHECK_PLUGIN_DESCRIBE_SYMBOL "attncheck_plugin_describe"
typedef const attncheck_plugin *(*attncheck_plugin_describe_fn)(void);

#if defined(__GNUC__)
#define ATTNCHECK_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define ATTNCHECK_PLUGIN_EXPORT
#endif

/* What a plugin defines (declared here so its definition is checked against it). */
ATTNCHECK_PLUGIN_EXPORT const attncheck_plugin *attncheck_plugin_describe(void);

#ifdef __cplusplus
}
#endif

#endif
