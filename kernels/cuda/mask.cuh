// kernels/cuda/mask.cuh — which keys a query sees, on the device: ref.h's
// visibility rule (sequence lengths, causal/sliding window, dense mask), the
// K/V tiles a forward block visits and the query rows a backward block visits,
// and the masking of a tile of scores (forward) or of P (backward).
#pragma once
#include "common.cuh"

// Keys visible from row i by the window/causal part: [lo, hi) (not clipped to [0, nk)).
__device__ __forceinline__ void acd_window(const acd_params &p, int i, int nq, int nk, int &lo, int &hi)
{
    lo = -(1 << 30);
    hi = 1 << 30;
    if (p.windowed) {
        int c = p.align_br ? i + nk - nq : i;
        if (p.wl >= 0)
            lo = c - p.wl;
        if (p.wr >= 0)
            hi = c + p.wr + 1;
    }
}

// Keys row i sees by the lengths and the window: [lo, hi), empty past the
// row's sequence end; the tail mutant forgets the key-length bound.
__device__ __forceinline__ void acd_row_keys(const acd_params &p, int i, int nq, int nk, int &lo, int &hi)
{
    acd_window(p, i, nq, nk, lo, hi);
    lo = max(lo, 0);
    if (p.mutant != ACD_MUT_TAIL_UNMASKED)
        hi = min(hi, nk);
    if (i >= nq)
        hi = lo;
}

// Rows that see key j by the lengths and the window, [lo, hi): acd_row_keys
// inverted (row i sees j exactly when lo <= i < hi), for kernels that walk
// the rows of a key.
__device__ __forceinline__ void acd_key_rows(const acd_params &p, int j, int nq, int nk, int &lo, int &hi)
{
    lo = 0;
    hi = nq;
    if (j < 0 || (j >= nk && p.mutant != ACD_MUT_TAIL_UNMASKED))
        hi = 0;
    if (p.windowed) {
        const int off = p.align_br ? nk - nq : 0; // row i's window is centred on key i + off
        if (p.wr >= 0)
            lo = max(lo, j - p.wr - off);
        if (p.wl >= 0)
            hi = min(hi, j + p.wl - off + 1);
    }
}

// The dense mask's row i of (b, h): one byte per key, or null without a mask.
__device__ __forceinline__ const unsigned char *acd_mask_row(const acd_params &p, int b, int h, int i)
{
    if (!p.mask)
        return nullptr;
    const int mb = p.mask_batch == 1 ? 0 : b, mh = p.mask_heads == 1 ? 0 : h;
    return p.mask + (((long long)mb * p.mask_heads + mh) * p.Nq + i) * p.Nk;
}

// ref.h's visibility rule: the row's key range, then the dense mask (keys
// past its width are hidden).
__device__ __forceinline__ bool acd_visible(const acd_params &p, int b, int h, int i, int j, int nq, int nk)
{
    int lo, hi;
    acd_row_keys(p, i, nq, nk, lo, hi);
    if (j < lo || j >= hi)
        return false;
    const unsigned char *mrow = acd_mask_row(p, b, h, i);
    return !mrow || (j < p.Nk && mrow[j] != 0);
}

// Keys that rows [i_first, i_last] may see, clipped to [0, nk): [lo, hi).
__device__ __forceinline__ void acd_block_keys(const acd_params &p, int i_first, int i_last, int nq, int nk, int &lo,
                                               int &hi)
{
    int lo0, hi0, lo1, hi1;
    acd_window(p, i_first, nq, nk, lo0, hi0);
    acd_window(p, i_last, nq, nk, lo1, hi1);
    lo = max(lo0, 0);
    hi = min(hi1, nk);
}

// The forward's K/V tiles of BN keys for query rows [i0, i0 + BM): tiles
// [nb_lo, nb_hi) can hold visible keys, none at or past key_hi; a tile starting
// at j0 with lo_last <= j0 and j0 + BN <= hi_first (and inside nk) is visible
// to every row of a block inside the sequence without a dense mask (rows_full).
// The causal-skip mutant stops one tile early.
struct acd_fwd_tiles {
    int nb_lo, nb_hi, key_hi, lo_last, hi_first;
    bool rows_full;
    // Whether every row sees every key of the tile at j0: no per-entry test.
    __device__ __forceinline__ bool full(int j0, int bn, int nk) const
    {
        return rows_full && j0 >= lo_last && j0 + bn <= hi_first && j0 + bn <= nk;
    }
};
__device__ __forceinline__ acd_fwd_tiles acd_fwd_tile_range(const acd_params &p, int i0, int bm, int bn, int nq, int nk)
{
    acd_fwd_tiles r{0, 0, 0, 0, 0, false};
    int key_lo = 0;
    if (i0 < nq) {
        int i_last = min(i0 + bm, nq) - 1, dummy;
        acd_block_keys(p, i0, i_last, nq, nk, key_lo, r.key_hi);
        acd_window(p, i_last, nq, nk, r.lo_last, dummy);
        acd_window(p, i0, nq, nk, dummy, r.hi_first);
    }
    r.nb_lo = key_lo / bn;
    r.nb_hi = r.key_hi > key_lo ? (r.key_hi + bn - 1) / bn : r.nb_lo;
    if (p.mutant == ACD_MUT_CAUSAL_SKIP && p.windowed && p.wr >= 0 && r.nb_hi > r.nb_lo)
        r.nb_hi -= 1;
    r.rows_full = i0 + bm <= nq && !p.mask;
    return r;
}

// The backward's query rows that can see keys [j0, j0 + bn): [i_lo, i_hi),
// the window inverted (empty past the key sequence's end).
__device__ __forceinline__ void acd_bwd_query_rows(const acd_params &p, int j0, int bn, int nq, int nk, int &i_lo,
                                                   int &i_hi)
{
    i_lo = 0;
    i_hi = nq;
    if (p.windowed) {
        const int off = p.align_br ? nk - nq : 0, j_last = min(j0 + bn, nk) - 1;
        if (p.wr >= 0)
            i_lo = max(i_lo, j0 - p.wr - off);
        if (p.wl >= 0)
            i_hi = min(i_hi, j_last + p.wl - off + 1);
    }
    if (j0 >= nk)
        i_hi = i_lo;
}

// The backward's S^T / dP^T entries a thread holds for keys key, key + 8 and
// queries i0 + 8n + 2t + {0, 1} that the rules hide, a bit each (bit 4n + e for
// the accumulator tile's entry [n][e]): per key a row range, then the dense
// mask (acd_visible per entry had the compiler compute mask addresses for every
// entry of every tile).
template <int BMQ>
__device__ __forceinline__ uint32_t acd_bwd_hidden(const acd_params &p, int b, int h, int i0, int key, int t, int nq,
                                                   int nk)
{
    static_assert(BMQ <= 64, "one bit per entry");
    uint32_t hidden = 0;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int j = key + 8 * r;
        int lo, hi;
        acd_key_rows(p, j, nq, nk, lo, hi);
        const unsigned char *mask0 = acd_mask_row(p, b, h, 0);
#pragma unroll
        for (int n = 0; n < BMQ / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int i = i0 + n * 8 + 2 * t + e;
                bool vis = i >= lo && i < hi;
                if (mask0)
                    vis = vis && j < p.Nk && mask0[(long long)i * p.Nk + j] != 0;
                if (!vis)
                    hidden |= 1u << (4 * n + 2 * r + e);
            }
    }
    return hidden;
}

// The scores a thread holds of an accumulator tile (common.cuh), rows row and
// row + 8, keys j0 + 8n + 2t + {0, 1}, that the rules hide become -inf: per row
// the key range (two compares per entry), then the dense mask where there is one.
template <int N>
__device__ __forceinline__ void acd_mask_tile(float (&s)[N / 8][4], const acd_params &p, int b, int h, int row, int j0,
                                              int t, int nq, int nk)
{
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = row + 8 * r;
        int lo, hi;
        acd_row_keys(p, i, nq, nk, lo, hi);
        const unsigned char *mrow = acd_mask_row(p, b, h, i);
#pragma unroll
        for (int n = 0; n < N / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int j = j0 + n * 8 + 2 * t + e;
                bool vis = j >= lo && j < hi;
                if (mrow)
                    vis = vis && j < p.Nk && mrow[j] != 0;
                if (!vis)
                    s[n][2 * r + e] = -INFINITY;
            }
    }
}
