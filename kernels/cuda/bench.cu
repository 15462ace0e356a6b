// kernels/cuda/bench.cu — `attncheck bench`: forward and backward TFLOP/s of
// cuda-flash (FLOPs 4 B H Nq Nk d forward, 2.5x that backward, halved for
// causal), optionally with variants (--variant), and fused vs naive time and
// peak device memory.  Times are medians
// of CUDA-event timings after warm-up, on random (never zero) inputs, with the
// L2 flushed before every timed run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "naive.cuh"

namespace
{

// Before each timed run a buffer twice the L2's size is written (as llm.c's
// dev/cuda does), outside the timed events: every run then reads its inputs
// from device memory, not from what the run before left in the L2 (the whole
// problem fits in the H100's 50 MiB L2 up to N = 2k at d = 64).
struct l2_flush {
    void *buf = nullptr;
    size_t bytes = 0;
};

int l2_flush_init(l2_flush *f, int l2_bytes, ac_err *err)
{
    f->bytes = 2 * (size_t)l2_bytes;
    return ac_dev_alloc(&f->buf, f->bytes, err);
}

int l2_flush_run(const l2_flush &f, ac_err *err)
{
    ACD_CHECK(err, cudaMemsetAsync(f.buf, 0, f.bytes, 0));
    return AC_OK;
}

// --variant LIST (comma-separated: softcap=C, alibi, sinks, dv=N): the speed
// table's problems use these variants, for their cost against a run without.
// dv=N (d_v, at most the d of --d): O, dO, V and dV have N columns, as MLA's
// 192/128 (`--d 192 --variant dv=128`).
struct bench_variants {
    double softcap = 0.0;
    bool alibi = false, sinks = false;
    int dv = 0; // 0: d
};

struct bench_opts {
    bool quick = false;
    int reps = 10;
    int only_d = 0; // --d N
    int only_dtype = -1; // --dtype f16|bf16
    int only_n = 0; // --n N
    bench_variants var;
    l2_flush flush;
};

// "softcap=30,alibi,sinks" into v; false naming nothing it knows.
bool parse_variants(const char *list, bench_variants *v)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = nullptr, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(nullptr, ",", &save)) {
        if (!strncmp(tok, "softcap=", 8)) {
            char *end = nullptr;
            v->softcap = strtod(tok + 8, &end);
            if (*end || !(v->softcap > 0.0))
                return false;
        } else if (!strcmp(tok, "alibi")) {
            v->alibi = true;
        } else if (!strcmp(tok, "sinks")) {
            v->sinks = true;
        } else if (!strncmp(tok, "dv=", 3)) {
            char *end = nullptr;
            const long dv = strtol(tok + 3, &end, 10);
            if (*end || dv < 1 || dv > 256)
                return false;
            v->dv = (int)dv;
        } else {
            return false;
        }
    }
    return true;
}

// The variants' host arrays for H heads (acd_stage copies them): ALiBi's
// geometric slopes 2^(-8 (h + 1) / H), sinks 1 + h / H.
struct variant_arrays {
    std::vector<float> slopes, sinks;
};
void apply_variants(const bench_variants &v, int H, ac_problem *pr, variant_arrays *arr)
{
    pr->softcap = v.softcap;
    pr->head_dim_v = v.dv;
    if (v.alibi) {
        arr->slopes.resize(H);
        for (int h = 0; h < H; ++h)
            arr->slopes[h] = powf(2.f, -8.f * (h + 1) / H);
        pr->alibi_slopes = arr->slopes.data();
        pr->alibi_batch = 1;
    }
    if (v.sinks) {
        arr->sinks.resize(H);
        for (int h = 0; h < H; ++h)
            arr->sinks[h] = 1.f + (float)h / H;
        pr->sinks = arr->sinks.data();
    }
}

template <typename T> __device__ T cvt(float x);
template <> __device__ __half cvt<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __nv_bfloat16 cvt<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Hash-based values in about (-2, 2): sums of uniforms, deterministic.
template <typename T> __global__ void fill_random(T *x, size_t n, unsigned seed)
{
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)k * 2654435761u ^ seed;
        float s = 0.f;
        for (int r = 0; r < 4; ++r) {
            h ^= h >> 16;
            h *= 0x7feb352du;
            h ^= h >> 15;
            h *= 0x846ca68bu;
            h ^= h >> 16;
            s += (h & 0xffffff) * (1.f / 16777216.f) - 0.5f;
        }
        x[k] = cvt<T>(s);
    }
}

int fill(ac_dtype t, void *x, size_t n, unsigned seed, ac_err *err)
{
    if (t == AC_F16)
        fill_random<__half><<<1024, 256>>>((__half *)x, n, seed);
    else
        fill_random<__nv_bfloat16><<<1024, 256>>>((__nv_bfloat16 *)x, n, seed);
    ACD_CHECK_LAUNCH(err, "fill_random");
    return AC_OK;
}

struct tensors {
    void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *d_o = nullptr, *dq = nullptr, *dk = nullptr,
         *dv = nullptr;
    float *lse = nullptr;
    size_t q_bytes = 0, kv_bytes = 0;
};

void free_tensors(tensors &x)
{
    for (void *p : {x.q, x.k, x.v, x.o, x.d_o, x.dq, x.dk, x.dv, (void *)x.lse})
        ac_dev_free(p);
    x = tensors{};
}

int alloc_tensors(const ac_problem &pr, ac_dtype t, bool backward, tensors &x, ac_err *err)
{
    const size_t es = ac_dtype_size(t);
    x.q_bytes = ac_q_elems(&pr) * es;
    x.kv_bytes = ac_kv_elems(&pr) * es;
    int st = AC_OK;
    void **q_like[] = {&x.q, &x.o, &x.d_o, &x.dq}, **kv_like[] = {&x.k, &x.v, &x.dk, &x.dv};
    for (int i = 0; i < 4 && st == AC_OK; ++i) {
        if (i >= 2 && !backward)
            break;
        st = ac_dev_alloc(q_like[i], x.q_bytes, err);
        if (st == AC_OK)
            st = ac_dev_alloc(kv_like[i], x.kv_bytes, err);
    }
    if (st == AC_OK)
        st = ac_dev_alloc((void **)&x.lse, ac_lse_elems(&pr) * sizeof(float), err);
    if (st == AC_OK)
        st = fill(t, x.q, ac_q_elems(&pr), 1, err);
    if (st == AC_OK)
        st = fill(t, x.k, ac_kv_elems(&pr), 2, err);
    if (st == AC_OK)
        st = fill(t, x.v, ac_kv_elems(&pr), 3, err);
    if (st == AC_OK && backward)
        st = fill(t, x.d_o, ac_q_elems(&pr), 4, err);
    if (st != AC_OK)
        free_tensors(x);
    return st;
}

// Milliseconds of one run of fn between the events a and b, the L2 flushed first.
template <typename F> int time_one(const l2_flush &flush, cudaEvent_t a, cudaEvent_t b, F fn, float *ms, ac_err *err)
{
    int st = l2_flush_run(flush, err);
    if (st != AC_OK)
        return st;
    ACD_CHECK(err, cudaEventRecord(a));
    if ((st = fn()) != AC_OK)
        return st;
    ACD_CHECK(err, cudaEventRecord(b));
    ACD_CHECK(err, cudaEventSynchronize(b));
    ACD_CHECK(err, cudaEventElapsedTime(ms, a, b));
    return AC_OK;
}

// Median milliseconds of o.reps runs of fn (after one warm-up run).
template <typename F> int time_median(const bench_opts &o, F fn, double *ms, ac_err *err)
{
    cudaEvent_t a = nullptr, b = nullptr;
    ACD_CHECK(err, cudaEventCreate(&a));
    cudaError_t e = cudaEventCreate(&b);
    int st = e == cudaSuccess ? fn() : ac_fail(err, AC_ERR_ENV, "cudaEventCreate failed: %s", cudaGetErrorString(e));
    std::vector<float> times;
    for (int r = 0; r < o.reps && st == AC_OK; ++r) {
        float t = 0.f;
        if ((st = time_one(o.flush, a, b, fn, &t, err)) == AC_OK)
            times.push_back(t);
    }
    // The events go whatever happened; a failure to destroy them matters only after a clean run.
    const cudaError_t ea = cudaEventDestroy(a), eb = b ? cudaEventDestroy(b) : cudaSuccess;
    if (st != AC_OK)
        return st;
    if (ea != cudaSuccess || eb != cudaSuccess)
        return ac_fail(err, AC_ERR_ENV, "cudaEventDestroy failed: %s", cudaGetErrorString(ea != cudaSuccess ? ea : eb));
    std::sort(times.begin(), times.end());
    *ms = times[times.size() / 2];
    return AC_OK;
}

ac_problem make_problem(int B, int H, int N, int d, bool causal)
{
    ac_problem pr = ac_problem_dense(B, H, H, N, N, d);
    if (causal) {
        pr.windowed = true;
        pr.window_left = AC_WINDOW_INF;
        pr.window_right = 0;
        pr.align = AC_ALIGN_TOP_LEFT;
    }
    return pr;
}

int bench_speed(const bench_opts &o, ac_err *err)
{
    printf("\n## cuda-flash TFLOP/s (B = 16384/N, H = 2048/d, FLOPs 2BHN^2(d + d_v) fwd, 2.5x bwd, /2 causal)\n");
    if (o.var.softcap > 0.0 || o.var.alibi || o.var.sinks || o.var.dv)
        printf("# variants: softcap %g, alibi %s, sinks %s, d_v %d\n", o.var.softcap, o.var.alibi ? "on" : "off",
               o.var.sinks ? "on" : "off", o.var.dv);
    printf("%-4s %-5s %4s %6s %6s %3s %3s %10s %9s\n", "dir", "dtype", "d", "causal", "N", "B", "H", "ms", "TFLOP/s");
    const ac_dtype dts[] = {AC_F16, AC_BF16};
    // --d picks any head dim (192 for MLA); the table's own are 64 and 128.
    const std::vector<int> dims = o.only_d ? std::vector<int>{o.only_d} : std::vector<int>{64, 128};
    for (ac_dtype t : dts)
        for (int d : dims)
            for (int causal = 0; causal < 2; ++causal)
                for (int N = 512; N <= 16384; N *= 2) {
                    if (o.quick && N != 1024 && N != 8192)
                        continue;
                    if ((o.only_d && d != o.only_d) || (o.only_dtype >= 0 && (int)t != o.only_dtype))
                        continue;
                    if (o.only_n && N != o.only_n)
                        continue;
                    if (o.var.dv > d) // O, dO, V, dV are allocated d wide
                        continue;
                    const int B = 16384 / N, H = 2048 / d;
                    ac_problem pr = make_problem(B, H, N, d, causal);
                    variant_arrays arr;
                    apply_variants(o.var, H, &pr, &arr);
                    acd_params p;
                    acd_staged st;
                    int s = acd_stage(&pr, ACD_MUT_NONE, &p, &st, err);
                    if (s != AC_OK)
                        return s;
                    tensors x;
                    if ((s = alloc_tensors(pr, t, true, x, err)) != AC_OK)
                        return s;
                    void *ws = nullptr, *dsink = nullptr;
                    const size_t ws_bytes = acd_bwd_workspace_bytes(p);
                    if ((s = ac_dev_alloc(&ws, ws_bytes, err)) != AC_OK)
                        return s;
                    if (pr.sinks && (s = ac_dev_alloc(&dsink, sizeof(float) * H, err)) != AC_OK)
                        return s;
                    ac_fwd_args fa = {x.q, x.k, x.v, x.o, x.lse, NULL}; /* no dropout mask */
                    ac_bwd_args ba = {x.q, x.k, x.v, x.o, x.d_o, x.lse, x.dq, x.dk, x.dv, (float *)dsink,
                                      NULL}; /* no dbias */
                    const int dv = o.var.dv ? o.var.dv : d;
                    double flops = 2.0 * B * H * (double)N * N * (d + dv) * (causal ? 0.5 : 1.0), ms_f = 0, ms_b = 0;
                    s = time_median(
                        o, [&] { return acd_flash_forward_async(p, t, &fa, 0, err); }, &ms_f, err);
                    if (s == AC_OK)
                        s = time_median(
                            o, [&] { return acd_flash_backward_async(p, t, &ba, ws, 0, err); }, &ms_b, err);
                    if (s == AC_OK)
                        s = ac_dev_sync(err);
                    ac_dev_free(ws);
                    ac_dev_free(dsink);
                    free_tensors(x);
                    acd_unstage(&st);
                    if (s != AC_OK)
                        return s;
                    printf("%-4s %-5s %4d %6d %6d %3d %3d %10.3f %9.1f\n", "fwd", ac_dtype_name(t), d, causal, N, B, H,
                           ms_f, flops / ms_f * 1e-9);
                    printf("%-4s %-5s %4d %6d %6d %3d %3d %10.3f %9.1f\n", "bwd", ac_dtype_name(t), d, causal, N, B, H,
                           ms_b, 2.5 * flops / ms_b * 1e-9);
                    fflush(stdout);
                }
    return AC_OK;
}

// Fused vs naive forward, f16, d = 128, B = 1, H = 16: time and peak device
// memory (inputs + outputs + the kernel's own workspace, by our accounting,
// and the cudaMemGetInfo drop while the workspace is held).
int bench_memory(const bench_opts &o, ac_err *err)
{
    printf("\n## fused vs naive forward (f16, d=128, B=1, H=16, no mask)\n");
    printf("%-6s %12s %12s %8s %14s %14s %8s\n", "N", "fused ms", "naive ms", "speedup", "fused MiB", "naive MiB",
           "ratio");
    const ac_dtype t = AC_F16;
    for (int N = 1024; N <= 16384; N *= 2) {
        if (o.quick && N > 8192)
            continue;
        ac_problem pr = make_problem(1, 16, N, 128, false);
        acd_params p;
        acd_staged st;
        int s = acd_stage(&pr, ACD_MUT_NONE, &p, &st, err);
        if (s != AC_OK)
            return s;
        tensors x;
        if ((s = alloc_tensors(pr, t, false, x, err)) != AC_OK)
            return s;
        ac_fwd_args fa = {x.q, x.k, x.v, x.o, x.lse, NULL}; /* no dropout mask */
        const double io_bytes = 2.0 * x.q_bytes + 2.0 * x.kv_bytes + ac_lse_elems(&pr) * 4.0;
        double ms_f = 0, ms_n = 0;
        s = time_median(
            o, [&] { return acd_flash_forward_async(p, t, &fa, 0, err); }, &ms_f, err);
        acd_naive_ws w;
        size_t free0 = 0, free1 = 0, total = 0;
        if (s == AC_OK)
            s = cudaMemGetInfo(&free0, &total) == cudaSuccess ? AC_OK
                                                              : ac_fail(err, AC_ERR_ENV, "cudaMemGetInfo failed");
        if (s == AC_OK)
            s = acd_naive_prepare(p, t, &fa, &w, err);
        if (s == AC_OK) {
            if (cudaMemGetInfo(&free1, &total) != cudaSuccess)
                s = ac_fail(err, AC_ERR_ENV, "cudaMemGetInfo failed");
            if (s == AC_OK)
                s = time_median(
                    o, [&] { return acd_naive_run(p, &pr, t, &fa, &w, 0, err); }, &ms_n, err);
            const double naive_ws = (double)(w.s_bytes + w.p_bytes + w.ptr_bytes);
            acd_naive_release(&w);
            if (s == AC_OK)
                s = ac_dev_sync(err);
            if (s == AC_OK) {
                const double mib = 1024.0 * 1024.0, fused = io_bytes,
                             naive = io_bytes + std::max(naive_ws, (double)(free0 - free1));
                printf("%-6d %12.3f %12.3f %8.1f %14.1f %14.1f %8.1f\n", N, ms_f, ms_n, ms_n / ms_f, fused / mib,
                       naive / mib, naive / fused);
            }
        } else if (s == AC_ERR_ENV) {
            printf("%-6d %12.3f %12s   (naive: %s)\n", N, ms_f, "OOM", err->msg);
            (void)cudaGetLastError();
            s = AC_OK;
        }
        free_tensors(x);
        acd_unstage(&st);
        if (s != AC_OK)
            return s;
        fflush(stdout);
    }
    return AC_OK;
}

} // namespace

extern "C" int ac_cuda_bench(int argc, char **argv)
{
    bench_opts o;
    bool speed = true, memory = true, fp8 = false, decode = false, mla = false;
    for (int i = 0; i < argc; ++i) {
        if (!strcmp(argv[i], "--quick"))
            o.quick = true, o.reps = 3;
        else if (!strcmp(argv[i], "--speed-only"))
            memory = false;
        else if (!strcmp(argv[i], "--memory-only"))
            speed = false;
        else if (!strcmp(argv[i], "bench"))
            continue;
        else if (!strcmp(argv[i], "--fp8")) // only the fp8 rows (bench_fp8.cu)
            fp8 = true;
        else if (!strcmp(argv[i], "--decode")) // only cuda-decode's bandwidth table (bench_decode.cu)
            decode = true;
        else if (!strcmp(argv[i], "--mla")) // with --decode: cuda-decode-mla's table
            mla = true;
        else if (!strcmp(argv[i], "--d") && i + 1 < argc)
            o.only_d = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--n") && i + 1 < argc)
            o.only_n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--variant") && i + 1 < argc) {
            if (!parse_variants(argv[++i], &o.var)) {
                fprintf(stderr, "attncheck bench: unknown --variant '%s' (a list of softcap=C, alibi, sinks, dv=N)\n",
                        argv[i]);
                return AC_ERR_INPUT;
            }
        } else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            ac_dtype t;
            ++i;
            if (ac_dtype_parse(argv[i], &t) != AC_OK) {
                fprintf(stderr, "attncheck bench: unknown dtype '%s' (f16, bf16)\n", argv[i]);
                return AC_ERR_INPUT;
            }
            o.only_dtype = (int)t;
        } else {
            fprintf(
                stderr,
                "attncheck bench: unknown option '%s' (--quick, --speed-only, --memory-only, --d N, --dtype T, --n N, "
                "--variant softcap=C,alibi,sinks,dv=N, --fp8, --decode, --decode --mla)\n",
                argv[i]);
            return AC_ERR_INPUT;
        }
    }
    if (mla && !decode) {
        fprintf(stderr, "attncheck bench: --mla goes with --decode (cuda-decode-mla's table)\n");
        return AC_ERR_INPUT;
    }
    ac_err err;
    if (!ac_cuda_present(&err)) {
        fprintf(stderr, "attncheck bench: %s\n", err.msg);
        return AC_ERR_ENV;
    }
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, 0);
    if (e != cudaSuccess) {
        fprintf(stderr, "attncheck bench: cudaGetDeviceProperties failed: %s\n", cudaGetErrorString(e));
        return AC_ERR_ENV;
    }
    printf("# attncheck bench v1 on %s (sm_%d%d, %d SMs; L2 %d MiB, flushed before each timed run)\n", prop.name,
           prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    if (fp8 || decode) {
        // --decode --fp8: cuda-decode-fp8's table (an e4m3 KV cache); --fp8 alone: the fp8 forward's rows
        const int s = decode && mla ? acd_bench_decode_mla(o.quick, &err)
            : decode                ? acd_bench_decode(o.quick, fp8, &err)
                                    : acd_bench_fp8(o.quick, &err);
        if (s != AC_OK)
            fprintf(stderr, "attncheck bench: %s\n", err.msg);
        return s;
    }
    int s = l2_flush_init(&o.flush, prop.l2CacheSize, &err);
    if (s == AC_OK && speed)
        s = bench_speed(o, &err);
    if (s == AC_OK && memory)
        s = bench_memory(o, &err);
    ac_dev_free(o.flush.buf);
    if (s != AC_OK)
        fprintf(stderr, "attncheck bench: %s\n", err.msg);
    return s;
}
