/* half.h - internal to src/kernels/cpu/half: the CPU backend's 16-bit
 * precisions. precision.c wraps the fp32 kernels (cpu.h) so what they write
 * is rounded to bf16 or fp16; the native bf16 pieces, used where the CPU
 * has them (checked at run time), are oneDNN's bf16 matmul with ptdp's
 * weight copies and packs (gemm_bf16.c, bf16_blocked.c), attention's tile
 * products in bf16 (attn_bf16.c, AVX512_BF16) and the MLP's bias + GeLU on
 * bf16 storage (act_b16.c), and the cross-entropy reading rounded or bf16
 * logits (xent_bf16.c, bf16_blocked.c). Tests of internals include it. */
#ifndef PTDP_KERNELS_CPU_HALF_H
#define PTDP_KERNELS_CPU_HALF_H

#include "kernels/cpu/cpu.h"

/* bf16 GEMM through oneDNN's native bf16 matmul (gemm_bf16.c): inputs on
 * the bf16 grid in fp32 storage; falls back to the fp32 GEMM for what it
 * cannot run. _new: cs's state for it where oneDNN has a native bf16 matmul
 * on this CPU (checked at run time), else NULL with the reason in *why
 * (static text, or why_buf[why_cap]); _free: frees it (NULL: nothing). */
ptdp__bf16_gemm *ptdp__gemm_bf16_new(ptdp__cpu *cs, char *why_buf, size_t why_cap);
void ptdp__gemm_bf16_free(ptdp__bf16_gemm *g);
/* the native bf16 backend's weights contract (kernels.h): register (n = 0:
 * forget) a range, and the version bump of a write into [w, w + n) */
void ptdp__gemm_bf16_weights_register(ptdp_backend *be, const float *w, int64_t n);
void ptdp__gemm_bf16_weights_written(ptdp_backend *be, const float *w, int64_t n);
/* its memory for a job (kernels.h's memory contract; mlp16: the MLP keeps fc
 * and dfc in bf16): *fixed bytes of scratch and weight-gradient buffers and
 * the bytes of one layer's and one loss head's weight copies; the job's
 * primitives are made here. _set: the fixed part and the copies' pool
 * [pool_bytes] (NULL: it gives back what it kept in them). */
void ptdp__gemm_bf16_workspace(ptdp__bf16_gemm *g, const ptdp_backend_job *job, int mlp16,
                               size_t *fixed, size_t *per_layer, size_t *per_head);
void ptdp__gemm_bf16_workspace_set(ptdp__bf16_gemm *g, const ptdp_backend_job *job, int mlp16,
                                   void *fixed, void *pool, size_t pool_bytes);
void ptdp__gemm_onednn_bf16(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                            float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                            float beta, float *C, int64_t ldc);
/* The same GEMM on operands stored in fp32 or, where a16, b16 or c16 says
 * so, in bf16 (the native bf16 backend's 16-bit activations: the values at
 * the same strides, 2 bytes each); alpha 1; beta 0, or 1 into an fp32 C (a
 * weight gradient, kept fp32). With beta 0 C's values come out on the bf16
 * grid: stored in bf16 (oneDNN's conversion, to nearest even) or rounded in
 * fp32 storage. Where the native matmul cannot run a shape it widens the
 * bf16 operands and runs the fp32 GEMM on the same values. */
void ptdp__gemm_bf16_typed(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                           const void *A, int a16, int64_t lda, const void *B, int b16, int64_t ldb,
                           float beta, void *C, int c16, int64_t ldc);
/* The blocked bf16 weight layout of oneDNN's bf16 matmul, as bf16_blocked.c
 * writes it: blocks of kb values of K by nb of N, placed by the outer strides
 * sk and sn (elements), pairs along K inside. */
typedef struct {
    int64_t kb, nb, sk, sn;
} ptdp__bf16_blocking;
/* 1 and *b where md is such a layout and the CPU has AVX512_BF16, else 0 */
int ptdp__bf16_blocking_of(const dnnl_memory_desc_t *md, ptdp__bf16_blocking *b);
/* op(B) [K, N] (tb: B holds W [N, K] with row stride ldb, op(B) = W^T) into
 * dst in layout b, rounded to bf16; entries of the padding are not written */
void ptdp__bf16_pack_blocked(const ptdp__bf16_blocking *b, uint16_t *dst, const float *B, int tb,
                             int64_t K, int64_t N, int64_t ldb);
/* both of W's copies in one pass: dt = W^T (K = C, N = R) in layout bt and
 * dw = W (K = R, N = C) in layout bw, the bytes ptdp__bf16_pack_blocked
 * writes for each, W [R, C] with row stride ldw; only where
 * ptdp__bf16_pack_both_fits(bt, bw) */
int ptdp__bf16_pack_both_fits(const ptdp__bf16_blocking *bt, const ptdp__bf16_blocking *bw);
void ptdp__bf16_pack_both(const ptdp__bf16_blocking *bt, uint16_t *dt,
                          const ptdp__bf16_blocking *bw, uint16_t *dw, const float *W, int64_t R,
                          int64_t C, int64_t ldw);
/* dst [M, K] row-major (plain bf16 rows) = A^T rounded to bf16, where A is
 * stored [K, M] with row stride lda (AVX512_BF16 only: where
 * ptdp__bf16_blocking_of says yes) */
void ptdp__bf16_pack_transposed(uint16_t *dst, const float *A, int64_t K, int64_t M, int64_t lda);
/* the same two packs from values stored in bf16 (copied, not rounded):
 * A^T into plain rows, and B [K, N] (row stride ldb) into layout b */
void ptdp__bf16_pack_transposed_b16(uint16_t *dst, const uint16_t *A, int64_t K, int64_t M,
                                    int64_t lda);
void ptdp__bf16_pack_blocked_b16(const ptdp__bf16_blocking *b, uint16_t *dst, const uint16_t *B,
                                 int64_t K, int64_t N, int64_t ldb);
/* The loss head's gradient dl [N = s*b, Vl] (ptdp_xent_grad: xent_bwd's
 * values, masked rows zero) from the bf16 logits [N, Vl] and their row
 * maxima gmax (the exponentials recomputed: ptdp__xent_exp_b16), rounded to
 * bf16, without an fp32 copy: At [Vl, N] = dl^T in plain rows (the weight
 * gradient reads it) and dl's plain bf16 rows [N, Vl] over the logits (the
 * input gradient reads them). AVX512_BF16 only, as above. */
void ptdp__bf16_xent_grad(uint16_t *At, uint16_t *logits, const ptdp_xent_grad *xg);
/* The native bf16 backend's head_logits: the logits x wte^T [N, Vl]
 * written in bf16 over the start of logits (oneDNN's matmul, bf16 output)
 * where it can have everything its head_bwd needs as well: 1; else 0,
 * nothing done (the caller runs the fp32-output GEMM). The last call's
 * answer is remembered for that buffer: ptdp__gemm_bf16_logits_b16 says
 * whether logits [N, Vl] holds bf16 logits (from it, until a GEMM of the
 * instance writes there or its weights are written; only its xent_sums and
 * head_bwd ask, right after its head_logits). */
int ptdp__gemm_bf16_head_logits(ptdp_backend *be, const float *x, const float *wte, int64_t h,
                                float *logits, int64_t N, int64_t Vl);
int ptdp__gemm_bf16_logits_b16(ptdp_backend *be, const float *logits, int64_t N, int64_t Vl);
/* the native bf16 backend's head_bwd (kernels.h) on bf16 logits (xg->gmax:
 * their row maxima), with the matmuls and copies of wte its forward found:
 * it cannot fail where ptdp__gemm_bf16_head_logits wrote them */
void ptdp__gemm_bf16_head_bwd(ptdp_backend *be, float *logits, const ptdp_xent_grad *xg,
                              const float *x, int64_t h, float *dwte, float *dx);
/* how many weight gradients C += A^T B be's bf16 GEMM ran with A^T and B
 * packed by bf16_blocked.c (the test checks the path runs) */
int64_t ptdp__gemm_bf16_wgrad_calls(ptdp_backend *be);
/* how many loss head backwards ptdp__gemm_bf16_head_bwd ran (likewise) */
int64_t ptdp__gemm_bf16_head_calls(ptdp_backend *be);
/* how many weight copies be converted (made or refreshed: the test checks
 * that a copy is reused until its weights are written) */
int64_t ptdp__gemm_bf16_conversions(ptdp_backend *be);
/* how many typed GEMMs ran as fp32 GEMMs on widened operands; test hook:
 * force 1 sends every later one that way, 0 ends that, -1 leaves it */
int64_t ptdp__gemm_bf16_typed_fallbacks(ptdp_backend *be, int force);
/* test and bench hook: the weight copy of op(B) [K, N] for a bf16 GEMM of M
 * rows, made by bf16_blocked.c (own) or by oneDNN's reorder (its padding
 * filled with 0xff first, so the reorder must write it) and converted reps
 * times (at least once; between(ctx) before each but the first, where
 * given): its size in *bytes, its bytes into out where cap holds them, each
 * conversion's time in seconds[0..reps). own 2: ptdp's packs of both
 * orientations in one pass (ptdp__bf16_pack_both), timed together; out gets
 * op(B)'s. -1 without a native bf16 matmul, or with own where the layout is
 * not one bf16_blocked.c writes. */
int ptdp__gemm_bf16_pack_probe(ptdp_backend *be, int tb, int64_t M, int64_t N, int64_t K,
                               const float *B, int64_t ldb, int own, void *out, size_t cap,
                               size_t *bytes, double *seconds, int reps, void (*between)(void *),
                               void *ctx);
/* bias + GeLU and its backward on values stored in bf16 (x, out, dout, dx:
 * the native bf16 backend's MLP; dx may alias dout), the values of the _r
 * forms with bf16 rounding; dbias (fp32) += the column sums of dx, in
 * ptdp__bias_bwd's order (ptdp__bias_bwd_b16) */
void ptdp__bias_gelu_fwd_b16(const uint16_t *x, const float *bias, uint16_t *out, int64_t N,
                             int64_t n);
void ptdp__bias_gelu_bwd_b16(const uint16_t *dout, const uint16_t *x, const float *bias,
                             uint16_t *dx, float *dbias, int64_t N, int64_t n);
void ptdp__bias_bwd_b16(const uint16_t *dy, float *dbias, int64_t N, int64_t n);
/* attention's tile products for the bf16 backend (attn_bf16.c; only where
 * ptdp__gemm_tile_bf16_available, i.e. AVX512_BF16): both operands rounded to
 * bf16, products summed in fp32, C = alpha op(A) op(B) + beta C. Its packs
 * live on the calling thread's stack (64 KiB); be is not used. */
void ptdp__gemm_tile_bf16(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                          float beta, float *C, int64_t ldc);
int ptdp__gemm_tile_bf16_available(void);
/* The bf16 backend's attention (attn_bf16.c, AVX512_BF16): ptdp__attention_fwd
 * and _bwd through ptdp__gemm_tile_bf16, bit for bit, but with each (sequence,
 * head)'s q, k, v (and dctx) converted to bf16 pairs once, in every layout
 * its tile products read, instead of at every tile, into per-thread packs
 * of the instance (with key/value groups, gl < al: the backward converts a
 * group's k and v once for all its query heads). Returns 0 (nothing done) where those cannot be
 * had. _new/_free: an instance's packs (none yet; NULL: out of memory). */
ptdp__attn_packs *ptdp__attn_packs_new(void);
void ptdp__attn_packs_free(ptdp__attn_packs *p);
/* bytes of packs for sequences of s, heads of hd, on `threads` threads; _set
 * puts them in block (NULL: gives it back) */
size_t ptdp__attn_packs_bytes(int64_t s, int64_t hd, int threads);
void ptdp__attn_packs_set(ptdp__attn_packs *p, void *block, int64_t s, int64_t hd, int threads);
int ptdp__attention_fwd_bf16(ptdp_backend *be, const float *qkv, float *ctx, float *lse,
                             float *scratch, int64_t s, int64_t b, int64_t al, int64_t gl,
                             int64_t hd, ptdp_dropout drop);
int ptdp__attention_bwd_bf16(ptdp_backend *be, const float *dctx, const float *qkv,
                             const float *ctx, const float *lse, float *dqkv, float *scratch,
                             int64_t s, int64_t b, int64_t al, int64_t gl, int64_t hd,
                             ptdp_dropout drop);
/* the bf16 backends' xent_max and xent_sums: each logit rounded to bf16 as it
 * is read (the loss head's logits may be left unrounded: head_logits) */
void ptdp__xent_max_bf16(const float *logits, float *rowmax, int64_t N, int64_t Vl, int64_t v0,
                         int64_t V);
void ptdp__xent_sums_bf16(float *logits, const float *gmax, const int32_t *targets, int64_t ld,
                          float *sumexp, float *tgt, int64_t s, int64_t b, int64_t Vl, int64_t v0,
                          int64_t V);
/* ... and over logits stored in bf16 [N, Vl] (2-byte values; the native
 * bf16 backend's loss head writes them so: ptdp__gemm_bf16_head_logits), with
 * AVX-512 (bf16_blocked.c; only where ptdp__gemm_tile_bf16_available): the
 * same max and target logit, the sum of the same exponentials in another
 * order, nothing written back (the backward recomputes the exponentials) */
void ptdp__xent_max_b16(const uint16_t *logits, float *rowmax, int64_t N, int64_t Vl, int64_t v0,
                        int64_t V);
void ptdp__xent_sums_b16(const uint16_t *logits, const float *gmax, const int32_t *targets,
                         int64_t ld, float *sumexp, float *tgt, int64_t s, int64_t b, int64_t Vl,
                         int64_t v0, int64_t V);

#endif
