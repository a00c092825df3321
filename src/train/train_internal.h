/* train_internal.h - what the files of src/train share and nobody else
 * sees: a rank's training state (trainer.c; its checkpoints in
 * checkpoint.c), the state of a run (run.c) and the logging sinks (log.c). */
#ifndef PTDP_TRAIN_INTERNAL_H
#define PTDP_TRAIN_INTERNAL_H

#include <stdio.h>

#include "ckpt/ckpt.h"
#include "train/train.h"

struct ptdp_trainer {
    ptdp_trainer_params p;      /* p.job finished (ptdp_job_finish) */
    const ptdp_job *job;        /* &p.job */
    ptdp_schedule_params sched; /* the job's (ptdp_schedule_of_job) */
    ptdp_lr_schedule lr;        /* the job's, or the one p.lr gave */
    ptdp_loss_scaler scaler;    /* the job's (ptdp_loss_scaler_of_job), as it evolves */
    int v;
    ptdp_gpt_chunk *chunks[PTDP_MAX_CHUNKS];
    ptdp_optimizer opts[PTDP_MAX_CHUNKS];
    ptdp_ddp *ddp[PTDP_MAX_CHUNKS];
    ptdp_executor *ex;
    ptdp_backend_job bjob;           /* what the backend plans its own memory for */
    ptdp_backend_workspace bws;      /* its answer */
    void *bws_block;                 /* its workspace, from the backend category (NULL: none) */
    size_t ondemand0;                /* the backend's own allocations before the first step */
    ptdp_mem mem;                    /* every tensor of the rank: one block per category */
    size_t predicted[PTDP_MEM_NCAT]; /* the planner's bytes per category */
    int64_t iteration;
    float *loss_scales; /* [m] host: each micro-batch's loss-gradient scale */
    float *hash_buf;    /* [PTDP__HASH_FLOATS] host floats: --check-dp-replicas downloads
                           the parameters through it (backend memory may not be host
                           memory) */
    int nonfinite;      /* check_nonfinite: PTDP_NONFINITE_* of the last step, this rank */
};
#define PTDP__HASH_FLOATS ((int64_t)1 << 18) /* floats (1 MiB) per download */

struct ptdp_run {
    ptdp_run_params p;   /* p.trainer.job finished (ptdp_job_finish) */
    const ptdp_job *job; /* &p.trainer.job */
    int64_t train_iters; /* the job's (--train-iters, or --train-samples / B) */
    ptdp_lr_schedule lr; /* --use-checkpoint-opt-param-scheduler: the checkpoint's */
    ptdp_comm *comm;
    ptdp_trainer *tr;
    ptdp_batches data, valid, test;
    int has_test; /* the test split has samples (evaluated at the end) */
    int exited;   /* --exit-interval / --exit-duration-in-mins stopped the loop */
    ptdp_gpt_data *gpt;
    int32_t *batch;          /* [B/d, s+1] this data-parallel rank's samples */
    int32_t *nonfinite;      /* [world size]: --check-for-nan-in-loss-and-grad's report */
    int64_t n_evals;         /* 0: no validation */
    int64_t eval_round;      /* validation batches already used / eval_iters */
    int64_t consumed;        /* consumed samples (global) */
    int64_t last_saved;      /* iteration of the last checkpoint, -1: none */
    int resumes_save;        /* --load is --save's own newest checkpoint */
    ptdp_ckpt_loaded loaded; /* what --load found */
    int resuming;            /* --load holds a checkpoint and it is not --finetune */
    ptdp_step_stats st;      /* the last step's */
    FILE *jsonl;             /* --log-jsonl, rank 0 only */
    struct ptdp_tb *tb;      /* --tensorboard-dir, rank 0 only */
    /* the Megatron line averages over the logging interval */
    double t_interval, loss_interval, t_total;
    int64_t n_interval, skipped_total, iters_run;
    /* over the current logging interval: iterations that advanced (their
     * losses are in loss_interval), skipped, nan */
    int64_t advanced_interval, skipped_interval, nan_interval;
};

/* Logging sinks: the Megatron iteration line, --log-jsonl, validation lines,
 * the start-up and end-of-run reports (memory, communication counters). */
int ptdp__log_open(ptdp_run *r);
/* Rank 0, once --load is done: opens --log-jsonl of a resumed run for
 * appending, first dropping the records after the loaded iteration (an
 * atomic rewrite). PTDP_EIO naming the flag. Other ranks: PTDP_OK. */
int ptdp__log_resume(ptdp_run *r);
void ptdp__log_start(ptdp_run *r);
void ptdp__log_iteration(ptdp_run *r, double dt, int last);
/* `set`: NULL during training, else "validation" or "test" (the end of
 * training: Megatron's "iteration N on validation set" lines). */
void ptdp__log_validation(ptdp_run *r, double loss, const char *set);
void ptdp__log_finish(ptdp_run *r);
/* The memory plan of this rank's trainer: a "memory plan MISMATCH" line on
 * every rank whose carved bytes differ from the prediction, the table
 * category / bytes / predicted on the ranks with dp = tp = 0 (one per
 * pipeline stage), the bytes per parameter on rank 0. Not collective. */
void ptdp__log_memory(const ptdp_trainer *tr);
/* End of a run: on the ranks with dp = tp = 0 the process's peak resident
 * memory (getrusage ru_maxrss) next to the plan's total; on every rank
 * whose compute backend allocated memory beyond its planned workspace a
 * "memory plan MISMATCH" line with the bytes. */
void ptdp__log_peak_memory(const ptdp_trainer *tr);
void ptdp__log_close(ptdp_run *r);

/* TensorBoard event files (tensorboard.c; the byte layout is documented
 * there). One writer per process; not thread-safe. */
typedef struct ptdp_tb ptdp_tb;
/* Creates DIR (and parents) and DIR/events.out.tfevents.<time>.<host>.<pid>.0,
 * writes the file-version record. PTDP_EIO/PTDP_ENOMEM naming the flag. */
int ptdp__tb_open(ptdp_tb **out, const char *dir);
/* Appends one scalar (stored as float32) under `tag` at `step` with the
 * current wall time, and flushes, so a running job shows in TensorBoard.
 * PTDP_EIO when the write fails. */
int ptdp__tb_scalar(ptdp_tb *tb, const char *tag, int64_t step, double value);
const char *ptdp__tb_path(const ptdp_tb *tb);
void ptdp__tb_close(ptdp_tb *tb); /* NULL: no-op */

#endif
