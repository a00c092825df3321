/* checkpoint.c - layout-independent training checkpoints: saving one shard
 * file per rank plus a manifest, loading (with resharding) into any
 * (t, p, d, v, ZeRO-1) layout, and the info/verify tools. Reading the
 * manifest is manifest.c's. The format is in
 * ckpt.h and docs/checkpoint-format.md. Not here: the trainer's loop
 * (cli/cmd_train.c decides when to save). */
#define _POSIX_C_SOURCE 200809L
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"
#include "format/format.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- small helpers ---------------------------------------------------------- */

/* Every rank learns whether any rank failed; all return the code and message
 * of the lowest failing world rank. Collective over the world. */
static int agree(ptdp_comm *comm, int rc) {
    int32_t who = rc ? INT32_MAX - comm->world_rank : 0;
    ptdp_allreduce_max_i32(&comm->world, &who, 1);
    if (!who) return PTDP_OK;
    enum { MSG = 1024 };
    int32_t *buf = calloc(MSG + 1, sizeof(int32_t));
    PTDP_ASSERT_MSG(buf, "out of memory");
    if (INT32_MAX - who == comm->world_rank) {
        const char *m = ptdp_last_error();
        buf[0] = -rc;
        for (int i = 0; i < MSG - 1 && m[i]; i++) buf[1 + i] = (unsigned char)m[i];
    }
    ptdp_allreduce_max_i32(&comm->world, buf, MSG + 1);
    char msg[MSG];
    int i = 0;
    for (; i < MSG - 1 && buf[1 + i]; i++) msg[i] = (char)buf[1 + i];
    msg[i] = 0;
    int code = -buf[0];
    free(buf);
    return ptdp_errorf(code ? code : PTDP_EIO, "%s", msg);
}

/* Shard files, opened and checksummed on first use. */
typedef struct {
    const manifest *M;
    ptdp_st_file **open;
} file_cache;

static int cache_get(file_cache *fc, int i, ptdp_st_file **out) {
    if (fc->open[i]) {
        *out = fc->open[i];
        return PTDP_OK;
    }
    const file_rec *fr = &fc->M->files[i];
    char path[4400];
    int rc = ptdp__ckpt_shard_path(fc->M->dir, fr->name, path, sizeof path);
    if (rc) return rc;
    uint32_t crc;
    int64_t size;
    rc = ptdp_file_crc32(path, &crc, &size);
    if (rc) return rc;
    if (size != fr->bytes)
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: the file is %lld bytes but %s says %lld (truncated or replaced)",
                           path, (long long)size, MANIFEST, (long long)fr->bytes);
    if (crc != fr->crc)
        return ptdp_errorf(
            PTDP_EFORMAT,
            "%s: checksum mismatch (CRC-32 %08x on disk, %08x in %s): the file is corrupted", path,
            crc, fr->crc, MANIFEST);
    rc = ptdp_st_open(&fc->open[i], path);
    if (rc) return rc;
    *out = fc->open[i];
    return PTDP_OK;
}

static void cache_close(file_cache *fc) {
    for (int i = 0; fc->open && i < fc->M->nfiles; i++) ptdp_st_close(fc->open[i]);
    free(fc->open);
}

/* Reads a shard record's values (e1-e0 floats) into a malloc'd buffer. */
static int read_shard(file_cache *fc, const shard_rec *s, float **out) {
    ptdp_st_file *f;
    *out = NULL;
    int rc = cache_get(fc, s->file, &f);
    if (rc) return rc;
    const ptdp_st_tensor *t = ptdp_st_find(f, s->key);
    if (!t)
        return ptdp_errorf(PTDP_EFORMAT, "%s: tensor '%s' listed in %s is missing", ptdp_st_path(f),
                           s->key, MANIFEST);
    if (t->dtype != PTDP_ST_F32 || t->numel != s->e1 - s->e0)
        return ptdp_errorf(PTDP_EFORMAT, "%s: tensor '%s' has %lld elements, %s says %lld",
                           ptdp_st_path(f), s->key, (long long)t->numel, MANIFEST,
                           (long long)(s->e1 - s->e0));
    float *buf = malloc(sizeof(float) * (size_t)(t->numel + 1));
    if (!buf) return ptdp_errorf(PTDP_ENOMEM, "out of memory reading %s", ptdp_st_path(f));
    rc = ptdp_st_read_f32(f, s->key, buf, t->numel);
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    return PTDP_OK;
}

/* ---- saving --------------------------------------------------------------------- */

static void add_range(cJSON *o, const char *key, int64_t a, int64_t b) {
    cJSON *arr = cJSON_AddArrayToObject(o, key);
    cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)a));
    cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)b));
}

/* Global rectangle of spec sp's shard on TP rank tp. */
static void shard_rect(const ptdp_param_spec *sp, int tp, int64_t *r0, int64_t *c0) {
    *r0 = sp->split == PTDP_SPLIT_DIM0 ? (int64_t)tp * sp->lshape[0] : 0;
    *c0 = sp->split == PTDP_SPLIT_DIM1 ? (int64_t)tp * sp->lshape[1] : 0;
}

/* Whether this rank writes spec sp of a chunk: TP rank 0 for replicated
 * tensors, the first stage's copy of the tied embedding. */
static int writes_spec(const ptdp_param_spec *sp, int tp, int first_stage) {
    if (sp->split == PTDP_SPLIT_NONE && tp != 0) return 0;
    if (sp->role == PTDP_ROLE_EMBEDDING && !first_stage) return 0;
    return 1;
}

static int chunk_is_first(ptdp_gpt_chunk *c) { return ptdp_gpt_chunk_is_first(c); }

static cJSON *shard_json(const ptdp_param_spec *sp, int tp, int kind, const char *key, int64_t e0,
                         int64_t e1) {
    int64_t r0, c0;
    shard_rect(sp, tp, &r0, &c0);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tensor", sp->name);
    cJSON_AddStringToObject(o, "kind", ptdp__ckpt_kind_names[kind]);
    cJSON_AddStringToObject(o, "key", key);
    cJSON *shp = cJSON_AddArrayToObject(o, "shape");
    cJSON_AddItemToArray(shp, cJSON_CreateNumber((double)sp->gshape[0]));
    if (sp->ndim == 2) cJSON_AddItemToArray(shp, cJSON_CreateNumber((double)sp->gshape[1]));
    add_range(o, "rows", r0, r0 + sp->lshape[0]);
    add_range(o, "cols", c0, c0 + sp->lshape[1]);
    add_range(o, "elements", e0, e1);
    return o;
}

/* One rank's part: its shard file (if it holds unique data) and the JSON
 * describing it, {"rank":R,"file":...,"bytes":..,"crc32":..,"shards":[...]}. */
static int save_local(const char *itdir, const ptdp_ckpt_meta *meta, ptdp_gpt_chunk *const *chunks,
                      ptdp_optimizer *opts, int nchunks, ptdp_comm *comm, char **json_out) {
    *json_out = NULL;
    cJSON *me = cJSON_CreateObject(), *shards = cJSON_CreateArray();
    cJSON_AddNumberToObject(me, "rank", comm->world_rank);
    ptdp_st_writer *w = NULL;
    int rc = ptdp_st_writer_init(&w);
    float *hosts[PTDP_MAX_CHUNKS * 2] = {0};
    int nwritten = 0;
    const int tp = comm->tensor.rank;
    const int w_params = comm->dp == 0, w_optim = comm->dp == 0 || meta->zero;
    for (int c = 0; rc == PTDP_OK && c < nchunks; c++) {
        int n;
        const ptdp_param_spec *sp = ptdp_gpt_chunk_specs(chunks[c], &n);
        const int first = chunk_is_first(chunks[c]);
        const ptdp_optimizer *o = &opts[c];
        float *P = malloc(sizeof(float) * (size_t)(ptdp_gpt_chunk_numel(chunks[c]) + 1));
        float *MV = malloc(sizeof(float) * (size_t)(2 * o->state_len + 1));
        hosts[2 * c] = P;
        hosts[2 * c + 1] = MV;
        if (!P || !MV) {
            rc = ptdp_errorf(PTDP_ENOMEM, "out of memory saving a checkpoint");
            break;
        }
        ptdp_gpt_chunk_download_params(chunks[c], P);
        if (o->state_len)
            o->be->download(o->be, MV, o->m, sizeof(float) * (size_t)(2 * o->state_len));
        for (int i = 0; rc == PTDP_OK && i < n; i++) {
            if (!writes_spec(&sp[i], tp, first)) continue;
            char key[160];
            if (w_params) {
                snprintf(key, sizeof key, "param/%s", sp[i].name);
                int64_t shape[2] = {sp[i].lshape[0], sp[i].lshape[1]};
                rc = ptdp_st_writer_add(w, key, PTDP_ST_F32, sp[i].ndim, shape, P + sp[i].offset);
                cJSON_AddItemToArray(shards, shard_json(&sp[i], tp, K_PARAM, key, 0, sp[i].numel));
                nwritten++;
            }
            for (int k = 0; w_optim && rc == PTDP_OK && k < o->nruns; k++) {
                const ptdp_optim_run *run = &o->runs[k];
                if (run->off < sp[i].offset || run->off >= sp[i].offset + sp[i].numel) continue;
                int64_t e0 = run->off - sp[i].offset, e1 = e0 + run->len;
                for (int kind = K_EXP_AVG; rc == PTDP_OK && kind <= K_EXP_AVG_SQ; kind++) {
                    snprintf(key, sizeof key, "%s/%s/%lld", ptdp__ckpt_kind_names[kind], sp[i].name,
                             (long long)e0);
                    int64_t len = run->len;
                    const float *src = MV + (kind == K_EXP_AVG ? 0 : o->state_len) + run->state;
                    rc = ptdp_st_writer_add(w, key, PTDP_ST_F32, 1, &len, src);
                    cJSON_AddItemToArray(shards, shard_json(&sp[i], tp, kind, key, e0, e1));
                    nwritten++;
                }
            }
        }
    }
    if (rc == PTDP_OK && nwritten) {
        char name[64], path[4400];
        snprintf(name, sizeof name, "rank_%05d.safetensors", comm->world_rank);
        snprintf(path, sizeof path, "%s/%s", itdir, name);
        ptdp_st_writer_meta(w, "ptdp_checkpoint_iteration", "see manifest.json");
        if (ptdp_fault("save")) /* PTDP_FAULT=save@R: rank R's write fails */
            rc =
                ptdp_errorf(PTDP_EIO, "%s: cannot write: injected failure (PTDP_FAULT=save)", path);
        if (rc == PTDP_OK) rc = ptdp_st_write(w, path);
        uint32_t crc = 0;
        int64_t size = 0;
        if (rc == PTDP_OK) rc = ptdp_file_crc32(path, &crc, &size);
        char hex[16];
        snprintf(hex, sizeof hex, "%08x", crc);
        cJSON_AddStringToObject(me, "file", name);
        cJSON_AddNumberToObject(me, "bytes", (double)size);
        cJSON_AddStringToObject(me, "crc32", hex);
    }
    cJSON_AddItemToObject(me, "shards", shards);
    ptdp_st_writer_free(w);
    for (int i = 0; i < 2 * nchunks; i++) free(hosts[i]);
    if (rc == PTDP_OK) {
        *json_out = cJSON_PrintUnformatted(me);
        if (!*json_out) rc = ptdp_errorf(PTDP_ENOMEM, "out of memory saving a checkpoint");
    }
    cJSON_Delete(me);
    return rc;
}

/* World rank 0: the manifest from every rank's part. */
static int write_manifest(const char *itdir, const ptdp_ckpt_meta *meta, ptdp_comm *comm,
                          const char *all, const int64_t *counts) {
    const ptdp_gpt_config *cfg = meta->cfg;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "format", "ptdp-checkpoint");
    cJSON_AddNumberToObject(r, "version", PTDP_CKPT_VERSION);
    cJSON_AddNumberToObject(r, "iteration", (double)meta->iteration);
    cJSON_AddNumberToObject(r, "consumed_samples", (double)meta->consumed_samples);
    cJSON_AddNumberToObject(r, "optimizer_step", (double)meta->optimizer_step);
    cJSON_AddBoolToObject(r, "has_optimizer", !meta->no_optimizer);
    cJSON_AddStringToObject(r, "checksum",
                            "crc32 (IEEE 802.3 / zlib) of each whole file, 8 hex digits");
    cJSON *m = cJSON_AddObjectToObject(r, "model");
    cJSON_AddNumberToObject(m, "num_layers", (double)cfg->num_layers);
    cJSON_AddNumberToObject(m, "hidden_size", (double)cfg->hidden);
    cJSON_AddNumberToObject(m, "num_attention_heads", (double)cfg->heads);
    cJSON_AddNumberToObject(m, "ffn_hidden_size", (double)cfg->ffn_hidden);
    cJSON_AddNumberToObject(m, "seq_length", (double)cfg->seq_length);
    cJSON_AddNumberToObject(m, "max_position_embeddings", (double)cfg->max_positions);
    cJSON_AddNumberToObject(m, "vocab_size", (double)cfg->vocab);
    cJSON_AddNumberToObject(m, "padded_vocab_size", (double)cfg->vocab_padded);
    cJSON_AddNumberToObject(m, "init_method_std", cfg->init_std);
    cJSON_AddNumberToObject(m, "hidden_dropout", cfg->hidden_dropout);
    cJSON_AddNumberToObject(m, "attention_dropout", cfg->attention_dropout);
    cJSON_AddNumberToObject(m, "layernorm_epsilon", cfg->ln_eps);
    if (ptdp_gpt_is_llama(cfg)) { /* a GPT's manifest stays as it was */
        cJSON *ll = cJSON_AddObjectToObject(m, "llama");
        cJSON_AddBoolToObject(ll, "rmsnorm", cfg->rmsnorm);
        cJSON_AddBoolToObject(ll, "swiglu", cfg->swiglu);
        cJSON_AddBoolToObject(ll, "rope", cfg->rope);
        cJSON_AddNumberToObject(ll, "rotary_base", cfg->rotary_base);
        cJSON_AddNumberToObject(ll, "rotary_percent", cfg->rotary_percent);
        cJSON_AddNumberToObject(ll, "num_query_groups", (double)ptdp_gpt_groups(cfg));
        cJSON_AddBoolToObject(ll, "untie", cfg->untie);
        cJSON_AddBoolToObject(ll, "disable_bias_linear", cfg->no_bias);
    }
    cJSON *tr = cJSON_AddObjectToObject(r, "training");
    cJSON_AddNumberToObject(tr, "seed", (double)cfg->seed);
    cJSON_AddNumberToObject(tr, "micro_batch_size", (double)meta->micro_batch);
    cJSON_AddNumberToObject(tr, "global_batch_size", (double)meta->global_batch);
    cJSON_AddNumberToObject(tr, "lr", meta->lr->max_lr);
    cJSON_AddNumberToObject(tr, "min_lr", meta->lr->min_lr);
    /* Megatron's scheduler counts samples (the warm-up may be fractional) */
    cJSON_AddNumberToObject(tr, "lr_warmup_samples", meta->lr->warmup_samples);
    cJSON_AddNumberToObject(tr, "lr_decay_samples", meta->lr->decay_samples);
    static const char *const styles[] = {"constant", "linear", "cosine"};
    cJSON_AddStringToObject(tr, "lr_decay_style", styles[meta->lr->style]);
    cJSON_AddNumberToObject(tr, "adam_beta1", meta->adam->beta1);
    cJSON_AddNumberToObject(tr, "adam_beta2", meta->adam->beta2);
    cJSON_AddNumberToObject(tr, "adam_eps", meta->adam->eps);
    cJSON_AddNumberToObject(tr, "weight_decay", meta->adam->weight_decay);
    cJSON_AddNumberToObject(tr, "clip_grad", meta->adam->clip_grad);
    if (meta->scaler && meta->scaler->dynamic) { /* Megatron keeps its grad scaler's state */
        cJSON_AddNumberToObject(tr, "loss_scale", meta->scaler->scale);
        cJSON_AddNumberToObject(tr, "loss_scale_growth_tracker",
                                (double)meta->scaler->growth_tracker);
        cJSON_AddNumberToObject(tr, "loss_scale_hysteresis_tracker",
                                (double)meta->scaler->hysteresis_tracker);
    }
    cJSON *lay = cJSON_AddObjectToObject(r, "layout");
    cJSON_AddNumberToObject(lay, "tensor_model_parallel_size", comm->t);
    cJSON_AddNumberToObject(lay, "pipeline_model_parallel_size", comm->p);
    cJSON_AddNumberToObject(lay, "data_parallel_size", comm->d);
    cJSON_AddNumberToObject(lay, "virtual_pipeline_model_parallel_size", meta->v);
    cJSON_AddBoolToObject(lay, "use_distributed_optimizer", meta->zero);
    cJSON_AddNumberToObject(lay, "world_size", comm->world_size);
    cJSON *files = cJSON_AddArrayToObject(r, "files"),
          *tensors = cJSON_AddArrayToObject(r, "tensors"),
          *shards = cJSON_AddArrayToObject(r, "shards");
    int rc = PTDP_OK, nfiles = 0;
    const char *p = all;
    for (int rank = 0; rank < comm->world_size && rc == PTDP_OK; rank++) {
        char *text = strndup(p, (size_t)counts[rank]);
        p += counts[rank];
        cJSON *part = text ? cJSON_Parse(text) : NULL;
        free(text);
        if (!part) {
            rc = ptdp_errorf(PTDP_ENOMEM, "out of memory writing the manifest");
            break;
        }
        cJSON *file = cJSON_GetObjectItemCaseSensitive(part, "file");
        if (cJSON_IsString(file)) {
            cJSON *fo = cJSON_CreateObject();
            cJSON_AddStringToObject(fo, "name", file->valuestring);
            cJSON_AddNumberToObject(fo, "rank", rank);
            cJSON_AddNumberToObject(fo, "bytes",
                                    cJSON_GetObjectItemCaseSensitive(part, "bytes")->valuedouble);
            cJSON_AddStringToObject(fo, "crc32",
                                    cJSON_GetObjectItemCaseSensitive(part, "crc32")->valuestring);
            cJSON_AddItemToArray(files, fo);
            for (cJSON *s = cJSON_GetObjectItemCaseSensitive(part, "shards")->child; s;
                 s = s->next) {
                cJSON *sh = cJSON_Duplicate(s, 1);
                cJSON *shape = cJSON_DetachItemFromObject(sh, "shape");
                cJSON_AddNumberToObject(sh, "file", nfiles);
                const char *name = cJSON_GetObjectItemCaseSensitive(sh, "tensor")->valuestring;
                int seen = 0;
                for (cJSON *t = tensors->child; t && !seen; t = t->next)
                    seen = !strcmp(cJSON_GetObjectItemCaseSensitive(t, "name")->valuestring, name);
                if (!seen) {
                    cJSON *t = cJSON_CreateObject();
                    cJSON_AddStringToObject(t, "name", name);
                    cJSON_AddItemToObject(t, "shape", shape);
                    cJSON_AddStringToObject(t, "dtype", "F32");
                    cJSON_AddItemToArray(tensors, t);
                } else {
                    cJSON_Delete(shape);
                }
                cJSON_AddItemToArray(shards, sh);
            }
            nfiles++;
        }
        cJSON_Delete(part);
    }
    char *text = rc == PTDP_OK ? cJSON_Print(r) : NULL;
    cJSON_Delete(r);
    if (rc == PTDP_OK && !text) rc = ptdp_errorf(PTDP_ENOMEM, "out of memory writing the manifest");
    if (rc == PTDP_OK) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", itdir, MANIFEST);
        rc = ptdp_file_write_atomic(path, text);
        ptdp_file_fsync_dir(itdir);
    }
    free(text);
    return rc;
}

/* 1 for NAME.tmp.DIGITS: a file write_atomic or the shard writer had not
 * renamed yet when its process stopped (Ctrl-C, a crash). */
static int is_temporary(const char *name) {
    const char *t = strstr(name, ".tmp.");
    if (!t || t == name) return 0;
    t += 5;
    if (!*t) return 0;
    for (; *t; t++)
        if (*t < '0' || *t > '9') return 0;
    return 1;
}

/* Removes the temporaries an interrupted save left in DIR and its iter_*
 * directories. Rank 0 only, before any rank of this save writes. */
static void remove_temporaries(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (is_temporary(e->d_name)) {
            if (remove(path) == 0) ptdp_log0("removed %s (left by an interrupted save)", path);
        } else if (depth == 0 && !strncmp(e->d_name, "iter_", 5)) {
            remove_temporaries(path, 1);
        }
    }
    closedir(d);
}

int ptdp_ckpt_prepare_dir(const char *dir) {
    int rc = ptdp_file_mkdirs(dir);
    if (rc) {
        char why[512];
        snprintf(why, sizeof why, "%s", ptdp_last_error());
        return ptdp_errorf(rc, "--save %s: %s", dir, why);
    }
    if (access(dir, W_OK) != 0)
        rc = ptdp_errorf(PTDP_EIO, "--save %s: the directory is not writable", dir);
    return rc;
}

int ptdp_ckpt_save(const char *dir, const ptdp_ckpt_meta *meta, ptdp_gpt_chunk *const *chunks,
                   ptdp_optimizer *opts, int nchunks, ptdp_comm *comm) {
    PTDP_ASSERT(nchunks <= PTDP_MAX_CHUNKS);
    char itdir[4200];
    snprintf(itdir, sizeof itdir, "%s/iter_%07lld", dir, (long long)meta->iteration);
    int rc = PTDP_OK;
    if (comm->world_rank == 0) {
        int64_t newest = 0;
        int has = ptdp_ckpt_newest(dir, &newest);
        if (has < 0)
            rc = has;
        else if (has && newest >= meta->iteration && !meta->overwrite)
            rc = ptdp_errorf(PTDP_ECONFIG,
                             "%s already holds a checkpoint of iteration %lld: saving iteration "
                             "%lld there would %s it (nothing written; --overwrite-checkpoints "
                             "allows it)",
                             dir, (long long)newest, (long long)meta->iteration,
                             newest == meta->iteration ? "replace" : "rewind past");
        if (rc == PTDP_OK) remove_temporaries(dir, 0);
        if (rc == PTDP_OK) rc = ptdp_file_mkdirs(itdir);
        char mp[4400];
        snprintf(mp, sizeof mp, "%s/%s", itdir, MANIFEST);
        /* an older save of the same iteration is invalid from here on */
        if (rc == PTDP_OK && remove(mp) != 0 && errno != ENOENT)
            rc = ptdp_errorf(PTDP_EIO, "%s: cannot remove: %s", mp, strerror(errno));
    }
    rc = agree(comm, rc);
    if (rc) return rc;
    char *json = NULL;
    rc = agree(comm, save_local(itdir, meta, chunks, opts, nchunks, comm, &json));
    if (rc) {
        free(json);
        return rc;
    }
    int64_t counts[4096];
    PTDP_ASSERT(comm->world_size <= 4096);
    char *all = ptdp_gatherv_bytes(&comm->world, json, (int64_t)strlen(json), counts, 0);
    free(json);
    if (comm->world_rank == 0) {
        rc = write_manifest(itdir, meta, comm, all, counts);
        int64_t latest = 0;
        if (rc == PTDP_OK && ptdp__ckpt_read_latest(dir, 0, &latest) == 1 &&
            latest > meta->iteration) {
            ptdp_log0("%s/%s stays at iteration %lld, later than this save (%s is loaded by its "
                      "own path)",
                      dir, LATEST, (long long)latest, itdir);
        } else if (rc == PTDP_OK) {
            char lp[4200], txt[32];
            snprintf(lp, sizeof lp, "%s/%s", dir, LATEST);
            snprintf(txt, sizeof txt, "%lld\n", (long long)meta->iteration);
            rc = ptdp_file_write_atomic(lp, txt);
            ptdp_file_fsync_dir(dir);
        }
    }
    free(all);
    return agree(comm, rc);
}

/* ---- loading -------------------------------------------------------------------- */

static int check_config(const manifest *M, const ptdp_gpt_config *cfg) {
    const struct {
        const char *flag;
        int64_t ckpt, flags;
    } f[] = {
        {"--num-layers", M->l, cfg->num_layers},
        {"--hidden-size", M->h, cfg->hidden},
        {"--num-attention-heads", M->a, cfg->heads},
        {"--ffn-hidden-size", M->ffn, cfg->ffn_hidden},
        {"--max-position-embeddings", M->maxpos, cfg->max_positions},
        {"--vocab-size", M->V, cfg->vocab},
    };
    /* the blocks first: a GPT checkpoint under Llama flags (or the reverse) is
     * told as such, not as a missing tensor */
    const struct {
        const char *flag;
        int ckpt, flags;
    } b[] = {
        {"--normalization RMSNorm", M->rmsnorm, cfg->rmsnorm},
        {"--swiglu", M->swiglu, cfg->swiglu},
        {"--position-embedding-type rope", M->rope, cfg->rope},
        {"--untie-embeddings-and-output-weights", M->untie, cfg->untie},
        {"--disable-bias-linear", M->no_bias, cfg->no_bias},
    };
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        if (!b[i].ckpt != !b[i].flags)
            return ptdp_errorf(PTDP_ECONFIG,
                               b[i].flags ? "%s: the checkpoint's model was trained without %s but "
                                            "the flags give it (a GPT checkpoint under Llama "
                                            "flags?); drop %s, or load a checkpoint of this model"
                                          : "%s: the checkpoint's model uses %s but the flags do "
                                            "not (a Llama checkpoint under GPT flags?); add %s",
                               M->path, b[i].flag, b[i].flag);
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].ckpt != f[i].flags)
            return ptdp_errorf(PTDP_ECONFIG,
                               "%s: the checkpoint's model has %s %lld but the flags give %lld",
                               M->path, f[i].flag, (long long)f[i].ckpt, (long long)f[i].flags);
    if (M->groups != ptdp_gpt_groups(cfg))
        return ptdp_errorf(PTDP_ECONFIG,
                           "%s: the checkpoint's model has %lld key/value groups "
                           "(--num-query-groups) but the flags give %lld",
                           M->path, (long long)M->groups, (long long)ptdp_gpt_groups(cfg));
    return PTDP_OK;
}

/* Fills this rank's shard of spec sp (kind) into local[lshape] and marks
 * have[] for every element found in the checkpoint. */
static int fill_shard(const manifest *M, file_cache *fc, const ptdp_param_spec *sp, int tp,
                      const ptdp_gpt_config *cfg, int kind, float *local, uint8_t *have) {
    const tensor_rec *T = ptdp__ckpt_find_tensor(M, sp->name);
    if (!T)
        return ptdp_errorf(PTDP_EFORMAT, "%s: the checkpoint has no tensor '%s'", M->path,
                           sp->name);
    const int wte = sp->role == PTDP_ROLE_EMBEDDING;
    if (T->ndim != sp->ndim || T->shape[1] != sp->gshape[1] ||
        (wte ? T->shape[0] < cfg->vocab : T->shape[0] != sp->gshape[0]))
        return ptdp_errorf(
            PTDP_ECONFIG,
            "%s: tensor '%s' has shape [%lld,%lld] but the model flags need [%lld,%lld]", M->path,
            sp->name, (long long)T->shape[0], (long long)T->shape[1], (long long)sp->gshape[0],
            (long long)sp->gshape[1]);
    int64_t R0, C0;
    shard_rect(sp, tp, &R0, &C0);
    const int64_t LR = sp->lshape[0], LC = sp->lshape[1];
    memset(have, 0, (size_t)(LR * LC));
    if (wte) /* padding rows: zero in every layout */
        for (int64_t r = 0; r < LR; r++)
            if (R0 + r >= cfg->vocab) {
                memset(local + r * LC, 0, sizeof(float) * (size_t)LC);
                memset(have + r * LC, 1, (size_t)LC);
            }
    for (int i = 0; i < M->nshards; i++) {
        const shard_rec *s = &M->shards[i];
        if (s->kind != kind || strcmp(s->name, sp->name)) continue;
        if (s->r1 <= R0 || s->r0 >= R0 + LR || s->c1 <= C0 || s->c0 >= C0 + LC) continue;
        float *buf;
        int rc = read_shard(fc, s, &buf);
        if (rc) return rc;
        const int64_t w = s->c1 - s->c0;
        for (int64_t k = s->e0; k < s->e1;) {
            int64_t gr = s->r0 + k / w, gc0 = s->c0 + k % w, n = w - k % w;
            if (n > s->e1 - k) n = s->e1 - k;
            int64_t lr = gr - R0;
            if (lr >= 0 && lr < LR && gr < (wte ? cfg->vocab : INT64_MAX)) {
                int64_t a = gc0 > C0 ? gc0 : C0, b = gc0 + n < C0 + LC ? gc0 + n : C0 + LC;
                if (a < b) {
                    memcpy(local + lr * LC + (a - C0), buf + (k - s->e0) + (a - gc0),
                           sizeof(float) * (size_t)(b - a));
                    memset(have + lr * LC + (a - C0), 1, (size_t)(b - a));
                }
            }
            k += n;
        }
        free(buf);
    }
    return PTDP_OK;
}

static int missing(const manifest *M, const ptdp_param_spec *sp, int kind, const uint8_t *have,
                   int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; e++)
        if (!have[e])
            return ptdp_errorf(
                PTDP_EFORMAT,
                "%s: the checkpoint does not cover %s of tensor '%s' (local element %lld of this "
                "rank's shard is in no shard file)",
                M->path, ptdp__ckpt_kind_names[kind], sp->name, (long long)e);
    return PTDP_OK;
}

/* Reads everything this rank needs into host images (no chunk touched). */
static int load_local(const manifest *M, int load_optim, const ptdp_gpt_config *cfg,
                      ptdp_gpt_chunk *const *chunks, ptdp_optimizer *opts, int nchunks, int tp,
                      float **P, float **MV) {
    int rc = check_config(M, cfg);
    if (rc == PTDP_OK && load_optim && !M->has_optim)
        rc = ptdp_errorf(PTDP_EFORMAT,
                         "%s: the checkpoint holds no optimizer state (use --no-load-optim)",
                         M->path);
    file_cache fc = {M, calloc((size_t)M->nfiles + 1, sizeof(ptdp_st_file *))};
    if (rc == PTDP_OK && !fc.open)
        rc = ptdp_errorf(PTDP_ENOMEM, "out of memory loading %s", M->path);
    for (int c = 0; rc == PTDP_OK && c < nchunks; c++) {
        int n;
        const ptdp_param_spec *sp = ptdp_gpt_chunk_specs(chunks[c], &n);
        const ptdp_optimizer *o = opts ? &opts[c] : NULL;
        P[c] = calloc((size_t)ptdp_gpt_chunk_numel(chunks[c]) + 1, sizeof(float));
        MV[c] = load_optim ? calloc((size_t)(2 * o->state_len + 1), sizeof(float)) : NULL;
        int64_t maxn = 1;
        for (int i = 0; i < n; i++) maxn = sp[i].numel > maxn ? sp[i].numel : maxn;
        float *tmp = malloc(sizeof(float) * (size_t)maxn);
        uint8_t *have = malloc((size_t)maxn);
        if (!P[c] || (load_optim && !MV[c]) || !tmp || !have)
            rc = ptdp_errorf(PTDP_ENOMEM, "out of memory loading %s", M->path);
        for (int i = 0; rc == PTDP_OK && i < n; i++) {
            rc = fill_shard(M, &fc, &sp[i], tp, cfg, K_PARAM, P[c] + sp[i].offset, have);
            if (rc == PTDP_OK) rc = missing(M, &sp[i], K_PARAM, have, 0, sp[i].numel);
            for (int kind = K_EXP_AVG; load_optim && rc == PTDP_OK && kind <= K_EXP_AVG_SQ;
                 kind++) {
                int any = 0;
                for (int k = 0; k < o->nruns && !any; k++)
                    any = o->runs[k].off >= sp[i].offset &&
                          o->runs[k].off < sp[i].offset + sp[i].numel;
                if (!any) continue;
                rc = fill_shard(M, &fc, &sp[i], tp, cfg, kind, tmp, have);
                for (int k = 0; rc == PTDP_OK && k < o->nruns; k++) {
                    const ptdp_optim_run *run = &o->runs[k];
                    if (run->off < sp[i].offset || run->off >= sp[i].offset + sp[i].numel) continue;
                    int64_t e0 = run->off - sp[i].offset;
                    rc = missing(M, &sp[i], kind, have, e0, e0 + run->len);
                    if (rc == PTDP_OK)
                        memcpy(MV[c] + (kind == K_EXP_AVG ? 0 : o->state_len) + run->state,
                               tmp + e0, sizeof(float) * (size_t)run->len);
                }
            }
        }
        free(tmp);
        free(have);
    }
    cache_close(&fc);
    return rc;
}

int ptdp_ckpt_load(const char *dir, int load_optim, const ptdp_gpt_config *cfg,
                   ptdp_gpt_chunk *const *chunks, ptdp_optimizer *opts, int nchunks,
                   ptdp_comm *comm, ptdp_ckpt_loaded *out) {
    memset(out, 0, sizeof *out);
    manifest M;
    int found = ptdp__ckpt_manifest_read(&M, dir);
    int rc = agree(comm, found < 0 ? found : PTDP_OK);
    if (rc || !found) {
        ptdp__ckpt_manifest_free(&M);
        return rc;
    }
    float *P[PTDP_MAX_CHUNKS] = {0}, *MV[PTDP_MAX_CHUNKS] = {0};
    PTDP_ASSERT(nchunks <= PTDP_MAX_CHUNKS);
    rc = agree(comm,
               load_local(&M, load_optim, cfg, chunks, opts, nchunks, comm->tensor.rank, P, MV));
    if (rc == PTDP_OK) { /* every rank has everything: now touch the model */
        for (int c = 0; c < nchunks; c++) {
            ptdp_gpt_chunk_upload_params(chunks[c], P[c]);
            if (load_optim) {
                if (opts[c].state_len)
                    opts[c].be->upload(opts[c].be, opts[c].m, MV[c],
                                       sizeof(float) * (size_t)(2 * opts[c].state_len));
                opts[c].step = M.step;
            }
        }
        out->found = 1;
        out->iteration = M.iteration;
        out->consumed_samples = M.consumed;
        out->optimizer_step = M.step;
        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(M.root, "training");
        int nos = 0;
        out->loss_scale = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(tr, "loss_scale"))
                              ? cJSON_GetObjectItemCaseSensitive(tr, "loss_scale")->valuedouble
                              : 0.0;
        out->growth_tracker = ptdp__ckpt_jint(tr, "loss_scale_growth_tracker", &nos);
        out->hysteresis_tracker = ptdp__ckpt_jint(tr, "loss_scale_hysteresis_tracker", &nos);
        out->has_scaler = !nos && out->loss_scale > 0;
        snprintf(out->path, sizeof out->path, "%s", M.dir);
    }
    for (int c = 0; c < nchunks; c++) {
        free(P[c]);
        free(MV[c]);
    }
    ptdp__ckpt_manifest_free(&M);
    return rc;
}

/* ---- info and verify -------------------------------------------------------------- */

int ptdp_ckpt_info(const char *dir, FILE *f) {
    manifest M;
    int rc = ptdp__ckpt_open_manifest(&M, dir);
    if (rc) {
        ptdp__ckpt_manifest_free(&M);
        return rc;
    }
    int64_t total = 0, bytes = 0;
    for (int i = 0; i < M.ntensors; i++) total += M.tensors[i].shape[0] * M.tensors[i].shape[1];
    for (int i = 0; i < M.nfiles; i++) bytes += M.files[i].bytes;
    fprintf(f, "checkpoint %s (format version %d)\n", M.dir, M.version);
    fprintf(f, "iteration %lld, consumed samples %lld, optimizer steps %lld, optimizer state %s\n",
            (long long)M.iteration, (long long)M.consumed, (long long)M.step,
            M.has_optim ? "yes (AdamW m, v)" : "no");
    fprintf(
        f,
        "model: l=%lld h=%lld a=%lld ffn=%lld s=%lld max positions=%lld V=%lld (padded %lld), seed %lld\n",
        (long long)M.l, (long long)M.h, (long long)M.a, (long long)M.ffn, (long long)M.s,
        (long long)M.maxpos, (long long)M.V, (long long)M.Vp, (long long)M.seed);
    fprintf(f, "saved from: t=%lld p=%lld d=%lld v=%lld ZeRO-1 %s (%lld ranks)\n", (long long)M.t,
            (long long)M.p, (long long)M.d, (long long)M.v, M.zero ? "on" : "off",
            (long long)M.world);
    fprintf(f, "%d tensors, %lld parameters (incl. vocabulary padding); %d shard records\n",
            M.ntensors, (long long)total, M.nshards);
    fprintf(f, "%d files, %lld bytes:\n", M.nfiles, (long long)bytes);
    for (int i = 0; i < M.nfiles; i++)
        fprintf(f, "  %-28s rank %5d  %12lld bytes  crc32 %08x\n", M.files[i].name, M.files[i].rank,
                (long long)M.files[i].bytes, M.files[i].crc);
    fprintf(f, "tensors:\n");
    for (int i = 0; i < M.ntensors; i++) {
        int ns = 0;
        for (int j = 0; j < M.nshards; j++) ns += !strcmp(M.shards[j].name, M.tensors[i].name);
        if (M.tensors[i].ndim == 2)
            fprintf(f, "  %-48s [%lld, %lld]  F32  %d shard records\n", M.tensors[i].name,
                    (long long)M.tensors[i].shape[0], (long long)M.tensors[i].shape[1], ns);
        else
            fprintf(f, "  %-48s [%lld]  F32  %d shard records\n", M.tensors[i].name,
                    (long long)M.tensors[i].shape[0], ns);
    }
    ptdp__ckpt_manifest_free(&M);
    return PTDP_OK;
}

int ptdp_ckpt_verify(const char *dir, FILE *f) {
    manifest M;
    int rc = ptdp__ckpt_open_manifest(&M, dir);
    file_cache fc = {&M, calloc((size_t)M.nfiles + 1, sizeof(ptdp_st_file *))};
    if (rc == PTDP_OK && !fc.open) rc = ptdp_errorf(PTDP_ENOMEM, "out of memory");
    for (int i = 0; rc == PTDP_OK && i < M.nfiles; i++) {
        ptdp_st_file *sf;
        rc = cache_get(&fc, i, &sf);
    }
    int64_t checked = 0;
    for (int i = 0; rc == PTDP_OK && i < M.ntensors; i++) {
        const tensor_rec *T = &M.tensors[i];
        const int64_t numel = T->shape[0] * T->shape[1];
        uint8_t *have = malloc((size_t)numel + 1);
        if (!have) rc = ptdp_errorf(PTDP_ENOMEM, "out of memory");
        for (int kind = 0; rc == PTDP_OK && kind < (M.has_optim ? K_COUNT : 1); kind++) {
            memset(have, 0, (size_t)numel);
            for (int j = 0; rc == PTDP_OK && j < M.nshards; j++) {
                const shard_rec *s = &M.shards[j];
                if (s->kind != kind || strcmp(s->name, T->name)) continue;
                float *buf;
                rc = read_shard(&fc, s, &buf); /* checks the key, dtype and size */
                free(buf);
                const int64_t w = s->c1 - s->c0;
                for (int64_t k = s->e0; rc == PTDP_OK && k < s->e1; k++)
                    have[(s->r0 + k / w) * T->shape[1] + s->c0 + k % w] = 1;
            }
            for (int64_t e = 0; rc == PTDP_OK && e < numel; e++)
                if (!have[e])
                    rc = ptdp_errorf(
                        PTDP_EFORMAT,
                        "%s: %s of tensor '%s' is not fully covered (element %lld is in no "
                        "shard)",
                        M.path, ptdp__ckpt_kind_names[kind], T->name, (long long)e);
            checked++;
        }
        free(have);
    }
    if (rc == PTDP_OK)
        fprintf(
            f,
            "%s: OK: %d files match their size and CRC-32, %lld global tensors (params%s) fully covered\n",
            M.dir, M.nfiles, (long long)checked, M.has_optim ? ", exp_avg, exp_avg_sq" : "");
    /* files the manifest does not name: not part of the checkpoint */
    DIR *dd = rc == PTDP_OK ? opendir(M.dir) : NULL;
    for (struct dirent *e; dd && (e = readdir(dd));) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, MANIFEST)) continue;
        int listed = 0;
        for (int i = 0; i < M.nfiles && !listed; i++) listed = !strcmp(M.files[i].name, e->d_name);
        if (!listed)
            fprintf(f, "%s: stray file %s (not in the manifest%s; safe to delete)\n", M.dir,
                    e->d_name,
                    is_temporary(e->d_name)
                        ? ": a temporary of an interrupted save, the next save removes it"
                        : "");
    }
    if (dd) closedir(dd);
    if (fc.open) cache_close(&fc);
    ptdp__ckpt_manifest_free(&M);
    return rc;
}
