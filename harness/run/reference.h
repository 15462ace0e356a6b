/* harness/run/reference.h — the reference bundle: everything one case is
 * compared with, allocated once per case:
 *   o, lse, dq, dk, dv, delta: the fp64 reference (ref_forward_fp64 / ref_backward_fp64);
 *   e_*: error scales E (ref_error_scales), scaled_err = |y - x| / (u * E);
 *   e_lse: the LSE scale (ref_lse_error_scale, ref/ref.h), in f32 units whatever
 *     the dtype, since a fused kernel computes LSE in f32;
 *   naive_*: the same-dtype naive baseline (ref_naive_forward / _backward, the
 *     backward fed the naive O and LSE, as a framework would);
 *   cert: the MPFR certification of o/lse on cert_rows sampled rows (seed = the
 *     case seed); cert_rows == 0 skips it (rows_checked == 0, certified false).
 * backward needs in->d_od; r is zeroed first, so ac_reference_free is safe after a failure.
 *
 * Two tiers compute the same bundle (reference_tier.c chooses per case):
 *   cpu: ref/ on the host (OpenBLAS, threads);
 *   gpu: ref/ref_gpu.h on a CUDA device, then on the host the MPFR
 *     certification exactly as on the cpu tier and ref_gpu_spot_check on as
 *     many sampled rows and keys (its own sampler, the case seed); a spot check
 *     that disagrees makes the case "reference not certified" (certified false,
 *     a note in why), never a kernel verdict.
 * --reference auto (the default) takes gpu when a device is usable, the case
 * is big enough for the device to win (AC_REF_GPU_MIN_WORK) and its memory
 * plan fits; cpu otherwise.  The tier a case used travels in ac_ref_info. */
#ifndef ATTNCHECK_REFERENCE_H
#define ATTNCHECK_REFERENCE_H

#include "harness/case/generate.h"
#include "harness/run/inputs.h"
#include "ref/ref.h"

typedef enum { AC_REF_AUTO = 0, AC_REF_CPU, AC_REF_GPU } ac_ref_tier;
const char *ac_ref_tier_name(ac_ref_tier t); /* "auto", "cpu", "gpu" */
/* "auto" / "cpu" / "gpu"; AC_ERR_INPUT naming the choices otherwise. */
int ac_ref_tier_parse(const char *name, ac_ref_tier *out, ac_err *err);

/* What computed a case's reference and how it was checked. */
typedef struct {
    ac_ref_tier tier; /* AC_REF_CPU or AC_REF_GPU: the one that ran */
    bool spot_checked; /* gpu: ref_gpu_spot_check ran (cert_rows > 0) */
    bool spot_agrees; /* every sampled element within AC_CERT_MAX_ULP */
    double spot_units; /* its largest disagreement, in ref_gpu.h's units */
    char spot_output[8]; /* the output it was in: "O", "LSE", "dQ", "dK", "dV", "D" */
    size_t spot_rows, spot_keys;
} ac_ref_info;

typedef struct {
    bool has_backward;
    double *o, *lse, *dq, *dk, *dv, *delta; /* fp64 reference */
    double *e_o, *e_lse, *e_dq, *e_dk, *e_dv; /* error scales (e_lse: see above) */
    double *naive_o, *naive_lse, *naive_dq, *naive_dk, *naive_dv; /* same-dtype naive baseline */
    ac_cert cert;
    /* the variants' parameter gradients (backward, when the problem uses them; else NULL):
     * dsink (Hq) and its scale e_dsink (f32 units), ref_backward_params_fp64 / ref_param_error_scales */
    double *dsink, *e_dsink;
    /* dbias (ac_bias_elems) and e_dbias (units of the bias dtype), ref_backward_dbias_fp64 / ref_error_scales_dbias */
    double *dbias, *e_dbias;
    ac_ref_info info;
} ac_reference;

int ac_reference_make(const ac_inputs *in, bool backward, int cert_rows, ac_reference *r, ac_err *err);
void ac_reference_free(ac_reference *r);
/* After the gate: copies ref's certificate and info into a result's, and
 * appends to why what makes the reference uncertified (gate.h's ac_cert_note
 * for MPFR; the GPU spot check's disagreement).  True when it is not certified. */
bool ac_reference_note(const ac_reference *ref, ac_cert *cert, ac_ref_info *info, char *why, size_t why_len);

/* ---- the tier (reference_tier.c) ---------------------------------------------
 * The tier --reference asks for, process-wide (default auto; every subcommand
 * that builds references reads it). */
void ac_reference_set_tier(ac_ref_tier t);
ac_ref_tier ac_reference_requested_tier(void);
/* AC_OK when the requested tier can run here (gpu: a usable device), else
 * AC_ERR_ENV with why.  auto is always AC_OK. */
int ac_reference_tier_check(ac_err *why);
/* The tier a problem in dtype t would use (auto resolved): AC_REF_CPU or AC_REF_GPU. */
ac_ref_tier ac_reference_tier_for(const ac_problem *p, ac_dtype t, bool backward);
/* Call before ac_inputs_make: when case c (backward: whether the run has it)
 * may take the gpu tier, a thread of its own decides and, for the gpu tier,
 * pays the device's fixed costs (ref_gpu_warm_up: CUDA context, cuBLAS
 * handle, pinned staging), overlapping the inputs' draws and the kernel; the
 * tier functions here wait for it before they touch the device.  Once per
 * process; nothing for cases the cpu tier takes by their size or --reference
 * cpu.  Never fails: a device that cannot start says so when the reference
 * runs. */
void ac_reference_prepare(const ac_case *c, bool backward);
/* auto takes the device from this much work on (b*hq*nq*nk*d): below it the
 * CPU tier finishes before the device's fixed costs (context, cuBLAS handle,
 * allocations, copies: ~20 ms a call, estimated) are paid back.  An estimate
 * from the CPU tier's measured rate (~1e9 work units/s on 16 cores, 2.5e8 on
 * 2): 2^25 units is ~30 ms on 16 cores.  attncheck-bench-ref --gpu prints both
 * tiers' times to tune it. */
#define AC_REF_GPU_MIN_WORK (33554432.0)

/* The generator's size cap for the tier in use: on the cpu tier the default
 * work cap and a working set (ac_problem_working_set, 16 workers assumed so the
 * stream does not depend on the machine's core count) within ac_mem_budget();
 * where the gpu tier can run, no work cap, and a case fits when the cpu tier's
 * memory test or the device plan (ref_gpu_plan within the device limit) with
 * the host arrays (its bundle, inputs and outputs) within the budget passes.
 * backward: whether the campaign runs the backward. */
void ac_reference_gen_cap(bool backward, ac_gen_cap *cap);

/* A prior for one case's seconds (kernel excluded), from its sizes: the tier's
 * rate (cpu ~4e8 work units/s, measured on the 2-core CI machine; gpu ~5e11,
 * estimated from an H100's fp64 rate) on b*hq*visible pairs*(d + 12), tripled
 * with the backward, times what the case's variants cost (a bias x4.2,
 * softcap x2.4, dropout x2.3, ALiBi x1.6, sinks x1.1, added: measured against
 * the plain twin), plus the MPFR certification's ~0.6 us per certified
 * (row, key) (measured).  campaign.c scales it by what it measures. */
double ac_reference_seconds_prior(const ac_case *c, bool backward, int cert_rows);

#endif
