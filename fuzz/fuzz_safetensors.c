/* fuzz/fuzz_safetensors.c — the .safetensors reader (harness/files/
 * tensor_io.c) on the bytes of a file, in a buffer of exactly their size.
 * Properties: no memory error; the tensors it accepts have distinct names,
 * shapes whose product is their element count, and byte ranges that tile the
 * data buffer (their sizes sum to what follows the header). */
#include "fuzz/fuzz_support.h"
#include "harness/files/tensor_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ac_tensor_set set;
    ac_err err = {{0}};
    if (ac_safetensors_read_mem(data, size, "fuzz.safetensors", &set, &err) != AC_OK) {
        FUZZ_REQUIRE(set.n == 0 && strncmp(err.msg, "fuzz.safetensors", 16) == 0, "message '%s'", err.msg);
        return 0;
    }
    unsigned long long header = 0;
    for (int i = 7; i >= 0; i--)
        header = header << 8 | data[i];
    size_t total = 0;
    for (size_t i = 0; i < set.n; i++) {
        const ac_tensor *t = &set.t[i];
        size_t n = 1;
        for (int d = 0; d < t->ndim; d++)
            n *= (size_t)t->shape[d];
        FUZZ_REQUIRE(n == t->n_elems, "%s: shape product %zu, n_elems %zu", t->name, n, t->n_elems);
        total += n * ac_tfile_dtype_size(t->dtype);
        for (size_t j = 0; j < i; j++)
            FUZZ_REQUIRE(strcmp(set.t[j].name, t->name) != 0, "tensor %s twice", t->name);
    }
    FUZZ_REQUIRE(total == size - 8 - header, "tensors hold %zu bytes, the buffer %llu", total,
                 (unsigned long long)(size - 8 - header));
    ac_tensor_set_free(&set);
    return 0;
}
