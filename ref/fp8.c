/* ref/fp8.c — fp8 problems: which they are, where their descale factors sit,
 * and P's rounding recipe (docs/DESIGN.md, "fp8").  The dtypes themselves are
 * rows of ref/dtype.c's table. */
#include <math.h>

#include "ref.h"

bool ac_problem_is_fp8(const ac_problem *p) { return p->fp8_out != AC_F32; }

static int rows_of(const ac_problem *p, ac_tensor_kind kind) { return kind == AC_TENSOR_Q ? p->seqlen_q : p->seqlen_k; }

static int blocks_of(const ac_problem *p, ac_tensor_kind kind)
{
    return (rows_of(p, kind) + p->descale_rows - 1) / p->descale_rows;
}

size_t ac_descale_count(const ac_problem *p, ac_tensor_kind kind)
{
    if (p->descale_rows == AC_DESCALE_TENSOR)
        return 1;
    if (p->descale_rows == AC_DESCALE_HEAD)
        return (size_t)p->batch * p->heads_kv;
    int heads = kind == AC_TENSOR_Q ? p->heads_q : p->heads_kv;
    return (size_t)p->batch * heads * blocks_of(p, kind);
}

size_t ac_descale_index(const ac_problem *p, ac_tensor_kind kind, int b, int h, int s)
{
    if (p->descale_rows == AC_DESCALE_TENSOR)
        return 0;
    if (p->descale_rows == AC_DESCALE_HEAD) /* Q's heads of a group share their kv head's factor */
        return (size_t)b * p->heads_kv + (kind == AC_TENSOR_Q ? ac_kv_head_of(p, h) : h);
    int heads = kind == AC_TENSOR_Q ? p->heads_q : p->heads_kv;
    return ((size_t)b * heads + h) * blocks_of(p, kind) + s / p->descale_rows;
}

float ac_fp8_p_round(ac_dtype fmt, float p_scaled) { return (float)ac_round(fmt, p_scaled); }
