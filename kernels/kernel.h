/* kernels/kernel.h — one C interface for every kernel under test.
 *
 * A kernel is a descriptor: a name, what it claims to support, and entry
 * points for the forward (O, LSE) and optionally the backward (dQ, dK, dV).
 * The harness talks only to this interface; built-in kernels (the fp64
 * reference wrapped as a kernel, the CPU emulation of the fused algorithm and
 * its planted-bug mutants, the CUDA kernels) and plugins look the same.
 *
 * Buffers hold raw dtype bit patterns (see ref.h), laid out as the problem's
 * layout says; LSE is always float, natural log, (B, Hq, Nq) contiguous.
 * Pointers are host pointers when kernel->memory is AC_MEM_HOST and device
 * pointers when AC_MEM_CUDA: then the caller (the harness) stages inputs and
 * its poisoned output buffers on the device, so an unwritten element stays
 * poisoned.  The dense mask and seqlens arrays inside ac_problem are always
 * host memory; a CUDA kernel copies what it needs.
 */
#ifndef ATTNCHECK_KERNEL_H
#define ATTNCHECK_KERNEL_H

#include "../ref/mask_kinds.h"
#include "../ref/ref.h"
#include "../ref/variants.h"

typedef enum { AC_DEV_CPU = 0, AC_DEV_CUDA = 1 } ac_device;
typedef enum { AC_MEM_HOST = 0, AC_MEM_CUDA = 1 } ac_memory;

/* Mask kinds a kernel can claim: one bit per row of the mask-kind table
 * (ref/mask_kinds.h), AC_MASKCAP_<ID> = 1u << its bit.  The two windows share
 * one bit, AC_MASKCAP_WINDOW: a sliding window, in the alignments claimed for
 * causal.  AC_MASKCAP_ALL is every bit of the table. */
enum {
#define AC_MASKCAP_ENUM_(id, spelling, bit, alignment, claimed_with, what) AC_MASKCAP_##id = 1u << (bit),
    AC_MASK_KINDS(AC_MASKCAP_ENUM_)
#undef AC_MASKCAP_ENUM_
        AC_MASKCAP_WINDOW = AC_MASKCAP_WINDOW_TL,
#define AC_MASKCAP_OR_(id, spelling, bit, alignment, claimed_with, what) | (1u << (bit))
    AC_MASKCAP_ALL = 0 AC_MASK_KINDS(AC_MASKCAP_OR_),
#undef AC_MASKCAP_OR_
};

#define AC_MAX_LISTED_HEAD_DIMS 16
#define AC_MAX_DV_PAIRS 8

typedef struct {
    unsigned dtypes; /* bit (1u << ac_dtype) per supported dtype */
    /* Head dims: the listed ones, or when n_head_dims == 0 any d in 1..max_head_dim. */
    int head_dims[AC_MAX_LISTED_HEAD_DIMS];
    int n_head_dims;
    int max_head_dim;
    unsigned masks; /* AC_MASKCAP_* */
    unsigned layouts; /* bit (1u << ac_layout) */
    bool gqa; /* Hq != Hkv */
    bool varlen; /* seqlens_q / seqlens_k */
    bool backward;
    int max_seqlen; /* 0 = no limit of its own */
    unsigned variants; /* AC_VAR_* (ref/variants.h): the variants it implements (with the backward: their
                          gradients too, dBias and dSink among them); 0 = plain attention only */
    /* AC_VAR_DV: the (d_qk, d_v) pairs it takes, or when n_dv_pairs == 0 any d_v the head-dim rule above allows */
    int dv_pairs[AC_MAX_DV_PAIRS][2];
    int n_dv_pairs;
    /* fp8 dtypes (e4m3, e5m2): the format the forward rounds P to before P V, which the case's p= must
       name: AC_E4M3/AC_E5M2 (row-max scaled: ref.h, ac_fp8_p_round) or AC_BF16/AC_F16; 0 (AC_F32): e4m3 */
    ac_dtype fp8_p;
    /* fp8: the fp8 products' accumulator, which the case's acc= must name: 0 = f32; b = fraction bits of a running sum
       truncated every AC_FP8_ACC_STEP products (ref.h; Hopper's fp8 tensor cores: AC_FP8_ACC_HOPPER) */
    int fp8_acc_bits;
    /* fp8: descale factors per tensor or per (batch, kv head) only: a case's descale=block(N) is not supported
       (false, the default: every granularity of ref.h's descale_rows) */
    bool fp8_no_block_descale;
    /* The kernel reads V as K's first d_v channels (MLA decode's one latent cache, as FlashMLA does): it is
       given only problems whose inputs are so (v_from_k; the case's v=k), and every generated case is */
    bool v_from_k;
} ac_caps;

/* dropout_mask (with dropout, else NULL): the keep mask the forward drew, one bit
 * per pair (b, h, i, j) at bit ac_dropout_index, least significant bit first in
 * each byte ((ac_dropout_elems + 7) / 8 bytes; visible pairs' bits are read). */
typedef struct {
    const void *q, *k, *v;
    void *o;
    float *lse;
    uint8_t *dropout_mask;
} ac_fwd_args;

/* The backward gets the kernel's own O and LSE, as a training step would.
 * The variants' parameter gradients (memory as the tensors'; NULL when the
 * problem does not use the variant): dsink (Hq) f32 with sinks; dbias, shaped
 * like the bias and in its dtype (ac_bias_elems), with a bias. */
typedef struct {
    const void *q, *k, *v, *o, *d_o;
    const float *lse;
    void *dq, *dk, *dv;
    float *dsink;
    void *dbias;
} ac_bwd_args;

/* Room for a kernel's name (a plugin's is at most 63 characters). */
#define AC_KERNEL_NAME_LEN 128

typedef struct ac_kernel ac_kernel;
struct ac_kernel {
    const char *name;
    const char *description; /* one line: algorithm, and for a mutant its bug */
    ac_caps caps;
    ac_device device;
    ac_memory memory;
    /* AC_OK when it can run here; otherwise AC_ERR_ENV and why (e.g. "no CUDA device"). May be NULL (always available). */
    int (*available)(const ac_kernel *self, ac_err *err);
    /* AC_OK, AC_ERR_INPUT (a problem outside its caps) or AC_ERR_ENV (device fault, naming the call). */
    int (*forward)(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err);
    int (*backward)(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_bwd_args *a,
                    ac_err *err); /* NULL without backward */
    const void *ctx; /* the kernel's own parameters: tile sizes, mutant id, plugin state */
    /* It runs in a process of its own already, with a deadline (an --exec kernel):
     * the harness calls it in its own process even when isolating kernels, since
     * the worker would add nothing and could not hold its persistent child. */
    bool own_process;
};

/* ---- registry ----
 * Built-in kernels are listed in kernels/registry.c; plugins are added at run time. */
size_t ac_kernel_count(void);
const ac_kernel *ac_kernel_at(size_t i);
const ac_kernel *ac_kernel_find(const char *name);
int ac_kernel_add(const ac_kernel *k, ac_err *err); /* AC_ERR_INPUT on a duplicate name or a full registry */

/* Does the kernel claim this problem and dtype?  AC_OK, or AC_ERR_INPUT naming the first capability it lacks. */
int ac_kernel_supports(const ac_kernel *k, const ac_problem *p, ac_dtype t, bool want_backward, ac_err *err);
bool ac_kernel_is_available(const ac_kernel *k, ac_err *why);

/* ---- device memory, for AC_MEM_CUDA kernels (all AC_ERR_ENV without CUDA) ---- */
bool ac_cuda_present(ac_err *why);
int ac_dev_alloc(void **dev, size_t bytes, ac_err *err);
void ac_dev_free(void *dev);
int ac_dev_upload(void *dev, const void *host, size_t bytes, ac_err *err);
int ac_dev_download(void *host, const void *dev, size_t bytes, ac_err *err);
int ac_dev_sync(ac_err *err); /* synchronises and turns a pending device fault into AC_ERR_ENV */
/* Synchronises after a kernel under test ran: AC_OK; AC_KERNEL_FAULT with
 * "device-fault: ..." for a fault the kernel caused (illegal or misaligned
 * address, trap or device assert, illegal instruction or PC, launch failure or
 * timeout: the context is lost, the process must be replaced); AC_ERR_ENV for
 * anything else (the driver, the device).  The harness's runner calls it. */
int ac_dev_sync_kernel(ac_err *err);

/* ---- built-in kernel families, each defined in its own file ---- */
extern const ac_kernel ac_kernel_ref_fp64; /* kernels/ref_kernel.c: the fp64 reference rounded to dtype */
/* kernels/cpu_flash.c: cpu-flash (64x64 and 128x64 tiles) and its mutants */
size_t ac_cpu_flash_kernels(const ac_kernel **out, size_t max);
/* kernels/cpu_flash_fp8.c: cpu-flash-fp8 (e4m3/e5m2 forward, P in e4m3; -pbf16, -pf16: P in bf16, f16) and its mutants */
size_t ac_cpu_flash_fp8_kernels(const ac_kernel **out, size_t max);
/* kernels/cpu_flash_mla.c: cpu-flash-mla (V read as K's first d_v channels: v=k cases only) and its mutant */
size_t ac_cpu_flash_mla_kernels(const ac_kernel **out, size_t max);
/* kernels/cuda/: cuda-flash, cuda-naive and the CUDA mutants (none when built without CUDA) */
size_t ac_cuda_kernels(const ac_kernel **out, size_t max);

/* `attncheck bench`: prints the GPU benchmark tables (kernels/cuda/bench.cu);
 * without CUDA, says so and returns AC_ERR_ENV. */
int ac_cuda_bench(int argc, char **argv);

#endif
