/* test_kernels_grad.c - every backward kernel of the CPU backend against central
 * finite differences of its forward. Each forward runs in fp32 as the model
 * runs it; the scalar objective L = sum(out * R) for a fixed random R (so
 * dL/dout = R) is accumulated in double. Covered: layernorm, bias + GeLU,
 * bias + dropout + residual (p = 0 and p > 0), plain dropout, attention
 * (p = 0 and p = 0.2; the mask is regenerated from the key, so the forward is
 * a fixed function of qkv), the Llama family's RMSNorm, SwiGLU (with a bias),
 * rotary embeddings (part of each head rotated, from a position offset) and
 * grouped-query attention (p = 0 and 0.2), embedding and position embedding, the
 * vocabulary-parallel cross-entropy (one slice and two), and the linear
 * layer's GEMM backward identities on both GEMM libraries. Not here: the fast
 * forwards against references (test_kernels.c).
 *
 * Tolerances. The central difference (L(x+e) - L(x-e)) / 2e with fp32
 * forwards has two errors: truncation e^2 |L'''| / 6 and roundoff: each
 * fp32 output carries ~6e-8 relative error, so L carries ~6e-8 sqrt(n) |out|
 * |R| ~ 1e-6 for our n <= 200 outputs of O(1), divided by 2e. With e = 1e-2
 * and O(1) values (|L'''| of a few for GeLU, LayerNorm, softmax) both are
 * below 2e-4; we allow 2e-3 absolute plus 1e-2 relative, far below the O(1)
 * error of a wrong formula, sign or missing term. Piecewise-linear ops
 * (dropout, embeddings, GEMM) have no truncation error. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "backend_util.h"
#include "test.h"

#define FD_EPS 1e-2f
#define FD_RTOL 1e-2
#define FD_ATOL 2e-3

static ptdp_backend *O;

static double dot(const float *a, const float *b, int64_t n) {
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (double)a[i] * b[i];
    return acc;
}

typedef double (*objective_fn)(void *ctx);

/* Compares grad[i] with the central difference of obj in x[i], for all i
 * (one CHECK per array; the first offender is printed). */
static void fd_check(const char *what, objective_fn obj, void *ctx, float *x, int64_t n,
                     const float *grad, float eps, double rtol, double atol) {
    int64_t bad = 0, first = -1;
    double fd_first = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) {
        float x0 = x[i], xp = x0 + eps, xm = x0 - eps;
        x[i] = xp;
        double lp = obj(ctx);
        x[i] = xm;
        double lm = obj(ctx);
        x[i] = x0;
        double fd = (lp - lm) / ((double)xp - (double)xm);
        double err = fabs(fd - grad[i]);
        worst = err > worst ? err : worst;
        if (!(err <= atol + rtol * fabs(fd))) {
            if (first < 0) first = i, fd_first = fd;
            bad++;
        }
    }
    if (bad)
        fprintf(stderr, "  %s: %lld of %lld differ; first [%lld] analytic %.7g fd %.7g\n", what,
                (long long)bad, (long long)n, (long long)first, grad[first], fd_first);
    printf("  %-36s n=%4lld max |analytic - fd| %.2e\n", what, (long long)n, worst);
    CHECK(bad == 0);
}

/* ---- LayerNorm ---------------------------------------------------------------- */

typedef struct {
    int64_t N, h;
    float *x, *w, *b, *out, *mean, *rstd, *R;
} ln_ctx;

static double ln_obj(void *p) {
    ln_ctx *c = p;
    O->layernorm_fwd(O, c->x, c->w, c->b, c->out, c->mean, c->rstd, c->N, c->h, 1e-5f);
    return dot(c->out, c->R, c->N * c->h);
}

static void test_layernorm(void) {
    ln_ctx c = {.N = 4, .h = 11};
    int64_t N = c.N, h = c.h;
    c.x = fmalloc(N * h), c.w = fmalloc(h), c.b = fmalloc(h), c.out = fmalloc(N * h);
    c.mean = fmalloc(N), c.rstd = fmalloc(N), c.R = fmalloc(N * h);
    fill_normal(c.x, N * h, 1, 1.0f);
    fill_normal(c.w, h, 2, 1.0f);
    fill_normal(c.b, h, 3, 1.0f);
    fill_normal(c.R, N * h, 4, 1.0f);
    float *dx = fmalloc(N * h), *dw = fmalloc(h), *db = fmalloc(h);
    float *px = fmalloc(N * h), *pw = fmalloc(h), *pb = fmalloc(h);
    /* the backward accumulates: pre-fill with known values, subtract after */
    fill_normal(px, N * h, 5, 1.0f);
    fill_normal(pw, h, 6, 1.0f);
    fill_normal(pb, h, 7, 1.0f);
    memcpy(dx, px, sizeof(float) * (size_t)(N * h));
    memcpy(dw, pw, sizeof(float) * (size_t)h);
    memcpy(db, pb, sizeof(float) * (size_t)h);
    ln_obj(&c);
    O->layernorm_bwd(O, c.R, c.x, c.w, c.mean, c.rstd, dx, dw, db, N, h);
    for (int64_t i = 0; i < N * h; i++) dx[i] -= px[i];
    for (int64_t i = 0; i < h; i++) dw[i] -= pw[i], db[i] -= pb[i];
    fd_check("layernorm_bwd dx", ln_obj, &c, c.x, N * h, dx, FD_EPS, FD_RTOL, FD_ATOL);
    fd_check("layernorm_bwd dw", ln_obj, &c, c.w, h, dw, FD_EPS, FD_RTOL, FD_ATOL);
    fd_check("layernorm_bwd db", ln_obj, &c, c.b, h, db, FD_EPS, FD_RTOL, FD_ATOL);
    free(c.x), free(c.w), free(c.b), free(c.out), free(c.mean), free(c.rstd), free(c.R);
    free(dx), free(dw), free(db), free(px), free(pw), free(pb);
}

/* ---- bias + GeLU ------------------------------------------------------------------ */

typedef struct {
    int64_t N, n;
    float *x, *bias, *out, *R;
} gelu_ctx;

static double gelu_obj(void *p) {
    gelu_ctx *c = p;
    O->bias_gelu_fwd(O, c->x, c->bias, c->out, c->N, c->n);
    return dot(c->out, c->R, c->N * c->n);
}

static void test_bias_gelu(void) {
    gelu_ctx c = {.N = 5, .n = 9};
    int64_t n = c.N * c.n;
    c.x = fmalloc(n), c.bias = fmalloc(c.n), c.out = fmalloc(n), c.R = fmalloc(n);
    fill_normal(c.x, n, 10, 1.5f);
    fill_normal(c.bias, c.n, 11, 0.5f);
    fill_normal(c.R, n, 12, 1.0f);
    float *dx = fmalloc(n), *db = fmalloc(c.n), *alias = fmalloc(n), *db2 = fmalloc(c.n);
    for (int64_t j = 0; j < c.n; j++) db[j] = db2[j] = 0.25f;
    O->bias_gelu_bwd(O, c.R, c.x, c.bias, dx, db, c.N, c.n);
    for (int64_t j = 0; j < c.n; j++) db[j] -= 0.25f;
    fd_check("bias_gelu_bwd dx", gelu_obj, &c, c.x, n, dx, FD_EPS, FD_RTOL, FD_ATOL);
    fd_check("bias_gelu_bwd dbias", gelu_obj, &c, c.bias, c.n, db, FD_EPS, FD_RTOL, FD_ATOL);
    /* dx may alias dout: same result */
    memcpy(alias, c.R, sizeof(float) * (size_t)n);
    O->bias_gelu_bwd(O, alias, c.x, c.bias, alias, db2, c.N, c.n);
    CHECK(memcmp(alias, dx, sizeof(float) * (size_t)n) == 0);
    free(c.x), free(c.bias), free(c.out), free(c.R), free(dx), free(db), free(alias), free(db2);
}

/* ---- bias + dropout + residual, plain dropout ----------------------------------------- */

typedef struct {
    int64_t N, h;
    float *x, *bias, *resid, *out, *R;
    ptdp_dropout drop;
} bda_ctx;

static double bda_obj(void *p) {
    bda_ctx *c = p;
    O->bias_dropout_add_fwd(O, c->x, c->bias, c->resid, c->out, c->N, c->h, c->drop);
    return dot(c->out, c->R, c->N * c->h);
}

static double drop_obj(void *p) {
    bda_ctx *c = p; /* plain dropout of x, in place on a copy */
    memcpy(c->out, c->x, sizeof(float) * (size_t)(c->N * c->h));
    O->dropout_fwd(O, c->out, c->N * c->h, c->drop);
    return dot(c->out, c->R, c->N * c->h);
}

static void test_bias_dropout_add(float p) {
    bda_ctx c = {.N = 6, .h = 10};
    c.drop = (ptdp_dropout){.p = p, .key = ptdp_rng_key_make(99, "bda"), .offset = 3};
    int64_t n = c.N * c.h;
    c.x = fmalloc(n), c.bias = fmalloc(c.h), c.resid = fmalloc(n), c.out = fmalloc(n),
    c.R = fmalloc(n);
    fill_normal(c.x, n, 20, 1.0f);
    fill_normal(c.bias, c.h, 21, 1.0f);
    fill_normal(c.resid, n, 22, 1.0f);
    fill_normal(c.R, n, 23, 1.0f);
    float *dx = fmalloc(n), *db = fmalloc(c.h);
    for (int64_t j = 0; j < c.h; j++) db[j] = -1.0f;
    O->bias_dropout_add_bwd(O, c.R, dx, db, c.N, c.h, c.drop);
    for (int64_t j = 0; j < c.h; j++) db[j] += 1.0f;
    char w1[64], w2[64], w3[64], w4[64];
    snprintf(w1, sizeof w1, "bias_dropout_add_bwd dx p=%g", (double)p);
    snprintf(w2, sizeof w2, "bias_dropout_add_bwd dbias p=%g", (double)p);
    snprintf(w3, sizeof w3, "bias_dropout_add dresid=dout p=%g", (double)p);
    snprintf(w4, sizeof w4, "dropout_bwd p=%g", (double)p);
    fd_check(w1, bda_obj, &c, c.x, n, dx, FD_EPS, FD_RTOL, FD_ATOL);
    fd_check(w2, bda_obj, &c, c.bias, c.h, db, FD_EPS, FD_RTOL, FD_ATOL);
    fd_check(w3, bda_obj, &c, c.resid, n, c.R, FD_EPS, FD_RTOL, FD_ATOL);
    if (p > 0.0f) {
        int64_t dropped = 0;
        for (int64_t i = 0; i < n; i++) dropped += dx[i] == 0.0f;
        CHECK(dropped > 0 && dropped < n); /* the FD above saw a real mask */
    }
    /* in place (dx aliasing dout) gives the same */
    float *alias = fmalloc(n), *db2 = fmalloc(c.h);
    memcpy(alias, c.R, sizeof(float) * (size_t)n);
    for (int64_t j = 0; j < c.h; j++) db2[j] = 0.0f;
    O->bias_dropout_add_bwd(O, alias, alias, db2, c.N, c.h, c.drop);
    CHECK(memcmp(alias, dx, sizeof(float) * (size_t)n) == 0);
    /* plain dropout: bwd of R */
    memcpy(alias, c.R, sizeof(float) * (size_t)n);
    O->dropout_bwd(O, alias, n, c.drop);
    fd_check(w4, drop_obj, &c, c.x, n, alias, FD_EPS, FD_RTOL, FD_ATOL);
    free(c.x), free(c.bias), free(c.resid), free(c.out), free(c.R), free(dx), free(db), free(alias),
        free(db2);
}

/* ---- attention ------------------------------------------------------------------------- */

typedef struct {
    int64_t s, b, al, hd;
    float *qkv, *ctx, *saved, *scratch, *R;
    ptdp_dropout drop;
} attn_ctx;

static double attn_obj(void *p) {
    attn_ctx *c = p;
    O->attention_fwd(O, c->qkv, c->ctx, c->saved, c->scratch, c->s, c->b, c->al, c->hd, c->drop);
    return dot(c->ctx, c->R, c->s * c->b * c->al * c->hd);
}

static void test_attention(float p) {
    attn_ctx c = {.s = 5, .b = 2, .al = 2, .hd = 4};
    c.drop = (ptdp_dropout){.p = p, .key = ptdp_rng_key_make(5, "attn"), .offset = 17};
    int64_t nq = c.s * c.b * c.al * 3 * c.hd, nc = c.s * c.b * c.al * c.hd;
    c.qkv = fmalloc(nq), c.ctx = fmalloc(nc),
    c.saved = fmalloc(O->attention_saved_floats(O, c.s, c.b, c.al));
    c.scratch = fmalloc(ptdp_attention_scratch_floats(c.s, omp_get_max_threads()));
    c.R = fmalloc(nc);
    fill_normal(c.qkv, nq, 30, 1.0f);
    fill_normal(c.R, nc, 31, 1.0f);
    float *dqkv = fmalloc(nq);
    for (int64_t i = 0; i < nq; i++) dqkv[i] = 777.0f; /* overwritten, not accumulated */
    attn_obj(&c);
    O->attention_bwd(O, c.R, c.qkv, c.ctx, c.saved, dqkv, c.scratch, c.s, c.b, c.al, c.hd, c.drop);
    char what[64];
    snprintf(what, sizeof what, "attention_bwd dqkv p=%g", (double)p);
    fd_check(what, attn_obj, &c, c.qkv, nq, dqkv, FD_EPS, FD_RTOL, FD_ATOL);
    free(c.qkv), free(c.ctx), free(c.saved), free(c.scratch), free(c.R), free(dqkv);
}

/* ---- the Llama family: RMSNorm, SwiGLU, rotary embeddings, grouped-query attention ---- */

typedef struct {
    int64_t N, h;
    float *x, *w, *out, *rstd, *R;
} rms_ctx;

static double rms_obj(void *p) {
    rms_ctx *c = p;
    O->rmsnorm_fwd(O, c->x, c->w, c->out, c->rstd, c->N, c->h, 1e-5f);
    return dot(c->out, c->R, c->N * c->h);
}

static void test_rmsnorm(void) {
    rms_ctx c = {.N = 4, .h = 19};
    const int64_t N = c.N, h = c.h;
    c.x = fmalloc(N * h), c.w = fmalloc(h), c.out = fmalloc(N * h), c.rstd = fmalloc(N);
    c.R = fmalloc(N * h);
    fill_normal(c.x, N * h, 70, 1.0f);
    fill_normal(c.w, h, 71, 1.0f);
    fill_normal(c.R, N * h, 72, 1.0f);
    float *dx = fmalloc(N * h), *dw = fmalloc(h);
    fill_const(dx, N * h, 1.0f), fill_const(dw, h, -1.0f); /* both accumulate */
    rms_obj(&c);
    O->rmsnorm_bwd(O, c.R, c.x, c.w, c.rstd, dx, dw, N, h);
    for (int64_t i = 0; i < N * h; i++) dx[i] -= 1.0f;
    for (int64_t i = 0; i < h; i++) dw[i] += 1.0f;
    fd_check("rmsnorm_bwd dx", rms_obj, &c, c.x, N * h, dx, FD_EPS, FD_RTOL, FD_ATOL);
    fd_check("rmsnorm_bwd dw", rms_obj, &c, c.w, h, dw, FD_EPS, FD_RTOL, FD_ATOL);
    free(c.x), free(c.w), free(c.out), free(c.rstd), free(c.R), free(dx), free(dw);
}

typedef struct {
    int64_t N, fl;
    float *x, *bias, *out, *R;
} swiglu_ctx;

static double swiglu_obj(void *p) {
    swiglu_ctx *c = p;
    O->swiglu_fwd(O, c->x, c->bias, c->out, c->N, c->fl);
    return dot(c->out, c->R, c->N * c->fl);
}

static void test_swiglu(void) {
    swiglu_ctx c = {.N = 5, .fl = 7};
    const int64_t n = c.N * 2 * c.fl;
    c.x = fmalloc(n), c.bias = fmalloc(2 * c.fl), c.out = fmalloc(c.N * c.fl);
    c.R = fmalloc(c.N * c.fl);
    fill_normal(c.x, n, 73, 1.5f);
    fill_normal(c.bias, 2 * c.fl, 74, 0.5f);
    fill_normal(c.R, c.N * c.fl, 75, 1.0f);
    float *dx = fmalloc(n), *db = fmalloc(2 * c.fl);
    fill_const(db, 2 * c.fl, 0.25f);
    O->swiglu_bwd(O, c.R, c.x, c.bias, dx, db, c.N, c.fl);
    for (int64_t j = 0; j < 2 * c.fl; j++) db[j] -= 0.25f;
    fd_check("swiglu_bwd dx (gate | up)", swiglu_obj, &c, c.x, n, dx, FD_EPS, FD_RTOL, FD_ATOL);
    fd_check("swiglu_bwd dbias", swiglu_obj, &c, c.bias, 2 * c.fl, db, FD_EPS, FD_RTOL, FD_ATOL);
    free(c.x), free(c.bias), free(c.out), free(c.R), free(dx), free(db);
}

/* rotary embeddings on a copy of x (rope_fwd works in place) */
typedef struct {
    int64_t s, b, al, gl, hd, rd, pos0;
    float *x, *y, *table, *R;
} rope_ctx;

static double rope_obj(void *p) {
    rope_ctx *c = p;
    const int64_t n = c->s * c->b * (c->al + 2 * c->gl) * c->hd;
    memcpy(c->y, c->x, sizeof(float) * (size_t)n);
    O->rope_fwd(O, c->y, c->table, c->s, c->b, c->al, c->gl, c->hd, c->rd, c->pos0);
    return dot(c->y, c->R, n);
}

static void test_rope(void) {
    rope_ctx c = {.s = 4, .b = 2, .al = 4, .gl = 2, .hd = 6, .rd = 4, .pos0 = 3};
    const int64_t n = c.s * c.b * (c.al + 2 * c.gl) * c.hd;
    c.x = fmalloc(n), c.y = fmalloc(n), c.R = fmalloc(n);
    c.table = fmalloc(ptdp_rope_table_floats(c.pos0 + c.s, c.rd));
    ptdp_rope_table_init(O, c.table, c.pos0 + c.s, c.rd, 100.0);
    fill_normal(c.x, n, 76, 1.0f);
    fill_normal(c.R, n, 77, 1.0f);
    float *dx = fmalloc(n);
    memcpy(dx, c.R, sizeof(float) * (size_t)n);
    O->rope_bwd(O, dx, c.table, c.s, c.b, c.al, c.gl, c.hd, c.rd, c.pos0);
    fd_check("rope_bwd dqkv (rd < hd, gl < al)", rope_obj, &c, c.x, n, dx, FD_EPS, FD_RTOL,
             FD_ATOL);
    free(c.x), free(c.y), free(c.R), free(c.table), free(dx);
}

typedef struct {
    int64_t s, b, al, gl, hd;
    float *qkv, *ctx, *saved, *scratch, *R;
    ptdp_dropout drop;
} gqa_ctx;

static double gqa_obj(void *p) {
    gqa_ctx *c = p;
    O->attention_gqa_fwd(O, c->qkv, c->ctx, c->saved, c->scratch, c->s, c->b, c->al, c->gl, c->hd,
                         c->drop);
    return dot(c->ctx, c->R, c->s * c->b * c->al * c->hd);
}

static void test_attention_gqa(float p) {
    gqa_ctx c = {.s = 5, .b = 2, .al = 4, .gl = 2, .hd = 4};
    c.drop = (ptdp_dropout){.p = p, .key = ptdp_rng_key_make(6, "gqa"), .offset = 9};
    const int64_t nq = c.s * c.b * (c.al + 2 * c.gl) * c.hd, nc = c.s * c.b * c.al * c.hd;
    c.qkv = fmalloc(nq), c.ctx = fmalloc(nc), c.R = fmalloc(nc);
    c.saved = fmalloc(O->attention_saved_floats(O, c.s, c.b, c.al));
    c.scratch = fmalloc(ptdp_attention_scratch_floats(c.s, omp_get_max_threads()));
    fill_normal(c.qkv, nq, 78, 1.0f);
    fill_normal(c.R, nc, 79, 1.0f);
    float *dqkv = fmalloc(nq);
    fill_const(dqkv, nq, 777.0f); /* overwritten, not accumulated */
    gqa_obj(&c);
    O->attention_gqa_bwd(O, c.R, c.qkv, c.ctx, c.saved, dqkv, c.scratch, c.s, c.b, c.al, c.gl, c.hd,
                         c.drop);
    char what[64];
    snprintf(what, sizeof what, "attention_gqa_bwd dqkv p=%g", (double)p);
    fd_check(what, gqa_obj, &c, c.qkv, nq, dqkv, FD_EPS, FD_RTOL, FD_ATOL);
    free(c.qkv), free(c.ctx), free(c.saved), free(c.scratch), free(c.R), free(dqkv);
}

/* ---- embeddings ------------------------------------------------------------------------ */

typedef struct {
    int64_t s, b, ld, h, v0, Vl;
    const int32_t *tokens;
    float *wte, *wpe, *out, *R;
} emb_ctx;

static double emb_obj(void *p) {
    emb_ctx *c = p;
    O->embed_fwd(O, c->tokens, c->ld, c->wte, c->v0, c->Vl, c->out, c->s, c->b, c->h);
    O->pos_add_fwd(O, c->out, c->wpe, c->s, c->b, c->h);
    return dot(c->out, c->R, c->s * c->b * c->h);
}

static void test_embed(void) {
    int32_t tokens[3 * 6] = {5, 6, 7, 8, 9, 0, 6, 6, 2, 11, 5, 1, 7, 7, 7, 4, 3, 6};
    emb_ctx c = {.s = 5, .b = 3, .ld = 6, .h = 4, .v0 = 5, .Vl = 4, .tokens = tokens};
    int64_t n = c.s * c.b * c.h;
    c.wte = fmalloc(c.Vl * c.h), c.wpe = fmalloc(c.s * c.h), c.out = fmalloc(n), c.R = fmalloc(n);
    fill_normal(c.wte, c.Vl * c.h, 40, 1.0f);
    fill_normal(c.wpe, c.s * c.h, 41, 1.0f);
    fill_normal(c.R, n, 42, 1.0f);
    float *dwte = fmalloc(c.Vl * c.h), *dwpe = fmalloc(c.s * c.h);
    for (int64_t i = 0; i < c.Vl * c.h; i++) dwte[i] = 2.0f;
    for (int64_t i = 0; i < c.s * c.h; i++) dwpe[i] = -2.0f;
    O->embed_bwd(O, tokens, c.ld, c.R, dwte, c.v0, c.Vl, c.s, c.b, c.h);
    O->pos_add_bwd(O, c.R, dwpe, c.s, c.b, c.h);
    for (int64_t i = 0; i < c.Vl * c.h; i++) dwte[i] -= 2.0f;
    for (int64_t i = 0; i < c.s * c.h; i++) dwpe[i] += 2.0f;
    fd_check("embed_bwd dwte (slice v0=5)", emb_obj, &c, c.wte, c.Vl * c.h, dwte, FD_EPS, FD_RTOL,
             FD_ATOL);
    fd_check("pos_add_bwd dwpe", emb_obj, &c, c.wpe, c.s * c.h, dwpe, FD_EPS, FD_RTOL, FD_ATOL);
    free(c.wte), free(c.wpe), free(c.out), free(c.R), free(dwte), free(dwpe);
}

/* ---- cross-entropy ------------------------------------------------------------------------ */

/* scale * sum(loss) over logits [N, Vpad] split into T column slices of Vl,
 * combined as the tensor-parallel all-reduces would (max with max, sums with +). */
typedef struct {
    int64_t s, b, ld, V, Vl, T;
    const int32_t *targets;
    float *logits, *sl, *gmax, *sumexp, *tgt, *part, *part2, *loss;
    float scale;
} xent_ctx;

static void slice(const xent_ctx *c, int k, float *dst) {
    int64_t N = c->s * c->b, Vpad = c->Vl * c->T;
    for (int64_t n = 0; n < N; n++)
        memcpy(dst + n * c->Vl, c->logits + n * Vpad + k * c->Vl, sizeof(float) * (size_t)c->Vl);
}

static double xent_obj(void *p) {
    xent_ctx *c = p;
    int64_t N = c->s * c->b;
    for (int64_t n = 0; n < N; n++) c->gmax[n] = -INFINITY, c->sumexp[n] = 0.0f, c->tgt[n] = 0.0f;
    for (int k = 0; k < c->T; k++) {
        slice(c, k, c->sl);
        O->xent_max(O, c->sl, c->part, N, c->Vl, k * c->Vl, c->V);
        for (int64_t n = 0; n < N; n++) c->gmax[n] = fmaxf(c->gmax[n], c->part[n]);
    }
    for (int k = 0; k < c->T; k++) {
        slice(c, k, c->sl);
        O->xent_sums(O, c->sl, c->gmax, c->targets, c->ld, c->part, c->part2, c->s, c->b, c->Vl,
                     k * c->Vl, c->V);
        for (int64_t n = 0; n < N; n++) c->sumexp[n] += c->part[n], c->tgt[n] += c->part2[n];
    }
    O->xent_loss(O, c->sumexp, c->gmax, c->tgt, c->loss, N);
    double acc = 0;
    for (int64_t n = 0; n < N; n++) acc += c->loss[n];
    return c->scale * acc;
}

static void test_xent(int T) {
    int32_t targets[2 * 4] = {0, 3, 12, 7, 9, 1, 5, 11}; /* [b=2, ld=4] */
    xent_ctx c = {.s = 3,
                  .b = 2,
                  .ld = 4,
                  .V = 13,
                  .Vl = 16 / T,
                  .T = T,
                  .targets = targets,
                  .scale = 1.0f / 6.0f};
    int64_t N = c.s * c.b, Vpad = c.Vl * T;
    c.logits = fmalloc(N * Vpad), c.sl = fmalloc(N * c.Vl);
    c.gmax = fmalloc(N), c.sumexp = fmalloc(N), c.tgt = fmalloc(N), c.part = fmalloc(N),
    c.part2 = fmalloc(N), c.loss = fmalloc(N);
    fill_normal(c.logits, N * Vpad, 50 + (uint64_t)T, 1.0f);
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = c.V; j < Vpad; j++) c.logits[n * Vpad + j] = 5.0f; /* padding: ignored */
    xent_obj(&c); /* gmax, sumexp of the unperturbed logits */
    float *grad = fmalloc(N * Vpad);
    for (int k = 0; k < T; k++) {
        /* each rank's backward in place on its slice: xent_sums leaves exp(l - gmax) there */
        slice(&c, k, c.sl);
        O->xent_sums(O, c.sl, c.gmax, targets, c.ld, c.part, c.part2, c.s, c.b, c.Vl, k * c.Vl,
                     c.V);
        O->xent_bwd(O, c.sl, c.sumexp, targets, c.ld, c.s, c.b, c.Vl, k * c.Vl, c.V, c.scale);
        for (int64_t n = 0; n < N; n++)
            memcpy(grad + n * Vpad + k * c.Vl, c.sl + n * c.Vl, sizeof(float) * (size_t)c.Vl);
    }
    int64_t padbad = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = c.V; j < Vpad; j++) padbad += grad[n * Vpad + j] != 0.0f;
    CHECK(padbad == 0);
    char what[64];
    snprintf(what, sizeof what, "xent_bwd dlogits t=%d", T);
    fd_check(what, xent_obj, &c, c.logits, N * Vpad, grad, FD_EPS, FD_RTOL, FD_ATOL);
    free(c.logits), free(c.sl), free(c.gmax), free(c.sumexp), free(c.tgt), free(c.part),
        free(c.part2), free(c.loss), free(grad);
}

/* ---- linear layer through GEMM ----------------------------------------------------------------
 */

/* Y[N,n] = X[N,k] W[n,k]^T (gpt.c's forward gemm(0,1)); dW += dY^T X (gemm(1,0),
 * beta 1), dX = dY W (gemm(0,0)). */
typedef struct {
    int64_t N, n, k;
    float *X, *W, *Y, *R;
} lin_ctx;

static double lin_obj(void *p) {
    lin_ctx *c = p;
    O->gemm(O, 0, 1, c->N, c->n, c->k, 1.0f, c->X, c->k, c->W, c->k, 0.0f, c->Y, c->n);
    return dot(c->Y, c->R, c->N * c->n);
}

static void test_linear(ptdp_gemm_lib lib) {
    ptdp_backend *saved = O;
    O = test_cpu_backend(lib, PTDP_DTYPE_FP32);
    lin_ctx c = {.N = 7, .n = 5, .k = 6};
    c.X = fmalloc(c.N * c.k), c.W = fmalloc(c.n * c.k), c.Y = fmalloc(c.N * c.n),
    c.R = fmalloc(c.N * c.n);
    fill_normal(c.X, c.N * c.k, 60, 1.0f);
    fill_normal(c.W, c.n * c.k, 61, 1.0f);
    fill_normal(c.R, c.N * c.n, 62, 1.0f);
    float *dW = fmalloc(c.n * c.k), *dX = fmalloc(c.N * c.k);
    for (int64_t i = 0; i < c.n * c.k; i++) dW[i] = 3.0f;
    O->gemm(O, 1, 0, c.n, c.k, c.N, 1.0f, c.R, c.n, c.X, c.k, 1.0f, dW, c.k);
    for (int64_t i = 0; i < c.n * c.k; i++) dW[i] -= 3.0f;
    O->gemm(O, 0, 0, c.N, c.k, c.n, 1.0f, c.R, c.n, c.W, c.k, 0.0f, dX, c.k);
    char w1[64], w2[64];
    snprintf(w1, sizeof w1, "linear dW (%s)", ptdp_gemm_lib_name(lib));
    snprintf(w2, sizeof w2, "linear dX (%s)", ptdp_gemm_lib_name(lib));
    fd_check(w1, lin_obj, &c, c.W, c.n * c.k, dW, FD_EPS, FD_RTOL, FD_ATOL);
    fd_check(w2, lin_obj, &c, c.X, c.N * c.k, dX, FD_EPS, FD_RTOL, FD_ATOL);
    free(c.X), free(c.W), free(c.Y), free(c.R), free(dW), free(dX);
    O = saved;
}

int main(void) {
    O = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
    test_layernorm();
    test_bias_gelu();
    test_bias_dropout_add(0.0f);
    test_bias_dropout_add(0.3f);
    test_attention(0.0f);
    test_attention(0.2f);
    test_rmsnorm();
    test_swiglu();
    test_rope();
    test_attention_gqa(0.0f);
    test_attention_gqa(0.2f);
    test_embed();
    test_xent(1);
    test_xent(2);
    test_linear(PTDP_GEMM_ONEDNN);
    test_linear(PTDP_GEMM_OPENBLAS);
    return test_done("test_kernels_grad");
}
