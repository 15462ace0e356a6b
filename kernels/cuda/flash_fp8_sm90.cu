// kernels/cuda/flash_fp8_sm90.cu — cuda-flash-fp8's forward on Hopper's fp8
// tensor cores (wgmma with e4m3/e5m2 operands, sm_90a), d = 128.  The same
// recipe as flash_fp8.cu's CUDA-core kernel (and cpu-flash-fp8): S from the fp8
// codes in f32 times scale dq dk, the row's running max and unquantised sum l in
// f32, P = 2^(S - m) 448 rounded to e4m3 satfinite, P V from the codes in f32,
// O = acc dv / (448 l); in base 2 as flash_fwd_sm90.cu, whose schedule it keeps
// (two warpgroups of 64 query rows, K/V tiles in three cp.async stages, the
// softmax of a tile running while the previous tile's P V does).
//
// fp8 wgmma reads B K-major only, and V (keys x d) is MN-major for P V.  Our
// approach: a pre-pass writes V transposed into a workspace (d x keys per
// (batch, kv head), keys padded to the tile with zeros), and within each run
// of 32 keys puts them in the order P's registers hold them.  P leaves the S
// accumulator with a thread's keys at 8n + 2t + {0, 1}, while an fp8 A operand
// wants 4t + {0..3} and 16 + 4t + {0..3} of each 32; the sum over keys does not
// care about their order, so the pre-pass permutes V's keys to match and P
// goes from the accumulator to the operand without moving (FlashAttention-3
// permutes in shared memory instead).  The pre-pass reads and writes V once:
// about 1% of the forward at N = 4k.
#include <cstdlib>
#include <cuda_fp8.h>

#include "fp8.cuh"
#include "mask.cuh"
#include "softmax.cuh"
#include "wgmma.cuh"

namespace
{

constexpr int kD = 128, kBN = 128, kStages = 3;

// ---- the pre-pass: V transposed, keys in P's register order ----

// The position of key k (0..31) of a 32-key run in P's register order: the
// A operand's byte 4t + e (and 16 + 4t + e) holds the accumulator's key
// 2t + (e & 1) + 8 (e >> 1) (and 16 + the same).
__host__ __device__ constexpr int fp8_key_of_slot(int slot)
{
    return 16 * (slot / 16) + 2 * ((slot % 16) / 4) + (slot & 1) + 8 * ((slot >> 1) & 1);
}

// Every key of a run has exactly one slot (a permutation of 0..31).
constexpr bool fp8_slots_permute_keys()
{
    unsigned seen = 0;
    for (int slot = 0; slot < 32; ++slot)
        seen |= 1u << fp8_key_of_slot(slot);
    return seen == 0xffffffffu;
}
static_assert(fp8_slots_permute_keys() && fp8_key_of_slot(7) == 11 && fp8_key_of_slot(18) == 24,
              "P's register order: slot 4t + e holds key 2t + (e & 1) + 8 (e >> 1), per 16");

// Vt[((b Hkv + hk) D + c) ld + slot] = V[b, hk, key_of(slot), c]; keys past
// the sequence are 0, so a padded tile's P (0 there) never meets NaN.  A
// thread takes 32 keys x 4 columns: 32 word loads (coalesced over the warp's
// columns), 4 x 32 bytes out.
__global__ void fp8_transpose_v(acd_params p, const uint8_t *__restrict__ V, uint8_t *__restrict__ Vt, long long ld)
{
    const int w = threadIdx.x, run = blockIdx.x * blockDim.y + threadIdx.y, hk = blockIdx.y, b = blockIdx.z;
    const int j0 = run * 32;
    if (j0 >= ld || 4 * w >= p.Dv)
        return;
    const int nk = acd_nk<false>(p, b);
    const uint8_t *Vb = V + acd_v_base<false>(p, b) + hk * p.v_sh + 4 * w;
    uint32_t word[32];
#pragma unroll
    for (int k = 0; k < 32; ++k)
        word[k] = j0 + k < nk ? *reinterpret_cast<const uint32_t *>(Vb + (long long)(j0 + k) * p.v_ss) : 0u;
    uint8_t *dst = Vt + ((long long)(b * p.Hkv + hk) * p.Dv + 4 * w) * ld + j0;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        uint32_t out[8];
        const uint32_t sel = (uint32_t)c | ((uint32_t)(4 + c) << 4); // byte c of a, byte c of b
#pragma unroll
        for (int x = 0; x < 8; ++x) {
            const int k0 = fp8_key_of_slot(4 * x); // slots 4x..4x+3: keys k0, k0 + 1, k0 + 8, k0 + 9
            const uint32_t lo = __byte_perm(word[k0], word[k0 + 1], sel),
                           hi = __byte_perm(word[k0 + 8], word[k0 + 9], sel);
            out[x] = __byte_perm(lo, hi, 0x5410);
        }
        uint4 *row = reinterpret_cast<uint4 *>(dst + (long long)c * ld);
        row[0] = make_uint4(out[0], out[1], out[2], out[3]);
        row[1] = make_uint4(out[4], out[5], out[6], out[7]);
    }
}

// ---- the fp8 products ----

#define FP8_WG_SS(A, B) \
    ACD_WG_PRED(66) "wgmma.mma_async.sync.aligned.m64n128k32.f32." A "." B " " ACD_WG_R64 ", %64, %65, p, 1, 1;\n}\n"
#define FP8_WG_RS(B) \
    ACD_WG_PRED(69) \
    "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3." B " " ACD_WG_R64 ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"

// S(64 x 128) (+)= Q(64 x 32) K^T, both codes K-major in shared memory.
template <bool kE5m2> __device__ __forceinline__ void fp8_qk(float (&acc)[16][4], uint64_t da, uint64_t db, int scale_d)
{
    float(&d)[64] = acd_wg_regs(acc);
    if constexpr (kE5m2)
        asm volatile(FP8_WG_SS("e5m2", "e5m2") : ACD_WG_D64 : "l"(da), "l"(db), "r"(scale_d));
    else
        asm volatile(FP8_WG_SS("e4m3", "e4m3") : ACD_WG_D64 : "l"(da), "l"(db), "r"(scale_d));
}

// O(64 x 128) += P(64 x 32, e4m3 in registers) V, V transposed (K-major) in shared memory.
template <bool kE5m2> __device__ __forceinline__ void fp8_pv(float (&acc)[16][4], const uint32_t (&a)[4], uint64_t db)
{
    float(&d)[64] = acd_wg_regs(acc);
    if constexpr (kE5m2)
        asm volatile(FP8_WG_RS("e5m2") : ACD_WG_D64 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
    else
        asm volatile(FP8_WG_RS("e4m3") : ACD_WG_D64 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

template <bool kE5m2> __device__ __forceinline__ void qk_issue(float (&s)[kBN / 8][4], uint64_t dq0, uint32_t sK)
{
    acd_wg_fence();
    const uint64_t dk0 = acd_wg_desc(sK, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < kD / 32; ++kk) // one 128-byte swizzle block: k steps of 32 codes are 32 bytes
        fp8_qk<kE5m2>(s, acd_wg_desc_add(dq0, kk * 32), acd_wg_desc_add(dk0, kk * 32), kk > 0);
    acd_wg_commit();
}

template <bool kE5m2>
__device__ __forceinline__ void pv_issue(float (&o)[kD / 8][4], const uint32_t (&pf)[kBN / 32][4], uint32_t sVt)
{
    const uint64_t dv0 = acd_wg_desc(sVt, 16, 1024);
    acd_wg_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 32; ++kk)
        fp8_pv<kE5m2>(o, pf[kk], acd_wg_desc_add(dv0, kk * 32));
    acd_wg_commit();
}

// ---- the softmax and P ----

__device__ __forceinline__ uint32_t fp8_pack4(float a, float b, float c, float d)
{
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
    return lo | (hi << 16);
}

// P (already times sigma) to the A operand of P V: run kk of 32 keys, rows g and g + 8.
__device__ __forceinline__ void fp8_p_to_a(uint32_t (&a)[4], const float (&x)[kBN / 8][4], int kk)
{
    const int n = 4 * kk;
    a[0] = fp8_pack4(x[n][0], x[n][1], x[n + 1][0], x[n + 1][1]);
    a[1] = fp8_pack4(x[n][2], x[n][3], x[n + 1][2], x[n + 1][3]);
    a[2] = fp8_pack4(x[n + 2][0], x[n + 2][1], x[n + 3][0], x[n + 3][1]);
    a[3] = fp8_pack4(x[n + 2][2], x[n + 2][3], x[n + 3][2], x[n + 3][3]);
}

// The online softmax of a tile in log2 units, in place: S becomes P = 2^(S - m)
// times sigma, ready for e4m3; l sums P unquantised.  alpha[r] rescales row r's O.
__device__ __forceinline__ void fp8_softmax_tile(acd_softmax_row (&rows)[2], float (&s)[kBN / 8][4], float sigma,
                                                 float (&alpha)[2])
{
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float shift = rows[r].rescale(acd_tile_row_max<kBN>(s, r), alpha[r]);
        float row_sum = 0.f;
#pragma unroll
        for (int n = 0; n < kBN / 8; ++n)
#pragma unroll
            for (int e = 2 * r; e < 2 * r + 2; ++e) {
                const float pt = acd_exp2(s[n][e] - shift); // below 2^-126 flushed: far under e4m3's 2^-9 / 448
                row_sum += pt;
                s[n][e] = pt * sigma;
            }
        rows[r].add(alpha[r], row_sum);
    }
}

// The factors of a tile's scores, log2 units: row r's scale log2 e dq (dk too
// when K has one factor per head); kKeyFactors: K's factor per key, [n][e % 2].
template <bool kKeyFactors>
__device__ __forceinline__ void fp8_scale_scores(float (&s)[kBN / 8][4], const float (&row_f)[2], const acd_params &p,
                                                 const fp8_descale &ds, int b, int hk, int j0, int t, int nk)
{
#pragma unroll
    for (int n = 0; n < kBN / 8; ++n)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            float kf = 1.f;
            if constexpr (kKeyFactors) {
                const int j = min(j0 + 8 * n + 2 * t + c, nk - 1); // past nk: hidden, any factor
                kf = ds.k[fp8_descale_at(p, ds, false, b, hk, j)];
            }
            s[n][c] *= row_f[0] * kf;
            s[n][2 + c] *= row_f[1] * kf;
        }
}

// V's factor of the tile at j0 (one per tile: block factors cover whole tiles here); the mutant squares it.
__device__ __forceinline__ float fp8_tile_v_factor(const acd_params &p, const fp8_descale &ds, int b, int hk, int j0,
                                                   int nk)
{
    const float f = ds.v[fp8_descale_at(p, ds, false, b, hk, min(j0, nk - 1))];
    return p.mutant == ACD_MUT_FP8_V_DESCALE_TWICE ? f * f : f;
}

// ---- the kernel ----

template <int NWG> struct fp8_traits {
    static constexpr int kBlockM = 64 * NWG, kThreads = 128 * NWG; // NWG warpgroups of 64 query rows
    static constexpr size_t smem_bytes() { return (size_t)(kBlockM + kStages * 2 * kBN) * kD + 1024; }
};

template <bool kE5m2, typename O, bool kBlockFactors, typename Kt>
__global__ void __launch_bounds__(Kt::kThreads, 1)
    fp8_fwd_wg(acd_params p, fp8_descale ds, const uint8_t *__restrict__ Q, const uint8_t *__restrict__ K,
               const uint8_t *__restrict__ Vt, long long vt_ld, O *__restrict__ Out, float *__restrict__ LSE)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = Kt::kBlockM, NT = Kt::kThreads;
    constexpr uint32_t kQBytes = BM * kD, kTileBytes = kBN * kD; // a K tile and a V^T tile: 16 KB each
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sQ = (acd_smem_addr(smem_raw) + 1023u) & ~1023u, sKV = sQ + kQBytes;

    const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int h = blockIdx.y, b = blockIdx.z, hk = h / p.group;
    const int nq = acd_nq<false>(p, b), nk = acd_nk<false>(p, b);
    const int i0 = (gridDim.x - 1 - blockIdx.x) * BM, iw = i0 + wg * 64 + warp * 16;
    // Codes as 2-byte pairs: acd_load_tile_sw128 copies 16-byte chunks of 2-byte elements.
    const uint16_t *Qb = reinterpret_cast<const uint16_t *>(Q + acd_q_base<false>(p, b) + h * p.q_sh);
    const uint16_t *Kb = reinterpret_cast<const uint16_t *>(K + acd_k_base<false>(p, b) + hk * p.k_sh);
    const uint16_t *Vtb = reinterpret_cast<const uint16_t *>(Vt + (long long)(b * p.Hkv + hk) * kD * vt_ld);
    const acd_fwd_tiles span = acd_fwd_tile_range(p, i0, BM, kBN, nq, nk);

    float row_f[2];
    for (int r = 0; r < 2; ++r) {
        const int i = min(iw + g + 8 * r, max(nq - 1, 0)); // padding rows: any factor, never stored
        row_f[r] = p.scale_log2 * ds.q[fp8_descale_at(p, ds, true, b, h, i)];
        if (!kBlockFactors)
            row_f[r] *= ds.k[fp8_descale_at(p, ds, false, b, hk, 0)];
    }
    const float sigma = p.mutant == ACD_MUT_FP8_P_CLAMP ? 4096.f : (float)AC_FP8_P_SIGMA;

    float o[kD / 8][4];
    acd_zero(o);
    acd_softmax_row rows[2];
    uint32_t st_prev = sKV + 4 * kTileBytes, st_cur = sKV, st_next = sKV + 2 * kTileBytes;
    if (span.nb_lo < span.nb_hi) {
        acd_load_tile_sw128<uint16_t, BM, kD / 2, NT>(sQ, Qb, p.q_ss / 2, i0, nq, tid);
        acd_load_tile_sw128<uint16_t, kBN, kD / 2, NT>(st_cur, Kb, p.k_ss / 2, span.nb_lo * kBN, nk, tid);
        acd_load_tile_sw128<uint16_t, kD, kBN / 2, NT>(st_cur + kTileBytes, Vtb + span.nb_lo * kBN / 2, vt_ld / 2, 0,
                                                       kD, tid);
        acd_cp_async_commit();
    }
    float s[kBN / 8][4];
    uint32_t pf[kBN / 32][4];
    // O is summed in units of the V factor of its last tile (v_f); a new
    // factor rescales it with the max's alpha.
    float v_f = span.nb_lo < span.nb_hi ? fp8_tile_v_factor(p, ds, b, hk, span.nb_lo * kBN, nk) : 1.f;
    const uint64_t dq0 = acd_wg_desc(sQ + wg * 64 * 128, 16, 1024);
    for (int nb = span.nb_lo; nb < span.nb_hi; ++nb) {
        const int j0 = nb * kBN;
        acd_cp_async_wait<0>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        if (nb + 1 < span.nb_hi) {
            acd_load_tile_sw128<uint16_t, kBN, kD / 2, NT>(st_next, Kb, p.k_ss / 2, (nb + 1) * kBN, nk, tid);
            acd_load_tile_sw128<uint16_t, kD, kBN / 2, NT>(st_next + kTileBytes, Vtb + (nb + 1) * kBN / 2, vt_ld / 2, 0,
                                                           kD, tid);
            acd_cp_async_commit();
        }
        qk_issue<kE5m2>(s, dq0, st_cur);
        if (nb > span.nb_lo) {
            pv_issue<kE5m2>(o, pf, st_prev + kTileBytes);
            acd_wg_wait<1>();
        } else {
            acd_wg_wait<0>();
        }
        acd_wg_hold(s);

        fp8_scale_scores<kBlockFactors>(s, row_f, p, ds, b, hk, j0, t, nk);
        if (!span.full(j0, kBN, nk))
            acd_mask_tile<kBN>(s, p, b, h, iw + g, j0, t, nq, nk);
        float alpha[2];
        fp8_softmax_tile(rows, s, sigma, alpha);
        if constexpr (kBlockFactors) { // O so far in units of this tile's V factor
            const float v_new = fp8_tile_v_factor(p, ds, b, hk, j0, nk);
            alpha[0] *= v_f / v_new, alpha[1] *= v_f / v_new;
            v_f = v_new;
        }

        acd_wg_wait<0>();
        acd_wg_hold(o);
        acd_wg_hold(pf);
        acd_rescale_rows<kD>(o, alpha);
#pragma unroll
        for (int kk = 0; kk < kBN / 32; ++kk)
            fp8_p_to_a(pf[kk], s, kk);
        const uint32_t freed = st_prev;
        st_prev = st_cur, st_cur = st_next, st_next = freed;
    }
    if (span.nb_lo < span.nb_hi) {
        pv_issue<kE5m2>(o, pf, st_prev + kTileBytes);
        acd_wg_wait<0>();
        acd_wg_hold(o);
        acd_wg_hold(pf);
    }
    const float o_factor[2] = {v_f / sigma, v_f / sigma}; // then the epilogue's 1 / l
    acd_rescale_rows<kD>(o, o_factor);
    acd_fwd_epilogue<O, kD, false, true>(p, Out, LSE, b, h, iw + g, t, nq, o, rows);
#elif defined(__CUDA_ARCH__)
    __trap(); // built without sm_90a: never launched (acd_fp8_wg_usable)
#endif
}

using fp8_tiles = fp8_traits<2>;

template <bool kE5m2, typename O, bool kBlockFactors>
int launch_fwd(const acd_params &p, const fp8_descale &ds, const ac_fwd_args *a, const uint8_t *vt, long long ld,
               ac_err *err)
{
    using Kt = fp8_tiles;
    const size_t smem = Kt::smem_bytes();
    auto kernel = fp8_fwd_wg<kE5m2, O, kBlockFactors, Kt>;
    ACD_CHECK(err, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((p.Nq + Kt::kBlockM - 1) / Kt::kBlockM, p.Hq, p.B);
    kernel<<<grid, Kt::kThreads, smem>>>(p, ds, (const uint8_t *)a->q, (const uint8_t *)a->k, vt, ld, (O *)a->o,
                                         a->lse);
    ACD_CHECK_LAUNCH(err, "fp8_fwd_wg");
    return AC_OK;
}

template <bool kE5m2, typename O>
int launch_fwd_out(const acd_params &p, const fp8_descale &ds, const ac_fwd_args *a, const uint8_t *vt, long long ld,
                   ac_err *err)
{
    return ds.rows > 0 ? launch_fwd<kE5m2, O, true>(p, ds, a, vt, ld, err)
                       : launch_fwd<kE5m2, O, false>(p, ds, a, vt, ld, err);
}

int transpose_v(const acd_params &p, const uint8_t *v, uint8_t *vt, long long ld, ac_err *err)
{
    const dim3 block(kD / 4, 256 / (kD / 4)), grid((unsigned)((ld / 32 + block.y - 1) / block.y), p.Hkv, p.B);
    fp8_transpose_v<<<grid, block>>>(p, v, vt, ld);
    ACD_CHECK_LAUNCH(err, "fp8_transpose_v");
    return AC_OK;
}

bool aligned(const void *ptr, long long stride_a, long long stride_b, long long stride_c, int bytes)
{
    return (uintptr_t)ptr % bytes == 0 && stride_a % bytes == 0 && stride_b % bytes == 0 && stride_c % bytes == 0;
}

} // namespace

bool acd_fp8_wg_usable(const acd_params &p, const fp8_descale &ds, const ac_fwd_args *a)
{
    return acd_wgmma_usable(kD, kD) && p.D == kD && p.Dv == kD && !p.thd && !p.mods && !p.sinks &&
        (ds.rows <= 0 || ds.rows % kBN == 0) && // one V factor per tile
        aligned(a->q, p.q_sb, p.q_sh, p.q_ss, 16) && aligned(a->k, p.k_sb, p.k_sh, p.k_ss, 16) && // cp.async
        aligned(a->v, p.v_sb, p.v_sh, p.v_ss, 4); // the pre-pass's word loads
}

int acd_fp8_wg_forward(const acd_params &p, const fp8_descale &ds, bool e5m2, ac_dtype out, const ac_fwd_args *a,
                       ac_err *err)
{
    const long long ld = ((long long)p.Nk + kBN - 1) / kBN * kBN;
    const size_t vt_bytes = (size_t)p.B * p.Hkv * kD * ld;
    uint8_t *vt = nullptr;
    if (vt_bytes == 0)
        return AC_OK;
    int status = acd_ws_alloc((void **)&vt, vt_bytes, err);
    if (status != AC_OK)
        return status;
    status = transpose_v(p, (const uint8_t *)a->v, vt, ld, err);
    if (status == AC_OK) {
        if (out == AC_BF16)
            status = e5m2 ? launch_fwd_out<true, __nv_bfloat16>(p, ds, a, vt, ld, err)
                          : launch_fwd_out<false, __nv_bfloat16>(p, ds, a, vt, ld, err);
        else
            status = e5m2 ? launch_fwd_out<true, __half>(p, ds, a, vt, ld, err)
                          : launch_fwd_out<false, __half>(p, ds, a, vt, ld, err);
    }
    if (status == AC_OK)
        status = ac_dev_sync(err); // the workspace is freed below
    acd_ws_free(vt, vt_bytes);
    return status;
}
