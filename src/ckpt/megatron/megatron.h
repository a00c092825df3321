/* megatron.h - Megatron-LM's --ckpt-format torch checkpoints, in and out
 * (docs/megatron.md):
 *   DIR/latest_checkpointed_iteration.txt         "N" or "release"
 *   DIR/iter_%07d/mp_rank_TT[_PPP]/model_optim_rng.pt
 * each a torch.save file: a zip of a protocol-2 pickle (data.pkl) and the
 * raw tensor storages (data/KEY), read by a pickle machine that builds data
 * and never imports or runs anything (format/torch.h). Model weights, args,
 * iteration; not the optimizer or RNG states. One process, no MPI. */
#ifndef PTDP_CKPT_MEGATRON_H
#define PTDP_CKPT_MEGATRON_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    /* > 0: override (or supply) the checkpoint's args; the tensor shapes are
     * checked against the result */
    int64_t num_layers, hidden_size, num_attention_heads, ffn_hidden_size;
    int64_t max_position_embeddings, seq_length;
    int64_t vocab_size; /* the real vocabulary; Megatron's padding rows are dropped */
    int64_t make_vocab_size_divisible_by; /* the ptdp checkpoint's padding (128) */
    int overwrite; /* write into a directory that holds checkpoints (--overwrite-checkpoints) */
} ptdp_megatron_import_params;
ptdp_megatron_import_params ptdp_megatron_import_default_params(void);

/* Reads the Megatron checkpoint `src` (any tensor, pipeline and virtual
 * pipeline sizes; Megatron-Core names, Transformer Engine's fused-norm
 * names or legacy names) and writes a ptdp checkpoint (t=1, weights only,
 * "has_optimizer": false) to `dst`, which any layout can --load. Prints a
 * summary to log (may be NULL). A `dst` that already holds a ptdp checkpoint
 * (ptdp_ckpt_newest) is refused (PTDP_ECONFIG, nothing read or written)
 * unless p->overwrite; then an iteration it holds is replaced, and its
 * latest file never moves back (ptdp_ckpt_save). Errors (each naming the
 * file and the problem): PTDP_ENOTFOUND, PTDP_EFORMAT (malformed zip or
 * pickle, missing or misshapen tensors), PTDP_EUNSUPPORTED (a model ptdp
 * cannot represent: GQA, SwiGLU, rotary, RMSNorm, no biases, untied output
 * layer, MoE), PTDP_ECONFIG, PTDP_EIO, PTDP_ENOMEM. */
int ptdp_megatron_import(const char *src, const char *dst, const ptdp_megatron_import_params *p,
                         FILE *log);

typedef struct {
    int t, p;                             /* Megatron's tensor and pipeline sizes to write */
    int64_t make_vocab_size_divisible_by; /* Megatron's padding: a multiple of this x t */
    int overwrite; /* write into a directory that is not empty (--overwrite-checkpoints) */
} ptdp_megatron_export_params;
ptdp_megatron_export_params ptdp_megatron_export_default_params(void);

/* Writes the weights of the ptdp checkpoint `src` (any layout) as a
 * Megatron-LM checkpoint in `dst` with Megatron-Core's local-spec names,
 * t x p files. Errors as above; PTDP_ECONFIG when t or p do not divide the
 * model. */
int ptdp_megatron_export(const char *src, const char *dst, const ptdp_megatron_export_params *p,
                         FILE *log);

#ifdef __cplusplus
}
#endif

#endif
