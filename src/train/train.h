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

typedef struct {
    ptdp_gpt_config cfg;  /* finished (ptdp_gpt_config_finish) */
    int64_t micro_batch;  /* b */
    int64_t global_batch; /* B, a multiple of b */
    ptdp_lr_schedule lr;
    ptdp_adamw_params adam;
    ptdp_backend *be; /* the compute backend (the caller opens and closes it) */
    ptdp_comm *comm;
    const char *init_from;      /* HF GPT-2 safetensors or NULL for Megatron init */
    ptdp_schedule_params sched; /* p, v, kind, zb-v costs (m is derived); p 0: p = comm's, v = 1;
                                 costs 0: from the layer's FLOPs (ptdp_schedule_flop_costs) */
    ptdp_stage_layout layout;   /* layers per virtual stage (zeroed: the even split) */
    int64_t trace_events;       /* capacity of the --trace event log (0: off) */
    int recompute_method;       /* PTDP_RECOMPUTE_* */
    int64_t recompute_num_layers;
    int scatter_gather;        /* send 1/t slices between stages (t > 1) */
    int sequence_parallel;     /* --sequence-parallel (t > 1; s % t == 0): residual stream,
                                  LayerNorms, dropouts and pipeline messages on 1/t of the
                                  sequence; subsumes scatter_gather, which is then unused */
    int64_t ddp_bucket_floats; /* --ddp-bucket-size (0: 40M) */
    int overlap_grad_reduce;   /* start bucket reductions during the last backward */
    int distributed_optimizer; /* ZeRO-1 */
    ptdp_loss_scaler scaler;   /* fp16's loss scaling (default: constant 1, none) */
    int eod_mask_loss;         /* --eod-mask-loss: no loss where the input token is eod_token */
    int32_t eod_token;
    int check_nonfinite; /* --check-for-nan-in-loss-and-grad: note whether this rank's own
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

/* Megatron's defaults where they exist (AdamW 0.9/0.999/1e-8, weight decay
 * 0.01, clip 1.0; one micro-batch; the layout from the comm). */
ptdp_trainer_params ptdp_trainer_default_params(void);

typedef struct ptdp_trainer ptdp_trainer;

/* Plans memory, allocates, initialises (or loads init_from). Errors:
 * PTDP_ENOMEM, and the loader's PTDP_ENOTFOUND/PTDP_EFORMAT/PTDP_EIO. */
int ptdp_trainer_init(ptdp_trainer **out, const ptdp_trainer_params *p);
void ptdp_trainer_free(ptdp_trainer *tr);

/* One iteration over the global batch. tokens [B/d, s+1]: this data-parallel
 * rank's share (samples dp*B/d .. of the batch; sample k in row k). Runs forward/backward per
 * micro-batch, the gradient norm, clipping and AdamW. Blocking; every rank of the job calls it. */
void ptdp_trainer_step(ptdp_trainer *tr, const int32_t *batch, ptdp_step_stats *st);

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
/* Logs the memory plan: every rank whose carved bytes differ from the
 * prediction logs a "memory plan MISMATCH" line; the ranks with dp = tp = 0
 * (one per pipeline stage) log the table category / bytes / predicted; rank
 * 0 the bytes per parameter. Not collective. */
void ptdp_trainer_log_memory(const ptdp_trainer *tr);
/* Ranks with dp = tp = 0: the process's peak resident memory (getrusage
 * ru_maxrss) next to the plan's total; every rank whose compute backend
 * allocated memory beyond its planned workspace: a "memory plan MISMATCH"
 * line with the bytes. End of a run. */
void ptdp_trainer_log_peak_memory(const ptdp_trainer *tr);

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
/* What `ptdp train` asks for, in library terms. Strings are borrowed (the
 * caller keeps them alive until ptdp_run_free). */
typedef struct {
    ptdp_trainer_params trainer; /* model, layout, optimizer; trainer.comm set up */
    int64_t train_iters;
    /* data: --data-path (n_data_paths > 0), else --token-file, else mock */
    int n_data_paths;
    const char *const *data_paths; /* Megatron's "[weight] prefix ..." list */
    const char *split;             /* "969,30,1" */
    const char *token_file;
    uint64_t seed; /* sample order, mock data */
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
    const char *gemm_name;                 /* for the start-up line */
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
