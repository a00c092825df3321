/* hf.c - Hugging Face GPT-2 safetensors import/export for ptdp's parameter
 * specs: names, the [in, out] transposition and the QKV column order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"

typedef enum { MAP_COPY, MAP_T, MAP_QKV_W, MAP_QKV_B, MAP_VOCAB } map_kind;

static map_kind classify(const char *n, char *hf, size_t cap) {
    int layer = -1;
    char rest[96];
    if (!strcmp(n, "embedding.word_embeddings.weight")) {
        snprintf(hf, cap, "transformer.wte.weight");
        return MAP_VOCAB;
    }
    if (!strcmp(n, "embedding.position_embeddings.weight")) {
        snprintf(hf, cap, "transformer.wpe.weight");
        return MAP_COPY;
    }
    if (!strncmp(n, "final_layernorm.", 16)) {
        snprintf(hf, cap, "transformer.ln_f.%s", n + 16);
        return MAP_COPY;
    }
    PTDP_ASSERT(sscanf(n, "layers.%d.%95s", &layer, rest) == 2);
    static const struct {
        const char *ours, *theirs;
        map_kind kind;
    } tab[] = {
        {"input_layernorm.weight", "ln_1.weight", MAP_COPY},
        {"input_layernorm.bias", "ln_1.bias", MAP_COPY},
        {"self_attention.query_key_value.weight", "attn.c_attn.weight", MAP_QKV_W},
        {"self_attention.query_key_value.bias", "attn.c_attn.bias", MAP_QKV_B},
        {"self_attention.dense.weight", "attn.c_proj.weight", MAP_T},
        {"self_attention.dense.bias", "attn.c_proj.bias", MAP_COPY},
        {"post_attention_layernorm.weight", "ln_2.weight", MAP_COPY},
        {"post_attention_layernorm.bias", "ln_2.bias", MAP_COPY},
        {"mlp.dense_h_to_4h.weight", "mlp.c_fc.weight", MAP_T},
        {"mlp.dense_h_to_4h.bias", "mlp.c_fc.bias", MAP_COPY},
        {"mlp.dense_4h_to_h.weight", "mlp.c_proj.weight", MAP_T},
        {"mlp.dense_4h_to_h.bias", "mlp.c_proj.bias", MAP_COPY},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(rest, tab[i].ours)) {
            snprintf(hf, cap, "transformer.h.%d.%s", layer, tab[i].theirs);
            return tab[i].kind;
        }
    PTDP_ASSERT_MSG(0, n);
    return MAP_COPY;
}

int ptdp_hf_name(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, char *name, size_t cap, int64_t shape[2]) {
    map_kind k = classify(sp->name, name, cap);
    shape[0] = sp->gshape[0];
    shape[1] = sp->gshape[1];
    if (k == MAP_T || k == MAP_QKV_W) {
        shape[0] = sp->gshape[1];
        shape[1] = sp->gshape[0];
    }
    if (k == MAP_VOCAB) shape[0] = cfg->vocab;
    return sp->ndim;
}

/* HF column of ptdp's QKV row r: r = head*3*hd + which*hd + e. */
static int64_t qkv_col(int64_t r, int64_t h, int64_t hd) {
    int64_t head = r / (3 * hd), which = (r / hd) % 3, e = r % hd;
    return which * h + head * hd + e;
}

/* ptdp[r][c] = hf[...] for every kind; `to_ptdp` picks the direction. */
static void convert(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, map_kind k, float *ptdp, float *hf,
                    int to_ptdp) {
    const int64_t R = sp->gshape[0], C = sp->gshape[1], hd = cfg->hidden / cfg->heads;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            int64_t src;
            switch (k) {
            case MAP_T:
                src = c * R + r;
                break;
            case MAP_QKV_W:
                src = c * R + qkv_col(r, cfg->hidden, hd);
                break;
            case MAP_QKV_B:
                src = qkv_col(r, cfg->hidden, hd);
                break;
            case MAP_VOCAB:
                if (r >= cfg->vocab) {
                    if (to_ptdp) ptdp[r * C + c] = 0.0f;
                    continue;
                }
                src = r * C + c;
                break;
            default:
                src = r * C + c;
                break;
            }
            if (to_ptdp)
                ptdp[r * C + c] = hf[src];
            else
                hf[src] = ptdp[r * C + c];
        }
}

int ptdp_hf_read_global(const ptdp_st_file *f, const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, float *global) {
    char name[128];
    int64_t shape[2];
    int nd = ptdp_hf_name(sp, cfg, name, sizeof name, shape);
    const ptdp_st_tensor *t = ptdp_st_find(f, name);
    if (!t) t = ptdp_st_find(f, name + strlen("transformer."));
    if (!t)
        return ptdp_errorf(PTDP_ENOTFOUND, "%s: tensor '%s' is missing (is this a GPT-2 safetensors file?)",
                           ptdp_st_path(f), name);
    int ok = t->ndim == nd && t->shape[0] == shape[0] && (nd == 1 || t->shape[1] == shape[1]);
    if (!ok) {
        char got[64] = "", want[64];
        for (int i = 0; i < t->ndim && i < 4; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? "," : "", (long long)t->shape[i]);
        if (nd == 1)
            snprintf(want, sizeof want, "%lld", (long long)shape[0]);
        else
            snprintf(want, sizeof want, "%lld,%lld", (long long)shape[0], (long long)shape[1]);
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: tensor '%s' has shape [%s] but the model flags need [%s] "
                           "(check --num-layers/--hidden-size/--num-attention-heads/--max-position-embeddings "
                           "and the vocabulary size)",
                           ptdp_st_path(f), t->name, got, want);
    }
    int64_t n = shape[0] * (nd == 2 ? shape[1] : 1);
    float *hf = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!hf) return ptdp_errorf(PTDP_ENOMEM, "out of memory reading %s", name);
    int rc = ptdp_st_read_f32(f, t->name, hf, n);
    if (rc == PTDP_OK) convert(sp, cfg, classify(sp->name, name, sizeof name), global, hf, 1);
    free(hf);
    return rc;
}

void ptdp_hf_from_global(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, const float *global, float *hf) {
    char name[128];
    convert(sp, cfg, classify(sp->name, name, sizeof name), (float *)global, hf, 0);
}

int ptdp_hf_load_chunk(ptdp_gpt_chunk *chunk, const ptdp_gpt_config *cfg, int tp, const char *path) {
    ptdp_st_file *f = NULL;
    int rc = ptdp_st_open(&f, path);
    if (rc) return rc;
    int n;
    const ptdp_param_spec *specs = ptdp_gpt_chunk_specs(chunk, &n);
    int64_t total = ptdp_gpt_chunk_numel(chunk);
    float *host = calloc((size_t)total + 1, sizeof(float));
    if (!host) {
        ptdp_st_close(f);
        return ptdp_errorf(PTDP_ENOMEM, "out of memory loading %s", path);
    }
    for (int i = 0; i < n && rc == PTDP_OK; i++) {
        const ptdp_param_spec *sp = &specs[i];
        float *global = malloc(sizeof(float) * (size_t)(sp->gshape[0] * sp->gshape[1]));
        if (!global) {
            rc = ptdp_errorf(PTDP_ENOMEM, "out of memory loading %s", path);
            break;
        }
        rc = ptdp_hf_read_global(f, sp, cfg, global);
        if (rc == PTDP_OK) ptdp_spec_scatter(sp, tp, global, host + sp->offset);
        free(global);
    }
    /* Only a fully read model reaches the chunk. */
    if (rc == PTDP_OK) ptdp_gpt_chunk_upload_params(chunk, host);
    free(host);
    ptdp_st_close(f);
    return rc;
}

int ptdp_hf_export_chunk(ptdp_gpt_chunk *chunk, const ptdp_gpt_config *cfg, ptdp_group *tp, const char *path,
                         const char *config_json) {
    int n;
    const ptdp_param_spec *specs = ptdp_gpt_chunk_specs(chunk, &n);
    int64_t total = ptdp_gpt_chunk_numel(chunk), maxnumel = 1;
    for (int i = 0; i < n; i++) maxnumel = specs[i].numel > maxnumel ? specs[i].numel : maxnumel;
    const int root = tp->rank == 0, t = tp->size;
    float *host = malloc(sizeof(float) * (size_t)total + 64);
    float *gathered = root ? malloc(sizeof(float) * (size_t)(maxnumel * t)) : NULL;
    float *global = root ? malloc(sizeof(float) * (size_t)(maxnumel * t)) : NULL;
    float **hfbuf = calloc((size_t)n, sizeof(float *));
    char (*names)[128] = calloc((size_t)n, 128);
    PTDP_ASSERT_MSG(host && hfbuf && names && (!root || (gathered && global)), "out of memory exporting");
    ptdp_st_writer *w = NULL;
    int rc = root ? ptdp_st_writer_init(&w) : PTDP_OK;
    ptdp_gpt_chunk_download_params(chunk, host);
    for (int i = 0; i < n; i++) {
        const ptdp_param_spec *sp = &specs[i];
        /* every rank takes part in the gather, whatever happened on rank 0 */
        ptdp_gather_f32(tp, host + sp->offset, sp->numel, gathered, 0);
        if (!root || rc != PTDP_OK) continue;
        for (int r = 0; r < t; r++) ptdp_spec_gather(sp, r, gathered + (int64_t)r * sp->numel, global);
        int64_t shape[2];
        int nd = ptdp_hf_name(sp, cfg, names[i], 128, shape);
        hfbuf[i] = malloc(sizeof(float) * (size_t)(shape[0] * shape[1] + 1));
        PTDP_ASSERT_MSG(hfbuf[i], "out of memory exporting");
        ptdp_hf_from_global(sp, cfg, global, hfbuf[i]);
        rc = ptdp_st_writer_add(w, names[i], PTDP_ST_F32, nd, shape, hfbuf[i]);
    }
    if (root && rc == PTDP_OK) rc = ptdp_st_write(w, path);
    if (root && rc == PTDP_OK && config_json) {
        FILE *cf = fopen(config_json, "w");
        if (!cf) {
            rc = ptdp_errorf(PTDP_EIO, "cannot write %s", config_json);
        } else {
            fprintf(cf,
                    "{\"architectures\":[\"GPT2LMHeadModel\"],\"model_type\":\"gpt2\",\"vocab_size\":%lld,"
                    "\"n_positions\":%lld,\"n_embd\":%lld,\"n_layer\":%lld,\"n_head\":%lld,\"n_inner\":null,"
                    "\"activation_function\":\"gelu_new\",\"layer_norm_epsilon\":1e-05,\"tie_word_embeddings\":true}\n",
                    (long long)cfg->vocab, (long long)cfg->max_positions, (long long)cfg->hidden,
                    (long long)cfg->num_layers, (long long)cfg->heads);
            if (fclose(cf) != 0) rc = ptdp_errorf(PTDP_EIO, "cannot write %s", config_json);
        }
    }
    ptdp_st_writer_free(w);
    for (int i = 0; i < n; i++) free(hfbuf[i]);
    free(hfbuf);
    free(names);
    free(host);
    free(gathered);
    free(global);
    return rc;
}
