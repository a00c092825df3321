/* pickle_write.c - protocol-2 pickles as torch.save writes them, for the
 * Megatron-LM export: dicts of strings to numbers, strings, booleans, None,
 * float32 tensors and one argparse.Namespace. The opcodes are the ones the
 * reader in pickle.c (and Python's unpickler) accept:
 *   dict      EMPTY_DICT MARK (key value)* SETITEMS
 *   Namespace GLOBAL 'argparse\nNamespace\n' EMPTY_TUPLE NEWOBJ
 *             EMPTY_DICT MARK (key value)* SETITEMS BUILD
 *   tensor    GLOBAL 'torch._utils\n_rebuild_tensor_v2\n' MARK
 *               MARK 'storage' GLOBAL 'torch\nFloatStorage\n' KEY 'cpu' NUMEL TUPLE BINPERSID
 *               0 (sizes) (strides) NEWFALSE GLOBAL 'collections\nOrderedDict\n' EMPTY_TUPLE REDUCE
 *             TUPLE REDUCE
 * No memo is written (PUT/GET are an optimisation of the pickler, not part
 * of the format). Not here: other dtypes, nested containers beyond dicts. */
#include "format/torch.h"

#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put(ptdp__pkw *w, const void *p, size_t n) {
    if (w->failed) return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->len + n) cap *= 2;
        uint8_t *b = realloc(w->buf, cap);
        if (!b) {
            w->failed = 1;
            return;
        }
        w->buf = b, w->cap = cap;
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

static void op(ptdp__pkw *w, uint8_t o) { put(w, &o, 1); }

static void global(ptdp__pkw *w, const char *mod, const char *name) {
    op(w, 'c');
    put(w, mod, strlen(mod));
    op(w, '\n');
    put(w, name, strlen(name));
    op(w, '\n');
}

void ptdp__pkw_init(ptdp__pkw *w) {
    memset(w, 0, sizeof *w);
    uint8_t proto[2] = {0x80, 2};
    put(w, proto, 2);
}

void ptdp__pkw_dict_begin(ptdp__pkw *w) {
    op(w, '}');
    op(w, '(');
}

void ptdp__pkw_dict_end(ptdp__pkw *w) { op(w, 'u'); }

void ptdp__pkw_namespace_begin(ptdp__pkw *w) {
    global(w, "argparse", "Namespace");
    op(w, ')');
    op(w, 0x81); /* NEWOBJ */
    ptdp__pkw_dict_begin(w);
}

void ptdp__pkw_namespace_end(ptdp__pkw *w) {
    op(w, 'u');
    op(w, 'b'); /* BUILD: the dict becomes the object's attributes */
}

void ptdp__pkw_str(ptdp__pkw *w, const char *s) {
    uint32_t n = (uint32_t)strlen(s);
    uint8_t h[5] = {'X', (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    put(w, h, 5);
    put(w, s, n);
}

void ptdp__pkw_int(ptdp__pkw *w, int64_t v) {
    if (v >= 0 && v < 256) {
        uint8_t h[2] = {'K', (uint8_t)v};
        put(w, h, 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        uint32_t u = (uint32_t)(int32_t)v;
        uint8_t h[5] = {'J', (uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
        put(w, h, 5);
    } else { /* LONG1 with 8 two's-complement bytes */
        uint8_t h[10] = {0x8a, 8};
        uint64_t u = (uint64_t)v;
        for (int i = 0; i < 8; i++) h[2 + i] = (uint8_t)(u >> (8 * i));
        put(w, h, 10);
    }
}

void ptdp__pkw_float(ptdp__pkw *w, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    uint8_t h[9] = {'G'};
    for (int i = 0; i < 8; i++) h[1 + i] = (uint8_t)(u >> (56 - 8 * i)); /* big-endian */
    put(w, h, 9);
}

void ptdp__pkw_bool(ptdp__pkw *w, int v) { op(w, v ? 0x88 : 0x89); }

void ptdp__pkw_none(ptdp__pkw *w) { op(w, 'N'); }

static void int_tuple(ptdp__pkw *w, int n, const int64_t *v) {
    op(w, '(');
    for (int i = 0; i < n; i++) ptdp__pkw_int(w, v[i]);
    op(w, 't');
}

int64_t ptdp__pkw_tensor_f32(ptdp__pkw *w, int ndim, const int64_t *shape) {
    PTDP_ASSERT(ndim >= 1 && ndim <= PTDP_PK_MAX_DIMS);
    int64_t stride[PTDP_PK_MAX_DIMS], numel = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = numel;
        numel *= shape[d];
    }
    const int64_t key = w->storages++;
    char k[32];
    snprintf(k, sizeof k, "%lld", (long long)key);
    global(w, "torch._utils", "_rebuild_tensor_v2");
    op(w, '(');
    op(w, '(');
    ptdp__pkw_str(w, "storage");
    global(w, "torch", "FloatStorage");
    ptdp__pkw_str(w, k);
    ptdp__pkw_str(w, "cpu");
    ptdp__pkw_int(w, numel);
    op(w, 't');
    op(w, 'Q'); /* BINPERSID */
    ptdp__pkw_int(w, 0);
    int_tuple(w, ndim, shape);
    int_tuple(w, ndim, stride);
    ptdp__pkw_bool(w, 0);
    global(w, "collections", "OrderedDict");
    op(w, ')');
    op(w, 'R');
    op(w, 't');
    op(w, 'R');
    return key;
}

int ptdp__pkw_finish(ptdp__pkw *w) {
    op(w, '.');
    return w->failed ? ptdp_errorf(PTDP_ENOMEM, "out of memory writing a pickle") : PTDP_OK;
}
