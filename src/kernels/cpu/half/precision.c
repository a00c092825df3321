/* precision.c - the CPU backend of Megatron's --bf16 and --fp16: the same
 * kernels as the fp32 backend (cpu_backend.c), each wrapped so that what it
 * writes as an activation, or an activation's gradient, is rounded to the
 * 16-bit grid (round to nearest even; fp16 overflows to inf, which is what
 * loss scaling watches for): the element-wise kernels round each row as
 * they write it (their _r forms, given R), GEMMs and attention in a pass
 * over their output; the bf16 backend's loss head leaves the logits
 * unrounded and its xent_max and xent_sums round what they read (the
 * native bf16 one stores them in bf16: gemm_bf16.c). The arithmetic inside
 * every op is fp32, so LayerNorm statistics, softmax and the cross-entropy
 * are fp32 as Megatron computes them; weight gradients (beta != 0 GEMMs,
 * the bias, LayerNorm and embedding gradients) accumulate in fp32 and are
 * not rounded. Storage stays fp32: the values are those of 16-bit tensors,
 * the bytes are not (yet). GEMMs of on-grid inputs are exact products
 * summed in fp32, i.e. a 16-bit GEMM with fp32 accumulation; bf16 over
 * oneDNN runs oneDNN's native bf16 matmul instead where the CPU has one
 * (gemm_bf16.c: same products, fp32 accumulation, in another order) and,
 * with AVX512_BF16, attention's tile products in bf16 (attn_bf16.c: the
 * probabilities and dS rounded to bf16 first, as Megatron rounds them).
 * ptdp__cpu_set_precision turns an fp32 instance into a 16-bit one, with
 * the native pieces where the CPU has them (checked at run time). Not
 * here: 16-bit storage, but for the native bf16 backend's MLP (below). */
#include <string.h>

#include "kernels/cpu/half/half.h"

/* C [M, N] with row stride ldc, rounded row by row */
static void round_rows(void (*round)(float *, int64_t), float *C, int64_t M, int64_t N,
                       int64_t ldc) {
    if (ldc == N) {
        round(C, M * N);
        return;
    }
    for (int64_t i = 0; i < M; i++) round(C + i * ldc, N);
}

/* The ops every GEMM library shares, for one 16-bit type P (dtype D) rounded by R. */
#define PTDP__PREC_COMMON(P, R, D)                                                                 \
    static void P##_quantize(ptdp_backend *be, float *x, int64_t n) {                              \
        (void)be;                                                                                  \
        R(x, n);                                                                                   \
    }                                                                                              \
    static void P##_layernorm_fwd(ptdp_backend *be, const float *x, const float *w,                \
                                  const float *b, float *out, float *mean, float *rstd, int64_t N, \
                                  int64_t h, float eps) {                                          \
        (void)be;                                                                                  \
        ptdp__layernorm_fwd_r(x, w, b, out, mean, rstd, N, h, eps, R);                             \
    }                                                                                              \
    static void P##_layernorm_bwd(ptdp_backend *be, const float *dout, const float *x,             \
                                  const float *w, const float *mean, const float *rstd, float *dx, \
                                  float *dw, float *db, int64_t N, int64_t h) {                    \
        (void)be;                                                                                  \
        ptdp__layernorm_bwd_r(dout, x, w, mean, rstd, dx, dw, db, N, h, R);                        \
    }                                                                                              \
    static void P##_bias_add(ptdp_backend *be, float *y, const float *bias, int64_t N,             \
                             int64_t n) {                                                          \
        (void)be;                                                                                  \
        ptdp__bias_add_r(y, bias, N, n, R);                                                        \
    }                                                                                              \
    static void P##_bias_gelu_fwd(ptdp_backend *be, const float *x, const float *bias, float *out, \
                                  int64_t N, int64_t n) {                                          \
        (void)be;                                                                                  \
        ptdp__bias_gelu_fwd_r(x, bias, out, N, n, R);                                              \
    }                                                                                              \
    static void P##_bias_gelu_bwd(ptdp_backend *be, const float *dout, const float *x,             \
                                  const float *bias, float *dx, float *dbias, int64_t N,           \
                                  int64_t n) {                                                     \
        (void)be;                                                                                  \
        ptdp__bias_gelu_bwd_r(dout, x, bias, dx, dbias, N, n, R);                                  \
    }                                                                                              \
    static void P##_bias_dropout_add_fwd(ptdp_backend *be, const float *x, const float *bias,      \
                                         const float *resid, float *out, int64_t N, int64_t h,     \
                                         ptdp_dropout drop) {                                      \
        (void)be;                                                                                  \
        ptdp__bias_dropout_add_fwd_r(x, bias, resid, out, N, h, drop, R);                          \
    }                                                                                              \
    static void P##_bias_dropout_add_bwd(ptdp_backend *be, const float *dout, float *dx,           \
                                         float *dbias, int64_t N, int64_t h, ptdp_dropout drop) {  \
        (void)be;                                                                                  \
        ptdp__bias_dropout_add_bwd_r(dout, dx, dbias, N, h, drop, R);                              \
    }                                                                                              \
    static void P##_dropout(ptdp_backend *be, float *x, int64_t n, ptdp_dropout drop) {            \
        (void)be;                                                                                  \
        ptdp__dropout_inplace(x, n, drop);                                                         \
        R(x, n);                                                                                   \
    }                                                                                              \
    static void P##_embed_fwd(ptdp_backend *be, const int32_t *tokens, int64_t ld,                 \
                              const float *wte, int64_t v0, int64_t Vl, float *out, int64_t s,     \
                              int64_t b, int64_t h) {                                              \
        (void)be;                                                                                  \
        ptdp__embed_fwd(tokens, ld, wte, v0, Vl, out, s, b, h);                                    \
        R(out, s *b *h);                                                                           \
    }                                                                                              \
    static void P##_pos_add_fwd(ptdp_backend *be, float *out, const float *wpe, int64_t s,         \
                                int64_t b, int64_t h) {                                            \
        (void)be;                                                                                  \
        ptdp__pos_add_fwd(out, wpe, s, b, h);                                                      \
        R(out, s *b *h);                                                                           \
    }                                                                                              \
    static void P##_adamw_master(ptdp_backend *be, float *master, float *work, const float *grad,  \
                                 float gscale, float *m, float *v, int64_t n, float lr,            \
                                 float beta1, float beta2, float eps, float wd, int64_t step) {    \
        (void)be;                                                                                  \
        ptdp__adamw_master(master, work, D, grad, gscale, m, v, n, lr, beta1, beta2, eps, wd,      \
                           step);                                                                  \
    }                                                                                              \
    static void P##_rmsnorm_fwd(ptdp_backend *be, const float *x, const float *w, float *out,      \
                                float *rstd, int64_t N, int64_t h, float eps) {                    \
        (void)be;                                                                                  \
        ptdp__rmsnorm_fwd_r(x, w, out, rstd, N, h, eps, R);                                        \
    }                                                                                              \
    static void P##_rmsnorm_bwd(ptdp_backend *be, const float *dout, const float *x,               \
                                const float *w, const float *rstd, float *dx, float *dw,           \
                                int64_t N, int64_t h) {                                            \
        (void)be;                                                                                  \
        ptdp__rmsnorm_bwd_r(dout, x, w, rstd, dx, dw, N, h, R);                                    \
    }                                                                                              \
    static void P##_swiglu_fwd(ptdp_backend *be, const float *x, const float *bias, float *out,    \
                               int64_t N, int64_t fl) {                                            \
        (void)be;                                                                                  \
        ptdp__swiglu_fwd_r(x, bias, out, N, fl, R);                                                \
    }                                                                                              \
    static void P##_swiglu_bwd(ptdp_backend *be, const float *dout, const float *x,                \
                               const float *bias, float *dx, float *dbias, int64_t N,              \
                               int64_t fl) {                                                       \
        (void)be;                                                                                  \
        ptdp__swiglu_bwd_r(dout, x, bias, dx, dbias, N, fl, R);                                    \
    }                                                                                              \
    static void P##_rope_fwd(ptdp_backend *be, float *qkv, const float *table, int64_t s,          \
                             int64_t b, int64_t al, int64_t gl, int64_t hd, int64_t rd,            \
                             int64_t pos0) {                                                       \
        (void)be;                                                                                  \
        ptdp__rope_r(qkv, table, s, b, al, gl, hd, rd, pos0, 0, R);                                \
    }                                                                                              \
    static void P##_rope_bwd(ptdp_backend *be, float *dqkv, const float *table, int64_t s,         \
                             int64_t b, int64_t al, int64_t gl, int64_t hd, int64_t rd,            \
                             int64_t pos0) {                                                       \
        (void)be;                                                                                  \
        ptdp__rope_r(dqkv, table, s, b, al, gl, hd, rd, pos0, 1, R);                               \
    }                                                                                              \
    static void P##_xent_bwd(ptdp_backend *be, float *logits, const float *sumexp,                 \
                             const int32_t *targets, int64_t ld, int64_t s, int64_t b, int64_t Vl, \
                             int64_t v0, int64_t V, float scale) {                                 \
        (void)be;                                                                                  \
        ptdp__xent_bwd(logits, sumexp, targets, ld, s, b, Vl, v0, V, scale);                       \
        R(logits, s *b *Vl);                                                                       \
    }

/* Attention for one type P whose tile products run through ptdp__gemm_L:
 * the grouped op, and multi-head attention as its case gl = al. */
#define PTDP__PREC_ATTN(P, R, L)                                                                   \
    static void P##_attn_gqa_fwd_##L(ptdp_backend *be, const float *qkv, float *ctx, float *saved, \
                                     float *scratch, int64_t s, int64_t b, int64_t al, int64_t gl, \
                                     int64_t hd, ptdp_dropout drop) {                              \
        ptdp__attention_fwd(be, ptdp__gemm_##L, qkv, ctx, saved, scratch, s, b, al, gl, hd, drop); \
        R(ctx, s *b *al *hd);                                                                      \
    }                                                                                              \
    static void P##_attn_gqa_bwd_##L(ptdp_backend *be, const float *dctx, const float *qkv,        \
                                     const float *ctx, const float *saved, float *dqkv,            \
                                     float *scratch, int64_t s, int64_t b, int64_t al, int64_t gl, \
                                     int64_t hd, ptdp_dropout drop) {                              \
        ptdp__attention_bwd(be, ptdp__gemm_##L, dctx, qkv, ctx, saved, dqkv, scratch, s, b, al,    \
                            gl, hd, drop);                                                         \
        R(dqkv, s *ptdp__attn_ld3(b, al, gl, hd));                                                 \
    }                                                                                              \
    __attribute__((unused)) static void P##_attn_fwd_##L(                                          \
        ptdp_backend *be, const float *qkv, float *ctx, float *saved, float *scratch, int64_t s,   \
        int64_t b, int64_t al, int64_t hd, ptdp_dropout drop) {                                    \
        P##_attn_gqa_fwd_##L(be, qkv, ctx, saved, scratch, s, b, al, al, hd, drop);                \
    }                                                                                              \
    __attribute__((unused)) static void P##_attn_bwd_##L(                                          \
        ptdp_backend *be, const float *dctx, const float *qkv, const float *ctx,                   \
        const float *saved, float *dqkv, float *scratch, int64_t s, int64_t b, int64_t al,         \
        int64_t hd, ptdp_dropout drop) {                                                           \
        P##_attn_gqa_bwd_##L(be, dctx, qkv, ctx, saved, dqkv, scratch, s, b, al, al, hd, drop);    \
    }

/* The GEMM for one type P over ptdp__gemm_L: its output rounded (weight
 * gradients, beta != 0, accumulate in fp32 and are not). */
#define PTDP__PREC_GEMM(P, R, L)                                                                \
    static void P##_gemm_##L(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K, \
                             float alpha, const float *A, int64_t lda, const float *B,          \
                             int64_t ldb, float beta, float *C, int64_t ldc) {                  \
        ptdp__gemm_##L(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);               \
        if (beta == 0.0f) round_rows(R, C, M, N, ldc);                                          \
    }

/* GEMM and attention, for one type P and one library L. */
#define PTDP__PREC_LIB(P, R, L) PTDP__PREC_GEMM(P, R, L) PTDP__PREC_ATTN(P, R, L)

/* The bf16 backends' xent_max and xent_sums, which round each logit as
 * they read it (embed_xent.c), and their loss head logits over library L,
 * left unrounded: no pass over the [N, Vl] logits rounds them first */
static void bf16_xent_max(ptdp_backend *be, const float *logits, float *rowmax, int64_t N,
                          int64_t Vl, int64_t v0, int64_t V) {
    (void)be;
    ptdp__xent_max_bf16(logits, rowmax, N, Vl, v0, V);
}
static void bf16_xent_sums(ptdp_backend *be, float *logits, const float *gmax,
                           const int32_t *targets, int64_t ld, float *sumexp, float *tgt, int64_t s,
                           int64_t b, int64_t Vl, int64_t v0, int64_t V) {
    (void)be;
    ptdp__xent_sums_bf16(logits, gmax, targets, ld, sumexp, tgt, s, b, Vl, v0, V);
}
#define PTDP__BF16_HEAD(L)                                                               \
    static void bf16_head_logits_##L(ptdp_backend *be, const float *x, const float *wte, \
                                     int64_t h, float *logits, float *rowmax, int64_t N, \
                                     int64_t Vl, int64_t v0, int64_t V) {                \
        ptdp__gemm_##L(be, 0, 1, N, Vl, h, 1.0f, x, h, wte, h, 0.0f, logits, Vl);        \
        ptdp__xent_max_bf16(logits, rowmax, N, Vl, v0, V);                               \
    }
PTDP__BF16_HEAD(onednn)
PTDP__BF16_HEAD(openblas)
PTDP__BF16_HEAD(onednn_bf16)

/* bf16 over oneDNN with a native bf16 matmul (gemm_bf16.c): the inputs are on
 * the grid */
PTDP__PREC_GEMM(bf16, ptdp_round_bf16_n, onednn_bf16)

/* ... and its loss head (gemm_bf16.c): the logits in bf16 where it can
 * (then the cross-entropy reads 2-byte logits, and head_bwd makes dl from
 * them, dx rounded as the gemm above rounds it), else the fp32-output path
 * of the backends above and the composition */
static void bf16_head_logits_native(ptdp_backend *be, const float *x, const float *wte, int64_t h,
                                    float *logits, float *rowmax, int64_t N, int64_t Vl, int64_t v0,
                                    int64_t V) {
    if (ptdp__gemm_bf16_head_logits(be, x, wte, h, logits, N, Vl))
        ptdp__xent_max_b16((const uint16_t *)logits, rowmax, N, Vl, v0, V);
    else
        bf16_head_logits_onednn_bf16(be, x, wte, h, logits, rowmax, N, Vl, v0, V);
}
static void bf16_xent_sums_native(ptdp_backend *be, float *logits, const float *gmax,
                                  const int32_t *targets, int64_t ld, float *sumexp, float *tgt,
                                  int64_t s, int64_t b, int64_t Vl, int64_t v0, int64_t V) {
    if (ptdp__gemm_bf16_logits_b16(be, logits, s * b, Vl))
        ptdp__xent_sums_b16((const uint16_t *)logits, gmax, targets, ld, sumexp, tgt, s, b, Vl, v0,
                            V);
    else
        ptdp__xent_sums_bf16(logits, gmax, targets, ld, sumexp, tgt, s, b, Vl, v0, V);
}
static void bf16_head_bwd_native(ptdp_backend *be, float *logits, const ptdp_xent_grad *xg,
                                 const float *x, const float *wte, int64_t h, float *dwte,
                                 float *dx) {
    if (ptdp__gemm_bf16_logits_b16(be, logits, xg->s * xg->b, xg->Vl)) {
        ptdp__gemm_bf16_head_bwd(be, logits, xg, x, h, dwte, dx);
        ptdp_round_bf16_n(dx, xg->s * xg->b * h);
    } else {
        ptdp_head_bwd_composed(be, logits, xg, x, wte, h, dwte, dx);
    }
}

/* bf16 with AVX512_BF16: attention's tile products in bf16 (attn_bf16.c),
 * the probabilities and dS rounded to bf16 before their products; q, k, v
 * and dctx converted once per (sequence, head) where the instance's packs
 * can be had, else at every tile (the same bits either way) */
PTDP__PREC_ATTN(bf16, ptdp_round_bf16_n, tile_bf16)
static void bf16_attn_gqa_fwd_packed(ptdp_backend *be, const float *qkv, float *ctx, float *saved,
                                     float *scratch, int64_t s, int64_t b, int64_t al, int64_t gl,
                                     int64_t hd, ptdp_dropout drop) {
    if (!ptdp__attention_fwd_bf16(be, qkv, ctx, saved, scratch, s, b, al, gl, hd, drop)) {
        bf16_attn_gqa_fwd_tile_bf16(be, qkv, ctx, saved, scratch, s, b, al, gl, hd, drop);
        return;
    }
    ptdp_round_bf16_n(ctx, s * b * al * hd);
}
static void bf16_attn_gqa_bwd_packed(ptdp_backend *be, const float *dctx, const float *qkv,
                                     const float *ctx, const float *saved, float *dqkv,
                                     float *scratch, int64_t s, int64_t b, int64_t al, int64_t gl,
                                     int64_t hd, ptdp_dropout drop) {
    if (!ptdp__attention_bwd_bf16(be, dctx, qkv, ctx, saved, dqkv, scratch, s, b, al, gl, hd,
                                  drop)) {
        bf16_attn_gqa_bwd_tile_bf16(be, dctx, qkv, ctx, saved, dqkv, scratch, s, b, al, gl, hd,
                                    drop);
        return;
    }
    ptdp_round_bf16_n(dqkv, s * ptdp__attn_ld3(b, al, gl, hd));
}
static void bf16_attn_fwd_packed(ptdp_backend *be, const float *qkv, float *ctx, float *saved,
                                 float *scratch, int64_t s, int64_t b, int64_t al, int64_t hd,
                                 ptdp_dropout drop) {
    bf16_attn_gqa_fwd_packed(be, qkv, ctx, saved, scratch, s, b, al, al, hd, drop);
}
static void bf16_attn_bwd_packed(ptdp_backend *be, const float *dctx, const float *qkv,
                                 const float *ctx, const float *saved, float *dqkv, float *scratch,
                                 int64_t s, int64_t b, int64_t al, int64_t hd, ptdp_dropout drop) {
    bf16_attn_gqa_bwd_packed(be, dctx, qkv, ctx, saved, dqkv, scratch, s, b, al, al, hd, drop);
}

/* bf16 with AVX512_BF16: the MLP's fc, gl and dfc stored in bf16, in the
 * first half of their buffers (kernels.h's mlp ops): the GEMMs read and
 * write them as they are (ptdp__gemm_bf16_typed: no conversion, no rounding
 * pass), and bias + GeLU reads and writes 2 bytes a value. The values are
 * those of the composition over fp32 storage, the matmul's bf16 output
 * aside: oneDNN narrows fp32 subnormal sums (below 2^-126) to zero where
 * the rounding pass keeps them. */
static void bf16_mlp_fwd(ptdp_backend *be, const float *x, const float *w1, const float *b1,
                         const float *w2, float *fc, float *gl, float *y, int64_t N, int64_t h,
                         int64_t fl) {
    uint16_t *f = (uint16_t *)fc, *g = (uint16_t *)gl;
    ptdp__gemm_bf16_typed(be, 0, 1, N, fl, h, x, 0, h, w1, 0, h, 0.0f, f, 1, fl);
    ptdp__bias_gelu_fwd_b16(f, b1, g, N, fl);
    ptdp__gemm_bf16_typed(be, 0, 1, N, h, fl, g, 1, fl, w2, 0, fl, 0.0f, y, 0, h);
}
static void bf16_mlp_bwd_b(ptdp_backend *be, const float *dy, const float *w2, const float *fc,
                           const float *b1, const float *w1, float *dfc, float *db1, float *dx,
                           int64_t N, int64_t h, int64_t fl) {
    uint16_t *d = (uint16_t *)dfc;
    ptdp__gemm_bf16_typed(be, 0, 0, N, fl, h, dy, 0, h, w2, 0, fl, 0.0f, d, 1, fl);
    ptdp__bias_gelu_bwd_b16(d, (const uint16_t *)fc, b1, d, db1, N, fl);
    ptdp__gemm_bf16_typed(be, 0, 0, N, h, fl, d, 1, fl, w1, 0, h, 0.0f, dx, 0, h);
}
static void bf16_mlp_bwd_w(ptdp_backend *be, const float *dy, const float *gl, const float *dfc,
                           const float *x, float *dw2, float *dw1, int64_t N, int64_t h,
                           int64_t fl) {
    ptdp__gemm_bf16_typed(be, 1, 0, h, fl, N, dy, 0, h, gl, 1, fl, 1.0f, dw2, 0, fl);
    ptdp__gemm_bf16_typed(be, 1, 0, fl, h, N, dfc, 1, fl, x, 0, h, 1.0f, dw1, 0, h);
}

PTDP__PREC_COMMON(bf16, ptdp_round_bf16_n, PTDP_DTYPE_BF16)
PTDP__PREC_LIB(bf16, ptdp_round_bf16_n, onednn)
PTDP__PREC_LIB(bf16, ptdp_round_bf16_n, openblas)
PTDP__PREC_COMMON(fp16, ptdp_round_f16_n, PTDP_DTYPE_FP16)
PTDP__PREC_LIB(fp16, ptdp_round_f16_n, onednn)
PTDP__PREC_LIB(fp16, ptdp_round_f16_n, openblas)

/* The native bf16 backend keeps converted copies of registered weights
 * (gemm_bf16.c): every op of it that writes memory tells it where, before
 * the write, so a copy of weights written since it was made is converted
 * again (kernels.h's weights contract). */
static void native_upload(ptdp_backend *be, void *dst, const void *src, size_t bytes) {
    ptdp__gemm_bf16_weights_written(be, dst, (int64_t)(bytes / sizeof(float)) + 1);
    memcpy(dst, src, bytes);
}
static void native_zero(ptdp_backend *be, float *x, int64_t n) {
    ptdp__gemm_bf16_weights_written(be, x, n);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
}
static void native_copy(ptdp_backend *be, float *dst, const float *src, int64_t n) {
    ptdp__gemm_bf16_weights_written(be, dst, n);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) dst[i] = src[i];
}
static void native_quantize(ptdp_backend *be, float *x, int64_t n) {
    ptdp__gemm_bf16_weights_written(be, x, n);
    ptdp_round_bf16_n(x, n);
}
static void native_adamw(ptdp_backend *be, float *param, const float *grad, float gscale, float *m,
                         float *v, int64_t n, float lr, float beta1, float beta2, float eps,
                         float wd, int64_t step) {
    ptdp__gemm_bf16_weights_written(be, param, n);
    ptdp__adamw(param, grad, gscale, m, v, n, lr, beta1, beta2, eps, wd, step);
}
static void native_adamw_master(ptdp_backend *be, float *master, float *work, const float *grad,
                                float gscale, float *m, float *v, int64_t n, float lr, float beta1,
                                float beta2, float eps, float wd, int64_t step) {
    ptdp__gemm_bf16_weights_written(be, work, n);
    ptdp__adamw_master(master, work, PTDP_DTYPE_BF16, grad, gscale, m, v, n, lr, beta1, beta2, eps,
                       wd, step);
}

/* The native backend's memory (kernels.h's memory contract): the bf16
 * GEMM's scratch, weight-gradient buffers and weight copies (gemm_bf16.c)
 * and the bf16 attention's per-thread packs (attn_bf16.c), laid out as
 * [GEMM fixed][packs][copies]. */
static int native_workspace_size(ptdp_backend *be, const ptdp_backend_job *job,
                                 ptdp_backend_workspace *ws) {
    ptdp__cpu *cs = ptdp__cpu_of(be);
    ptdp__gemm_bf16_workspace(cs->g16, job, be->mlp_store == PTDP_DTYPE_BF16, &ws->fixed,
                              &ws->per_layer, &ws->per_head);
    if (cs->packs) ws->fixed += ptdp__attn_packs_bytes(job->s, job->hd, job->threads);
    return PTDP_OK;
}
static int native_workspace_set(ptdp_backend *be, const ptdp_backend_job *job, void *block,
                                size_t bytes) {
    ptdp__cpu *cs = ptdp__cpu_of(be);
    const int mlp16 = be->mlp_store == PTDP_DTYPE_BF16;
    if (!block) {
        ptdp__gemm_bf16_workspace_set(cs->g16, job, mlp16, NULL, NULL, 0);
        if (cs->packs) ptdp__attn_packs_set(cs->packs, NULL, 0, 0, 0);
        return PTDP_OK;
    }
    size_t fixed, per_layer, per_head;
    ptdp__gemm_bf16_workspace(cs->g16, job, mlp16, &fixed, &per_layer, &per_head);
    const size_t packs = cs->packs ? ptdp__attn_packs_bytes(job->s, job->hd, job->threads) : 0;
    const size_t copies = (size_t)job->layers * per_layer + (size_t)job->heads * per_head;
    PTDP_ASSERT_MSG(bytes == fixed + packs + copies, "a backend workspace not of its size");
    char *at = block;
    ptdp__gemm_bf16_workspace_set(cs->g16, job, mlp16, at, at + fixed + packs, copies);
    if (cs->packs) ptdp__attn_packs_set(cs->packs, at + fixed, job->s, job->hd, job->threads);
    return PTDP_OK;
}

#define PTDP__SET_COMMON(t, P)                            \
    (t)->quantize = P##_quantize;                         \
    (t)->layernorm_fwd = P##_layernorm_fwd;               \
    (t)->layernorm_bwd = P##_layernorm_bwd;               \
    (t)->bias_add = P##_bias_add;                         \
    (t)->bias_gelu_fwd = P##_bias_gelu_fwd;               \
    (t)->bias_gelu_bwd = P##_bias_gelu_bwd;               \
    (t)->bias_dropout_add_fwd = P##_bias_dropout_add_fwd; \
    (t)->bias_dropout_add_bwd = P##_bias_dropout_add_bwd; \
    (t)->dropout_fwd = P##_dropout;                       \
    (t)->dropout_bwd = P##_dropout;                       \
    (t)->rmsnorm_fwd = P##_rmsnorm_fwd;                   \
    (t)->rmsnorm_bwd = P##_rmsnorm_bwd;                   \
    (t)->swiglu_fwd = P##_swiglu_fwd;                     \
    (t)->swiglu_bwd = P##_swiglu_bwd;                     \
    (t)->rope_fwd = P##_rope_fwd;                         \
    (t)->rope_bwd = P##_rope_bwd;                         \
    (t)->embed_fwd = P##_embed_fwd;                       \
    (t)->pos_add_fwd = P##_pos_add_fwd;                   \
    (t)->adamw_master = P##_adamw_master;                 \
    (t)->xent_bwd = P##_xent_bwd
#define PTDP__SET_LIB(t, P, L)                     \
    (t)->gemm = P##_gemm_##L;                      \
    (t)->attention_fwd = P##_attn_fwd_##L;         \
    (t)->attention_bwd = P##_attn_bwd_##L;         \
    (t)->attention_gqa_fwd = P##_attn_gqa_fwd_##L; \
    (t)->attention_gqa_bwd = P##_attn_gqa_bwd_##L

/* bf16 over oneDNN: the native GEMM where oneDNN has a bf16 matmul on this
 * CPU, and with AVX512_BF16 the bf16 attention tiles and the MLP's bf16
 * storage (each checked here, at open) */
static void bf16_native(ptdp__cpu *cs) {
    ptdp_backend *t = &cs->be;
    char why[128];
    if (!(cs->g16 = ptdp__gemm_bf16_new(cs, why, sizeof why))) return;
    t->name = "cpu/onednn/bf16-native-gemm";
    t->caps |= PTDP_CAP_NATIVE_GEMM16 | PTDP_CAP_FUSED_HEAD | PTDP_CAP_WEIGHT_COPIES;
    t->gemm = bf16_gemm_onednn_bf16;
    t->head_logits = bf16_head_logits_native;
    t->xent_sums = bf16_xent_sums_native;
    t->head_bwd = bf16_head_bwd_native;
    t->weights_register = ptdp__gemm_bf16_weights_register;
    t->weights_written = ptdp__gemm_bf16_weights_written;
    t->upload = native_upload;
    t->zero = native_zero;
    t->copy = native_copy;
    t->quantize = native_quantize;
    t->adamw = native_adamw;
    t->adamw_master = native_adamw_master;
    t->workspace_size = native_workspace_size;
    t->workspace_set = native_workspace_set;
    if (!ptdp__gemm_tile_bf16_available() || !(cs->packs = ptdp__attn_packs_new())) return;
    t->name = "cpu/onednn/bf16-native";
    t->caps |= PTDP_CAP_ATTENTION16;
    t->attention_fwd = bf16_attn_fwd_packed;
    t->attention_bwd = bf16_attn_bwd_packed;
    t->attention_gqa_fwd = bf16_attn_gqa_fwd_packed;
    t->attention_gqa_bwd = bf16_attn_gqa_bwd_packed;
    t->mlp_store = PTDP_DTYPE_BF16;
    t->mlp_fwd = bf16_mlp_fwd;
    t->mlp_bwd_b = bf16_mlp_bwd_b;
    t->mlp_bwd_w = bf16_mlp_bwd_w;
}

void ptdp__cpu_half_free(ptdp__cpu *cs) {
    ptdp__attn_packs_free(cs->packs);
    ptdp__gemm_bf16_free(cs->g16);
    cs->packs = NULL, cs->g16 = NULL;
}

void ptdp__cpu_set_precision(ptdp__cpu *cs, ptdp_dtype dtype) {
    ptdp_backend *t = &cs->be;
    const int dn = t->lib == PTDP_GEMM_ONEDNN;
    t->dtype = dtype;
    if (dtype == PTDP_DTYPE_BF16) {
        t->name = dn ? "cpu/onednn/bf16" : "cpu/openblas/bf16";
        PTDP__SET_COMMON(t, bf16);
        if (dn) {
            PTDP__SET_LIB(t, bf16, onednn);
        } else {
            PTDP__SET_LIB(t, bf16, openblas);
        }
        t->head_logits = dn ? bf16_head_logits_onednn : bf16_head_logits_openblas;
        t->xent_max = bf16_xent_max;
        t->xent_sums = bf16_xent_sums;
        if (dn) bf16_native(cs);
    } else {
        PTDP_ASSERT(dtype == PTDP_DTYPE_FP16);
        t->name = dn ? "cpu/onednn/fp16" : "cpu/openblas/fp16";
        PTDP__SET_COMMON(t, fp16);
        if (dn) {
            PTDP__SET_LIB(t, fp16, onednn);
        } else {
            PTDP__SET_LIB(t, fp16, openblas);
        }
    }
}
