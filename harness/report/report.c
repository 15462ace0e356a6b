/* harness/report/report.c — the table of report formats, and a report: the
 * formats one invocation asked for, each fed every result and written at
 * close.  Everything is collected in memory and written at close, each file
 * through ac_write_atomic (temp + fsync + rename). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/files/files.h"
#include "harness/report/report.h"
#include "harness/report/report_internal.h"

/* The formats, one row each; each is defined in its own report_<name>.c. */
extern const ac_report_format ac_report_json, ac_report_junit, ac_report_markdown;
static const ac_report_format *const formats[] = {&ac_report_json, &ac_report_junit, &ac_report_markdown};
enum { N_FORMATS = (int)(sizeof formats / sizeof formats[0]) };
_Static_assert(N_FORMATS <= AC_REPORT_MAX_FORMATS, "raise AC_REPORT_MAX_FORMATS");

size_t ac_report_format_count(void) { return N_FORMATS; }
const ac_report_format *ac_report_format_at(size_t i) { return i < N_FORMATS ? formats[i] : NULL; }

int ac_report_format_index(const char *flag)
{
    for (int i = 0; i < N_FORMATS; i++)
        if (strcmp(formats[i]->flag, flag) == 0)
            return i;
    return -1;
}

struct ac_report {
    void *state[N_FORMATS]; /* NULL: not asked for */
    char *path[N_FORMATS];
};

int ac_report_open(ac_report **r, ac_err *err)
{
    *r = calloc(1, sizeof **r);
    return *r ? AC_OK : ac_fail(err, AC_ERR_ENV, "out of memory");
}

int ac_report_want(ac_report *r, const char *flag, const char *path, ac_err *err)
{
    int i = ac_report_format_index(flag);
    if (i < 0)
        return ac_fail(err, AC_ERR_INPUT, "no report format %s", flag);
    if (r->state[i])
        return ac_fail(err, AC_ERR_INPUT, "%s given twice", flag);
    /* checked now, before any case runs: an unwritable path is exit 2 at once, not after the campaign */
    int st = ac_check_writable(path, flag, err);
    if (st != AC_OK)
        return st;
    char mine[AC_PATH_LEN], other[AC_PATH_LEN];
    for (int j = 0; j < N_FORMATS; j++)
        if (r->path[j] && ac_write_target(path, mine, sizeof mine, NULL) == AC_OK &&
            ac_write_target(r->path[j], other, sizeof other, NULL) == AC_OK && strcmp(mine, other) == 0)
            return ac_fail(err, AC_ERR_INPUT, "%s and %s name the same file %s", formats[j]->flag, flag, path);
    r->path[i] = strdup(path);
    r->state[i] = r->path[i] ? formats[i]->open() : NULL;
    if (!r->state[i]) {
        free(r->path[i]);
        r->path[i] = NULL;
        return ac_fail(err, AC_ERR_ENV, "out of memory");
    }
    return AC_OK;
}

void ac_report_add(ac_report *r, const char *kernel, const ac_result *res, const char *minimal_line)
{
    for (int i = 0; r && i < N_FORMATS; i++)
        if (r->state[i])
            formats[i]->write(r->state[i], kernel, res, minimal_line);
}

void ac_report_add_raw(ac_report *r, const char *kernel, const ac_result *res, const char *minimal_line,
                       const char *raw_json)
{
    for (int i = 0; r && i < N_FORMATS; i++) {
        if (!r->state[i])
            continue;
        if (formats[i]->write_raw)
            formats[i]->write_raw(r->state[i], raw_json);
        else
            formats[i]->write(r->state[i], kernel, res, minimal_line);
    }
}

void ac_report_add_check(ac_report *r, const ac_report_check *c)
{
    for (int i = 0; r && i < N_FORMATS; i++)
        if (r->state[i] && formats[i]->write_check)
            formats[i]->write_check(r->state[i], c);
}

void ac_report_record(ac_report *r, const char *type, const ac_report_field *fields, size_t n)
{
    for (int i = 0; r && i < N_FORMATS; i++)
        if (r->state[i] && formats[i]->record)
            formats[i]->record(r->state[i], type, fields, n);
}

void ac_report_discard(ac_report *r)
{
    for (int i = 0; r && i < N_FORMATS; i++) {
        if (r->state[i])
            formats[i]->close(r->state[i], NULL, NULL); /* NULL path: free, write nothing */
        free(r->path[i]);
    }
    free(r);
}

int ac_report_close(ac_report *r, ac_err *err)
{
    if (!r)
        return AC_OK;
    int st = AC_OK;
    for (int i = 0; i < N_FORMATS; i++) {
        if (!r->state[i])
            continue;
        ac_err why = {{0}};
        int one = formats[i]->close(r->state[i], r->path[i], &why); /* closes even after a failure */
        if (one != AC_OK && st == AC_OK)
            st = ac_fail(err, one, "%s", why.msg);
        free(r->path[i]);
    }
    free(r);
    return st;
}

/* ---- shared by the writers (report_internal.h) ------------------------------- */

const char *report_verdict_name(const ac_result *res)
{
    if (res->unsupported)
        return "skipped";
    switch (res->verdict) {
    case AC_VERDICT_PASS:
        return "pass";
    case AC_VERDICT_FAIL:
        return "fail";
    default:
        return "error";
    }
}

void *report_kernel_slot(void *records, size_t size, int *n, const char *kernel)
{
    char *base = records;
    for (int i = 0; i < *n; i++)
        if (strcmp(base + (size_t)i * size, kernel) == 0)
            return base + (size_t)i * size;
    if (*n == REPORT_MAX_KERNELS)
        return NULL;
    char *slot = base + (size_t)(*n)++ * size;
    memset(slot, 0, size);
    snprintf(slot, AC_KERNEL_NAME_LEN, "%s", kernel);
    return slot;
}

size_t report_utf8_char(const unsigned char *s, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0)
        return 0;
    uint32_t v = n == 1 ? c : c & (0x7Fu >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) /* also stops at the NUL of a cut sequence */
            return 0;
        v = v << 6 | (s[i] & 0x3Fu);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000}; /* shorter forms are overlong */
    if (v < least[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return n;
}

char *report_utf8_clean(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t len = strlen(s);
    char *out = malloc(4 * len + 1), *o = out;
    for (size_t i = 0; out && i < len;) {
        uint32_t cp;
        size_t n = report_utf8_char(u + i, &cp);
        if (n == 0) {
            o += sprintf(o, "\\x%02X", u[i]);
            i++;
            continue;
        }
        memcpy(o, u + i, n);
        o += n, i += n;
    }
    if (out)
        *o = '\0';
    return out;
}
