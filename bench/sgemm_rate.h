/* sgemm_rate.h - the GEMM timing bench_peak and bench_train share: C = A B^T
 * on n x n matrices through the gemm of a CPU backend (bench_backend(lib,
 * dtype): fp32, or the 16-bit backends on inputs already on their grid, as
 * training gives them), 2 warm-up calls (JIT, thread pools, clocks), then
 * `reps` timed ones (at most 8), their times in seconds sorted ascending into
 * t. Returns 0, or 1 when the matrices could not be allocated. A header of
 * static functions: each bench is one translation unit. */
#ifndef PTDP_BENCH_SGEMM_RATE_H
#define PTDP_BENCH_SGEMM_RATE_H

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"

/* A CPU backend of lib and dtype (the caller closes it); exits if it cannot
 * be opened. */
static inline ptdp_backend *bench_backend(ptdp_gemm_lib lib, ptdp_dtype dtype) {
    ptdp_backend_params p = ptdp_backend_default_params();
    p.lib = lib;
    p.dtype = dtype;
    ptdp_backend *be = NULL;
    if (ptdp_backend_open(&be, &p) != PTDP_OK) {
        fprintf(stderr, "bench: %s\n", ptdp_last_error());
        exit(1);
    }
    return be;
}

static int bench_cmp_double(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Sorts x[0..n) in place and returns its median (n >= 1). */
static inline double bench_sort_median(double *x, int n) {
    qsort(x, (size_t)n, sizeof x[0], bench_cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static int bench_gemm_times(ptdp_gemm_lib lib, ptdp_dtype dtype, int64_t n, int reps, double *t) {
    float *A = malloc(sizeof(float) * (size_t)(n * n)),
          *B = malloc(sizeof(float) * (size_t)(n * n)), *C = calloc((size_t)(n * n), sizeof(float));
    if (!A || !B || !C) {
        free(A), free(B), free(C);
        return 1;
    }
    for (int64_t i = 0; i < n * n; i++) {
        A[i] = (float)((i * 7) % 13) * 0.01f - 0.06f;
        B[i] = (float)((i * 5) % 11) * 0.01f - 0.05f;
    }
    ptdp_backend *o = bench_backend(lib, dtype);
    if (dtype != PTDP_DTYPE_FP32) {
        o->quantize(o, A, n * n);
        o->quantize(o, B, n * n);
    }
    for (int r = -2; r < reps; r++) {
        const double t0 = omp_get_wtime();
        o->gemm(o, 0, 1, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        if (r >= 0) t[r] = omp_get_wtime() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], bench_cmp_double);
    ptdp_backend_close(o);
    free(A), free(B), free(C);
    return 0;
}

#endif
