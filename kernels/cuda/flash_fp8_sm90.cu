// kernels/cuda/flash_fp8_sm90.cu — cuda-flash-fp8's forward on Hopper's fp8
// tensor cores (wgmma with e4m3/e5m2 operands, sm_90a), d = 64, 128, 256.  The
// same recipe as flash_fp8.cu's CUDA-core kernel (and cpu-flash-fp8): S from the
// fp8 codes in f32 times scale dq dk, the row's running max and unquantised sum
// l in f32, P = 2^(S - m) 448 rounded to e4m3 satfinite, P V from the codes in
// f32, O = acc dv / (448 l); in base 2 as flash_fwd_sm90.cu, whose schedule it
// keeps (two warpgroups of 64 query rows, K/V tiles in three cp.async stages,
// the softmax of a tile running while the previous tile's P V does).  d = 256
// takes tiles of 64 keys: O alone is 128 f32 registers a thread there.
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
//
// Shared-memory tiles are wgmma.cuh's 128-byte swizzle over the codes taken as
// 2-byte pairs.  A row shorter than 128 bytes (d = 64: Q and K rows of 64
// codes; d = 256: V^T rows of 64 keys) keeps the full 128-byte row with its
// second half unused: the same layout and descriptor, at the cost of space only.
#include <cstdlib>
#include <cstring>
#include <cuda_fp8.h>
#include <mutex>
#include <type_traits>

#include "fp8.cuh"
#include "mask.cuh"
#include "softmax.cuh"
#include "wgmma.cuh"

namespace
{

constexpr int kBM = 128, kThreads = 256; // two warpgroups of 64 query rows

// The tiles of head dim D: kBN keys per K/V tile (64 at d = 256, where O takes
// 128 registers a thread and S of 128 keys 64 more), and their bytes in shared
// memory (whole 128-byte swizzle rows, see the header); kStages K/V stages, 4
// for the ping-pong schedule (fp8_fwd_wg's kPing: V loaded two tiles ahead).
template <int D, bool kPing = false> struct fp8_shape {
    static constexpr int kBN = D == 256 ? 64 : 128, kStages = kPing ? 4 : 3;
    static constexpr uint32_t tile_bytes(int rows, int row_bytes) { return rows * 128u * ((row_bytes + 127) / 128); }
    static constexpr uint32_t kQBytes = tile_bytes(kBM, D), kKBytes = tile_bytes(kBN, D), kVBytes = tile_bytes(D, kBN),
                              kStageBytes = kKBytes + kVBytes;
    static constexpr size_t smem_bytes() { return kQBytes + kStages * kStageBytes + 1024; }
    static_assert(smem_bytes() <= 227 * 1024, "Hopper's shared memory per block");
};

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

// wgmma's f32 accumulator of 64 x 256 (128 registers), beside wgmma.cuh's lists of 32 and 64.
#define FP8_WG_D128 \
    ACD_WG_D64, ACD_WG_D8(64), ACD_WG_D8(72), ACD_WG_D8(80), ACD_WG_D8(88), ACD_WG_D8(96), ACD_WG_D8(104), \
        ACD_WG_D8(112), ACD_WG_D8(120)
#define FP8_WG_R128 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

// m64nNk32 with A and B from shared memory (SS) or A from registers (RS); R the
// accumulator's register list, then the operands' numbers and scale_d's (PR).
#define FP8_WG_SS(N, R, DA, DB, PR, A, B) \
    ACD_WG_PRED(PR) \
    "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." A "." B " " R ", %" #DA ", %" #DB ", p, 1, 1;\n}\n"
#define FP8_WG_RS(N, R, A0, A1, A2, A3, DB, PR, B) \
    ACD_WG_PRED(PR) \
    "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3." B " " R ", {%" #A0 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #DB \
    ", p, 1, 1;\n}\n"
#define FP8_WG_A "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1)

// D(64 x N) (+)= A(64 x 32) B(32 x N): fp8_mma<N>::ss, both codes K-major in
// shared memory (S = Q K^T); ::rs, A e4m3 in registers (P V, V transposed).
template <int N> struct fp8_mma;
template <> struct fp8_mma<64> {
    template <bool kE5m2>
    static __device__ __forceinline__ void ss(float (&acc)[8][4], uint64_t da, uint64_t db, int scale_d)
    {
        float(&d)[32] = acd_wg_regs(acc);
        if constexpr (kE5m2)
            asm volatile(FP8_WG_SS(64, ACD_WG_R32, 32, 33, 34, "e5m2", "e5m2")
                         : ACD_WG_D32
                         : "l"(da), "l"(db), "r"(scale_d));
        else
            asm volatile(FP8_WG_SS(64, ACD_WG_R32, 32, 33, 34, "e4m3", "e4m3")
                         : ACD_WG_D32
                         : "l"(da), "l"(db), "r"(scale_d));
    }
    template <bool kE5m2>
    static __device__ __forceinline__ void rs(float (&acc)[8][4], const uint32_t (&a)[4], uint64_t db)
    {
        float(&d)[32] = acd_wg_regs(acc);
        if constexpr (kE5m2)
            asm volatile(FP8_WG_RS(64, ACD_WG_R32, 32, 33, 34, 35, 36, 37, "e5m2") : ACD_WG_D32 : FP8_WG_A);
        else
            asm volatile(FP8_WG_RS(64, ACD_WG_R32, 32, 33, 34, 35, 36, 37, "e4m3") : ACD_WG_D32 : FP8_WG_A);
    }
};
template <> struct fp8_mma<128> {
    template <bool kE5m2>
    static __device__ __forceinline__ void ss(float (&acc)[16][4], uint64_t da, uint64_t db, int scale_d)
    {
        float(&d)[64] = acd_wg_regs(acc);
        if constexpr (kE5m2)
            asm volatile(FP8_WG_SS(128, ACD_WG_R64, 64, 65, 66, "e5m2", "e5m2")
                         : ACD_WG_D64
                         : "l"(da), "l"(db), "r"(scale_d));
        else
            asm volatile(FP8_WG_SS(128, ACD_WG_R64, 64, 65, 66, "e4m3", "e4m3")
                         : ACD_WG_D64
                         : "l"(da), "l"(db), "r"(scale_d));
    }
    template <bool kE5m2>
    static __device__ __forceinline__ void rs(float (&acc)[16][4], const uint32_t (&a)[4], uint64_t db)
    {
        float(&d)[64] = acd_wg_regs(acc);
        if constexpr (kE5m2)
            asm volatile(FP8_WG_RS(128, ACD_WG_R64, 64, 65, 66, 67, 68, 69, "e5m2") : ACD_WG_D64 : FP8_WG_A);
        else
            asm volatile(FP8_WG_RS(128, ACD_WG_R64, 64, 65, 66, 67, 68, 69, "e4m3") : ACD_WG_D64 : FP8_WG_A);
    }
};
template <> struct fp8_mma<256> { // P V at d = 256 only
    template <bool kE5m2>
    static __device__ __forceinline__ void rs(float (&acc)[32][4], const uint32_t (&a)[4], uint64_t db)
    {
        float(&d)[128] = acd_wg_regs(acc);
        if constexpr (kE5m2)
            asm volatile(FP8_WG_RS(256, FP8_WG_R128, 128, 129, 130, 131, 132, 133, "e5m2") : FP8_WG_D128 : FP8_WG_A);
        else
            asm volatile(FP8_WG_RS(256, FP8_WG_R128, 128, 129, 130, 131, 132, 133, "e4m3") : FP8_WG_D128 : FP8_WG_A);
    }
};

// The byte offset of k step kk (32 codes) in a K-major tile of ROWS rows:
// 4 steps per 128-byte swizzle column block, blocks ROWS x 128 bytes apart.
template <int ROWS> __device__ __forceinline__ uint32_t fp8_k_step(int kk)
{
    return (uint32_t)((kk / 4) * ROWS * 128 + (kk % 4) * 32);
}

// S(64 x kBN) = Q(64 x D) K^T: D / 32 k steps.  dq0 is this warpgroup's 64 rows of the Q tile.
template <int D, bool kE5m2>
__device__ __forceinline__ void qk_issue(float (&s)[fp8_shape<D>::kBN / 8][4], uint64_t dq0, uint32_t sK)
{
    constexpr int BN = fp8_shape<D>::kBN;
    acd_wg_fence();
    const uint64_t dk0 = acd_wg_desc(sK, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < D / 32; ++kk)
        fp8_mma<BN>::template ss<kE5m2>(s, acd_wg_desc_add(dq0, fp8_k_step<kBM>(kk)),
                                        acd_wg_desc_add(dk0, fp8_k_step<BN>(kk)), kk > 0);
    acd_wg_commit();
}

// O(64 x D) += P(64 x kBN) V: kBN / 32 k steps over V^T's one column block of keys.
template <int D, bool kE5m2>
__device__ __forceinline__ void pv_issue(float (&o)[D / 8][4], const uint32_t (&pf)[fp8_shape<D>::kBN / 32][4],
                                         uint32_t sVt)
{
    const uint64_t dv0 = acd_wg_desc(sVt, 16, 1024);
    acd_wg_fence();
#pragma unroll
    for (int kk = 0; kk < fp8_shape<D>::kBN / 32; ++kk)
        fp8_mma<D>::template rs<kE5m2>(o, pf[kk], acd_wg_desc_add(dv0, kk * 32));
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
template <int BN> __device__ __forceinline__ void fp8_p_to_a(uint32_t (&a)[4], const float (&x)[BN / 8][4], int kk)
{
    const int n = 4 * kk;
    a[0] = fp8_pack4(x[n][0], x[n][1], x[n + 1][0], x[n + 1][1]);
    a[1] = fp8_pack4(x[n][2], x[n][3], x[n + 1][2], x[n + 1][3]);
    a[2] = fp8_pack4(x[n + 2][0], x[n + 2][1], x[n + 3][0], x[n + 3][1]);
    a[3] = fp8_pack4(x[n + 2][2], x[n + 2][3], x[n + 3][2], x[n + 3][3]);
}

// The factor of a tile's raw scores per row (log2 units): row_f (scale log2 e
// dq, times dk when K has one factor per head), times K's block factor with
// kBlockFactors (block factors cover whole tiles: acd_fp8_wg_usable).
template <bool kBlockFactors>
__device__ __forceinline__ void fp8_tile_factors(float (&f)[2], const float (&row_f)[2], const acd_params &p,
                                                 const fp8_descale &ds, int b, int hk, int j0, int nk)
{
    const float kf = kBlockFactors ? ds.k[fp8_descale_at(p, ds, false, b, hk, min(j0, nk - 1))] : 1.f;
    f[0] = row_f[0] * kf, f[1] = row_f[1] * kf;
}

// The online softmax of a tile of raw scores (the Q K^T sums of the codes), in
// place: S becomes P = 2^(S f - m) sigma, ready for e4m3; l sums P unscaled;
// alpha[r] rescales row r's O.  With every key of a row under one factor
// f > 0, the row's max is taken on the raw scores, and the factor and the max
// go into one FFMA per score, 2^(s f - m), where scaling and subtracting took
// two.  The FFMA uses the exact product s f while m is the rounded one, so the
// row's largest score comes out as 2^delta with |delta| up to half an ulp of
// m: harmless below kFp8FusedMax, 2^(+-1e25) (P = inf or 0, LSE = +-inf: the
// huge distribution found it) above.  A warp with a factor <= 0 (a negative
// scale or descale; or NaN) or a score past kFp8FusedMax scales first and takes
// f = 1: the max of raw scores is the max of S only for f > 0, and masking to
// -inf before scaling needs f > 0.  sigma stays a multiply: folded into the
// exponent, 2^(s f + log2 sigma - m), it rounded tiny scores to the ulp of
// log2 448 = 8.8 and put MUFU.EX2's error at 8.8 into every P, and LSE read
// 1.7-2x the naive baseline's mean error on the tiny distribution (9 of the
// H200 campaign's 10 000 cases; README "FP8").
constexpr float kFp8FusedMax = 16384.f; // 2^14: delta <= 2^-11 in the exponent, P's error 2^-11.5 relative

template <int BN> __device__ __forceinline__ void fp8_scale_scores(float (&s)[BN / 8][4], float (&f)[2])
{
#pragma unroll
    for (int n = 0; n < BN / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            s[n][e] *= f[e / 2];
    f[0] = f[1] = 1.f;
}

// The fused FFMA's exponent error is at most half an ulp of the row's max: false where that is large.
__device__ __forceinline__ bool fp8_fused_ok(float raw_max, float f)
{
    return raw_max == -INFINITY || fabsf(raw_max * f) < kFp8FusedMax;
}

template <int BN>
__device__ __forceinline__ void fp8_softmax_tile(acd_softmax_row (&rows)[2], float (&s)[BN / 8][4], float (&f)[2],
                                                 float sigma, float (&alpha)[2], const acd_params &p, int b, int h,
                                                 int row, int j0, int t, int nq, int nk, bool full)
{
    if (!__all_sync(0xffffffffu, f[0] > 0.f && f[1] > 0.f))
        fp8_scale_scores<BN>(s, f);
    if (!full)
        acd_mask_tile<BN>(s, p, b, h, row, j0, t, nq, nk);
    float mx[2] = {acd_tile_row_max<BN>(s, 0), acd_tile_row_max<BN>(s, 1)};
    if (!__all_sync(0xffffffffu, fp8_fused_ok(mx[0], f[0]) && fp8_fused_ok(mx[1], f[1]))) {
        mx[0] *= f[0], mx[1] *= f[1]; // f > 0 here: the max of the rounded products
        fp8_scale_scores<BN>(s, f);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float shift = rows[r].rescale(mx[r] * f[r], alpha[r]);
        float row_sum = 0.f;
#pragma unroll
        for (int n = 0; n < BN / 8; ++n)
#pragma unroll
            for (int e = 2 * r; e < 2 * r + 2; ++e) {
                const float pt =
                    acd_exp2(fmaf(s[n][e], f[r], -shift)); // below 2^-126 flushed: far under e4m3's 2^-9 / 448
                row_sum += pt;
                s[n][e] = pt * sigma;
            }
        rows[r].add(alpha[r], row_sum);
    }
}

// V's factor of the tile at j0 (one per tile: block factors cover whole tiles here); the mutant squares it.
__device__ __forceinline__ float fp8_tile_v_factor(const acd_params &p, const fp8_descale &ds, int b, int hk, int j0,
                                                   int nk)
{
    const float f = ds.v[fp8_descale_at(p, ds, false, b, hk, min(j0, nk - 1))];
    return p.mutant == ACD_MUT_FP8_V_DESCALE_TWICE ? f * f : f;
}

// O's rows times alpha, skipped where the warp's alphas are all 1 (the running
// max unchanged, most tiles after the first few): D / 2 FMULs a thread a tile.
template <int D> __device__ __forceinline__ void fp8_rescale_rows(float (&o)[D / 8][4], const float (&alpha)[2])
{
    if (!__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f))
        acd_rescale_rows<D>(o, alpha);
}

// Named barriers over both warpgroups (0 is __syncthreads), for the ping-pong
// schedule (kPing): FlashAttention-3's without its producer warp, see fp8_fwd_wg.
enum { kBarTurn0 = 1, kBarTurn1 = 2, kBarTile = 3 };
template <int kId> __device__ __forceinline__ void fp8_bar_sync()
{
    asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}
template <int kId> __device__ __forceinline__ void fp8_bar_arrive()
{
    asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

// This thread's cp.async copies landed and ordered before the tensor cores' reads of them.
__device__ __forceinline__ void fp8_copies_done()
{
    acd_cp_async_wait<0>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- the kernel ----

// The ping-pong schedule (kPing): warpgroup 0 copies the K tiles, 1 the V^T
// tiles (the same bytes), each in its own cp.async groups; tile m sits in stage
// m % 4.  The products alternate, 0's of tile n, then 1's of n, then 0's of
// n + 1 (barriers kBarTurn0/1), so one warpgroup's softmax runs while the
// other's products do (the softmax's MUFU.EX2s about match the fp8 MMAs).
// Barrier kBarTile, once a tile: 1 arrives right after issuing its products of
// n - 1, once its V^T of n has landed, 0 waits for it at the top of n, once its
// K of n has landed; then 0 copies K of n + 1 and 1 (later) V^T of n + 2, into
// the stage of n - 3 and n - 2, which both warpgroups have finished with.
// Every barrier is met as often by either side (the counts in the comments).
template <int D, bool kE5m2, typename O, bool kBlockFactors, bool kPing>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_fwd_wg(acd_params p, fp8_descale ds, const uint8_t *__restrict__ Q, const uint8_t *__restrict__ K,
               const uint8_t *__restrict__ Vt, long long vt_ld, O *__restrict__ Out, float *__restrict__ LSE)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Sh = fp8_shape<D, kPing>;
    constexpr int BM = kBM, NT = kThreads, BN = Sh::kBN;
    constexpr uint32_t kVOff = Sh::kKBytes; // a stage: the K tile, then the V^T tile
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sQ = (acd_smem_addr(smem_raw) + 1023u) & ~1023u, sKV = sQ + Sh::kQBytes;

    const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int h = blockIdx.y, b = blockIdx.z, hk = h / p.group;
    const int nq = acd_nq<false>(p, b), nk = acd_nk<false>(p, b);
    const int i0 = (gridDim.x - 1 - blockIdx.x) * BM, iw = i0 + wg * 64 + warp * 16;
    // Codes as 2-byte pairs: acd_load_tile_sw128 copies 16-byte chunks of 2-byte elements.
    const uint16_t *Qb = reinterpret_cast<const uint16_t *>(Q + acd_q_base<false>(p, b) + h * p.q_sh);
    const uint16_t *Kb = reinterpret_cast<const uint16_t *>(K + acd_k_base<false>(p, b) + hk * p.k_sh);
    const uint16_t *Vtb = reinterpret_cast<const uint16_t *>(Vt + (long long)(b * p.Hkv + hk) * D * vt_ld);
    const acd_fwd_tiles span = acd_fwd_tile_range(p, i0, BM, BN, nq, nk);
    const int lo = span.nb_lo, hi = span.nb_hi;
    auto stage = [&](int m) { return sKV + (uint32_t)(m % Sh::kStages) * Sh::kStageBytes; };
    // K's and V^T's tile m, by all threads (NC = NT) or by one warpgroup (NC = 128, c = tid % 128)
    auto load_k = [&](int m, auto nc, int c) {
        acd_load_tile_sw128<uint16_t, BN, D / 2, decltype(nc)::value>(stage(m), Kb, p.k_ss / 2, m * BN, nk, c);
    };
    auto load_v = [&](int m, auto nc, int c) {
        acd_load_tile_sw128<uint16_t, D, BN / 2, decltype(nc)::value>(stage(m) + kVOff, Vtb + m * BN / 2, vt_ld / 2, 0,
                                                                      D, c);
    };
    using all_threads = std::integral_constant<int, NT>;
    using one_wg = std::integral_constant<int, 128>;

    float row_f[2];
    for (int r = 0; r < 2; ++r) {
        const int i = min(iw + g + 8 * r, max(nq - 1, 0)); // padding rows: any factor, never stored
        row_f[r] = p.scale_log2 * ds.q[fp8_descale_at(p, ds, true, b, h, i)];
        if (!kBlockFactors)
            row_f[r] *= ds.k[fp8_descale_at(p, ds, false, b, hk, 0)];
    }
    const float sigma = p.mutant == ACD_MUT_FP8_P_CLAMP ? 4096.f : (float)AC_FP8_P_SIGMA;

    float o[D / 8][4];
    acd_zero(o);
    acd_softmax_row rows[2];
    if (lo < hi) {
        acd_load_tile_sw128<uint16_t, BM, D / 2, NT>(sQ, Qb, p.q_ss / 2, i0, nq, tid);
        if constexpr (kPing) {
            if (wg == 0)
                load_k(lo, one_wg{}, tid % 128);
            else
                load_v(lo, one_wg{}, tid % 128);
        } else {
            load_k(lo, all_threads{}, tid);
            load_v(lo, all_threads{}, tid);
        }
        acd_cp_async_commit();
        if (kPing && wg == 1) { // kBarTile: 1 of 1 + (hi - lo - 1) arrivals
            fp8_copies_done();
            fp8_bar_arrive<kBarTile>();
            if (lo + 1 < hi) {
                load_v(lo + 1, one_wg{}, tid % 128);
                acd_cp_async_commit();
            }
        }
    }
    float s[BN / 8][4];
    uint32_t pf[BN / 32][4];
    // O is summed in units of the V factor of its last tile (v_f); a new
    // factor rescales it with the max's alpha.
    float v_f = lo < hi ? fp8_tile_v_factor(p, ds, b, hk, lo * BN, nk) : 1.f;
    const uint64_t dq0 = acd_wg_desc(sQ + wg * 64 * 128, 16, 1024);
    for (int nb = lo; nb < hi; ++nb) {
        const int j0 = nb * BN;
        if constexpr (kPing) {
            if (wg == 0) {
                fp8_copies_done();
                fp8_bar_sync<kBarTile>(); // hi - lo
                if (nb + 1 < hi) {
                    load_k(nb + 1, one_wg{}, tid % 128);
                    acd_cp_async_commit();
                }
                if (nb > lo)
                    fp8_bar_sync<kBarTurn0>(); // hi - lo - 1
            } else {
                fp8_bar_sync<kBarTurn1>(); // hi - lo
            }
        } else {
            fp8_copies_done();
            __syncthreads();
            if (nb + 1 < hi) {
                load_k(nb + 1, all_threads{}, tid);
                load_v(nb + 1, all_threads{}, tid);
                acd_cp_async_commit();
            }
        }
        qk_issue<D, kE5m2>(s, dq0, stage(nb));
        if (nb > lo) {
            pv_issue<D, kE5m2>(o, pf, stage(nb - 1) + kVOff);
            if (kPing && wg == 0)
                fp8_bar_arrive<kBarTurn1>(); // hi - lo
            if (kPing && wg == 1 && nb + 1 < hi) {
                fp8_bar_arrive<kBarTurn0>(); // hi - lo - 1
                fp8_copies_done();
                fp8_bar_arrive<kBarTile>(); // hi - lo - 1
                if (nb + 2 < hi) {
                    load_v(nb + 2, one_wg{}, tid % 128);
                    acd_cp_async_commit();
                }
            }
            acd_wg_wait<1>();
        } else {
            if (kPing && wg == 0)
                fp8_bar_arrive<kBarTurn1>();
            if (kPing && wg == 1 && nb + 1 < hi) {
                fp8_bar_arrive<kBarTurn0>();
                fp8_copies_done();
                fp8_bar_arrive<kBarTile>();
                if (nb + 2 < hi) {
                    load_v(nb + 2, one_wg{}, tid % 128);
                    acd_cp_async_commit();
                }
            }
            acd_wg_wait<0>();
        }
        acd_wg_hold(s);

        float f[2], alpha[2];
        fp8_tile_factors<kBlockFactors>(f, row_f, p, ds, b, hk, j0, nk);
        fp8_softmax_tile<BN>(rows, s, f, sigma, alpha, p, b, h, iw + g, j0, t, nq, nk, span.full(j0, BN, nk));
        if constexpr (kBlockFactors) { // O so far in units of this tile's V factor
            const float v_new = fp8_tile_v_factor(p, ds, b, hk, j0, nk);
            alpha[0] *= v_f / v_new, alpha[1] *= v_f / v_new;
            v_f = v_new;
        }

        acd_wg_wait<0>();
        acd_wg_hold(o);
        acd_wg_hold(pf);
        fp8_rescale_rows<D>(o, alpha);
#pragma unroll
        for (int kk = 0; kk < BN / 32; ++kk)
            fp8_p_to_a<BN>(pf[kk], s, kk);
    }
    if (lo < hi) {
        pv_issue<D, kE5m2>(o, pf, stage(hi - 1) + kVOff);
        acd_wg_wait<0>();
        acd_wg_hold(o);
        acd_wg_hold(pf);
    }
    // O summed P sigma (l summed P): O times V's factor / sigma, then the epilogue's 1 / l.
    const float o_factor[2] = {v_f / sigma, v_f / sigma};
    acd_rescale_rows<D>(o, o_factor);
    acd_fwd_epilogue<O, D, false, true>(p, Out, LSE, b, h, iw + g, t, nq, o, rows);
#elif defined(__CUDA_ARCH__)
    __trap(); // built without sm_90a: never launched (acd_fp8_wg_usable)
#endif
}

// The schedule: the ping-pong (kPing, the default: 1.1-1.2x the lockstep
// one's TFLOP/s at d = 128 on the H200, README "FP8"), or with ACD_FP8_SCHED=0 the
// lockstep one, both warpgroups issuing their products at once between
// __syncthreads (three stages), kept to measure against.
bool fp8_ping_pong()
{
    static int ping = -1;
    if (ping < 0) {
        const char *e = getenv("ACD_FP8_SCHED");
        ping = !(e && strcmp(e, "0") == 0);
    }
    return ping == 1;
}

template <int D, bool kE5m2, typename O, bool kBlockFactors, bool kPing>
int launch_fwd_sched(const acd_params &p, const fp8_descale &ds, const ac_fwd_args *a, const uint8_t *vt, long long ld,
                     ac_err *err)
{
    const size_t smem = fp8_shape<D, kPing>::smem_bytes();
    auto kernel = fp8_fwd_wg<D, kE5m2, O, kBlockFactors, kPing>;
    ACD_CHECK(err, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((p.Nq + kBM - 1) / kBM, p.Hq, p.B);
    kernel<<<grid, kThreads, smem>>>(p, ds, (const uint8_t *)a->q, (const uint8_t *)a->k, vt, ld, (O *)a->o, a->lse);
    ACD_CHECK_LAUNCH(err, "fp8_fwd_wg");
    return AC_OK;
}

template <int D, bool kE5m2, typename O, bool kBlockFactors>
int launch_fwd(const acd_params &p, const fp8_descale &ds, const ac_fwd_args *a, const uint8_t *vt, long long ld,
               ac_err *err)
{
    return fp8_ping_pong() ? launch_fwd_sched<D, kE5m2, O, kBlockFactors, true>(p, ds, a, vt, ld, err)
                           : launch_fwd_sched<D, kE5m2, O, kBlockFactors, false>(p, ds, a, vt, ld, err);
}

template <int D, bool kE5m2, typename O>
int launch_fwd_out(const acd_params &p, const fp8_descale &ds, const ac_fwd_args *a, const uint8_t *vt, long long ld,
                   ac_err *err)
{
    return ds.rows > 0 ? launch_fwd<D, kE5m2, O, true>(p, ds, a, vt, ld, err)
                       : launch_fwd<D, kE5m2, O, false>(p, ds, a, vt, ld, err);
}

template <int D>
int launch_fwd_d(const acd_params &p, const fp8_descale &ds, bool e5m2, ac_dtype out, const ac_fwd_args *a,
                 const uint8_t *vt, long long ld, ac_err *err)
{
    if (out == AC_BF16)
        return e5m2 ? launch_fwd_out<D, true, __nv_bfloat16>(p, ds, a, vt, ld, err)
                    : launch_fwd_out<D, false, __nv_bfloat16>(p, ds, a, vt, ld, err);
    return e5m2 ? launch_fwd_out<D, true, __half>(p, ds, a, vt, ld, err)
                : launch_fwd_out<D, false, __half>(p, ds, a, vt, ld, err);
}

// A warp per 4 columns of d x 32 keys: D / 4 threads across, 256 a block.
int transpose_v(const acd_params &p, const uint8_t *v, uint8_t *vt, long long ld, ac_err *err)
{
    const dim3 block(p.Dv / 4, 256 / (p.Dv / 4)), grid((unsigned)((ld / 32 + block.y - 1) / block.y), p.Hkv, p.B);
    fp8_transpose_v<<<grid, block>>>(p, v, vt, ld);
    ACD_CHECK_LAUNCH(err, "fp8_transpose_v");
    return AC_OK;
}

bool aligned(const void *ptr, long long stride_a, long long stride_b, long long stride_c, int bytes)
{
    return (uintptr_t)ptr % bytes == 0 && stride_a % bytes == 0 && stride_b % bytes == 0 && stride_c % bytes == 0;
}

int fp8_block_keys(int d) { return d == 256 ? fp8_shape<256>::kBN : fp8_shape<128>::kBN; }

// V^T's workspace, kept between calls up to kVtKeepBytes: a cudaMalloc and a
// cudaFree of it (the free synchronises) per call cost several percent of the
// whole forward at N = 4k, where PyTorch's caching allocator would hand
// FlashAttention-3 its buffers for free.  Larger ones are allocated per call.
// The lock serialises callers: the entry point syncs before it returns.
constexpr size_t kVtKeepBytes = (size_t)256 << 20;
struct fp8_vt_workspace {
    std::mutex lock;
    uint8_t *buf = nullptr;
    size_t bytes = 0;
};
fp8_vt_workspace &vt_kept()
{
    static fp8_vt_workspace w;
    return w;
}

int vt_run(const acd_params &p, const fp8_descale &ds, bool e5m2, ac_dtype out, const ac_fwd_args *a, uint8_t *vt,
           long long ld, ac_err *err)
{
    int status = transpose_v(p, (const uint8_t *)a->v, vt, ld, err);
    if (status == AC_OK)
        status = p.D == 64 ? launch_fwd_d<64>(p, ds, e5m2, out, a, vt, ld, err)
            : p.D == 128   ? launch_fwd_d<128>(p, ds, e5m2, out, a, vt, ld, err)
                           : launch_fwd_d<256>(p, ds, e5m2, out, a, vt, ld, err);
    return status == AC_OK ? ac_dev_sync(err) : status; // the workspace is reused or freed next
}

} // namespace

// acd_wgmma_usable(128, 128): Hopper with wgmma on (not ACD_NO_WGMMA); its own
// tiles are bf16/f16 ones and leave d = 256 out.
bool acd_fp8_wg_usable(const acd_params &p, const fp8_descale &ds, const ac_fwd_args *a)
{
    return (p.D == 64 || p.D == 128 || p.D == 256) && p.Dv == p.D && acd_wgmma_usable(128, 128) && !p.thd && !p.mods &&
        !p.sinks && (ds.rows <= 0 || ds.rows % fp8_block_keys(p.D) == 0) && // one K, V factor per tile
        aligned(a->q, p.q_sb, p.q_sh, p.q_ss, 16) && aligned(a->k, p.k_sb, p.k_sh, p.k_ss, 16) && // cp.async
        aligned(a->v, p.v_sb, p.v_sh, p.v_ss, 4); // the pre-pass's word loads
}

int acd_fp8_wg_forward(const acd_params &p, const fp8_descale &ds, bool e5m2, ac_dtype out, const ac_fwd_args *a,
                       ac_err *err)
{
    const int bn = fp8_block_keys(p.D);
    const long long ld = ((long long)p.Nk + bn - 1) / bn * bn;
    const size_t vt_bytes = (size_t)p.B * p.Hkv * p.D * ld;
    if (vt_bytes == 0)
        return AC_OK;
    uint8_t *vt = nullptr;
    if (vt_bytes > kVtKeepBytes) {
        int status = acd_ws_alloc((void **)&vt, vt_bytes, err);
        if (status == AC_OK)
            status = vt_run(p, ds, e5m2, out, a, vt, ld, err);
        acd_ws_free(vt, vt_bytes);
        return status;
    }
    fp8_vt_workspace &kept = vt_kept();
    std::lock_guard<std::mutex> hold(kept.lock);
    if (kept.bytes < vt_bytes) { // grow-only up to kVtKeepBytes
        acd_ws_free(kept.buf, kept.bytes);
        kept.buf = nullptr, kept.bytes = 0;
        const int status = acd_ws_alloc((void **)&kept.buf, vt_bytes, err);
        if (status != AC_OK)
            return status;
        kept.bytes = vt_bytes;
    }
    return vt_run(p, ds, e5m2, out, a, kept.buf, ld, err);
}
