/* optim.h - learning-rate schedules, the data-parallel gradient reduction
 * (buckets, overlap, ZeRO-1 sharding), the global gradient norm with
 * clipping, and AdamW over flat fp32 buffers. Decoupled weight decay is off
 * for biases and LayerNorm parameters (by their role, PTDP_PARAM_ROLES in
 * base/base.h), as in Megatron. Parameters are known only through their
 * descriptions (ptdp_param_spec): optim/ does not include model/.
 * Mixed precision (a 16-bit backend): the optimizer keeps fp32 master
 * weights of the parameters it updates, next to m and v, and writes the
 * working copy (the model's parameters, on the backend's grid) after each
 * step; Megatron's dynamic loss scaler for fp16 is ptdp_loss_scaler. */
#ifndef PTDP_OPTIM_H
#define PTDP_OPTIM_H

#include <stdint.h>

#include "../base/job.h"
#include "../comm/comm.h"
#include "../kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Megatron's OptimizerParamScheduler counts samples: every optimizer step
 * advances it by the global batch, whether the flags gave iterations
 * (--lr-warmup-iters x B) or samples (--lr-warmup-samples). The warm-up may
 * be fractional (--lr-warmup-fraction x the decay), never rounded. */
typedef struct {
    double max_lr, min_lr;
    double warmup_samples, decay_samples; /* decay_samples > warmup_samples */
    int64_t samples_per_step;             /* the global batch B (0 counts as 1) */
    ptdp_lr_style style;
} ptdp_lr_schedule;

/* The learning rate after `step` optimizer steps (0 for the first
 * iteration), at n = step x samples_per_step samples: linear warm-up from 0
 * to max_lr while n <= warmup_samples, then decay to min_lr at
 * decay_samples, min_lr after. */
double ptdp_lr_at(const ptdp_lr_schedule *s, int64_t step);

/* The schedule of a finished job (ptdp_job_finish), as Megatron's
 * get_optimizer_param_scheduler makes it: decay and warm-up in samples
 * (iterations x B when the job counts iterations), the decay over the whole
 * run unless --lr-decay-iters/-samples say otherwise, the warm-up fraction
 * of the decay unrounded; a decay no longer than the warm-up (constant
 * style, or a run too short to matter) ends one step after it. */
ptdp_lr_schedule ptdp_lr_schedule_of_job(const ptdp_job *job);

/* AdamW's settings, ptdp_adamw_params, are part of the job description
 * (base/job.h). */
ptdp_adamw_params ptdp_adamw_default_params(void); /* Megatron: 0.9, 0.999, 1e-8, 0.01, 1.0 */

/* ---- data-parallel gradient reduction ------------------------------------ */
/* One chunk's flat gradient buffer is cut into buckets of about
 * bucket_floats (a multiple of the group size d), the last parameters first
 * (the order backward produces them). Plain data parallelism all-reduces each
 * bucket in place; ZeRO-1 reduce-scatters it, so data-parallel rank r keeps
 * the summed gradient of the r-th 1/d of every bucket (its shard) and updates
 * only those parameters, then all-gathers them. With overlap, buckets start
 * (non-blocking) as soon as backward reports their gradients final. */
typedef struct ptdp_ddp ptdp_ddp;

typedef struct {
    ptdp_group *data;
    ptdp_backend *be; /* the backend of the buffers (required) */
    float *params, *grads;
    int64_t numel;         /* a multiple of data->size */
    int64_t bucket_floats; /* --ddp-bucket-size */
    int zero;              /* --use-distributed-optimizer */
    int64_t hold_below;    /* gradients below this offset wait for another
                              reduction first (the tied embedding); 0: none */
    ptdp_mem *mem;         /* ZeRO-1: the shard [numel/d] is carved from
                              mem->cat[PTDP_MEM_GRAD_SHARD] (required then) */
    int check_finite;      /* --check-for-nan-in-loss-and-grad: look for nan/inf in this
                              rank's own gradient before each bucket's reduction */
} ptdp_ddp_params;
/* Defaults: no group or buffers (the caller sets data, params, grads,
 * numel) and no backend (the caller sets be), Megatron's bucket of 40,000,000 floats, plain
 * all-reduce, nothing held, no arenas. */
ptdp_ddp_params ptdp_ddp_default_params(void);

/* Builds the buckets and carves the ZeRO-1 shard from p->mem; over a plan
 * arena that only records its size, and ptdp_ddp_bind carves it again once
 * the block exists and takes the (then allocated) parameter and gradient
 * buffers (the caller owns the memory). PTDP_ENOMEM (host). Local: no communication; when it fails
 * on some ranks only, the others do not learn it (agree before the next collective, as
 * ptdp_run_setup does). */
int ptdp_ddp_init(ptdp_ddp **out, const ptdp_ddp_params *p);
void ptdp_ddp_bind(ptdp_ddp *d, float *params, float *grads, ptdp_mem *m);
void ptdp_ddp_free(ptdp_ddp *d);
/* Starts every not yet started bucket lying entirely at offsets >= `offset`
 * and >= hold_below. Matches ptdp_grad_hook (ctx = the ptdp_ddp). */
void ptdp_ddp_grads_ready(void *ddp, int64_t offset);
/* Starts the remaining buckets and waits for all. Afterwards the gradient
 * (plain) or this rank's shard of it (ZeRO-1) is the sum over the group. */
void ptdp_ddp_finish(ptdp_ddp *d);
/* With check_finite: 1 when this rank's own gradient held a nan or an inf
 * before the group's reduction (Megatron checks each rank's local gradient,
 * not the reduced one, so the rank where it arose can be named). Buckets that
 * started during the backward were checked as they started; the others are
 * checked now, so call it after the backward and before anything else
 * reduces the gradient (the tied embedding's all-reduce). Resets for the
 * next iteration. 0 without check_finite. Local: no communication. */
int ptdp_ddp_local_nonfinite(ptdp_ddp *d);
/* ZeRO-1: all-gathers the updated parameter shards (no-op otherwise), and
 * tells the backend its weights were written (the collective bypasses it:
 * kernels.h's weights contract). */
void ptdp_ddp_gather_params(ptdp_ddp *d);
/* Where this rank's gradient for flat offsets [off, off+len) lives after
 * finish when it owns them (ZeRO-1: the shard buffer), else NULL.
 * Plain: always grads + off. */
float *ptdp_ddp_grad_at(ptdp_ddp *d, int64_t off, int64_t len);
/* 1 when every data-parallel replica holds bitwise the same parameters
 * (--check-dp-replicas): an FNV-1a hash of the parameters of ddp[0..n) (a
 * rank's chunks, in order), downloaded through the caller's host[host_floats]
 * piece after piece (backend memory may not be host memory), compared over
 * the data group. Collective over the data group; blocking. */
int ptdp_ddp_replicas_identical(ptdp_ddp *const *ddp, int n, float *host, int64_t host_floats);
/* Owned ranges (ZeRO-1: this rank's shard of every bucket; plain: all). */
int ptdp_ddp_num_owned(const ptdp_ddp *d);
void ptdp_ddp_owned(const ptdp_ddp *d, int i, int64_t *off, int64_t *len);

/* ---- optimizer ------------------------------------------------------------ */
/* A run: a contiguous piece of one parameter tensor this rank updates. */
typedef struct {
    int64_t off; /* flat offset in the parameter buffer */
    int64_t len;
    float *grad;     /* its gradient after the reduction */
    int64_t state;   /* offset into m and v */
    uint8_t wd;      /* weight decay applies */
    uint8_t counted; /* counts in the global norm on this rank */
} ptdp_optim_run;

typedef struct {
    ptdp_backend *be;
    ptdp_adamw_params hp;
    float *params;
    float *m, *v;  /* [state_len] each, one piece of the optimizer-state arena */
    float *master; /* [state_len] fp32 master weights when be->dtype is 16-bit, else NULL */
    int64_t state_len;
    ptdp_optim_run *runs;
    int nruns;
    int64_t step; /* optimizer steps taken */
} ptdp_optimizer;

/* Builds the runs of the ranges `ddp` says this rank owns, split at tensor
 * boundaries, with their decay and norm flags: tensor-parallel replicated
 * parameters count on TP rank 0 only, the tied word embedding on the first
 * pipeline stage only. m and v [2, state_len] (and the master weights,
 * [3, state_len] in all, when be->dtype is 16-bit) are carved from
 * mem->cat[PTDP_MEM_OPTIMIZER]; over a plan arena that only records the
 * size, and ptdp_optim_bind carves again (and points the runs at the
 * gradients, `params` and `ddp` then bound too). PTDP_ENOMEM on failure.
 * Local (no communication). */
int ptdp_optim_init(ptdp_optimizer *o, ptdp_backend *be, const ptdp_adamw_params *hp,
                    const ptdp_param_spec *specs, int nspecs, float *params, ptdp_ddp *ddp,
                    int tp_rank, int first_stage, ptdp_mem *mem);
void ptdp_optim_bind(ptdp_optimizer *o, float *params, ptdp_ddp *ddp, ptdp_mem *mem);
void ptdp_optim_free(ptdp_optimizer *o);
/* Sum of squares of this rank's counted gradient elements (ZeRO-1: of its
 * shard; the caller sums over the data-parallel group). */
double ptdp_optim_grad_sumsq(const ptdp_optimizer *o);
/* Multiplies the gradients by grad_scale (1 / the loss scale; 1 without
 * one) and clips by the global norm of the unscaled gradients, grad_norm
 * (coefficient clip / (norm + 1e-6) when below 1, as Megatron and PyTorch),
 * then one AdamW step at `lr` on the runs: on the master weights, then
 * written to the parameters on the backend's grid, when there are masters. */
void ptdp_optim_step(ptdp_optimizer *o, double grad_norm, double lr, double grad_scale);
/* Master weights from the parameters (after they were initialised or
 * loaded at full precision), then the parameters rounded to the grid; and
 * back: the parameters this rank updates set to the master values (to save
 * or export them at full precision; ptdp_optim_round_params undoes it). No-ops
 * without masters. The caller all-gathers (ZeRO-1) as after a step. */
void ptdp_optim_take_master(ptdp_optimizer *o, int64_t numel);
void ptdp_optim_master_to_params(ptdp_optimizer *o);
void ptdp_optim_round_params(ptdp_optimizer *o, int64_t numel);

/* Megatron's grad scalers: constant (--loss-scale S) or dynamic
 * (--initial-loss-scale, --min-loss-scale, --loss-scale-window,
 * --hysteresis): after an iteration whose gradients overflowed, the
 * hysteresis counter drops and once it reaches 0 the scale halves (not below
 * min_scale) at every overflow; after `window` clean iterations in a row the
 * scale doubles and the hysteresis counter is refilled. */
typedef struct {
    double scale, min_scale;
    int dynamic;
    int64_t window, growth_tracker;
    int hysteresis, hysteresis_tracker;
} ptdp_loss_scaler;
ptdp_loss_scaler ptdp_loss_scaler_constant(double scale);
ptdp_loss_scaler ptdp_loss_scaler_dynamic(double initial, double min_scale, int64_t window,
                                          int hysteresis);
void ptdp_loss_scaler_update(ptdp_loss_scaler *s, int found_inf);
/* A job's scaler: constant --loss-scale when given, dynamic under fp16
 * (--initial-loss-scale, ...), else none (constant 1). */
ptdp_loss_scaler ptdp_loss_scaler_of_job(const ptdp_job *job);
/* Bytes of optimizer state this rank holds. */
size_t ptdp_optim_state_bytes(const ptdp_optimizer *o);

#ifdef __cplusplus
}
#endif

#endif
