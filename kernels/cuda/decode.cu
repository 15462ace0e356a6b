// kernels/cuda/decode.cu — cuda-decode (issue 16): paged split-KV decode.
//
// A serving engine's decode step reads the whole KV cache for a few query rows,
// so the kernel is organised around streaming K and V at the memory's speed:
//   * One CTA per (sequence b, KV head, block of 16 packed rows, split s).  The
//     packed rows are the GQA group's query heads times the Nq query rows
//     (row x = i * group + g), so K and V are read once per group, not once per
//     query head.  group * Nq > 16 takes more row blocks (each reads K/V again).
//   * The split s owns keys [k0, k1) of its sequence: the batch's longest
//     sequence's 64-key units dealt ceil(units / S) per split (host: the plan's
//     split_keys), each sequence cut at those boundaries (a shorter one leaves
//     its trailing splits empty), as FlashAttention-2's split-KV forward deals
//     its key blocks and FlashInfer's plan its fixed chunks.  A split starts at
//     s * split_keys whatever the sequence's length, so the CTA reads its first
//     page ids while the length is on its way.
//   * Inside the CTA each of the 4 warps consumes its own 16-key tiles (tile n
//     goes to warp n % 4) through its own 2-stage cp.async pipeline (16-byte
//     copies of K and V rows into shared memory; no CTA barrier in the loop),
//     with its own online softmax: S = Q K^T and O += P V on the tensor cores
//     (mma.sync m16n8k16, f32 accumulate, P rounded to the dtype), Q's fragments
//     held in registers.  Key j of a paged cache is row j % P of page
//     block_table[b][j / P] (a page id fetched two tiles ahead of its copy and
//     not touched until then, so the table's latency does not stall the warp).
//   * The warps' states are merged through shared memory (rescaled to their
//     common max), then the CTA writes O and LSE directly (S = 1) or its split's
//     partial O_s (f32, normalised) with its max m_s and sum l_s to a workspace.
//   * Most tiles lie whole inside one page and inside every row's visible
//     range: their copies take one address and a step, their scores one scale
//     (no per-key visibility test), and O is rescaled only when some row's max
//     moved (the rest keep the per-row, per-key general path).
//   * The merge (S > 1): M = max_s m_s, L = sum_s l_s 2^(m_s - M),
//     O = sum_s l_s 2^(m_s - M) O_s / L, LSE = M ln 2 + ln L.  An empty split has
//     m_s = -inf, l_s = 0 and weighs 0; a row whose splits are all empty gets O = 0,
//     LSE = -inf (the contract's fully masked row) without -inf - -inf.  Where the
//     grid is one wave of clusters (S <= 8, every CTA resident as a cluster of S:
//     acd_decode_cluster_fits) the S CTAs of a row block form a thread-block cluster
//     and merge from each other's shared memory (dec_cluster_merge); elsewhere the
//     partials go to a workspace and the combine kernel merges them, a CTA per query row.
// Keys outside the CTA's range, and a paged cache's slots past the sequence's
// end, are never read (the copies zero-fill); visibility is mask.cuh's rule
// (lengths, causal/window in either alignment, the dense mask).
// This file holds the split kernel (the helpers it shares with cuda-decode-mla's,
// decode_mla.cu: key ranges, visibility, copies, the softmax step, in
// decode_rows.cuh); the combine kernel is decode_combine.cu,
// the checks, staging and the split count (the hint, clamped, or auto from
// the shape: acd_decode_splits, FlashAttention-2's wave-efficiency rule over
// the CTAs that hold keys, with no second wave of short splits) decode_host.cu.
// cuda-decode-fp8 runs the same kernels on e4m3/e5m2 (the dec_kv8 policy):
// K/V tiles copied as fp8 bytes (16 codes a copy, rows of D bytes), Q widened
// to f16 into shared memory once, K's and V's mma fragments widened exactly to
// f16 from shared memory (every fp8 code is an f16 value), P rounded to f16
// (its declared p=f16), the scores scaled by scale log2(e) dq dk and O by dv
// (factors per tensor or per (sequence, KV head): one each per CTA); split
// partials and the combine unchanged.  The fragments come from ldmatrix on the
// fp8 rows (see dec_ldmatrix_x2's comment for the order of terms it implies).
// The planted bugs (family.h's ACD_MUT_DEC_*) sit behind `d.p.mutant == ...`.
#include <climits>
#include <cmath>
#include <cooperative_groups.h>
#include <cuda_fp8.h>

#include "decode_rows.cuh"

namespace
{

// Tiles of D-dim rows of kElemBytes-byte elements (2: f16/bf16; 1: fp8 codes).
// K's and V's shared rows are packed (kPitch = D) and swizzled: chunk c of row r
// sits at chunk c ^ swz(r), so the 8 rows an ldmatrix matrix reads at one chunk
// fall in 8 distinct 16-byte bank groups.  Padded rows (16 bytes a row, the
// usual way to avoid the conflicts) made the SM split each warp's cp.async into
// more L2 requests than lines: 2.6x the requests, half of them L2 hits, and
// 4-6 points of the peak less DRAM bandwidth on every bench row (PERF.md, "the
// shared row pitch").
template <int D, int kElemBytes = 2> struct dec_traits {
    static constexpr int kVec = 16 / kElemBytes; // elements per 16-byte chunk
    static constexpr int kPitch = D; // K's and V's shared rows, packed
    static constexpr int kQPitch = D + 8; // Q's rows: 16-bit mma operands (fp8 codes widened)
    static constexpr int kChunks = D / kVec; // 16-byte chunks per row
    // Rows of 4 chunks (fp8, d = 64) share a 128-byte bank line two by two: their XOR moves every other row.
    static constexpr int kSwzDiv = kChunks >= 8 ? 1 : 8 / kChunks, kSwzMask = (kChunks >= 8 ? 8 : kChunks) - 1;
    static __device__ __forceinline__ int swz(int row) { return (row / kSwzDiv) & kSwzMask; }
    // The element offset of chunk c of row `row` in a K or V tile.
    static __device__ __forceinline__ int at(int row, int c) { return row * kPitch + (c ^ swz(row)) * kVec; }
    static constexpr int kRowsPerPass = 32 / kChunks; // rows one copy instruction of the warp covers
    static constexpr int kRowsPerLane = ACD_DEC_TILE / kRowsPerPass;
    static constexpr int kStageElems = 2 * ACD_DEC_TILE * kPitch; // K's tile, then V's
    static constexpr int kWarpElems = ACD_DEC_STAGES * kStageElems;
    static constexpr size_t kSmemBytes =
        2 * (size_t)ACD_DEC_ROWS * kQPitch + (size_t)kElemBytes * ACD_DEC_WARPS * kWarpElems;
    // The warps' f32 O tiles merge in the stages' space once the loop is done.
    static_assert(sizeof(float) * ACD_DEC_WARPS * ACD_DEC_ROWS * D <= (size_t)kElemBytes * ACD_DEC_WARPS * kWarpElems,
                  "merge area");
};

// What the split kernel reads and computes in.  cuda-decode: T throughout.
// cuda-decode-fp8: e4m3/e5m2 codes, widened exactly to f16 (every code is an
// f16 value) for the tensor cores, O in bf16 or f16.
template <typename T> struct dec_kv16 {
    using Store = T;
    using Mma = T;
    using Out = T;
    static constexpr bool kFp8 = false;
};
template <bool E5m2, typename O> struct dec_kv8 {
    using Store = uint8_t;
    using Mma = __half;
    using Out = O;
    static constexpr bool kFp8 = true, kE5m2 = E5m2;
};
template <typename KV, int D> using dec_tr = dec_traits<D, (int)sizeof(typename KV::Store)>;

// Two fp8 codes (the lower byte first) as an f16x2 register (the lower half
// first), exactly: cvt.rn.f16x2.e4m3x2 / e5m2x2 on sm_89+.
template <bool E5m2> __device__ __forceinline__ uint32_t dec_widen2(unsigned short two)
{
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, E5m2 ? __NV_E5M2 : __NV_E4M3);
    return (uint32_t)h.x | (uint32_t)h.y << 16;
}

// Whether tile j0 lies whole inside [ka, kb) and inside one page (or K/V are contiguous).
__device__ __forceinline__ bool dec_tile_whole(const acd_dec_params &d, int j0, int ka, int kb)
{
    return d.tiles_in_pages && j0 >= ka && j0 + ACD_DEC_TILE <= kb;
}

// The page ids of the lane's rows of the tile at key j0, as the table holds them
// (a column past the table's row reads none): the copies test each row's key
// against the CTA's range, so an id is read without the range (the CTA's first
// ones before its sequence's length arrives) and not used until the tile's
// copies are issued.  A tile inside one page (P a multiple of 16: tiles start
// at multiples of 16) has one id, pg[0]; the rest are neither written nor
// read.  Writing it to every row (or testing it at once) stalled the warp
// there for the table's latency, up to a DRAM round trip when the table is
// cold.  Contiguous K/V: nothing to read.
template <typename Tr>
__device__ __forceinline__ void dec_tile_pages(const acd_dec_params &d, int b, long long j0, int lane,
                                               int (&pg)[Tr::kRowsPerLane])
{
    if (!d.table)
        return;
    const int *trow = d.table + (long long)b * d.pages_per_seq;
    const long long end = (long long)d.pages_per_seq * d.page_size; // the keys the table's row can hold
    if (d.tiles_in_pages) {
        if (j0 < end)
            pg[0] = __ldg(trow + dec_page_of(d, (int)j0));
        return;
    }
#pragma unroll
    for (int r = 0; r < Tr::kRowsPerLane; ++r) {
        const long long j = j0 + lane / Tr::kChunks + r * Tr::kRowsPerPass;
        if (j < end)
            pg[r] = __ldg(trow + dec_page_of(d, (int)j));
    }
}

// A whole tile's copies: the lane's rows sit a constant step apart from one
// address.  Per-row page arithmetic (64-bit products, a division where the page
// size is not a power of two) was most of the loop's 756 instructions a tile;
// with this path and the two below the loop takes 371 (ncu, PERF.md).
template <typename T, int D>
__device__ __forceinline__ void dec_tile_issue_whole(const acd_dec_params &d, const T *K, const T *V, int b, int hk,
                                                     int j0, int lane, int page, T *sK)
{
    using Tr = dec_traits<D, (int)sizeof(T)>;
    const acd_params &p = d.p;
    const int row0 = lane / Tr::kChunks, col = (lane % Tr::kChunks) * Tr::kVec;
    long long off, step;
    if (d.table) {
        const int in_page = d.page_shift >= 0 ? j0 & (d.page_size - 1) : j0 % d.page_size;
        off = ((long long)page * d.page_size + in_page + row0) * d.slot_stride + (long long)hk * D;
        step = Tr::kRowsPerPass * d.slot_stride;
    } else { // V's strides are K's: d_v == d
        off = acd_k_base<false>(p, b) + hk * p.k_sh + (long long)(j0 + row0) * p.k_ss;
        step = Tr::kRowsPerPass * p.k_ss;
    }
    const T *k = K + off + col, *v = V + off + col;
    // sk, sv: the lane's chunk in row row0.  Row row0 + r kRowsPerPass holds it at chunk c ^ swz(r kRowsPerPass)
    // (row0 < kRowsPerPass shares no bit of the swizzle with r kRowsPerPass, so swz(row0 + r kRowsPerPass) =
    // swz(row0) ^ swz(r kRowsPerPass)): the same address r rows on, moved by a constant XOR of the chunk.
    const uint32_t sk = acd_smem_addr(sK + Tr::at(row0, lane % Tr::kChunks));
    const uint32_t sv = sk + ACD_DEC_TILE * Tr::kPitch * sizeof(T);
    constexpr uint32_t kRowBytes = Tr::kRowsPerPass * Tr::kPitch * sizeof(T);
    const int c = (lane % Tr::kChunks) ^ Tr::swz(row0);
#pragma unroll
    for (int r = 0; r < Tr::kRowsPerLane; ++r) {
        const int moved = (((c ^ Tr::swz(r * Tr::kRowsPerPass)) - c) * 16); // bytes the chunk moves at row r
        dec_copy16(sk + r * kRowBytes + moved, k + r * step, true);
        dec_copy16(sv + r * kRowBytes + moved, v + r * step, true);
    }
}

// The tile's K and V rows into the stage (16 bytes a copy; rows without a page id zero-filled).
template <typename T, int D>
__device__ __forceinline__ void dec_tile_issue(const acd_dec_params &d, const T *K, const T *V, int b, int hk, int j0,
                                               int ka, int kb, int lane,
                                               const int (&pg)[dec_traits<D, (int)sizeof(T)>::kRowsPerLane], T *sK)
{
    using Tr = dec_traits<D, (int)sizeof(T)>;
    if (dec_tile_whole(d, j0, ka, kb))
        return dec_tile_issue_whole<T, D>(d, K, V, b, hk, j0, lane, pg[0], sK);
    const acd_params &p = d.p;
    T *sV = sK + ACD_DEC_TILE * Tr::kPitch;
    const int chunk = lane % Tr::kChunks, col = chunk * Tr::kVec;
#pragma unroll
    for (int r = 0; r < Tr::kRowsPerLane; ++r) {
        const int row = lane / Tr::kChunks + r * Tr::kRowsPerPass, j = j0 + row;
        const bool ok = j >= ka && j < kb;
        long long off = 0;
        if (ok && d.table) {
            const int slot = d.page_shift >= 0 ? j & (d.page_size - 1) : j - (j / d.page_size) * d.page_size;
            const int page = d.tiles_in_pages ? pg[0] : pg[r];
            off = ((long long)page * d.page_size + slot) * d.slot_stride + (long long)hk * D;
        } else if (ok) { // V's strides are K's: d_v == d
            off = acd_k_base<false>(p, b) + hk * p.k_sh + (long long)j * p.k_ss;
        }
        dec_copy16(acd_smem_addr(sK + Tr::at(row, chunk)), ok ? K + off + col : K, ok);
        dec_copy16(acd_smem_addr(sV + Tr::at(row, chunk)), ok ? V + off + col : V, ok);
    }
}

// ---- the tile's math: scores, masking, the online softmax step, P V ----

// fp8 fragments come from ldmatrix on the fp8 rows as if they were 16-bit
// (eight 16-byte rows a matrix; one instruction for the 16 keys of a chunk of
// 16 dims), widened to f16 in registers.  ldmatrix hands a lane four
// consecutive codes where the f16 operands want two pairs, so the order of
// terms is permuted and the permutation undone where it shows:
//   * Q K^T: within each chunk of 16 dims the lane's k slots 2t, 2t+1 | 2t+8,
//     2t+9 (t = lane % 4) hold dims 4t, 4t+1 | 4t+2, 4t+3, for K's and Q's
//     fragments alike (the dot product is the same sum; dec_load_qf).
//   * P V: .trans hands a lane two dims (2g, 2g+1; g = lane / 4) of two keys
//     (2t, 2t+1); a byte permute pairs the keys of each dim, so the chunk's
//     first n8 block holds its even dims and the second its odd ones (dec_o_col).
template <bool Trans> __device__ __forceinline__ void dec_ldmatrix_x2(uint32_t (&r)[2], const void *p)
{
    if constexpr (!Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                     : "=r"(r[0]), "=r"(r[1])
                     : "r"(acd_smem_addr(p)));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                     : "=r"(r[0]), "=r"(r[1])
                     : "r"(acd_smem_addr(p)));
}

// K's B fragments (m16n8k16, row.col) for dims kk * 16..+15 of the tile's
// keys: keys 0-7 in kf[0] (k slots +0-7) and kf[1] (+8-15), keys 8-15 in kf[2], kf[3].
template <typename KV, int D>
__device__ __forceinline__ void dec_k_frag(uint32_t (&kf)[4], const typename KV::Store *sK, int kk, int lane)
{
    using Tr = dec_tr<KV, D>;
    if constexpr (!KV::kFp8) {
        acd_ldmatrix_x4(kf, sK + Tr::at((lane / 16) * 8 + lane % 8, 2 * kk + (lane / 8) % 2));
    } else { // the lane's key lane / 4 (+ 8), dims 4t..4t+3: slots 2t, 2t+1 (low half), 2t+8, 2t+9 (high)
        uint32_t r[2];
        dec_ldmatrix_x2<false>(r, sK + Tr::at(lane % 16, kk));
#pragma unroll
        for (int n = 0; n < 2; ++n) {
            kf[2 * n] = dec_widen2<KV::kE5m2>((unsigned short)(r[n] & 0xffffu));
            kf[2 * n + 1] = dec_widen2<KV::kE5m2>((unsigned short)(r[n] >> 16));
        }
    }
}

// V's B fragments for dims dn * 16..+15 of P V: the chunk's first n8 block in
// vf[0] (keys 0-7) and vf[1] (keys 8-15), the second in vf[2], vf[3] (16-bit:
// dims +0-7, +8-15; fp8: the even dims, the odd ones).
template <typename KV, int D>
__device__ __forceinline__ void dec_v_frag(uint32_t (&vf)[4], const typename KV::Store *sV, int dn, int lane)
{
    using Tr = dec_tr<KV, D>;
    if constexpr (!KV::kFp8) {
        acd_ldmatrix_x4_trans(vf, sV + Tr::at(((lane / 8) % 2) * 8 + lane % 8, 2 * dn + lane / 16));
    } else { // bytes (key 2t, dim 2g), (2t, 2g+1), (2t+1, 2g), (2t+1, 2g+1): paired per dim
        uint32_t r[2];
        dec_ldmatrix_x2<true>(r, sV + Tr::at(lane % 16, dn));
#pragma unroll
        for (int n = 0; n < 2; ++n) {
            vf[n] = dec_widen2<KV::kE5m2>((unsigned short)__byte_perm(r[n], 0u, 0x0020));
            vf[2 + n] = dec_widen2<KV::kE5m2>((unsigned short)__byte_perm(r[n], 0u, 0x0031));
        }
    }
}

// The dim of O accumulator o[nb][2 r + e] of the lane (t = lane % 4).
template <typename KV> __device__ __forceinline__ int dec_o_col(int nb, int t, int e)
{
    if constexpr (KV::kFp8)
        return 16 * (nb / 2) + 4 * t + 2 * e + nb % 2;
    return 8 * nb + 2 * t + e;
}

// Q's A fragments from the 16 rows in shared memory (16-bit; fp8: widened
// there), for fp8 in K's permuted order of dims.
template <typename KV, int D>
__device__ __forceinline__ void dec_load_qf(uint32_t (&qf)[D / 16][4], const typename KV::Mma *sQ, int lane)
{
    using Tr = dec_tr<KV, D>;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        if constexpr (!KV::kFp8) {
            acd_ldmatrix_x4(qf[kk], sQ + (lane % 16) * Tr::kQPitch + kk * 16 + (lane / 16) * 8);
        } else {
#pragma unroll
            for (int h = 0; h < 2; ++h) // rows lane / 4 and + 8; dims 4t, 4t+1 in qf[.][h], 4t+2, 4t+3 in qf[.][2 + h]
#pragma unroll
                for (int half = 0; half < 2; ++half)
                    qf[kk][2 * half + h] = *reinterpret_cast<const uint32_t *>(sQ + (lane / 4 + 8 * h) * Tr::kQPitch +
                                                                               kk * 16 + 4 * (lane % 4) + 2 * half);
        }
    }
}

// sc: the scores' factor, scale log2(e) (fp8: times Q's and K's descales).
template <typename KV, int D>
__device__ __forceinline__ void dec_tile_compute(const acd_dec_params &d, const uint32_t (&qf)[D / 16][4],
                                                 const typename KV::Store *sK, int j0, float sc, const dec_row (&rw)[2],
                                                 float (&m)[2], float (&l)[2], float (&o)[D / 8][4], int lane)
{
    using Tr = dec_tr<KV, D>;
    using M = typename KV::Mma;
    const typename KV::Store *sV = sK + ACD_DEC_TILE * Tr::kPitch;
    float s[2][4];
    acd_zero(s);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t kf[4];
        dec_k_frag<KV, D>(kf, sK, kk, lane);
        acd_tc<M>::mma(s[0], qf[kk], kf[0], kf[1]);
        acd_tc<M>::mma(s[1], qf[kk], kf[2], kf[3]);
    }
    const int t = lane % 4;
    // Most tiles are seen whole by every row of the warp (rows that do not exist
    // compute finite scores from zero Q rows and are never written): one scale.
    if (__all_sync(0xffffffffu, dec_row_sees_tile(rw[0], j0) && dec_row_sees_tile(rw[1], j0))) {
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                s[n][e] *= sc;
    } else {
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) { // scale first: a negative scale must not turn -inf into +inf
                    float &x = s[n][2 * r + e];
                    x = dec_visible(d.p, rw[r], j0 + 8 * n + 2 * t + e) ? x * sc : -INFINITY;
                }
    }
    dec_softmax_step(s, m, l, o);
    uint32_t pf[4];
    acd_frag_to_a<M>(pf, s, 0); // P rounded to the operands' type (fp8: f16, its declared p=f16)
#pragma unroll
    for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t vf[4];
        dec_v_frag<KV, D>(vf, sV, dn, lane);
        acd_tc<M>::mma(o[2 * dn], pf, vf[0], vf[1]);
        acd_tc<M>::mma(o[2 * dn + 1], pf, vf[2], vf[3]);
    }
}

// The CTA's 16 packed Q rows into shared memory (rows that do not exist
// zero-filled): 16-bit rows by cp.async; fp8 codes widened to f16 on the way
// (a plain load: Q is 16 rows, read once).
template <typename KV, int D>
__device__ __forceinline__ void dec_load_q(const acd_dec_params &d, const typename KV::Store *Q, int b, int hk, int rb,
                                           int nq, typename KV::Mma *sQ, int tid)
{
    using Tr = dec_tr<KV, D>;
    constexpr int kPer = KV::kFp8 ? 2 : 8; // elements a thread moves at a time
    for (int c = tid; c < ACD_DEC_ROWS * D / kPer; c += ACD_DEC_THREADS) {
        const int r = c / (D / kPer), col = (c % (D / kPer)) * kPer;
        int h, i;
        const bool ok = dec_packed_row(d, hk, rb * ACD_DEC_ROWS + r, nq, h, i);
        if constexpr (!KV::kFp8) {
            acd_cp_async16(sQ + r * Tr::kQPitch + col, ok ? Q + acd_q_offset<false>(d.p, b, h, i) + col : Q, ok);
        } else {
            const uint32_t w = ok ? dec_widen2<KV::kE5m2>(*reinterpret_cast<const unsigned short *>(
                                        Q + acd_q_offset<false>(d.p, b, h, i) + col))
                                  : 0u;
            *reinterpret_cast<uint32_t *>(sQ + r * Tr::kQPitch + col) = w;
        }
    }
}

// The CTA's merged rows: O (S = 1) or the split's partial (O_s, m_s, l_s):
// to the workspace, or (merged in a cluster) in place over warp 0's rows of
// sO with (m_s, l_s) in sPart.  Thread tid writes row tid / 8, D / 8 columns
// from c0; sO holds each warp's O rescaled to the rows' common max, sM and sL
// each warp's max and sum; o_scale multiplies O (fp8: V's descale, applied
// before normalising).  In place is safe: a thread reads its row's columns of
// every warp before writing them, and no other thread reads them.
template <typename T, int D>
__device__ __forceinline__ void dec_write_rows(const acd_dec_params &d, T *O, float *LSE, int b, int hk, int rb, int s,
                                               int nq, float *sO, const float (&sM)[ACD_DEC_WARPS][ACD_DEC_ROWS],
                                               const float (&sL)[ACD_DEC_WARPS][ACD_DEC_ROWS],
                                               float (&sPart)[ACD_DEC_ROWS][2], float o_scale, int tid)
{
    constexpr int PER = ACD_DEC_THREADS / ACD_DEC_ROWS, COLS = D / PER;
    const acd_params &p = d.p;
    const int row = tid / PER, c0 = (tid % PER) * COLS;
    int h, i;
    if (!dec_packed_row(d, hk, rb * ACD_DEC_ROWS + row, nq, h, i))
        return;
    float M = -INFINITY, L = 0.f;
#pragma unroll
    for (int w = 0; w < ACD_DEC_WARPS; ++w)
        M = fmaxf(M, sM[w][row]);
    if (M != -INFINITY)
#pragma unroll
        for (int w = 0; w < ACD_DEC_WARPS; ++w)
            L += sL[w][row] * exp2f(sM[w][row] - M);
    const bool empty = !(L > 0.f);
    float inv = empty ? 0.f : o_scale / L;
    float out[COLS];
#pragma unroll
    for (int c = 0; c < COLS; ++c) {
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < ACD_DEC_WARPS; ++w)
            sum += sO[(w * ACD_DEC_ROWS + row) * D + c0 + c];
        out[c] = sum;
    }
    const long long at_row = acd_row_index<false>(p, b, h, i);
    if (d.splits == 1) {
        T *orow = O + acd_o_offset(p, b, h, i) + c0;
#pragma unroll
        for (int c = 0; c < COLS; c += 2)
            acd_tc<T>::store2(orow + c, out[c] * inv, out[c + 1] * inv);
        if (c0 == 0)
            LSE[at_row] = empty ? -INFINITY : acd_lse(M, L);
        return;
    }
    if (empty && p.mutant == ACD_MUT_DEC_EMPTY_SPLIT_NAN) { // normalised as a non-empty split: 0 / 0, -inf - -inf
        inv = 0.f / L;
        M = L = M - M;
    }
    const long long at = at_row * d.splits + s;
    float *part = d.cluster ? sO + row * D : d.o_part + at * D;
    float *ml = d.cluster ? sPart[row] : d.lse_part + 2 * at;
    float4 *op = reinterpret_cast<float4 *>(part + c0);
#pragma unroll
    for (int c = 0; c < COLS; c += 4)
        op[c / 4] = make_float4(out[c] * inv, out[c + 1] * inv, out[c + 2] * inv, out[c + 3] * inv);
    if (c0 == 0) { // (m_s, l_s), not m_s + log2 l_s: the combine then rounds LSE once, as acd_lse
        ml[0] = M;
        ml[1] = L;
    }
}

// The merge of a cluster's S partials (ranks = splits), each CTA merging rows
// rank, rank + S, ... of the row block from every CTA's shared memory, with the
// combine kernel's formulas (decode_combine.cu): weights w_s = l_s 2^(m_s - M) / L
// (an empty split weighs 0 and its O_s is not read; the no-rescale mutant weighs
// the non-empty splits alike), O = sum_s w_s O_s in split order, LSE = acd_lse(M, L).
// What it replaces, the combine kernel after the split kernel, was a chain of
// latencies: the partials to DRAM, the second kernel's wait for the whole grid,
// two rounds of reads (PERF.md, "the merge in a cluster").
struct dec_merge_smem {
    float part[ACD_DEC_ROWS][2]; // this CTA's (m_s, l_s) per row
    float w[ACD_DEC_ROWS][ACD_DEC_MAX_CLUSTER]; // the weights of the rows this CTA merges
    float ml[ACD_DEC_ROWS][2]; // their (M, L)
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Row `row`'s weights w_j of the cluster's S splits into sm.w[row], its (M, L) into sm.ml[row]: lane j < S
// reads split j's (m_j, l_j) from rank j's shared memory.  Called by a whole warp.
__device__ __forceinline__ void dec_cluster_weights(const cooperative_groups::cluster_group &cluster, int S, int mutant,
                                                    int row, dec_merge_smem &sm, int lane)
{
    float2 ml = make_float2(-INFINITY, 0.f);
    if (lane < S) {
        const float *peer = cluster.map_shared_rank(sm.part[row], lane);
        ml = make_float2(peer[0], peer[1]);
    }
    const float M = acd_warp_max(ml.x);
    const float L = acd_warp_sum(M == -INFINITY ? 0.f : ml.y * exp2f(ml.x - M)); // an empty split adds 0
    const float live = acd_warp_sum(ml.x > -INFINITY ? 1.f : 0.f);
    float w = ml.y * exp2f(ml.x - M) / L;
    if (mutant == ACD_MUT_DEC_NO_RESCALE) // every non-empty split weighs alike
        w = ml.x > -INFINITY ? 1.f / live : 0.f;
    if (lane < S)
        sm.w[row][lane] = M == -INFINITY ? 0.f : w;
    if (lane == 0) {
        sm.ml[row][0] = M;
        sm.ml[row][1] = L;
    }
}
#endif

template <typename T, int D>
__device__ __forceinline__ void dec_cluster_merge(const acd_dec_params &d, T *O, float *LSE, int b, int hk, int rb,
                                                  int nq, const float *sPartO, dec_merge_smem &sm, int tid)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync(); // every rank's partial written (release / acquire over the cluster)
    const acd_params &p = d.p;
    const int S = d.splits, rank = (int)cluster.block_rank(), warp = tid / 32;
    auto live = [&](int row, int &h, int &i) { return dec_packed_row(d, hk, rb * ACD_DEC_ROWS + row, nq, h, i); };
    int h, i;
    for (int row = rank + warp * S; row < ACD_DEC_ROWS; row += ACD_DEC_WARPS * S) // warp w: rows rank + (w + 4k) S
        if (live(row, h, i))
            dec_cluster_weights(cluster, S, p.mutant, row, sm, tid % 32);
    __syncthreads();
    constexpr int kChunks = D / 4; // float4 columns a row
    const int rows_mine = (ACD_DEC_ROWS - rank + S - 1) / S;
    for (int idx = tid; idx < rows_mine * kChunks; idx += ACD_DEC_THREADS) {
        const int row = rank + (idx / kChunks) * S, c = (idx % kChunks) * 4;
        if (!live(row, h, i))
            continue;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int j = 0; j < ACD_DEC_MAX_CLUSTER; ++j) {
            const float w = j < S ? sm.w[row][j] : 0.f;
            if (w != 0.f) { // an empty split (and its O_s) is not read
                const float4 v = *reinterpret_cast<const float4 *>(cluster.map_shared_rank(sPartO + row * D + c, j));
                acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
            }
        }
        T *orow = O + acd_o_offset(p, b, h, i) + c; // a row whose splits are all empty: every w is 0, O = 0
        acd_tc<T>::store2(orow, acc.x, acc.y);
        acd_tc<T>::store2(orow + 2, acc.z, acc.w);
        if (c == 0)
            LSE[acd_row_index<false>(p, b, h, i)] =
                sm.ml[row][0] == -INFINITY ? -INFINITY : acd_lse(sm.ml[row][0], sm.ml[row][1]);
    }
    cluster.sync(); // no CTA leaves while another reads its shared memory
#else
    (void)d, (void)O, (void)LSE, (void)b, (void)hk, (void)rb, (void)nq, (void)sPartO, (void)sm, (void)tid;
    __trap(); // the host merges in a cluster only with this kernel's sm_90 code (acd_dec_split_max_clusters)
#endif
}

// The scores' factor (scale log2 e, times Q's and K's descales) and O's (V's
// descale) of the CTA's (sequence b, KV head hk): 1 without fp8.
template <typename KV>
__device__ __forceinline__ void dec_descales(const acd_dec_params &d, int b, int hk, float &sc, float &o_scale)
{
    sc = d.p.scale_log2;
    o_scale = 1.f;
    if constexpr (KV::kFp8) {
        const long long g = d.descale_head ? (long long)b * d.p.Hkv + hk : 0; // Q's factor: its KV head's (ref/fp8.c)
        sc *= d.dq[g] * d.dk[g];
        o_scale = d.dv[g];
        if (d.p.mutant == ACD_MUT_FP8_V_DESCALE_TWICE)
            o_scale *= d.dv[g];
    }
}

// CTA number cta's work: the split s of the row block rb of (sequence b, KV head hk).
template <typename KV, int D>
__device__ __forceinline__ void dec_split_cta(const acd_dec_params &d, const typename KV::Store *__restrict__ Q,
                                              const typename KV::Store *__restrict__ K,
                                              const typename KV::Store *__restrict__ V,
                                              typename KV::Out *__restrict__ O, float *__restrict__ LSE, long long cta,
                                              typename KV::Mma *sQ, float (&sM)[ACD_DEC_WARPS][ACD_DEC_ROWS],
                                              float (&sL)[ACD_DEC_WARPS][ACD_DEC_ROWS], dec_merge_smem &sMerge)
{
    using Tr = dec_tr<KV, D>;
    using T = typename KV::Store;
    const acd_params &p = d.p;
    int b, hk, rb, s;
    dec_cta_work(d, cta, b, hk, rb, s);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int nq = acd_nq<false>(p, b), nk = acd_nk<false>(p, b), n_keys = dec_key_end(d, nk);
    // The page ids of the warp's first two tiles (pg0, pg), read from where the split starts while the
    // sequence's length is on its way: the range needs the length, the split's start does not
    // (acd_dec_split_range), so the first copies wait for one round trip to DRAM, not two.  Both loads go
    // out before Q's copies, whose address arithmetic would otherwise delay them.
    const long long k_start = (long long)s * d.split_keys;
    int pg0[Tr::kRowsPerLane] = {}, pg[Tr::kRowsPerLane] = {}, pg2[Tr::kRowsPerLane] = {};
    dec_tile_pages<Tr>(d, b, k_start + warp * ACD_DEC_TILE, lane, pg0);
    dec_tile_pages<Tr>(d, b, k_start + (warp + ACD_DEC_WARPS) * ACD_DEC_TILE, lane, pg);
    dec_load_q<KV, D>(d, Q, b, hk, rb, nq, sQ, tid);
    acd_cp_async_commit();

    int k0, k1, ka, kb;
    dec_split_range(d, n_keys, s, k0, k1);
    dec_cta_keys(d, b, hk, rb, nq, nk, n_keys, k0, k1, lane, ka, kb);
    const int t0 = ka & ~(ACD_DEC_TILE - 1);
    const int tiles = kb > ka ? (kb - t0 + ACD_DEC_TILE - 1) / ACD_DEC_TILE : 0;
    const int mine = tiles > warp ? (tiles - warp + ACD_DEC_WARPS - 1) / ACD_DEC_WARPS : 0;
    T *stage = reinterpret_cast<T *>(sQ + ACD_DEC_ROWS * Tr::kQPitch) + warp * Tr::kWarpElems;
    auto key0 = [&](int it) { return t0 + (warp + it * ACD_DEC_WARPS) * ACD_DEC_TILE; };
    if (t0 != k_start && mine > 0) { // rows that see keys from later in the split only (a window): read again
        dec_tile_pages<Tr>(d, b, key0(0), lane, pg0);
        dec_tile_pages<Tr>(d, b, key0(1), lane, pg);
    }
    // Tile 0 is copied now; page ids two tiles ahead of their copies after it (pg for the next tile issued,
    // pg2 for the one after): with one tile of lead the table's DRAM latency (the L2 holds no table when
    // the cache is cold) outlasted a tile's math and held the next copies back.
    static_assert(ACD_DEC_STAGES == 2, "the prologue copies one tile and holds the next two tiles' page ids");
    if (mine > 0)
        dec_tile_issue<T, D>(d, K, V, b, hk, key0(0), ka, kb, lane, pg0, stage);
    acd_cp_async_commit();
    if (ACD_DEC_STAGES < mine)
        dec_tile_pages<Tr>(d, b, key0(ACD_DEC_STAGES), lane, pg2);
    acd_cp_async_wait<ACD_DEC_STAGES - 1>(); // Q's group, the oldest
    __syncthreads();
    uint32_t qf[D / 16][4];
    dec_load_qf<KV, D>(qf, sQ, lane);
    float sc, o_scale;
    dec_descales<KV>(d, b, hk, sc, o_scale);

    const dec_row rw[2] = {dec_row_at(d, b, hk, rb * ACD_DEC_ROWS + lane / 4, nq, nk, n_keys, k0, k1),
                           dec_row_at(d, b, hk, rb * ACD_DEC_ROWS + lane / 4 + 8, nq, nk, n_keys, k0, k1)};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, o[D / 8][4];
    acd_zero(o);
    for (int it = 0; it < mine; ++it) {
        const int next = it + ACD_DEC_STAGES - 1;
        __syncwarp(); // every lane is done reading the stage the copies below overwrite (read at it - 1)
        if (next < mine) {
            dec_tile_issue<T, D>(d, K, V, b, hk, key0(next), ka, kb, lane, pg,
                                 stage + (next % ACD_DEC_STAGES) * Tr::kStageElems);
#pragma unroll
            for (int r = 0; r < Tr::kRowsPerLane; ++r)
                pg[r] = pg2[r];
            if (next + 2 < mine) // the table's latency hidden behind two tiles' math
                dec_tile_pages<Tr>(d, b, key0(next + 2), lane, pg2);
        }
        acd_cp_async_commit();
        acd_cp_async_wait<ACD_DEC_STAGES - 1>(); // this lane's copies of tile it landed
        __syncwarp(); // and every lane's
        dec_tile_compute<KV, D>(d, qf, stage + (it % ACD_DEC_STAGES) * Tr::kStageElems, key0(it), sc, rw, m, l, o,
                                lane);
    }
    acd_cp_async_wait<0>();
    dec_allow_combine();

    // Merge the warps: each one's O rescaled to the rows' common max into the stages' space.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        if (lane % 4 == 0) {
            sM[warp][lane / 4 + 8 * r] = m[r];
            sL[warp][lane / 4 + 8 * r] = l[r];
        }
    }
    __syncthreads(); // every warp is past its last stage read; sM, sL complete
    float *sO = reinterpret_cast<float *>(sQ + ACD_DEC_ROWS * Tr::kQPitch);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = lane / 4 + 8 * r;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < ACD_DEC_WARPS; ++w)
            M = fmaxf(M, sM[w][row]);
        const float f = M == -INFINITY ? 0.f : exp2f(m[r] - M);
#pragma unroll
        for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
            for (int e = 0; e < 2; ++e)
                sO[(warp * ACD_DEC_ROWS + row) * D + dec_o_col<KV>(dn, lane % 4, e)] = o[dn][2 * r + e] * f;
    }
    __syncthreads();
    dec_write_rows<typename KV::Out, D>(d, O, LSE, b, hk, rb, s, nq, sO, sM, sL, sMerge.part, o_scale, tid);
    if (d.cluster)
        dec_cluster_merge<typename KV::Out, D>(d, O, LSE, b, hk, rb, nq, sO, sMerge, tid);
}

// Two CTAs an SM for 16-bit K/V (at d = 128 their 221 registers allow no more);
// three for fp8, whose tiles are half the bytes for the same math: 168 registers
// and 12 warps an SM hide more of it (H200, B = 8 and 32 at 16-128k, one visit:
// 7-13% faster than two; four, at 128 registers, spill and ran 2-10% slower).
template <typename KV, int D>
__global__ void __launch_bounds__(ACD_DEC_THREADS, KV::kFp8 ? 3 : 2)
    dec_split_kernel(acd_dec_params d, const typename KV::Store *__restrict__ Q,
                     const typename KV::Store *__restrict__ K, const typename KV::Store *__restrict__ V,
                     typename KV::Out *__restrict__ O, float *__restrict__ LSE)
{
    extern __shared__ __align__(16) unsigned char dec_smem[];
    __shared__ float sM[ACD_DEC_WARPS][ACD_DEC_ROWS], sL[ACD_DEC_WARPS][ACD_DEC_ROWS];
    __shared__ dec_merge_smem sMerge;
    dec_split_cta<KV, D>(d, Q, K, V, O, LSE, blockIdx.x, reinterpret_cast<typename KV::Mma *>(dec_smem), sM, sL,
                         sMerge);
}

// The split kernel's launch as clusters of `splits` CTAs (the grid a multiple: splits vary fastest); attr
// holds the cluster dimension the configuration points at.
cudaLaunchConfig_t dec_cluster_config(long long ctas, int splits, size_t smem, cudaLaunchAttribute *attr)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)ctas);
    cfg.blockDim = dim3(ACD_DEC_THREADS);
    cfg.dynamicSmemBytes = smem;
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = (unsigned)splits;
    attr->val.clusterDim.y = attr->val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

// The split kernel on stream (its shared memory allowed by acd_dec_split_ctas_per_sm).
template <typename KV, int D>
int dec_launch_split(const acd_decode_plan &plan, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    using S = typename KV::Store;
    const size_t smem = dec_tr<KV, D>::kSmemBytes;
    if (plan.split_ctas <= 0)
        return AC_OK;
    if (!plan.d.cluster) {
        dec_split_kernel<KV, D><<<(unsigned)plan.split_ctas, ACD_DEC_THREADS, smem, stream>>>(
            plan.d, (const S *)a->q, (const S *)a->k, (const S *)a->v, (typename KV::Out *)a->o, a->lse);
        ACD_CHECK_LAUNCH(err, "dec_split_kernel");
        return AC_OK;
    }
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = dec_cluster_config(plan.split_ctas, plan.d.splits, smem, &attr);
    cfg.stream = stream;
    ACD_CHECK(err,
              cudaLaunchKernelEx(&cfg, dec_split_kernel<KV, D>, plan.d, (const S *)a->q, (const S *)a->k,
                                 (const S *)a->v, (typename KV::Out *)a->o, a->lse));
    ACD_CHECK_LAUNCH(err, "dec_split_kernel (clusters)");
    return AC_OK;
}

// CTAs of the split kernel resident per SM (at d = 128: 2 for 16-bit K/V, held there by registers; 3 for fp8);
// also allows the kernel its dynamic shared memory (above the default 48 KiB).
template <typename KV, int D> int dec_ctas_per_sm(ac_err *err, int *out)
{
    const size_t smem = dec_tr<KV, D>::kSmemBytes;
    ACD_CHECK(err,
              cudaFuncSetAttribute(dec_split_kernel<KV, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    ACD_CHECK(err, cudaOccupancyMaxActiveBlocksPerMultiprocessor(out, dec_split_kernel<KV, D>, ACD_DEC_THREADS, smem));
    if (*out < 1)
        *out = 1;
    return AC_OK;
}

// Clusters of `splits` CTAs of the split kernel resident at once; 0 where its code is not sm_90's
// (JIT-compiled from the compute_80 PTX, which has no cluster merge).
template <typename KV, int D> int dec_max_clusters(int splits, int *out, ac_err *err)
{
    *out = 0;
    cudaFuncAttributes fa;
    ACD_CHECK(err, cudaFuncGetAttributes(&fa, dec_split_kernel<KV, D>));
    if (fa.ptxVersion < 90)
        return AC_OK;
    const size_t smem = dec_tr<KV, D>::kSmemBytes;
    ACD_CHECK(err,
              cudaFuncSetAttribute(dec_split_kernel<KV, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = dec_cluster_config(splits, splits, smem, &attr);
    ACD_CHECK(err, cudaOccupancyMaxActiveClusters(out, dec_split_kernel<KV, D>, &cfg));
    return AC_OK;
}

// f(kv) with the policy of dtype t (fp8: O's dtype out), a value of dec_kv16 or dec_kv8.
template <typename F> int dec_with_kv(ac_dtype t, ac_dtype out, F f)
{
    switch (t) {
    case AC_F16:
        return f(dec_kv16<__half>{});
    case AC_BF16:
        return f(dec_kv16<__nv_bfloat16>{});
    case AC_E4M3:
        return out == AC_F16 ? f(dec_kv8<false, __half>{}) : f(dec_kv8<false, __nv_bfloat16>{});
    default:
        return out == AC_F16 ? f(dec_kv8<true, __half>{}) : f(dec_kv8<true, __nv_bfloat16>{});
    }
}

} // namespace

int acd_dec_launch_split(const acd_decode_plan &plan, ac_dtype t, const ac_fwd_args *a, cudaStream_t stream,
                         ac_err *err)
{
    return dec_with_kv(t, plan.out, [&](auto kv) {
        using KV = decltype(kv);
        return plan.d.p.D == 64 ? dec_launch_split<KV, 64>(plan, a, stream, err)
                                : dec_launch_split<KV, 128>(plan, a, stream, err);
    });
}

int acd_dec_split_ctas_per_sm(ac_dtype t, ac_dtype out, int d, int *ctas, ac_err *err)
{
    return dec_with_kv(t, out, [&](auto kv) {
        using KV = decltype(kv);
        return d == 64 ? dec_ctas_per_sm<KV, 64>(err, ctas) : dec_ctas_per_sm<KV, 128>(err, ctas);
    });
}

int acd_dec_split_max_clusters(ac_dtype t, ac_dtype out, int d, int splits, int *clusters, ac_err *err)
{
    return dec_with_kv(t, out, [&](auto kv) {
        using KV = decltype(kv);
        return d == 64 ? dec_max_clusters<KV, 64>(splits, clusters, err)
                       : dec_max_clusters<KV, 128>(splits, clusters, err);
    });
}
