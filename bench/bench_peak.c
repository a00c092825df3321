/* bench_peak.c - this machine's fp32 peaks, the yardsticks for "% of peak" in
 * the other benchmarks: (1) the FMA peak, a register-resident loop of
 * independent fused multiply-adds (AVX-512 when the CPU has it, else AVX2),
 * on one thread and on all OpenMP threads; (2) the GEMM peak, large square
 * sgemm (2048^3 and 4096^3) through each GEMM library behind ptdp_gemm.
 * Prints one JSON line per measurement. OpenBLAS reads OPENBLAS_CORETYPE when
 * the library loads, so the value this process saw (and the kernel OpenBLAS
 * picked) is printed with every GEMM line; run with and without it to see the
 * difference. Not here: memory bandwidth, or bf16/AMX peaks.
 *
 * Usage: bench_peak [--quick]   (--quick: 2048^3 only, fewer repetitions) */
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

/* Independent accumulators must cover FMA latency (4 cycles) x 2 pipes = 8;
 * AVX-512 has 32 registers (use 16), AVX2 16 (use 12, leaving room for the
 * two constants so nothing spills). */
#define NACC 16
#define NACC2 12

__attribute__((target("avx512f"))) static float fma_loop_avx512(int64_t iters, float seed) {
    __m512 acc[NACC];
    for (int i = 0; i < NACC; i++) acc[i] = _mm512_set1_ps(seed + (float)i);
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int64_t it = 0; it < iters; it++)
        for (int i = 0; i < NACC; i++) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < NACC; i++) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float fma_loop_avx2(int64_t iters, float seed) {
    __m256 acc[NACC2];
    for (int i = 0; i < NACC2; i++) acc[i] = _mm256_set1_ps(seed + (float)i);
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int64_t it = 0; it < iters; it++)
        for (int i = 0; i < NACC2; i++) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    __m256 s = acc[0];
    for (int i = 1; i < NACC2; i++) s = _mm256_add_ps(s, acc[i]);
    float out[8];
    _mm256_storeu_ps(out, s);
    float t = 0;
    for (int i = 0; i < 8; i++) t += out[i];
    return t;
}

static volatile float g_sink;

/* GFLOP/s of the FMA loop on `threads` threads (best of 3). */
static double fma_peak(int threads, int avx512, int64_t iters) {
    const int lanes = avx512 ? 16 : 8, nacc = avx512 ? NACC : NACC2;
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = omp_get_wtime();
#pragma omp parallel num_threads(threads)
        {
            float r = avx512 ? fma_loop_avx512(iters, (float)omp_get_thread_num())
                             : fma_loop_avx2(iters, (float)omp_get_thread_num());
#pragma omp atomic
            g_sink += r;
        }
        double dt = omp_get_wtime() - t0;
        double gf = 2.0 * lanes * nacc * (double)iters * threads / dt * 1e-9;
        best = gf > best ? gf : best;
    }
    return best;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void gemm_peak(ptdp_gemm_lib lib, int64_t n, int reps, const char *coretype) {
    float *A = malloc(sizeof(float) * (size_t)(n * n)),
          *B = malloc(sizeof(float) * (size_t)(n * n)),
          *C = malloc(sizeof(float) * (size_t)(n * n));
    if (!A || !B || !C) {
        fprintf(stderr, "bench_peak: out of memory for n=%lld\n", (long long)n);
        exit(1);
    }
    for (int64_t i = 0; i < n * n; i++) {
        A[i] = (float)((i * 7) % 13) * 0.01f - 0.06f;
        B[i] = (float)((i * 5) % 11) * 0.01f - 0.05f;
        C[i] = 0.0f;
    }
    const ptdp_ops *o = ptdp_cpu_ops_lib(lib);
    /* warm-up: JIT, thread pools, clocks (the first calls of a process are slow) */
    for (int w = 0; w < 2; w++) o->gemm(0, 1, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
    double t[8];
    for (int r = 0; r < reps; r++) {
        double t0 = omp_get_wtime();
        o->gemm(0, 1, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        t[r] = omp_get_wtime() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    double flop = 2.0 * (double)n * n * n;
    printf(
        "{\"bench\":\"gemm_peak\",\"lib\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"ta\":0,\"tb\":1,"
        "\"threads\":%d,\"reps\":%d,\"ms_median\":%.2f,\"ms_best\":%.2f,\"gflops\":%.1f,"
        "\"gflops_median\":%.1f,\"env_OPENBLAS_CORETYPE\":\"%s\",\"openblas_core\":\"%s\"}\n",
        ptdp_gemm_lib_name(lib), (long long)n, (long long)n, (long long)n, omp_get_max_threads(),
        reps, t[reps / 2] * 1e3, t[0] * 1e3, flop / t[0] * 1e-9, flop / t[reps / 2] * 1e-9,
        coretype, openblas_get_corename());
    fflush(stdout);
    free(A);
    free(B);
    free(C);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    const char *ct = getenv("OPENBLAS_CORETYPE");
    const char *coretype = ct ? ct : "";
    __builtin_cpu_init();
    int avx512 = __builtin_cpu_supports("avx512f");
    int nthr = omp_get_max_threads();
    const int64_t iters = 50 * 1000 * 1000; /* ~0.1-0.4 s per run */

    double one = fma_peak(1, avx512, iters);
    printf("{\"bench\":\"fma_peak\",\"isa\":\"%s\",\"threads\":1,\"gflops\":%.1f}\n",
           avx512 ? "avx512" : "avx2", one);
    fflush(stdout);
    if (nthr > 1) {
        double all = fma_peak(nthr, avx512, iters);
        printf("{\"bench\":\"fma_peak\",\"isa\":\"%s\",\"threads\":%d,\"gflops\":%.1f}\n",
               avx512 ? "avx512" : "avx2", nthr, all);
    }
    if (avx512) { /* the AVX2 figure too: what -march=x86-64-v3 code can reach */
        double a2 = fma_peak(1, 0, iters);
        printf("{\"bench\":\"fma_peak\",\"isa\":\"avx2\",\"threads\":1,\"gflops\":%.1f}\n", a2);
    }
    fflush(stdout);

    const ptdp_gemm_lib libs[2] = {PTDP_GEMM_ONEDNN, PTDP_GEMM_OPENBLAS};
    for (int l = 0; l < 2; l++) {
        gemm_peak(libs[l], 2048, quick ? 3 : 5, coretype);
        if (!quick) gemm_peak(libs[l], 4096, 3, coretype);
    }
    return 0;
}
