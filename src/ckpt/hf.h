/* hf.h - Hugging Face GPT-2 and Llama weights: the mapping between ptdp's
 * parameter specs and HF's tensors, used by `ptdp train --init-from` and `ptdp
 * export`. The container is safetensors (format/format.h). GPT-2's mapping
 * is below; Llama's (LlamaForCausalLM) is in hf_llama.c's header.
 *
 * Mapping (ptdp spec, stored [out, in] -> HF GPT-2, stored [in, out]):
 *   embedding.word_embeddings.weight [Vp,h]   transformer.wte.weight [V,h]
 *                                             (padding rows dropped/zeroed)
 *   embedding.position_embeddings.weight      transformer.wpe.weight
 *   layers.i.input_layernorm.*                transformer.h.i.ln_1.*
 *   layers.i.self_attention.query_key_value   transformer.h.i.attn.c_attn (transposed; ptdp's
 *       rows are per head [a][q|k|v][hd], HF's columns are [q|k|v][a][hd])
 *   layers.i.self_attention.dense             transformer.h.i.attn.c_proj (transposed)
 *   layers.i.post_attention_layernorm.*       transformer.h.i.ln_2.*
 *   layers.i.mlp.dense_h_to_4h                transformer.h.i.mlp.c_fc (transposed)
 *   layers.i.mlp.dense_4h_to_h                transformer.h.i.mlp.c_proj (transposed)
 *   final_layernorm.*                         transformer.ln_f.*
 * Files without the "transformer." prefix are accepted on import. */
#ifndef PTDP_CKPT_HF_H
#define PTDP_CKPT_HF_H

#include <stddef.h>
#include <stdint.h>

#include "../comm/comm.h"
#include "../format/format.h"
#include "../model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which Hugging Face family holds the model cfg describes: 0 GPT-2
 * (GPT2LMHeadModel: LayerNorm, GeLU, learned positions, multi-head
 * attention, biases, tied), 1 Llama (LlamaForCausalLM: --normalization
 * RMSNorm, --swiglu, --position-embedding-type rope with --rotary-percent 1,
 * --disable-bias-linear; any --num-query-groups, tied or untied). A mix of
 * the two is PTDP_ECONFIG naming the flags (no HF class holds it). The Llama
 * mapping is in hf_llama.c's header. */
int ptdp_hf_family(const ptdp_gpt_config *cfg);
/* HF tensors a spec maps to: 3 for Llama's QKV weight (q_proj, k_proj,
 * v_proj), else 1. */
int ptdp_hf_parts(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg);
/* HF name and shape of a spec's tensor (part 0 of ptdp_hf_parts); returns
 * the number of dims. _part: of its part-th tensor. */
int ptdp_hf_name(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, char *name, size_t cap,
                 int64_t shape[2]);
int ptdp_hf_name_part(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, int part, char *name,
                      size_t cap, int64_t shape[2]);

/* Fills `global` (the spec's full tensor in ptdp's layout, gshape) from the
 * HF file. PTDP_ENOTFOUND / PTDP_EFORMAT with a message naming the file and
 * tensor when it is missing or its shape does not match the model flags. */
int ptdp_hf_read_global(const ptdp_st_file *f, const ptdp_param_spec *sp,
                        const ptdp_gpt_config *cfg, float *global);
/* Converts a full tensor in ptdp's layout to the HF layout (caller-owned
 * hf buffer of prod(shape) floats from ptdp_hf_name). */
void ptdp_hf_from_global(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, const float *global,
                         float *hf);
void ptdp_hf_from_global_part(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, int part,
                              const float *global, float *hf);

/* Loads this rank's shards of every parameter of `chunk` from an HF GPT-2
 * safetensors file. Errors as above; nothing is half-loaded into the chunk
 * when a tensor fails (all tensors are checked before any upload). Local: no communication; when it
 * fails on some ranks only, the others do not learn it (agree before the next collective, as
 * ptdp_run_setup does). */
int ptdp_hf_load_chunk(ptdp_gpt_chunk *chunk, const ptdp_gpt_config *cfg, int tp, const char *path);

/* Checks an HF GPT-2 safetensors file against the full model `cfg` before
 * any load: every tensor the model needs is present with its shape, and
 * (unless allow_extra) every tensor of the file is used, apart from the
 * causal-mask buffers (`*.attn.bias`, `*.attn.masked_bias`), a tied
 * `lm_head.weight` and names outside GPT-2's (`transformer.`, `h.`, `wte.`,
 * `wpe.`, `ln_f.`, `lm_head.`), e.g. reference data stored beside a model. The file cannot tell the
 * head count (QKV is [h, 3h] for any a): callers compare it with the config beside the file.
 * Errors: PTDP_ENOTFOUND / PTDP_EFORMAT naming the file, the tensor and the
 * flag to change; PTDP_EIO. Any rank may call it. */
int ptdp_hf_check(const char *path, const ptdp_gpt_config *cfg, int allow_extra);

/* Writes the whole model as an HF GPT-2 safetensors file plus config.json
 * beside it (when config_json is non-NULL), every tensor in `dtype`: F32,
 * BF16 or F16 (rounded to nearest even; F16 fails with PTDP_EINVAL, writing
 * nothing, when a value is beyond its range). Collective over `model` (the
 * tensor x pipeline group of one data-parallel replica): every member sends
 * the shards of its `nchunks` chunks (tensor-parallel rank `tp`, size `t`)
 * to the group's rank 0, which assembles the global tensors and writes.
 * PTDP_EIO / PTDP_ENOMEM on rank 0 when writing fails. */
int ptdp_hf_export(ptdp_gpt_chunk *const *chunks, int nchunks, const ptdp_gpt_config *cfg,
                   ptdp_group *model, int tp, int t, const char *path, const char *config_json,
                   ptdp_st_dtype dtype);

#ifdef __cplusplus
}
#endif

#endif
