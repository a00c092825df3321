/* args.c - Megatron-style flags for train/export, and --config JSON. */
#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The library's defaults (Megatron-LM's), and the command line's own. */
void ptdp_args_defaults(ptdp_args *a) {
    memset(a, 0, sizeof *a);
    a->job = ptdp_job_default_params();
    a->run = ptdp_run_default_params();
    a->normalization = "LayerNorm";
    a->position_embedding_type = "learned_absolute";
    a->num_query_groups = 1; /* Megatron's default, read only with --group-query-attention */
    a->lr_decay_style = "linear";
    a->tokenizer_type = "GPT2BPETokenizer";
    a->distributed_timeout_minutes = 10; /* Megatron's default */
    a->gemm = "onednn";
    a->device = "cpu";
    a->accumulate_allreduce_grads_in_fp32 = 1;
    a->attention_softmax_in_fp32 = 1;
    a->export_dtype = "fp32";
    a->tensorboard_queue_size = 1000;
    a->optimizer = "adam";
}

#define I(name, field, help, lo, hi) \
    { name, PTDP_OPT_INT, &a->field, help, NULL, lo, hi, 0 }
#define F(name, field, help, lo, hi) \
    { name, PTDP_OPT_FLOAT, &a->field, help, NULL, lo, hi, 0 }
#define F32(name, field, help, lo, hi) \
    { name, PTDP_OPT_FLOAT32, &a->field, help, NULL, lo, hi, 0 }
#define S(name, field, help, choices) \
    { name, PTDP_OPT_STR, &a->field, help, choices, 0, 0, 0 }
#define B(name, field, help) \
    { name, PTDP_OPT_BOOL, &a->field, help, NULL, 0, 1, 0 }
#define BIG 1e15

int ptdp_args_table(ptdp_args *a, int which, ptdp_opt *opts, int cap) {
    return ptdp_args_table_groups(a, which, opts, cap, NULL);
}

/* The flags in the argument groups of Megatron's arguments.py, for --help;
 * titles[i] is the group's title at its first flag, NULL elsewhere. */
int ptdp_args_table_groups(ptdp_args *a, int which, ptdp_opt *opts, int cap, const char **titles) {
    const ptdp_opt config[] = {
        S("config", config, "JSON file with the same keys as the flags (flags win)", NULL),
    };
    const ptdp_opt network[] = {
        /* Megatron's flags for the model's blocks: GPT-2's by default, the
         * Llama family's (RMSNorm, SwiGLU, rotary embeddings, grouped-query
         * attention, untied output layer, no biases) by flag (docs/llama.md) */
        I("num-layers", job.model.num_layers, "transformer layers l (required)", 1, 100000),
        I("hidden-size", job.model.hidden, "hidden size h (required)", 1, 1000000),
        I("num-attention-heads", job.model.heads, "attention heads a (required)", 1, 100000),
        I("ffn-hidden-size", job.model.ffn_hidden, "MLP width (0: 4h)", 0, 10000000),
        I("seq-length", job.model.seq_length, "sequence length s (required)", 1, 1000000),
        I("max-position-embeddings", job.model.max_positions,
          "position embedding rows (0: seq-length)", 0, 1000000),
        I("vocab-size", job.model.vocab, "vocabulary size V for --mock-data/--token-file", 2,
          100000000),
        I("make-vocab-size-divisible-by", job.vocab_divisible_by, "pad V to a multiple of this x t",
          1, 1000000),
        S("normalization", normalization,
          "normalization layer: LayerNorm (GPT-2's) or RMSNorm (Llama's: no mean, no bias)",
          "LayerNorm|RMSNorm"),
        S("position-embedding-type", position_embedding_type,
          "position embeddings: learned_absolute (GPT-2's) or rope (rotary, Llama's)",
          "learned_absolute|rope"),
        F("rotary-base", job.model.rotary_base, "rotary embeddings' base theta", 1, 1e12),
        F32("rotary-percent", job.model.rotary_percent,
            "fraction of each head's dims rotary embeddings rotate", 1e-6, 1),
        B("swiglu", job.model.swiglu,
          "SwiGLU MLP: silu(x Wg^T) * (x Wu^T), --ffn-hidden-size wide (Llama's ~8h/3: give it)"),
        B("group-query-attention", group_query_attention,
          "grouped-query attention: --num-query-groups key/value heads"),
        I("num-query-groups", num_query_groups,
          "key/value groups with --group-query-attention (divides the heads; t divides it)", 1,
          100000),
        B("untie-embeddings-and-output-weights", job.model.untie,
          "an output layer of its own instead of the word embedding's transpose"),
        B("disable-bias-linear", job.model.no_bias, "no biases in the linear layers"),
        F32("layernorm-epsilon", job.model.ln_eps, "LayerNorm epsilon", 1e-12, 1),
        F32("norm-epsilon", job.model.ln_eps, "LayerNorm/RMSNorm epsilon (Megatron's newer name)",
            1e-12, 1),
    };
    const ptdp_opt init[] = {
        I("seed", job.model.seed, "random seed (initialisation, dropout, mock data)", 0, BIG),
        F32("init-method-std", job.model.init_std, "std of the normal initialisation", 0, 10),
        S("init-from", run.trainer.init_from, "start from Hugging Face GPT-2 safetensors weights",
          NULL),
        B("allow-extra-tensors", allow_extra_tensors,
          "with --init-from: ignore tensors of the file the model "
          "does not use (e.g. load the first --num-layers layers of a deeper model)"),
    };
    const ptdp_opt regularization[] = {
        F32("hidden-dropout", job.model.hidden_dropout,
            "dropout after attention/MLP outputs and embeddings", 0, 0.99),
        F32("attention-dropout", job.model.attention_dropout, "dropout on attention probabilities",
            0, 0.99),
    };
    const ptdp_opt training[] = {
        I("micro-batch-size", job.micro_batch, "micro-batch size b", 1, 1000000),
        I("global-batch-size", job.global_batch, "global batch size B (0: b x data-parallel size)",
          0, BIG),
        I("train-iters", job.train_iters,
          "iterations to train (required unless --train-samples; 0 runs no step)", 0, BIG),
        I("train-samples", job.train_samples,
          "samples to train instead of --train-iters (iterations: this / global batch, rounded "
          "down; the schedule flags are then --lr-*-samples)",
          0, BIG),
        I("exit-interval", run.exit_interval,
          "stop after an iteration that is a multiple of this (saving with --save; 0: off)", 0,
          BIG),
        F("exit-duration-in-mins", run.exit_duration_mins,
          "stop once training has run this many minutes (saving with --save; 0: off)", 0, 1e9),
        B("exit-signal-handler", run.exit_signal_handler,
          "on SIGTERM (a preemption notice), finish the iteration, save with --save and exit 0"),
        B("recompute-activations", recompute_activations,
          "Megatron's shorthand for --recompute-granularity selective"),
        S("recompute-granularity", recompute_granularity,
          "activation recomputation: full reruns each layer group's forward before its "
          "backward; selective reruns only core attention (the s x s part)",
          "full|selective"),
        S("recompute-method", recompute_method,
          "uniform: groups of --recompute-num-layers; block: only the first "
          "--recompute-num-layers layers of each stage",
          "uniform|block"),
        I("recompute-num-layers", job.recompute_num_layers,
          "layers per recompute group (uniform) or recomputed "
          "layers per stage (block)",
          1, 100000),
        B("check-for-nan-in-loss-and-grad", run.check_for_nan,
          "stop with an error when the loss or the gradient norm is nan/inf (Megatron's default)"),
        {"no-check-for-nan-in-loss-and-grad", PTDP_OPT_NEGBOOL, &a->run.check_for_nan,
         "skip such an iteration instead (no optimizer step; counted in the log line)", NULL, 0, 1,
         0},
    };
    const ptdp_opt optimizer[] = {
        S("optimizer", optimizer,
          "AdamW, which is Megatron's adam (decoupled --weight-decay); the only choice", "adam"),
        F("weight-decay", job.adam.weight_decay,
          "AdamW decoupled weight decay (not on biases/LayerNorm)", 0, 100),
        F("clip-grad", job.adam.clip_grad, "clip the global gradient norm to this (0: off)", 0,
          1e9),
        F("adam-beta1", job.adam.beta1, "AdamW beta1", 0, 0.999999),
        F("adam-beta2", job.adam.beta2, "AdamW beta2", 0, 0.999999999),
        F("adam-eps", job.adam.eps, "AdamW epsilon", 0, 1),
    };
    const ptdp_opt lr[] = {
        F("lr", job.lr, "peak learning rate (required)", 0, 1e3),
        F("min-lr", job.min_lr, "learning rate at the end of the decay", 0, 1e3),
        S("lr-decay-style", lr_decay_style, "learning-rate decay", "constant|linear|cosine"),
        I("lr-warmup-iters", job.lr_warmup_iters, "linear warm-up iterations", 0, BIG),
        F("lr-warmup-fraction", job.lr_warmup_fraction,
          "warm-up as a fraction of the decay (--lr-decay-iters or -samples; not rounded)", 0, 1),
        I("lr-decay-iters", job.lr_decay_iters, "iterations of decay (0: --train-iters)", 0, BIG),
        I("lr-warmup-samples", job.lr_warmup_samples,
          "linear warm-up samples (with --train-samples)", 0, BIG),
        I("lr-decay-samples", job.lr_decay_samples,
          "samples of decay (with --train-samples; 0: --train-samples)", 0, BIG),
        B("override-opt-param-scheduler", run.override_scheduler,
          "with --load: use the flags' learning-rate schedule "
          "where it differs from the checkpoint's"),
        B("use-checkpoint-opt-param-scheduler", run.use_checkpoint_scheduler,
          "with --load: keep the checkpoint's "
          "learning-rate schedule whatever the flags say"),
    };
    const ptdp_opt distributed[] = {
        I("tensor-model-parallel-size", job.t, "tensor-parallel size t", 1, 4096),
        I("pipeline-model-parallel-size", job.p, "pipeline-parallel size p", 1, 4096),
        I("virtual-pipeline-model-parallel-size", virtual_pipeline_model_parallel_size,
          "model chunks per pipeline rank v (interleaved schedule)", 0, 4096),
        I("num-virtual-stages-per-pipeline-rank", virtual_pipeline_model_parallel_size,
          "current Megatron's name for --virtual-pipeline-model-parallel-size", 0, 4096),
        I("num-layers-per-virtual-pipeline-stage", num_layers_per_virtual_pipeline_stage,
          "layers per model chunk (sets v = l / (p x this))", 0, 100000),
        I("decoder-first-pipeline-num-layers", job.stages.first,
          "transformer layers on the first pipeline rank (the rest split evenly)", 1, 100000),
        I("decoder-last-pipeline-num-layers", job.stages.last,
          "transformer layers on the last pipeline rank (the rest split evenly)", 1, 100000),
        B("account-for-embedding-in-pipeline-split", job.stages.embedding,
          "count the embedding as a layer when splitting (first stage: one layer fewer)"),
        B("account-for-loss-in-pipeline-split", job.stages.loss,
          "count the loss head as a layer when splitting (last stage: one layer fewer)"),
        S("pipeline-model-parallel-layout", pipeline_model_parallel_layout,
          "stages by hand, e.g. \"E|t*3|t*3|t*2,L\" (E embedding, t layer, L loss; p x v "
          "stages separated by |, in virtual stage order)",
          NULL),
        S("pipeline-schedule", pipeline_schedule,
          "pipeline schedule (default: interleaved if v > 1, else 1f1b; zb-h1, zb-v: zero "
          "bubble; zb-v implies --virtual-pipeline-model-parallel-size 2)",
          "gpipe|1f1b|interleaved|zb-h1|zb-v"),
        S("zb-costs", zb_costs,
          "zb-v: relative integer costs F,B,W of a chunk's forward, input gradient and weight "
          "gradients that its list scheduler plays, e.g. 3,3,2 from a --trace's per-chunk times "
          "(default: from the layer's FLOPs; docs/schedules.md)",
          NULL),
        B("scatter-gather-tensors-in-pipeline", scatter_gather,
          "send 1/t of each activation between stages and "
          "all-gather it in the tensor group (default on when t > 1)"),
        B("no-scatter-gather-tensors-in-pipeline", no_scatter_gather,
          "send whole activations between stages"),
        B("sequence-parallel", job.sequence_parallel,
          "split LayerNorms, dropouts and the residual stream along the sequence across the "
          "tensor-parallel group (all-gather / reduce-scatter instead of all-reduce; pipeline "
          "messages carry s/t positions, which subsumes scatter/gather); needs --seq-length "
          "divisible by t"),
        B("use-distributed-optimizer", job.distributed_optimizer,
          "ZeRO-1: shard AdamW state and the update "
          "over the data-parallel group (reduce-scatter gradients, all-gather weights)"),
        F("distributed-timeout-minutes", distributed_timeout_minutes,
          "end the job when a communication operation has waited this long (a rank lost or "
          "hung); fractions allowed; 0: wait forever",
          0, 1e9),
        I("ddp-bucket-size", job.ddp_bucket_size,
          "gradient elements per data-parallel reduction bucket", 1, BIG),
        B("overlap-grad-reduce", job.overlap_grad_reduce,
          "overlap the data-parallel gradient reduction with the "
          "backward (Megatron's flag; on by default in ptdp)"),
        {"no-overlap-grad-reduce", PTDP_OPT_NEGBOOL, &a->job.overlap_grad_reduce,
         "reduce gradients after the whole backward instead of bucket by bucket during the last micro-batch",
         NULL, 0, 1, 0},
        B("check-dp-replicas", run.check_dp_replicas,
          "after every iteration, check that data-parallel replicas hold "
          "bitwise identical weights (fails the run otherwise)"),
    };
    const ptdp_opt data[] = {
        B("mock-data", mock_data, "train on deterministic synthetic tokens"),
        S("token-file", run.token_file, "train on a raw little-endian uint16 token stream", NULL),
        S("data-path", data_path,
          "Megatron indexed dataset prefix(es): P; P1 P2 ... (blended by size); or W1 P1 W2 P2 "
          "... (blended by weight)",
          NULL),
        S("split", run.split, "train,valid,test proportions of --data-path documents", NULL),
        B("eod-mask-loss", job.eod_mask_loss,
          "no loss on tokens that follow an end of document (<|endoftext|> of --vocab-file, "
          "else id 50256)"),
    };
    const ptdp_opt tokenizer[] = {
        S("vocab-file", vocab_file, "GPT-2 encoder.json (vocabulary size, text samples)", NULL),
        S("merge-file", merge_file, "GPT-2 vocab.bpe merges", NULL),
        S("tokenizer-type", tokenizer_type, "tokenizer", "GPT2BPETokenizer"),
    };
    const ptdp_opt validation[] = {
        I("eval-interval", run.eval_interval, "iterations between validation-loss evaluations", 1,
          BIG),
        I("eval-iters", run.eval_iters, "batches per validation-loss evaluation (0: none)", 0, BIG),
    };
    const ptdp_opt checkpointing[] = {
        S("save", run.save,
          "write checkpoints to this directory (every --save-interval and at the end)", NULL),
        I("save-interval", run.save_interval, "iterations between checkpoints (0: only at the end)",
          0, BIG),
        S("load", run.load,
          "resume from the checkpoint in this directory (saved under any parallel layout)", NULL),
        B("no-load-optim", run.no_load_optim,
          "with --load: load weights and iteration, start a fresh optimizer"),
        B("use-checkpoint-args", use_checkpoint_args,
          "with --load: take the model flags not given (--num-layers, --hidden-size, "
          "--num-attention-heads, --ffn-hidden-size, --seq-length, --max-position-embeddings) "
          "from the checkpoint"),
        B("finetune", run.finetune,
          "with --load: load weights only; iteration 0, fresh optimizer and data position"),
        B("overwrite-checkpoints", run.overwrite_checkpoints,
          "with --save: let this run replace checkpoints DIR holds at or after the iteration it "
          "starts from (refused otherwise; latest_checkpointed_iteration.txt never moves back)"),
        S("save-safetensors", run.save_safetensors,
          "write the trained weights as HF GPT-2 safetensors", NULL),
    };
    const ptdp_opt logging[] = {
        I("log-interval", run.log_interval, "iterations between log lines", 1, BIG),
        B("log-throughput", run.log_throughput,
          "add Megatron's 'throughput per GPU (TFLOP/s/GPU)' (its FLOP formula, per process) to "
          "the iteration line"),
        S("log-jsonl", run.log_jsonl, "write one JSON object per iteration to this file", NULL),
        S("tensorboard-dir", run.tensorboard_dir,
          "write TensorBoard event files (Megatron's scalar names) to this directory", NULL),
        I("tensorboard-log-interval", run.tensorboard_log_interval,
          "iterations between TensorBoard scalars", 1, BIG),
        I("tensorboard-queue-size", tensorboard_queue_size,
          "accepted for Megatron's scripts; ptdp writes and flushes every scalar at once", 1, BIG),
        B("log-timers-to-tensorboard", run.log_timers_to_tensorboard,
          "TensorBoard: iteration-time (and throughput with --log-throughput) every --log-interval"),
        B("log-validation-ppl-to-tensorboard", run.log_validation_ppl_to_tensorboard,
          "TensorBoard: lm loss validation ppl"),
        B("log-world-size-to-tensorboard", run.log_world_size_to_tensorboard,
          "TensorBoard: world-size"),
        {"no-log-loss-scale-to-tensorboard", PTDP_OPT_NEGBOOL,
         &a->run.log_loss_scale_to_tensorboard, "TensorBoard: leave out loss-scale", NULL, 0, 1, 0},
        {"no-log-learning-rate-to-tensorboard", PTDP_OPT_NEGBOOL,
         &a->run.log_learning_rate_to_tensorboard, "TensorBoard: leave out learning-rate", NULL, 0,
         1, 0},
        B("log-comm", run.log_comm, "print per-group communication counters at the end"),
        S("trace", run.trace, "write a Chrome/Perfetto trace of every rank's timeline to this file",
          NULL),
    };
    const ptdp_opt mixed[] = {
        B("bf16", bf16,
          "bf16 weights, activations and messages, fp32 arithmetic, fp32 master weights and "
          "AdamW state (16-bit values in fp32 storage; see docs/mixed-precision.md)"),
        B("fp16", fp16, "fp16 likewise, with loss scaling (dynamic unless --loss-scale)"),
        F("loss-scale", job.loss_scale, "fp16: a constant loss scale (0: dynamic)", 0, 1e38),
        F("initial-loss-scale", job.initial_loss_scale, "fp16: the dynamic scale's start", 1, 1e38),
        F("min-loss-scale", job.min_loss_scale, "fp16: the dynamic scale's floor", 0, 1e38),
        I("loss-scale-window", job.loss_scale_window,
          "fp16: clean iterations before the dynamic scale doubles", 1, BIG),
        I("hysteresis", job.hysteresis, "fp16: overflows tolerated before the dynamic scale halves",
          1, 1000000),
        B("accumulate-allreduce-grads-in-fp32", accumulate_allreduce_grads_in_fp32,
          "gradients accumulate and are all-reduced in fp32 (always so in ptdp)"),
        B("attention-softmax-in-fp32", attention_softmax_in_fp32,
          "softmax in fp32 (always so in ptdp)"),
    };
    const ptdp_opt backend[] = {
        S("device", device,
          "compute backend: cpu, or cuda (one GPU, fp32, one process; needs a CUDA build)",
          "cpu|cuda"),
        S("gemm", gemm, "GEMM library (--device cpu)", "onednn|openblas"),
    };
    const ptdp_opt dump[] = {
        S("dump-config", run.dump_config,
          "write this run's flags (every flag, effective values) as a --config JSON file, then train",
          NULL),
    };
    const ptdp_opt export_[] = {
        S("out", out, "output NAME.safetensors file (NAME.config.json is written beside it)", NULL),
        S("load", run.load,
          "export the weights of this checkpoint directory (any layout; model flags come from it)",
          NULL),
        S("export-dtype", export_dtype,
          "dtype of the written tensors: fp32, bf16 or fp16 (rounded to nearest even; fp16 "
          "refuses values beyond +-65504)",
          "fp32|bf16|fp16"),
        I("tensor-model-parallel-size", job.t, "tensor-parallel size t", 1, 4096),
    };
    int n = 0;
#define APPEND(tab, title)                                    \
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) { \
        PTDP_ASSERT(n < cap);                                 \
        if (titles) titles[n] = i == 0 ? (title) : NULL;      \
        opts[n++] = tab[i];                                   \
    }
    APPEND(config, "configuration");
    if (which == PTDP_ARGS_TRAIN) APPEND(dump, NULL);
    APPEND(network, "network size");
    APPEND(init, "initialization");
    APPEND(regularization, "regularization");
    if (which == PTDP_ARGS_TRAIN) {
        APPEND(optimizer, NULL); /* Megatron's regularization group holds AdamW's flags */
        APPEND(training, "training");
        APPEND(lr, "learning rate");
        APPEND(distributed, "distributed");
        APPEND(data, "data and dataloader");
        APPEND(tokenizer, "tokenizer");
        APPEND(validation, "validation");
        APPEND(checkpointing, "checkpointing");
        APPEND(logging, "logging");
        APPEND(mixed, "mixed precision");
        APPEND(backend, "backend");
    }
    if (which == PTDP_ARGS_EXPORT) APPEND(export_, "export");
#undef APPEND
    return n;
}

/* The double with the fewest significant digits that rounds to f (0.1 for
 * 0.1f, not 0.100000001490116): what a --config file writes for a float
 * setting, and reads back to the same float. */
static double shortest_f32(float f) {
    char buf[32];
    for (int digits = 1; digits < 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
        if (strtof(buf, NULL) == f) return strtod(buf, NULL);
    }
    return (double)f;
}

char *ptdp_args_config_json(ptdp_args *a, int which, int64_t global_batch) {
    ptdp_opt opts[PTDP_ARGS_MAX_FLAGS];
    int n = ptdp_args_table(a, which, opts, PTDP_ARGS_MAX_FLAGS);
    cJSON *root = cJSON_CreateObject();
    char key[128];
    for (int i = 0; root && i < n; i++) {
        const ptdp_opt *o = &opts[i];
        int alias = 0; /* a second name for the same setting: the first name says it */
        for (int j = 0; j < i; j++) alias |= opts[j].dst == o->dst;
        if (alias || !strcmp(o->name, "config") || !strcmp(o->name, "dump-config")) continue;
        snprintf(key, sizeof key, "%s", o->name);
        for (char *c = key; *c; c++)
            if (*c == '-') *c = '_';
        cJSON *v = NULL;
        switch (o->type) {
        case PTDP_OPT_INT: {
            int64_t x = *(int64_t *)o->dst;
            if (!strcmp(o->name, "global-batch-size") && x == 0) x = global_batch;
            if ((double)x >= o->min) /* below: "not given" (--train-iters with --train-samples) */
                v = cJSON_CreateNumber((double)x);
            break;
        }
        case PTDP_OPT_FLOAT: {
            double x = *(double *)o->dst;
            if (x >= o->min) v = cJSON_CreateNumber(x); /* cJSON prints doubles exactly */
            break;
        }
        case PTDP_OPT_FLOAT32: /* the shortest number that reads back as this float */
            if (*(float *)o->dst >= o->min) v = cJSON_CreateNumber(shortest_f32(*(float *)o->dst));
            break;
        case PTDP_OPT_STR:
            if (o->dst == &a->data_path && a->data_path) { /* the whole list, one path a string */
                v = cJSON_CreateStringArray(a->data_paths, a->n_data_paths);
            } else if (*(const char **)o->dst) {
                v = cJSON_CreateString(*(const char **)o->dst);
            }
            break;
        case PTDP_OPT_BOOL:
            v = cJSON_CreateBool(*(int *)o->dst);
            break;
        case PTDP_OPT_NEGBOOL: /* "--no-x": true means the setting is off */
            v = cJSON_CreateBool(!*(int *)o->dst);
            break;
        }
        if (v) cJSON_AddItemToObject(root, key, v);
    }
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/* --config's "data_path" as a JSON list, one word of --data-path an item
 * ("1", "my data/a_text_document", ...): spaces stay inside a path. The
 * strings stay in the parsed file (json_keep). */
static int data_path_list(ptdp_args *a, const cJSON *list, const char *path) {
    const int n = cJSON_GetArraySize(list);
    if (n == 0)
        return ptdp_errorf(PTDP_EINVAL,
                           "--config %s: key 'data_path' is an empty list; give a dataset prefix "
                           "(or weights and prefixes)",
                           path);
    if (n > 128) return ptdp_errorf(PTDP_EINVAL, "--data-path: at most 64 datasets");
    int k = 0;
    for (const cJSON *e = list->child; e; e = e->next) {
        if (!cJSON_IsString(e))
            return ptdp_errorf(PTDP_EINVAL,
                               "--config %s: key 'data_path' must be a list of strings (weights "
                               "and prefixes, e.g. [\"0.3\", \"a_text_document\"]) or one string",
                               path);
        a->data_paths[k++] = e->valuestring;
    }
    a->n_data_paths = n;
    a->data_path = a->data_paths[0];
    a->data_path_list = 1;
    return PTDP_OK;
}

/* Applies the JSON object text[len] (named `path` in messages) to opts; keys
 * that are inert or refused Megatron-LM flags, or unknown, go to the report
 * (the other errors return at once). */
static int apply_json_text(ptdp_args *a, ptdp_opt *opts, int n, const char *text, size_t len,
                           const char *path, void **json_keep, ptdp__flag_report *rep) {
    char what[300];
    snprintf(what, sizeof what, "--config %s", path);
    if (ptdp_json_check(text, len, PTDP_JSON_MAX_DEPTH, what)) return PTDP_EINVAL;
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ptdp_errorf(PTDP_EINVAL, "--config %s: not a JSON object of flag names to values",
                           path);
    }
    *json_keep = root;
    for (cJSON *it = root->child; it; it = it->next) {
        char name[128], val[64];
        snprintf(name, sizeof name, "%s", it->string);
        for (char *c = name; *c; c++)
            if (*c == '_') *c = '-';
        const char *v = val;
        ptdp_opt *o = ptdp_opt_find(opts, n, name);
        if (o && o->dst == &a->data_path && cJSON_IsArray(it)) {
            int rc = data_path_list(a, it, path);
            if (rc) return rc;
            continue;
        }
        if (o && o->dst == &a->data_path) a->data_path_list = 0; /* the one-string form */
        if (o && o->type == PTDP_OPT_STR && !cJSON_IsString(it))
            return ptdp_errorf(PTDP_EINVAL, "--config %s: key '%s' must be a string", path,
                               it->string);
        if (cJSON_IsBool(it))
            v = cJSON_IsTrue(it) ? "true" : "false";
        else if (cJSON_IsNumber(it)) {
            double d = it->valuedouble;
            /* integers print as integers; the range test keeps the cast defined */
            if (d > -9.2e18 && d < 9.2e18 && d == (double)(long long)d)
                snprintf(val, sizeof val, "%lld", (long long)d);
            else
                snprintf(val, sizeof val, "%.17g", d);
        } else if (cJSON_IsString(it))
            v = it->valuestring;
        else
            return ptdp_errorf(PTDP_EINVAL,
                               "--config %s: key '%s' must be a number, string or boolean", path,
                               it->string);
        char origin[300];
        snprintf(origin, sizeof origin, "key in %s:", path);
        if (ptdp__megatron_check(opts, n, name, v, origin, a, rep)) continue;
        int rc = ptdp_opt_set(opts, n, name, v, origin);
        if (rc) return rc;
    }
    return PTDP_OK;
}

static int apply_json(ptdp_args *a, ptdp_opt *opts, int n, const char *path, void **json_keep,
                      ptdp__flag_report *rep) {
    char *text = NULL;
    size_t len = 0;
    int rc = ptdp_read_file(path, "--config file", &text, &len);
    if (rc) return rc;
    rc = apply_json_text(a, opts, n, text, len, path, json_keep, rep);
    free(text);
    return rc;
}

int ptdp_args_apply_config_text(ptdp_args *a, int which, const char *text, size_t len,
                                const char *name, void **json_keep) {
    ptdp_opt opts[PTDP_ARGS_MAX_FLAGS];
    int n = ptdp_args_table(a, which, opts, PTDP_ARGS_MAX_FLAGS);
    *json_keep = NULL;
    ptdp__flag_report rep = {.megatron = which == PTDP_ARGS_TRAIN};
    int rc = apply_json_text(a, opts, n, text, len, name, json_keep, &rep);
    return rc ? rc : ptdp__megatron_report(&rep);
}

/* The flags of argv (after --data-path's list was taken out) that the
 * option parser takes go to kept[]; the others are Megatron-LM flags ptdp
 * accepts as inert (recorded in a), or problems for the report: refused
 * flags or values and unknown flags, each skipped with its values (an
 * unknown flag's: every word up to the next flag). */
static void scan_flags(ptdp_args *a, ptdp_opt *opts, int n, int argc, char **argv, char **kept,
                       int *nkept, ptdp__flag_report *rep) {
    *nkept = 0;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || !arg[2] || !strcmp(arg, "--help")) {
            kept[(*nkept)++] = argv[i]; /* the parser says what is wrong with it */
            continue;
        }
        char name[128];
        const char *eq = strchr(arg + 2, '=');
        const size_t len = eq ? (size_t)(eq - (arg + 2)) : strlen(arg + 2);
        if (len >= sizeof name) {
            kept[(*nkept)++] = argv[i];
            continue;
        }
        memcpy(name, arg + 2, len);
        name[len] = 0;
        for (char *c = name; *c; c++)
            if (*c == '_') *c = '-';
        const ptdp_opt *o = ptdp_opt_find(opts, n, name);
        /* how many words after this one belong to it */
        int nargs = 0;
        if (o)
            nargs = o->type == PTDP_OPT_BOOL || o->type == PTDP_OPT_NEGBOOL ? 0 : 1;
        else if ((nargs = rep->megatron ? ptdp__megatron_nargs(name) : -1) < 0)
            for (nargs = 0; i + 1 + nargs < argc && strncmp(argv[i + 1 + nargs], "--", 2);) nargs++;
        if (eq) nargs = 0;
        if (i + nargs >= argc) nargs = argc - 1 - i; /* a missing value: the parser says so */
        const char *value = eq ? eq + 1 : nargs ? argv[i + 1] : NULL;
        if (ptdp__megatron_check(opts, n, name, value, "flag", a, rep)) {
            i += nargs;
            continue;
        }
        for (int k = 0; k <= nargs; k++) kept[(*nkept)++] = argv[i + k];
        i += nargs;
    }
}

int ptdp_args_parse(ptdp_args *a, int which, int argc, char **argv, int *want_help,
                    void **json_keep) {
    ptdp_opt opts[PTDP_ARGS_MAX_FLAGS];
    int n = ptdp_args_table(a, which, opts, PTDP_ARGS_MAX_FLAGS);
    *json_keep = NULL;
    *want_help = 0;
    ptdp__flag_report rep = {.megatron = which == PTDP_ARGS_TRAIN};
    /* find --config first so the command line overrides the file */
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], "--config") && i + 1 < argc) v = argv[i + 1];
        if (!strncmp(argv[i], "--config=", 9)) v = argv[i] + 9;
        if (v) {
            int rc = apply_json(a, opts, n, v, json_keep, &rep);
            if (rc) return rc;
            a->config = v;
        }
    }
    /* --data-path takes a list: the values up to the next flag */
    char **rest = malloc(sizeof(char *) * (size_t)(2 * argc + 1));
    if (!rest) return ptdp_errorf(PTDP_ENOMEM, "out of memory");
    char **kept = rest + argc;
    int nrest = 0, nkept = 0, from_cli = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--data-path") != 0) {
            rest[nrest++] = argv[i];
            continue;
        }
        from_cli = 1;
        a->data_path_list = 0;
        a->n_data_paths = 0;
        while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
            if (a->n_data_paths == 128) {
                free(rest);
                return ptdp_errorf(PTDP_EINVAL, "--data-path: at most 64 datasets");
            }
            a->data_paths[a->n_data_paths++] = argv[++i];
        }
        if (a->n_data_paths == 0) {
            free(rest);
            return ptdp_errorf(PTDP_EINVAL,
                               "--data-path needs a dataset prefix (or weights and prefixes)");
        }
        a->data_path = a->data_paths[0];
    }
    if (!from_cli && a->data_path && !a->data_path_list) {
        /* from --config as one string (the old form): split it on spaces */
        snprintf(a->data_path_buf, sizeof a->data_path_buf, "%s", a->data_path);
        a->n_data_paths = 0;
        for (char *tok = strtok(a->data_path_buf, " \t"); tok && a->n_data_paths < 128;
             tok = strtok(NULL, " \t"))
            a->data_paths[a->n_data_paths++] = tok;
    }
    /* every flag ptdp cannot run is reported at once, before any other error */
    scan_flags(a, opts, n, nrest, rest, kept, &nkept, &rep);
    for (int i = 0; i < nrest; i++)
        if (!strcmp(rest[i], "--help") || !strcmp(rest[i], "-h")) *want_help = 1;
    int rc = *want_help ? PTDP_OK : ptdp__megatron_report(&rep);
    if (rc == PTDP_OK) rc = ptdp_opts_parse(opts, n, nkept, kept, want_help);
    free(rest);
    if (rc == PTDP_OK && a->recompute_activations) {
        /* Megatron's validate_args: --recompute-activations means selective */
        if (a->recompute_granularity && strcmp(a->recompute_granularity, "selective"))
            return ptdp_errorf(PTDP_EINVAL,
                               "--recompute-activations (selective recomputation) and "
                               "--recompute-granularity %s exclude each other; give one",
                               a->recompute_granularity);
        a->recompute_granularity = "selective";
    }
    return rc;
}

void ptdp_args_free(void *json_keep) { cJSON_Delete(json_keep); }

/* ---- from the flags to the job ------------------------------------------------ */

/* v and the stage layout from Megatron's pipeline flags: v from
 * --virtual-pipeline-model-parallel-size, --num-layers-per-virtual-pipeline-
 * stage or the layout string's stage count (0 when none says: the job
 * derives it, 2 under zb-v), the string's stages. The rules between the
 * flags are checked here; those of the resulting layout by ptdp_job_check. */
static int resolve_layout(const ptdp_args *a, ptdp_job *job) {
    const int64_t pp = job->p, nlv = a->num_layers_per_virtual_pipeline_stage,
                  vpp = a->virtual_pipeline_model_parallel_size;
    ptdp_stage_layout *L = &job->stages;
    L->nstages = 0;
    job->v = vpp;
    if (vpp && nlv)
        return ptdp_errorf(PTDP_ECONFIG, "give --virtual-pipeline-model-parallel-size or "
                                         "--num-layers-per-virtual-pipeline-stage, not both");
    if (a->pipeline_model_parallel_layout) {
        ptdp_stage_layout parsed;
        int rc = ptdp_stage_layout_parse(a->pipeline_model_parallel_layout, &parsed);
        if (rc != PTDP_OK) return rc;
        if (nlv)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--pipeline-model-parallel-layout sets the virtual stages itself; "
                               "drop --num-layers-per-virtual-pipeline-stage");
        if (parsed.nstages % pp)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--pipeline-model-parallel-layout has %d stages, not a multiple of "
                               "--pipeline-model-parallel-size %lld (it lists p x v stages)",
                               parsed.nstages, (long long)pp);
        const int64_t v = parsed.nstages / pp;
        if (vpp && vpp != v)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--virtual-pipeline-model-parallel-size %lld conflicts with "
                               "--pipeline-model-parallel-layout, whose %d stages give v = %lld",
                               (long long)vpp, parsed.nstages, (long long)v);
        L->nstages = parsed.nstages;
        memcpy(L->stage_layers, parsed.stage_layers, sizeof L->stage_layers);
        job->v = v;
    }
    if (nlv) {
        if (L->first || L->last)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--decoder-first/last-pipeline-num-layers need the virtual "
                               "stages as --virtual-pipeline-model-parallel-size, not "
                               "--num-layers-per-virtual-pipeline-stage");
        /* Megatron: the embedding and loss count as layers here too */
        const int64_t l = job->model.num_layers + L->embedding + L->loss;
        if (l % (pp * nlv))
            return ptdp_errorf(
                PTDP_ECONFIG,
                "--num-layers %lld%s is not divisible by --pipeline-model-parallel-size %lld x "
                "--num-layers-per-virtual-pipeline-stage %lld",
                (long long)l, L->embedding || L->loss ? " (with the embedding/loss counted)" : "",
                (long long)pp, (long long)nlv);
        job->v = l / (pp * nlv);
    }
    return PTDP_OK;
}

/* The recomputation flags: --recompute-granularity full needs a method,
 * selective takes none (--recompute-num-layers is the job's to check). */
static int resolve_recompute(const ptdp_args *a, ptdp_job *job) {
    const int selective =
        a->recompute_granularity && !strcmp(a->recompute_granularity, "selective");
    if (a->recompute_method && !a->recompute_granularity)
        return ptdp_errorf(PTDP_ECONFIG, "--recompute-method needs --recompute-granularity full");
    if (selective && a->recompute_method)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--recompute-granularity selective recomputes core attention in "
                           "every layer; --recompute-method and --recompute-num-layers go "
                           "with --recompute-granularity full (as in Megatron-LM)");
    if (a->recompute_granularity && !selective && !a->recompute_method)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--recompute-granularity full needs --recompute-method uniform|block");
    /* the flags' choices (full|selective, uniform|block) were checked by the parser */
    job->recompute = a->recompute_method ? ptdp_recompute_method_parse(a->recompute_method)
                     : selective         ? PTDP_RECOMPUTE_SELECTIVE
                                         : PTDP_RECOMPUTE_NONE;
    return PTDP_OK;
}

/* Megatron's precision flags: one of --bf16 / --fp16; the CUDA backend is
 * fp32 for now; gradients and softmax are always fp32 here. */
static int resolve_precision(const ptdp_args *a, ptdp_job *job) {
    if (a->bf16 && a->fp16) return ptdp_errorf(PTDP_ECONFIG, "give --bf16 or --fp16, not both");
    job->dtype = a->bf16 ? PTDP_DTYPE_BF16 : a->fp16 ? PTDP_DTYPE_FP16 : PTDP_DTYPE_FP32;
    if (job->loss_scale > 0 && !a->bf16 && !a->fp16)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--loss-scale applies to --fp16 (or --bf16) training; fp32 has no loss "
                           "scaling");
    if ((a->bf16 || a->fp16) && a->device && !strcmp(a->device, "cuda"))
        return ptdp_errorf(PTDP_EUNSUPPORTED,
                           "--%s: the CUDA backend trains in fp32 only so far; use --device cpu "
                           "or drop --%s",
                           a->bf16 ? "bf16" : "fp16", a->bf16 ? "bf16" : "fp16");
    if (!a->accumulate_allreduce_grads_in_fp32 || !a->attention_softmax_in_fp32)
        return ptdp_errorf(PTDP_EUNSUPPORTED, "gradients and softmax are always fp32 in ptdp");
    return PTDP_OK;
}

/* What `ptdp train` alone decides: checkpoints, data, the launch. */
static int check_run_flags(const ptdp_args *a) {
    const ptdp_run_params *r = &a->run;
    if (r->save_interval && !r->save)
        return ptdp_errorf(PTDP_EINVAL, "--save-interval needs --save DIR");
    if (r->overwrite_checkpoints && !r->save)
        return ptdp_errorf(PTDP_EINVAL, "--overwrite-checkpoints applies to --save DIR, and there "
                                        "is no --save; add --save DIR or drop it");
    if (!r->load) {
        const char *with_load = r->finetune             ? "--finetune"
                                : r->no_load_optim      ? "--no-load-optim"
                                : r->override_scheduler ? "--override-opt-param-scheduler"
                                : r->use_checkpoint_scheduler
                                    ? "--use-checkpoint-opt-param-scheduler"
                                    : NULL;
        if (with_load)
            return ptdp_errorf(
                PTDP_EINVAL,
                "%s applies to the checkpoint of --load DIR, and there is no --load; "
                "add --load DIR or drop %s",
                with_load, with_load);
    }
    if (r->load && r->trainer.init_from)
        return ptdp_errorf(
            PTDP_EINVAL,
            "--init-from and --load exclude each other (the checkpoint's weights would "
            "replace --init-from's); give one (--load DIR --finetune starts a new run from a "
            "checkpoint's weights)");
    if (r->override_scheduler && r->use_checkpoint_scheduler)
        return ptdp_errorf(
            PTDP_EINVAL, "--override-opt-param-scheduler and --use-checkpoint-opt-param-scheduler "
                         "exclude each other; give one");
    return PTDP_OK;
}

static int check_data_flags(const ptdp_args *a) {
    int sources = (a->mock_data != 0) + (a->run.token_file != NULL) + (a->data_path != NULL);
    if (sources == 0)
        return ptdp_errorf(
            PTDP_EINVAL,
            "no training data: give --data-path PREFIX, --token-file FILE or --mock-data");
    if (sources > 1)
        return ptdp_errorf(
            PTDP_EINVAL, "--data-path, --token-file and --mock-data exclude each other; give one");
    if ((a->vocab_file != NULL) != (a->merge_file != NULL))
        return ptdp_errorf(PTDP_EINVAL, "give --vocab-file and --merge-file together");
    return PTDP_OK;
}

/* The model flags export takes: the shape on one process. */
/* The Llama family's blocks that take more than one flag, into the model. */
static void resolve_blocks(ptdp_args *a) {
    ptdp_gpt_config *m = &a->job.model;
    m->rmsnorm = a->normalization && !strcmp(a->normalization, "RMSNorm");
    m->rope = a->position_embedding_type && !strcmp(a->position_embedding_type, "rope");
    /* Megatron: without --group-query-attention every head is its own group */
    m->query_groups = a->group_query_attention ? a->num_query_groups : 0;
}

static int export_job(ptdp_args *a) {
    ptdp_job *job = &a->job;
    resolve_blocks(a);
    const ptdp_gpt_config *m = &job->model;
    const struct {
        int missing;
        const char *flag;
    } req[] = {{m->num_layers == 0, "--num-layers"},
               {m->hidden == 0, "--hidden-size"},
               {m->heads == 0, "--num-attention-heads"},
               {m->seq_length == 0, "--seq-length"}};
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (req[i].missing)
            return ptdp_errorf(PTDP_EINVAL, "missing required flag %s (see --help)", req[i].flag);
    if (!a->out) return ptdp_errorf(PTDP_EINVAL, "missing required flag --out (see --help)");
    int wrc = ptdp_job_check_width(job);
    if (wrc) return wrc;
    if (job->t != 1)
        return ptdp_errorf(PTDP_EUNSUPPORTED,
                           "--tensor-model-parallel-size: export works on one process; use 1");
    job->p = job->d = 1;
    return ptdp_gpt_config_finish(&job->model, job->vocab_divisible_by, 1);
}

int ptdp_args_job(ptdp_args *a, int which, int world_size) {
    if (which != PTDP_ARGS_TRAIN) return export_job(a);
    ptdp_job *job = &a->job;
    resolve_blocks(a);
    int rc = check_run_flags(a);
    if (rc == PTDP_OK) rc = ptdp_job_check_required(job);
    if (rc == PTDP_OK) rc = check_data_flags(a);
    if (rc == PTDP_OK) rc = ptdp_job_check_width(job);
    if (rc == PTDP_OK && job->t * job->p > 0 && world_size % (job->t * job->p))
        rc = ptdp_errorf(
            PTDP_ECONFIG,
            "this job has %d ranks, which is not a multiple of --tensor-model-parallel-size %lld x "
            "--pipeline-model-parallel-size %lld; launch with mpirun -np a multiple of %lld",
            world_size, (long long)job->t, (long long)job->p, (long long)(job->t * job->p));
    if (rc) return rc;
    job->d = world_size / (job->t * job->p);
    rc = resolve_layout(a, job);
    if (rc == PTDP_OK) rc = resolve_recompute(a, job);
    if (rc == PTDP_OK) rc = resolve_precision(a, job);
    if (rc) return rc;
    job->schedule = a->pipeline_schedule ? ptdp_schedule_parse_kind(a->pipeline_schedule) : -1;
    memset(job->zb_costs, 0, sizeof job->zb_costs);
    if (a->zb_costs) {
        ptdp_schedule_params costs = ptdp_schedule_default_params();
        rc = ptdp_schedule_parse_costs(a->zb_costs, "--zb-costs", &costs);
        if (rc != PTDP_OK) return rc;
        job->zb_costs[0] = costs.cost_f, job->zb_costs[1] = costs.cost_b;
        job->zb_costs[2] = costs.cost_w;
    }
    if (a->scatter_gather && a->no_scatter_gather)
        return ptdp_errorf(PTDP_ECONFIG, "--scatter-gather-tensors-in-pipeline and "
                                         "--no-scatter-gather-tensors-in-pipeline exclude each "
                                         "other");
    job->scatter_gather = !a->no_scatter_gather;
    ptdp_lr_style style = PTDP_LR_LINEAR;
    PTDP_ASSERT(ptdp_lr_style_parse(a->lr_decay_style, &style) ==
                PTDP_OK); /* the parser's choice */
    job->lr_decay_style = style;
    return ptdp_job_check(job);
}
