/* model.h - the GPT model as ptdp runs it: parameter specs (global name,
 * global shape, how the tensor is split over the t tensor-parallel ranks),
 * layout-independent initialisation, and one model chunk's forward and
 * backward (a chunk is a contiguous range of layers, plus the embedding on
 * the first pipeline stage and the loss head on the last).
 *
 * Layout conventions (Megatron's): activations [s, b, h]; weights stored
 * [out, in] so y = x W^T; the QKV projection's output columns are ordered
 * per head [a][q|k|v][hd], so a tensor-parallel split of its rows into t
 * contiguous blocks hands each rank a/t whole heads. The output layer is tied
 * to the token embedding. The padded vocabulary rows (V..Vp) are zero and
 * masked out of the loss.
 *
 * Memory: every buffer of a chunk is carved from per-category arenas
 * (base/base.h: weights, gradients, activations, workspace), either the
 * caller's (a training rank plans all its tensors at once) or, given none,
 * the chunk's own blocks allocated once through the backend; forward and
 * backward allocate nothing. */
#ifndef PTDP_MODEL_H
#define PTDP_MODEL_H

#include <stdint.h>

#include "../base/base.h"
#include "../base/job.h"
#include "../comm/comm.h"
#include "../kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The model's shape, ptdp_gpt_config, and ptdp_gpt_config_finish are part of
 * the job description (base/job.h). */
/* PTDP_NEED_* bits of the backend ops cfg needs (ptdp_backend_check). */
int ptdp_gpt_backend_needs(const ptdp_gpt_config *cfg);

/* Parameter specs (ptdp_param_spec, its role, split and init rules) are
 * declared in base/base.h, where optim/ and ckpt/ see them too. */

/* Pointers into the flat parameter (or gradient) buffer for one layer. */
/* NULL where the configuration has no such tensor (biases with
 * --disable-bias-linear, norm biases with RMSNorm, fc1 with SwiGLU, gate and
 * up without). q = (a + 2g) h/a, the query, key and value rows: 3h for
 * multi-head attention. */
typedef struct {
    float *ln1_w, *ln1_b;   /* [h] */
    float *qkv_w, *qkv_b;   /* [q/t, h], [q/t], rows per group [g/t][a/g q heads, k, v][h/a] */
    float *proj_w, *proj_b; /* [h, h/t], [h] */
    float *ln2_w, *ln2_b;   /* [h] */
    float *fc1_w, *fc1_b;   /* [4h/t, h], [4h/t] */
    float *gate_w, *up_w;   /* SwiGLU: [ffn/t, h] each */
    float *fc2_w, *fc2_b;   /* [h, 4h/t], [h] */
} ptdp_layer_ptrs;

typedef struct {
    float *wte;              /* [Vp/t, h] */
    float *wpe;              /* [max_positions, h] (first stage; NULL with rope) */
    float *lnf_w, *lnf_b;    /* [h] (last stage) */
    float *out_w;            /* [Vp/t, h] the output layer (last stage): wte when tied */
    ptdp_layer_ptrs *layers; /* [nl] */
} ptdp_model_ptrs;

typedef struct {
    const ptdp_job *job;            /* what the chunk computes: the model (job->model, finished:
                                       ptdp_gpt_config_finish), the micro-batch size b,
                                       recomputation, sequence parallelism and --eod-mask-loss
                                       (the chunk keeps the pointer; the caller owns the job).
                                       A forward-only chunk: ptdp_job_default_params() with
                                       its model. With job->sequence_parallel and a tensor
                                       group of t > 1 members (s % t == 0) the residual
                                       stream, LayerNorms and dropouts hold this rank's 1/t of
                                       the sequence, rows [tp*s/t*b, (tp+1)*s/t*b) of [s, b,
                                       h]; the chunk's input, output and their gradients are
                                       [s/t, b, h] too */
    int64_t layer_begin, layer_end; /* global layers [begin, end) */
    int pre, post;                  /* holds embedding / loss head */
    int slots;                      /* micro-batches whose activations can be stashed */
    ptdp_backend *be;               /* NULL: the chunk opens and closes its own fp32 CPU
                                       backend (oneDNN) */
    ptdp_group *tp;                 /* tensor-parallel group (size 1 allowed) */
    int64_t numel_multiple;         /* pad the flat buffers to a multiple of this (0: 16) */
    int inference;                  /* no gradient buffer (generation, export): forward only,
                                       call ptdp_gpt_chunk_set_training(c, 0) */
    int split_backward;             /* zero-bubble schedules: every slot also keeps the
                                       output gradients of its layers' weight GEMMs, so
                                       the weight gradients (ptdp_gpt_chunk_bwd_weight)
                                       can run after the input gradient
                                       (ptdp_gpt_chunk_bwd_input); needs no recompute */
    ptdp_mem *mem;                  /* NULL: the chunk allocates its own blocks; else
                                       init carves from these arenas (a plan pass) and
                                       ptdp_gpt_chunk_bind carves again once allocated */
} ptdp_chunk_params;
/* Defaults: no job (the caller sets it and the layer range), no embedding
 * or head, one slot, a CPU backend of its own, no tensor group (t = 1), flat
 * buffers padded to 16 floats, training, its own memory. */
ptdp_chunk_params ptdp_chunk_default_params(void);

typedef struct ptdp_gpt_chunk ptdp_gpt_chunk;

/* Plans and allocates the chunk. Returns PTDP_ENOMEM if the backend cannot
 * allocate. The chunk keeps pointers to job, be and tp (caller owns them). It
 * registers its parameter buffer with the backend as weights (kernels.h's
 * weights contract) once it has its memory, and forgets it when freed.
 * With p->mem the chunk's tensors are carved from those arenas: over plan
 * arenas it only records its sizes (its pointers are NULL until
 * ptdp_gpt_chunk_bind carves it again, in the same order, from the
 * allocated blocks; the caller owns and frees them, after the chunk).
 * Local (no communication: initial weights are drawn by global index, not
 * sent); a failure on one rank is not seen by the others. */
int ptdp_gpt_chunk_init(ptdp_gpt_chunk **out, const ptdp_chunk_params *p);
void ptdp_gpt_chunk_bind(ptdp_gpt_chunk *c, ptdp_mem *m);
void ptdp_gpt_chunk_free(ptdp_gpt_chunk *c);

/* The compute backend the chunk was built with. */
ptdp_backend *ptdp_gpt_chunk_backend(const ptdp_gpt_chunk *c);
/* Whether the chunk is the first stage's (holds the embedding it owns). */
int ptdp_gpt_chunk_is_first(const ptdp_gpt_chunk *c);
/* Parameter specs of the chunk (in buffer order), flat buffers and counts. */
const ptdp_param_spec *ptdp_gpt_chunk_specs(const ptdp_gpt_chunk *c, int *n);
float *ptdp_gpt_chunk_params(ptdp_gpt_chunk *c);
float *ptdp_gpt_chunk_grads(ptdp_gpt_chunk *c);
int64_t ptdp_gpt_chunk_numel(const ptdp_gpt_chunk *c);
/* Bytes of the chunk's parameters+gradients and activations+workspace. */
void ptdp_gpt_chunk_bytes(const ptdp_gpt_chunk *c, size_t *param_bytes, size_t *act_bytes);
/* How the activation allocation splits: bytes per micro-batch slot (stashed
 * until its backward) and bytes shared by all slots (workspace). */
void ptdp_gpt_chunk_activation_split(const ptdp_gpt_chunk *c, size_t *slot_bytes,
                                     size_t *shared_bytes);

/* Initialises every parameter as Megatron does, element by element from
 * (seed, global name, global index): a shard draws exactly the values of its
 * slice of the full tensor. Padded vocabulary rows are zero. */
void ptdp_gpt_chunk_init_params(ptdp_gpt_chunk *c);
/* Pointers to the chunk's parameters (P) and gradients (G) by role, for code
 * that runs the model's layers its own way (generation with a KV cache). */
const ptdp_model_ptrs *ptdp_gpt_chunk_param_ptrs(const ptdp_gpt_chunk *c);
const ptdp_model_ptrs *ptdp_gpt_chunk_grad_ptrs(const ptdp_gpt_chunk *c);

/* Copies every parameter from / to a host image of the flat buffer
 * (ptdp_gpt_chunk_numel floats, spec offsets). */
void ptdp_gpt_chunk_upload_params(ptdp_gpt_chunk *c, const float *host);
void ptdp_gpt_chunk_download_params(ptdp_gpt_chunk *c, float *host);
void ptdp_gpt_chunk_download_grads(ptdp_gpt_chunk *c, float *host);
/* Training mode (the default) or evaluation: no dropout, and the last
 * stage's forward computes the loss only (no gradient; backward must not be
 * called for such a micro-batch). */
void ptdp_gpt_chunk_set_training(ptdp_gpt_chunk *c, int training);
/* While set, backward calls fn(ctx, offset) each time every gradient at flat
 * offset >= `offset` has received this micro-batch's contribution (after each
 * layer, and with offset 0 after the embedding). The data-parallel reduction
 * uses it during the last micro-batch to start bucket all-reduces early. */
typedef void (*ptdp_grad_hook)(void *ctx, int64_t offset);
void ptdp_gpt_chunk_set_grad_hook(ptdp_gpt_chunk *c, ptdp_grad_hook fn, void *ctx);
/* Zeroes the gradient buffer (start of an iteration). */
void ptdp_gpt_chunk_zero_grads(ptdp_gpt_chunk *c);

/* Fills this rank's shard of spec `sp` from the full global tensor `global`
 * (row-major, global shape), or writes this rank's shard into `global` at its
 * place. Host memory on both sides. */
void ptdp_spec_scatter(const ptdp_param_spec *sp, int tp, const float *global, float *local);
void ptdp_spec_gather(const ptdp_param_spec *sp, int tp, const float *local, float *global);

/* Forward of one micro-batch into activation slot `slot`.
 * tokens: [b, s+1] (inputs are columns 0..s-1, targets 1..s); needed on the
 * first and last stage, ignored elsewhere (may be NULL there).
 * x_in: [s, b, h] input activation when !pre (NULL on the first stage).
 * x_out: [s, b, h] receives the output activation when !post.
 * With sequence_parallel both are this rank's [s/t, b, h] shard.
 * On the last stage the loss head runs here and, because it needs nothing
 * from later stages, so does its backward: the slot keeps only the gradient
 * of the last layer's output. loss_scale multiplies each token's loss
 * gradient (1/(tokens in the global batch)); *loss_sum receives the sum of
 * this micro-batch's token losses (post only; with eod_mask_loss the masked
 * tokens count 0 there and get no gradient). `iteration` and `microbatch`
 * key the dropout streams. */
void ptdp_gpt_chunk_fwd(ptdp_gpt_chunk *c, int slot, const int32_t *tokens, const float *x_in,
                        float *x_out, float loss_scale, double *loss_sum, int64_t iteration,
                        int64_t microbatch);
/* Backward of the micro-batch in `slot`: dy [s, b, h] ([s/t, b, h] with
 * sequence parallelism, as x_in/x_out) is the gradient of the
 * chunk's output when !post (NULL on the last stage); dx receives the
 * gradient of its input when !pre. Weight gradients accumulate into the
 * gradient buffer. */
void ptdp_gpt_chunk_bwd(ptdp_gpt_chunk *c, int slot, const float *dy, float *dx);
/* The same backward in two halves, for chunks built with split_backward
 * (asserts): _input is B, everything ptdp_gpt_chunk_bwd does except the four
 * weight GEMMs of each layer (their output gradients stay in the slot; bias,
 * LayerNorm and embedding gradients are accumulated here, fused in their
 * kernels); _weight is W, those GEMMs, accumulating into the gradient buffer,
 * and the gradient hook (gradients of the micro-batch final). B then W on
 * the same slot gives bitwise the gradients of ptdp_gpt_chunk_bwd; the slot
 * is free after W. */
void ptdp_gpt_chunk_bwd_input(ptdp_gpt_chunk *c, int slot, const float *dy, float *dx);
void ptdp_gpt_chunk_bwd_weight(ptdp_gpt_chunk *c, int slot);

/* Forward only, on a chunk holding the whole model (pre and post): logits of
 * this rank's vocabulary slice for tokens [b, ld] (positions 0..s-1), into
 * host memory logits [s, b, Vp/t]. Uses activation slot 0. For tests and
 * generation. */
void ptdp_gpt_chunk_logits(ptdp_gpt_chunk *c, const int32_t *tokens, int64_t ld, float *logits);

/* Model FLOPs per iteration, the paper's count: 72 B s l h^2 (1 + s/6h) for
 * the layers (96 with full recomputation, + 4 B s^2 h l for selective's
 * core-attention rerun) plus 6 B s h V for the logit layer, which is never
 * recomputed: the paper's eq. (3), 96 B s l h^2 (1 + s/6h + V/16lh), with
 * full recomputation, and 72 B s l h^2 (1 + s/6h + V/12lh) without.
 * recompute: PTDP_RECOMPUTE_* (0: none). With the Llama family's blocks the
 * same count term by term (QKV of (a + 2g) h/a rows, SwiGLU's three GEMMs). */
double ptdp_gpt_flops_per_iter(const ptdp_gpt_config *cfg, int64_t global_batch, int recompute);
/* Megatron-LM's num_floating_point_operations for this GPT (dense MLP of
 * ffn_hidden, x 3/2 with SwiGLU; g key/value groups; causal attention
 * counted at half the s x s products, padded vocabulary), what
 * --log-throughput reports: 12 B s l h^2 ((1 + g/a + s/2h) + ffn/h + Vp/2lh);
 * no recomputation term. */
double ptdp_gpt_megatron_flops(const ptdp_gpt_config *cfg, int64_t global_batch);

/* ---- generation (generate.c) ------------------------------------------------ */
/* Incremental decoding of a GPT with a KV cache, on top of a
 * ptdp_gpt_chunk that holds the whole model (pre && post, no pipeline), and
 * token sampling (greedy, temperature, top-k, top-p).
 *
 * Tensor parallelism: each of the t ranks of the tensor group holds al = a/t
 * heads of the cache and its slice [v0, v0+Vl) of the padded vocabulary; the
 * embedding and the row-parallel outputs are all-reduced exactly as in
 * gpt.c, and the slices of the logits are combined (zero-filled all-reduce)
 * so every rank sees the identical full logits and, with the same seed,
 * samples the identical token.
 *
 * Memory: ptdp_generator_init plans the cache and the work buffers from
 * (cfg, t, max_len) and allocates them once (backend memory through the
 * chunk's backend, host memory for logits and sampling); prefill and decode
 * allocate nothing. KV cache bytes: 2 * l * max_len * h/t * 4 per rank
 * (ptdp_generator_cache_bytes).
 *
 * Not here: batched generation (one sequence), pipeline parallelism,
 * beam search, repetition penalties, stopping on an end-of-text token (the
 * caller decides). */
typedef struct {
    float temperature; /* 0: greedy (argmax); default 1 */
    int64_t top_k;     /* keep the k most likely tokens; 0: off */
    float top_p;       /* nucleus: smallest set whose probability >= top_p; 1: off */
    uint64_t seed;     /* the sampling stream (same on every rank) */
} ptdp_sampling_params;

ptdp_sampling_params ptdp_sampling_default_params(void);

typedef struct ptdp_generator ptdp_generator;

/* Rows a prompt is processed in at once (bounds the work buffers). */
#define PTDP_GENERATE_PREFILL_CHUNK 64

/* KV-cache bytes on one rank for (cfg, t, max_len). */
size_t ptdp_generator_cache_bytes(const ptdp_gpt_config *cfg, int t, int64_t max_len);

/* Plans and allocates a generator for sequences of up to max_len tokens
 * (prompt + generated) over `chunk`, which must hold the whole model (pre
 * and post) and stays owned by the caller, as do cfg and tp (tp may be NULL
 * for t = 1; else it must be the chunk's tensor group). Errors:
 * PTDP_ECONFIG when max_len < 1 or exceeds cfg->max_positions (message names
 * the limit), PTDP_ENOMEM. Local; no communication. */
int ptdp_generator_init(ptdp_generator **out, ptdp_gpt_chunk *chunk, const ptdp_gpt_config *cfg,
                        ptdp_group *tp, int64_t max_len);
void ptdp_generator_free(ptdp_generator *g); /* NULL is a no-op */

/* Empties the cache (a new sequence); the sampling stream continues. */
void ptdp_generator_reset(ptdp_generator *g);
/* Tokens in the cache. */
int64_t ptdp_generator_len(const ptdp_generator *g);

/* Appends n tokens (the prompt; or any continuation) to the cache and, when
 * logits is non-NULL, points *logits at the full logits [Vp] predicted after
 * the last of them (host memory owned by g, valid until the next call;
 * entries >= V are -inf). Errors, with nothing changed: PTDP_EINVAL for
 * n < 1, a token outside [0, V), or len + n > max_len. Collective over the
 * tensor group: every member calls with the same tokens. Blocks. */
int ptdp_generator_prefill(ptdp_generator *g, const int32_t *tokens, int64_t n,
                           const float **logits);
/* The same for one token (the decode step). */
int ptdp_generator_next_logits(ptdp_generator *g, int32_t token, const float **logits);

/* Draws the next token from full logits [Vp] (only ids < V take part) with
 * sp; draw `draw` of the stream (seed) decides, so equal logits, params and
 * draw give the equal token on every rank. Uses g's host scratch; local. */
int32_t ptdp_generator_sample(ptdp_generator *g, const float *logits,
                              const ptdp_sampling_params *sp, uint64_t draw);

/* The sampler without a generator: idx [V] and prob [V] are caller scratch. */
int32_t ptdp_sample_logits(const float *logits, int64_t V, const ptdp_sampling_params *sp,
                           uint64_t draw, int32_t *idx, float *prob);

#ifdef __cplusplus
}
#endif

#endif
