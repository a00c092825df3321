/* job.c - the job description's defaults and rules (job.h): the checks
 * `ptdp train` applies to its flags, on the fields they set, with the same
 * messages; what the rules derive (v, the schedule, B, the model's padded
 * vocabulary); the model's shape rules (ptdp_gpt_config_finish).
 *
 * Not here: flags that resolve into one field (cli/args.c) and the stage
 * layouts' own arithmetic (layout.c). Pure: no I/O, no allocation. */
#include "base/job.h"

#include <math.h>
#include <string.h>

/* ---- names ------------------------------------------------------------------ */

static const char *const lr_names[] = {
#define PTDP__LR_NAME(e, s) s,
    PTDP_LR_STYLES(PTDP__LR_NAME)
#undef PTDP__LR_NAME
};
#define NSTYLES ((int)(sizeof lr_names / sizeof lr_names[0]))

int ptdp_lr_style_parse(const char *name, ptdp_lr_style *out) {
    for (int i = 0; i < NSTYLES; i++)
        if (!strcmp(name, lr_names[i])) {
            *out = (ptdp_lr_style)i;
            return PTDP_OK;
        }
    return ptdp_errorf(PTDP_EINVAL, "--lr-decay-style must be constant|linear|cosine, got '%s'",
                       name);
}

const char *ptdp_lr_style_name(int style) {
    return style >= 0 && style < NSTYLES ? lr_names[style] : "?";
}

static const char *const sched_names[] = {
#define PTDP__SCHED_NAME(e, s) s,
    PTDP_SCHEDULE_KINDS(PTDP__SCHED_NAME)
#undef PTDP__SCHED_NAME
};

/* ---- the model -------------------------------------------------------------- */

int64_t ptdp_gpt_groups(const ptdp_gpt_config *cfg) {
    return cfg->query_groups > 0 ? cfg->query_groups : cfg->heads;
}

int64_t ptdp_gpt_rotary_dims(const ptdp_gpt_config *cfg) {
    if (!cfg->rope) return 0;
    const float pct = cfg->rotary_percent > 0 ? cfg->rotary_percent : 1.0f;
    /* Megatron: int(kv_channels * rotary_percent) */
    return (int64_t)((double)(cfg->hidden / cfg->heads) * (double)pct);
}

int ptdp_gpt_is_llama(const ptdp_gpt_config *cfg) {
    return cfg->rmsnorm || cfg->swiglu || cfg->rope || cfg->untie || cfg->no_bias ||
           (cfg->query_groups > 0 && cfg->query_groups != cfg->heads);
}

/* The Llama family's checks (ptdp_gpt_config_finish). */
static int finish_llama(ptdp_gpt_config *cfg, int t) {
    if (cfg->rotary_base == 0) cfg->rotary_base = 10000.0;
    if (cfg->rotary_percent == 0) cfg->rotary_percent = 1.0f;
    if (cfg->query_groups < 0) return ptdp_errorf(PTDP_ECONFIG, "--num-query-groups must be >= 1");
    const int64_t g = ptdp_gpt_groups(cfg);
    if (cfg->heads % g)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--num-attention-heads %lld is not divisible by --num-query-groups %lld "
                           "(each key/value group serves the same number of query heads)",
                           (long long)cfg->heads, (long long)g);
    if (g % t)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--num-query-groups %lld is not divisible by "
                           "--tensor-model-parallel-size %d (each tensor-parallel rank holds "
                           "whole key/value groups, as in Megatron); choose t dividing %lld",
                           (long long)g, t, (long long)g);
    if (cfg->rope) {
        if (!(cfg->rotary_percent > 0 && cfg->rotary_percent <= 1))
            return ptdp_errorf(PTDP_ECONFIG, "--rotary-percent %g must be in (0, 1]",
                               (double)cfg->rotary_percent);
        if (!(cfg->rotary_base > 0))
            return ptdp_errorf(PTDP_ECONFIG, "--rotary-base %g must be > 0", cfg->rotary_base);
        const int64_t rd = ptdp_gpt_rotary_dims(cfg);
        if (rd < 2 || rd % 2 || rd > 1024)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--rotary-percent %g of the head size %lld rotates %lld dims; "
                               "rotary embeddings need an even number from 2 to 1024",
                               (double)cfg->rotary_percent, (long long)(cfg->hidden / cfg->heads),
                               (long long)rd);
    }
    if (cfg->swiglu && !cfg->no_bias)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--swiglu with biases on the linear layers is not supported; add "
                           "--disable-bias-linear (as Llama models do)");
    return PTDP_OK;
}

int ptdp_gpt_config_finish(ptdp_gpt_config *cfg, int64_t divisible_by, int t) {
    if (cfg->ffn_hidden == 0) cfg->ffn_hidden = 4 * cfg->hidden;
    if (cfg->num_layers < 1) return ptdp_errorf(PTDP_ECONFIG, "--num-layers must be >= 1");
    if (cfg->hidden < 1 || cfg->heads < 1)
        return ptdp_errorf(PTDP_ECONFIG, "--hidden-size and --num-attention-heads must be >= 1");
    if (cfg->hidden % cfg->heads)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--hidden-size %lld is not divisible by --num-attention-heads %lld",
                           (long long)cfg->hidden, (long long)cfg->heads);
    if (t < 1) return ptdp_errorf(PTDP_ECONFIG, "--tensor-model-parallel-size must be >= 1");
    if (cfg->heads % t)
        return ptdp_errorf(
            PTDP_ECONFIG,
            "--num-attention-heads %lld is not divisible by --tensor-model-parallel-size %d "
            "(each tensor-parallel rank computes a/t whole heads)",
            (long long)cfg->heads, t);
    if (cfg->ffn_hidden < 1 || cfg->ffn_hidden % t)
        return ptdp_errorf(PTDP_ECONFIG,
                           cfg->swiglu
                               ? "--swiglu: --ffn-hidden-size %lld is not divisible by "
                                 "--tensor-model-parallel-size %d (each rank holds the "
                                 "gate and up rows of the same ffn/t units)"
                               : "the MLP width %lld (4 x --hidden-size) is not divisible by "
                                 "--tensor-model-parallel-size %d",
                           (long long)cfg->ffn_hidden, t);
    int lrc = finish_llama(cfg, t);
    if (lrc) return lrc;
    if (cfg->max_positions == 0) cfg->max_positions = cfg->seq_length;
    if (cfg->seq_length < 1) return ptdp_errorf(PTDP_ECONFIG, "--seq-length must be >= 1");
    if (cfg->seq_length > cfg->max_positions)
        return ptdp_errorf(PTDP_ECONFIG, "--seq-length %lld exceeds --max-position-embeddings %lld",
                           (long long)cfg->seq_length, (long long)cfg->max_positions);
    if (cfg->vocab < 2) return ptdp_errorf(PTDP_ECONFIG, "the vocabulary size must be >= 2");
    if (divisible_by < 1)
        return ptdp_errorf(PTDP_ECONFIG, "--make-vocab-size-divisible-by must be >= 1");
    int64_t mult = divisible_by * t;
    cfg->vocab_padded = (cfg->vocab + mult - 1) / mult * mult;
    if (cfg->ln_eps == 0.0f) cfg->ln_eps = 1e-5f;
    return PTDP_OK;
}

/* ---- defaults ------------------------------------------------------------------ */

ptdp_job ptdp_job_default_params(void) {
    return (ptdp_job){
        .model = {.num_layers = 0,
                  .hidden = 0,
                  .heads = 0,
                  .ffn_hidden = 0,
                  .seq_length = 0,
                  .max_positions = 0,
                  .vocab = 50257,
                  .vocab_padded = 0,
                  .init_std = 0.02f,
                  .hidden_dropout = 0.1f,
                  .attention_dropout = 0.1f,
                  .ln_eps = 1e-5f,
                  .seed = 1234,
                  .rotary_base = 10000.0,
                  .rotary_percent = 1.0f},
        .vocab_divisible_by = 128,
        .t = 1,
        .p = 1,
        .d = 1,
        .v = 0,
        .stages = {.first = 0},
        .schedule = -1,
        .zb_costs = {0, 0, 0},
        .recompute = PTDP_RECOMPUTE_NONE,
        .recompute_num_layers = 0,
        .sequence_parallel = 0,
        .scatter_gather = 1,
        .micro_batch = 1,
        .global_batch = 0,
        .train_iters = -1,
        .train_samples = -1,
        .adam = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .clip_grad = 1.0},
        .lr = -1,
        .min_lr = 0.0,
        .lr_decay_style = PTDP_LR_LINEAR,
        .lr_warmup_iters = 0,
        .lr_warmup_samples = 0,
        .lr_warmup_fraction = 0.0,
        .lr_decay_iters = 0,
        .lr_decay_samples = 0,
        .dtype = PTDP_DTYPE_FP32,
        .loss_scale = 0.0,
        .initial_loss_scale = 4294967296.0, /* Megatron's 2^32 */
        .min_loss_scale = 1.0,
        .loss_scale_window = 1000,
        .hysteresis = 2,
        .ddp_bucket_size = 40000000,
        .overlap_grad_reduce = 1,
        .distributed_optimizer = 0,
        .eod_mask_loss = 0,
        .eod_token = 50256, /* GPT-2's <|endoftext|> */
    };
}

/* ---- the rules ------------------------------------------------------------------- */

/* Fields a program may set to anything: each outside its flag's range is
 * refused, naming the flag, before a rule divides by it. */
static int check_ranges(const ptdp_job *j) {
    const struct {
        double value, lo, hi;
        const char *flag;
    } r[] = {
        {(double)j->t, 1, 4096, "--tensor-model-parallel-size"},
        {(double)j->p, 1, 4096, "--pipeline-model-parallel-size"},
        {(double)j->d, 1, 1e9, "the data-parallel size (ranks / (t x p))"},
        {(double)j->v, 0, 4096, "--virtual-pipeline-model-parallel-size"},
        {(double)j->micro_batch, 1, 1000000, "--micro-batch-size"},
        {(double)j->global_batch, 0, 1e15, "--global-batch-size"},
        {(double)j->vocab_divisible_by, 1, 1000000, "--make-vocab-size-divisible-by"},
        {(double)j->model.vocab, 2, 100000000, "--vocab-size"},
        {(double)j->model.init_std, 0, 10, "--init-method-std"},
        {(double)j->model.hidden_dropout, 0, 0.99, "--hidden-dropout"},
        {(double)j->model.attention_dropout, 0, 0.99, "--attention-dropout"},
        {(double)j->model.ln_eps, 0, 1, "--layernorm-epsilon"},
        {(double)j->recompute_num_layers, 0, 100000, "--recompute-num-layers"},
        {(double)j->ddp_bucket_size, 1, 1e15, "--ddp-bucket-size"},
        {j->min_lr, 0, 1e3, "--min-lr"},
        {j->adam.clip_grad, 0, 1e9, "--clip-grad"},
        {j->adam.weight_decay, 0, 100, "--weight-decay"},
        {j->adam.beta1, 0, 0.999999, "--adam-beta1"},
        {j->adam.beta2, 0, 0.999999999, "--adam-beta2"},
        {j->adam.eps, 0, 1, "--adam-eps"},
        {j->lr_warmup_fraction, 0, 1, "--lr-warmup-fraction"},
        {(double)j->lr_warmup_iters, 0, 1e15, "--lr-warmup-iters"},
        {(double)j->lr_decay_iters, 0, 1e15, "--lr-decay-iters"},
        {(double)j->lr_warmup_samples, 0, 1e15, "--lr-warmup-samples"},
        {(double)j->lr_decay_samples, 0, 1e15, "--lr-decay-samples"},
        {j->loss_scale, 0, 1e38, "--loss-scale"},
        {j->initial_loss_scale, 1, 1e38, "--initial-loss-scale"},
        {j->min_loss_scale, 0, 1e38, "--min-loss-scale"},
        {(double)j->loss_scale_window, 1, 1e15, "--loss-scale-window"},
        {(double)j->hysteresis, 1, 1000000, "--hysteresis"},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if (!(r[i].value >= r[i].lo && r[i].value <= r[i].hi)) /* NaN fails too */
            return ptdp_errorf(PTDP_EINVAL, "%s must be between %g and %g, got %g", r[i].flag,
                               r[i].lo, r[i].hi, r[i].value);
    if (j->schedule < -1 || j->schedule >= PTDP_SCHED_COUNT)
        return ptdp_errorf(PTDP_EINVAL, "--pipeline-schedule: no schedule number %d", j->schedule);
    if (j->recompute < PTDP_RECOMPUTE_NONE || j->recompute > PTDP_RECOMPUTE_SELECTIVE)
        return ptdp_errorf(PTDP_EINVAL, "--recompute-granularity: no recomputation method %d",
                           j->recompute);
    if (j->lr_decay_style < 0 || j->lr_decay_style >= NSTYLES)
        return ptdp_errorf(PTDP_EINVAL, "--lr-decay-style: no style %d", (int)j->lr_decay_style);
    if (j->dtype != PTDP_DTYPE_FP32 && j->dtype != PTDP_DTYPE_BF16 && j->dtype != PTDP_DTYPE_FP16)
        return ptdp_errorf(PTDP_EINVAL,
                           "the precision must be fp32, bf16 (--bf16) or fp16 "
                           "(--fp16), got dtype %d",
                           (int)j->dtype);
    if (j->stages.nstages < 0 || j->stages.nstages > PTDP_LAYOUT_MAX_STAGES)
        return ptdp_errorf(PTDP_EINVAL, "--pipeline-model-parallel-layout: at most %d stages",
                           PTDP_LAYOUT_MAX_STAGES);
    for (int k = 0; k < 3; k++)
        if (j->zb_costs[k] < 0 || j->zb_costs[k] > 1000)
            return ptdp_errorf(PTDP_EINVAL, "--zb-costs: each cost must be between 1 and 1000");
    return PTDP_OK;
}

/* v when the job leaves it to the schedule: zb-v's V is two chunks. */
static int64_t resolved_v(const ptdp_job *j) {
    return j->v ? j->v : j->schedule == PTDP_SCHED_ZBV ? 2 : 1;
}

/* Megatron's TransformerConfig for full recomputation: --recompute-num-layers
 * is required (for both methods) and at most the layers of a pipeline rank
 * (Megatron's num_layers / p; with virtual stages the rank's chunks
 * together, with uneven stages the fullest rank); a larger value would mean
 * no more than that, so it is a mistake to point out, not a setting. */
static int check_recompute_layers(const ptdp_job *j, int64_t v) {
    const int uniform = j->recompute == PTDP_RECOMPUTE_UNIFORM;
    const char *method = uniform ? "uniform" : "block";
    const int64_t pp = j->p, want = j->recompute_num_layers;
    if (!want)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--recompute-method %s needs --recompute-num-layers N (%s), as in "
                           "Megatron-LM; e.g. --recompute-num-layers 1",
                           method,
                           uniform ? "the layers of each recomputed group"
                                   : "the layers recomputed in each pipeline stage");
    int64_t most = 0;
    for (int r = 0; r < pp; r++) {
        int64_t on_rank = 0;
        for (int c = 0; c < v; c++) {
            int64_t b = 0, e = 0;
            ptdp_stage_layout_range(&j->stages, j->model.num_layers, (int)pp, (int)v,
                                    (int)(c * pp + r), &b, &e);
            on_rank += e - b;
        }
        if (on_rank > most) most = on_rank;
    }
    if (want <= most) return PTDP_OK;
    char where[160];
    if (pp == 1)
        snprintf(where, sizeof where, "the model's --num-layers %lld", (long long)most);
    else if (ptdp_stage_layout_is_even(&j->stages))
        snprintf(where, sizeof where,
                 "the %lld layers of a pipeline rank (--num-layers %lld over "
                 "--pipeline-model-parallel-size %lld)",
                 (long long)most, (long long)j->model.num_layers, (long long)pp);
    else
        snprintf(where, sizeof where, "the %lld layers of the fullest pipeline rank",
                 (long long)most);
    return ptdp_errorf(PTDP_ECONFIG,
                       "--recompute-num-layers %lld is more than %s; give 1 to %lld (%s)",
                       (long long)want, where, (long long)most,
                       uniform ? "layers per recomputed group" : "layers recomputed in each stage");
}

/* The virtual stages and their layers (Megatron's rules). */
static int check_layout(const ptdp_job *j, int64_t v) {
    const int zbv = j->schedule == PTDP_SCHED_ZBV;
    if (zbv && (j->stages.first || j->stages.last))
        return ptdp_errorf(PTDP_ECONFIG,
                           "--decoder-first/last-pipeline-num-layers count layers per pipeline "
                           "rank in the interleaved order; with --pipeline-schedule zb-v (rank 0 "
                           "holds the first and the last stage) give the stages with "
                           "--pipeline-model-parallel-layout or "
                           "--account-for-embedding/loss-in-pipeline-split instead");
    if (zbv && j->p < 2)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--pipeline-schedule zb-v runs two model chunks per rank in a V "
                           "shape: it needs --pipeline-model-parallel-size >= 2");
    if (v > 1 && j->p == 1)
        return ptdp_errorf(
            PTDP_ECONFIG,
            "virtual pipeline stages (v = %lld) need --pipeline-model-parallel-size > 1",
            (long long)v);
    if (v > PTDP_LAYOUT_MAX_STAGES || j->p * v > PTDP_LAYOUT_MAX_STAGES * 32)
        return ptdp_errorf(PTDP_ECONFIG, "too many virtual pipeline stages (v = %lld)",
                           (long long)v);
    if (v > PTDP_MAX_CHUNKS)
        return ptdp_errorf(PTDP_ECONFIG, "at most %d model chunks per rank", PTDP_MAX_CHUNKS);
    return ptdp_stage_layout_check(&j->stages, j->model.num_layers, (int)j->p, (int)v);
}

/* The schedule against v, recomputation, the micro-batches. */
static int check_schedule(const ptdp_job *j, int64_t v, int64_t B) {
    const int kind = j->schedule >= 0 ? j->schedule
                     : v > 1          ? PTDP_SCHED_INTERLEAVED
                                      : PTDP_SCHED_1F1B;
    const char *sched = sched_names[kind];
    const int zbv = kind == PTDP_SCHED_ZBV, pp = (int)j->p;
    if (v > 1 && kind != PTDP_SCHED_INTERLEAVED && !zbv)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--pipeline-schedule %s runs one model chunk per rank; virtual stages "
                           "(v = %lld) need the interleaved schedule (or zb-v, with v = 2)",
                           sched, (long long)v);
    if (zbv && (pp < 2 || v != 2))
        return ptdp_errorf(PTDP_ECONFIG,
                           "--pipeline-schedule zb-v runs two model chunks per rank in a V "
                           "shape: it needs --pipeline-model-parallel-size >= 2 (got %d) "
                           "and --virtual-pipeline-model-parallel-size 2 or left out (got v = "
                           "%lld)",
                           pp, (long long)v);
    if ((j->zb_costs[0] || j->zb_costs[1] || j->zb_costs[2]) && !zbv)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--zb-costs sets the costs zb-v's list scheduler plays; it needs "
                           "--pipeline-schedule zb-v (got %s)",
                           sched);
    if ((j->zb_costs[0] || j->zb_costs[1] || j->zb_costs[2]) &&
        (!j->zb_costs[0] || !j->zb_costs[1] || !j->zb_costs[2]))
        return ptdp_errorf(PTDP_EINVAL, "--zb-costs: give all three costs F,B,W (each 1 to 1000)");
    if (v == 1 && kind == PTDP_SCHED_INTERLEAVED)
        return ptdp_errorf(PTDP_ECONFIG, "--pipeline-schedule interleaved needs "
                                         "--virtual-pipeline-model-parallel-size > 1");
    const int zb = kind == PTDP_SCHED_ZBH1 || zbv;
    const int full = j->recompute == PTDP_RECOMPUTE_UNIFORM || j->recompute == PTDP_RECOMPUTE_BLOCK;
    if (zb && full)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--pipeline-schedule %s keeps activations until the weight "
                           "gradients (W) run; it cannot be combined with "
                           "--recompute-granularity full (selective is fine)",
                           sched);
    if (j->recompute == PTDP_RECOMPUTE_NONE && j->recompute_num_layers)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--recompute-num-layers needs --recompute-granularity full");
    if (j->recompute == PTDP_RECOMPUTE_SELECTIVE && j->recompute_num_layers)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--recompute-granularity selective recomputes core attention in "
                           "every layer; --recompute-method and --recompute-num-layers go "
                           "with --recompute-granularity full (as in Megatron-LM)");
    if (full) {
        int rc = check_recompute_layers(j, v);
        if (rc) return rc;
    }
    const int64_t t = j->t, bd = j->micro_batch * j->d;
    if (j->sequence_parallel && t > 1 && j->model.seq_length % t)
        return ptdp_errorf(
            PTDP_ECONFIG,
            "--sequence-parallel splits the sequence across the tensor-parallel group: "
            "--seq-length %lld is not divisible by --tensor-model-parallel-size %lld; choose "
            "a sequence length that is a multiple of t",
            (long long)j->model.seq_length, (long long)t);
    if (v > 1 && !zbv && B % bd == 0 && (B / bd) % pp)
        return ptdp_errorf(
            PTDP_ECONFIG,
            "the interleaved schedule needs the number of micro-batches (%lld = "
            "--global-batch-size / (--micro-batch-size x data-parallel size)) to be a multiple "
            "of --pipeline-model-parallel-size %lld",
            (long long)(B / bd), (long long)pp);
    return PTDP_OK;
}

/* Megatron's validate_args for the two ways to count training: iterations
 * (--train-iters, --lr-*-iters) or samples (--train-samples,
 * --lr-*-samples), never a mix; one warm-up flag. */
static int check_lr(const ptdp_job *j, int64_t B) {
    const int by_samples = j->train_samples >= 0;
    if (by_samples && j->train_iters >= 0)
        return ptdp_errorf(PTDP_ECONFIG, "give --train-iters or --train-samples, not both");
    const char *unit = by_samples ? "samples" : "iters";
    const char *mixed = by_samples ? (j->lr_decay_iters    ? "--lr-decay-iters"
                                      : j->lr_warmup_iters ? "--lr-warmup-iters"
                                                           : NULL)
                                   : (j->lr_decay_samples    ? "--lr-decay-samples"
                                      : j->lr_warmup_samples ? "--lr-warmup-samples"
                                                             : NULL);
    if (mixed)
        return ptdp_errorf(
            PTDP_ECONFIG, "%s counts %s, and this run counts %s (--train-%s); use --lr-%s-%s",
            mixed, by_samples ? "iterations" : "samples", by_samples ? "samples" : "iterations",
            unit, strstr(mixed, "decay") ? "decay" : "warmup", unit);
    const int64_t warm = by_samples ? j->lr_warmup_samples : j->lr_warmup_iters,
                  decay = by_samples ? j->lr_decay_samples : j->lr_decay_iters;
    if (warm && j->lr_warmup_fraction > 0)
        return ptdp_errorf(PTDP_ECONFIG, "give --lr-warmup-%s or --lr-warmup-fraction, not both",
                           unit);
    if (decay && warm >= decay && j->lr_decay_style != PTDP_LR_CONSTANT)
        return ptdp_errorf(PTDP_ECONFIG, "--lr-warmup-%s %lld must be below --lr-decay-%s %lld",
                           unit, (long long)warm, unit, (long long)decay);
    if (by_samples && j->train_samples > 0 && j->train_samples < B)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--train-samples %lld is less than one global batch (%lld samples); "
                           "give at least %lld, or 0 to train nothing",
                           (long long)j->train_samples, (long long)B, (long long)B);
    return PTDP_OK;
}

int64_t ptdp_job_params(const ptdp_job *j) {
    const ptdp_gpt_config *c = &j->model;
    const int64_t h = c->hidden, ffn = c->ffn_hidden;
    return (c->vocab_padded + c->max_positions) * h +
           c->num_layers * (4 * h * h + 2 * h * ffn + 9 * h + ffn) + 2 * h;
}

/* Each bucket is one collective with its own request: tens of thousands of
 * tiny ones make no progress worth having and hold memory per request. */
static int check_buckets(const ptdp_job *j) {
    const int64_t per_rank = ptdp_job_params(j) / (j->t * j->p), max_buckets = 10000;
    const int64_t least = (per_rank + max_buckets - 1) / max_buckets;
    if (j->ddp_bucket_size >= least) return PTDP_OK;
    return ptdp_errorf(
        PTDP_ECONFIG,
        "--ddp-bucket-size %lld cuts this rank's ~%lld gradients into ~%lld buckets (one "
        "collective each; at most %lld are allowed); give at least %lld, or leave the "
        "default 40000000 (Megatron's)",
        (long long)j->ddp_bucket_size, (long long)per_rank,
        (long long)((per_rank + j->ddp_bucket_size - 1) / j->ddp_bucket_size),
        (long long)max_buckets, (long long)least);
}

int ptdp_job_check_required(const ptdp_job *j) {
    const ptdp_gpt_config *c = &j->model;
    const struct {
        int missing;
        const char *flag;
    } req[] = {
        {c->num_layers == 0, "--num-layers"},
        {c->hidden == 0, "--hidden-size"},
        {c->heads == 0, "--num-attention-heads"},
        {c->seq_length == 0, "--seq-length"},
        {j->train_iters < 0 && j->train_samples < 0, "--train-iters (or --train-samples)"},
        {!(j->lr >= 0), "--lr"},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (req[i].missing)
            return ptdp_errorf(PTDP_EINVAL, "missing required flag %s (see --help)", req[i].flag);
    return PTDP_OK;
}

int ptdp_job_check_width(const ptdp_job *j) {
    const ptdp_gpt_config *c = &j->model;
    if (j->t > 0 && c->ffn_hidden && c->ffn_hidden % j->t)
        return ptdp_errorf(
            PTDP_ECONFIG,
            c->swiglu ? "--swiglu: --ffn-hidden-size %lld is not divisible by "
                        "--tensor-model-parallel-size %lld (each rank holds the gate and up rows "
                        "of the same ffn/t units)"
                      : "--ffn-hidden-size %lld is not divisible by --tensor-model-parallel-size "
                        "%lld (each tensor-parallel rank holds 1/t of the MLP width)",
            (long long)c->ffn_hidden, (long long)j->t);
    return PTDP_OK;
}

int ptdp_job_finish(ptdp_job *j) {
    const ptdp_gpt_config *c = &j->model;
    int rc = ptdp_job_check_required(j);
    if (!rc) rc = check_ranges(j);
    if (!rc) rc = ptdp_job_check_width(j);
    if (rc) return rc;
    const int64_t v = resolved_v(j);
    const int64_t B = j->global_batch ? j->global_batch : j->micro_batch * j->d;
    rc = check_layout(j, v);
    if (!rc) rc = check_schedule(j, v, B);
    if (!rc) rc = ptdp_gpt_config_finish(&j->model, j->vocab_divisible_by, (int)j->t);
    if (rc) return rc;
    if (B % (j->micro_batch * j->d))
        return ptdp_errorf(PTDP_ECONFIG,
                           "--global-batch-size %lld is not a multiple of --micro-batch-size %lld "
                           "x data-parallel size %lld (= ranks / (t x p)); each data-parallel "
                           "rank needs a whole number of micro-batches",
                           (long long)B, (long long)j->micro_batch, (long long)j->d);
    rc = check_lr(j, B);
    if (rc) return rc;
    if (j->loss_scale > 0 && j->dtype == PTDP_DTYPE_FP32)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--loss-scale applies to --fp16 (or --bf16) training; fp32 has no loss "
                           "scaling");
    if (j->min_lr > j->lr)
        return ptdp_errorf(PTDP_ECONFIG, "--min-lr %g is above --lr %g", j->min_lr, j->lr);
    if (j->lr > 1e3)
        return ptdp_errorf(PTDP_EINVAL, "--lr must be between 0 and 1000, got %g", j->lr);
    if (j->eod_mask_loss && (j->eod_token < 0 || j->eod_token >= c->vocab))
        return ptdp_errorf(PTDP_ECONFIG,
                           "--eod-mask-loss: the end-of-document id %lld is not below "
                           "--vocab-size %lld",
                           (long long)j->eod_token, (long long)c->vocab);
    rc = check_buckets(j);
    if (rc) return rc;
    j->v = v;
    j->schedule = j->schedule >= 0 ? j->schedule : v > 1 ? PTDP_SCHED_INTERLEAVED : PTDP_SCHED_1F1B;
    j->global_batch = B;
    return PTDP_OK;
}

int ptdp_job_check(const ptdp_job *job) {
    ptdp_job copy = *job;
    return ptdp_job_finish(&copy);
}

/* ---- of a finished job ------------------------------------------------------- */

int64_t ptdp_job_micro_batches(const ptdp_job *j) {
    return j->global_batch / (j->micro_batch * j->d);
}

int64_t ptdp_job_train_iters(const ptdp_job *j) {
    return j->train_samples >= 0 ? j->train_samples / j->global_batch : j->train_iters;
}

int ptdp_job_sequence_parallel(const ptdp_job *j) { return j->sequence_parallel && j->t > 1; }

void ptdp_job_stage_layers(const ptdp_job *j, int64_t stage, int64_t *begin, int64_t *end) {
    ptdp_stage_layout_range(&j->stages, j->model.num_layers, (int)j->p, (int)j->v, (int)stage,
                            begin, end);
}
