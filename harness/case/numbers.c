/* harness/case/numbers.c — the numbers of case lines, read strictly and
 * written canonically: readers take the whole string or nothing (the grammar
 * of case.h's ac_read_decimal and ac_read_unsigned, which the command line
 * and the budgets file read too), writers print the shortest form that reads
 * back to the same value, so parse -> format is byte-identical. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/case/case.h"
#include "harness/case/case_internal.h"

/* ---- canonical numbers ---------------------------------------------------- */

/* Integers below 10^15 print as integers: "dominant(20)", not "2e+01". */
static bool fmt_integer(char *buf, size_t len, double x)
{
    if (x != floor(x) || fabs(x) >= 1e15)
        return false;
    snprintf(buf, len, "%.0f", x);
    return true;
}

void case_fmt_double(char *buf, size_t len, double x)
{
    if (fmt_integer(buf, len, x))
        return;
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

void case_fmt_f32(char *buf, size_t len, double x)
{
    float f = (float)x;
    if (fmt_integer(buf, len, (double)f))
        return;
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, len, "%.*g", prec, (double)f);
        if ((float)strtod(buf, NULL) == f)
            return;
    }
}

/* ---- reading values -------------------------------------------------------- */

int case_bad(ac_err *err, const char *key, const char *what, const char *got)
{
    return ac_fail(err, AC_ERR_INPUT, "%s: expected %s, got '%s'", key, what, got);
}

bool ac_read_unsigned(const char *s, unsigned long long max, unsigned long long *out)
{
    if (!*s)
        return false;
    unsigned long long v = 0;
    for (; *s; s++) {
        if (!isdigit((unsigned char)*s))
            return false;
        unsigned digit = (unsigned)(*s - '0');
        if (v > (max - digit) / 10)
            return false;
        v = v * 10 + digit;
    }
    *out = v;
    return true;
}

/* [-]digits[.digits][(e|E)[+|-]digits], with digits on at least one side of
 * the point: what %g prints, and nothing strtod also takes (blanks, '+', hex,
 * inf, nan, a locale's decimal comma). */
static bool decimal_syntax(const char *s)
{
    const char *p = s + (*s == '-');
    size_t whole = strspn(p, "0123456789"), frac = 0;
    p += whole;
    if (*p == '.')
        frac = strspn(++p, "0123456789"), p += frac;
    if (whole + frac == 0)
        return false;
    if (*p == 'e' || *p == 'E') {
        p += 1 + (p[1] == '+' || p[1] == '-');
        size_t exp_digits = strspn(p, "0123456789");
        if (!exp_digits)
            return false;
        p += exp_digits;
    }
    return *p == '\0';
}

bool ac_read_decimal(const char *s, double *out)
{
    if (!decimal_syntax(s))
        return false;
    errno = 0;
    double v = strtod(s, NULL);
    if (errno == ERANGE || !isfinite(v))
        return false;
    *out = v;
    return true;
}

bool case_read_digits(const char *s, unsigned long long max, unsigned long long *out)
{
    return ac_read_unsigned(s, max, out);
}

bool case_read_number(const char *s, double *out) { return ac_read_decimal(s, out); }

bool case_split_call(char *s, const char **name, char **args)
{
    char *open = strchr(s, '(');
    size_t n = strlen(s);
    if (!open || n < 2 || s[n - 1] != ')')
        return false;
    *open = '\0';
    s[n - 1] = '\0';
    *name = s;
    *args = open + 1;
    return true;
}

int case_read_numbers(char *args, double *vals, int max)
{
    if (!*args)
        return 0;
    int n = 0;
    for (char *tok = args;; n++) {
        char *comma = strchr(tok, ',');
        if (comma)
            *comma = '\0';
        if (n >= max || !case_read_number(tok, &vals[n]))
            return -1;
        if (!comma)
            return n + 1;
        tok = comma + 1;
    }
}
