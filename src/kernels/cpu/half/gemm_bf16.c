/* gemm_bf16.c - the native bf16 backend's GEMM on CPUs with native bf16
 * (AVX512_BF16, AMX): oneDNN's matmul with bf16 inputs and fp32
 * accumulation and output. The bf16 backend keeps its values in fp32
 * storage (precision.c), so the inputs are converted, exactly (they are on
 * the bf16 grid), into bf16 first; beta = 1 (weight gradients) is oneDNN's
 * sum post-op into the fp32 C. Where oneDNN has no native bf16 matmul (it
 * answers unimplemented, or only its reference code, on AVX2 machines) the
 * instance keeps the fp32 GEMM.
 *
 * Weights (the contract of kernels.h): B operands inside a registered range
 * (a chunk's flat weights) are converted straight into the blocked bf16
 * layout the matmul reads best (no per-call copy of B inside oneDNN either),
 * by bf16_blocked.c where it writes that layout, else by a oneDNN reorder,
 * and the copy is kept for the range's version: one per (weight,
 * orientation), about 2 bytes per parameter for each of the forward (W^T)
 * and input-gradient (W) uses. A write into the range through the instance
 * (precision.c's wrappers of upload, copy, zero, quantize and the AdamW
 * ops) or announced with weights_written gives the range a new version, and
 * each copy is converted again at its next use. Weight gradients of
 * activations (C += A^T B) are packed at every call by bf16_blocked.c, A^T
 * into plain rows and B into the blocked layout (a buffer per shape), which
 * the brgemm reads faster than a transposed A. The loss head's two GEMMs on
 * the logits' gradient run from its head_bwd op (ptdp__gemm_bf16_head_bwd
 * below) on two bf16 copies of it, dl^T and dl's rows, made in one pass.
 * Everything else is converted into plain bf16 scratch at every call. With
 * PTDP_CHECK_WEIGHT_COPIES=1 (the tests set it) every reuse first checks
 * that the fp32 weights still hash as they did when converted.
 *
 * All of it is the instance's (ptdp__bf16_gemm): one primitive per GEMM
 * shape with its memory objects (gemm.c's ptdp__onednn_mm, on the
 * instance's engine), created on first use and kept (a model has a few
 * dozen shapes); scratch and weight copies are made during the first
 * iteration and reused. One thread at a time per instance: the layer GEMMs
 * are issued by one thread (attention's tiles have their own kernels). */
#include <dnnl.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/half/half.h"

#define MAX_SHAPES 256
#define MAX_RANGES 64
#define MAX_WEIGHTS 2048

/* blocked: 0 B plain; 1 B a weight copy in the matmul's blocked layout; 2 a
 * weight gradient (ta, sum) whose A^T and B ptdp packs itself: A^T into
 * plain rows, B into the shape's own blocked buffer */
typedef struct {
    int ta, tb, sum, blocked;
    int64_t M, N, K, ldc;
    int cb16; /* C in bf16 (the loss head's logits), else fp32 */
    ptdp__onednn_mm mm;
    ptdp__bf16_blocking blk; /* blocked 2: B's layout (bsize bytes, 0: not one ptdp writes),
                                its buffer and memory object, made at first use or in the
                                workspace (bbuf_own 0) */
    size_t bsize;
    void *bbuf;
    int bbuf_own;
    dnnl_memory_t bmem;
} shape;

/* a shape's key: what find_shape compares */
static shape shape_key(int ta, int tb, int sum, int blocked, int64_t M, int64_t N, int64_t K,
                       int64_t ldc) {
    shape s;
    memset(&s, 0, sizeof s);
    s.ta = ta, s.tb = tb, s.sum = sum, s.blocked = blocked;
    s.M = M, s.N = N, s.K = K, s.ldc = ldc;
    return s;
}

typedef struct { /* a declared weights range and its generation */
    const float *lo, *hi;
    uint64_t gen;
} wrange;

typedef struct { /* op(B) [K, N] of the weights at src, in the matmul's layout */
    const float *src;
    int tb;
    int64_t K, N, ldb;
    uint64_t gen, hash;
    void *buf; /* in the workspace's copy pool (buf_own 0) or allocated (1) */
    int buf_own;
    dnnl_memory_t mem, from;  /* the copy; the fp32 weights (pointed at src at each refresh) */
    dnnl_primitive_t reorder; /* NULL where bf16_blocked.c writes the layout (own) */
    ptdp__bf16_blocking own;
    dnnl_memory_desc_t md; /* the layout, chosen by the matmul that first used it */
} wcopy;

/* the loss head's matmuls and wte's copies (gemm_bf16_head_logits below) */
typedef struct {
    shape *lg, *ws, *ds; /* the logits, the weight gradient, the input gradient */
    dnnl_memory_t wt, w; /* wte's copies: W^T for the logits, W for dx */
} head_prims;

struct ptdp__bf16_gemm {
    ptdp__cpu *cs; /* the instance: its oneDNN engine and stream */
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    shape shapes[MAX_SHAPES];
    int nshapes;
    uint16_t *a, *b; /* bf16 scratch; a in the workspace (a_own 0) or allocated */
    size_t acap, bcap;
    int a_own, b_own;
    float *f[3]; /* fp32 scratch of the typed GEMM's fallback: A, B, C */
    size_t fcap[3];
    char *pool; /* the workspace's weight copies not yet taken (pool_left bytes) */
    size_t pool_left;
    int64_t fallbacks;  /* typed GEMMs run as fp32 GEMMs (the test reads it) */
    int force_fallback; /* test hook: every typed GEMM takes that path */
    wrange ranges[MAX_RANGES];
    int nranges;
    uint64_t gen;
    wcopy *w; /* [MAX_WEIGHTS], allocated on first use */
    int nw;
    int check;           /* PTDP_CHECK_WEIGHT_COPIES */
    int64_t conversions; /* weight copies made or refreshed (the test reads it) */
    int64_t wgrad_calls; /* weight gradients through ptdp's own packs (the test reads it) */
    int64_t head_calls;  /* loss head backwards through ptdp__gemm_bf16_head_bwd (likewise) */
    const float *lb16;   /* logits [lb16_n values] holding bf16 logits (head_logits) */
    int64_t lb16_n;
    head_prims head; /* what made them, for their backward */
    int own;         /* weight copies by bf16_blocked.c where it writes the layout; 0 with
                      * PTDP_BF16_REORDER=1 (oneDNN's reorder: the A/B of docs/performance.md) */
};

static void b_dims(int tb, int64_t K, int64_t N, int64_t ldb, dnnl_dims_t d, dnnl_dims_t st) {
    d[0] = K, d[1] = N;
    st[0] = tb ? 1 : ldb, st[1] = tb ? ldb : 1;
}

static dnnl_primitive_t make_prim(ptdp__bf16_gemm *g, const shape *s, char *impl_out, size_t cap) {
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_dims_t ad = {s->M, s->K}, bd, cd = {s->M, s->N};
    const int ta = s->ta && s->blocked != 2; /* blocked 2: A^T comes packed in plain rows */
    dnnl_dims_t as = {ta ? 1 : s->K, ta ? s->M : 1}, bs, cs = {s->ldc, 1};
    b_dims(s->tb, s->K, s->N, s->tb ? s->K : s->N, bd, bs);
    if (dnnl_memory_desc_init_by_strides(&amd, 2, ad, dnnl_bf16, as) != dnnl_success ||
        (s->blocked
             ? dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_bf16, dnnl_format_tag_any)
             : dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_bf16, bs)) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&cmd, 2, cd, s->cb16 ? dnnl_bf16 : dnnl_f32, cs) !=
            dnnl_success)
        return NULL;
    const char *impl;
    dnnl_primitive_desc_t pd = ptdp__onednn_matmul_pd(g->cs, &amd, &bmd, &cmd, s->sum, &impl);
    if (!pd) return NULL;
    if (impl_out) snprintf(impl_out, cap, "%s", impl);
    dnnl_primitive_t prim = NULL;
    if (strncmp(impl[0] ? impl : "ref", "ref", 3) != 0) dnnl_primitive_create(&prim, pd);
    dnnl_primitive_desc_destroy(pd);
    return prim;
}

ptdp__bf16_gemm *ptdp__gemm_bf16_new(ptdp__cpu *cs, char *why_buf, size_t why_cap) {
    if (!cs->dnnl) {
        snprintf(why_buf, why_cap, "oneDNN has no engine");
        return NULL;
    }
    ptdp__bf16_gemm *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(why_buf, why_cap, "out of memory");
        return NULL;
    }
    g->cs = cs, g->eng = cs->eng, g->strm = cs->strm;
    char impl[64] = "";
    const shape probe = shape_key(0, 1, 0, 0, 64, 64, 64, 64);
    dnnl_primitive_t p = make_prim(g, &probe, impl, sizeof impl);
    if (!p) {
        snprintf(why_buf, why_cap, "oneDNN has no native bf16 matmul on this CPU%s%s",
                 impl[0] ? ": " : "", impl);
        free(g);
        return NULL;
    }
    dnnl_primitive_destroy(p);
    snprintf(why_buf, why_cap, "oneDNN bf16 matmul (%s)", impl);
    g->check = cs->check_weights;
    const char *c = getenv("PTDP_BF16_REORDER");
    g->own = !(c && c[0] && strcmp(c, "0") != 0);
    return g;
}

/* bytes rounded up to whole 64-byte lines, 64-byte aligned (the packs store
 * whole lines), or NULL */
static size_t lines(size_t bytes) { return (bytes + 63) / 64 * 64; }
static void *alloc_lines(size_t bytes) { return aligned_alloc(64, lines(bytes)); }

/* Memory the instance allocates itself: all of it without a workspace,
 * what does not fit where one was set (counted: kernels.h's memory
 * contract). */
static void *own_alloc(ptdp__bf16_gemm *g, size_t bytes) {
    void *p = alloc_lines(bytes);
    if (p) g->cs->be.ondemand_bytes += lines(bytes);
    return p;
}

/* ---- weights converted once per declaration ------------------------------ */

/* frees one copy's buffer and oneDNN objects (those it has) */
static void drop_one(wcopy *c) {
    if (c->mem) dnnl_memory_destroy(c->mem);
    if (c->from) dnnl_memory_destroy(c->from);
    if (c->reorder) dnnl_primitive_destroy(c->reorder);
    if (c->buf_own) free(c->buf);
    c->mem = c->from = NULL;
    c->reorder = NULL;
    c->buf = NULL;
}

/* a copy of op(B) [K, N] of the weights at B (row stride ldb) in layout md,
 * nothing made yet */
static wcopy new_copy(const float *B, int tb, int64_t K, int64_t N, int64_t ldb,
                      const dnnl_memory_desc_t *md) {
    wcopy c;
    memset(&c, 0, sizeof c);
    c.src = B, c.tb = tb, c.K = K, c.N = N, c.ldb = ldb, c.md = *md;
    return c;
}

/* frees the copies of weights in [lo, hi) */
static void drop_copies(ptdp__bf16_gemm *g, const float *lo, const float *hi) {
    int k = 0;
    for (int i = 0; i < g->nw; i++) {
        wcopy *c = &g->w[i];
        if (c->src >= lo && c->src < hi) {
            drop_one(c);
        } else {
            g->w[k++] = *c;
        }
    }
    g->nw = k;
}

/* Registers [w, w + n) as weights, a fresh version, forgetting the range
 * at w (n = 0: its owner frees it) and any the new one overlaps (memory
 * reused by another owner), with their copies. */
void ptdp__gemm_bf16_weights_register(ptdp_backend *be, const float *w, int64_t n) {
    ptdp__bf16_gemm *g = ptdp__cpu_of(be)->g16;
    const float *hi = w + n;
    g->lb16 = NULL; /* bf16 logits (and their copies of wte) belong to the weights before */
    int k = 0;
    for (int i = 0; i < g->nranges; i++) {
        const wrange r = g->ranges[i];
        if (r.lo == w || (n > 0 && hi > r.lo && w < r.hi)) {
            drop_copies(g, r.lo, r.hi);
            continue;
        }
        g->ranges[k++] = r;
    }
    g->nranges = k;
    if (n > 0 && g->nranges < MAX_RANGES) g->ranges[g->nranges++] = (wrange){w, hi, ++g->gen};
}

/* A write into [w, w + n): every registered range it touches gets a new
 * version, so their copies are converted again at their next use. */
void ptdp__gemm_bf16_weights_written(ptdp_backend *be, const float *w, int64_t n) {
    ptdp__bf16_gemm *g = ptdp__cpu_of(be)->g16;
    const float *hi = w + n;
    for (int i = 0; i < g->nranges; i++)
        if (n > 0 && hi > g->ranges[i].lo && w < g->ranges[i].hi) {
            g->ranges[i].gen = ++g->gen;
            g->lb16 = NULL; /* as at registration */
        }
}

/* the generation of the declared range holding [p, end), or 0 */
static uint64_t range_gen(ptdp__bf16_gemm *g, const float *p, const float *end) {
    for (int i = 0; i < g->nranges; i++)
        if (p >= g->ranges[i].lo && end <= g->ranges[i].hi) return g->ranges[i].gen;
    return 0;
}

/* FNV-1a over the fp32 rows of op(B) (the check of PTDP_CHECK_WEIGHT_COPIES) */
static uint64_t hash_b(const float *B, int64_t rows, int64_t cols, int64_t ldb) {
    uint64_t h = PTDP_FNV1A_INIT;
    for (int64_t r = 0; r < rows; r++) h = ptdp_fnv1a(B + r * ldb, sizeof(float) * (size_t)cols, h);
    return h;
}

/* c's buffer and memory object in layout dst (zeroed: the layout's padding
 * stays zero), with oneDNN's reorder from the fp32 weights where
 * bf16_blocked.c does not write that layout or own is 0. 0 when it cannot
 * (c holds nothing then). */
static int make_copy(ptdp__bf16_gemm *g, wcopy *c, const dnnl_memory_desc_t *dst, int own,
                     int from_pool) {
    const size_t size = dnnl_memory_desc_get_size(dst);
    own = own && ptdp__bf16_blocking_of(dst, &c->own);
    if (!own) memset(&c->own, 0, sizeof c->own);
    if (from_pool && g->pool_left >= lines(size)) { /* the workspace's, in the order of use */
        c->buf = g->pool, c->buf_own = 0;
        g->pool += lines(size), g->pool_left -= lines(size);
    } else {
        c->buf = own_alloc(g, size), c->buf_own = 1;
    }
    if (!c->buf) return 0;
    memset(c->buf, 0, size);
    int ok = dnnl_memory_create(&c->mem, dst, g->eng, c->buf) == dnnl_success;
    if (ok && !own) {
        dnnl_memory_desc_t src;
        dnnl_dims_t d, st;
        b_dims(c->tb, c->K, c->N, c->ldb, d, st);
        dnnl_primitive_desc_t rpd = NULL;
        ok = dnnl_memory_desc_init_by_strides(&src, 2, d, dnnl_f32, st) == dnnl_success &&
             dnnl_reorder_primitive_desc_create(&rpd, &src, g->eng, dst, g->eng, NULL) ==
                 dnnl_success &&
             dnnl_primitive_create(&c->reorder, rpd) == dnnl_success &&
             dnnl_memory_create(&c->from, &src, g->eng, DNNL_MEMORY_NONE) == dnnl_success;
        if (rpd) dnnl_primitive_desc_destroy(rpd);
    }
    if (!ok) drop_one(c);
    return ok;
}

/* w's copy converted from the fp32 weights at B */
static void refresh(ptdp__bf16_gemm *g, wcopy *w, const float *B) {
    if (!w->reorder) {
        ptdp__bf16_pack_blocked(&w->own, w->buf, B, w->tb, w->K, w->N, w->ldb);
        return;
    }
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, w->from}, {DNNL_ARG_TO, w->mem}};
    dnnl_status_t st = dnnl_memory_set_data_handle(w->from, (void *)B);
    if (st == dnnl_success) st = dnnl_primitive_execute(w->reorder, g->strm, 2, args);
    if (st == dnnl_success) st = dnnl_stream_wait(g->strm);
    PTDP_ASSERT_MSG(st == dnnl_success, "oneDNN reorder of weights to bf16 failed");
}

/* w's copy of the other orientation of the same weights, where both are
 * ptdp's layouts that ptdp__bf16_pack_both writes together; else NULL */
static wcopy *sibling(ptdp__bf16_gemm *g, const wcopy *w) {
    if (w->reorder) return NULL;
    for (int i = 0; i < g->nw; i++) {
        wcopy *c = &g->w[i];
        if (c->src == w->src && c->tb != w->tb && c->K == w->N && c->N == w->K &&
            c->ldb == w->ldb && !c->reorder &&
            ptdp__bf16_pack_both_fits(w->tb ? &w->own : &c->own, w->tb ? &c->own : &w->own))
            return c;
    }
    return NULL;
}

/* The blocked bf16 copy of weights op(B) for prim, made or refreshed as
 * needed; NULL when it cannot be had (the caller converts as usual). Where
 * the weights' other orientation has a copy too (from the second step on)
 * and it is stale as well, both are refreshed in one pass over the fp32
 * weights. */
static dnnl_memory_t weight_copy(ptdp__bf16_gemm *g, const shape *sh, const float *B, int64_t ldb,
                                 uint64_t gen) {
    const int64_t rows = sh->tb ? sh->N : sh->K, cols = sh->tb ? sh->K : sh->N;
    const_dnnl_primitive_desc_t pd;
    dnnl_primitive_get_primitive_desc(sh->mm.prim, &pd);
    const dnnl_memory_desc_t *dst = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    wcopy *w = NULL;
    for (int i = 0; i < g->nw && !w; i++) {
        wcopy *c = &g->w[i];
        if (c->src == B && c->tb == sh->tb && c->K == sh->K && c->N == sh->N && c->ldb == ldb &&
            dnnl_memory_desc_equal(&c->md, dst))
            w = c;
    }
    if (!w) {
        if (!g->w && !(g->w = calloc(MAX_WEIGHTS, sizeof *g->w))) return NULL;
        if (g->nw == MAX_WEIGHTS) return NULL;
        wcopy c = new_copy(B, sh->tb, sh->K, sh->N, ldb, dst);
        if (!make_copy(g, &c, dst, g->own, 1)) return NULL;
        w = &g->w[g->nw++];
        *w = c;
    }
    if (w->gen != gen) {
        wcopy *o = sibling(g, w);
        if (o && o->gen == gen) o = NULL; /* already fresh: refresh w alone */
        if (o) {
            const wcopy *t = w->tb ? w : o, *n = w->tb ? o : w; /* W^T's copy and W's */
            ptdp__bf16_pack_both(&t->own, t->buf, &n->own, n->buf, B, rows, cols, ldb);
            o->gen = gen;
        } else {
            refresh(g, w, B);
        }
        w->gen = gen;
        g->conversions++;
        if (g->check) w->hash = hash_b(B, rows, cols, ldb);
        if (g->check && o) o->hash = w->hash; /* the same fp32 rows */
    } else if (g->check) {
        PTDP_ASSERT_MSG(w->hash == hash_b(B, rows, cols, ldb),
                        "weights written behind the backend's back (not through its ops, not "
                        "announced with ptdp_backend_weights_written): their bf16 copy is stale");
    }
    return w->mem;
}

/* ---- the GEMM ------------------------------------------------------------- */

/* rows x cols of x (row stride ld) into packed bf16 */
static void pack(uint16_t *dst, const float *x, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; r++) ptdp_f32_to_bf16_n(dst + r * cols, x + r * ld, cols);
}

/* scratch of at least n values, 64-byte aligned (the packs store whole
 * lines), its contents not kept: the buffer it is (the workspace's where
 * one was set), else a larger one allocated */
static int grow(ptdp__bf16_gemm *g, uint16_t **p, size_t *cap, int *own, size_t n) {
    if (n <= *cap) return 1;
    uint16_t *q = own_alloc(g, n * sizeof(uint16_t));
    if (!q) return 0;
    if (*own) free(*p);
    *p = q, *cap = n, *own = 1;
    return 1;
}

/* s's B buffer in its blocked layout: block (zeroed here), or allocated
 * where block is NULL; 0 where it cannot be had */
static int shape_bbuf(ptdp__bf16_gemm *g, shape *s, void *block) {
    const_dnnl_primitive_desc_t pd;
    dnnl_primitive_get_primitive_desc(s->mm.prim, &pd);
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    void *buf = block ? block : own_alloc(g, s->bsize);
    if (!buf) return 0;
    memset(buf, 0, s->bsize);
    dnnl_memory_t mem;
    if (dnnl_memory_create(&mem, md, g->eng, buf) != dnnl_success) {
        if (!block) free(buf);
        return 0;
    }
    if (s->bmem) dnnl_memory_destroy(s->bmem);
    if (s->bbuf_own) free(s->bbuf);
    s->bbuf = buf, s->bbuf_own = !block, s->bmem = mem;
    return 1;
}

static shape *find_shape(ptdp__bf16_gemm *g, const shape *key) {
    for (int i = 0; i < g->nshapes; i++) {
        shape *s = &g->shapes[i];
        if (s->ta == key->ta && s->tb == key->tb && s->sum == key->sum &&
            s->blocked == key->blocked && s->M == key->M && s->N == key->N && s->K == key->K &&
            s->ldc == key->ldc && s->cb16 == key->cb16)
            return s;
    }
    if (g->nshapes == MAX_SHAPES) return NULL;
    shape s = *key;
    if (!(s.mm.prim = make_prim(g, &s, NULL, 0))) return NULL;
    if (s.blocked == 2) { /* B's layout, the matmul's choice, if ptdp writes it (else bsize
                             stays 0 and the caller takes the plain path) */
        const_dnnl_primitive_desc_t pd;
        dnnl_primitive_get_primitive_desc(s.mm.prim, &pd);
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        if (ptdp__bf16_blocking_of(md, &s.blk)) s.bsize = dnnl_memory_desc_get_size(md);
    }
    g->shapes[g->nshapes] = s;
    return &g->shapes[g->nshapes++];
}

/* The weight-gradient shape C [M, N] += A^T B over K, A^T packed by ptdp
 * into plain rows (blocked 2), with B's blocked buffer; NULL where it cannot
 * be had (the caller takes another path) */
static shape *wgrad_shape(ptdp__bf16_gemm *g, int64_t M, int64_t N, int64_t K, int64_t ldc) {
    const shape key = shape_key(1, 0, 1, 2, M, N, K, ldc);
    shape *s = find_shape(g, &key);
    return s && s->bsize && (s->bmem || shape_bbuf(g, s, NULL)) ? s : NULL;
}

/* runs it on A^T already in g->a: B [K, N] (row stride ldb; fp32, or bf16
 * where b16) into its blocked buffer, then the matmul into C */
static void wgrad_run(ptdp__bf16_gemm *g, shape *ws, const void *B, int b16, int64_t ldb,
                      float *C) {
    if (b16)
        ptdp__bf16_pack_blocked_b16(&ws->blk, ws->bbuf, B, ws->K, ws->N, ldb);
    else
        ptdp__bf16_pack_blocked(&ws->blk, ws->bbuf, B, 0, ws->K, ws->N, ldb);
    ptdp__onednn_mm_run(g->cs, &ws->mm, g->a, NULL, ws->bmem, C);
}

/* rows x cols of x (row stride ld), fp32 or (b16) bf16, into packed bf16 */
static void pack_any(uint16_t *dst, const void *x, int b16, int64_t rows, int64_t cols,
                     int64_t ld) {
    if (!b16) {
        pack(dst, x, rows, cols, ld);
        return;
    }
    const uint16_t *s = x;
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + r * cols, s + r * ld, sizeof *dst * (size_t)cols);
}

/* bytes of C [M, N] (row stride ldc, 2 or 4 bytes a value) */
static void c_written(ptdp__bf16_gemm *g, const void *C, int c16, int64_t M, int64_t N,
                      int64_t ldc) {
    const char *lo = C, *hi = lo + (c16 ? 2 : 4) * ((M - 1) * ldc + N);
    const char *l = (const char *)g->lb16;
    if (g->lb16 && lo < l + 4 * g->lb16_n && hi > l)
        g->lb16 = NULL; /* other values over the bf16 logits */
}

/* The GEMM on operands stored in fp32 or, where a16, b16 or c16 says so, in
 * bf16 (at the same strides, in values); alpha 1, beta 0 or 1 (1: C fp32).
 * Returns 1, or 0 with nothing done where it cannot run the native matmul
 * (the caller takes the fp32 GEMM). An fp32 C comes out unrounded. */
static int gemm_s(ptdp__bf16_gemm *g, int ta, int tb, int64_t M, int64_t N, int64_t K,
                  const void *A, int a16, int64_t lda, const void *B, int b16, int64_t ldb,
                  float beta, void *C, int c16, int64_t ldc) {
    const int sum = beta != 0.0f;
    const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    if ((sum && (beta != 1.0f || c16)) || K == 0 ||
        !grow(g, &g->a, &g->acap, &g->a_own, (size_t)(ar * ac)))
        return 0;
    /* weights (fp32, declared): their blocked copy; anything else: packed at this call */
    const uint64_t gen = b16 ? 0 : range_gen(g, B, (const float *)B + (br - 1) * ldb + bc);
    if (sum && ta && !tb && !gen && g->own) {
        /* a weight gradient C += A^T B of activations: oneDNN's brgemm reads a
         * transposed A and a plain B slowly (620-650 against 810-850 GFLOP/s
         * for the other GEMMs here), so ptdp packs A^T into plain rows and B
         * into the blocked layout itself (docs/performance.md) */
        shape *ws = wgrad_shape(g, M, N, K, ldc);
        if (ws) {
            if (a16)
                ptdp__bf16_pack_transposed_b16(g->a, A, K, M, lda);
            else
                ptdp__bf16_pack_transposed(g->a, A, K, M, lda);
            wgrad_run(g, ws, B, b16, ldb, C);
            g->wgrad_calls++;
            return 1;
        }
    }
    dnnl_memory_t mb = NULL;
    shape key = shape_key(ta, tb, sum, gen != 0, M, N, K, ldc), *sh = NULL;
    key.cb16 = c16;
    if (gen && (sh = find_shape(g, &key))) mb = weight_copy(g, sh, B, ldb, gen);
    if (!mb) {
        key.blocked = 0;
        sh = find_shape(g, &key);
        if (!sh || !grow(g, &g->b, &g->bcap, &g->b_own, (size_t)(br * bc))) return 0;
        pack_any(g->b, B, b16, br, bc, ldb);
    }
    const void *a = A; /* bf16 rows the matmul reads as they are */
    if (!a16 || lda != ac) {
        pack_any(g->a, A, a16, ar, ac, lda);
        a = g->a;
    }
    ptdp__onednn_mm_run(g->cs, &sh->mm, a, mb ? NULL : g->b, mb, C);
    return 1;
}

void ptdp__gemm_onednn_bf16(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                            float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                            float beta, float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    ptdp__bf16_gemm *g = ptdp__cpu_of(be)->g16;
    c_written(g, C, 0, M, N, ldc);
    if (alpha != 1.0f || !gemm_s(g, ta, tb, M, N, K, A, 0, lda, B, 0, ldb, beta, C, 0, ldc))
        ptdp__gemm_onednn(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* fp32 scratch of at least n values for the typed GEMM's fallback (grown on
 * first use only) */
static float *scratch_f32(ptdp__bf16_gemm *g, int k, size_t n) {
    if (n > g->fcap[k]) {
        float *q = own_alloc(g, n * sizeof(float));
        PTDP_ASSERT_MSG(q, "out of memory for the bf16 GEMM's fp32 scratch");
        free(g->f[k]);
        g->f[k] = q;
        g->fcap[k] = n;
    }
    return g->f[k];
}

/* rows x cols of bf16 values x (row stride ld) widened into dst (plain rows) */
static void widen(float *dst, const uint16_t *x, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; r++) ptdp_bf16_to_f32_n(dst + r * cols, x + r * ld, cols);
}

void ptdp__gemm_bf16_typed(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                           const void *A, int a16, int64_t lda, const void *B, int b16, int64_t ldb,
                           float beta, void *C, int c16, int64_t ldc) {
    ptdp__bf16_gemm *g = ptdp__cpu_of(be)->g16;
    PTDP_ASSERT_MSG((beta == 0.0f || beta == 1.0f) && !(c16 && beta != 0.0f),
                    "typed bf16 GEMM: beta must be 0, or 1 into fp32 C");
    if (M == 0 || N == 0) return;
    c_written(g, C, c16, M, N, ldc);
    if (g->force_fallback ||
        !gemm_s(g, ta, tb, M, N, K, A, a16, lda, B, b16, ldb, beta, C, c16, ldc)) {
        g->fallbacks++;
        /* the fp32 GEMM on the same values: bf16 operands widened (exactly),
         * a bf16 C made in fp32 scratch and narrowed below */
        const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
        const float *af = A, *bf = B;
        float *cf = C;
        int64_t la = lda, lb = ldb, lc = ldc;
        if (a16) {
            float *t = scratch_f32(g, 0, (size_t)(ar * ac));
            widen(t, A, ar, ac, lda);
            af = t, la = ac;
        }
        if (b16) {
            float *t = scratch_f32(g, 1, (size_t)(br * bc));
            widen(t, B, br, bc, ldb);
            bf = t, lb = bc;
        }
        if (c16) {
            cf = scratch_f32(g, 2, (size_t)(M * N));
            lc = N;
        }
        ptdp__gemm_onednn(be, ta, tb, M, N, K, 1.0f, af, la, bf, lb, beta, cf, lc);
        if (c16) {
            uint16_t *c = C;
#pragma omp parallel for schedule(static) if (M * N > 65536)
            for (int64_t r = 0; r < M; r++) ptdp_f32_to_bf16_n(c + r * ldc, cf + r * N, N);
            return;
        }
    }
    if (!c16 && beta == 0.0f) { /* an activation's values: on the grid */
        float *c = C;
        if (ldc == N)
            ptdp_round_bf16_n(c, M * N);
        else
            for (int64_t r = 0; r < M; r++) ptdp_round_bf16_n(c + r * ldc, N);
    }
}

/* ---- the loss head ---------------------------------------------------------
 * The logits l = x wte^T [N, Vl] come out of the matmul in bf16 (its fp32
 * sums rounded to nearest even, the values the fp32-output path's readers
 * round them to), over the start of the fp32 logits buffer: 2 bytes a logit
 * for every pass after it. The cross-entropy reads them twice (the max, then
 * the target logit and the sum of exponentials: bf16_blocked.c's _b16 forms)
 * and the backward once more: ptdp__bf16_xent_grad recomputes each
 * exponential rather than reading 4 stored bytes of it, and writes dl twice
 * in that pass, dl^T in plain rows into the A scratch for the weight
 * gradient dwte += dl^T x, and dl's bf16 rows over the logits for the input
 * gradient dx = dl wte (the weight path's blocked copy of wte). Against the
 * fp32 logits (written 4 bytes a logit by the matmul, read by the max, read
 * and overwritten with e by the sums, read by the gradient's pass) that is
 * 515 against 1,236 MB of memory traffic at GPT-2's head (N = 1,024,
 * V = 50,304) for a second exp per logit (docs/performance.md).
 * head_logits takes this path only where it can have everything the
 * backward needs (shapes, both copies of wte, the scratch) and keeps them
 * for it, so head_bwd on bf16 logits cannot fail; a write into the weights
 * ends the bf16 state (the copies go stale). */

static int head_prims_of(ptdp__bf16_gemm *g, head_prims *p, const float *wte, int64_t h, int64_t N,
                         int64_t Vl) {
    const uint64_t gen = range_gen(g, wte, wte + Vl * h);
    if (!g->own || !gen || N == 0 || Vl == 0 || h == 0) return 0;
    shape lk = shape_key(0, 1, 0, 1, N, Vl, h, Vl), dk = shape_key(0, 0, 0, 1, N, h, Vl, h);
    lk.cb16 = 1;
    p->lg = find_shape(g, &lk);
    p->ws = wgrad_shape(g, Vl, h, N, h);
    p->ds = find_shape(g, &dk);
    p->wt = p->lg ? weight_copy(g, p->lg, wte, h, gen) : NULL;
    p->w = p->ds ? weight_copy(g, p->ds, wte, h, gen) : NULL;
    return p->ws && p->wt && p->w &&
           grow(g, &g->a, &g->acap, &g->a_own, (size_t)(N * (Vl > h ? Vl : h)));
}

int ptdp__gemm_bf16_head_logits(ptdp_backend *be, const float *x, const float *wte, int64_t h,
                                float *logits, int64_t N, int64_t Vl) {
    ptdp__bf16_gemm *g = ptdp__cpu_of(be)->g16;
    g->lb16 = NULL;
    if (!head_prims_of(g, &g->head, wte, h, N, Vl)) return 0;
    pack(g->a, x, N, h, h);
    ptdp__onednn_mm_run(g->cs, &g->head.lg->mm, g->a, NULL, g->head.wt, logits);
    g->lb16 = logits, g->lb16_n = (N * Vl + 1) / 2;
    return 1;
}

int ptdp__gemm_bf16_logits_b16(ptdp_backend *be, const float *logits, int64_t N, int64_t Vl) {
    ptdp__bf16_gemm *g = ptdp__cpu_of(be)->g16;
    return g->lb16 && logits == g->lb16 && g->lb16_n == (N * Vl + 1) / 2;
}

void ptdp__gemm_bf16_head_bwd(ptdp_backend *be, float *logits, const ptdp_xent_grad *xg,
                              const float *x, int64_t h, float *dwte, float *dx) {
    ptdp__bf16_gemm *g = ptdp__cpu_of(be)->g16;
    const int64_t N = xg->s * xg->b, Vl = xg->Vl;
    const head_prims *p = &g->head; /* made and checked by the forward, wte's copies with them */
    PTDP_ASSERT_MSG(ptdp__gemm_bf16_logits_b16(be, logits, N, Vl) && p->ds->N == h,
                    "bf16 loss head backward without its forward's bf16 logits");
    ptdp__bf16_xent_grad(g->a, (uint16_t *)logits, xg);
    wgrad_run(g, p->ws, x, 0, h, dwte);
    ptdp__onednn_mm_run(g->cs, &p->ds->mm, logits, NULL, p->w, dx);
    g->lb16 = NULL; /* dl's rows there now */
    g->head_calls++;
}

int64_t ptdp__gemm_bf16_head_calls(ptdp_backend *be) { return ptdp__cpu_of(be)->g16->head_calls; }

int64_t ptdp__gemm_bf16_conversions(ptdp_backend *be) { return ptdp__cpu_of(be)->g16->conversions; }

int64_t ptdp__gemm_bf16_typed_fallbacks(ptdp_backend *be, int force) {
    ptdp__bf16_gemm *g = ptdp__cpu_of(be)->g16;
    if (force >= 0) g->force_fallback = force;
    return g->fallbacks;
}

int ptdp__gemm_bf16_pack_probe(ptdp_backend *be, int tb, int64_t M, int64_t N, int64_t K,
                               const float *B, int64_t ldb, int own, void *out, size_t cap,
                               size_t *bytes, double *seconds, int reps, void (*between)(void *),
                               void *ctx) {
    ptdp__bf16_gemm *g = ptdp__cpu_of(be)->g16;
    if (!g) return -1;
    wcopy c[2]; /* op(B)'s copy; with own 2 the other orientation's too */
    const int n = own == 2 ? 2 : 1;
    int made = 0, ok = 1;
    for (int i = 0; i < n && ok; i++) { /* i = 1: op(B)^T [N, K] */
        const int t = i ? !tb : tb;
        const int64_t k = i ? N : K, nn = i ? K : N;
        const shape key = shape_key(0, t, 0, 1, M, nn, k, nn);
        const shape *sh = find_shape(g, &key);
        const dnnl_memory_desc_t *dst = NULL;
        if (sh) {
            const_dnnl_primitive_desc_t pd;
            dnnl_primitive_get_primitive_desc(sh->mm.prim, &pd);
            dst = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        }
        if (dst) c[i] = new_copy(B, t, k, nn, ldb, dst);
        ok = dst && make_copy(g, &c[i], dst, own != 0, 0); /* it frees what it made if it fails */
        made += ok;
        ok = ok && !(own && c[i].reorder); /* own: a layout bf16_blocked.c writes */
    }
    const wcopy *ct = &c[tb ? 0 : 1], *cw = &c[tb ? 1 : 0]; /* with n 2: W^T's copy and W's */
    if (ok && n == 2) ok = ptdp__bf16_pack_both_fits(&ct->own, &cw->own);
    if (!ok) {
        for (int i = 0; i < made; i++) drop_one(&c[i]);
        return -1;
    }
    const size_t size = dnnl_memory_desc_get_size(&c[0].md);
    if (!own) memset(c[0].buf, 0xff, size); /* the reorder must write the padding too */
    for (int r = 0; r < (reps > 1 ? reps : 1); r++) {
        if (r > 0 && between) between(ctx);
        const double t0 = ptdp_now();
        if (n == 2) /* W [rows, cols]: op(B) = W^T stored [N, K] where tb, else W [K, N] */
            ptdp__bf16_pack_both(&ct->own, ct->buf, &cw->own, cw->buf, B, tb ? N : K, tb ? K : N,
                                 ldb);
        else
            refresh(g, &c[0], B);
        if (seconds) seconds[r] = ptdp_now() - t0;
    }
    if (bytes) *bytes = size;
    if (out && size <= cap) memcpy(out, c[0].buf, size);
    for (int i = 0; i < n; i++) drop_one(&c[i]);
    return 0;
}

int64_t ptdp__gemm_bf16_wgrad_calls(ptdp_backend *be) { return ptdp__cpu_of(be)->g16->wgrad_calls; }

void ptdp__gemm_bf16_free(ptdp__bf16_gemm *g) {
    if (!g) return;
    for (int i = 0; i < g->nw; i++) drop_one(&g->w[i]);
    free(g->w);
    for (int i = 0; i < g->nshapes; i++) {
        shape *s = &g->shapes[i];
        ptdp__onednn_mm_free(&s->mm);
        if (s->bmem) dnnl_memory_destroy(s->bmem);
        if (s->bbuf_own) free(s->bbuf);
    }
    if (g->a_own) free(g->a);
    if (g->b_own) free(g->b);
    for (int k = 0; k < 3; k++) free(g->f[k]);
    free(g);
}

/* ---- the workspace (kernels.h's memory contract) ----------------------------
 * The native GEMMs of a GPT layer and of its loss head on the job's N token
 * rows, as layer.c, head.c and precision.c issue them: per weight matrix
 * W [out, in] a forward GEMM on W^T and an input-gradient GEMM on W (C in
 * bf16 where the MLP keeps fc and dfc so: mlp16), each with a weight copy in
 * its matmul's layout, and a weight gradient C += A^T B with a B buffer per
 * shape; the loss head's logits, input and weight gradient as head_logits
 * and head_bwd run them (or, where they cannot, the composition's GEMMs).
 * Their primitives are made here, so the layouts and sizes are known before
 * the first step. The A scratch takes N rows of the widest operand; with
 * PTDP_BF16_REORDER=1 (an A/B switch) the weight gradients and the head
 * take the plain path, whose B scratch is planned too. Not planned,
 * allocated at first use and counted where they happen: the plain B scratch
 * and the fp32 fallback of shapes the native matmul cannot run. */

/* bytes of the copy shape sh's matmul makes of its weights */
static size_t copy_bytes(const shape *sh) {
    const_dnnl_primitive_desc_t pd;
    dnnl_primitive_get_primitive_desc(sh->mm.prim, &pd);
    return lines(
        dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0)));
}

typedef struct {
    size_t a, b;     /* values of the A scratch and of the plain-B one */
    shape *wgrad[8]; /* the weight gradients' shapes with B buffers */
    int nwgrad;
    size_t per_layer, per_head; /* bytes of weight copies */
} job_plan;

/* the copy bytes of a weight GEMM C [N, n] = X op(W), op(W) [k, n] (0 where
 * the native matmul has no such shape: it converts at every call then) */
static size_t weight_use_ld(ptdp__bf16_gemm *g, int tb, int64_t N, int64_t n, int64_t k, int c16,
                            int64_t ldc) {
    shape key = shape_key(0, tb, 0, 1, N, n, k, ldc);
    key.cb16 = c16;
    const shape *sh = find_shape(g, &key);
    return sh && sh->mm.prim ? copy_bytes(sh) : 0;
}

static size_t weight_use(ptdp__bf16_gemm *g, int tb, int64_t N, int64_t n, int64_t k, int c16) {
    shape key = shape_key(0, tb, 0, 1, N, n, k, n);
    key.cb16 = c16;
    const shape *sh = find_shape(g, &key);
    return sh && sh->mm.prim ? copy_bytes(sh) : 0;
}

static void wgrad_use(ptdp__bf16_gemm *g, job_plan *pl, int64_t M, int64_t n, int64_t N) {
    const shape key = shape_key(1, 0, 1, 2, M, n, N, n);
    shape *s = find_shape(g, &key);
    if (!s || !s->bsize) return;
    for (int i = 0; i < pl->nwgrad; i++)
        if (pl->wgrad[i] == s) return;
    PTDP_ASSERT(pl->nwgrad < 8);
    pl->wgrad[pl->nwgrad++] = s;
}

static void plan_job(ptdp__bf16_gemm *g, const ptdp_backend_job *job, int mlp16, job_plan *pl) {
    memset(pl, 0, sizeof *pl);
    const int64_t N = job->s * job->b, h = job->h, hl = job->hl, fl = job->fl, Vl = job->Vl;
    /* query, key and value columns: 3 hl, or (al + 2 gl) hd with key/value groups */
    const int64_t ql = job->gl && job->gl != job->al ? (job->al + 2 * job->gl) * job->hd : 3 * hl;
    /* weight [out, in] of each of the layer's four GEMMs: forward (W^T) and input gradient (W) */
    const int64_t w[4][2] = {{ql, h}, {h, hl}, {fl, h}, {h, fl}};
    for (int i = 0; i < 4; i++) {
        if (job->swiglu && i == 2) { /* gate and up: two weights, each row's halves of fc */
            for (int k = 0; k < 2; k++) {
                pl->per_layer += weight_use_ld(g, 1, N, fl, h, 0, 2 * fl);
                pl->per_layer += weight_use(g, 0, N, h, fl, 0);
            }
            if (g->own)
                wgrad_use(g, pl, fl, h, N);
            else
                pl->b = pl->b > (size_t)(N * h) ? pl->b : (size_t)(N * h);
            continue;
        }
        if (job->swiglu && i == 3) { /* fc2 on gl, fp32 storage (no 16-bit MLP) */
            pl->per_layer += weight_use(g, 1, N, h, fl, 0);
            pl->per_layer += weight_use(g, 0, N, fl, h, 0);
            if (g->own)
                wgrad_use(g, pl, h, fl, N);
            else
                pl->b = pl->b > (size_t)(N * fl) ? pl->b : (size_t)(N * fl);
            continue;
        }
        const int64_t out = w[i][0], in = w[i][1];
        pl->per_layer += weight_use(g, 1, N, out, in, i == 2 && mlp16); /* fc = ln2 W1^T */
        pl->per_layer += weight_use(g, 0, N, in, out, i == 3 && mlp16); /* dfc = dy W2 */
        if (g->own)
            wgrad_use(g, pl, out, in, N); /* dW += dY^T X */
        else                              /* PTDP_BF16_REORDER=1: X packed plain at each call */
            pl->b = pl->b > (size_t)(N * in) ? pl->b : (size_t)(N * in);
    }
    int64_t widest = h > ql ? h : ql;
    widest = widest > fl ? widest : fl;
    if (Vl) {
        shape lk = shape_key(0, 1, 0, 1, N, Vl, h, Vl), dk = shape_key(0, 0, 0, 1, N, h, Vl, h);
        lk.cb16 = 1;
        const shape *lg = find_shape(g, &lk), *ds = find_shape(g, &dk);
        const shape wk = shape_key(1, 0, 1, 2, Vl, h, N, h), *ws = find_shape(g, &wk);
        if (g->own && lg && ds && ws && ws->bsize) { /* head_logits and head_bwd's own path */
            pl->per_head = copy_bytes(lg) + copy_bytes(ds);
        } else { /* the composition's: gemm's logits, its two GEMMs on dl */
            pl->per_head = weight_use(g, 1, N, Vl, h, 0) + weight_use(g, 0, N, h, Vl, 0);
        }
        if (g->own)
            wgrad_use(g, pl, Vl, h, N);
        else
            pl->b = pl->b > (size_t)(N * h) ? pl->b : (size_t)(N * h);
        widest = widest > Vl ? widest : Vl;
    }
    pl->a = (size_t)(N * widest);
}

void ptdp__gemm_bf16_workspace(ptdp__bf16_gemm *g, const ptdp_backend_job *job, int mlp16,
                               size_t *fixed, size_t *per_layer, size_t *per_head) {
    job_plan pl;
    plan_job(g, job, mlp16, &pl);
    *fixed = lines(sizeof(uint16_t) * pl.a) + lines(sizeof(uint16_t) * pl.b);
    for (int i = 0; i < pl.nwgrad; i++) *fixed += lines(pl.wgrad[i]->bsize);
    *per_layer = pl.per_layer;
    *per_head = pl.per_head;
}

void ptdp__gemm_bf16_workspace_set(ptdp__bf16_gemm *g, const ptdp_backend_job *job, int mlp16,
                                   void *fixed, void *pool, size_t pool_bytes) {
    /* what lived in the workspace goes: copies, B buffers, the A scratch */
    int k = 0;
    for (int i = 0; i < g->nw; i++) {
        if (!g->w[i].buf_own)
            drop_one(&g->w[i]);
        else
            g->w[k++] = g->w[i];
    }
    g->nw = k;
    for (int i = 0; i < g->nshapes; i++) {
        shape *s = &g->shapes[i];
        if (!s->bbuf || s->bbuf_own) continue;
        dnnl_memory_destroy(s->bmem);
        s->bbuf = NULL, s->bmem = NULL;
    }
    if (!g->a_own) g->a = NULL, g->acap = 0;
    if (!g->b_own) g->b = NULL, g->bcap = 0;
    g->pool = NULL, g->pool_left = 0;
    g->lb16 = NULL; /* its matmuls' copies may have gone */
    memset(&g->head, 0, sizeof g->head);
    if (!fixed) return;
    job_plan pl;
    plan_job(g, job, mlp16, &pl);
    char *at = fixed;
    if (g->a_own) free(g->a);
    g->a = (uint16_t *)at, g->acap = pl.a, g->a_own = 0;
    at += lines(sizeof(uint16_t) * pl.a);
    if (pl.b) {
        if (g->b_own) free(g->b);
        g->b = (uint16_t *)at, g->bcap = pl.b, g->b_own = 0;
        at += lines(sizeof(uint16_t) * pl.b);
    }
    for (int i = 0; i < pl.nwgrad; i++) {
        PTDP_ASSERT(shape_bbuf(g, pl.wgrad[i], at));
        at += lines(pl.wgrad[i]->bsize);
    }
    g->pool = pool, g->pool_left = pool_bytes;
}
