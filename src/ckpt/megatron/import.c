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
 * (no GQA) that is [a][q|k|v][hd], ptdp's own order, so they copy as they are
 * (with GQA it is ptdp's grouped order too). SwiGLU's linear_fc1 holds each
 * rank's [gate rows; up rows], split here into ptdp's gate and up weights; an
 * untied output_layer is ptdp's output_layer.
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
#include "ckpt/megatron/megatron_internal.h"
#include "format/torch.h"

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

/* What ptdp cannot hold: refused by name. (The Llama family's blocks,
 * RMSNorm, SwiGLU, rotary embeddings, grouped-query attention, untied
 * embeddings and no biases, are held: model_config reads them.) */
static int refuse_features(const margs *a, const char *path) {
    int64_t heads = 0, kv = 0, h = 0, ne = 0;
    const char *why = NULL;
    char buf[160];
    const char *pe = arg_str(a, "position_embedding_type"), *norm = arg_str(a, "normalization");
    if (pe && strcmp(pe, "learned_absolute") && strcmp(pe, "rope"))
        snprintf(buf, sizeof buf,
                 "args.position_embedding_type is '%.40s'; ptdp has learned absolute and rotary "
                 "(rope) position embeddings",
                 pe),
            why = buf;
    else if (ptdp__pk_attr(a->ns, "add_position_embedding") &&
             !arg_true(a, "add_position_embedding") && !(pe && !strcmp(pe, "rope")) &&
             !arg_true(a, "use_rotary_position_embeddings"))
        why = "args.add_position_embedding is False without rotary embeddings; ptdp's models have "
              "one or the other";
    else if (norm && strcmp(norm, "LayerNorm") && strcmp(norm, "RMSNorm"))
        snprintf(buf, sizeof buf, "args.normalization is '%.40s'; ptdp has LayerNorm and RMSNorm",
                 norm),
            why = buf;
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
    ptdp_job holder;  /* the full chunk's job (its model) and group (it keeps pointers) */
    ptdp_group one;
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

/* Reads tensor t (its values as fp32) into im->tmp, grown to fit. */
static int read_tensor(importer *im, const ptdp__torch_file *tf, const ptdp__pk_node *t,
                       const char *mname) {
    if (t->numel > im->tmp_cap) {
        float *b = realloc(im->tmp, sizeof(float) * (size_t)t->numel);
        if (!b) return ptdp_errorf(PTDP_ENOMEM, "out of memory reading %s", im->path);
        im->tmp = b, im->tmp_cap = t->numel;
    }
    int rc = ptdp__torch_read_f32(tf, t, im->tmp, t->numel);
    return rc ? ptdp_errorf(rc, "%s (tensor '%s')", ptdp_last_error(), mname) : PTDP_OK;
}

/* One tensor of tensor rank tp into the global image. */
static int place(importer *im, const ptdp__torch_file *tf, const char *mname, const char *pname,
                 int kind, const ptdp__pk_node *t, int tp) {
    int idx;
    const ptdp_param_spec *sp = find_spec(im, pname, &idx);
    long long layer = -1;
    if (!sp && sscanf(pname, "layers.%lld.", &layer) == 1 && layer >= im->cfg->num_layers)
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: tensor '%s' is layer-numbered beyond the model's %lld layers "
                           "(check num_layers and the pipeline size)",
                           im->path, mname, (long long)im->cfg->num_layers);
    if (!sp) /* a tensor the blocks of args do not have */
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: tensor '%s' (ptdp's %s) is not part of the model the checkpoint's "
                           "args describe (RMSNorm has no norm bias, rotary embeddings no position "
                           "table, add_bias_linear False no biases): its args and tensors disagree",
                           im->path, mname, pname);
    if (t->kind != PTDP_PK_TENSOR)
        return ptdp_errorf(PTDP_EFORMAT, "%s: '%s' is not a tensor", im->path, mname);
    /* the word embedding and an untied output layer: Megatron's padded rows per rank */
    const int wte = sp->role == PTDP_ROLE_EMBEDDING || !strcmp(sp->name, "output_layer.weight"),
              T = im->T;
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
    int rc = read_tensor(im, tf, t, mname);
    if (rc) return rc;
    float *g = im->host + sp->offset;
    const int64_t C = sp->ndim == 2 ? sp->gshape[1] : 1;
    if (kind == PTDP__MEG_HEAD && !im->cfg->untie) { /* the tied copy must equal the embedding */
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

/* SwiGLU's linear_fc1 of tensor rank tp, [2 ffn/T, h]: its gate rows, then
 * its up rows (Megatron's per-rank [gate; up]), into ptdp's gate and up
 * weights of layer `layer` at rows [tp ffn/T, (tp + 1) ffn/T). */
static int place_glu(importer *im, const ptdp__torch_file *tf, const char *mname, int64_t layer,
                     const ptdp__pk_node *t, int tp) {
    char gn[96], un[96];
    snprintf(gn, sizeof gn, "layers.%lld.mlp.gate_proj.weight", (long long)layer);
    snprintf(un, sizeof un, "layers.%lld.mlp.up_proj.weight", (long long)layer);
    int gi = 0, ui = 0;
    const ptdp_param_spec *gs = find_spec(im, gn, &gi), *us = find_spec(im, un, &ui);
    if (!gs || !us)
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: tensor '%s' is layer-numbered beyond the model's %lld layers",
                           im->path, mname, (long long)im->cfg->num_layers);
    const int64_t fl = gs->gshape[0] / im->T, C = gs->gshape[1];
    if (t->kind != PTDP_PK_TENSOR || t->ndim != 2 || t->shape[0] != 2 * fl || t->shape[1] != C)
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: '%s' is not [%lld, %lld] (SwiGLU's gate and up rows of "
                           "ffn_hidden_size %lld over %d tensor ranks)",
                           im->path, mname, (long long)(2 * fl), (long long)C,
                           (long long)gs->gshape[0], im->T);
    if (im->have[gi * im->T + tp])
        return ptdp_errorf(PTDP_EFORMAT, "%s: tensor '%s' appears twice", im->path, mname);
    im->have[gi * im->T + tp] = im->have[ui * im->T + tp] = 1;
    int rc = read_tensor(im, tf, t, mname);
    if (rc) return rc;
    memcpy(im->host + gs->offset + tp * fl * C, im->tmp, sizeof(float) * (size_t)(fl * C));
    memcpy(im->host + us->offset + tp * fl * C, im->tmp + fl * C, sizeof(float) * (size_t)(fl * C));
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
        if (ptdp__megatron_classify(all[i].name, pn, sizeof pn, &local) == PTDP__MEG_PARAM &&
            local + 1 > *nl)
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
    /* the Llama family's blocks, Megatron's args and defaults */
    const char *pe = arg_str(a, "position_embedding_type"), *norm = arg_str(a, "normalization");
    cfg->rmsnorm = norm && !strcmp(norm, "RMSNorm");
    cfg->swiglu = arg_true(a, "swiglu");
    cfg->rope = (pe && !strcmp(pe, "rope")) || arg_true(a, "use_rotary_position_embeddings");
    cfg->rotary_base = arg_float(a, "rotary_base", &d) ? d : 10000.0;
    cfg->rotary_percent = arg_float(a, "rotary_percent", &d) ? (float)d : 1.0f;
    int64_t g = 0;
    if (arg_true(a, "group_query_attention") && arg_int(a, "num_query_groups", &g) && g > 0 &&
        g != cfg->heads)
        cfg->query_groups = g;
    cfg->untie = arg_true(a, "untie_embeddings_and_output_weights");
    cfg->no_bias = ptdp__pk_attr(a->ns, "add_bias_linear") && !arg_true(a, "add_bias_linear");
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

/* What the directory and its first file say about the checkpoint. */
typedef struct {
    char itdir[4200];
    grid g;
    int release, v; /* a release checkpoint; virtual chunks per pipeline rank */
    int64_t iteration, consumed, padded;
    double version;
    ptdp_gpt_config cfg;
    ptdp_lr_schedule lr;
    ptdp_adamw_params adam;
    int64_t mbs, gbs;
    int64_t *nl; /* layers of virtual stage c*P + pp, [P*v] */
} source;

/* Step 1: the iteration directory, its T x P files, and from tensor and
 * pipeline rank 0's file the args (checked, then the model configuration
 * and the training metadata), the checkpoint version and the iteration. */
static int read_source(const char *src, const ptdp_megatron_import_params *ip, source *S) {
    char path[4400];
    int rc = resolve(src, S->itdir, sizeof S->itdir, &S->iteration, &S->release);
    if (rc == PTDP_OK) rc = scan(S->itdir, &S->g);
    if (rc) return rc;
    ptdp__torch_file tf;
    file_path(path, sizeof path, S->itdir, &S->g, 0, 0);
    rc = ptdp__torch_open(&tf, path);
    if (rc) return rc;
    margs a = {.ns = ptdp__pk_get(tf.root, "args")};
    if (tf.root->kind != PTDP_PK_DICT ||
        (!ptdp__pk_get(tf.root, "model") && !ptdp__pk_get(tf.root, "model0")))
        rc = ptdp_errorf(PTDP_EFORMAT,
                         "%s: not a Megatron checkpoint (no 'model' or 'model0' state dict)", path);
    const ptdp__pk_node *ver = ptdp__pk_get(tf.root, "checkpoint_version");
    S->version = ver && ver->kind == PTDP_PK_FLOAT ? ver->f
                 : ver && ver->kind == PTDP_PK_INT ? (double)ver->i
                                                   : 0;
    if (rc == PTDP_OK && S->version < 2.0)
        rc = ptdp_errorf(PTDP_EUNSUPPORTED,
                         "%s: checkpoint_version %g: versions before 2.0 store the query, key "
                         "and value rows in another order; load and save it with a recent "
                         "Megatron-LM first",
                         path, S->version);
    if (rc == PTDP_OK && a.ns && a.ns->kind != PTDP_PK_OBJECT) a.ns = NULL;
    if (rc == PTDP_OK) rc = refuse_features(&a, path);
    int64_t targ = 0, parg = 0, varg = 1;
    if (rc == PTDP_OK && arg_int(&a, "tensor_model_parallel_size", &targ) && targ != S->g.T)
        rc = ptdp_errorf(PTDP_EFORMAT,
                         "%s: args.tensor_model_parallel_size is %lld but the directory holds %d "
                         "tensor ranks (missing mp_rank_* directories?)",
                         S->itdir, (long long)targ, S->g.T);
    if (rc == PTDP_OK && arg_int(&a, "pipeline_model_parallel_size", &parg) && parg != S->g.P)
        rc = ptdp_errorf(PTDP_EFORMAT,
                         "%s: args.pipeline_model_parallel_size is %lld but the directory holds "
                         "%d pipeline ranks (missing mp_rank_* directories?)",
                         S->itdir, (long long)parg, S->g.P);
    if (!arg_int(&a, "virtual_pipeline_model_parallel_size", &varg) || varg < 1) varg = 1;
    if (rc == PTDP_OK && varg > 1 && !ptdp__pk_get(tf.root, "model0"))
        varg = 1; /* saved without interleaving after all */
    if (rc == PTDP_OK && varg > 64)
        rc = ptdp_errorf(PTDP_EFORMAT, "%s: %lld virtual pipeline chunks", path, (long long)varg);
    S->v = (int)varg;
    const ptdp__pk_node *it = ptdp__pk_get(tf.root, "iteration");
    if (rc == PTDP_OK && it && it->kind == PTDP_PK_INT) S->iteration = it->i;
    arg_int(&a, "consumed_train_samples", &S->consumed);
    if (rc == PTDP_OK) rc = model_config(&a, ip, path, &S->cfg);
    training_meta(&a, &S->lr, &S->adam, &S->mbs, &S->gbs);
    arg_int(&a, "padded_vocab_size", &S->padded);
    ptdp__torch_close(&tf);
    return rc;
}

/* Step 2: the layers of every virtual stage, from tensor rank 0's files;
 * together they must be the model's. */
static int stage_layers(source *S) {
    const int P = S->g.P, v = S->v;
    char path[4400];
    S->nl = calloc((size_t)(P * v) + 1, sizeof *S->nl);
    if (!S->nl) return ptdp_errorf(PTDP_ENOMEM, "out of memory");
    int rc = PTDP_OK;
    for (int pp = 0; rc == PTDP_OK && pp < P; pp++) {
        ptdp__torch_file tf;
        file_path(path, sizeof path, S->itdir, &S->g, 0, pp);
        rc = ptdp__torch_open(&tf, path);
        for (int c = 0; rc == PTDP_OK && c < v; c++) {
            const ptdp__pk_node *md = model_dict(tf.root, v, c);
            if (!md)
                rc = ptdp_errorf(PTDP_EFORMAT, "%s: no state dict 'model%s' (%d virtual chunks)",
                                 path, v == 1 ? "" : "N", v);
            else
                rc = count_layers(md, path, &S->nl[c * P + pp]);
        }
        ptdp__torch_close(&tf);
    }
    int64_t total = 0;
    for (int s = 0; s < P * v; s++) total += S->nl[s];
    if (rc == PTDP_OK && total != S->cfg.num_layers)
        rc = ptdp_errorf(PTDP_EFORMAT,
                         "%s: the files hold %lld layers but the model has %lld (args.num_layers "
                         "or --num-layers)",
                         S->itdir, (long long)total, (long long)S->cfg.num_layers);
    return rc;
}

/* Step 3: a full model (t = 1, every layer, zeroed) to fill. */
static int importer_init(importer *im, const source *S) {
    *im = (importer){.T = S->g.T,
                     .P = S->g.P,
                     .cfg = &S->cfg,
                     .holder = ptdp_job_default_params(),
                     .one = {.name = "import", .size = 1, .rank = 0}};
    im->holder.model = S->cfg;
    im->holder.model.seq_length = 1;
    ptdp_chunk_params cp = ptdp_chunk_default_params();
    cp.job = &im->holder, cp.layer_end = S->cfg.num_layers, cp.pre = cp.post = 1;
    cp.tp = &im->one;
    cp.inference = 1;
    int rc = ptdp_gpt_chunk_init(&im->full, &cp);
    if (rc) return rc;
    im->specs = ptdp_gpt_chunk_specs(im->full, &im->nspecs);
    im->host = ptdp_gpt_chunk_params(im->full);
    memset(im->host, 0, sizeof(float) * (size_t)ptdp_gpt_chunk_numel(im->full));
    im->have = calloc((size_t)im->nspecs * (size_t)S->g.T, 1);
    return im->have ? PTDP_OK : ptdp_errorf(PTDP_ENOMEM, "out of memory");
}

static void importer_free(importer *im) {
    free(im->have);
    free(im->tmp);
    ptdp_gpt_chunk_free(im->full);
}

/* One tensor of virtual stage `stage` (whose first global layer is
 * `first`) of tensor rank tp: mapped to ptdp's name and placed. */
static int import_tensor(importer *im, const source *S, const ptdp__torch_file *tf, const named *t,
                         int stage, int64_t first, int tp) {
    const int T = S->g.T;
    char pn[192], full[220];
    int64_t local;
    const int k = ptdp__megatron_classify(t->name, pn, sizeof pn, &local);
    if (k == PTDP__MEG_IGNORE) return PTDP_OK;
    if (k == PTDP__MEG_UNKNOWN)
        return ptdp_errorf(PTDP_EUNSUPPORTED,
                           "%s: tensor '%s' is not part of a GPT model ptdp can hold (names it "
                           "maps: Megatron-Core's local and Transformer Engine specs, legacy "
                           "Megatron)",
                           im->path, t->name);
    if (local >= S->nl[stage]) local = S->nl[stage] + 1000000; /* place() reports it */
    if (local >= 0)
        snprintf(full, sizeof full, "layers.%lld.%s", (long long)(first + local), pn);
    else
        snprintf(full, sizeof full, "%s", pn);
    if (k == PTDP__MEG_PARAM && !strcmp(pn, "embedding.word_embeddings.weight") && !im->Vl) {
        im->Vl = t->t->kind == PTDP_PK_TENSOR && t->t->ndim == 2 ? t->t->shape[0] : 0;
        if (S->padded && im->Vl * T != S->padded)
            return ptdp_errorf(PTDP_EFORMAT,
                               "%s: '%s' has %lld rows per tensor rank, but "
                               "args.padded_vocab_size %lld / %d ranks is not that",
                               im->path, t->name, (long long)im->Vl, (long long)S->padded, T);
        if (im->Vl * T < S->cfg.vocab)
            return ptdp_errorf(PTDP_ECONFIG,
                               "%s: the word embedding has %lld rows, fewer than the vocabulary "
                               "size %lld (--vocab-size?)",
                               im->path, (long long)(im->Vl * T), (long long)S->cfg.vocab);
    }
    if (k == PTDP__MEG_HEAD && S->cfg.untie) /* Megatron's output layer, ptdp's too */
        return place(im, tf, t->name, "output_layer.weight", PTDP__MEG_PARAM, t->t, tp);
    if (S->cfg.swiglu && local >= 0 && !strcmp(pn, "mlp.dense_h_to_4h.weight"))
        return place_glu(im, tf, t->name, first + local, t->t, tp);
    /* only a last stage that is not also the first holds the tied copy */
    const int last = S->g.P * S->v - 1;
    if (k == PTDP__MEG_HEAD && !(stage == last && stage != 0))
        return ptdp_errorf(PTDP_EUNSUPPORTED,
                           "%s: '%s' is a separate output layer (untied embeddings); ptdp ties "
                           "it to the word embedding",
                           im->path, t->name);
    return place(im, tf, t->name, full, k, t->t, tp);
}

/* Step 4: every tensor of file (tp, pp), chunk after chunk. */
static int import_file(importer *im, const source *S, int tp, int pp) {
    char path[4400];
    file_path(path, sizeof path, S->itdir, &S->g, tp, pp);
    im->path = path;
    ptdp__torch_file tf;
    int rc = ptdp__torch_open(&tf, path);
    for (int c = 0; rc == PTDP_OK && c < S->v; c++) {
        const int stage = c * S->g.P + pp;
        int64_t first = 0;
        for (int s = 0; s < stage; s++) first += S->nl[s];
        const ptdp__pk_node *md = model_dict(tf.root, S->v, c);
        named *all = NULL;
        int n = 0, cap = 0;
        rc = md ? flatten(md, "", 0, &all, &n, &cap, path)
                : ptdp_errorf(PTDP_EFORMAT, "%s: a model chunk's state dict is missing", path);
        for (int i = 0; rc == PTDP_OK && i < n; i++)
            rc = import_tensor(im, S, &tf, &all[i], stage, first, tp);
        free(all);
    }
    ptdp__torch_close(&tf);
    im->path = NULL;
    return rc;
}

/* Step 5: every tensor ptdp's model has was found (each tensor-parallel
 * shard of a split one). */
static int check_complete(const importer *im, const source *S) {
    for (int i = 0; i < im->nspecs; i++) {
        const int split = im->specs[i].split != PTDP_SPLIT_NONE;
        for (int tp = 0; tp < (split ? S->g.T : 1); tp++)
            if (!im->have[i * S->g.T + tp])
                return ptdp_errorf(PTDP_EFORMAT,
                                   "%s: ptdp's tensor '%s' was not found%s (tensor rank %d): a "
                                   "missing tensor, or a model ptdp cannot represent",
                                   S->itdir, im->specs[i].name, split ? " in every file" : "", tp);
    }
    return PTDP_OK;
}

/* Step 0: a destination that holds checkpoints is the user's; nothing is
 * written among them unless told. */
static int check_destination(const char *dst, int overwrite) {
    int64_t newest = 0;
    int rc = ptdp_ckpt_newest(dst, &newest);
    if (rc <= 0 || overwrite) return rc < 0 ? rc : PTDP_OK;
    return ptdp_errorf(PTDP_ECONFIG,
                       "%s already holds ptdp checkpoints (the newest: iteration %lld): "
                       "import-megatron would write among them; import into a new or empty "
                       "directory, or add --overwrite-checkpoints (an iteration it holds is "
                       "replaced; latest_checkpointed_iteration.txt never moves back)",
                       dst, (long long)newest);
}

/* Step 6: the full model as a weights-only ptdp checkpoint. */
static int save_import(importer *im, const source *S, const char *dst, int overwrite) {
    ptdp_comm comm;
    ptdp_comm_init_single(&comm);
    ptdp_optimizer none = {0};
    ptdp_ckpt_meta meta = {.iteration = S->iteration,
                           .consumed_samples = S->consumed,
                           .optimizer_step = S->iteration,
                           .cfg = &S->cfg,
                           .micro_batch = S->mbs,
                           .global_batch = S->gbs,
                           .lr = &S->lr,
                           .adam = &S->adam,
                           .v = 1,
                           .no_optimizer = 1,
                           .overwrite = overwrite};
    int rc = ptdp_ckpt_prepare_dir(dst);
    if (rc == PTDP_OK) rc = ptdp_ckpt_save(dst, &meta, &im->full, &none, 1, &comm);
    ptdp_comm_finalize(&comm);
    return rc;
}

static void summary(FILE *log, const importer *im, const source *S, const char *dst) {
    const ptdp_gpt_config *c = &S->cfg;
    const int64_t rows = im->Vl * S->g.T;
    char pad[96] = "no padding rows";
    if (rows > c->vocab)
        snprintf(pad, sizeof pad, "Megatron's padding rows %lld-%lld dropped", (long long)c->vocab,
                 (long long)(rows - 1));
    fprintf(log,
            "imported %s (Megatron-LM %s, t=%d p=%d v=%d, checkpoint_version %g): l=%lld "
            "h=%lld a=%lld ffn=%lld V=%lld (%s)\n"
            "wrote %s (iteration %lld, consumed samples %lld); model weights only: the "
            "optimizer state and RNG states were not converted, so train from it with "
            "--load %s --no-load-optim (or --finetune)\n",
            S->itdir, S->release ? "release checkpoint" : "checkpoint", S->g.T, S->g.P, S->v,
            S->version, (long long)c->num_layers, (long long)c->hidden, (long long)c->heads,
            (long long)c->ffn_hidden, (long long)c->vocab, pad, dst, (long long)S->iteration,
            (long long)S->consumed, dst);
    int64_t latest = 0;
    if (ptdp__ckpt_read_latest(dst, 0, &latest) == 1 && latest > S->iteration)
        fprintf(log,
                "%s/latest_checkpointed_iteration.txt still names iteration %lld (newer): load "
                "this import with --load %s/iter_%07lld\n",
                dst, (long long)latest, dst, (long long)S->iteration);
}

int ptdp_megatron_import(const char *src, const char *dst, const ptdp_megatron_import_params *ip,
                         FILE *log) {
    source S = {0};
    importer im = {0};
    int rc = check_destination(dst, ip->overwrite);
    if (rc == PTDP_OK) rc = read_source(src, ip, &S);
    if (rc == PTDP_OK) rc = stage_layers(&S);
    if (rc == PTDP_OK) rc = importer_init(&im, &S);
    for (int pp = 0; rc == PTDP_OK && pp < S.g.P; pp++)
        for (int tp = 0; rc == PTDP_OK && tp < S.g.T; tp++) rc = import_file(&im, &S, tp, pp);
    if (rc == PTDP_OK) rc = check_complete(&im, &S);
    if (rc == PTDP_OK) rc = save_import(&im, &S, dst, ip->overwrite);
    if (rc == PTDP_OK && log) summary(log, &im, &S, dst);
    importer_free(&im);
    free(S.nl);
    return rc;
}
