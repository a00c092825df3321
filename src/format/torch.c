/* torch.c - a torch.save file on top of the zip (zip.c) and pickle
 * (pickle.c) readers: the archive's data.pkl run on the pickle machine,
 * every storage the pickle names checked against the archive's entries
 * (data/KEY, exactly numel x element size bytes), and tensors read out of
 * their storages as floats, whatever their strides.
 *
 * Not here: the legacy formats before PyTorch 1.6 (a tar, or a raw pickle
 * followed by storages), which are refused at open: the zip reader does not
 * recognise them. */
#include "format/torch.h"

#include <stdio.h>
#include <string.h>

#include "base/base.h"

/* Every storage the pickle names is an entry data/KEY of exactly numel x
 * element size bytes, so tensor reads (bounded by their storage's numel at
 * parse time) stay inside the file. */
static int check_storages(ptdp__torch_file *tf) {
    const ptdp__pk_node *l = ptdp__pk_storages(tf->pk);
    for (int64_t i = 0; l && i < l->n; i++) {
        const ptdp__pk_node *s = l->items[i];
        char key[96];
        snprintf(key, sizeof key, "data/%s", s->s);
        const ptdp__zip_entry *e = ptdp__zip_find(&tf->zip, key);
        const size_t es = ptdp__torch_dtype_size(s->dtype);
        if (!e)
            return ptdp_errorf(PTDP_EFORMAT,
                               "%s: storage '%s' named by the pickle is not in the zip (a "
                               "truncated or incomplete file?)",
                               tf->zip.what, s->s);
        if (e->size != (uint64_t)s->i * es)
            return ptdp_errorf(PTDP_EFORMAT,
                               "%s: storage '%s' holds %llu bytes but the pickle says %lld "
                               "elements of %zu bytes",
                               tf->zip.what, s->s, (unsigned long long)e->size, (long long)s->i,
                               es);
    }
    return PTDP_OK;
}

static int torch_open(ptdp__torch_file *tf, const char *what) {
    const ptdp__zip_entry *pk = ptdp__zip_find(&tf->zip, "data.pkl");
    if (!pk)
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: a zip without ARCHIVE/data.pkl: not a torch.save file", what);
    int rc = ptdp__pk_parse(&tf->pk, &tf->root, tf->zip.data + pk->offset, (size_t)pk->size, what);
    if (rc == PTDP_OK) rc = check_storages(tf);
    return rc;
}

int ptdp__torch_open_mem(ptdp__torch_file *tf, const void *data, size_t n, const char *what) {
    memset(tf, 0, sizeof *tf);
    int rc = ptdp__zip_open_mem(&tf->zip, data, n, what);
    if (rc == PTDP_OK) rc = torch_open(tf, what);
    if (rc) ptdp__torch_close(tf);
    return rc;
}

int ptdp__torch_open(ptdp__torch_file *tf, const char *path) {
    memset(tf, 0, sizeof *tf);
    int rc = ptdp__zip_open_file(&tf->zip, path);
    if (rc == PTDP_OK) rc = torch_open(tf, path);
    if (rc) ptdp__torch_close(tf);
    return rc;
}

void ptdp__torch_close(ptdp__torch_file *tf) {
    if (!tf) return;
    ptdp__pk_free(tf->pk);
    ptdp__zip_close(&tf->zip);
    memset(tf, 0, sizeof *tf);
}

int ptdp__torch_read_f32(const ptdp__torch_file *tf, const ptdp__pk_node *t, float *dst,
                         int64_t n) {
    const char *what = tf->zip.what;
    if (t->kind != PTDP_PK_TENSOR) return ptdp_errorf(PTDP_EFORMAT, "%s: not a tensor", what);
    if (t->numel != n)
        return ptdp_errorf(PTDP_EFORMAT, "%s: a tensor of %lld elements where %lld are needed",
                           what, (long long)t->numel, (long long)n);
    int dt = t->dtype;
    if (dt != PTDP_TD_F32 && dt != PTDP_TD_F16 && dt != PTDP_TD_BF16 && dt != PTDP_TD_F64)
        return ptdp_errorf(PTDP_EUNSUPPORTED, "%s: a %s tensor where floats are needed", what,
                           ptdp__torch_dtype_name(dt));
    char key[96];
    snprintf(key, sizeof key, "data/%s", t->storage->s);
    const ptdp__zip_entry *e = ptdp__zip_find(&tf->zip, key);
    const size_t es = ptdp__torch_dtype_size(dt);
    PTDP_ASSERT(e && e->size == (uint64_t)t->storage->i * es); /* check_storages at open */
    const uint8_t *base = tf->zip.data + e->offset;
    int64_t idx[PTDP_PK_MAX_DIMS] = {0};
    for (int64_t k = 0; k < n; k++) {
        int64_t off = t->offset;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->stride[d];
        const uint8_t *p = base + (size_t)off * es;
        if (dt == PTDP_TD_F32) {
            memcpy(&dst[k], p, 4);
        } else if (dt == PTDP_TD_F64) {
            double v;
            memcpy(&v, p, 8);
            dst[k] = (float)v;
        } else {
            uint16_t h;
            memcpy(&h, p, 2);
            dst[k] = dt == PTDP_TD_F16 ? ptdp_f16_to_f32(h) : ptdp_bf16_to_f32(h);
        }
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
    return PTDP_OK;
}

int ptdp_torch_check(const void *data, size_t n) {
    ptdp__torch_file tf;
    int rc = ptdp__torch_open_mem(&tf, data, n, "torch file");
    ptdp__torch_close(&tf);
    return rc;
}
