// kernels/cuda/decode_mla.cu — cuda-decode-mla (issue 16): MLA decode, the
// attention of DeepSeek-V2/V3's serving step, on the GPU.
//
// MLA decode stores one latent cache row per key: 576 channels, the 512 of the
// compressed KV followed by the 64 rotary ones; Q (its query heads absorbed
// into the latent space) is 576 wide, K is the cache row and V is the same
// row's first 512 channels (the case's v=k; FlashMLA reads it so).  K and V are
// one stream of 1152-byte rows (bf16), read once per 16 packed query rows.
// d_v = 576 (V the whole row) takes the same code.
//   * One CTA per (sequence b, KV head, block of 16 packed rows, split s), as
//     decode.cu; the split ranges, row packing, visibility and the combine
//     kernel are cuda-decode's (decode_rows.cuh, decode_combine.cu).
//   * The CTA's 4 warps share each 32-key tile (a 2-stage cp.async pipeline
//     of 16-byte copies, the page of each row from the block table one tile
//     ahead).  A row of Q and O is too wide for one warp's registers
//     (16 x 576 of Q and 16 x 512 f32 of O would take 400 a lane), so the work
//     is cut by channels:
//       - S = Q K^T: warp w sums the dot product over its 144 channels
//         [144 w, 144 w + 144) (9 k-steps, Q's fragments in registers) for all
//         32 keys, writes its partial 16 x 32 tile to shared memory, and after
//         a barrier every warp adds the four partials (in one order: the warps
//         hold bit-identical scores, maxima and sums, and need not exchange them);
//       - the online softmax runs in every warp alike (f32, log2 units);
//       - O += P V: P stays in registers as the A operand; warp w owns O's
//         columns [d_v w / 4, d_v (w + 1) / 4) (128 at d_v = 512: 64 f32 a lane).
//     Two barriers a tile: the partials' exchange, and the stage and partial
//     buffers' reuse.
//   * S = 1: the CTA writes O and LSE; else each warp its columns of the
//     partial O_s (f32, normalised) and warp 0 (m_s, l_s), for the combine.
// Planted bugs (family.h): V read from the row's last d_v channels (a cache
// assumed rope-first); the scores summed over the first 512 channels only (the
// rotary part dropped).
#include <cmath>
#include <type_traits>

#include "decode_rows.cuh"

namespace
{

constexpr int MLA_D = 576; // the latent cache row: 512 compressed channels, then 64 rotary
constexpr int MLA_NOPE = 512; // the compressed channels (the rope-dropped mutant's scores stop here)
constexpr int MLA_WARPS = ACD_DEC_WARPS;
constexpr int MLA_THREADS = 32 * MLA_WARPS;
constexpr int MLA_TILE = 32; // keys a CTA tile, shared by the warps
constexpr int MLA_STAGES = 2; // two CTAs an SM fit two stages each
constexpr int MLA_PITCH = MLA_D + 8; // shared row pitch (elements): 1168 bytes, ldmatrix conflict-free
constexpr int MLA_QK_STEPS = MLA_D / MLA_WARPS / 16; // k-steps of 16 channels a warp sums: 9
constexpr int MLA_NB = MLA_TILE / 8; // n8 blocks of keys in a score tile: 4
constexpr int MLA_ROWS_PER_WARP = MLA_TILE / MLA_WARPS; // rows of a tile a warp copies: 8
constexpr int MLA_SPITCH = MLA_TILE + 8; // a partial score row (floats): conflict-free float2 stores
constexpr int MLA_CHUNKS = MLA_D * 2 / 16; // 16-byte chunks a cache row: 72
constexpr int MLA_STAGE_ELEMS = MLA_TILE * MLA_PITCH;
constexpr size_t MLA_SMEM =
    2 * (size_t)MLA_STAGES * MLA_STAGE_ELEMS + sizeof(float) * MLA_WARPS * ACD_DEC_ROWS * MLA_SPITCH;

static_assert(MLA_D % (16 * MLA_WARPS) == 0, "each warp sums whole k-steps of the dot product");
static_assert(MLA_TILE % ACD_DEC_UNIT == 0 || ACD_DEC_UNIT % MLA_TILE == 0, "tiles align with split units");

// The page (contiguous K: 0; -1: outside [ka, kb), not read) of row w + 4 i of
// the tile at j0, held by lane i of warp w for the warp's MLA_ROWS_PER_WARP rows.
__device__ __forceinline__ int mla_tile_page(const acd_dec_params &d, int b, int j0, int ka, int kb, int warp, int lane)
{
    const int j = j0 + warp + MLA_WARPS * (lane % MLA_ROWS_PER_WARP);
    if (j < ka || j >= kb)
        return -1;
    return d.table ? __ldg(d.table + (long long)b * d.pages_per_seq + dec_page_of(d, j)) : 0;
}

// The warp's rows of the tile at j0 into the stage: 72 chunks a row over
// the 32 lanes; a row without a page (outside [ka, kb)) is zero-filled.
template <typename T>
__device__ __forceinline__ void mla_tile_issue(const acd_dec_params &d, const T *K, int b, int hk, int j0, int pg_lane,
                                               int warp, int lane, T *stage)
{
    const acd_params &p = d.p;
#pragma unroll
    for (int i = 0; i < MLA_ROWS_PER_WARP; ++i) {
        const int row = warp + MLA_WARPS * i, j = j0 + row;
        const int page = __shfl_sync(0xffffffffu, pg_lane, i);
        long long off = 0;
        if (page >= 0 && d.table) {
            const int slot = d.page_shift >= 0 ? j & (d.page_size - 1) : j - (j / d.page_size) * d.page_size;
            off = ((long long)page * d.page_size + slot) * d.slot_stride + (long long)hk * MLA_D;
        } else if (page >= 0) {
            off = acd_k_base<false>(p, b) + hk * p.k_sh + (long long)j * p.k_ss;
        }
        const T *src = K + off;
        const uint32_t dst = acd_smem_addr(stage + row * MLA_PITCH);
#pragma unroll
        for (int c = lane; c < MLA_CHUNKS; c += 32)
            dec_copy16(dst + 16 * c, page >= 0 ? src + 8 * c : K, page >= 0);
    }
}

// Warp w's A fragments of Q over its channels [144 w, 144 w + 144), straight
// from global memory (read once): rows lane / 4 and + 8, zero for rows that do
// not exist; the rope-dropped mutant zeroes channels 512 on.
template <typename T>
__device__ __forceinline__ void mla_load_qf(const acd_dec_params &d, const T *Q, int b, const dec_row (&rw)[2],
                                            int warp, int lane, uint32_t (&qf)[MLA_QK_STEPS][4])
{
    const T *row[2];
#pragma unroll
    for (int r = 0; r < 2; ++r)
        row[r] = rw[r].live ? Q + acd_q_offset<false>(d.p, b, rw[r].h, rw[r].i) : nullptr;
#pragma unroll
    for (int kk = 0; kk < MLA_QK_STEPS; ++kk) {
        const int c0 = (warp * MLA_QK_STEPS + kk) * 16 + 2 * (lane % 4);
        const bool dropped = d.p.mutant == ACD_MUT_MLA_NO_ROPE && c0 >= MLA_NOPE;
#pragma unroll
        for (int h = 0; h < 2; ++h) // a[0], a[1]: channels c0, c0 + 1 of rows g, g + 8; a[2], a[3]: c0 + 8, + 9
#pragma unroll
            for (int r = 0; r < 2; ++r)
                qf[kk][2 * h + r] = row[r] && !dropped ? *reinterpret_cast<const uint32_t *>(row[r] + c0 + 8 * h) : 0u;
    }
}

// Warp w's partial scores of the tile (its 144 channels, all 32 keys) into its slice of sPart.
template <typename T>
__device__ __forceinline__ void mla_partial_scores(const uint32_t (&qf)[MLA_QK_STEPS][4], const T *sK, float *sPart,
                                                   int warp, int lane)
{
    float s[MLA_NB][4];
    acd_zero(s);
#pragma unroll
    for (int kk = 0; kk < MLA_QK_STEPS; ++kk) {
        const int c = (warp * MLA_QK_STEPS + kk) * 16;
#pragma unroll
        for (int nb = 0; nb < MLA_NB / 2; ++nb) { // 16 keys an ldmatrix: keys 0-7 in kf[0..1], 8-15 in kf[2..3]
            uint32_t kf[4];
            acd_ldmatrix_x4(kf, sK + (nb * 16 + (lane / 16) * 8 + lane % 8) * MLA_PITCH + c + ((lane / 8) % 2) * 8);
            acd_tc<T>::mma(s[2 * nb], qf[kk], kf[0], kf[1]);
            acd_tc<T>::mma(s[2 * nb + 1], qf[kk], kf[2], kf[3]);
        }
    }
    float *mine = sPart + warp * ACD_DEC_ROWS * MLA_SPITCH;
#pragma unroll
    for (int n = 0; n < MLA_NB; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r)
            *reinterpret_cast<float2 *>(mine + (lane / 4 + 8 * r) * MLA_SPITCH + 8 * n + 2 * (lane % 4)) =
                make_float2(s[n][2 * r], s[n][2 * r + 1]);
}

// The tile's scores: the warps' partials added in one order (every warp alike).
__device__ __forceinline__ void mla_sum_scores(const float *sPart, float (&s)[MLA_NB][4], int lane)
{
    acd_zero(s);
#pragma unroll
    for (int w = 0; w < MLA_WARPS; ++w)
#pragma unroll
        for (int n = 0; n < MLA_NB; ++n)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float2 v = *reinterpret_cast<const float2 *>(
                    sPart + (w * ACD_DEC_ROWS + lane / 4 + 8 * r) * MLA_SPITCH + 8 * n + 2 * (lane % 4));
                s[n][2 * r] += v.x;
                s[n][2 * r + 1] += v.y;
            }
}

// Scale to log2 units; keys a row does not see become -inf (decode.cu's rule).
__device__ __forceinline__ void mla_mask_scores(const acd_dec_params &d, const dec_row (&rw)[2], int j0, float sc,
                                                float (&s)[MLA_NB][4], int lane)
{
    if (__all_sync(0xffffffffu, dec_row_sees_tile<MLA_TILE>(rw[0], j0) && dec_row_sees_tile<MLA_TILE>(rw[1], j0))) {
#pragma unroll
        for (int n = 0; n < MLA_NB; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                s[n][e] *= sc;
        return;
    }
    const int t = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int n = 0; n < MLA_NB; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) { // scale first: a negative scale must not turn -inf into +inf
                float &x = s[n][2 * r + e];
                x = dec_visible(d.p, rw[r], j0 + 8 * n + 2 * t + e) ? x * sc : -INFINITY;
            }
}

// O += P V over the warp's DV / 4 columns; V's rows are the stage's K rows
// from channel v0 (0; the rope-first mutant: d - d_v).
template <typename T, int DV>
__device__ __forceinline__ void mla_pv(const float (&s)[MLA_NB][4], const T *sK, int v0, float (&o)[DV / 32][4],
                                       int warp, int lane)
{
    constexpr int kCols = DV / MLA_WARPS; // 128 or 144: whole 16-column chunks
    static_assert(kCols % 16 == 0, "a warp's columns are whole ldmatrix chunks");
#pragma unroll
    for (int ks = 0; ks < MLA_TILE / 16; ++ks) {
        uint32_t pf[4];
        acd_frag_to_a<T>(pf, s, ks); // P rounded to the dtype
#pragma unroll
        for (int dn = 0; dn < kCols / 16; ++dn) {
            uint32_t vf[4];
            acd_ldmatrix_x4_trans(vf,
                                  sK + (ks * 16 + ((lane / 8) % 2) * 8 + lane % 8) * MLA_PITCH + v0 + warp * kCols +
                                      dn * 16 + (lane / 16) * 8);
            acd_tc<T>::mma(o[2 * dn], pf, vf[0], vf[1]);
            acd_tc<T>::mma(o[2 * dn + 1], pf, vf[2], vf[3]);
        }
    }
}

// The warp's columns of the rows it holds: O and LSE (S = 1), or the split's partial.
template <typename T, int DV>
__device__ __forceinline__ void mla_write(const acd_dec_params &d, T *O, float *LSE, int b, int s,
                                          const dec_row (&rw)[2], const float (&m)[2], const float (&l)[2],
                                          const float (&o)[DV / 32][4], int warp, int lane)
{
    constexpr int kCols = DV / MLA_WARPS;
    const acd_params &p = d.p;
    const int t = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (!rw[r].live)
            continue;
        const bool empty = !(l[r] > 0.f);
        const float inv = empty ? 0.f : 1.f / l[r];
        const long long at_row = acd_row_index<false>(p, b, rw[r].h, rw[r].i);
        if (d.splits == 1) {
            T *orow = O + acd_o_offset<false>(p, b, rw[r].h, rw[r].i) + warp * kCols;
#pragma unroll
            for (int n = 0; n < kCols / 8; ++n)
                acd_tc<T>::store2(orow + 8 * n + 2 * t, o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
            if (warp == 0 && t == 0)
                LSE[at_row] = empty ? -INFINITY : acd_lse(m[r], l[r]);
            continue;
        }
        const long long at = at_row * d.splits + s;
        float *op = d.o_part + at * DV + warp * kCols;
#pragma unroll
        for (int n = 0; n < kCols / 8; ++n)
            *reinterpret_cast<float2 *>(op + 8 * n + 2 * t) = make_float2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        if (warp == 0 && t == 0) { // (m_s, l_s): the combine rounds LSE once
            d.lse_part[2 * at] = m[r];
            d.lse_part[2 * at + 1] = l[r];
        }
    }
}

// CTA number cta's work: the split s of the row block rb of (sequence b, KV head hk).
template <typename T, int DV>
__device__ __forceinline__ void mla_split_cta(const acd_dec_params &d, const T *__restrict__ Q, const T *__restrict__ K,
                                              T *__restrict__ O, float *__restrict__ LSE, long long cta, T *stages,
                                              float *sPart)
{
    const acd_params &p = d.p;
    int b, hk, rb, s; // in dec_cta_work's order
    dec_cta_work(d, cta, b, hk, rb, s);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int nq = acd_nq<false>(p, b), nk = acd_nk<false>(p, b), n_keys = dec_key_end(d, nk);
    int k0, k1, ka, kb;
    dec_split_range(d, n_keys, s, k0, k1);
    dec_cta_keys(d, b, hk, rb, nq, nk, n_keys, k0, k1, lane, ka, kb);
    const int t0 = ka & ~(MLA_TILE - 1);
    const int tiles = kb > ka ? (kb - t0 + MLA_TILE - 1) / MLA_TILE : 0;
    auto key0 = [&](int it) { return t0 + it * MLA_TILE; };

    int pg = tiles > 0 ? mla_tile_page(d, b, key0(0), ka, kb, warp, lane) : -1;
#pragma unroll
    for (int st = 0; st < MLA_STAGES - 1; ++st) {
        if (st < tiles) {
            mla_tile_issue<T>(d, K, b, hk, key0(st), pg, warp, lane, stages + st * MLA_STAGE_ELEMS);
            pg = st + 1 < tiles ? mla_tile_page(d, b, key0(st + 1), ka, kb, warp, lane) : -1;
        }
        acd_cp_async_commit();
    }
    const dec_row rw[2] = {dec_row_at(d, b, hk, rb * ACD_DEC_ROWS + lane / 4, nq, nk, n_keys, k0, k1),
                           dec_row_at(d, b, hk, rb * ACD_DEC_ROWS + lane / 4 + 8, nq, nk, n_keys, k0, k1)};
    uint32_t qf[MLA_QK_STEPS][4];
    mla_load_qf<T>(d, Q, b, rw, warp, lane, qf);
    const int v0 = p.mutant == ACD_MUT_MLA_ROPE_FIRST ? MLA_D - DV : 0;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, o[DV / 32][4];
    acd_zero(o);
    for (int it = 0; it < tiles; ++it) {
        acd_cp_async_wait<MLA_STAGES - 2>(); // this thread's copies of tile it landed
        __syncthreads(); // everyone's; and every warp is done with tile it - 1 (its stage, sPart)
        const int next = it + MLA_STAGES - 1;
        if (next < tiles) {
            mla_tile_issue<T>(d, K, b, hk, key0(next), pg, warp, lane, stages + (next % MLA_STAGES) * MLA_STAGE_ELEMS);
            pg = next + 1 < tiles ? mla_tile_page(d, b, key0(next + 1), ka, kb, warp, lane) : -1;
        }
        acd_cp_async_commit();
        const T *sK = stages + (it % MLA_STAGES) * MLA_STAGE_ELEMS;
        mla_partial_scores<T>(qf, sK, sPart, warp, lane);
        __syncthreads(); // the four partials are written
        float sc[MLA_NB][4];
        mla_sum_scores(sPart, sc, lane);
        mla_mask_scores(d, rw, key0(it), p.scale_log2, sc, lane);
        dec_softmax_step(sc, m, l, o);
        mla_pv<T, DV>(sc, sK, v0, o, warp, lane);
    }
    acd_cp_async_wait<0>();
    dec_allow_combine();
#pragma unroll
    for (int r = 0; r < 2; ++r) { // the row's sum over the quad's keys
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    mla_write<T, DV>(d, O, LSE, b, s, rw, m, l, o, warp, lane);
}

// Two CTAs an SM (85 KB of shared memory each).
template <typename T, int DV>
__global__ void __launch_bounds__(MLA_THREADS, 2)
    mla_split_kernel(acd_dec_params d, const T *__restrict__ Q, const T *__restrict__ K, T *__restrict__ O,
                     float *__restrict__ LSE)
{
    extern __shared__ __align__(16) unsigned char mla_smem[];
    T *stages = reinterpret_cast<T *>(mla_smem);
    float *sPart = reinterpret_cast<float *>(stages + MLA_STAGES * MLA_STAGE_ELEMS);
    mla_split_cta<T, DV>(d, Q, K, O, LSE, blockIdx.x, stages, sPart);
}

template <typename T, int DV>
int mla_launch(const acd_decode_plan &plan, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    if (plan.split_ctas <= 0)
        return AC_OK;
    mla_split_kernel<T, DV><<<(unsigned)plan.split_ctas, MLA_THREADS, MLA_SMEM, stream>>>(
        plan.d, (const T *)a->q, (const T *)a->k, (T *)a->o, a->lse);
    ACD_CHECK_LAUNCH(err, "mla_split_kernel");
    return AC_OK;
}

template <typename T, int DV> int mla_ctas_per_sm(ac_err *err, int *out)
{
    ACD_CHECK(
        err, cudaFuncSetAttribute(mla_split_kernel<T, DV>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)MLA_SMEM));
    ACD_CHECK(err, cudaOccupancyMaxActiveBlocksPerMultiprocessor(out, mla_split_kernel<T, DV>, MLA_THREADS, MLA_SMEM));
    if (*out < 1)
        *out = 1;
    return AC_OK;
}

// f<T, DV>() for the dtype (f16, bf16) and d_v (512, 576).
template <typename F> int mla_with(ac_dtype t, int dv, F f)
{
    if (t == AC_F16)
        return dv == 512 ? f(__half{}, std::integral_constant<int, 512>{})
                         : f(__half{}, std::integral_constant<int, MLA_D>{});
    return dv == 512 ? f(__nv_bfloat16{}, std::integral_constant<int, 512>{})
                     : f(__nv_bfloat16{}, std::integral_constant<int, MLA_D>{});
}

} // namespace

int acd_dec_mla_launch_split(const acd_decode_plan &plan, ac_dtype t, const ac_fwd_args *a, cudaStream_t stream,
                             ac_err *err)
{
    return mla_with(t, plan.d.p.Dv, [&](auto tv, auto dv) {
        return mla_launch<decltype(tv), decltype(dv)::value>(plan, a, stream, err);
    });
}

int acd_dec_mla_ctas_per_sm(ac_dtype t, int dv, int *ctas, ac_err *err)
{
    return mla_with(t, dv,
                    [&](auto tv, auto dvc) { return mla_ctas_per_sm<decltype(tv), decltype(dvc)::value>(err, ctas); });
}
