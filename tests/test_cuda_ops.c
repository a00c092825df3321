/* test_cuda_ops.c - every op of the CUDA backend against the CPU backend
 * (both opened with ptdp_backend_open) on the same random inputs: device results are
 * downloaded and compared element by element, one line per compared array
 * (max difference, the bound, and whether it came out bitwise equal).
 * SKIPPED (exit 77, CTest's SKIP_RETURN_CODE) where no GPU is usable or
 * ptdp was built without CUDA: no GPU means nothing was shown, not a pass.
 *
 * Bounds (|gpu - cpu| <= atol + rtol |cpu|, O(1) data unless stated):
 * - dropout masks (dropout_fwd/bwd on ones, the zeros of bias_dropout_add
 *   and attention's dropped probabilities): bitwise equal, required.
 * - copies, lookups, maxima, single multiplies/adds (memory ops, bias_add,
 *   embed_fwd, pos_add_fwd, xent_max, xent's target logit): bitwise.
 * - GEMM: elementwise 2 (K+2) 2^-24 (|alpha| |A||B| + |beta| |C|): both
 *   sides are fp32 dot products of length K in different orders, each
 *   within gamma_K of the exact value (TF32 off, else this fails).
 * - rows/columns summed in another order (LayerNorm, bias and embedding
 *   gradients, softmax, cross-entropy sums): rtol 1e-5, atol 1e-6 to 1e-5
 *   by the number of terms, per check below.
 * - attention: chains of GEMMs of length s over O(1) values (GPU full
 *   [s, s] blocks, CPU causal blocks): ctx atol 2e-5, dqkv atol 5e-5 at
 *   s = 70 and 1e-4 at s = 1024.
 * - GeLU: CUDA's tanhf and ptdp's fast tanh are each within 3e-7 of the
 *   true tanh, which 1 + tanh turns into an absolute, not relative, error:
 *   forward atol 2e-6, rtol 1e-5. The derivative multiplies that error by
 *   about 1.5 u (1 - t^2)' (1 + 3 A u^2) C, up to ~1e-6 for |u| <= 6 here,
 *   times |dout| <= 4: backward atol 1e-5 (the first H100 run saw 3.3e-6).
 * - AdamW, xent_loss, xent_bwd: same formula, one or two roundings apart
 *   (FMA contraction): rtol 1e-5, atol 1e-7; AdamW's m = b1 m + (1-b1) g
 *   cancels terms of |0.05|, so a few of their ulps: atol 2e-8 (the first
 *   H100 run saw 1.9e-9); v atol 1e-12.
 * - sum, sumsq of the same data: both accumulate in double: rtol 1e-12.
 * - the Llama family's: RMSNorm as LayerNorm; SwiGLU as GeLU (CUDA's expf
 *   against the fast exp: rtol 1e-5); rotary embeddings from the same fp32
 *   table (bitwise), one FMA contraction apart: 1e-6; grouped-query
 *   attention as attention, dk and dv sums over a group's heads (atol x2),
 *   and with a group per head attention's bits exactly. */
#include <omp.h>
#include <string.h>

#include "kernels/kernels.h"
#include "backend_util.h"
#include "test.h"

#define SKIP_CODE 77

static ptdp_backend *G, *C; /* GPU backend, CPU backend */

static float *fdup(const float *x, int64_t n) {
    float *p = fmalloc(n);
    memcpy(p, x, sizeof(float) * (size_t)n);
    return p;
}
/* a device copy of host x[n] */
static float *up(const float *x, int64_t n) {
    float *d = G->alloc(G, sizeof(float) * (size_t)(n ? n : 1));
    PTDP_ASSERT(d);
    G->upload(G, d, x, sizeof(float) * (size_t)n);
    return d;
}
static int32_t *up_i32(const int32_t *x, int64_t n) {
    int32_t *d = G->alloc(G, sizeof(int32_t) * (size_t)n);
    PTDP_ASSERT(d);
    G->upload(G, d, x, sizeof(int32_t) * (size_t)n);
    return d;
}
/* a new host copy of device d[n] */
static float *down(const float *d, int64_t n) {
    float *h = fmalloc(n);
    G->download(G, h, d, sizeof(float) * (size_t)n);
    return h;
}

/* gpu against cpu: all within atol + rtol |cpu| (or bitwise if rtol < 0);
 * frees gpu (a host copy). */
static void cmp(const char *what, float *gpu, const float *cpu, int64_t n, double rtol,
                double atol) {
    int64_t bad = 0, first = -1;
    double maxd = 0.0, maxr = 0.0;
    int bitwise = memcmp(gpu, cpu, sizeof(float) * (size_t)n) == 0;
    for (int64_t i = 0; i < n; i++) {
        double g = gpu[i], w = cpu[i], d = fabs(g - w);
        int ok = rtol < 0
                     ? memcmp(&gpu[i], &cpu[i], sizeof(float)) == 0
                     : (isnan(w) && isnan(g)) || (isinf(w) && g == w) || d <= atol + rtol * fabs(w);
        if (isfinite(d)) {
            maxd = d > maxd ? d : maxd;
            if (w != 0.0) maxr = d / fabs(w) > maxr ? d / fabs(w) : maxr;
        }
        if (!ok && bad++ == 0) first = i;
    }
    if (rtol < 0)
        printf("%-4s %-40s n=%-8lld %s\n", bad ? "FAIL" : "ok", what, (long long)n,
               bitwise ? "bitwise equal (required)" : "NOT bitwise equal");
    else
        printf("%-4s %-40s n=%-8lld max|d|=%-9.3g max|d|/|cpu|=%-9.3g bound rtol=%g atol=%g%s\n",
               bad ? "FAIL" : "ok", what, (long long)n, maxd, maxr, rtol, atol,
               bitwise ? " (bitwise equal)" : "");
    if (bad)
        fprintf(stderr, "  %s: %lld of %lld differ; first [%lld] gpu %.9g cpu %.9g\n", what,
                (long long)bad, (long long)n, (long long)first, gpu[first], cpu[first]);
    CHECK(bad == 0);
    free(gpu);
}
#define BITWISE (-1.0)

/* ---- memory -------------------------------------------------------------- */

static void test_memory(void) {
    const int64_t n = 1000;
    float *x = fmalloc(n), *z = fmalloc(n);
    fill_normal(x, n, 1, 1.0f);
    float *d = up(x, n), *e = G->alloc(G, sizeof(float) * n);
    cmp("alloc zeroes", down(e, n), (memset(z, 0, sizeof(float) * n), z), n, BITWISE, 0);
    G->copy(G, e, d, n);
    cmp("upload/copy/download", down(e, n), x, n, BITWISE, 0);
    G->zero(G, e + 10, 500);
    memset(x + 10, 0, sizeof(float) * 500);
    cmp("zero", down(e, n), x, n, BITWISE, 0);
    G->free(G, d);
    G->free(G, e);
    G->free(G, NULL);
    free(x);
    free(z);
}

/* ---- GEMM ---------------------------------------------------------------- */

static void test_gemm_case(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                           uint64_t seed) {
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int64_t lda = ac + 3, ldb = bc + 5, ldc = N + 2;
    float *A = fmalloc(ar * lda), *B = fmalloc(br * ldb), *Cc = fmalloc(M * ldc);
    fill_normal(A, ar * lda, seed, 1.0f);
    fill_normal(B, br * ldb, seed + 1, 1.0f);
    if (beta == 0.0f)
        for (int64_t i = 0; i < M * ldc; i++) Cc[i] = NAN; /* beta 0 overwrites, NaN too */
    else
        fill_normal(Cc, M * ldc, seed + 2, 1.0f);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = N; j < ldc; j++) Cc[i * ldc + j] = 12345.0f; /* padding stays */
    /* bound: 2 (K+2) u (|alpha| |A||B| + |beta| |C|) */
    float *aA = fmalloc(ar * lda), *aB = fmalloc(br * ldb), *bound = fmalloc(M * ldc);
    for (int64_t i = 0; i < ar * lda; i++) aA[i] = fabsf(A[i]);
    for (int64_t i = 0; i < br * ldb; i++) aB[i] = fabsf(B[i]);
    for (int64_t i = 0; i < M * ldc; i++) bound[i] = beta == 0.0f ? 0.0f : fabsf(Cc[i]);
    ptdp_ref_gemm(ta, tb, M, N, K, fabsf(alpha), aA, lda, aB, ldb, fabsf(beta), bound, ldc);
    float *dA = up(A, ar * lda), *dB = up(B, br * ldb), *dC = up(Cc, M * ldc);
    G->gemm(G, ta, tb, M, N, K, alpha, dA, lda, dB, ldb, beta, dC, ldc);
    C->gemm(C, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cc, ldc);
    float *g = down(dC, M * ldc);
    const double u = 1.0 / 16777216.0;
    int64_t bad = 0, first = -1;
    double maxd = 0.0, maxq = 0.0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < ldc; j++) {
            int64_t e = i * ldc + j;
            double d = fabs((double)g[e] - Cc[e]), lim = j < N ? 2.0 * (K + 2) * u * bound[e] : 0.0;
            maxd = d > maxd ? d : maxd;
            if (lim > 0) maxq = d / lim > maxq ? d / lim : maxq;
            if (!(d <= lim) && bad++ == 0) first = e;
        }
    printf(
        "%-4s gemm ta=%d tb=%d M=%lld N=%lld K=%lld beta=%g  max|d|=%.3g, at most %.3g of the bound 2(K+2)u|A||B|\n",
        bad ? "FAIL" : "ok", ta, tb, (long long)M, (long long)N, (long long)K, (double)beta, maxd,
        maxq);
    if (bad)
        fprintf(stderr, "  gemm: %lld differ; first [%lld] gpu %.9g cpu %.9g\n", (long long)bad,
                (long long)first, g[first], Cc[first]);
    CHECK(bad == 0);
    G->free(G, dA);
    G->free(G, dB);
    G->free(G, dC);
    free(A);
    free(B);
    free(Cc);
    free(aA);
    free(aB);
    free(bound);
    free(g);
}

static void test_gemm(void) {
    uint64_t seed = 100;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            test_gemm_case(ta, tb, 67, 45, 129, 1.0f, 0.0f, seed++);
            test_gemm_case(ta, tb, 33, 70, 17, 0.5f, 1.0f, seed++);
        }
    test_gemm_case(0, 1, 512, 384, 1024, 1.0f, 0.0f, seed++); /* a layer's shape, bigger K */
    test_gemm_case(1, 0, 256, 384, 2048, 1.0f, 1.0f, seed++); /* a weight gradient, accumulating */
}

/* ---- LayerNorm, bias, GeLU ------------------------------------------------- */

static void test_layernorm(void) {
    const int64_t N = 37, h = 300;
    float *x = fmalloc(N * h), *w = fmalloc(h), *b = fmalloc(h), *out = fmalloc(N * h),
          *mean = fmalloc(N), *rstd = fmalloc(N);
    fill_normal(x, N * h, 1, 2.0f);
    for (int64_t i = 0; i < N * h; i++) x[i] += 0.5f;
    fill_normal(w, h, 2, 1.0f);
    fill_normal(b, h, 3, 1.0f);
    float *dx_ = up(x, N * h), *dw_ = up(w, h), *db_ = up(b, h), *dout_ = G->alloc(G, 4 * N * h),
          *dmean = G->alloc(G, 4 * N), *drstd = G->alloc(G, 4 * N);
    G->layernorm_fwd(G, dx_, dw_, db_, dout_, dmean, drstd, N, h, 1e-5f);
    C->layernorm_fwd(C, x, w, b, out, mean, rstd, N, h, 1e-5f);
    cmp("layernorm_fwd out", down(dout_, N * h), out, N * h, 1e-5, 1e-5);
    cmp("layernorm_fwd mean", down(dmean, N), mean, N, 1e-5, 1e-6);
    cmp("layernorm_fwd rstd", down(drstd, N), rstd, N, 1e-5, 0);

    /* backward accumulates into dx, dw, db: start them nonzero */
    float *g = fmalloc(N * h), *dx = fmalloc(N * h), *dw = fmalloc(h), *db = fmalloc(h);
    fill_normal(g, N * h, 4, 1.0f);
    fill_normal(dx, N * h, 5, 1.0f);
    fill_normal(dw, h, 6, 1.0f);
    fill_normal(db, h, 7, 1.0f);
    float *dg_ = up(g, N * h), *ddx = up(dx, N * h), *ddw = up(dw, h), *ddb = up(db, h);
    G->layernorm_bwd(G, dg_, dx_, dw_, dmean, drstd, ddx, ddw, ddb, N, h);
    C->layernorm_bwd(C, g, x, w, mean, rstd, dx, dw, db, N, h);
    cmp("layernorm_bwd dx (+=)", down(ddx, N * h), dx, N * h, 1e-5, 1e-5);
    cmp("layernorm_bwd dw (+=, sum of 37 rows)", down(ddw, h), dw, h, 1e-5, 1e-5);
    cmp("layernorm_bwd db (+=, sum of 37 rows)", down(ddb, h), db, h, 1e-5, 1e-5);
    void *dev[] = {dx_, dw_, db_, dout_, dmean, drstd, dg_, ddx, ddw, ddb};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) G->free(G, dev[i]);
    void *host[] = {x, w, b, out, mean, rstd, g, dx, dw, db};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

static void test_bias_gelu(void) {
    const int64_t N = 33, n = 200;
    float *x = fmalloc(N * n), *bias = fmalloc(n), *y = fmalloc(N * n), *dbias = fmalloc(n),
          *g = fmalloc(N * n);
    fill_normal(x, N * n, 11, 2.0f);
    fill_normal(bias, n, 12, 1.0f);
    fill_normal(dbias, n, 13, 1.0f);
    fill_normal(g, N * n, 14, 1.0f);
    float *dx = up(x, N * n), *dbs = up(bias, n), *dy = up(x, N * n), *ddb = up(dbias, n),
          *dg = up(g, N * n);

    memcpy(y, x, sizeof(float) * N * n);
    G->bias_add(G, dy, dbs, N, n);
    C->bias_add(C, y, bias, N, n);
    cmp("bias_add", down(dy, N * n), y, N * n, BITWISE, 0);
    G->bias_bwd(G, dg, ddb, N, n);
    C->bias_bwd(C, g, dbias, N, n);
    cmp("bias_bwd (+=, rows in order)", down(ddb, n), dbias, n, 1e-6, 1e-6);

    G->bias_gelu_fwd(G, dx, dbs, dy, N, n);
    C->bias_gelu_fwd(C, x, bias, y, N, n);
    cmp("bias_gelu_fwd", down(dy, N * n), y, N * n, 1e-5, 2e-6);
    /* bwd with dx aliasing dout, as the MLP calls it */
    G->bias_gelu_bwd(G, dg, dx, dbs, dg, ddb, N, n);
    C->bias_gelu_bwd(C, g, x, bias, g, dbias, N, n);
    cmp("bias_gelu_bwd dx (aliasing dout)", down(dg, N * n), g, N * n, 1e-5, 1e-5);
    cmp("bias_gelu_bwd dbias (+=)", down(ddb, n), dbias, n, 1e-5, 1e-5 * N);
    G->free(G, dx);
    G->free(G, dbs);
    G->free(G, dy);
    G->free(G, ddb);
    G->free(G, dg);
    free(x);
    free(bias);
    free(y);
    free(dbias);
    free(g);
}

/* ---- dropout ------------------------------------------------------------- */

/* The sample keying of kernels.h (b > 0): dropout_fwd on [s, b, w] and
 * bias_dropout_add fwd/bwd give the CPU's masks bitwise. */
static void test_keyed_dropout(void) {
    const int64_t s = 7, b = 3, w = 96, n = s * b * w;
    ptdp_dropout d = {
        .p = 0.1f, .key = ptdp_rng_key_make(77, "keyed"), .b = b, .sample0 = 6, .width = w};
    float *one = fmalloc(n), *zero = fmalloc(n), *bias = fmalloc(w);
    for (int64_t i = 0; i < n; i++) one[i] = 1.0f, zero[i] = 0.0f;
    for (int64_t i = 0; i < w; i++) bias[i] = 0.0f;
    float *x = fdup(one, n), *dx = up(one, n);
    G->dropout_fwd(G, dx, n, d);
    C->dropout_fwd(C, x, n, d);
    cmp("dropout_fwd mask, keyed by sample", down(dx, n), x, n, BITWISE, 0);
    float *o = fmalloc(n), *gone = up(one, n), *gb = up(bias, w), *gz = up(zero, n),
          *go = G->alloc(G, 4 * n);
    G->bias_dropout_add_fwd(G, gone, gb, gz, go, s * b, w, d);
    C->bias_dropout_add_fwd(C, one, bias, zero, o, s * b, w, d);
    cmp("bias_dropout_add_fwd mask, keyed by sample", down(go, n), o, n, BITWISE, 0);
    float *db = fmalloc(w), *gdb = up(bias, w);
    for (int64_t i = 0; i < w; i++) db[i] = 0.0f;
    G->bias_dropout_add_bwd(G, gone, go, gdb, s * b, w, d);
    C->bias_dropout_add_bwd(C, one, o, db, s * b, w, d);
    cmp("bias_dropout_add_bwd mask, keyed by sample", down(go, n), o, n, BITWISE, 0);
    free(one), free(zero), free(bias), free(x), free(o), free(db);
    G->free(G, dx), G->free(G, gone), G->free(G, gb), G->free(G, gz), G->free(G, go),
        G->free(G, gdb);
}

static void test_dropout(void) {
    /* masks: dropout of ones is 0 or 1/(1-p) exactly, both sides */
    const int64_t n = 100003;
    float *one = fmalloc(n);
    for (int64_t i = 0; i < n; i++) one[i] = 1.0f;
    const uint64_t offsets[] = {0, 3, 1ull << 33};
    for (int k = 0; k < 3; k++) {
        ptdp_dropout d = {
            .p = 0.1f, .key = ptdp_rng_key_make(42 + k, "drop"), .offset = offsets[k]};
        float *x = fdup(one, n), *dx = up(one, n);
        G->dropout_fwd(G, dx, n, d);
        C->dropout_fwd(C, x, n, d);
        char what[80];
        snprintf(what, sizeof what, "dropout_fwd mask, offset %llu",
                 (unsigned long long)offsets[k]);
        cmp(what, down(dx, n), x, n, BITWISE, 0);
        G->dropout_bwd(G, dx, n, d);
        C->dropout_bwd(C, x, n, d);
        snprintf(what, sizeof what, "dropout_bwd mask, offset %llu",
                 (unsigned long long)offsets[k]);
        cmp(what, down(dx, n), x, n, BITWISE, 0);
        /* and the per-element rule of kernels.h */
        float *h = down(dx, n);
        int64_t agree = 0;
        for (int64_t e = 0; e < n; e++)
            agree += (h[e] != 0.0f) == ptdp__dropout_keep(d, (uint64_t)e);
        CHECK(agree == n);
        free(h);
        free(x);
        G->free(G, dx);
    }
    free(one);

    /* bias + dropout + residual, p = 0.1 and 0; resid = 0 first so the
     * dropped zeros show exactly */
    const int64_t N = 41, h = 96;
    float *x = fmalloc(N * h), *bias = fmalloc(h), *resid = fmalloc(N * h), *out = fmalloc(N * h),
          *dbias = fmalloc(h);
    fill_normal(x, N * h, 21, 1.0f);
    fill_normal(bias, h, 22, 1.0f);
    fill_normal(dbias, h, 23, 1.0f);
    float *dx = up(x, N * h), *db = up(bias, h), *ddbias = up(dbias, h),
          *dout = G->alloc(G, 4 * N * h);
    for (int pass = 0; pass < 3; pass++) {
        ptdp_dropout d = {
            .p = pass == 2 ? 0.0f : 0.1f, .key = ptdp_rng_key_make(5, "bda"), .offset = 77};
        if (pass == 0)
            memset(resid, 0, sizeof(float) * N * h);
        else
            fill_normal(resid, N * h, 24, 1.0f);
        float *dres = up(resid, N * h);
        /* out aliasing resid, as the layer calls it */
        G->bias_dropout_add_fwd(G, dx, db, dres, dres, N, h, d);
        C->bias_dropout_add_fwd(C, x, bias, resid, resid, N, h, d);
        char what[80];
        snprintf(what, sizeof what, "bias_dropout_add_fwd p=%g resid=%s", (double)d.p,
                 pass ? "rand" : "0");
        float *got = down(dres, N * h);
        if (pass == 0) {
            int64_t same = 0;
            for (int64_t e = 0; e < N * h; e++) same += (got[e] == 0.0f) == (resid[e] == 0.0f);
            printf("%-4s %-40s zeros at the same %lld of %lld places (required)\n",
                   same == N * h ? "ok" : "FAIL", "bias_dropout_add_fwd mask", (long long)same,
                   (long long)(N * h));
            CHECK(same == N * h);
        }
        cmp(what, got, resid, N * h, 1e-6, 1e-6);
        /* bwd in place (dx aliasing dout) */
        float *g = fmalloc(N * h);
        fill_normal(g, N * h, 25 + pass, 1.0f);
        G->upload(G, dout, g, sizeof(float) * N * h);
        G->bias_dropout_add_bwd(G, dout, dout, ddbias, N, h, d);
        C->bias_dropout_add_bwd(C, g, g, dbias, N, h, d);
        snprintf(what, sizeof what, "bias_dropout_add_bwd dx p=%g", (double)d.p);
        cmp(what, down(dout, N * h), g, N * h, BITWISE, 0);
        snprintf(what, sizeof what, "bias_dropout_add_bwd dbias p=%g (+=)", (double)d.p);
        cmp(what, down(ddbias, h), dbias, h, 1e-6, 1e-6);
        free(g);
        G->free(G, dres);
    }
    G->free(G, dx);
    G->free(G, db);
    G->free(G, ddbias);
    G->free(G, dout);
    free(x);
    free(bias);
    free(resid);
    free(out);
    free(dbias);
}

/* ---- attention ----------------------------------------------------------- */

/* keyed: the global numbering of kernels.h (sample0 4, this rank the second
 * of two tensor ranks: heads 2*al, head0 al) instead of local numbering. al
 * query heads over gl key/value groups: gl = al runs attention_fwd/_bwd and
 * checks attention_gqa_* give its bits; gl < al runs attention_gqa_* (dk and
 * dv sums over al/gl heads: atol_dqkv is for those sums). */
static void test_attention(int64_t s, int64_t b, int64_t al, int64_t gl, int64_t hd, float p,
                           double atol_ctx, double atol_dqkv, int keyed) {
    const int64_t T = b * al, hpg = al / gl, W = (al + 2 * gl) * hd, ld3 = b * W;
    const int64_t nq = s * ld3, nc = s * b * al * hd, np = T * s * s;
    const int gqa = gl != al;
    /* the backends save different things: the GPU the probabilities (np
     * floats), the CPU a logsumexp per row */
    PTDP_ASSERT(G->attention_saved_floats(G, s, b, al) == np);
    float *qkv = fmalloc(nq), *ctx = fmalloc(nc), *probs = fmalloc(np), *dctx = fmalloc(nc),
          *dqkv = fmalloc(nq), *saved = fmalloc(C->attention_saved_floats(C, s, b, al));
    float *scratch = fmalloc(ptdp_attention_scratch_floats(s, omp_get_max_threads()));
    fill_normal(qkv, nq, 31, 1.0f);
    fill_normal(dctx, nc, 32, 1.0f);
    ptdp_dropout d = {.p = p, .key = ptdp_rng_key_make(9, "attn"), .offset = 5};
    if (keyed)
        d = (ptdp_dropout){.p = p,
                           .key = d.key,
                           .b = b,
                           .sample0 = 4,
                           .width = al * hd,
                           .heads = 2 * al,
                           .head0 = al};
    float *gq = up(qkv, nq), *gc = G->alloc(G, 4 * nc), *gp = G->alloc(G, 4 * np),
          *gdc = up(dctx, nc), *gdq = G->alloc(G, 4 * nq),
          *gs = G->alloc(G, 4 * G->attention_scratch_floats(G, s));
    if (gqa) {
        G->attention_gqa_fwd(G, gq, gc, gp, gs, s, b, al, gl, hd, d);
        C->attention_gqa_fwd(C, qkv, ctx, saved, scratch, s, b, al, gl, hd, d);
    } else {
        G->attention_fwd(G, gq, gc, gp, gs, s, b, al, hd, d);
        C->attention_fwd(C, qkv, ctx, saved, scratch, s, b, al, hd, d);
    }
    /* the GPU's probabilities against exp(scale q.k - lse) from the CPU's
     * saved logsumexp (scores by the CPU GEMM, one task at a time) */
    const double scale = 1.0 / sqrt((double)hd);
    for (int64_t t = 0; t < T; t++) {
        const int64_t bi = t / al, j = t % al, grp = (bi * gl + j / hpg) * (hpg + 2) * hd;
        float *P = probs + t * s * s;
        C->gemm(C, 0, 1, s, s, hd, 1.0f, qkv + grp + (j % hpg) * hd, ld3, qkv + grp + hpg * hd, ld3,
                0.0f, P, s);
        for (int64_t i = 0; i < s; i++)
            for (int64_t k = 0; k < s; k++)
                P[i * s + k] = k <= i ? (float)exp(scale * P[i * s + k] - saved[t * s + i]) : 0.0f;
    }
    char what[80];
    printf("     attention%s s=%lld b=%lld al=%lld gl=%lld hd=%lld p=%g\n", gqa ? "_gqa" : "",
           (long long)s, (long long)b, (long long)al, (long long)gl, (long long)hd, (double)p);
    snprintf(what, sizeof what, "attention_fwd probs p=%g", (double)p);
    cmp(what, down(gp, np), probs, np, 2e-5, 1e-7);
    snprintf(what, sizeof what, "attention_fwd ctx p=%g (sums of %lld)", (double)p, (long long)s);
    cmp(what, down(gc, nc), ctx, nc, 1e-5, atol_ctx);
    if (gqa) {
        G->attention_gqa_bwd(G, gdc, gq, gc, gp, gdq, gs, s, b, al, gl, hd, d);
        C->attention_gqa_bwd(C, dctx, qkv, ctx, saved, dqkv, scratch, s, b, al, gl, hd, d);
    } else {
        G->attention_bwd(G, gdc, gq, gc, gp, gdq, gs, s, b, al, hd, d);
        C->attention_bwd(C, dctx, qkv, ctx, saved, dqkv, scratch, s, b, al, hd, d);
    }
    snprintf(what, sizeof what, "attention_bwd dqkv p=%g", (double)p);
    cmp(what, down(gdq, nq), dqkv, nq, 1e-5, atol_dqkv);
    if (!gqa) { /* a group per head: attention_gqa is attention, bit for bit */
        float *gc2 = G->alloc(G, 4 * nc), *gp2 = G->alloc(G, 4 * np), *gdq2 = G->alloc(G, 4 * nq);
        G->attention_gqa_fwd(G, gq, gc2, gp2, gs, s, b, al, al, hd, d);
        G->attention_gqa_bwd(G, gdc, gq, gc2, gp2, gdq2, gs, s, b, al, al, hd, d);
        float *h1 = down(gp, np);
        cmp("attention_gqa (gl = al) probs = attention's", down(gp2, np), h1, np, BITWISE, 0);
        free(h1), h1 = down(gc, nc);
        cmp("attention_gqa (gl = al) ctx = attention's", down(gc2, nc), h1, nc, BITWISE, 0);
        free(h1), h1 = down(gdq, nq);
        cmp("attention_gqa (gl = al) dqkv = attention's", down(gdq2, nq), h1, nq, BITWISE, 0);
        free(h1);
        G->free(G, gc2), G->free(G, gp2), G->free(G, gdq2);
    }
    void *dev[] = {gq, gc, gp, gdc, gdq, gs};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) G->free(G, dev[i]);
    void *host[] = {qkv, ctx, probs, dctx, dqkv, scratch, saved};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

/* ---- the Llama family's element-wise ops --------------------------------------- */

static void test_rmsnorm(void) {
    const int64_t N = 37, h = 300;
    float *x = fmalloc(N * h), *w = fmalloc(h), *out = fmalloc(N * h), *rstd = fmalloc(N);
    fill_normal(x, N * h, 81, 2.0f);
    for (int64_t i = 0; i < N * h; i++) x[i] += 0.5f;
    fill_normal(w, h, 82, 1.0f);
    float *gx = up(x, N * h), *gw = up(w, h), *go = G->alloc(G, 4 * N * h),
          *gr = G->alloc(G, 4 * N);
    G->rmsnorm_fwd(G, gx, gw, go, gr, N, h, 1e-5f);
    C->rmsnorm_fwd(C, x, w, out, rstd, N, h, 1e-5f);
    cmp("rmsnorm_fwd out", down(go, N * h), out, N * h, 1e-5, 1e-5);
    cmp("rmsnorm_fwd rstd", down(gr, N), rstd, N, 1e-5, 0);
    float *g = fmalloc(N * h), *dx = fmalloc(N * h), *dw = fmalloc(h);
    fill_normal(g, N * h, 83, 1.0f);
    fill_normal(dx, N * h, 84, 1.0f); /* both accumulate: start nonzero */
    fill_normal(dw, h, 85, 1.0f);
    float *gg = up(g, N * h), *gdx = up(dx, N * h), *gdw = up(dw, h);
    G->rmsnorm_bwd(G, gg, gx, gw, gr, gdx, gdw, N, h);
    C->rmsnorm_bwd(C, g, x, w, rstd, dx, dw, N, h);
    cmp("rmsnorm_bwd dx (+=)", down(gdx, N * h), dx, N * h, 1e-5, 1e-5);
    cmp("rmsnorm_bwd dw (+=, sum of 37 rows)", down(gdw, h), dw, h, 1e-5, 1e-5);
    void *dev[] = {gx, gw, go, gr, gg, gdx, gdw};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) G->free(G, dev[i]);
    void *host[] = {x, w, out, rstd, g, dx, dw};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

/* CUDA's expf and ptdp's fast exp each within a few 1e-7 of exp: the
 * sigmoid, and so silu and its derivative, rtol 1e-5 */
static void test_swiglu(int with_bias) {
    const int64_t N = 33, fl = 200;
    float *x = fmalloc(N * 2 * fl), *bias = fmalloc(2 * fl), *out = fmalloc(N * fl),
          *g = fmalloc(N * fl), *db = fmalloc(2 * fl);
    fill_normal(x, N * 2 * fl, 86, 3.0f);
    fill_normal(bias, 2 * fl, 87, 0.5f);
    fill_normal(g, N * fl, 88, 1.0f);
    fill_normal(db, 2 * fl, 89, 1.0f);
    float *gx = up(x, N * 2 * fl), *gb = with_bias ? up(bias, 2 * fl) : NULL,
          *go = G->alloc(G, 4 * N * fl), *gg = up(g, N * fl),
          *gdb = with_bias ? up(db, 2 * fl) : NULL;
    const float *hb = with_bias ? bias : NULL;
    char what[80];
    G->swiglu_fwd(G, gx, gb, go, N, fl);
    C->swiglu_fwd(C, x, hb, out, N, fl);
    snprintf(what, sizeof what, "swiglu_fwd (bias %s)", with_bias ? "yes" : "none");
    cmp(what, down(go, N * fl), out, N * fl, 1e-5, 1e-6);
    /* bwd in place over the fc1 output (dx aliasing x) */
    G->swiglu_bwd(G, gg, gx, gb, gx, gdb, N, fl);
    C->swiglu_bwd(C, g, x, hb, x, with_bias ? db : NULL, N, fl);
    cmp("swiglu_bwd dx (aliasing x)", down(gx, N * 2 * fl), x, N * 2 * fl, 1e-5, 1e-5);
    if (with_bias)
        cmp("swiglu_bwd dbias (+=, 33 rows)", down(gdb, 2 * fl), db, 2 * fl, 1e-5, 1e-5 * N);
    G->free(G, gx), G->free(G, go), G->free(G, gg);
    if (with_bias) G->free(G, gb), G->free(G, gdb);
    free(x), free(bias), free(out), free(g), free(db);
}

/* the same fp32 table on both (ptdp_rope_table_init through each backend's
 * upload): the same formula, at most an FMA contraction apart */
static void test_rope(void) {
    const int64_t s = 9, b = 3, al = 6, gl = 2, hd = 64, rd = 32, pos0 = 5, S = pos0 + s;
    const int64_t n = s * b * (al + 2 * gl) * hd;
    float *x = fmalloc(n), *table = fmalloc(ptdp_rope_table_floats(S, rd));
    float *gt = G->alloc(G, 4 * ptdp_rope_table_floats(S, rd));
    ptdp_rope_table_init(C, table, S, rd, 10000.0);
    ptdp_rope_table_init(G, gt, S, rd, 10000.0);
    cmp("rope table (host-made, uploaded)", down(gt, S * rd), table, S * rd, BITWISE, 0);
    fill_normal(x, n, 90, 1.0f);
    float *gx = up(x, n);
    G->rope_fwd(G, gx, gt, s, b, al, gl, hd, rd, pos0);
    C->rope_fwd(C, x, table, s, b, al, gl, hd, rd, pos0);
    cmp("rope_fwd (rd 32 of 64, from position 5)", down(gx, n), x, n, 1e-6, 1e-6);
    G->rope_bwd(G, gx, gt, s, b, al, gl, hd, rd, pos0);
    C->rope_bwd(C, x, table, s, b, al, gl, hd, rd, pos0);
    cmp("rope_bwd", down(gx, n), x, n, 1e-6, 1e-6);
    G->free(G, gx), G->free(G, gt);
    free(x), free(table);
}

/* ---- embedding, position, cross-entropy ------------------------------------ */

static void test_embed(void) {
    const int64_t s = 9, b = 3, ld = s + 1, h = 96, Vl = 50, v0 = 40;
    int32_t tok[3 * 10];
    ptdp_rng_key k = ptdp_rng_key_make(3, "tok");
    for (int i = 0; i < b * ld; i++)
        tok[i] = (int32_t)(ptdp_rng_uniform(k, (uint64_t)i) * 120.0f) % 120;
    tok[0] = tok[1] = tok[ld] = 45; /* repeated owned tokens: the scatter-add order matters */
    float *wte = fmalloc(Vl * h), *out = fmalloc(s * b * h), *dwte = fmalloc(Vl * h),
          *g = fmalloc(s * b * h), *wpe = fmalloc(s * h), *dwpe = fmalloc(s * h);
    fill_normal(wte, Vl * h, 41, 1.0f);
    fill_normal(dwte, Vl * h, 42, 1.0f);
    fill_normal(g, s * b * h, 43, 1.0f);
    fill_normal(wpe, s * h, 44, 1.0f);
    fill_normal(dwpe, s * h, 45, 1.0f);
    int32_t *dtok = up_i32(tok, b * ld);
    float *dwte_ = up(wte, Vl * h), *dout = G->alloc(G, 4 * s * b * h), *ddwte = up(dwte, Vl * h),
          *dg = up(g, s * b * h), *dwpe_ = up(wpe, s * h), *ddwpe = up(dwpe, s * h);
    G->embed_fwd(G, dtok, ld, dwte_, v0, Vl, dout, s, b, h);
    C->embed_fwd(C, tok, ld, wte, v0, Vl, out, s, b, h);
    cmp("embed_fwd", down(dout, s * b * h), out, s * b * h, BITWISE, 0);
    G->pos_add_fwd(G, dout, dwpe_, s, b, h);
    C->pos_add_fwd(C, out, wpe, s, b, h);
    cmp("pos_add_fwd", down(dout, s * b * h), out, s * b * h, BITWISE, 0);
    G->embed_bwd(G, dtok, ld, dg, ddwte, v0, Vl, s, b, h);
    C->embed_bwd(C, tok, ld, g, dwte, v0, Vl, s, b, h);
    cmp("embed_bwd (+=, tokens in order)", down(ddwte, Vl * h), dwte, Vl * h, 1e-6, 1e-6);
    G->pos_add_bwd(G, dg, ddwpe, s, b, h);
    C->pos_add_bwd(C, g, dwpe, s, b, h);
    cmp("pos_add_bwd (+=)", down(ddwpe, s * h), dwpe, s * h, 1e-6, 1e-6);
    G->free(G, dtok);
    void *dev[] = {dwte_, dout, ddwte, dg, dwpe_, ddwpe};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) G->free(G, dev[i]);
    void *host[] = {wte, out, dwte, g, wpe, dwpe};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

/* one vocabulary slice [v0, v0 + Vl) of a real vocabulary V */
static void test_xent_slice(int64_t Vl, int64_t v0, int64_t V) {
    const int64_t s = 8, b = 3, ld = s + 1, N = s * b;
    int32_t tgt_ids[3 * 9];
    ptdp_rng_key k = ptdp_rng_key_make(4, "tgt");
    for (int i = 0; i < b * ld; i++)
        tgt_ids[i] = (int32_t)((int64_t)(ptdp_rng_uniform(k, (uint64_t)i) * V) % V);
    tgt_ids[0] = (int32_t)(v0 < V ? v0 : 0); /* at least one owned target */
    float *l = fmalloc(N * Vl), *mx = fmalloc(N), *se = fmalloc(N), *tg = fmalloc(N),
          *loss = fmalloc(N);
    fill_normal(l, N * Vl, 51 + v0, 3.0f);
    int32_t *dt = up_i32(tgt_ids, b * ld);
    float *dl = up(l, N * Vl), *dmx = G->alloc(G, 4 * N), *dse = G->alloc(G, 4 * N),
          *dtg = G->alloc(G, 4 * N), *dloss = G->alloc(G, 4 * N);
    char what[96];
    G->xent_max(G, dl, dmx, N, Vl, v0, V);
    C->xent_max(C, l, mx, N, Vl, v0, V);
    snprintf(what, sizeof what, "xent_max Vl=%lld v0=%lld V=%lld", (long long)Vl, (long long)v0,
             (long long)V);
    cmp(what, down(dmx, N), mx, N, BITWISE, 0);
    /* one slice stands for the all-reduced max here; -inf (no valid column) -> 0 */
    for (int64_t n = 0; n < N; n++) mx[n] = isinf(mx[n]) ? 0.0f : mx[n];
    G->upload(G, dmx, mx, 4 * N);
    G->xent_sums(G, dl, dmx, dt, ld, dse, dtg, s, b, Vl, v0, V);
    C->xent_sums(C, l, mx, tgt_ids, ld, se, tg, s, b, Vl, v0, V);
    snprintf(what, sizeof what, "xent_sums sumexp (sums of %lld)", (long long)Vl);
    cmp(what, down(dse, N), se, N, 1e-5, 1e-30);
    cmp("xent_sums target logit", down(dtg, N), tg, N, BITWISE, 0);
    cmp("xent_sums exp(l - max) in place, 0 at padding", down(dl, N * Vl), l, N * Vl, 1e-5, 1e-30);
    for (int64_t n = 0; n < N; n++) se[n] = se[n] > 0.0f ? se[n] : 1.0f; /* keep log finite */
    G->upload(G, dse, se, 4 * N);
    G->xent_loss(G, dse, dmx, dtg, dloss, N);
    C->xent_loss(C, se, mx, tg, loss, N);
    cmp("xent_loss", down(dloss, N), loss, N, 1e-5, 1e-7);
    G->xent_bwd(G, dl, dse, dt, ld, s, b, Vl, v0, V, 1.0f / (float)N);
    C->xent_bwd(C, l, se, tgt_ids, ld, s, b, Vl, v0, V, 1.0f / (float)N);
    cmp("xent_bwd (in place, 0 at padding)", down(dl, N * Vl), l, N * Vl, 1e-5, 1e-9);
    G->free(G, dt);
    void *dev[] = {dl, dmx, dse, dtg, dloss};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) G->free(G, dev[i]);
    void *host[] = {l, mx, se, tg, loss};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

/* ---- optimizer ops ---------------------------------------------------------- */

static void test_optim(void) {
    const int64_t n = 100003;
    float *p = fmalloc(n), *g = fmalloc(n), *m = fmalloc(n), *v = fmalloc(n);
    fill_normal(p, n, 61, 1.0f);
    fill_normal(g, n, 62, 0.1f);
    fill_normal(m, n, 63, 0.01f);
    fill_normal(v, n, 64, 0.001f);
    for (int64_t i = 0; i < n; i++) v[i] = v[i] * v[i];
    float *dp = up(p, n), *dg = up(g, n), *dm = up(m, n), *dv = up(v, n);
    for (int64_t step = 1; step <= 3; step++) {
        G->adamw(G, dp, dg, 0.75f, dm, dv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
        C->adamw(C, p, g, 0.75f, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
    }
    cmp("adamw param (3 steps)", down(dp, n), p, n, 1e-5, 1e-7);
    cmp("adamw m", down(dm, n), m, n, 1e-5, 2e-8);
    cmp("adamw v", down(dv, n), v, n, 1e-5, 1e-12);

    G->upload(G, dp, p, sizeof(float) * n); /* the reductions on the same data */
    double gs = G->sumsq(G, dp, n), cs = C->sumsq(C, p, n), gt = G->sum(G, dp, n),
           ct = C->sum(C, p, n);
    printf("%-4s %-40s gpu %.17g cpu %.17g (rtol 1e-12)\n",
           fabs(gs - cs) <= 1e-12 * fabs(cs) ? "ok" : "FAIL", "sumsq", gs, cs);
    CHECK_CLOSE(gs, cs, 1e-12, 0);
    printf("%-4s %-40s gpu %.17g cpu %.17g (rtol 1e-12, atol 1e-12 sumsq)\n",
           fabs(gt - ct) <= 1e-12 * fabs(ct) + 1e-12 * cs ? "ok" : "FAIL", "sum", gt, ct);
    CHECK_CLOSE(gt, ct, 1e-12, 1e-12 * cs);
    float p0;
    G->download(G, &p0, dp, sizeof p0);
    CHECK(G->sum(G, dp, 0) == 0.0 && G->sumsq(G, dp, 1) == (double)p0 * p0);

    G->free(G, dp);
    G->free(G, dg);
    G->free(G, dm);
    G->free(G, dv);
    free(p);
    free(g);
    free(m);
    free(v);
}

int main(void) {
    ptdp_backend_params bp = ptdp_backend_default_params();
    bp.device = PTDP_DEVICE_CUDA;
    if (ptdp_backend_open(&G, &bp) != PTDP_OK) {
        printf("SKIPPED test_cuda_ops: %s\n", ptdp_last_error());
        return SKIP_CODE;
    }
    C = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
    CHECK_OK(ptdp_backend_check(G, 1));
    CHECK(G->caps & PTDP_CAP_DEVICE_MEMORY);
    CHECK(!(C->caps & PTDP_CAP_DEVICE_MEMORY));
    printf("CUDA backend '%s' against CPU backend '%s'\n", G->name, C->name);
    test_memory();
    test_gemm();
    test_layernorm();
    test_bias_gelu();
    test_dropout();
    test_attention(70, 2, 3, 3, 16, 0.0f, 2e-5, 5e-5, 0);
    test_attention(70, 2, 3, 3, 16, 0.1f, 2e-5, 5e-5, 0);
    test_attention(70, 2, 3, 3, 16, 0.1f, 2e-5, 5e-5, 1);
    test_keyed_dropout();
    /* 48 (sequence, head) pairs of s = 1024: more than one workspace chunk
     * (32 per chunk forward, 16 backward with dropout) */
    test_attention(1024, 4, 12, 12, 64, 0.1f, 2e-5, 1e-4, 1);
    /* key/value groups: 3 query heads a group; 12 over 4 at s = 1024, chunks
     * of groups (10 forward, 5 backward with dropout) */
    test_attention(70, 2, 6, 2, 16, 0.0f, 2e-5, 1e-4, 0);
    test_attention(70, 2, 6, 2, 16, 0.1f, 2e-5, 1e-4, 1);
    test_attention(1024, 4, 12, 4, 64, 0.1f, 2e-5, 2e-4, 1);
    test_rmsnorm();
    test_swiglu(1);
    test_swiglu(0);
    test_rope();
    char desc[256];
    printf("CUDA backend declares: %s\n", ptdp_backend_describe(G, desc, sizeof desc));
    test_embed();
    test_xent_slice(300, 0, 550);   /* all valid */
    test_xent_slice(300, 300, 550); /* 250 valid, 50 padding columns */
    test_xent_slice(64, 600, 550);  /* only padding: max -inf, sums 0, grads 0 */
    test_optim();
    ptdp_backend_close(G);
    return test_done("test_cuda_ops");
}
