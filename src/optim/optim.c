/* optim.c - LR schedules, clipping and AdamW over flat buffers. */
#define _GNU_SOURCE /* M_PI */
#include "optim/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double ptdp_lr_at(const ptdp_lr_schedule *s, int64_t step) {
    const double n = (double)step * (double)(s->samples_per_step > 0 ? s->samples_per_step : 1);
    if (s->warmup_samples > 0 && n <= s->warmup_samples) return s->max_lr * n / s->warmup_samples;
    if (s->style == PTDP_LR_CONSTANT) return s->max_lr;
    if (n > s->decay_samples) return s->min_lr;
    double ratio = (n - s->warmup_samples) / (s->decay_samples - s->warmup_samples);
    double coeff = s->style == PTDP_LR_LINEAR ? 1.0 - ratio : 0.5 * (cos(M_PI * ratio) + 1.0);
    return s->min_lr + coeff * (s->max_lr - s->min_lr);
}

ptdp_lr_schedule ptdp_lr_schedule_of_job(const ptdp_job *j) {
    const int by_samples = j->train_samples >= 0;
    const int64_t B = j->global_batch;
    ptdp_lr_schedule lr = {.max_lr = j->lr,
                           .min_lr = j->min_lr,
                           .samples_per_step = B,
                           .style = (ptdp_lr_style)j->lr_decay_style};
    lr.decay_samples =
        by_samples ? (double)(j->lr_decay_samples ? j->lr_decay_samples : j->train_samples)
                   : (double)(j->lr_decay_iters ? j->lr_decay_iters : j->train_iters) * (double)B;
    lr.warmup_samples =
        by_samples ? (double)j->lr_warmup_samples : (double)j->lr_warmup_iters * (double)B;
    if (j->lr_warmup_fraction > 0) lr.warmup_samples = j->lr_warmup_fraction * lr.decay_samples;
    if (lr.decay_samples <= lr.warmup_samples)
        lr.decay_samples = (floor(lr.warmup_samples / (double)B) + 1) * (double)B;
    return lr;
}

ptdp_adamw_params ptdp_adamw_default_params(void) {
    ptdp_adamw_params p = {
        .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .clip_grad = 1.0};
    return p;
}

/* Decoupled weight decay by role (the table's third column). */
static const uint8_t role_decays[] = {
#define PTDP__ROLE_DECAY(e, s, wd) wd,
    PTDP_PARAM_ROLES(PTDP__ROLE_DECAY)
#undef PTDP__ROLE_DECAY
};

int ptdp_optim_init(ptdp_optimizer *o, ptdp_backend *be, const ptdp_adamw_params *hp,
                    const ptdp_param_spec *specs, int nspecs, float *params, ptdp_ddp *ddp,
                    int tp_rank, int first_stage, ptdp_mem *mem) {
    memset(o, 0, sizeof *o);
    o->be = be;
    o->hp = *hp;
    o->params = params;
    int nowned = ptdp_ddp_num_owned(ddp);
    o->runs = calloc((size_t)(nspecs * (nowned + 1) + 1), sizeof(ptdp_optim_run));
    if (!o->runs) return ptdp_errorf(PTDP_ENOMEM, "out of memory for the optimizer");
    /* intersect every owned range with every tensor (both sorted by offset) */
    for (int k = 0; k < nowned; k++) {
        int64_t lo, len;
        ptdp_ddp_owned(ddp, k, &lo, &len);
        for (int i = 0; i < nspecs; i++) {
            int64_t a = specs[i].offset > lo ? specs[i].offset : lo;
            int64_t e = specs[i].offset + specs[i].numel, b = e < lo + len ? e : lo + len;
            if (a >= b) continue;
            /* count every element once in the global norm: replicated
             * parameters on TP rank 0, the tied embedding on the first stage */
            int counted = 1;
            if (specs[i].split == PTDP_SPLIT_NONE && tp_rank != 0) counted = 0;
            if (!first_stage && specs[i].role == PTDP_ROLE_EMBEDDING) counted = 0;
            o->runs[o->nruns++] = (ptdp_optim_run){.off = a,
                                                   .len = b - a,
                                                   .grad = NULL, /* ptdp_optim_bind */
                                                   .state = o->state_len,
                                                   .wd = role_decays[specs[i].role],
                                                   .counted = (uint8_t)counted};
            o->state_len += b - a;
        }
    }
    ptdp_optim_bind(o, params, ddp, mem);
    return PTDP_OK;
}

static int has_master(const ptdp_optimizer *o) { return o->be->dtype != PTDP_DTYPE_FP32; }

void ptdp_optim_bind(ptdp_optimizer *o, float *params, ptdp_ddp *ddp, ptdp_mem *mem) {
    o->params = params;
    o->m = ptdp_arena_carve(&mem->cat[PTDP_MEM_OPTIMIZER], ptdp_optim_state_bytes(o));
    o->v = o->m ? o->m + o->state_len : NULL;
    o->master = o->m && has_master(o) ? o->m + 2 * o->state_len : NULL;
    for (int i = 0; o->m && i < o->nruns; i++) {
        o->runs[i].grad = ptdp_ddp_grad_at(ddp, o->runs[i].off, o->runs[i].len);
        PTDP_ASSERT(o->runs[i].grad);
    }
}

void ptdp_optim_free(ptdp_optimizer *o) {
    if (!o) return;
    free(o->runs);
    o->m = o->v = NULL;
    o->runs = NULL;
}

size_t ptdp_optim_state_bytes(const ptdp_optimizer *o) {
    return (has_master(o) ? 3 : 2) * sizeof(float) * (size_t)o->state_len;
}

double ptdp_optim_grad_sumsq(const ptdp_optimizer *o) {
    double acc = 0.0;
    for (int i = 0; i < o->nruns; i++)
        if (o->runs[i].counted) acc += o->be->sumsq(o->be, o->runs[i].grad, o->runs[i].len);
    return acc;
}

void ptdp_optim_step(ptdp_optimizer *o, double grad_norm, double lr, double grad_scale) {
    double coeff = o->hp.clip_grad > 0.0 ? o->hp.clip_grad / (grad_norm + 1e-6) : 1.0;
    /* unscale, then clip (Megatron's order); the loss scale is a power of 2,
     * so one multiply by the product is the same as the two */
    const double mult = (coeff < 1.0 ? coeff : 1.0) * grad_scale;
    const float gs = (float)mult; /* applied inside the update: no pass over the gradients */
    o->step++;
    for (int i = 0; i < o->nruns; i++) {
        const ptdp_optim_run *r = &o->runs[i];
        float *w = o->master ? o->master + r->state : o->params + r->off;
        const float wd = r->wd ? (float)o->hp.weight_decay : 0.0f;
        if (o->master && o->be->adamw_master) { /* the working copy in the same pass */
            o->be->adamw_master(o->be, w, o->params + r->off, r->grad, gs, o->m + r->state,
                                o->v + r->state, r->len, (float)lr, (float)o->hp.beta1,
                                (float)o->hp.beta2, (float)o->hp.eps, wd, o->step);
            continue;
        }
        o->be->adamw(o->be, w, r->grad, gs, o->m + r->state, o->v + r->state, r->len, (float)lr,
                     (float)o->hp.beta1, (float)o->hp.beta2, (float)o->hp.eps, wd, o->step);
        if (o->master) { /* the working copy: the master on the backend's grid */
            o->be->copy(o->be, o->params + r->off, w, r->len);
            o->be->quantize(o->be, o->params + r->off, r->len);
        }
    }
}

void ptdp_optim_take_master(ptdp_optimizer *o, int64_t numel) {
    if (!o->master) return;
    for (int i = 0; i < o->nruns; i++)
        o->be->copy(o->be, o->master + o->runs[i].state, o->params + o->runs[i].off,
                    o->runs[i].len);
    o->be->quantize(o->be, o->params, numel);
}

void ptdp_optim_master_to_params(ptdp_optimizer *o) {
    for (int i = 0; o->master && i < o->nruns; i++)
        o->be->copy(o->be, o->params + o->runs[i].off, o->master + o->runs[i].state,
                    o->runs[i].len);
}

void ptdp_optim_round_params(ptdp_optimizer *o, int64_t numel) {
    if (o->master) o->be->quantize(o->be, o->params, numel);
}

ptdp_loss_scaler ptdp_loss_scaler_constant(double scale) {
    return (ptdp_loss_scaler){.scale = scale, .min_scale = scale};
}

ptdp_loss_scaler ptdp_loss_scaler_dynamic(double initial, double min_scale, int64_t window,
                                          int hysteresis) {
    return (ptdp_loss_scaler){.scale = initial,
                              .min_scale = min_scale,
                              .dynamic = 1,
                              .window = window,
                              .hysteresis = hysteresis,
                              .hysteresis_tracker = hysteresis};
}

ptdp_loss_scaler ptdp_loss_scaler_of_job(const ptdp_job *j) {
    if (j->loss_scale > 0) return ptdp_loss_scaler_constant(j->loss_scale);
    if (j->dtype == PTDP_DTYPE_FP16)
        return ptdp_loss_scaler_dynamic(j->initial_loss_scale, j->min_loss_scale,
                                        j->loss_scale_window, (int)j->hysteresis);
    return ptdp_loss_scaler_constant(1.0);
}

/* Megatron's DynamicGradScaler.update */
void ptdp_loss_scaler_update(ptdp_loss_scaler *s, int found_inf) {
    if (!s->dynamic) return;
    if (found_inf) {
        s->growth_tracker = 0;
        s->hysteresis_tracker--;
        if (s->hysteresis_tracker <= 0)
            s->scale = s->scale * 0.5 > s->min_scale ? s->scale * 0.5 : s->min_scale;
    } else if (++s->growth_tracker == s->window) {
        s->growth_tracker = 0;
        s->hysteresis_tracker = s->hysteresis;
        s->scale *= 2.0;
    }
}
