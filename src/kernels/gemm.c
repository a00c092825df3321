/* gemm.c - row-major SGEMM through a tuned library (the CPU backend's
 * state: one ops table per library, see cpu_backend.c): oneDNN's dnnl_sgemm
 * (default: its JIT picks AVX-512 kernels at run time and ignores
 * OPENBLAS_CORETYPE) or OpenBLAS's cblas_sgemm. Called from inside an OpenMP
 * parallel region (attention's per-head GEMMs) both run single-threaded, which
 * is what we want there. Not here: batched or low-precision GEMMs. */
#include <cblas.h>
#include <dnnl.h>
#include <string.h>

#include "kernels/kernels.h"

static const char *const gemm_names[] = {
#define PTDP__GEMM_NAME(e, s) s,
    PTDP_GEMM_LIBS(PTDP__GEMM_NAME)
#undef PTDP__GEMM_NAME
};

const char *ptdp_gemm_lib_name(ptdp_gemm_lib lib) { return gemm_names[lib]; }

int ptdp_gemm_lib_parse(const char *name, ptdp_gemm_lib *out) {
    for (int i = 0; i < (int)(sizeof gemm_names / sizeof gemm_names[0]); i++)
        if (!strcmp(name, gemm_names[i])) {
            *out = (ptdp_gemm_lib)i;
            return PTDP_OK;
        }
    return ptdp_errorf(PTDP_EINVAL, "unknown GEMM library '%s' (onednn|openblas)", name);
}

void ptdp__gemm_openblas(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                         const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                         float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (blasint)M, (blasint)N, (blasint)K, alpha, A, (blasint)lda, B, (blasint)ldb, beta,
                C, (blasint)ldc);
}

void ptdp__gemm_onednn(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                       int64_t ldc) {
    if (M == 0 || N == 0) return;
    dnnl_status_t st =
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    PTDP_ASSERT_MSG(st == dnnl_success, "dnnl_sgemm failed");
}
