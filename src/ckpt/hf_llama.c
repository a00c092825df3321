/* hf_llama.c - Hugging Face LlamaForCausalLM safetensors names and layouts
 * for ptdp's parameter specs (hf.c dispatches here for the Llama family).
 *
 * Mapping (ptdp spec, [out, in] -> HF Llama, nn.Linear's [out, in]: no
 * transposition anywhere):
 *   embedding.word_embeddings.weight [Vp,h]   model.embed_tokens.weight [V,h]
 *   layers.i.input_layernorm.weight           model.layers.i.input_layernorm.weight
 *   layers.i.self_attention.query_key_value   model.layers.i.self_attn.{q,k,v}_proj
 *       (three HF tensors: ptdp's rows per key/value group [g][a/g q heads, k, v][hd],
 *       HF's q_proj [a*hd, h] by query head, k_proj and v_proj [g*hd, h] by group)
 *   layers.i.self_attention.dense             model.layers.i.self_attn.o_proj
 *   layers.i.post_attention_layernorm.weight  model.layers.i.post_attention_layernorm.weight
 *   layers.i.mlp.gate_proj / up_proj          model.layers.i.mlp.gate_proj / up_proj
 *   layers.i.mlp.dense_4h_to_h                model.layers.i.mlp.down_proj
 *   final_layernorm.weight                    model.norm.weight
 *   output_layer.weight [Vp,h] (untied)       lm_head.weight [V,h]
 * Rotary embeddings: ptdp, Megatron and Hugging Face all rotate halves of a
 * head (dims i and i + hd/2), so q_proj and k_proj rows need no permutation
 * (Meta's original files interleave pairs; Hugging Face's conversion already
 * permuted them). Not here: biases (Llama has none: --disable-bias-linear is
 * required), partial rotary dims. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt/hf.h"

enum { L_COPY, L_VOCAB, L_QKV };

static int classify(const ptdp_param_spec *sp, int part, char *hf, size_t cap) {
    const char *n = sp->name;
    int layer = -1;
    char rest[96];
    if (sp->role == PTDP_ROLE_EMBEDDING) {
        snprintf(hf, cap, "model.embed_tokens.weight");
        return L_VOCAB;
    }
    if (!strcmp(n, "output_layer.weight")) {
        snprintf(hf, cap, "lm_head.weight");
        return L_VOCAB;
    }
    if (!strcmp(n, "final_layernorm.weight")) {
        snprintf(hf, cap, "model.norm.weight");
        return L_COPY;
    }
    PTDP_ASSERT_MSG(sscanf(n, "layers.%d.%95s", &layer, rest) == 2, n);
    static const char *const qkv[3] = {"q_proj", "k_proj", "v_proj"};
    if (!strcmp(rest, "self_attention.query_key_value.weight")) {
        snprintf(hf, cap, "model.layers.%d.self_attn.%s.weight", layer, qkv[part]);
        return L_QKV;
    }
    static const struct {
        const char *ours, *theirs;
    } tab[] = {
        {"input_layernorm.weight", "input_layernorm.weight"},
        {"self_attention.dense.weight", "self_attn.o_proj.weight"},
        {"post_attention_layernorm.weight", "post_attention_layernorm.weight"},
        {"mlp.gate_proj.weight", "mlp.gate_proj.weight"},
        {"mlp.up_proj.weight", "mlp.up_proj.weight"},
        {"mlp.dense_4h_to_h.weight", "mlp.down_proj.weight"},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(rest, tab[i].ours)) {
            snprintf(hf, cap, "model.layers.%d.%s", layer, tab[i].theirs);
            return L_COPY;
        }
    PTDP_ASSERT_MSG(0, n);
    return L_COPY;
}

int ptdp__hf_llama_parts(const ptdp_param_spec *sp) {
    return strstr(sp->name, "query_key_value") ? 3 : 1;
}

int ptdp__hf_llama_name(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, int part, char *name,
                        size_t cap, int64_t shape[2]) {
    const int k = classify(sp, part, name, cap);
    shape[0] = sp->gshape[0];
    shape[1] = sp->gshape[1];
    if (k == L_VOCAB) shape[0] = cfg->vocab;
    if (k == L_QKV) {
        const int64_t hd = cfg->hidden / cfg->heads;
        shape[0] = (part == 0 ? cfg->heads : ptdp_gpt_groups(cfg)) * hd;
    }
    return sp->ndim;
}

/* ptdp's QKV row r of part `part` (0 q, 1 k, 2 v): the HF row it holds, or -1. */
static int64_t qkv_row(const ptdp_gpt_config *cfg, int64_t r, int part) {
    const int64_t hd = cfg->hidden / cfg->heads, per = cfg->heads / ptdp_gpt_groups(cfg);
    const int64_t gw = (per + 2) * hd, grp = r / gw, slot = (r % gw) / hd, e = r % hd;
    if (slot < per) return part == 0 ? (grp * per + slot) * hd + e : -1;
    if (slot == per) return part == 1 ? grp * hd + e : -1;
    return part == 2 ? grp * hd + e : -1;
}

void ptdp__hf_llama_convert(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, int part,
                            float *ptdp, float *hf, int to_ptdp) {
    char name[128];
    const int k = classify(sp, part, name, sizeof name);
    const int64_t R = sp->gshape[0], C = sp->gshape[1];
    for (int64_t r = 0; r < R; r++) {
        int64_t src = r;
        if (k == L_QKV) src = qkv_row(cfg, r, part);
        if (k == L_VOCAB && r >= cfg->vocab) src = -1;
        if (src < 0) {
            if (to_ptdp && k == L_VOCAB) memset(ptdp + r * C, 0, sizeof(float) * (size_t)C);
            continue;
        }
        if (to_ptdp)
            memcpy(ptdp + r * C, hf + src * C, sizeof(float) * (size_t)C);
        else
            memcpy(hf + src * C, ptdp + r * C, sizeof(float) * (size_t)C);
    }
}

/* Tensors a Llama file may hold beside the parameters: rotary frequency
 * buffers of older exports, a tied lm_head, anything outside Llama's names. */
static int llama_extra_ok(const ptdp_st_tensor *t, const ptdp_st_tensor *emb) {
    if (strncmp(t->name, "model.", 6) && strncmp(t->name, "lm_head.", 8)) return 1;
    if (strstr(t->name, "rotary_emb.inv_freq")) return 1;
    if (!strcmp(t->name, "lm_head.weight") && emb && t->ndim == 2 && t->shape[0] == emb->shape[0] &&
        t->shape[1] == emb->shape[1])
        return 1;
    return 0;
}

int ptdp__hf_llama_check(const char *path, const ptdp_gpt_config *cfg, int allow_extra) {
    ptdp_st_file *f = NULL;
    int rc = ptdp_st_open(&f, path);
    if (rc) return rc;
    const int nt = ptdp_st_count(f);
    char *used = calloc((size_t)nt + 1, 1);
    if (!used) {
        ptdp_st_close(f);
        return ptdp_errorf(PTDP_ENOMEM, "out of memory checking %s", path);
    }
    if (ptdp_st_find(f, "transformer.wte.weight") || ptdp_st_find(f, "wte.weight")) {
        rc = ptdp_errorf(PTDP_EFORMAT,
                         "%s is a GPT-2 file (transformer.wte.weight) but the model flags give a "
                         "Llama-family model (--normalization RMSNorm, --swiglu, "
                         "--position-embedding-type rope); drop those flags to load it",
                         path);
        goto out;
    }
    const int64_t h = cfg->hidden, hd = h / cfg->heads, g = ptdp_gpt_groups(cfg),
                  f_ = cfg->ffn_hidden;
    const int per_layer = 9;
    const int64_t nexp = 2 + (cfg->untie ? 1 : 0) + cfg->num_layers * per_layer;
    for (int64_t e = 0; e < nexp && rc == PTDP_OK; e++) {
        char nm[128];
        int64_t shape[2] = {h, 0};
        int nd = 1;
        if (e == 0) {
            snprintf(nm, sizeof nm, "model.embed_tokens.weight");
            nd = 2, shape[0] = cfg->vocab, shape[1] = h;
        } else if (e == 1) {
            snprintf(nm, sizeof nm, "model.norm.weight");
        } else if (e == 2 && cfg->untie) {
            snprintf(nm, sizeof nm, "lm_head.weight");
            nd = 2, shape[0] = cfg->vocab, shape[1] = h;
        } else {
            const int64_t i = e - 2 - (cfg->untie ? 1 : 0), l = i / per_layer, k = i % per_layer;
            static const char *const names[] = {
                "input_layernorm.weight",  "self_attn.q_proj.weight",
                "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                "mlp.gate_proj.weight",    "mlp.up_proj.weight",
                "mlp.down_proj.weight"};
            const int64_t rows[] = {h, cfg->heads * hd, g * hd, g * hd, h, h, f_, f_, h};
            const int64_t cols[] = {0, h, h, h, h, 0, h, h, f_};
            snprintf(nm, sizeof nm, "model.layers.%lld.%s", (long long)l, names[k]);
            shape[0] = rows[k];
            shape[1] = cols[k];
            nd = cols[k] ? 2 : 1;
        }
        const ptdp_st_tensor *t = ptdp_st_find(f, nm);
        if (!t) {
            rc = ptdp_errorf(PTDP_ENOTFOUND,
                             "%s: tensor '%s' is missing (is this a Llama safetensors file of "
                             "--num-layers %lld%s?)",
                             path, nm, (long long)cfg->num_layers,
                             e == 2 && cfg->untie ? " with untied embeddings" : "");
            break;
        }
        if (t->ndim != nd || t->shape[0] != shape[0] || (nd == 2 && t->shape[1] != shape[1])) {
            rc = ptdp_errorf(PTDP_EFORMAT,
                             "%s: tensor '%s' has shape [%lld%s%lld] but the model flags need "
                             "[%lld%s%lld] (check --hidden-size/--num-attention-heads/"
                             "--num-query-groups/--ffn-hidden-size and the vocabulary size)",
                             path, t->name, (long long)t->shape[0], t->ndim > 1 ? "," : "",
                             t->ndim > 1 ? (long long)t->shape[1] : 0LL, (long long)shape[0],
                             nd > 1 ? "," : "", nd > 1 ? (long long)shape[1] : 0LL);
            break;
        }
        used[t - ptdp_st_get(f, 0)] = 1;
    }
    if (rc == PTDP_OK && !allow_extra) {
        const ptdp_st_tensor *emb = ptdp_st_find(f, "model.embed_tokens.weight");
        for (int i = 0; i < nt; i++) {
            const ptdp_st_tensor *t = ptdp_st_get(f, i);
            if (used[i] || llama_extra_ok(t, emb)) continue;
            rc = ptdp_errorf(PTDP_EFORMAT,
                             "%s: tensor '%s' of the file is not part of the model (a deeper "
                             "model than --num-layers %lld, or --untie-embeddings-and-output-"
                             "weights missing?); give --allow-extra-tensors to ignore it",
                             path, t->name, (long long)cfg->num_layers);
            break;
        }
    }
out:
    free(used);
    ptdp_st_close(f);
    return rc;
}

int ptdp__hf_llama_config_json(FILE *cf, const ptdp_gpt_config *cfg) {
    return fprintf(
        cf,
        "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":%lld,"
        "\"hidden_size\":%lld,\"intermediate_size\":%lld,\"num_hidden_layers\":%lld,"
        "\"num_attention_heads\":%lld,\"num_key_value_heads\":%lld,"
        "\"max_position_embeddings\":%lld,\"hidden_act\":\"silu\",\"rms_norm_eps\":%.7g,"
        "\"rope_theta\":%.17g,\"attention_bias\":false,\"mlp_bias\":false,"
        "\"tie_word_embeddings\":%s,\"torch_dtype\":\"float32\"}\n",
        (long long)cfg->vocab, (long long)cfg->hidden, (long long)cfg->ffn_hidden,
        (long long)cfg->num_layers, (long long)cfg->heads, (long long)ptdp_gpt_groups(cfg),
        (long long)cfg->max_positions, (double)cfg->ln_eps, cfg->rotary_base,
        cfg->untie ? "false" : "true");
}
