/* decode_attn.h - internal: the one kernel incremental decoding needs that
 * the ops table (kernels.h) lacks: a softmax over attention scores whose
 * causal mask is offset by the tokens already in the KV cache. Used by
 * src/model/generate.c only. It runs on host memory (the CPU backend); a GPU
 * backend will need its counterpart in its table before generate.c can run
 * there. */
#ifndef PTDP_KERNELS_DECODE_ATTN_H
#define PTDP_KERNELS_DECODE_ATTN_H

#include <stdint.h>

/* In place on scores S [n, L] (row stride L): row i is the query at absolute
 * position pos0 + i, which may see keys 0..pos0+i. Each row becomes
 * softmax(scale * S[i, 0..pos0+i]) with zeros at the masked keys.
 * Requires L >= pos0 + n. Single thread per call; rows are short. */
void ptdp__decode_softmax(float *S, int64_t n, int64_t L, int64_t pos0, float scale);

#endif
