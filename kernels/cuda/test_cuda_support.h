/* kernels/cuda/test_cuda_support.h — what attncheck-test-cuda's main file
 * (test_cuda_main.c) lends its other case files (test_cuda_fp8.c,
 * test_cuda_decode.c, test_cuda_dispatch.c): the metrics, the masks, the random numbers and the
 * device copies, and each file's entry (the number of failures). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "acd.h"

double acdt_scaled_max(const ac_problem *p, ac_dtype t, ac_tensor_kind kind, const void *got, const double *ref,
                       const double *e, size_t *n_bad, char *worst, size_t worst_len);
double acdt_lse_max(const ac_problem *p, const float *got, const double *ref, size_t *n_bad);
/* kind: test_cuda_main.c's mask_kind (0 none, 1 causal-tl, 2 causal-br, 3 window-br, 4 dense, ...) */
void acdt_set_mask(ac_problem *p, int kind, uint8_t **mask);
double acdt_urand(void);
double acdt_nrand(void);
void *acdt_to_device(const void *host, size_t bytes);
void *acdt_from_device(const void *dev, size_t bytes);
const ac_kernel *acdt_find_kernel(const char *name); /* a CUDA kernel by name, or NULL */

int acdt_fp8_tests(bool small, const char *only); /* test_cuda_fp8.c */
int acdt_decode_tests(bool small, const char *only); /* test_cuda_decode.c */
int acdt_dispatch_tests(void); /* test_cuda_dispatch.c: the kernel family each dispatcher launched */
