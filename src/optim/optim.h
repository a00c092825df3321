/* optim.h - learning-rate schedules, the global gradient norm with clipping,
 * and AdamW over a chunk's flat fp32 buffers. Decoupled weight decay is off
 * for biases and LayerNorm parameters (spec->weight_decay == 0), as in
 * Megatron. Not here yet: data-parallel reduction, ZeRO-1 sharding, loss
 * scaling. */
#ifndef PTDP_OPTIM_H
#define PTDP_OPTIM_H

#include <stdint.h>

#include "comm/comm.h"
#include "kernels/kernels.h"
#include "model/model.h"

#define PTDP_LR_STYLES(X) \
    X(PTDP_LR_CONSTANT, "constant") \
    X(PTDP_LR_LINEAR, "linear") \
    X(PTDP_LR_COSINE, "cosine")
typedef enum {
#define PTDP__LR_ENUM(e, s) e,
    PTDP_LR_STYLES(PTDP__LR_ENUM)
#undef PTDP__LR_ENUM
} ptdp_lr_style;
int ptdp_lr_style_parse(const char *name, ptdp_lr_style *out);

typedef struct {
    double max_lr, min_lr;
    int64_t warmup_iters, decay_iters;
    ptdp_lr_style style;
} ptdp_lr_schedule;

/* Megatron's OptimizerParamScheduler: `step` counts optimizer steps already
 * taken (0 for the first iteration). Linear warm-up from 0 to max_lr over
 * warmup_iters steps, then decay to min_lr at decay_iters, min_lr after. */
double ptdp_lr_at(const ptdp_lr_schedule *s, int64_t step);

typedef struct {
    double beta1, beta2, eps, weight_decay, clip_grad;
} ptdp_adamw_params;
ptdp_adamw_params ptdp_adamw_default_params(void); /* Megatron: 0.9, 0.999, 1e-8, 0.01, 1.0 */

/* One optimizer per model chunk: AdamW moments [numel] each. */
typedef struct {
    const ptdp_ops *ops;
    ptdp_adamw_params hp;
    const ptdp_param_spec *specs;
    int nspecs;
    float *params, *grads, *m, *v; /* m, v owned (one allocation) */
    int64_t numel;
    uint8_t *counts_in_norm;       /* [nspecs]: 1 if this rank counts the spec in the norm */
    int64_t step;                  /* optimizer steps taken */
} ptdp_optimizer;

/* `tp_rank` and `first_stage` decide which copies count in the global norm:
 * tensor-parallel replicated parameters on TP rank 0 only, the tied word
 * embedding on the first pipeline stage only. PTDP_ENOMEM on failure. */
int ptdp_optim_init(ptdp_optimizer *o, const ptdp_ops *ops, const ptdp_adamw_params *hp,
                    const ptdp_param_spec *specs, int nspecs, float *params, float *grads, int64_t numel,
                    int tp_rank, int first_stage);
void ptdp_optim_free(ptdp_optimizer *o);
/* Sum of squares of this rank's counted gradient elements. */
double ptdp_optim_grad_sumsq(const ptdp_optimizer *o);
/* Clips by the global norm (coefficient clip / (norm + 1e-6) when below 1,
 * as Megatron and PyTorch), then one AdamW step at `lr`. */
void ptdp_optim_step(ptdp_optimizer *o, double grad_norm, double lr);

#endif
