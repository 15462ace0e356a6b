// kernels/cuda/bench_decode.cu — `attncheck bench --decode`: cuda-decode's time
// and achieved HBM bandwidth on a serving engine's decode step (issue 16):
// bf16, d = 128, Hq = 32, Hkv = 4 (GQA 8:1), Nq = 1, causal-br, every sequence
// Nk keys in pages of 16 or 128 keys through a shuffled block table, and
// contiguous (B, Hkv, Nk, d) K/V (page 0: what PyTorch SDPA reads beside it), for
// B = 1, 8, 32, 128 and Nk = 1k .. 128k (shapes whose cache does not fit in
// free device memory are skipped).  Bandwidth = bytes of K and V read / time;
// its fraction of the device's peak 2 * memory clock * bus width / 8 (both
// from cudaDeviceGetAttribute).  Each time is the median of CUDA-event timings
// of the split and combine kernels (the split kernel alone where its CTAs merge
// in clusters: the row's splits read "S, cluster"; the plan staged beforehand), after a
// warm-up, with the L2 flushed (by reading a buffer twice its size: clean
// lines) before every timed run, each row in a fresh process on 3 placements of
// its buffers (the first, a fresh allocation, printed, then the range over all:
// bd_row, bd_placements).  Printed as a
// Markdown table, after the figure of a plain streaming read (the practical ceiling);
// each row's last column ("plain read") is a plain streaming read of the row's own K
// and V, one launch timed as the decode step is, in the same buffers: what any
// kernel that reads those bytes once in one launch could reach on this device,
// start-up and tail included (the kernel's share beyond it is the attention's).
// ci/torch_decode_bench.py reads the table for the ratio to PyTorch SDPA.
// With fp8 (`bench --decode --fp8`) the same table for cuda-decode-fp8: Q, K
// and V in e4m3 with one descale factor each, O in bf16, half the bytes.
// With --mla (`bench --decode --mla`) cuda-decode-mla on MLA decode's shape:
// bf16, d 576 / d_v 512, one KV head (the latent cache; V read from it), 16
// and 128 query heads, pages of 64; the bytes are the cache's (K only) and the
// table adds the TFLOP/s of 2 B Hq Nk (576 + 512).
// ACD_DEC_BENCH_SHAPES="B:Nk:page[:splits] ..." runs only the listed rows
// (page 0: K and V contiguous (B, Hkv, Nk, d); splits: the hint, else auto),
// for a developer's comparisons; ACD_DEC_BENCH_SPLIT_ONLY=1 times the split kernel alone (no combine:
// what the combine step adds end to end).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "decode.cuh"

namespace
{

constexpr int BD_HQ = 32, BD_HKV = 4, BD_D = 128;
constexpr int BD_MLA_D = 576, BD_MLA_DV = 512;

// Hash-based bf16 values in about (-2, 2), never all zero.
__global__ void bd_fill(__nv_bfloat16 *x, size_t n, unsigned seed)
{
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)k * 2654435761u ^ seed;
        h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
        x[k] = __float2bfloat16_rn((h & 0xffffff) * (4.f / 16777216.f) - 2.f);
    }
}

// The L2 flush: a read of a buffer twice the L2's size, so the L2 holds clean
// lines when the timed launches start.  A cudaMemset flush (the first version)
// left the L2 full of dirty lines, whose write-back to HBM then ran inside the
// timed decode: tens of MB of writes against a read-bound kernel.
__global__ void bd_read_flush(const uint4 *buf, size_t n, unsigned *sink)
{
    unsigned acc = 0;
    for (size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = buf[x];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) // never in practice; the reads cannot be dropped
        *sink = acc;
}

// A plain streaming read of a's na 16-byte chunks, then b's nb: grid-stride,
// four independent loads a thread in flight, no other work.  Over a buffer 40
// times the L2's size it is the device's practical ceiling beside the nominal
// peak (bd_stream_gbs); over a row's own K and V, launched and timed as the
// decode step is, it is what one launch reading those bytes reaches (bd_row).
__global__ void bd_stream_read(const uint4 *a, size_t na, const uint4 *b, size_t nb, unsigned *sink)
{
    unsigned acc = 0;
    const size_t n = na + nb, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) { // all four issued before any is used
            const size_t y = x + u * stride;
            v[u] = y < na ? a[y] : y < n ? b[y - na] : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
            acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x9e3779b9u) // never in practice; the reads cannot be dropped
        *sink = acc;
}

// bd_stream_read over a then b with the plain read's grid (8 CTAs of 256 threads an SM).
int bd_launch_stream_read(const void *a, size_t a_bytes, const void *b, size_t b_bytes, void *sink, ac_err *err)
{
    int sms = 1;
    ACD_CHECK(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    bd_stream_read<<<sms * 8, 256>>>((const uint4 *)a, a_bytes / 16, (const uint4 *)b, b_bytes / 16, (unsigned *)sink);
    ACD_CHECK_LAUNCH(err, "bd_stream_read");
    return AC_OK;
}

// GB/s of bd_stream_read (median of 5 after a warm-up), or 0 when the buffer does not fit.
double bd_stream_gbs(size_t l2_bytes, ac_err *err)
{
    const size_t bytes = 40 * l2_bytes;
    void *buf = nullptr;
    if (ac_dev_alloc(&buf, bytes, err) != AC_OK || cudaMemset(buf, 1, bytes) != cudaSuccess) {
        ac_dev_free(buf);
        (void)cudaGetLastError();
        return 0.0;
    }
    cudaEvent_t a = nullptr, b = nullptr;
    std::vector<float> ms;
    bool ok = cudaEventCreate(&a) == cudaSuccess && cudaEventCreate(&b) == cudaSuccess;
    for (int r = 0; r < 6 && ok; ++r) {
        float t = 0.f;
        ok = cudaEventRecord(a, 0) == cudaSuccess &&
            bd_launch_stream_read(buf, bytes - 16, nullptr, 0, (char *)buf + bytes - 16, err) == AC_OK; // the sink last
        ok = ok && cudaEventRecord(b, 0) == cudaSuccess && cudaEventSynchronize(b) == cudaSuccess &&
            cudaEventElapsedTime(&t, a, b) == cudaSuccess;
        if (r > 0) // the first is the warm-up
            ms.push_back(t);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    ac_dev_free(buf);
    if (!ok || ms.empty())
        return 0.0;
    std::sort(ms.begin(), ms.end());
    return (double)(bytes - 16) / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

struct bd_buffers {
    void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *flush = nullptr;
    float *lse = nullptr;
};

void bd_free(bd_buffers &x)
{
    for (void *p : {x.q, x.k, x.v, x.o, (void *)x.lse})
        ac_dev_free(p);
    x.q = x.k = x.v = x.o = nullptr;
    x.lse = nullptr;
}

// Hash-based e4m3 codes of magnitude below 2 (exponent field <= 7: never NaN), never all zero.
__global__ void bd_fill_e4m3(unsigned char *x, size_t n, unsigned seed)
{
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)k * 2654435761u ^ seed;
        h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
        x[k] = (unsigned char)((h & 0xbf) | 0x08); // sign, exponent 1..7, mantissa
    }
}

int bd_alloc_fill(void **dev, ac_dtype t, size_t elems, unsigned seed, ac_err *err)
{
    int st = ac_dev_alloc(dev, elems * ac_dtype_size(t), err);
    if (st != AC_OK)
        return st;
    if (t == AC_E4M3)
        bd_fill_e4m3<<<1024, 256>>>((unsigned char *)*dev, elems, seed);
    else
        bd_fill<<<1024, 256>>>((__nv_bfloat16 *)*dev, elems, seed);
    ACD_CHECK_LAUNCH(err, "bd_fill");
    return AC_OK;
}

// fp8: one descale factor per tensor (1/64: the codes' values times it), O in bf16, P in f16.
const float bd_descales[3] = {1.f / 64, 1.f / 64, 1.f / 64};

void bd_make_fp8(ac_problem &pr)
{
    pr.fp8_out = AC_BF16, pr.fp8_p = AC_F16, pr.descale_rows = AC_DESCALE_TENSOR;
    pr.descale_q = &bd_descales[0], pr.descale_k = &bd_descales[1], pr.descale_v = &bd_descales[2];
}

// The decode problem: B sequences of nk keys in pages of `page` keys, the table a shuffle of every page;
// page 0: K and V contiguous (B, Hkv, Nk, d), the layout PyTorch's side of the comparison reads.
// mla_heads > 0: MLA decode's (that many query heads, one latent KV head, d 576, V = K's first 512 channels).
ac_problem bd_problem(int B, int nk, int page, int mla_heads, std::vector<int> &table, std::vector<int> &lens)
{
    ac_problem pr = mla_heads > 0 ? ac_problem_dense(B, mla_heads, 1, 1, nk, BD_MLA_D)
                                  : ac_problem_dense(B, BD_HQ, BD_HKV, 1, nk, BD_D);
    if (mla_heads > 0)
        pr.head_dim_v = BD_MLA_DV, pr.v_from_k = true;
    pr.layout = page > 0 ? AC_LAYOUT_BSHD : AC_LAYOUT_BHSD;
    pr.windowed = true, pr.window_left = AC_WINDOW_INF, pr.window_right = 0, pr.align = AC_ALIGN_BOTTOM_RIGHT;
    if (page <= 0)
        return pr;
    const int per_seq = (nk + page - 1) / page;
    table.resize((size_t)B * per_seq);
    for (size_t x = 0; x < table.size(); x++)
        table[x] = (int)x;
    uint32_t s = 12345u;
    for (size_t x = table.size() - 1; x > 0; x--) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        std::swap(table[x], table[s % (x + 1)]);
    }
    lens.assign(B, nk);
    pr.seqlens_k = lens.data();
    pr.page_size = page, pr.pages_per_seq = per_seq, pr.num_pages = B * per_seq, pr.block_table = table.data();
    return pr;
}

// ACD_DEC_BENCH_SPLIT_ONLY=1: the split kernel timed alone, without the combine.
bool bd_split_only() { return getenv("ACD_DEC_BENCH_SPLIT_ONLY") != nullptr; }

// Milliseconds of each timed run of launch() (an ac status; the L2 flushed before each), after a warm-up.
template <typename Launch>
int bd_time(Launch launch, void *flush, size_t flush_bytes, int reps, std::vector<float> *ms, ac_err *err)
{
    cudaEvent_t a = nullptr, b = nullptr;
    ACD_CHECK(err, cudaEventCreate(&a));
    ACD_CHECK(err, cudaEventCreate(&b));
    int st = launch(); // warm-up
    for (int r = 0; r < reps && st == AC_OK; ++r) {
        // The flush (tens of microseconds) runs while the launches below are queued: no host gap is timed.
        // Its last 16 bytes are the sink, outside the part it reads.
        bd_read_flush<<<1024, 256>>>((const uint4 *)flush, flush_bytes / 16 - 1,
                                     (unsigned *)((char *)flush + flush_bytes - 16));
        cudaError_t e = cudaGetLastError();
        if (e == cudaSuccess)
            e = cudaEventRecord(a, 0);
        if (e != cudaSuccess) {
            st = ac_fail(err, AC_ERR_ENV, "bench flush/event failed: %s", cudaGetErrorString(e));
            break;
        }
        if ((st = launch()) != AC_OK)
            break;
        float t = 0.f;
        e = cudaEventRecord(b, 0);
        if (e == cudaSuccess)
            e = cudaEventSynchronize(b);
        if (e == cudaSuccess)
            e = cudaEventElapsedTime(&t, a, b);
        if (e != cudaSuccess)
            st = ac_fail(err, AC_ERR_ENV, "bench event timing failed: %s", cudaGetErrorString(e));
        ms->push_back(t);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return st;
}

// Placements a row is timed on: memory its process freed and allocated again read up to 12 points of
// the peak slower than the first allocation (PERF.md, "what placement is"), so each row is timed on
// allocations behind pads of 0, 66, 132, ... MiB and the table gives the first and the range.  --quick: one;
// ACD_DEC_BENCH_PLACEMENTS=N (1..16) overrides, ACD_DEC_BENCH_PAD_MIB=M (1..65536) sets the step.
int bd_placements(bool quick)
{
    const char *env = getenv("ACD_DEC_BENCH_PLACEMENTS");
    const int n = env ? atoi(env) : 0;
    return n >= 1 && n <= 16 ? n : quick ? 1 : 3;
}

// The pads' step: 66 MiB by default (not a power of two: each pad shifts K and V anew).
size_t bd_pad_step()
{
    const char *env = getenv("ACD_DEC_BENCH_PAD_MIB");
    const long mib = env ? atol(env) : 0;
    return (size_t)(mib >= 1 && mib <= 65536 ? mib : 66) << 20;
}

// What one placement of a row measured: the decode step's median ms and the plan's split count and merge,
// and the median ms of a plain read of the same K and V (bd_stream_read, timed alike).
struct bd_placement {
    double ms = 0.0, plain_ms = 0.0;
    int splits = 0;
    bool cluster = false;
};

// One placement of a row: its buffers allocated behind a pad of pad_bytes, the plan staged and timed, then
// the plain read of K and V (K alone for MLA) timed in the same buffers.
int bd_time_placement(const ac_problem &pr, ac_dtype t, bool mla, size_t pad_bytes, void *flush, size_t flush_bytes,
                      int reps, bd_placement *out, ac_err *err)
{
    void *pad = nullptr;
    bd_buffers x;
    int st = pad_bytes ? ac_dev_alloc(&pad, pad_bytes, err) : AC_OK;
    const size_t kv_elems = ac_kv_elems(&pr);
    if (st == AC_OK)
        st = bd_alloc_fill(&x.q, t, ac_q_elems(&pr), 1, err);
    if (st == AC_OK)
        st = bd_alloc_fill(&x.k, t, kv_elems, 2, err);
    if (st == AC_OK && !mla) // MLA: V is read from K's rows (fa.v = K)
        st = bd_alloc_fill(&x.v, t, kv_elems, 3, err);
    if (st == AC_OK)
        st = ac_dev_alloc(&x.o, ac_o_elems(&pr) * sizeof(__nv_bfloat16), err);
    if (st == AC_OK)
        st = ac_dev_alloc((void **)&x.lse, ac_lse_elems(&pr) * sizeof(float), err);
    acd_decode_plan plan;
    bool planned = false;
    if (st == AC_OK)
        planned = (st = acd_decode_prepare(&pr, t, ACD_MUT_NONE, mla, &plan, err)) == AC_OK;
    std::vector<float> ms, plain_ms;
    const ac_fwd_args fa = {x.q, x.k, mla ? x.k : x.v, x.o, x.lse, nullptr};
    auto decode_step = [&]() {
        if (!bd_split_only())
            return acd_decode_launch(plan, t, &fa, 0, err);
        return mla ? acd_dec_mla_launch_split(plan, t, &fa, 0, err) : acd_dec_launch_split(plan, t, &fa, 0, err);
    };
    const size_t kv_bytes = kv_elems * ac_dtype_size(t);
    auto plain_read = [&]() { // O is the sink (written only if the checksum hits a constant)
        return bd_launch_stream_read(x.k, kv_bytes, mla ? nullptr : x.v, mla ? 0 : kv_bytes, x.o, err);
    };
    if (st == AC_OK)
        st = bd_time(decode_step, flush, flush_bytes, reps, &ms, err);
    if (st == AC_OK)
        st = bd_time(plain_read, flush, flush_bytes, reps, &plain_ms, err);
    if (st == AC_OK)
        st = ac_dev_sync(err);
    if (st == AC_OK) {
        std::sort(ms.begin(), ms.end());
        std::sort(plain_ms.begin(), plain_ms.end());
        out->ms = ms[ms.size() / 2];
        out->plain_ms = plain_ms[plain_ms.size() / 2];
        out->splits = plan.d.splits;
        out->cluster = plan.d.cluster;
    }
    if (planned)
        acd_decode_release(&plan);
    bd_free(x);
    ac_dev_free(pad);
    return st;
}

// A row runs in a fresh copy of this process (ACD_DEC_BENCH_CHILD set there), unless
// ACD_DEC_BENCH_IN_PROCESS is set: memory the same process freed and allocated again read up to 12
// points slower for the same row than its first allocation (H200, PERF.md "what placement is"), and a
// serving engine allocates its cache once.
bool bd_child() { return getenv("ACD_DEC_BENCH_CHILD") != nullptr; }
bool bd_in_process() { return bd_child() || getenv("ACD_DEC_BENCH_IN_PROCESS") != nullptr; }

// This process's arguments (Linux: /proc/self/cmdline), for the copy that runs one row.
std::vector<std::string> bd_self_args()
{
    std::vector<std::string> args;
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f)
        return args;
    std::string cur;
    for (int c; (c = fgetc(f)) != EOF;) {
        if (c == 0) {
            args.push_back(cur);
            cur.clear();
        } else {
            cur.push_back((char)c);
        }
    }
    fclose(f);
    return args;
}

// The environment for the copy: ours without the bench's row selectors, then the row's.
std::vector<std::string> bd_child_env(const char *row, int mla_heads)
{
    std::vector<std::string> env;
    for (char **e = environ; *e; ++e)
        if (strncmp(*e, "ACD_DEC_BENCH_SHAPES=", 21) != 0 && strncmp(*e, "ACD_DEC_BENCH_MLA_HEADS=", 24) != 0)
            env.push_back(*e);
    env.push_back(std::string("ACD_DEC_BENCH_SHAPES=") + row);
    env.push_back("ACD_DEC_BENCH_CHILD=1");
    env.push_back("ACD_DEC_BENCH_MLA_HEADS=" + std::to_string(mla_heads));
    return env;
}

std::vector<char *> bd_cstrs(std::vector<std::string> &v)
{
    std::vector<char *> p;
    for (std::string &s : v)
        p.push_back(&s[0]);
    p.push_back(nullptr);
    return p;
}

// Starts a fresh copy of this process on row, its stdout into a pipe (its stderr shared): *pid, and
// *from the pipe's end to read.
int bd_spawn_row(const char *row, int mla_heads, pid_t *pid, int *from, ac_err *err)
{
    std::vector<std::string> args = bd_self_args(), env = bd_child_env(row, mla_heads);
    if (args.empty())
        return ac_fail(err, AC_ERR_ENV,
                       "bench: cannot read /proc/self/cmdline to run a row in a fresh process "
                       "(ACD_DEC_BENCH_IN_PROCESS=1 runs the rows here)");
    int out[2];
    if (pipe(out) != 0)
        return ac_fail(err, AC_ERR_ENV, "bench: pipe: %s", strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    std::vector<char *> argv = bd_cstrs(args), envp = bd_cstrs(env);
    fflush(stdout);
    const int sp = posix_spawn(pid, "/proc/self/exe", &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    if (sp != 0) {
        close(out[0]);
        return ac_fail(err, AC_ERR_ENV, "bench: cannot start a copy of itself for row %s: %s", row, strerror(sp));
    }
    *from = out[0];
    return AC_OK;
}

// The copy's table lines (those starting with '|') printed here, its other output dropped; closes from.
void bd_relay_table_lines(int from)
{
    FILE *f = fdopen(from, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (line[0] == '|')
            fputs(line, stdout);
    if (f)
        fclose(f);
    else
        close(from);
    fflush(stdout);
}

// Waits for the copy running row: an exit status but 0, or a signal, is a failure.
int bd_wait_row(pid_t pid, const char *row, ac_err *err)
{
    int status = 0;
    pid_t got;
    while ((got = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (got < 0) // status never filled: not a success
        return ac_fail(err, AC_ERR_ENV, "bench: cannot wait for the process running row %s: %s", row, strerror(errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return ac_fail(err, AC_ERR_ENV, "bench: the process running row %s failed (%s %d)", row,
                       WIFEXITED(status) ? "exit" : "signal",
                       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    return AC_OK;
}

// The row run by a fresh copy of this process: its table lines printed here, its failure ours.
int bd_row_fresh(int B, int nk, int page, int splits, int mla_heads, ac_err *err)
{
    char row[96];
    if (splits > 0)
        snprintf(row, sizeof row, "%d:%d:%d:%d", B, nk, page, splits);
    else // no hint: auto
        snprintf(row, sizeof row, "%d:%d:%d", B, nk, page);
    pid_t pid = 0;
    int from = -1;
    const int st = bd_spawn_row(row, mla_heads, &pid, &from, err);
    if (st != AC_OK)
        return st;
    bd_relay_table_lines(from);
    return bd_wait_row(pid, row, err);
}

// One row of the table (mla_heads > 0: cuda-decode-mla's, K alone read, with its TFLOP/s), in a fresh
// process unless bd_in_process(): the first placement's time, bandwidth and share of the peak (the
// fresh allocation), then the range of that share across all placements.
int bd_row(ac_dtype t, int B, int nk, int page, int splits, int mla_heads, double peak_gbs, void *flush,
           size_t flush_bytes, bool quick, ac_err *err)
{
    // K and V are sized twice, and need to be.  kv_need, here: in double from the row's numbers, before
    // anything is built, for a listed row may be absurd (its block table alone would not fit the host, and
    // num_pages = B * pages a sequence would overflow the problem's int).  kv_bytes, below: what is
    // allocated, whole pages (ac_kv_elems), which needs the problem built; the bandwidth and the room for
    // a placement count it.  They differ only for a listed Nk that is not a multiple of its page.
    const bool mla = mla_heads > 0;
    const double kv_need = (double)B * nk * ac_dtype_size(t) * (mla ? BD_MLA_D : 2.0 * BD_HKV * BD_D);
    size_t free_b = 0, total_b = 0;
    ACD_CHECK(err, cudaMemGetInfo(&free_b, &total_b));
    if (kv_need + (double)((size_t)512 << 20) > (double)free_b) {
        if (mla)
            printf("| %d ", mla_heads);
        printf("| %d | %d | %d | - | skipped: K and V need %.1f GiB | | | | |%s\n", page, B, nk, kv_need / 1073741824.0,
               mla ? " |" : "");
        return AC_OK;
    }
    if (!bd_in_process())
        return bd_row_fresh(B, nk, page, splits, mla_heads, err);
    std::vector<int> table, lens;
    ac_problem pr = bd_problem(B, nk, page, mla_heads, table, lens);
    pr.num_splits = splits; // 0: auto
    if (t == AC_E4M3)
        bd_make_fp8(pr);
    const size_t kv_bytes = (mla ? 1 : 2) * ac_kv_elems(&pr) * ac_dtype_size(t);
    const int reps = quick ? 5 : (kv_bytes > ((size_t)4 << 30) ? 10 : 30);
    std::vector<double> meds;
    bd_placement first;
    int st = AC_OK;
    for (int p = 0; p < bd_placements(quick) && st == AC_OK; ++p) {
        const size_t pad = p * bd_pad_step();
        if (p > 0 && kv_bytes + pad + ((size_t)512 << 20) > free_b)
            break; // no room for this pad: fewer placements
        bd_placement one;
        st = bd_time_placement(pr, t, mla, pad, flush, flush_bytes, reps, &one, err);
        if (st == AC_OK)
            meds.push_back(one.ms);
        if (st == AC_OK && p == 0)
            first = one;
    }
    if (st != AC_OK)
        return st;
    auto pct = [&](double ms) { return 100.0 * ((double)kv_bytes / (ms * 1e-3) / 1e9) / peak_gbs; };
    const double med = first.ms, gbs = (double)kv_bytes / (med * 1e-3) / 1e9; // the first: a fresh allocation
    char range[48] = "-";
    if (meds.size() > 1) { // the slowest placement's share first
        const auto fastest_slowest = std::minmax_element(meds.begin(), meds.end());
        snprintf(range, sizeof range, "%.1f-%.1f%% (%zu)", pct(*fastest_slowest.second), pct(*fastest_slowest.first),
                 meds.size());
    }
    char splits_cell[32]; // ", cluster": the split CTAs merged in clusters, no combine kernel
    snprintf(splits_cell, sizeof splits_cell, "%d%s", first.splits, first.cluster ? ", cluster" : "");
    if (mla)
        printf("| %d | %d | %d | %d | %s | %.4f | %.0f | %.1f%% | %s | %.1f%% | %.0f |\n", mla_heads, page, B, nk,
               splits_cell, med, gbs, 100.0 * gbs / peak_gbs, range, pct(first.plain_ms),
               2.0 * B * mla_heads * nk * (BD_MLA_D + BD_MLA_DV) / (med * 1e-3) / 1e12);
    else
        printf("| %d | %d | %d | %s | %.4f | %.0f | %.1f%% | %s | %.1f%% |\n", page, B, nk, splits_cell, med, gbs,
               100.0 * gbs / peak_gbs, range, pct(first.plain_ms));
    fflush(stdout);
    return AC_OK;
}

// The rows of a "B:Nk:page[:splits] ..." list (no splits: auto); a malformed entry is refused.
int bd_rows_listed(ac_dtype t, const char *list, int mla_heads, double peak_gbs, void *flush, size_t flush_bytes,
                   bool quick, ac_err *err)
{
    for (const char *c = list; *c;) {
        int B = 0, nk = 0, page = -1, splits = 0, used = 0;
        if (sscanf(c, " %d:%d:%d%n", &B, &nk, &page, &used) != 3 || B < 1 || nk < 1 || page < 0)
            return ac_fail(err, AC_ERR_INPUT, "ACD_DEC_BENCH_SHAPES: '%s' is not B:Nk:page[:splits] ...", c);
        c += used;
        if (*c == ':' && (sscanf(c, ":%d%n", &splits, &used) != 1 || splits < 1))
            return ac_fail(err, AC_ERR_INPUT, "ACD_DEC_BENCH_SHAPES: '%s': splits is not a positive count", c);
        if (*c == ':')
            c += used;
        const int st = bd_row(t, B, nk, page, splits, mla_heads, peak_gbs, flush, flush_bytes, quick, err);
        if (st != AC_OK)
            return st;
        while (*c == ' ' || *c == ',')
            c++;
    }
    return AC_OK;
}

// How many clusters of S split CTAs (bf16, d = 128) the device holds at once: a grid of S splits merges
// in clusters only when all of it fits (acd_decode_cluster_fits).
void bd_print_clusters()
{
    std::string line = "resident clusters of S split CTAs (S: count):";
    for (int S = 2; S <= ACD_DEC_MAX_CLUSTER; ++S) {
        int n = 0;
        ac_err err;
        if (acd_dec_split_max_clusters(AC_BF16, AC_BF16, 128, S, &n, &err) != AC_OK)
            return (void)printf("resident clusters: not known (%s)\n\n", err.msg);
        line += " " + std::to_string(S) + ": " + std::to_string(n);
    }
    printf("%s\n\n", line.c_str());
}

// The device's peak HBM bandwidth (GB/s) and L2 size, and the plain read's figure printed.
int bd_device(double *peak_gbs, int *l2_bytes, ac_err *err)
{
    int clock_khz = 0, bus_bits = 0;
    ACD_CHECK(err, cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0));
    ACD_CHECK(err, cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0));
    ACD_CHECK(err, cudaDeviceGetAttribute(l2_bytes, cudaDevAttrL2CacheSize, 0));
    *peak_gbs = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9; // double data rate
    printf("peak HBM %.0f GB/s (memory clock %d MHz, bus %d bits); %s, median, L2 flushed\n\n", *peak_gbs,
           clock_khz / 1000, bus_bits,
           bd_split_only() ? "the split kernel alone (ACD_DEC_BENCH_SPLIT_ONLY)"
                           : "split + combine kernels (splits \"S, cluster\": merged in the split kernel)");
    if (!bd_child())
        bd_print_clusters();
    const double stream = bd_child() ? 0.0 : bd_stream_gbs((size_t)*l2_bytes, err); // the parent prints it
    if (stream > 0)
        printf("A plain streaming read (16-byte loads, %.1f GiB) reaches %.0f GB/s, %.1f%% of that peak.\n\n",
               40.0 * *l2_bytes / 1073741824.0, stream, 100.0 * stream / *peak_gbs);
    return AC_OK;
}

// The table's rows: the listed ones (ACD_DEC_BENCH_SHAPES) or the standard grid, with the L2 flush
// buffer where they are timed (bd_in_process()); a parent whose rows run in fresh processes times none
// and leaves its memory to them (flush stays null there).
int bd_table(ac_dtype t, int mla_heads_first, bool quick, double peak_gbs, int l2_bytes, ac_err *err)
{
    const size_t flush_bytes = 2 * (size_t)l2_bytes;
    void *flush = nullptr;
    int st = bd_in_process() ? ac_dev_alloc(&flush, flush_bytes, err) : AC_OK;
    if (st == AC_OK && flush && cudaMemset(flush, 1, flush_bytes) != cudaSuccess) // once: the flush reads it
        st = ac_fail(err, AC_ERR_ENV, "bench: cudaMemset of the flush buffer failed");
    const char *only = getenv("ACD_DEC_BENCH_SHAPES"); // a developer's subset: "B:Nk:page ..." (page 0: contiguous)
    if (st == AC_OK && only && bd_child()) { // the one row a parent handed over, at its head count
        const char *heads = getenv("ACD_DEC_BENCH_MLA_HEADS");
        st = bd_rows_listed(t, only, heads ? atoi(heads) : 0, peak_gbs, flush, flush_bytes, quick, err);
    } else if (st == AC_OK && only) {
        st = bd_rows_listed(t, only, mla_heads_first, peak_gbs, flush, flush_bytes, quick, err);
    }
    if (st == AC_OK && only && !bd_child() && mla_heads_first > 16) // MLA: the listed rows at 16 query heads too
        st = bd_rows_listed(t, only, 16, peak_gbs, flush, flush_bytes, quick, err);
    if (mla_heads_first > 0) { // MLA: 16 and 128 query heads, pages of 64
        const int heads[] = {16, 128}, batches[] = {1, 8, 32, 128}, lengths[] = {1024, 4096, 16384, 65536};
        for (int h : heads)
            for (int B : batches)
                for (int nk : lengths)
                    if (st == AC_OK && !only && (!quick || (nk == 16384 && B == 32)))
                        st = bd_row(t, B, nk, 64, 0, h, peak_gbs, flush, flush_bytes, quick, err);
    } else {
        // Page 0: contiguous K/V, PyTorch's layout beside it (the kernel's own cost of paging is the difference).
        const int pages[] = {16, 128, 0}, batches[] = {1, 8, 32, 128}, lengths[] = {1024, 4096, 16384, 65536, 131072};
        for (int page : pages)
            for (int B : batches)
                for (int nk : lengths)
                    if (st == AC_OK && !only && (!quick || (nk == 16384 && (B == 1 || B == 32))))
                        st = bd_row(t, B, nk, page, 0, 0, peak_gbs, flush, flush_bytes, quick, err);
    }
    ac_dev_free(flush);
    return st;
}

} // namespace

extern "C" int acd_bench_decode(bool quick, bool fp8, ac_err *err)
{
    const ac_dtype t = fp8 ? AC_E4M3 : AC_BF16;
    printf("\n## %s: %s, d = %d, Hq = %d, Hkv = %d (GQA 8:1), Nq = 1, causal-br, paged (page 0: contiguous); ",
           fp8 ? "cuda-decode-fp8" : "cuda-decode", fp8 ? "e4m3 Q, K, V (descale per tensor), O bf16" : "bf16", BD_D,
           BD_HQ, BD_HKV);
    double peak_gbs = 0.0;
    int l2_bytes = 0, st = bd_device(&peak_gbs, &l2_bytes, err);
    if (st != AC_OK)
        return st;
    if (!bd_child()) // a row's process prints its row alone
        printf("| page | B | Nk | splits | ms | GB/s | %% of peak | %% across placements | plain read |\n"
               "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    return bd_table(t, 0, quick, peak_gbs, l2_bytes, err);
}

extern "C" int acd_bench_decode_mla(bool quick, ac_err *err)
{
    printf("\n## cuda-decode-mla: bf16, d = %d, d_v = %d (V read from K), Hkv = 1, Nq = 1, causal-br, pages of 64; "
           "bytes = the latent cache's; ACD_DEC_BENCH_SHAPES rows run at 128, then 16 query heads; ",
           BD_MLA_D, BD_MLA_DV);
    double peak_gbs = 0.0;
    int l2_bytes = 0, st = bd_device(&peak_gbs, &l2_bytes, err);
    if (st != AC_OK)
        return st;
    if (!bd_child())
        printf(
            "| Hq | page | B | Nk | splits | ms | GB/s | %% of peak | %% across placements | plain read | TFLOP/s |\n"
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    return bd_table(AC_BF16, 128, quick, peak_gbs, l2_bytes, err);
}
