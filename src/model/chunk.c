/* chunk.c - a model chunk's life: its memory plan (which layers are
 * recomputed; weights, gradients, every activation buffer per micro-batch
 * slot and the shared workspace carved from the rank's per-category arenas,
 * sized from the configuration before anything is allocated), the pointers
 * into the parameter/gradient buffers, and the accessors of model.h. Not
 * here: the computation (layer.c, head.c, gpt.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/model_internal.h"

/* ---- memory plan ----------------------------------------------------------
 * Every buffer is carved from the rank's per-category arenas (base/arena):
 * weights, gradients, activations (one run of pieces per micro-batch slot)
 * and workspace. carve_chunk runs twice with the same code: over plan arenas
 * it only sums the sizes, over block arenas it hands out the pointers. */

#define CARVE_F(ar, n) ((float *)ptdp_arena_carve((ar), sizeof(float) * (size_t)(n)))

/* saved: floats attention keeps for its backward (the backend's number).
 * Ns: rows of the residual stream's tensors (the sequence shard with
 * sequence parallelism), N: rows of the tensor-parallel region's; mf: the
 * floats of fc and of gl, N fl values in the backend's MLP storage
 * (ptdp_mlp_floats). */
static void carve_layer(const ptdp_gpt_chunk *c, ptdp_arena *cv, ptdp__layer_act *la, int64_t mf,
                        int64_t saved) {
    const int64_t N = c->N, Ns = c->Ns, h = c->h;
    la->ln1 = CARVE_F(cv, Ns * h);
    la->ln1_mean = CARVE_F(cv, Ns);
    la->ln1_rstd = CARVE_F(cv, Ns);
    la->qkv = CARVE_F(cv, N * c->ql);
    la->attn_saved = saved ? CARVE_F(cv, saved) : NULL; /* 0: selective, set from ws */
    la->ctx = CARVE_F(cv, N * c->hl);
    la->xm = CARVE_F(cv, Ns * h);
    la->ln2 = CARVE_F(cv, Ns * h);
    la->ln2_mean = CARVE_F(cv, Ns);
    la->ln2_rstd = CARVE_F(cv, Ns);
    /* SwiGLU: fc holds gate and up (2 fl), gl their product (fl), fp32 */
    la->fc = CARVE_F(cv, c->cfg->swiglu ? N * c->fc_cols : mf);
    la->gl = CARVE_F(cv, c->cfg->swiglu ? N * c->fl : mf);
}

/* Which layers are recomputed, in which groups (Megatron's semantics):
 * uniform: consecutive groups of n layers, all recomputed; block: the first n
 * layers of the chunk, each on its own; none and selective: every layer stored
 * (selective drops only core attention's saved state, carve_activations). */
static void plan_recompute(ptdp_gpt_chunk *c) {
    const int method = c->job->recompute;
    const int64_t n = c->job->recompute_num_layers < 1 ? 1 : c->job->recompute_num_layers;
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

static void carve_activations(ptdp_gpt_chunk *c, ptdp_arena *act, ptdp_arena *ws) {
    const ptdp_chunk_params *p = &c->p;
    const int64_t N = c->N, Ns = c->Ns, h = c->h, hl = c->hl, fl = c->fl, s = c->cfg->seq_length,
                  b = c->job->micro_batch;
    const int64_t saved = c->be->attention_saved_floats(c->be, s, b, c->al),
                  mf = ptdp_mlp_floats(c->be, N * fl); /* fc, gl, dfc */
    const int selective = c->job->recompute == PTDP_RECOMPUTE_SELECTIVE;
    const int64_t dfc_floats = c->cfg->swiglu ? N * c->fc_cols : mf;
    size_t before = act->used;
    for (int k = 0; k < p->slots; k++) {
        ptdp__slot_act *sa = &c->slots[k];
        sa->tokens = (p->pre || p->post)
                         ? ptdp_arena_carve(act, sizeof(int32_t) * (size_t)(b * (s + 1)))
                         : NULL;
        for (int64_t i = 0; i <= c->nl; i++)
            sa->x[i] = x_stored(c, i) ? CARVE_F(act, Ns * h) : NULL;
        for (int64_t i = 0; i < c->nl; i++) {
            if (c->group[i] >= 0) continue; /* recomputed: workspace */
            carve_layer(c, act, &sa->layer[i], mf, selective ? 0 : saved);
            if (!p->split_backward) continue;
            /* kept from B to W: the weight GEMMs' output gradients */
            ptdp__layer_wgrad *wg = &sa->wg[i];
            wg->dmlp_out = CARVE_F(act, N * h);
            wg->dfc = CARVE_F(act, dfc_floats);
            /* xm is dead by then (model_internal.h), but with sequence
             * parallelism it is a shard and the gradient is [s, b, h] */
            wg->dattn_out = c->sp ? CARVE_F(act, N * h) : sa->layer[i].xm;
            wg->dqkv = CARVE_F(act, N * c->ql);
        }
        if (k == 0) c->slot_bytes = act->used - before;
    }
    before = ws->used;
    for (int64_t g = 0; g < c->max_group; g++) {
        carve_layer(c, ws, &c->ws_layer[g], mf, saved);
        c->ws_x[g] = CARVE_F(ws, Ns * h);
    }
    c->ws_out = c->max_group ? CARVE_F(ws, Ns * h) : NULL;
    c->tmp = CARVE_F(ws, N * h);
    c->dres = CARVE_F(ws, Ns * h);
    c->dtmp = CARVE_F(ws, Ns * h);
    c->gath = c->sp ? CARVE_F(ws, N * h) : NULL;
    c->dctx = CARVE_F(ws, N * hl);
    c->dqkv = CARVE_F(ws, N * c->ql);
    c->dfc = CARVE_F(ws, dfc_floats);
    /* with sp a layer's xm is a shard: the attention output's gradient, kept
     * from B to W, needs [s, b, h] of its own */
    c->wg_ws = (ptdp__layer_wgrad){.dmlp_out = c->tmp,
                                   .dfc = c->dfc,
                                   .dattn_out = c->sp ? CARVE_F(ws, N * h) : NULL,
                                   .dqkv = c->dqkv};
    c->attn_scratch = CARVE_F(ws, c->be->attention_scratch_floats(c->be, s));
    /* the Llama family's: the rotary table, the stand-ins for absent biases,
     * SwiGLU's gradient of gl */
    c->rope_table = c->rd ? CARVE_F(ws, ptdp_rope_table_floats(s, c->rd)) : NULL;
    const int64_t nb = h > fl ? h : fl;
    c->zbias = c->cfg->no_bias ? CARVE_F(ws, nb) : NULL;
    c->jbias = c->cfg->no_bias ? CARVE_F(ws, nb) : NULL;
    c->dgl = c->cfg->swiglu ? CARVE_F(ws, N * fl) : NULL;
    /* selective: the attention state of the one layer whose backward runs */
    float *ws_saved = selective ? CARVE_F(ws, saved) : NULL;
    if (p->post) {
        c->lnf_out = CARVE_F(ws, Ns * h);
        c->lnf_mean = CARVE_F(ws, Ns);
        c->lnf_rstd = CARVE_F(ws, Ns);
        c->logits = CARVE_F(ws, N * c->Vl);
        c->gmax = CARVE_F(ws, N);
        c->sumexp = CARVE_F(ws, N);
        c->tgt = CARVE_F(ws, N);
        c->loss = CARVE_F(ws, N);
    }
    c->shared_bytes = ws->used - before;
    /* slots point their recomputed layers and inner inputs at the workspace */
    for (int k = 0; k < p->slots; k++)
        for (int64_t i = 0; i < c->nl; i++)
            if (selective) {
                c->slots[k].layer[i].attn_saved = ws_saved;
            } else if (c->group[i] >= 0) {
                c->slots[k].layer[i] = c->ws_layer[i - c->group[i]];
                if (!x_stored(c, i)) c->slots[k].x[i] = c->ws_x[i - c->group[i]];
            }
}

static void layer_ptrs(ptdp_gpt_chunk *c, float *base, ptdp_model_ptrs *mp, ptdp_layer_ptrs *lps) {
    const ptdp__spec_list *L = &c->specs;
    mp->wte = L->wte >= 0 ? base + L->v[L->wte].offset : NULL;
    mp->wpe = L->wpe >= 0 ? base + L->v[L->wpe].offset : NULL;
    mp->lnf_w = L->lnf >= 0 ? base + L->v[L->lnf].offset : NULL;
    mp->lnf_b = L->lnf >= 0 && !c->cfg->rmsnorm ? base + L->v[L->lnf + 1].offset : NULL;
    mp->out_w = L->out >= 0 ? base + L->v[L->out].offset : c->p.post ? mp->wte : NULL;
    mp->layers = lps;
    const ptdp__layer_dims D = ptdp__layer_dims_of(c->cfg);
    for (int64_t i = 0; i < c->nl; i++) {
        const ptdp_param_spec *s = &L->v[L->layer0 + L->per_layer * i];
        int k = 0;
#define PTDP__LAYER_PTR(field, suffix, role_, ndim, d0, d1, split, init, present) \
    lps[i].field = NULL;                                                          \
    if (present) {                                                                \
        PTDP_ASSERT(s[k].role == role_);                                          \
        lps[i].field = base + s[k++].offset;                                      \
    }
        PTDP__LAYER_PARAMS(PTDP__LAYER_PTR)
#undef PTDP__LAYER_PTR
    }
}

/* Weights [total], gradients [total] (training only), activations, workspace. */
static void carve_chunk(ptdp_gpt_chunk *c, ptdp_mem *m) {
    const size_t bytes = sizeof(float) * (size_t)c->specs.total;
    c->params = ptdp_arena_carve(&m->cat[PTDP_MEM_WEIGHTS], bytes);
    c->grads = !c->p.inference ? ptdp_arena_carve(&m->cat[PTDP_MEM_GRADIENTS], bytes) : NULL;
    carve_activations(c, &m->cat[PTDP_MEM_ACTIVATIONS], &m->cat[PTDP_MEM_WORKSPACE]);
    c->param_bytes = (c->p.inference ? 1 : 2) * ptdp_arena_need(bytes);
    c->act_bytes = c->slot_bytes * (size_t)c->p.slots + c->shared_bytes;
    if (c->params) {
        layer_ptrs(c, c->params, &c->P, c->lp_storage);
        /* GEMMs on these may reuse converted copies (kernels.h's weights contract) */
        ptdp_backend_weights_register(c->be, c->params, c->specs.total);
    }
    if (c->grads) layer_ptrs(c, c->grads, &c->G, c->lp_storage + c->nl + 1);
    if (c->params) { /* real memory: the tables the ops read */
        if (c->rope_table)
            ptdp_rope_table_init(c->be, c->rope_table, c->cfg->seq_length, c->rd,
                                 c->cfg->rotary_base);
        if (c->zbias) c->be->zero(c->be, c->zbias, c->h > c->fl ? c->h : c->fl);
    }
}

static void set_dims(ptdp_gpt_chunk *c, const ptdp_chunk_params *p) {
    const ptdp_gpt_config *cfg = &p->job->model;
    c->p = *p;
    c->job = p->job;
    c->cfg = cfg;
    c->be = p->be;
    c->t = p->tp ? p->tp->size : 1;
    c->tp = p->tp ? p->tp->rank : 0;
    c->nl = p->layer_end - p->layer_begin;
    c->N = cfg->seq_length * p->job->micro_batch;
    c->h = cfg->hidden;
    c->hl = cfg->hidden / c->t;
    c->fl = cfg->ffn_hidden / c->t;
    c->al = cfg->heads / c->t;
    c->hd = cfg->hidden / cfg->heads;
    c->kvl = ptdp_gpt_groups(cfg) / c->t;
    c->ql = (c->al + 2 * c->kvl) * c->hd;
    c->rd = ptdp_gpt_rotary_dims(cfg);
    c->fc_cols = cfg->swiglu ? 2 * c->fl : c->fl;
    c->Vl = cfg->vocab_padded / c->t;
    c->v0 = c->tp * c->Vl;
    /* Megatron turns sequence parallelism off when t = 1: nothing to split */
    c->sp = p->job->sequence_parallel && c->t > 1;
    PTDP_ASSERT_MSG(!c->sp || cfg->seq_length % c->t == 0,
                    "sequence parallelism needs s divisible by t (the CLI checks it)");
    c->Ns = c->sp ? c->N / c->t : c->N;
    c->s0 = c->sp ? (int64_t)c->tp * (cfg->seq_length / c->t) : 0;
}

ptdp_chunk_params ptdp_chunk_default_params(void) {
    ptdp_chunk_params p = {.job = NULL,
                           .layer_begin = 0,
                           .layer_end = 0,
                           .pre = 0,
                           .post = 0,
                           .slots = 1,
                           .be = NULL,
                           .tp = NULL,
                           .numel_multiple = 0,
                           .inference = 0,
                           .split_backward = 0,
                           .mem = NULL};
    return p;
}

/* The model must be whole before anything is sized from it: a job that
 * skipped ptdp_gpt_config_finish (or ptdp_job_finish) has no padded
 * vocabulary and would fail deep inside a kernel. */
static int check_job(const ptdp_chunk_params *p) {
    if (!p->job)
        return ptdp_errorf(PTDP_EINVAL, "a model chunk needs its job (ptdp_chunk_params.job)");
    const ptdp_gpt_config *m = &p->job->model;
    const int t = p->tp ? p->tp->size : 1;
    ptdp_gpt_config whole = *m;
    int rc = ptdp_gpt_config_finish(&whole, 1, t);
    if (rc) return rc;
    if (m->vocab_padded < m->vocab || m->vocab_padded % t || m->ffn_hidden != whole.ffn_hidden ||
        m->max_positions != whole.max_positions)
        return ptdp_errorf(PTDP_EINVAL,
                           "the model's derived sizes are not set (vocab_padded %lld for a "
                           "vocabulary of %lld, ffn_hidden %lld, max_positions %lld): finish the "
                           "model with ptdp_gpt_config_finish (or the job with ptdp_job_finish) "
                           "before building a chunk",
                           (long long)m->vocab_padded, (long long)m->vocab,
                           (long long)m->ffn_hidden, (long long)m->max_positions);
    if (p->job->micro_batch < 1)
        return ptdp_errorf(PTDP_EINVAL, "--micro-batch-size must be at least 1, got %lld",
                           (long long)p->job->micro_batch);
    if (p->layer_begin < 0 || p->layer_end < p->layer_begin || p->layer_end > m->num_layers ||
        p->slots < 1)
        return ptdp_errorf(PTDP_EINVAL,
                           "a model chunk of layers [%lld, %lld) of %lld with %d slots: not a "
                           "range of the model's layers, or no slot",
                           (long long)p->layer_begin, (long long)p->layer_end,
                           (long long)m->num_layers, p->slots);
    return PTDP_OK;
}

int ptdp_gpt_chunk_init(ptdp_gpt_chunk **out, const ptdp_chunk_params *p) {
    *out = NULL;
    const int crc = check_job(p);
    if (crc) return crc;
    ptdp_gpt_chunk *c = calloc(1, sizeof *c);
    if (!c) return ptdp_errorf(PTDP_ENOMEM, "out of host memory for the model");
    set_dims(c, p);
    if (!c->be) { /* the default: a CPU backend of its own */
        const ptdp_backend_params bp = ptdp_backend_default_params();
        int rc = ptdp_backend_open(&c->be, &bp);
        if (rc != PTDP_OK) {
            free(c);
            return rc;
        }
        c->own_be = 1;
        c->p.be = c->be;
    }
    if (!c->p.tp) { /* no tensor group given: a group of one (its collectives are no-ops) */
        ptdp_comm_init_single(&c->solo);
        c->p.tp = &c->solo.tensor;
    }
    c->training = !p->inference;
    /* W reads the layer's stashed activations after B; a recomputed layer's
     * live in the workspace, which the next micro-batch reuses */
    PTDP_ASSERT_MSG(!p->split_backward || ((p->job->recompute == PTDP_RECOMPUTE_NONE ||
                                            p->job->recompute == PTDP_RECOMPUTE_SELECTIVE) &&
                                           !p->inference),
                    "a split backward needs stored activations and gradients");
    ptdp__build_specs(&c->specs, c->cfg, p->layer_begin, p->layer_end, p->pre, p->post, c->t, c->tp,
                      p->numel_multiple);
    c->lp_storage = calloc((size_t)(2 * c->nl + 2), sizeof(ptdp_layer_ptrs));
    c->slots = calloc((size_t)p->slots, sizeof(ptdp__slot_act));
    for (int k = 0; c->slots && k < p->slots; k++) {
        c->slots[k].layer = calloc((size_t)c->nl + 1, sizeof(ptdp__layer_act));
        c->slots[k].x = calloc((size_t)c->nl + 1, sizeof(float *));
        c->slots[k].wg = calloc((size_t)c->nl + 1, sizeof(ptdp__layer_wgrad));
        if (!c->slots[k].layer || !c->slots[k].x || !c->slots[k].wg) {
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
        c->layer_offset[i] = c->specs.v[c->specs.layer0 + c->specs.per_layer * i].offset;
    if (!c->lp_storage || !c->slots) {
        ptdp_gpt_chunk_free(c);
        return ptdp_errorf(PTDP_ENOMEM, "out of host memory for the model");
    }
    if (p->mem) {
        carve_chunk(c, p->mem); /* the caller's plan; it binds the chunk later */
    } else {
        ptdp_mem_plan(&c->own);
        carve_chunk(c, &c->own);
        int rc = ptdp_backend_mem_alloc(c->be, &c->own);
        if (rc != PTDP_OK) {
            char b1[32], b2[32];
            rc = ptdp_errorf(PTDP_ENOMEM,
                             "cannot allocate the model: %s of parameters+gradients and %s of "
                             "activations; reduce --micro-batch-size or the model size",
                             ptdp_fmt_bytes((double)c->param_bytes, b1),
                             ptdp_fmt_bytes((double)c->act_bytes, b2));
            ptdp_gpt_chunk_free(c);
            return rc;
        }
        carve_chunk(c, &c->own);
        PTDP_ASSERT(ptdp_mem_exact(&c->own));
    }
    *out = c;
    return PTDP_OK;
}

void ptdp_gpt_chunk_bind(ptdp_gpt_chunk *c, ptdp_mem *m) { carve_chunk(c, m); }

void ptdp_gpt_chunk_free(ptdp_gpt_chunk *c) {
    if (!c) return;
    if (c->params) ptdp_backend_weights_register(c->be, c->params, 0);
    ptdp_backend_mem_free(c->be, &c->own);
    if (c->own_be) ptdp_backend_close(c->be);
    for (int k = 0; c->slots && k < c->p.slots; k++) {
        free(c->slots[k].layer);
        free(c->slots[k].x);
        free(c->slots[k].wg);
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

void ptdp_gpt_chunk_activation_split(const ptdp_gpt_chunk *c, size_t *slot_bytes,
                                     size_t *shared_bytes) {
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
        c->be->upload(c->be, c->params + sp->offset, host, sizeof(float) * (size_t)sp->numel);
        free(host);
    }
}

void ptdp_gpt_chunk_upload_params(ptdp_gpt_chunk *c, const float *host) {
    c->be->upload(c->be, c->params, host, sizeof(float) * (size_t)c->specs.total);
}
void ptdp_gpt_chunk_download_params(ptdp_gpt_chunk *c, float *host) {
    c->be->download(c->be, host, c->params, sizeof(float) * (size_t)c->specs.total);
}
void ptdp_gpt_chunk_download_grads(ptdp_gpt_chunk *c, float *host) {
    c->be->download(c->be, host, c->grads, sizeof(float) * (size_t)c->specs.total);
}

void ptdp_gpt_chunk_set_training(ptdp_gpt_chunk *c, int training) { c->training = training; }

void ptdp_gpt_chunk_set_grad_hook(ptdp_gpt_chunk *c, ptdp_grad_hook fn, void *ctx) {
    c->hook = fn;
    c->hook_ctx = ctx;
}

void ptdp_gpt_chunk_zero_grads(ptdp_gpt_chunk *c) {
    PTDP_ASSERT_MSG(c->grads, "an inference chunk has no gradients");
    c->be->zero(c->be, c->grads, c->specs.total);
}

ptdp_backend *ptdp_gpt_chunk_backend(const ptdp_gpt_chunk *c) { return c->be; }
int ptdp_gpt_chunk_is_first(const ptdp_gpt_chunk *c) { return c->p.pre; }
