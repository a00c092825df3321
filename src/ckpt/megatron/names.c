/* names.c - Megatron-LM's parameter names and ptdp's: Megatron-Core's local
 * layer spec, Transformer Engine's fused norms and legacy Megatron's nested
 * names, each mapped to ptdp's global parameter names (one table for the
 * import and the export). Not here: tensor-parallel splits and shapes
 * (import.c, export.c). */
#include "ckpt/megatron/megatron_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A layer parameter's names: ptdp's (after "layers.i."), Megatron-Core's
 * local spec, Transformer Engine's fused norms, legacy Megatron's. */
static const struct {
    const char *ptdp, *core, *te, *legacy;
} layer_names[] = {
    {"input_layernorm.weight", "input_layernorm.weight",
     "self_attention.linear_qkv.layer_norm_weight", "input_layernorm.weight"},
    {"input_layernorm.bias", "input_layernorm.bias", "self_attention.linear_qkv.layer_norm_bias",
     "input_layernorm.bias"},
    {"self_attention.query_key_value.weight", "self_attention.linear_qkv.weight", NULL,
     "self_attention.query_key_value.weight"},
    {"self_attention.query_key_value.bias", "self_attention.linear_qkv.bias", NULL,
     "self_attention.query_key_value.bias"},
    {"self_attention.dense.weight", "self_attention.linear_proj.weight", NULL,
     "self_attention.dense.weight"},
    {"self_attention.dense.bias", "self_attention.linear_proj.bias", NULL,
     "self_attention.dense.bias"},
    {"post_attention_layernorm.weight", "pre_mlp_layernorm.weight",
     "mlp.linear_fc1.layer_norm_weight", "post_attention_layernorm.weight"},
    {"post_attention_layernorm.bias", "pre_mlp_layernorm.bias", "mlp.linear_fc1.layer_norm_bias",
     "post_attention_layernorm.bias"},
    {"mlp.dense_h_to_4h.weight", "mlp.linear_fc1.weight", NULL, "mlp.dense_h_to_4h.weight"},
    {"mlp.dense_h_to_4h.bias", "mlp.linear_fc1.bias", NULL, "mlp.dense_h_to_4h.bias"},
    {"mlp.dense_4h_to_h.weight", "mlp.linear_fc2.weight", NULL, "mlp.dense_4h_to_h.weight"},
    {"mlp.dense_4h_to_h.bias", "mlp.linear_fc2.bias", NULL, "mlp.dense_4h_to_h.bias"},
};
#define NLAYER_NAMES (int)(sizeof layer_names / sizeof layer_names[0])

const char *ptdp__megatron_core_name(const char *ptdp_suffix) {
    for (int i = 0; i < NLAYER_NAMES; i++)
        if (!strcmp(layer_names[i].ptdp, ptdp_suffix)) return layer_names[i].core;
    return NULL;
}

int ptdp__megatron_classify(const char *name, char *out, size_t cap, int64_t *local) {
    *local = -1;
    size_t n = strlen(name);
    if (n >= 12 && !strcmp(name + n - 12, "_extra_state"))
        return PTDP__MEG_IGNORE; /* TE's fp8 metadata */
    static const char *const lm = "language_model.";
    const char *s = !strncmp(name, lm, strlen(lm)) ? name + strlen(lm) : name;
    const int legacy = s != name;
    if (!strcmp(s, "embedding.word_embeddings.weight") ||
        !strcmp(s, "embedding.position_embeddings.weight")) {
        snprintf(out, cap, "%s", s);
        return PTDP__MEG_PARAM;
    }
    if (!strcmp(name, "output_layer.weight") || !strcmp(name, "word_embeddings_for_head.weight") ||
        !strcmp(name, "language_model.output_layer.weight")) {
        snprintf(out, cap, "embedding.word_embeddings.weight");
        return PTDP__MEG_HEAD;
    }
    static const char *const blocks[] = {"decoder.", "encoder.", "transformer."};
    for (int b = 0; b < 3; b++) {
        size_t bl = strlen(blocks[b]);
        if ((b == 0) == legacy || strncmp(s, blocks[b], bl)) continue;
        const char *r = s + bl;
        if (!strcmp(r, "final_layernorm.weight") || !strcmp(r, "final_layernorm.bias") ||
            !strcmp(r, "final_norm.weight") || !strcmp(r, "final_norm.bias")) {
            snprintf(out, cap, "final_layernorm.%s", strrchr(r, '.') + 1);
            return PTDP__MEG_PARAM;
        }
        char *end;
        if (strncmp(r, "layers.", 7)) return PTDP__MEG_UNKNOWN;
        long long li = strtoll(r + 7, &end, 10);
        if (end == r + 7 || *end != '.' || li < 0 || li > 1000000) return PTDP__MEG_UNKNOWN;
        const char *suffix = end + 1;
        char fixed[160];
        if (legacy && !strncmp(suffix, "attention.", 10)) { /* before self_attention */
            snprintf(fixed, sizeof fixed, "self_%s", suffix);
            suffix = fixed;
        }
        for (int i = 0; i < NLAYER_NAMES; i++) {
            const char *cand[3] = {legacy ? NULL : layer_names[i].core,
                                   legacy ? NULL : layer_names[i].te,
                                   legacy ? layer_names[i].legacy : NULL};
            for (int k = 0; k < 3; k++)
                if (cand[k] && !strcmp(suffix, cand[k])) {
                    *local = li;
                    snprintf(out, cap, "%s", layer_names[i].ptdp);
                    return PTDP__MEG_PARAM;
                }
        }
        return PTDP__MEG_UNKNOWN;
    }
    return PTDP__MEG_UNKNOWN;
}
