// kernels/cuda/stage.cu — the problem as the device sees it: strides from the
// layout, and device copies of the per-sequence lengths and the dense mask.
#include <cmath>

#include "common.cuh"

// A host array's device copy in the workspace (nothing for a null one).
template <typename E> static int stage_array(const E *host, size_t n, E **dev, size_t *bytes, ac_err *err)
{
    if (!host)
        return AC_OK;
    *bytes = sizeof(E) * n;
    int status = acd_ws_alloc((void **)dev, *bytes, err);
    return status == AC_OK ? ac_dev_upload(*dev, host, *bytes, err) : status;
}

// The variants' arrays: cu_seqlens (THD), sinks, ALiBi slopes, the bias.
static int stage_variants(const ac_problem *p, acd_params *d, acd_staged *st, ac_err *err)
{
    const size_t cu_n = d->thd ? (size_t)d->B + 1 : 0;
    int status = stage_array(d->thd ? p->cu_seqlens_q : nullptr, cu_n, &st->cu_q, &st->cu_bytes, err);
    if (status == AC_OK)
        status = stage_array(d->thd ? p->cu_seqlens_k : nullptr, cu_n, &st->cu_k, &st->cu_bytes, err);
    if (status == AC_OK)
        status = stage_array(p->sinks, (size_t)d->Hq, &st->sinks, &st->sinks_bytes, err);
    if (status == AC_OK)
        status = stage_array(p->alibi_slopes, (size_t)d->alibi_batch * d->Hq, &st->alibi, &st->alibi_bytes, err);
    if (status == AC_OK && p->bias) {
        st->bias_bytes = ac_bias_elems(p) * ac_dtype_size(p->bias_dtype);
        status = acd_ws_alloc(&st->bias, st->bias_bytes, err);
        if (status == AC_OK)
            status = ac_dev_upload(st->bias, p->bias, st->bias_bytes, err);
    }
    d->bias = st->bias;
    d->cu_q = st->cu_q;
    d->cu_k = st->cu_k;
    d->sinks = st->sinks;
    d->alibi = st->alibi;
    return status;
}

int acd_stage(const ac_problem *p, int mutant, acd_params *dp, acd_staged *st, ac_err *err)
{
    *st = acd_staged{};
    acd_params d{};
    d.B = p->batch;
    d.Hq = p->heads_q;
    d.Hkv = p->heads_kv;
    d.Nq = p->seqlen_q;
    d.Nk = p->seqlen_k;
    d.D = p->head_dim;
    if (d.Hkv <= 0 || d.Hq % d.Hkv != 0)
        return ac_fail(err, AC_ERR_INPUT, "heads_q (%d) must be a multiple of heads_kv (%d)", d.Hq, d.Hkv);
    d.group = d.Hq / d.Hkv;
    long long D = d.D;
    if (p->layout == AC_LAYOUT_BHSD) {
        d.q_sb = (long long)d.Hq * d.Nq * D;
        d.q_sh = (long long)d.Nq * D;
        d.q_ss = D;
        d.k_sb = (long long)d.Hkv * d.Nk * D;
        d.k_sh = (long long)d.Nk * D;
        d.k_ss = D;
    } else { // BSHD, and THD's rows alike (acd_q_base places each sequence)
        d.q_sb = (long long)d.Nq * d.Hq * D;
        d.q_sh = D;
        d.q_ss = (long long)d.Hq * D;
        d.k_sb = (long long)d.Nk * d.Hkv * D;
        d.k_sh = D;
        d.k_ss = (long long)d.Hkv * D;
    }
    d.Dv = ac_head_dim_v(p);
    const long long Dv = d.Dv;
    if (p->layout == AC_LAYOUT_BHSD) {
        d.o_sb = (long long)d.Hq * d.Nq * Dv;
        d.o_sh = (long long)d.Nq * Dv;
        d.o_ss = Dv;
        d.v_sb = (long long)d.Hkv * d.Nk * Dv;
        d.v_sh = (long long)d.Nk * Dv;
        d.v_ss = Dv;
    } else {
        d.o_sb = (long long)d.Nq * d.Hq * Dv;
        d.o_sh = Dv;
        d.o_ss = (long long)d.Hq * Dv;
        d.v_sb = (long long)d.Nk * d.Hkv * Dv;
        d.v_sh = Dv;
        d.v_ss = (long long)d.Hkv * Dv;
    }
    d.scale = (float)p->scale;
    d.scale_log2 = (float)(p->scale * 1.4426950408889634);
    d.windowed = p->windowed;
    d.wl = p->windowed ? p->window_left : -1;
    d.wr = p->windowed ? p->window_right : -1;
    d.align_br = p->align == AC_ALIGN_BOTTOM_RIGHT;
    d.mask_batch = p->mask_batch > 0 ? p->mask_batch : 1;
    d.mask_heads = p->mask_heads > 0 ? p->mask_heads : 1;
    d.mutant = mutant;
    d.softcap = (float)p->softcap;
    d.softcap_pre = p->softcap != 0.0 ? (float)(p->scale / p->softcap) : 0.f;
    const float cap = d.softcap * ACD_LOG2E; // as softmax.cuh's kernels form it
    const double unit = d.softcap != 0.f ? (double)d.softcap / cap : (double)ACD_LN2;
    d.lse_unit = (float)unit;
    d.lse_unit_lo = (float)(unit - d.lse_unit);
    d.lse_to_log2 = d.softcap != 0.f ? (float)((double)cap / d.softcap) : ACD_LOG2E;
    d.alibi_batch = p->alibi_batch > 1 ? p->alibi_batch : 1;
    d.mods = p->softcap != 0.0 || p->alibi_slopes || p->bias;
    d.bias_dtype = (int)p->bias_dtype;
    d.bias_batch = p->bias_batch > 1 ? p->bias_batch : 1;
    d.bias_heads = p->bias_heads > 1 ? p->bias_heads : 1;
    d.thd = p->layout == AC_LAYOUT_THD;
    d.total_q = d.thd ? p->cu_seqlens_q[d.B] : 0;
    int status = AC_OK;
    size_t lens_bytes = sizeof(int) * (size_t)d.B;
    st->lens_bytes = lens_bytes;
    if (p->seqlens_q) {
        if ((status = acd_ws_alloc((void **)&st->seqlens_q, lens_bytes, err)) != AC_OK)
            goto fail;
        if ((status = ac_dev_upload(st->seqlens_q, p->seqlens_q, lens_bytes, err)) != AC_OK)
            goto fail;
    }
    if (p->seqlens_k) {
        if ((status = acd_ws_alloc((void **)&st->seqlens_k, lens_bytes, err)) != AC_OK)
            goto fail;
        if ((status = ac_dev_upload(st->seqlens_k, p->seqlens_k, lens_bytes, err)) != AC_OK)
            goto fail;
    }
    if (p->dense_mask) {
        st->mask_bytes = (size_t)d.mask_batch * d.mask_heads * d.Nq * d.Nk;
        if ((status = acd_ws_alloc((void **)&st->mask, st->mask_bytes, err)) != AC_OK)
            goto fail;
        if ((status = ac_dev_upload(st->mask, p->dense_mask, st->mask_bytes, err)) != AC_OK)
            goto fail;
    }
    if ((status = stage_variants(p, &d, st, err)) != AC_OK)
        goto fail;
    d.seqlens_q = st->seqlens_q;
    d.seqlens_k = st->seqlens_k;
    d.mask = st->mask;
    *dp = d;
    return AC_OK;
fail:
    acd_unstage(st);
    return status;
}

void acd_unstage(acd_staged *st)
{
    acd_ws_free(st->seqlens_q, st->lens_bytes);
    acd_ws_free(st->seqlens_k, st->lens_bytes);
    acd_ws_free(st->mask, st->mask_bytes);
    acd_ws_free(st->cu_q, st->cu_bytes);
    acd_ws_free(st->cu_k, st->cu_bytes);
    acd_ws_free(st->sinks, st->sinks_bytes);
    acd_ws_free(st->alibi, st->alibi_bytes);
    acd_ws_free(st->bias, st->bias_bytes);
    *st = acd_staged{};
}
