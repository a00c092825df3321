/* cpu.h - internal: the CPU backend's instance (ptdp__cpu) and the kernels
 * that fill its ops. Tests call them through an instance opened with
 * ptdp_backend_open; nothing outside src/kernels includes this. */
#ifndef PTDP_KERNELS_CPU_H
#define PTDP_KERNELS_CPU_H

#include <dnnl.h>

#include "kernels/kernels.h"

typedef struct ptdp__mm_cache ptdp__mm_cache;     /* gemm.c: fp32 matmul primitives per shape */
typedef struct ptdp__bf16_gemm ptdp__bf16_gemm;   /* gemm_bf16.c: the native bf16 GEMM */
typedef struct ptdp__attn_packs ptdp__attn_packs; /* attn_bf16.c: per-thread packs */

/* The CPU backend's instance: the ops (be, whose impl points back here) and
 * everything the backend keeps between calls; nothing of it is shared with
 * another instance. */
typedef struct ptdp__cpu {
    ptdp_backend be;
    int dnnl;          /* 1: the oneDNN engine and stream below exist */
    dnnl_engine_t eng; /* oneDNN's CPU engine and stream, made at open (oneDNN library) */
    dnnl_stream_t strm;
    ptdp__mm_cache *mm;      /* NULL without oneDNN */
    ptdp__bf16_gemm *g16;    /* the native bf16 GEMM's state (bf16 over oneDNN with a native
                                bf16 matmul), else NULL */
    ptdp__attn_packs *packs; /* the bf16 attention's packs (AVX512_BF16), else NULL */
    int check_weights;       /* PTDP_CHECK_WEIGHT_COPIES=1: every reused copy is verified */
} ptdp__cpu;

static inline ptdp__cpu *ptdp__cpu_of(ptdp_backend *be) { return (ptdp__cpu *)be->impl; }

/* gemm.c: oneDNN's engine, stream and matmul cache of cs (0: none, the
 * instance runs without oneDNN's matmul), and their release */
int ptdp__gemm_init(ptdp__cpu *cs);
void ptdp__gemm_free(ptdp__cpu *cs);
/* The raw GEMMs of the two libraries (the fp32 backend's gemm op) */
void ptdp__gemm_onednn(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                       float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float beta, float *C, int64_t ldc);
void ptdp__gemm_openblas(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                         float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                         float beta, float *C, int64_t ldc);
/* how many of ptdp__gemm_onednn's calls ran on oneDNN's matmul primitive (the
 * two shape classes of gemm.c) rather than dnnl_sgemm */
int64_t ptdp__gemm_onednn_matmul_calls(ptdp_backend *be);
/* oneDNN's matmul primitive descriptor for C = A B (sum: C += A B) on cs's
 * engine, and the name of the implementation it picked (*impl, valid while
 * the descriptor lives); NULL where oneDNN has none (gemm.c, gemm_bf16.c) */
dnnl_primitive_desc_t ptdp__onednn_matmul_pd(ptdp__cpu *cs, const dnnl_memory_desc_t *a,
                                             const dnnl_memory_desc_t *b,
                                             const dnnl_memory_desc_t *c, int sum,
                                             const char **impl);
/* A matmul primitive and its three memory objects, made at its first run
 * and pointed at each run's data (nothing allocated after the first). */
typedef struct {
    dnnl_primitive_t prim;
    dnnl_memory_t mem[3]; /* src, weights, dst */
} ptdp__onednn_mm;
/* Runs m on cs's stream on A, B (or the ready weights memory bmem, when not
 * NULL) and C. */
void ptdp__onednn_mm_run(ptdp__cpu *cs, ptdp__onednn_mm *m, const void *A, const void *B,
                         dnnl_memory_t bmem, void *C);
/* frees m's primitive and memory objects */
void ptdp__onednn_mm_free(ptdp__onednn_mm *m);
typedef void (*ptdp__gemm_fn)(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                              float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                              float beta, float *C, int64_t ldc);
/* precision.c: turns cs's fp32 ops into those of dtype (bf16, fp16) */
void ptdp__cpu_set_precision(ptdp__cpu *cs, ptdp_dtype dtype);

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
/* The element-wise kernels below write activations (or their gradients)
 * row by row. The _r forms take a 16-bit backend's rounding (rnd: bf16 or
 * fp16, in place; NULL: none) and apply it to each row right after writing
 * it, while the row is in L1, where a pass after the kernel would read and
 * write the whole tensor again; a bias gradient is then summed over the
 * rounded rows, as Megatron sums the 16-bit gradient it gets. The plain
 * forms are the fp32 backend's (rnd NULL). */
typedef void (*ptdp__round_fn)(float *x, int64_t n);
void ptdp__layernorm_fwd_r(const float *x, const float *w, const float *b, float *out, float *mean,
                           float *rstd, int64_t N, int64_t h, float eps, ptdp__round_fn rnd);
void ptdp__layernorm_fwd(const float *x, const float *w, const float *b, float *out, float *mean,
                         float *rstd, int64_t N, int64_t h, float eps);
void ptdp__layernorm_bwd_r(const float *dout, const float *x, const float *w, const float *mean,
                           const float *rstd, float *dx, float *dw, float *db, int64_t N, int64_t h,
                           ptdp__round_fn rnd);
void ptdp__layernorm_bwd(const float *dout, const float *x, const float *w, const float *mean,
                         const float *rstd, float *dx, float *dw, float *db, int64_t N, int64_t h);
void ptdp__bias_add_r(float *y, const float *bias, int64_t N, int64_t n, ptdp__round_fn rnd);
void ptdp__bias_add(float *y, const float *bias, int64_t N, int64_t n);
void ptdp__bias_bwd(const float *dy, float *dbias, int64_t N, int64_t n);
void ptdp__bias_gelu_fwd_r(const float *x, const float *bias, float *out, int64_t N, int64_t n,
                           ptdp__round_fn rnd);
void ptdp__bias_gelu_fwd(const float *x, const float *bias, float *out, int64_t N, int64_t n);
void ptdp__bias_gelu_bwd_r(const float *dout, const float *x, const float *bias, float *dx,
                           float *dbias, int64_t N, int64_t n, ptdp__round_fn rnd);
void ptdp__bias_gelu_bwd(const float *dout, const float *x, const float *bias, float *dx,
                         float *dbias, int64_t N, int64_t n);
/* bias + GeLU and its backward on values stored in bf16 (x, out, dout, dx:
 * the native bf16 backend's MLP; dx may alias dout), the values of the _r
 * forms with bf16 rounding; dbias (fp32) += the column sums of dx, in
 * ptdp__bias_bwd's order (ptdp__bias_bwd_b16) */
void ptdp__bias_gelu_fwd_b16(const uint16_t *x, const float *bias, uint16_t *out, int64_t N,
                             int64_t n);
void ptdp__bias_gelu_bwd_b16(const uint16_t *dout, const uint16_t *x, const float *bias,
                             uint16_t *dx, float *dbias, int64_t N, int64_t n);
void ptdp__bias_bwd_b16(const uint16_t *dy, float *dbias, int64_t N, int64_t n);
void ptdp__bias_dropout_add_fwd_r(const float *x, const float *bias, const float *resid, float *out,
                                  int64_t N, int64_t h, ptdp_dropout drop, ptdp__round_fn rnd);
void ptdp__bias_dropout_add_fwd(const float *x, const float *bias, const float *resid, float *out,
                                int64_t N, int64_t h, ptdp_dropout drop);
void ptdp__bias_dropout_add_bwd_r(const float *dout, float *dx, float *dbias, int64_t N, int64_t h,
                                  ptdp_dropout drop, ptdp__round_fn rnd);
void ptdp__bias_dropout_add_bwd(const float *dout, float *dx, float *dbias, int64_t N, int64_t h,
                                ptdp_dropout drop);
void ptdp__dropout_inplace(float *x, int64_t n, ptdp_dropout drop);
/* dst[e] = keep(base + e) ? src[e] / (1 - p) : 0 for e < n (dst may alias
 * src); the masks of ptdp__dropout_keep, drawn 64 elements per Philox batch. */
void ptdp__dropout_apply(const float *src, float *dst, int64_t n, ptdp_dropout drop, uint64_t base);
/* The same with the AVX2 path forced (wide 0) or AVX-512 where the CPU has it (wide 1):
 * tests check both give every element ptdp__dropout_keep's mask. */
void ptdp__dropout_apply_path(const float *src, float *dst, int64_t n, ptdp_dropout drop,
                              uint64_t base, int wide);
/* attention's tile products for the bf16 backend (attn_bf16.c; only where
 * ptdp__gemm_tile_bf16_available, i.e. AVX512_BF16): both operands rounded to
 * bf16, products summed in fp32, C = alpha op(A) op(B) + beta C. Its packs
 * live on the calling thread's stack (64 KiB); be is not used. */
void ptdp__gemm_tile_bf16(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                          float beta, float *C, int64_t ldc);
int ptdp__gemm_tile_bf16_available(void);
/* attention.c's pieces that attn_bf16.c's packed attention shares: the
 * tile edge B, the per-thread scratch (three B x B tiles, two [B] row
 * statistics, D [s]), the dropout block of a (sequence, head) task, a
 * forward tile's row work between its two products and a query block's end,
 * a backward tile's row work between its first two products and the rest,
 * and D = rowsum(dctx * ctx). */
int64_t ptdp__attn_block(int64_t s);
int64_t ptdp__attn_per_thread(int64_t s);
int64_t ptdp__attn_drop_block(ptdp_dropout drop, int64_t task, int64_t al);
/* one (sequence, head) task of b al: its dropout block, its q, k, v rows in
 * qkv (dq, dk, dv in dqkv, where given), the offset of its ctx (dctx) rows,
 * and its thread's scratch as ptdp__attn_per_thread sizes it: three [B, B]
 * tiles (the forward's scores; the backward's P, dP then dS, dropout(P)),
 * the forward's running max m and sum l [B], the backward's D [s] */
typedef struct {
    int64_t blk, co;
    const float *q, *k, *v;
    float *dq, *dk, *dv;
    float *tile[3], *m, *l, *D;
} ptdp__attn_task;
ptdp__attn_task ptdp__attn_task_of(float *scratch, ptdp_dropout drop, int64_t task, int64_t al,
                                   int64_t hd, int64_t s, const float *qkv, float *dqkv);
/* keys of tile column [c0, c0 + cb) that query row gi sees (causal) */
static inline int64_t ptdp__attn_row_keys(int64_t gi, int64_t c0, int64_t cb) {
    const int64_t n = gi - c0 + 1;
    return n < 0 ? 0 : n > cb ? cb : n;
}
void ptdp__attn_fwd_rows(float *St, int64_t r0, int64_t rb, int64_t c0, int64_t cb, float scale,
                         float *m, float *l, float *C, int64_t ldc, int64_t hd, ptdp_dropout drop,
                         int64_t blk, int64_t s);
void ptdp__attn_fwd_finish(float *C, int64_t ldc, int64_t hd, int64_t r0, int64_t rb,
                           const float *m, const float *l, float *L);
void ptdp__attn_bwd_rows(float *Pt, float *dPt, float *Pdt, int64_t r0, int64_t rb, int64_t c0,
                         int64_t cb, float scale, const float *L, const float *D, ptdp_dropout drop,
                         int64_t blk, int64_t s);
void ptdp__attn_row_dots(float *D, const float *dC, const float *C, int64_t s, int64_t hd,
                         int64_t ld);
/* The bf16 backend's attention (attn_bf16.c, AVX512_BF16): ptdp__attention_fwd
 * and _bwd through ptdp__gemm_tile_bf16, bit for bit, but with each (sequence,
 * head)'s q, k, v (and dctx) converted to bf16 pairs once, in every layout
 * its tile products read, instead of at every tile, into per-thread packs
 * of the instance. Returns 0 (nothing done) where those cannot be had.
 * _new/_free: an instance's packs (none yet; NULL: out of memory). */
ptdp__attn_packs *ptdp__attn_packs_new(void);
void ptdp__attn_packs_free(ptdp__attn_packs *p);
/* bytes of packs for sequences of s, heads of hd, on `threads` threads; _set
 * puts them in block (NULL: gives it back) */
size_t ptdp__attn_packs_bytes(int64_t s, int64_t hd, int threads);
void ptdp__attn_packs_set(ptdp__attn_packs *p, void *block, int64_t s, int64_t hd, int threads);
int ptdp__attention_fwd_bf16(ptdp_backend *be, const float *qkv, float *ctx, float *lse,
                             float *scratch, int64_t s, int64_t b, int64_t al, int64_t hd,
                             ptdp_dropout drop);
int ptdp__attention_bwd_bf16(ptdp_backend *be, const float *dctx, const float *qkv,
                             const float *ctx, const float *lse, float *dqkv, float *scratch,
                             int64_t s, int64_t b, int64_t al, int64_t hd, ptdp_dropout drop);
/* attention's per-tile GEMMs run through `gemm` (on be), the backend's
 * library; lse [b, al, s] is the saved logsumexp of every row (scaled
 * scores) */
void ptdp__attention_fwd(ptdp_backend *be, ptdp__gemm_fn gemm, const float *qkv, float *ctx,
                         float *lse, float *scratch, int64_t s, int64_t b, int64_t al, int64_t hd,
                         ptdp_dropout drop);
void ptdp__attention_bwd(ptdp_backend *be, ptdp__gemm_fn gemm, const float *dctx, const float *qkv,
                         const float *ctx, const float *lse, float *dqkv, float *scratch, int64_t s,
                         int64_t b, int64_t al, int64_t hd, ptdp_dropout drop);
void ptdp__embed_fwd(const int32_t *tokens, int64_t ld, const float *wte, int64_t v0, int64_t Vl,
                     float *out, int64_t s, int64_t b, int64_t h);
void ptdp__embed_bwd(const int32_t *tokens, int64_t ld, const float *dout, float *dwte, int64_t v0,
                     int64_t Vl, int64_t s, int64_t b, int64_t h);
void ptdp__pos_add_fwd(float *out, const float *wpe, int64_t s, int64_t b, int64_t h);
void ptdp__pos_add_bwd(const float *dout, float *dwpe, int64_t s, int64_t b, int64_t h);
void ptdp__xent_max(const float *logits, float *rowmax, int64_t N, int64_t Vl, int64_t v0,
                    int64_t V);
void ptdp__xent_sums(float *logits, const float *gmax, const int32_t *targets, int64_t ld,
                     float *sumexp, float *tgt, int64_t s, int64_t b, int64_t Vl, int64_t v0,
                     int64_t V);
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
void ptdp__xent_loss(const float *sumexp, const float *gmax, const float *tgt, float *loss,
                     int64_t N);
/* how many of the Vl local columns, global ids v0.., are real vocabulary
 * (ids < V): the rest are padding */
static inline int64_t ptdp__xent_valid_cols(int64_t Vl, int64_t v0, int64_t V) {
    const int64_t n = V - v0;
    return n < 0 ? 0 : n > Vl ? Vl : n;
}
void ptdp__xent_bwd(float *logits, const float *sumexp, const int32_t *targets, int64_t ld,
                    int64_t s, int64_t b, int64_t Vl, int64_t v0, int64_t V, float scale);
void ptdp__adamw(float *param, const float *grad, float gscale, float *m, float *v, int64_t n,
                 float lr, float beta1, float beta2, float eps, float wd, int64_t step);
/* AdamW on the fp32 master weights, the working copy work written rounded
 * to dt (bf16 or fp16) in the same pass (the 16-bit backends' adamw_master);
 * the same values as ptdp__adamw, copy and rounding */
void ptdp__adamw_master(float *master, float *work, ptdp_dtype dt, const float *grad, float gscale,
                        float *m, float *v, int64_t n, float lr, float beta1, float beta2,
                        float eps, float wd, int64_t step);
double ptdp__sumsq(const float *x, int64_t n);
double ptdp__sum(const float *x, int64_t n);
int64_t ptdp__mask_rows(float *x, int64_t width, const int32_t *tokens, int64_t ld, int64_t s,
                        int64_t b, int32_t id);

#endif
