// kernels/cuda/wgmma.cuh — Hopper's warpgroup tensor-core product (wgmma,
// sm_90a only) for flash_fwd_sm90.cu and flash_bwd_sm90.cu: shared-memory matrix
// descriptors over 128-byte-swizzled tiles, the m64nNk16 products it uses
// (N = 64, 128, and 32 for the backward's half query tiles at d_qk = 192; f16
// and bf16 in, f32 accumulate), and the fences around them.
//
// Tile layout (PTX ISA "matrix descriptor", CUTLASS's canonical SW128 atoms):
// a ROWS x D tile of 2-byte elements is stored as D/64 column blocks of
// ROWS x 64 elements, each row 128 bytes, the 16-byte chunk c of row r at
// chunk c ^ (r % 8).  Every block starts 1024-byte aligned, so the hardware's
// swizzle (address bits 4-6 ^= bits 7-9) and ours agree.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <type_traits>

#include "common.cuh"

// Byte offset of the 16-byte chunk `chunk` (8 elements) of row r in such a tile.
template <int ROWS> __device__ __forceinline__ uint32_t acd_sw128_offset(int r, int chunk)
{
    return (uint32_t)((chunk / 8) * (ROWS * 128) + r * 128 + (((chunk % 8) ^ (r % 8)) * 16));
}

// Descriptor of a swizzled operand at shared address addr.  K-major (Q, K):
// 8-row groups 1024 bytes apart (sbo); the k16 step is a 32-byte move of addr.
// MN-major (V, transposed): lbo = the distance between 64-element column blocks.
__device__ __forceinline__ uint64_t acd_wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) |
        (1ull << 62); // 128-byte swizzle
}

// The descriptor of the same operand `bytes` further on (16-byte multiples that
// stay inside shared memory: the address field cannot carry over).
__device__ __forceinline__ uint64_t acd_wg_desc_add(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// ROWS x D tile of a sequence into the swizzled layout of wgmma.cuh; rows >=
// limit are zero-filled, so padding and tails never reach the math.  Each
// thread copies one 16-byte chunk column, every NT / (D / 8)-th row: its
// addresses advance by constants (this loop was a third of the kernel's
// integer work when the compiler could not see that).
template <typename T, int ROWS, int D, int NT>
__device__ __forceinline__ void acd_load_tile_sw128_cols(uint32_t s, const T *g, long long ss, int row0, int limit,
                                                         int tid)
{
    constexpr int CPR = D / 8, kRowStep = NT / CPR;
    static_assert(NT % CPR == 0 && kRowStep % 8 == 0, "tile copy shape");
    const int chunk = tid % CPR, r0 = tid / CPR;
    const T *src = g + (long long)(row0 + r0) * ss + chunk * 8;
    const uint32_t dst = s + acd_sw128_offset<ROWS>(r0, chunk); // r % 8 == r0 % 8 for every row below
#pragma unroll
    for (int k = 0; k < (ROWS + kRowStep - 1) / kRowStep; ++k) {
        if (ROWS % kRowStep != 0 && r0 + k * kRowStep >= ROWS)
            break;
        const bool ok = row0 + r0 + k * kRowStep < limit;
        acd_cp_async16_to(dst + k * kRowStep * 128, ok ? src : g, ok);
        src += kRowStep * ss;
    }
}

// The same copy where a row's chunks do not divide the threads (d = 192: 24
// chunks, 256 threads): each thread walks the tile's chunks NT apart.
template <typename T, int ROWS, int D, int NT>
__device__ __forceinline__ void acd_load_tile_sw128(uint32_t s, const T *g, long long ss, int row0, int limit, int tid)
{
    constexpr int CPR = D / 8;
    if constexpr (NT % CPR != 0) {
        static_assert((ROWS * CPR) % NT == 0, "tile copy shape");
#pragma unroll
        for (int c = tid; c < ROWS * CPR; c += NT) {
            const int r = c / CPR, chunk = c % CPR;
            const bool ok = row0 + r < limit;
            acd_cp_async16_to(s + acd_sw128_offset<ROWS>(r, chunk), ok ? g + (long long)(row0 + r) * ss + chunk * 8 : g,
                              ok);
        }
    } else {
        acd_load_tile_sw128_cols<T, ROWS, D, NT>(s, g, ss, row0, limit, tid);
    }
}

// An accumulator tile as wgmma's register list: x[n][e] is register 4n + e.
template <int N> __device__ __forceinline__ float (&acd_wg_regs(float (&x)[N][4]))[4 * N]
{
    return reinterpret_cast<float(&)[4 * N]>(x);
}

__device__ __forceinline__ void acd_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void acd_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void acd_wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Ties accumulator registers to this point, so the compiler neither reads them
// before the wait that completes a product nor moves their writes past a fence.
template <int N> __device__ __forceinline__ void acd_wg_hold(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+f"(d[i])::"memory");
}
template <int N> __device__ __forceinline__ void acd_wg_hold(uint32_t (&a)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+r"(a[i])::"memory");
}
template <int N> __device__ __forceinline__ void acd_wg_hold(float (&d)[N][4]) { acd_wg_hold(acd_wg_regs(d)); }
template <int N> __device__ __forceinline__ void acd_wg_hold(uint32_t (&a)[N][4])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
        acd_wg_hold(a[i]);
}

#define ACD_WG_D8(o) \
    "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), \
        "+f"(d[o + 7])
#define ACD_WG_D16 ACD_WG_D8(0), ACD_WG_D8(8)
#define ACD_WG_D32 ACD_WG_D8(0), ACD_WG_D8(8), ACD_WG_D8(16), ACD_WG_D8(24)
#define ACD_WG_D64 ACD_WG_D32, ACD_WG_D8(32), ACD_WG_D8(40), ACD_WG_D8(48), ACD_WG_D8(56)
#define ACD_WG_R16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define ACD_WG_R32 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define ACD_WG_R64 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
// scale_d == 0 overwrites the accumulator (the first k step of S), else adds.
#define ACD_WG_PRED(i) "{\n.reg .pred p;\nsetp.ne.b32 p, %" #i ", 0;\n"

// D(64 x N) (+)= A(64 x 16) B(16 x N), A and B from shared memory, A K-major,
// B K-major or (TB) MN-major.
template <typename T, int N, bool TB = false> struct acd_wg_ss;
template <typename T, bool TB> struct acd_wg_ss<T, 32, TB> {
    static __device__ __forceinline__ void run(float (&acc)[4][4], uint64_t da, uint64_t db, int scale_d)
    {
        float(&d)[16] = acd_wg_regs(acc);
        if constexpr (std::is_same<T, __half>::value)
            asm volatile(ACD_WG_PRED(18) "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 " ACD_WG_R16
                                         ", %16, %17, p, 1, 1, 0, %19;\n}\n"
                         : ACD_WG_D16
                         : "l"(da), "l"(db), "r"(scale_d), "n"((int)TB));
        else
            asm volatile(ACD_WG_PRED(18) "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " ACD_WG_R16
                                         ", %16, %17, p, 1, 1, 0, %19;\n}\n"
                         : ACD_WG_D16
                         : "l"(da), "l"(db), "r"(scale_d), "n"((int)TB));
    }
};
template <typename T, bool TB> struct acd_wg_ss<T, 64, TB> {
    static __device__ __forceinline__ void run(float (&acc)[8][4], uint64_t da, uint64_t db, int scale_d)
    {
        float(&d)[32] = acd_wg_regs(acc);
        if constexpr (std::is_same<T, __half>::value)
            asm volatile(ACD_WG_PRED(34) "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " ACD_WG_R32
                                         ", %32, %33, p, 1, 1, 0, %35;\n}\n"
                         : ACD_WG_D32
                         : "l"(da), "l"(db), "r"(scale_d), "n"((int)TB));
        else
            asm volatile(ACD_WG_PRED(34) "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " ACD_WG_R32
                                         ", %32, %33, p, 1, 1, 0, %35;\n}\n"
                         : ACD_WG_D32
                         : "l"(da), "l"(db), "r"(scale_d), "n"((int)TB));
    }
};
template <typename T, bool TB> struct acd_wg_ss<T, 128, TB> {
    static __device__ __forceinline__ void run(float (&acc)[16][4], uint64_t da, uint64_t db, int scale_d)
    {
        float(&d)[64] = acd_wg_regs(acc);
        if constexpr (std::is_same<T, __half>::value)
            asm volatile(ACD_WG_PRED(66) "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " ACD_WG_R64
                                         ", %64, %65, p, 1, 1, 0, %67;\n}\n"
                         : ACD_WG_D64
                         : "l"(da), "l"(db), "r"(scale_d), "n"((int)TB));
        else
            asm volatile(ACD_WG_PRED(66) "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " ACD_WG_R64
                                         ", %64, %65, p, 1, 1, 0, %67;\n}\n"
                         : ACD_WG_D64
                         : "l"(da), "l"(db), "r"(scale_d), "n"((int)TB));
    }
};

// D(64 x N) += A(64 x 16) B(16 x N), A in registers (mma.sync's m16n8k16 A
// fragment, per warp), B MN-major in shared memory (the transposed flag).
template <typename T, int N> struct acd_wg_rs;
template <typename T> struct acd_wg_rs<T, 64> {
    static __device__ __forceinline__ void run(float (&acc)[8][4], const uint32_t (&a)[4], uint64_t db)
    {
        float(&d)[32] = acd_wg_regs(acc);
        if constexpr (std::is_same<T, __half>::value)
            asm volatile(ACD_WG_PRED(37) "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " ACD_WG_R32
                                         ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                         : ACD_WG_D32
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
        else
            asm volatile(ACD_WG_PRED(37) "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " ACD_WG_R32
                                         ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                         : ACD_WG_D32
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
    }
};
template <typename T> struct acd_wg_rs<T, 128> {
    static __device__ __forceinline__ void run(float (&acc)[16][4], const uint32_t (&a)[4], uint64_t db)
    {
        float(&d)[64] = acd_wg_regs(acc);
        if constexpr (std::is_same<T, __half>::value)
            asm volatile(ACD_WG_PRED(69) "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " ACD_WG_R64
                                         ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                         : ACD_WG_D64
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
        else
            asm volatile(ACD_WG_PRED(69) "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " ACD_WG_R64
                                         ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                         : ACD_WG_D64
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
    }
};
