/* import.c - Megatron-LM checkpoints (--ckpt-format torch) into ptdp:
 * `ptdp checkpoint import-megatron`. Names, tensor-parallel splits and the
 * model's shape; the export is export.c, the file formats format/zip.c and
 * format/pickle.c, the user's view docs/megatron.md.
 *
 * Megatron's layout: DIR/latest_checkpointed_iteration.txt ("N" or
 * "release"), DIR/iter_%07d/ (or DIR/release/) holding one
 * mp_rank_TT/model_optim_rng.pt per tensor rank (mp_rank_TT_PPP with
 * pipeline parallelism). Each file is a torch.save of {'args': Namespace,
 * 'checkpoint_version': 3.0, 'iteration': N, 'model' (or 'model0', 'model1',
 * ... per virtual chunk): {name: tensor}, 'optimizer', 'rng_state', ...}.
 * Layer numbers inside a file are local to its model chunk; chunk c of
 * pipeline rank r is virtual stage c*P + r and its layers follow those of
 * every earlier stage. Column-parallel weights (QKV, fc1, the vocabulary
 * rows of the word embedding) are split on dim 0, row-parallel ones
 * (attention output, fc2) on dim 1, norms and the row-parallel biases are
 * replicated. Megatron's QKV rows are grouped per query group as
 * [q heads of the group | k | v] x head dim; with as many groups as heads
 * (no GQA) that is [a][q|k|v][hd], ptdp's own order, so they copy as they are.
 *
 * What is read: the model weights only (fp32, fp16 or bf16 tensors, as the
 * model held them), the args, the iteration. The optimizer state (Megatron's
 * own layout, fp32 master weights included) and the RNG states are not
 * converted: the ptdp checkpoint says it has no optimizer state. */
#define _POSIX_C_SOURCE 200809L
#include "ckpt/megatron/megatron.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"
#include "format/torch.h"

/* ---- names ------------------------------------------------------------------- */

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

enum { N_UNKNOWN, N_IGNORE, N_PARAM, N_HEAD };

/* Megatron name -> ptdp name (with the chunk-local layer number in *local,
 * -1 outside layers). N_HEAD: the last stage's copy of the tied embedding. */
static int classify(const char *name, char *out, size_t cap, int64_t *local) {
    *local = -1;
    size_t n = strlen(name);
    if (n >= 12 && !strcmp(name + n - 12, "_extra_state")) return N_IGNORE; /* TE's fp8 metadata */
    static const char *const lm = "language_model.";
    const char *s = !strncmp(name, lm, strlen(lm)) ? name + strlen(lm) : name;
    const int legacy = s != name;
    if (!strcmp(s, "embedding.word_embeddings.weight") ||
        !strcmp(s, "embedding.position_embeddings.weight")) {
        snprintf(out, cap, "%s", s);
        return N_PARAM;
    }
    if (!strcmp(name, "output_layer.weight") || !strcmp(name, "word_embeddings_for_head.weight") ||
        !strcmp(name, "language_model.output_layer.weight")) {
        snprintf(out, cap, "embedding.word_embeddings.weight");
        return N_HEAD;
    }
    static const char *const blocks[] = {"decoder.", "encoder.", "transformer."};
    for (int b = 0; b < 3; b++) {
        size_t bl = strlen(blocks[b]);
        if ((b == 0) == legacy || strncmp(s, blocks[b], bl)) continue;
        const char *r = s + bl;
        if (!strcmp(r, "final_layernorm.weight") || !strcmp(r, "final_layernorm.bias") ||
            !strcmp(r, "final_norm.weight") || !strcmp(r, "final_norm.bias")) {
            snprintf(out, cap, "final_layernorm.%s", strrchr(r, '.') + 1);
            return N_PARAM;
        }
        char *end;
        if (strncmp(r, "layers.", 7)) return N_UNKNOWN;
        long long li = strtoll(r + 7, &end, 10);
        if (end == r + 7 || *end != '.' || li < 0 || li > 1000000) return N_UNKNOWN;
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
                    return N_PARAM;
                }
        }
        return N_UNKNOWN;
    }
    return N_UNKNOWN;
}

/* ---- the state dict of one file ------------------------------------------------ */

typedef struct {
    char name[192];
    const ptdp__pk_node *t;
} named;

/* Flattens nested dicts (legacy Megatron nests language_model -> embedding
 * -> word_embeddings -> weight) into dotted names. */
static int flatten(const ptdp__pk_node *d, const char *prefix, int depth, named **out, int *n,
                   int *cap, const char *path) {
    if (depth > 8)
        return ptdp_errorf(PTDP_EFORMAT, "%s: the model state dict nests deeper than 8 levels",
                           path);
    for (int64_t i = 0; i + 1 < d->n; i += 2) {
        const ptdp__pk_node *k = d->items[i], *v = d->items[i + 1];
        if (k->kind != PTDP_PK_STR)
            return ptdp_errorf(PTDP_EFORMAT, "%s: a model state dict key is not a string", path);
        char nm[192];
        if ((size_t)snprintf(nm, sizeof nm, "%s%s%s", prefix, *prefix ? "." : "", k->s) >=
            sizeof nm)
            return ptdp_errorf(PTDP_EFORMAT, "%s: a parameter name longer than 190 bytes", path);
        if (v->kind == PTDP_PK_DICT) {
            int rc = flatten(v, nm, depth + 1, out, n, cap, path);
            if (rc) return rc;
            continue;
        }
        if (*n == *cap) {
            int c = *cap ? 2 * *cap : 64;
            named *o = realloc(*out, (size_t)c * sizeof *o);
            if (!o) return ptdp_errorf(PTDP_ENOMEM, "out of memory reading %s", path);
            *out = o, *cap = c;
        }
        snprintf((*out)[*n].name, sizeof(*out)[*n].name, "%s", nm);
        (*out)[(*n)++].t = v;
    }
    return PTDP_OK;
}

/* ---- args ----------------------------------------------------------------------- */

typedef struct {
    const ptdp__pk_node *ns; /* the Namespace, or NULL */
} margs;

static int arg_int(const margs *a, const char *key, int64_t *v) {
    const ptdp__pk_node *x = ptdp__pk_attr(a->ns, key);
    if (!x || (x->kind != PTDP_PK_INT && x->kind != PTDP_PK_BOOL) || x->big) return 0;
    *v = x->i;
    return 1;
}
static int arg_float(const margs *a, const char *key, double *v) {
    const ptdp__pk_node *x = ptdp__pk_attr(a->ns, key);
    if (x && x->kind == PTDP_PK_FLOAT)
        *v = x->f;
    else if (x && x->kind == PTDP_PK_INT && !x->big)
        *v = (double)x->i;
    else
        return 0;
    return 1;
}
static int arg_true(const margs *a, const char *key) {
    const ptdp__pk_node *x = ptdp__pk_attr(a->ns, key);
    return x && (x->kind == PTDP_PK_BOOL || x->kind == PTDP_PK_INT) && x->i;
}
static const char *arg_str(const margs *a, const char *key) {
    const ptdp__pk_node *x = ptdp__pk_attr(a->ns, key);
    return x && x->kind == PTDP_PK_STR ? x->s : NULL;
}

/* What ptdp's GPT cannot be: refused by name. */
static int refuse_features(const margs *a, const char *path) {
    int64_t g = 0, heads = 0, kv = 0, h = 0, ne = 0;
    const char *why = NULL;
    char buf[160];
    const char *pe = arg_str(a, "position_embedding_type"), *norm = arg_str(a, "normalization");
    if (arg_true(a, "swiglu"))
        why = "args.swiglu is True (a SwiGLU MLP); ptdp's MLP is fc1 -> GeLU -> fc2";
    else if (arg_true(a, "group_query_attention") && arg_int(a, "num_query_groups", &g) &&
             arg_int(a, "num_attention_heads", &heads) && g != heads)
        snprintf(buf, sizeof buf,
                 "args.group_query_attention with num_query_groups %lld != %lld heads (GQA); "
                 "ptdp has one key/value head per query head",
                 (long long)g, (long long)heads),
            why = buf;
    else if (pe && strcmp(pe, "learned_absolute"))
        snprintf(buf, sizeof buf,
                 "args.position_embedding_type is '%.40s'; ptdp has learned absolute position "
                 "embeddings only",
                 pe),
            why = buf;
    else if (arg_true(a, "use_rotary_position_embeddings"))
        why = "args.use_rotary_position_embeddings (rotary); ptdp has learned absolute positions";
    else if (ptdp__pk_attr(a->ns, "add_position_embedding") &&
             !arg_true(a, "add_position_embedding"))
        why = "args.add_position_embedding is False; ptdp's GPT has position embeddings";
    else if (norm && strcmp(norm, "LayerNorm"))
        snprintf(buf, sizeof buf, "args.normalization is '%.40s'; ptdp has LayerNorm only", norm),
            why = buf;
    else if (ptdp__pk_attr(a->ns, "add_bias_linear") && !arg_true(a, "add_bias_linear"))
        why = "args.add_bias_linear is False (linear layers without biases); ptdp's have biases";
    else if (arg_true(a, "untie_embeddings_and_output_weights"))
        why = "args.untie_embeddings_and_output_weights is True; ptdp ties the output layer to the "
              "word embedding";
    else if (arg_true(a, "apply_residual_connection_post_layernorm"))
        why = "args.apply_residual_connection_post_layernorm is True; ptdp's residual takes the "
              "layer input";
    else if (arg_true(a, "qk_layernorm"))
        why = "args.qk_layernorm is True; ptdp has no query/key norms";
    else if (arg_int(a, "num_experts", &ne) && ne > 0)
        why = "args.num_experts is set (a mixture of experts); ptdp's MLP is dense";
    else if (arg_true(a, "squared_relu"))
        why = "args.squared_relu is True; ptdp's MLP uses GeLU";
    else if (arg_int(a, "kv_channels", &kv) && arg_int(a, "hidden_size", &h) &&
             arg_int(a, "num_attention_heads", &heads) && heads > 0 && kv != h / heads)
        snprintf(buf, sizeof buf,
                 "args.kv_channels %lld is not hidden_size / num_attention_heads = %lld; ptdp's "
                 "head dimension is h/a",
                 (long long)kv, (long long)(h / heads)),
            why = buf;
    if (why) return ptdp_errorf(PTDP_EUNSUPPORTED, "%s: cannot import: %s", path, why);
    return PTDP_OK;
}

/* ---- the directory ----------------------------------------------------------- */

/* DIR -> the iteration directory (through the latest file, or DIR itself
 * when it holds mp_rank_* directories). */
static int resolve(const char *dir, char *itdir, size_t cap, int64_t *iteration, int *release) {
    *iteration = 0, *release = 0;
    int rc = ptdp__ckpt_read_latest(dir, 1, iteration);
    if (rc < 0) return rc;
    if (rc == 2) {
        *release = 1;
        snprintf(itdir, cap, "%s/release", dir);
    } else if (rc == 1) {
        snprintf(itdir, cap, "%s/iter_%07lld", dir, (long long)*iteration);
    } else {
        snprintf(itdir, cap, "%s", dir);
        const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
        if (!strncmp(base, "iter_", 5)) *iteration = strtoll(base + 5, NULL, 10);
    }
    return PTDP_OK;
}

typedef struct {
    int T, P, pp_named; /* mp_rank_TT_PPP names */
} grid;

static int scan(const char *itdir, grid *g) {
    DIR *d = opendir(itdir);
    if (!d)
        return ptdp_errorf(PTDP_ENOTFOUND,
                           "%s: no such directory (give a Megatron --save directory, or one "
                           "iter_NNNNNNN directory)",
                           itdir);
    int maxt = -1, maxp = -1, with = 0, without = 0, dist = 0, n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        int tt, pp, ep, k = 0;
        const char *nm = e->d_name;
        size_t L = strlen(nm);
        if ((L > 7 && !strcmp(nm + L - 7, ".distcp")) || !strcmp(nm, ".metadata") ||
            !strcmp(nm, "metadata.json") || !strcmp(nm, "common.pt"))
            dist = 1;
        if (strncmp(nm, "mp_rank_", 8)) continue;
        k = sscanf(nm + 8, "%d_%d_%d", &tt, &pp, &ep);
        if (k == 3) {
            closedir(d);
            return ptdp_errorf(PTDP_EUNSUPPORTED,
                               "%s/%s: expert-parallel files (mp_rank_TT_PPP_EEE): ptdp has no "
                               "mixture of experts",
                               itdir, nm);
        }
        if (k < 1 || tt < 0 || tt > 4095 || (k == 2 && (pp < 0 || pp > 4095))) continue;
        if (k == 2)
            with++, maxp = pp > maxp ? pp : maxp;
        else
            without++;
        maxt = tt > maxt ? tt : maxt;
        n++;
    }
    closedir(d);
    if (!n)
        return ptdp_errorf(PTDP_ENOTFOUND, "%s: %s", itdir,
                           dist ? "this is a torch_dist checkpoint (Megatron's default "
                                  "--ckpt-format); ptdp reads --ckpt-format torch: convert it "
                                  "with Megatron (load it and save with --ckpt-format torch)"
                                : "no mp_rank_* directories: not a Megatron checkpoint");
    if (with && without)
        return ptdp_errorf(PTDP_EFORMAT, "%s: both mp_rank_TT and mp_rank_TT_PPP directories",
                           itdir);
    g->T = maxt + 1, g->P = with ? maxp + 1 : 1, g->pp_named = with > 0;
    if (n != g->T * g->P)
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: %d mp_rank_* directories, but the ranks found make %d x %d "
                           "(tensor x pipeline): some are missing",
                           itdir, n, g->T, g->P);
    return PTDP_OK;
}

static void file_path(char *out, size_t cap, const char *itdir, const grid *g, int tp, int pp) {
    if (g->pp_named)
        snprintf(out, cap, "%s/mp_rank_%02d_%03d/model_optim_rng.pt", itdir, tp, pp);
    else
        snprintf(out, cap, "%s/mp_rank_%02d/model_optim_rng.pt", itdir, tp);
}

/* ---- import ------------------------------------------------------------------ */

ptdp_megatron_import_params ptdp_megatron_import_default_params(void) {
    return (ptdp_megatron_import_params){.make_vocab_size_divisible_by = 128};
}

/* The model state dict of virtual chunk c ('model', or 'model0', ...). */
static const ptdp__pk_node *model_dict(const ptdp__pk_node *root, int v, int c) {
    char key[32];
    if (v == 1)
        snprintf(key, sizeof key, "model");
    else
        snprintf(key, sizeof key, "model%d", c);
    const ptdp__pk_node *m = ptdp__pk_get(root, key);
    return m && m->kind == PTDP_PK_DICT ? m : NULL;
}

typedef struct {
    const char *path; /* current file */
    ptdp_gpt_chunk *full;
    const ptdp_param_spec *specs;
    int nspecs;
    float *host;
    uint8_t *have; /* [nspecs][T] */
    int T, P;
    int64_t Vl; /* the files' vocabulary rows per tensor rank */
    const ptdp_gpt_config *cfg;
    float *tmp;
    int64_t tmp_cap;
} importer;

static const ptdp_param_spec *find_spec(const importer *im, const char *name, int *idx) {
    for (int i = 0; i < im->nspecs; i++)
        if (!strcmp(im->specs[i].name, name)) {
            *idx = i;
            return &im->specs[i];
        }
    return NULL;
}

static void shape_str(char *b, size_t cap, int nd, const int64_t *s) {
    b[0] = 0;
    for (int i = 0; i < nd; i++)
        snprintf(b + strlen(b), cap - strlen(b), "%s%lld", i ? ", " : "", (long long)s[i]);
}

/* One tensor of tensor rank tp into the global image. */
static int place(importer *im, const ptdp__torch_file *tf, const char *mname, const char *pname,
                 int kind, const ptdp__pk_node *t, int tp) {
    int idx;
    const ptdp_param_spec *sp = find_spec(im, pname, &idx);
    if (!sp)
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: tensor '%s' is layer-numbered beyond the model's %lld layers "
                           "(check num_layers and the pipeline size)",
                           im->path, mname, (long long)im->cfg->num_layers);
    if (t->kind != PTDP_PK_TENSOR)
        return ptdp_errorf(PTDP_EFORMAT, "%s: '%s' is not a tensor", im->path, mname);
    const int wte = sp->role == PTDP_ROLE_EMBEDDING, T = im->T;
    int64_t want[2] = {sp->gshape[0], sp->ndim == 2 ? sp->gshape[1] : 0};
    if (wte)
        want[0] = im->Vl;
    else if (sp->split == PTDP_SPLIT_DIM0)
        want[0] /= T;
    else if (sp->split == PTDP_SPLIT_DIM1)
        want[1] /= T;
    if (t->ndim != sp->ndim || t->shape[0] != want[0] ||
        (sp->ndim == 2 && t->shape[1] != want[1])) {
        char got[96], exp[96];
        shape_str(got, sizeof got, t->ndim, t->shape);
        shape_str(exp, sizeof exp, sp->ndim, want);
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: tensor '%s' has shape [%s] but the model (from args and flags) "
                           "needs [%s] on each of %d tensor ranks",
                           im->path, mname, got, exp, T);
    }
    if (t->numel > im->tmp_cap) {
        float *b = realloc(im->tmp, sizeof(float) * (size_t)t->numel);
        if (!b) return ptdp_errorf(PTDP_ENOMEM, "out of memory reading %s", im->path);
        im->tmp = b, im->tmp_cap = t->numel;
    }
    int rc = ptdp__torch_read_f32(tf, t, im->tmp, t->numel);
    if (rc) return ptdp_errorf(rc, "%s (tensor '%s')", ptdp_last_error(), mname);
    float *g = im->host + sp->offset;
    const int64_t C = sp->ndim == 2 ? sp->gshape[1] : 1;
    if (kind == N_HEAD) { /* the tied copy must equal the word embedding */
        for (int64_t r = 0; r < want[0]; r++) {
            int64_t gr = tp * want[0] + r;
            if (gr >= im->cfg->vocab) break;
            if (memcmp(g + gr * C, im->tmp + r * C, sizeof(float) * (size_t)C))
                return ptdp_errorf(PTDP_EFORMAT,
                                   "%s: '%s' differs from embedding.word_embeddings.weight (row "
                                   "%lld) though the embeddings are tied",
                                   im->path, mname, (long long)gr);
        }
        return PTDP_OK;
    }
    uint8_t *have = &im->have[idx * T + (sp->split == PTDP_SPLIT_NONE ? 0 : tp)];
    if (sp->split == PTDP_SPLIT_NONE && tp > 0) return PTDP_OK; /* replicas: rank 0's copy */
    if (*have)
        return ptdp_errorf(PTDP_EFORMAT, "%s: tensor '%s' (ptdp's %s) appears twice", im->path,
                           mname, pname);
    *have = 1;
    if (wte) {
        for (int64_t r = 0; r < want[0]; r++) {
            int64_t gr = tp * want[0] + r;
            if (gr < im->cfg->vocab) memcpy(g + gr * C, im->tmp + r * C, sizeof(float) * (size_t)C);
        }
    } else if (sp->split == PTDP_SPLIT_DIM0) {
        memcpy(g + tp * want[0] * C, im->tmp, sizeof(float) * (size_t)t->numel);
    } else if (sp->split == PTDP_SPLIT_DIM1) {
        for (int64_t r = 0; r < want[0]; r++)
            memcpy(g + r * C + tp * want[1], im->tmp + r * want[1],
                   sizeof(float) * (size_t)want[1]);
    } else {
        memcpy(g, im->tmp, sizeof(float) * (size_t)t->numel);
    }
    return PTDP_OK;
}

/* Layers per virtual chunk: one more than the largest local layer number. */
static int count_layers(const ptdp__pk_node *md, const char *path, int64_t *nl) {
    named *all = NULL;
    int n = 0, cap = 0;
    int rc = flatten(md, "", 0, &all, &n, &cap, path);
    *nl = 0;
    for (int i = 0; rc == PTDP_OK && i < n; i++) {
        char pn[192];
        int64_t local;
        if (classify(all[i].name, pn, sizeof pn, &local) == N_PARAM && local + 1 > *nl)
            *nl = local + 1;
    }
    free(all);
    return rc;
}

/* The model configuration: args, overridden by the flags, checked. */
static int model_config(const margs *a, const ptdp_megatron_import_params *ip, const char *path,
                        ptdp_gpt_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    const struct {
        const char *arg, *flag;
        int64_t flagv, *dst;
        int required;
    } f[] = {
        {"num_layers", "--num-layers", ip->num_layers, &cfg->num_layers, 1},
        {"hidden_size", "--hidden-size", ip->hidden_size, &cfg->hidden, 1},
        {"num_attention_heads", "--num-attention-heads", ip->num_attention_heads, &cfg->heads, 1},
        {"ffn_hidden_size", "--ffn-hidden-size", ip->ffn_hidden_size, &cfg->ffn_hidden, 0},
        {"max_position_embeddings", "--max-position-embeddings", ip->max_position_embeddings,
         &cfg->max_positions, 1},
        {"seq_length", "--seq-length", ip->seq_length, &cfg->seq_length, 0},
        {"vocab_size", "--vocab-size", ip->vocab_size, &cfg->vocab, 0},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        int64_t v = 0;
        if (f[i].flagv > 0)
            *f[i].dst = f[i].flagv;
        else if (arg_int(a, f[i].arg, &v) && v > 0)
            *f[i].dst = v;
        else if (f[i].required)
            return ptdp_errorf(PTDP_ECONFIG, "%s: the checkpoint's args do not record %s; give %s",
                               path, f[i].arg, f[i].flag);
    }
    if (!cfg->ffn_hidden) cfg->ffn_hidden = 4 * cfg->hidden;
    if (!cfg->seq_length) cfg->seq_length = cfg->max_positions;
    const char *tok = arg_str(a, "tokenizer_type");
    if (!cfg->vocab && tok && !strcmp(tok, "GPT2BPETokenizer")) cfg->vocab = 50257;
    if (!cfg->vocab)
        return ptdp_errorf(PTDP_ECONFIG,
                           "%s: the checkpoint does not record its true vocabulary size "
                           "(args.vocab_size is None and the tokenizer is not GPT-2's); give "
                           "--vocab-size N (the rows past N, Megatron's padding, are dropped)",
                           path);
    double d;
    cfg->init_std = arg_float(a, "init_method_std", &d) ? (float)d : 0.02f;
    cfg->ln_eps = arg_float(a, "norm_epsilon", &d) || arg_float(a, "layernorm_epsilon", &d)
                      ? (float)d
                      : 1e-5f;
    cfg->hidden_dropout = arg_float(a, "hidden_dropout", &d) ? (float)d : 0.1f;
    cfg->attention_dropout = arg_float(a, "attention_dropout", &d) ? (float)d : 0.1f;
    int64_t seed = 1234;
    arg_int(a, "seed", &seed);
    cfg->seed = (uint64_t)seed;
    return ptdp_gpt_config_finish(cfg, ip->make_vocab_size_divisible_by, 1);
}

/* The rest of the ptdp manifest: batch sizes, LR schedule, AdamW, from args. */
static void training_meta(const margs *a, ptdp_lr_schedule *lr, ptdp_adamw_params *adam,
                          int64_t *mbs, int64_t *gbs) {
    double d;
    int64_t v;
    *mbs = arg_int(a, "micro_batch_size", &v) && v > 0 ? v : 1;
    *gbs = arg_int(a, "global_batch_size", &v) && v > 0 ? v : *mbs;
    *adam = ptdp_adamw_default_params();
    if (arg_float(a, "adam_beta1", &d)) adam->beta1 = d;
    if (arg_float(a, "adam_beta2", &d)) adam->beta2 = d;
    if (arg_float(a, "adam_eps", &d)) adam->eps = d;
    if (arg_float(a, "weight_decay", &d)) adam->weight_decay = d;
    if (arg_float(a, "clip_grad", &d)) adam->clip_grad = d;
    memset(lr, 0, sizeof *lr);
    lr->max_lr = arg_float(a, "lr", &d) ? d : 0;
    lr->min_lr = arg_float(a, "min_lr", &d) ? d : 0;
    lr->samples_per_step = *gbs;
    if (arg_int(a, "lr_warmup_samples", &v) && v > 0)
        lr->warmup_samples = (double)v;
    else if (arg_int(a, "lr_warmup_iters", &v))
        lr->warmup_samples = (double)(v * *gbs);
    if (arg_int(a, "lr_decay_samples", &v) && v > 0)
        lr->decay_samples = (double)v;
    else if (arg_int(a, "lr_decay_iters", &v) && v > 0)
        lr->decay_samples = (double)(v * *gbs);
    else if (arg_int(a, "train_iters", &v) && v > 0)
        lr->decay_samples = (double)(v * *gbs);
    else if (arg_int(a, "train_samples", &v) && v > 0)
        lr->decay_samples = (double)v;
    if (lr->decay_samples <= lr->warmup_samples) lr->decay_samples = lr->warmup_samples + 1;
    const char *style = arg_str(a, "lr_decay_style");
    lr->style = PTDP_LR_LINEAR;
    if (style) ptdp_lr_style_parse(style, &lr->style);
}

int ptdp_megatron_import(const char *src, const char *dst, const ptdp_megatron_import_params *ip,
                         FILE *log) {
    char itdir[4200], path[4400];
    int64_t iteration;
    int release;
    grid g = {0};
    int rc = resolve(src, itdir, sizeof itdir, &iteration, &release);
    if (rc == PTDP_OK) rc = scan(itdir, &g);
    if (rc) return rc;
    ptdp__torch_file tf;
    file_path(path, sizeof path, itdir, &g, 0, 0);
    rc = ptdp__torch_open(&tf, path);
    if (rc) return rc;
    /* args, version, iteration, chunks: from the first file */
    margs a = {.ns = ptdp__pk_get(tf.root, "args")};
    if (tf.root->kind != PTDP_PK_DICT ||
        (!ptdp__pk_get(tf.root, "model") && !ptdp__pk_get(tf.root, "model0")))
        rc = ptdp_errorf(PTDP_EFORMAT,
                         "%s: not a Megatron checkpoint (no 'model' or 'model0' state dict)", path);
    const ptdp__pk_node *ver = ptdp__pk_get(tf.root, "checkpoint_version");
    double version = ver && ver->kind == PTDP_PK_FLOAT ? ver->f
                     : ver && ver->kind == PTDP_PK_INT ? (double)ver->i
                                                       : 0;
    if (rc == PTDP_OK && version < 2.0)
        rc = ptdp_errorf(PTDP_EUNSUPPORTED,
                         "%s: checkpoint_version %g: versions before 2.0 store the query, key "
                         "and value rows in another order; load and save it with a recent "
                         "Megatron-LM first",
                         path, version);
    if (rc == PTDP_OK && a.ns && a.ns->kind != PTDP_PK_OBJECT) a.ns = NULL;
    if (rc == PTDP_OK) rc = refuse_features(&a, path);
    int64_t targ = 0, parg = 0, varg = 1;
    if (rc == PTDP_OK && arg_int(&a, "tensor_model_parallel_size", &targ) && targ != g.T)
        rc = ptdp_errorf(PTDP_EFORMAT,
                         "%s: args.tensor_model_parallel_size is %lld but the directory holds %d "
                         "tensor ranks (missing mp_rank_* directories?)",
                         itdir, (long long)targ, g.T);
    if (rc == PTDP_OK && arg_int(&a, "pipeline_model_parallel_size", &parg) && parg != g.P)
        rc = ptdp_errorf(PTDP_EFORMAT,
                         "%s: args.pipeline_model_parallel_size is %lld but the directory holds "
                         "%d pipeline ranks (missing mp_rank_* directories?)",
                         itdir, (long long)parg, g.P);
    if (!arg_int(&a, "virtual_pipeline_model_parallel_size", &varg) || varg < 1) varg = 1;
    if (rc == PTDP_OK && varg > 1 && !ptdp__pk_get(tf.root, "model0"))
        varg = 1; /* saved without interleaving after all */
    if (rc == PTDP_OK && varg > 64)
        rc = ptdp_errorf(PTDP_EFORMAT, "%s: %lld virtual pipeline chunks", path, (long long)varg);
    const ptdp__pk_node *it = ptdp__pk_get(tf.root, "iteration");
    if (rc == PTDP_OK && it && it->kind == PTDP_PK_INT) iteration = it->i;
    int64_t consumed = 0;
    arg_int(&a, "consumed_train_samples", &consumed);
    ptdp_gpt_config cfg;
    if (rc == PTDP_OK) rc = model_config(&a, ip, path, &cfg);
    ptdp_lr_schedule lr;
    ptdp_adamw_params adam;
    int64_t mbs, gbs;
    training_meta(&a, &lr, &adam, &mbs, &gbs);
    int64_t padded = 0;
    arg_int(&a, "padded_vocab_size", &padded);
    ptdp__torch_close(&tf);
    if (rc) return rc;
    const int v = (int)varg, S = g.P * v;

    /* the layers of every virtual stage, from tensor rank 0's files */
    int64_t *nl = calloc((size_t)S + 1, sizeof *nl), total = 0;
    if (!nl) return ptdp_errorf(PTDP_ENOMEM, "out of memory");
    for (int pp = 0; rc == PTDP_OK && pp < g.P; pp++) {
        file_path(path, sizeof path, itdir, &g, 0, pp);
        rc = ptdp__torch_open(&tf, path);
        for (int c = 0; rc == PTDP_OK && c < v; c++) {
            const ptdp__pk_node *md = model_dict(tf.root, v, c);
            if (!md)
                rc = ptdp_errorf(PTDP_EFORMAT, "%s: no state dict 'model%s' (%d virtual chunks)",
                                 path, v == 1 ? "" : "N", v);
            else
                rc = count_layers(md, path, &nl[c * g.P + pp]);
        }
        ptdp__torch_close(&tf);
    }
    for (int s = 0; s < S; s++) total += nl[s];
    if (rc == PTDP_OK && total != cfg.num_layers)
        rc = ptdp_errorf(PTDP_EFORMAT,
                         "%s: the files hold %lld layers but the model has %lld (args.num_layers "
                         "or --num-layers)",
                         itdir, (long long)total, (long long)cfg.num_layers);

    /* a full model (t = 1, every layer) to fill, then save as a ptdp checkpoint */
    ptdp_gpt_config holder = cfg;
    holder.seq_length = 1;
    ptdp_group one = {.name = "import", .size = 1, .rank = 0};
    ptdp_chunk_params cp = ptdp_chunk_default_params();
    cp.cfg = &holder, cp.layer_end = cfg.num_layers, cp.pre = cp.post = 1, cp.tp = &one;
    cp.inference = 1;
    importer im = {.T = g.T, .P = g.P, .cfg = &cfg};
    if (rc == PTDP_OK) rc = ptdp_gpt_chunk_init(&im.full, &cp);
    if (rc == PTDP_OK) {
        im.specs = ptdp_gpt_chunk_specs(im.full, &im.nspecs);
        im.host = ptdp_gpt_chunk_params(im.full);
        memset(im.host, 0, sizeof(float) * (size_t)ptdp_gpt_chunk_numel(im.full));
        im.have = calloc((size_t)im.nspecs * (size_t)g.T, 1);
        if (!im.have) rc = ptdp_errorf(PTDP_ENOMEM, "out of memory");
    }
    for (int pp = 0; rc == PTDP_OK && pp < g.P; pp++)
        for (int tp = 0; rc == PTDP_OK && tp < g.T; tp++) {
            file_path(path, sizeof path, itdir, &g, tp, pp);
            im.path = path;
            rc = ptdp__torch_open(&tf, path);
            for (int c = 0; rc == PTDP_OK && c < v; c++) {
                const int stage = c * g.P + pp;
                int64_t first = 0;
                for (int s = 0; s < stage; s++) first += nl[s];
                const ptdp__pk_node *md = model_dict(tf.root, v, c);
                named *all = NULL;
                int n = 0, cap = 0;
                rc = md ? flatten(md, "", 0, &all, &n, &cap, path)
                        : ptdp_errorf(PTDP_EFORMAT, "%s: a model chunk's state dict is missing",
                                      path);
                for (int i = 0; rc == PTDP_OK && i < n; i++) {
                    char pn[192], full[220];
                    int64_t local;
                    int k = classify(all[i].name, pn, sizeof pn, &local);
                    if (k == N_IGNORE) continue;
                    if (k == N_UNKNOWN) {
                        rc = ptdp_errorf(PTDP_EUNSUPPORTED,
                                         "%s: tensor '%s' is not part of a GPT model ptdp can "
                                         "hold (names it maps: Megatron-Core's local and "
                                         "Transformer Engine specs, legacy Megatron)",
                                         path, all[i].name);
                        break;
                    }
                    if (local >= nl[stage]) local = nl[stage] + 1000000; /* reported below */
                    if (local >= 0)
                        snprintf(full, sizeof full, "layers.%lld.%s", (long long)(first + local),
                                 pn);
                    else
                        snprintf(full, sizeof full, "%s", pn);
                    if (k == N_PARAM && !strcmp(pn, "embedding.word_embeddings.weight") && !im.Vl) {
                        const ptdp__pk_node *t = all[i].t;
                        im.Vl = t->kind == PTDP_PK_TENSOR && t->ndim == 2 ? t->shape[0] : 0;
                        if (padded && im.Vl * g.T != padded)
                            rc = ptdp_errorf(
                                PTDP_EFORMAT,
                                "%s: '%s' has %lld rows per tensor rank, but args.padded_vocab_size "
                                "%lld / %d ranks is not that",
                                path, all[i].name, (long long)im.Vl, (long long)padded, g.T);
                        else if (im.Vl * g.T < cfg.vocab)
                            rc = ptdp_errorf(PTDP_ECONFIG,
                                             "%s: the word embedding has %lld rows, fewer than "
                                             "the vocabulary size %lld (--vocab-size?)",
                                             path, (long long)(im.Vl * g.T), (long long)cfg.vocab);
                        if (rc) break;
                    }
                    /* only a last stage that is not also the first holds the tied copy */
                    if (k == N_HEAD && !(stage == S - 1 && stage != 0)) {
                        rc = ptdp_errorf(PTDP_EUNSUPPORTED,
                                         "%s: '%s' is a separate output layer (untied "
                                         "embeddings); ptdp ties it to the word embedding",
                                         path, all[i].name);
                        break;
                    }
                    rc = place(&im, &tf, all[i].name, full, k, all[i].t, tp);
                }
                free(all);
            }
            ptdp__torch_close(&tf);
        }
    for (int i = 0; rc == PTDP_OK && i < im.nspecs; i++)
        for (int tp = 0; rc == PTDP_OK && tp < (im.specs[i].split == PTDP_SPLIT_NONE ? 1 : g.T);
             tp++)
            if (!im.have[i * g.T + tp])
                rc = ptdp_errorf(PTDP_EFORMAT,
                                 "%s: ptdp's tensor '%s' was not found%s (tensor rank %d): a "
                                 "missing tensor, or a model ptdp cannot represent",
                                 itdir, im.specs[i].name,
                                 im.specs[i].split == PTDP_SPLIT_NONE ? "" : " in every file", tp);
    if (rc == PTDP_OK) {
        ptdp_comm comm;
        ptdp_comm_init_single(&comm);
        ptdp_optimizer none = {0};
        ptdp_ckpt_meta meta = {.iteration = iteration,
                               .consumed_samples = consumed,
                               .optimizer_step = iteration,
                               .cfg = &cfg,
                               .micro_batch = mbs,
                               .global_batch = gbs,
                               .lr = &lr,
                               .adam = &adam,
                               .v = 1,
                               .no_optimizer = 1};
        rc = ptdp_ckpt_prepare_dir(dst);
        if (rc == PTDP_OK) rc = ptdp_ckpt_save(dst, &meta, &im.full, &none, 1, &comm);
        ptdp_comm_finalize(&comm);
    }
    char pad[96] = "no padding rows";
    if (im.Vl * g.T > cfg.vocab)
        snprintf(pad, sizeof pad, "Megatron's padding rows %lld-%lld dropped", (long long)cfg.vocab,
                 (long long)(im.Vl * g.T - 1));
    if (rc == PTDP_OK && log)
        fprintf(log,
                "imported %s (Megatron-LM %s, t=%d p=%d v=%d, checkpoint_version %g): l=%lld "
                "h=%lld a=%lld ffn=%lld V=%lld (%s)\n"
                "wrote %s (iteration %lld, consumed samples %lld); model weights only: the "
                "optimizer state and RNG states were not converted, so train from it with "
                "--load %s --no-load-optim (or --finetune)\n",
                itdir, release ? "release checkpoint" : "checkpoint", g.T, g.P, v, version,
                (long long)cfg.num_layers, (long long)cfg.hidden, (long long)cfg.heads,
                (long long)cfg.ffn_hidden, (long long)cfg.vocab, pad, dst, (long long)iteration,
                (long long)consumed, dst);
    free(im.have);
    free(im.tmp);
    free(nl);
    ptdp_gpt_chunk_free(im.full);
    return rc;
}
