/* harness/run/inputs.h — a case made concrete: the problem, Q, K, V and dO
 * in the case's dtype with their exact widenings, the mask and the lengths.
 * Comes from a case (ac_inputs_make) or from tensor files (cli/check_files.c);
 * the kernel run, the reference and the comparator all read it. */
#ifndef ATTNCHECK_INPUTS_H
#define ATTNCHECK_INPUTS_H

#include "harness/case/case.h"
#include "ref/ref.h"

typedef struct {
    ac_case c;
    ac_problem p;
    /* Q, K, V and dO are stored in c.dtype; the kernel writes O, dQ, dK, dV in
     * ac_case_out_dtype(&c) (the same dtype for f32, f16, bf16; bf16 for fp8
     * inputs) and LSE in f32: ac_inputs_out_dtype. */
    void *q, *k, *v, *d_o; /* c.dtype bit patterns */
    double *qd, *kd, *vd, *d_od; /* exact widenings */
    int *seqlens_q, *seqlens_k; /* owned; p points at them */
    uint8_t *dense_mask; /* owned; p points at it */
    /* the variants' arrays (run/inputs_variants.c; NULL when unused), owned; p points at them */
    float *sinks; /* (Hq) sink logits */
    float *alibi; /* (1 or B, Hq) ALiBi slopes */
    void *bias; /* (1|B, 1|Hq, Nq, Nk) additive bias, bits of p.bias_dtype */
    uint8_t *dropout_keep; /* check's --dropout-mask: (B, Hq, Nq, Nk) 1 = kept */
    int *cu_seqlens_q, *cu_seqlens_k; /* (B + 1) THD row offsets */
    /* kv=paged(P) (run/inputs_paged.c): k, v, kd, vd are then the pages (num_pages, P, Hkv, d) */
    int *block_table; /* (B, pages_per_seq) page ids, owned; p points at it */
    /* fp8 (run/inputs_fp8.c): f32 descale factors, ac_descale_count(p, Q/K/V) each; the
     * widenings qd, kd, vd are code * descale.  NULL for other dtypes. */
    float *descale_q, *descale_k, *descale_v;
} ac_inputs;

/* Validates c (ac_case_validate, then ac_problem_validate with the default memory
 * budget), builds the problem (scale: the f32 value the kernel uses,
 * (double)(float)(1/sqrt(d)) for scale=auto; dense mask (1, 1, Nq, Nk) with the
 * maskrows fraction of rows fully masked) and draws Q, K, V, dO from the case
 * seed: the same case gives byte-identical tensors, in either layout the same
 * logical values; varlen padding is NaN (ac_inputs_nan_padding).  in is
 * zeroed first, so ac_inputs_free is safe after a failure. */
/* Whether the case's dense mask, one byte a pair, fits the inputs' budget (a
 * quarter of the default memory budget): the generator's size cap asks too,
 * so a long-context draw never becomes a case that cannot be made. */
bool ac_inputs_mask_fits(const ac_case *c);
int ac_inputs_make(const ac_case *c, ac_inputs *in, ac_err *err);
void ac_inputs_free(ac_inputs *in);
/* kv=paged(P): the contiguous K, V just drawn moved into pages through a block
 * table drawn from the case seed (shuffled, shared prefix pages, spare pages;
 * in order with kv=paged(P,contig)); every slot no sequence uses is NaN.  Sets
 * the problem's paged fields and num_splits (run/inputs_paged.c).  Done by
 * ac_inputs_make. */
int ac_inputs_page(ac_inputs *in, ac_err *err);
/* What the reference tiers read of a paged case: *view is a shallow copy of
 * *in with the contiguous twin problem (ac_problem_unpaged) and K, V widenings
 * gathered through the block table (its own, freed by ac_inputs_unpaged_free;
 * the dtype bits k, v stay the pages).  Not paged: *view = *in, nothing owned. */
int ac_inputs_unpaged(const ac_inputs *in, ac_inputs *view, ac_err *err);
void ac_inputs_unpaged_free(const ac_inputs *in, ac_inputs *view);
/* Varlen padding: rows i >= nq_b of Q and dO, keys j >= nk_b of K and V
 * become NaN (bits and widenings), so a kernel that lets padding reach a sum
 * produces NaN and fails unexpected-nan (xformers' nanify_oob_seqlen).  The
 * contract leaves padding unspecified; attncheck makes it NaN.  Done by
 * ac_inputs_make; check --kernel calls it on the files' inputs.  Tensors not
 * present (NULL) are skipped. */
void ac_inputs_nan_padding(ac_inputs *in);
/* The dtype the kernel writes O, dQ, dK, dV in. */
ac_dtype ac_inputs_out_dtype(const ac_inputs *in);
/* huge/tiny: 0 = "scores" (Q, K), 1 = "values" (V); a function of the case seed. */
int ac_dist_mode(const ac_case *c);

#endif
