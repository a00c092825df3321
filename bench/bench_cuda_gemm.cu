/* bench_cuda_gemm.cu - fp32 GEMM on the GPU, for the record: the CUDA
 * backend's gemm (cuBLAS, TF32 off: what a CUDA backend runs) and the same
 * product on a second cuBLAS handle with TF32 tensor-core math on. Square
 * M = N = K (default 4096), random inputs; each line is the median of
 * --reps (default 10) runs timed with CUDA events after two warm-ups, as a
 * JSON line; the TF32 line also carries its largest difference from the fp32
 * result relative to max |C|. Built only with the CUDA backend.
 *
 * Usage: bench_cuda_gemm [--n N] [--reps R] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

/* this program's own cuBLAS calls (linked, not loaded: it is no ptdp process) */
#define BENCH_CUBLAS(call) PTDP_ASSERT_MSG((call) == CUBLAS_STATUS_SUCCESS, #call)

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* median ms of `reps` runs of gemm on `h` (NULL: the backend's gemm) */
static float time_gemm(ptdp_backend *be, cublasHandle_t h, int64_t n, const float *A, const float *B, float *C,
                       int reps) {
    cudaEvent_t e0, e1;
    PTDP_CUDA_CHECK(cudaEventCreate(&e0));
    PTDP_CUDA_CHECK(cudaEventCreate(&e1));
    float *ms = (float *)malloc(sizeof(float) * (size_t)reps);
    const float one = 1.0f, zero = 0.0f;
    for (int r = -2; r < reps; r++) {
        PTDP_CUDA_CHECK(cudaEventRecord(e0, 0));
        if (h)
            BENCH_CUBLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)n, (int)n, &one, B, (int)n, A,
                                          (int)n, &zero, C, (int)n));
        else
            be->gemm(be, 0, 0, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        PTDP_CUDA_CHECK(cudaEventRecord(e1, 0));
        PTDP_CUDA_CHECK(cudaEventSynchronize(e1));
        if (r >= 0) PTDP_CUDA_CHECK(cudaEventElapsedTime(&ms[r], e0, e1));
    }
    qsort(ms, (size_t)reps, sizeof(float), cmp_float);
    float med = ms[reps / 2];
    free(ms);
    PTDP_CUDA_CHECK(cudaEventDestroy(e0));
    PTDP_CUDA_CHECK(cudaEventDestroy(e1));
    return med;
}

int main(int argc, char **argv) {
    int64_t n = 4096;
    int reps = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--n")) n = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    }
    ptdp_backend_params bp = ptdp_backend_default_params();
    bp.device = PTDP_DEVICE_CUDA;
    ptdp_backend *be;
    if (ptdp_backend_open(&be, &bp) != PTDP_OK) {
        fprintf(stderr, "bench_cuda_gemm: %s\n", ptdp_last_error());
        return 1;
    }
    cudaDeviceProp prop;
    PTDP_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const size_t bytes = sizeof(float) * (size_t)(n * n);
    float *hA = (float *)malloc(bytes), *hC = (float *)malloc(bytes), *hT = (float *)malloc(bytes);
    ptdp_rng_key k = ptdp_rng_key_make(1, "bench_cuda_gemm");
    for (int64_t i = 0; i < n * n; i++) hA[i] = 2.0f * ptdp_rng_uniform(k, (uint64_t)i) - 1.0f;
    float *A = (float *)be->alloc(be, bytes), *B = (float *)be->alloc(be, bytes),
          *C = (float *)be->alloc(be, bytes);
    PTDP_ASSERT(A && B && C);
    be->upload(be, A, hA, bytes);
    be->upload(be, B, hA, bytes); /* B = A: the values do not matter for the timing */
    double flop = 2.0 * (double)n * (double)n * (double)n;

    float ms = time_gemm(be, NULL, n, A, B, C, reps);
    be->download(be, hC, C, bytes);
    printf("{\"bench\":\"cuda_gemm\",\"device\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"math\":\"fp32 (TF32 off)\","
           "\"ms\":%.4f,\"tflops\":%.2f}\n",
           prop.name, (long long)n, (long long)n, (long long)n, (double)ms, flop / ((double)ms * 1e-3) / 1e12);

    cublasHandle_t tf32;
    BENCH_CUBLAS(cublasCreate(&tf32));
    BENCH_CUBLAS(cublasSetMathMode(tf32, CUBLAS_TF32_TENSOR_OP_MATH));
    ms = time_gemm(be, tf32, n, A, B, C, reps);
    be->download(be, hT, C, bytes);
    double maxc = 0.0, maxd = 0.0;
    for (int64_t i = 0; i < n * n; i++) {
        double c = fabs((double)hC[i]), d = fabs((double)hT[i] - (double)hC[i]);
        maxc = c > maxc ? c : maxc;
        maxd = d > maxd ? d : maxd;
    }
    printf("{\"bench\":\"cuda_gemm\",\"device\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"math\":\"tf32\","
           "\"ms\":%.4f,\"tflops\":%.2f,\"max_diff_vs_fp32_rel_to_max\":%.3g}\n",
           prop.name, (long long)n, (long long)n, (long long)n, (double)ms, flop / ((double)ms * 1e-3) / 1e12,
           maxd / maxc);
    BENCH_CUBLAS(cublasDestroy(tf32));
    be->free(be, A);
    be->free(be, B);
    be->free(be, C);
    ptdp_backend_close(be);
    free(hA);
    free(hC);
    free(hT);
    return 0;
}
