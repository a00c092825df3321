/* backend_util.h - the C tests' compute backends: test_cpu_backend opens
 * the CPU backend of a GEMM library and precision on first use and keeps it
 * for the rest of the test (one instance per pair, closed at exit), so a
 * test asks for "the bf16 backend over oneDNN" where it needs one. Tests
 * that need a backend of their own (two instances side by side, a planned
 * workspace) open it with ptdp_backend_open. */
#ifndef PTDP_TEST_BACKEND_UTIL_H
#define PTDP_TEST_BACKEND_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

static ptdp_backend *test__backends[2][3]; /* [library][dtype] */

static void test__close_backends(void) {
    for (int l = 0; l < 2; l++)
        for (int d = 0; d < 3; d++) {
            ptdp_backend_close(test__backends[l][d]);
            test__backends[l][d] = NULL;
        }
}

static inline ptdp_backend *test_cpu_backend(ptdp_gemm_lib lib, ptdp_dtype dtype) {
    ptdp_backend **be = &test__backends[lib][dtype];
    if (!*be) {
        static int registered;
        if (!registered) registered = atexit(test__close_backends) == 0;
        ptdp_backend_params p = ptdp_backend_default_params();
        p.lib = lib;
        p.dtype = dtype;
        PTDP_ASSERT_MSG(ptdp_backend_open(be, &p) == PTDP_OK, ptdp_last_error());
    }
    return *be;
}

/* How many of x[n] are off dt's 16-bit grid (rounding them to it changes
 * their bits): 0 for what a 16-bit op wrote as an activation. */
static inline int64_t test_off_grid(const float *x, int64_t n, ptdp_dtype dt) {
    float *y = malloc(sizeof(float) * (size_t)n);
    if (!y) abort();
    memcpy(y, x, sizeof(float) * (size_t)n);
    if (dt == PTDP_DTYPE_BF16)
        ptdp_round_bf16_n(y, n);
    else
        ptdp_round_f16_n(y, n);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += memcmp(&x[i], &y[i], 4) != 0;
    free(y);
    return k;
}

#endif
