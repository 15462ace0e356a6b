/* harness/run/plugin.c — a kernel in a shared library (kernels/attncheck_plugin.h).
 *
 * ac_plugin_load dlopens the library (RTLD_NOW: a missing symbol fails here,
 * not in the middle of a campaign; RTLD_LOCAL: two plugins never see each
 * other's symbols), asks it for its descriptor and checks everything in it
 * before anything else of it is called: ABI version first (the one field every
 * version keeps in place), then name, entry points and capabilities.  A
 * descriptor that passes is wrapped in an ac_kernel that translates
 * ac_problem into the ABI's own struct and registered like a built-in kernel.
 * Plugins are never unloaded: the registry keeps pointers into them.  The
 * paths loaded are kept in order: the kernel worker (worker.h) loads the same.
 * After each call: a write past errbuf_len (its guard zone) or a device fault
 * the kernel caused is AC_KERNEL_FAULT; a nonzero return is the environment. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/files/files.h"
#include "harness/run/arena.h"
#include "harness/run/plugin.h"
#include "kernels/attncheck_plugin.h"

/* The ABI's plain ints are attncheck's enums, value for value. */
_Static_assert(ATTNCHECK_DTYPE_F32 == AC_F32 && ATTNCHECK_DTYPE_F16 == AC_F16 && ATTNCHECK_DTYPE_BF16 == AC_BF16 &&
                   ATTNCHECK_DTYPE_E4M3 == AC_E4M3 && ATTNCHECK_DTYPE_E5M2 == AC_E5M2,
               "dtype values");
_Static_assert(ATTNCHECK_DESCALE_TENSOR == AC_DESCALE_TENSOR && ATTNCHECK_DESCALE_HEAD == AC_DESCALE_HEAD,
               "descale granularities");
_Static_assert(ATTNCHECK_LAYOUT_BHSD == AC_LAYOUT_BHSD && ATTNCHECK_LAYOUT_BSHD == AC_LAYOUT_BSHD &&
                   ATTNCHECK_LAYOUT_THD == AC_LAYOUT_THD,
               "layouts");
_Static_assert(ATTNCHECK_ALIGN_TOP_LEFT == AC_ALIGN_TOP_LEFT && ATTNCHECK_ALIGN_BOTTOM_RIGHT == AC_ALIGN_BOTTOM_RIGHT,
               "alignments");
_Static_assert(ATTNCHECK_WINDOW_INF == AC_WINDOW_INF, "window");
_Static_assert(ATTNCHECK_MASK_NONE == AC_MASKCAP_NONE && ATTNCHECK_MASK_CAUSAL_TL == AC_MASKCAP_CAUSAL_TL &&
                   ATTNCHECK_MASK_CAUSAL_BR == AC_MASKCAP_CAUSAL_BR && ATTNCHECK_MASK_WINDOW == AC_MASKCAP_WINDOW &&
                   ATTNCHECK_MASK_DENSE == AC_MASKCAP_DENSE,
               "mask bits");
/* The mask kinds ABI v1 can describe (its problem struct has a window and a
 * dense mask): a kind added to ref/mask_kinds.h later is not claimable by a
 * v1 plugin, whose problem could not carry it. */
#define ABI_V1_MASKS \
    (ATTNCHECK_MASK_NONE | ATTNCHECK_MASK_CAUSAL_TL | ATTNCHECK_MASK_CAUSAL_BR | ATTNCHECK_MASK_WINDOW | \
     ATTNCHECK_MASK_DENSE)
_Static_assert(ATTNCHECK_MAX_LISTED_HEAD_DIMS == AC_MAX_LISTED_HEAD_DIMS, "listed head dims");
_Static_assert(sizeof(int) == sizeof(int32_t), "seqlens arrays are passed through as int32_t");

#define PLUGIN_ERRBUF 512

/* What ABI 2 adds to the descriptor (its struct_size must cover these). */
#define ABI_V1_SIZE offsetof(attncheck_plugin, struct_size)
#define ABI_V2_MIN_SIZE (offsetof(attncheck_plugin, backward2) + sizeof(attncheck_backward2_fn))
_Static_assert(ATTNCHECK_VARIANT_SOFTCAP == AC_VAR_SOFTCAP && ATTNCHECK_VARIANT_SINKS == AC_VAR_SINKS &&
                   ATTNCHECK_VARIANT_DV == AC_VAR_DV && ATTNCHECK_VARIANT_ALIBI == AC_VAR_ALIBI &&
                   ATTNCHECK_VARIANT_BIAS == AC_VAR_BIAS && ATTNCHECK_VARIANT_SINK_TOKENS == AC_VAR_SINK_TOKENS &&
                   ATTNCHECK_VARIANT_DROPOUT == AC_VAR_DROPOUT && ATTNCHECK_VARIANT_PAGED == AC_VAR_PAGED &&
                   ATTNCHECK_VARIANT_SPLIT == AC_VAR_SPLIT,
               "variant bits");
_Static_assert(ATTNCHECK_MAX_DV_PAIRS == AC_MAX_DV_PAIRS, "d_v pairs");
#define ABI_V2_VARIANTS \
    (ATTNCHECK_VARIANT_SOFTCAP | ATTNCHECK_VARIANT_SINKS | ATTNCHECK_VARIANT_DV | ATTNCHECK_VARIANT_ALIBI | \
     ATTNCHECK_VARIANT_BIAS | ATTNCHECK_VARIANT_SINK_TOKENS | ATTNCHECK_VARIANT_DROPOUT | ATTNCHECK_VARIANT_PAGED | \
     ATTNCHECK_VARIANT_SPLIT)

/* The errbuf a plugin writes into: PLUGIN_ERRBUF bytes (its errbuf_len) with a
 * guard zone of canaries after it, so a plugin that writes past errbuf_len
 * is named (out-of-bounds-write) instead of smashing attncheck's stack; its
 * message is read bounded by errbuf_len whether or not it ends in a NUL.
 * One per thread: entry points are called from one thread at a time. */
typedef struct {
    char text[PLUGIN_ERRBUF];
    uint8_t guard[AC_GUARD_BYTES];
} guarded_errbuf;
static _Thread_local guarded_errbuf errbuf;

/* The libraries loaded, in order (the kernel worker loads the same ones). */
#define MAX_PLUGINS 64
static const char *loaded_paths[MAX_PLUGINS];
static size_t n_loaded;

typedef struct {
    ac_kernel k; /* k.ctx points back here */
    attncheck_plugin desc; /* as read_descriptor read it */
    char path[AC_PATH_LEN];
    char name[AC_KERNEL_NAME_LEN];
} plugin_ctx;

/* The descriptor as attncheck uses it: the bytes the plugin's ABI version
 * says it has (version 1: the fields before struct_size; version 2:
 * struct_size of them) and zeros past them, so a field a plugin's header did
 * not have reads as "off".  The caller has checked abi_version is 1 or 2. */
static attncheck_plugin read_descriptor(const attncheck_plugin *d)
{
    attncheck_plugin copy;
    memset(&copy, 0, sizeof copy);
    size_t n = d->abi_version >= 2 ? (d->struct_size < sizeof copy ? d->struct_size : sizeof copy) : ABI_V1_SIZE;
    memcpy(&copy, d, n);
    return copy;
}

static attncheck_problem to_abi(const ac_problem *p)
{
    return (attncheck_problem){
        .batch = p->batch,
        .heads_q = p->heads_q,
        .heads_kv = p->heads_kv,
        .seqlen_q = p->seqlen_q,
        .seqlen_k = p->seqlen_k,
        .head_dim = p->head_dim,
        .layout = (int32_t)p->layout,
        .scale = p->scale,
        .windowed = p->windowed ? 1 : 0,
        .window_left = p->window_left,
        .window_right = p->window_right,
        .align = (int32_t)p->align,
        .seqlens_q = (const int32_t *)p->seqlens_q,
        .seqlens_k = (const int32_t *)p->seqlens_k,
        .dense_mask = p->dense_mask,
        .mask_batch = p->mask_batch,
        .mask_heads = p->mask_heads,
    };
}

/* ABI 2's problem: the v1 fields and the variants. */
static attncheck_problem2 to_abi2(const ac_problem *p)
{
    attncheck_problem v1 = to_abi(p);
    return (attncheck_problem2){
        .struct_size = sizeof(attncheck_problem2),
        .batch = v1.batch,
        .heads_q = v1.heads_q,
        .heads_kv = v1.heads_kv,
        .seqlen_q = v1.seqlen_q,
        .seqlen_k = v1.seqlen_k,
        .head_dim = v1.head_dim,
        .layout = v1.layout,
        .scale = v1.scale,
        .windowed = v1.windowed,
        .window_left = v1.window_left,
        .window_right = v1.window_right,
        .align = v1.align,
        .seqlens_q = v1.seqlens_q,
        .seqlens_k = v1.seqlens_k,
        .dense_mask = v1.dense_mask,
        .mask_batch = v1.mask_batch,
        .mask_heads = v1.mask_heads,
        .head_dim_v = p->head_dim_v,
        .softcap = p->softcap,
        .sinks = p->sinks,
        .cu_seqlens_q = (const int32_t *)p->cu_seqlens_q,
        .cu_seqlens_k = (const int32_t *)p->cu_seqlens_k,
        .alibi_slopes = p->alibi_slopes,
        .alibi_batch = p->alibi_slopes ? (p->alibi_batch > 1 ? p->alibi_batch : 1) : 0,
        .bias = p->bias,
        .bias_dtype = (int32_t)p->bias_dtype,
        .bias_batch = p->bias ? (p->bias_batch > 1 ? p->bias_batch : 1) : 0,
        .bias_heads = p->bias ? (p->bias_heads > 1 ? p->bias_heads : 1) : 0,
        .sink_tokens = p->sink_tokens,
        .dropout_p = p->dropout_p,
        .dropout_seed = p->dropout_seed,
        .page_size = p->page_size,
        .num_pages = p->num_pages,
        .pages_per_seq = p->pages_per_seq,
        .block_table = (const int32_t *)p->block_table,
        .num_splits = p->num_splits,
        .out_dtype = (int32_t)p->fp8_out,
        .p_dtype = ac_problem_is_fp8(p) ? (int32_t)p->fp8_p : 0,
        .descale_rows = p->descale_rows,
        .descale_q = p->descale_q,
        .descale_k = p->descale_k,
        .descale_v = p->descale_v,
        .acc_bits = ac_problem_is_fp8(p) ? p->fp8_acc_bits : 0,
        .v_from_k = p->v_from_k ? 1 : 0,
    };
}

static char *errbuf_arm(void)
{
    memset(errbuf.text, 0, sizeof errbuf.text);
    ac_canary_fill(errbuf.guard, sizeof errbuf.guard);
    return errbuf.text;
}

/* After a call: a write past errbuf_len (a kernel fault); a nonzero return (the
 * environment: "could not run", naming the plugin); for a CUDA plugin a device
 * fault it caused (a kernel fault) or another device error (the environment). */
static int after_call(const plugin_ctx *c, const char *entry, int rc, ac_err *err)
{
    size_t first, last;
    if (ac_canary_damage(errbuf.guard, sizeof errbuf.guard, &first, &last))
        return ac_fail(err, AC_KERNEL_FAULT,
                       "out-of-bounds-write: %s wrote past the end of errbuf: bytes end+%zu "
                       "to end+%zu (errbuf_len is %d)",
                       entry, first, last, PLUGIN_ERRBUF);
    errbuf.text[PLUGIN_ERRBUF - 1] = 0;
    if (rc != 0)
        return ac_fail(err, AC_ERR_ENV, "plugin %s (%s): %s returned %d: %s", c->name, c->path, entry, rc,
                       errbuf.text[0] ? errbuf.text : "(no message)");
    if (c->desc.memory == ATTNCHECK_MEM_CUDA) {
        ac_err why = {{0}};
        int st = ac_dev_sync_kernel(&why);
        if (st == AC_KERNEL_FAULT) /* the runner names the kernel and its file */
            return ac_fail(err, st, "%s, in %s", why.msg, entry);
        if (st != AC_OK)
            return ac_fail(err, st, "plugin %s (%s): after %s: %s", c->name, c->path, entry, why.msg);
    }
    return AC_OK;
}

static int plugin_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    const plugin_ctx *c = self->ctx;
    char *buf = errbuf_arm();
    int rc;
    if (c->desc.abi_version >= 2) {
        attncheck_problem2 ap = to_abi2(p);
        attncheck_fwd_args fa = {.struct_size = sizeof fa,
                                 .dtype = (int32_t)t,
                                 .q = a->q,
                                 .k = a->k,
                                 .v = a->v,
                                 .o = a->o,
                                 .lse = a->lse,
                                 .dropout_mask = a->dropout_mask};
        rc = c->desc.forward2(c->desc.user, &ap, &fa, buf, PLUGIN_ERRBUF);
    } else {
        attncheck_problem ap = to_abi(p);
        rc = c->desc.forward(c->desc.user, &ap, (int32_t)t, a->q, a->k, a->v, a->o, a->lse, buf, PLUGIN_ERRBUF);
    }
    return after_call(c, "forward", rc, err);
}

static int plugin_backward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_bwd_args *a, ac_err *err)
{
    const plugin_ctx *c = self->ctx;
    char *buf = errbuf_arm();
    int rc;
    if (c->desc.abi_version >= 2) {
        attncheck_problem2 ap = to_abi2(p);
        attncheck_bwd_args ba = {.struct_size = sizeof ba,
                                 .dtype = (int32_t)t,
                                 .q = a->q,
                                 .k = a->k,
                                 .v = a->v,
                                 .o = a->o,
                                 .d_o = a->d_o,
                                 .lse = a->lse,
                                 .dq = a->dq,
                                 .dk = a->dk,
                                 .dv = a->dv,
                                 .dsink = a->dsink,
                                 .dbias = a->dbias};
        rc = c->desc.backward2(c->desc.user, &ap, &ba, buf, PLUGIN_ERRBUF);
    } else {
        attncheck_problem ap = to_abi(p);
        rc = c->desc.backward(c->desc.user, &ap, (int32_t)t, a->q, a->k, a->v, a->o, a->lse, a->d_o, a->dq, a->dk,
                              a->dv, buf, PLUGIN_ERRBUF);
    }
    return after_call(c, "backward", rc, err);
}

static int plugin_available(const ac_kernel *self, ac_err *err)
{
    if (self->memory == AC_MEM_CUDA && !ac_cuda_present(err))
        return AC_ERR_ENV;
    return AC_OK;
}

/* ---- validation: nothing of the plugin is called before all of it passes ---- */

static bool name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= 64)
        return false;
    for (const char *s = name; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' ||
              *s == '_' || *s == '.'))
            return false;
    return true;
}

static int check_head_dims(const char *path, const attncheck_caps *c, ac_err *err)
{
    if (c->n_head_dims < 0 || c->n_head_dims > ATTNCHECK_MAX_LISTED_HEAD_DIMS)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s: caps.n_head_dims %d outside 0..%d", path, (int)c->n_head_dims,
                       ATTNCHECK_MAX_LISTED_HEAD_DIMS);
    for (int i = 0; i < c->n_head_dims; i++)
        if (c->head_dims[i] < 1 || c->head_dims[i] > AC_MAX_HEAD_DIM)
            return ac_fail(err, AC_ERR_INPUT, "plugin %s: caps.head_dims[%d] = %d outside 1..%d", path, i,
                           (int)c->head_dims[i], AC_MAX_HEAD_DIM);
    if (c->n_head_dims == 0 && (c->max_head_dim < 1 || c->max_head_dim > AC_MAX_HEAD_DIM))
        return ac_fail(err, AC_ERR_INPUT, "plugin %s: caps.max_head_dim %d outside 1..%d (with no listed dims)", path,
                       (int)c->max_head_dim, AC_MAX_HEAD_DIM);
    return AC_OK;
}

static int check_caps(const char *path, const attncheck_plugin *d, ac_err *err)
{
    const attncheck_caps *c = &d->caps;
    int n_dtypes = d->abi_version >= 2 ? AC_DTYPE_COUNT : AC_E4M3; /* fp8 is ABI 2's: descales */
    if (c->dtypes == 0 || (c->dtypes >> n_dtypes) != 0)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s: caps.dtypes 0x%x: none or unknown dtype bits", path,
                       (unsigned)c->dtypes);
    if (d->fp8_p != 0 && (d->fp8_p < AC_F16 || d->fp8_p >= AC_DTYPE_COUNT))
        return ac_fail(err, AC_ERR_INPUT, "plugin %s: fp8_p %d is not e4m3, e5m2, bf16 or f16", path, (int)d->fp8_p);
    if (d->fp8_acc_bits < 0 || d->fp8_acc_bits > AC_FP8_ACC_MAX_BITS)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s: fp8_acc_bits %d is not 0 (f32) or 1..22", path,
                       (int)d->fp8_acc_bits);
    if (d->v_from_k != 0 && d->v_from_k != 1)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s: v_from_k %d is not 0 or 1", path, (int)d->v_from_k);
    if (d->v_from_k && (c->dtypes >> AC_E4M3) != 0)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s: v_from_k with fp8 dtypes (V from K's codes is not supported)",
                       path);
    int n_layouts = d->abi_version >= 2 ? 3 : 2; /* THD is ABI 2's */
    if (c->layouts == 0 || (c->layouts >> n_layouts) != 0)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s: caps.layouts 0x%x: none or unknown layout bits", path,
                       (unsigned)c->layouts);
    if (c->masks == 0 || (c->masks & ~(unsigned)ABI_V1_MASKS) != 0)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s: caps.masks 0x%x: none or unknown mask bits", path,
                       (unsigned)c->masks);
    if (c->max_seqlen < 0)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s: caps.max_seqlen %d < 0", path, (int)c->max_seqlen);
    if (d->memory != ATTNCHECK_MEM_HOST && d->memory != ATTNCHECK_MEM_CUDA)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s: memory %d is neither host (0) nor cuda (1)", path,
                       (int)d->memory);
    if (d->abi_version == ATTNCHECK_PLUGIN_ABI_V1 && c->backward && !d->backward)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s: caps.backward is set but the backward entry point is NULL", path);
    return check_head_dims(path, c, err);
}

/* What ABI 2 adds: its entry points, its variant bits (its size is checked first). */
static int check_v2(const char *path, const attncheck_plugin *d, ac_err *err)
{
    if (!d->forward2)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s (%s): ABI 2: forward2 entry point is NULL", path, d->name);
    if (d->forward || d->backward)
        return ac_fail(err, AC_ERR_INPUT,
                       "plugin %s (%s): ABI 2 calls forward2/backward2; forward and backward "
                       "(ABI 1's) must be NULL",
                       path, d->name);
    if (d->caps.backward && !d->backward2)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s (%s): caps.backward is set but backward2 is NULL", path, d->name);
    if (d->variants & ~(uint32_t)ABI_V2_VARIANTS)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s (%s): variants 0x%x: unknown variant bits", path, d->name,
                       (unsigned)d->variants);
    if (d->n_dv_pairs < 0 || d->n_dv_pairs > ATTNCHECK_MAX_DV_PAIRS)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s (%s): n_dv_pairs %d outside 0..%d", path, d->name,
                       (int)d->n_dv_pairs, ATTNCHECK_MAX_DV_PAIRS);
    for (int i = 0; i < d->n_dv_pairs; i++)
        for (int x = 0; x < 2; x++)
            if (d->dv_pairs[i][x] < 1 || d->dv_pairs[i][x] > AC_MAX_HEAD_DIM)
                return ac_fail(err, AC_ERR_INPUT, "plugin %s (%s): dv_pairs[%d] = (%d, %d): head dims in 1..%d", path,
                               d->name, i, (int)d->dv_pairs[i][0], (int)d->dv_pairs[i][1], AC_MAX_HEAD_DIM);
    return AC_OK;
}

/* *out: the descriptor as read_descriptor reads it, once the version is known. */
static int check_descriptor(const char *path, const attncheck_plugin *raw, attncheck_plugin *out, ac_err *err)
{
    if (!raw)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s: attncheck_plugin_describe() returned NULL", path);
    if (raw->abi_version != ATTNCHECK_PLUGIN_ABI_V1 && raw->abi_version != ATTNCHECK_PLUGIN_ABI_VERSION)
        return ac_fail(err, AC_ERR_INPUT,
                       "plugin %s: ABI version %u, attncheck speaks %d and %d (rebuild it "
                       "against this attncheck_plugin.h)",
                       path, (unsigned)raw->abi_version, ATTNCHECK_PLUGIN_ABI_V1, ATTNCHECK_PLUGIN_ABI_VERSION);
    if (raw->abi_version >= 2 && raw->struct_size < ABI_V2_MIN_SIZE) /* before anything is read by it */
        return ac_fail(err, AC_ERR_INPUT,
                       "plugin %s: ABI 2 needs struct_size = sizeof(attncheck_plugin) (at least "
                       "%zu), got %u",
                       path, ABI_V2_MIN_SIZE, (unsigned)raw->struct_size);
    const attncheck_plugin d = read_descriptor(raw);
    *out = d;
    if (!d.name || !name_ok(d.name))
        return ac_fail(err, AC_ERR_INPUT, "plugin %s: name %s%s%s is not 1-63 characters of [A-Za-z0-9._-]", path,
                       d.name ? "'" : "", d.name ? d.name : "NULL", d.name ? "'" : "");
    if (d.abi_version == ATTNCHECK_PLUGIN_ABI_V1 && !d.forward)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s (%s): forward entry point is NULL", path, d.name);
    int st = d.abi_version >= 2 ? check_v2(path, &d, err) : AC_OK;
    return st == AC_OK ? check_caps(path, &d, err) : st;
}

static ac_caps to_caps(const attncheck_plugin *d)
{
    const attncheck_caps *c = &d->caps;
    ac_caps k = {.dtypes = c->dtypes,
                 .n_head_dims = c->n_head_dims,
                 .max_head_dim = c->max_head_dim,
                 .masks = c->masks,
                 .layouts = c->layouts,
                 .gqa = c->gqa != 0,
                 .varlen = c->varlen != 0,
                 .backward = c->backward != 0,
                 .max_seqlen = c->max_seqlen,
                 .variants = d->abi_version >= 2 ? d->variants : 0,
                 .fp8_p = (ac_dtype)d->fp8_p,
                 .fp8_acc_bits = d->fp8_acc_bits,
                 .v_from_k = d->v_from_k != 0};
    for (int i = 0; i < c->n_head_dims; i++)
        k.head_dims[i] = c->head_dims[i];
    k.n_dv_pairs = d->abi_version >= 2 ? d->n_dv_pairs : 0;
    for (int i = 0; i < k.n_dv_pairs; i++)
        k.dv_pairs[i][0] = d->dv_pairs[i][0], k.dv_pairs[i][1] = d->dv_pairs[i][1];
    if (k.n_head_dims > 0) /* max_head_dim: the largest listed one, for whoever reads only it */
        for (int i = 0; i < k.n_head_dims; i++)
            k.max_head_dim = k.head_dims[i] > k.max_head_dim ? k.head_dims[i] : k.max_head_dim;
    return k;
}

static int describe(const char *path, attncheck_plugin *out, ac_err *err)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return ac_fail(err, AC_ERR_INPUT, "plugin %s: cannot load: %s", path, why ? why : "unknown error");
    }
    dlerror();
    void *sym = dlsym(h, ATTNCHECK_PLUGIN_DESCRIBE_SYMBOL);
    if (!sym) {
        dlclose(h);
        return ac_fail(err, AC_ERR_INPUT,
                       "plugin %s: no symbol %s: not an attncheck plugin (see "
                       "kernels/attncheck_plugin.h)",
                       path, ATTNCHECK_PLUGIN_DESCRIBE_SYMBOL);
    }
    attncheck_plugin_describe_fn fn;
    memcpy(&fn, &sym, sizeof fn); /* object pointer -> function pointer, as POSIX allows */
    int st = check_descriptor(path, fn(), out, err);
    if (st != AC_OK)
        dlclose(h);
    return st; /* on success h stays open for the life of the process */
}

int ac_plugin_load(const char *path, const ac_kernel **out, ac_err *err)
{
    if (out)
        *out = NULL;
    /* dlopen searches the library path for a bare name; a plugin is a file the user names */
    char full[AC_PATH_LEN];
    if (snprintf(full, sizeof full, "%s%s", strchr(path, '/') ? "" : "./", path) >= (int)sizeof full)
        return ac_fail(err, AC_ERR_INPUT, "plugin path too long: %s", path);
    /* dlopen of a FIFO blocks forever and of a device reads it: only regular files are libraries */
    int fd;
    long long size;
    ac_err not_a_file = {{0}};
    int st = ac_open_regular(full, &fd, &size, &not_a_file);
    if (st != AC_OK)
        return ac_fail(err, AC_ERR_INPUT, "plugin %s: cannot load: %s", full, not_a_file.msg);
    close(fd);
    attncheck_plugin d;
    st = describe(full, &d, err);
    if (st != AC_OK)
        return st;
    plugin_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return ac_fail(err, AC_ERR_ENV, "plugin %s: out of memory", path);
    c->desc = d;
    snprintf(c->path, sizeof c->path, "%s", path);
    snprintf(c->name, sizeof c->name, "%s", d.name);
    c->k = (ac_kernel){.name = c->name,
                       .description = d.description ? d.description : "plugin",
                       .caps = to_caps(&d),
                       .memory = (ac_memory)d.memory,
                       .device = d.memory == ATTNCHECK_MEM_CUDA ? AC_DEV_CUDA : AC_DEV_CPU,
                       .available = plugin_available,
                       .forward = plugin_forward,
                       .backward = d.caps.backward ? plugin_backward : NULL,
                       .ctx = c};
    ac_err why = {{0}};
    if ((st = ac_kernel_add(&c->k, &why)) != AC_OK) {
        free(c);
        return ac_fail(err, st, "plugin %s: %s", path, why.msg);
    }
    const ac_kernel *reg = ac_kernel_find(c->name);
    if (out)
        *out = reg ? reg : &c->k;
    if (n_loaded < MAX_PLUGINS)
        loaded_paths[n_loaded++] = c->path;
    return AC_OK;
}

size_t ac_plugin_count(void) { return n_loaded; }
const char *ac_plugin_path_at(size_t i) { return i < n_loaded ? loaded_paths[i] : NULL; }

const char *ac_plugin_path_of(const ac_kernel *k)
{
    return k && k->forward == plugin_forward ? ((const plugin_ctx *)k->ctx)->path : NULL;
}
