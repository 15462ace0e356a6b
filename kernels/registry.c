/* kernels/registry.c — the kernels attncheck knows: the built-in families
 * (ref-fp64, cpu-flash and its mutants, the CUDA kernels) and those added at
 * run time (plugins).  Also the capability check the harness runs before it
 * hands a problem to a kernel.
 *
 * The built-in list is recomputed on each call from the family functions (a
 * few dozen pointers), so there is no lazily-initialised state to race on;
 * run-time additions are copied into a fixed table, added before any run. */
#include <stdio.h>
#include <string.h>

#include "kernel.h"

#define MAX_BUILTIN 128
#define MAX_ADDED 32

static ac_kernel added[MAX_ADDED];
static char added_names[MAX_ADDED][AC_KERNEL_NAME_LEN];
static size_t n_added;

static size_t builtins(const ac_kernel **out, size_t max)
{
    size_t n = 0;
    out[n++] = &ac_kernel_ref_fp64;
    n += ac_cpu_flash_kernels(out + n, max - n);
    n += ac_cpu_flash_fp8_kernels(out + n, max - n);
    n += ac_cpu_flash_mla_kernels(out + n, max - n);
    n += ac_cuda_kernels(out + n, max - n);
    return n;
}

static size_t builtin_count(void)
{
    const ac_kernel *all[MAX_BUILTIN];
    return builtins(all, MAX_BUILTIN);
}

size_t ac_kernel_count(void) { return builtin_count() + n_added; }

const ac_kernel *ac_kernel_at(size_t i)
{
    const ac_kernel *all[MAX_BUILTIN];
    size_t n = builtins(all, MAX_BUILTIN);
    if (i < n)
        return all[i];
    return i - n < n_added ? &added[i - n] : NULL;
}

const ac_kernel *ac_kernel_find(const char *name)
{
    if (!name)
        return NULL;
    const ac_kernel *all[MAX_BUILTIN];
    size_t n = builtins(all, MAX_BUILTIN);
    for (size_t i = 0; i < n; i++)
        if (strcmp(all[i]->name, name) == 0)
            return all[i];
    for (size_t i = 0; i < n_added; i++)
        if (strcmp(added[i].name, name) == 0)
            return &added[i];
    return NULL;
}

int ac_kernel_add(const ac_kernel *k, ac_err *err)
{
    if (!k || !k->name || !k->name[0] || !k->forward)
        return ac_fail(err, AC_ERR_INPUT, "kernel to add: needs a name and a forward entry point");
    if (strlen(k->name) >= AC_KERNEL_NAME_LEN)
        return ac_fail(err, AC_ERR_INPUT, "kernel name too long (%zu characters, at most %d)", strlen(k->name),
                       AC_KERNEL_NAME_LEN - 1);
    if (ac_kernel_find(k->name))
        return ac_fail(err, AC_ERR_INPUT, "a kernel named '%s' is already registered", k->name);
    if (n_added == MAX_ADDED)
        return ac_fail(err, AC_ERR_INPUT, "kernel registry full: at most %d kernels can be added", MAX_ADDED);
    snprintf(added_names[n_added], AC_KERNEL_NAME_LEN, "%s", k->name);
    added[n_added] = *k;
    added[n_added].name = added_names[n_added];
    n_added++;
    return AC_OK;
}

/* ---- capabilities --------------------------------------------------------------- */

static int check_head_dim(const ac_kernel *k, int d, ac_err *err)
{
    const ac_caps *c = &k->caps;
    if (c->n_head_dims == 0) {
        if (d >= 1 && d <= c->max_head_dim)
            return AC_OK;
        return ac_fail(err, AC_ERR_INPUT, "kernel '%s' does not support head_dim=%d (supports 1..%d)", k->name, d,
                       c->max_head_dim);
    }
    char list[AC_MAX_LISTED_HEAD_DIMS * 8] = "";
    size_t used = 0;
    for (int i = 0; i < c->n_head_dims && i < AC_MAX_LISTED_HEAD_DIMS; i++) {
        if (c->head_dims[i] == d)
            return AC_OK;
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", i ? ", " : "", c->head_dims[i]);
    }
    return ac_fail(err, AC_ERR_INPUT, "kernel '%s' does not support head_dim=%d (supports %s)", k->name, d, list);
}

/* Every mask kind the problem uses must be claimed, with what it is claimed with. */
static int check_mask(const ac_kernel *k, const ac_problem *p, ac_err *err)
{
    unsigned used = ac_problem_masks(p);
    for (int m = 0; m < AC_MASK_KIND_COUNT; m++) {
        unsigned needs = ac_mask_needs((ac_mask_kind)m);
        if ((used & (1u << m)) && (k->caps.masks & needs) != needs)
            return ac_fail(err, AC_ERR_INPUT, "kernel '%s' does not support %s (mask=%s)", k->name,
                           ac_mask_what((ac_mask_kind)m), ac_mask_name((ac_mask_kind)m));
    }
    return AC_OK;
}

/* d_v: one of the claimed (d_qk, d_v) pairs, or any d_v the head-dim rule allows. */
static int check_dv(const ac_kernel *k, const ac_problem *p, ac_err *err)
{
    const ac_caps *c = &k->caps;
    int d_v = ac_head_dim_v(p);
    if (c->n_dv_pairs == 0)
        return check_head_dim(k, d_v, err);
    for (int i = 0; i < c->n_dv_pairs && i < AC_MAX_DV_PAIRS; i++)
        if (c->dv_pairs[i][0] == p->head_dim && c->dv_pairs[i][1] == d_v)
            return AC_OK;
    return ac_fail(err, AC_ERR_INPUT,
                   "kernel '%s' does not support d_qk=%d with d_v=%d (not one of its %d (d_qk, d_v) "
                   "pairs)",
                   k->name, p->head_dim, d_v, c->n_dv_pairs);
}

/* Every variant the problem uses must be claimed (ref/variants.h). */
static int check_variants(const ac_kernel *k, const ac_problem *p, ac_err *err)
{
    unsigned used = ac_problem_variants(p), missing = used & ~k->caps.variants;
    for (int v = 0; v < AC_VARIANT_COUNT; v++)
        if (missing & ac_variant_bit((ac_variant)v))
            return ac_fail(err, AC_ERR_INPUT, "kernel '%s' does not support %s (%s)", k->name,
                           ac_variant_what((ac_variant)v), ac_variant_name((ac_variant)v));
    return used & AC_VAR_DV ? check_dv(k, p, err) : AC_OK;
}

int ac_kernel_supports(const ac_kernel *k, const ac_problem *p, ac_dtype t, bool want_backward, ac_err *err)
{
    const ac_caps *c = &k->caps;
    if ((unsigned)t >= AC_DTYPE_COUNT || !(c->dtypes & (1u << t)))
        return ac_fail(err, AC_ERR_INPUT, "kernel '%s' does not support dtype %s", k->name,
                       (unsigned)t < AC_DTYPE_COUNT ? ac_dtype_name(t) : "?");
    int st = check_head_dim(k, p->head_dim, err);
    if (st == AC_OK)
        st = check_mask(k, p, err);
    if (st == AC_OK)
        st = check_variants(k, p, err);
    if (st != AC_OK)
        return st;
    if (!(c->layouts & (1u << p->layout)))
        return ac_fail(err, AC_ERR_INPUT, "kernel '%s' does not support layout %s", k->name, ac_layout_name(p->layout));
    if (p->heads_q != p->heads_kv && !c->gqa)
        return ac_fail(err, AC_ERR_INPUT, "kernel '%s' does not support GQA/MQA (hq=%d, hkv=%d)", k->name, p->heads_q,
                       p->heads_kv);
    if ((p->seqlens_q || p->seqlens_k) && !c->varlen)
        return ac_fail(err, AC_ERR_INPUT, "kernel '%s' does not support per-sequence lengths (varlen)", k->name);
    ac_dtype p_fmt = c->fp8_p == AC_F32 ? AC_E4M3 : c->fp8_p;
    if (ac_problem_is_fp8(p) && p->fp8_p != p_fmt)
        return ac_fail(err, AC_ERR_INPUT, "kernel '%s' rounds P to %s, the case says p=%s", k->name,
                       ac_dtype_name(p_fmt), ac_dtype_name(p->fp8_p));
    if (ac_problem_is_fp8(p) && c->fp8_no_block_descale && p->descale_rows > 0)
        return ac_fail(err, AC_ERR_INPUT,
                       "kernel '%s' takes descale factors per tensor or per (batch, kv head), not descale=block(%d)",
                       k->name, p->descale_rows);
    if (ac_problem_is_fp8(p) && p->fp8_acc_bits != c->fp8_acc_bits) {
        char said[16] = "f32", has[16] = "f32";
        if (p->fp8_acc_bits > 0)
            snprintf(said, sizeof said, "e8m%d", p->fp8_acc_bits);
        if (c->fp8_acc_bits > 0)
            snprintf(has, sizeof has, "e8m%d", c->fp8_acc_bits);
        return ac_fail(err, AC_ERR_INPUT,
                       "kernel '%s' accumulates its fp8 products (QK^T, PV) in %s, the case says acc=%s", k->name, has,
                       said);
    }
    if (c->v_from_k && !p->v_from_k)
        return ac_fail(err, AC_ERR_INPUT,
                       "kernel '%s' reads V as K's first d_v channels; the case's V is its own (not v=k)", k->name);
    if (want_backward && (!c->backward || !k->backward))
        return ac_fail(err, AC_ERR_INPUT, "kernel '%s' has no backward", k->name);
    if (c->max_seqlen > 0 && (p->seqlen_q > c->max_seqlen || p->seqlen_k > c->max_seqlen))
        return ac_fail(err, AC_ERR_INPUT, "kernel '%s' supports sequences up to %d (nq=%d, nk=%d)", k->name,
                       c->max_seqlen, p->seqlen_q, p->seqlen_k);
    return AC_OK;
}

bool ac_kernel_is_available(const ac_kernel *k, ac_err *why)
{
    if (!k)
        return ac_fail(why, AC_ERR_INPUT, "no kernel"), false;
    return !k->available || k->available(k, why) == AC_OK;
}
