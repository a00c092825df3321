/* backend_util.h - the C tests' compute backends: test_cpu_backend opens
 * the CPU backend of a GEMM library and precision on first use and keeps it
 * for the rest of the test (one instance per pair, closed at exit), so a
 * test asks for "the bf16 backend over oneDNN" where it needs one. Tests
 * that need a backend of their own (two instances side by side, a planned
 * workspace) open it with ptdp_backend_open. */
#ifndef PTDP_TEST_BACKEND_UTIL_H
#define PTDP_TEST_BACKEND_UTIL_H

#include <stdlib.h>

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

#endif
