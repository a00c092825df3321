/* cpu.h - internal: the CPU backend's instance (ptdp__cpu) and the fp32
 * kernels that fill its ops (src/kernels/cpu); the 16-bit precisions' own
 * pieces are in half/half.h. Tests call them through an instance opened
 * with ptdp_backend_open; nothing outside src/kernels includes this. */
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
/* The 16-bit precisions (half/, declared in half/half.h): _set_precision
 * turns cs's fp32 ops into those of dtype (bf16, fp16), with the native bf16
 * pieces where the CPU has them; _half_free frees what that made (cs->g16,
 * cs->packs). */
void ptdp__cpu_set_precision(ptdp__cpu *cs, ptdp_dtype dtype);
void ptdp__cpu_half_free(ptdp__cpu *cs);

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
/* RMSNorm (norm.c): kernels.h's rmsnorm_fwd/_bwd */
void ptdp__rmsnorm_fwd_r(const float *x, const float *w, float *out, float *rstd, int64_t N,
                         int64_t h, float eps, ptdp__round_fn rnd);
void ptdp__rmsnorm_fwd(const float *x, const float *w, float *out, float *rstd, int64_t N,
                       int64_t h, float eps);
void ptdp__rmsnorm_bwd_r(const float *dout, const float *x, const float *w, const float *rstd,
                         float *dx, float *dw, int64_t N, int64_t h, ptdp__round_fn rnd);
void ptdp__rmsnorm_bwd(const float *dout, const float *x, const float *w, const float *rstd,
                       float *dx, float *dw, int64_t N, int64_t h);
void ptdp__bias_add_r(float *y, const float *bias, int64_t N, int64_t n, ptdp__round_fn rnd);
void ptdp__bias_add(float *y, const float *bias, int64_t N, int64_t n);
void ptdp__bias_bwd(const float *dy, float *dbias, int64_t N, int64_t n);
/* one row of bias + GeLU, out[j] = gelu(x[j] + bias[j]), and of its
 * backward, d[j] = g[j] gelu'(x[j] + bias[j]), j < n: the rows every GeLU
 * kernel runs (cloned for AVX-512, chosen at run time) */
void ptdp__gelu_fwd_row(const float *x, const float *bias, float *out, int64_t n);
void ptdp__gelu_bwd_row(const float *g, const float *x, const float *bias, float *d, int64_t n);
void ptdp__bias_gelu_fwd_r(const float *x, const float *bias, float *out, int64_t N, int64_t n,
                           ptdp__round_fn rnd);
void ptdp__bias_gelu_fwd(const float *x, const float *bias, float *out, int64_t N, int64_t n);
void ptdp__bias_gelu_bwd_r(const float *dout, const float *x, const float *bias, float *dx,
                           float *dbias, int64_t N, int64_t n, ptdp__round_fn rnd);
void ptdp__bias_gelu_bwd(const float *dout, const float *x, const float *bias, float *dx,
                         float *dbias, int64_t N, int64_t n);
/* SwiGLU (act.c): kernels.h's swiglu_fwd/_bwd; the rows, x [2 fl] (gate
 * then up), out [fl], g [fl], d [2 fl] (may alias x); bias [2 fl] or NULL */
void ptdp__swiglu_fwd_row(const float *x, const float *bias, float *o, int64_t fl);
void ptdp__swiglu_bwd_row(const float *g, const float *x, const float *bias, float *d, int64_t fl);
void ptdp__swiglu_fwd_r(const float *x, const float *bias, float *out, int64_t N, int64_t fl,
                        ptdp__round_fn rnd);
void ptdp__swiglu_fwd(const float *x, const float *bias, float *out, int64_t N, int64_t fl);
void ptdp__swiglu_bwd_r(const float *dout, const float *x, const float *bias, float *dx,
                        float *dbias, int64_t N, int64_t fl, ptdp__round_fn rnd);
void ptdp__swiglu_bwd(const float *dout, const float *x, const float *bias, float *dx, float *dbias,
                      int64_t N, int64_t fl);
/* rotary embeddings (rope.c): kernels.h's rope_fwd (inverse 0) and rope_bwd
 * (inverse 1), each group's query and key heads rounded by rnd */
void ptdp__rope_r(float *qkv, const float *table, int64_t s, int64_t b, int64_t al, int64_t gl,
                  int64_t hd, int64_t rd, int64_t pos0, int inverse, ptdp__round_fn rnd);
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
/* attention.c's pieces that attn_bf16.c's packed attention shares: the
 * tile edge B, the per-thread scratch (three B x B tiles, two [B] row
 * statistics, D [s]), the dropout block of a (sequence, head) task, a
 * forward tile's row work between its two products and a query block's end,
 * a backward tile's row work between its first two products and the rest,
 * and D = rowsum(dctx * ctx). */
int64_t ptdp__attn_block(int64_t s);
int64_t ptdp__attn_per_thread(int64_t s);
int64_t ptdp__attn_drop_block(ptdp_dropout drop, int64_t task, int64_t al);
/* one (sequence, query head) task of b al, task = bi * al + j, over gl
 * key/value groups (kernels.h's attention_gqa layout; gl = al: one group per
 * head, attention_fwd's): its dropout block, its q, k, v rows in qkv (dq,
 * dk, dv in dqkv, where given; k and v those of its group), the offset of
 * its ctx (dctx) rows,
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
                                   int64_t gl, int64_t hd, int64_t s, const float *qkv,
                                   float *dqkv);
/* the row stride of qkv [s, b, gl, al/gl + 2, hd]: b (al + 2 gl) hd */
static inline int64_t ptdp__attn_ld3(int64_t b, int64_t al, int64_t gl, int64_t hd) {
    return b * (al + 2 * gl) * hd;
}
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
/* attention's per-tile GEMMs run through `gemm` (on be), the backend's
 * library; lse [b, al, s] is the saved logsumexp of every row (scaled
 * scores); al query heads over gl key/value groups (kernels.h's
 * attention_gqa_fwd; gl = al is attention_fwd). The forward runs a task per
 * (sequence, query head), the backward one per (sequence, group), its query
 * heads in turn, so a group's dk and dv add up in one thread in a fixed
 * order. */
void ptdp__attention_fwd(ptdp_backend *be, ptdp__gemm_fn gemm, const float *qkv, float *ctx,
                         float *lse, float *scratch, int64_t s, int64_t b, int64_t al, int64_t gl,
                         int64_t hd, ptdp_dropout drop);
void ptdp__attention_bwd(ptdp_backend *be, ptdp__gemm_fn gemm, const float *dctx, const float *qkv,
                         const float *ctx, const float *lse, float *dqkv, float *scratch, int64_t s,
                         int64_t b, int64_t al, int64_t gl, int64_t hd, ptdp_dropout drop);
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
