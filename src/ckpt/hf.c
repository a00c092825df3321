/* hf.c - Hugging Face GPT-2 safetensors import/export for ptdp's parameter
 * specs: names, the [in, out] transposition and the QKV column order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt/hf.h"

int ptdp_hf_family(const ptdp_gpt_config *cfg) {
    const int grouped = ptdp_gpt_groups(cfg) != cfg->heads;
    if (!ptdp_gpt_is_llama(cfg)) return 0;
    if (cfg->rmsnorm && cfg->swiglu && cfg->rope && cfg->no_bias && cfg->rotary_percent == 1.0f)
        return 1;
    return ptdp_errorf(
        PTDP_ECONFIG,
        "Hugging Face weights: the model mixes GPT-2's and Llama's blocks, which neither "
        "GPT2LMHeadModel nor LlamaForCausalLM holds; a Llama needs --normalization RMSNorm "
        "--swiglu --position-embedding-type rope --disable-bias-linear (and --rotary-percent 1), "
        "a GPT-2 none of them%s",
        grouped || cfg->untie ? " nor --num-query-groups/--untie-embeddings-and-output-weights"
                              : "");
}

static int is_llama(const ptdp_gpt_config *cfg) { return ptdp_gpt_is_llama(cfg); }

int ptdp_hf_parts(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg) {
    return is_llama(cfg) ? ptdp__hf_llama_parts(sp) : 1;
}

typedef enum { MAP_COPY, MAP_T, MAP_QKV_W, MAP_QKV_B, MAP_VOCAB } map_kind;

static map_kind classify(const ptdp_param_spec *sp, char *hf, size_t cap) {
    const char *n = sp->name;
    int layer = -1;
    char rest[96];
    if (sp->role == PTDP_ROLE_EMBEDDING) {
        snprintf(hf, cap, "transformer.wte.weight");
        return MAP_VOCAB;
    }
    if (sp->role == PTDP_ROLE_POSITION) {
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

int ptdp_hf_name_part(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, int part, char *name,
                      size_t cap, int64_t shape[2]) {
    if (is_llama(cfg)) return ptdp__hf_llama_name(sp, cfg, part, name, cap, shape);
    return ptdp_hf_name(sp, cfg, name, cap, shape);
}

int ptdp_hf_name(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, char *name, size_t cap,
                 int64_t shape[2]) {
    if (is_llama(cfg)) return ptdp__hf_llama_name(sp, cfg, 0, name, cap, shape);
    map_kind k = classify(sp, name, cap);
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
/* "d0,d1,..." of a shape (at most 4 dimensions) into buf. */
static void fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    buf[0] = 0;
    for (int i = 0; i < ndim && i < 4; i++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%lld", i ? "," : "", (long long)shape[i]);
}

static void convert(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, map_kind k, float *ptdp,
                    float *hf, int to_ptdp) {
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

/* One HF tensor (part) of spec sp into global. */
static int read_part(const ptdp_st_file *f, const ptdp_param_spec *sp, const ptdp_gpt_config *cfg,
                     int part, float *global) {
    char name[128];
    int64_t shape[2];
    int nd = ptdp_hf_name_part(sp, cfg, part, name, sizeof name, shape);
    const ptdp_st_tensor *t = ptdp_st_find(f, name);
    if (!t && !is_llama(cfg)) t = ptdp_st_find(f, name + strlen("transformer."));
    if (!t)
        return ptdp_errorf(PTDP_ENOTFOUND,
                           "%s: tensor '%s' is missing (is this a %s safetensors file?)",
                           ptdp_st_path(f), name, is_llama(cfg) ? "Llama" : "GPT-2");
    int ok = t->ndim == nd && t->shape[0] == shape[0] && (nd == 1 || t->shape[1] == shape[1]);
    if (!ok) {
        char got[96], want[96];
        fmt_shape(got, sizeof got, t->ndim, t->shape);
        fmt_shape(want, sizeof want, nd, shape);
        return ptdp_errorf(
            PTDP_EFORMAT,
            "%s: tensor '%s' has shape [%s] but the model flags need [%s] "
            "(check --num-layers/--hidden-size/--num-attention-heads/--max-position-embeddings "
            "and the vocabulary size)",
            ptdp_st_path(f), t->name, got, want);
    }
    int64_t n = shape[0] * (nd == 2 ? shape[1] : 1);
    float *hf = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!hf) return ptdp_errorf(PTDP_ENOMEM, "out of memory reading %s", name);
    int rc = ptdp_st_read_f32(f, t->name, hf, n);
    if (rc == PTDP_OK) {
        if (is_llama(cfg))
            ptdp__hf_llama_convert(sp, cfg, part, global, hf, 1);
        else
            convert(sp, cfg, classify(sp, name, sizeof name), global, hf, 1);
    }
    free(hf);
    return rc;
}

int ptdp_hf_read_global(const ptdp_st_file *f, const ptdp_param_spec *sp,
                        const ptdp_gpt_config *cfg, float *global) {
    int rc = PTDP_OK;
    for (int part = 0; part < ptdp_hf_parts(sp, cfg) && rc == PTDP_OK; part++)
        rc = read_part(f, sp, cfg, part, global);
    return rc;
}

void ptdp_hf_from_global(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, const float *global,
                         float *hf) {
    ptdp_hf_from_global_part(sp, cfg, 0, global, hf);
}

void ptdp_hf_from_global_part(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, int part,
                              const float *global, float *hf) {
    if (is_llama(cfg)) {
        ptdp__hf_llama_convert(sp, cfg, part, (float *)global, hf, 0);
        return;
    }
    char name[128];
    convert(sp, cfg, classify(sp, name, sizeof name), (float *)global, hf, 0);
}

int ptdp_hf_load_chunk(ptdp_gpt_chunk *chunk, const ptdp_gpt_config *cfg, int tp,
                       const char *path) {
    ptdp_st_file *f = NULL;
    int rc = ptdp_hf_family(cfg);
    if (rc < 0) return rc;
    rc = ptdp_st_open(&f, path);
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

/* Tensors an HF GPT-2 file may hold beside the parameters: the causal-mask
 * buffers of older exports, the tied output layer, and anything outside
 * GPT-2's names (reference data such as the test fixtures' ref.*). */
static int hf_buffer(const ptdp_st_tensor *t, const ptdp_st_tensor *wte) {
    static const char *const gpt2[] = {"transformer.", "h.", "wte.", "wpe.", "ln_f.", "lm_head."};
    int ours = 0;
    for (size_t i = 0; i < sizeof gpt2 / sizeof gpt2[0]; i++)
        if (!strncmp(t->name, gpt2[i], strlen(gpt2[i]))) ours = 1;
    if (!ours) return 1;
    size_t n = strlen(t->name);
    if (n >= 10 && !strcmp(t->name + n - 10, ".attn.bias") && t->ndim == 4) return 1;
    if (n >= 17 && !strcmp(t->name + n - 17, ".attn.masked_bias")) return 1;
    if (!strcmp(t->name, "lm_head.weight") && wte && t->ndim == 2 && t->shape[0] == wte->shape[0] &&
        t->shape[1] == wte->shape[1])
        return 1;
    return 0;
}

int ptdp_hf_check(const char *path, const ptdp_gpt_config *cfg, int allow_extra) {
    ptdp_st_file *f = NULL;
    int rc = ptdp_hf_family(cfg);
    if (rc < 0) return rc;
    if (rc == 1) return ptdp__hf_llama_check(path, cfg, allow_extra);
    rc = ptdp_st_open(&f, path);
    if (rc) return rc;
    if (ptdp_st_find(f, "model.embed_tokens.weight")) {
        ptdp_st_close(f);
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s is a Llama file (model.embed_tokens.weight) but the model flags "
                           "give a GPT-2 model; add the Llama family's flags (--normalization "
                           "RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear "
                           "...; docs/llama.md)",
                           path);
    }
    const int nt = ptdp_st_count(f);
    char *used = calloc((size_t)nt + 1, 1);
    if (!used) {
        ptdp_st_close(f);
        return ptdp_errorf(PTDP_ENOMEM, "out of memory checking %s", path);
    }
    /* the layers the file holds, for the messages */
    int64_t file_layers = 0;
    for (;; file_layers++) {
        char nm[64];
        snprintf(nm, sizeof nm, "transformer.h.%lld.ln_1.weight", (long long)file_layers);
        const ptdp_st_tensor *t = ptdp_st_find(f, nm);
        if (!t) t = ptdp_st_find(f, nm + strlen("transformer."));
        if (!t) break;
    }
    const int64_t h = cfg->hidden, ffn = cfg->ffn_hidden ? cfg->ffn_hidden : 4 * cfg->hidden;
    static const struct {
        const char *name;
        int ndim;
        int rows, cols; /* shape in units: 0 scalar 1, 1 h, 3 3h, 4 ffn */
    } layer_tab[] = {
        {"ln_1.weight", 1, 1, 0},        {"ln_1.bias", 1, 1, 0},
        {"attn.c_attn.weight", 2, 1, 3}, {"attn.c_attn.bias", 1, 3, 0},
        {"attn.c_proj.weight", 2, 1, 1}, {"attn.c_proj.bias", 1, 1, 0},
        {"ln_2.weight", 1, 1, 0},        {"ln_2.bias", 1, 1, 0},
        {"mlp.c_fc.weight", 2, 1, 4},    {"mlp.c_fc.bias", 1, 4, 0},
        {"mlp.c_proj.weight", 2, 4, 1},  {"mlp.c_proj.bias", 1, 1, 0},
    };
    const int per_layer = (int)(sizeof layer_tab / sizeof layer_tab[0]);
    const int64_t nexp = 4 + cfg->num_layers * per_layer;
    for (int64_t e = 0; e < nexp && rc == PTDP_OK; e++) {
        char nm[128];
        int64_t shape[2] = {0, 0};
        int nd = 2;
        if (e == 0) {
            snprintf(nm, sizeof nm, "transformer.wte.weight");
            shape[0] = cfg->vocab, shape[1] = h;
        } else if (e == 1) {
            snprintf(nm, sizeof nm, "transformer.wpe.weight");
            shape[0] = cfg->max_positions, shape[1] = h;
        } else if (e == 2 || e == 3) {
            snprintf(nm, sizeof nm, "transformer.ln_f.%s", e == 2 ? "weight" : "bias");
            nd = 1, shape[0] = h;
        } else {
            const int64_t l = (e - 4) / per_layer, k = (e - 4) % per_layer;
            const int64_t unit[5] = {1, h, 0, 3 * h, ffn};
            snprintf(nm, sizeof nm, "transformer.h.%lld.%s", (long long)l, layer_tab[k].name);
            nd = layer_tab[k].ndim;
            shape[0] = unit[layer_tab[k].rows];
            shape[1] = nd == 2 ? unit[layer_tab[k].cols] : 0;
        }
        const ptdp_st_tensor *t = ptdp_st_find(f, nm);
        if (!t) t = ptdp_st_find(f, nm + strlen("transformer."));
        if (!t) {
            if (e >= 4 && file_layers < cfg->num_layers)
                rc = ptdp_errorf(
                    PTDP_ENOTFOUND,
                    "%s: --num-layers %lld but the file holds %lld layers (tensor '%s' is missing); "
                    "give --num-layers %lld",
                    path, (long long)cfg->num_layers, (long long)file_layers, nm,
                    (long long)file_layers);
            else
                rc = ptdp_errorf(PTDP_ENOTFOUND,
                                 "%s: tensor '%s' is missing (is this a GPT-2 safetensors file?)",
                                 path, nm);
            break;
        }
        if (t->ndim != nd || t->shape[0] != shape[0] || (nd == 2 && t->shape[1] != shape[1])) {
            char got[96], want[96];
            fmt_shape(got, sizeof got, t->ndim, t->shape);
            fmt_shape(want, sizeof want, nd, shape);
            rc = ptdp_errorf(PTDP_EFORMAT,
                             "%s: tensor '%s' has shape [%s] but the model flags need [%s] "
                             "(check --hidden-size/--ffn-hidden-size/--max-position-embeddings "
                             "and the vocabulary size)",
                             path, t->name, got, want);
            break;
        }
        used[t - ptdp_st_get(f, 0)] = 1;
    }
    if (rc == PTDP_OK && !allow_extra) {
        const ptdp_st_tensor *wte = ptdp_st_find(f, "transformer.wte.weight");
        if (!wte) wte = ptdp_st_find(f, "wte.weight");
        int extra = 0;
        char list[512] = "";
        for (int i = 0; i < nt; i++) {
            const ptdp_st_tensor *t = ptdp_st_get(f, i);
            if (used[i] || hf_buffer(t, wte)) continue;
            if (extra < 3)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s'%s'",
                         extra ? ", " : "", t->name);
            extra++;
        }
        if (extra && file_layers > cfg->num_layers)
            rc = ptdp_errorf(
                PTDP_EFORMAT,
                "%s: --num-layers %lld but the file holds %lld layers (%d tensors would be left "
                "unused, e.g. %s); give --num-layers %lld, or --allow-extra-tensors to use only the "
                "first %lld",
                path, (long long)cfg->num_layers, (long long)file_layers, extra, list,
                (long long)file_layers, (long long)cfg->num_layers);
        else if (extra)
            rc = ptdp_errorf(PTDP_EFORMAT,
                             "%s: %d tensor%s in the file %s not part of the model (%s%s); "
                             "give --allow-extra-tensors to ignore them",
                             path, extra, extra > 1 ? "s" : "", extra > 1 ? "are" : "is", list,
                             extra > 3 ? ", ..." : "");
    }
    free(used);
    ptdp_st_close(f);
    return rc;
}

/* Replaces the n floats at *buf by their bf16/fp16 rounding (to nearest,
 * ties to even) in a new buffer. fp16 refuses a finite value that would
 * round to inf: PTDP_EINVAL naming the tensor, the value and the way out. */
static int narrow(float **buf, int64_t n, ptdp_st_dtype dtype, const char *name) {
    uint16_t *h = malloc(2 * (size_t)n + 2);
    if (!h) return ptdp_errorf(PTDP_ENOMEM, "out of memory exporting %s", name);
    if (dtype == PTDP_ST_BF16) {
        ptdp_f32_to_bf16_n(h, *buf, n);
    } else {
        PTDP_ASSERT(dtype == PTDP_ST_F16);
        ptdp_f32_to_f16_n(h, *buf, n);
        for (int64_t i = 0; i < n; i++)
            if ((h[i] & 0x7fffu) == 0x7c00u && isfinite((*buf)[i])) {
                int rc = ptdp_errorf(
                    PTDP_EINVAL,
                    "--export-dtype fp16: tensor %s element %lld is %g, beyond fp16's largest "
                    "finite value 65504; nothing was written; use --export-dtype bf16 (fp32's "
                    "range) or fp32",
                    name, (long long)i, (double)(*buf)[i]);
                free(h);
                return rc;
            }
    }
    free(*buf);
    *buf = (float *)h; /* freed as the float buffer was */
    return PTDP_OK;
}

/* Rank 0 of the export: one host image of the full model (t = 1, every
 * layer), filled shard by shard, then converted and written. */
static int write_full(ptdp_gpt_chunk *full, const ptdp_gpt_config *cfg, const char *path,
                      const char *config_json, ptdp_st_dtype dtype) {
    int n;
    const ptdp_param_spec *specs = ptdp_gpt_chunk_specs(full, &n);
    float *host = ptdp_gpt_chunk_params(full); /* CPU backend: host memory */
    int nparts = 0;
    for (int i = 0; i < n; i++) nparts += ptdp_hf_parts(&specs[i], cfg);
    float **hfbuf = calloc((size_t)nparts, sizeof(float *));
    char(*names)[128] = calloc((size_t)nparts, 128);
    ptdp_st_writer *w = NULL;
    int rc = (!hfbuf || !names) ? ptdp_errorf(PTDP_ENOMEM, "out of memory exporting")
                                : ptdp_st_writer_init(&w);
    for (int i = 0, k = 0; i < n && rc == PTDP_OK; i++) {
        const ptdp_param_spec *sp = &specs[i];
        for (int part = 0; part < ptdp_hf_parts(sp, cfg) && rc == PTDP_OK; part++, k++) {
            int64_t shape[2];
            int nd = ptdp_hf_name_part(sp, cfg, part, names[k], 128, shape);
            hfbuf[k] = malloc(sizeof(float) * (size_t)(shape[0] * shape[1] + 1));
            if (!hfbuf[k]) {
                rc = ptdp_errorf(PTDP_ENOMEM, "out of memory exporting");
                break;
            }
            ptdp_hf_from_global_part(sp, cfg, part, host + sp->offset, hfbuf[k]);
            if (dtype != PTDP_ST_F32) rc = narrow(&hfbuf[k], shape[0] * shape[1], dtype, names[k]);
            if (rc == PTDP_OK) rc = ptdp_st_writer_add(w, names[k], dtype, nd, shape, hfbuf[k]);
        }
    }
    if (rc == PTDP_OK) rc = ptdp_st_write(w, path);
    if (rc == PTDP_OK && config_json) {
        FILE *cf = fopen(config_json, "w");
        if (!cf) {
            rc = ptdp_errorf(PTDP_EIO, "cannot write %s", config_json);
        } else if (is_llama(cfg)) {
            ptdp__hf_llama_config_json(cf, cfg);
            if (fclose(cf) != 0) rc = ptdp_errorf(PTDP_EIO, "cannot write %s", config_json);
        } else {
            fprintf(
                cf,
                "{\"architectures\":[\"GPT2LMHeadModel\"],\"model_type\":\"gpt2\",\"vocab_size\":%lld,"
                "\"n_positions\":%lld,\"n_embd\":%lld,\"n_layer\":%lld,\"n_head\":%lld,\"n_inner\":null,"
                "\"activation_function\":\"gelu_new\",\"layer_norm_epsilon\":1e-05,\"tie_word_embeddings\":true}\n",
                (long long)cfg->vocab, (long long)cfg->max_positions, (long long)cfg->hidden,
                (long long)cfg->num_layers, (long long)cfg->heads);
            if (fclose(cf) != 0) rc = ptdp_errorf(PTDP_EIO, "cannot write %s", config_json);
        }
    }
    ptdp_st_writer_free(w);
    for (int i = 0; hfbuf && i < nparts; i++) free(hfbuf[i]);
    free(hfbuf);
    free(names);
    return rc;
}

/* Serialised shard: name[96], int64 tp, int64 numel, float data[numel]. */
#define REC_HDR (96 + 16)

int ptdp_hf_export(ptdp_gpt_chunk *const *chunks, int nchunks, const ptdp_gpt_config *cfg,
                   ptdp_group *model, int tp, int t, const char *path, const char *config_json,
                   ptdp_st_dtype dtype) {
    PTDP_ASSERT(dtype == PTDP_ST_F32 || dtype == PTDP_ST_BF16 || dtype == PTDP_ST_F16);
    const int family = ptdp_hf_family(cfg); /* the same answer on every rank */
    if (family < 0) return family;
    int64_t bytes = 0;
    for (int c = 0; c < nchunks; c++) {
        int n;
        const ptdp_param_spec *sp = ptdp_gpt_chunk_specs(chunks[c], &n);
        for (int i = 0; i < n; i++) bytes += REC_HDR + 4 * sp[i].numel;
    }
    char *mine = malloc((size_t)bytes + 1), *q = mine;
    PTDP_ASSERT_MSG(mine, "out of memory exporting");
    for (int c = 0; c < nchunks; c++) {
        int n;
        const ptdp_param_spec *sp = ptdp_gpt_chunk_specs(chunks[c], &n);
        float *host = malloc(sizeof(float) * (size_t)ptdp_gpt_chunk_numel(chunks[c]) + 64);
        PTDP_ASSERT_MSG(host, "out of memory exporting");
        ptdp_gpt_chunk_download_params(chunks[c], host);
        for (int i = 0; i < n; i++) {
            int64_t hdr[2] = {tp, sp[i].numel};
            memset(q, 0, 96);
            memcpy(q, sp[i].name, strlen(sp[i].name));
            memcpy(q + 96, hdr, 16);
            memcpy(q + REC_HDR, host + sp[i].offset, (size_t)(4 * sp[i].numel));
            q += REC_HDR + 4 * sp[i].numel;
        }
        free(host);
    }
    int64_t counts[4096];
    PTDP_ASSERT(model->size <= 4096);
    char *all = ptdp_gatherv_bytes(model, mine, bytes, counts, 0);
    free(mine);
    if (model->rank != 0) return PTDP_OK;

    ptdp_group one = {.name = "export", .size = 1, .rank = 0};
    /* a parameter holder: s = 1 keeps its (unused) activations tiny */
    ptdp_job holder = ptdp_job_default_params();
    holder.model = *cfg;
    holder.model.seq_length = 1;
    ptdp_chunk_params cp = ptdp_chunk_default_params();
    cp.job = &holder;
    cp.layer_end = cfg->num_layers;
    cp.pre = cp.post = 1;
    cp.tp = &one;
    cp.inference = 1;
    ptdp_gpt_chunk *full = NULL;
    int rc = ptdp_gpt_chunk_init(&full, &cp);
    if (rc == PTDP_OK) {
        int nf;
        const ptdp_param_spec *fs = ptdp_gpt_chunk_specs(full, &nf);
        float *fp = ptdp_gpt_chunk_params(full);
        int64_t total = 0;
        for (int r = 0; r < model->size; r++) total += counts[r];
        for (const char *rec = all; rec < all + total;) {
            int64_t hdr[2];
            char name[97] = {0};
            memcpy(name, rec, 96);
            memcpy(hdr, rec + 96, 16);
            const ptdp_param_spec *g = NULL;
            for (int i = 0; i < nf && !g; i++)
                if (!strcmp(fs[i].name, name)) g = &fs[i];
            PTDP_ASSERT_MSG(g, name);
            /* the shard's spec: the global one with t-way split dims */
            ptdp_param_spec shard = *g;
            if (shard.split == PTDP_SPLIT_DIM0) shard.lshape[0] /= t;
            if (shard.split == PTDP_SPLIT_DIM1) shard.lshape[1] /= t;
            shard.numel = shard.lshape[0] * shard.lshape[1];
            PTDP_ASSERT(shard.numel == hdr[1]);
            float *data = malloc(sizeof(float) * (size_t)(hdr[1] + 1));
            PTDP_ASSERT_MSG(data, "out of memory exporting");
            memcpy(data, rec + REC_HDR, (size_t)(4 * hdr[1]));
            ptdp_spec_gather(&shard, (int)hdr[0], data, fp + g->offset);
            free(data);
            rec += REC_HDR + 4 * hdr[1];
        }
        rc = write_full(full, cfg, path, config_json, dtype);
    }
    ptdp_gpt_chunk_free(full);
    free(all);
    return rc;
}
