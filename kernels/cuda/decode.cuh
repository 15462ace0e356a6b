// kernels/cuda/decode.cuh — cuda-decode's plan (issue 16), shared by its files
// (decode.cu: the split kernel; decode_combine.cu: the combine kernel;
// decode_host.cu: checks, staging, the split count) and its benchmark
// (bench_decode.cu): the problem as the
// decode kernels see it, the split count, and the device copies they need
// (block table, lengths, the split partials' workspace).  Preparing a plan
// is separate from launching it so the benchmark times the two kernels alone.
#pragma once
#include <climits>

#include "common.cuh"

// Tile and split configuration, named once (see decode.cu's header comment).
constexpr int ACD_DEC_WARPS = 4; // warps per CTA, each consuming its own key tiles
constexpr int ACD_DEC_THREADS = 32 * ACD_DEC_WARPS;
constexpr int ACD_DEC_ROWS = 16; // packed query rows (GQA group x Nq) per CTA: one m16 tile
constexpr int ACD_DEC_TILE = 16; // keys per warp tile
// cp.async stages per warp: two tiles in flight a warp while it waits, one while it computes.
// Three (25 MB in flight over the device's 264 CTAs) read 0.3-4 points of the peak less on every row of
// bench --decode (H200), and an L2 prefetch of one more tile lost 7; PERF.md, "how much in flight".
constexpr int ACD_DEC_STAGES = 2;
constexpr int ACD_DEC_UNIT = ACD_DEC_TILE * ACD_DEC_WARPS; // split boundaries: multiples of 64 keys
constexpr int ACD_DEC_MAX_SPLITS = 256; // a larger hint is clamped (the math is the same)
constexpr int ACD_DEC_MIN_SPLIT_KEYS = 128; // auto: no split shorter than this
// Auto: a split count whose grid needs more than one wave of CTAs only with splits at least this long.
// Each wave repeats every CTA's fixed costs (Q and the first page ids before the first copy, the warps'
// merge, the partial): on the H200, B = 40 at 1k keys took 70% longer with 8 splits over 5 waves than
// with one split; at 4096 keys such splits gained or lost 1-2%, from 5000 keys they gained 1-8%
// (kernels/cuda/PERF.md, session 11).
constexpr int ACD_DEC_MULTIWAVE_SPLIT_KEYS = 4096;
constexpr size_t ACD_DEC_MAX_WORKSPACE = (size_t)1 << 30; // partials' bytes: fewer splits past this
// The merge in a cluster (decode.cu): the S <= 8 split CTAs of a row block (the portable cluster size).
constexpr int ACD_DEC_MAX_CLUSTER = 8;

// The problem as the decode kernels see it, by value in each launch.
struct acd_dec_params {
    acd_params p; // strides (Q, O; contiguous K, V), lengths, masks (stage.cu)
    const int *table; // device (B, pages_per_seq) page ids, or null: contiguous K, V
    int page_size, pages_per_seq, page_shift; // page_shift >= 0: page_size == 1 << page_shift
    long long slot_stride; // elements between consecutive slots of a page: Hkv * D
    bool tiles_in_pages; // contiguous K/V, or page_size a multiple of ACD_DEC_TILE: a tile never spans pages
    int splits; // S >= 1 key ranges per sequence
    int split_keys; // keys per split (acd_dec_split_range), from the batch's longest sequence
    // The S split CTAs of a (sequence, KV head, row block) form a thread-block cluster (split s its rank) and
    // merge their partials through distributed shared memory: no workspace, no combine kernel (decode.cu).
    bool cluster;
    int rows, row_blocks; // packed rows group * Nq, in blocks of ACD_DEC_ROWS
    // S > 1 without the cluster: (B Hq Nq, S, D_v) f32 partial O_s, (B Hq Nq, S, 2) its (max m_s, sum l_s), log2 units
    float *o_part, *lse_part;
    // cuda-decode-fp8: device descale factors of Q, K, V (one each, or (B, Hkv) each when descale_head); else null
    const float *dq, *dk, *dv;
    bool descale_head;
};

// Keys the kernels treat as a sequence of nk keys: nk, or for the last-page
// mutant every slot of its last page (page_size > 0: a paged cache), whose NaN
// then reaches the sums.  Host (the longest sequence's, for split_keys) and
// device (each sequence's).
__host__ __device__ __forceinline__ int acd_dec_key_end(int nk, int page_size, int mutant)
{
    if (mutant != ACD_MUT_DEC_LAST_PAGE_SLOTS || page_size <= 0)
        return nk;
    const long long end = ((long long)nk + page_size - 1) / page_size * page_size;
    return end < INT_MAX ? (int)end : INT_MAX;
}

// Keys per split: the longest sequence's n_keys in 64-key units (at least
// one), dealt ceil(units / S) per split (host; the plan's split_keys).
__host__ __device__ __forceinline__ int acd_dec_keys_per_split(int longest, int splits)
{
    const long long units = longest > 0 ? ((long long)longest + ACD_DEC_UNIT - 1) / ACD_DEC_UNIT : 1;
    const long long keys = (units + splits - 1) / splits * ACD_DEC_UNIT;
    return keys < INT_MAX ? (int)keys : INT_MAX;
}

// Split s's keys [k0, k1) of a sequence of n_keys: split_keys each from key 0,
// the last split also any keys past S split_keys (none where split_keys came
// from the batch's longest sequence); a shorter sequence leaves its trailing
// splits empty.  A split's range needs no sequence length until it is clamped,
// so a CTA reads its first block-table entries while the length is on its way.
// The off-by-one mutant runs every split but the last one key too far.  Host
// and device (acd_decode_split_keys tests it without a GPU).
__host__ __device__ __forceinline__ void acd_dec_split_range(int n_keys, int split_keys, int splits, int s, int mutant,
                                                             int &k0, int &k1)
{
    const long long lo = (long long)s * split_keys;
    long long hi = s == splits - 1 ? (lo > n_keys ? lo : n_keys) : lo + split_keys;
    if (mutant == ACD_MUT_DEC_SPLIT_OFF_BY_ONE && s < splits - 1)
        hi += 1;
    k0 = (int)(lo < n_keys ? lo : n_keys);
    k1 = (int)(hi < n_keys ? hi : n_keys);
}

struct acd_decode_plan {
    acd_dec_params d;
    acd_staged st;
    int *table;
    size_t table_bytes;
    float *ws;
    size_t ws_bytes;
    long long split_ctas; // grid of the split kernel
    long long rows_all; // B Hq Nq: the combine kernel's rows
    bool pdl; // the combine launched as a programmatic dependent of the split kernel (compute capability >= 9)
    ac_dtype out; // O's dtype: the dtype, or an fp8 problem's fp8_out
    float *descale; // fp8: the three tensors' factors, one allocation
    size_t descale_bytes;
    bool mla; // cuda-decode-mla's split kernel (decode_mla.cu): d = 576, V read from K
};

// Checks the problem, stages it and allocates the plan's device memory
// (t e4m3/e5m2: cuda-decode-fp8's problem, its descales copied to the device;
// mla: cuda-decode-mla's, d = 576 with V read from K).
int acd_decode_prepare(const ac_problem *prob, ac_dtype t, int mutant, bool mla, acd_decode_plan *plan, ac_err *err);
// The split kernel, then (S > 1) the combine kernel, on stream; no sync.
int acd_decode_launch(const acd_decode_plan &plan, ac_dtype t, const ac_fwd_args *a, cudaStream_t stream, ac_err *err);
void acd_decode_release(acd_decode_plan *plan);
// The two kernels' launchers (decode.cu, decode_combine.cu) and the split
// kernel's resident CTAs per SM (which also allows it its shared memory).
int acd_dec_launch_split(const acd_decode_plan &plan, ac_dtype t, const ac_fwd_args *a, cudaStream_t stream,
                         ac_err *err);
int acd_dec_launch_combine(const acd_decode_plan &plan, ac_dtype t, const ac_fwd_args *a, cudaStream_t stream,
                           ac_err *err);
int acd_dec_split_ctas_per_sm(ac_dtype t, ac_dtype out, int d, int *ctas, ac_err *err);
// The split kernel's clusters of `splits` CTAs resident at once on the device (0: it cannot merge in a
// cluster here: a GPU before Hopper, or the kernel's code JIT-compiled from the compute_80 PTX).
int acd_dec_split_max_clusters(ac_dtype t, ac_dtype out, int d, int splits, int *clusters, ac_err *err);
// cuda-decode-mla's split kernel (decode_mla.cu; d_v 512 or 576) and its resident CTAs per SM.
int acd_dec_mla_launch_split(const acd_decode_plan &plan, ac_dtype t, const ac_fwd_args *a, cudaStream_t stream,
                             ac_err *err);
int acd_dec_mla_ctas_per_sm(ac_dtype t, int dv, int *ctas, ac_err *err);
