/* fuzz/fuzz_support.h — shared by the libFuzzer targets: the input as a
 * NUL-terminated string, and a failed property as a crash libFuzzer records
 * (with the input that caused it). */
#ifndef ATTNCHECK_FUZZ_SUPPORT_H
#define ATTNCHECK_FUZZ_SUPPORT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A copy of data with a NUL after it (the parsers of strings stop at the
 * first NUL of the input, as they would at the end of a C string). */
static inline char *fuzz_text(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* A property the code promises did not hold: report it and crash. */
#define FUZZ_REQUIRE(cond, ...) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "property failed: %s: ", #cond); \
            fprintf(stderr, __VA_ARGS__); \
            fputc('\n', stderr); \
            abort(); \
        } \
    } while (0)

#endif
