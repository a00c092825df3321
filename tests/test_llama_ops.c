/* test_llama_ops.c - the Llama family's ops of the CPU backends (RMSNorm,
 * SwiGLU, rotary embeddings, grouped-query attention) against the plain
 * references of kernels/ref.c, in fp32 and in the 16-bit tables; their
 * backwards against finite differences are in test_kernels_grad.c, the
 * 16-bit ops' row rounding bit for bit in test_fused16.c.
 *
 * Properties checked besides the values:
 * - grouped-query attention with a group per head is multi-head attention
 *   bit for bit (forward, saved rows, backward, dropout on), in every table;
 * - with fewer groups it is multi-head attention on k and v repeated per
 *   query head: the context, the saved rows and dq bit for bit (the same
 *   tiles, the same dropout masks), dk and dv the sums over the group's
 *   heads; dropout keyed by global query head, so two tensor ranks of half
 *   the heads and groups draw the masks of one;
 * - rotary positions follow the sequence: a buffer rotated from position
 *   pos0 equals those rows of a longer one rotated from 0; value heads and
 *   the dims past rd are untouched; the backward undoes the forward;
 * - ptdp_backend_check refuses a missing op, or one a backend declares
 *   untested (PTDP_CAP_UNTESTED_*), naming the Megatron flag.
 *
 * Tolerances (fp32 against double references): element-wise ops a few ulps
 * plus fastmath's 3e-7 (rtol 2e-6); RMSNorm's mean of squares over h <= 1000
 * in 16 lanes (at most ~70 terms a lane: rtol 2e-6 on rstd and out);
 * gradients with sums over rows 1e-5; attention 1e-4 relative, 1e-5
 * absolute, as test_kernels.c's tiled attention. The 16-bit tables: the fp32
 * op's values within the unit roundoff u (2^-8 bf16, 2^-11 fp16), on the
 * grid, as test_kernels.c's test_precision_tables derives it; the bf16
 * attention tiles (AVX512_BF16) add u max|v| to the context. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/kernels.h"
#include "backend_util.h"
#include "test.h"

static ptdp_backend *F; /* fp32 over oneDNN */

static int same(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

/* ---- RMSNorm ------------------------------------------------------------------ */

static void test_rmsnorm(int64_t N, int64_t h) {
    const float eps = 1e-5f;
    float *x = fmalloc(N * h), *w = fmalloc(h), *out = fmalloc(N * h), *ref = fmalloc(N * h),
          *rstd = fmalloc(N), *rref = fmalloc(N);
    fill_normal(x, N * h, 1, 2.0f);
    for (int64_t i = 0; i < N * h; i++) x[i] += 1.5f; /* a mean RMSNorm must not remove */
    fill_normal(w, h, 2, 1.0f);
    fill_const(out, N * h, NAN);
    F->rmsnorm_fwd(F, x, w, out, rstd, N, h, eps);
    ptdp_ref_rmsnorm_fwd(x, w, ref, rref, N, h, eps);
    char what[96];
    snprintf(what, sizeof what, "rmsnorm_fwd out (N=%lld h=%lld)", (long long)N, (long long)h);
    check_arr(what, out, ref, N * h, 2e-6, 0);
    check_arr("rmsnorm_fwd rstd", rstd, rref, N, 2e-6, 0);
    /* backward: dx and dw accumulate onto what they held */
    float *g = fmalloc(N * h), *dx = fmalloc(N * h), *dw = fmalloc(h), *dxr = fmalloc(N * h),
          *dwr = fmalloc(h);
    fill_normal(g, N * h, 3, 1.0f);
    fill_normal(dx, N * h, 4, 1.0f);
    fill_normal(dw, h, 5, 1.0f);
    memcpy(dxr, dx, sizeof(float) * (size_t)(N * h));
    memcpy(dwr, dw, sizeof(float) * (size_t)h);
    F->rmsnorm_bwd(F, g, x, w, rstd, dx, dw, N, h);
    ptdp_ref_rmsnorm_bwd(g, x, w, dxr, dwr, N, h, eps);
    check_arr("rmsnorm_bwd dx (+=)", dx, dxr, N * h, 1e-5, 1e-6);
    check_arr("rmsnorm_bwd dw (+=)", dw, dwr, h, 1e-5, 1e-5);
    /* the 16-bit tables: fp32 statistics, outputs on the grid */
    const ptdp_dtype dts[2] = {PTDP_DTYPE_BF16, PTDP_DTYPE_FP16};
    for (int k = 0; k < 2; k++) {
        ptdp_backend *H = test_cpu_backend(PTDP_GEMM_ONEDNN, dts[k]);
        const double u = k == 0 ? 1.0 / 256 : 1.0 / 2048, atol = k == 0 ? 0.0 : 1.0 / (1 << 24);
        float *x16 = fmalloc(N * h), *o16 = fmalloc(N * h), *o32 = fmalloc(N * h),
              *r16 = fmalloc(N), *r32 = fmalloc(N);
        memcpy(x16, x, sizeof(float) * (size_t)(N * h));
        H->quantize(H, x16, N * h);
        H->rmsnorm_fwd(H, x16, w, o16, r16, N, h, eps);
        F->rmsnorm_fwd(F, x16, w, o32, r32, N, h, eps);
        check_arr("16-bit rmsnorm_fwd", o16, o32, N * h, u, atol);
        CHECK(test_off_grid(o16, N * h, dts[k]) == 0 && same(r16, r32, N));
        fill_const(o16, N * h, 0.0f), fill_const(o32, N * h, 0.0f);
        fill_const(dw, h, 0.0f), fill_const(dwr, h, 0.0f);
        H->quantize(H, g, N * h);
        H->rmsnorm_bwd(H, g, x16, w, r16, o16, dw, N, h);
        F->rmsnorm_bwd(F, g, x16, w, r32, o32, dwr, N, h);
        check_arr("16-bit rmsnorm_bwd dx", o16, o32, N * h, u, atol);
        CHECK(test_off_grid(o16, N * h, dts[k]) == 0 && same(dw, dwr, h)); /* dw: fp32 */
        free(x16), free(o16), free(o32), free(r16), free(r32);
    }
    free(x), free(w), free(out), free(ref), free(rstd), free(rref);
    free(g), free(dx), free(dw), free(dxr), free(dwr);
}

/* ---- SwiGLU ---------------------------------------------------------------------- */

static void test_swiglu(int64_t N, int64_t fl, int with_bias) {
    float *x = fmalloc(N * 2 * fl), *bias = with_bias ? fmalloc(2 * fl) : NULL,
          *out = fmalloc(N * fl), *ref = fmalloc(N * fl);
    fill_normal(x, N * 2 * fl, 10, 3.0f); /* gates far into both tails of the sigmoid */
    x[0] = 0.0f;                          /* silu(0) = 0 exactly */
    x[1] = -100.0f;                       /* e^-a clamped: silu ~ 0, no NaN */
    x[2] = 100.0f;
    if (bias) fill_normal(bias, 2 * fl, 11, 0.5f);
    if (bias) bias[0] = bias[1] = bias[2] = 0.0f;
    F->swiglu_fwd(F, x, bias, out, N, fl);
    ptdp_ref_swiglu_fwd(x, bias, ref, N, fl);
    char what[96];
    snprintf(what, sizeof what, "swiglu_fwd (N=%lld fl=%lld bias=%d)", (long long)N, (long long)fl,
             with_bias);
    check_arr(what, out, ref, N * fl, 2e-6, 1e-30);
    CHECK(out[0] == 0.0f && isfinite(out[1]) && fabsf(out[1]) < 1e-30f);
    /* backward against the reference; dbias accumulates; dx may alias x */
    float *g = fmalloc(N * fl), *dx = fmalloc(N * 2 * fl), *dxr = fmalloc(N * 2 * fl),
          *db = bias ? fmalloc(2 * fl) : NULL, *dbr = bias ? fmalloc(2 * fl) : NULL;
    fill_normal(g, N * fl, 12, 1.0f);
    if (bias) fill_const(db, 2 * fl, 0.5f), fill_const(dbr, 2 * fl, 0.5f);
    F->swiglu_bwd(F, g, x, bias, dx, db, N, fl);
    ptdp_ref_swiglu_bwd(g, x, bias, dxr, dbr, N, fl);
    /* d(gate) = g u sg (1 + a (1 - sg)) cancels near a = -1.28: absolute bound */
    check_arr("swiglu_bwd dx", dx, dxr, N * 2 * fl, 2e-6, 2e-6);
    if (bias) check_arr("swiglu_bwd dbias (+=)", db, dbr, 2 * fl, 1e-5, 1e-5);
    float *xa = fmalloc(N * 2 * fl);
    memcpy(xa, x, sizeof(float) * (size_t)(N * 2 * fl));
    if (bias) fill_const(dbr, 2 * fl, 0.5f);
    F->swiglu_bwd(F, g, xa, bias, xa, dbr, N, fl);
    CHECK(same(xa, dx, N * 2 * fl) && (!bias || same(db, dbr, 2 * fl)));
    /* the 16-bit tables */
    const ptdp_dtype dts[2] = {PTDP_DTYPE_BF16, PTDP_DTYPE_FP16};
    for (int k = 0; k < 2; k++) {
        ptdp_backend *H = test_cpu_backend(PTDP_GEMM_ONEDNN, dts[k]);
        const double u = k == 0 ? 1.0 / 256 : 1.0 / 2048, atol = k == 0 ? 0.0 : 1.0 / (1 << 24);
        float *x16 = fmalloc(N * 2 * fl), *o16 = fmalloc(N * 2 * fl), *o32 = fmalloc(N * 2 * fl);
        memcpy(x16, x, sizeof(float) * (size_t)(N * 2 * fl));
        x16[1] = -10.0f, x16[2] = 10.0f; /* fp16's range */
        H->quantize(H, x16, N * 2 * fl);
        H->swiglu_fwd(H, x16, NULL, o16, N, fl);
        F->swiglu_fwd(F, x16, NULL, o32, N, fl);
        check_arr("16-bit swiglu_fwd", o16, o32, N * fl, u, atol);
        CHECK(test_off_grid(o16, N * fl, dts[k]) == 0);
        H->quantize(H, g, N * fl);
        H->swiglu_bwd(H, g, x16, NULL, o16, NULL, N, fl);
        F->swiglu_bwd(F, g, x16, NULL, o32, NULL, N, fl);
        check_arr("16-bit swiglu_bwd", o16, o32, N * 2 * fl, u, atol);
        CHECK(test_off_grid(o16, N * 2 * fl, dts[k]) == 0);
        free(x16), free(o16), free(o32);
    }
    free(x), free(bias), free(out), free(ref), free(g), free(dx), free(dxr), free(db), free(dbr);
    free(xa);
}

/* ---- rotary embeddings ------------------------------------------------------------ */

static void test_rope_table(void) {
    const int64_t S = 4100, rd = 64;
    const double theta = 10000.0;
    float *t = fmalloc(ptdp_rope_table_floats(S, rd));
    CHECK(ptdp_rope_table_floats(S, rd) == S * rd);
    ptdp_rope_table_init(F, t, S, rd, theta);
    int64_t bad = 0;
    for (int64_t p = 0; p < S; p += 37)
        for (int64_t i = 0; i < rd / 2; i++) {
            /* the reference script's 1.0 / (theta ** (arange(0, rd, 2) / rd)), in double */
            const double f = (double)p * (1.0 / pow(theta, (double)(2 * i) / (double)rd));
            bad += t[p * rd + i] != (float)cos(f) || t[p * rd + rd / 2 + i] != (float)sin(f);
        }
    CHECK(bad == 0);
    CHECK(t[0] == 1.0f && t[rd / 2] == 0.0f);                             /* position 0 */
    CHECK(t[rd] == (float)cos(1.0) && t[rd + rd / 2] == (float)sin(1.0)); /* f_0 = 1 */
    free(t);
}

/* qkv [s, b, gl, al/gl + 2, hd]: rope_fwd against the double reference; the
 * value heads and dims past rd untouched; positions from pos0; the backward
 * the inverse rotation */
static void test_rope(ptdp_backend *o, int64_t s, int64_t b, int64_t al, int64_t gl, int64_t hd,
                      int64_t rd, int64_t pos0) {
    const int64_t W = (al + 2 * gl) * hd, n = s * b * W, S = pos0 + s + 3, hpg = al / gl;
    const double theta = 500000.0; /* Llama 3's */
    float *table = fmalloc(ptdp_rope_table_floats(S, rd)), *x = fmalloc(n), *y = fmalloc(n),
          *ref = fmalloc(n);
    ptdp_rope_table_init(o, table, S, rd, theta);
    fill_normal(x, n, 20, 1.0f);
    o->quantize(o, x, n);
    memcpy(y, x, sizeof(float) * (size_t)n);
    memcpy(ref, x, sizeof(float) * (size_t)n);
    o->rope_fwd(o, y, table, s, b, al, gl, hd, rd, pos0);
    ptdp_ref_rope(ref, s, b, al, gl, hd, rd, pos0, theta, 0);
    char what[128];
    snprintf(what, sizeof what, "%s rope_fwd (s=%lld al=%lld gl=%lld hd=%lld rd=%lld pos0=%lld)",
             o->name, (long long)s, (long long)al, (long long)gl, (long long)hd, (long long)rd,
             (long long)pos0);
    const int fp32 = o->dtype == PTDP_DTYPE_FP32;
    const double u = o->dtype == PTDP_DTYPE_BF16 ? 1.0 / 256 : 1.0 / 2048;
    /* fp32: the table's rounding (2^-24 of cos, sin) and three roundings per value */
    check_arr(what, y, ref, n, fp32 ? 1e-6 : u, fp32 ? 1e-6 : 2e-6);
    if (!fp32) CHECK(test_off_grid(y, n, o->dtype) == 0);
    int64_t moved = 0;
    for (int64_t r = 0; r < s * b; r++)
        for (int64_t gi = 0; gi < gl; gi++)
            for (int64_t k = 0; k < hpg + 2; k++)
                for (int64_t e = 0; e < hd; e++) {
                    const int64_t i = r * W + (gi * (hpg + 2) + k) * hd + e;
                    moved += (k == hpg + 1 || e >= rd) && memcmp(&x[i], &y[i], 4) != 0;
                }
    CHECK(moved == 0);
    /* the backward turns the rotation back */
    memcpy(ref, y, sizeof(float) * (size_t)n);
    o->rope_bwd(o, ref, table, s, b, al, gl, hd, rd, pos0);
    double xmax = 0.0; /* 16-bit: the rotated pair's two roundings move x by u max|x| each */
    for (int64_t i = 0; i < n; i++) xmax = fmax(xmax, fabsf(x[i]));
    check_arr("rope_bwd(rope_fwd(x)) = x", ref, x, n, fp32 ? 1e-6 : u, fp32 ? 1e-6 : 3 * u * xmax);
    /* positions follow the sequence: rows of a longer buffer from 0 */
    if (pos0 > 0 && fp32) {
        const int64_t s2 = pos0 + s;
        float *big = fmalloc(s2 * b * W);
        fill_normal(big, s2 * b * W, 21, 1.0f);
        memcpy(big + pos0 * b * W, x, sizeof(float) * (size_t)n);
        o->rope_fwd(o, big, table, s2, b, al, gl, hd, rd, 0);
        CHECK(same(big + pos0 * b * W, y, n));
        free(big);
    }
    free(table), free(x), free(y), free(ref);
}

/* ---- grouped-query attention ------------------------------------------------------ */

typedef struct {
    int64_t s, b, al, gl, hd;
    float *qkv, *ctx, *saved, *dctx, *dqkv, *scratch;
} attn_bufs;

static attn_bufs attn_new(ptdp_backend *o, int64_t s, int64_t b, int64_t al, int64_t gl, int64_t hd,
                          uint64_t seed) {
    attn_bufs a = {.s = s, .b = b, .al = al, .gl = gl, .hd = hd};
    const int64_t nq = s * ptdp__attn_ld3(b, al, gl, hd), nc = s * b * al * hd;
    a.qkv = fmalloc(nq), a.ctx = fmalloc(nc), a.dctx = fmalloc(nc), a.dqkv = fmalloc(nq);
    a.saved = fmalloc(o->attention_saved_floats(o, s, b, al));
    a.scratch = fmalloc(ptdp_attention_scratch_floats(s, omp_get_max_threads()));
    fill_normal(a.qkv, nq, seed, 1.0f);
    fill_normal(a.dctx, nc, seed + 1, 1.0f);
    o->quantize(o, a.qkv, nq);
    o->quantize(o, a.dctx, nc);
    return a;
}
static void attn_free(attn_bufs *a) {
    free(a->qkv), free(a->ctx), free(a->saved), free(a->dctx), free(a->dqkv), free(a->scratch);
}
static void attn_run(ptdp_backend *o, attn_bufs *a, ptdp_dropout d, int gqa_op) {
    if (gqa_op) {
        o->attention_gqa_fwd(o, a->qkv, a->ctx, a->saved, a->scratch, a->s, a->b, a->al, a->gl,
                             a->hd, d);
        o->attention_gqa_bwd(o, a->dctx, a->qkv, a->ctx, a->saved, a->dqkv, a->scratch, a->s, a->b,
                             a->al, a->gl, a->hd, d);
    } else {
        PTDP_ASSERT(a->gl == a->al);
        o->attention_fwd(o, a->qkv, a->ctx, a->saved, a->scratch, a->s, a->b, a->al, a->hd, d);
        o->attention_bwd(o, a->dctx, a->qkv, a->ctx, a->saved, a->dqkv, a->scratch, a->s, a->b,
                         a->al, a->hd, d);
    }
}

/* a group per head: attention_gqa is attention, bit for bit, in every table */
static void test_gqa_is_mha(ptdp_backend *o) {
    const int64_t s = 130, b = 2, al = 3, hd = 16;
    const ptdp_dropout d = {.p = 0.1f,
                            .key = ptdp_rng_key_make(30, "gqa-mha"),
                            .b = b,
                            .sample0 = 5,
                            .heads = 2 * al,
                            .head0 = al};
    attn_bufs x = attn_new(o, s, b, al, al, hd, 31), y = attn_new(o, s, b, al, al, hd, 31);
    attn_run(o, &x, d, 1);
    attn_run(o, &y, d, 0);
    const int64_t nq = s * b * al * 3 * hd, nc = s * b * al * hd;
    printf("%s: attention_gqa with gl = al against attention\n", o->name);
    CHECK(same(x.ctx, y.ctx, nc) && same(x.saved, y.saved, b * al * s) && same(x.dqkv, y.dqkv, nq));
    attn_free(&x), attn_free(&y);
}

/* qkv in the grouped layout -> the multi-head layout with each query head's
 * group's k and v repeated (the reference's repeat_interleave) */
static void expand_groups(const float *g, float *m, int64_t s, int64_t b, int64_t al, int64_t gl,
                          int64_t hd) {
    const int64_t hpg = al / gl;
    for (int64_t r = 0; r < s * b; r++)
        for (int64_t j = 0; j < al; j++) {
            const float *grp = g + r * (al + 2 * gl) * hd + (j / hpg) * (hpg + 2) * hd;
            float *h = m + r * al * 3 * hd + j * 3 * hd;
            memcpy(h, grp + (j % hpg) * hd, sizeof(float) * (size_t)hd);
            memcpy(h + hd, grp + hpg * hd, sizeof(float) * (size_t)(2 * hd));
        }
}

/* fewer groups: against the double reference (no dropout), and against
 * multi-head attention on repeated k and v (dropout on) */
static void test_gqa(ptdp_backend *o, int64_t s, int64_t b, int64_t al, int64_t gl, int64_t hd) {
    const int64_t hpg = al / gl, nq = s * ptdp__attn_ld3(b, al, gl, hd), nc = s * b * al * hd,
                  nm = s * b * al * 3 * hd;
    char what[128];
    snprintf(what, sizeof what, "%s attention_gqa s=%lld b=%lld al=%lld gl=%lld hd=%lld", o->name,
             (long long)s, (long long)b, (long long)al, (long long)gl, (long long)hd);
    attn_bufs g = attn_new(o, s, b, al, gl, hd, 40);
    const ptdp_dropout none = {0};
    attn_run(o, &g, none, 1);
    const int fp32 = o->dtype == PTDP_DTYPE_FP32;
    if (fp32) {
        float *ref = fmalloc(nc), *dref = fmalloc(nq);
        ptdp_ref_attention_gqa_fwd(g.qkv, ref, s, b, al, gl, hd);
        ptdp_ref_attention_gqa_bwd(g.dctx, g.qkv, dref, s, b, al, gl, hd);
        printf("%s against the reference\n", what);
        check_arr("gqa ctx", g.ctx, ref, nc, 1e-4, 1e-5);
        check_arr("gqa dqkv", g.dqkv, dref, nq, 1e-4, 1e-5);
        free(ref), free(dref);
    }
    /* against multi-head attention on the repeated k and v, dropout keyed as a
     * second tensor rank's (global query heads) */
    const ptdp_dropout d = {.p = 0.15f,
                            .key = ptdp_rng_key_make(41, "gqa"),
                            .b = b,
                            .sample0 = 3,
                            .heads = 2 * al,
                            .head0 = al};
    attn_bufs m = attn_new(o, s, b, al, al, hd, 42);
    expand_groups(g.qkv, m.qkv, s, b, al, gl, hd);
    memcpy(m.dctx, g.dctx, sizeof(float) * (size_t)nc);
    attn_run(o, &g, d, 1);
    attn_run(o, &m, d, 0);
    printf("%s against attention on repeated k, v (dropout)\n", what);
    CHECK(same(g.ctx, m.ctx, nc));
    CHECK(same(g.saved, m.saved, o->attention_saved_floats(o, s, b, al)));
    /* dq bitwise; dk, dv the sums over the group's heads: fp32 sums in
     * another order (1e-5 of the sum of |terms|); 16-bit ones, the heads' each
     * rounded on one side and the sum once on the other (u of each) */
    const double u = o->dtype == PTDP_DTYPE_BF16 ? 1.0 / 256 : 1.0 / 2048;
    int64_t dq_bad = 0, kv_bad = 0;
    for (int64_t r = 0; r < s * b; r++)
        for (int64_t gi = 0; gi < gl; gi++) {
            const float *grp = g.dqkv + r * (al + 2 * gl) * hd + gi * (hpg + 2) * hd;
            const float *heads = m.dqkv + r * al * 3 * hd + gi * hpg * 3 * hd;
            for (int64_t e = 0; e < 2 * hd; e++) {
                double sum = 0.0, asum = 0.0;
                for (int64_t jj = 0; jj < hpg; jj++)
                    sum += heads[jj * 3 * hd + hd + e], asum += fabs(heads[jj * 3 * hd + hd + e]);
                const double d = fabs(grp[hpg * hd + e] - sum);
                kv_bad += !(d <= (fp32 ? 1e-5 * asum : u * (asum + fabs(sum))) + 1e-6);
            }
            for (int64_t jj = 0; jj < hpg; jj++)
                dq_bad += !same(grp + jj * hd, heads + jj * 3 * hd, hd);
        }
    printf("  dq: %lld heads not bitwise; dk, dv: %lld not the sums over the group\n",
           (long long)dq_bad, (long long)kv_bad);
    CHECK(dq_bad == 0 && kv_bad == 0);
    (void)nm;
    attn_free(&g), attn_free(&m);
}

/* dropout keyed by global query head: two tensor ranks holding half the
 * heads and groups each draw the masks of one rank holding all */
static void test_gqa_tp_keying(ptdp_backend *o) {
    const int64_t s = 9, b = 2, a = 4, g = 2, hd = 4, t = 2, al = a / t, gl = g / t;
    const ptdp_dropout d = {
        .p = 0.3f, .key = ptdp_rng_key_make(50, "gqa-tp"), .b = b, .sample0 = 1, .heads = a};
    attn_bufs one = attn_new(o, s, b, a, g, hd, 51);
    attn_run(o, &one, d, 1);
    int ok = 1;
    for (int64_t r = 0; r < t; r++) {
        attn_bufs part = attn_new(o, s, b, al, gl, hd, 52);
        const int64_t W = (a + 2 * g) * hd, Wl = (al + 2 * gl) * hd;
        for (int64_t row = 0; row < s * b; row++) { /* this rank's groups, then its ctx */
            memcpy(part.qkv + row * Wl, one.qkv + row * W + r * Wl, sizeof(float) * (size_t)Wl);
            memcpy(part.dctx + row * al * hd, one.dctx + row * a * hd + r * al * hd,
                   sizeof(float) * (size_t)(al * hd));
        }
        ptdp_dropout dr = d;
        dr.head0 = r * al;
        attn_run(o, &part, dr, 1);
        for (int64_t row = 0; row < s * b; row++) {
            ok &= same(part.ctx + row * al * hd, one.ctx + row * a * hd + r * al * hd, al * hd);
            ok &= same(part.dqkv + row * Wl, one.dqkv + row * W + r * Wl, Wl);
        }
        attn_free(&part);
    }
    printf("%s: attention_gqa over t = 2 ranks draws one rank's masks: %s\n", o->name,
           ok ? "yes" : "NO");
    CHECK(ok);
    attn_free(&one);
}

/* the 16-bit tables' grouped attention against the fp32 one on the same
 * (on-grid) inputs: test_precision_tables' bound */
static void test_gqa_16(ptdp_backend *h) {
    const int64_t s = 40, b = 2, al = 4, gl = 2, hd = 8, nc = s * b * al * hd;
    const double u = h->dtype == PTDP_DTYPE_BF16 ? 1.0 / 256 : 1.0 / 2048,
                 atol = h->dtype == PTDP_DTYPE_FP16 ? 1.0 / (1 << 24) : 0.0;
    attn_bufs x = attn_new(h, s, b, al, gl, hd, 60), y = attn_new(h, s, b, al, gl, hd, 60);
    const ptdp_dropout none = {0};
    h->attention_gqa_fwd(h, x.qkv, x.ctx, x.saved, x.scratch, s, b, al, gl, hd, none);
    F->attention_gqa_fwd(F, y.qkv, y.ctx, y.saved, y.scratch, s, b, al, gl, hd, none);
    const int tiles = (h->caps & PTDP_CAP_ATTENTION16) != 0;
    double vmax = 0.0;
    for (int64_t i = 0; i < s * ptdp__attn_ld3(b, al, gl, hd); i++)
        vmax = fmax(vmax, fabsf(x.qkv[i]));
    printf("%s: attention_gqa against fp32\n", h->name);
    check_arr("16-bit attention_gqa ctx", x.ctx, y.ctx, nc, u, atol + tiles * u * vmax);
    CHECK(test_off_grid(x.ctx, nc, h->dtype) == 0);
    h->attention_gqa_bwd(h, x.dctx, x.qkv, x.ctx, x.saved, x.dqkv, x.scratch, s, b, al, gl, hd,
                         none);
    CHECK(test_off_grid(x.dqkv, s * ptdp__attn_ld3(b, al, gl, hd), h->dtype) == 0);
    attn_free(&x), attn_free(&y);
}

/* ---- ptdp_backend_check ------------------------------------------------------------ */

static void test_check(void) {
    const ptdp_gemm_lib libs[2] = {PTDP_GEMM_ONEDNN, PTDP_GEMM_OPENBLAS};
    const int all = PTDP_NEED_RMSNORM | PTDP_NEED_SWIGLU | PTDP_NEED_ROPE | PTDP_NEED_GQA;
    for (int l = 0; l < 2; l++)
        for (int d = 0; d < 3; d++) {
            ptdp_backend *o = test_cpu_backend(libs[l], (ptdp_dtype)d);
            CHECK_OK(ptdp_backend_check(o, all));
            CHECK(!(o->caps & (PTDP_CAP_UNTESTED_RMSNORM | PTDP_CAP_UNTESTED_SWIGLU |
                               PTDP_CAP_UNTESTED_ROPE | PTDP_CAP_UNTESTED_GQA)));
        }
    const struct {
        int need;
        unsigned cap;
        const char *flag;
    } c[] = {{PTDP_NEED_RMSNORM, PTDP_CAP_UNTESTED_RMSNORM, "--normalization RMSNorm"},
             {PTDP_NEED_SWIGLU, PTDP_CAP_UNTESTED_SWIGLU, "--swiglu"},
             {PTDP_NEED_ROPE, PTDP_CAP_UNTESTED_ROPE, "--position-embedding-type rope"},
             {PTDP_NEED_GQA, PTDP_CAP_UNTESTED_GQA, "--group-query-attention"}};
    for (int k = 0; k < 4; k++) {
        ptdp_backend t = *F;
        t.caps |= c[k].cap; /* declared untested: refused only when needed */
        CHECK_OK(ptdp_backend_check(&t, all & ~c[k].need));
        CHECK(ptdp_backend_check(&t, c[k].need) == PTDP_EUNSUPPORTED &&
              strstr(ptdp_last_error(), c[k].flag) && strstr(ptdp_last_error(), "not yet run"));
        char desc[256];
        CHECK(strstr(ptdp_backend_describe(&t, desc, sizeof desc), "-untested") != NULL);
        t = *F;
        if (k == 0) t.rmsnorm_bwd = NULL;
        if (k == 1) t.swiglu_fwd = NULL;
        if (k == 2) t.rope_bwd = NULL;
        if (k == 3) t.attention_gqa_fwd = NULL;
        CHECK_OK(ptdp_backend_check(&t, 0)); /* optional */
        CHECK(ptdp_backend_check(&t, c[k].need) == PTDP_EUNSUPPORTED &&
              strstr(ptdp_last_error(), c[k].flag) && strstr(ptdp_last_error(), "has no"));
    }
}

int main(void) {
    F = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
    test_check();
    test_rmsnorm(5, 37);
    test_rmsnorm(3, 1000);
    test_swiglu(4, 33, 1);
    test_swiglu(3, 100, 0);
    test_rope_table();
    const ptdp_dtype dts[3] = {PTDP_DTYPE_FP32, PTDP_DTYPE_BF16, PTDP_DTYPE_FP16};
    for (int k = 0; k < 3; k++) {
        ptdp_backend *o = test_cpu_backend(PTDP_GEMM_ONEDNN, dts[k]);
        test_rope(o, 7, 2, 4, 2, 8, 8, 0);   /* whole heads */
        test_rope(o, 5, 3, 6, 2, 16, 4, 11); /* --rotary-percent 0.25, from position 11 */
        test_rope(o, 4, 1, 2, 2, 6, 6, 2);   /* a group per head (the GPT layout) */
        test_gqa_is_mha(o);
        test_gqa_tp_keying(o);
        if (k > 0) test_gqa_16(o);
    }
    test_gqa_is_mha(test_cpu_backend(PTDP_GEMM_OPENBLAS, PTDP_DTYPE_FP32));
    test_gqa(F, 7, 2, 4, 2, 5);
    test_gqa(F, 130, 1, 6, 2, 16); /* two tiles, the diagonal split */
    test_gqa(F, 300, 2, 4, 1, 8);  /* one group (multi-query attention) */
    test_gqa(test_cpu_backend(PTDP_GEMM_OPENBLAS, PTDP_DTYPE_FP32), 130, 1, 4, 2, 16);
    test_gqa(test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_BF16), 130, 2, 6, 3, 16);
    test_gqa(test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP16), 70, 1, 4, 2, 8);
    return test_done("test_llama_ops");
}
