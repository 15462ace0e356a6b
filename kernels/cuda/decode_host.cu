// kernels/cuda/decode_host.cu — cuda-decode's host side (issue 16): the
// problem checked, staged (stage.cu's acd_stage, the block table copied to the
// device), the split count chosen, the partials' workspace allocated, and the
// two kernels launched (decode.cu's split kernel, decode_combine.cu's combine).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>

#include "decode.cuh"

namespace
{

// cuda-decode-fp8's own terms: its descales per tensor or (batch, kv head), O in bf16/f16, P in f16.
int dec_check_fp8(const ac_problem *prob, ac_dtype t, ac_err *err)
{
    if (t != AC_E4M3 && t != AC_E5M2)
        return ac_fail(err, AC_ERR_INPUT, "cuda-decode-fp8: dtype %s is not e4m3 or e5m2", ac_dtype_name(t));
    if (!ac_problem_is_fp8(prob) || !prob->descale_q || !prob->descale_k || !prob->descale_v)
        return ac_fail(err, AC_ERR_INPUT, "cuda-decode-fp8: an fp8 problem with its descale factors is needed");
    if (prob->descale_rows > 0)
        return ac_fail(err, AC_ERR_INPUT,
                       "cuda-decode-fp8: descale=block(%d) is not supported (descales per tensor or per head)",
                       prob->descale_rows);
    if (prob->descale_rows != AC_DESCALE_TENSOR && prob->descale_rows != AC_DESCALE_HEAD)
        return ac_fail(err, AC_ERR_INPUT, "cuda-decode-fp8: descale granularity %d is not tensor or head",
                       prob->descale_rows);
    if (prob->fp8_out != AC_BF16 && prob->fp8_out != AC_F16)
        return ac_fail(err, AC_ERR_INPUT, "cuda-decode-fp8: output dtype %s is not bf16 or f16",
                       ac_dtype_name(prob->fp8_out));
    if (prob->fp8_p != AC_F16 || prob->fp8_acc_bits != 0)
        return ac_fail(err, AC_ERR_INPUT, "cuda-decode-fp8: P is rounded to f16 and accumulated in f32, not p=%s",
                       ac_dtype_name(prob->fp8_p));
    return AC_OK;
}

// cuda-decode-mla's terms: d = 576 with d_v 512 or 576, V read as K's first d_v channels (v=k).
int dec_check_mla(const ac_problem *prob, ac_dtype t, ac_err *err)
{
    if (t != AC_F16 && t != AC_BF16)
        return ac_fail(err, AC_ERR_INPUT, "cuda-decode-mla: dtype %s is not f16 or bf16", ac_dtype_name(t));
    const int dv = ac_head_dim_v(prob);
    if (prob->head_dim != 576 || (dv != 512 && dv != 576))
        return ac_fail(err, AC_ERR_INPUT, "cuda-decode-mla: d %d with d_v %d is not 576 with 512 (or 576)",
                       prob->head_dim, dv);
    if (!prob->v_from_k)
        return ac_fail(err, AC_ERR_INPUT,
                       "cuda-decode-mla: V is read from K's first d_v channels: a v=k problem is "
                       "needed");
    return AC_OK;
}

int dec_check(const ac_problem *prob, ac_dtype t, bool mla, ac_err *err)
{
    int st = AC_OK;
    if (mla)
        st = dec_check_mla(prob, t, err);
    else if (ac_dtype_is_fp8(t))
        st = dec_check_fp8(prob, t, err);
    else if (t != AC_F16 && t != AC_BF16)
        st = ac_fail(err, AC_ERR_INPUT, "cuda-decode: dtype %s is not f16 or bf16", ac_dtype_name(t));
    if (st != AC_OK)
        return st;
    if (!mla && prob->head_dim != 64 && prob->head_dim != 128)
        return ac_fail(err, AC_ERR_INPUT, "cuda-decode: head dim %d is not 64 or 128", prob->head_dim);
    if (!mla && ac_head_dim_v(prob) != prob->head_dim)
        return ac_fail(err, AC_ERR_INPUT, "cuda-decode: d_v %d differs from d %d", ac_head_dim_v(prob), prob->head_dim);
    if (prob->layout == AC_LAYOUT_THD)
        return ac_fail(err, AC_ERR_INPUT, "cuda-decode: layout thd is not supported (bhsd, bshd)");
    const unsigned other = ac_problem_variants(prob) & ~(unsigned)(AC_VAR_PAGED | AC_VAR_SPLIT | (mla ? AC_VAR_DV : 0));
    if (other)
        return ac_fail(err, AC_ERR_INPUT, "cuda-decode%s: variants 0x%x are not supported (paged and split only%s)",
                       mla ? "-mla" : "", other, mla ? ", and MLA's d_v" : "");
    if (prob->page_size > 0 && (!prob->block_table || !prob->seqlens_k))
        return ac_fail(err, AC_ERR_INPUT, "cuda-decode: a paged problem needs its block table and seqlens_k");
    return AC_OK;
}

int dec_longest(const ac_problem *prob)
{
    int longest = 0;
    for (int b = 0; b < prob->batch; b++)
        longest = std::max(longest, ac_seqlen_k_of(prob, b));
    return longest;
}

} // namespace

// Auto: FlashAttention-2's rule (num_splits_heuristic) on the CTAs that hold
// keys: for each S the waves of base * S' CTAs over the resident slots (S' the
// splits that are not empty after rounding to 64-key units), efficiency =
// waves / ceil(waves); the smallest S within 95% of the best efficiency
// (FlashAttention takes 85%; a split costs us only its partial's write and
// read, while an idle slot is bandwidth left unused).  A grid whose waves are
// already 80% full takes S = 1 (one partial wave of >= 80%, or e.g. 1.94 waves;
// not 1.29 waves, whose last one leaves 71% of the slots idle: cuda-decode-fp8
// at 3 CTAs an SM, B = 128, ran 13% slower on the H200 with one split than with
// two CTAs an SM); no split is shorter than ACD_DEC_MIN_SPLIT_KEYS, and a split
// count whose grid is more than one wave is not a candidate unless its splits
// hold ACD_DEC_MULTIWAVE_SPLIT_KEYS keys (the rule's efficiency counts idle slots
// in the last wave, not the fixed costs each further wave of short CTAs repeats).
extern "C" int acd_decode_splits(const ac_problem *prob, int row_blocks, int slots)
{
    const long long rows_all = (long long)prob->batch * prob->heads_q * prob->seqlen_q;
    const long long per_split = rows_all * (ac_head_dim_v(prob) + 2) * (long long)sizeof(float);
    const long long ws_cap = per_split > 0 ? (long long)ACD_DEC_MAX_WORKSPACE / per_split : ACD_DEC_MAX_SPLITS;
    const int cap = (int)std::max(1LL, std::min((long long)ACD_DEC_MAX_SPLITS, ws_cap));
    if (prob->num_splits >= 1)
        return std::min(prob->num_splits, cap);
    const int longest = dec_longest(prob);
    const long long base = (long long)prob->batch * prob->heads_kv * row_blocks;
    const int max_s = std::min(cap, std::max(1, longest / ACD_DEC_MIN_SPLIT_KEYS));
    const double waves1 = (double)base / slots;
    if (max_s <= 1 || waves1 / std::ceil(waves1) >= 0.8)
        return 1;
    const long long units = (longest + ACD_DEC_UNIT - 1) / ACD_DEC_UNIT;
    double eff[ACD_DEC_MAX_SPLITS + 1] = {}, best = 0.0;
    for (int s = 1; s <= max_s; s++) {
        const long long per = (units + s - 1) / s, used = (units + per - 1) / per;
        const double waves = (double)(base * used) / slots;
        const bool short_waves = s > 1 && waves > 1.0 && per * ACD_DEC_UNIT < ACD_DEC_MULTIWAVE_SPLIT_KEYS;
        eff[s] = short_waves ? 0.0 : waves / std::ceil(waves);
        best = std::max(best, eff[s]);
    }
    for (int s = 1; s <= max_s; s++)
        if (eff[s] >= 0.95 * best)
            return s;
    return 1;
}

// The merge in a cluster replaces the combine kernel where the grid is one wave
// of clusters: with more, a cluster's early CTAs would hold their slots idle
// at the barrier while others wait to start.
extern "C" int acd_decode_cluster_fits(int splits, long long ctas, int max_clusters)
{
    return splits > 1 && splits <= ACD_DEC_MAX_CLUSTER && ctas > 0 && ctas <= (long long)max_clusters * splits;
}

// Whether the plan's split CTAs merge in clusters (ACD_DEC_NO_CLUSTER=1: never, the combine kernel's path).
static int dec_choose_cluster(const acd_decode_plan *plan, ac_dtype t, int major, bool *cluster, ac_err *err)
{
    *cluster = false;
    const int S = plan->d.splits;
    if (plan->mla || major < 9 || S < 2 || S > ACD_DEC_MAX_CLUSTER || getenv("ACD_DEC_NO_CLUSTER"))
        return AC_OK;
    int clusters = 0;
    const int st = acd_dec_split_max_clusters(t, plan->out, plan->d.p.D, S, &clusters, err);
    *cluster = st == AC_OK && acd_decode_cluster_fits(S, plan->split_ctas, clusters);
    return st;
}

// fp8: Q's, K's and V's factors in one device allocation (d.dq, d.dk, d.dv).
static int dec_stage_descales(const ac_problem *prob, acd_decode_plan *plan, ac_err *err)
{
    const size_t nq = ac_descale_count(prob, AC_TENSOR_Q), nk = ac_descale_count(prob, AC_TENSOR_K),
                 nv = ac_descale_count(prob, AC_TENSOR_V);
    plan->descale_bytes = (nq + nk + nv) * sizeof(float);
    int st = acd_ws_alloc((void **)&plan->descale, plan->descale_bytes, err);
    if (st == AC_OK)
        st = ac_dev_upload(plan->descale, prob->descale_q, nq * sizeof(float), err);
    if (st == AC_OK)
        st = ac_dev_upload(plan->descale + nq, prob->descale_k, nk * sizeof(float), err);
    if (st == AC_OK)
        st = ac_dev_upload(plan->descale + nq + nk, prob->descale_v, nv * sizeof(float), err);
    plan->d.dq = plan->descale;
    plan->d.dk = plan->descale + nq;
    plan->d.dv = plan->descale + nq + nk;
    plan->d.descale_head = prob->descale_rows == AC_DESCALE_HEAD;
    return st;
}

static int dec_stage_table(const ac_problem *prob, acd_decode_plan *plan, ac_err *err)
{
    acd_dec_params &d = plan->d;
    d.page_shift = -1;
    d.tiles_in_pages = prob->page_size <= 0 || prob->page_size % ACD_DEC_TILE == 0;
    if (prob->page_size <= 0)
        return AC_OK;
    d.page_size = prob->page_size;
    d.pages_per_seq = prob->pages_per_seq;
    for (int sh = 0; sh < 31; sh++)
        if (prob->page_size == 1 << sh)
            d.page_shift = sh;
    d.slot_stride = (long long)prob->heads_kv * prob->head_dim;
    plan->table_bytes = sizeof(int) * (size_t)prob->batch * prob->pages_per_seq;
    int st = acd_ws_alloc((void **)&plan->table, plan->table_bytes, err);
    if (st == AC_OK)
        st = ac_dev_upload(plan->table, prob->block_table, plan->table_bytes, err);
    d.table = plan->table;
    return st;
}

int acd_decode_prepare(const ac_problem *prob, ac_dtype t, int mutant, bool mla, acd_decode_plan *plan, ac_err *err)
{
    *plan = acd_decode_plan{};
    plan->mla = mla;
    int st = dec_check(prob, t, mla, err);
    if (st != AC_OK)
        return st;
    if ((st = acd_stage(prob, mutant, &plan->d.p, &plan->st, err)) != AC_OK)
        return st;
    acd_dec_params &d = plan->d;
    plan->out = ac_dtype_is_fp8(t) ? prob->fp8_out : t;
    d.rows = d.p.group * d.p.Nq;
    d.row_blocks = (d.rows + ACD_DEC_ROWS - 1) / ACD_DEC_ROWS;
    int sms = 0, per_sm = 1, major = 0;
    st = dec_stage_table(prob, plan, err);
    if (st == AC_OK && ac_dtype_is_fp8(t))
        st = dec_stage_descales(prob, plan, err);
    if (st == AC_OK &&
        (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess ||
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess))
        st = ac_fail(err, AC_ERR_ENV, "cudaDeviceGetAttribute (SM count, compute capability) failed");
    plan->pdl = major >= 9 && !getenv("ACD_DEC_NO_PDL"); // ACD_DEC_NO_PDL=1: two plain launches
    if (st == AC_OK)
        st = mla ? acd_dec_mla_ctas_per_sm(t, d.p.Dv, &per_sm, err)
                 : acd_dec_split_ctas_per_sm(t, plan->out, prob->head_dim, &per_sm, err);
    if (st != AC_OK) {
        acd_decode_release(plan);
        return st;
    }
    d.splits = acd_decode_splits(prob, d.row_blocks, std::max(1, sms * per_sm));
    d.split_keys = acd_dec_keys_per_split(acd_dec_key_end(dec_longest(prob), prob->page_size, mutant), d.splits);
    plan->rows_all = (long long)d.p.B * d.p.Hq * d.p.Nq;
    plan->split_ctas = (long long)d.p.B * d.p.Hkv * d.row_blocks * d.splits;
    if (plan->split_ctas > INT_MAX || plan->rows_all > INT_MAX) { // the combine's grid: a CTA per query row
        acd_decode_release(plan);
        return ac_fail(err, AC_ERR_INPUT, "cuda-decode: %lld split CTAs or %lld query rows exceed the grid",
                       plan->split_ctas, plan->rows_all);
    }
    st = dec_choose_cluster(plan, t, major, &d.cluster, err);
    if (st == AC_OK && d.splits > 1 && !d.cluster) {
        const size_t parts = (size_t)plan->rows_all * d.splits;
        plan->ws_bytes = parts * (d.p.Dv + 2) * sizeof(float);
        st = acd_ws_alloc((void **)&plan->ws, plan->ws_bytes, err);
        d.o_part = plan->ws;
        d.lse_part = plan->ws + parts * d.p.Dv;
    }
    if (st != AC_OK)
        acd_decode_release(plan);
    return st;
}

int acd_decode_launch(const acd_decode_plan &plan, ac_dtype t, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    const int st =
        plan.mla ? acd_dec_mla_launch_split(plan, t, a, stream, err) : acd_dec_launch_split(plan, t, a, stream, err);
    return st == AC_OK ? acd_dec_launch_combine(plan, plan.out, a, stream, err) : st;
}

void acd_decode_release(acd_decode_plan *plan)
{
    acd_ws_free(plan->ws, plan->ws_bytes);
    acd_ws_free(plan->table, plan->table_bytes);
    acd_ws_free(plan->descale, plan->descale_bytes);
    acd_unstage(&plan->st);
    plan->ws = nullptr;
    plan->table = nullptr;
    plan->descale = nullptr;
}

extern "C" void acd_decode_split_keys(int n_keys, int longest, int splits, int s, int mutant, int *k0, int *k1)
{
    acd_dec_split_range(n_keys, acd_dec_keys_per_split(longest, splits), splits, s, mutant, *k0, *k1);
}

// The plan's split count and merge (1: in clusters, 0: the combine kernel or none), prepared and released.
extern "C" int acd_decode_plan_path(const ac_problem *prob, ac_dtype t, int *splits, int *cluster, ac_err *err)
{
    acd_decode_plan plan;
    const int st = acd_decode_prepare(prob, t, 0, prob->head_dim == 576, &plan, err);
    if (st != AC_OK)
        return st;
    *splits = plan.d.splits;
    *cluster = plan.d.cluster;
    acd_decode_release(&plan);
    return AC_OK;
}

// One forward: prepared, launched, synchronised, released.
static int dec_forward(const ac_problem *prob, ac_dtype t, const ac_fwd_args *a, int mutant, bool mla, ac_err *err)
{
    acd_decode_plan plan;
    int st = acd_decode_prepare(prob, t, mutant, mla, &plan, err);
    if (st != AC_OK)
        return st;
    st = acd_decode_launch(plan, t, a, 0, err);
    if (st == AC_OK)
        st = ac_dev_sync(err);
    acd_decode_release(&plan);
    return st;
}

extern "C" int acd_decode_forward(const ac_problem *prob, ac_dtype t, const ac_fwd_args *a, int mutant, ac_err *err)
{
    if (ac_dtype_is_fp8(t)) // cuda-decode-fp8's dtypes, not this row's
        return ac_fail(err, AC_ERR_INPUT, "cuda-decode: dtype %s is not f16 or bf16 (cuda-decode-fp8 takes fp8)",
                       ac_dtype_name(t));
    return dec_forward(prob, t, a, mutant, false, err);
}

extern "C" int acd_decode_fp8_forward(const ac_problem *prob, ac_dtype t, const ac_fwd_args *a, int mutant, ac_err *err)
{
    if (!ac_dtype_is_fp8(t))
        return ac_fail(err, AC_ERR_INPUT, "cuda-decode-fp8: dtype %s is not e4m3 or e5m2", ac_dtype_name(t));
    return dec_forward(prob, t, a, mutant, false, err);
}

extern "C" int acd_decode_mla_forward(const ac_problem *prob, ac_dtype t, const ac_fwd_args *a, int mutant, ac_err *err)
{
    return dec_forward(prob, t, a, mutant, true, err);
}
