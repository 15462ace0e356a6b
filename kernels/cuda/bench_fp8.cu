// kernels/cuda/bench_fp8.cu — `attncheck bench --fp8`: cuda-flash-fp8's forward
// TFLOP/s beside cuda-flash's bf16 forward on the same shapes (d = 128, N = 4k,
// 8k, 16k, B = 16384/N, H = 2048/d, no mask), and their ratio (issue 17's goal:
// >= 1.5x); then d = 64 (the same) and d = 256 (fp8 alone: cuda-flash has no
// tensor-core tile for d = d_v = 256, its CUDA-core forward is no peer).  Each
// timed run is the whole entry point (acd_flash_fp8_forward, acd_flash_forward:
// staging, launch, sync), median of 5 after a warm-up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common.cuh"

namespace
{

// Random codes: e4m3 magnitudes in [0.5, 2) (never the NaN code), or bf16 values of similar size.
void host_fill(ac_dtype t, std::vector<uint8_t> &buf, size_t n, uint32_t seed)
{
    buf.resize(n * ac_dtype_size(t));
    uint32_t s = seed * 2654435761u + 1;
    for (size_t x = 0; x < n; ++x) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        if (t == AC_BF16) {
            const uint16_t v = (uint16_t)(0x3800 + (s & 0x07ff)) | (uint16_t)((s >> 16) & 0x8000);
            buf[2 * x] = (uint8_t)v, buf[2 * x + 1] = (uint8_t)(v >> 8);
        } else {
            buf[x] = (uint8_t)(((s >> 8) & 0x80) | (0x30 + (s & 0x0f))); // exponent field 6, 7: [0.5, 2)
        }
    }
}

struct bench_bufs {
    void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
    float *lse = nullptr;
};

void free_bufs(bench_bufs &b)
{
    ac_dev_free(b.q), ac_dev_free(b.k), ac_dev_free(b.v), ac_dev_free(b.o), ac_dev_free(b.lse);
    b = bench_bufs{};
}

int make_bufs(const ac_problem &pr, ac_dtype t, ac_dtype out, bench_bufs &b, ac_err *err)
{
    const size_t n = ac_q_elems(&pr);
    std::vector<uint8_t> host;
    void **in[] = {&b.q, &b.k, &b.v};
    for (int x = 0; x < 3; ++x) {
        host_fill(t, host, n, (uint32_t)x + 1);
        int st = ac_dev_alloc(in[x], host.size(), err);
        if (st == AC_OK)
            st = ac_dev_upload(*in[x], host.data(), host.size(), err);
        if (st != AC_OK)
            return st;
    }
    int st = ac_dev_alloc(&b.o, n * ac_dtype_size(out), err);
    return st == AC_OK ? ac_dev_alloc((void **)&b.lse, ac_lse_elems(&pr) * sizeof(float), err) : st;
}

template <typename F> int median_ms(F fn, double *ms)
{
    int st = fn(); // warm-up
    std::vector<double> t;
    for (int r = 0; r < 5 && st == AC_OK; ++r) {
        const auto a = std::chrono::steady_clock::now();
        st = fn();
        t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
    }
    if (st == AC_OK) {
        std::sort(t.begin(), t.end());
        *ms = t[t.size() / 2];
    }
    return st;
}

int bench_one(int d, int N, ac_err *err)
{
    const int B = 16384 / N, H = 2048 / d;
    const bool peer = acd_tc_head_dims(d, d); // a bf16 tensor-core forward to compare with
    ac_problem pr = ac_problem_dense(B, H, H, N, N, d);
    const double flops = 4.0 * B * H * (double)N * N * d;
    double ms_bf16 = 0.0, ms_fp8 = 0.0;
    bench_bufs b;
    int st = peer ? make_bufs(pr, AC_BF16, AC_BF16, b, err) : AC_OK;
    if (st == AC_OK && peer) {
        const ac_fwd_args fa = {b.q, b.k, b.v, b.o, b.lse, nullptr};
        st = median_ms([&] { return acd_flash_forward(&pr, AC_BF16, &fa, ACD_MUT_NONE, err); }, &ms_bf16);
    }
    free_bufs(b);
    const float one = 1.0f;
    ac_problem p8 = pr;
    p8.fp8_out = AC_BF16;
    p8.fp8_p = AC_E4M3;
    p8.descale_rows = AC_DESCALE_TENSOR;
    p8.descale_q = p8.descale_k = p8.descale_v = &one;
    if (st == AC_OK)
        st = make_bufs(p8, AC_E4M3, AC_BF16, b, err);
    if (st == AC_OK) {
        const ac_fwd_args fa = {b.q, b.k, b.v, b.o, b.lse, nullptr};
        st = median_ms([&] { return acd_flash_fp8_forward(&p8, AC_E4M3, &fa, ACD_MUT_NONE, err); }, &ms_fp8);
    }
    free_bufs(b);
    if (st != AC_OK)
        return st;
    const double tf_fp8 = flops / ms_fp8 * 1e-9;
    if (peer) {
        const double tf_bf16 = flops / ms_bf16 * 1e-9;
        printf("%4d %6d %3d %3d %12.3f %12.1f %12.3f %12.1f %8.2fx\n", d, N, B, H, ms_bf16, tf_bf16, ms_fp8, tf_fp8,
               tf_fp8 / tf_bf16);
    } else {
        printf("%4d %6d %3d %3d %12s %12s %12.3f %12.1f %9s\n", d, N, B, H, "-", "-", ms_fp8, tf_fp8, "-");
    }
    fflush(stdout);
    return AC_OK;
}

} // namespace

extern "C" int acd_bench_fp8(bool quick, ac_err *err)
{
    printf("\n## cuda-flash-fp8 (e4m3, descale per tensor, O bf16) vs cuda-flash bf16 forward TFLOP/s "
           "(B = 16384/N, H = 2048/d, no mask, FLOPs 4BHN^2d; whole entry point, median of 5)\n");
    printf("%4s %6s %3s %3s %12s %12s %12s %12s %9s\n", "d", "N", "B", "H", "bf16 ms", "bf16 TF/s", "fp8 ms",
           "fp8 TF/s", "fp8/bf16");
    for (int d : {128, 64, 256})
        for (int N = 4096; N <= 16384; N *= 2) {
            if (quick && N != 8192)
                continue;
            const int st = bench_one(d, N, err);
            if (st != AC_OK)
                return st;
        }
    return AC_OK;
}
