/* generate.h - incremental decoding of a GPT with a KV cache, on top of a
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
 * chunk's ops, host memory for logits and sampling); prefill and decode
 * allocate nothing. KV cache bytes: 2 * l * max_len * h/t * 4 per rank
 * (ptdp_generator_cache_bytes).
 *
 * Not here: batched generation (one sequence), pipeline parallelism,
 * beam search, repetition penalties, stopping on an end-of-text token (the
 * caller decides). */
#ifndef PTDP_GENERATE_H
#define PTDP_GENERATE_H

#include <stdint.h>

#include "comm/comm.h"
#include "model/model.h"

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
int ptdp_generator_init(ptdp_generator **out, ptdp_gpt_chunk *chunk, const ptdp_gpt_config *cfg, ptdp_group *tp,
                        int64_t max_len);
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
int ptdp_generator_prefill(ptdp_generator *g, const int32_t *tokens, int64_t n, const float **logits);
/* The same for one token (the decode step). */
int ptdp_generator_next_logits(ptdp_generator *g, int32_t token, const float **logits);

/* Draws the next token from full logits [Vp] (only ids < V take part) with
 * sp; draw `draw` of the stream (seed) decides, so equal logits, params and
 * draw give the equal token on every rank. Uses g's host scratch; local. */
int32_t ptdp_generator_sample(ptdp_generator *g, const float *logits, const ptdp_sampling_params *sp,
                              uint64_t draw);

/* The sampler without a generator: idx [V] and prob [V] are caller scratch. */
int32_t ptdp_sample_logits(const float *logits, int64_t V, const ptdp_sampling_params *sp, uint64_t draw,
                           int32_t *idx, float *prob);

#endif
