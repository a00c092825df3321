/* kernels.h - compute ops on raw buffers, forward and backward, behind a
 * table of function pointers (the compute backend, in the manner of
 * ggml-backend). The model, pipeline and optimizer never touch tensor memory:
 * they call these ops through `const ptdp_ops *`. The CPU backend fills the
 * table with the functions below (GEMM by oneDNN or OpenBLAS, the rest are
 * ptdp's own OpenMP loops); a CUDA backend will add a second table.
 *
 * Shape legend: N = s*b token rows (activations are [s, b, h] row-major, so
 * token (si, bi) is row si*b + bi), h hidden, hl local hidden (h/t), a heads,
 * al local heads, hd head size, V/Vl (local) padded vocabulary.
 * Weight-gradient kernels ACCUMULATE (+=) so micro-batches add up; input
 * gradients overwrite unless stated. All pointers are backend memory. */
#ifndef PTDP_KERNELS_H
#define PTDP_KERNELS_H

#include <stdint.h>

#include "base/base.h"

/* GEMM library behind ptdp_gemm: chosen at start-up, default oneDNN
 * (measured fastest on the model's shapes; see docs/performance.md). */
#define PTDP_GEMM_LIBS(X)         \
    X(PTDP_GEMM_ONEDNN, "onednn") \
    X(PTDP_GEMM_OPENBLAS, "openblas")
typedef enum {
#define PTDP__GEMM_ENUM(e, s) e,
    PTDP_GEMM_LIBS(PTDP__GEMM_ENUM)
#undef PTDP__GEMM_ENUM
} ptdp_gemm_lib;
int ptdp_gemm_lib_parse(const char *name, ptdp_gemm_lib *out);
const char *ptdp_gemm_lib_name(ptdp_gemm_lib lib);

/* Dropout site: a counter-based stream plus keep probability. p == 0 means
 * no dropout (no mask drawn, no scaling). Element e of the site uses counter
 * offset + e, so a recomputed forward reproduces the mask exactly. */
typedef struct {
    float p;
    ptdp_rng_key key;
    uint64_t offset;
    /* Global numbering, so that every layout (t, b, d, p) draws the masks the
     * single process draws. b == 0: elements are numbered locally (e, the
     * flat index). b > 0: the site is an activation [s, b, w] whose sequence
     * bi is global sample sample0 + bi of the iteration, and element
     * (si, bi, j) is number ((si << 24) + sample0 + bi) * w + j, a function of
     * the sample and not of the micro-batch size (w: the op's h, or `width`
     * for dropout_fwd/bwd; fewer than 2^24 samples per iteration).
     * Attention probabilities: the [s, s] block of (sequence bi, local head j)
     * is block (sample0 + bi) * heads + head0 + j (heads: a, head0: this
     * tensor rank's first global head), or bi * al + j when b == 0; element
     * (query i, key k) of block blk is number blk * s * s + i * s + k. */
    int64_t b, sample0, width, heads, head0;
} ptdp_dropout;

/* The cross-entropy's backward as the loss head's one-op backward takes it
 * (head_bwd below): xent_bwd's arguments, and the loss mask of
 * --eod-mask-loss (mask_tokens NULL: none; else rows whose input token,
 * mask_tokens [b, ld] like embed's, is mask_id are zero, as mask_rows makes
 * them). */
typedef struct {
    const float *sumexp;
    const float *gmax; /* the rows' maxima (a table whose logits hold them, not e, reads it) */
    const int32_t *targets;
    int64_t ld, s, b, Vl, v0, V;
    float scale;
    const int32_t *mask_tokens;
    int32_t mask_id;
} ptdp_xent_grad;

/* What a backend must provide: every op is REQUIRED unless marked
 * OPTIONAL below (NULL allowed; ptdp_ops_check says which configuration
 * needs it). A new backend (CUDA) fills the required ops, is tested op by op
 * against the CPU table (tests/test_kernels.c shows how) and gets
 * ptdp_ops_check'ed before use.
 *
 * Precision is a property of the table (`dtype`), as Megatron's --bf16 and
 * --fp16 define it: activations, their gradients and the working copy of the
 * weights are 16-bit; everything is computed with fp32 arithmetic and
 * accumulation; LayerNorm statistics, softmax and the cross-entropy are
 * fp32; weight gradients accumulate in fp32 (Megatron's main_grad). The
 * tables of this version hold 16-bit values in fp32 storage: every op writes
 * its activation outputs rounded to the dtype's grid (gemm: C when beta == 0;
 * beta != 0 accumulates a weight gradient, kept fp32), so the values, and so
 * the results, are those of 16-bit tensors, while memory still takes 4 bytes
 * per element (messages between ranks are packed to 2: comm.h's _act
 * collectives, the pipeline executor). */
typedef struct ptdp_ops {
    const char *name;
    ptdp_dtype dtype; /* the grid of activations and working weights */

    /* memory */
    void *(*alloc)(size_t bytes); /* NULL on failure */
    void (*free)(void *p);
    void (*upload)(void *dst, const void *host, size_t bytes);
    void (*download)(void *host, const void *src, size_t bytes);
    void (*zero)(float *x, int64_t n);
    void (*copy)(float *dst, const float *src, int64_t n);
    /* x[i] to the table's grid, in place (fp32: nothing): the model calls it
     * after sums made outside the ops (tensor-parallel all-reduces), the
     * trainer when it writes the working weights from fp32 master weights. */
    void (*quantize)(float *x, int64_t n);

    /* C[M,N] = alpha * op(A) @ op(B) + beta * C, row-major; op(X) = X or X^T.
     * A is [M,K] (or [K,M] if ta), B is [K,N] (or [N,K] if tb). */
    void (*gemm)(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                 int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

    /* LayerNorm over rows of x [N, h]: out = (x - mean) * rstd * w + b; saves
     * mean, rstd [N]. bwd: dx += ..., dw += ..., db += ... */
    void (*layernorm_fwd)(const float *x, const float *w, const float *b, float *out, float *mean,
                          float *rstd, int64_t N, int64_t h, float eps);
    void (*layernorm_bwd)(const float *dout, const float *x, const float *w, const float *mean,
                          const float *rstd, float *dx, float *dw, float *db, int64_t N, int64_t h);

    /* y[N,n] += bias[n] broadcast over rows; bwd: dbias[n] += sum_rows dy */
    void (*bias_add)(float *y, const float *bias, int64_t N, int64_t n);
    void (*bias_bwd)(const float *dy, float *dbias, int64_t N, int64_t n);

    /* Fused bias + tanh-GeLU: out = gelu(x + bias), x [N, n] is the GEMM
     * output (kept for backward). bwd: dx = dout * gelu'(x + bias) (dx may
     * alias dout), dbias += sum_rows dx. */
    void (*bias_gelu_fwd)(const float *x, const float *bias, float *out, int64_t N, int64_t n);
    void (*bias_gelu_bwd)(const float *dout, const float *x, const float *bias, float *dx,
                          float *dbias, int64_t N, int64_t n);

    /* Fused bias + dropout + residual add: out = resid + dropout(x + bias),
     * x, resid, out [N, h] (out may alias resid). bwd: dx = dropout'(dout)
     * (dx may alias dout), dbias += sum_rows dx; the residual's gradient is
     * dout itself and is left to the caller. */
    void (*bias_dropout_add_fwd)(const float *x, const float *bias, const float *resid, float *out,
                                 int64_t N, int64_t h, ptdp_dropout drop);
    void (*bias_dropout_add_bwd)(const float *dout, float *dx, float *dbias, int64_t N, int64_t h,
                                 ptdp_dropout drop);
    /* OPTIONAL (needed only when --hidden-dropout > 0): plain dropout in place
     * on x [n] (the embedding's output) and its backward. */
    void (*dropout_fwd)(float *x, int64_t n, ptdp_dropout drop);
    void (*dropout_bwd)(float *dx, int64_t n, ptdp_dropout drop);

    /* Causal self-attention core for al local heads of size hd over a
     * micro-batch of b sequences of length s.
     * qkv [s, b, al, 3, hd] (Megatron's per-head q|k|v order), ctx [s, b, al*hd],
     * saved: what the forward keeps for the backward, attention_saved_floats(s,
     * b, al) floats whose content is the backend's own (CPU: the logsumexp of
     * every row of scale * q k^T + causal mask, [b, al, s]; CUDA: the
     * probabilities before dropout, [b, al, s, s]); scratch:
     * ptdp_attention_scratch_floats() floats.
     * bwd: dqkv (overwritten) from dctx, using qkv, the forward's ctx and saved. */
    void (*attention_fwd)(const float *qkv, float *ctx, float *saved, float *scratch, int64_t s,
                          int64_t b, int64_t al, int64_t hd, ptdp_dropout drop);
    void (*attention_bwd)(const float *dctx, const float *qkv, const float *ctx, const float *saved,
                          float *dqkv, float *scratch, int64_t s, int64_t b, int64_t al, int64_t hd,
                          ptdp_dropout drop);
    /* Floats attention_fwd saves for (s, b, al): the model carves and the
     * memory plan counts this many per layer and stashed micro-batch. */
    int64_t (*attention_saved_floats)(int64_t s, int64_t b, int64_t al);

    /* Vocabulary-parallel token embedding: rows [v0, v0+Vl) of the padded
     * vocabulary live here. out[si,bi,:] = wte[tok - v0] if owned, else 0.
     * tokens: [b, ld] with ld >= s (token of sequence bi at position si is
     * tokens[bi*ld + si]). bwd: dwte[tok - v0] += dout for owned tokens. */
    void (*embed_fwd)(const int32_t *tokens, int64_t ld, const float *wte, int64_t v0, int64_t Vl,
                      float *out, int64_t s, int64_t b, int64_t h);
    void (*embed_bwd)(const int32_t *tokens, int64_t ld, const float *dout, float *dwte, int64_t v0,
                      int64_t Vl, int64_t s, int64_t b, int64_t h);
    /* Position embedding: out[si,bi,:] += wpe[si]; bwd: dwpe[si] += sum_b dout */
    void (*pos_add_fwd)(float *out, const float *wpe, int64_t s, int64_t b, int64_t h);
    void (*pos_add_bwd)(const float *dout, float *dwpe, int64_t s, int64_t b, int64_t h);

    /* Vocabulary-parallel cross-entropy over logits [N, Vl] holding columns
     * [v0, v0+Vl) of the padded vocabulary, of which only global ids < V
     * (the real vocabulary) take part. Pieces between all-reduces, in this
     * order (each consumes what the previous left):
     *   xent_max:     rowmax[N] of the local valid logits (-inf if none)
     *   xent_sums:    tgt[N] = l[target] if owned else 0 (read first); then
     *                 IN PLACE logits <- e = exp(l - gmax), 0 at padding
     *                 columns (global id >= V), and sumexp[N] = sum of e.
     *                 The logits are gone after this: e is what xent_bwd
     *                 needs, so exp is computed once per logit.
     *   xent_loss:    loss[N] = log(sumexp) + gmax - tgt
     *   xent_bwd:     logits (holding e from xent_sums, sumexp all-reduced)
     *                 <- (e / sumexp - onehot(target)) * scale (in place),
     *                 0 at padding
     * targets: [b, ld] like embed's tokens (target of row si*b+bi is
     * targets[bi*ld + si]). */
    void (*xent_max)(const float *logits, float *rowmax, int64_t N, int64_t Vl, int64_t v0,
                     int64_t V);
    void (*xent_sums)(float *logits, const float *gmax, const int32_t *targets, int64_t ld,
                      float *sumexp, float *tgt, int64_t s, int64_t b, int64_t Vl, int64_t v0,
                      int64_t V);
    void (*xent_loss)(const float *sumexp, const float *gmax, const float *tgt, float *loss,
                      int64_t N);
    void (*xent_bwd)(float *logits, const float *sumexp, const int32_t *targets, int64_t ld,
                     int64_t s, int64_t b, int64_t Vl, int64_t v0, int64_t V, float scale);

    /* OPTIONAL (needed only with --eod-mask-loss): zeroes the rows of x
     * [N = s*b, width] whose input token is `id` (tokens [b, ld] like
     * embed's) and returns how many rows it kept (on the host). */
    int64_t (*mask_rows)(float *x, int64_t width, const int32_t *tokens, int64_t ld, int64_t s,
                         int64_t b, int32_t id);

    /* AdamW (decoupled weight decay, PyTorch's order of operations) on n
     * elements, the gradient taken as gscale * grad (the loss scale's
     * inverse times the clipping factor: exactly the values a scale pass
     * over grad would leave, without that pass; grad itself is not
     * written); step is 1-based. */
    void (*adamw)(float *param, const float *grad, float gscale, float *m, float *v, int64_t n,
                  float lr, float beta1, float beta2, float eps, float wd, int64_t step);
    /* OPTIONAL (NULL: adamw on the master, then copy and quantize): the
     * 16-bit tables' step, AdamW on the fp32 master weights (as adamw) that
     * also writes work = the updated master on the table's grid, in the
     * same pass over memory */
    void (*adamw_master)(float *master, float *work, const float *grad, float gscale, float *m,
                         float *v, int64_t n, float lr, float beta1, float beta2, float eps,
                         float wd, int64_t step);
    /* returns sum of squares (accumulated in double) */
    double (*sumsq)(const float *x, int64_t n);
    /* returns sum of x (double accumulation): losses */
    double (*sum)(const float *x, int64_t n);

    /* OPTIONAL (NULL: nothing to do): w[0..n) holds a chunk's weights, whose
     * values may have changed since the last call. A table that keeps the
     * weights converted for its GEMMs (the native bf16 table keeps them in
     * bf16, in oneDNN's blocked layout) converts each one again at its next
     * use, then reuses the copy until the next call. The trainer calls it
     * before every step and every evaluation, and with n = 0 (forget w) when
     * it frees the chunk; GEMMs on weights it was never told of convert them
     * at every call. */
    void (*weights_changed)(const float *w, int64_t n);

    /* OPTIONAL (NULL: ptdp_head_bwd composes it from xent_bwd, mask_rows and
     * two gemms): the loss head's backward after xent_loss, for a table that
     * can make its GEMMs' operands straight from e without writing the
     * logits' gradient dl [N = s*b, Vl] first:
     *   dl = xent_bwd's result on logits (holding e), masked rows zero
     *   dwte [Vl, h] += dl^T x    (x [N, h], the final LayerNorm's output)
     *   dx [N, h] = dl wte        (wte [Vl, h], the tied embedding's rows)
     * with dx rounded like any gemm output. logits holds garbage afterwards.
     * xg->gmax is there for a table whose head_logits stored the logits
     * themselves, not e (the native bf16 table: in 16 bits). */
    void (*head_bwd)(float *logits, const ptdp_xent_grad *xg, const float *x, const float *wte,
                     int64_t h, float *dwte, float *dx);
    /* OPTIONAL (NULL: ptdp_head_logits runs gemm, then xent_max): the loss
     * head's logits l = x wte^T [N, Vl] (x [N, h], wte [Vl, h]) into logits,
     * and rowmax as xent_max gives it. A 16-bit table whose xent_max and
     * xent_sums round what they read may leave l there unrounded: the same
     * values as rounding first, without a pass over the logits for it; one
     * whose xent_sums and head_bwd read them so may store them in 16 bits
     * over the start of the buffer. */
    void (*head_logits)(const float *x, const float *wte, int64_t h, float *logits, float *rowmax,
                        int64_t N, int64_t Vl, int64_t v0, int64_t V);

    /* OPTIONAL, all three or none (NULL: ptdp_mlp_fwd and the others below
     * compose them from gemm, bias_gelu_fwd and bias_gelu_bwd): a layer's
     * MLP on N rows, for a table that keeps the MLP's own activations in a
     * storage of its own (the native bf16 table: bf16 values in the first
     * half of each buffer). fc, gl and dfc [N, fl] are written and read by
     * these three only, so what their bytes hold is the table's business;
     * x, y, dy, dx [N, h] and the weights are ordinary fp32 storage:
     *   mlp_fwd:   fc = x W1^T, gl = gelu(fc + b1), y = gl W2^T
     *   mlp_bwd_b: dfc = (dy W2) * gelu'(fc + b1), db1 += sum_rows dfc,
     *              dx = dfc W1 (the input gradient)
     *   mlp_bwd_w: dW2 += dy^T gl, dW1 += dfc^T x (the weight gradients)
     * with W1 [fl, h], b1 [fl], W2 [h, fl], as the composition's gemms and
     * bias_gelu ops compute them, outputs on the table's grid alike. */
    /* what fc, gl and dfc hold: PTDP_DTYPE_FP32 (0, tables without the
     * mlp ops), or PTDP_DTYPE_BF16 (n values in (n + 1) / 2 floats: the
     * model carves them so, ptdp_mlp_floats) */
    ptdp_dtype mlp_store;
    void (*mlp_fwd)(const float *x, const float *w1, const float *b1, const float *w2, float *fc,
                    float *gl, float *y, int64_t N, int64_t h, int64_t fl);
    void (*mlp_bwd_b)(const float *dy, const float *w2, const float *fc, const float *b1,
                      const float *w1, float *dfc, float *db1, float *dx, int64_t N, int64_t h,
                      int64_t fl);
    void (*mlp_bwd_w)(const float *dy, const float *gl, const float *dfc, const float *x,
                      float *dw2, float *dw1, int64_t N, int64_t h, int64_t fl);
} ptdp_ops;

/* floats o's fc, gl or dfc of n values take (mlp_store above) */
static inline int64_t ptdp_mlp_floats(const ptdp_ops *o, int64_t n) {
    return o->mlp_store == PTDP_DTYPE_FP32 ? n : (n + 1) / 2;
}

/* A layer's MLP through o (mlp_fwd and the others above): the table's ops
 * where it has them, else the composition of gemm and bias_gelu. */
void ptdp_mlp_fwd(const ptdp_ops *o, const float *x, const float *w1, const float *b1,
                  const float *w2, float *fc, float *gl, float *y, int64_t N, int64_t h,
                  int64_t fl);
void ptdp_mlp_bwd_b(const ptdp_ops *o, const float *dy, const float *w2, const float *fc,
                    const float *b1, const float *w1, float *dfc, float *db1, float *dx, int64_t N,
                    int64_t h, int64_t fl);
void ptdp_mlp_bwd_w(const ptdp_ops *o, const float *dy, const float *gl, const float *dfc,
                    const float *x, float *dw2, float *dw1, int64_t N, int64_t h, int64_t fl);

/* The loss head's logits and their row maximum through o (head_logits
 * above): o->head_logits where the table has it, else gemm and xent_max. */
void ptdp_head_logits(const ptdp_ops *o, const float *x, const float *wte, int64_t h, float *logits,
                      float *rowmax, int64_t N, int64_t Vl, int64_t v0, int64_t V);
/* The loss head's backward through o (head_bwd above): o->head_bwd where the
 * table has it, else the composition (ptdp_head_bwd_composed). */
void ptdp_head_bwd(const ptdp_ops *o, float *logits, const ptdp_xent_grad *xg, const float *x,
                   const float *wte, int64_t h, float *dwte, float *dx);
void ptdp_head_bwd_composed(const ptdp_ops *o, float *logits, const ptdp_xent_grad *xg,
                            const float *x, const float *wte, int64_t h, float *dwte, float *dx);

/* The CPU backend: one constant table per GEMM library (the library is the
 * table's state, nothing process-wide); ptdp_cpu_ops() is oneDNN's. */
const ptdp_ops *ptdp_cpu_ops_lib(ptdp_gemm_lib lib);
const ptdp_ops *ptdp_cpu_ops(void);
/* The CPU tables of a precision (kernels/precision.c): fp32 is
 * ptdp_cpu_ops_lib(lib); bf16 and fp16 wrap the same kernels and round their
 * activation outputs (see the table's comment). */
const ptdp_ops *ptdp_cpu_ops_prec(ptdp_gemm_lib lib, ptdp_dtype dtype);

/* The CUDA backend (src/kernels/cuda, fp32, TF32 off; library ptdpcuda, see
 * docs/gpu.md). The first call picks device 0 and creates the cuBLAS handle
 * and a 128 MiB workspace, once (not thread-safe). Every pointer its ops take
 * is device memory (tokens and targets too); sum/sumsq return to the host and
 * synchronise. Returns the table, or NULL with the reason in
 * ptdp_last_error(): PTDP_EBACKEND when no GPU is usable, PTDP_ENOMEM, or
 * PTDP_EUNSUPPORTED in a build without CUDA. */
const ptdp_ops *ptdp_cuda_ops(void);

/* Floats of scratch the CPU attention_fwd/bwd need for (s, threads): a few
 * 128 x 128 tiles and one [s] row per thread (the CUDA backend uses its own
 * workspace and ignores the argument). */
int64_t ptdp_attention_scratch_floats(int64_t s, int nthreads);

/* Keep-mask element e of a dropout site: 1 keeps, 0 drops. */
int ptdp__dropout_keep(ptdp_dropout d, uint64_t e);
/* Number of element (row r, column 0) of a [N = s*b, w] dropout site: r*w
 * when d.b == 0, else the sample keying above. */
uint64_t ptdp__dropout_row_index(ptdp_dropout d, int64_t r, int64_t w);

/* Checks that every required op of `o` is set, and the optional ones the
 * run needs (`needs`: PTDP_NEED_* bits). PTDP_EUNSUPPORTED naming the
 * backend and the missing op. */
#define PTDP_NEED_DROPOUT 1  /* --hidden-dropout > 0 */
#define PTDP_NEED_ROW_MASK 2 /* --eod-mask-loss */
int ptdp_ops_check(const ptdp_ops *o, int needs);

/* ---- CPU-only kernels outside the table -------------------------------------
 * The one kernel incremental decoding (src/model/generate.c) needs that the
 * table lacks: a softmax over attention scores whose causal mask is offset by
 * the tokens already in the KV cache. It runs on host memory; a GPU backend
 * needs its counterpart in its table before generation can run there. */
/* In place on scores S [n, L] (row stride L): row i is the query at absolute
 * position pos0 + i, which may see keys 0..pos0+i. Each row becomes
 * softmax(scale * S[i, 0..pos0+i]) with zeros at the masked keys.
 * Requires L >= pos0 + n. Single thread per call; rows are short. */
void ptdp__decode_softmax(float *S, int64_t n, int64_t L, int64_t pos0, float scale);

/* ---- plain references (single thread, double accumulation), for tests ---- */
void ptdp_ref_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                   int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
void ptdp_ref_layernorm_fwd(const float *x, const float *w, const float *b, float *out, int64_t N,
                            int64_t h, float eps);
float ptdp_ref_gelu(float x);
void ptdp_ref_softmax_causal(const float *scores, float *probs, int64_t s, float scale);
void ptdp_ref_attention_fwd(const float *qkv, float *ctx, int64_t s, int64_t b, int64_t al,
                            int64_t hd);
/* mean token loss of logits [N, V] (real vocabulary V), targets [N] */
double ptdp_ref_xent(const float *logits, const int32_t *targets, int64_t N, int64_t Vpad,
                     int64_t V);

#endif
