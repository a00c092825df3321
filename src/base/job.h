/* job.h - one description of a training job (ptdp_job): the model, its
 * parallel layout (t, p, d, v and the split of the layers into stages), the
 * pipeline schedule, recomputation, sequence parallelism, precision, AdamW
 * with its learning-rate schedule, the batch and the data-parallel
 * reduction. `ptdp train` fills it once (its flag table and --config keys
 * point into it); a program that embeds ptdp fills it from
 * ptdp_job_default_params(). The trainer, the model chunks and the planner
 * read it; nobody copies it field by field into a struct of their own.
 *
 * Pure data and its rules: the defaults are `ptdp train`'s (Megatron-LM's);
 * ptdp_job_check applies every rule `ptdp train` applies to its flags, with
 * the same messages, which name each field by the flag that sets it
 * (--global-batch-size for global_batch); ptdp_job_finish also fills what
 * the rules derive. Here too, because the rules and the planner (which runs
 * anywhere and sees only base and the schedule generators) need them: the
 * model's shape (ptdp_gpt_config), the stage layouts (which layers each
 * virtual stage holds, layout.c) and the names of schedules and LR styles.
 *
 * Not here: how several flags resolve into one field (cli/args.c: the
 * recomputation flags, the schedule's name, v from three flags), where the
 * data comes from and what is logged (ptdp_run_params, train.h), the compute
 * backend and the communicator. */
#ifndef PTDP_JOB_H
#define PTDP_JOB_H

#include <stdint.h>

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the model -------------------------------------------------------------- */
/* A GPT model's shape and initialisation. Derived fields (vocab_padded,
 * ffn_hidden and max_positions when 0) come from ptdp_gpt_config_finish. */
typedef struct {
    int64_t num_layers;      /* l (--num-layers) */
    int64_t hidden;          /* h (--hidden-size) */
    int64_t heads;           /* a (--num-attention-heads) */
    int64_t ffn_hidden;      /* the MLP width (--ffn-hidden-size; 0: 4h) */
    int64_t seq_length;      /* s (--seq-length) */
    int64_t max_positions;   /* rows of the position embedding (0: s) */
    int64_t vocab;           /* V, the real vocabulary (--vocab-size) */
    int64_t vocab_padded;    /* Vp, multiple of make_vocab_divisible_by * t */
    float init_std;          /* 0.02 (--init-method-std) */
    float hidden_dropout;    /* after the attention and MLP output projections */
    float attention_dropout; /* on the attention probabilities */
    float ln_eps;            /* 1e-5 (--layernorm-epsilon, --norm-epsilon) */
    uint64_t seed;           /* --seed: initialisation, dropout, mock data, sample order */
    /* The Llama family's blocks (Megatron's flags; all zero: the paper's GPT,
     * GPT-2's blocks; docs/llama.md). */
    int rmsnorm;          /* --normalization RMSNorm: no mean, no bias */
    int swiglu;           /* --swiglu: silu(x Wg^T) * (x Wu^T), ffn_hidden wide */
    int rope;             /* --position-embedding-type rope: no position embedding */
    double rotary_base;   /* --rotary-base theta (0: 10000) */
    float rotary_percent; /* --rotary-percent: rotated fraction of a head (0: 1) */
    int64_t query_groups; /* g, --num-query-groups with --group-query-attention (0: a) */
    int untie;            /* --untie-embeddings-and-output-weights: output_layer.weight */
    int no_bias;          /* --disable-bias-linear: no linear layer has a bias */
} ptdp_gpt_config;

/* Key/value groups g (the heads without grouped-query attention), the
 * rotary dims of a head (0 without rotary embeddings), and whether cfg uses
 * any block of the Llama family (the checkpoint records them). Pure. */
int64_t ptdp_gpt_groups(const ptdp_gpt_config *cfg);
int64_t ptdp_gpt_rotary_dims(const ptdp_gpt_config *cfg);
int ptdp_gpt_is_llama(const ptdp_gpt_config *cfg);

/* Fills the derived fields (vocab_padded from `divisible_by` and t,
 * ffn_hidden = 4h when 0, max_positions = s when 0, rotary_base 10000 and
 * rotary_percent 1 when 0) and validates: heads and the MLP width divisible
 * by t, hidden divisible by heads, s <= max positions; with query groups g:
 * a divisible by g, g by t; the rotary dims even; SwiGLU without biases.
 * PTDP_ECONFIG with a message naming the flag otherwise. Idempotent. */
int ptdp_gpt_config_finish(ptdp_gpt_config *cfg, int64_t divisible_by, int t);

/* ---- stage layouts: which global layers each virtual stage holds ----------- */
/* Megatron's ways of splitting the l transformer layers over the p*v virtual
 * stages (layout.c). A zeroed struct is the even split, l/(p*v) layers per
 * stage. At most one of the three kinds is set (ptdp_stage_layout_check):
 *  - first/last (--decoder-first/last-pipeline-num-layers): pipeline rank 0
 *    holds `first` layers, rank p-1 `last`, split into v chunks each; the
 *    other ranks share the rest evenly;
 *  - embedding/loss (--account-for-embedding/loss-in-pipeline-split): the
 *    embedding and the loss count as one layer each; the l+e+L "layers" are
 *    split evenly and virtual stage 0 (p*v-1) builds one transformer layer
 *    fewer;
 *  - an explicit list (--pipeline-model-parallel-layout): stage_layers[k]
 *    transformer layers on virtual stage k (k = chunk*p + rank, Megatron's
 *    order of the layout string's stages).
 * Stages hold consecutive global layers in virtual stage order; stage 0
 * also holds the embedding, stage p*v-1 the loss head. */
#define PTDP_LAYOUT_MAX_STAGES 128
typedef struct {
    int64_t first, last; /* layers on pipeline rank 0 / p-1 (0: not given) */
    int embedding, loss; /* count the embedding / the loss as a layer */
    int nstages;         /* stages of an explicit layout (0: none) */
    int32_t stage_layers[PTDP_LAYOUT_MAX_STAGES]; /* [nstages] transformer layers per stage */
} ptdp_stage_layout;

/* Parses Megatron's layout string ("E|t*3|t*3|t*2,L": stages separated by
 * '|', E the embedding, L the loss, t a transformer layer, x*n and (..)*n
 * repeat, commas are cosmetic) into L (other fields zeroed). Checks what the
 * string alone decides: known characters, E exactly once and first, L
 * exactly once and last, at most PTDP_LAYOUT_MAX_STAGES stages. Returns
 * PTDP_OK or PTDP_EINVAL with a message naming --pipeline-model-parallel-layout. */
int ptdp_stage_layout_parse(const char *str, ptdp_stage_layout *L);

/* Checks a layout against l layers, p pipeline ranks and v chunks per rank
 * with Megatron's rules (and ptdp's one more: every stage holds a layer, the
 * embedding or the loss). Returns PTDP_OK or PTDP_ECONFIG with a message
 * naming the flags to change. */
int ptdp_stage_layout_check(const ptdp_stage_layout *L, int64_t l, int p, int v);

/* 1 when L is the even split (a zeroed struct). NULL counts as even. */
int ptdp_stage_layout_is_even(const ptdp_stage_layout *L);

/* The one function that says which layers virtual stage `stage` (0 .. p*v-1)
 * holds: global layers [*begin, *end). L NULL: the even split. Assumes a
 * checked layout. Pure. */
void ptdp_stage_layout_range(const ptdp_stage_layout *L, int64_t l, int p, int v, int stage,
                             int64_t *begin, int64_t *end);

/* Writes "3 3 | 3 2" style text (layers per virtual stage, ranks separated by
 * spaces, chunks by " | ") into buf[cap]; returns buf. */
char *ptdp_stage_layout_str(const ptdp_stage_layout *L, int64_t l, int p, int v, char *buf,
                            size_t cap);

/* ---- schedules and learning-rate styles: the names ------------------------- */
/* Pipeline schedules: X(enum, name accepted by --pipeline-schedule). The
 * generators are pipeline/schedule.h's. */
#define PTDP_SCHEDULE_KINDS(X)               \
    X(PTDP_SCHED_GPIPE, "gpipe")             \
    X(PTDP_SCHED_1F1B, "1f1b")               \
    X(PTDP_SCHED_INTERLEAVED, "interleaved") \
    X(PTDP_SCHED_ZBH1, "zb-h1")              \
    X(PTDP_SCHED_ZBV, "zb-v")

typedef enum {
#define PTDP__SCHED_ENUM(e, s) e,
    PTDP_SCHEDULE_KINDS(PTDP__SCHED_ENUM)
#undef PTDP__SCHED_ENUM
        PTDP_SCHED_COUNT
} ptdp_schedule_kind;

/* Megatron's --lr-decay-style. */
#define PTDP_LR_STYLES(X)           \
    X(PTDP_LR_CONSTANT, "constant") \
    X(PTDP_LR_LINEAR, "linear")     \
    X(PTDP_LR_COSINE, "cosine")
typedef enum {
#define PTDP__LR_ENUM(e, s) e,
    PTDP_LR_STYLES(PTDP__LR_ENUM)
#undef PTDP__LR_ENUM
} ptdp_lr_style;
/* Name -> style: PTDP_OK, or PTDP_EINVAL naming --lr-decay-style. */
int ptdp_lr_style_parse(const char *name, ptdp_lr_style *out);
const char *ptdp_lr_style_name(int style); /* "?" out of range */

/* AdamW's settings (Megatron's --adam-beta1, --adam-beta2, --adam-eps,
 * --weight-decay, --clip-grad; clip_grad 0: no clipping). */
typedef struct {
    double beta1, beta2, eps, weight_decay, clip_grad;
} ptdp_adamw_params;

/* ---- the job ------------------------------------------------------------------ */
/* Most model chunks one rank holds (the virtual pipeline size v). */
#define PTDP_MAX_CHUNKS 16

/* Each field names the flag of `ptdp train` that sets it; "resolved" fields
 * are set by cli/args.c from several flags. Sizes are the whole job's: n =
 * t p d ranks, B = global_batch samples per iteration. */
typedef struct {
    /* the model */
    ptdp_gpt_config model;
    int64_t vocab_divisible_by; /* --make-vocab-size-divisible-by: V padded to a multiple of
                                   this x t */
    /* the parallel layout */
    int64_t t;                /* --tensor-model-parallel-size */
    int64_t p;                /* --pipeline-model-parallel-size */
    int64_t d;                /* data-parallel size: ranks / (t p) (the launch decides) */
    int64_t v;                /* model chunks per pipeline rank (--virtual-pipeline-model-
                                 parallel-size; resolved; 0: 2 under zb-v, else 1) */
    ptdp_stage_layout stages; /* how the layers split into the p v stages (zeroed: evenly) */
    int schedule;             /* PTDP_SCHED_* (--pipeline-schedule; resolved; -1:
                                 interleaved when v > 1, else 1f1b) */
    int zb_costs[3];          /* zb-v's costs F, B, W (--zb-costs; 0 0 0: from the
                                 layer's FLOPs, ptdp_schedule_flop_costs) */
    /* memory against compute */
    int recompute;                /* ptdp_recompute_method (--recompute-granularity and
                                     --recompute-method; resolved) */
    int64_t recompute_num_layers; /* --recompute-num-layers (0: not given) */
    int sequence_parallel;        /* --sequence-parallel (in effect when t > 1) */
    int scatter_gather;           /* send 1/t of an activation between stages and all-gather
                                     it (when t > 1; --no-scatter-gather-tensors-in-pipeline
                                     turns it off) */
    /* the batch and the length of the run */
    int64_t micro_batch;   /* b (--micro-batch-size) */
    int64_t global_batch;  /* B (--global-batch-size; 0: b d) */
    int64_t train_iters;   /* --train-iters (-1: not given) */
    int64_t train_samples; /* --train-samples instead (-1: not given) */
    /* AdamW and its learning rate (Megatron's OptimizerParamScheduler counts
     * samples: the iteration flags count iterations of B samples) */
    ptdp_adamw_params adam;
    double lr;                                  /* the peak (--lr; -1: not given) */
    double min_lr;                              /* --min-lr */
    int lr_decay_style;                         /* ptdp_lr_style (--lr-decay-style) */
    int64_t lr_warmup_iters, lr_warmup_samples; /* --lr-warmup-iters / -samples */
    double lr_warmup_fraction;                  /* --lr-warmup-fraction (of the decay) */
    int64_t lr_decay_iters, lr_decay_samples;   /* 0: the whole run */
    /* precision (Megatron's flags) */
    int dtype;                 /* ptdp_dtype of activations and weights (--bf16, --fp16) */
    double loss_scale;         /* --loss-scale (0: dynamic under fp16, none otherwise) */
    double initial_loss_scale; /* --initial-loss-scale, --min-loss-scale */
    double min_loss_scale;
    int64_t loss_scale_window, hysteresis; /* --loss-scale-window, --hysteresis */
    /* the data-parallel reduction */
    int64_t ddp_bucket_size;   /* --ddp-bucket-size: gradient elements per bucket */
    int overlap_grad_reduce;   /* --overlap-grad-reduce (on; --no-overlap-grad-reduce) */
    int distributed_optimizer; /* --use-distributed-optimizer: ZeRO-1 */
    /* the loss */
    int eod_mask_loss; /* --eod-mask-loss: no loss where the input token is eod_token */
    int64_t eod_token; /* the end-of-document id (GPT-2's 50256, or the tokenizer's) */
} ptdp_job;

/* `ptdp train`'s defaults (Megatron-LM's): no model (the shape, --lr and
 * the length of the run are required), t = p = d = 1, b = 1, B = b d, fp32,
 * AdamW 0.9/0.999/1e-8, weight decay 0.01, clip 1.0, linear decay to
 * --min-lr 0 over the run, buckets of 40,000,000 elements overlapped with
 * the backward, dropout 0.1, seed 1234. */
ptdp_job ptdp_job_default_params(void);

/* The fields without a default: the model's shape (--num-layers,
 * --hidden-size, --num-attention-heads, --seq-length), the length of the
 * run (--train-iters or --train-samples) and --lr. PTDP_EINVAL naming the
 * first one missing ("missing required flag --lr (see --help)"). The first
 * rule of ptdp_job_check. */
int ptdp_job_check_required(const ptdp_job *job);
/* The MLP width (--ffn-hidden-size) against t: PTDP_ECONFIG naming both
 * flags. A rule of ptdp_job_check that `ptdp train` applies before it
 * knows the number of ranks (its message comes before the launch's). */
int ptdp_job_check_width(const ptdp_job *job);
/* Applies every rule of `ptdp train` to the job: required fields, ranges,
 * the model's shape against t (ptdp_gpt_config_finish), the stage layout
 * against p and v, the schedule against v and the number of micro-batches,
 * recomputation, sequence parallelism, B a multiple of b d, the
 * learning-rate schedule, loss scaling, the bucket count. Returns PTDP_OK or
 * PTDP_EINVAL / PTDP_ECONFIG with one message naming the flag of the field
 * to change. Pure; the job is not changed. */
int ptdp_job_check(const ptdp_job *job);
/* ptdp_job_check, then fills what the rules derive: v and the schedule when
 * automatic, B = b d when 0, the model's derived fields. Idempotent. */
int ptdp_job_finish(ptdp_job *job);

/* Of a finished job: micro-batches per iteration and data-parallel rank, B /
 * (b d); iterations to train (--train-iters, or --train-samples / B rounded
 * down, Megatron's conversion); 1 when sequence parallelism is in effect
 * (asked for, t > 1: Megatron turns it off at t = 1). */
int64_t ptdp_job_micro_batches(const ptdp_job *job);
int64_t ptdp_job_train_iters(const ptdp_job *job);
int ptdp_job_sequence_parallel(const ptdp_job *job);
/* Global layers [*begin, *end) of virtual stage `stage` (0 .. p v - 1) of a
 * finished job: ptdp_stage_layout_range of its layout. */
void ptdp_job_stage_layers(const ptdp_job *job, int64_t stage, int64_t *begin, int64_t *end);
/* Elements of the whole model's parameters (the tied embedding once, the
 * vocabulary padded) of a finished job. */
int64_t ptdp_job_params(const ptdp_job *job);

#ifdef __cplusplus
}
#endif

#endif
