/* fuzz/fuzz_budgets.c — the budgets-file parser (harness/verdict/budget.c).
 * Properties: no memory error; a file it accepts sets every budget positive
 * and finite (or off), and a growth length > 0; a refusal names the file. */
#include <math.h>

#include "fuzz/fuzz_support.h"
#include "harness/verdict/budget.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ac_budgets b;
    ac_err err = {{0}};
    if (ac_budgets_parse((const char *)data, size, "budgets.txt", &b, &err) != AC_OK) {
        FUZZ_REQUIRE(strncmp(err.msg, "budgets.txt", 11) == 0, "message '%s'", err.msg);
        return 0;
    }
    FUZZ_REQUIRE(isfinite(b.growth_length) && b.growth_length > 0, "growth length %g", b.growth_length);
    for (int t = 0; t < AC_DTYPE_COUNT; t++)
        for (int o = 0; o < AC_OUT_COUNT; o++) {
            FUZZ_REQUIRE(isfinite(b.max_scaled[t][o]) && b.max_scaled[t][o] > 0, "scaled %g", b.max_scaled[t][o]);
            FUZZ_REQUIRE(isfinite(b.max_vs_naive_mean[t][o]) && b.max_vs_naive_mean[t][o] >= 0, "vs-naive %g",
                         b.max_vs_naive_mean[t][o]);
        }
    return 0;
}
