/* harness/report/failures.c — failures deduplicated by signature (kernel,
 * kind, minimal line), in a hash table so a campaign of a million failures
 * stays linear. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/report/failures.h"

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return (h ^ 0xff) * 0x100000001b3ull; /* a separator, so "ab"+"c" differs from "a"+"bc" */
}

static uint64_t signature_hash(const char *kernel, const char *kind, const char *minimal)
{
    return fnv1a(fnv1a(fnv1a(0xcbf29ce484222325ull, kernel), kind), minimal);
}

static bool same(const ac_failure_sig *e, const char *kernel, const char *kind, const char *minimal)
{
    return strcmp(e->kernel, kernel) == 0 && strcmp(e->kind, kind) == 0 && strcmp(e->minimal, minimal) == 0;
}

/* The slot holding the signature, or the empty slot where it would go. */
static size_t find_slot(const ac_failure_set *s, const char *kernel, const char *kind, const char *minimal)
{
    size_t at = (size_t)(signature_hash(kernel, kind, minimal) % s->n_slots);
    while (s->slots[at] && !same(s->v[s->slots[at] - 1], kernel, kind, minimal))
        at = (at + 1) % s->n_slots;
    return at;
}

static bool grow(ac_failure_set *s)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        ac_failure_sig **v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return false;
        s->v = v, s->cap = cap;
    }
    if (2 * (s->n + 1) <= s->n_slots)
        return true;
    size_t n_slots = s->n_slots ? 2 * s->n_slots : 64;
    size_t *slots = calloc(n_slots, sizeof *slots);
    if (!slots)
        return false;
    free(s->slots);
    s->slots = slots, s->n_slots = n_slots;
    for (size_t i = 0; i < s->n; i++) /* rehash every entry */
        s->slots[find_slot(s, s->v[i]->kernel, s->v[i]->kind, s->v[i]->minimal)] = i + 1;
    return true;
}

static void set_first(ac_failure_sig *e, const ac_result *r)
{
    e->first_index = r->index;
    snprintf(e->line, sizeof e->line, "%s", r->line);
    snprintf(e->why, sizeof e->why, "%s", r->why);
}

const ac_failure_sig *ac_failure_set_add(ac_failure_set *s, const char *kernel, const ac_result *r, const char *minimal,
                                         bool *is_new)
{
    const char *line = minimal && *minimal ? minimal : r->line;
    *is_new = false;
    s->failures++;
    if (s->n_slots) {
        size_t at = find_slot(s, kernel, r->kind, line);
        if (s->slots[at]) {
            ac_failure_sig *e = s->v[s->slots[at] - 1];
            e->count++;
            if (r->index < e->first_index) /* workers report out of order: keep the lowest */
                set_first(e, r);
            return e;
        }
    }
    ac_failure_sig *e = calloc(1, sizeof *e);
    if (!e || !grow(s)) {
        free(e);
        return NULL;
    }
    snprintf(e->kernel, sizeof e->kernel, "%s", kernel);
    snprintf(e->kind, sizeof e->kind, "%s", r->kind);
    snprintf(e->minimal, sizeof e->minimal, "%s", line);
    set_first(e, r);
    e->count = 1;
    s->v[s->n++] = e;
    s->slots[find_slot(s, kernel, r->kind, line)] = s->n;
    *is_new = true;
    return e;
}

static int by_first_index(const void *a, const void *b)
{
    const ac_failure_sig *x = *(const ac_failure_sig *const *)a, *y = *(const ac_failure_sig *const *)b;
    if (x->first_index != y->first_index)
        return x->first_index < y->first_index ? -1 : 1;
    int k = strcmp(x->kernel, y->kernel); /* prove: one index per kernel */
    return k ? k : strcmp(x->minimal, y->minimal);
}

const ac_failure_sig **ac_failure_set_sorted(const ac_failure_set *s)
{
    if (!s->n)
        return NULL;
    const ac_failure_sig **v = malloc(s->n * sizeof *v);
    if (!v)
        return NULL;
    memcpy(v, s->v, s->n * sizeof *v);
    qsort(v, s->n, sizeof *v, by_first_index);
    return v;
}

void ac_failure_set_print(FILE *f, const ac_failure_set *s)
{
    const ac_failure_sig **v = ac_failure_set_sorted(s);
    if (!v)
        return;
    fprintf(f, "distinct failures: %zu of %ld failing cases\n", s->n, s->failures);
    for (size_t i = 0; i < s->n; i++)
        fprintf(f, "  %ldx %s [%s] %s\n", v[i]->count, v[i]->kernel, v[i]->kind, v[i]->minimal);
    free(v);
}

void ac_failure_set_free(ac_failure_set *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    free(s->slots);
    memset(s, 0, sizeof *s);
}
