/* chunk.c - a model chunk's life: its memory plan (which layers are
 * recomputed, every activation buffer carved from one allocation per slot
 * and one shared workspace, sized from the configuration before anything is
 * allocated), the parameter/gradient buffer and the pointers into it, and
 * the accessors of model.h. Not here: the computation (layer.c, head.c,
 * gpt.c). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/model_internal.h"

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

static void carve_layer(carver *cv, ptdp__layer_act *la, int64_t N, int64_t h, int64_t hl, int64_t fl, int64_t b,
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
        ptdp__slot_act *sa = cv->dry ? NULL : &c->slots[k];
        int32_t *tok = (p->pre || p->post) ? carve(cv, sizeof(int32_t) * (size_t)(b * (s + 1))) : NULL;
        if (sa) sa->tokens = tok;
        for (int64_t i = 0; i <= c->nl; i++) {
            float *x = x_stored(c, i) ? CARVE_F(cv, N * h) : NULL;
            if (sa) sa->x[i] = x;
        }
        for (int64_t i = 0; i < c->nl; i++) {
            if (c->group[i] >= 0) continue; /* recomputed: workspace */
            ptdp__layer_act la;
            carve_layer(cv, &la, N, h, hl, fl, b, c->al, s);
            if (sa) sa->layer[i] = la;
        }
        if (k == 0) c->slot_bytes = cv->off - before;
    }
    before = cv->off;
    for (int64_t g = 0; g < c->max_group; g++) {
        ptdp__layer_act la;
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

ptdp_chunk_params ptdp_chunk_default_params(void) {
    ptdp_chunk_params p = {.cfg = NULL,
                           .layer_begin = 0,
                           .layer_end = 0,
                           .pre = 0,
                           .post = 0,
                           .micro_batch = 1,
                           .slots = 1,
                           .ops = ptdp_cpu_ops(),
                           .tp = NULL,
                           .recompute_method = PTDP_RECOMPUTE_NONE,
                           .recompute_num_layers = 0,
                           .numel_multiple = 0,
                           .inference = 0};
    return p;
}

size_t ptdp_gpt_activation_bytes(const ptdp_chunk_params *p) {
    ptdp_gpt_chunk c;
    memset(&c, 0, sizeof c);
    set_dims(&c, p);
    c.group = calloc((size_t)c.nl + 1, sizeof(int64_t));
    c.group_end = calloc((size_t)c.nl + 1, sizeof(int64_t));
    PTDP_ASSERT(c.group && c.group_end);
    plan_recompute(&c);
    carver cv = {.off = 0, .dry = 1, .base = NULL};
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
    c->slots = calloc((size_t)p->slots, sizeof(ptdp__slot_act));
    for (int k = 0; c->slots && k < p->slots; k++) {
        c->slots[k].layer = calloc((size_t)c->nl + 1, sizeof(ptdp__layer_act));
        c->slots[k].x = calloc((size_t)c->nl + 1, sizeof(float *));
        if (!c->slots[k].layer || !c->slots[k].x) {
            free(c->slots);
            c->slots = NULL;
            break;
        }
    }
    c->group = calloc((size_t)c->nl + 1, sizeof(int64_t));
    c->group_end = calloc((size_t)c->nl + 1, sizeof(int64_t));
    c->ws_layer = calloc((size_t)c->nl + 1, sizeof(ptdp__layer_act));
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
    carver dry = {.off = 0, .dry = 1, .base = NULL};
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
    carver cv = {.off = 0, .dry = 0, .base = c->act_mem};
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

const ptdp_ops *ptdp_gpt_chunk_ops(const ptdp_gpt_chunk *c) { return c->ops; }
