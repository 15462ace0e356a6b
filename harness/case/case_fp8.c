/* harness/case/case_fp8.c — the case line's fp8 fields, rows of case.c's table:
 *   out=bf16|f16                       O's dtype (fp8 kernels write 16 bits; LSE f32)
 *   descale=tensor|head|block(N)       the descale factors' granularity (N a multiple of 16)
 *   p=e4m3|e5m2|bf16|f16               P's format before P V, as the kernel declares it
 *   acc=f32|e8mB                        the fp8 products' accumulator, as the kernel declares it (B fraction
 *                                      bits truncated every 32 products: Hopper's fp8 wgmma, e8m13)
 * Meaningful only with dtype=e4m3|e5m2: out, descale and p printed with every
 * fp8 line (so an fp8 line says its whole recipe), acc where it is not f32 (so
 * the lines written before it keep their bytes), never with another dtype;
 * given with another dtype at other than the default, an error. */
#include <stdio.h>
#include <string.h>

#include "harness/case/case.h"
#include "harness/case/case_internal.h"

static int not_fp8(const case_field *f, const ac_case *c, bool at_default, ac_err *err)
{
    if (ac_dtype_is_fp8(c->dtype) || at_default)
        return AC_OK;
    return ac_fail(err, AC_ERR_INPUT, "%s: only with an fp8 dtype (e4m3, e5m2), not dtype=%s", f->key,
                   ac_dtype_name(c->dtype));
}

int case_parse_out(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    ac_dtype t;
    if (ac_dtype_parse(value, &t) != AC_OK || (t != AC_BF16 && t != AC_F16))
        return case_bad(err, f->key, "bf16 or f16", value);
    c->out_dtype = t;
    return AC_OK;
}

bool case_format_out(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    snprintf(buf, len, "%s", ac_dtype_name(c->out_dtype));
    return !ac_dtype_is_fp8(c->dtype);
}

void case_reset_out(ac_case *c) { c->out_dtype = AC_BF16; }

int case_validate_out(const case_field *f, const ac_case *c, ac_err *err)
{
    if (c->out_dtype != AC_BF16 && c->out_dtype != AC_F16)
        return ac_fail(err, AC_ERR_INPUT, "%s: bf16 or f16, not %s", f->key, ac_dtype_name(c->out_dtype));
    return not_fp8(f, c, c->out_dtype == AC_BF16, err);
}

#define MAX_DESCALE_ROWS 65536

int case_parse_descale(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    const char *what = "tensor, head or block(N), N a multiple of 16";
    if (strcmp(value, "tensor") == 0 || strcmp(value, "head") == 0) {
        c->descale_rows = value[0] == 't' ? AC_DESCALE_TENSOR : AC_DESCALE_HEAD;
        return AC_OK;
    }
    char tmp[64];
    const char *name;
    char *args;
    double n[1];
    if (strlen(value) >= sizeof tmp)
        return case_bad(err, f->key, what, value);
    strcpy(tmp, value);
    if (!case_split_call(tmp, &name, &args) || strcmp(name, "block") != 0 || case_read_numbers(args, n, 1) != 1 ||
        !(n[0] >= 16 && n[0] <= MAX_DESCALE_ROWS) || n[0] != (double)(int)n[0] || (int)n[0] % 16 != 0)
        return case_bad(err, f->key, what, value);
    c->descale_rows = (int)n[0];
    return AC_OK;
}

bool case_format_descale(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    if (c->descale_rows > 0)
        snprintf(buf, len, "block(%d)", c->descale_rows);
    else
        snprintf(buf, len, "%s", c->descale_rows == AC_DESCALE_HEAD ? "head" : "tensor");
    return !ac_dtype_is_fp8(c->dtype);
}

void case_reset_descale(ac_case *c) { c->descale_rows = AC_DESCALE_TENSOR; }

int case_validate_descale(const case_field *f, const ac_case *c, ac_err *err)
{
    if (c->descale_rows < AC_DESCALE_HEAD || c->descale_rows > MAX_DESCALE_ROWS ||
        (c->descale_rows > 0 && c->descale_rows % 16 != 0))
        return ac_fail(err, AC_ERR_INPUT, "%s: bad granularity %d", f->key, c->descale_rows);
    return not_fp8(f, c, c->descale_rows == AC_DESCALE_TENSOR, err);
}

int case_parse_pfmt(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    ac_dtype t;
    if (ac_dtype_parse(value, &t) != AC_OK || t == AC_F32)
        return case_bad(err, f->key, "e4m3, e5m2, bf16 or f16", value);
    c->p_dtype = t;
    return AC_OK;
}

bool case_format_pfmt(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    snprintf(buf, len, "%s", ac_dtype_name(c->p_dtype));
    return !ac_dtype_is_fp8(c->dtype);
}

void case_reset_pfmt(ac_case *c) { c->p_dtype = AC_E4M3; }

int case_validate_pfmt(const case_field *f, const ac_case *c, ac_err *err)
{
    if ((unsigned)c->p_dtype >= AC_DTYPE_COUNT || c->p_dtype == AC_F32)
        return ac_fail(err, AC_ERR_INPUT, "%s: e4m3, e5m2, bf16 or f16", f->key);
    return not_fp8(f, c, c->p_dtype == AC_E4M3, err);
}

bool ac_fp8_acc_parse(const char *text, int *bits)
{
    unsigned long long b = 0;
    if (strcmp(text, "f32") == 0) {
        *bits = 0;
        return true;
    }
    if (strncmp(text, "e8m", 3) != 0 || !ac_read_unsigned(text + 3, AC_FP8_ACC_MAX_BITS, &b) || b < 1)
        return false;
    *bits = (int)b;
    return true;
}

int case_parse_fp8acc(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    if (!ac_fp8_acc_parse(value, &c->acc_bits))
        return case_bad(err, f->key, "f32 or e8mB, B fraction bits in 1..22", value);
    return AC_OK;
}

bool case_format_fp8acc(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    if (c->acc_bits > 0)
        snprintf(buf, len, "e8m%d", c->acc_bits);
    else
        snprintf(buf, len, "f32");
    return c->acc_bits == 0;
}

void case_reset_fp8acc(ac_case *c) { c->acc_bits = 0; }

int case_validate_fp8acc(const case_field *f, const ac_case *c, ac_err *err)
{
    if (c->acc_bits < 0 || c->acc_bits > AC_FP8_ACC_MAX_BITS)
        return ac_fail(err, AC_ERR_INPUT, "%s: f32 or e8mB with B in 1..22, not %d bits", f->key, c->acc_bits);
    return not_fp8(f, c, c->acc_bits == 0, err);
}
