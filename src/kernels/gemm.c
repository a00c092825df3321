/* gemm.c - row-major SGEMM through a tuned library (the CPU backend's
 * state: one ops table per library, see cpu_backend.c): oneDNN's dnnl_sgemm
 * (default: its JIT picks AVX-512 kernels at run time and ignores
 * OPENBLAS_CORETYPE) or OpenBLAS's cblas_sgemm. Called from inside an OpenMP
 * parallel region (attention's per-head GEMMs) both run single-threaded, which
 * is what we want there. One shape goes to oneDNN's matmul primitive instead
 * (long_k_matmul below). Not here: batched or low-precision GEMMs. */
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
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

/* C = A B^T with K >= 2N (the MLP's second GEMM, x W2^T with K = 4h, and its
 * recomputation): dnnl_sgemm packs such a transposed B slowly. oneDNN's matmul
 * primitive over the same strided view runs its brgemm kernels instead:
 * measured alone on 2 Zen 5 cores, M = 1024: 15.3 to 12.4 ms at (d)'s shape
 * (N 768, K 3072), 3.39 to 3.08 ms at (c)'s, 1.64 to 1.42 ms at (b)'s; on
 * the other layer shapes it was up to 5% slower, so only this one. A
 * primitive per shape, made on first use and kept; only where oneDNN picks
 * its AVX-512 brgemm (the measured kernel), else dnnl_sgemm as before; and
 * for M >= 256 rows only (training's token rows, not generation's varying
 * few, whose every new shape would cost a primitive). Not reentrant: taken
 * only outside OpenMP parallel regions (the layer GEMMs are issued by one
 * thread). Returns 0 where it did not run the GEMM. */
#define LONG_K_SHAPES 64
static struct {
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    int state; /* 0 untried, 1 engine ready, -1 none */
    int n;
    int64_t calls; /* GEMMs it ran (tests) */
    struct {
        int64_t M, N, K, lda, ldb, ldc;
        dnnl_primitive_t prim; /* NULL: this shape stays with dnnl_sgemm */
    } s[LONG_K_SHAPES];
} lk;

static dnnl_primitive_t long_k_prim(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                                    int64_t ldc) {
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_dims_t ad = {M, K}, as = {lda, 1}, bd = {K, N}, bs = {1, ldb}, cd = {M, N}, cs = {ldc, 1};
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_memory_desc_init_by_strides(&amd, 2, ad, dnnl_f32, as) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_f32, bs) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cs) != dnnl_success ||
        dnnl_matmul_desc_init(&md, &amd, &bmd, NULL, &cmd) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &md, NULL, lk.eng, NULL) != dnnl_success)
        return NULL;
    const char *impl = "";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    dnnl_primitive_t prim = NULL;
    if (impl && !strncmp(impl, "brg:avx512", 10)) dnnl_primitive_create(&prim, pd);
    dnnl_primitive_desc_destroy(pd);
    return prim;
}

static int long_k_matmul(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                         const float *B, int64_t ldb, float *C, int64_t ldc) {
    if (omp_in_parallel()) return 0;
    if (lk.state == 0)
        lk.state =
            dnnl_engine_create(&lk.eng, dnnl_cpu, 0) == dnnl_success &&
                    dnnl_stream_create(&lk.strm, lk.eng, dnnl_stream_default_flags) == dnnl_success
                ? 1
                : -1;
    if (lk.state != 1) return 0;
    int i = 0;
    while (i < lk.n && !(lk.s[i].M == M && lk.s[i].N == N && lk.s[i].K == K && lk.s[i].lda == lda &&
                         lk.s[i].ldb == ldb && lk.s[i].ldc == ldc))
        i++;
    if (i == lk.n) {
        if (lk.n == LONG_K_SHAPES) return 0;
        lk.s[i].M = M, lk.s[i].N = N, lk.s[i].K = K;
        lk.s[i].lda = lda, lk.s[i].ldb = ldb, lk.s[i].ldc = ldc;
        lk.s[i].prim = long_k_prim(M, N, K, lda, ldb, ldc);
        lk.n++;
    }
    dnnl_primitive_t prim = lk.s[i].prim;
    if (!prim) return 0;
    const_dnnl_primitive_desc_t pd;
    dnnl_primitive_get_primitive_desc(prim, &pd);
    dnnl_memory_t m[3] = {NULL, NULL, NULL};
    const dnnl_query_t what[3] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md};
    void *data[3] = {(void *)A, (void *)B, C};
    dnnl_status_t st = dnnl_success;
    for (int k = 0; k < 3 && st == dnnl_success; k++)
        st = dnnl_memory_create(&m[k], dnnl_primitive_desc_query_md(pd, what[k], 0), lk.eng,
                                data[k]);
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]}, {DNNL_ARG_DST, m[2]}};
    if (st == dnnl_success) st = dnnl_primitive_execute(prim, lk.strm, 3, args);
    if (st == dnnl_success) st = dnnl_stream_wait(lk.strm);
    for (int k = 0; k < 3; k++)
        if (m[k]) dnnl_memory_destroy(m[k]);
    PTDP_ASSERT_MSG(st == dnnl_success, "oneDNN fp32 matmul failed");
    lk.calls++;
    return 1;
}

int64_t ptdp__gemm_onednn_matmul_calls(void) { return lk.calls; }

void ptdp__gemm_onednn(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                       int64_t ldc) {
    if (M == 0 || N == 0) return;
    if (!ta && tb && K >= 2 * N && M >= 256 && alpha == 1.0f && beta == 0.0f &&
        long_k_matmul(M, N, K, A, lda, B, ldb, C, ldc))
        return;
    dnnl_status_t st =
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    PTDP_ASSERT_MSG(st == dnnl_success, "dnnl_sgemm failed");
}
