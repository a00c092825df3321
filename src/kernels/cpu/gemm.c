/* gemm.c - row-major SGEMM through a tuned library (chosen when the CPU
 * backend is opened, cpu_backend.c): oneDNN's dnnl_sgemm
 * (default: its JIT picks AVX-512 kernels at run time and ignores
 * OPENBLAS_CORETYPE) or OpenBLAS's cblas_sgemm. Called from inside an OpenMP
 * parallel region (attention's per-head GEMMs) both run single-threaded, which
 * is what we want there. Two shapes go to oneDNN's matmul primitive instead
 * (matmul below). Not here: batched or low-precision GEMMs. */
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

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

void ptdp__gemm_openblas(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                         float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                         float beta, float *C, int64_t ldc) {
    (void)be;
    if (M == 0 || N == 0) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (blasint)M, (blasint)N, (blasint)K, alpha, A, (blasint)lda, B, (blasint)ldb, beta,
                C, (blasint)ldc);
}

/* Two GEMM shapes run faster on oneDNN's matmul primitive (its AVX-512
 * brgemm kernels, over the same strided views, no copies) than in dnnl_sgemm.
 * Measured alone on 2 Zen 5 cores (docs/performance.md):
 * - C = A B^T with K >= 2N (the MLP's second GEMM, x W2^T with K = 4h, and
 *   its recomputation): dnnl_sgemm packs such a transposed B slowly; M =
 *   1024: 15.3 to 12.4 ms at (d)'s shape (N 768, K 3072), 3.39 to 3.08 ms at
 *   (c)'s, 1.64 to 1.42 ms at (b)'s. Taken for M >= 256 (training's token
 *   rows, not generation's varying few, each new shape of which would cost a
 *   primitive).
 * - C += A^T B with N <= 256 and 4N <= M <= 16384 (weight gradients of
 *   narrow models: (b)'s MLP-in, M 1024, and its head, M 8192, N 256): 2.1 to
 *   1.65 ms and 18 to 15 ms; at N = 384 and 768, or M = 50304, brgemm was
 *   no faster or slower, so not there.
 * On every other layer shape brgemm was as fast or up to 30% slower. A
 * primitive per shape, made on first use and kept; only where oneDNN picks
 * its AVX-512 brgemm (the measured kernel), else dnnl_sgemm as before. Not
 * reentrant: taken only outside OpenMP parallel regions (the layer GEMMs are
 * issued by one thread). Returns 0 where it did not run the GEMM. The
 * primitives are the instance's (ptdp__mm_cache). */
#define MATMUL_SHAPES 64
struct ptdp__mm_cache {
    int n;
    int64_t calls; /* GEMMs it ran (tests) */
    struct {
        int ta, tb, sum;
        int64_t M, N, K, lda, ldb, ldc;
        ptdp__onednn_mm mm; /* prim NULL: this shape stays with dnnl_sgemm */
    } s[MATMUL_SHAPES];
};

int ptdp__gemm_init(ptdp__cpu *cs) {
    cs->dnnl = dnnl_engine_create(&cs->eng, dnnl_cpu, 0) == dnnl_success;
    if (cs->dnnl &&
        dnnl_stream_create(&cs->strm, cs->eng, dnnl_stream_default_flags) != dnnl_success) {
        dnnl_engine_destroy(cs->eng);
        cs->dnnl = 0;
    }
    if (!cs->dnnl) return 0;
    cs->mm = calloc(1, sizeof *cs->mm);
    if (!cs->mm) ptdp__gemm_free(cs);
    return cs->mm != NULL;
}

void ptdp__onednn_mm_free(ptdp__onednn_mm *m) {
    for (int k = 0; k < 3; k++)
        if (m->mem[k]) dnnl_memory_destroy(m->mem[k]);
    if (m->prim) dnnl_primitive_destroy(m->prim);
    memset(m, 0, sizeof *m);
}

void ptdp__gemm_free(ptdp__cpu *cs) {
    for (int i = 0; cs->mm && i < cs->mm->n; i++) ptdp__onednn_mm_free(&cs->mm->s[i].mm);
    free(cs->mm);
    cs->mm = NULL;
    if (cs->dnnl) {
        dnnl_stream_destroy(cs->strm);
        dnnl_engine_destroy(cs->eng);
    }
    cs->dnnl = 0;
}

void ptdp__onednn_mm_run(ptdp__cpu *cs, ptdp__onednn_mm *m, const void *A, const void *B,
                         dnnl_memory_t bmem, void *C) {
    PTDP_ASSERT(cs->dnnl);
    dnnl_engine_t eng = cs->eng;
    dnnl_stream_t strm = cs->strm;
    const_dnnl_primitive_desc_t pd;
    dnnl_primitive_get_primitive_desc(m->prim, &pd);
    const dnnl_query_t what[3] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md};
    void *data[3] = {(void *)A, (void *)B, C};
    dnnl_status_t st = dnnl_success;
    for (int k = 0; k < 3 && st == dnnl_success; k++) {
        if (k == 1 && bmem) continue;
        if (!m->mem[k])
            st = dnnl_memory_create(&m->mem[k], dnnl_primitive_desc_query_md(pd, what[k], 0), eng,
                                    DNNL_MEMORY_NONE);
        if (st == dnnl_success) st = dnnl_memory_set_data_handle(m->mem[k], data[k]);
    }
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, m->mem[0]},
                               {DNNL_ARG_WEIGHTS, bmem ? bmem : m->mem[1]},
                               {DNNL_ARG_DST, m->mem[2]}};
    if (st == dnnl_success) st = dnnl_primitive_execute(m->prim, strm, 3, args);
    if (st == dnnl_success) st = dnnl_stream_wait(strm);
    PTDP_ASSERT_MSG(st == dnnl_success, "oneDNN matmul failed");
}

static int matmul_shape(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, float beta) {
    if (alpha != 1.0f) return 0;
    if (!ta && tb) return beta == 0.0f && K >= 2 * N && M >= 256;
    if (ta && !tb) return beta == 1.0f && N <= 256 && M >= 4 * N && M <= 16384;
    return 0;
}

dnnl_primitive_desc_t ptdp__onednn_matmul_pd(ptdp__cpu *cs, const dnnl_memory_desc_t *a,
                                             const dnnl_memory_desc_t *b,
                                             const dnnl_memory_desc_t *c, int sum,
                                             const char **impl) {
    dnnl_engine_t eng = cs->eng;
    dnnl_matmul_desc_t md;
    if (!cs->dnnl || dnnl_matmul_desc_init(&md, a, b, NULL, c) != dnnl_success) return NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (sum && (dnnl_primitive_attr_create(&attr) != dnnl_success ||
                dnnl_post_ops_create(&po) != dnnl_success ||
                dnnl_post_ops_append_sum(po, 1.0f) != dnnl_success ||
                dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success)) {
        if (po) dnnl_post_ops_destroy(po);
        if (attr) dnnl_primitive_attr_destroy(attr);
        return NULL;
    }
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL) != dnnl_success) pd = NULL;
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    *impl = "";
    if (pd) dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, impl);
    if (!*impl) *impl = "";
    return pd;
}

static dnnl_primitive_t matmul_prim(ptdp__cpu *cs, int ta, int tb, int sum, int64_t M, int64_t N,
                                    int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_dims_t ad = {M, K}, as = {ta ? 1 : lda, ta ? lda : 1}, bd = {K, N},
                bs = {tb ? 1 : ldb, tb ? ldb : 1}, cd = {M, N}, cst = {ldc, 1};
    if (dnnl_memory_desc_init_by_strides(&amd, 2, ad, dnnl_f32, as) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_f32, bs) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cst) != dnnl_success)
        return NULL;
    const char *impl;
    dnnl_primitive_desc_t pd = ptdp__onednn_matmul_pd(cs, &amd, &bmd, &cmd, sum, &impl);
    if (!pd) return NULL;
    dnnl_primitive_t prim = NULL;
    if (!strncmp(impl, "brg:avx512", 10)) dnnl_primitive_create(&prim, pd);
    dnnl_primitive_desc_destroy(pd);
    return prim;
}

static int matmul(ptdp__cpu *cs, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (omp_in_parallel() || !cs->mm) return 0;
    ptdp__mm_cache *mm = cs->mm;
    const int sum = beta != 0.0f;
    int i = 0;
    while (i < mm->n && !(mm->s[i].ta == ta && mm->s[i].tb == tb && mm->s[i].sum == sum &&
                          mm->s[i].M == M && mm->s[i].N == N && mm->s[i].K == K &&
                          mm->s[i].lda == lda && mm->s[i].ldb == ldb && mm->s[i].ldc == ldc))
        i++;
    if (i == mm->n) {
        if (mm->n == MATMUL_SHAPES) return 0;
        mm->s[i].ta = ta, mm->s[i].tb = tb, mm->s[i].sum = sum;
        mm->s[i].M = M, mm->s[i].N = N, mm->s[i].K = K;
        mm->s[i].lda = lda, mm->s[i].ldb = ldb, mm->s[i].ldc = ldc;
        mm->s[i].mm = (ptdp__onednn_mm){matmul_prim(cs, ta, tb, sum, M, N, K, lda, ldb, ldc), {0}};
        mm->n++;
    }
    if (!mm->s[i].mm.prim) return 0;
    ptdp__onednn_mm_run(cs, &mm->s[i].mm, A, B, NULL, C);
    mm->calls++;
    return 1;
}

int64_t ptdp__gemm_onednn_matmul_calls(ptdp_backend *be) {
    const ptdp__cpu *cs = ptdp__cpu_of(be);
    return cs->mm ? cs->mm->calls : 0;
}

void ptdp__gemm_onednn(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                       float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float beta, float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    if (matmul_shape(ta, tb, M, N, K, alpha, beta) &&
        matmul(ptdp__cpu_of(be), ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc))
        return;
    dnnl_status_t st =
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    PTDP_ASSERT_MSG(st == dnnl_success, "dnnl_sgemm failed");
}
