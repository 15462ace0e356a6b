// kernels/cuda/copy_patterns.cu — attncheck-copy-patterns: how fast cuda-decode's
// access pattern can be read, copies only, by each way of moving the bytes
// (issue 16; kernels/cuda/PERF.md, "the shared row pitch").
//
// The pattern is bench --decode's: bf16 K and V, d = 128, Hkv = 4, one CTA per
// (sequence, KV head, split) streaming its keys [k0, k1) (the split kernel's
// 64-key units dealt over S splits), from a paged cache (pages, P, Hkv, d)
// through a shuffled block table or from contiguous (B, Hkv, Nk, d).  No math:
// each variant reads every byte of K and V once, XORs it into a checksum, and
// the checksum must equal the plain read's (every 16-byte chunk read once), or
// the row says WRONG BYTES.  The variants, simplest first:
//   1. plain: a grid-stride streaming read of K, then V (the practical ceiling);
//   2. cp.async rings, cuda-decode's pipeline: each of 4 warps takes every 4th
//      16-key tile through its own 2-stage ring of 16-byte cp.async copies, 2
//      CTAs an SM; with 3 stages, or 3 CTAs an SM; with the shared rows padded
//      by 16 bytes (cuda-decode's layout until session 7), or packed and
//      XOR-swizzled (its layout since); "as decode" adds the kernel's zero-fill
//      copy form and stand-ins for its prologue (the sequence length read first,
//      Q's 4 KB by cp.async behind a barrier) and epilogue (8 KB of f32
//      partials written behind two barriers); "all heads a CTA" takes a CTA per
//      (sequence, split) whose warp w reads head w (4 times the splits); "two heads
//      a CTA" a CTA per (sequence, pair of heads, split) whose tiles hold 8 slots of
//      both heads, a slot's two heads side by side (twice the splits: the copies of
//      cuda-decode's two-KV-head CTA, designed in PERF.md and not built);
//   3. loads into registers, then stores to shared memory, 16 warps a CTA;
//   4. TMA tile copies (cp.async.bulk.tensor, one producer lane, 4 consumer
//      warps, an mbarrier pair a stage): 64-key tiles in 2 stages, 32-key in 4.
// Each time is the median of CUDA-event timings after a warm-up, the L2 flushed
// (a 256 MB read) before every run; the variants alternate within each repeat.
//
//   attncheck-copy-patterns          all rows in this process (shared buffers)
//   attncheck-copy-patterns ROW      row ROW (0-9) alone, its buffers sized exactly
//                                    (run each row in a fresh process, as bench --decode)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <cuda_runtime.h>
#include <string>
#include <vector>

#define CP_CHECK(x) \
    do { \
        const cudaError_t e_ = (x); \
        if (e_ != cudaSuccess) { \
            fprintf(stderr, "attncheck-copy-patterns: %s:%d: %s: %s\n", __FILE__, __LINE__, #x, \
                    cudaGetErrorString(e_)); \
            exit(1); \
        } \
    } while (0)

namespace
{

constexpr int kD = 128, kHkv = 4, kRowBytes = kD * 2;

// A row of the table: the batch, keys a sequence, splits, page size (0: contiguous).
struct cp_shape {
    int B, N, S, P;
};
const cp_shape kShapes[] = {{8, 16384, 8, 16},   {8, 16384, 8, 0},   {8, 16384, 8, 128},  {8, 65536, 8, 16},
                            {32, 16384, 2, 16},  {32, 65536, 2, 16}, {128, 16384, 1, 16}, {128, 16384, 1, 0},
                            {1, 131072, 61, 16}, {128, 65536, 1, 16}};

// What a CTA reads and where: the shape, the table (null: contiguous), the prologue's and epilogue's buffers.
struct cp_geo {
    int B, N, S, P, pages_per_seq;
    const int *table, *lens;
    const uint16_t *q;
    float *o;
};

__device__ __forceinline__ void cp_split_range(const cp_geo &g, int s, int &k0, int &k1)
{
    const int units = (g.N + 63) / 64, per = (units + g.S - 1) / g.S;
    k0 = min(s * per * 64, g.N);
    k1 = min(k0 + per * 64, g.N);
}

// The CTA's (sequence, KV head, split), split fastest, as cuda-decode's grid.
__device__ __forceinline__ void cp_item(const cp_geo &g, int &b, int &hk, int &s)
{
    s = blockIdx.x % g.S;
    hk = (blockIdx.x / g.S) % kHkv;
    b = blockIdx.x / (g.S * kHkv);
}

// Element offset of key j's row (sequence b, head hk); consecutive keys of a 16-key tile are row_step apart.
__device__ __forceinline__ long long cp_row_off(const cp_geo &g, int b, int hk, int j)
{
    if (!g.table)
        return (((long long)b * kHkv + hk) * g.N + j) * kD;
    const int page = __ldg(g.table + (long long)b * g.pages_per_seq + j / g.P);
    return ((long long)page * g.P + j % g.P) * kHkv * kD + hk * kD;
}
__device__ __forceinline__ long long cp_row_step(const cp_geo &g) { return g.table ? (long long)kHkv * kD : kD; }

__device__ __forceinline__ uint32_t cp_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ unsigned cp_xor(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

// ---- 1. the plain read ----
__global__ void cp_plain(const uint4 *k, const uint4 *v, size_t n, unsigned *sum)
{
    unsigned acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (int h = 0; h < 2; ++h) {
        const uint4 *buf = h ? v : k;
        size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
        for (; x + 3 * stride < n; x += 4 * stride)
            acc ^= cp_xor(buf[x]) ^ cp_xor(buf[x + stride]) ^ cp_xor(buf[x + 2 * stride]) ^ cp_xor(buf[x + 3 * stride]);
        for (; x < n; x += stride)
            acc ^= cp_xor(buf[x]);
    }
    atomicXor(sum, acc);
}

// ---- 2. cp.async rings a warp ----
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool zfill_form)
{
    if (zfill_form) // cuda-decode's form: a source size operand (16: nothing zero-filled)
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(16));
    else
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

// ST stages a warp; PITCH 16-byte chunks a shared row (16 packed, 17 padded); SWZ: chunk c of row r at
// c ^ (r % 8); DEC: cuda-decode's copy form, prologue and epilogue (see the header).  HEADS: a CTA
// per (sequence, split) and warp w reads head w, every tile of the range (4 times the splits, the
// same bytes a CTA): the 4 warps read the 4 heads' slices of each page together, 4 KB apart.
// PAIRS: a CTA per (sequence, pair of heads, split) (twice the splits, the same bytes a CTA), a tile
// 8 slots of both heads: the lane's rows row0 + 2r are slot r of head 2 pair + row0, so one copy
// instruction of the warp reads a slot's two heads, 512 bytes side by side in a page.
template <int ST, int PITCH, bool SWZ, bool DEC, bool HEADS = false, bool PAIRS = false>
__global__ void __launch_bounds__(128) cp_rings(cp_geo g, const uint16_t *K, const uint16_t *V, unsigned *sum)
{
    // kTurns warps take turns over one head's tiles (tile n to turn n mod kTurns); w is this warp's turn.
    constexpr int kTurns = HEADS ? 1 : 4, kStage = 32 * PITCH; // a stage: K's 16 rows, then V's (uint4 units)
    extern __shared__ uint4 sm[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, w = HEADS ? 0 : warp;
    int b, hk, s, k0, k1;
    if (HEADS) {
        g.S *= kHkv;
        s = blockIdx.x % g.S, b = blockIdx.x / g.S, hk = warp;
    } else if (PAIRS) {
        g.S *= 2;
        s = blockIdx.x % g.S, hk = 2 * ((blockIdx.x / g.S) % (kHkv / 2)), b = blockIdx.x / (g.S * (kHkv / 2));
    } else {
        cp_item(g, b, hk, s);
    }
    cp_split_range(g, s, k0, k1);
    if (DEC) {
        k1 = min(k1, __ldg(g.lens + b)); // the range waits for the length, as the kernel's
        for (int c = threadIdx.x; c < 256; c += 128)
            cp_async16(cp_smem(sm + 4 * ST * kStage + c), g.q + (long long)(b * kHkv + hk) * 16 * kD + c * 8, true);
        asm volatile("cp.async.commit_group;\ncp.async.wait_all;\n" ::: "memory");
        __syncthreads();
    }
    uint4 *mine = sm + warp * ST * kStage;
    constexpr int kTileKeys = PAIRS ? 8 : 16;
    const int tiles = (k1 - k0) / kTileKeys, row0 = lane / 16, col = lane % 16;
    auto at = [&](int row) { return row * PITCH + (SWZ ? col ^ (row & 7) : col); };
    auto issue = [&](int t, int st) {
        if (w + t * kTurns < tiles) {
            const int j = k0 + (w + t * kTurns) * kTileKeys; // the tile's first key
            const long long step = (PAIRS ? 1 : 2) * cp_row_step(g);
            const long long off = PAIRS ? cp_row_off(g, b, hk + row0, j) + col * 8
                                        : cp_row_off(g, b, hk, j) + row0 * cp_row_step(g) + col * 8;
#pragma unroll
            for (int r = 0; r < 8; ++r) {
                const uint32_t dk = cp_smem(mine + st * kStage + at(row0 + 2 * r)), dv = dk + 16 * PITCH * 16;
                cp_async16(dk, K + off + r * step, DEC);
                cp_async16(dv, V + off + r * step, DEC);
            }
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };
    for (int t = 0; t < ST; ++t)
        issue(t, t);
    unsigned acc = 0;
    const int my_tiles = (tiles - w + kTurns - 1) / kTurns;
    for (int t = 0; t < my_tiles; ++t) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(ST - 1) : "memory");
        const int st = t % ST;
#pragma unroll
        for (int r = 0; r < 8; ++r)
            acc ^= cp_xor(mine[st * kStage + at(row0 + 2 * r)]) ^
                cp_xor(mine[st * kStage + 16 * PITCH + at(row0 + 2 * r)]);
        __syncwarp();
        issue(t + ST, st);
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    if (DEC) {
        __syncthreads();
        float *o = reinterpret_cast<float *>(sm);
        for (int c = threadIdx.x; c < 16 * kD; c += 128)
            o[c] = (float)(acc + c);
        __syncthreads();
        for (int c = threadIdx.x; c < 16 * kD; c += 128)
            g.o[(long long)blockIdx.x * 16 * kD + c] = o[c];
    }
    atomicXor(sum, acc);
}

// ---- 3. loads into registers, then shared memory: W warps, each step 16 rows of K and of V a warp ----
__device__ __forceinline__ uint4 cp_load_stream(const void *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
template <int W>
__global__ void __launch_bounds__(W * 32) cp_registers(cp_geo g, const uint16_t *K, const uint16_t *V, unsigned *sum)
{
    extern __shared__ uint4 sm[];
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    int b, hk, s, k0, k1;
    cp_item(g, b, hk, s);
    cp_split_range(g, s, k0, k1);
    uint4 *mine = sm + w * 512;
    const int tiles = (k1 - k0) / 16, row0 = lane / 16, col = lane % 16;
    unsigned acc = 0;
    for (int t = w; t < tiles; t += W) {
        const long long step = 2 * cp_row_step(g),
                        off = cp_row_off(g, b, hk, k0 + t * 16) + row0 * cp_row_step(g) + col * 8;
        uint4 kr[8], vr[8];
#pragma unroll
        for (int r = 0; r < 8; ++r) {
            kr[r] = cp_load_stream(K + off + r * step);
            vr[r] = cp_load_stream(V + off + r * step);
        }
        __syncwarp();
#pragma unroll
        for (int r = 0; r < 8; ++r) {
            mine[(row0 + 2 * r) * 16 + col] = kr[r];
            mine[256 + (row0 + 2 * r) * 16 + col] = vr[r];
        }
        __syncwarp();
#pragma unroll
        for (int r = 0; r < 8; ++r)
            acc ^= cp_xor(mine[(row0 + 2 * r) * 16 + col]) ^ cp_xor(mine[256 + (row0 + 2 * r) * 16 + col]);
    }
    atomicXor(sum, acc);
}

// ---- 4. TMA tile copies: one producer lane, 4 consumer warps, ST stages of T keys (K's tile, then V's) ----
__device__ __forceinline__ void cp_mbar_init(uint64_t *bar, int n)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(cp_smem(bar)), "r"(n));
}
__device__ __forceinline__ void cp_mbar_expect(uint64_t *bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(cp_smem(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(cp_smem(bar)) : "memory");
}
__device__ __forceinline__ void cp_mbar_wait(uint64_t *bar, int parity)
{
    asm volatile("{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 " @!p bra WAIT_%=;\n}\n" ::"r"(cp_smem(bar)),
                 "r"(parity)
                 : "memory");
}
// A box of the tensor map at (0, c1) (2D: contiguous rows) or (0, c1, c2) (3D: head, slot of a paged cache).
__device__ __forceinline__ void cp_tma(uint32_t dst, const CUtensorMap *m, uint64_t *bar, int c1, int c2, bool paged)
{
    if (paged)
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, "
                     "%5}], [%2];\n" ::"r"(dst),
                     "l"((uint64_t)m), "r"(cp_smem(bar)), "r"(0), "r"(c1), "r"(c2)
                     : "memory");
    else
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, "
                     "%4}], [%2];\n" ::"r"(dst),
                     "l"((uint64_t)m), "r"(cp_smem(bar)), "r"(0), "r"(c1)
                     : "memory");
}

template <int T, int ST>
__global__ void __launch_bounds__(160) cp_tma_tiles(const __grid_constant__ CUtensorMap mk,
                                                    const __grid_constant__ CUtensorMap mv, cp_geo g, unsigned *sum)
{
    constexpr int kConsumers = 4;
    extern __shared__ __align__(128) uint8_t smb[];
    uint64_t *full = reinterpret_cast<uint64_t *>(smb), *empty = full + ST;
    uint8_t *stages = smb + 1024;
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    int b, hk, s, k0, k1;
    cp_item(g, b, hk, s);
    cp_split_range(g, s, k0, k1);
    const int tiles = (k1 - k0) / T;
    if (threadIdx.x == 0) {
        for (int i = 0; i < ST; ++i) {
            cp_mbar_init(full + i, 1);
            cp_mbar_init(empty + i, kConsumers);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    unsigned acc = 0;
    if (w == kConsumers && lane == 0) { // the producer
        for (int t = 0; t < tiles; ++t) {
            const int st = t % ST, j0 = k0 + t * T;
            if (t >= ST)
                cp_mbar_wait(empty + st, (t / ST - 1) & 1);
            cp_mbar_expect(full + st, 2 * T * kRowBytes);
            const uint32_t dk = cp_smem(stages + st * 2 * T * kRowBytes), dv = dk + T * kRowBytes;
            if (!g.table) {
                const int row = (b * kHkv + hk) * g.N + j0;
                cp_tma(dk, &mk, full + st, row, 0, false);
                cp_tma(dv, &mv, full + st, row, 0, false);
            } else { // a box is one page's slice at most
                const int piece = T < g.P ? T : g.P;
                for (int r = 0; r < T; r += piece) {
                    const int j = j0 + r,
                              slot = __ldg(g.table + (long long)b * g.pages_per_seq + j / g.P) * g.P + j % g.P;
                    cp_tma(dk + r * kRowBytes, &mk, full + st, hk, slot, true);
                    cp_tma(dv + r * kRowBytes, &mv, full + st, hk, slot, true);
                }
            }
        }
    } else if (w < kConsumers) {
        for (int t = 0; t < tiles; ++t) {
            const int st = t % ST;
            cp_mbar_wait(full + st, (t / ST) & 1);
            const uint4 *tile = reinterpret_cast<const uint4 *>(stages + st * 2 * T * kRowBytes);
            for (int x = threadIdx.x; x < 2 * T * 16; x += kConsumers * 32)
                acc ^= cp_xor(tile[x]);
            __syncwarp();
            if (lane == 0)
                cp_mbar_arrive(empty + st);
        }
    }
    atomicXor(sum, acc);
}

__global__ void cp_fill(uint32_t *p, size_t n, uint32_t seed)
{
    for (size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)x * 0x9e3779b9u ^ seed ^ (uint32_t)(x >> 32) * 0x85ebca6bu;
        h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
        p[x] = h;
    }
}

// ---- host ----
using cp_encode_fn = CUresult (*)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                  const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// K's or V's tensor map: 2D (d, rows) for contiguous rows, 3D (d, head, slot) for a paged cache; boxes of box_rows.
CUtensorMap cp_tensor_map(cp_encode_fn encode, void *base, bool paged, long long rows, int box_rows)
{
    CUtensorMap m;
    const cuuint64_t dims2[2] = {kD, (cuuint64_t)rows}, strides2[1] = {kRowBytes};
    const cuuint64_t dims3[3] = {kD, kHkv, (cuuint64_t)rows}, strides3[2] = {kRowBytes, (cuuint64_t)kHkv * kRowBytes};
    const cuuint32_t box2[2] = {kD, (cuuint32_t)box_rows}, box3[3] = {kD, 1, (cuuint32_t)box_rows}, ones[3] = {1, 1, 1};
    const CUresult r =
        encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, paged ? 3 : 2, base, paged ? dims3 : dims2,
               paged ? strides3 : strides2, paged ? box3 : box2, ones, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "attncheck-copy-patterns: cuTensorMapEncodeTiled failed (%d)\n", (int)r);
        exit(1);
    }
    return m;
}

enum cp_kind { CP_PLAIN, CP_SMEM, CP_TMA };

struct cp_variant {
    std::string name;
    cp_kind kind;
    const void *fn;
    int threads, ctas_per_sm, smem_needed, tma_keys;
};

// The dynamic shared memory that holds a variant to ctas_per_sm CTAs an SM (its own need at least).
int cp_smem_for(const cp_variant &v, int smem_optin)
{
    const int per_sm = 233472; // 228 KiB, of which 1 KiB a CTA is the driver's
    return std::max(v.smem_needed, std::min(smem_optin, per_sm / v.ctas_per_sm - 1024));
}

std::vector<cp_variant> cp_variants()
{
    return {
        {"1 plain read", CP_PLAIN, (const void *)cp_plain, 256, 8, 0, 0},
        {"2 cp.async, packed rows", CP_SMEM, (const void *)cp_rings<2, 16, false, false>, 128, 2, 4 * 2 * 8192, 0},
        {"2 ... 3 stages", CP_SMEM, (const void *)cp_rings<3, 16, false, false>, 128, 2, 4 * 3 * 8192, 0},
        {"2 ... 3 CTAs an SM", CP_SMEM, (const void *)cp_rings<2, 16, false, false>, 128, 3, 4 * 2 * 8192, 0},
        {"2 ... padded rows", CP_SMEM, (const void *)cp_rings<2, 17, false, false>, 128, 2, 4 * 2 * 8704, 0},
        {"2 ... swizzled rows", CP_SMEM, (const void *)cp_rings<2, 16, true, false>, 128, 2, 4 * 2 * 8192, 0},
        {"2 as decode, padded", CP_SMEM, (const void *)cp_rings<2, 17, false, true>, 128, 2, 4 * 2 * 8704 + 4096, 0},
        {"2 as decode, swizzled", CP_SMEM, (const void *)cp_rings<2, 16, true, true>, 128, 2, 4 * 2 * 8192 + 4096, 0},
        {"2 ... all heads a CTA", CP_SMEM, (const void *)cp_rings<2, 16, true, false, true>, 128, 2, 4 * 2 * 8192, 0},
        {"2 ... two heads a CTA", CP_SMEM, (const void *)cp_rings<2, 16, true, false, false, true>, 128, 2,
         4 * 2 * 8192, 0},
        {"3 registers, 16 warps", CP_SMEM, (const void *)cp_registers<16>, 512, 1, 16 * 8192, 0},
        {"4 TMA 64 keys x 2", CP_TMA, (const void *)cp_tma_tiles<64, 2>, 160, 2, 1024 + 2 * 64 * 512, 64},
        {"4 TMA 32 keys x 4", CP_TMA, (const void *)cp_tma_tiles<32, 4>, 160, 2, 1024 + 4 * 32 * 512, 32},
    };
}

struct cp_buffers {
    uint16_t *k = nullptr, *v = nullptr, *q = nullptr;
    int *table = nullptr, *lens = nullptr;
    float *o = nullptr;
    unsigned *sum = nullptr;
    uint4 *flush = nullptr;
};
constexpr size_t kFlushBytes = (size_t)256 << 20;

cp_buffers cp_allocate(size_t elems, int sms)
{
    cp_buffers x;
    CP_CHECK(cudaMalloc(&x.k, elems * 2));
    CP_CHECK(cudaMalloc(&x.v, elems * 2));
    CP_CHECK(cudaMalloc(&x.table, elems / kD / kHkv * sizeof(int)));
    CP_CHECK(cudaMalloc(&x.lens, 128 * sizeof(int)));
    CP_CHECK(cudaMalloc(&x.q, 128 * kHkv * 16 * kD * 2));
    CP_CHECK(cudaMalloc(&x.o, (size_t)128 * kHkv * 64 * 16 * kD * sizeof(float)));
    CP_CHECK(cudaMalloc(&x.sum, sizeof(unsigned)));
    CP_CHECK(cudaMalloc(&x.flush, kFlushBytes));
    CP_CHECK(cudaMemset(x.q, 0, 128 * kHkv * 16 * kD * 2));
    CP_CHECK(cudaMemset(x.flush, 1, kFlushBytes));
    cp_fill<<<sms * 8, 256>>>(reinterpret_cast<uint32_t *>(x.k), elems / 2, 1u);
    cp_fill<<<sms * 8, 256>>>(reinterpret_cast<uint32_t *>(x.v), elems / 2, 2u);
    CP_CHECK(cudaGetLastError());
    return x;
}

// The shape's table (a seeded shuffle of its pages, as bench --decode's) and lengths on the device.
cp_geo cp_stage(const cp_shape &sh, const cp_buffers &x)
{
    const int per_seq = sh.P ? sh.N / sh.P : 0, pages = sh.B * per_seq;
    if (sh.P) {
        std::vector<int> t(pages);
        for (int i = 0; i < pages; ++i)
            t[i] = i;
        uint32_t s = 12345u;
        for (int i = pages - 1; i > 0; --i) {
            s ^= s << 13, s ^= s >> 17, s ^= s << 5;
            std::swap(t[i], t[s % (i + 1)]);
        }
        CP_CHECK(cudaMemcpy(x.table, t.data(), pages * sizeof(int), cudaMemcpyHostToDevice));
    }
    const std::vector<int> lens(sh.B, sh.N);
    CP_CHECK(cudaMemcpy(x.lens, lens.data(), sh.B * sizeof(int), cudaMemcpyHostToDevice));
    return {sh.B, sh.N, sh.S, sh.P, per_seq, sh.P ? x.table : nullptr, x.lens, x.q, x.o};
}

// K's and V's tensor maps for a TMA variant on the shape (built before the timing, not inside it).
struct cp_maps {
    CUtensorMap k, v;
};
cp_maps cp_maps_for(const cp_variant &v, const cp_shape &sh, const cp_buffers &x, cp_encode_fn encode)
{
    const long long rows = sh.P ? (long long)sh.B * (sh.N / sh.P) * sh.P : (long long)sh.B * kHkv * sh.N;
    const int box = sh.P ? std::min(v.tma_keys, sh.P) : v.tma_keys;
    return {cp_tensor_map(encode, x.k, sh.P != 0, rows, box), cp_tensor_map(encode, x.v, sh.P != 0, rows, box)};
}

void cp_launch(const cp_variant &v, const cp_shape &sh, const cp_geo &g, const cp_buffers &x, int sms, int smem_optin,
               const cp_maps &maps)
{
    const size_t elems = (size_t)sh.B * kHkv * sh.N * kD;
    const int grid = sh.B * kHkv * sh.S, smem = cp_smem_for(v, smem_optin);
    unsigned *sum = x.sum;
    const uint16_t *k = x.k, *vv = x.v;
    if (v.kind == CP_PLAIN) {
        cp_plain<<<sms * v.ctas_per_sm, v.threads>>>(reinterpret_cast<const uint4 *>(x.k),
                                                     reinterpret_cast<const uint4 *>(x.v), elems / 8, sum);
    } else if (v.kind == CP_TMA) {
        CUtensorMap mk = maps.k, mv = maps.v;
        cp_geo gg = g;
        void *args[] = {&mk, &mv, &gg, &sum};
        CP_CHECK(cudaLaunchKernel(v.fn, grid, v.threads, args, smem, 0));
    } else {
        cp_geo gg = g;
        void *args[] = {&gg, &k, &vv, &sum};
        CP_CHECK(cudaLaunchKernel(v.fn, grid, v.threads, args, smem, 0));
    }
    CP_CHECK(cudaGetLastError());
}

// Times every variant on one shape (the variants alternating within each of `reps` repeats) and prints its rows.
void cp_row(const cp_shape &sh, const std::vector<cp_variant> &vs, const cp_buffers &x, int sms, int smem_optin,
            double peak_gbs, cp_encode_fn encode)
{
    const cp_geo g = cp_stage(sh, x);
    const double bytes = 4.0 * sh.B * kHkv * (double)sh.N * kD; // K and V, 2 bytes an element
    const int reps = 5;
    std::vector<std::vector<float>> ms(vs.size());
    std::vector<unsigned> sums(vs.size());
    std::vector<cp_maps> maps(vs.size());
    for (size_t i = 0; i < vs.size(); ++i)
        if (vs[i].kind == CP_TMA)
            maps[i] = cp_maps_for(vs[i], sh, x, encode);
    cudaEvent_t e0, e1;
    CP_CHECK(cudaEventCreate(&e0));
    CP_CHECK(cudaEventCreate(&e1));
    for (int rep = 0; rep <= reps; ++rep)
        for (size_t i = 0; i < vs.size(); ++i) {
            cp_plain<<<sms * 8, 256>>>(x.flush, x.flush + kFlushBytes / 32, kFlushBytes / 32, x.sum + 0);
            CP_CHECK(cudaGetLastError());
            CP_CHECK(cudaMemsetAsync(x.sum, 0, sizeof(unsigned)));
            CP_CHECK(cudaEventRecord(e0));
            cp_launch(vs[i], sh, g, x, sms, smem_optin, maps[i]);
            CP_CHECK(cudaEventRecord(e1));
            CP_CHECK(cudaEventSynchronize(e1));
            float t = 0.f;
            CP_CHECK(cudaEventElapsedTime(&t, e0, e1));
            if (rep == 0) // the warm-up: its checksum
                CP_CHECK(cudaMemcpy(&sums[i], x.sum, sizeof(unsigned), cudaMemcpyDeviceToHost));
            else
                ms[i].push_back(t);
        }
    CP_CHECK(cudaEventDestroy(e0));
    CP_CHECK(cudaEventDestroy(e1));
    for (size_t i = 0; i < vs.size(); ++i) {
        std::sort(ms[i].begin(), ms[i].end());
        auto pct = [&](float t) { return 100.0 * bytes / (t * 1e-3) / 1e9 / peak_gbs; };
        printf("| %d | %d | %d | %d | %s | %.4f | %.1f%% | %.1f-%.1f%% |%s\n", sh.P, sh.B, sh.N, sh.S,
               vs[i].name.c_str(), ms[i][reps / 2], pct(ms[i][reps / 2]), pct(ms[i].back()), pct(ms[i].front()),
               sums[i] == sums[0] ? "" : " WRONG BYTES |");
    }
    fflush(stdout);
}

} // namespace

int main(int argc, char **argv)
{
    const int n_shapes = (int)(sizeof kShapes / sizeof kShapes[0]);
    char *end = nullptr;
    const long only = argc > 1 ? strtol(argv[1], &end, 10) : -1;
    if (argc > 2 || (argc == 2 && (*end != '\0' || only < 0 || only >= n_shapes))) {
        fprintf(stderr, "usage: attncheck-copy-patterns [ROW 0-%d]\n", n_shapes - 1);
        return 2;
    }
    int sms = 0, smem_optin = 0, clock_khz = 0, bus_bits = 0;
    CP_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CP_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    CP_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0));
    CP_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0));
    const double peak_gbs = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
    cp_encode_fn encode = nullptr;
    cudaDriverEntryPointQueryResult found;
    CP_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void **>(&encode), 12000,
                                              cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess) {
        fprintf(stderr, "attncheck-copy-patterns: the driver has no cuTensorMapEncodeTiled\n");
        return 1;
    }
    std::vector<cp_shape> shapes(kShapes, kShapes + n_shapes);
    if (only >= 0)
        shapes = {kShapes[only]};
    size_t elems = 0;
    for (const cp_shape &sh : shapes)
        elems = std::max(elems, (size_t)sh.B * kHkv * sh.N * kD);
    const std::vector<cp_variant> vs = cp_variants();
    for (const cp_variant &v : vs)
        if (v.kind != CP_PLAIN)
            CP_CHECK(cudaFuncSetAttribute(v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_optin));
    const cp_buffers x = cp_allocate(elems, sms);
    if (only <= 0)
        printf("copies only, bf16 K and V, d = %d, Hkv = %d; %% of the peak %.0f GB/s; median of 5, L2 flushed\n\n"
               "| page | B | Nk | splits | variant | ms | %% of peak | range |\n| ---: | ---: | ---: | ---: | --- | "
               "---: | "
               "---: | ---: |\n",
               kD, kHkv, peak_gbs);
    for (const cp_shape &sh : shapes)
        cp_row(sh, vs, x, sms, smem_optin, peak_gbs, encode);
    return 0;
}
