/* spec.c - GPT parameter specs: global names and shapes, tensor-parallel
 * split rules, Megatron's initialisation drawn element by element from the
 * counter-based RNG, and scatter/gather between a full tensor and a shard.
 * Not here: the forward/backward (gpt.c, layer.c, head.c) or file formats (ckpt/). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "model/model_internal.h"

int ptdp_gpt_backend_needs(const ptdp_gpt_config *cfg) {
    return (cfg->rmsnorm ? PTDP_NEED_RMSNORM : 0) | (cfg->swiglu ? PTDP_NEED_SWIGLU : 0) |
           (cfg->rope ? PTDP_NEED_ROPE : 0) |
           (ptdp_gpt_groups(cfg) != cfg->heads ? PTDP_NEED_GQA : 0);
}

static ptdp_param_spec *add(ptdp__spec_list *L, const char *name, ptdp_param_role role, int ndim,
                            int64_t d0, int64_t d1, ptdp_split split, ptdp_init init, int t) {
    PTDP_ASSERT(L->n < PTDP__MAX_SPECS);
    ptdp_param_spec *s = &L->v[L->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ndim = ndim;
    s->gshape[0] = d0;
    s->gshape[1] = ndim == 2 ? d1 : 1;
    s->lshape[0] = s->gshape[0];
    s->lshape[1] = s->gshape[1];
    if (split == PTDP_SPLIT_DIM0) s->lshape[0] /= t;
    if (split == PTDP_SPLIT_DIM1) s->lshape[1] /= t;
    s->role = role;
    s->split = split;
    s->init = init;
    s->numel = s->lshape[0] * s->lshape[1];
    s->valid_rows = s->lshape[0];
    s->offset = L->total;
    L->total += (s->numel + 15) / 16 * 16; /* keep every tensor 64-byte aligned */
    return s;
}

ptdp__layer_dims ptdp__layer_dims_of(const ptdp_gpt_config *cfg) {
    return (ptdp__layer_dims){
        .h = cfg->hidden,
        .q = (cfg->heads + 2 * ptdp_gpt_groups(cfg)) * (cfg->hidden / cfg->heads),
        .f = cfg->ffn_hidden,
        .bias = !cfg->no_bias,
        .lnb = !cfg->rmsnorm,
        .glu = cfg->swiglu,
    };
}

int ptdp__layer_nparams(const ptdp_gpt_config *cfg) {
    const ptdp__layer_dims D = ptdp__layer_dims_of(cfg);
    int n = 0;
#define PTDP__COUNT_PARAM(field, suffix, role, ndim, d0, d1, split, init, present) n += !!(present);
    PTDP__LAYER_PARAMS(PTDP__COUNT_PARAM)
#undef PTDP__COUNT_PARAM
    return n;
}

/* The output layer's rows hold the padded vocabulary: rows past V are zero. */
static void set_vocab_rows(ptdp_param_spec *s, const ptdp_gpt_config *cfg, int tp) {
    int64_t v0 = tp * s->lshape[0], valid = cfg->vocab - v0;
    s->valid_rows = valid < 0 ? 0 : valid > s->lshape[0] ? s->lshape[0] : valid;
}

void ptdp__build_specs(ptdp__spec_list *L, const ptdp_gpt_config *cfg, int64_t l0, int64_t l1,
                       int pre, int post, int t, int tp, int64_t numel_multiple) {
    const ptdp__layer_dims D = ptdp__layer_dims_of(cfg);
    const int64_t h = cfg->hidden;
    char nm[96];
    L->n = 0;
    L->total = 0;
    L->wte = L->wpe = L->lnf = L->out = -1;
    L->layer0 = 0;
    L->per_layer = ptdp__layer_nparams(cfg);
    /* untied: the first stage's embedding, the last stage's output layer */
    if (pre || (post && !cfg->untie)) {
        L->wte = L->n;
        ptdp_param_spec *s = add(L, "embedding.word_embeddings.weight", PTDP_ROLE_EMBEDDING, 2,
                                 cfg->vocab_padded, h, PTDP_SPLIT_DIM0, PTDP_INIT_NORMAL, t);
        set_vocab_rows(s, cfg, tp);
    }
    if (pre && !cfg->rope) {
        L->wpe = L->n;
        add(L, "embedding.position_embeddings.weight", PTDP_ROLE_POSITION, 2, cfg->max_positions, h,
            PTDP_SPLIT_NONE, PTDP_INIT_NORMAL, t);
    }
    L->layer0 = L->n;
    for (int64_t i = l0; i < l1; i++) {
#define PTDP__ADD_LAYER_PARAM(field, suffix, role, ndim, d0, d1, split, init, present) \
    if (present) {                                                                     \
        snprintf(nm, sizeof nm, "layers.%lld.%s", (long long)i, suffix);               \
        add(L, nm, role, ndim, d0, d1, split, init, t);                                \
    }
        PTDP__LAYER_PARAMS(PTDP__ADD_LAYER_PARAM)
#undef PTDP__ADD_LAYER_PARAM
    }
    if (post) {
        L->lnf = L->n;
        add(L, "final_layernorm.weight", PTDP_ROLE_LAYERNORM, 1, h, 0, PTDP_SPLIT_NONE,
            PTDP_INIT_ONE, t);
        if (!cfg->rmsnorm)
            add(L, "final_layernorm.bias", PTDP_ROLE_LAYERNORM, 1, h, 0, PTDP_SPLIT_NONE,
                PTDP_INIT_ZERO, t);
        if (cfg->untie) { /* Megatron's output_layer: a column-parallel linear layer */
            L->out = L->n;
            set_vocab_rows(add(L, "output_layer.weight", PTDP_ROLE_WEIGHT, 2, cfg->vocab_padded, h,
                               PTDP_SPLIT_DIM0, PTDP_INIT_NORMAL, t),
                           cfg, tp);
        }
    }
    /* zero padding at the end, so data-parallel shards divide evenly */
    if (numel_multiple > 1)
        L->total = (L->total + numel_multiple - 1) / numel_multiple * numel_multiple;
}

/* Global flat index of local element (r, c) of the shard on TP rank tp. */
static int64_t global_index(const ptdp_param_spec *sp, int tp, int64_t r, int64_t c) {
    int64_t gr = r, gc = c;
    if (sp->split == PTDP_SPLIT_DIM0) gr += (int64_t)tp * sp->lshape[0];
    if (sp->split == PTDP_SPLIT_DIM1) gc += (int64_t)tp * sp->lshape[1];
    return gr * sp->gshape[1] + gc;
}

void ptdp__init_spec(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, int tp, float *dst) {
    float std = cfg->init_std;
    if (sp->init == PTDP_INIT_SCALED) std = cfg->init_std / sqrtf(2.0f * (float)cfg->num_layers);
    ptdp_rng_key key = ptdp_rng_key_make(cfg->seed, sp->name);
    const int64_t rows = sp->lshape[0], cols = sp->lshape[1];
    const int normal = sp->init == PTDP_INIT_NORMAL || sp->init == PTDP_INIT_SCALED;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float *row = dst + r * cols;
        if (r < sp->valid_rows && normal) {
            /* a row's global indices are consecutive (global_index) */
            ptdp_rng_normal_n(key, (uint64_t)global_index(sp, tp, r, 0), cols, std, row);
        } else {
            const float v = r < sp->valid_rows && sp->init == PTDP_INIT_ONE ? 1.0f : 0.0f;
            for (int64_t c = 0; c < cols; c++) row[c] = v;
        }
    }
}

void ptdp_spec_scatter(const ptdp_param_spec *sp, int tp, const float *global, float *local) {
    for (int64_t r = 0; r < sp->lshape[0]; r++)
        for (int64_t c = 0; c < sp->lshape[1]; c++)
            local[r * sp->lshape[1] + c] = global[global_index(sp, tp, r, c)];
}

void ptdp_spec_gather(const ptdp_param_spec *sp, int tp, const float *local, float *global) {
    for (int64_t r = 0; r < sp->lshape[0]; r++)
        for (int64_t c = 0; c < sp->lshape[1]; c++)
            global[global_index(sp, tp, r, c)] = local[r * sp->lshape[1] + c];
}

double ptdp_gpt_flops_per_iter(const ptdp_gpt_config *cfg, int64_t B, int recompute) {
    if (ptdp_gpt_is_llama(cfg)) {
        /* the paper's count term by term: per token and layer the forward's
         * GEMMs (QKV of (a + 2g) hd rows, the projection, the MLP's two or,
         * SwiGLU, three of ffn) and 4 s h of attention; x3 with the backward,
         * x4 with full recomputation, + 4 s h for selective's rerun; the
         * logits 6 s h V */
        const double s = (double)cfg->seq_length, l = (double)cfg->num_layers,
                     h = (double)cfg->hidden, V = (double)cfg->vocab_padded,
                     q = (double)((cfg->heads + 2 * ptdp_gpt_groups(cfg)) *
                                  (cfg->hidden / cfg->heads)),
                     f = (double)cfg->ffn_hidden * (cfg->swiglu ? 3.0 : 2.0);
        const int full = recompute == PTDP_RECOMPUTE_UNIFORM || recompute == PTDP_RECOMPUTE_BLOCK;
        const double fwd = 2 * h * q + 2 * h * h + 2 * h * f + 4 * s * h;
        const double layer =
            (full ? 4.0 : 3.0) * fwd + (recompute == PTDP_RECOMPUTE_SELECTIVE ? 4 * s * h : 0.0);
        return (double)B * s * (l * layer + 6.0 * h * V);
    }
    return ptdp_model_flops((double)B, (double)cfg->seq_length, (double)cfg->num_layers,
                            (double)cfg->hidden, (double)cfg->vocab_padded, recompute);
}

double ptdp_gpt_megatron_flops(const ptdp_gpt_config *cfg, int64_t B) {
    const double s = (double)cfg->seq_length, l = (double)cfg->num_layers, h = (double)cfg->hidden;
    const double ffn = (double)cfg->ffn_hidden, V = (double)cfg->vocab_padded;
    const double groups = (double)ptdp_gpt_groups(cfg) / (double)cfg->heads;
    /* 12 = 3 (forward, weight and input gradients) x 2 (flops per multiply-add)
     * x 2 (the GEMMs come in pairs); attention: Q and K|V projections (1 + g/a
     * query groups per head) and the causal half of the s x s products; SwiGLU's
     * MLP has three GEMMs of ffn instead of two */
    const double attention = 1.0 + groups + s / h / 2.0, mlp = ffn / h * (cfg->swiglu ? 1.5 : 1.0),
                 logit = V / (2.0 * l * h);
    return 12.0 * (double)B * s * l * h * h * (attention + mlp + logit);
}
