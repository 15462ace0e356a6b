/* harness/case/masks.c — what each mask kind of ref/mask_kinds.h means to a
 * case: its parameters in the line, how the generator draws them, how the
 * shrinker simplifies the kind, and the problem's window it gives.
 *
 * One row per kind, in the table's order (`behaviours` below).  A kind's
 * spelling, capability bit and alignment are the table's; a dense mask's
 * booleans are drawn from the case seed by run/inputs.c, like the tensors. */
#include <stdio.h>
#include <string.h>

#include "harness/case/case.h"
#include "harness/case/case_internal.h"

typedef struct {
    int gen_weight; /* generator weight, over the kinds the kernel claims and --mask keeps */
    const char *params; /* how the parameters are written, for messages: "(L,R)"; "" for none */
    /* Reads the text inside the parentheses (NULL: the kind takes none); AC_OK or a case_bad. */
    int (*parse)(char *args, const char *value, ac_case *c, ac_err *err);
    void (*format)(const ac_case *c, char *buf, size_t len); /* "(8,0)" */
    int (*validate)(const ac_case *c, ac_err *err);
    void (*draw)(case_rng *r, ac_case *c);
    void (*enter)(ac_case *c); /* the parameters the kind fixes; NULL: none */
    void (*to_problem)(const ac_case *c, ac_problem *p); /* beyond the alignment; NULL: nothing */
    ac_mask_kind simpler, top_left; /* the shrinker's steps, see case.h */
} mask_behaviour;

/* ---- windows ------------------------------------------------------------------------ */

static bool read_window_side(const char *s, int *out)
{
    unsigned long long v;
    if (strcmp(s, "inf") == 0) {
        *out = AC_WINDOW_INF;
        return true;
    }
    if (!case_read_digits(s, 2147483647ULL, &v))
        return false;
    *out = (int)v;
    return true;
}

static int parse_window(char *args, const char *value, ac_case *c, ac_err *err)
{
    char *comma = strchr(args, ',');
    if (!comma)
        return case_bad(err, "mask", "window-tl(L,R) or window-br(L,R) with L, R >= 0 or inf", value);
    *comma = '\0';
    if (!read_window_side(args, &c->window_left) || !read_window_side(comma + 1, &c->window_right))
        return case_bad(err, "mask", "window sides that are integers >= 0 or inf", value);
    return AC_OK;
}

static void format_side(char *buf, size_t len, int w)
{
    if (w == AC_WINDOW_INF)
        snprintf(buf, len, "inf");
    else
        snprintf(buf, len, "%d", w);
}

static void format_window(const ac_case *c, char *buf, size_t len)
{
    char l[32], r[32];
    format_side(l, sizeof l, c->window_left);
    format_side(r, sizeof r, c->window_right);
    snprintf(buf, len, "(%s,%s)", l, r);
}

static bool side_ok(int w) { return w >= 0 || w == AC_WINDOW_INF; }

static int validate_window(const ac_case *c, ac_err *err)
{
    if (!side_ok(c->window_left) || !side_ok(c->window_right))
        return ac_fail(err, AC_ERR_INPUT, "mask: window sides must be >= 0 or inf, got (%d,%d)", c->window_left,
                       c->window_right);
    return AC_OK;
}

/* k: 1: 20, 2: 15, 3..16: 40, N/4..N: 25 */
static int draw_side(case_rng *r, int n)
{
    static const int w[] = {20, 15, 40, 25};
    switch (case_rng_pick(r, w, 4)) {
    case 0:
        return 1;
    case 1:
        return 2;
    case 2:
        return case_rng_int(r, 3, 16);
    default:
        return case_rng_int(r, n / 4 > 0 ? n / 4 : 1, n);
    }
}

/* (0,0) width 1: 15, (k,0) local causal: 25, (inf,k): 15, (k,inf): 10, (k1,k2): 35 */
static void draw_window(case_rng *r, ac_case *c)
{
    static const int w[] = {15, 25, 15, 10, 35};
    int n = c->seqlen_q > c->seqlen_k ? c->seqlen_q : c->seqlen_k;
    int left = 0, right = 0;
    switch (case_rng_pick(r, w, 5)) {
    case 0:
        break; /* width 1: the diagonal */
    case 1:
        left = draw_side(r, n);
        break; /* local causal */
    case 2:
        left = AC_WINDOW_INF, right = draw_side(r, n);
        break; /* causal + look-ahead */
    case 3:
        left = draw_side(r, n), right = AC_WINDOW_INF;
        break;
    default:
        left = draw_side(r, n), right = draw_side(r, n);
        break;
    }
    c->window_left = left;
    c->window_right = right;
}

static void window_to_problem(const ac_case *c, ac_problem *p)
{
    p->windowed = true;
    p->window_left = c->window_left;
    p->window_right = c->window_right;
}

/* Causal is the window (inf, 0), whatever the case's window fields hold. */
static void enter_causal(ac_case *c)
{
    c->window_left = AC_WINDOW_INF;
    c->window_right = 0;
}

static void causal_to_problem(const ac_case *c, ac_problem *p)
{
    (void)c;
    p->windowed = true;
    p->window_left = AC_WINDOW_INF;
    p->window_right = 0;
}

/* ---- dense ---------------------------------------------------------------------------- */

static int parse_dense(char *args, const char *value, ac_case *c, ac_err *err)
{
    double keep;
    if (case_read_numbers(args, &keep, 1) != 1)
        return case_bad(err, "mask", "dense(KEEP) with KEEP a number in (0,1]", value);
    c->dense_keep = keep;
    return AC_OK;
}

static void format_dense(const ac_case *c, char *buf, size_t len)
{
    char keep[40];
    case_fmt_double(keep, sizeof keep, c->dense_keep);
    snprintf(buf, len, "(%s)", keep);
}

static int validate_dense(const ac_case *c, ac_err *err)
{
    if (!(c->dense_keep > 0.0 && c->dense_keep <= 1.0))
        return ac_fail(err, AC_ERR_INPUT, "mask: dense(KEEP) needs KEEP in (0,1], got %g", c->dense_keep);
    return AC_OK;
}

/* keep 0.05: 10, 0.3: 20, 0.5: 25, 0.9: 25, 1: 20; maskrows 0: 50, 0.1: 15, 0.25: 15, 0.5: 12, 1: 8 */
static void draw_dense(case_rng *r, ac_case *c)
{
    static const int wk[] = {10, 20, 25, 25, 20};
    static const double keeps[] = {0.05, 0.3, 0.5, 0.9, 1.0};
    static const int wr[] = {50, 15, 15, 12, 8};
    static const double rows[] = {0.0, 0.1, 0.25, 0.5, 1.0};
    c->dense_keep = keeps[case_rng_pick(r, wk, 5)];
    c->masked_rows = rows[case_rng_pick(r, wr, 5)];
}

/* ---- the table: one row per kind of ref/mask_kinds.h ------------------------------------ */

#define CAUSAL_ROW(tl_kind) \
    { \
        4, "", NULL, NULL, NULL, NULL, enter_causal, causal_to_problem, AC_MASK_NONE, tl_kind \
    }
#define WINDOW_ROW(simpler_kind, tl_kind) \
    { \
        3, "(L,R)", parse_window, format_window, validate_window, draw_window, NULL, window_to_problem, simpler_kind, \
            tl_kind \
    }

static const mask_behaviour behaviours[AC_MASK_KIND_COUNT] = {
    [AC_MASK_NONE] = {4, "", NULL, NULL, NULL, NULL, NULL, NULL, AC_MASK_NONE, AC_MASK_NONE},
    [AC_MASK_CAUSAL_TL] = CAUSAL_ROW(AC_MASK_CAUSAL_TL),
    [AC_MASK_CAUSAL_BR] = CAUSAL_ROW(AC_MASK_CAUSAL_TL),
    [AC_MASK_WINDOW_TL] = WINDOW_ROW(AC_MASK_CAUSAL_TL, AC_MASK_WINDOW_TL),
    [AC_MASK_WINDOW_BR] = WINDOW_ROW(AC_MASK_CAUSAL_BR, AC_MASK_WINDOW_TL),
    /* the booleans are drawn from the case seed by run/inputs.c, like the tensors */
    [AC_MASK_DENSE] = {4, "(KEEP)", parse_dense, format_dense, validate_dense, draw_dense, NULL, NULL, AC_MASK_NONE,
                       AC_MASK_DENSE},
};

static const mask_behaviour *row_of(ac_mask_kind k)
{
    return (unsigned)k < AC_MASK_KIND_COUNT ? &behaviours[k] : &behaviours[AC_MASK_NONE];
}

/* ---- the case line ---------------------------------------------------------------------- */

/* "none, causal-tl, ..., window-br(L,R) or dense(KEEP)" */
static int bad_mask(ac_err *err, const char *value)
{
    char expected[400] = "";
    for (int k = 0; k < AC_MASK_KIND_COUNT; k++)
        snprintf(expected + strlen(expected), sizeof expected - strlen(expected), "%s%s%s",
                 k == 0                            ? ""
                     : k == AC_MASK_KIND_COUNT - 1 ? " or "
                                                   : ", ",
                 ac_mask_name((ac_mask_kind)k), behaviours[k].params);
    return case_bad(err, "mask", expected, value);
}

int ac_case_mask_parse(const char *value, ac_case *c, ac_err *err)
{
    char tmp[128];
    if (strlen(value) >= sizeof tmp)
        return bad_mask(err, value);
    strcpy(tmp, value);
    const char *name = tmp;
    char *args = NULL;
    if (strchr(tmp, '(') && !case_split_call(tmp, &name, &args))
        return bad_mask(err, value);
    ac_mask_kind k;
    if (ac_mask_from_name(name, strlen(name), &k) != AC_OK || (args != NULL) != (behaviours[k].parse != NULL))
        return bad_mask(err, value);
    c->window_left = c->window_right = AC_WINDOW_INF;
    ac_case_set_mask(c, k);
    return args ? behaviours[k].parse(args, value, c, err) : AC_OK;
}

void case_mask_format(const ac_case *c, char *buf, size_t len)
{
    const mask_behaviour *b = row_of(c->mask);
    char params[80] = "";
    if (b->format)
        b->format(c, params, sizeof params);
    snprintf(buf, len, "%s%s", ac_mask_name(c->mask), params);
}

int case_mask_validate(const ac_case *c, ac_err *err)
{
    if ((unsigned)c->mask >= AC_MASK_KIND_COUNT)
        return ac_fail(err, AC_ERR_INPUT, "mask: unknown kind %d", (int)c->mask);
    return behaviours[c->mask].validate ? behaviours[c->mask].validate(c, err) : AC_OK;
}

/* ---- the other stages ------------------------------------------------------------------- */

void ac_case_set_mask(ac_case *c, ac_mask_kind k)
{
    c->mask = k;
    if (row_of(k)->enter)
        row_of(k)->enter(c);
}

void ac_case_mask_to_problem(const ac_case *c, ac_problem *p)
{
    p->windowed = false;
    p->align = ac_mask_align(c->mask);
    if (row_of(c->mask)->to_problem)
        row_of(c->mask)->to_problem(c, p);
}

ac_mask_kind ac_case_mask_simpler(ac_mask_kind k) { return row_of(k)->simpler; }
ac_mask_kind ac_case_mask_top_left(ac_mask_kind k) { return row_of(k)->top_left; }

int case_mask_weight(ac_mask_kind k) { return row_of(k)->gen_weight; }

void case_mask_draw(case_rng *r, ac_case *c)
{
    if (row_of(c->mask)->draw)
        row_of(c->mask)->draw(r, c);
}

/* One entry of a --mask list: a kind, or a stem ("window") for the kinds "window-*". */
static unsigned filter_entry(const char *tok)
{
    ac_mask_kind k;
    if (ac_mask_from_name(tok, strlen(tok), &k) == AC_OK)
        return 1u << k;
    unsigned kinds = 0;
    size_t n = strlen(tok);
    for (int m = 0; m < AC_MASK_KIND_COUNT; m++)
        if (n > 0 && strncmp(ac_mask_name((ac_mask_kind)m), tok, n) == 0 && ac_mask_name((ac_mask_kind)m)[n] == '-')
            kinds |= 1u << m;
    return kinds;
}

int ac_mask_filter_parse(const char *list, unsigned *kinds, ac_err *err)
{
    char buf[256];
    if (snprintf(buf, sizeof buf, "%s", list) >= (int)sizeof buf)
        return ac_fail(err, AC_ERR_INPUT, "--mask: list too long");
    *kinds = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        unsigned bits = filter_entry(tok);
        if (!bits)
            return ac_fail(err, AC_ERR_INPUT,
                           "--mask: unknown mask kind '%s' (%s; or a stem such as window for both alignments)", tok,
                           ac_mask_names());
        *kinds |= bits;
    }
    return *kinds ? AC_OK : ac_fail(err, AC_ERR_INPUT, "--mask: empty list");
}
