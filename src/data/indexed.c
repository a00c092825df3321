/* indexed.c - Megatron's indexed dataset (megatron/core/datasets/
 * indexed_dataset.py, "MMIDIDX" version 1): a writer and a validating mmap
 * reader. Byte layout of PREFIX.idx, little-endian, packed:
 *   0   9   magic "MMIDIDX\0\0"
 *   9   8   u64 version = 1
 *   17  1   u8 dtype code (PTDP_IDX_DTYPES)
 *   18  8   u64 S = number of sequences
 *   26  8   u64 D = number of documents + 1
 *   34  4S  int32 sequence lengths (tokens)
 *   34+4S   8S  int64 byte offsets of the sequences in .bin
 *   34+12S  8D  int64 document boundaries (0, ..., S)
 * PREFIX.bin holds the tokens of all sequences back to back, no header.
 * Not supported: the multimodal "sequence modes" extension, writing dtypes
 * other than uint16/int32, big-endian hosts. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "data/data.h"

static const char ptdp__idx_magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};

int ptdp_idx_dtype_size(int code) {
    switch (code) {
#define PTDP__IDX_SIZE(name, c, size, str) \
    case c:                                \
        return size;
        PTDP_IDX_DTYPES(PTDP__IDX_SIZE)
#undef PTDP__IDX_SIZE
    }
    return 0;
}

const char *ptdp_idx_dtype_name(int code) {
    switch (code) {
#define PTDP__IDX_NAME(name, c, size, str) \
    case c:                                \
        return str;
        PTDP_IDX_DTYPES(PTDP__IDX_NAME)
#undef PTDP__IDX_NAME
    }
    return "?";
}

int ptdp_idx_dtype_for_vocab(int64_t vocab_size) {
    return vocab_size < 65500 ? PTDP_IDX_U16 : PTDP_IDX_I32;
}

/* ---- writer ---------------------------------------------------------------- */
struct ptdp_idx_writer {
    char *prefix;
    char *bin_tmp, *idx_tmp; /* PREFIX.{bin,idx}.tmp.PID until finish renames them */
    FILE *bin;
    int dtype;
    int32_t *lengths;
    size_t nseq, cap_seq;
    int64_t *docs;
    size_t ndoc, cap_doc;
    void *conv;
    size_t conv_cap;
};

static char *ptdp__path(const char *prefix, const char *ext) {
    size_t n = strlen(prefix);
    char *p = malloc(n + strlen(ext) + 1);
    if (p) {
        memcpy(p, prefix, n);
        strcpy(p + n, ext);
    }
    return p;
}

void ptdp_idx_writer_free(ptdp_idx_writer *w) {
    if (!w) return;
    if (w->bin) fclose(w->bin);
    /* an abandoned writer leaves the previous dataset (if any) untouched */
    if (w->bin_tmp) unlink(w->bin_tmp);
    if (w->idx_tmp) unlink(w->idx_tmp);
    free(w->bin_tmp);
    free(w->idx_tmp);
    free(w->prefix);
    free(w->lengths);
    free(w->docs);
    free(w->conv);
    free(w);
}

int ptdp_idx_writer_open(ptdp_idx_writer **out, const char *prefix, int dtype) {
    *out = NULL;
    if (dtype != PTDP_IDX_U16 && dtype != PTDP_IDX_I32)
        return ptdp_errorf(PTDP_EUNSUPPORTED, "indexed dataset writer: dtype %s not supported",
                           ptdp_idx_dtype_name(dtype));
    ptdp_idx_writer *w = calloc(1, sizeof(*w));
    if (!w) return ptdp_errorf(PTDP_ENOMEM, "out of memory");
    w->dtype = dtype;
    w->prefix = strdup(prefix);
    w->cap_doc = 1024;
    w->docs = malloc(w->cap_doc * sizeof(int64_t));
    char ext[64];
    snprintf(ext, sizeof ext, ".bin.tmp.%ld", (long)getpid());
    w->bin_tmp = ptdp__path(prefix, ext);
    snprintf(ext, sizeof ext, ".idx.tmp.%ld", (long)getpid());
    w->idx_tmp = ptdp__path(prefix, ext);
    if (!w->prefix || !w->docs || !w->bin_tmp || !w->idx_tmp) {
        ptdp_idx_writer_free(w);
        return ptdp_errorf(PTDP_ENOMEM, "out of memory");
    }
    w->docs[w->ndoc++] = 0;
    w->bin = fopen(w->bin_tmp, "wb");
    if (!w->bin) {
        int rc = ptdp_errorf(PTDP_EIO, "cannot create '%s': %s", w->bin_tmp, strerror(errno));
        free(w->bin_tmp);
        w->bin_tmp = NULL; /* not created: nothing to remove */
        ptdp_idx_writer_free(w);
        return rc;
    }
    *out = w;
    return PTDP_OK;
}

int ptdp_idx_writer_add_document(ptdp_idx_writer *w, const int32_t *tokens, size_t n) {
    if (n > INT32_MAX) return ptdp_errorf(PTDP_EINVAL, "a document of %zu tokens is too long", n);
    if (n > 0) {
        size_t es = (size_t)ptdp_idx_dtype_size(w->dtype);
        if (n * es > w->conv_cap) {
            void *c = realloc(w->conv, n * es);
            if (!c) return ptdp_errorf(PTDP_ENOMEM, "out of memory");
            w->conv = c;
            w->conv_cap = n * es;
        }
        if (w->dtype == PTDP_IDX_U16) {
            uint16_t *c = w->conv;
            for (size_t i = 0; i < n; i++) {
                if (tokens[i] < 0 || tokens[i] > 65535)
                    return ptdp_errorf(PTDP_EINVAL, "token %d does not fit uint16", tokens[i]);
                c[i] = (uint16_t)tokens[i];
            }
        } else {
            memcpy(w->conv, tokens, n * es);
        }
        if (fwrite(w->conv, es, n, w->bin) != n)
            return ptdp_errorf(PTDP_EIO, "error writing '%s.bin': %s", w->prefix, strerror(errno));
        if (w->nseq == w->cap_seq) {
            size_t cap = w->cap_seq ? 2 * w->cap_seq : 1024;
            int32_t *l = realloc(w->lengths, cap * sizeof(int32_t));
            if (!l) return ptdp_errorf(PTDP_ENOMEM, "out of memory");
            w->lengths = l;
            w->cap_seq = cap;
        }
        w->lengths[w->nseq++] = (int32_t)n;
    }
    if (w->ndoc == w->cap_doc) {
        int64_t *d = realloc(w->docs, 2 * w->cap_doc * sizeof(int64_t));
        if (!d) return ptdp_errorf(PTDP_ENOMEM, "out of memory");
        w->docs = d;
        w->cap_doc *= 2;
    }
    w->docs[w->ndoc++] = (int64_t)w->nseq;
    return PTDP_OK;
}

static int ptdp__put(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n; }

int ptdp_idx_writer_finish(ptdp_idx_writer *w) {
    int rc = PTDP_OK;
    const char *idx = w->idx_tmp;
    if (fclose(w->bin) != 0)
        rc = ptdp_errorf(PTDP_EIO, "error closing '%s': %s", w->bin_tmp, strerror(errno));
    w->bin = NULL;
    FILE *f = rc ? NULL : fopen(idx, "wb");
    if (!rc && !f) rc = ptdp_errorf(PTDP_EIO, "cannot create '%s': %s", idx, strerror(errno));
    if (f) {
        uint64_t version = 1, s = w->nseq, d = w->ndoc;
        uint8_t code = (uint8_t)w->dtype;
        int ok = ptdp__put(f, ptdp__idx_magic, 9) && ptdp__put(f, &version, 8) &&
                 ptdp__put(f, &code, 1) && ptdp__put(f, &s, 8) && ptdp__put(f, &d, 8) &&
                 ptdp__put(f, w->lengths, 4 * w->nseq);
        int64_t ptr = 0, es = ptdp_idx_dtype_size(w->dtype);
        for (size_t i = 0; ok && i < w->nseq; i++) {
            ok = ptdp__put(f, &ptr, 8);
            ptr += (int64_t)w->lengths[i] * es;
        }
        ok = ok && ptdp__put(f, w->docs, 8 * w->ndoc);
        if (fclose(f) != 0) ok = 0;
        if (!ok) rc = ptdp_errorf(PTDP_EIO, "error writing '%s': %s", idx, strerror(errno));
    }
    /* Only a complete pair replaces PREFIX.{bin,idx}; the .bin goes first so
     * that a reader never sees the new .idx beside the old .bin. */
    char *bin = ptdp__path(w->prefix, ".bin"), *final_idx = ptdp__path(w->prefix, ".idx");
    if (!rc && (!bin || !final_idx)) rc = ptdp_errorf(PTDP_ENOMEM, "out of memory");
    if (!rc && rename(w->bin_tmp, bin) != 0)
        rc = ptdp_errorf(PTDP_EIO, "cannot rename '%s' to '%s': %s", w->bin_tmp, bin,
                         strerror(errno));
    if (!rc && rename(w->idx_tmp, final_idx) != 0)
        rc = ptdp_errorf(PTDP_EIO, "cannot rename '%s' to '%s': %s", w->idx_tmp, final_idx,
                         strerror(errno));
    free(bin);
    free(final_idx);
    ptdp_idx_writer_free(w);
    return rc;
}

/* ---- reader ----------------------------------------------------------------- */
struct ptdp_idx_dataset {
    char *prefix;
    int dtype;
    int64_t nseq, ndoc1; /* S and D */
    const unsigned char *idx_map, *bin_map;
    size_t idx_size, bin_size;
    int owns_maps; /* 0: the caller's buffers (ptdp_idx_open_mem) */
    const int32_t *lengths;
    const int64_t *pointers, *docs;
};

void ptdp_idx_close(ptdp_idx_dataset *ds) {
    if (!ds) return;
    if (ds->owns_maps && ds->idx_map) munmap((void *)ds->idx_map, ds->idx_size);
    if (ds->owns_maps && ds->bin_map) munmap((void *)ds->bin_map, ds->bin_size);
    free(ds->prefix);
    free(ds);
}

static int ptdp__map(const char *path, const unsigned char **map, size_t *size) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ptdp_errorf(PTDP_EIO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return ptdp_errorf(PTDP_EIO, "cannot stat '%s': %s", path, strerror(errno));
    }
    *size = (size_t)st.st_size;
    *map = NULL;
    if (*size > 0) {
        void *m = mmap(NULL, *size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            close(fd);
            return ptdp_errorf(PTDP_EIO, "cannot map '%s': %s", path, strerror(errno));
        }
        *map = m;
    }
    close(fd);
    return PTDP_OK;
}

static int ptdp__validate(ptdp_idx_dataset *ds, const char *idx, const char *bin) {
    const unsigned char *m = ds->idx_map;
    if (ds->idx_size < 34)
        return ptdp_errorf(PTDP_EFORMAT, "'%s': %zu bytes, shorter than the 34-byte header", idx,
                           ds->idx_size);
    if (memcmp(m, ptdp__idx_magic, 9) != 0)
        return ptdp_errorf(PTDP_EFORMAT, "'%s': bad magic (not a Megatron MMIDIDX index)", idx);
    uint64_t version, s, d;
    memcpy(&version, m + 9, 8);
    memcpy(&s, m + 18, 8);
    memcpy(&d, m + 26, 8);
    if (version != 1)
        return ptdp_errorf(PTDP_EFORMAT, "'%s': version %llu, only 1 is supported", idx,
                           (unsigned long long)version);
    ds->dtype = m[17];
    int es = ptdp_idx_dtype_size(ds->dtype);
    if (!es) return ptdp_errorf(PTDP_EFORMAT, "'%s': unknown dtype code %d", idx, ds->dtype);
    if (ds->dtype == PTDP_IDX_F32 || ds->dtype == PTDP_IDX_F64)
        return ptdp_errorf(PTDP_EFORMAT, "'%s': dtype %s cannot hold token ids", idx,
                           ptdp_idx_dtype_name(ds->dtype));
    if (d < 1) return ptdp_errorf(PTDP_EFORMAT, "'%s': document count D = 0 (must be >= 1)", idx);
    if (s > ((uint64_t)1 << 40) || d > ((uint64_t)1 << 40) || 34 + 12 * s + 8 * d != ds->idx_size)
        return ptdp_errorf(PTDP_EFORMAT,
                           "'%s': size %zu does not match S = %llu sequences and D = %llu "
                           "boundaries (expected %llu bytes)",
                           idx, ds->idx_size, (unsigned long long)s, (unsigned long long)d,
                           (unsigned long long)(34 + 12 * s + 8 * d));
    ds->nseq = (int64_t)s;
    ds->ndoc1 = (int64_t)d;
    /* The arrays start at the unaligned offsets 34, 34 + 4S, 34 + 12S: every
     * access below and in the getters goes through memcpy, never a typed load. */
    ds->lengths = (const int32_t *)(m + 34);
    ds->pointers = (const int64_t *)(m + 34 + 4 * s);
    ds->docs = (const int64_t *)(m + 34 + 12 * s);
    int64_t expect = 0;
    for (int64_t i = 0; i < ds->nseq; i++) {
        int32_t len;
        int64_t ptr;
        memcpy(&len, m + 34 + 4 * i, 4);
        memcpy(&ptr, m + 34 + 4 * s + 8 * i, 8);
        if (len < 0)
            return ptdp_errorf(PTDP_EFORMAT, "'%s': sequence %lld has negative length %d", idx,
                               (long long)i, len);
        if (ptr != expect)
            return ptdp_errorf(PTDP_EFORMAT,
                               "'%s': sequence %lld starts at byte %lld, expected %lld "
                               "(pointers inconsistent with lengths)",
                               idx, (long long)i, (long long)ptr, (long long)expect);
        expect += (int64_t)len * es;
        /* a hostile .idx could sum lengths past int64; the .bin bounds them */
        if ((uint64_t)expect > ds->bin_size)
            return ptdp_errorf(PTDP_EFORMAT,
                               "'%s' has %zu bytes but '%s' describes at least %lld (truncated "
                               "or mismatched pair)",
                               bin, ds->bin_size, idx, (long long)expect);
    }
    for (int64_t j = 0; j < ds->ndoc1; j++) {
        int64_t b, prev = 0;
        memcpy(&b, m + 34 + 12 * s + 8 * j, 8);
        if (j > 0) memcpy(&prev, m + 34 + 12 * s + 8 * (j - 1), 8);
        if ((j == 0 && b != 0) || b < prev || b > ds->nseq)
            return ptdp_errorf(PTDP_EFORMAT, "'%s': document boundary %lld = %lld is out of order",
                               idx, (long long)j, (long long)b);
        if (j == ds->ndoc1 - 1 && b != ds->nseq)
            return ptdp_errorf(PTDP_EFORMAT, "'%s': last document boundary %lld != S = %lld", idx,
                               (long long)b, (long long)ds->nseq);
    }
    if ((uint64_t)expect != ds->bin_size)
        return ptdp_errorf(PTDP_EFORMAT,
                           "'%s' has %zu bytes but '%s' describes %lld (truncated or mismatched "
                           "pair)",
                           bin, ds->bin_size, idx, (long long)expect);
    return PTDP_OK;
}

int ptdp_idx_open(ptdp_idx_dataset **out, const char *prefix) {
    *out = NULL;
    ptdp_idx_dataset *ds = calloc(1, sizeof(*ds));
    char *idx = ptdp__path(prefix, ".idx"), *bin = ptdp__path(prefix, ".bin");
    int rc = PTDP_OK;
    if (!ds || !idx || !bin || !(ds->prefix = strdup(prefix)))
        rc = ptdp_errorf(PTDP_ENOMEM, "out of memory");
    if (ds) ds->owns_maps = 1;
    if (!rc) rc = ptdp__map(idx, &ds->idx_map, &ds->idx_size);
    if (!rc) rc = ptdp__map(bin, &ds->bin_map, &ds->bin_size);
    if (!rc) rc = ptdp__validate(ds, idx, bin);
    free(idx);
    free(bin);
    if (rc) {
        ptdp_idx_close(ds);
        return rc;
    }
    *out = ds;
    return PTDP_OK;
}

int ptdp_idx_open_mem(ptdp_idx_dataset **out, const char *prefix, const void *idx, size_t idx_size,
                      const void *bin, size_t bin_size) {
    *out = NULL;
    ptdp_idx_dataset *ds = calloc(1, sizeof(*ds));
    char *idx_name = ptdp__path(prefix, ".idx"), *bin_name = ptdp__path(prefix, ".bin");
    int rc = PTDP_OK;
    if (!ds || !idx_name || !bin_name || !(ds->prefix = strdup(prefix)))
        rc = ptdp_errorf(PTDP_ENOMEM, "out of memory");
    if (!rc) {
        ds->idx_map = idx;
        ds->idx_size = idx ? idx_size : 0;
        ds->bin_map = bin;
        ds->bin_size = bin ? bin_size : 0;
        rc = ptdp__validate(ds, idx_name, bin_name);
    }
    free(idx_name);
    free(bin_name);
    if (rc) {
        ptdp_idx_close(ds);
        return rc;
    }
    *out = ds;
    return PTDP_OK;
}

int64_t ptdp_idx_num_sequences(const ptdp_idx_dataset *ds) { return ds->nseq; }
int64_t ptdp_idx_num_documents(const ptdp_idx_dataset *ds) { return ds->ndoc1 - 1; }
int ptdp_idx_dtype(const ptdp_idx_dataset *ds) { return ds->dtype; }
const char *ptdp_idx_prefix(const ptdp_idx_dataset *ds) { return ds->prefix; }

int32_t ptdp_idx_sequence_length(const ptdp_idx_dataset *ds, int64_t seq) {
    PTDP_ASSERT(seq >= 0 && seq < ds->nseq);
    int32_t v;
    memcpy(&v, ds->lengths + seq, 4);
    return v;
}

int64_t ptdp_idx_document_index(const ptdp_idx_dataset *ds, int64_t j) {
    PTDP_ASSERT(j >= 0 && j < ds->ndoc1);
    int64_t v;
    memcpy(&v, ds->docs + j, 8);
    return v;
}

int ptdp_idx_read(const ptdp_idx_dataset *ds, int64_t seq, int64_t offset, int64_t count,
                  int32_t *dst) {
    if (seq < 0 || seq >= ds->nseq || offset < 0 || count < 0 ||
        offset + count > ptdp_idx_sequence_length(ds, seq))
        return ptdp_errorf(PTDP_EINVAL,
                           "'%s': read of tokens [%lld, +%lld) of sequence %lld is "
                           "out of range",
                           ds->prefix, (long long)offset, (long long)count, (long long)seq);
    int64_t ptr;
    memcpy(&ptr, ds->pointers + seq, 8);
    int es = ptdp_idx_dtype_size(ds->dtype);
    const unsigned char *p = ds->bin_map + ptr + offset * es;
    for (int64_t i = 0; i < count; i++, p += es) {
        switch (ds->dtype) {
        case PTDP_IDX_U8:
            dst[i] = p[0];
            break;
        case PTDP_IDX_I8:
            dst[i] = (int8_t)p[0];
            break;
        case PTDP_IDX_U16: {
            uint16_t v;
            memcpy(&v, p, 2);
            dst[i] = v;
        } break;
        case PTDP_IDX_I16: {
            int16_t v;
            memcpy(&v, p, 2);
            dst[i] = v;
        } break;
        case PTDP_IDX_I32:
            memcpy(&dst[i], p, 4);
            break;
        default: {
            int64_t v;
            memcpy(&v, p, 8);
            dst[i] = (int32_t)v;
        } break;
        }
    }
    return PTDP_OK;
}
