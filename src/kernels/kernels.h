/* kernels.h - compute ops on raw buffers, forward and backward, behind a
 * compute backend in the manner of ggml-backend: a backend is an instance
 * (ptdp_backend), opened for a device, a precision and a GEMM library and
 * closed when done; it holds its ops (function pointers) and its own state
 * (GEMM plans, weight copies, handles, workspace), and every op receives it
 * as its first argument. The model, pipeline and optimizer never touch
 * tensor memory: they call these ops through a `ptdp_backend *`. Two
 * backends exist: the CPU one (src/kernels/cpu: GEMM by oneDNN or OpenBLAS,
 * the rest ptdp's own OpenMP loops; the 16-bit precisions in
 * src/kernels/cpu/half) and the CUDA one (src/kernels/cuda, fp32, one GPU;
 * docs/gpu.md).
 *
 * Shape legend: N = s*b token rows (activations are [s, b, h] row-major, so
 * token (si, bi) is row si*b + bi), h hidden, hl local hidden (h/t), a heads,
 * al local heads, gl local key/value groups (al/gl query heads share one key
 * and value head), hd head size, rd rotary dims of a head, fl local MLP
 * width, V/Vl (local) padded vocabulary.
 * Weight-gradient kernels ACCUMULATE (+=) so micro-batches add up; input
 * gradients overwrite unless stated. All pointers are backend memory. */
#ifndef PTDP_KERNELS_H
#define PTDP_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GEMM library behind the CPU backend's gemm: chosen at open, default
 * oneDNN (measured fastest on the model's shapes; see docs/performance.md). */
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

/* The device a backend computes on (--device). */
#define PTDP_DEVICES(X)       \
    X(PTDP_DEVICE_CPU, "cpu") \
    X(PTDP_DEVICE_CUDA, "cuda")
typedef enum {
#define PTDP__DEVICE_ENUM(e, s) e,
    PTDP_DEVICES(PTDP__DEVICE_ENUM)
#undef PTDP__DEVICE_ENUM
} ptdp_device;
/* PTDP_EINVAL naming the accepted devices */
int ptdp_device_parse(const char *name, ptdp_device *out);
const char *ptdp_device_name(ptdp_device d);

/* What a backend can do, as flags (ptdp_backend.caps): code asks for a
 * capability, never for a backend's name. */
#define PTDP_BACKEND_CAPS(X)                                                                   \
    /* its memory is not host memory: the host reaches it only through upload and download */  \
    X(PTDP_CAP_DEVICE_MEMORY, "device-memory")                                                 \
    /* 16-bit GEMMs run as native 16-bit matmuls with fp32 accumulation (oneDNN's bf16         \
     * matmul), not as fp32 GEMMs on 16-bit values */                                          \
    X(PTDP_CAP_NATIVE_GEMM16, "native-gemm16")                                                 \
    /* attention's tile products in 16 bits (AVX512_BF16), the probabilities rounded first */  \
    X(PTDP_CAP_ATTENTION16, "attention16")                                                     \
    /* attention keeps a logsumexp per row for its backward, never the s x s probabilities */  \
    X(PTDP_CAP_FLASH_ATTENTION, "flash-attention")                                             \
    /* head_logits/head_bwd are fused ops of their own (16-bit logits, no fp32 gradient of     \
     * the logits), not the composition of gemm and the cross-entropy pieces */                \
    X(PTDP_CAP_FUSED_HEAD, "fused-head")                                                       \
    /* keeps converted copies of registered weights (the weights contract below) */            \
    X(PTDP_CAP_WEIGHT_COPIES, "weight-copies")                                                 \
    /* ops run asynchronously on the backend's streams (no backend yet) */                     \
    X(PTDP_CAP_STREAMS, "streams")                                                             \
    /* the Llama family's ops a backend has but has not yet run on its device against the      \
     * CPU backend (tests/test_cuda_ops.c): a run that needs one is refused, naming the flag   \
     * (ptdp_backend_check's PTDP_NEED_* bits); the bit goes once the test has passed there */ \
    X(PTDP_CAP_UNTESTED_RMSNORM, "rmsnorm-untested")                                           \
    X(PTDP_CAP_UNTESTED_SWIGLU, "swiglu-untested")                                             \
    X(PTDP_CAP_UNTESTED_ROPE, "rope-untested")                                                 \
    X(PTDP_CAP_UNTESTED_GQA, "gqa-untested")
enum {
#define PTDP__CAP_BIT(e, s) e##_BIT,
    PTDP_BACKEND_CAPS(PTDP__CAP_BIT)
#undef PTDP__CAP_BIT
        PTDP_CAP_COUNT
};
enum {
#define PTDP__CAP_FLAG(e, s) e = 1u << e##_BIT,
    PTDP_BACKEND_CAPS(PTDP__CAP_FLAG)
#undef PTDP__CAP_FLAG
};
/* the name of capability bit i (0 <= i < PTDP_CAP_COUNT) */
const char *ptdp_backend_cap_name(int i);

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
    const float *gmax; /* the rows' maxima (a backend whose logits hold them, not e, reads it) */
    const int32_t *targets;
    int64_t ld, s, b, Vl, v0, V;
    float scale;
    const int32_t *mask_tokens;
    int32_t mask_id;
} ptdp_xent_grad;

/* The shapes of one rank's training job, as a backend plans its own memory
 * for them (ptdp_backend_workspace_size): a GPT layer's and the loss head's
 * ops on N = s*b token rows. */
typedef struct {
    int64_t s, b;      /* sequence length, micro-batch size */
    int64_t h, hl, fl; /* hidden, local hidden h/t, local MLP width ffn/t */
    int64_t al, hd;    /* local heads, head size */
    int64_t gl;        /* local key/value groups (attention_gqa_*; 0: al, one per head) */
    int swiglu;        /* the MLP is SwiGLU's: gate and up GEMMs [fl, h] writing the halves of
                          [N, 2 fl] rows, fc2 [h, fl] on silu(gate) * up */
    int64_t Vl;        /* local padded vocabulary; 0: the rank holds no loss head */
    int64_t layers;    /* transformer layers of all this rank's chunks */
    int64_t heads;     /* loss heads among them (chunks of the last stage) */
    int threads;       /* OpenMP threads the ops will run on */
} ptdp_backend_job;

/* A backend's own memory for a job, in bytes (each a multiple of 64):
 * fixed + layers * per_layer + heads * per_head. The memory plan counts it
 * as one category (PTDP_MEM_BACKEND); the planner predicts it from these
 * three numbers and the configuration's stage layout. */
typedef struct {
    size_t fixed;     /* scratch and GEMM workspace, whatever the layer count */
    size_t per_layer; /* per transformer layer (the native bf16 GEMMs' weight copies) */
    size_t per_head;  /* per loss head (the word embedding's copies) */
} ptdp_backend_workspace;

typedef struct ptdp_backend ptdp_backend;

/* A compute backend: what it is, then its ops. Every op is REQUIRED unless
 * marked OPTIONAL (NULL allowed; ptdp_backend_check says which
 * configuration needs it). A new backend fills the required ops, is tested
 * op by op against the CPU backend (tests/test_cuda_ops.c shows how) and is
 * ptdp_backend_check'ed before use. Ops are called by one thread at a time
 * per instance; two instances share nothing and may run on two threads.
 *
 * Precision is a property of the instance (`dtype`), as Megatron's --bf16 and
 * --fp16 define it: activations, their gradients and the working copy of the
 * weights are 16-bit; everything is computed with fp32 arithmetic and
 * accumulation; LayerNorm statistics, softmax and the cross-entropy are
 * fp32; weight gradients accumulate in fp32 (Megatron's main_grad). The CPU
 * backend holds 16-bit values in fp32 storage: every op writes its
 * activation outputs rounded to the dtype's grid (gemm: C when beta == 0;
 * beta != 0 accumulates a weight gradient, kept fp32), so the values, and so
 * the results, are those of 16-bit tensors, while memory still takes 4 bytes
 * per element (messages between ranks are packed to 2: comm.h's _act
 * collectives, the pipeline executor; the MLP's own activations: mlp_store).
 *
 * Weights. A backend may keep converted copies of weights for its GEMMs (the
 * native bf16 one keeps them in bf16, in oneDNN's blocked layout: caps
 * PTDP_CAP_WEIGHT_COPIES). Its contract:
 *   - weights_register(be, w, n) declares w[0..n) a range of weights (a
 *     chunk does it for its flat parameter buffer when it gets its memory,
 *     and forgets it, n = 0, when freed); GEMMs whose B operand lies in a
 *     registered range may reuse a copy made at an earlier call;
 *   - a copy is valid for one version of its range. The version advances by
 *     itself whenever an op of the same instance writes into the range:
 *     upload, copy, zero, quantize, adamw and adamw_master (how the trainer,
 *     the optimizer, checkpoint loading and initialisation write weights);
 *   - a write that bypasses the instance (a collective receiving into the
 *     weights: ZeRO-1's all-gather; the host writing backend memory that is
 *     host memory) is announced with weights_written(be, w, n).
 * So nobody has to say "the weights may have changed" at the right moments:
 * writers through the backend are seen, the one other writer says so where
 * it writes. With PTDP_CHECK_WEIGHT_COPIES=1 (the tests set it) every reuse
 * of a copy first checks that the fp32 weights still hash as they did when
 * converted, and asserts if not.
 *
 * Memory. A backend that needs memory of its own (scratch, GEMM workspace,
 * weight copies, CUDA's attention workspace) says how much for a job
 * (workspace_size) and takes it from the caller (workspace_set), who carves
 * it from the rank's memory plan: predicted = allocated includes the
 * backend's part. An instance that was given no workspace (tests, benchmarks,
 * generation) allocates what it needs on first use and frees it at close;
 * one that was given one and needs more (a shape the job did not announce)
 * allocates it too. Either way the bytes add to `ondemand_bytes`: the
 * trainer's end-of-run report prints any that came during its run as a
 * difference from the plan. Memory
 * that a library allocates inside itself (oneDNN's primitives, the packing
 * buffers of dnnl_sgemm, OpenBLAS's buffers, cuBLAS's handle) is outside
 * ptdp's reach and outside the plan (docs/ARCHITECTURE.md). */
struct ptdp_backend {
    const char *name; /* for messages: "cpu/onednn", "cpu/onednn/bf16", "cuda", ... */
    ptdp_device device;
    ptdp_dtype dtype;      /* the grid of activations and working weights */
    ptdp_gemm_lib lib;     /* the CPU's GEMM library (unused on CUDA: cuBLAS) */
    unsigned caps;         /* PTDP_CAP_* */
    ptdp_dtype mlp_store;  /* what mlp_fwd, mlp_bwd_b and mlp_bwd_w keep in fc, gl and dfc:
                              PTDP_DTYPE_FP32, or PTDP_DTYPE_BF16 (n values in (n + 1) / 2
                              floats: the model carves them so, ptdp_mlp_floats) */
    size_t ondemand_bytes; /* bytes it allocated for itself since it was opened (the memory
                              contract: none during a planned run) */
    void *impl;            /* the backend's own state */

    /* memory */
    void *(*alloc)(ptdp_backend *be, size_t bytes); /* zeroed; NULL on failure */
    void (*free)(ptdp_backend *be, void *p);        /* NULL: nothing */
    void (*upload)(ptdp_backend *be, void *dst, const void *host, size_t bytes);
    void (*download)(ptdp_backend *be, void *host, const void *src, size_t bytes);
    void (*zero)(ptdp_backend *be, float *x, int64_t n);
    void (*copy)(ptdp_backend *be, float *dst, const float *src, int64_t n);
    /* x[i] to the instance's grid, in place (fp32: nothing): the model calls
     * it after sums made outside the ops (tensor-parallel all-reduces), the
     * trainer when it writes the working weights from fp32 master weights. */
    void (*quantize)(ptdp_backend *be, float *x, int64_t n);

    /* C[M,N] = alpha * op(A) @ op(B) + beta * C, row-major; op(X) = X or X^T.
     * A is [M,K] (or [K,M] if ta), B is [K,N] (or [N,K] if tb). */
    void (*gemm)(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc);

    /* LayerNorm over rows of x [N, h]: out = (x - mean) * rstd * w + b; saves
     * mean, rstd [N]. bwd: dx += ..., dw += ..., db += ... */
    void (*layernorm_fwd)(ptdp_backend *be, const float *x, const float *w, const float *b,
                          float *out, float *mean, float *rstd, int64_t N, int64_t h, float eps);
    void (*layernorm_bwd)(ptdp_backend *be, const float *dout, const float *x, const float *w,
                          const float *mean, const float *rstd, float *dx, float *dw, float *db,
                          int64_t N, int64_t h);
    /* OPTIONAL (PTDP_NEED_RMSNORM): RMSNorm over rows of x [N, h]:
     * out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) (no mean, no bias:
     * Megatron's and Hugging Face's); saves rstd [N]. bwd: dx += ..., dw += ...
     * (as layernorm_bwd: dx accumulates, the residual's gradient is there). */
    void (*rmsnorm_fwd)(ptdp_backend *be, const float *x, const float *w, float *out, float *rstd,
                        int64_t N, int64_t h, float eps);
    void (*rmsnorm_bwd)(ptdp_backend *be, const float *dout, const float *x, const float *w,
                        const float *rstd, float *dx, float *dw, int64_t N, int64_t h);

    /* y[N,n] += bias[n] broadcast over rows; bwd: dbias[n] += sum_rows dy */
    void (*bias_add)(ptdp_backend *be, float *y, const float *bias, int64_t N, int64_t n);
    void (*bias_bwd)(ptdp_backend *be, const float *dy, float *dbias, int64_t N, int64_t n);

    /* Fused bias + tanh-GeLU: out = gelu(x + bias), x [N, n] is the GEMM
     * output (kept for backward). bwd: dx = dout * gelu'(x + bias) (dx may
     * alias dout), dbias += sum_rows dx. */
    void (*bias_gelu_fwd)(ptdp_backend *be, const float *x, const float *bias, float *out,
                          int64_t N, int64_t n);
    void (*bias_gelu_bwd)(ptdp_backend *be, const float *dout, const float *x, const float *bias,
                          float *dx, float *dbias, int64_t N, int64_t n);
    /* OPTIONAL (PTDP_NEED_SWIGLU): fused SwiGLU. x [N, 2*fl] is the MLP's
     * first GEMM output, each row its gate half (columns [0, fl)) then its up
     * half ([fl, 2*fl)): the weight's rows [gate; up] of this rank, so a
     * tensor-parallel split gives every rank the gate and up columns of the
     * same fl units (Megatron's linear_fc1 per rank); bias [2*fl] in the same
     * order, added first, or NULL (Llama has none). out [N, fl] =
     * silu(gate) * up, silu(g) = g / (1 + e^-g). bwd: dx [N, 2*fl] =
     * (dout * up * silu'(gate) | dout * silu(gate)), dx may alias x;
     * dbias [2*fl] += sum_rows dx (NULL when bias is). */
    void (*swiglu_fwd)(ptdp_backend *be, const float *x, const float *bias, float *out, int64_t N,
                       int64_t fl);
    void (*swiglu_bwd)(ptdp_backend *be, const float *dout, const float *x, const float *bias,
                       float *dx, float *dbias, int64_t N, int64_t fl);

    /* Fused bias + dropout + residual add: out = resid + dropout(x + bias),
     * x, resid, out [N, h] (out may alias resid). bwd: dx = dropout'(dout)
     * (dx may alias dout), dbias += sum_rows dx; the residual's gradient is
     * dout itself and is left to the caller. */
    void (*bias_dropout_add_fwd)(ptdp_backend *be, const float *x, const float *bias,
                                 const float *resid, float *out, int64_t N, int64_t h,
                                 ptdp_dropout drop);
    void (*bias_dropout_add_bwd)(ptdp_backend *be, const float *dout, float *dx, float *dbias,
                                 int64_t N, int64_t h, ptdp_dropout drop);
    /* OPTIONAL (needed only when --hidden-dropout > 0): plain dropout in place
     * on x [n] (the embedding's output) and its backward. */
    void (*dropout_fwd)(ptdp_backend *be, float *x, int64_t n, ptdp_dropout drop);
    void (*dropout_bwd)(ptdp_backend *be, float *dx, int64_t n, ptdp_dropout drop);

    /* Causal self-attention core for al local heads of size hd over a
     * micro-batch of b sequences of length s.
     * qkv [s, b, al, 3, hd] (Megatron's per-head q|k|v order), ctx [s, b, al*hd],
     * saved: what the forward keeps for the backward, attention_saved_floats(s,
     * b, al) floats whose content is the backend's own (CPU: the logsumexp of
     * every row of scale * q k^T + causal mask, [b, al, s]; CUDA: the
     * probabilities before dropout, [b, al, s, s]); scratch:
     * attention_scratch_floats(s) floats (the caller's workspace).
     * bwd: dqkv (overwritten) from dctx, using qkv, the forward's ctx and saved. */
    void (*attention_fwd)(ptdp_backend *be, const float *qkv, float *ctx, float *saved,
                          float *scratch, int64_t s, int64_t b, int64_t al, int64_t hd,
                          ptdp_dropout drop);
    void (*attention_bwd)(ptdp_backend *be, const float *dctx, const float *qkv, const float *ctx,
                          const float *saved, float *dqkv, float *scratch, int64_t s, int64_t b,
                          int64_t al, int64_t hd, ptdp_dropout drop);
    /* Floats attention_fwd saves for (s, b, al): the model carves and the
     * memory plan counts this many per layer and stashed micro-batch. */
    int64_t (*attention_saved_floats)(ptdp_backend *be, int64_t s, int64_t b, int64_t al);
    /* Floats of scratch attention_fwd/bwd need for sequences of length s on
     * the OpenMP threads of the moment (CPU: ptdp_attention_scratch_floats;
     * CUDA: 0, it has a workspace of its own). */
    int64_t (*attention_scratch_floats)(ptdp_backend *be, int64_t s);
    /* OPTIONAL (PTDP_NEED_GQA): attention_fwd/_bwd with key/value groups: al
     * query heads over gl groups (gl divides al), query head j reading group
     * j / (al/gl). qkv [s, b, gl, al/gl + 2, hd]: per group its al/gl query
     * heads, then its key and its value head (Megatron's linear_qkv layout
     * with query groups; gl = al is attention_fwd's [s, b, al, 3, hd], and
     * gives its results bit for bit). ctx [s, b, al*hd] by query head; saved
     * and scratch as attention_fwd's for (s, b, al); dropout keyed by the
     * global query head, as there. bwd: dqkv overwritten, a group's dk and dv
     * summed over its query heads. */
    void (*attention_gqa_fwd)(ptdp_backend *be, const float *qkv, float *ctx, float *saved,
                              float *scratch, int64_t s, int64_t b, int64_t al, int64_t gl,
                              int64_t hd, ptdp_dropout drop);
    void (*attention_gqa_bwd)(ptdp_backend *be, const float *dctx, const float *qkv,
                              const float *ctx, const float *saved, float *dqkv, float *scratch,
                              int64_t s, int64_t b, int64_t al, int64_t gl, int64_t hd,
                              ptdp_dropout drop);
    /* OPTIONAL (PTDP_NEED_ROPE): rotary position embeddings, in place on the
     * query and key heads of qkv [s, b, gl, al/gl + 2, hd] (attention_gqa's
     * layout; value heads untouched). Rotate-half convention (Megatron's and
     * Hugging Face's): of each head's first rd dims (rd even, <= hd; Megatron's
     * --rotary-percent leaves the rest as they are) dims i and i + rd/2,
     * i < rd/2, of the row at position p = pos0 + si become
     *   x_i c - x_{i+rd/2} sn,  x_{i+rd/2} c + x_i sn
     * with c, sn = cos, sin(p theta^(-2i/rd)) from table (ptdp_rope_table_init:
     * positions 0 .. S-1, pos0 + s <= S). Positions follow the sequence, not
     * the layout: pos0 is the first row's (0 in training, the KV cache's length
     * when decoding). bwd: the inverse rotation, in place on dqkv's query and
     * key heads (value heads untouched). */
    void (*rope_fwd)(ptdp_backend *be, float *qkv, const float *table, int64_t s, int64_t b,
                     int64_t al, int64_t gl, int64_t hd, int64_t rd, int64_t pos0);
    void (*rope_bwd)(ptdp_backend *be, float *dqkv, const float *table, int64_t s, int64_t b,
                     int64_t al, int64_t gl, int64_t hd, int64_t rd, int64_t pos0);

    /* Vocabulary-parallel token embedding: rows [v0, v0+Vl) of the padded
     * vocabulary live here. out[si,bi,:] = wte[tok - v0] if owned, else 0.
     * tokens: [b, ld] with ld >= s (token of sequence bi at position si is
     * tokens[bi*ld + si]). bwd: dwte[tok - v0] += dout for owned tokens. */
    void (*embed_fwd)(ptdp_backend *be, const int32_t *tokens, int64_t ld, const float *wte,
                      int64_t v0, int64_t Vl, float *out, int64_t s, int64_t b, int64_t h);
    void (*embed_bwd)(ptdp_backend *be, const int32_t *tokens, int64_t ld, const float *dout,
                      float *dwte, int64_t v0, int64_t Vl, int64_t s, int64_t b, int64_t h);
    /* Position embedding: out[si,bi,:] += wpe[si]; bwd: dwpe[si] += sum_b dout */
    void (*pos_add_fwd)(ptdp_backend *be, float *out, const float *wpe, int64_t s, int64_t b,
                        int64_t h);
    void (*pos_add_bwd)(ptdp_backend *be, const float *dout, float *dwpe, int64_t s, int64_t b,
                        int64_t h);

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
    void (*xent_max)(ptdp_backend *be, const float *logits, float *rowmax, int64_t N, int64_t Vl,
                     int64_t v0, int64_t V);
    void (*xent_sums)(ptdp_backend *be, float *logits, const float *gmax, const int32_t *targets,
                      int64_t ld, float *sumexp, float *tgt, int64_t s, int64_t b, int64_t Vl,
                      int64_t v0, int64_t V);
    void (*xent_loss)(ptdp_backend *be, const float *sumexp, const float *gmax, const float *tgt,
                      float *loss, int64_t N);
    void (*xent_bwd)(ptdp_backend *be, float *logits, const float *sumexp, const int32_t *targets,
                     int64_t ld, int64_t s, int64_t b, int64_t Vl, int64_t v0, int64_t V,
                     float scale);

    /* OPTIONAL (needed only with --eod-mask-loss): zeroes the rows of x
     * [N = s*b, width] whose input token is `id` (tokens [b, ld] like
     * embed's) and returns how many rows it kept (on the host). */
    int64_t (*mask_rows)(ptdp_backend *be, float *x, int64_t width, const int32_t *tokens,
                         int64_t ld, int64_t s, int64_t b, int32_t id);

    /* The loss head's logits l = x wte^T [N, Vl] (x [N, h], wte [Vl, h])
     * into logits, and rowmax as xent_max gives it. ptdp_head_logits_composed
     * is gemm, then xent_max; a 16-bit backend whose xent_max and xent_sums
     * round what they read may leave l there unrounded (the same values as
     * rounding first, without a pass over the logits for it), and one whose
     * xent_sums and head_bwd read them so may store them in 16 bits over the
     * start of the buffer (PTDP_CAP_FUSED_HEAD). */
    void (*head_logits)(ptdp_backend *be, const float *x, const float *wte, int64_t h,
                        float *logits, float *rowmax, int64_t N, int64_t Vl, int64_t v0, int64_t V);
    /* The loss head's backward after xent_loss:
     *   dl = xent_bwd's result on logits (holding e), masked rows zero
     *   dwte [Vl, h] += dl^T x    (x [N, h], the final LayerNorm's output)
     *   dx [N, h] = dl wte        (wte [Vl, h], the tied embedding's rows)
     * with dx rounded like any gemm output; logits holds garbage afterwards.
     * ptdp_head_bwd_composed is xent_bwd, mask_rows and two gemms; a fused
     * one makes the GEMMs' operands straight from e (or from 16-bit logits,
     * whose row maxima xg->gmax gives) without writing dl first. */
    void (*head_bwd)(ptdp_backend *be, float *logits, const ptdp_xent_grad *xg, const float *x,
                     const float *wte, int64_t h, float *dwte, float *dx);

    /* A layer's MLP on N rows, with W1 [fl, h], b1 [fl], W2 [h, fl]:
     *   mlp_fwd:   fc = x W1^T, gl = gelu(fc + b1), y = gl W2^T
     *   mlp_bwd_b: dfc = (dy W2) * gelu'(fc + b1), db1 += sum_rows dfc,
     *              dx = dfc W1 (the input gradient)
     *   mlp_bwd_w: dW2 += dy^T gl, dW1 += dfc^T x (the weight gradients)
     * outputs on the instance's grid, as the composition's gemms and
     * bias_gelu ops compute them (ptdp_mlp_*_composed, which a backend may
     * use as they are). fc, gl and dfc [N, fl] are written and read by these
     * three only, so what their bytes hold is the backend's business
     * (mlp_store: the native bf16 one keeps bf16 values in the first half of
     * each buffer); x, y, dy, dx [N, h] and the weights are ordinary
     * storage. */
    void (*mlp_fwd)(ptdp_backend *be, const float *x, const float *w1, const float *b1,
                    const float *w2, float *fc, float *gl, float *y, int64_t N, int64_t h,
                    int64_t fl);
    void (*mlp_bwd_b)(ptdp_backend *be, const float *dy, const float *w2, const float *fc,
                      const float *b1, const float *w1, float *dfc, float *db1, float *dx,
                      int64_t N, int64_t h, int64_t fl);
    void (*mlp_bwd_w)(ptdp_backend *be, const float *dy, const float *gl, const float *dfc,
                      const float *x, float *dw2, float *dw1, int64_t N, int64_t h, int64_t fl);

    /* AdamW (decoupled weight decay, PyTorch's order of operations) on n
     * elements, the gradient taken as gscale * grad (the loss scale's
     * inverse times the clipping factor: exactly the values a scale pass
     * over grad would leave, without that pass; grad itself is not
     * written); step is 1-based. */
    void (*adamw)(ptdp_backend *be, float *param, const float *grad, float gscale, float *m,
                  float *v, int64_t n, float lr, float beta1, float beta2, float eps, float wd,
                  int64_t step);
    /* OPTIONAL (needed with a 16-bit dtype; NULL: adamw on the master, then
     * copy and quantize): AdamW on the fp32 master weights (as adamw) that
     * also writes work = the updated master on the instance's grid, in the
     * same pass over memory */
    void (*adamw_master)(ptdp_backend *be, float *master, float *work, const float *grad,
                         float gscale, float *m, float *v, int64_t n, float lr, float beta1,
                         float beta2, float eps, float wd, int64_t step);
    /* returns sum of squares (accumulated in double) */
    double (*sumsq)(ptdp_backend *be, const float *x, int64_t n);
    /* returns sum of x (double accumulation): losses */
    double (*sum)(ptdp_backend *be, const float *x, int64_t n);

    /* OPTIONAL (NULL: the backend keeps nothing derived from weights): the
     * weights contract above; called through ptdp_backend_weights_register
     * and ptdp_backend_weights_written */
    void (*weights_register)(ptdp_backend *be, const float *w, int64_t n);
    void (*weights_written)(ptdp_backend *be, const float *w, int64_t n);

    /* OPTIONAL (NULL: no memory of its own): the memory contract above;
     * called through ptdp_backend_workspace_size and _set */
    int (*workspace_size)(ptdp_backend *be, const ptdp_backend_job *job,
                          ptdp_backend_workspace *ws);
    int (*workspace_set)(ptdp_backend *be, const ptdp_backend_job *job, void *block, size_t bytes);

    /* frees the instance and everything it holds (ptdp_backend_close) */
    void (*close)(ptdp_backend *be);
};

/* How to open a backend. */
typedef struct {
    ptdp_device device; /* PTDP_DEVICE_CPU (default) or PTDP_DEVICE_CUDA */
    ptdp_dtype dtype;   /* PTDP_DTYPE_FP32 (default), _BF16 or _FP16 (CPU only) */
    ptdp_gemm_lib lib;  /* the CPU's GEMM library (default oneDNN) */
    int gpu;            /* CUDA: the device ordinal (default 0) */
} ptdp_backend_params;
ptdp_backend_params ptdp_backend_default_params(void);

/* Opens a backend: *out is the instance, the caller's to close. The CPU
 * backend of a 16-bit dtype over oneDNN uses the CPU's native bf16 matmul
 * and, with AVX512_BF16, bf16 attention tiles where it has them (checked at
 * run time, caps says which). Errors (nothing opened, *out NULL):
 * PTDP_EINVAL (a device, dtype or library out of its enum),
 * PTDP_EUNSUPPORTED (a 16-bit dtype on CUDA, CUDA in a program without the
 * CUDA backend: a ptdp build without nvcc, or a program not linked with it;
 * an installed ptdp built with nvcc has it as `pkg-config --libs ptdp-cuda`),
 * PTDP_EBACKEND (no usable GPU, cuBLAS missing), PTDP_ENOMEM. Not
 * thread-safe with itself on CUDA (the device is set per process). Local: no communication; when it
 * fails on some ranks only, the others do not learn it (agree before the next collective, as
 * ptdp_run_setup does). */
int ptdp_backend_open(ptdp_backend **out, const ptdp_backend_params *p);
/* Frees the instance and everything it holds; NULL is a no-op. Memory it
 * handed out (alloc) and a workspace it was given stay the caller's: free
 * them first (a workspace: ptdp_backend_workspace_set(be, NULL, NULL, 0)). */
void ptdp_backend_close(ptdp_backend *be);

/* Checks that every required op of be is set, and the optional ones the
 * run needs (`needs`: PTDP_NEED_* bits). PTDP_EUNSUPPORTED naming the
 * backend and the missing op. */
#define PTDP_NEED_DROPOUT 1  /* --hidden-dropout > 0 */
#define PTDP_NEED_ROW_MASK 2 /* --eod-mask-loss */
/* the Llama family's ops: refused where missing, or where the backend has
 * not yet run them on its device (PTDP_CAP_UNTESTED_*), naming the flag */
#define PTDP_NEED_RMSNORM 4 /* --normalization RMSNorm */
#define PTDP_NEED_SWIGLU 8  /* --swiglu */
#define PTDP_NEED_ROPE 16   /* --position-embedding-type rope */
#define PTDP_NEED_GQA 32    /* --group-query-attention */
int ptdp_backend_check(const ptdp_backend *be, int needs);
/* "name (cap, cap, ...)" into buf[n]: the start-up line's description */
const char *ptdp_backend_describe(const ptdp_backend *be, char *buf, size_t n);

/* The weights contract (ptdp_backend above); no-ops where the backend keeps
 * no copies. */
void ptdp_backend_weights_register(ptdp_backend *be, const float *w, int64_t n);
void ptdp_backend_weights_written(ptdp_backend *be, const float *w, int64_t n);

/* The memory contract. _size: the bytes job needs (all zero for a backend
 * without memory of its own); it may prepare plans for the job's shapes
 * (oneDNN primitives) so their sizes are known. Errors: PTDP_ENOMEM,
 * PTDP_EBACKEND. _bytes: fixed + layers * per_layer + heads * per_head.
 * _set: block [bytes] (backend memory, 64-byte aligned, bytes ==
 * ptdp_backend_workspace_bytes of _size's answer for the same job) becomes
 * the backend's until _set(be, NULL, NULL, 0), which the caller must call
 * before it frees the block; copies and plans that live in the block are
 * dropped then. */
int ptdp_backend_workspace_size(ptdp_backend *be, const ptdp_backend_job *job,
                                ptdp_backend_workspace *ws);
size_t ptdp_backend_workspace_bytes(const ptdp_backend_workspace *ws, int64_t layers,
                                    int64_t heads);
int ptdp_backend_workspace_set(ptdp_backend *be, const ptdp_backend_job *job, void *block,
                               size_t bytes);

/* One block per memory category through be's alloc and free (base's
 * ptdp_mem_alloc and ptdp_mem_free). */
int ptdp_backend_mem_alloc(ptdp_backend *be, ptdp_mem *m);
void ptdp_backend_mem_free(ptdp_backend *be, ptdp_mem *m);

/* floats be's fc, gl or dfc of n values take (mlp_store above) */
static inline int64_t ptdp_mlp_floats(const ptdp_backend *be, int64_t n) {
    return be->mlp_store == PTDP_DTYPE_FP32 ? n : (n + 1) / 2;
}

/* The compositions a backend may use for head_logits, head_bwd and the mlp
 * ops: gemm, bias_gelu and the cross-entropy pieces of the same instance. */
void ptdp_head_logits_composed(ptdp_backend *be, const float *x, const float *wte, int64_t h,
                               float *logits, float *rowmax, int64_t N, int64_t Vl, int64_t v0,
                               int64_t V);
void ptdp_head_bwd_composed(ptdp_backend *be, float *logits, const ptdp_xent_grad *xg,
                            const float *x, const float *wte, int64_t h, float *dwte, float *dx);
void ptdp_mlp_fwd_composed(ptdp_backend *be, const float *x, const float *w1, const float *b1,
                           const float *w2, float *fc, float *gl, float *y, int64_t N, int64_t h,
                           int64_t fl);
void ptdp_mlp_bwd_b_composed(ptdp_backend *be, const float *dy, const float *w2, const float *fc,
                             const float *b1, const float *w1, float *dfc, float *db1, float *dx,
                             int64_t N, int64_t h, int64_t fl);
void ptdp_mlp_bwd_w_composed(ptdp_backend *be, const float *dy, const float *gl, const float *dfc,
                             const float *x, float *dw2, float *dw1, int64_t N, int64_t h,
                             int64_t fl);

/* The rotary tables rope_fwd and rope_bwd read, for every backend: row p
 * (positions 0 <= p < S) holds cos(p f_i) for i < rd/2, then sin(p f_i),
 * f_i = theta^(-2i/rd), each computed in double and rounded to fp32 (as
 * scripts/reference/llama_reference.py computes them). _floats: the table's
 * size, S * rd (the caller plans it, as attention's scratch); _init: writes
 * it to table (backend memory) through be->upload, from a buffer on the
 * stack, once, before the first op reads it. rd even, 2 <= rd <= 1024. */
int64_t ptdp_rope_table_floats(int64_t S, int64_t rd);
void ptdp_rope_table_init(ptdp_backend *be, float *table, int64_t S, int64_t rd, double theta);

/* The CPU attention's scratch for (s, threads): a few 128 x 128 tiles and
 * one [s] row per thread (what the CPU backend's attention_scratch_floats
 * answers for the threads of the moment; the planner asks it for --threads). */
int64_t ptdp_attention_scratch_floats(int64_t s, int nthreads);
/* The CPU attention's saved floats for (s, b, al): one logsumexp per row,
 * b * al * s (the CPU backend's attention_saved_floats) */
int64_t ptdp_attention_saved_floats_cpu(int64_t s, int64_t b, int64_t al);

/* Keep-mask element e of a dropout site: 1 keeps, 0 drops. */
int ptdp__dropout_keep(ptdp_dropout d, uint64_t e);
/* Number of element (row r, column 0) of a [N = s*b, w] dropout site: r*w
 * when d.b == 0, else the sample keying above. */
uint64_t ptdp__dropout_row_index(ptdp_dropout d, int64_t r, int64_t w);

/* ---- CPU-only kernels outside the backend ---------------------------------
 * The one kernel incremental decoding (src/model/generate.c) needs that the
 * backend's ops lack: a softmax over attention scores whose causal mask is offset by
 * the tokens already in the KV cache. It runs on host memory; a GPU backend
 * needs its counterpart among its ops before generation can run there. */
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
/* The Llama family's ops, as kernels.h's ops describe them (rstd [N] may be
 * NULL; bias NULL: none): RMSNorm and its backward (dx, dw accumulate),
 * SwiGLU and its backward, rotary embeddings from cos and sin computed in
 * double here (bwd: the inverse rotation), grouped-query attention
 * (attention_gqa_fwd's layouts, no dropout; bwd: dqkv overwritten). */
void ptdp_ref_rmsnorm_fwd(const float *x, const float *w, float *out, float *rstd, int64_t N,
                          int64_t h, float eps);
void ptdp_ref_rmsnorm_bwd(const float *dout, const float *x, const float *w, float *dx, float *dw,
                          int64_t N, int64_t h, float eps);
float ptdp_ref_silu(float x);
void ptdp_ref_swiglu_fwd(const float *x, const float *bias, float *out, int64_t N, int64_t fl);
void ptdp_ref_swiglu_bwd(const float *dout, const float *x, const float *bias, float *dx,
                         float *dbias, int64_t N, int64_t fl);
void ptdp_ref_rope(float *qkv, int64_t s, int64_t b, int64_t al, int64_t gl, int64_t hd, int64_t rd,
                   int64_t pos0, double theta, int inverse);
void ptdp_ref_attention_gqa_fwd(const float *qkv, float *ctx, int64_t s, int64_t b, int64_t al,
                                int64_t gl, int64_t hd);
void ptdp_ref_attention_gqa_bwd(const float *dctx, const float *qkv, float *dqkv, int64_t s,
                                int64_t b, int64_t al, int64_t gl, int64_t hd);
/* mean token loss of logits [N, V] (real vocabulary V), targets [N] */
double ptdp_ref_xent(const float *logits, const int32_t *targets, int64_t N, int64_t Vpad,
                     int64_t V);

#ifdef __cplusplus
}
#endif

#endif
