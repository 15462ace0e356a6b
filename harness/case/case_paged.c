/* harness/case/case_paged.c — the case line's paged KV cache and split-KV
 * fields, rows of case.c's table (optional, printed only when set):
 *   kv=paged(P)         K, V in pages of P keys, the block table drawn from the
 *                       case seed (run/inputs_paged.c): shuffled, prefix pages
 *                       shared between sequences, spare pages no one reads;
 *   kv=paged(P,contig)  the same pages in order, none shared, none spare
 *                       (what the shrinker simplifies to);
 *   splits=S | auto     the split-KV hint (S >= 1; auto, the kernel's own
 *                       choice, is the default and not printed). */
#include <stdio.h>
#include <string.h>

#include "harness/case/case_internal.h"

int case_parse_kv(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    char buf[64];
    const char *name;
    char *args;
    if (strlen(value) >= sizeof buf)
        return case_bad(err, f->key, "paged(P) or paged(P,contig)", value);
    strcpy(buf, value);
    if (!case_split_call(buf, &name, &args) || strcmp(name, "paged") != 0)
        return case_bad(err, f->key, "paged(P) or paged(P,contig)", value);
    char *comma = strchr(args, ',');
    bool contig = false;
    if (comma) {
        *comma = '\0';
        if (strcmp(comma + 1, "contig") != 0)
            return case_bad(err, f->key, "paged(P) or paged(P,contig)", value);
        contig = true;
    }
    unsigned long long p;
    if (!case_read_digits(args, AC_CASE_MAX_PAGE_SIZE, &p) || p < 1)
        return ac_fail(err, AC_ERR_INPUT, "%s: page size must be in 1..%d, got '%s'", f->key, AC_CASE_MAX_PAGE_SIZE,
                       args);
    c->kv_page_size = (int)p;
    c->kv_contig = contig;
    return AC_OK;
}

bool case_format_kv(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    snprintf(buf, len, "paged(%d%s)", c->kv_page_size, c->kv_contig ? ",contig" : "");
    return c->kv_page_size == 0;
}

void case_reset_kv(ac_case *c)
{
    c->kv_page_size = 0;
    c->kv_contig = false;
}

int case_validate_kv(const case_field *f, const ac_case *c, ac_err *err)
{
    if (c->kv_page_size == 0)
        return c->kv_contig ? ac_fail(err, AC_ERR_INPUT, "%s: contig without a page size", f->key) : AC_OK;
    if (c->kv_page_size < 1 || c->kv_page_size > AC_CASE_MAX_PAGE_SIZE)
        return ac_fail(err, AC_ERR_INPUT, "%s: page size must be in 1..%d, got %d", f->key, AC_CASE_MAX_PAGE_SIZE,
                       c->kv_page_size);
    if (c->layout == AC_LAYOUT_THD)
        return ac_fail(err, AC_ERR_INPUT, "%s: a paged KV cache takes layout=bhsd or bshd, not thd", f->key);
    if (c->dropout > 0.0)
        return ac_fail(err, AC_ERR_INPUT, "%s: a paged KV cache is decode (forward only): no dropout", f->key);
    return AC_OK;
}

int case_parse_splits(const case_field *f, const char *value, ac_case *c, ac_err *err)
{
    unsigned long long s;
    if (strcmp(value, "auto") == 0) {
        c->num_splits = 0;
        return AC_OK;
    }
    if (!case_read_digits(value, AC_CASE_MAX_SPLITS, &s) || s < 1)
        return ac_fail(err, AC_ERR_INPUT, "%s: expected auto or a split count in 1..%d, got '%s'", f->key,
                       AC_CASE_MAX_SPLITS, value);
    c->num_splits = (int)s;
    return AC_OK;
}

bool case_format_splits(const case_field *f, const ac_case *c, char *buf, size_t len)
{
    (void)f;
    snprintf(buf, len, "%d", c->num_splits);
    return c->num_splits == 0;
}

void case_reset_splits(ac_case *c) { c->num_splits = 0; }

int case_validate_splits(const case_field *f, const ac_case *c, ac_err *err)
{
    if (c->num_splits < 0 || c->num_splits > AC_CASE_MAX_SPLITS)
        return ac_fail(err, AC_ERR_INPUT, "%s: must be in 1..%d (or auto), got %d", f->key, AC_CASE_MAX_SPLITS,
                       c->num_splits);
    return AC_OK;
}
