/* gemm_bf16.c - the bf16 table's GEMM on CPUs with native bf16 (AVX512_BF16,
 * AMX): oneDNN's matmul with bf16 inputs and fp32 accumulation and output.
 * The bf16 table keeps its values in fp32 storage (precision.c), so the two
 * inputs are converted, exactly (they are on the bf16 grid), into bf16
 * scratch first; beta = 1 (weight gradients) is oneDNN's sum post-op into the
 * fp32 C. Where oneDNN has no native bf16 matmul (it answers unimplemented,
 * or only its reference code, on AVX2 machines) the caller keeps the fp32
 * GEMM. One primitive per GEMM shape, created on first use and kept (a model
 * has a few dozen shapes); the scratch grows to the largest inputs during the
 * first iteration and is then reused. Not reentrant: the layer GEMMs are
 * issued by one thread (attention's per-head GEMMs, inside OpenMP regions,
 * keep the fp32 GEMM). */
#include <dnnl.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"

#define MAX_SHAPES 128

typedef struct {
    int ta, tb, sum;
    int64_t M, N, K, ldc;
    dnnl_primitive_t prim;
} shape;

static struct {
    int state; /* 0 unknown, 1 available, -1 not */
    char why[128];
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    shape shapes[MAX_SHAPES];
    int nshapes;
    uint16_t *a, *b; /* bf16 scratch */
    size_t acap, bcap;
} g;

static dnnl_primitive_t make_prim(int ta, int tb, int sum, int64_t M, int64_t N, int64_t K,
                                  int64_t ldc, char *impl_out, size_t cap) {
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
    dnnl_dims_t as = {ta ? 1 : K, ta ? M : 1}, bs = {tb ? 1 : N, tb ? K : 1}, cs = {ldc, 1};
    if (dnnl_memory_desc_init_by_strides(&amd, 2, ad, dnnl_bf16, as) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_bf16, bs) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cs) != dnnl_success)
        return NULL;
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &amd, &bmd, NULL, &cmd) != dnnl_success) return NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (sum) {
        if (dnnl_primitive_attr_create(&attr) != dnnl_success) return NULL;
        dnnl_post_ops_create(&po);
        dnnl_post_ops_append_sum(po, 1.0f);
        dnnl_primitive_attr_set_post_ops(attr, po);
    }
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &md, attr, g.eng, NULL);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return NULL;
    const char *impl = "";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    if (impl_out) snprintf(impl_out, cap, "%s", impl ? impl : "");
    dnnl_primitive_t prim = NULL;
    if (strncmp(impl ? impl : "ref", "ref", 3) != 0) dnnl_primitive_create(&prim, pd);
    dnnl_primitive_desc_destroy(pd);
    return prim;
}

int ptdp__gemm_bf16_available(const char **why) {
    if (g.state == 0) {
        g.state = -1;
        snprintf(g.why, sizeof g.why, "oneDNN has no engine");
        if (dnnl_engine_create(&g.eng, dnnl_cpu, 0) == dnnl_success &&
            dnnl_stream_create(&g.strm, g.eng, dnnl_stream_default_flags) == dnnl_success) {
            char impl[64] = "";
            dnnl_primitive_t p = make_prim(0, 1, 0, 64, 64, 64, 64, impl, sizeof impl);
            if (p) {
                dnnl_primitive_destroy(p);
                g.state = 1;
                snprintf(g.why, sizeof g.why, "oneDNN bf16 matmul (%s)", impl);
            } else {
                snprintf(g.why, sizeof g.why, "oneDNN has no native bf16 matmul on this CPU%s%s",
                         impl[0] ? ": " : "", impl);
            }
        }
    }
    if (why) *why = g.why;
    return g.state == 1;
}

/* rows x cols of x (row stride ld) into packed bf16 */
static void pack(uint16_t *dst, const float *x, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; r++) ptdp_f32_to_bf16_n(dst + r * cols, x + r * ld, cols);
}

static int grow(uint16_t **p, size_t *cap, size_t n) {
    if (n <= *cap) return 1;
    uint16_t *q = realloc(*p, n * sizeof(uint16_t));
    if (!q) return 0;
    *p = q;
    *cap = n;
    return 1;
}

void ptdp__gemm_onednn_bf16(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                            const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                            float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    const int sum = beta != 0.0f;
    shape *sh = NULL;
    for (int i = 0; i < g.nshapes && !sh; i++) {
        shape *s = &g.shapes[i];
        if (s->ta == ta && s->tb == tb && s->sum == sum && s->M == M && s->N == N && s->K == K &&
            s->ldc == ldc)
            sh = s;
    }
    if (!sh && g.nshapes < MAX_SHAPES && g.state == 1) {
        dnnl_primitive_t p = make_prim(ta, tb, sum, M, N, K, ldc, NULL, 0);
        if (p) {
            sh = &g.shapes[g.nshapes++];
            *sh = (shape){ta, tb, sum, M, N, K, ldc, p};
        }
    }
    const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    if (!sh || alpha != 1.0f || (sum && beta != 1.0f) || K == 0 ||
        !grow(&g.a, &g.acap, (size_t)(ar * ac)) || !grow(&g.b, &g.bcap, (size_t)(br * bc))) {
        ptdp__gemm_onednn(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    pack(g.a, A, ar, ac, lda);
    pack(g.b, B, br, bc, ldb);
    dnnl_memory_t ma, mb, mc;
    const_dnnl_primitive_desc_t pd;
    dnnl_primitive_get_primitive_desc(sh->prim, &pd);
    const dnnl_memory_desc_t *amd = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0),
                             *bmd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0),
                             *cmd = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    dnnl_status_t st = dnnl_memory_create(&ma, amd, g.eng, g.a);
    if (st == dnnl_success) st = dnnl_memory_create(&mb, bmd, g.eng, g.b);
    if (st == dnnl_success) st = dnnl_memory_create(&mc, cmd, g.eng, C);
    PTDP_ASSERT_MSG(st == dnnl_success, "oneDNN bf16 matmul: memory objects");
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    st = dnnl_primitive_execute(sh->prim, g.strm, 3, args);
    if (st == dnnl_success) st = dnnl_stream_wait(g.strm);
    PTDP_ASSERT_MSG(st == dnnl_success, "oneDNN bf16 matmul failed");
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mc);
}
