/* manifest.c - a checkpoint's manifest.json in memory: finding it (the latest
 * file or the directory itself), parsing and checking every record, and the
 * questions answered from the manifest alone (the model configuration and
 * the learning-rate schedule a checkpoint was saved with), and the path of
 * a shard file it names. The format is in ckpt.h and
 * docs/checkpoint-format.md. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const ptdp__ckpt_kind_names[K_COUNT] = {"param", "exp_avg", "exp_avg_sq"};

void ptdp__ckpt_manifest_free(manifest *M) {
    cJSON_Delete(M->root);
    free(M->files);
    free(M->tensors);
    free(M->shards);
    memset(M, 0, sizeof *M);
}

int ptdp__ckpt_read_latest(const char *dir, int allow_release, int64_t *it) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, LATEST);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    char line[64] = "";
    char *ok = fgets(line, sizeof line, f);
    fclose(f);
    line[strcspn(line, " \t\r\n")] = 0;
    if (ok && allow_release && !strcmp(line, "release")) return 2;
    char *end = line;
    long long v = ok ? strtoll(line, &end, 10) : -1;
    if (!ok || end == line || *end || v < 0)
        return ptdp_errorf(PTDP_EFORMAT, "%s: expected an iteration number%s, found '%.20s'", p,
                           allow_release ? " or 'release'" : "", line);
    *it = v;
    return 1;
}

/* DIR -> iteration directory: via the latest file, or DIR itself. Returns
 * 1 when found, 0 when DIR holds neither, or an error. */
static int resolve(const char *dir, char *out, size_t cap) {
    int64_t it = 0;
    int rc = ptdp__ckpt_read_latest(dir, 0, &it);
    if (rc < 0) return rc;
    if (rc == 1) {
        snprintf(out, cap, "%s/iter_%07lld", dir, (long long)it);
        return 1;
    }
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, MANIFEST);
    if (access(p, F_OK) == 0) {
        snprintf(out, cap, "%s", dir);
        return 1;
    }
    return 0;
}

/* A JSON number that is an integer of at most 2^53 in magnitude (exact in a
 * double), so the conversion below is defined for any file. */
static int json_int(const cJSON *x, int64_t *v) {
    if (!cJSON_IsNumber(x)) return 0;
    const double d = x->valuedouble;
    if (!(d >= -9007199254740992.0 && d <= 9007199254740992.0) || d != (double)(int64_t)d) return 0;
    *v = (int64_t)d;
    return 1;
}

int64_t ptdp__ckpt_jint(const cJSON *o, const char *key, int *bad) {
    int64_t v = 0;
    if (!json_int(cJSON_GetObjectItemCaseSensitive(o, key), &v)) *bad = 1;
    return v;
}

/* [a, b] with 0 <= a <= b. */
static int get_range(const cJSON *o, const char *key, int64_t *a, int64_t *b) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) != 2) return 0;
    return json_int(x->child, a) && json_int(x->child->next, b) && *a >= 0 && *a <= *b;
}

/* Copies a JSON string into dst[cap]; 0 when it is not a string or does not
 * fit (a truncated name could name another tensor or file). */
static int get_str(const cJSON *x, char *dst, size_t cap) {
    if (!cJSON_IsString(x) || strlen(x->valuestring) >= cap) return 0;
    memcpy(dst, x->valuestring, strlen(x->valuestring) + 1);
    return 1;
}

int ptdp__ckpt_safe_name(const char *name) {
    if (!name[0] || !strcmp(name, ".") || !strcmp(name, "..")) return 0;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        if (*c == '/' || *c == '\\' || *c < 0x20 || *c == 0x7f) return 0;
    return 1;
}

int ptdp__ckpt_shard_path(const char *dir, const char *name, char *path, size_t cap) {
    if (!ptdp__ckpt_safe_name(name))
        return ptdp_errorf(PTDP_EFORMAT, "%s: shard file name '%s' is not a plain file name", dir,
                           name);
    snprintf(path, cap, "%s/%s", dir, name);
    struct stat st;
    if (lstat(path, &st) != 0) return PTDP_OK; /* missing: the caller's open says so */
    if (S_ISLNK(st.st_mode)) {
        char *real_dir = realpath(dir, NULL), *real = realpath(path, NULL);
        const size_t n = real_dir ? strlen(real_dir) : 0;
        const int inside = real_dir && real && strncmp(real, real_dir, n) == 0 && real[n] == '/';
        int rc = PTDP_OK;
        if (!inside)
            rc = ptdp_errorf(PTDP_EFORMAT,
                             "%s: a symbolic link to %s, outside the checkpoint directory: "
                             "refused (copy the file into the directory instead)",
                             path, real ? real : "a missing file");
        free(real_dir);
        free(real);
        if (rc) return rc;
        if (stat(path, &st) != 0) return PTDP_OK;
    }
    if (!S_ISREG(st.st_mode))
        return ptdp_errorf(PTDP_EFORMAT, "%s: not a regular file (a checkpoint shard must be one)",
                           path);
    return PTDP_OK;
}

int ptdp__ckpt_manifest_parse(manifest *M, const char *text, size_t len) {
    if (ptdp_json_check(text, len, PTDP_JSON_MAX_DEPTH, M->path)) return PTDP_EFORMAT;
    M->root = cJSON_ParseWithLength(text, len);
    const cJSON *r = M->root;
    if (!cJSON_IsObject(r))
        return ptdp_errorf(PTDP_EFORMAT, "%s: not a JSON object (corrupted manifest)", M->path);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(r, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "ptdp-checkpoint"))
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: not a ptdp checkpoint manifest (no \"format\":\"ptdp-checkpoint\")",
                           M->path);
    int bad = 0;
    int64_t version = ptdp__ckpt_jint(r, "version", &bad);
    if (bad) return ptdp_errorf(PTDP_EFORMAT, "%s: no format version", M->path);
    if (version > PTDP_CKPT_VERSION)
        return ptdp_errorf(
            PTDP_EFORMAT,
            "%s: format version %lld is newer than this ptdp reads (version %d); use a newer ptdp",
            M->path, (long long)version, PTDP_CKPT_VERSION);
    if (version < 1)
        return ptdp_errorf(PTDP_EFORMAT, "%s: format version %lld does not exist (corrupted?)",
                           M->path, (long long)version);
    M->version = (int)version;
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
    const cJSON *ll = cJSON_GetObjectItemCaseSensitive(m, "llama");
    M->groups = M->a;
    M->rotary_base = 10000.0;
    M->rotary_percent = 1.0;
    if (cJSON_IsObject(ll)) {
        M->rmsnorm = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ll, "rmsnorm"));
        M->swiglu = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ll, "swiglu"));
        M->rope = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ll, "rope"));
        M->untie = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ll, "untie"));
        M->no_bias = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ll, "disable_bias_linear"));
        M->groups = ptdp__ckpt_jint(ll, "num_query_groups", &bad);
        const cJSON *rb = cJSON_GetObjectItemCaseSensitive(ll, "rotary_base"),
                    *rp = cJSON_GetObjectItemCaseSensitive(ll, "rotary_percent");
        if (cJSON_IsNumber(rb)) M->rotary_base = rb->valuedouble;
        if (cJSON_IsNumber(rp)) M->rotary_percent = rp->valuedouble;
    }
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
                           "%s: a required field of iteration/model/training/layout is missing "
                           "or not an integer",
                           M->path);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(r, "files"),
                *tens = cJSON_GetObjectItemCaseSensitive(r, "tensors"),
                *sh = cJSON_GetObjectItemCaseSensitive(r, "shards");
    if (!cJSON_IsArray(files) || !cJSON_IsArray(tens) || !cJSON_IsArray(sh))
        return ptdp_errorf(PTDP_EFORMAT, "%s: missing files/tensors/shards arrays", M->path);
    M->nfiles = cJSON_GetArraySize(files);
    M->ntensors = cJSON_GetArraySize(tens);
    M->nshards = cJSON_GetArraySize(sh);
    if (M->nfiles > PTDP__CKPT_MAX_FILES || M->ntensors > PTDP__CKPT_MAX_TENSORS)
        return ptdp_errorf(PTDP_EFORMAT, "%s: %d files and %d tensors: at most %d and %d", M->path,
                           M->nfiles, M->ntensors, PTDP__CKPT_MAX_FILES, PTDP__CKPT_MAX_TENSORS);
    M->files = calloc((size_t)M->nfiles + 1, sizeof *M->files);
    M->tensors = calloc((size_t)M->ntensors + 1, sizeof *M->tensors);
    M->shards = calloc((size_t)M->nshards + 1, sizeof *M->shards);
    if (!M->files || !M->tensors || !M->shards)
        return ptdp_errorf(PTDP_ENOMEM, "out of memory reading %s", M->path);
    int i = 0;
    for (const cJSON *x = files->child; x; x = x->next, i++) {
        file_rec *f = &M->files[i];
        const cJSON *cr = cJSON_GetObjectItemCaseSensitive(x, "crc32");
        char *end = NULL;
        const int crc_ok = cJSON_IsString(cr) && cr->valuestring[0] &&
                           strlen(cr->valuestring) <= 8 &&
                           (f->crc = (uint32_t)strtoul(cr->valuestring, &end, 16), !*end);
        if (!get_str(cJSON_GetObjectItemCaseSensitive(x, "name"), f->name, sizeof f->name) ||
            !ptdp__ckpt_safe_name(f->name) || !crc_ok)
            return ptdp_errorf(PTDP_EFORMAT,
                               "%s: files[%d] needs a plain file name (no '/', not '..', under "
                               "%zu bytes) and a crc32 of 8 hex digits",
                               M->path, i, sizeof f->name);
        f->bytes = ptdp__ckpt_jint(x, "bytes", &bad);
        f->rank = (int)ptdp__ckpt_jint(x, "rank", &bad);
        if (bad || f->bytes < 0 || f->bytes > PTDP__CKPT_MAX_FILE_BYTES)
            return ptdp_errorf(PTDP_EFORMAT, "%s: files[%d] needs a rank and a size in bytes",
                               M->path, i);
    }
    i = 0;
    for (const cJSON *x = tens->child; x; x = x->next, i++) {
        tensor_rec *T = &M->tensors[i];
        const cJSON *shp = cJSON_GetObjectItemCaseSensitive(x, "shape");
        const int nd = cJSON_IsArray(shp) ? cJSON_GetArraySize(shp) : 0;
        T->ndim = nd;
        T->shape[1] = 1;
        int ok = get_str(cJSON_GetObjectItemCaseSensitive(x, "name"), T->name, sizeof T->name) &&
                 nd >= 1 && nd <= 2 && json_int(shp->child, &T->shape[0]) &&
                 (nd == 1 || json_int(shp->child->next, &T->shape[1]));
        /* each dimension and their product at most 2^40: no product below overflows */
        ok = ok && T->shape[0] >= 1 && T->shape[1] >= 1 && T->shape[0] <= PTDP__CKPT_MAX_NUMEL &&
             T->shape[1] <= PTDP__CKPT_MAX_NUMEL / T->shape[0];
        if (!ok)
            return ptdp_errorf(PTDP_EFORMAT,
                               "%s: tensors[%d] needs a name (under %zu bytes) and a shape of 1 "
                               "or 2 positive dims of at most 2^40 elements in all",
                               M->path, i, sizeof T->name);
    }
    i = 0;
    for (const cJSON *x = sh->child; x; x = x->next, i++) {
        shard_rec *s = &M->shards[i];
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(x, "kind");
        s->kind = -1;
        for (int j = 0; cJSON_IsString(k) && j < K_COUNT; j++)
            if (!strcmp(k->valuestring, ptdp__ckpt_kind_names[j])) s->kind = j;
        s->file = (int)ptdp__ckpt_jint(x, "file", &bad);
        if (!get_str(cJSON_GetObjectItemCaseSensitive(x, "tensor"), s->name, sizeof s->name) ||
            !get_str(cJSON_GetObjectItemCaseSensitive(x, "key"), s->key, sizeof s->key) ||
            s->kind < 0 || bad || s->file < 0 || s->file >= M->nfiles ||
            !get_range(x, "rows", &s->r0, &s->r1) || !get_range(x, "cols", &s->c0, &s->c1) ||
            !get_range(x, "elements", &s->e0, &s->e1))
            return ptdp_errorf(PTDP_EFORMAT, "%s: shards[%d] is malformed", M->path, i);
        const tensor_rec *T = ptdp__ckpt_find_tensor(M, s->name);
        if (!T)
            return ptdp_errorf(PTDP_EFORMAT, "%s: shards[%d] names unknown tensor %s", M->path, i,
                               s->name);
        /* inside the tensor, so the rectangle's area cannot overflow either */
        if (s->r1 > T->shape[0] || s->c1 > T->shape[1] || s->e1 > (s->r1 - s->r0) * (s->c1 - s->c0))
            return ptdp_errorf(PTDP_EFORMAT, "%s: shards[%d] lies outside tensor %s", M->path, i,
                               s->name);
    }
    return 1;
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
    rc = ptdp__ckpt_manifest_parse(M, text, len);
    free(text);
    return rc;
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
        cfg->rmsnorm = M.rmsnorm;
        cfg->swiglu = M.swiglu;
        cfg->rope = M.rope;
        cfg->untie = M.untie;
        cfg->no_bias = M.no_bias;
        cfg->query_groups = M.groups == M.a ? 0 : M.groups;
        cfg->rotary_base = M.rotary_base;
        cfg->rotary_percent = (float)M.rotary_percent;
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
