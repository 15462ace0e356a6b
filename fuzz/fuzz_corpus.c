/* fuzz/fuzz_corpus.c — the regression-corpus reader (harness/campaign/
 * corpus.c, what `attncheck run FILE` reads), on the raw bytes of a file:
 * NUL bytes, long lines, CR, comments.  Properties: no memory error; every
 * case it loads is valid and says where it came from; a refusal has a message
 * naming the file and line. */
#include "fuzz/fuzz_support.h"
#include "harness/campaign/corpus.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ac_corpus l = {0};
    ac_err err = {{0}};
    int st = ac_corpus_parse(&l, (const char *)data, size, "fuzz.cases", &err);
    FUZZ_REQUIRE(st == AC_OK || strncmp(err.msg, "fuzz.cases:", 11) == 0, "message '%s'", err.msg);
    for (size_t i = 0; i < l.n; i++) {
        FUZZ_REQUIRE(ac_case_validate(&l.cases[i], &err) == AC_OK, "case %zu: %s", i, err.msg);
        FUZZ_REQUIRE(strncmp(l.where[i], "fuzz.cases:", 11) == 0, "where '%s'", l.where[i]);
    }
    ac_corpus_free(&l);
    return 0;
}
