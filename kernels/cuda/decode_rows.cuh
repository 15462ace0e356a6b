// kernels/cuda/decode_rows.cuh — what cuda-decode's split kernels (decode.cu,
// decode_mla.cu) share on the device: the split's and each packed row's key
// ranges, visibility, page arithmetic, the copies, the online-softmax step and
// the programmatic launch of the combine kernel.
#pragma once
#include <climits>

#include "decode.cuh"
#include "mask.cuh"
#include "softmax.cuh"

namespace
{

// ---- keys: the split's range, each row's visible range, where a key lives ----

// Keys the kernel treats as the sequence's (acd_dec_key_end).
__device__ __forceinline__ int dec_key_end(const acd_dec_params &d, int nk)
{
    return acd_dec_key_end(nk, d.table ? d.page_size : 0, d.p.mutant);
}

__device__ __forceinline__ void dec_split_range(const acd_dec_params &d, int n_keys, int s, int &k0, int &k1)
{
    acd_dec_split_range(n_keys, d.split_keys, d.splits, s, d.p.mutant, k0, k1);
}

// CTA number cta's work: the split s of the row block rb of (sequence b, KV head hk).  Row blocks vary
// fastest (they read the same K/V: L2 hits), then splits, KV heads, sequences; merged in a cluster, the
// splits vary fastest (a cluster is S consecutive CTAs, split s its rank), then row blocks.
__device__ __forceinline__ void dec_cta_work(const acd_dec_params &d, long long cta, int &b, int &hk, int &rb, int &s)
{
    if (d.cluster) {
        s = (int)(cta % d.splits);
        cta /= d.splits;
        rb = (int)(cta % d.row_blocks);
        cta /= d.row_blocks;
    } else {
        rb = (int)(cta % d.row_blocks);
        cta /= d.row_blocks;
        s = (int)(cta % d.splits);
        cta /= d.splits;
    }
    hk = (int)(cta % d.p.Hkv);
    b = (int)(cta / d.p.Hkv);
}

// Packed row x (= i * group + g) of KV head hk: its query row i and query head h, and whether it
// exists (x inside the group's rows, i inside the sequence's query rows).
__device__ __forceinline__ bool dec_packed_row(const acd_dec_params &d, int hk, int x, int nq, int &h, int &i)
{
    i = x / d.p.group;
    h = hk * d.p.group + x % d.p.group;
    return x < d.rows && i < nq;
}

// A packed row of the CTA: its query head and row, and the keys it sees inside
// the split, [lo, hi) (empty for rows past the sequence's or the block's end).
struct dec_row {
    int h, i, lo, hi;
    const unsigned char *mask; // its dense-mask row, or null
    bool live;
};

__device__ __forceinline__ dec_row dec_row_at(const acd_dec_params &d, int b, int hk, int x, int nq, int nk, int n_keys,
                                              int k0, int k1)
{
    const acd_params &p = d.p;
    dec_row r{};
    r.live = dec_packed_row(d, hk, x, nq, r.h, r.i);
    if (!r.live)
        return r;
    int lo, hi;
    acd_row_keys(p, r.i, nq, nk, lo, hi);
    if (hi == nk && n_keys > nk) // the last-page mutant: the unused slots are not masked
        hi = n_keys;
    r.lo = max(lo, k0);
    r.hi = min(hi, k1);
    r.mask = acd_mask_row(p, b, r.h, r.i);
    return r;
}

__device__ __forceinline__ bool dec_visible(const acd_params &p, const dec_row &r, int j)
{
    return j >= r.lo && j < r.hi && (!r.mask || (j < p.Nk && r.mask[j] != 0));
}

// Whether row r sees every key of the kTile-key tile at j0 (no dense mask, inside its range), or does not exist.
template <int kTile = ACD_DEC_TILE> __device__ __forceinline__ bool dec_row_sees_tile(const dec_row &r, int j0)
{
    return !r.live || (!r.mask && j0 >= r.lo && j0 + kTile <= r.hi);
}

__device__ __forceinline__ int dec_page_of(const acd_dec_params &d, int j)
{
    return d.page_shift >= 0 ? j >> d.page_shift : j / d.page_size;
}

// A 16-byte chunk of a K/V row into shared memory, the L2 told to fetch the
// chunk's whole 128-byte line from DRAM at once (cp.async's prefetch hint, as
// FlashAttention-2's copies): +1.5-2.5% of peak on every shape of bench
// --decode on the H200, where a 256-byte hint gained half that (PERF.md).
__device__ __forceinline__ void dec_copy16(uint32_t dst, const void *src, bool ok)
{
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0));
}

// One row's online-softmax step over its scores of a tile of 8 N keys (log2
// units; the lane holds 2 N of them): m the running max, l the lane's partial
// sum, alpha the rescale of O.
template <int N = 2> __device__ __forceinline__ float dec_softmax_row(float (&s)[N][4], int r, float &m, float &l)
{
    const float m_new = fmaxf(m, acd_tile_row_max<8 * N>(s, r));
    const float m_use = m_new == -INFINITY ? 0.f : m_new; // nothing visible yet: every p is 0
    const float alpha = exp2f(m - m_use);
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            float &x = s[n][2 * r + e];
            x = exp2f(x - m_use);
            sum += x;
        }
    l = l * alpha + sum;
    m = m_new;
    return alpha;
}

// The online-softmax step of the lane's two rows over a tile's scores s (8 N keys), then their O
// accumulators (DN n8 blocks) rescaled, which is skipped when no row of the warp moved its max:
// once the maxima settle alpha is exactly 1 (2^0), and most tiles skip the DN * 4 products.
template <int N, int DN>
__device__ __forceinline__ void dec_softmax_step(float (&s)[N][4], float (&m)[2], float (&l)[2], float (&o)[DN][4])
{
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r)
        alpha[r] = dec_softmax_row<N>(s, r, m[r], l[r]);
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f))
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int dn = 0; dn < DN; ++dn) {
                o[dn][2 * r] *= alpha[r];
                o[dn][2 * r + 1] *= alpha[r];
            }
}

// The key range [ka, kb) some row of the CTA sees inside the split (empty:
// ka == kb).  Lanes 0-15 of each warp take a row each (every thread used to walk
// the 16 rows, each two divisions by the group, the window and the mask row,
// before its first copy).
__device__ __forceinline__ void dec_cta_keys(const acd_dec_params &d, int b, int hk, int rb, int nq, int nk, int n_keys,
                                             int k0, int k1, int lane, int &ka, int &kb)
{
    int lo = INT_MAX, hi = INT_MIN;
    if (lane < ACD_DEC_ROWS) {
        const dec_row row = dec_row_at(d, b, hk, rb * ACD_DEC_ROWS + lane, nq, nk, n_keys, k0, k1);
        if (row.live && row.lo < row.hi) {
            lo = row.lo;
            hi = row.hi;
        }
    }
    ka = __reduce_min_sync(0xffffffffu, lo);
    kb = __reduce_max_sync(0xffffffffu, hi);
    if (ka >= kb)
        ka = kb = k0;
}

// Programmatic dependent launch (Hopper): the split kernel lets the combine
// kernel's launch start once its CTAs are past their key loops, and the
// combine waits for the split kernel's completion (and its memory) before
// reading a partial; launched without the attribute both are no-ops.
__device__ __forceinline__ void dec_allow_combine()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

} // namespace
