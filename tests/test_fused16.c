/* test_fused16.c - the 16-bit backends' fused forms, bit for bit against
 * what they replace: an fp32 op followed by a rounding pass over its output.
 *
 * Element-wise ops (test_rounding_fused): the bf16 and fp16 backends round each
 * row as they write it (src/kernels/cpu/norm.c, act.c: the ptdp__*_r forms), so
 * the output must equal the fp32 op's, rounded, in every bit, and a bias
 * gradient must be the fp32 sum over the rounded rows; the Llama family's
 * RMSNorm, SwiGLU and rotary embeddings (src/kernels/cpu/rope.c) the same.
 *
 * The loss head's logits (test_head_logits): the bf16 backends leave the
 * logits GEMM's output unrounded and their xent_max and xent_sums round each
 * logit as they read it (src/kernels/cpu/half/xent_bf16.c), so head_logits then
 * xent_sums must give exactly the row maxima, target logits, exponentials
 * and their sums of the backend's own rounded GEMM followed by the fp32
 * xent_max and xent_sums; the native bf16 backend, which keeps the logits in
 * bf16 and stores no exponentials (test_bf16_native holds its head to the
 * composition), the same maxima and target logits and the sums up to their
 * order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/half/half.h"
#include "kernels/kernels.h"
#include "backend_util.h"
#include "test.h"

/* The 16-bit backends' element-wise ops round each row as they write it
 * (ptdp__*_r): bit for bit the fp32 op followed by a rounding pass over
 * its output, and a bias gradient the fp32 sum over the rounded rows. Rows
 * of 3000 (beyond one AVX-512 register's lanes, with a tail), dropout on. */
static int same_bits(const float *a, const float *b, int64_t n, const char *table,
                     const char *what) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += memcmp(&a[i], &b[i], 4) != 0;
    if (k) printf("  %s %s: %lld values differ\n", table, what, (long long)k);
    return k == 0;
}

static void test_rounding_fused(void) {
    const int64_t N = 7, n = 3000;
    float *x = fmalloc(N * n), *r = fmalloc(N * n), *w = fmalloc(n), *bias = fmalloc(n);
    float *g = fmalloc(N * n), *y1 = fmalloc(N * n), *y2 = fmalloc(N * n);
    float *d1 = fmalloc(n), *d2 = fmalloc(n), *e1 = fmalloc(n), *e2 = fmalloc(n);
    float mean[7], rstd[7], mean2[7], rstd2[7];
    const ptdp_dtype dts[2] = {PTDP_DTYPE_BF16, PTDP_DTYPE_FP16};
    const ptdp_dropout dr = {.p = 0.25f, .key = ptdp_rng_key_make(9, "fused"), .b = 1, .width = n};
    ptdp_backend *f = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
    for (int k = 0; k < 2; k++) {
        ptdp_backend *h = test_cpu_backend(PTDP_GEMM_ONEDNN, dts[k]);
        fill_normal(x, N * n, 61, 2.0f), fill_normal(r, N * n, 62, 1.0f);
        fill_normal(g, N * n, 63, 1.0f), fill_normal(w, n, 64, 1.0f);
        fill_normal(bias, n, 65, 1.0f);
        h->quantize(h, x, N * n), h->quantize(h, r, N * n), h->quantize(h, g, N * n);
#define SAME(what) CHECK(same_bits(y1, y2, N *n, h->name, what))
        h->layernorm_fwd(h, x, w, bias, y1, mean, rstd, N, n, 1e-5f);
        f->layernorm_fwd(f, x, w, bias, y2, mean2, rstd2, N, n, 1e-5f);
        h->quantize(h, y2, N * n);
        SAME("layernorm_fwd");
        fill_const(y1, N * n, 0.5f), fill_const(y2, N * n, 0.5f); /* dx accumulates */
        fill_const(d1, n, 0.0f), fill_const(d2, n, 0.0f), fill_const(e1, n, 0.0f);
        fill_const(e2, n, 0.0f);
        h->layernorm_bwd(h, g, x, w, mean, rstd, y1, d1, e1, N, n);
        f->layernorm_bwd(f, g, x, w, mean, rstd, y2, d2, e2, N, n);
        h->quantize(h, y2, N * n);
        SAME("layernorm_bwd");
        CHECK(!memcmp(d1, d2, sizeof(float) * (size_t)n) &&
              !memcmp(e1, e2, sizeof(float) * (size_t)n));
        memcpy(y1, x, sizeof(float) * (size_t)(N * n)),
            memcpy(y2, x, sizeof(float) * (size_t)(N * n));
        h->bias_add(h, y1, bias, N, n);
        f->bias_add(f, y2, bias, N, n);
        h->quantize(h, y2, N * n);
        SAME("bias_add");
        h->bias_gelu_fwd(h, x, bias, y1, N, n);
        f->bias_gelu_fwd(f, x, bias, y2, N, n);
        h->quantize(h, y2, N * n);
        SAME("bias_gelu_fwd");
        fill_const(d1, n, 0.0f), fill_const(d2, n, 0.0f), fill_const(e2, n, 0.0f);
        h->bias_gelu_bwd(h, g, x, bias, y1, d1, N, n);
        f->bias_gelu_bwd(f, g, x, bias, y2, e2, N, n);
        h->quantize(h, y2, N * n);
        SAME("bias_gelu_bwd");
        f->bias_bwd(f, y2, d2, N, n); /* the bias gradient: over the rounded rows */
        CHECK(!memcmp(d1, d2, sizeof(float) * (size_t)n));
        h->bias_dropout_add_fwd(h, x, bias, r, y1, N, n, dr);
        f->bias_dropout_add_fwd(f, x, bias, r, y2, N, n, dr);
        h->quantize(h, y2, N * n);
        SAME("bias_dropout_add_fwd");
        fill_const(d1, n, 0.0f), fill_const(d2, n, 0.0f);
        for (int ip = 0; ip < 2; ip++) { /* into dx, and in place (dx = dout) */
            memcpy(y1, g, sizeof(float) * (size_t)(N * n));
            h->bias_dropout_add_bwd(h, ip ? y1 : g, y1, d1, N, n, dr);
            f->bias_dropout_add_bwd(f, g, y2, e2, N, n, dr);
            h->quantize(h, y2, N * n);
            SAME("bias_dropout_add_bwd");
            f->bias_bwd(f, y2, d2, N, n);
            CHECK(!memcmp(d1, d2, sizeof(float) * (size_t)n));
        }
        /* the Llama family's: RMSNorm (rstd and dw fp32, bitwise), SwiGLU on
         * [N, 2 * 1500] (gate | up), rotary embeddings on [N, (20 + 2 * 5) * 100] */
        h->rmsnorm_fwd(h, x, w, y1, mean, N, n, 1e-5f);
        f->rmsnorm_fwd(f, x, w, y2, mean2, N, n, 1e-5f);
        h->quantize(h, y2, N * n);
        SAME("rmsnorm_fwd");
        CHECK(!memcmp(mean, mean2, sizeof mean));
        fill_const(y1, N * n, 0.5f), fill_const(y2, N * n, 0.5f);
        fill_const(d1, n, 0.0f), fill_const(d2, n, 0.0f);
        h->rmsnorm_bwd(h, g, x, w, mean, y1, d1, N, n);
        f->rmsnorm_bwd(f, g, x, w, mean, y2, d2, N, n);
        h->quantize(h, y2, N * n);
        SAME("rmsnorm_bwd");
        CHECK(!memcmp(d1, d2, sizeof(float) * (size_t)n));
        h->swiglu_fwd(h, x, bias, y1, N, n / 2);
        f->swiglu_fwd(f, x, bias, y2, N, n / 2);
        h->quantize(h, y2, N * n / 2);
        CHECK(same_bits(y1, y2, N * n / 2, h->name, "swiglu_fwd"));
        fill_const(d1, n, 0.0f), fill_const(d2, n, 0.0f), fill_const(e2, n, 0.0f);
        h->swiglu_bwd(h, g, x, bias, y1, d1, N, n / 2);
        f->swiglu_bwd(f, g, x, bias, y2, e2, N, n / 2);
        h->quantize(h, y2, N * n);
        SAME("swiglu_bwd");
        f->bias_bwd(f, y2, d2, N, n); /* the bias gradient: over the rounded rows */
        CHECK(!memcmp(d1, d2, sizeof(float) * (size_t)n));
        float table[7 * 64];
        ptdp_rope_table_init(f, table, 7, 64, 10000.0);
        for (int inv = 0; inv < 2; inv++) {
            memcpy(y1, x, sizeof(float) * (size_t)(N * n)),
                memcpy(y2, x, sizeof(float) * (size_t)(N * n));
            (inv ? h->rope_bwd : h->rope_fwd)(h, y1, table, N, 1, 20, 5, 100, 64, 0);
            (inv ? f->rope_bwd : f->rope_fwd)(f, y2, table, N, 1, 20, 5, 100, 64, 0);
            h->quantize(h, y2, N * n);
            SAME(inv ? "rope_bwd" : "rope_fwd");
        }
#undef SAME
    }
    free(x), free(r), free(w), free(bias), free(g), free(y1), free(y2);
    free(d1), free(d2), free(e1), free(e2);
}

/* Shapes: rows not a multiple of the vector width, a vocabulary shard at
 * v0 > 0 whose last columns are padding (global id >= V), targets inside,
 * outside and in the padding of the shard. */
static void test_head_logits(void) {
    const int64_t s = 5, b = 3, N = s * b, h = 40, Vl = 301, v0 = 250, V = 500, ld = s + 1;
    float *x = fmalloc(N * h), *wte = fmalloc(Vl * h), *l1 = fmalloc(N * Vl), *l2 = fmalloc(N * Vl);
    float m1[15], m2[15], se1[15], se2[15], t1[15], t2[15];
    int32_t tok[3 * 6];
    for (int64_t i = 0; i < b * ld; i++) tok[i] = (int32_t)((i * 97 + 13) % 560); /* some > V */
    const ptdp_gemm_lib libs[2] = {PTDP_GEMM_ONEDNN, PTDP_GEMM_OPENBLAS};
    for (int k = 0; k < 2; k++) {
        ptdp_backend *o = test_cpu_backend(libs[k], PTDP_DTYPE_BF16),
                     *f = test_cpu_backend(libs[k], PTDP_DTYPE_FP32);
        CHECK(o->head_logits != NULL);
        fill_normal(x, N * h, 71, 1.0f), fill_normal(wte, Vl * h, 72, 0.5f);
        o->quantize(o, x, N * h), o->quantize(o, wte, Vl * h);
        ptdp_backend_weights_register(o, wte, Vl * h); /* as a chunk does */
        o->head_logits(o, x, wte, h, l1, m1, N, Vl, v0, V);
        o->xent_sums(o, l1, m1, tok, ld, se1, t1, s, b, Vl, v0, V);
        o->gemm(o, 0, 1, N, Vl, h, 1.0f, x, h, wte, h, 0.0f, l2, Vl); /* rounded */
        f->xent_max(f, l2, m2, N, Vl, v0, V);
        f->xent_sums(f, l2, m2, tok, ld, se2, t2, s, b, Vl, v0, V);
        CHECK(same_bits(m1, m2, N, o->name, "head_logits row max"));
        CHECK(same_bits(t1, t2, N, o->name, "xent_sums target logit"));
        if ((o->caps & PTDP_CAP_FUSED_HEAD) && ptdp__gemm_bf16_logits_b16(o, l1, N, Vl)) {
            /* the native backend keeps its logits in bf16 and stores no
             * exponentials: the same terms summed in another order, each
             * order's error at most Vl 2^-24 times the sum */
            int64_t off = 0;
            for (int64_t n = 0; n < N; n++)
                off += fabsf(se1[n] - se2[n]) > 2.0f * (float)Vl * 0x1p-24f * se2[n];
            CHECK(off == 0);
        } else {
            CHECK(same_bits(se1, se2, N, o->name, "xent_sums sum of exponentials"));
            CHECK(same_bits(l1, l2, N * Vl, o->name, "xent_sums exponentials"));
        }
        int owned = 0;
        for (int64_t n = 0; n < N; n++) owned += t1[n] != 0.0f;
        CHECK(owned > 0 && owned < N); /* both kinds of rows were there */
        ptdp_backend_weights_register(o, wte, 0);
    }
    free(x), free(wte), free(l1), free(l2);
}

int main(void) {
    test_rounding_fused();
    test_head_logits();
    return test_done("test_fused16");
}
