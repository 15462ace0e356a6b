/* kernels/cpu_flash_mla.c — cpu-flash-mla: cpu-flash on MLA decode's one
 * latent cache, and its planted bug.
 *
 * DeepSeek-V2/V3's absorbed decode keeps one KV head of d = 576 channels (the
 * 512-dim latent, then 64 rope dims) and reads it twice: as K whole, and as V's
 * first d_v = 512 channels.  A kernel built that way (FlashMLA) is handed K's
 * buffer only; this one reads V the same way, from K, and never reads the V
 * attncheck passes.  It claims v_from_k, so attncheck gives it only v=k cases
 * (kernels/registry.c) and draws every case so (harness/case/gen_variants.c,
 * case_vk_apply).  The arithmetic is cpu-flash's, forward only.
 *
 * The mutant takes V from K's last d_v channels, as a kernel that assumes the
 * cache holds the rope dims first would: identical when d_v = d, wrong
 * whenever d_v < d (every MLA case). */
#include <stdlib.h>
#include <string.h>

#include "kernel.h"

typedef struct {
    bool rope_first; /* the planted bug: V from K's channels [d - d_v, d) */
} mla_params;

/* V as the kernel reads it: channels [first, first + d_v) of K's rows, in V's
 * own layout (pages included); elements no key row reaches keep V's bits. */
static void *v_from_k(const ac_problem *p, ac_dtype t, const void *k, const void *v, int first)
{
    size_t n = ac_tensor_elems(p, AC_TENSOR_V), size = ac_dtype_size(t);
    void *out = malloc(n * size + 1);
    if (!out)
        return NULL;
    memcpy(out, v, n * size);
    ac_copy_k_channels_to_v(p, size, k, out, first);
    return out;
}

static int mla_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    const mla_params *mp = self->ctx;
    void *v = v_from_k(p, t, a->k, a->v, mp->rope_first ? p->head_dim - ac_head_dim_v(p) : 0);
    if (!v)
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory", self->name);
    ac_fwd_args from_k = *a;
    from_k.v = v;
    const ac_kernel *flash = ac_kernel_find("cpu-flash");
    int st = flash->forward(flash, p, t, &from_k, err);
    free(v);
    return st;
}

/* cpu-flash's claims, forward only, reading V from K. */
#define MLA_CAPS \
    { \
        .dtypes = (1u << AC_F32) | (1u << AC_F16) | (1u << AC_BF16), .n_head_dims = 0, \
        .max_head_dim = AC_MAX_HEAD_DIM, .masks = AC_MASKCAP_ALL, .layouts = AC_LAYOUTS_ALL, .gqa = true, \
        .varlen = true, .backward = false, .max_seqlen = 0, .variants = AC_VAR_ALL, .v_from_k = true, \
    }

static const ac_kernel mla_kernels[] = {
    {.name = "cpu-flash-mla",
     .description = "cpu-flash on MLA decode's one latent cache: V read as K's first d_v channels (FlashMLA's way), "
                    "given only v=k cases",
     .caps = MLA_CAPS,
     .device = AC_DEV_CPU,
     .memory = AC_MEM_HOST,
     .forward = mla_forward,
     .ctx = &(const mla_params){false}},
    {.name = "cpu-flash-mla-mutant-rope-first",
     .description = "V read from K's last d_v channels, as if the latent cache held the rope dims first",
     .caps = MLA_CAPS,
     .device = AC_DEV_CPU,
     .memory = AC_MEM_HOST,
     .forward = mla_forward,
     .ctx = &(const mla_params){true}},
};

size_t ac_cpu_flash_mla_kernels(const ac_kernel **out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < sizeof mla_kernels / sizeof mla_kernels[0] && n < max; i++)
        out[n++] = &mla_kernels[i];
    return n;
}
