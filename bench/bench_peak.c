/* bench_peak.c - this machine's fp32 and bf16 peaks, the yardsticks for "% of peak" in
 * the other benchmarks: (1) the FMA peak, a register-resident loop of
 * independent fused multiply-adds (AVX-512 when the CPU has it, else AVX2),
 * on one thread and on all OpenMP threads; (2) the GEMM peak, large square
 * sgemm (2048^3 and 4096^3) through each GEMM library behind ptdp_gemm.
 * Prints one JSON line per measurement. OpenBLAS reads OPENBLAS_CORETYPE when
 * the library loads, so the value this process saw (and the kernel OpenBLAS
 * picked) is printed with every GEMM line; run with and without it to see the
 * difference. bf16, where the CPU has it: (3) the vdpbf16ps peak (AVX512_BF16,
 * chosen at run time; each instruction is 32 bf16 products summed into 16 fp32
 * lanes, 64 FLOP), and (4) oneDNN's bf16 matmul (bf16 inputs, fp32
 * accumulation and output) at 2048^3 and 4096^3 on the same OpenMP
 * threads; without a bf16 implementation (AVX2-only machines: oneDNN answers
 * unimplemented, or offers only its reference code) a JSON line says bf16
 * GEMM is unavailable and why. Not here: memory bandwidth, AMX.
 *
 * Usage: bench_peak [--quick]   (--quick: 2048^3 only, fewer repetitions) */
#include <cblas.h>
#include <dnnl.h>
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "sgemm_rate.h"

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

/* vdpbf16ps: acc[16 fp32] += sum of pairs of a[32 bf16] * b[32 bf16] */
__attribute__((target("avx512f,avx512bf16"))) static float dpbf16_loop(int64_t iters, float seed) {
    __m512 acc[NACC];
    for (int i = 0; i < NACC; i++) acc[i] = _mm512_set1_ps(seed + (float)i);
    const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
    const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
    for (int64_t it = 0; it < iters; it++)
        for (int i = 0; i < NACC; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < NACC; i++) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

static volatile float g_sink;

/* GFLOP/s of the vdpbf16ps loop on `threads` threads (best of 3). */
static double dpbf16_peak(int threads, int64_t iters) {
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = omp_get_wtime();
#pragma omp parallel num_threads(threads)
        {
            float r = dpbf16_loop(iters, (float)omp_get_thread_num());
#pragma omp atomic
            g_sink += r;
        }
        double dt = omp_get_wtime() - t0;
        double gf = 64.0 * NACC * (double)iters * threads / dt * 1e-9;
        best = gf > best ? gf : best;
    }
    return best;
}

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

static void gemm_peak(ptdp_gemm_lib lib, int64_t n, int reps, const char *coretype) {
    double t[8];
    if (bench_gemm_times(lib, PTDP_DTYPE_FP32, n, reps, t)) {
        fprintf(stderr, "bench_peak: out of memory for n=%lld\n", (long long)n);
        exit(1);
    }
    double flop = 2.0 * (double)n * n * n;
    printf(
        "{\"bench\":\"gemm_peak\",\"lib\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"ta\":0,\"tb\":1,"
        "\"threads\":%d,\"reps\":%d,\"ms_median\":%.2f,\"ms_best\":%.2f,\"gflops\":%.1f,"
        "\"gflops_median\":%.1f,\"env_OPENBLAS_CORETYPE\":\"%s\",\"openblas_core\":\"%s\"}\n",
        ptdp_gemm_lib_name(lib), (long long)n, (long long)n, (long long)n, omp_get_max_threads(),
        reps, t[reps / 2] * 1e3, t[0] * 1e3, flop / t[0] * 1e-9, flop / t[reps / 2] * 1e-9,
        coretype, openblas_get_corename());
    fflush(stdout);
}

static void bf16_unavailable(const char *why, dnnl_status_t st) {
    printf("{\"bench\":\"gemm_peak_bf16\",\"lib\":\"onednn\",\"available\":false,"
           "\"why\":\"%s\",\"dnnl_status\":%d}\n",
           why, (int)st);
    fflush(stdout);
}

/* Every oneDNN call but the primitive descriptor's must succeed here. */
static void dnnl_check(dnnl_status_t st, const char *what) {
    if (st == dnnl_success) return;
    fprintf(stderr, "bench_peak: %s failed: oneDNN status %d\n", what, (int)st);
    exit(1);
}

/* oneDNN matmul C[n,n] (fp32) = A[n,n] (bf16) @ B (bf16, stored [N,K] like
 * the fp32 row's tb = 1), fp32 accumulation. */
static void gemm_peak_bf16(int64_t n, int reps) {
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dnnl_check(dnnl_engine_create(&eng, dnnl_cpu, 0), "dnnl_engine_create");
    dnnl_check(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags), "dnnl_stream_create");
    dnnl_dims_t dims = {n, n};
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_check(dnnl_memory_desc_init_by_tag(&amd, 2, dims, dnnl_bf16, dnnl_ab), "memory desc A");
    dnnl_check(dnnl_memory_desc_init_by_tag(&bmd, 2, dims, dnnl_bf16, dnnl_ba), "memory desc B");
    dnnl_check(dnnl_memory_desc_init_by_tag(&cmd, 2, dims, dnnl_f32, dnnl_ab), "memory desc C");
    dnnl_matmul_desc_t md;
    dnnl_check(dnnl_matmul_desc_init(&md, &amd, &bmd, NULL, &cmd), "dnnl_matmul_desc_init");
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL);
    const char *impl = "";
    if (st == dnnl_success)
        dnnl_check(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl), "impl query");
    if (st != dnnl_success || !strncmp(impl, "ref", 3)) {
        bf16_unavailable(st == dnnl_unimplemented
                             ? "unimplemented: oneDNN has no bf16 matmul kernel for this CPU's ISA "
                               "(its bf16 kernels need AVX-512; ONEDNN_MAX_CPU_ISA may limit it)"
                         : st != dnnl_success
                             ? "oneDNN refused the bf16 matmul"
                             : "oneDNN offers only its reference bf16 matmul on this CPU",
                         st);
        if (pd) dnnl_primitive_desc_destroy(pd);
        dnnl_stream_destroy(strm);
        dnnl_engine_destroy(eng);
        return;
    }
    uint16_t *A = malloc(2 * (size_t)(n * n)), *B = malloc(2 * (size_t)(n * n));
    float *C = malloc(sizeof(float) * (size_t)(n * n)), *tmp = malloc(sizeof(float) * (size_t)n);
    if (!A || !B || !C || !tmp) {
        fprintf(stderr, "bench_peak: out of memory for n=%lld\n", (long long)n);
        exit(1);
    }
    for (int64_t r = 0; r < n; r++) { /* the fp32 row's values, rounded to bf16 */
        for (int64_t j = 0; j < n; j++) tmp[j] = (float)(((r * n + j) * 7) % 13) * 0.01f - 0.06f;
        ptdp_f32_to_bf16_n(A + r * n, tmp, n);
        for (int64_t j = 0; j < n; j++) tmp[j] = (float)(((r * n + j) * 5) % 11) * 0.01f - 0.05f;
        ptdp_f32_to_bf16_n(B + r * n, tmp, n);
    }
    dnnl_memory_t ma, mb, mc;
    dnnl_check(dnnl_memory_create(&ma, &amd, eng, A), "memory A");
    dnnl_check(dnnl_memory_create(&mb, &bmd, eng, B), "memory B");
    dnnl_check(dnnl_memory_create(&mc, &cmd, eng, C), "memory C");
    dnnl_primitive_t prim;
    dnnl_check(dnnl_primitive_create(&prim, pd), "dnnl_primitive_create");
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    for (int w = 0; w < 2; w++) {
        dnnl_check(dnnl_primitive_execute(prim, strm, 3, args), "matmul");
        dnnl_check(dnnl_stream_wait(strm), "stream wait");
    }
    double t[8];
    for (int r = 0; r < reps; r++) {
        double t0 = omp_get_wtime();
        dnnl_check(dnnl_primitive_execute(prim, strm, 3, args), "matmul");
        dnnl_check(dnnl_stream_wait(strm), "stream wait");
        t[r] = omp_get_wtime() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], bench_cmp_double);
    double flop = 2.0 * (double)n * n * n;
    printf("{\"bench\":\"gemm_peak_bf16\",\"lib\":\"onednn\",\"available\":true,\"impl\":\"%s\","
           "\"a\":\"bf16\",\"b\":\"bf16\",\"c\":\"f32\",\"M\":%lld,\"N\":%lld,\"K\":%lld,"
           "\"threads\":%d,\"reps\":%d,\"ms_median\":%.2f,\"ms_best\":%.2f,\"gflops\":%.1f,"
           "\"gflops_median\":%.1f}\n",
           impl, (long long)n, (long long)n, (long long)n, omp_get_max_threads(), reps,
           t[reps / 2] * 1e3, t[0] * 1e3, flop / t[0] * 1e-9, flop / t[reps / 2] * 1e-9);
    fflush(stdout);
    dnnl_primitive_destroy(prim);
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mc);
    dnnl_primitive_desc_destroy(pd);
    dnnl_stream_destroy(strm);
    dnnl_engine_destroy(eng);
    free(A);
    free(B);
    free(C);
    free(tmp);
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

    if (__builtin_cpu_supports("avx512bf16")) {
        double b1 = dpbf16_peak(1, iters);
        printf("{\"bench\":\"fma_peak_bf16\",\"isa\":\"avx512_bf16\",\"op\":\"vdpbf16ps\","
               "\"threads\":1,\"gflops\":%.1f}\n",
               b1);
        if (nthr > 1)
            printf("{\"bench\":\"fma_peak_bf16\",\"isa\":\"avx512_bf16\",\"op\":\"vdpbf16ps\","
                   "\"threads\":%d,\"gflops\":%.1f}\n",
                   nthr, dpbf16_peak(nthr, iters));
    } else {
        printf("{\"bench\":\"fma_peak_bf16\",\"available\":false,"
               "\"why\":\"the CPU does not report AVX512_BF16\"}\n");
    }
    fflush(stdout);

    const ptdp_gemm_lib libs[2] = {PTDP_GEMM_ONEDNN, PTDP_GEMM_OPENBLAS};
    for (int l = 0; l < 2; l++) {
        gemm_peak(libs[l], 2048, quick ? 3 : 5, coretype);
        if (!quick) gemm_peak(libs[l], 4096, 3, coretype);
    }
    gemm_peak_bf16(2048, quick ? 3 : 5);
    if (!quick) gemm_peak_bf16(4096, 3);
    return 0;
}
