/* megatron_internal.h - what the files of src/ckpt/megatron share: the
 * mapping between Megatron-LM's parameter names and ptdp's (names.c). */
#ifndef PTDP_CKPT_MEGATRON_INTERNAL_H
#define PTDP_CKPT_MEGATRON_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Megatron-Core's local-spec name of a layer parameter, given ptdp's name
 * after "layers.i." ("self_attention.query_key_value.weight" ->
 * "self_attention.linear_qkv.weight"), or NULL when there is none. */
const char *ptdp__megatron_core_name(const char *ptdp_suffix);

/* What a Megatron state-dict name is to ptdp. */
enum {
    PTDP__MEG_UNKNOWN, /* not a parameter of a GPT ptdp can hold */
    PTDP__MEG_IGNORE,  /* Transformer Engine's fp8 metadata (*._extra_state) */
    PTDP__MEG_PARAM,   /* a parameter: its ptdp name is written out */
    PTDP__MEG_HEAD,    /* the last stage's copy of the tied word embedding */
};
/* Megatron name (Megatron-Core, Transformer Engine, or legacy with or
 * without "language_model.") -> ptdp name in out[cap] and the chunk-local
 * layer number in *local (-1 outside layers). Returns a PTDP__MEG_* kind. */
int ptdp__megatron_classify(const char *name, char *out, size_t cap, int64_t *local);

#endif
