/* args.c - Megatron-style flags for train/export, and --config JSON. */
#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ptdp_args_defaults(ptdp_args *a) {
    memset(a, 0, sizeof *a);
    a->vocab_size = 50257;
    a->make_vocab_size_divisible_by = 128;
    a->init_method_std = 0.02;
    a->hidden_dropout = 0.1;
    a->attention_dropout = 0.1;
    a->layernorm_epsilon = 1e-5;
    a->normalization = "LayerNorm";
    a->position_embedding_type = "learned_absolute";
    a->num_query_groups = 1; /* Megatron's default, read only with --group-query-attention */
    a->rotary_base = 10000;
    a->rotary_percent = 1.0;
    a->seed = 1234;
    a->micro_batch_size = 1;
    a->train_iters = -1; /* required (or --train-samples); 0 is allowed (load, save, no step) */
    a->train_samples = -1;
    a->lr = -1; /* required */
    a->min_lr = 0.0;
    a->weight_decay = 0.01;
    a->clip_grad = 1.0;
    a->adam_beta1 = 0.9;
    a->adam_beta2 = 0.999;
    a->adam_eps = 1e-8;
    a->lr_decay_style = "linear";
    a->tensor_model_parallel_size = 1;
    a->pipeline_model_parallel_size = 1;
    a->log_interval = 100;
    a->tokenizer_type = "GPT2BPETokenizer";
    a->split = "969,30,1";
    a->eval_interval = 1000;
    a->eval_iters = 100;
    a->overlap_grad_reduce = 1;
    a->check_for_nan = 1;
    a->distributed_timeout_minutes = 10; /* Megatron's default */
    a->ddp_bucket_size = 40000000;
    a->gemm = "onednn";
    a->device = "cpu";
    a->initial_loss_scale = 4294967296.0; /* Megatron's 2^32 */
    a->min_loss_scale = 1.0;
    a->loss_scale_window = 1000;
    a->hysteresis = 2;
    a->accumulate_allreduce_grads_in_fp32 = 1;
    a->attention_softmax_in_fp32 = 1;
    a->export_dtype = "fp32";
    a->tensorboard_log_interval = 1;
    a->tensorboard_queue_size = 1000;
    a->log_loss_scale_to_tensorboard = 1;
    a->log_learning_rate_to_tensorboard = 1;
    a->optimizer = "adam";
}

#define I(name, field, help, lo, hi) \
    { name, PTDP_OPT_INT, &a->field, help, NULL, lo, hi, 0 }
#define F(name, field, help, lo, hi) \
    { name, PTDP_OPT_FLOAT, &a->field, help, NULL, lo, hi, 0 }
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
        I("num-layers", num_layers, "transformer layers l (required)", 1, 100000),
        I("hidden-size", hidden_size, "hidden size h (required)", 1, 1000000),
        I("num-attention-heads", num_attention_heads, "attention heads a (required)", 1, 100000),
        I("ffn-hidden-size", ffn_hidden_size, "MLP width (0: 4h)", 0, 10000000),
        I("seq-length", seq_length, "sequence length s (required)", 1, 1000000),
        I("max-position-embeddings", max_position_embeddings,
          "position embedding rows (0: seq-length)", 0, 1000000),
        I("vocab-size", vocab_size, "vocabulary size V for --mock-data/--token-file", 2, 100000000),
        I("make-vocab-size-divisible-by", make_vocab_size_divisible_by,
          "pad V to a multiple of this x t", 1, 1000000),
        S("normalization", normalization,
          "normalization layer: LayerNorm (GPT-2's) or RMSNorm (Llama's: no mean, no bias)",
          "LayerNorm|RMSNorm"),
        S("position-embedding-type", position_embedding_type,
          "position embeddings: learned_absolute (GPT-2's) or rope (rotary, Llama's)",
          "learned_absolute|rope"),
        F("rotary-base", rotary_base, "rotary embeddings' base theta", 1, 1e12),
        F("rotary-percent", rotary_percent, "fraction of each head's dims rotary embeddings rotate",
          1e-6, 1),
        B("swiglu", swiglu,
          "SwiGLU MLP: silu(x Wg^T) * (x Wu^T), --ffn-hidden-size wide (Llama's ~8h/3: give it)"),
        B("group-query-attention", group_query_attention,
          "grouped-query attention: --num-query-groups key/value heads"),
        I("num-query-groups", num_query_groups,
          "key/value groups with --group-query-attention (divides the heads; t divides it)", 1,
          100000),
        B("untie-embeddings-and-output-weights", untie_embeddings_and_output_weights,
          "an output layer of its own instead of the word embedding's transpose"),
        B("disable-bias-linear", disable_bias_linear, "no biases in the linear layers"),
        F("layernorm-epsilon", layernorm_epsilon, "LayerNorm epsilon", 1e-12, 1),
        F("norm-epsilon", layernorm_epsilon, "LayerNorm/RMSNorm epsilon (Megatron's newer name)",
          1e-12, 1),
    };
    const ptdp_opt init[] = {
        I("seed", seed, "random seed (initialisation, dropout, mock data)", 0, BIG),
        F("init-method-std", init_method_std, "std of the normal initialisation", 0, 10),
        S("init-from", init_from, "start from Hugging Face GPT-2 safetensors weights", NULL),
        B("allow-extra-tensors", allow_extra_tensors,
          "with --init-from: ignore tensors of the file the model "
          "does not use (e.g. load the first --num-layers layers of a deeper model)"),
    };
    const ptdp_opt regularization[] = {
        F("hidden-dropout", hidden_dropout, "dropout after attention/MLP outputs and embeddings", 0,
          0.99),
        F("attention-dropout", attention_dropout, "dropout on attention probabilities", 0, 0.99),
    };
    const ptdp_opt training[] = {
        I("micro-batch-size", micro_batch_size, "micro-batch size b", 1, 1000000),
        I("global-batch-size", global_batch_size, "global batch size B (0: b x data-parallel size)",
          0, BIG),
        I("train-iters", train_iters,
          "iterations to train (required unless --train-samples; 0 runs no step)", 0, BIG),
        I("train-samples", train_samples,
          "samples to train instead of --train-iters (iterations: this / global batch, rounded "
          "down; the schedule flags are then --lr-*-samples)",
          0, BIG),
        I("exit-interval", exit_interval,
          "stop after an iteration that is a multiple of this (saving with --save; 0: off)", 0,
          BIG),
        F("exit-duration-in-mins", exit_duration_in_mins,
          "stop once training has run this many minutes (saving with --save; 0: off)", 0, 1e9),
        B("exit-signal-handler", exit_signal_handler,
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
        I("recompute-num-layers", recompute_num_layers,
          "layers per recompute group (uniform) or recomputed "
          "layers per stage (block)",
          1, 100000),
        B("check-for-nan-in-loss-and-grad", check_for_nan,
          "stop with an error when the loss or the gradient norm is nan/inf (Megatron's default)"),
        {"no-check-for-nan-in-loss-and-grad", PTDP_OPT_NEGBOOL, &a->check_for_nan,
         "skip such an iteration instead (no optimizer step; counted in the log line)", NULL, 0, 1,
         0},
    };
    const ptdp_opt optimizer[] = {
        S("optimizer", optimizer,
          "AdamW, which is Megatron's adam (decoupled --weight-decay); the only choice", "adam"),
        F("weight-decay", weight_decay, "AdamW decoupled weight decay (not on biases/LayerNorm)", 0,
          100),
        F("clip-grad", clip_grad, "clip the global gradient norm to this (0: off)", 0, 1e9),
        F("adam-beta1", adam_beta1, "AdamW beta1", 0, 0.999999),
        F("adam-beta2", adam_beta2, "AdamW beta2", 0, 0.999999999),
        F("adam-eps", adam_eps, "AdamW epsilon", 0, 1),
    };
    const ptdp_opt lr[] = {
        F("lr", lr, "peak learning rate (required)", 0, 1e3),
        F("min-lr", min_lr, "learning rate at the end of the decay", 0, 1e3),
        S("lr-decay-style", lr_decay_style, "learning-rate decay", "constant|linear|cosine"),
        I("lr-warmup-iters", lr_warmup_iters, "linear warm-up iterations", 0, BIG),
        F("lr-warmup-fraction", lr_warmup_fraction,
          "warm-up as a fraction of the decay (--lr-decay-iters or -samples; not rounded)", 0, 1),
        I("lr-decay-iters", lr_decay_iters, "iterations of decay (0: --train-iters)", 0, BIG),
        I("lr-warmup-samples", lr_warmup_samples, "linear warm-up samples (with --train-samples)",
          0, BIG),
        I("lr-decay-samples", lr_decay_samples,
          "samples of decay (with --train-samples; 0: --train-samples)", 0, BIG),
        B("override-opt-param-scheduler", override_scheduler,
          "with --load: use the flags' learning-rate schedule "
          "where it differs from the checkpoint's"),
        B("use-checkpoint-opt-param-scheduler", use_checkpoint_scheduler,
          "with --load: keep the checkpoint's "
          "learning-rate schedule whatever the flags say"),
    };
    const ptdp_opt distributed[] = {
        I("tensor-model-parallel-size", tensor_model_parallel_size, "tensor-parallel size t", 1,
          4096),
        I("pipeline-model-parallel-size", pipeline_model_parallel_size, "pipeline-parallel size p",
          1, 4096),
        I("virtual-pipeline-model-parallel-size", virtual_pipeline_model_parallel_size,
          "model chunks per pipeline rank v (interleaved schedule)", 0, 4096),
        I("num-virtual-stages-per-pipeline-rank", virtual_pipeline_model_parallel_size,
          "current Megatron's name for --virtual-pipeline-model-parallel-size", 0, 4096),
        I("num-layers-per-virtual-pipeline-stage", num_layers_per_virtual_pipeline_stage,
          "layers per model chunk (sets v = l / (p x this))", 0, 100000),
        I("decoder-first-pipeline-num-layers", decoder_first_pipeline_num_layers,
          "transformer layers on the first pipeline rank (the rest split evenly)", 1, 100000),
        I("decoder-last-pipeline-num-layers", decoder_last_pipeline_num_layers,
          "transformer layers on the last pipeline rank (the rest split evenly)", 1, 100000),
        B("account-for-embedding-in-pipeline-split", account_for_embedding_in_pipeline_split,
          "count the embedding as a layer when splitting (first stage: one layer fewer)"),
        B("account-for-loss-in-pipeline-split", account_for_loss_in_pipeline_split,
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
        B("sequence-parallel", sequence_parallel,
          "split LayerNorms, dropouts and the residual stream along the sequence across the "
          "tensor-parallel group (all-gather / reduce-scatter instead of all-reduce; pipeline "
          "messages carry s/t positions, which subsumes scatter/gather); needs --seq-length "
          "divisible by t"),
        B("use-distributed-optimizer", use_distributed_optimizer,
          "ZeRO-1: shard AdamW state and the update "
          "over the data-parallel group (reduce-scatter gradients, all-gather weights)"),
        F("distributed-timeout-minutes", distributed_timeout_minutes,
          "end the job when a communication operation has waited this long (a rank lost or "
          "hung); fractions allowed; 0: wait forever",
          0, 1e9),
        I("ddp-bucket-size", ddp_bucket_size,
          "gradient elements per data-parallel reduction bucket", 1, BIG),
        B("overlap-grad-reduce", overlap_grad_reduce,
          "overlap the data-parallel gradient reduction with the "
          "backward (Megatron's flag; on by default in ptdp)"),
        {"no-overlap-grad-reduce", PTDP_OPT_NEGBOOL, &a->overlap_grad_reduce,
         "reduce gradients after the whole backward instead of bucket by bucket during the last micro-batch",
         NULL, 0, 1, 0},
        B("check-dp-replicas", check_dp_replicas,
          "after every iteration, check that data-parallel replicas hold "
          "bitwise identical weights (fails the run otherwise)"),
    };
    const ptdp_opt data[] = {
        B("mock-data", mock_data, "train on deterministic synthetic tokens"),
        S("token-file", token_file, "train on a raw little-endian uint16 token stream", NULL),
        S("data-path", data_path,
          "Megatron indexed dataset prefix(es): P; P1 P2 ... (blended by size); or W1 P1 W2 P2 "
          "... (blended by weight)",
          NULL),
        S("split", split, "train,valid,test proportions of --data-path documents", NULL),
        B("eod-mask-loss", eod_mask_loss,
          "no loss on tokens that follow an end of document (<|endoftext|> of --vocab-file, "
          "else id 50256)"),
    };
    const ptdp_opt tokenizer[] = {
        S("vocab-file", vocab_file, "GPT-2 encoder.json (vocabulary size, text samples)", NULL),
        S("merge-file", merge_file, "GPT-2 vocab.bpe merges", NULL),
        S("tokenizer-type", tokenizer_type, "tokenizer", "GPT2BPETokenizer"),
    };
    const ptdp_opt validation[] = {
        I("eval-interval", eval_interval, "iterations between validation-loss evaluations", 1, BIG),
        I("eval-iters", eval_iters, "batches per validation-loss evaluation (0: none)", 0, BIG),
    };
    const ptdp_opt checkpointing[] = {
        S("save", save,
          "write checkpoints to this directory (every --save-interval and at the end)", NULL),
        I("save-interval", save_interval, "iterations between checkpoints (0: only at the end)", 0,
          BIG),
        S("load", load,
          "resume from the checkpoint in this directory (saved under any parallel layout)", NULL),
        B("no-load-optim", no_load_optim,
          "with --load: load weights and iteration, start a fresh optimizer"),
        B("use-checkpoint-args", use_checkpoint_args,
          "with --load: take the model flags not given (--num-layers, --hidden-size, "
          "--num-attention-heads, --ffn-hidden-size, --seq-length, --max-position-embeddings) "
          "from the checkpoint"),
        B("finetune", finetune,
          "with --load: load weights only; iteration 0, fresh optimizer and data position"),
        B("overwrite-checkpoints", overwrite_checkpoints,
          "with --save: let this run replace checkpoints DIR holds at or after the iteration it "
          "starts from (refused otherwise; latest_checkpointed_iteration.txt never moves back)"),
        S("save-safetensors", save_safetensors, "write the trained weights as HF GPT-2 safetensors",
          NULL),
    };
    const ptdp_opt logging[] = {
        I("log-interval", log_interval, "iterations between log lines", 1, BIG),
        B("log-throughput", log_throughput,
          "add Megatron's 'throughput per GPU (TFLOP/s/GPU)' (its FLOP formula, per process) to "
          "the iteration line"),
        S("log-jsonl", log_jsonl, "write one JSON object per iteration to this file", NULL),
        S("tensorboard-dir", tensorboard_dir,
          "write TensorBoard event files (Megatron's scalar names) to this directory", NULL),
        I("tensorboard-log-interval", tensorboard_log_interval,
          "iterations between TensorBoard scalars", 1, BIG),
        I("tensorboard-queue-size", tensorboard_queue_size,
          "accepted for Megatron's scripts; ptdp writes and flushes every scalar at once", 1, BIG),
        B("log-timers-to-tensorboard", log_timers_to_tensorboard,
          "TensorBoard: iteration-time (and throughput with --log-throughput) every --log-interval"),
        B("log-validation-ppl-to-tensorboard", log_validation_ppl_to_tensorboard,
          "TensorBoard: lm loss validation ppl"),
        B("log-world-size-to-tensorboard", log_world_size_to_tensorboard,
          "TensorBoard: world-size"),
        {"no-log-loss-scale-to-tensorboard", PTDP_OPT_NEGBOOL, &a->log_loss_scale_to_tensorboard,
         "TensorBoard: leave out loss-scale", NULL, 0, 1, 0},
        {"no-log-learning-rate-to-tensorboard", PTDP_OPT_NEGBOOL,
         &a->log_learning_rate_to_tensorboard, "TensorBoard: leave out learning-rate", NULL, 0, 1,
         0},
        B("log-comm", log_comm, "print per-group communication counters at the end"),
        S("trace", trace, "write a Chrome/Perfetto trace of every rank's timeline to this file",
          NULL),
    };
    const ptdp_opt mixed[] = {
        B("bf16", bf16,
          "bf16 weights, activations and messages, fp32 arithmetic, fp32 master weights and "
          "AdamW state (16-bit values in fp32 storage; see docs/mixed-precision.md)"),
        B("fp16", fp16, "fp16 likewise, with loss scaling (dynamic unless --loss-scale)"),
        F("loss-scale", loss_scale, "fp16: a constant loss scale (0: dynamic)", 0, 1e38),
        F("initial-loss-scale", initial_loss_scale, "fp16: the dynamic scale's start", 1, 1e38),
        F("min-loss-scale", min_loss_scale, "fp16: the dynamic scale's floor", 0, 1e38),
        I("loss-scale-window", loss_scale_window,
          "fp16: clean iterations before the dynamic scale doubles", 1, BIG),
        I("hysteresis", hysteresis, "fp16: overflows tolerated before the dynamic scale halves", 1,
          1000000),
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
        S("dump-config", dump_config,
          "write this run's flags (every flag, effective values) as a --config JSON file, then train",
          NULL),
    };
    const ptdp_opt export_[] = {
        S("out", out, "output NAME.safetensors file (NAME.config.json is written beside it)", NULL),
        S("load", load,
          "export the weights of this checkpoint directory (any layout; model flags come from it)",
          NULL),
        S("export-dtype", export_dtype,
          "dtype of the written tensors: fp32, bf16 or fp16 (rounded to nearest even; fp16 "
          "refuses values beyond +-65504)",
          "fp32|bf16|fp16"),
        I("tensor-model-parallel-size", tensor_model_parallel_size, "tensor-parallel size t", 1,
          4096),
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

char *ptdp_args_config_json(ptdp_args *a, int which, int64_t global_batch) {
    ptdp_opt opts[PTDP_ARGS_MAX_FLAGS];
    int n = ptdp_args_table(a, which, opts, PTDP_ARGS_MAX_FLAGS);
    cJSON *root = cJSON_CreateObject();
    char key[128], paths[4096];
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
        case PTDP_OPT_STR:
            if (o->dst == &a->data_path &&
                a->data_path) { /* the whole list, as --config takes it */
                size_t len = 0;
                paths[0] = 0;
                for (int k = 0; k < a->n_data_paths; k++)
                    len +=
                        (size_t)snprintf(paths + len, len < sizeof paths ? sizeof paths - len : 0,
                                         "%s%s", k ? " " : "", a->data_paths[k]);
                v = cJSON_CreateString(paths);
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
    if (!from_cli && a->data_path) { /* from --config: split the string on spaces */
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

/* Megatron's validate_args for the two ways to count training: iterations
 * (--train-iters, --lr-*-iters) or samples (--train-samples,
 * --lr-*-samples), never a mix; one warm-up flag. */
/* Megatron's precision flags: one of --bf16 / --fp16; loss scaling only
 * with them; the CUDA backend is fp32 for now. */
static int check_precision_flags(const ptdp_args *a) {
    if (a->bf16 && a->fp16) return ptdp_errorf(PTDP_ECONFIG, "give --bf16 or --fp16, not both");
    if (a->loss_scale > 0 && !a->bf16 && !a->fp16)
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

static int check_schedule_flags(const ptdp_args *a, int64_t B) {
    const int by_samples = a->train_samples >= 0;
    if (by_samples && a->train_iters >= 0)
        return ptdp_errorf(PTDP_ECONFIG, "give --train-iters or --train-samples, not both");
    const char *unit = by_samples ? "samples" : "iters";
    const char *mixed = by_samples ? (a->lr_decay_iters    ? "--lr-decay-iters"
                                      : a->lr_warmup_iters ? "--lr-warmup-iters"
                                                           : NULL)
                                   : (a->lr_decay_samples    ? "--lr-decay-samples"
                                      : a->lr_warmup_samples ? "--lr-warmup-samples"
                                                             : NULL);
    if (mixed)
        return ptdp_errorf(
            PTDP_ECONFIG, "%s counts %s, and this run counts %s (--train-%s); use --lr-%s-%s",
            mixed, by_samples ? "iterations" : "samples", by_samples ? "samples" : "iterations",
            unit, strstr(mixed, "decay") ? "decay" : "warmup", unit);
    const int64_t warm = by_samples ? a->lr_warmup_samples : a->lr_warmup_iters,
                  decay = by_samples ? a->lr_decay_samples : a->lr_decay_iters;
    if (warm && a->lr_warmup_fraction > 0)
        return ptdp_errorf(PTDP_ECONFIG, "give --lr-warmup-%s or --lr-warmup-fraction, not both",
                           unit);
    if (decay && warm >= decay && strcmp(a->lr_decay_style, "constant"))
        return ptdp_errorf(PTDP_ECONFIG, "--lr-warmup-%s %lld must be below --lr-decay-%s %lld",
                           unit, (long long)warm, unit, (long long)decay);
    if (by_samples && a->train_samples > 0 && a->train_samples < B)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--train-samples %lld is less than one global batch (%lld samples); "
                           "give at least %lld, or 0 to train nothing",
                           (long long)a->train_samples, (long long)B, (long long)B);
    return PTDP_OK;
}

/* Megatron's TransformerConfig for full recomputation: --recompute-num-layers
 * is required (for both methods) and at most the layers of a pipeline rank
 * (Megatron's num_layers / p; with virtual stages the rank's chunks
 * together, with uneven stages the fullest rank); a larger value would mean
 * no more than that, so it is a mistake to point out, not a setting. */
static int check_recompute_layers(const ptdp_args *a, int64_t pp, int64_t v,
                                  const ptdp_stage_layout *L) {
    const int uniform = !strcmp(a->recompute_method, "uniform");
    if (!a->recompute_num_layers)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--recompute-method %s needs --recompute-num-layers N (%s), as in "
                           "Megatron-LM; e.g. --recompute-num-layers 1",
                           a->recompute_method,
                           uniform ? "the layers of each recomputed group"
                                   : "the layers recomputed in each pipeline stage");
    int64_t most = 0;
    for (int r = 0; r < pp; r++) {
        int64_t on_rank = 0;
        for (int c = 0; c < v; c++) {
            int64_t b = 0, e = 0;
            ptdp_stage_layout_range(L, a->num_layers, (int)pp, (int)v, (int)(c * pp + r), &b, &e);
            on_rank += e - b;
        }
        if (on_rank > most) most = on_rank;
    }
    if (a->recompute_num_layers > most) {
        char where[160];
        if (pp == 1)
            snprintf(where, sizeof where, "the model's --num-layers %lld", (long long)most);
        else if (ptdp_stage_layout_is_even(L))
            snprintf(where, sizeof where,
                     "the %lld layers of a pipeline rank (--num-layers %lld over "
                     "--pipeline-model-parallel-size %lld)",
                     (long long)most, (long long)a->num_layers, (long long)pp);
        else
            snprintf(where, sizeof where, "the %lld layers of the fullest pipeline rank",
                     (long long)most);
        return ptdp_errorf(
            PTDP_ECONFIG, "--recompute-num-layers %lld is more than %s; give 1 to %lld (%s)",
            (long long)a->recompute_num_layers, where, (long long)most,
            uniform ? "layers per recomputed group" : "layers recomputed in each stage");
    }
    return PTDP_OK;
}

int ptdp_args_pipeline_layout(const ptdp_args *a, int64_t pp, int64_t *v_out,
                              ptdp_stage_layout *L) {
    memset(L, 0, sizeof *L);
    int64_t v = 1;
    const int64_t nlv = a->num_layers_per_virtual_pipeline_stage;
    if (a->virtual_pipeline_model_parallel_size && nlv)
        return ptdp_errorf(PTDP_ECONFIG, "give --virtual-pipeline-model-parallel-size or "
                                         "--num-layers-per-virtual-pipeline-stage, not both");
    if (a->pipeline_model_parallel_layout) {
        int rc = ptdp_stage_layout_parse(a->pipeline_model_parallel_layout, L);
        if (rc != PTDP_OK) return rc;
        if (nlv)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--pipeline-model-parallel-layout sets the virtual stages itself; "
                               "drop --num-layers-per-virtual-pipeline-stage");
        if (L->nstages % pp)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--pipeline-model-parallel-layout has %d stages, not a multiple of "
                               "--pipeline-model-parallel-size %lld (it lists p x v stages)",
                               L->nstages, (long long)pp);
        v = L->nstages / pp;
        if (a->virtual_pipeline_model_parallel_size && a->virtual_pipeline_model_parallel_size != v)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--virtual-pipeline-model-parallel-size %lld conflicts with "
                               "--pipeline-model-parallel-layout, whose %d stages give v = %lld",
                               (long long)a->virtual_pipeline_model_parallel_size, L->nstages,
                               (long long)v);
    }
    L->first = a->decoder_first_pipeline_num_layers;
    L->last = a->decoder_last_pipeline_num_layers;
    L->embedding = a->account_for_embedding_in_pipeline_split;
    L->loss = a->account_for_loss_in_pipeline_split;
    if (a->virtual_pipeline_model_parallel_size) v = a->virtual_pipeline_model_parallel_size;
    const int zbv = a->pipeline_schedule && !strcmp(a->pipeline_schedule, "zb-v");
    /* zb-v's V is two chunks per rank: implied when nothing else sets v */
    if (zbv && !a->virtual_pipeline_model_parallel_size && !nlv && !L->nstages) v = 2;
    if (zbv && (L->first || L->last))
        return ptdp_errorf(PTDP_ECONFIG,
                           "--decoder-first/last-pipeline-num-layers count layers per pipeline "
                           "rank in the interleaved order; with --pipeline-schedule zb-v (rank 0 "
                           "holds the first and the last stage) give the stages with "
                           "--pipeline-model-parallel-layout or "
                           "--account-for-embedding/loss-in-pipeline-split instead");
    if (nlv) {
        if (L->first || L->last)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--decoder-first/last-pipeline-num-layers need the virtual "
                               "stages as --virtual-pipeline-model-parallel-size, not "
                               "--num-layers-per-virtual-pipeline-stage");
        /* Megatron: the embedding and loss count as layers here too */
        const int64_t l = a->num_layers + L->embedding + L->loss;
        if (l % (pp * nlv))
            return ptdp_errorf(
                PTDP_ECONFIG,
                "--num-layers %lld%s is not divisible by --pipeline-model-parallel-size %lld x "
                "--num-layers-per-virtual-pipeline-stage %lld",
                (long long)l, L->embedding || L->loss ? " (with the embedding/loss counted)" : "",
                (long long)pp, (long long)nlv);
        v = l / (pp * nlv);
    }
    if (zbv && pp < 2)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--pipeline-schedule zb-v runs two model chunks per rank in a V "
                           "shape: it needs --pipeline-model-parallel-size >= 2");
    if (v > 1 && pp == 1)
        return ptdp_errorf(
            PTDP_ECONFIG,
            "virtual pipeline stages (v = %lld) need --pipeline-model-parallel-size > 1",
            (long long)v);
    if (v > PTDP_LAYOUT_MAX_STAGES || pp * v > PTDP_LAYOUT_MAX_STAGES * 32)
        return ptdp_errorf(PTDP_ECONFIG, "too many virtual pipeline stages (v = %lld)",
                           (long long)v);
    *v_out = v;
    return ptdp_stage_layout_check(L, a->num_layers, (int)pp, (int)v);
}

int ptdp_args_model_config(const ptdp_args *a, int which, int world_size, ptdp_gpt_config *cfg,
                           int *d_out) {
    const struct {
        int missing;
        const char *flag;
    } req[] = {
        {a->num_layers == 0, "--num-layers"},
        {a->hidden_size == 0, "--hidden-size"},
        {a->num_attention_heads == 0, "--num-attention-heads"},
        {a->seq_length == 0, "--seq-length"},
        {which == PTDP_ARGS_TRAIN && a->train_iters < 0 && a->train_samples < 0,
         "--train-iters (or --train-samples)"},
        {which == PTDP_ARGS_TRAIN && a->lr < 0, "--lr"},
        {which == PTDP_ARGS_EXPORT && !a->out, "--out"},
    };
    if (which == PTDP_ARGS_TRAIN && a->save_interval && !a->save)
        return ptdp_errorf(PTDP_EINVAL, "--save-interval needs --save DIR");
    if (which == PTDP_ARGS_TRAIN && a->overwrite_checkpoints && !a->save)
        return ptdp_errorf(PTDP_EINVAL, "--overwrite-checkpoints applies to --save DIR, and there "
                                        "is no --save; add --save DIR or drop it");
    if (which == PTDP_ARGS_TRAIN && !a->load) {
        const char *with_load = a->finetune             ? "--finetune"
                                : a->no_load_optim      ? "--no-load-optim"
                                : a->override_scheduler ? "--override-opt-param-scheduler"
                                : a->use_checkpoint_scheduler
                                    ? "--use-checkpoint-opt-param-scheduler"
                                    : NULL;
        if (with_load)
            return ptdp_errorf(
                PTDP_EINVAL,
                "%s applies to the checkpoint of --load DIR, and there is no --load; "
                "add --load DIR or drop %s",
                with_load, with_load);
    }
    if (which == PTDP_ARGS_TRAIN && a->load && a->init_from)
        return ptdp_errorf(
            PTDP_EINVAL,
            "--init-from and --load exclude each other (the checkpoint's weights would "
            "replace --init-from's); give one (--load DIR --finetune starts a new run from a "
            "checkpoint's weights)");
    if (which == PTDP_ARGS_TRAIN && a->override_scheduler && a->use_checkpoint_scheduler)
        return ptdp_errorf(
            PTDP_EINVAL, "--override-opt-param-scheduler and --use-checkpoint-opt-param-scheduler "
                         "exclude each other; give one");
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (req[i].missing)
            return ptdp_errorf(PTDP_EINVAL, "missing required flag %s (see --help)", req[i].flag);
    if (which == PTDP_ARGS_TRAIN) {
        int sources = (a->mock_data != 0) + (a->token_file != NULL) + (a->data_path != NULL);
        if (sources == 0)
            return ptdp_errorf(
                PTDP_EINVAL,
                "no training data: give --data-path PREFIX, --token-file FILE or --mock-data");
        if (sources > 1)
            return ptdp_errorf(
                PTDP_EINVAL,
                "--data-path, --token-file and --mock-data exclude each other; give one");
        if ((a->vocab_file != NULL) != (a->merge_file != NULL))
            return ptdp_errorf(PTDP_EINVAL, "give --vocab-file and --merge-file together");
    }
    int64_t t = a->tensor_model_parallel_size,
            pp = which == PTDP_ARGS_TRAIN ? a->pipeline_model_parallel_size : 1;
    if (a->ffn_hidden_size && a->ffn_hidden_size % t)
        return ptdp_errorf(
            PTDP_ECONFIG,
            a->swiglu ? "--swiglu: --ffn-hidden-size %lld is not divisible by "
                        "--tensor-model-parallel-size %lld (each rank holds the gate and up rows "
                        "of the same ffn/t units)"
                      : "--ffn-hidden-size %lld is not divisible by --tensor-model-parallel-size "
                        "%lld (each tensor-parallel rank holds 1/t of the MLP width)",
            (long long)a->ffn_hidden_size, (long long)t);
    if (which == PTDP_ARGS_TRAIN && world_size % (t * pp))
        return ptdp_errorf(
            PTDP_ECONFIG,
            "this job has %d ranks, which is not a multiple of --tensor-model-parallel-size %lld x "
            "--pipeline-model-parallel-size %lld; launch with mpirun -np a multiple of %lld",
            world_size, (long long)t, (long long)pp, (long long)(t * pp));
    if (which != PTDP_ARGS_TRAIN && t != 1)
        return ptdp_errorf(PTDP_EUNSUPPORTED,
                           "--tensor-model-parallel-size: export works on one process; use 1");
    int64_t d = which == PTDP_ARGS_TRAIN ? world_size / (t * pp) : 1;
    if (d_out) *d_out = (int)d;
    if (which == PTDP_ARGS_TRAIN) {
        int64_t v = 1;
        ptdp_stage_layout layout;
        int lrc = ptdp_args_pipeline_layout(a, pp, &v, &layout);
        if (lrc != PTDP_OK) return lrc;
        const char *sched =
            a->pipeline_schedule ? a->pipeline_schedule : (v > 1 ? "interleaved" : "1f1b");
        const int zbv = !strcmp(sched, "zb-v");
        if (v > 1 && strcmp(sched, "interleaved") && !zbv)
            return ptdp_errorf(
                PTDP_ECONFIG,
                "--pipeline-schedule %s runs one model chunk per rank; virtual stages "
                "(v = %lld) need the interleaved schedule (or zb-v, with v = 2)",
                sched, (long long)v);
        if (zbv && (pp < 2 || v != 2))
            return ptdp_errorf(PTDP_ECONFIG,
                               "--pipeline-schedule zb-v runs two model chunks per rank in a V "
                               "shape: it needs --pipeline-model-parallel-size >= 2 (got %lld) "
                               "and --virtual-pipeline-model-parallel-size 2 or left out (got v = "
                               "%lld)",
                               (long long)pp, (long long)v);
        if (a->zb_costs && !zbv)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--zb-costs sets the costs zb-v's list scheduler plays; it needs "
                               "--pipeline-schedule zb-v (got %s)",
                               sched);
        if (a->zb_costs) {
            ptdp_schedule_params costs = ptdp_schedule_default_params();
            const int crc = ptdp_schedule_parse_costs(a->zb_costs, "--zb-costs", &costs);
            if (crc != PTDP_OK) return crc;
        }
        if (v == 1 && !strcmp(sched, "interleaved"))
            return ptdp_errorf(PTDP_ECONFIG, "--pipeline-schedule interleaved needs "
                                             "--virtual-pipeline-model-parallel-size > 1");
        const int zb = !strcmp(sched, "zb-h1") || zbv;
        if (zb && a->recompute_granularity && strcmp(a->recompute_granularity, "selective"))
            return ptdp_errorf(PTDP_ECONFIG,
                               "--pipeline-schedule %s keeps activations until the weight "
                               "gradients (W) run; it cannot be combined with "
                               "--recompute-granularity full (selective is fine)",
                               sched);
        if (a->recompute_method && !a->recompute_granularity)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--recompute-method needs --recompute-granularity full");
        if (a->recompute_num_layers && !a->recompute_granularity)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--recompute-num-layers needs --recompute-granularity full");
        const int selective =
            a->recompute_granularity && !strcmp(a->recompute_granularity, "selective");
        if (selective && (a->recompute_method || a->recompute_num_layers))
            return ptdp_errorf(PTDP_ECONFIG,
                               "--recompute-granularity selective recomputes core attention in "
                               "every layer; --recompute-method and --recompute-num-layers go "
                               "with --recompute-granularity full (as in Megatron-LM)");
        if (a->recompute_granularity && !selective && !a->recompute_method)
            return ptdp_errorf(
                PTDP_ECONFIG,
                "--recompute-granularity full needs --recompute-method uniform|block");
        if (a->recompute_granularity && !selective) {
            int rrc = check_recompute_layers(a, pp, v, &layout);
            if (rrc) return rrc;
        }
        if (a->sequence_parallel && t > 1 && a->seq_length % t)
            return ptdp_errorf(
                PTDP_ECONFIG,
                "--sequence-parallel splits the sequence across the tensor-parallel group: "
                "--seq-length %lld is not divisible by --tensor-model-parallel-size %lld; choose "
                "a sequence length that is a multiple of t",
                (long long)a->seq_length, (long long)t);
        if (a->scatter_gather && a->no_scatter_gather)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--scatter-gather-tensors-in-pipeline and "
                               "--no-scatter-gather-tensors-in-pipeline exclude each other");
        int64_t B = a->global_batch_size ? a->global_batch_size : a->micro_batch_size * d;
        int64_t m = B / (a->micro_batch_size * d);
        if (v > 1 && !zbv && B % (a->micro_batch_size * d) == 0 && m % pp)
            return ptdp_errorf(
                PTDP_ECONFIG,
                "the interleaved schedule needs the number of micro-batches (%lld = "
                "--global-batch-size / (--micro-batch-size x data-parallel size)) to be a multiple "
                "of --pipeline-model-parallel-size %lld",
                (long long)m, (long long)pp);
    }
    memset(cfg, 0, sizeof *cfg);
    cfg->num_layers = a->num_layers;
    cfg->hidden = a->hidden_size;
    cfg->heads = a->num_attention_heads;
    cfg->ffn_hidden = a->ffn_hidden_size;
    cfg->seq_length = a->seq_length;
    cfg->max_positions = a->max_position_embeddings;
    cfg->vocab = a->vocab_size;
    cfg->init_std = (float)a->init_method_std;
    cfg->hidden_dropout = (float)a->hidden_dropout;
    cfg->attention_dropout = (float)a->attention_dropout;
    cfg->ln_eps = (float)a->layernorm_epsilon;
    cfg->seed = (uint64_t)a->seed;
    ptdp_args_llama(a, cfg);
    int rc = ptdp_gpt_config_finish(cfg, a->make_vocab_size_divisible_by, (int)t);
    if (rc) return rc;
    if (which == PTDP_ARGS_TRAIN) {
        int64_t B = a->global_batch_size ? a->global_batch_size : a->micro_batch_size * d;
        if (B % (a->micro_batch_size * d))
            return ptdp_errorf(
                PTDP_ECONFIG,
                "--global-batch-size %lld is not a multiple of --micro-batch-size %lld x "
                "data-parallel size %lld (= ranks / (t x p)); each data-parallel rank needs "
                "a whole number of micro-batches",
                (long long)B, (long long)a->micro_batch_size, (long long)d);
        int rc2 = check_schedule_flags(a, B);
        if (!rc2) rc2 = check_precision_flags(a);
        if (rc2) return rc2;
        if (a->min_lr > a->lr)
            return ptdp_errorf(PTDP_ECONFIG, "--min-lr %g is above --lr %g", a->min_lr, a->lr);
        /* Each bucket is one collective with its own request: tens of thousands
         * of tiny ones make no progress worth having and hold memory per request. */
        const int64_t h = cfg->hidden, ffn = cfg->ffn_hidden;
        const int64_t params = (cfg->vocab_padded + cfg->max_positions) * h +
                               cfg->num_layers * (4 * h * h + 2 * h * ffn + 9 * h + ffn) + 2 * h;
        const int64_t per_rank = params / (t * pp), max_buckets = 10000;
        if (a->ddp_bucket_size < (per_rank + max_buckets - 1) / max_buckets) {
            const int64_t least = (per_rank + max_buckets - 1) / max_buckets;
            return ptdp_errorf(
                PTDP_ECONFIG,
                "--ddp-bucket-size %lld cuts this rank's ~%lld gradients into ~%lld buckets (one "
                "collective each; at most %lld are allowed); give at least %lld, or leave the "
                "default 40000000 (Megatron's)",
                (long long)a->ddp_bucket_size, (long long)per_rank,
                (long long)((per_rank + a->ddp_bucket_size - 1) / a->ddp_bucket_size),
                (long long)max_buckets, (long long)least);
        }
    }
    return PTDP_OK;
}

void ptdp_args_llama(const ptdp_args *a, ptdp_gpt_config *cfg) {
    cfg->rmsnorm = a->normalization && !strcmp(a->normalization, "RMSNorm");
    cfg->rope = a->position_embedding_type && !strcmp(a->position_embedding_type, "rope");
    cfg->rotary_base = a->rotary_base;
    cfg->rotary_percent = (float)a->rotary_percent;
    cfg->swiglu = a->swiglu;
    /* Megatron: without --group-query-attention every head is its own group */
    cfg->query_groups = a->group_query_attention ? a->num_query_groups : 0;
    cfg->untie = a->untie_embeddings_and_output_weights;
    cfg->no_bias = a->disable_bias_linear;
}

int64_t ptdp_args_train_iters(const ptdp_args *a, int64_t B) {
    return a->train_samples >= 0 ? a->train_samples / B : a->train_iters;
}

/* Megatron's get_optimizer_param_scheduler: decay and warm-up in samples
 * (iterations x B when the run counts iterations); the fraction applies to
 * the decay in samples, unrounded. */
void ptdp_args_optim(const ptdp_args *a, int64_t B, ptdp_lr_schedule *lr, ptdp_adamw_params *adam) {
    const int by_samples = a->train_samples >= 0;
    lr->max_lr = a->lr;
    lr->min_lr = a->min_lr;
    lr->samples_per_step = B;
    lr->decay_samples =
        by_samples ? (double)(a->lr_decay_samples ? a->lr_decay_samples : a->train_samples)
                   : (double)(a->lr_decay_iters ? a->lr_decay_iters : a->train_iters) * (double)B;
    lr->warmup_samples =
        by_samples ? (double)a->lr_warmup_samples : (double)a->lr_warmup_iters * (double)B;
    if (a->lr_warmup_fraction > 0) lr->warmup_samples = a->lr_warmup_fraction * lr->decay_samples;
    /* a decay no longer than the warm-up (only --lr-decay-style constant gets
     * here, or a run too short to matter): end it one step after */
    if (lr->decay_samples <= lr->warmup_samples)
        lr->decay_samples = (floor(lr->warmup_samples / (double)B) + 1) * (double)B;
    PTDP_ASSERT(ptdp_lr_style_parse(a->lr_decay_style, &lr->style) == PTDP_OK);
    adam->beta1 = a->adam_beta1;
    adam->beta2 = a->adam_beta2;
    adam->eps = a->adam_eps;
    adam->weight_decay = a->weight_decay;
    adam->clip_grad = a->clip_grad;
}
