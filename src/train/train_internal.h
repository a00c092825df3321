/* train_internal.h - what the files of src/train share and nobody else
 * sees: the state of a run and the logging sinks (log.c). */
#ifndef PTDP_TRAIN_INTERNAL_H
#define PTDP_TRAIN_INTERNAL_H

#include <stdio.h>

#include "ckpt/ckpt.h"
#include "train/train.h"

struct ptdp_run {
    ptdp_run_params p;
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
