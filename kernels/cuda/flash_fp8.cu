// kernels/cuda/flash_fp8.cu — cuda-flash-fp8: the fp8 forward (issue 17) on the
// GPU, following cpu-flash-fp8's recipe step for step (kernels/cpu_flash_fp8.c):
//   S_ij = (sum_c q_ic k_jc in f32 over the fp8 codes) * (scale dq_i dk_j);
//   running max m and denominator l in f32 (l sums the unquantised P~);
//   P~ = exp(S - m) scaled by sigma = 448 (the running row max lands on e4m3's
//   largest value) and rounded to e4m3 satfinite (cvt.rn.satfinite);
//   P V partial sums in f32 over the raw V codes, multiplied by V's descale per
//   run of keys sharing one factor; O = acc / (sigma l) in bf16/f16, LSE = m + log l.
// This kernel runs one query row per thread on the CUDA cores (tiles of 64
// keys, as the CPU kernel): every shape the family claims, on any GPU.  On
// Hopper, d = 64, 128 and 256 go to the wgmma kernel of flash_fp8_sm90.cu
// instead (acd_fp8_wg_usable: not THD, block descales of whole tiles), unless
// ACD_NO_WGMMA=1.  Visibility is
// mask.cuh's acd_visible / acd_row_keys, the same stage as cuda-flash's.
#include <cuda_fp8.h>

#include "fp8.cuh"
#include "mask.cuh"

#define FP8_TILE_K 64
#define FP8_MAX_D 256 // d = 256 takes a second instantiation with rows of 256 (local memory)

template <bool kE5m2> __device__ __forceinline__ float fp8_value(const uint8_t *buf, long long at)
{
    const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)buf[at], kE5m2 ? __NV_E5M2 : __NV_E4M3);
    return __half2float(__half(h));
}

__device__ __forceinline__ float fp8_round_p(float x)
{
    const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3), __NV_E4M3);
    return __half2float(__half(h));
}

// s[j - j0] <- S_ij of the visible keys of the tile, -inf elsewhere; returns the tile's max.
template <bool kE5m2>
__device__ float fp8_tile_scores(const acd_params &p, const fp8_descale &ds, const uint8_t *k, int b, int h, int i,
                                 int j0, int j1, int nq, int nk, const float *q_row, float sq, float *s)
{
    const int h_kv = h / p.group;
    float m = -INFINITY;
    for (int j = j0; j < j1; j++) {
        if (!acd_visible(p, b, h, i, j, nq, nk)) {
            s[j - j0] = -INFINITY;
            continue;
        }
        const long long row = acd_k_base<false>(p, b) + h_kv * p.k_sh + (long long)j * p.k_ss;
        float acc = 0.0f;
        for (int c = 0; c < p.D; c++)
            acc += q_row[c] * fp8_value<kE5m2>(k, row + c);
        s[j - j0] = acc * (sq * ds.k[fp8_descale_at(p, ds, false, b, h_kv, j)]);
        m = fmaxf(m, s[j - j0]);
    }
    return m;
}

// acc += sum_j pq_j v_j, in runs of keys sharing V's descale factor.
template <bool kE5m2>
__device__ void fp8_tile_pv(const acd_params &p, const fp8_descale &ds, const uint8_t *v, int b, int h, int j0, int j1,
                            const float *pq, float *acc, float *part)
{
    const int h_kv = h / p.group;
    for (int j = j0; j < j1;) {
        const long long g = fp8_descale_at(p, ds, false, b, h_kv, j);
        for (int c = 0; c < p.Dv; c++)
            part[c] = 0.0f;
        for (; j < j1 && fp8_descale_at(p, ds, false, b, h_kv, j) == g; j++) {
            if (pq[j - j0] == 0.0f)
                continue;
            const long long row = acd_v_base(p, b) + h_kv * p.v_sh + (long long)j * p.v_ss;
            for (int c = 0; c < p.Dv; c++)
                part[c] += pq[j - j0] * fp8_value<kE5m2>(v, row + c);
        }
        float dsc = ds.v[g];
        if (p.mutant == ACD_MUT_FP8_V_DESCALE_TWICE)
            dsc *= ds.v[g];
        for (int c = 0; c < p.Dv; c++)
            acc[c] += part[c] * dsc;
    }
}

template <typename O> __device__ __forceinline__ O fp8_out(float x);
template <> __device__ __forceinline__ __nv_bfloat16 fp8_out(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half fp8_out(float x) { return __float2half_rn(x); }

template <bool kE5m2, typename O, int MAXD>
__global__ void fp8_forward_rows(acd_params p, fp8_descale ds, const uint8_t *q, const uint8_t *k, const uint8_t *v,
                                 O *o, float *lse)
{
    const long long x = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= (long long)p.B * p.Hq * p.Nq)
        return;
    int b, h, i;
    if (!acd_grid_row(p, x, b, h, i))
        return;
    const int nq = acd_nq<false>(p, b), nk = acd_nk<false>(p, b);
    O *o_row = o + acd_o_offset(p, b, h, i);
    if (i >= nq) { // padding rows: zeros, never compared
        for (int c = 0; c < p.Dv; c++)
            o_row[c] = fp8_out<O>(0.0f);
        lse[acd_row_index<false>(p, b, h, i)] = -INFINITY;
        return;
    }
    float q_row[MAXD], acc[MAXD], part[MAXD], s[FP8_TILE_K];
    const float sigma = p.mutant == ACD_MUT_FP8_P_CLAMP ? 4096.0f : (float)AC_FP8_P_SIGMA;
    const long long q_at = acd_q_offset<false>(p, b, h, i);
    for (int c = 0; c < p.D; c++)
        q_row[c] = fp8_value<kE5m2>(q, q_at + c);
    for (int c = 0; c < p.Dv; c++)
        acc[c] = 0.0f;
    const float sq = p.scale * ds.q[fp8_descale_at(p, ds, true, b, h, i)];
    float m = -INFINITY, l = 0.0f;
    int lo, hi;
    acd_row_keys(p, i, nq, nk, lo, hi);
    for (int j0 = lo; j0 < hi; j0 += FP8_TILE_K) {
        const int j1 = min(j0 + FP8_TILE_K, hi);
        const float m_new = fmaxf(m, fp8_tile_scores<kE5m2>(p, ds, k, b, h, i, j0, j1, nq, nk, q_row, sq, s));
        if (m_new == -INFINITY)
            continue; // nothing visible yet
        const float alpha = m == -INFINITY ? 0.0f : expf(m - m_new);
        float rowsum = 0.0f;
        for (int j = 0; j < j1 - j0; j++) {
            const float pt = s[j] == -INFINITY ? 0.0f : expf(s[j] - m_new);
            rowsum += pt;
            s[j] = fp8_round_p(pt * sigma);
        }
        l = l * alpha + rowsum;
        for (int c = 0; c < p.Dv; c++)
            acc[c] *= alpha;
        fp8_tile_pv<kE5m2>(p, ds, v, b, h, j0, j1, s, acc, part);
        m = m_new;
    }
    for (int c = 0; c < p.Dv; c++)
        o_row[c] = fp8_out<O>(l > 0.0f ? acc[c] / (sigma * l) : 0.0f);
    lse[acd_row_index<false>(p, b, h, i)] = l > 0.0f ? m + logf(l) : -INFINITY;
}

template <bool kE5m2, typename O>
static int fp8_launch(const acd_params &p, const fp8_descale &ds, const ac_fwd_args *a, ac_err *err)
{
    acd_note_path(ACD_DISPATCH_FP8, ACD_PATH_FP8_CUDA_CORES);
    const long long rows = (long long)p.B * p.Hq * p.Nq;
    const int threads = 128;
    const long long blocks = (rows + threads - 1) / threads;
    if (blocks <= 0)
        return AC_OK;
    const uint8_t *q = (const uint8_t *)a->q, *k = (const uint8_t *)a->k, *v = (const uint8_t *)a->v;
    if (p.D > 128 || p.Dv > 128)
        fp8_forward_rows<kE5m2, O, FP8_MAX_D><<<(unsigned)blocks, threads>>>(p, ds, q, k, v, (O *)a->o, a->lse);
    else
        fp8_forward_rows<kE5m2, O, 128><<<(unsigned)blocks, threads>>>(p, ds, q, k, v, (O *)a->o, a->lse);
    ACD_CHECK_LAUNCH(err, "fp8_forward_rows");
    return AC_OK;
}

static int fp8_dispatch(const acd_params &p, const fp8_descale &ds, ac_dtype t, ac_dtype out, const ac_fwd_args *a,
                        ac_err *err)
{
    const bool e5m2 = t == AC_E5M2;
    if (out == AC_BF16)
        return e5m2 ? fp8_launch<true, __nv_bfloat16>(p, ds, a, err) : fp8_launch<false, __nv_bfloat16>(p, ds, a, err);
    if (out == AC_F16)
        return e5m2 ? fp8_launch<true, __half>(p, ds, a, err) : fp8_launch<false, __half>(p, ds, a, err);
    return ac_fail(err, AC_ERR_INPUT, "cuda-flash-fp8: output dtype %s is not bf16 or f16", ac_dtype_name(out));
}

// One tensor's factors on the device.
static int fp8_stage_descale(const ac_problem *prob, ac_tensor_kind kind, const float *host, float **dev, size_t *bytes,
                             ac_err *err)
{
    *bytes = ac_descale_count(prob, kind) * sizeof(float);
    int status = acd_ws_alloc((void **)dev, *bytes, err);
    return status == AC_OK ? ac_dev_upload(*dev, host, *bytes, err) : status;
}

extern "C" int acd_flash_fp8_forward(const ac_problem *prob, ac_dtype t, const ac_fwd_args *a, int mutant, ac_err *err)
{
    if (!ac_problem_is_fp8(prob) || !prob->descale_q || !prob->descale_k || !prob->descale_v)
        return ac_fail(err, AC_ERR_INPUT, "cuda-flash-fp8: an fp8 problem with its descale factors is needed");
    if (t != AC_E4M3 && t != AC_E5M2)
        return ac_fail(err, AC_ERR_INPUT, "cuda-flash-fp8: dtype %s is not e4m3 or e5m2", ac_dtype_name(t));
    if (prob->head_dim > FP8_MAX_D || ac_head_dim_v(prob) > FP8_MAX_D) // the row's registers
        return ac_fail(err, AC_ERR_INPUT, "cuda-flash-fp8: head dim above %d", FP8_MAX_D);
    if (ac_dtype_is_fp8(prob->fp8_p) && prob->fp8_p != AC_E4M3)
        return ac_fail(err, AC_ERR_INPUT, "cuda-flash-fp8: P is rounded to e4m3, not %s", ac_dtype_name(prob->fp8_p));
    acd_params p;
    acd_staged st;
    int status = acd_stage(prob, mutant, &p, &st, err);
    if (status != AC_OK)
        return status;
    fp8_descale ds{};
    ds.rows = prob->descale_rows;
    if (ds.rows > 0) {
        ds.blocks_q = (prob->seqlen_q + ds.rows - 1) / ds.rows;
        ds.blocks_k = (prob->seqlen_k + ds.rows - 1) / ds.rows;
    }
    float *dq = nullptr, *dk = nullptr, *dv = nullptr;
    size_t bq = 0, bk = 0, bv = 0;
    status = fp8_stage_descale(prob, AC_TENSOR_Q, prob->descale_q, &dq, &bq, err);
    if (status == AC_OK)
        status = fp8_stage_descale(prob, AC_TENSOR_K, prob->descale_k, &dk, &bk, err);
    if (status == AC_OK)
        status = fp8_stage_descale(prob, AC_TENSOR_V, prob->descale_v, &dv, &bv, err);
    ds.q = dq;
    ds.k = dk;
    ds.v = dv;
    if (status == AC_OK && acd_fp8_wg_usable(p, ds, a)) {
        acd_note_path(ACD_DISPATCH_FP8, ACD_PATH_FP8_WGMMA);
        status = acd_fp8_wg_forward(p, ds, t == AC_E5M2, prob->fp8_out, a, err);
    } else if (status == AC_OK)
        status = fp8_dispatch(p, ds, t, prob->fp8_out, a, err);
    if (status == AC_OK)
        status = ac_dev_sync(err);
    acd_ws_free(dq, bq);
    acd_ws_free(dk, bk);
    acd_ws_free(dv, bv);
    acd_unstage(&st);
    return status;
}
