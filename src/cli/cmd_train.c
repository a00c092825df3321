/* cmd_train.c - `ptdp train` and `ptdp export`: parse and check the flags
 * (before any work), start MPI, build the trainer, loop, log Megatron's
 * iteration line and optional JSON lines, write weights at the end. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/hf.h"
#include "cli/cli.h"
#include "train/train.h"
#include "data/data.h"

/* Exit status for an error code: 2 for bad usage, configuration or file
 * contents, 1 for failures of the system (I/O, memory, communication). */
static int status_of(int rc) {
    return rc == PTDP_EIO || rc == PTDP_ENOMEM || rc == PTDP_ECOMM || rc == PTDP_EBACKEND ? 1 : 2;
}

static void usage(FILE *f, const char *cmd, int which) {
    ptdp_args a;
    ptdp_args_defaults(&a);
    ptdp_opt opts[PTDP_ARGS_MAX_FLAGS];
    const char *titles[PTDP_ARGS_MAX_FLAGS];
    int n = ptdp_args_table_groups(&a, which, opts, PTDP_ARGS_MAX_FLAGS, titles);
    if (which == PTDP_ARGS_TRAIN)
        fprintf(
            f,
            "usage: ptdp train [flags]   (Megatron-LM's flag names; --config FILE.json takes the same keys)\n\n"
            "Trains a GPT model. Required: --num-layers --hidden-size --num-attention-heads --seq-length\n"
            "--train-iters --lr and a data source (--data-path PREFIX, --token-file FILE or --mock-data).\n"
            "Parallel layout: mpirun -np n with n = t x p x d (--tensor-model-parallel-size t,\n"
            "--pipeline-model-parallel-size p; d is derived). Megatron-LM flags not listed here\n"
            "are accepted where they change nothing in ptdp (said at start-up) or refused with\n"
            "what to use: docs/megatron.md.\n\n");
    else
        fprintf(
            f,
            "usage: ptdp %s --out FILE.safetensors [model flags] [--init-from FILE | --load CHECKPOINT_DIR]\n\n"
            "Writes the model's weights (Megatron initialisation from --seed, or --init-from) as Hugging Face\n"
            "GPT-2 safetensors, with NAME.config.json beside NAME.safetensors. With --init-from, the shape\n"
            "flags not given come from the weights' NAME.config.json (or config.json), metadata or tensors.\n\n",
            cmd);
    /* one block per argument group, as Megatron's --help */
    for (int i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && !titles[j];) j++;
        if (titles[i]) fprintf(f, "%s%s:\n", i ? "\n" : "", titles[i]);
        ptdp_opts_help(f, opts + i, j - i);
    }
}

/* Megatron's --use-checkpoint-args: the model flags not given come from the
 * checkpoint in --load (none there yet: the flags as given, as in
 * Megatron-LM). Writes what it took into took[cap] for the start-up log. */
static int checkpoint_args(ptdp_args *a, char *took, size_t cap) {
    took[0] = 0;
    if (!a->use_checkpoint_args) return PTDP_OK;
    if (!a->load)
        return ptdp_errorf(PTDP_EINVAL, "--use-checkpoint-args reads the model flags from the "
                                        "checkpoint of --load DIR, and there is no --load");
    ptdp_gpt_config c;
    int rc = ptdp_ckpt_read_config(a->load, &c);
    if (rc == PTDP_ENOTFOUND) {
        snprintf(took, cap, "no checkpoint in %s yet: the model flags as given", a->load);
        return PTDP_OK;
    }
    if (rc) return rc;
    const struct {
        int64_t *field, value;
        const char *flag;
    } m[] = {{&a->num_layers, c.num_layers, "--num-layers"},
             {&a->hidden_size, c.hidden, "--hidden-size"},
             {&a->num_attention_heads, c.heads, "--num-attention-heads"},
             {&a->ffn_hidden_size, c.ffn_hidden, "--ffn-hidden-size"},
             {&a->seq_length, c.seq_length, "--seq-length"},
             {&a->max_position_embeddings, c.max_positions, "--max-position-embeddings"}};
    size_t len = 0;
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (*m[i].field == 0 && m[i].value > 0) {
            *m[i].field = m[i].value;
            if (len < cap)
                len += (size_t)snprintf(took + len, cap - len, "%s%s %lld", len ? ", " : "",
                                        m[i].flag, (long long)m[i].value);
        }
    /* the Llama family's blocks: those at their defaults come from the checkpoint too */
    const struct {
        int on;
        const char *flag;
    } bl[] = {{c.rmsnorm && !strcmp(a->normalization, "LayerNorm"), "--normalization RMSNorm"},
              {c.swiglu && !a->swiglu, "--swiglu"},
              {c.rope && !strcmp(a->position_embedding_type, "learned_absolute"),
               "--position-embedding-type rope"},
              {c.query_groups && !a->group_query_attention, "--group-query-attention"},
              {c.untie && !a->untie_embeddings_and_output_weights,
               "--untie-embeddings-and-output-weights"},
              {c.no_bias && !a->disable_bias_linear, "--disable-bias-linear"}};
    for (size_t i = 0; i < sizeof bl / sizeof bl[0]; i++)
        if (bl[i].on && len < cap)
            len += (size_t)snprintf(took + len, cap - len, "%s%s", len ? ", " : "", bl[i].flag);
    if (bl[0].on) a->normalization = "RMSNorm";
    if (bl[1].on) a->swiglu = 1;
    if (bl[2].on) {
        a->position_embedding_type = "rope";
        a->rotary_base = c.rotary_base;
        a->rotary_percent = c.rotary_percent;
    }
    if (bl[3].on) a->group_query_attention = 1, a->num_query_groups = c.query_groups;
    if (bl[4].on) a->untie_embeddings_and_output_weights = 1;
    if (bl[5].on) a->disable_bias_linear = 1;
    if (!len) snprintf(took, cap, "every model flag was given");
    return PTDP_OK;
}

/* Parse + validate; returns 0 to go on, else the exit status (help: 0). */
static int parse(ptdp_args *a, int which, const char *cmd, int argc, char **argv, void **keep,
                 int *done) {
    int help = 0;
    ptdp_args_defaults(a);
    *done = 0;
    int rc = ptdp_args_parse(a, which, argc, argv, &help, keep);
    if (help) {
        usage(stdout, cmd, which);
        *done = 1;
        return 0;
    }
    if (rc) {
        ptdp_log_error("%s", ptdp_last_error());
        *done = 1;
        return status_of(rc);
    }
    return 0;
}

int ptdp_cmd_train(int argc, char **argv) {
    ptdp_args a;
    void *keep = NULL;
    int done;
    int status = parse(&a, PTDP_ARGS_TRAIN, "train", argc, argv, &keep, &done);
    if (done) {
        ptdp_args_free(keep);
        return status;
    }
    if (a.exit_signal_handler) ptdp_run_catch_sigterm(); /* before any thread starts */
    ptdp_comm comm;
    if (ptdp_comm_init(&comm, &argc, &argv)) {
        ptdp_log_error("%s", ptdp_last_error());
        ptdp_args_free(keep);
        return 1;
    }
    ptdp_trainer_params tp = ptdp_trainer_default_params();
    int d = 1;
    char took[512];
    int rc = checkpoint_args(&a, took, sizeof took);
    tp.eod_token = 50256;                /* GPT-2's <|endoftext|>, the EOD without a tokenizer */
    if (rc == PTDP_OK && a.vocab_file) { /* the vocabulary size comes from the tokenizer */
        ptdp_tokenizer *tok = NULL;
        int st = ptdp__cli_open_tokenizer(&tok, a.vocab_file, a.merge_file);
        if (st) {
            ptdp_comm_finalize(&comm);
            ptdp_args_free(keep);
            return st;
        }
        a.vocab_size = ptdp_tokenizer_vocab_size(tok);
        tp.eod_token = ptdp_tokenizer_eod(tok);
        ptdp_tokenizer_free(tok);
    }
    if (rc == PTDP_OK)
        rc = ptdp_args_model_config(&a, PTDP_ARGS_TRAIN, comm.world_size, &tp.cfg, &d);
    tp.eod_mask_loss = a.eod_mask_loss;
    if (rc == PTDP_OK && a.eod_mask_loss && (tp.eod_token < 0 || tp.eod_token >= a.vocab_size))
        rc = ptdp_errorf(PTDP_ECONFIG,
                         a.vocab_file ? "--eod-mask-loss: --vocab-file has no <|endoftext|> token"
                                      : "--eod-mask-loss: the end-of-document id 50256 (GPT-2's) "
                                        "is not below --vocab-size %lld; give --vocab-file and "
                                        "--merge-file to take it from the tokenizer",
                         (long long)a.vocab_size);
    ptdp_gemm_lib lib = PTDP_GEMM_ONEDNN;
    if (rc == PTDP_OK) rc = ptdp_gemm_lib_parse(a.gemm, &lib);
    if (rc == PTDP_OK && a.init_from)
        rc = ptdp__cli_check_init_from(a.init_from, &tp.cfg, a.allow_extra_tensors);
    if (rc == PTDP_OK)
        rc = ptdp_comm_setup(&comm, (int)a.tensor_model_parallel_size,
                             (int)a.pipeline_model_parallel_size, d);
    if (rc) {
        ptdp_log_error("%s", ptdp_last_error());
        ptdp_comm_finalize(&comm);
        ptdp_args_free(keep);
        return status_of(rc);
    }
    ptdp__cli_set_threads(&comm);
    /* Megatron-LM flags that change nothing here: said once, so a pasted
     * script shows what it asked for and ptdp does not do */
    for (int i = 0; i < a.n_inert; i++)
        ptdp_log0("note: --%s%s%s is accepted and changes nothing in ptdp: %s", a.inert[i].name,
                  a.inert[i].value ? " " : "", a.inert[i].value ? a.inert[i].value : "",
                  a.inert[i].why);
    if (a.use_checkpoint_args) ptdp_log0("--use-checkpoint-args: %s", took);
    rc = ptdp_comm_watchdog_start(&comm, 60.0 * a.distributed_timeout_minutes);
    if (rc) {
        ptdp_log_error("%s", ptdp_last_error());
        ptdp_comm_finalize(&comm);
        ptdp_args_free(keep);
        return status_of(rc);
    }
    tp.micro_batch = a.micro_batch_size;
    tp.global_batch = a.global_batch_size ? a.global_batch_size : a.micro_batch_size * d;
    const int64_t train_iters = ptdp_args_train_iters(&a, tp.global_batch);
    ptdp_args_optim(&a, tp.global_batch, &tp.lr, &tp.adam);
    if (a.train_samples > 0)
        ptdp_log0("--train-samples %lld: %lld iterations of %lld samples%s",
                  (long long)a.train_samples, (long long)train_iters, (long long)tp.global_batch,
                  a.train_samples % tp.global_batch ? " (the rest of the samples is not trained, "
                                                      "as in Megatron)"
                                                    : "");
    /* Megatron's precision: a --bf16 / --fp16 backend rounds what it writes
     * to the 16-bit grid; fp16 scales the loss (dynamically unless --loss-scale) */
    ptdp_backend_params bp = ptdp_backend_default_params();
    bp.dtype = a.bf16 ? PTDP_DTYPE_BF16 : a.fp16 ? PTDP_DTYPE_FP16 : PTDP_DTYPE_FP32;
    bp.lib = lib;
    if (a.loss_scale > 0)
        tp.scaler = ptdp_loss_scaler_constant(a.loss_scale);
    else if (a.fp16)
        tp.scaler = ptdp_loss_scaler_dynamic(a.initial_loss_scale, a.min_loss_scale,
                                             a.loss_scale_window, (int)a.hysteresis);
    ptdp_backend *be = NULL;
    if (!strcmp(a.device, "cuda")) {
        bp.device = PTDP_DEVICE_CUDA;
        /* one GPU, one process: the communication backends move host memory
         * only (multi-GPU communication is not there yet) */
        if (comm.world_size > 1)
            rc = ptdp_errorf(PTDP_EUNSUPPORTED,
                             "it runs one process on one GPU and this job has %d processes "
                             "(multi-GPU communication is not implemented yet)",
                             comm.world_size);
    }
    /* no GPU, a build without CUDA, out of memory: the reason is in ptdp_last_error() */
    if (rc == PTDP_OK) rc = ptdp_backend_open(&be, &bp);
    if (rc) {
        if (bp.device == PTDP_DEVICE_CUDA)
            ptdp_log_error("--device cuda: %s", ptdp_last_error());
        else
            ptdp_log_error("%s", ptdp_last_error());
        ptdp_comm_finalize(&comm);
        ptdp_args_free(keep);
        return status_of(rc);
    }
    tp.be = be;
    tp.comm = &comm;
    tp.init_from = a.init_from;
    tp.sched.p = (int)a.pipeline_model_parallel_size;
    {
        /* checked by ptdp_args_model_config: cannot fail here */
        int64_t v = 1;
        ptdp_args_pipeline_layout(&a, a.pipeline_model_parallel_size, &v, &tp.layout);
        tp.sched.v = (int)v;
    }
    tp.sched.kind = a.pipeline_schedule ? ptdp_schedule_parse_kind(a.pipeline_schedule) : -1;
    /* zb-v's costs: every rank parses the same command line (checked by
     * ptdp_args_model_config); without the flag the trainer takes them from
     * the layer's FLOPs */
    if (a.zb_costs) ptdp_schedule_parse_costs(a.zb_costs, "--zb-costs", &tp.sched);
    /* the flags' choices (full|selective, uniform|block) were checked by the parser */
    tp.recompute_method = a.recompute_method ? ptdp_recompute_method_parse(a.recompute_method)
                          : a.recompute_granularity && !strcmp(a.recompute_granularity, "selective")
                              ? PTDP_RECOMPUTE_SELECTIVE
                              : PTDP_RECOMPUTE_NONE;
    tp.recompute_num_layers = a.recompute_num_layers ? a.recompute_num_layers : 1;
    tp.scatter_gather =
        a.no_scatter_gather ? 0 : (a.scatter_gather || a.tensor_model_parallel_size > 1);
    tp.sequence_parallel = a.sequence_parallel;
    tp.ddp_bucket_floats = a.ddp_bucket_size;
    tp.overlap_grad_reduce = a.overlap_grad_reduce;
    tp.distributed_optimizer = a.use_distributed_optimizer;
    {
        int64_t m = tp.global_batch / (tp.micro_batch * d);
        /* per (micro-batch, chunk): F, B, W and two receive waits */
        tp.trace_events = a.trace ? 64 + train_iters * (5 * m * tp.sched.v + 8) : 0;
    }

    ptdp_run_params rp = ptdp_run_default_params();
    rp.trainer = tp;
    rp.train_iters = train_iters;
    rp.n_data_paths = a.data_path ? a.n_data_paths : 0;
    rp.data_paths = (const char *const *)a.data_paths;
    rp.split = a.split;
    rp.token_file = a.token_file;
    rp.seed = (uint64_t)a.seed;
    rp.eval_interval = a.eval_interval;
    rp.eval_iters = a.eval_iters;
    rp.log_interval = a.log_interval;
    rp.log_jsonl = a.log_jsonl;
    rp.log_comm = a.log_comm;
    rp.tensorboard_dir = a.tensorboard_dir;
    rp.tensorboard_log_interval = a.tensorboard_log_interval;
    rp.log_timers_to_tensorboard = a.log_timers_to_tensorboard;
    rp.log_validation_ppl_to_tensorboard = a.log_validation_ppl_to_tensorboard;
    rp.log_loss_scale_to_tensorboard = a.log_loss_scale_to_tensorboard;
    rp.log_learning_rate_to_tensorboard = a.log_learning_rate_to_tensorboard;
    rp.log_world_size_to_tensorboard = a.log_world_size_to_tensorboard;
    rp.gemm_name = strcmp(a.device, "cuda") ? ptdp_gemm_lib_name(lib) : "cublas";
    rp.check_dp_replicas = a.check_dp_replicas;
    rp.check_for_nan = a.check_for_nan;
    rp.log_throughput = a.log_throughput;
    rp.save = a.save;
    rp.load = a.load;
    rp.save_interval = a.save_interval;
    rp.exit_interval = a.exit_interval;
    rp.exit_duration_mins = a.exit_duration_in_mins;
    rp.exit_signal_handler = a.exit_signal_handler;
    rp.finetune = a.finetune;
    rp.no_load_optim = a.no_load_optim;
    rp.overwrite_checkpoints = a.overwrite_checkpoints;
    rp.override_scheduler = a.override_scheduler;
    rp.use_checkpoint_scheduler = a.use_checkpoint_scheduler;
    rp.trace = a.trace;
    rp.save_safetensors = a.save_safetensors;
    char cfgpath[4096];
    if (a.save_safetensors) {
        ptdp__cli_config_json_path(a.save_safetensors, cfgpath, sizeof cfgpath);
        rp.save_safetensors_config = cfgpath;
    }
    char *dumped = NULL;
    if (a.dump_config) { /* every rank renders it; rank 0 writes it (ptdp_run_setup) */
        rp.dump_config = a.dump_config;
        rp.dump_config_text = dumped = ptdp_args_config_json(&a, PTDP_ARGS_TRAIN, tp.global_batch);
        PTDP_ASSERT(dumped); /* a few kB; out of memory here means nothing would run */
    }
    ptdp_run *run = NULL;
    rc = ptdp_run_setup(&run, &rp);
    if (rc) {
        ptdp_log_error("%s", ptdp_last_error());
        status = status_of(rc);
    } else {
        status = ptdp_run_finish(run, ptdp_run_loop(run));
    }
    ptdp_run_free(run);
    ptdp_backend_close(be);
    free(dumped);
    ptdp_comm_finalize(&comm);
    ptdp_args_free(keep);
    return status;
}

int ptdp_cmd_export(int argc, char **argv) {
    ptdp_args a;
    void *keep = NULL;
    int done;
    int status = parse(&a, PTDP_ARGS_EXPORT, "export", argc, argv, &keep, &done);
    if (done) {
        ptdp_args_free(keep);
        return status;
    }
    ptdp_gpt_config cfg;
    int rc;
    if (a.load) { /* the model shape comes from the checkpoint */
        const char *model_flag =
            a.num_layers                                            ? "--num-layers"
            : a.hidden_size                                         ? "--hidden-size"
            : a.num_attention_heads                                 ? "--num-attention-heads"
            : a.seq_length                                          ? "--seq-length"
            : a.ffn_hidden_size                                     ? "--ffn-hidden-size"
            : a.max_position_embeddings                             ? "--max-position-embeddings"
            : a.init_from                                           ? "--init-from"
            : a.swiglu                                              ? "--swiglu"
            : strcmp(a.normalization, "LayerNorm")                  ? "--normalization"
            : strcmp(a.position_embedding_type, "learned_absolute") ? "--position-embedding-type"
            : a.group_query_attention                               ? "--group-query-attention"
            : a.untie_embeddings_and_output_weights ? "--untie-embeddings-and-output-weights"
            : a.disable_bias_linear                 ? "--disable-bias-linear"
                                                    : NULL;
        rc =
            !a.out ? ptdp_errorf(PTDP_EINVAL, "missing required flag --out (see --help)")
            : model_flag
                ? ptdp_errorf(PTDP_EINVAL,
                              "export --load takes the model from the checkpoint; drop %s (or drop "
                              "--load to export a new model)",
                              model_flag)
                : ptdp_ckpt_read_config(a.load, &cfg);
        if (rc == PTDP_OK) rc = ptdp_gpt_config_finish(&cfg, a.make_vocab_size_divisible_by, 1);
    } else {
        rc = PTDP_OK;
        if (a.init_from) { /* the shape flags not given come from the weights, as generate's */
            if (a.vocab_size == 50257) a.vocab_size = 0; /* the default: the file says */
            int64_t *const fields[PTDP_HF_NKEYS] = {&a.vocab_size, &a.max_position_embeddings,
                                                    &a.hidden_size, &a.num_layers,
                                                    &a.num_attention_heads};
            rc = ptdp__cli_hf_fill_shape(a.init_from, fields);
            if (!a.seq_length) a.seq_length = a.max_position_embeddings; /* unused by export */
        }
        if (rc == PTDP_OK) rc = ptdp_args_model_config(&a, PTDP_ARGS_EXPORT, 1, &cfg, NULL);
    }
    ptdp_comm comm;
    ptdp_comm_init_single(&comm);
    ptdp_gpt_chunk *chunk = NULL;
    if (rc == PTDP_OK) {
        cfg.seq_length = 1; /* a parameter holder: its (unused) activations stay tiny */
        ptdp_chunk_params cp = {.cfg = &cfg,
                                .layer_end = cfg.num_layers,
                                .pre = 1,
                                .post = 1,
                                .micro_batch = 1,
                                .slots = 1,
                                .tp = &comm.tensor,
                                .inference = 1};
        rc = ptdp_gpt_chunk_init(&chunk, &cp);
    }
    if (rc == PTDP_OK) {
        ptdp_ckpt_loaded ld;
        if (a.load) {
            rc = ptdp_ckpt_load(a.load, 0, &cfg, &chunk, NULL, 1, &comm, &ld);
            if (rc == PTDP_OK && !ld.found)
                rc = ptdp_errorf(PTDP_ENOTFOUND, "--load %s: no checkpoint there", a.load);
        } else if (a.init_from) {
            rc = ptdp__cli_check_init_from(a.init_from, &cfg, a.allow_extra_tensors);
            if (rc == PTDP_OK) rc = ptdp_hf_load_chunk(chunk, &cfg, 0, a.init_from);
        } else {
            ptdp_gpt_chunk_init_params(chunk);
        }
    }
    char cfgpath[4096];
    if (rc == PTDP_OK) {
        ptdp__cli_config_json_path(a.out, cfgpath, sizeof cfgpath);
        ptdp_st_dtype dt = !strcmp(a.export_dtype, "bf16")   ? PTDP_ST_BF16
                           : !strcmp(a.export_dtype, "fp16") ? PTDP_ST_F16
                                                             : PTDP_ST_F32;
        rc = ptdp_hf_export(&chunk, 1, &cfg, &comm.model, 0, 1, a.out, cfgpath, dt);
    }
    if (rc) {
        ptdp_log_error("%s", ptdp_last_error());
        status = status_of(rc);
    } else {
        printf("wrote %s and %s\n", a.out, cfgpath);
    }
    ptdp_gpt_chunk_free(chunk);
    ptdp_args_free(keep);
    return status;
}
