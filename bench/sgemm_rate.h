/* sgemm_rate.h - the GEMM timing bench_peak and bench_train share: C = A B^T
 * on n x n matrices through the gemm of a CPU table (ptdp_cpu_ops_prec(lib,
 * dtype): fp32, or the 16-bit tables on inputs already on their grid, as
 * training gives them), 2 warm-up calls (JIT, thread pools, clocks), then
 * `reps` timed ones (at most 8), their times in seconds sorted ascending into
 * t. Returns 0, or 1 when the matrices could not be allocated. A header of
 * static functions: each bench is one translation unit. */
#ifndef PTDP_BENCH_SGEMM_RATE_H
#define PTDP_BENCH_SGEMM_RATE_H

#include <omp.h>
#include <stdlib.h>

#include "kernels/kernels.h"

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
    const ptdp_ops *o = ptdp_cpu_ops_prec(lib, dtype);
    if (dtype != PTDP_DTYPE_FP32) {
        o->quantize(A, n * n);
        o->quantize(B, n * n);
    }
    for (int r = -2; r < reps; r++) {
        const double t0 = omp_get_wtime();
        o->gemm(0, 1, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        if (r >= 0) t[r] = omp_get_wtime() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], bench_cmp_double);
    free(A), free(B), free(C);
    return 0;
}

#endif
