/* harness/run/test_arena.c — the kernel's buffers in one block (suite
 * harness_arena): the layout, the guard zones and what a damaged one
 * reports (the buffer, the elements, counted from its start or end), the input
 * check (the tensor, the first element and its coordinates). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "harness/harness.h"
#include "harness/run/arena.h"

static ac_inputs make(const char *line)
{
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s: %s", line, err.msg);
    ac_inputs in;
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s: %s", line, err.msg);
    return in;
}

static const char *const varlen_line =
    "v1 seed=3 b=2 hq=4 hkv=2 nq=9 nk=13 d=5 dtype=f16 mask=dense(0.5) seqlens-q=9,4 seqlens-k=13,2 layout=bshd";

/* An arena holding the case with both entries armed, as the runner leaves it. */
static uint8_t *armed(const ac_inputs *in, bool backward, ac_arena_layout *l)
{
    ac_arena_plan(in, backward, l);
    uint8_t *base = aligned_alloc(256, l->total);
    cr_assert_not_null(base);
    ac_arena_put_inputs(l, in, base);
    ac_arena_arm(l, AC_ENTRY_FORWARD, base);
    return base;
}

/* The variants' inputs and outputs (absent from a plain case). */
static bool variant_buf(ac_buf b)
{
    return (b >= AC_BUF_CU_SEQLENS_Q && b <= AC_BUF_DESCALE_V) || b == AC_BUF_DROPOUT || b == AC_BUF_DSINK ||
        b == AC_BUF_DBIAS;
}

Test(harness_arena, buffers_are_disjoint_aligned_and_outputs_sit_between_guards)
{
    ac_inputs in = make(varlen_line);
    ac_arena_layout l;
    ac_arena_plan(&in, true, &l);
    const ac_problem *p = &in.p;
    cr_assert_eq(l.bytes[AC_BUF_Q], ac_q_elems(p) * 2);
    cr_assert_eq(l.bytes[AC_BUF_DV], ac_kv_elems(p) * 2);
    cr_assert_eq(l.bytes[AC_BUF_LSE], ac_lse_elems(p) * 4);
    cr_assert_eq(l.bytes[AC_BUF_SEQLENS_K], 2 * sizeof(int));
    cr_assert_eq(l.bytes[AC_BUF_MASK], (uint64_t)9 * 13);
    uint64_t end = 0;
    for (int b = 0; b < AC_BUF_COUNT; b++) {
        uint64_t g = ac_buf_is_output((ac_buf)b) ? AC_GUARD_BYTES : 0;
        if (variant_buf((ac_buf)b)) { /* a line without variants has none of theirs */
            cr_assert_eq(l.bytes[b], 0, "%s", ac_buf_name((ac_buf)b));
            continue;
        }
        cr_assert_gt(l.bytes[b], 0, "%s", ac_buf_name((ac_buf)b));
        cr_assert_geq(l.off[b] - g, end, "%s overlaps the buffer before it", ac_buf_name((ac_buf)b));
        cr_assert_eq(l.off[b] % 256, 0, "%s is not 256-byte aligned", ac_buf_name((ac_buf)b));
        end = l.off[b] + l.bytes[b] + g;
    }
    cr_assert_leq(end, l.total);
    ac_arena_layout fwd;
    ac_arena_plan(&in, false, &fwd);
    cr_assert(fwd.bytes[AC_BUF_DO] == 0 && fwd.bytes[AC_BUF_DQ] == 0 && fwd.bytes[AC_BUF_DK] == 0);
    ac_inputs_free(&in);
}

Test(harness_arena, inputs_are_copied_and_the_problem_points_into_the_arena)
{
    ac_inputs in = make(varlen_line);
    ac_arena_layout l;
    uint8_t *base = armed(&in, true, &l);
    cr_assert_eq(memcmp(base + l.off[AC_BUF_K], in.k, l.bytes[AC_BUF_K]), 0);
    cr_assert_eq(memcmp(base + l.off[AC_BUF_DO], in.d_o, l.bytes[AC_BUF_DO]), 0);
    ac_problem p = ac_arena_problem(&in.p, &l, base);
    cr_assert_eq((const uint8_t *)p.seqlens_k, base + l.off[AC_BUF_SEQLENS_K]);
    cr_assert_eq(p.seqlens_k[1], 2);
    cr_assert_eq(p.dense_mask, base + l.off[AC_BUF_MASK]);
    cr_assert_eq(p.head_dim, 5);
    /* outputs poisoned: every element is the dtype's poison */
    for (size_t i = 0; i < ac_q_elems(&in.p); i++)
        cr_assert_eq(ac_bits_get(AC_F16, base + l.off[AC_BUF_O], i), ac_dtype_poison(AC_F16));
    cr_assert_eq(ac_arena_check(&l, AC_ENTRY_FORWARD, base, &in, NULL, NULL, NULL), AC_OK);
    free(base);
    ac_inputs_free(&in);
}

/* Damages bytes [from, to) relative to the start of buffer b and returns the check's message. */
static int damage(const ac_inputs *in, ac_buf b, long from, long to, ac_err *err)
{
    ac_arena_layout l;
    uint8_t *base = armed(in, true, &l);
    ac_arena_arm(&l, AC_ENTRY_BACKWARD, base);
    for (long i = from; i < to; i++)
        base[(long)l.off[b] + i] ^= 0x5A;
    int st = ac_arena_check(&l, AC_ENTRY_BACKWARD, base, in, base + l.off[AC_BUF_O],
                            (const float *)(base + l.off[AC_BUF_LSE]), err);
    free(base);
    return st;
}

Test(harness_arena, a_write_past_an_output_names_it_and_the_elements_after_its_end)
{
    ac_inputs in = make(varlen_line);
    ac_err err = {{0}};
    long o_bytes = (long)ac_q_elems(&in.p) * 2, lse_bytes = (long)ac_lse_elems(&in.p) * 4;
    cr_assert_eq(damage(&in, AC_BUF_O, o_bytes, o_bytes + 64 * 2, &err), AC_KERNEL_FAULT);
    cr_assert(strstr(err.msg,
                     "out-of-bounds-write: backward wrote past the end of O: elements end+0 to end+63 "
                     "(O holds 360 f16 elements") != NULL,
              "%s", err.msg);
    /* a single byte of the 16th float past LSE */
    cr_assert_eq(damage(&in, AC_BUF_LSE, lse_bytes + 15 * 4 + 2, lse_bytes + 15 * 4 + 3, &err), AC_KERNEL_FAULT);
    cr_assert(strstr(err.msg, "past the end of LSE: elements end+15 to end+15 (LSE holds 72 f32") != NULL, "%s",
              err.msg);
    /* the last byte of the guard zone still counts */
    long dv_bytes = (long)ac_kv_elems(&in.p) * 2;
    cr_assert_eq(damage(&in, AC_BUF_DV, dv_bytes + AC_GUARD_BYTES - 1, dv_bytes + AC_GUARD_BYTES, &err),
                 AC_KERNEL_FAULT);
    cr_assert(strstr(err.msg, "past the end of dV: elements end+2047 to end+2047") != NULL, "%s", err.msg);
    ac_inputs_free(&in);
}

Test(harness_arena, a_write_before_an_output_counts_back_from_its_start)
{
    ac_inputs in = make(varlen_line);
    ac_err err = {{0}};
    cr_assert_eq(damage(&in, AC_BUF_DQ, -8 * 2, 0, &err), AC_KERNEL_FAULT);
    cr_assert(strstr(err.msg, "backward wrote before the start of dQ: elements start-8 to start-1") != NULL, "%s",
              err.msg);
    cr_assert_eq(damage(&in, AC_BUF_LSE, -AC_GUARD_BYTES, -AC_GUARD_BYTES + 1, &err), AC_KERNEL_FAULT);
    cr_assert(strstr(err.msg, "before the start of LSE: elements start-1024 to start-1024") != NULL, "%s", err.msg);
    ac_inputs_free(&in);
}

Test(harness_arena, a_modified_input_names_the_tensor_the_element_and_its_coordinates)
{
    ac_inputs in = make(varlen_line);
    ac_err err = {{0}};
    /* K is bshd (b, j, hkv, c): element ((1 * 13 + 7) * 2 + 1) * 5 + 3 = 208 is b=1 j=7 h=1 c=3 */
    cr_assert_eq(damage(&in, AC_BUF_K, 208 * 2, 208 * 2 + 1, &err), AC_KERNEL_FAULT);
    cr_assert_str_eq(err.msg,
                     "input-modified: backward changed 1 element of K, the first at element 208 (b=1 h=1 "
                     "j=7 c=3)");
    cr_assert_eq(damage(&in, AC_BUF_SEQLENS_Q, 4, 8, &err), AC_KERNEL_FAULT);
    cr_assert_str_eq(err.msg, "input-modified: backward changed 1 element of seqlens_q, the first at element 1 (b=1)");
    cr_assert_eq(damage(&in, AC_BUF_MASK, 20, 30, &err), AC_KERNEL_FAULT);
    cr_assert(strstr(err.msg, "changed 10 elements of mask, the first at element 20 (row 1 of head slice 0, key 7)") !=
                  NULL,
              "%s", err.msg);
    ac_inputs_free(&in);
}

Test(harness_arena, the_backward_may_not_change_the_forwards_outputs)
{
    ac_inputs in = make(varlen_line);
    ac_arena_layout l;
    uint8_t *base = armed(&in, true, &l);
    uint8_t *o_copy = malloc(l.bytes[AC_BUF_O]), *lse_copy = malloc(l.bytes[AC_BUF_LSE]);
    memcpy(o_copy, base + l.off[AC_BUF_O], l.bytes[AC_BUF_O]);
    memcpy(lse_copy, base + l.off[AC_BUF_LSE], l.bytes[AC_BUF_LSE]);
    ac_arena_arm(&l, AC_ENTRY_BACKWARD, base);
    ac_err err = {{0}};
    cr_assert_eq(ac_arena_check(&l, AC_ENTRY_BACKWARD, base, &in, o_copy, (float *)lse_copy, &err), AC_OK, "%s",
                 err.msg);
    ((float *)(base + l.off[AC_BUF_LSE]))[5] = 0.0f; /* LSE is (B, Hq, Nq): element 5 is b=0 h=0 i=5 */
    cr_assert_eq(ac_arena_check(&l, AC_ENTRY_BACKWARD, base, &in, o_copy, (float *)lse_copy, &err), AC_KERNEL_FAULT);
    cr_assert_str_eq(err.msg,
                     "input-modified: backward changed 1 element of LSE, the first at element 5 (b=0 h=0 "
                     "i=5)");
    free(o_copy), free(lse_copy), free(base);
    ac_inputs_free(&in);
}

Test(harness_arena, canaries_report_exactly_the_bytes_changed)
{
    uint8_t buf[100];
    ac_canary_fill(buf, sizeof buf);
    size_t first = 7, last = 7;
    cr_assert(!ac_canary_damage(buf, sizeof buf, &first, &last));
    cr_assert_eq(first, 7, "untouched when nothing changed");
    buf[13] ^= 1, buf[97] ^= 0x80;
    cr_assert(ac_canary_damage(buf, sizeof buf, &first, &last));
    cr_assert_eq(first, 13);
    cr_assert_eq(last, 97);
    uint8_t a[64], b[64];
    ac_canary_fill(a, 64), ac_canary_fill(b, 40);
    cr_assert_eq(memcmp(a, b, 40), 0, "the same bytes at the same offsets, whatever the length");
    int zeros = 0;
    for (int i = 0; i < 64; i++)
        zeros += a[i] == 0;
    cr_assert_lt(zeros, 4, "not a zero fill");
}

/* A variant case: its arrays are inputs copied into the arena (the problem points at them),
 * its outputs (keep mask, dSink, dBias) poisoned between guards, THD's sizes its packed rows. */
Test(harness_arena, the_variants_arrays_are_inputs_and_their_gradients_guarded_outputs)
{
    ac_inputs in = make("v1 seed=5 b=3 hq=4 hkv=2 nq=20 nk=33 d=16 dv=8 dtype=f16 mask=causal-br "
                        "seqlens-q=20,3,11 seqlens-k=33,0,17 layout=thd softcap=5 sinks=normal(0,1) alibi=paper:bh "
                        "bias=normal(0,1):1h dropout=0.1");
    ac_arena_layout l;
    uint8_t *base = armed(&in, true, &l);
    const ac_problem *p = &in.p;
    cr_assert_eq(l.bytes[AC_BUF_Q], (uint64_t)34 * 4 * 16 * 2, "total_q 34 rows of Hq x d");
    cr_assert_eq(l.bytes[AC_BUF_V], (uint64_t)50 * 2 * 8 * 2, "total_k 50 rows of Hkv x d_v");
    cr_assert_eq(l.bytes[AC_BUF_O], (uint64_t)34 * 4 * 8 * 2);
    cr_assert_eq(l.bytes[AC_BUF_DV], l.bytes[AC_BUF_V]);
    cr_assert_eq(l.bytes[AC_BUF_LSE], (uint64_t)4 * 34 * 4, "(Hq, total_q) f32");
    cr_assert_eq(l.bytes[AC_BUF_SEQLENS_Q], 0, "THD: cu_seqlens, no padded lengths");
    cr_assert_eq(l.bytes[AC_BUF_CU_SEQLENS_K], 4 * sizeof(int));
    cr_assert_eq(l.bytes[AC_BUF_SINKS], 4 * sizeof(float));
    cr_assert_eq(l.bytes[AC_BUF_ALIBI], 3 * 4 * sizeof(float));
    cr_assert_eq(l.bytes[AC_BUF_BIAS], (uint64_t)4 * 20 * 33 * 2, "(1, Hq, Nq, Nk) in f16");
    cr_assert_eq(l.bytes[AC_BUF_DBIAS], l.bytes[AC_BUF_BIAS]);
    cr_assert_eq(l.bytes[AC_BUF_DSINK], 4 * sizeof(float));
    cr_assert_eq(l.bytes[AC_BUF_DROPOUT], ((uint64_t)3 * 4 * 20 * 33 + 7) / 8, "one bit a pair");
    ac_problem q = ac_arena_problem(p, &l, base);
    cr_assert_eq((const uint8_t *)q.cu_seqlens_q, base + l.off[AC_BUF_CU_SEQLENS_Q]);
    cr_assert_eq(q.cu_seqlens_q[3], 34);
    cr_assert_eq((const uint8_t *)q.sinks, base + l.off[AC_BUF_SINKS]);
    cr_assert_eq(memcmp(q.sinks, p->sinks, 4 * sizeof(float)), 0);
    cr_assert_eq((const uint8_t *)q.alibi_slopes, base + l.off[AC_BUF_ALIBI]);
    cr_assert_eq(q.bias, base + l.off[AC_BUF_BIAS]);
    cr_assert_eq(q.softcap, 5.0);
    cr_assert_eq(q.head_dim_v, 8);
    cr_assert(q.dropout_p == p->dropout_p && q.dropout_seed == p->dropout_seed && q.dropout_keep == NULL);
    for (uint64_t i = 0; i < l.bytes[AC_BUF_DROPOUT]; i++)
        cr_assert_eq(base[l.off[AC_BUF_DROPOUT] + i], AC_DROPOUT_POISON);
    for (size_t i = 0; i < ac_bias_elems(p); i++)
        cr_assert_eq(ac_bits_get(AC_F16, base + l.off[AC_BUF_DBIAS], i), ac_dtype_poison(AC_F16));
    ac_problem stripped = *p;
    ac_problem_strip_arrays(&stripped);
    cr_assert(!stripped.sinks && !stripped.bias && !stripped.alibi_slopes && !stripped.cu_seqlens_q &&
              !stripped.cu_seqlens_k && stripped.head_dim_v == 8 && stripped.sink_tokens == p->sink_tokens);
    free(base);
    ac_err err = {{0}};
    /* one f16 past dBias's end, then the second slope changed */
    cr_assert_eq(damage(&in, AC_BUF_DBIAS, (long)l.bytes[AC_BUF_DBIAS], (long)l.bytes[AC_BUF_DBIAS] + 2, &err),
                 AC_KERNEL_FAULT);
    cr_assert(strstr(err.msg, "past the end of dBias: elements end+0 to end+0 (dBias holds 2640 f16") != NULL, "%s",
              err.msg);
    cr_assert_eq(damage(&in, AC_BUF_ALIBI, 4, 5, &err), AC_KERNEL_FAULT);
    cr_assert_str_eq(err.msg,
                     "input-modified: backward changed 1 element of alibi_slopes, the first at element 1 "
                     "(b=0 h=1)");
    /* K's packed row 40 is sequence 2's key 7 (cu_seqlens_k 0, 33, 33, 50: sequence 1 has none) */
    cr_assert_eq(damage(&in, AC_BUF_K, ((40 * 2 + 1) * 16 + 5) * 2, ((40 * 2 + 1) * 16 + 5) * 2 + 1, &err),
                 AC_KERNEL_FAULT);
    cr_assert(strstr(err.msg, "of K, the first at element 1301 (b=2 h=1 j=7 c=5)") != NULL, "%s", err.msg);
    ac_inputs_free(&in);
}
