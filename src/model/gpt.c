/* gpt.c - one model chunk's memory plan, forward and backward.
 *
 * A layer's forward (N = s*b rows, hl = h/t, fl = 4h/t, al = a/t):
 *   ln1 = LN(x)                     qkv = ln1 Wqkv^T + bqkv      (column-parallel)
 *   ctx = attention(qkv)            y = all-reduce(ctx Wo^T)     (row-parallel, g)
 *   xm = x + dropout(y + bo)        ln2 = LN(xm)
 *   fc = ln2 W1^T                   gl = gelu(fc + b1)           (column-parallel)
 *   y = all-reduce(gl W2^T)         out = xm + dropout(y + b2)   (row-parallel, g)
 * Backward mirrors it; the all-reduces of the conjugate operator f sit after
 * the input-gradient GEMMs of the column-parallel layers. Stashed per
 * micro-batch slot and layer: x, ln1 (+stats), qkv, probs, ctx, xm, ln2
 * (+stats), fc, gl. The loss head runs its backward inside the forward (it
 * needs nothing from later stages), so the last stage keeps the [s,b,h]
 * gradient of its last layer's output instead of [s,b,V] logits.
 * Not here: activation recomputation, pipeline communication. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/model_internal.h"

typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *probs, *ctx, *xm, *ln2, *ln2_mean, *ln2_rstd, *fc, *gl;
} layer_act;

typedef struct {
    float **x;        /* [nl+1] -> [N, h]: input of each layer, then the chunk
                         output (on the last stage: the gradient of the output
                         after fwd). Inner inputs of a recompute group point
                         into the shared recompute workspace. */
    layer_act *layer; /* [nl]; recomputed layers point into the workspace */
    int32_t *tokens;  /* [b, s+1] (first and last stage) */
    int64_t iteration, microbatch;
} slot_act;

struct ptdp_gpt_chunk {
    ptdp_chunk_params p;
    const ptdp_gpt_config *cfg;
    const ptdp_ops *ops;
    int t, tp;
    int64_t nl, N, h, hl, fl, al, hd, Vl, v0;
    int training; /* 0: no dropout, the loss head skips its backward */
    int64_t *group;   /* [nl]: first layer of layer i's recompute group, -1 if stored */
    int64_t *group_end; /* [nl]: one past the group's last layer */
    int64_t max_group;  /* layers in the largest recompute group */
    layer_act *ws_layer; /* [max_group] recompute workspace */
    float **ws_x;        /* [max_group] inner inputs of a group being recomputed */
    float *ws_out;       /* [N, h] a recomputed group's output (discarded) */
    size_t slot_bytes, shared_bytes; /* activation plan: per slot, shared */
    ptdp_grad_hook hook;
    void *hook_ctx;
    int64_t *layer_offset; /* [nl]: flat offset of layer i's first parameter */
    ptdp__spec_list specs;
    float *params, *grads; /* one allocation: params then grads */
    ptdp_model_ptrs P, G;
    ptdp_layer_ptrs *lp_storage; /* 2*nl */
    void *act_mem;
    size_t param_bytes, act_bytes;
    slot_act *slots;
    /* workspace shared by all slots */
    float *tmp, *dres, *dtmp, *dctx, *dqkv, *dfc, *attn_scratch;
    float *lnf_out, *lnf_mean, *lnf_rstd, *logits, *gmax, *sumexp, *tgt, *loss;
};

/* ---- memory plan ---------------------------------------------------------- */

typedef struct {
    size_t off;
    int dry; /* count only */
    char *base;
} carver;

static void *carve(carver *cv, size_t bytes) {
    size_t a = (bytes + 63) & ~(size_t)63;
    void *p = cv->dry ? NULL : cv->base + cv->off;
    cv->off += a;
    return p;
}
#define CARVE_F(cv, n) ((float *)carve((cv), sizeof(float) * (size_t)(n)))

static void carve_layer(carver *cv, layer_act *la, int64_t N, int64_t h, int64_t hl, int64_t fl, int64_t b,
                        int64_t al, int64_t s) {
    la->ln1 = CARVE_F(cv, N * h);
    la->ln1_mean = CARVE_F(cv, N);
    la->ln1_rstd = CARVE_F(cv, N);
    la->qkv = CARVE_F(cv, N * 3 * hl);
    la->probs = CARVE_F(cv, b * al * s * s);
    la->ctx = CARVE_F(cv, N * hl);
    la->xm = CARVE_F(cv, N * h);
    la->ln2 = CARVE_F(cv, N * h);
    la->ln2_mean = CARVE_F(cv, N);
    la->ln2_rstd = CARVE_F(cv, N);
    la->fc = CARVE_F(cv, N * fl);
    la->gl = CARVE_F(cv, N * fl);
}

/* Which layers are recomputed, in which groups (Megatron's semantics):
 * uniform: consecutive groups of n layers, all recomputed; block: the first n
 * layers of the chunk, each on its own; none: every layer stored. */
static void plan_recompute(ptdp_gpt_chunk *c) {
    const int method = c->p.recompute_method;
    const int64_t n = c->p.recompute_num_layers < 1 ? 1 : c->p.recompute_num_layers;
    c->max_group = 0;
    for (int64_t i = 0; i < c->nl; i++) {
        int64_t g = -1, e = i + 1;
        if (method == PTDP_RECOMPUTE_UNIFORM) {
            g = i / n * n;
            e = g + n < c->nl ? g + n : c->nl;
        } else if (method == PTDP_RECOMPUTE_BLOCK && i < n) {
            g = i;
        }
        c->group[i] = g;
        c->group_end[i] = e;
        if (g >= 0 && e - g > c->max_group) c->max_group = e - g;
    }
}

static int x_stored(const ptdp_gpt_chunk *c, int64_t i) {
    return i == 0 || i == c->nl || c->group[i] < 0 || c->group[i] == i;
}

static void plan_activations(ptdp_gpt_chunk *c, carver *cv) {
    const ptdp_chunk_params *p = &c->p;
    const int64_t N = c->N, h = c->h, hl = c->hl, fl = c->fl, s = c->cfg->seq_length, b = p->micro_batch;
    size_t before = cv->off;
    for (int k = 0; k < p->slots; k++) {
        slot_act *sa = cv->dry ? NULL : &c->slots[k];
        int32_t *tok = (p->pre || p->post) ? carve(cv, sizeof(int32_t) * (size_t)(b * (s + 1))) : NULL;
        if (sa) sa->tokens = tok;
        for (int64_t i = 0; i <= c->nl; i++) {
            float *x = x_stored(c, i) ? CARVE_F(cv, N * h) : NULL;
            if (sa) sa->x[i] = x;
        }
        for (int64_t i = 0; i < c->nl; i++) {
            if (c->group[i] >= 0) continue; /* recomputed: workspace */
            layer_act la;
            carve_layer(cv, &la, N, h, hl, fl, b, c->al, s);
            if (sa) sa->layer[i] = la;
        }
        if (k == 0) c->slot_bytes = cv->off - before;
    }
    before = cv->off;
    for (int64_t g = 0; g < c->max_group; g++) {
        layer_act la;
        carve_layer(cv, &la, N, h, hl, fl, b, c->al, s);
        float *x = CARVE_F(cv, N * h);
        if (!cv->dry) {
            c->ws_layer[g] = la;
            c->ws_x[g] = x;
        }
    }
    c->ws_out = c->max_group ? CARVE_F(cv, N * h) : NULL;
    c->tmp = CARVE_F(cv, N * h);
    c->dres = CARVE_F(cv, N * h);
    c->dtmp = CARVE_F(cv, N * h);
    c->dctx = CARVE_F(cv, N * hl);
    c->dqkv = CARVE_F(cv, N * 3 * hl);
    c->dfc = CARVE_F(cv, N * fl);
    c->attn_scratch = CARVE_F(cv, ptdp_attention_scratch_floats(s, omp_get_max_threads()));
    if (p->post) {
        c->lnf_out = CARVE_F(cv, N * h);
        c->lnf_mean = CARVE_F(cv, N);
        c->lnf_rstd = CARVE_F(cv, N);
        c->logits = CARVE_F(cv, N * c->Vl);
        c->gmax = CARVE_F(cv, N);
        c->sumexp = CARVE_F(cv, N);
        c->tgt = CARVE_F(cv, N);
        c->loss = CARVE_F(cv, N);
    }
    c->shared_bytes = cv->off - before;
    /* slots point their recomputed layers and inner inputs at the workspace */
    for (int k = 0; !cv->dry && k < p->slots; k++)
        for (int64_t i = 0; i < c->nl; i++)
            if (c->group[i] >= 0) {
                c->slots[k].layer[i] = c->ws_layer[i - c->group[i]];
                if (!x_stored(c, i)) c->slots[k].x[i] = c->ws_x[i - c->group[i]];
            }
}

static void set_dims(ptdp_gpt_chunk *c, const ptdp_chunk_params *p) {
    const ptdp_gpt_config *cfg = p->cfg;
    c->p = *p;
    c->cfg = cfg;
    c->ops = p->ops;
    c->t = p->tp ? p->tp->size : 1;
    c->tp = p->tp ? p->tp->rank : 0;
    c->nl = p->layer_end - p->layer_begin;
    c->N = cfg->seq_length * p->micro_batch;
    c->h = cfg->hidden;
    c->hl = cfg->hidden / c->t;
    c->fl = cfg->ffn_hidden / c->t;
    c->al = cfg->heads / c->t;
    c->hd = cfg->hidden / cfg->heads;
    c->Vl = cfg->vocab_padded / c->t;
    c->v0 = c->tp * c->Vl;
}

size_t ptdp_gpt_activation_bytes(const ptdp_chunk_params *p) {
    ptdp_gpt_chunk c;
    memset(&c, 0, sizeof c);
    set_dims(&c, p);
    c.group = calloc((size_t)c.nl + 1, sizeof(int64_t));
    c.group_end = calloc((size_t)c.nl + 1, sizeof(int64_t));
    PTDP_ASSERT(c.group && c.group_end);
    plan_recompute(&c);
    carver cv = {0, 1, NULL};
    plan_activations(&c, &cv);
    free(c.group);
    free(c.group_end);
    return cv.off;
}

static void layer_ptrs(ptdp_gpt_chunk *c, float *base, ptdp_model_ptrs *mp, ptdp_layer_ptrs *lps) {
    const ptdp__spec_list *L = &c->specs;
    mp->wte = L->wte >= 0 ? base + L->v[L->wte].offset : NULL;
    mp->wpe = L->wpe >= 0 ? base + L->v[L->wpe].offset : NULL;
    mp->lnf_w = L->lnf >= 0 ? base + L->v[L->lnf].offset : NULL;
    mp->lnf_b = L->lnf >= 0 ? base + L->v[L->lnf + 1].offset : NULL;
    mp->layers = lps;
    for (int64_t i = 0; i < c->nl; i++) {
        const ptdp_param_spec *s = &L->v[L->layer0 + PTDP__LAYER_NPARAMS * i];
        int k = 0;
#define PTDP__LAYER_PTR(field, suffix, role_, ...)  \
    PTDP_ASSERT(s[k].role == role_);                \
    lps[i].field = base + s[k++].offset;
        PTDP__LAYER_PARAMS(PTDP__LAYER_PTR)
#undef PTDP__LAYER_PTR
    }
}

int ptdp_gpt_chunk_init(ptdp_gpt_chunk **out, const ptdp_chunk_params *p) {
    *out = NULL;
    ptdp_gpt_chunk *c = calloc(1, sizeof *c);
    if (!c) return ptdp_errorf(PTDP_ENOMEM, "out of host memory for the model");
    set_dims(c, p);
    c->training = !p->inference;
    ptdp__build_specs(&c->specs, p->cfg, p->layer_begin, p->layer_end, p->pre, p->post, c->t, c->tp,
                      p->numel_multiple);
    c->lp_storage = calloc((size_t)(2 * c->nl + 2), sizeof(ptdp_layer_ptrs));
    c->slots = calloc((size_t)p->slots, sizeof(slot_act));
    for (int k = 0; c->slots && k < p->slots; k++) {
        c->slots[k].layer = calloc((size_t)c->nl + 1, sizeof(layer_act));
        c->slots[k].x = calloc((size_t)c->nl + 1, sizeof(float *));
        if (!c->slots[k].layer || !c->slots[k].x) {
            free(c->slots);
            c->slots = NULL;
            break;
        }
    }
    c->group = calloc((size_t)c->nl + 1, sizeof(int64_t));
    c->group_end = calloc((size_t)c->nl + 1, sizeof(int64_t));
    c->ws_layer = calloc((size_t)c->nl + 1, sizeof(layer_act));
    c->ws_x = calloc((size_t)c->nl + 1, sizeof(float *));
    if (!c->group || !c->group_end || !c->ws_layer || !c->ws_x) {
        ptdp_gpt_chunk_free(c);
        return ptdp_errorf(PTDP_ENOMEM, "out of host memory for the model");
    }
    plan_recompute(c);
    c->layer_offset = calloc((size_t)c->nl + 1, sizeof(int64_t));
    if (!c->layer_offset) {
        ptdp_gpt_chunk_free(c);
        return ptdp_errorf(PTDP_ENOMEM, "out of host memory for the model");
    }
    for (int64_t i = 0; i < c->nl; i++)
        c->layer_offset[i] = c->specs.v[c->specs.layer0 + PTDP__LAYER_NPARAMS * i].offset;
    c->param_bytes = (p->inference ? 1 : 2) * sizeof(float) * (size_t)c->specs.total;
    c->params = c->ops->alloc(c->param_bytes);
    carver dry = {0, 1, NULL};
    plan_activations(c, &dry);
    c->act_bytes = dry.off;
    c->act_mem = c->ops->alloc(c->act_bytes);
    if (!c->lp_storage || !c->slots || !c->params || !c->act_mem) {
        char b1[32], b2[32];
        int rc = ptdp_errorf(PTDP_ENOMEM, "cannot allocate the model: %s of parameters+gradients and %s of "
                                          "activations; reduce --micro-batch-size or the model size",
                             ptdp_fmt_bytes((double)c->param_bytes, b1), ptdp_fmt_bytes((double)c->act_bytes, b2));
        ptdp_gpt_chunk_free(c);
        return rc;
    }
    c->grads = p->inference ? NULL : c->params + c->specs.total;
    carver cv = {0, 0, c->act_mem};
    plan_activations(c, &cv);
    PTDP_ASSERT(cv.off == c->act_bytes);
    layer_ptrs(c, c->params, &c->P, c->lp_storage);
    if (c->grads) layer_ptrs(c, c->grads, &c->G, c->lp_storage + c->nl + 1);
    *out = c;
    return PTDP_OK;
}

void ptdp_gpt_chunk_free(ptdp_gpt_chunk *c) {
    if (!c) return;
    if (c->params) c->ops->free(c->params);
    if (c->act_mem) c->ops->free(c->act_mem);
    for (int k = 0; c->slots && k < c->p.slots; k++) {
        free(c->slots[k].layer);
        free(c->slots[k].x);
    }
    free(c->slots);
    free(c->group);
    free(c->group_end);
    free(c->ws_layer);
    free(c->ws_x);
    free(c->layer_offset);
    free(c->lp_storage);
    free(c);
}

void ptdp_gpt_chunk_activation_split(const ptdp_gpt_chunk *c, size_t *slot_bytes, size_t *shared_bytes) {
    *slot_bytes = c->slot_bytes;
    *shared_bytes = c->shared_bytes;
}

const ptdp_param_spec *ptdp_gpt_chunk_specs(const ptdp_gpt_chunk *c, int *n) {
    *n = c->specs.n;
    return c->specs.v;
}
float *ptdp_gpt_chunk_params(ptdp_gpt_chunk *c) { return c->params; }
const ptdp_model_ptrs *ptdp_gpt_chunk_param_ptrs(const ptdp_gpt_chunk *c) { return &c->P; }
const ptdp_model_ptrs *ptdp_gpt_chunk_grad_ptrs(const ptdp_gpt_chunk *c) { return &c->G; }
float *ptdp_gpt_chunk_grads(ptdp_gpt_chunk *c) { return c->grads; }
int64_t ptdp_gpt_chunk_numel(const ptdp_gpt_chunk *c) { return c->specs.total; }
void ptdp_gpt_chunk_bytes(const ptdp_gpt_chunk *c, size_t *param_bytes, size_t *act_bytes) {
    *param_bytes = c->param_bytes;
    *act_bytes = c->act_bytes;
}

void ptdp_gpt_chunk_init_params(ptdp_gpt_chunk *c) {
    /* Drawn on the host, then uploaded: init is not on the hot path. */
    for (int i = 0; i < c->specs.n; i++) {
        const ptdp_param_spec *sp = &c->specs.v[i];
        float *host = malloc(sizeof(float) * (size_t)(sp->numel ? sp->numel : 1));
        PTDP_ASSERT_MSG(host, "out of memory while initialising parameters");
        ptdp__init_spec(sp, c->cfg, c->tp, host);
        c->ops->upload(c->params + sp->offset, host, sizeof(float) * (size_t)sp->numel);
        free(host);
    }
}

void ptdp_gpt_chunk_upload_params(ptdp_gpt_chunk *c, const float *host) {
    c->ops->upload(c->params, host, sizeof(float) * (size_t)c->specs.total);
}
void ptdp_gpt_chunk_download_params(ptdp_gpt_chunk *c, float *host) {
    c->ops->download(host, c->params, sizeof(float) * (size_t)c->specs.total);
}
void ptdp_gpt_chunk_download_grads(ptdp_gpt_chunk *c, float *host) {
    c->ops->download(host, c->grads, sizeof(float) * (size_t)c->specs.total);
}

void ptdp_gpt_chunk_set_training(ptdp_gpt_chunk *c, int training) { c->training = training; }

void ptdp_gpt_chunk_set_grad_hook(ptdp_gpt_chunk *c, ptdp_grad_hook fn, void *ctx) {
    c->hook = fn;
    c->hook_ctx = ctx;
}

void ptdp_gpt_chunk_zero_grads(ptdp_gpt_chunk *c) {
    PTDP_ASSERT_MSG(c->grads, "an inference chunk has no gradients");
    c->ops->zero(c->grads, c->specs.total);
}

/* ---- dropout streams ------------------------------------------------------- */

/* site: 0 embedding, 1 attention probs, 2 after attention, 3 after MLP.
 * Attention-probability dropout is inside the tensor-parallel region, so its
 * stream differs per TP rank; the others act on replicated activations and
 * must be identical on all TP ranks. */
static ptdp_dropout dropout_site(const ptdp_gpt_chunk *c, float p, int site, int64_t layer, const slot_act *sa) {
    ptdp_dropout d = {c->training ? p : 0.0f, {0, 0}, 0};
    if (d.p == 0.0f) return d;
    uint64_t seed = ptdp_hash_mix(c->cfg->seed, ptdp_hash_mix((uint64_t)sa->iteration, (uint64_t)sa->microbatch));
    uint64_t stream = ptdp_hash_mix((uint64_t)site, (uint64_t)(layer + 1));
    if (site == 1) stream = ptdp_hash_mix(stream, (uint64_t)c->tp + 1000);
    d.key.seed = seed;
    d.key.stream = stream;
    return d;
}

/* ---- forward -------------------------------------------------------------- */

/* y: where the layer's output goes (normally sa->x[i+1]). */
static void layer_fwd(ptdp_gpt_chunk *c, slot_act *sa, int64_t i, float *y) {
    const ptdp_ops *o = c->ops;
    const ptdp_layer_ptrs *W = &c->P.layers[i];
    layer_act *A = &sa->layer[i];
    const int64_t N = c->N, h = c->h, hl = c->hl, fl = c->fl, s = c->cfg->seq_length, b = c->p.micro_batch;
    const int64_t gl = c->p.layer_begin + i;
    const float *x = sa->x[i];

    o->layernorm_fwd(x, W->ln1_w, W->ln1_b, A->ln1, A->ln1_mean, A->ln1_rstd, N, h, c->cfg->ln_eps);
    o->gemm(0, 1, N, 3 * hl, h, 1.0f, A->ln1, h, W->qkv_w, h, 0.0f, A->qkv, 3 * hl);
    o->bias_add(A->qkv, W->qkv_b, N, 3 * hl);
    o->attention_fwd(A->qkv, A->ctx, A->probs, c->attn_scratch, s, b, c->al, c->hd,
                     dropout_site(c, c->cfg->attention_dropout, 1, gl, sa));
    o->gemm(0, 1, N, h, hl, 1.0f, A->ctx, hl, W->proj_w, hl, 0.0f, c->tmp, h);
    ptdp_allreduce_sum_f32(c->p.tp, c->tmp, N * h);
    o->bias_dropout_add_fwd(c->tmp, W->proj_b, x, A->xm, N, h, dropout_site(c, c->cfg->hidden_dropout, 2, gl, sa));

    o->layernorm_fwd(A->xm, W->ln2_w, W->ln2_b, A->ln2, A->ln2_mean, A->ln2_rstd, N, h, c->cfg->ln_eps);
    o->gemm(0, 1, N, fl, h, 1.0f, A->ln2, h, W->fc1_w, h, 0.0f, A->fc, fl);
    o->bias_gelu_fwd(A->fc, W->fc1_b, A->gl, N, fl);
    o->gemm(0, 1, N, h, fl, 1.0f, A->gl, fl, W->fc2_w, fl, 0.0f, c->tmp, h);
    ptdp_allreduce_sum_f32(c->p.tp, c->tmp, N * h);
    o->bias_dropout_add_fwd(c->tmp, W->fc2_b, A->xm, y, N, h, dropout_site(c, c->cfg->hidden_dropout, 3, gl, sa));
}

void ptdp_gpt_chunk_logits(ptdp_gpt_chunk *c, const int32_t *tokens, int64_t ld, float *logits) {
    PTDP_ASSERT(c->p.pre && c->p.post);
    const ptdp_ops *o = c->ops;
    slot_act *sa = &c->slots[0];
    const int64_t N = c->N, h = c->h, s = c->cfg->seq_length, b = c->p.micro_batch;
    sa->iteration = sa->microbatch = 0;
    for (int64_t bi = 0; bi < b; bi++) o->upload(sa->tokens + bi * (s + 1), tokens + bi * ld, sizeof(int32_t) * (size_t)s);
    o->embed_fwd(sa->tokens, s + 1, c->P.wte, c->v0, c->Vl, sa->x[0], s, b, h);
    ptdp_allreduce_sum_f32(c->p.tp, sa->x[0], N * h);
    o->pos_add_fwd(sa->x[0], c->P.wpe, s, b, h);
    for (int64_t i = 0; i < c->nl; i++) layer_fwd(c, sa, i, sa->x[i + 1]);
    float *xL = sa->x[c->nl];
    o->layernorm_fwd(xL, c->P.lnf_w, c->P.lnf_b, c->lnf_out, c->lnf_mean, c->lnf_rstd, N, h, c->cfg->ln_eps);
    o->gemm(0, 1, N, c->Vl, h, 1.0f, c->lnf_out, h, c->P.wte, h, 0.0f, c->logits, c->Vl);
    o->download(logits, c->logits, sizeof(float) * (size_t)(N * c->Vl));
}

/* Loss head and its backward: leaves d(out)/d(x_L) in sa->x[nl]. */
static void head_fwd_bwd(ptdp_gpt_chunk *c, slot_act *sa, float loss_scale, double *loss_sum) {
    const ptdp_ops *o = c->ops;
    const ptdp_gpt_config *cfg = c->cfg;
    const int64_t N = c->N, h = c->h, Vl = c->Vl, s = cfg->seq_length, b = c->p.micro_batch;
    float *xL = sa->x[c->nl];
    const int32_t *targets = sa->tokens + 1;

    o->layernorm_fwd(xL, c->P.lnf_w, c->P.lnf_b, c->lnf_out, c->lnf_mean, c->lnf_rstd, N, h, cfg->ln_eps);
    o->gemm(0, 1, N, Vl, h, 1.0f, c->lnf_out, h, c->P.wte, h, 0.0f, c->logits, Vl);
    o->xent_max(c->logits, c->gmax, N, Vl, c->v0, cfg->vocab);
    ptdp_allreduce_max_f32(c->p.tp, c->gmax, N);
    o->xent_sums(c->logits, c->gmax, targets, s + 1, c->sumexp, c->tgt, s, b, Vl, c->v0, cfg->vocab);
    ptdp_allreduce_sum_f32(c->p.tp, c->tgt, N);
    ptdp_allreduce_sum_f32(c->p.tp, c->sumexp, N);
    o->xent_loss(c->sumexp, c->gmax, c->tgt, c->loss, N);
    *loss_sum = o->sum(c->loss, N);
    if (!c->training) return;

    o->xent_bwd(c->logits, c->gmax, c->sumexp, targets, s + 1, s, b, Vl, c->v0, cfg->vocab, loss_scale);
    o->gemm(1, 0, Vl, h, N, 1.0f, c->logits, Vl, c->lnf_out, h, 1.0f, c->G.wte, h);
    o->gemm(0, 0, N, h, Vl, 1.0f, c->logits, Vl, c->P.wte, h, 0.0f, c->dtmp, h);
    ptdp_allreduce_sum_f32(c->p.tp, c->dtmp, N * h);
    o->zero(c->dres, N * h);
    o->layernorm_bwd(c->dtmp, xL, c->P.lnf_w, c->lnf_mean, c->lnf_rstd, c->dres, c->G.lnf_w, c->G.lnf_b, N, h);
    o->copy(xL, c->dres, N * h);
}

void ptdp_gpt_chunk_fwd(ptdp_gpt_chunk *c, int slot, const int32_t *tokens, const float *x_in, float *x_out,
                        float loss_scale, double *loss_sum, int64_t iteration, int64_t microbatch) {
    PTDP_ASSERT(slot >= 0 && slot < c->p.slots);
    const ptdp_ops *o = c->ops;
    slot_act *sa = &c->slots[slot];
    const int64_t N = c->N, h = c->h, s = c->cfg->seq_length, b = c->p.micro_batch;
    sa->iteration = iteration;
    sa->microbatch = microbatch;
    if (sa->tokens) {
        PTDP_ASSERT(tokens);
        o->upload(sa->tokens, tokens, sizeof(int32_t) * (size_t)(b * (s + 1)));
    }
    if (c->p.pre) {
        o->embed_fwd(sa->tokens, s + 1, c->P.wte, c->v0, c->Vl, sa->x[0], s, b, h);
        ptdp_allreduce_sum_f32(c->p.tp, sa->x[0], N * h);
        o->pos_add_fwd(sa->x[0], c->P.wpe, s, b, h);
        o->dropout_fwd(sa->x[0], N * h, dropout_site(c, c->cfg->hidden_dropout, 0, -1, sa));
    } else {
        o->copy(sa->x[0], x_in, N * h);
    }
    for (int64_t i = 0; i < c->nl; i++) layer_fwd(c, sa, i, sa->x[i + 1]);
    if (c->p.post)
        head_fwd_bwd(c, sa, loss_scale, loss_sum);
    else
        o->copy(x_out, sa->x[c->nl], N * h);
}

/* ---- backward ----------------------------------------------------------- */

static void layer_bwd(ptdp_gpt_chunk *c, slot_act *sa, int64_t i) {
    const ptdp_ops *o = c->ops;
    const ptdp_layer_ptrs *W = &c->P.layers[i], *G = &c->G.layers[i];
    layer_act *A = &sa->layer[i];
    const int64_t N = c->N, h = c->h, hl = c->hl, fl = c->fl, s = c->cfg->seq_length, b = c->p.micro_batch;
    const int64_t gl = c->p.layer_begin + i;
    const float *x = sa->x[i];
    float *dres = c->dres, *dtmp = c->dtmp;

    /* MLP: dres holds d(out) */
    o->bias_dropout_add_bwd(dres, dtmp, G->fc2_b, N, h, dropout_site(c, c->cfg->hidden_dropout, 3, gl, sa));
    o->gemm(1, 0, h, fl, N, 1.0f, dtmp, h, A->gl, fl, 1.0f, G->fc2_w, fl);
    o->gemm(0, 0, N, fl, h, 1.0f, dtmp, h, W->fc2_w, fl, 0.0f, c->dfc, fl);
    o->bias_gelu_bwd(c->dfc, A->fc, W->fc1_b, c->dfc, G->fc1_b, N, fl);
    o->gemm(1, 0, fl, h, N, 1.0f, c->dfc, fl, A->ln2, h, 1.0f, G->fc1_w, h);
    o->gemm(0, 0, N, h, fl, 1.0f, c->dfc, fl, W->fc1_w, h, 0.0f, dtmp, h);
    ptdp_allreduce_sum_f32(c->p.tp, dtmp, N * h);
    o->layernorm_bwd(dtmp, A->xm, W->ln2_w, A->ln2_mean, A->ln2_rstd, dres, G->ln2_w, G->ln2_b, N, h);

    /* attention: dres holds d(xm) */
    o->bias_dropout_add_bwd(dres, dtmp, G->proj_b, N, h, dropout_site(c, c->cfg->hidden_dropout, 2, gl, sa));
    o->gemm(1, 0, h, hl, N, 1.0f, dtmp, h, A->ctx, hl, 1.0f, G->proj_w, hl);
    o->gemm(0, 0, N, hl, h, 1.0f, dtmp, h, W->proj_w, hl, 0.0f, c->dctx, hl);
    o->attention_bwd(c->dctx, A->qkv, A->probs, c->dqkv, c->attn_scratch, s, b, c->al, c->hd,
                     dropout_site(c, c->cfg->attention_dropout, 1, gl, sa));
    o->bias_bwd(c->dqkv, G->qkv_b, N, 3 * hl);
    o->gemm(1, 0, 3 * hl, h, N, 1.0f, c->dqkv, 3 * hl, A->ln1, h, 1.0f, G->qkv_w, h);
    o->gemm(0, 0, N, h, 3 * hl, 1.0f, c->dqkv, 3 * hl, W->qkv_w, h, 0.0f, dtmp, h);
    ptdp_allreduce_sum_f32(c->p.tp, dtmp, N * h);
    o->layernorm_bwd(dtmp, x, W->ln1_w, A->ln1_mean, A->ln1_rstd, dres, G->ln1_w, G->ln1_b, N, h);
}

void ptdp_gpt_chunk_bwd(ptdp_gpt_chunk *c, int slot, const float *dy, float *dx) {
    PTDP_ASSERT(slot >= 0 && slot < c->p.slots);
    PTDP_ASSERT_MSG(c->grads, "backward on an inference chunk");
    const ptdp_ops *o = c->ops;
    slot_act *sa = &c->slots[slot];
    const int64_t N = c->N, h = c->h, s = c->cfg->seq_length, b = c->p.micro_batch;
    o->copy(c->dres, c->p.post ? sa->x[c->nl] : dy, N * h);
    for (int64_t i = c->nl - 1; i >= 0; i--) {
        /* entering a recompute group from its end: rerun its forward (same
         * dropout keys: the slot remembers iteration and micro-batch) */
        if (c->group[i] >= 0 && i == c->group_end[i] - 1)
            for (int64_t j = c->group[i]; j <= i; j++) layer_fwd(c, sa, j, j == i ? c->ws_out : sa->x[j + 1]);
        layer_bwd(c, sa, i);
        if (c->hook) c->hook(c->hook_ctx, c->layer_offset[i]);
    }
    if (c->p.pre) {
        o->dropout_bwd(c->dres, N * h, dropout_site(c, c->cfg->hidden_dropout, 0, -1, sa));
        o->pos_add_bwd(c->dres, c->G.wpe, s, b, h);
        o->embed_bwd(sa->tokens, s + 1, c->dres, c->G.wte, c->v0, c->Vl, s, b, h);
    } else {
        o->copy(dx, c->dres, N * h);
    }
    if (c->hook) c->hook(c->hook_ctx, 0);
}
