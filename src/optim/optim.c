/* optim.c - LR schedules, clipping and AdamW over flat buffers. */
#define _GNU_SOURCE /* M_PI */
#include "optim/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const lr_names[] = {
#define PTDP__LR_NAME(e, s) s,
    PTDP_LR_STYLES(PTDP__LR_NAME)
#undef PTDP__LR_NAME
};

int ptdp_lr_style_parse(const char *name, ptdp_lr_style *out) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, lr_names[i])) {
            *out = (ptdp_lr_style)i;
            return PTDP_OK;
        }
    return ptdp_errorf(PTDP_EINVAL, "--lr-decay-style must be constant|linear|cosine, got '%s'", name);
}

double ptdp_lr_at(const ptdp_lr_schedule *s, int64_t step) {
    if (s->warmup_iters > 0 && step <= s->warmup_iters)
        return s->max_lr * (double)step / (double)s->warmup_iters;
    if (s->style == PTDP_LR_CONSTANT) return s->max_lr;
    if (step > s->decay_iters) return s->min_lr;
    double ratio = (double)(step - s->warmup_iters) / (double)(s->decay_iters - s->warmup_iters);
    double coeff = s->style == PTDP_LR_LINEAR ? 1.0 - ratio : 0.5 * (cos(M_PI * ratio) + 1.0);
    return s->min_lr + coeff * (s->max_lr - s->min_lr);
}

ptdp_adamw_params ptdp_adamw_default_params(void) {
    ptdp_adamw_params p = {0.9, 0.999, 1e-8, 0.01, 1.0};
    return p;
}

int ptdp_optim_init(ptdp_optimizer *o, const ptdp_ops *ops, const ptdp_adamw_params *hp,
                    const ptdp_param_spec *specs, int nspecs, float *params, float *grads, int64_t numel,
                    int tp_rank, int first_stage) {
    memset(o, 0, sizeof *o);
    o->ops = ops;
    o->hp = *hp;
    o->specs = specs;
    o->nspecs = nspecs;
    o->params = params;
    o->grads = grads;
    o->numel = numel;
    o->m = ops->alloc(2 * sizeof(float) * (size_t)numel);
    o->counts_in_norm = malloc((size_t)nspecs + 1);
    if (!o->m || !o->counts_in_norm) {
        ptdp_optim_free(o);
        return ptdp_errorf(PTDP_ENOMEM, "cannot allocate the optimizer state (%lld parameters)", (long long)numel);
    }
    o->v = o->m + numel;
    for (int i = 0; i < nspecs; i++) {
        int count = 1;
        if (specs[i].split == PTDP_SPLIT_NONE && tp_rank != 0) count = 0;
        if (!first_stage && !strcmp(specs[i].name, "embedding.word_embeddings.weight")) count = 0;
        o->counts_in_norm[i] = (uint8_t)count;
    }
    return PTDP_OK;
}

void ptdp_optim_free(ptdp_optimizer *o) {
    if (!o) return;
    if (o->m) o->ops->free(o->m);
    free(o->counts_in_norm);
    o->m = o->v = NULL;
    o->counts_in_norm = NULL;
}

double ptdp_optim_grad_sumsq(const ptdp_optimizer *o) {
    double acc = 0.0;
    for (int i = 0; i < o->nspecs; i++)
        if (o->counts_in_norm[i]) acc += o->ops->sumsq(o->grads + o->specs[i].offset, o->specs[i].numel);
    return acc;
}

void ptdp_optim_step(ptdp_optimizer *o, double grad_norm, double lr) {
    if (o->hp.clip_grad > 0.0) {
        double coeff = o->hp.clip_grad / (grad_norm + 1e-6);
        if (coeff < 1.0) o->ops->scale(o->grads, (float)coeff, o->numel);
    }
    o->step++;
    for (int i = 0; i < o->nspecs; i++) {
        const ptdp_param_spec *sp = &o->specs[i];
        o->ops->adamw(o->params + sp->offset, o->grads + sp->offset, o->m + sp->offset, o->v + sp->offset,
                      sp->numel, (float)lr, (float)o->hp.beta1, (float)o->hp.beta2, (float)o->hp.eps,
                      sp->weight_decay ? (float)o->hp.weight_decay : 0.0f, o->step);
    }
}
