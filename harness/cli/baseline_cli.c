/* harness/cli/baseline_cli.c — --baseline OLD.jsonl for fuzz, run and check:
 * load the old run, hand fuzz its case lines to replay, pair every new result,
 * and at the end evaluate, print, report and turn a regression into exit 1.
 * The comparison itself is harness/verdict/baseline.c. */
#include <stdlib.h>

#include "harness/cli/cli.h"
#include "harness/verdict/baseline.h"
#include "harness/verdict/budget.h"

int ac_cli_baseline_load(const ac_cli *c, const char *kernel, ac_baseline **b, ac_err *err)
{
    *b = NULL;
    return c->baseline ? ac_baseline_load(c->baseline, kernel, b, err) : AC_OK;
}

int ac_cli_baseline_cases(const ac_cli *c, ac_baseline *b, ac_case **cases, size_t *n, ac_err *err)
{
    if (c->cases > 0)
        ac_baseline_limit(b, (size_t)c->cases);
    *n = ac_baseline_size(b);
    *cases = malloc((*n ? *n : 1) * sizeof **cases);
    if (!*cases)
        return ac_fail(err, AC_ERR_ENV, "out of memory");
    for (size_t i = 0; i < *n; i++) {
        ac_err why = {{0}};
        if (ac_case_parse(ac_baseline_line(b, i), &(*cases)[i], &why) != AC_OK) {
            free(*cases);
            *cases = NULL;
            return ac_fail(err, AC_ERR_INPUT, "--baseline %s: case %zu cannot be replayed: %s", c->baseline, i + 1,
                           why.msg);
        }
    }
    return AC_OK;
}

bool ac_cli_baseline_observe(void *ctx, const ac_result *r)
{
    ac_err err = {{0}};
    return ac_baseline_add(ctx, r, &err) == AC_OK; /* out of memory: stop, finish says so */
}

int ac_cli_baseline_finish(const ac_cli *c, ac_baseline *b, ac_report *rep, int status, ac_err *err)
{
    if (!b)
        return status;
    ac_budgets budgets;
    const char *path = c->budgets ? c->budgets : ac_budgets_default_path();
    int st = ac_budgets_load(path, &budgets, err);
    if (st == AC_OK)
        st = ac_baseline_evaluate(b, budgets.regression_ratio, budgets.regression_p, err);
    if (st == AC_OK) {
        ac_baseline_print(stdout, b);
        ac_report_add_baseline(rep, b);
    }
    bool regressed = st == AC_OK && ac_baseline_regressed(b);
    ac_baseline_free(b);
    if (st != AC_OK)
        return status > st ? status : st;
    return status == AC_OK && regressed ? AC_FAIL_ACCURACY : status;
}
