/* harness/run/inputs_dominant.c — dist=dominant: after Q, K, V are drawn, one
 * key per (b, kv head) is replaced so that its score beats every other score
 * of the group by the margin (dist_a).  Split from inputs.c (the streams and
 * the draws), whose comment says how the inputs are drawn. */
#include <math.h>
#include <stdlib.h>

#include "harness/run/inputs_internal.h"
#include "ref/parallel.h"
#include "ref/rng.h"

/* ---- dominant: one key per (b, kv head) beats the others by the margin ------ */

/* The next dtype value above x's (bits of a finite value). */
static uint32_t next_up(ac_dtype t, uint32_t bits)
{
    uint32_t sign_bit = ac_narrow(t, -0.0); /* -0 is the sign bit alone, whatever the width */
    if (bits == sign_bit)
        return 1; /* -0 -> smallest positive subnormal */
    return (bits & sign_bit) ? bits - 1 : bits + 1;
}

/* The largest score scale * Q_i . K_j of (b, kv head hk)'s group over keys
 * j != jstar, for the group's rows [r0, r1) (row r: query head hk G + r / nq,
 * position r % nq), from 0. */
static double max_other_score(const ac_inputs *in, int b, int hk, int jstar, int r0, int r1)
{
    const ac_problem *p = &in->p;
    int group = p->heads_q / p->heads_kv, nq = ac_seqlen_q_of(p, b), nk = ac_seqlen_k_of(p, b);
    double best = 0.0;
    for (int r = r0; r < r1 && r < group * nq; r++) {
        int h = hk * group + r / nq, i = r % nq;
        const double *q = in->qd + ac_q_index(p, b, h, i, 0); /* channels are contiguous in both layouts */
        for (int j = 0; j < nk; j++) {
            if (j == jstar)
                continue;
            const double *k = in->kd + ac_kv_index(p, b, hk, j, 0);
            double s = 0.0;
            for (int ch = 0; ch < p->head_dim; ch++)
                s += q[ch] * k[ch];
            best = fmax(best, p->scale * s);
        }
    }
    return best;
}

/* Every group's maximum at once: task = (group, block of DOMINANT_ROWS rows);
 * a maximum is exact, so the blocks' order does not matter. */
#define DOMINANT_ROWS 64
typedef struct {
    const ac_inputs *in;
    const int *jstar; /* per group (b, hk); -1: the batch has no keys */
    int blocks; /* per group */
    double *best; /* per task */
} dominant_job;

static void dominant_task(void *ctx, size_t task, int worker)
{
    (void)worker;
    dominant_job *j = ctx;
    int g = (int)(task / (size_t)j->blocks), blk = (int)(task % (size_t)j->blocks);
    int heads_kv = j->in->p.heads_kv;
    j->best[task] = j->jstar[g] < 0 ? 0.0
                                    : max_other_score(j->in, g / heads_kv, g % heads_kv, j->jstar[g],
                                                      blk * DOMINANT_ROWS, (blk + 1) * DOMINANT_ROWS);
}

/* The planted key of group g: column 0 the smallest dtype value with
 * scale * Q_i0 * K_j*0 >= the group's best other score + margin, the rest 0. */
static int plant_key(ac_inputs *in, int b, int hk, int jstar, double best, ac_err *err)
{
    const ac_problem *p = &in->p;
    ac_dtype t = in->c.dtype;
    /* S_ij* = scale * Q_i0 * beta = |scale| * beta, since Q_i0 = sign(scale). */
    double beta = (best + in->c.dist_a) / fabs(p->scale);
    uint32_t bits = ac_narrow(t, beta);
    if (ac_widen(t, bits) < beta)
        bits = next_up(t, bits);
    if (!isfinite(ac_widen(t, bits)))
        return ac_fail(err, AC_ERR_INPUT, "dist: dominant(%g) needs a key of %g, beyond %s's range", in->c.dist_a, beta,
                       ac_dtype_name(t));
    for (int ch = 0; ch < p->head_dim; ch++) {
        size_t at = ac_kv_index(p, b, hk, jstar, ch);
        uint32_t v = ch == 0 ? bits : ac_narrow(t, 0.0);
        ac_bits_put(t, in->k, at, v);
        in->kd[at] = ac_widen(t, v);
    }
    return AC_OK;
}

/* One key per (b, kv head), drawn in that order; each group's maximum reads
 * only its own K head, so all are computed before any key is planted. */
int inputs_plant_dominant(ac_inputs *in, int workers, ac_err *err)
{
    const ac_problem *p = &in->p;
    int groups = p->batch * p->heads_kv,
        blocks = (p->heads_q / p->heads_kv * p->seqlen_q + DOMINANT_ROWS - 1) / DOMINANT_ROWS;
    int *jstar = malloc(sizeof(int) * (size_t)groups);
    double *best = malloc(sizeof(double) * (size_t)groups * (size_t)blocks);
    if (!jstar || !best) {
        free(jstar), free(best);
        return ac_fail(err, AC_ERR_ENV, "inputs: out of memory");
    }
    uint64_t state = inputs_stream(in->c.seed, INPUTS_STREAM_DOMINANT);
    for (int g = 0; g < groups; g++) {
        int nk = ac_seqlen_k_of(p, g / p->heads_kv);
        jstar[g] = nk == 0 ? -1 : (int)(ac_splitmix64(&state) % (uint64_t)nk);
    }
    dominant_job job = {in, jstar, blocks, best};
    ref_parallel_for(workers < 1 ? 1 : workers, (size_t)groups * (size_t)blocks, dominant_task, &job);
    int st = AC_OK;
    for (int g = 0; g < groups && st == AC_OK; g++) {
        if (jstar[g] < 0)
            continue;
        double most = 0.0;
        for (int blk = 0; blk < blocks; blk++)
            most = fmax(most, best[(size_t)g * blocks + blk]);
        st = plant_key(in, g / p->heads_kv, g % p->heads_kv, jstar[g], most, err);
    }
    free(jstar), free(best);
    return st;
}
