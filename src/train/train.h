/* train.h - the training loop as a library: one rank's training state and
 * iteration (the model chunks, the optimizer, the LR schedule and the
 * pipeline schedule that accumulates gradients over the global batch), and
 * where the samples come from (mock data, a token file, Megatron's GPT
 * dataset). `ptdp train` (src/cli) parses flags and calls this layer; tests
 * and benchmarks use it directly.
 *
 * The pipeline schedule runs through the executor (src/pipeline); the
 * data-parallel reduction (buckets, overlap, ZeRO-1) through src/optim. */
#ifndef PTDP_TRAIN_H
#define PTDP_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include "../comm/comm.h"
#include "../kernels/kernels.h"
#include "../model/model.h"
#include "../optim/optim.h"
#include "../pipeline/pipeline.h"
#include "../data/data.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- samples ---------------------------------------------------------------- */
/* Where training samples come from: --mock-data (deterministic
 * synthetic tokens) or --token-file (a raw little-endian uint16 stream). A
 * sample is s+1 tokens; sample k starts at token k*s (consecutive samples
 * overlap by one token, as in Megatron's GPT dataset); the stream wraps
 * around at the end of the file. Iteration i uses samples i*B .. i*B+B-1.
 * With --data-path the samples come from Megatron's GPT dataset indices
 * (src/data): shuffled documents, split train/valid/test, blended. */
typedef struct {
    int64_t seq_length;
    int64_t vocab;          /* tokens must be below this */
    uint64_t seed;          /* mock data */
    const uint16_t *tokens; /* token file, mmap'd (map_bytes > 0) or the caller's */
    int64_t ntokens;
    size_t map_bytes;
    const char *path;
    const ptdp_gpt_data *gpt; /* --data-path (not owned) */
    int split;                /* PTDP_SPLIT_TRAIN / _VALID / _TEST */
} ptdp_batches;

/* Samples of one split of an opened GPT dataset. */
void ptdp_batches_gpt(ptdp_batches *b, const ptdp_gpt_data *gpt, int split, int64_t seq_length);

/* Mock source: token at stream position q is a hash of (seed, q) modulo V. */
void ptdp_batches_mock(ptdp_batches *b, int64_t seq_length, int64_t vocab, uint64_t seed);
/* Maps and validates a token file: even length, at least s+1 tokens, every
 * token < vocab. PTDP_EIO / PTDP_EFORMAT naming the file and the problem. */
int ptdp_batches_open_file(ptdp_batches *b, const char *path, int64_t seq_length, int64_t vocab);
/* The same checks on a token file's bytes in memory (2-byte aligned; they
 * must outlive b, which does not copy or free them); `name` stands for the
 * path in messages. */
int ptdp_batches_open_mem(ptdp_batches *b, const char *name, const void *bytes, size_t nbytes,
                          int64_t seq_length, int64_t vocab);
void ptdp_batches_close(ptdp_batches *b);
/* Samples first .. first+count-1 into out [count, s+1]. */
void ptdp_batches_get(const ptdp_batches *b, int64_t first, int64_t count, int32_t *out);

/* ---- the trainer --------------------------------------------------------------- */

/* What a trainer runs: the job (model, layout, schedule, optimizer, batch:
 * base/job.h), and where: the compute backend and the communicator. */
typedef struct {
    ptdp_job job;          /* ptdp_trainer_init checks it (ptdp_job_finish) and keeps a finished
                              copy; start from ptdp_job_default_params() */
    ptdp_backend *be;      /* the compute backend (the caller opens and closes it) */
    ptdp_comm *comm;       /* set up for the job's t, p and d (ptdp_comm_setup) */
    const char *init_from; /* HF GPT-2 safetensors or NULL for Megatron init */
    const ptdp_lr_schedule *lr; /* NULL: the job's (ptdp_lr_schedule_of_job); a resumed run
                                   may keep its checkpoint's (copied at init) */
    int64_t trace_events;       /* capacity of the --trace event log (0: off) */
    int check_nonfinite;        /* --check-for-nan-in-loss-and-grad: note whether this rank's own
                                   loss and gradient (before any reduction) were finite, for
                                   ptdp_trainer_nonfinite_ranks */
} ptdp_trainer_params;

typedef struct {
    int64_t iteration; /* 1-based, after the step */
    double loss;       /* mean token loss over the global batch */
    double grad_norm;  /* before clipping */
    double lr;         /* after this step (Megatron logs the next step's) */
    int skipped;       /* 1 when the gradient was not finite and the step was skipped */
    double loss_scale; /* the scaler's scale after this step (1 without loss scaling) */
    int loss_scaling;  /* a loss scaler decides about non-finite gradients (fp16) */
} ptdp_step_stats;

/* The job's defaults (ptdp_job_default_params: `ptdp train`'s), no
 * backend, no communicator, no trace. */
ptdp_trainer_params ptdp_trainer_default_params(void);

typedef struct ptdp_trainer ptdp_trainer;

/* Checks the parameters (the job with ptdp_job_finish; a backend and a
 * communicator given, laid out as the job says: PTDP_EINVAL / PTDP_ECONFIG
 * naming the flag or field), plans memory, allocates, initialises (or loads
 * init_from). Errors: those, PTDP_ENOMEM, and the loader's
 * PTDP_ENOTFOUND/PTDP_EFORMAT/PTDP_EIO. Local to the rank (no collective):
 * the ranks of a job given the same parameters all fail alike, except for
 * memory and files (ptdp_run_setup agrees on the outcome). */
int ptdp_trainer_init(ptdp_trainer **out, const ptdp_trainer_params *p);
void ptdp_trainer_free(ptdp_trainer *tr);

/* One iteration over the global batch. tokens [B/d, s+1]: this data-parallel
 * rank's share (samples dp*B/d .. of the batch; sample k in row k). Runs forward/backward per
 * micro-batch, the gradient norm, clipping and AdamW. Blocking; every rank of the job calls it.
 * PTDP_EINVAL, before anything is computed or sent and with nothing trained, when a token id
 * of the batch is outside [0, V) (V = the job's model.vocab, --vocab-size). Only the ranks
 * given that batch return (the ranks of one data-parallel replica share it): in a job of
 * several replicas the caller ends the job (ptdp_comm_abort), as `ptdp train` does. */
int ptdp_trainer_step(ptdp_trainer *tr, const int32_t *batch, ptdp_step_stats *st);

/* Where the last step's non-finite values arose (check_nonfinite): flags[w]
 * receives, for every world rank w, PTDP_NONFINITE_LOSS when its local loss
 * (before the reductions over the data and model groups) was nan/inf and
 * PTDP_NONFINITE_GRAD when its own gradient was before the data-parallel
 * reduction. flags holds comm->world_size entries. Collective over the
 * world: every rank calls it (after the same step); blocking. */
#define PTDP_NONFINITE_LOSS 1
#define PTDP_NONFINITE_GRAD 2
void ptdp_trainer_nonfinite_ranks(ptdp_trainer *tr, int32_t *flags);

/* Mean token loss of a batch laid out like ptdp_trainer_step's, forward
 * only (no dropout, gradients untouched). Collective like a step. */
double ptdp_trainer_eval(ptdp_trainer *tr, const int32_t *batch);

ptdp_gpt_chunk *ptdp_trainer_chunk(ptdp_trainer *tr); /* chunk 0 */
int ptdp_trainer_num_chunks(const ptdp_trainer *tr);
/* The schedule the trainer runs: m derived, kind resolved, zb-v's costs
 * filled in (borrowed). */
const ptdp_schedule_params *ptdp_trainer_schedule(const ptdp_trainer *tr);
ptdp_gpt_chunk *ptdp_trainer_chunk_at(ptdp_trainer *tr, int c);
/* Activation memory of this rank: measured = what the model held at the
 * peak of the run (micro-batches stashed at once x bytes per stashed
 * micro-batch, plus the shared workspace), predicted = the planner's model
 * (src/plan/memory.c) for the same configuration and schedule. */
typedef struct {
    double measured, predicted, stash;
    int stashed_microbatches; /* at the peak, summed over chunks */
} ptdp_act_memory;
void ptdp_trainer_activation_memory(const ptdp_trainer *tr, ptdp_act_memory *am);
/* 1 when every data-parallel replica holds bitwise the same parameters
 * (compares a hash of all chunks' parameter bytes over the data group).
 * Collective over the data group. */
int ptdp_trainer_replicas_identical(ptdp_trainer *tr);
/* Writes the Chrome trace of every rank (collective over the world). */
int ptdp_trainer_write_trace(ptdp_trainer *tr, const char *path);
/* This rank's tensor memory per category (PTDP_MEM_*): what it carved (one
 * block per category) and what src/plan/memory.c predicted from the
 * configuration. Either array may be NULL. */
void ptdp_trainer_memory(const ptdp_trainer *tr, size_t carved[PTDP_MEM_NCAT],
                         size_t predicted[PTDP_MEM_NCAT]);
/* Bytes the compute backend allocated for itself since the trainer's
 * memory was planned (the plan's promise is none: kernels.h's memory
 * contract). */
size_t ptdp_trainer_backend_unplanned(const ptdp_trainer *tr);
/* The job the trainer runs, finished (ptdp_job_finish; borrowed). */
const ptdp_job *ptdp_trainer_job(const ptdp_trainer *tr);

/* Checkpoints (src/ckpt/ckpt.h): writes every chunk's parameters and
 * AdamW state with the iteration, consumed samples and optimizer step under
 * DIR/iter_%07d. Collective over the world; every rank returns the same
 * code. PTDP_ECONFIG, nothing written, when DIR holds this iteration or a
 * later one, unless overwrite (ptdp_ckpt_save). */
/* 16-bit runs: on = 1 puts the fp32 master weights in the model's parameters
 * (all-gathered under ZeRO-1; collective over the data group) to save or
 * export them; on = 0 rounds them back to the working copy. No-op in fp32. */
void ptdp_trainer_full_precision(ptdp_trainer *tr, int on);
int ptdp_trainer_save(ptdp_trainer *tr, const char *dir, int64_t consumed_samples, int overwrite);
/* Loads the checkpoint DIR points to, saved under any layout: parameters,
 * with load_optim the AdamW state and step, with restore_iteration the
 * iteration counter (Megatron: --finetune restores neither, --no-load-optim
 * keeps a fresh optimizer). out->found = 0 when DIR holds no checkpoint.
 * Collective over the world; nothing is changed on error. */
struct ptdp_ckpt_loaded;
int ptdp_trainer_load(ptdp_trainer *tr, const char *dir, int load_optim, int restore_iteration,
                      struct ptdp_ckpt_loaded *out);
int64_t ptdp_trainer_iteration(const ptdp_trainer *tr);
/* Fault injection (PTDP_FAULT=perturb): nudges this rank's first weight by
 * 1e-3 so a replica check must fail. */
void ptdp_trainer_perturb(ptdp_trainer *tr);

/* ---- a whole run ----------------------------------------------------------- */
/* What `ptdp train` asks for, in library terms: its flag table points into
 * this struct. Strings are borrowed (the caller keeps them alive until
 * ptdp_run_free). */
typedef struct {
    ptdp_trainer_params trainer; /* the job (its length: train_iters or train_samples; its
                                    seed orders the samples and makes mock data), the backend,
                                    trainer.comm set up */
    /* data: --data-path (n_data_paths > 0), else --token-file, else mock */
    int n_data_paths;
    const char *const *data_paths; /* Megatron's "[weight] prefix ..." list */
    const char *split;             /* "969,30,1" */
    const char *token_file;
    /* evaluation: every eval_interval iterations, eval_iters batches */
    int64_t eval_interval, eval_iters;
    /* logging */
    int64_t log_interval;
    const char *log_jsonl; /* rank 0 writes one JSON object per iteration */
    int log_comm;          /* print the communication counters at the end */
    /* --tensorboard-dir: rank 0 writes Megatron's scalars to an event file
     * there every tensorboard_log_interval iterations (NULL: off); the
     * log_*_to_tensorboard switches are Megatron's */
    const char *tensorboard_dir;
    int64_t tensorboard_log_interval;
    int log_timers_to_tensorboard;         /* iteration-time (and throughput) */
    int log_validation_ppl_to_tensorboard; /* lm loss validation ppl */
    int log_loss_scale_to_tensorboard;     /* loss-scale (on by default) */
    int log_learning_rate_to_tensorboard;  /* learning-rate (on by default) */
    int log_world_size_to_tensorboard;     /* world-size */
    int check_dp_replicas;                 /* compare replica hashes after every step */
    int log_throughput;                    /* Megatron's "throughput per GPU (TFLOP/s/GPU)" field */
    int check_for_nan; /* a nan/inf loss or gradient norm stops the run (else: skipped) */
    /* checkpoints */
    const char *save, *load;
    int64_t save_interval;
    int finetune, no_load_optim;
    /* --overwrite-checkpoints: saves may replace checkpoints --save holds at or
     * after the run's first iteration (refused at set-up otherwise; the latest
     * file never moves back either way) */
    int overwrite_checkpoints;
    /* stop early (Megatron): after an iteration that is a multiple of exit_interval, or
     * once the loop has run exit_duration_mins minutes (0: off) */
    int64_t exit_interval;
    double exit_duration_mins;
    int exit_signal_handler; /* SIGTERM: finish the iteration, save (--save), exit 0 */
    /* a resumed run whose LR schedule differs from the checkpoint's: Megatron
     * refuses unless one of these says which schedule wins */
    int override_scheduler;       /* the flags' schedule */
    int use_checkpoint_scheduler; /* the checkpoint's schedule */
    /* --dump-config FILE: rank 0 writes dump_config_text there at set-up
     * (the CLI renders the flags; the library only writes the file) */
    const char *dump_config, *dump_config_text;
    /* outputs at the end */
    const char *trace; /* Chrome trace */
    const char *save_safetensors, *save_safetensors_config;
} ptdp_run_params;
/* `ptdp train`'s defaults: the trainer's (the job's), a log line every 100
 * iterations, validation every 1000 over 100 batches, --split 969,30,1,
 * --check-for-nan-in-loss-and-grad on, TensorBoard's loss scale and
 * learning rate on. */
ptdp_run_params ptdp_run_default_params(void);

typedef struct ptdp_run ptdp_run;
/* Opens the data, checks that the outputs are writable, builds the trainer,
 * agrees with every other rank that all started (so a failure on one rank
 * stops all, with a message, before any other collective), loads --load and
 * logs the start-up lines. Collective over the world; every rank returns
 * the same success or failure (the failing rank's message is recorded). */
int ptdp_run_setup(ptdp_run **out, const ptdp_run_params *p);
/* Runs the iterations from the current one to train_iters: data, the step,
 * logging, evaluation, periodic checkpoints. Returns 0, or 1 when a
 * checkpoint could not be written (message logged). Collective. */
int ptdp_run_loop(ptdp_run *r);
/* --exit-signal-handler: catches SIGTERM and blocks it in the calling thread,
 * for the loop to poll between iterations. Call before MPI and OpenMP start
 * threads (they inherit the mask). */
void ptdp_run_catch_sigterm(void);
/* Final checkpoint (when the loop ended well and the last iteration is not
 * saved), end-of-run report, trace and weights. Takes the loop's status and
 * returns the run's. Collective. */
int ptdp_run_finish(ptdp_run *r, int status);
void ptdp_run_free(ptdp_run *r);

#ifdef __cplusplus
}
#endif

#endif
