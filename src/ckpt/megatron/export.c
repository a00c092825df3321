/* export.c - a ptdp checkpoint (any layout) out as a Megatron-LM
 * --ckpt-format torch checkpoint: `ptdp checkpoint export-megatron`.
 *
 * Writes OUT/latest_checkpointed_iteration.txt and
 * OUT/iter_%07d/mp_rank_TT[_PPP]/model_optim_rng.pt for the asked tensor
 * size T and pipeline size P, each a torch.save file (format/zip.c, pickle_write.c)
 * of {'args': argparse.Namespace(...), 'checkpoint_version': 3.0,
 * 'iteration': N, 'model': {name: float32 tensor}} with Megatron-Core's
 * names for its local (non-Transformer-Engine) layer spec, layer numbers
 * local to the pipeline stage, the word embedding padded with zero rows to
 * Megatron's padded_vocab_size (a multiple of make_vocab_size_divisible_by
 * x T) and split by vocabulary rows, and on the last stage of a pipeline
 * the tied output layer's copy of it (output_layer.weight), which
 * Megatron-Core's last stage holds. Not written: optimizer state, RNG
 * states, an interleaved (virtual pipeline) layout. */
#define _GNU_SOURCE /* renameat2 */
#include "ckpt/megatron/megatron.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"
#include "ckpt/megatron/megatron_internal.h"
#include "format/torch.h"

ptdp_megatron_export_params ptdp_megatron_export_default_params(void) {
    return (ptdp_megatron_export_params){.t = 1, .p = 1, .make_vocab_size_divisible_by = 128};
}

/* One tensor of one file: its Megatron name, local shape and data (owned). */
typedef struct {
    char name[160];
    int ndim;
    int64_t shape[2];
    float *data;
} out_tensor;

typedef struct {
    out_tensor *t;
    int n, cap;
} out_list;

static float *add(out_list *L, const char *name, int ndim, int64_t r, int64_t c) {
    if (L->n == L->cap) {
        int cap = L->cap ? 2 * L->cap : 32;
        out_tensor *t = realloc(L->t, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        L->t = t, L->cap = cap;
    }
    out_tensor *o = &L->t[L->n];
    snprintf(o->name, sizeof o->name, "%s", name);
    o->ndim = ndim, o->shape[0] = r, o->shape[1] = ndim == 2 ? c : 0;
    o->data = calloc((size_t)(r * (ndim == 2 ? c : 1)) + 1, sizeof(float));
    if (!o->data) return NULL;
    L->n++;
    return o->data;
}

static void list_free(out_list *L) {
    for (int i = 0; i < L->n; i++) free(L->t[i].data);
    free(L->t);
    memset(L, 0, sizeof *L);
}

/* Tensor rank tp's shard of spec sp (global image g) into a new tensor. */
static int shard(out_list *L, const char *name, const ptdp_param_spec *sp, const float *g, int T,
                 int tp, int64_t Vl, int64_t V) {
    const int64_t R = sp->gshape[0], C = sp->ndim == 2 ? sp->gshape[1] : 1;
    /* the word embedding and an untied output layer: Megatron's padded rows */
    const int vocab = sp->role == PTDP_ROLE_EMBEDDING || !strcmp(sp->name, "output_layer.weight");
    int64_t r = R, c = C;
    if (vocab)
        r = Vl;
    else if (sp->split == PTDP_SPLIT_DIM0)
        r = R / T;
    else if (sp->split == PTDP_SPLIT_DIM1)
        c = C / T;
    float *d = add(L, name, sp->ndim, r, c);
    if (!d) return ptdp_errorf(PTDP_ENOMEM, "out of memory exporting");
    if (vocab) {
        for (int64_t i = 0; i < r; i++)
            if (tp * r + i < V) memcpy(d + i * C, g + (tp * r + i) * C, sizeof(float) * (size_t)C);
    } else if (sp->split == PTDP_SPLIT_DIM0) {
        memcpy(d, g + tp * r * C, sizeof(float) * (size_t)(r * C));
    } else if (sp->split == PTDP_SPLIT_DIM1) {
        for (int64_t i = 0; i < r; i++)
            memcpy(d + i * c, g + i * C + tp * c, sizeof(float) * (size_t)c);
    } else {
        memcpy(d, g, sizeof(float) * (size_t)(r * c));
    }
    return PTDP_OK;
}

/* args: what Megatron's loader compares (check_checkpoint_args) and what
 * describes the model, in Megatron's field names. */
static void write_args(ptdp__pkw *w, const ptdp_gpt_config *cfg, int T, int P, int64_t Vp,
                       int64_t divisible, int64_t iteration, int64_t consumed,
                       const ptdp_lr_schedule *lr, int have_lr) {
    ptdp__pkw_namespace_begin(w);
#define I(k, v) ptdp__pkw_str(w, k), ptdp__pkw_int(w, (int64_t)(v))
#define F(k, v) ptdp__pkw_str(w, k), ptdp__pkw_float(w, (double)(v))
#define B(k, v) ptdp__pkw_str(w, k), ptdp__pkw_bool(w, v)
#define S(k, v) ptdp__pkw_str(w, k), ptdp__pkw_str(w, v)
    I("num_layers", cfg->num_layers);
    I("hidden_size", cfg->hidden);
    I("ffn_hidden_size", cfg->ffn_hidden);
    I("num_attention_heads", cfg->heads);
    I("kv_channels", cfg->hidden / cfg->heads);
    B("group_query_attention", ptdp_gpt_groups(cfg) != cfg->heads);
    I("num_query_groups", ptdp_gpt_groups(cfg));
    I("seq_length", cfg->seq_length);
    I("max_position_embeddings", cfg->max_positions);
    I("vocab_size", cfg->vocab);
    I("padded_vocab_size", Vp);
    I("make_vocab_size_divisible_by", divisible);
    S("tokenizer_type", "GPT2BPETokenizer");
    S("position_embedding_type", cfg->rope ? "rope" : "learned_absolute");
    B("add_position_embedding", !cfg->rope);
    if (cfg->rope) { /* a GPT's args stay as they were */
        F("rotary_base", cfg->rotary_base);
        F("rotary_percent", cfg->rotary_percent);
    }
    S("normalization", cfg->rmsnorm ? "RMSNorm" : "LayerNorm");
    F("norm_epsilon", cfg->ln_eps);
    B("add_bias_linear", !cfg->no_bias);
    B("swiglu", cfg->swiglu);
    B("untie_embeddings_and_output_weights", cfg->untie);
    B("apply_residual_connection_post_layernorm", 0);
    F("init_method_std", cfg->init_std);
    F("hidden_dropout", cfg->hidden_dropout);
    F("attention_dropout", cfg->attention_dropout);
    I("seed", (int64_t)cfg->seed);
    I("tensor_model_parallel_size", T);
    I("pipeline_model_parallel_size", P);
    ptdp__pkw_str(w, "virtual_pipeline_model_parallel_size"), ptdp__pkw_none(w);
    S("transformer_impl", "local");
    S("ckpt_format", "torch");
    S("params_dtype_name", "float32");
    I("iteration", iteration);
    I("consumed_train_samples", consumed);
    I("consumed_valid_samples", 0);
    if (have_lr) {
        F("lr", lr->max_lr);
        F("min_lr", lr->min_lr);
        I("global_batch_size", lr->samples_per_step ? lr->samples_per_step : 1);
    }
    S("exported_by", "ptdp checkpoint export-megatron");
#undef I
#undef F
#undef B
#undef S
    ptdp__pkw_namespace_end(w);
}

static int mkdir1(const char *p) {
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
        return ptdp_errorf(PTDP_EIO, "cannot create %s: %s", p, strerror(errno));
    return PTDP_OK;
}

/* What every file of the export is made from. */
typedef struct {
    const ptdp_gpt_config *cfg;
    int T, P;
    int64_t Vp, Vl, lps, divisible; /* padded vocabulary, its rows per rank, layers per stage */
    const ptdp_param_spec *specs;
    int nspecs;
    const float *host; /* the full model's parameters */
    const ptdp_ckpt_loaded *ld;
    const ptdp_lr_schedule *lr;
    int have_lr;
} exporter;

/* SwiGLU's linear_fc1 of tensor rank tp: [gate rows; up rows] of its ffn/T
 * units, from ptdp's gate weight `gate` and the up weight after it. */
static int glu_shard(out_list *L, const char *name, const ptdp_param_spec *gate, const exporter *X,
                     int tp) {
    const ptdp_param_spec *up = gate + 1;
    PTDP_ASSERT(strstr(up->name, "mlp.up_proj.weight"));
    const int64_t fl = gate->gshape[0] / X->T, C = gate->gshape[1];
    float *d = add(L, name, 2, 2 * fl, C);
    if (!d) return ptdp_errorf(PTDP_ENOMEM, "out of memory exporting");
    memcpy(d, X->host + gate->offset + tp * fl * C, sizeof(float) * (size_t)(fl * C));
    memcpy(d + fl * C, X->host + up->offset + tp * fl * C, sizeof(float) * (size_t)(fl * C));
    return PTDP_OK;
}

/* The tensors of file (tp, pp): its stage's layers under Megatron-Core's
 * local-spec names, the embeddings on the first stage, the final norm and
 * (p > 1) the tied output layer's copy on the last. */
static int stage_tensors(const exporter *X, int tp, int pp, out_list *L) {
    int rc = PTDP_OK;
    for (int i = 0; rc == PTDP_OK && i < X->nspecs; i++) {
        const ptdp_param_spec *sp = &X->specs[i];
        char name[192];
        long long layer;
        char suffix[128];
        if (sp->role == PTDP_ROLE_EMBEDDING || sp->role == PTDP_ROLE_POSITION) {
            if (pp != 0) continue;
            snprintf(name, sizeof name, "%s", sp->name);
        } else if (!strcmp(sp->name, "output_layer.weight")) { /* untied: the last stage's */
            if (pp != X->P - 1) continue;
            snprintf(name, sizeof name, "%s", sp->name);
        } else if (!strncmp(sp->name, "final_layernorm.", 16)) {
            if (pp != X->P - 1) continue;
            snprintf(name, sizeof name, "decoder.%s", sp->name);
        } else {
            PTDP_ASSERT(sscanf(sp->name, "layers.%lld.%127s", &layer, suffix) == 2);
            if (layer / X->lps != pp) continue;
            if (!strcmp(suffix, "mlp.up_proj.weight")) continue; /* with the gate, below */
            if (!strcmp(suffix, "mlp.gate_proj.weight")) {
                snprintf(name, sizeof name, "decoder.layers.%lld.mlp.linear_fc1.weight",
                         layer % X->lps);
                rc = glu_shard(L, name, sp, X, tp);
                continue;
            }
            const char *core = ptdp__megatron_core_name(suffix);
            PTDP_ASSERT_MSG(core, sp->name);
            snprintf(name, sizeof name, "decoder.layers.%lld.%s", layer % X->lps, core);
        }
        rc = shard(L, name, sp, X->host + sp->offset, X->T, tp, X->Vl, X->cfg->vocab);
    }
    if (rc == PTDP_OK && X->P > 1 && pp == X->P - 1 && !X->cfg->untie)
        for (int i = 0; rc == PTDP_OK && i < X->nspecs; i++)
            if (X->specs[i].role == PTDP_ROLE_EMBEDDING)
                rc = shard(L, "output_layer.weight", &X->specs[i], X->host + X->specs[i].offset,
                           X->T, tp, X->Vl, X->cfg->vocab);
    return rc;
}

/* itdir/mp_rank_TT[_PPP]/model_optim_rng.pt: a torch.save zip of the
 * pickled dict (args, version, iteration, model) and the tensors' storages. */
static int write_file(const exporter *X, const char *itdir, int tp, int pp) {
    out_list L = {0};
    int rc = stage_tensors(X, tp, pp, &L);
    ptdp__pkw w;
    ptdp__pkw_init(&w);
    ptdp__pkw_dict_begin(&w);
    ptdp__pkw_str(&w, "args");
    write_args(&w, X->cfg, X->T, X->P, X->Vp, X->divisible, X->ld->iteration,
               X->ld->consumed_samples, X->lr, X->have_lr);
    ptdp__pkw_str(&w, "checkpoint_version");
    ptdp__pkw_float(&w, 3.0);
    ptdp__pkw_str(&w, "iteration");
    ptdp__pkw_int(&w, X->ld->iteration);
    ptdp__pkw_str(&w, "model");
    ptdp__pkw_dict_begin(&w);
    for (int i = 0; i < L.n; i++) {
        ptdp__pkw_str(&w, L.t[i].name);
        ptdp__pkw_tensor_f32(&w, L.t[i].ndim, L.t[i].shape);
    }
    ptdp__pkw_dict_end(&w);
    ptdp__pkw_dict_end(&w);
    if (rc == PTDP_OK) rc = ptdp__pkw_finish(&w);
    char path[4500];
    if (X->P > 1)
        snprintf(path, sizeof path, "%s/mp_rank_%02d_%03d", itdir, tp, pp);
    else
        snprintf(path, sizeof path, "%s/mp_rank_%02d", itdir, tp);
    if (rc == PTDP_OK) rc = mkdir1(path);
    ptdp__zipw *z = NULL;
    if (rc == PTDP_OK) {
        snprintf(path + strlen(path), sizeof path - strlen(path), "/model_optim_rng.pt");
        rc = ptdp__zipw_open(&z, path);
    }
    if (rc == PTDP_OK) rc = ptdp__zipw_add(z, "model_optim_rng/data.pkl", w.buf, w.len);
    for (int i = 0; rc == PTDP_OK && i < L.n; i++) {
        char en[64];
        snprintf(en, sizeof en, "model_optim_rng/data/%d", i);
        int64_t n = L.t[i].shape[0] * (L.t[i].ndim == 2 ? L.t[i].shape[1] : 1);
        rc = ptdp__zipw_add(z, en, L.t[i].data, sizeof(float) * (size_t)n);
    }
    if (rc == PTDP_OK) rc = ptdp__zipw_add(z, "model_optim_rng/version", "3\n", 2);
    if (z) {
        int rc2 = ptdp__zipw_close(z, rc == PTDP_OK);
        if (rc == PTDP_OK) rc = rc2;
    }
    free(w.buf);
    list_free(&L);
    return rc;
}

/* A directory that is not empty holds something of the user's (an older
 * export at another layout would stay beside this one, and a Megatron job
 * at that layout would load it): refused unless told. */
static int check_destination(const char *dst, int overwrite) {
    DIR *d = opendir(dst);
    if (!d) return PTDP_OK; /* absent (created later), or not a directory (mkdir says so) */
    char first[256] = "";
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && !n++)
            snprintf(first, sizeof first, "%s", e->d_name);
    closedir(d);
    if (!n || overwrite) return PTDP_OK;
    return ptdp_errorf(PTDP_ECONFIG,
                       "%s is not empty (it holds %s%s): export-megatron writes a whole Megatron "
                       "checkpoint there; export into a new or empty directory, or add "
                       "--overwrite-checkpoints to replace the iteration it exports whole "
                       "(latest_checkpointed_iteration.txt never moves back)",
                       dst, first, n > 1 ? " and more" : "");
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Removes a directory tree this export made (a staging directory, or the
 * iteration directory it replaced); symbolic links are removed, not
 * followed. */
static void remove_tree(const char *dir) {
    (void)nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The staging directory becomes `final` in one step: exchanged with an
 * existing one (renameat2, Linux 3.15+), whose old contents then go; or
 * renamed where there is none. Where the file system cannot exchange, the
 * old directory is renamed aside first. */
static int put_in_place(const char *staging, const char *final) {
    struct stat st;
    if (lstat(final, &st) != 0) {
        if (rename(staging, final) == 0) return PTDP_OK;
        return ptdp_errorf(PTDP_EIO, "cannot rename %s to %s: %s", staging, final, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return ptdp_errorf(PTDP_EIO, "%s exists and is not a directory", final);
    if (renameat2(AT_FDCWD, staging, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
        remove_tree(staging); /* now the old iteration */
        return PTDP_OK;
    }
    char aside[4600];
    snprintf(aside, sizeof aside, "%s.old.%ld", final, (long)getpid());
    if (rename(final, aside) != 0 || rename(staging, final) != 0)
        return ptdp_errorf(PTDP_EIO, "cannot replace %s: %s", final, strerror(errno));
    remove_tree(aside);
    return PTDP_OK;
}

/* dst's latest file names this iteration, unless it names a later one or
 * Megatron's "release" (never moved back). Returns what it names then in
 * *kept (-1: moved; -2: "release"). */
static int move_latest(const char *dst, int64_t iteration, int64_t *kept) {
    int64_t it = 0;
    int rc = ptdp__ckpt_read_latest(dst, 1, &it);
    *kept = -1;
    if (rc == 2 || (rc == 1 && it > iteration)) {
        *kept = rc == 2 ? -2 : it;
        return PTDP_OK;
    }
    char lp[4400], txt[32];
    snprintf(lp, sizeof lp, "%s/%s", dst, LATEST);
    snprintf(txt, sizeof txt, "%lld\n", (long long)iteration);
    rc = ptdp_file_write_atomic(lp, txt);
    ptdp_file_fsync_dir(dst);
    return rc;
}

int ptdp_megatron_export(const char *src, const char *dst, const ptdp_megatron_export_params *ep,
                         FILE *log) {
    const int T = ep->t, P = ep->p;
    ptdp_gpt_config cfg;
    int rc = ptdp_ckpt_read_config(src, &cfg);
    if (rc == PTDP_OK) rc = ptdp_gpt_config_finish(&cfg, ep->make_vocab_size_divisible_by, 1);
    if (rc) return rc;
    if (T < 1 || P < 1 || T > 1024 || P > 1024)
        return ptdp_errorf(PTDP_EINVAL, "--tensor-model-parallel-size and "
                                        "--pipeline-model-parallel-size must be 1..1024");
    if (cfg.heads % T || cfg.ffn_hidden % T)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--tensor-model-parallel-size %d must divide the %lld attention heads "
                           "and the ffn hidden size %lld",
                           T, (long long)cfg.heads, (long long)cfg.ffn_hidden);
    if (cfg.num_layers % P)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--pipeline-model-parallel-size %d must divide the %lld layers", P,
                           (long long)cfg.num_layers);
    rc = check_destination(dst, ep->overwrite);
    if (rc) return rc;
    const int64_t mult = ep->make_vocab_size_divisible_by * T;
    const int64_t Vp = (cfg.vocab + mult - 1) / mult * mult;

    /* the whole model in one process, loaded (resharded) from any layout */
    ptdp_job holder = ptdp_job_default_params();
    holder.model = cfg;
    holder.model.seq_length = 1;
    ptdp_comm comm;
    ptdp_comm_init_single(&comm);
    ptdp_chunk_params cp = ptdp_chunk_default_params();
    cp.job = &holder, cp.layer_end = cfg.num_layers, cp.pre = cp.post = 1;
    cp.tp = &comm.tensor, cp.inference = 1;
    ptdp_gpt_chunk *full = NULL;
    ptdp_ckpt_loaded ld = {0};
    rc = ptdp_gpt_chunk_init(&full, &cp);
    if (rc == PTDP_OK) rc = ptdp_ckpt_load(src, 0, &cfg, &full, NULL, 1, &comm, &ld);
    if (rc == PTDP_OK && !ld.found)
        rc = ptdp_errorf(PTDP_ENOTFOUND, "%s: no ptdp checkpoint there", src);
    ptdp_lr_schedule lr;
    int have_lr = 0;
    if (rc == PTDP_OK) rc = ptdp_ckpt_read_lr(src, &lr, &have_lr);
    exporter X = {.cfg = &cfg,
                  .T = T,
                  .P = P,
                  .Vp = Vp,
                  .Vl = Vp / T,
                  .lps = cfg.num_layers / P,
                  .divisible = ep->make_vocab_size_divisible_by,
                  .ld = &ld,
                  .lr = &lr,
                  .have_lr = have_lr};
    if (full) X.specs = ptdp_gpt_chunk_specs(full, &X.nspecs), X.host = ptdp_gpt_chunk_params(full);

    /* every file into a staging directory, which then replaces DST/iter_N
     * whole: a failed export leaves nothing, and no file of an older
     * export at another layout stays beside the new ones */
    char final[4300], staging[4400];
    snprintf(final, sizeof final, "%s/iter_%07lld", dst, (long long)ld.iteration);
    snprintf(staging, sizeof staging, "%s.tmp.%ld", final, (long)getpid());
    if (rc == PTDP_OK) rc = ptdp_file_mkdirs(dst);
    if (rc == PTDP_OK) rc = mkdir1(staging);
    for (int pp = 0; rc == PTDP_OK && pp < P; pp++)
        for (int tp = 0; rc == PTDP_OK && tp < T; tp++) rc = write_file(&X, staging, tp, pp);
    if (rc == PTDP_OK) rc = put_in_place(staging, final);
    if (rc) remove_tree(staging);
    int64_t kept = -1;
    if (rc == PTDP_OK) rc = move_latest(dst, ld.iteration, &kept);
    if (rc == PTDP_OK && log) {
        fprintf(log,
                "wrote %s: Megatron-LM --ckpt-format torch, iteration %lld, t=%d p=%d (%d "
                "files), Megatron-Core local-spec names, padded_vocab_size %lld; model weights "
                "only (no optimizer or RNG state: load it in Megatron with --no-load-optim "
                "--no-load-rng, or --finetune)\n",
                dst, (long long)ld.iteration, T, P, T * P, (long long)Vp);
        char what[64] = "release";
        if (kept >= 0) snprintf(what, sizeof what, "iteration %lld", (long long)kept);
        if (kept != -1)
            fprintf(log,
                    "%s/latest_checkpointed_iteration.txt still says %s, so Megatron's --load %s "
                    "loads that, not this export (%s)\n",
                    dst, what, dst, final);
    }
    ptdp_gpt_chunk_free(full);
    return rc;
}
