/* safetensors.c - the safetensors reader (mmap + full validation) and the
 * atomic writer declared in format/format.h. The header is parsed with cJSON;
 * it is written by hand so the key order and the exact bytes are ours. Not
 * here: sharded checkpoints, conversion of whole models (see ckpt/). */
#define _POSIX_C_SOURCE 200809L

#include "format/format.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

static const struct {
    const char *name;
    size_t size;
} k_dtypes[PTDP_ST_NDTYPES] = {
#define PTDP__ST_DT_ROW(e, name, size) {name, size},
    PTDP_ST_DTYPES(PTDP__ST_DT_ROW)
#undef PTDP__ST_DT_ROW
};

const char *ptdp_st_dtype_name(ptdp_st_dtype dt) {
    PTDP_ASSERT((int)dt >= 0 && dt < PTDP_ST_NDTYPES);
    return k_dtypes[dt].name;
}

size_t ptdp_st_dtype_size(ptdp_st_dtype dt) {
    PTDP_ASSERT((int)dt >= 0 && dt < PTDP_ST_NDTYPES);
    return k_dtypes[dt].size;
}

static int dtype_from_name(const char *s) {
    for (int i = 0; i < PTDP_ST_NDTYPES; i++)
        if (strcmp(s, k_dtypes[i].name) == 0) return i;
    return -1;
}

/* ==== reader =============================================================== */

struct ptdp_st_file {
    char *path;
    unsigned char *map; /* whole file */
    size_t size;
    int owns_map;      /* 1: mmap'ed by ptdp_st_open; 0: the caller's buffer (ptdp_st_open_mem) */
    ptdp_st_tensor *t; /* n, header order */
    int n;
    int *by_name; /* n indices into t, sorted by name */
    char **meta;  /* 2*nmeta: key, value, ... */
    int nmeta;
};

void ptdp_st_close(ptdp_st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) free((char *)f->t[i].name);
    for (int i = 0; i < 2 * f->nmeta; i++) free(f->meta[i]);
    if (f->map && f->owns_map) munmap(f->map, f->size);
    free(f->t);
    free(f->by_name);
    free(f->meta);
    free(f->path);
    free(f);
}

int ptdp_st_count(const ptdp_st_file *f) { return f->n; }
const char *ptdp_st_path(const ptdp_st_file *f) { return f->path; }

const ptdp_st_tensor *ptdp_st_get(const ptdp_st_file *f, int i) {
    PTDP_ASSERT(i >= 0 && i < f->n);
    return &f->t[i];
}

const ptdp_st_tensor *ptdp_st_find(const ptdp_st_file *f, const char *name) {
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const ptdp_st_tensor *t = &f->t[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *ptdp_st_metadata(const ptdp_st_file *f, const char *key) {
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta[2 * i], key) == 0) return f->meta[2 * i + 1];
    return NULL;
}

int ptdp_st_metadata_count(const ptdp_st_file *f) { return f->nmeta; }

void ptdp_st_metadata_get(const ptdp_st_file *f, int i, const char **key, const char **value) {
    PTDP_ASSERT(i >= 0 && i < f->nmeta);
    *key = f->meta[2 * i];
    *value = f->meta[2 * i + 1];
}

/* A JSON number that is a non-negative integer below 2^53 (exact in double). */
static int json_uint(const cJSON *j, int64_t *v) {
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d)) return 0;
    *v = (int64_t)d;
    return 1;
}

/* qsort has no context argument, so the sort keys travel inside the items. */
typedef struct {
    int64_t begin, end;
    int idx;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->idx - y->idx;
}

typedef struct {
    const char *name;
    int idx;
} named;

static int cmp_named(const void *a, const void *b) {
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* The 8-byte header length: within the limit, inside the file, long enough
 * for an object. */
static int header_length(const ptdp_st_file *f, uint64_t *hlen) {
    const char *path = f->path;
    if (f->size < 8)
        return ptdp_errorf(PTDP_EFORMAT,
                           "file %s: truncated: %zu bytes, too short for the 8-byte header length",
                           path, f->size);
    *hlen = 0;
    for (int i = 7; i >= 0; i--) *hlen = (*hlen << 8) | f->map[i];
    if (*hlen > PTDP_ST_MAX_HEADER)
        return ptdp_errorf(PTDP_EFORMAT,
                           "file %s: header length %llu exceeds the limit of %llu bytes", path,
                           (unsigned long long)*hlen, PTDP_ST_MAX_HEADER);
    if (*hlen > f->size - 8)
        return ptdp_errorf(
            PTDP_EFORMAT,
            "file %s: header length %llu runs past the end of the file (%zu bytes; truncated?)",
            path, (unsigned long long)*hlen, f->size);
    if (*hlen < 2)
        return ptdp_errorf(PTDP_EFORMAT,
                           "file %s: header length %llu is too short for a JSON object", path,
                           (unsigned long long)*hlen);
    return PTDP_OK;
}

/* The header bytes as one JSON object (no NUL, bounded nesting, only
 * whitespace after it). *root is the caller's to free, also on error. */
static int header_json(const ptdp_st_file *f, uint64_t hlen, cJSON **root) {
    const char *path = f->path, *hdr = (const char *)f->map + 8;
    *root = NULL;
    if (memchr(hdr, 0, hlen))
        return ptdp_errorf(
            PTDP_EFORMAT,
            "file %s: header contains a NUL byte (invalid JSON; padding must be spaces)", path);
    char what[300];
    snprintf(what, sizeof what, "file %s: header", path);
    if (ptdp_json_check(hdr, hlen, PTDP_JSON_MAX_DEPTH, what)) return PTDP_EFORMAT;
    const char *end = NULL;
    *root = cJSON_ParseWithLengthOpts(hdr, hlen, &end, 0);
    if (!*root) {
        long at = end ? (long)(end - hdr) : -1;
        return ptdp_errorf(PTDP_EFORMAT,
                           "file %s: header is not valid JSON (parse error near byte %ld of %llu)",
                           path, at, (unsigned long long)hlen);
    }
    for (const char *p = end; p < hdr + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return ptdp_errorf(
                PTDP_EFORMAT,
                "file %s: header is not valid JSON (unexpected text after the object at byte %ld)",
                path, (long)(p - hdr));
    if (!cJSON_IsObject(*root))
        return ptdp_errorf(PTDP_EFORMAT, "file %s: header JSON is not an object", path);
    return PTDP_OK;
}

/* __metadata__: an object of string values, no key twice. */
static int read_metadata(ptdp_st_file *f, const cJSON *e) {
    const char *path = f->path;
    if (!cJSON_IsObject(e))
        return ptdp_errorf(PTDP_EFORMAT, "file %s: __metadata__ is not a JSON object", path);
    int nm = cJSON_GetArraySize(e);
    f->meta = calloc(2 * (size_t)(nm ? nm : 1), sizeof *f->meta);
    if (!f->meta) return ptdp_errorf(PTDP_ENOMEM, "file %s: out of memory for metadata", path);
    for (const cJSON *m = e->child; m; m = m->next) {
        if (!cJSON_IsString(m))
            return ptdp_errorf(PTDP_EFORMAT, "file %s: __metadata__ value for '%s' is not a string",
                               path, m->string);
        for (int k = 0; k < f->nmeta; k++)
            if (strcmp(f->meta[2 * k], m->string) == 0)
                return ptdp_errorf(PTDP_EFORMAT, "file %s: duplicate __metadata__ key '%s'", path,
                                   m->string);
        f->meta[2 * f->nmeta] = xstrdup(m->string);
        f->meta[2 * f->nmeta + 1] = xstrdup(m->valuestring);
        f->nmeta++;
        if (!f->meta[2 * f->nmeta - 2] || !f->meta[2 * f->nmeta - 1])
            return ptdp_errorf(PTDP_ENOMEM, "file %s: out of memory for metadata", path);
    }
    return PTDP_OK;
}

/* One tensor entry into f->t[f->n]: a known dtype, a shape of at most 8
 * non-negative dims whose byte size fits, and data_offsets spanning exactly
 * that many bytes (*sp: where, checked against the others later). */
static int read_entry(ptdp_st_file *f, const cJSON *e, span *sp) {
    const char *path = f->path, *name = e->string;
    ptdp_st_tensor *t = &f->t[f->n];
    if (!cJSON_IsObject(e))
        return ptdp_errorf(PTDP_EFORMAT, "file %s: tensor '%s': entry is not a JSON object", path,
                           name);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(jd))
        return ptdp_errorf(PTDP_EFORMAT, "file %s: tensor '%s': missing or non-string \"dtype\"",
                           path, name);
    int dt = dtype_from_name(jd->valuestring);
    if (dt < 0)
        return ptdp_errorf(
            PTDP_EFORMAT,
            "file %s: tensor '%s': unknown dtype \"%s\" (known: F64 F32 F16 BF16 I64 I32 U16 U8)",
            path, name, jd->valuestring);
    if (!cJSON_IsArray(js))
        return ptdp_errorf(PTDP_EFORMAT, "file %s: tensor '%s': missing or non-array \"shape\"",
                           path, name);
    int ndim = cJSON_GetArraySize(js);
    if (ndim > PTDP_ST_MAX_DIMS)
        return ptdp_errorf(PTDP_EFORMAT,
                           "file %s: tensor '%s': shape has %d dims, at most %d supported", path,
                           name, ndim, PTDP_ST_MAX_DIMS);
    int64_t numel = 1;
    int d = 0;
    for (const cJSON *x = js->child; x; x = x->next, d++) {
        if (!json_uint(x, &t->shape[d]))
            return ptdp_errorf(PTDP_EFORMAT,
                               "file %s: tensor '%s': shape[%d] is not a non-negative integer",
                               path, name, d);
        if (t->shape[d] && numel > INT64_MAX / 8 / t->shape[d])
            return ptdp_errorf(PTDP_EFORMAT, "file %s: tensor '%s': shape is too large", path,
                               name);
        numel *= t->shape[d];
    }
    int64_t b0, b1;
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 || !json_uint(jo->child, &b0) ||
        !json_uint(jo->child->next, &b1))
        return ptdp_errorf(
            PTDP_EFORMAT,
            "file %s: tensor '%s': \"data_offsets\" missing or not two non-negative integers", path,
            name);
    if (b1 < b0)
        return ptdp_errorf(PTDP_EFORMAT,
                           "file %s: tensor '%s': data_offsets [%lld,%lld] end before they begin",
                           path, name, (long long)b0, (long long)b1);
    int64_t want = numel * (int64_t)k_dtypes[dt].size;
    if (b1 - b0 != want)
        return ptdp_errorf(
            PTDP_EFORMAT,
            "file %s: tensor '%s': data_offsets [%lld,%lld] hold %lld bytes but shape of %lld "
            "elements of %s needs %lld",
            path, name, (long long)b0, (long long)b1, (long long)(b1 - b0), (long long)numel,
            k_dtypes[dt].name, (long long)want);
    t->name = xstrdup(name);
    if (!t->name) return ptdp_errorf(PTDP_ENOMEM, "file %s: out of memory", path);
    t->dtype = (ptdp_st_dtype)dt;
    t->ndim = ndim;
    t->numel = numel;
    t->nbytes = (size_t)want;
    *sp = (span){b0, b1, f->n};
    f->n++;
    return PTDP_OK;
}

/* f->by_name from the names sorted; a name twice is refused. */
static int index_names(ptdp_st_file *f, named *names) {
    for (int i = 0; i < f->n; i++) names[i] = (named){f->t[i].name, i};
    qsort(names, f->n, sizeof *names, cmp_named);
    for (int i = 0; i < f->n; i++) {
        if (i > 0 && strcmp(names[i - 1].name, names[i].name) == 0)
            return ptdp_errorf(PTDP_EFORMAT, "file %s: duplicate tensor name '%s' in the header",
                               f->path, names[i].name);
        f->by_name[i] = names[i].idx;
    }
    return PTDP_OK;
}

/* The tensors sorted by offset tile the data buffer from 0, with no hole,
 * no overlap and nothing after the last; then each gets its data pointer. */
static int place_data(ptdp_st_file *f, span *spans, uint64_t hlen) {
    const char *path = f->path;
    qsort(spans, f->n, sizeof *spans, cmp_span);
    int64_t pos = 0;
    for (int i = 0; i < f->n; i++) {
        const span *s = &spans[i];
        if (s->begin > pos)
            return ptdp_errorf(
                PTDP_EFORMAT,
                "file %s: hole in the data buffer: bytes [%lld,%lld) belong to no tensor "
                "(next is '%s')",
                path, (long long)pos, (long long)s->begin, f->t[s->idx].name);
        if (s->begin < pos)
            return ptdp_errorf(
                PTDP_EFORMAT,
                "file %s: tensor '%s' data_offsets [%lld,%lld] overlap the previous tensor "
                "(which ends at %lld)",
                path, f->t[s->idx].name, (long long)s->begin, (long long)s->end, (long long)pos);
        pos = s->end;
    }
    uint64_t data_size = f->size - 8 - hlen;
    if ((uint64_t)pos > data_size)
        return ptdp_errorf(
            PTDP_EFORMAT,
            "file %s: truncated: the header declares %lld data bytes but only %llu follow it", path,
            (long long)pos, (unsigned long long)data_size);
    if ((uint64_t)pos < data_size)
        return ptdp_errorf(
            PTDP_EFORMAT,
            "file %s: %llu trailing bytes after the last tensor (8 + header %llu + data %lld "
            "!= file size %zu)",
            path, (unsigned long long)(data_size - pos), (unsigned long long)hlen, (long long)pos,
            f->size);
    const unsigned char *data = f->map + 8 + hlen;
    for (int i = 0; i < f->n; i++) f->t[spans[i].idx].data = data + spans[i].begin;
    return PTDP_OK;
}

/* Parses and validates the header of f (f->map, f->size already set): the
 * length, the JSON, the metadata and every entry, then the names and the
 * data buffer as a whole. */
static int parse_header(ptdp_st_file *f) {
    uint64_t hlen = 0;
    int rc = header_length(f, &hlen);
    if (rc) return rc;
    cJSON *root = NULL;
    rc = header_json(f, hlen, &root);
    int nent = 0, nmetaobj = 0;
    for (const cJSON *e = rc ? NULL : root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0)
            nmetaobj++;
        else
            nent++;
    }
    if (rc == PTDP_OK && nmetaobj > 1)
        rc = ptdp_errorf(PTDP_EFORMAT, "file %s: duplicate name '__metadata__' in the header",
                         f->path);
    span *spans = NULL;
    named *names = NULL;
    if (rc == PTDP_OK) {
        f->t = calloc(nent ? nent : 1, sizeof *f->t);
        f->by_name = calloc(nent ? nent : 1, sizeof *f->by_name);
        spans = calloc(nent ? nent : 1, sizeof *spans);
        names = calloc(nent ? nent : 1, sizeof *names);
        if (!f->t || !f->by_name || !spans || !names)
            rc = ptdp_errorf(PTDP_ENOMEM, "file %s: out of memory for %d tensor entries", f->path,
                             nent);
    }
    for (const cJSON *e = rc ? NULL : root->child; rc == PTDP_OK && e; e = e->next)
        rc = strcmp(e->string, "__metadata__") == 0 ? read_metadata(f, e)
                                                    : read_entry(f, e, &spans[f->n]);
    if (rc == PTDP_OK) rc = index_names(f, names);
    if (rc == PTDP_OK) rc = place_data(f, spans, hlen);
    free(spans);
    free(names);
    cJSON_Delete(root);
    return rc;
}

int ptdp_st_open(ptdp_st_file **out, const char *path) {
    *out = NULL;
    ptdp_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = xstrdup(path))) {
        free(f);
        return ptdp_errorf(PTDP_ENOMEM, "file %s: out of memory", path);
    }
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        int e = errno;
        ptdp_st_close(f);
        return ptdp_errorf(PTDP_EIO, "file %s: cannot open: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        ptdp_st_close(f);
        return ptdp_errorf(PTDP_EIO, "file %s: cannot stat: %s", path, strerror(e));
    }
    f->size = (size_t)st.st_size;
    if (f->size > 0) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            f->size = 0;
            ptdp_st_close(f);
            return ptdp_errorf(PTDP_EIO, "file %s: cannot map: %s", path, strerror(e));
        }
        f->map = m;
        f->owns_map = 1;
    }
    close(fd); /* the mapping stays valid */
    int rc = parse_header(f);
    if (rc < 0) {
        ptdp_st_close(f);
        return rc;
    }
    *out = f;
    return PTDP_OK;
}

int ptdp_st_open_mem(ptdp_st_file **out, const char *name, const void *data, size_t size) {
    *out = NULL;
    ptdp_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = xstrdup(name))) {
        free(f);
        return ptdp_errorf(PTDP_ENOMEM, "file %s: out of memory", name);
    }
    f->map = (unsigned char *)data; /* read only: the parser never writes through it */
    f->size = data ? size : 0;
    int rc = parse_header(f);
    if (rc < 0) {
        ptdp_st_close(f);
        return rc;
    }
    *out = f;
    return PTDP_OK;
}

static int lookup(const ptdp_st_file *f, const char *name, int64_t n, const ptdp_st_tensor **t) {
    *t = ptdp_st_find(f, name);
    if (!*t) return ptdp_errorf(PTDP_ENOTFOUND, "file %s: no tensor named '%s'", f->path, name);
    if ((*t)->numel != n)
        return ptdp_errorf(PTDP_EFORMAT, "file %s: tensor '%s' has %lld elements, expected %lld",
                           f->path, name, (long long)(*t)->numel, (long long)n);
    return PTDP_OK;
}

int ptdp_st_read_f32(const ptdp_st_file *f, const char *name, float *dst, int64_t n) {
    const ptdp_st_tensor *t;
    int rc = lookup(f, name, n, &t);
    if (rc < 0) return rc;
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case PTDP_ST_F32:
        memcpy(dst, p, (size_t)n * 4);
        return PTDP_OK;
    case PTDP_ST_F64:
        for (int64_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            dst[i] = (float)d;
        }
        return PTDP_OK;
    case PTDP_ST_BF16: /* exact: both widen to fp32 without rounding */
        ptdp_bf16_to_f32_n(dst, p, n);
        return PTDP_OK;
    case PTDP_ST_F16:
        ptdp_f16_to_f32_n(dst, p, n);
        return PTDP_OK;
    default:
        return ptdp_errorf(PTDP_EUNSUPPORTED,
                           "file %s: tensor '%s' has dtype %s, not a floating-point type", f->path,
                           name, k_dtypes[t->dtype].name);
    }
}

int ptdp_st_read_i32(const ptdp_st_file *f, const char *name, int32_t *dst, int64_t n) {
    const ptdp_st_tensor *t;
    int rc = lookup(f, name, n, &t);
    if (rc < 0) return rc;
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case PTDP_ST_I32:
        memcpy(dst, p, (size_t)n * 4);
        return PTDP_OK;
    case PTDP_ST_I64:
        for (int64_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, p + 8 * i, 8);
            if (v < INT32_MIN || v > INT32_MAX)
                return ptdp_errorf(PTDP_EFORMAT,
                                   "file %s: tensor '%s' element %lld = %lld does not fit in int32",
                                   f->path, name, (long long)i, (long long)v);
            dst[i] = (int32_t)v;
        }
        return PTDP_OK;
    case PTDP_ST_U16:
        for (int64_t i = 0; i < n; i++) dst[i] = (int32_t)(p[2 * i] | p[2 * i + 1] << 8);
        return PTDP_OK;
    case PTDP_ST_U8:
        for (int64_t i = 0; i < n; i++) dst[i] = p[i];
        return PTDP_OK;
    default:
        return ptdp_errorf(PTDP_EUNSUPPORTED,
                           "file %s: tensor '%s' has dtype %s, not an integer type", f->path, name,
                           k_dtypes[t->dtype].name);
    }
}

/* ==== writer =============================================================== */

typedef struct {
    char *name;
    ptdp_st_dtype dtype;
    int ndim;
    int64_t shape[PTDP_ST_MAX_DIMS];
    size_t nbytes;
    const void *data;
} wentry;

struct ptdp_st_writer {
    wentry *e;
    int n, cap;
    char **meta; /* 2*nmeta: key, value */
    int nmeta, metacap;
};

int ptdp_st_writer_init(ptdp_st_writer **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return ptdp_errorf(PTDP_ENOMEM, "safetensors writer: out of memory");
    return PTDP_OK;
}

void ptdp_st_writer_free(ptdp_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->e[i].name);
    for (int i = 0; i < 2 * w->nmeta; i++) free(w->meta[i]);
    free(w->e);
    free(w->meta);
    free(w);
}

int ptdp_st_writer_add(ptdp_st_writer *w, const char *name, ptdp_st_dtype dtype, int ndim,
                       const int64_t *shape, const void *data) {
    if (!name || !name[0] || strcmp(name, "__metadata__") == 0)
        return ptdp_errorf(PTDP_EINVAL, "safetensors writer: invalid tensor name '%s'",
                           name ? name : "(null)");
    if ((int)dtype < 0 || dtype >= PTDP_ST_NDTYPES)
        return ptdp_errorf(PTDP_EINVAL, "safetensors writer: tensor '%s': invalid dtype %d", name,
                           (int)dtype);
    if (ndim < 0 || ndim > PTDP_ST_MAX_DIMS)
        return ptdp_errorf(PTDP_EINVAL, "safetensors writer: tensor '%s': ndim %d outside 0..%d",
                           name, ndim, PTDP_ST_MAX_DIMS);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0)
            return ptdp_errorf(PTDP_EINVAL, "safetensors writer: duplicate tensor name '%s'", name);
    wentry e = {0};
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return ptdp_errorf(PTDP_EINVAL, "safetensors writer: tensor '%s': negative dim", name);
        e.shape[d] = shape[d];
        numel *= shape[d];
    }
    e.nbytes = (size_t)numel * k_dtypes[dtype].size;
    if (!data && e.nbytes)
        return ptdp_errorf(PTDP_EINVAL, "safetensors writer: tensor '%s': NULL data for %zu bytes",
                           name, e.nbytes);
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        wentry *ne = realloc(w->e, (size_t)cap * sizeof *ne);
        if (!ne) return ptdp_errorf(PTDP_ENOMEM, "safetensors writer: out of memory");
        w->e = ne;
        w->cap = cap;
    }
    e.name = xstrdup(name);
    if (!e.name) return ptdp_errorf(PTDP_ENOMEM, "safetensors writer: out of memory");
    e.dtype = dtype;
    e.ndim = ndim;
    e.data = data;
    w->e[w->n++] = e;
    return PTDP_OK;
}

int ptdp_st_writer_meta(ptdp_st_writer *w, const char *key, const char *value) {
    if (!key || !value)
        return ptdp_errorf(PTDP_EINVAL, "safetensors writer: NULL metadata key or value");
    if (strcmp(key, "format") == 0) {
        if (strcmp(value, "pt") != 0)
            return ptdp_errorf(PTDP_EINVAL,
                               "safetensors writer: metadata \"format\" must be \"pt\", got \"%s\"",
                               value);
        return PTDP_OK;
    }
    char *v = xstrdup(value);
    if (!v) return ptdp_errorf(PTDP_ENOMEM, "safetensors writer: out of memory");
    for (int i = 0; i < w->nmeta; i++)
        if (strcmp(w->meta[2 * i], key) == 0) {
            free(w->meta[2 * i + 1]);
            w->meta[2 * i + 1] = v;
            return PTDP_OK;
        }
    if (w->nmeta == w->metacap) {
        int cap = w->metacap ? 2 * w->metacap : 8;
        char **nm = realloc(w->meta, 2 * (size_t)cap * sizeof *nm);
        if (!nm) {
            free(v);
            return ptdp_errorf(PTDP_ENOMEM, "safetensors writer: out of memory");
        }
        w->meta = nm;
        w->metacap = cap;
    }
    char *k = xstrdup(key);
    if (!k) {
        free(v);
        return ptdp_errorf(PTDP_ENOMEM, "safetensors writer: out of memory");
    }
    w->meta[2 * w->nmeta] = k;
    w->meta[2 * w->nmeta + 1] = v;
    w->nmeta++;
    return PTDP_OK;
}

/* Growable string for the header. `oom` sticks once set. */
typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    PTDP_ASSERT(n >= 0 && (size_t)n < sizeof tmp); /* only used for numbers and short literals */
    sb_put(b, tmp, (size_t)n);
}

static void sb_json_str(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            sb_put(b, esc, 2);
        } else if (c < 0x20) {
            sb_printf(b, "\\u%04x", c);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

int ptdp_st_write(const ptdp_st_writer *w, const char *path) {
    sbuf h = {0};
    static const char head[] = "{\"__metadata__\":{\"format\":\"pt\"";
    sb_put(&h, head, sizeof head - 1);
    for (int i = 0; i < w->nmeta; i++) {
        sb_put(&h, ",", 1);
        sb_json_str(&h, w->meta[2 * i]);
        sb_put(&h, ":", 1);
        sb_json_str(&h, w->meta[2 * i + 1]);
    }
    sb_put(&h, "}", 1);
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        const wentry *e = &w->e[i];
        sb_put(&h, ",", 1);
        sb_json_str(&h, e->name);
        sb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", k_dtypes[e->dtype].name);
        for (int d = 0; d < e->ndim; d++)
            sb_printf(&h, d ? ",%lld" : "%lld", (long long)e->shape[d]);
        sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                  (unsigned long long)(off + e->nbytes));
        off += e->nbytes;
    }
    sb_put(&h, "}", 1);
    while (!h.oom && h.len % 8) sb_put(&h, " ", 1);
    if (h.oom) {
        free(h.s);
        return ptdp_errorf(PTDP_ENOMEM, "file %s: out of memory for the safetensors header", path);
    }
    if (h.len > PTDP_ST_MAX_HEADER) {
        free(h.s);
        return ptdp_errorf(
            PTDP_EINVAL, "file %s: header of %zu bytes exceeds the safetensors limit", path, h.len);
    }

    size_t tlen = strlen(path) + 32;
    char *tmp = malloc(tlen);
    if (!tmp) {
        free(h.s);
        return ptdp_errorf(PTDP_ENOMEM, "file %s: out of memory", path);
    }
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
    const char *what = "open";
    FILE *fp = fopen(tmp, "wb");
    int ok = fp != NULL;
    if (ok) {
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
        what = "write";
        ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(h.s, 1, h.len, fp) == h.len;
        /* tests: a process killed with the header on disk and no tensor data
         * (PTDP_FAULT=kill.checkpoint-write) */
        if (ok && getenv("PTDP_FAULT") && fflush(fp) == 0)
            ptdp_fault_point(NULL, "checkpoint-write");
        for (int i = 0; ok && i < w->n; i++)
            ok = w->e[i].nbytes == 0 ||
                 fwrite(w->e[i].data, 1, w->e[i].nbytes, fp) == w->e[i].nbytes;
        if (ok) {
            what = "flush";
            ok = fflush(fp) == 0;
        }
        if (ok) {
            what = "fsync";
            ok = fsync(fileno(fp)) == 0;
        }
    }
    int e = errno;
    if (fp && fclose(fp) != 0 && ok) {
        e = errno;
        what = "close";
        ok = 0;
    }
    if (ok && rename(tmp, path) != 0) {
        e = errno;
        what = "rename to final name";
        ok = 0;
    }
    int rc = PTDP_OK;
    if (!ok) {
        if (fp) remove(tmp);
        rc = ptdp_errorf(PTDP_EIO, "file %s: cannot %s %s: %s", path, what, tmp, strerror(e));
    }
    free(tmp);
    free(h.s);
    return rc;
}
