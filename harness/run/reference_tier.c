/* harness/run/reference_tier.c — which tier computes a case's reference, the
 * gpu tier's run (ref/ref_gpu.h, then MPFR certification and the CPU spot
 * check on the host), the generator's size cap for the tier in use, and a
 * prior for a case's seconds.
 *
 * The device is asked about once per process (ref_gpu_available starts the
 * CUDA runtime), and only when a tier other than cpu is wanted.  With --jobs,
 * workers that share one device take ATTNCHECK_GPU_LOCK (a file the parent
 * made; flock) around the device reference, so one runs there at a time and
 * each can plan for the same fixed share of the device's memory: the block
 * sizes, hence the bits, do not depend on how many workers there are.
 *
 * ac_reference_prepare starts a thread that decides a case's tier and, for
 * the gpu tier, pays the device's fixed costs (ref_gpu_warm_up) while the
 * caller draws the inputs and runs the kernel.  The device state here (the
 * probe, the memory limit) is touched by that thread alone until it is
 * joined: every entry point that reads it joins it first (warm_join). */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "attncheck_config.h"
#if ATTNCHECK_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#include "harness/run/inputs_variants.h"
#include "harness/run/reference_internal.h"
#include "harness/verdict/gate.h"
#include "ref/ref_gpu.h"

/* ---- names and the requested tier ---------------------------------------------- */

static const char *const tier_names[] = {[AC_REF_AUTO] = "auto", [AC_REF_CPU] = "cpu", [AC_REF_GPU] = "gpu"};

const char *ac_ref_tier_name(ac_ref_tier t) { return (unsigned)t <= AC_REF_GPU ? tier_names[t] : "?"; }

int ac_ref_tier_parse(const char *name, ac_ref_tier *out, ac_err *err)
{
    for (int i = 0; i <= AC_REF_GPU; i++)
        if (name && strcmp(name, tier_names[i]) == 0) {
            *out = (ac_ref_tier)i;
            return AC_OK;
        }
    return ac_fail(err, AC_ERR_INPUT, "--reference: unknown tier '%s' (auto, cpu, gpu)", name ? name : "");
}

static ac_ref_tier requested = AC_REF_AUTO;

void ac_reference_set_tier(ac_ref_tier t) { requested = t; }
ac_ref_tier ac_reference_requested_tier(void) { return requested; }

/* ---- the device ------------------------------------------------------------------ */

static int gpu_state = -1; /* -1 not asked yet, 0 unusable, 1 usable */
static ac_err gpu_why;

/* The warm-up thread of ac_reference_prepare: started once per process. */
static pthread_mutex_t warm_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_t warm_thread;
static bool warm_started, warm_running;

static void warm_join(void)
{
    pthread_mutex_lock(&warm_lock);
    if (warm_running)
        pthread_join(warm_thread, NULL);
    warm_running = false;
    pthread_mutex_unlock(&warm_lock);
}

static bool gpu_usable(void)
{
    if (gpu_state < 0)
        gpu_state = ref_gpu_available(&gpu_why) == AC_OK;
    return gpu_state == 1;
}

int ac_reference_tier_check(ac_err *why)
{
    warm_join();
    if (requested != AC_REF_GPU || gpu_usable())
        return AC_OK;
    return ac_fail(why, AC_ERR_ENV, "--reference gpu: %s", gpu_why.msg);
}

/* Device bytes a gpu-tier call may plan for: three fifths of the device's
 * memory, the same in every call and every worker (the rest is the kernels'
 * under test, whose buffers live there too). */
static size_t gpu_mem_limit(void)
{
    static size_t limit;
#if ATTNCHECK_HAVE_CUDA
    size_t free_bytes = 0, total_bytes = 0;
    if (!limit)
        limit = cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess ? total_bytes / 5 * 3 : 1;
#else
    limit = 1;
#endif
    return limit;
}

static bool gpu_plan_fits(const ac_problem *p, ac_dtype t, bool backward)
{
    ref_gpu_plan_t plan;
    return ref_gpu_plan(p, t, backward, true, true, gpu_mem_limit(), 0, &plan, NULL) == AC_OK;
}

static double work_of(const ac_problem *p)
{
    return (double)p->batch * p->heads_q * p->seqlen_q * p->seqlen_k * p->head_dim;
}

static ac_ref_tier tier_of(const ac_problem *p, ac_dtype t, bool backward)
{
    if (requested != AC_REF_AUTO)
        return requested;
    if (work_of(p) < AC_REF_GPU_MIN_WORK || !gpu_usable())
        return AC_REF_CPU;
    return gpu_plan_fits(p, t, backward) ? AC_REF_GPU : AC_REF_CPU;
}

ac_ref_tier ac_reference_tier_for(const ac_problem *p, ac_dtype t, bool backward)
{
    warm_join();
    return tier_of(p, t, backward);
}

/* ---- warming the device up ahead of the reference ---------------------------------- */

static struct {
    ac_problem p;
    ac_dtype t;
    bool backward;
} warm_case;

static void *warm_main(void *arg)
{
    (void)arg;
    ac_err ignored; /* a device that cannot start says so again when the reference runs */
    if (tier_of(&warm_case.p, warm_case.t, warm_case.backward) == AC_REF_GPU)
        (void)ref_gpu_warm_up(&ignored);
    return NULL;
}

static void problem_of(const ac_case *c, ac_problem *p);

void ac_reference_prepare(const ac_case *c, bool backward)
{
    ac_problem p;
    problem_of(c, &p);
    if (requested == AC_REF_CPU || (requested == AC_REF_AUTO && work_of(&p) < AC_REF_GPU_MIN_WORK))
        return; /* the cpu tier: no device to wake */
    pthread_mutex_lock(&warm_lock);
    if (!warm_started) {
        warm_case.p = p, warm_case.t = c->dtype, warm_case.backward = backward;
        warm_started = warm_running = pthread_create(&warm_thread, NULL, warm_main, NULL) == 0;
        if (warm_started)
            atexit(warm_join); /* never leave the process while the driver is starting */
    }
    pthread_mutex_unlock(&warm_lock);
}

/* ---- the gpu tier ---------------------------------------------------------------- */

static int gpu_lock(void)
{
    const char *path = getenv("ATTNCHECK_GPU_LOCK");
    if (!path || !*path)
        return -1;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0)
        flock(fd, LOCK_EX);
    return fd;
}

static void gpu_unlock(int fd)
{
    if (fd < 0)
        return;
    flock(fd, LOCK_UN);
    close(fd);
}

static int spot_check(const ac_inputs *in, bool backward, int rows, const ref_gpu_outputs *got, ac_reference *r,
                      ac_err *err)
{
    ref_gpu_check chk;
    int st = ref_gpu_spot_check(&in->p, in->c.dtype, in->qd, in->kd, in->vd, backward ? in->d_od : NULL, got,
                                (size_t)rows, (size_t)rows, in->c.seed, &chk, err);
    if (st != AC_OK)
        return st;
    ac_ref_info *i = &r->info;
    i->spot_checked = true;
    i->spot_agrees = chk.agrees;
    i->spot_units = chk.worst[chk.worst_output].units;
    snprintf(i->spot_output, sizeof i->spot_output, "%s", ref_gpu_check_name(chk.worst_output));
    i->spot_rows = chk.rows_checked;
    i->spot_keys = chk.keys_checked;
    return AC_OK;
}

int reference_make_gpu(const ac_inputs *in, bool backward, int cert_rows, ac_reference *r, ac_err *err)
{
    ref_gpu_outputs out = {r->o,    r->lse,  r->dq,   r->dk,      r->dv,        r->delta,    r->e_o,      r->e_lse,
                           r->e_dq, r->e_dk, r->e_dv, r->naive_o, r->naive_lse, r->naive_dq, r->naive_dk, r->naive_dv};
    ref_gpu_opts opts = {.device_mem_limit = gpu_mem_limit()};
    int lock = gpu_lock();
    int st =
        ref_gpu_reference(&in->p, in->c.dtype, in->q, in->k, in->v, backward ? in->d_o : NULL, &opts, &out, NULL, err);
    gpu_unlock(lock);
    if (st == AC_OK)
        st = reference_certify(in, cert_rows, r, err);
    if (st == AC_OK && cert_rows > 0)
        st = spot_check(in, backward, cert_rows, &out, r, err);
    return st;
}

bool ac_reference_note(const ac_reference *ref, ac_cert *cert, ac_ref_info *info, char *why, size_t why_len)
{
    *cert = ref->cert;
    *info = ref->info;
    bool uncertified = ac_cert_note(&ref->cert, why, why_len);
    if (!info->spot_checked || info->spot_agrees)
        return uncertified;
    cert->certified = false;
    size_t used = strlen(why);
    if (used + 1 < why_len)
        snprintf(why + used, why_len - used,
                 "%sreference not certified: the GPU reference is %.3g units from the CPU spot check at %s "
                 "(> 1/64; %zu rows, %zu keys sampled); not a kernel failure, the GPU tier needs a closer look",
                 used ? "; " : "", info->spot_units, info->spot_output, info->spot_rows, info->spot_keys);
    return true;
}

/* ---- sizes for the generator and the time budget -------------------------------- */

/* A case's problem without its inputs: sizes, layout, scale, mask and
 * variants (a dense mask, sinks, ALiBi slopes and a bias only as flags: the
 * plan and the estimates read no more of them; the GPU tier refuses every
 * variant and THD, ref_gpu_supports, before reading anything).  THD has no
 * cu_seqlens here: what reads lengths takes its padded twin (padded_twin). */
static void problem_of(const ac_case *c, ac_problem *p)
{
    static const uint8_t dense_flag = 1, bias_flag = 0;
    static const float f32_flag = 0.0f;
    *p = ac_problem_dense(c->batch, c->heads_q, c->heads_kv, c->seqlen_q, c->seqlen_k, c->head_dim);
    p->layout = c->layout;
    p->scale = c->scale;
    ac_case_mask_to_problem(c, p);
    if (c->mask == AC_MASK_DENSE)
        p->dense_mask = &dense_flag;
    inputs_variants_problem(c, p); /* dv, softcap, sink tokens, dropout, maskdims */
    if (c->sinks != AC_SINKS_NONE)
        p->sinks = &f32_flag;
    if (c->alibi != AC_ALIBI_NONE)
        p->alibi_slopes = &f32_flag;
    if (c->bias != AC_BIAS_NONE) {
        p->bias = &bias_flag;
        p->bias_batch = c->bias_per_batch ? c->batch : 1, p->bias_heads = c->bias_per_head ? c->heads_q : 1;
    }
    if (c->kv_page_size > 0) { /* the cache's pages at most (inputs_paged.c: no prefix shared, spares) */
        int used = c->batch * ((c->seqlen_k + c->kv_page_size - 1) / c->kv_page_size);
        p->page_size = c->kv_page_size;
        p->num_pages = used + 1 + used / 4;
    }
}

/* THD's padded twin (bshd, the same extents): what its lengths bound. */
static ac_problem padded_twin(const ac_problem *p)
{
    ac_problem q = *p;
    if (q.layout == AC_LAYOUT_THD)
        q.layout = AC_LAYOUT_BSHD;
    return q;
}

/* Workers assumed by the generator's memory test (ref/parallel.c caps the
 * scratch at 1 GiB beyond a few workers, so this hardly matters). */
#define CAP_WORKERS 16

typedef struct {
    bool backward;
    bool gpu; /* the gpu tier may run */
} cap_ctx;

static bool case_fits(const ac_case *c, const void *ctx)
{
    const cap_ctx *x = ctx;
    warm_join();
    ac_problem p;
    problem_of(c, &p);
    if (ac_problem_working_set(&p, CAP_WORKERS) > (double)ac_mem_budget() || !ac_inputs_mask_fits(c))
        return false;
    if (!x->gpu || (requested == AC_REF_AUTO && work_of(&p) < AC_REF_GPU_MIN_WORK))
        return true;
    if (ref_gpu_supports(&p, NULL) != AC_OK)
        return true; /* the cpu tier's: the generator keeps its work cap (generate.c) */
    return gpu_plan_fits(&p, c->dtype, x->backward);
}

void ac_reference_gen_cap(bool backward, ac_gen_cap *cap)
{
    static cap_ctx ctx;
    warm_join();
    ctx.backward = backward;
    ctx.gpu = requested != AC_REF_CPU && gpu_usable();
    cap->max_work = ctx.gpu ? -1 : 0;
    cap->fits = case_fits;
    cap->ctx = &ctx;
}

#define CPU_UNITS_PER_S 4e8 /* measured: nq=64 nk=2e5 d=64 bf16 with backward, 2 cores */
#define GPU_UNITS_PER_S 5e11 /* estimated: an H100's fp64 rate over ~20 flops a unit */
#define MPFR_S_PER_ROW_KEY 0.6e-6 /* measured: 8 rows x 2e5 keys certified in ~1 s */

static double visible_pairs(const ac_problem *problem, const ac_case *c)
{
    ac_problem twin = padded_twin(problem), *p = &twin;
    if (!p->windowed)
        return (double)p->seqlen_q * p->seqlen_k * (c->mask == AC_MASK_DENSE ? c->dense_keep : 1.0);
    double pairs = 0;
    for (int i = 0; i < p->seqlen_q; i++) {
        int lo, hi;
        ac_visible_range(p, 0, i, &lo, &hi);
        pairs += hi > lo ? hi - lo : 0;
    }
    return pairs;
}

/* What a case's variants cost per unit of work, against its plain twin: measured
 * `attncheck run --case 'v1 seed=5 b=1 hq=4 hkv=2 nq=1024 nk=1024 d=64 dtype=f16
 * mask=none' --kernel cpu-flash` (backward, 2 cores) at 0.49 s, and with the
 * variant: a (B, Hq) bias 2.04 s (dBias, its scale, visibility per pair), softcap
 * 1.19 s (a tanh per score in every tier), dropout 1.11 s (the keep mask per pair,
 * two more forwards for the seed checks), ALiBi 0.76 s, sinks 0.53 s. */
static double variant_cost(const ac_case *c)
{
    double f = 1.0;
    f += c->bias != AC_BIAS_NONE ? 3.2 : 0.0;
    f += c->softcap > 0.0 ? 1.4 : 0.0;
    f += c->dropout > 0.0 ? 1.3 : 0.0;
    f += c->alibi != AC_ALIBI_NONE ? 0.6 : 0.0;
    f += c->sinks != AC_SINKS_NONE ? 0.1 : 0.0;
    return f;
}

double ac_reference_seconds_prior(const ac_case *c, bool backward, int cert_rows)
{
    ac_problem p;
    problem_of(c, &p);
    double work = (double)c->batch * c->heads_q * visible_pairs(&p, c) * (c->head_dim + 12) * (backward ? 3 : 1) *
        variant_cost(c);
    double rate = ac_reference_tier_for(&p, c->dtype, backward) == AC_REF_GPU ? GPU_UNITS_PER_S : CPU_UNITS_PER_S;
    double rows = fmin((double)cert_rows, (double)c->batch * c->heads_q * c->seqlen_q);
    return work / rate + rows * c->seqlen_k * MPFR_S_PER_ROW_KEY;
}
