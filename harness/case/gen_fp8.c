/* harness/case/gen_fp8.c — the generator's fp8 fields (issue 17), drawn when
 * the case's dtype is e4m3/e5m2 (a kernel claiming only fp8 dtypes), from a
 * stream of its own so the plain draws never move:
 *   out      bf16 75, f16 25;
 *   descale  tensor 35, head 35, block(64) 15, block(128) 15 (tensor and head
 *            alike for a kernel that takes no blocks: caps.fp8_no_block_descale);
 *   p        the kernel's declared format (caps.fp8_p: P's format is the
 *            kernel's property, not the case's);
 *   dist     fa3(0.001,10) (FlashAttention-3's accuracy setup) in 20% of the
 *            cases, and for dominant() (which plants its key in the dtype, not
 *            as code * descale); the scales come from run/inputs_fp8.c. */
#include "harness/case/gen_variants.h"

static case_rng fp8_stream(uint64_t campaign_seed, uint64_t index)
{
    uint64_t s = campaign_seed ^ 0xF8F8A77E17C0FFEEull;
    uint64_t a = ac_splitmix64(&s);
    s = a ^ (index * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull);
    case_rng r = {ac_splitmix64(&s)};
    return r;
}

void case_fp8_draw(uint64_t campaign_seed, uint64_t index, const ac_caps *caps, ac_case *c)
{
    if (!ac_dtype_is_fp8(c->dtype))
        return;
    case_rng r = fp8_stream(campaign_seed, index);
    static const int out_w[] = {75, 25}, descale_w[] = {35, 35, 15, 15};
    static const int descales[] = {AC_DESCALE_TENSOR, AC_DESCALE_HEAD, 64, 128};
    c->out_dtype = case_rng_pick(&r, out_w, 2) == 0 ? AC_BF16 : AC_F16;
    c->descale_rows = descales[case_rng_pick(&r, descale_w, caps->fp8_no_block_descale ? 2 : 4)];
    c->p_dtype = caps->fp8_p == AC_F32 ? AC_E4M3 : caps->fp8_p;
    c->acc_bits = caps->fp8_acc_bits;
    if (c->dist == AC_DIST_DOMINANT || (int)(case_rng_u64(&r) % 100) < 20)
        c->dist = AC_DIST_FA3, c->dist_a = 0.001, c->dist_b = 10.0;
}
