/* fuzz/fuzz_npy.c — the .npy reader (harness/files/tensor_io.c) on the bytes
 * of a file, held in a buffer of exactly their size, so ASan sees any read
 * past the header or the data.  Properties: no memory error; a tensor it
 * accepts has at most 8 dimensions whose product is its element count, and
 * exactly that many bytes of data came from the file. */
#include "fuzz/fuzz_support.h"
#include "harness/files/tensor_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ac_tensor t;
    ac_err err = {{0}};
    if (ac_npy_read_mem(data, size, "fuzz.npy", "q", &t, &err) != AC_OK) {
        FUZZ_REQUIRE(t.data == NULL && strncmp(err.msg, "fuzz.npy", 8) == 0, "message '%s'", err.msg);
        return 0;
    }
    FUZZ_REQUIRE(t.ndim >= 0 && t.ndim <= AC_TENSOR_MAX_DIMS, "ndim %d", t.ndim);
    size_t n = 1;
    for (int i = 0; i < t.ndim; i++)
        n *= (size_t)t.shape[i];
    FUZZ_REQUIRE(n == t.n_elems, "shape product %zu, n_elems %zu", n, t.n_elems);
    size_t bytes = n * ac_tfile_dtype_size(t.dtype);
    FUZZ_REQUIRE(bytes <= size && !memcmp(t.data, data + size - bytes, bytes), "the data is the file's last %zu bytes",
                 bytes);
    ac_tensor_free(&t);
    return 0;
}
