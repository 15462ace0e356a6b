/* fuzz/fuzz_case_line.c — the case-line parser (harness/case/case.c and its
 * masks and distributions), and the number and --mask list readers beside it.
 * Properties: no memory error or undefined behaviour on any input; a line it
 * accepts is valid, formats to a canonical line that fits AC_CASE_LINE_MAX,
 * and that line parses back to the same canonical line (parse -> format is a
 * fixed point, as the README promises). */
#include "fuzz/fuzz_support.h"
#include "harness/case/case.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *line = fuzz_text(data, size);
    ac_case c, again;
    ac_err err = {{0}};
    if (ac_case_parse(line, &c, &err) == AC_OK) {
        FUZZ_REQUIRE(ac_case_validate(&c, &err) == AC_OK, "%s: %s", line, err.msg);
        char canon[AC_CASE_LINE_MAX], canon2[AC_CASE_LINE_MAX];
        int n = ac_case_format(&c, canon, sizeof canon);
        FUZZ_REQUIRE(n > 0 && n < AC_CASE_LINE_MAX, "format gave %d for '%s'", n, line);
        FUZZ_REQUIRE(ac_case_parse(canon, &again, &err) == AC_OK, "'%s' does not parse back: %s", canon, err.msg);
        FUZZ_REQUIRE(ac_case_format(&again, canon2, sizeof canon2) == n && !strcmp(canon, canon2),
                     "'%s' formats back to '%s'", canon, canon2);
    } else {
        FUZZ_REQUIRE(err.msg[0] != '\0', "refused without a message: '%s'", line);
    }
    double x;
    unsigned long long u;
    unsigned kinds = 0;
    (void)ac_read_decimal(line, &x);
    (void)ac_read_unsigned(line, UINT64_MAX, &u);
    (void)ac_mask_filter_parse(line, &kinds, &err);
    ac_case scratch = ac_case_default();
    (void)ac_case_mask_parse(line, &scratch, &err);
    free(line);
    return 0;
}
