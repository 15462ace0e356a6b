// kernels/cuda/flash_f32.cu — the fused algorithm in true f32 on the CUDA
// cores (no TF32): forward and backward, any head dim up to 256, for f32 and
// for f16/bf16 at head dims without tensor-core tiles (d = 256; inputs widened
// exactly, outputs rounded once, P and dS kept in f32; the softmax in base e
// as cpu-flash's, softmax.cuh's acd_base_e says why).  Lane j of a warp owns
// key j of a 32-key tile; dot products read K/V rows from shared memory with a
// pitch of D + 1 floats, so a warp's 32 rows hit 32 banks.
#include "backward.cuh"
#include "mask.cuh"
#include "softmax.cuh"

namespace
{

// S' of a raw product s = (Q K^T)_ij in natural units, as cpu-flash computes it:
// s times the f32 scale (one rounding), or with the modifiers ref.h's S'.
__device__ __forceinline__ float acd_score_nat(const acd_params &p, float s, float slope, int b, int h, int i, int j,
                                               int nq, int nk, float *dt = nullptr)
{
    float t = 1.f;
    const float x = p.mods
        ? acd_score_mod(p, s, p.scale, p.softcap, slope, i + nk - nq - j, acd_bias_at(p, b, h, i, j), 1.f, &t)
        : s * p.scale;
    if (dt)
        *dt = t;
    return x;
}

// exp(x - (lse + lse_lo)) for a modified score x (natural units, f32), with the
// difference's rounding carried as acd_exp_shifted carries its own.
__device__ __forceinline__ float acd_exp_shifted_mod(float x, float lse, float lse_lo)
{
    if (!isfinite(x) || !isfinite(lse))
        return expf(x - lse);
    const float d = __fsub_rn(x, lse), bb = __fsub_rn(d, x);
    const float err = __fadd_rn(__fsub_rn(x, __fsub_rn(d, bb)), __fsub_rn(-lse, bb));
    const float corr = err - lse_lo;
    return fabsf(corr) <= 0x1p-10f ? (float)::exp((double)x - (double)lse - (double)lse_lo)
                                   : expf(d); // as acd_exp_shifted
}

constexpr int kF32Rows = 4; // query rows per warp (forward)
constexpr int kF32Warps = 4; // warps per block (forward)
constexpr int kF32MaxCols = 8; // head dim <= 32 * 8

template <typename T>
__global__ void __launch_bounds__(kF32Warps * 32)
    fwd_f32(acd_params p, const T *__restrict__ Q, const T *__restrict__ K, const T *__restrict__ V, T *__restrict__ O,
            float *__restrict__ LSE)
{
    constexpr int BM = kF32Rows * kF32Warps;
    extern __shared__ float smf[];
    const int D = p.D, DV = p.Dv, LDK = D + 1, LDV = DV + 1;
    float *sK = smf, *sV = sK + 32 * LDK, *sQ = sV + 32 * LDV; // sQ: BM x D
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int h = blockIdx.y, b = blockIdx.z, hk = h / p.group;
    const int nq = acd_nq(p, b), nk = acd_nk(p, b), i0 = blockIdx.x * BM;
    const T *Qb = Q + acd_q_base(p, b) + h * p.q_sh;
    const T *Kb = K + acd_k_base(p, b) + hk * p.k_sh, *Vb = V + acd_v_base(p, b) + hk * p.v_sh;
    const float slope = acd_alibi_slope(p, b, h);

    const acd_fwd_tiles span = acd_fwd_tile_range(p, i0, BM, 32, nq, nk);

    for (int x = tid; x < BM * D; x += blockDim.x) {
        int r = x / D, c = x % D;
        sQ[x] = i0 + r < nq ? acd_cvt<T>::to_f(Qb[(long long)(i0 + r) * p.q_ss + c]) : 0.f;
    }
    float o[kF32Rows][kF32MaxCols] = {};
    acd_softmax_row_in<acd_base_e> rows[kF32Rows]; // natural units: softmax.cuh says why

    for (int nb = span.nb_lo; nb < span.nb_hi; ++nb) {
        const int j0 = nb * 32;
        if (p.mutant != ACD_MUT_RACE)
            __syncthreads(); // the previous tile is consumed
        for (int x = tid; x < 32 * D; x += blockDim.x) {
            int r = x / D, c = x % D;
            sK[r * LDK + c] = j0 + r < nk ? acd_cvt<T>::to_f(Kb[(long long)(j0 + r) * p.k_ss + c]) : 0.f;
        }
        for (int x = tid; x < 32 * DV; x += blockDim.x) {
            int r = x / DV, c = x % DV;
            sV[r * LDV + c] = j0 + r < nk ? acd_cvt<T>::to_f(Vb[(long long)(j0 + r) * p.v_ss + c]) : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < kF32Rows; ++r) {
            const int il = warp * kF32Rows + r, i = i0 + il, j = j0 + lane;
            float s = 0.f;
            for (int c = 0; c < D; ++c)
                s = fmaf(sQ[il * D + c], sK[lane * LDK + c], s);
            s = acd_visible(p, b, h, i, j, nq, nk) ? acd_score_nat(p, s, slope, b, h, i, j, nq, nk) : -INFINITY;
            // The online softmax of acd_softmax_row_in over a warp-wide row, in
            // base e with expf for P (kept in f32), as cpu-flash.
            float mx = s, alpha;
            for (int off = 16; off > 0; off >>= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float pj = acd_base_e::exp(s - rows[r].rescale(mx, alpha));
            float sum = pj;
            for (int off = 16; off > 0; off >>= 1)
                sum += __shfl_xor_sync(0xffffffffu, sum, off);
            rows[r].add(alpha, sum);
#pragma unroll
            for (int k = 0; k < kF32MaxCols; ++k)
                o[r][k] *= alpha;
            for (int jj = 0; jj < 32; ++jj) {
                const float pb = __shfl_sync(0xffffffffu, pj, jj);
#pragma unroll
                for (int k = 0; k < kF32MaxCols; ++k)
                    if (lane + 32 * k < DV)
                        o[r][k] = fmaf(pb, sV[jj * LDV + lane + 32 * k], o[r][k]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < kF32Rows; ++r) {
        const int i = i0 + warp * kF32Rows + r;
        if (i >= acd_q_stored(p, nq))
            continue;
        const float o_factor = p.sinks ? rows[r].join_sink(p.sinks[h]) : 1.f;
        const float inv = rows[r].inv_l() * o_factor;
        T *Orow = O + acd_o_offset(p, b, h, i);
#pragma unroll
        for (int k = 0; k < kF32MaxCols; ++k)
            if (lane + 32 * k < DV)
                Orow[lane + 32 * k] = acd_cvt<T>::from_f(o[r][k] * inv);
        if (lane == 0)
            LSE[acd_row_index(p, b, h, i)] = rows[r].lse();
    }
}

// f32 backward pre-pass, one warp per query row: the stored LSE is rounded by
// up to |LSE| u / 2 and every P of its row inherits that in full, so the
// backward measures the remainder lse_lo = ln sum_j exp(s_ij scale - LSE_i) and
// takes it out of the exponent.  The scores are bwd_f32's own (the same fmaf
// chain), so its P sum to 1 and errors a row's scores share still cancel; the
// exponent and the sum are in double.  It only refines: a remainder past 2^-12
// is an LSE wrong beyond rounding, left as it is so that a bad LSE still shows
// in the gradients, and scores past 2^40 (double cannot hold the exponent to
// 2^-12 there) are left alone.  kernels/cpu_flash_bwd.c does the same.
template <typename T>
__global__ void bwd_f32_refine_lse(acd_params p, const T *__restrict__ Q, const T *__restrict__ K,
                                   const float *__restrict__ LSE, float *__restrict__ lse_lo)
{
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    int b, h, i;
    if (row >= (long long)p.B * p.Hq * p.Nq || !acd_grid_row(p, row, b, h, i))
        return;
    const int nq = acd_nq(p, b), nk = acd_nk(p, b);
    const long long at = acd_row_index(p, b, h, i);
    const float lse = i < nq ? LSE[at] : -INFINITY, slope = acd_alibi_slope(p, b, h);
    double sum = 0.0, top = 0.0;
    if (i < nq && isfinite(lse)) {
        const T *q = Q + acd_q_offset(p, b, h, i);
        const T *Kb = K + acd_k_base(p, b) + (h / p.group) * p.k_sh;
        int lo, hi;
        acd_window(p, i, nq, nk, lo, hi);
        for (int j = max(lo, 0) + lane; j < min(hi, nk); j += 32) {
            if (!acd_visible(p, b, h, i, j, nq, nk))
                continue;
            float s = 0.f;
            for (int c = 0; c < p.D; ++c)
                s = fmaf(acd_cvt<T>::to_f(q[c]), acd_cvt<T>::to_f(Kb[(long long)j * p.k_ss + c]), s);
            // bwd_f32's S' (the same f32 chain); without modifiers exactly s scale
            const double x =
                p.mods ? (double)acd_score_nat(p, s, slope, b, h, i, j, nq, nk) : (double)s * (double)p.scale;
            if (x == -INFINITY)
                continue; // a -inf bias: hidden
            sum += exp(x - (double)lse);
            top = fmax(top, fabs(x));
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
        top = fmax(top, __shfl_xor_sync(0xffffffffu, top, off));
    }
    if (lane == 0) {
        if (p.sinks && i < nq && isfinite(lse))
            sum += exp((double)p.sinks[h] - (double)lse); // the sink's share
        const double r = sum > 0.0 ? log(sum) : 0.0;
        lse_lo[at] = fabs(r) < 0x1p-12 && top < 0x1p40 ? (float)r : 0.f;
    }
}

// Backward: one warp per 32-key tile of one KV head; dK, dV rows in shared
// memory (lane j updates row j only); dQ partial sums go to the f32
// workspace with atomicAdd (acd_dq_add: tiny ones to its scaled twin).  Rows are visited one at a time over the group's heads.
template <typename T>
__global__ void __launch_bounds__(32)
    bwd_f32(acd_params p, const T *__restrict__ Q, const T *__restrict__ K, const T *__restrict__ V,
            const T *__restrict__ dO, const float *__restrict__ LSE, const float *__restrict__ Dv,
            const float *__restrict__ lse_lo, float *__restrict__ dQacc, T *__restrict__ dK, T *__restrict__ dV)
{
    extern __shared__ float smf[];
    const int D = p.D, DV = p.Dv, LDK = D + 1, LDV = DV + 1, lane = threadIdx.x;
    float *sK = smf, *sV = sK + 32 * LDK, *sdK = sV + 32 * LDV, *sdV = sdK + 32 * LDK;
    float *sq = sdV + 32 * LDV, *sdo = sq + D;
    const int hk = blockIdx.y, b = blockIdx.z, j0 = blockIdx.x * 32, j = j0 + lane;
    const int nq = acd_nq(p, b), nk = acd_nk(p, b);
    const T *Kb = K + acd_k_base(p, b) + hk * p.k_sh, *Vb = V + acd_v_base(p, b) + hk * p.v_sh;
    for (int x = lane; x < 32 * D; x += 32) {
        int r = x / D, c = x % D;
        sK[r * LDK + c] = j0 + r < nk ? acd_cvt<T>::to_f(Kb[(long long)(j0 + r) * p.k_ss + c]) : 0.f;
        sdK[r * LDK + c] = 0.f;
    }
    for (int x = lane; x < 32 * DV; x += 32) {
        int r = x / DV, c = x % DV;
        sV[r * LDV + c] = j0 + r < nk ? acd_cvt<T>::to_f(Vb[(long long)(j0 + r) * p.v_ss + c]) : 0.f;
        sdV[r * LDV + c] = 0.f;
    }
    __syncwarp();
    int i_lo, i_hi; // query rows that can see keys [j0, j0 + 31]
    acd_bwd_query_rows(p, j0, 32, nq, nk, i_lo, i_hi);
    for (int h = hk * p.group; h < (hk + 1) * p.group; ++h) {
        const T *Qb = Q + acd_q_base(p, b) + h * p.q_sh, *dOb = dO + acd_o_base(p, b) + h * p.o_sh;
        const float slope = acd_alibi_slope(p, b, h);
        for (int i = i_lo; i < i_hi; ++i) {
            for (int c = lane; c < D; c += 32)
                sq[c] = acd_cvt<T>::to_f(Qb[(long long)i * p.q_ss + c]);
            for (int c = lane; c < DV; c += 32)
                sdo[c] = acd_cvt<T>::to_f(dOb[(long long)i * p.o_ss + c]);
            __syncwarp();
            const long long row = acd_row_index(p, b, h, i);
            const float lse = LSE[row], dd = Dv[row], lse_rem = lse_lo[row];
            float s = 0.f, dp = 0.f;
            for (int c = 0; c < D; ++c)
                s = fmaf(sq[c], sK[lane * LDK + c], s);
            for (int c = 0; c < DV; ++c)
                dp = fmaf(sdo[c], sV[lane * LDV + c], dp);
            const bool vis = acd_visible(p, b, h, i, j, nq, nk) && lse != -INFINITY;
            float dt = 1.f;
            const float xm = p.mods ? acd_score_nat(p, s, slope, b, h, i, j, nq, nk, &dt) : 0.f;
            const acd_p_ds x = acd_recompute_p_ds(
                vis,
                [&] {
                    return p.mods ? acd_exp_shifted_mod(xm, lse, lse_rem) : acd_exp_shifted(s, p.scale, lse, lse_rem);
                },
                dp, dd);
            if (p.dbias_acc && vis && x.ds != 0.f)
                acd_dq_add(p.dbias_acc, p.dbias_elems, acd_bias_index(p, b, h, i, j), x.ds); // dS', before t'
            const float pr = x.p, ds = x.ds * dt;
            if (__any_sync(0xffffffffu, pr != 0.f)) {
                for (int c = 0; c < DV; ++c)
                    sdV[lane * LDV + c] = fmaf(pr, sdo[c], sdV[lane * LDV + c]);
                for (int c = 0; c < D; ++c)
                    sdK[lane * LDK + c] = fmaf(ds, sq[c], sdK[lane * LDK + c]);
                for (int c = lane; c < D; c += 32) {
                    float acc = 0.f;
                    for (int jj = 0; jj < 32; ++jj)
                        acc = fmaf(__shfl_sync(0xffffffffu, ds, jj), sK[jj * LDK + c], acc);
                    acd_dq_add(dQacc, acd_dq_elems(p), row * D + c, acc);
                }
            }
            __syncwarp();
        }
    }
    __syncwarp();
    for (int x = lane; x < 32 * D; x += 32) {
        int r = x / D, c = x % D;
        if (j0 + r >= acd_k_stored(p, nk))
            continue;
        dK[acd_k_base(p, b) + hk * p.k_sh + (long long)(j0 + r) * p.k_ss + c] =
            acd_cvt<T>::from_f(sdK[r * LDK + c] * p.scale);
    }
    for (int x = lane; x < 32 * DV; x += 32) {
        int r = x / DV, c = x % DV;
        if (j0 + r >= acd_k_stored(p, nk))
            continue;
        dV[acd_v_base(p, b) + hk * p.v_sh + (long long)(j0 + r) * p.v_ss + c] = acd_cvt<T>::from_f(sdV[r * LDV + c]);
    }
}

} // namespace

// d and d_v within the kernels' 32 x kF32MaxCols columns per lane.
static int f32_dims_ok(const acd_params &p, ac_err *err)
{
    if (p.D > 32 * kF32MaxCols || p.Dv > 32 * kF32MaxCols)
        return ac_fail(err, AC_ERR_INPUT, "cuda-flash (CUDA cores): head_dim %d, d_v %d (at most %d)", p.D, p.Dv,
                       32 * kF32MaxCols);
    return AC_OK;
}

template <typename T> int acd_fwd_f32(const acd_params &p, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    if (f32_dims_ok(p, err) != AC_OK)
        return AC_ERR_INPUT;
    constexpr int BM = kF32Rows * kF32Warps;
    // K and V (32 keys, pitches D + 1 and d_v + 1), then Q
    const size_t smem = sizeof(float) * ((size_t)32 * (p.D + 1) + (size_t)32 * (p.Dv + 1) + (size_t)BM * p.D);
    ACD_CHECK(err, cudaFuncSetAttribute(fwd_f32<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((p.Nq + BM - 1) / BM, p.Hq, p.B);
    fwd_f32<T><<<grid, kF32Warps * 32, smem, stream>>>(p, (const T *)a->q, (const T *)a->k, (const T *)a->v, (T *)a->o,
                                                       a->lse);
    ACD_CHECK_LAUNCH(err, "fwd_f32");
    return AC_OK;
}

template <typename T>
int acd_bwd_f32(const acd_params &p, const ac_bwd_args *a, const float *Dv, float *lse_lo, float *dQacc,
                cudaStream_t stream, ac_err *err)
{
    if (f32_dims_ok(p, err) != AC_OK)
        return AC_ERR_INPUT;
    const long long rows = (long long)p.B * p.Hq * p.Nq;
    bwd_f32_refine_lse<T>
        <<<(unsigned)((rows + 7) / 8), 256, 0, stream>>>(p, (const T *)a->q, (const T *)a->k, a->lse, lse_lo);
    ACD_CHECK_LAUNCH(err, "bwd_f32_refine_lse");
    // K, V, dK, dV (32 rows each, pitches D + 1 and d_v + 1), then a row of Q and of dO
    const size_t smem = sizeof(float) * ((size_t)64 * (p.D + 1) + (size_t)64 * (p.Dv + 1) + (size_t)p.D + p.Dv);
    ACD_CHECK(err, cudaFuncSetAttribute(bwd_f32<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((p.Nk + 31) / 32, p.Hkv, p.B);
    bwd_f32<T><<<grid, 32, smem, stream>>>(p, (const T *)a->q, (const T *)a->k, (const T *)a->v, (const T *)a->d_o,
                                           a->lse, Dv, lse_lo, dQacc, (T *)a->dk, (T *)a->dv);
    ACD_CHECK_LAUNCH(err, "bwd_f32");
    return AC_OK;
}

#define ACD_INSTANTIATE_F32_PATH(T) \
    template int acd_fwd_f32<T>(const acd_params &, const ac_fwd_args *, cudaStream_t, ac_err *); \
    template int acd_bwd_f32<T>(const acd_params &, const ac_bwd_args *, const float *, float *, float *, \
                                cudaStream_t, ac_err *);
ACD_INSTANTIATE_F32_PATH(float)
ACD_INSTANTIATE_F32_PATH(__half)
ACD_INSTANTIATE_F32_PATH(__nv_bfloat16)
