/* manifest.c - a checkpoint's manifest.json in memory: finding it (the latest
 * file or the directory itself), parsing and checking every record, and the
 * questions answered from the manifest alone (the model configuration and
 * the learning-rate schedule a checkpoint was saved with). The format is in
 * ckpt.h and docs/checkpoint-format.md. */
#define _POSIX_C_SOURCE 200809L
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const ptdp__ckpt_kind_names[K_COUNT] = {"param", "exp_avg", "exp_avg_sq"};

void ptdp__ckpt_manifest_free(manifest *M) {
    cJSON_Delete(M->root);
    free(M->files);
    free(M->tensors);
    free(M->shards);
    memset(M, 0, sizeof *M);
}

/* DIR -> iteration directory: via the latest file, or DIR itself. Returns
 * 1 when found, 0 when DIR holds neither, or an error. */
static int resolve(const char *dir, char *out, size_t cap) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, LATEST);
    FILE *f = fopen(p, "r");
    if (f) {
        char line[64] = "";
        char *ok = fgets(line, sizeof line, f);
        fclose(f);
        char *end;
        long long it = ok ? strtoll(line, &end, 10) : -1;
        if (!ok || end == line || it < 0 || (*end && *end != '\n'))
            return ptdp_errorf(PTDP_EFORMAT, "%s: expected an iteration number, found '%.20s'", p,
                               line);
        snprintf(out, cap, "%s/iter_%07lld", dir, it);
        return 1;
    }
    snprintf(p, sizeof p, "%s/%s", dir, MANIFEST);
    if (access(p, F_OK) == 0) {
        snprintf(out, cap, "%s", dir);
        return 1;
    }
    return 0;
}

int64_t ptdp__ckpt_jint(const cJSON *o, const char *key, int *bad) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x)) {
        *bad = 1;
        return 0;
    }
    return (int64_t)x->valuedouble;
}

static int get_range(const cJSON *o, const char *key, int64_t *a, int64_t *b) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) != 2) return 0;
    *a = (int64_t)cJSON_GetArrayItem(x, 0)->valuedouble;
    *b = (int64_t)cJSON_GetArrayItem(x, 1)->valuedouble;
    return *a <= *b;
}

/* Reads and checks the manifest of the checkpoint DIR points to. Returns 1
 * found, 0 none, or an error naming the file. */
int ptdp__ckpt_manifest_read(manifest *M, const char *dir) {
    memset(M, 0, sizeof *M);
    int rc = resolve(dir, M->dir, sizeof M->dir);
    if (rc <= 0) return rc;
    snprintf(M->path, sizeof M->path, "%s/%s", M->dir, MANIFEST);
    char *text = NULL;
    size_t len = 0;
    rc = ptdp_read_file(M->path, "the checkpoint manifest", &text, &len);
    if (rc) return rc;
    M->root = cJSON_Parse(text);
    free(text);
    const cJSON *r = M->root;
    if (!cJSON_IsObject(r))
        return ptdp_errorf(PTDP_EFORMAT, "%s: not a JSON object (corrupted manifest)", M->path);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(r, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "ptdp-checkpoint"))
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: not a ptdp checkpoint manifest (no \"format\":\"ptdp-checkpoint\")",
                           M->path);
    int bad = 0;
    M->version = (int)ptdp__ckpt_jint(r, "version", &bad);
    if (bad) return ptdp_errorf(PTDP_EFORMAT, "%s: no format version", M->path);
    if (M->version > PTDP_CKPT_VERSION || M->version < 1)
        return ptdp_errorf(
            PTDP_EFORMAT,
            "%s: format version %d is newer than this ptdp reads (version %d); use a newer ptdp",
            M->path, M->version, PTDP_CKPT_VERSION);
    M->iteration = ptdp__ckpt_jint(r, "iteration", &bad);
    M->consumed = ptdp__ckpt_jint(r, "consumed_samples", &bad);
    M->step = ptdp__ckpt_jint(r, "optimizer_step", &bad);
    M->has_optim = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "has_optimizer"));
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "model"),
                *lay = cJSON_GetObjectItemCaseSensitive(r, "layout");
    M->l = ptdp__ckpt_jint(m, "num_layers", &bad);
    M->h = ptdp__ckpt_jint(m, "hidden_size", &bad);
    M->a = ptdp__ckpt_jint(m, "num_attention_heads", &bad);
    M->ffn = ptdp__ckpt_jint(m, "ffn_hidden_size", &bad);
    M->s = ptdp__ckpt_jint(m, "seq_length", &bad);
    M->maxpos = ptdp__ckpt_jint(m, "max_position_embeddings", &bad);
    M->V = ptdp__ckpt_jint(m, "vocab_size", &bad);
    M->Vp = ptdp__ckpt_jint(m, "padded_vocab_size", &bad);
    const cJSON *std = cJSON_GetObjectItemCaseSensitive(m, "init_method_std");
    M->init_std = cJSON_IsNumber(std) ? std->valuedouble : 0.02;
    M->seed = ptdp__ckpt_jint(cJSON_GetObjectItemCaseSensitive(r, "training"), "seed", &bad);
    M->t = ptdp__ckpt_jint(lay, "tensor_model_parallel_size", &bad);
    M->p = ptdp__ckpt_jint(lay, "pipeline_model_parallel_size", &bad);
    M->d = ptdp__ckpt_jint(lay, "data_parallel_size", &bad);
    M->v = ptdp__ckpt_jint(lay, "virtual_pipeline_model_parallel_size", &bad);
    M->world = ptdp__ckpt_jint(lay, "world_size", &bad);
    M->zero = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(lay, "use_distributed_optimizer"));
    if (bad)
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: a required field of iteration/model/training/layout is missing",
                           M->path);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(r, "files"),
                *tens = cJSON_GetObjectItemCaseSensitive(r, "tensors"),
                *sh = cJSON_GetObjectItemCaseSensitive(r, "shards");
    if (!cJSON_IsArray(files) || !cJSON_IsArray(tens) || !cJSON_IsArray(sh))
        return ptdp_errorf(PTDP_EFORMAT, "%s: missing files/tensors/shards arrays", M->path);
    M->nfiles = cJSON_GetArraySize(files);
    M->ntensors = cJSON_GetArraySize(tens);
    M->nshards = cJSON_GetArraySize(sh);
    M->files = calloc((size_t)M->nfiles + 1, sizeof *M->files);
    M->tensors = calloc((size_t)M->ntensors + 1, sizeof *M->tensors);
    M->shards = calloc((size_t)M->nshards + 1, sizeof *M->shards);
    if (!M->files || !M->tensors || !M->shards)
        return ptdp_errorf(PTDP_ENOMEM, "out of memory reading %s", M->path);
    int i = 0;
    for (const cJSON *x = files->child; x; x = x->next, i++) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(x, "name"),
                    *cr = cJSON_GetObjectItemCaseSensitive(x, "crc32");
        if (!cJSON_IsString(nm) || !cJSON_IsString(cr) || strchr(nm->valuestring, '/'))
            return ptdp_errorf(PTDP_EFORMAT, "%s: files[%d] needs a plain name and a crc32",
                               M->path, i);
        snprintf(M->files[i].name, sizeof M->files[i].name, "%s", nm->valuestring);
        M->files[i].crc = (uint32_t)strtoul(cr->valuestring, NULL, 16);
        M->files[i].bytes = ptdp__ckpt_jint(x, "bytes", &bad);
        M->files[i].rank = (int)ptdp__ckpt_jint(x, "rank", &bad);
    }
    i = 0;
    for (const cJSON *x = tens->child; x; x = x->next, i++) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(x, "name"),
                    *shp = cJSON_GetObjectItemCaseSensitive(x, "shape");
        int nd = cJSON_GetArraySize(shp);
        if (!cJSON_IsString(nm) || !cJSON_IsArray(shp) || nd < 1 || nd > 2)
            return ptdp_errorf(PTDP_EFORMAT,
                               "%s: tensors[%d] needs a name and a shape of 1 or 2 dims", M->path,
                               i);
        snprintf(M->tensors[i].name, sizeof M->tensors[i].name, "%s", nm->valuestring);
        M->tensors[i].ndim = nd;
        M->tensors[i].shape[0] = (int64_t)cJSON_GetArrayItem(shp, 0)->valuedouble;
        M->tensors[i].shape[1] = nd == 2 ? (int64_t)cJSON_GetArrayItem(shp, 1)->valuedouble : 1;
    }
    i = 0;
    for (const cJSON *x = sh->child; x; x = x->next, i++) {
        shard_rec *s = &M->shards[i];
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(x, "tensor"),
                    *k = cJSON_GetObjectItemCaseSensitive(x, "kind"),
                    *key = cJSON_GetObjectItemCaseSensitive(x, "key");
        s->kind = -1;
        for (int j = 0; cJSON_IsString(k) && j < K_COUNT; j++)
            if (!strcmp(k->valuestring, ptdp__ckpt_kind_names[j])) s->kind = j;
        s->file = (int)ptdp__ckpt_jint(x, "file", &bad);
        if (!cJSON_IsString(nm) || !cJSON_IsString(key) || s->kind < 0 || bad || s->file < 0 ||
            s->file >= M->nfiles || !get_range(x, "rows", &s->r0, &s->r1) ||
            !get_range(x, "cols", &s->c0, &s->c1) || !get_range(x, "elements", &s->e0, &s->e1) ||
            s->e1 > (s->r1 - s->r0) * (s->c1 - s->c0))
            return ptdp_errorf(PTDP_EFORMAT, "%s: shards[%d] is malformed", M->path, i);
        snprintf(s->name, sizeof s->name, "%s", nm->valuestring);
        snprintf(s->key, sizeof s->key, "%s", key->valuestring);
        int found = 0;
        for (int j = 0; j < M->ntensors && !found; j++)
            if (!strcmp(M->tensors[j].name, s->name)) {
                found = 1;
                if (s->r1 > M->tensors[j].shape[0] || s->c1 > M->tensors[j].shape[1])
                    return ptdp_errorf(PTDP_EFORMAT, "%s: shards[%d] lies outside tensor %s",
                                       M->path, i, s->name);
            }
        if (!found)
            return ptdp_errorf(PTDP_EFORMAT, "%s: shards[%d] names unknown tensor %s", M->path, i,
                               s->name);
    }
    return 1;
}

const tensor_rec *ptdp__ckpt_find_tensor(const manifest *M, const char *name) {
    for (int j = 0; j < M->ntensors; j++)
        if (!strcmp(M->tensors[j].name, name)) return &M->tensors[j];
    return NULL;
}

int ptdp__ckpt_open_manifest(manifest *M, const char *dir) {
    int rc = ptdp__ckpt_manifest_read(M, dir);
    if (rc == 0)
        rc = ptdp_errorf(PTDP_ENOTFOUND, "%s: no checkpoint (no %s and no %s)", dir, LATEST,
                         MANIFEST);
    return rc < 0 ? rc : PTDP_OK;
}

int ptdp_ckpt_read_config(const char *dir, ptdp_gpt_config *cfg) {
    manifest M;
    int rc = ptdp__ckpt_open_manifest(&M, dir);
    if (rc == PTDP_OK) {
        memset(cfg, 0, sizeof *cfg);
        cfg->num_layers = M.l;
        cfg->hidden = M.h;
        cfg->heads = M.a;
        cfg->ffn_hidden = M.ffn;
        cfg->seq_length = M.s;
        cfg->max_positions = M.maxpos;
        cfg->vocab = M.V;
        cfg->init_std = (float)M.init_std;
        cfg->seed = (uint64_t)M.seed;
    }
    ptdp__ckpt_manifest_free(&M);
    return rc;
}

int ptdp_ckpt_read_has_optimizer(const char *dir, int *has) {
    manifest M;
    int rc = ptdp__ckpt_open_manifest(&M, dir);
    *has = rc == PTDP_OK && M.has_optim;
    ptdp__ckpt_manifest_free(&M);
    return rc;
}

int ptdp_ckpt_read_lr(const char *dir, ptdp_lr_schedule *lr, int *found) {
    manifest M;
    *found = 0;
    int rc = ptdp__ckpt_open_manifest(&M, dir);
    if (rc == PTDP_OK) {
        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(M.root, "training");
        const cJSON *mx = cJSON_GetObjectItemCaseSensitive(tr, "lr"),
                    *mn = cJSON_GetObjectItemCaseSensitive(tr, "min_lr"),
                    *st = cJSON_GetObjectItemCaseSensitive(tr, "lr_decay_style");
        const cJSON *ws = cJSON_GetObjectItemCaseSensitive(tr, "lr_warmup_samples"),
                    *ds = cJSON_GetObjectItemCaseSensitive(tr, "lr_decay_samples");
        int bad = 0;
        lr->samples_per_step = ptdp__ckpt_jint(tr, "global_batch_size", &bad);
        if (cJSON_IsNumber(ws) && cJSON_IsNumber(ds)) {
            lr->warmup_samples = ws->valuedouble;
            lr->decay_samples = ds->valuedouble;
        } else { /* checkpoints before sample-based schedules counted iterations */
            lr->warmup_samples =
                (double)(ptdp__ckpt_jint(tr, "lr_warmup_iters", &bad) * lr->samples_per_step);
            lr->decay_samples =
                (double)(ptdp__ckpt_jint(tr, "lr_decay_iters", &bad) * lr->samples_per_step);
        }
        if (!bad && cJSON_IsNumber(mx) && cJSON_IsNumber(mn) && cJSON_IsString(st) &&
            ptdp_lr_style_parse(st->valuestring, &lr->style) == PTDP_OK) {
            lr->max_lr = mx->valuedouble;
            lr->min_lr = mn->valuedouble;
            *found = 1;
        }
        rc = PTDP_OK;
    }
    ptdp__ckpt_manifest_free(&M);
    return rc;
}
