/* spec.c - GPT parameter specs: global names and shapes, tensor-parallel
 * split rules, Megatron's initialisation drawn element by element from the
 * counter-based RNG, and scatter/gather between a full tensor and a shard.
 * Not here: the forward/backward (gpt.c, layer.c, head.c) or file formats (ckpt/). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "model/model_internal.h"

int64_t ptdp_gpt_groups(const ptdp_gpt_config *cfg) {
    return cfg->query_groups > 0 ? cfg->query_groups : cfg->heads;
}

int64_t ptdp_gpt_rotary_dims(const ptdp_gpt_config *cfg) {
    if (!cfg->rope) return 0;
    const float pct = cfg->rotary_percent > 0 ? cfg->rotary_percent : 1.0f;
    /* Megatron: int(kv_channels * rotary_percent) */
    return (int64_t)((double)(cfg->hidden / cfg->heads) * (double)pct);
}

int ptdp_gpt_is_llama(const ptdp_gpt_config *cfg) {
    return cfg->rmsnorm || cfg->swiglu || cfg->rope || cfg->untie || cfg->no_bias ||
           (cfg->query_groups > 0 && cfg->query_groups != cfg->heads);
}

int ptdp_gpt_backend_needs(const ptdp_gpt_config *cfg) {
    return (cfg->rmsnorm ? PTDP_NEED_RMSNORM : 0) | (cfg->swiglu ? PTDP_NEED_SWIGLU : 0) |
           (cfg->rope ? PTDP_NEED_ROPE : 0) |
           (ptdp_gpt_groups(cfg) != cfg->heads ? PTDP_NEED_GQA : 0);
}

/* The Llama family's checks (ptdp_gpt_config_finish). */
static int finish_llama(ptdp_gpt_config *cfg, int t) {
    if (cfg->rotary_base == 0) cfg->rotary_base = 10000.0;
    if (cfg->rotary_percent == 0) cfg->rotary_percent = 1.0f;
    if (cfg->query_groups < 0) return ptdp_errorf(PTDP_ECONFIG, "--num-query-groups must be >= 1");
    const int64_t g = ptdp_gpt_groups(cfg);
    if (cfg->heads % g)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--num-attention-heads %lld is not divisible by --num-query-groups %lld "
                           "(each key/value group serves the same number of query heads)",
                           (long long)cfg->heads, (long long)g);
    if (g % t)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--num-query-groups %lld is not divisible by "
                           "--tensor-model-parallel-size %d (each tensor-parallel rank holds "
                           "whole key/value groups, as in Megatron); choose t dividing %lld",
                           (long long)g, t, (long long)g);
    if (cfg->rope) {
        if (!(cfg->rotary_percent > 0 && cfg->rotary_percent <= 1))
            return ptdp_errorf(PTDP_ECONFIG, "--rotary-percent %g must be in (0, 1]",
                               (double)cfg->rotary_percent);
        if (!(cfg->rotary_base > 0))
            return ptdp_errorf(PTDP_ECONFIG, "--rotary-base %g must be > 0", cfg->rotary_base);
        const int64_t rd = ptdp_gpt_rotary_dims(cfg);
        if (rd < 2 || rd % 2 || rd > 1024)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--rotary-percent %g of the head size %lld rotates %lld dims; "
                               "rotary embeddings need an even number from 2 to 1024",
                               (double)cfg->rotary_percent, (long long)(cfg->hidden / cfg->heads),
                               (long long)rd);
    }
    if (cfg->swiglu && !cfg->no_bias)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--swiglu with biases on the linear layers is not supported; add "
                           "--disable-bias-linear (as Llama models do)");
    return PTDP_OK;
}

int ptdp_gpt_config_finish(ptdp_gpt_config *cfg, int64_t divisible_by, int t) {
    if (cfg->ffn_hidden == 0) cfg->ffn_hidden = 4 * cfg->hidden;
    if (cfg->num_layers < 1) return ptdp_errorf(PTDP_ECONFIG, "--num-layers must be >= 1");
    if (cfg->hidden < 1 || cfg->heads < 1)
        return ptdp_errorf(PTDP_ECONFIG, "--hidden-size and --num-attention-heads must be >= 1");
    if (cfg->hidden % cfg->heads)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--hidden-size %lld is not divisible by --num-attention-heads %lld",
                           (long long)cfg->hidden, (long long)cfg->heads);
    if (cfg->heads % t)
        return ptdp_errorf(
            PTDP_ECONFIG,
            "--num-attention-heads %lld is not divisible by --tensor-model-parallel-size %d "
            "(each tensor-parallel rank computes a/t whole heads)",
            (long long)cfg->heads, t);
    if (cfg->ffn_hidden % t)
        return ptdp_errorf(PTDP_ECONFIG,
                           cfg->swiglu ? "--swiglu: --ffn-hidden-size %lld is not divisible by "
                                         "--tensor-model-parallel-size %d (each rank holds the "
                                         "gate and up rows of the same ffn/t units)"
                                       : "the MLP width %lld (--ffn-hidden-size, default 4 x "
                                         "--hidden-size) is not divisible by "
                                         "--tensor-model-parallel-size %d",
                           (long long)cfg->ffn_hidden, t);
    int lrc = finish_llama(cfg, t);
    if (lrc) return lrc;
    if (cfg->max_positions == 0) cfg->max_positions = cfg->seq_length;
    if (cfg->seq_length < 1) return ptdp_errorf(PTDP_ECONFIG, "--seq-length must be >= 1");
    if (cfg->seq_length > cfg->max_positions)
        return ptdp_errorf(PTDP_ECONFIG, "--seq-length %lld exceeds --max-position-embeddings %lld",
                           (long long)cfg->seq_length, (long long)cfg->max_positions);
    if (cfg->vocab < 2) return ptdp_errorf(PTDP_ECONFIG, "the vocabulary size must be >= 2");
    if (divisible_by < 1)
        return ptdp_errorf(PTDP_ECONFIG, "--make-vocab-size-divisible-by must be >= 1");
    int64_t mult = divisible_by * t;
    cfg->vocab_padded = (cfg->vocab + mult - 1) / mult * mult;
    if (cfg->ln_eps == 0.0f) cfg->ln_eps = 1e-5f;
    return PTDP_OK;
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
