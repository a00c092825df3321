/* pipeline.h - the public header of src/pipeline: schedules (schedule.h,
 * the pure half plan/ also uses) and the executor below. */
#ifndef PTDP_PIPELINE_H
#define PTDP_PIPELINE_H

#include <stdint.h>
#include <stdio.h>

#include "../comm/comm.h"
#include "../model/model.h"
#include "schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The executor runs one pipeline rank's action list (schedule.h) over its
 * model chunks: receives activations and gradients from the neighbouring
 * stages, runs forward/backward, sends results on.
 *
 * Communication model (the one ptdp_schedule_replay proves deadlock-free):
 * sends are non-blocking, from a ring of K buffers per direction
 * (activations forward, gradients backward) with K from
 * ptdp_schedule_send_buffers; before a ring slot is reused, the message it
 * last carried is waited for; every send is completed at the end of the
 * iteration. A receive is posted right before the action that needs it and
 * waited for. Activation slots are
 * taken at a forward and given back at the matching backward (with a split
 * backward, zb-h1: at the matching W, which runs the weight gradients).
 * Not here: the tied-embedding and data-parallel reductions (the trainer
 * does them after the flush). */
/* Timed events of the trace (--trace): X(enum, name in the trace). */
#define PTDP_EVENT_KINDS(X)           \
    X(PTDP_EV_FWD, "forward")         \
    X(PTDP_EV_BWD, "backward")        \
    X(PTDP_EV_WGT, "weight")          \
    X(PTDP_EV_RECV, "recv wait")      \
    X(PTDP_EV_SEND_WAIT, "send wait") \
    X(PTDP_EV_OPTIM, "optimizer")     \
    X(PTDP_EV_REDUCE, "grad reduce")
typedef enum {
#define PTDP__EV_ENUM(e, s) e,
    PTDP_EVENT_KINDS(PTDP__EV_ENUM)
#undef PTDP__EV_ENUM
        PTDP_EV_COUNT
} ptdp_event_kind;
const char *ptdp_event_kind_name(int kind);
typedef struct {
    double start, dur; /* seconds since the executor's epoch */
    int kind, microbatch, chunk, iteration;
} ptdp_event;

typedef struct ptdp_executor ptdp_executor;

typedef struct {
    ptdp_schedule_params sched; /* checked, kind resolved */
    int pp_rank;
    ptdp_group *pipeline;
    ptdp_backend *be;
    ptdp_mem *mem;           /* the message buffers come from mem->cat[PTDP_MEM_PIPELINE] */
    ptdp_gpt_chunk **chunks; /* [v] this rank's chunks, chunk c = virtual stage c*p + pp_rank;
                                chunk c has ptdp_schedule_chunk_inflight() slots */
    int64_t tokens_per_mb;   /* b * s (rows of an activation) */
    int64_t hidden;
    int64_t max_events;           /* trace capacity (0: no trace) */
    ptdp_group *tensor;           /* the stage's tensor-parallel group */
    int scatter_gather;           /* the paper's section 4.1: each TP rank sends 1/t of
                                     an activation, the receiving group all-gathers */
    ptdp_grad_hook last_bwd_hook; /* set on chunk c for its last backward (with a
                                     split backward: its last W) of the iteration
                                     (gradients final), or NULL */
    void **hook_ctx;              /* [v] */
} ptdp_executor_params;

ptdp_executor_params ptdp_executor_default_params(void);
/* Builds this rank's action list and carves the message buffers (p > 1:
 * [1 + 2K, b*s*h] floats, a receive buffer and a ring of K per direction)
 * from p->mem; over a plan arena that only records the size, and
 * ptdp_executor_bind carves again from the allocated block (the caller owns
 * the memory). PTDP_ENOMEM (host bookkeeping). Local: no communication; when it fails on some ranks
 * only, the others do not learn it (agree before the next collective, as ptdp_run_setup does). */
int ptdp_executor_init(ptdp_executor **out, const ptdp_executor_params *p);
void ptdp_executor_bind(ptdp_executor *ex, ptdp_mem *m);
void ptdp_executor_free(ptdp_executor *ex);

/* Runs the iteration's list. tokens: [m, b, s+1] this data-parallel rank's
 * micro-batches (read only on the first and last stage; may be NULL
 * elsewhere). loss_scales [m]: each micro-batch's token-loss gradient scale
 * (ptdp_gpt_chunk_fwd's loss_scale). *loss_sum receives the sum of token
 * losses on the last stage (0 elsewhere). Blocking; every rank of the
 * pipeline group calls it. */
void ptdp_executor_run(ptdp_executor *ex, const int32_t *tokens, int64_t b, int64_t s,
                       const float *loss_scales, int64_t iteration, int64_t mb_base,
                       double *loss_sum);

/* Evaluation: every micro-batch forward through this rank's chunks (their
 * training mode is the caller's to set), stage after stage as one process
 * would run them, through the same buffers and transfers as
 * ptdp_executor_run, without gradients (loss scale 0) and without trace
 * events. tokens as ptdp_executor_run's; *loss_sum: the sum of token losses
 * on the last stage (0 elsewhere). Blocking; every rank of the pipeline
 * group calls it. */
void ptdp_executor_run_forward(ptdp_executor *ex, const int32_t *tokens, int64_t b, int64_t s,
                               int64_t iteration, double *loss_sum);

/* Most micro-batches chunk `c` held stashed at once in this run, and the
 * slots each chunk needs for this rank's list (computed from the list). */
int ptdp_executor_peak_inflight(const ptdp_executor *ex, int chunk);

/* Records an event measured outside the executor (optimizer, reductions). */
void ptdp_executor_record(ptdp_executor *ex, int kind, double t0, double t1, int64_t iteration);
double ptdp_executor_now(const ptdp_executor *ex);

/* Writes a Chrome/Perfetto trace of every rank's events (gathered over
 * `world`; rank 0 writes). Collective over world. PTDP_EIO on rank 0 when
 * the file cannot be written. */
int ptdp_executor_write_trace(ptdp_executor *ex, ptdp_group *world, int world_rank, int dp, int pp,
                              int tp, const char *path);

/* Internal (trace.c): the events recorded so far; returns their count. */
int64_t ptdp__executor_events(const ptdp_executor *ex, const ptdp_event **events);

#ifdef __cplusplus
}
#endif

#endif
