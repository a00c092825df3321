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
    if (!a->run.load)
        return ptdp_errorf(PTDP_EINVAL, "--use-checkpoint-args reads the model flags from the "
                                        "checkpoint of --load DIR, and there is no --load");
    ptdp_gpt_config c;
    int rc = ptdp_ckpt_read_config(a->run.load, &c);
    if (rc == PTDP_ENOTFOUND) {
        snprintf(took, cap, "no checkpoint in %s yet: the model flags as given", a->run.load);
        return PTDP_OK;
    }
    if (rc) return rc;
    ptdp_gpt_config *model = &a->job.model;
    const struct {
        int64_t *field, value;
        const char *flag;
    } m[] = {{&model->num_layers, c.num_layers, "--num-layers"},
             {&model->hidden, c.hidden, "--hidden-size"},
             {&model->heads, c.heads, "--num-attention-heads"},
             {&model->ffn_hidden, c.ffn_hidden, "--ffn-hidden-size"},
             {&model->seq_length, c.seq_length, "--seq-length"},
             {&model->max_positions, c.max_positions, "--max-position-embeddings"}};
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
              {c.swiglu && !model->swiglu, "--swiglu"},
              {c.rope && !strcmp(a->position_embedding_type, "learned_absolute"),
               "--position-embedding-type rope"},
              {c.query_groups && !a->group_query_attention, "--group-query-attention"},
              {c.untie && !model->untie, "--untie-embeddings-and-output-weights"},
              {c.no_bias && !model->no_bias, "--disable-bias-linear"}};
    for (size_t i = 0; i < sizeof bl / sizeof bl[0]; i++)
        if (bl[i].on && len < cap)
            len += (size_t)snprintf(took + len, cap - len, "%s%s", len ? ", " : "", bl[i].flag);
    if (bl[0].on) a->normalization = "RMSNorm";
    if (bl[1].on) model->swiglu = 1;
    if (bl[2].on) {
        a->position_embedding_type = "rope";
        model->rotary_base = c.rotary_base;
        model->rotary_percent = c.rotary_percent;
    }
    if (bl[3].on) a->group_query_attention = 1, a->num_query_groups = c.query_groups;
    if (bl[4].on) model->untie = 1;
    if (bl[5].on) model->no_bias = 1;
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

/* Says why a command stops: the recorded message, the status of its code. */
static int fail(int rc, ptdp_comm *comm, void *keep) {
    ptdp_log_error("%s", ptdp_last_error());
    if (comm) ptdp_comm_finalize(comm);
    ptdp_args_free(keep);
    return status_of(rc);
}

/* The vocabulary size and the end-of-document id come from the tokenizer
 * when there is one; --eod-mask-loss needs an id below the vocabulary. */
static int tokenizer_job(ptdp_args *a) {
    ptdp_job *job = &a->job;
    if (a->vocab_file) {
        ptdp_tokenizer *tok = NULL;
        int st = ptdp__cli_open_tokenizer(&tok, a->vocab_file, a->merge_file);
        if (st) return st; /* an exit status, the message printed */
        job->model.vocab = ptdp_tokenizer_vocab_size(tok);
        job->eod_token = ptdp_tokenizer_eod(tok);
        ptdp_tokenizer_free(tok);
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
    ptdp_run_params *run = &a.run;
    ptdp_job *job = &a.job;
    if (run->exit_signal_handler) ptdp_run_catch_sigterm(); /* before any thread starts */
    ptdp_comm comm;
    if (ptdp_comm_init(&comm, &argc, &argv)) {
        ptdp_log_error("%s", ptdp_last_error());
        ptdp_args_free(keep);
        return 1;
    }
    char took[512];
    int rc = checkpoint_args(&a, took, sizeof took);
    if (rc == PTDP_OK) {
        const int st = tokenizer_job(&a);
        if (st) {
            ptdp_comm_finalize(&comm);
            ptdp_args_free(keep);
            return st;
        }
    }
    if (rc == PTDP_OK && job->eod_mask_loss &&
        (job->eod_token < 0 || job->eod_token >= job->model.vocab))
        rc = ptdp_errorf(PTDP_ECONFIG,
                         a.vocab_file ? "--eod-mask-loss: --vocab-file has no <|endoftext|> token"
                                      : "--eod-mask-loss: the end-of-document id 50256 (GPT-2's) "
                                        "is not below --vocab-size %lld; give --vocab-file and "
                                        "--merge-file to take it from the tokenizer",
                         (long long)job->model.vocab);
    if (rc == PTDP_OK) rc = ptdp_args_job(&a, PTDP_ARGS_TRAIN, comm.world_size);
    ptdp_gemm_lib lib = PTDP_GEMM_ONEDNN;
    if (rc == PTDP_OK) rc = ptdp_gemm_lib_parse(a.gemm, &lib);
    if (rc == PTDP_OK && run->trainer.init_from) {
        ptdp_gpt_config cfg = job->model; /* the shape the weights must have */
        rc = ptdp_gpt_config_finish(&cfg, job->vocab_divisible_by, (int)job->t);
        if (rc == PTDP_OK)
            rc = ptdp__cli_check_init_from(run->trainer.init_from, &cfg, a.allow_extra_tensors);
    }
    if (rc == PTDP_OK) rc = ptdp_comm_setup(&comm, (int)job->t, (int)job->p, (int)job->d);
    if (rc) return fail(rc, &comm, keep);
    ptdp__cli_set_threads(&comm);
    /* Megatron-LM flags that change nothing here: said once, so a pasted
     * script shows what it asked for and ptdp does not do */
    for (int i = 0; i < a.n_inert; i++)
        ptdp_log0("note: --%s%s%s is accepted and changes nothing in ptdp: %s", a.inert[i].name,
                  a.inert[i].value ? " " : "", a.inert[i].value ? a.inert[i].value : "",
                  a.inert[i].why);
    if (a.use_checkpoint_args) ptdp_log0("--use-checkpoint-args: %s", took);
    rc = ptdp_comm_watchdog_start(&comm, 60.0 * a.distributed_timeout_minutes);
    if (rc) return fail(rc, &comm, keep);
    const int64_t B = job->global_batch ? job->global_batch : job->micro_batch * job->d;
    if (job->train_samples > 0)
        ptdp_log0("--train-samples %lld: %lld iterations of %lld samples%s",
                  (long long)job->train_samples, (long long)(job->train_samples / B), (long long)B,
                  job->train_samples % B ? " (the rest of the samples is not trained, "
                                           "as in Megatron)"
                                         : "");
    /* Megatron's precision: a --bf16 / --fp16 backend rounds what it writes
     * to the 16-bit grid; fp16 scales the loss (ptdp_loss_scaler_of_job) */
    ptdp_backend_params bp = ptdp_backend_default_params();
    bp.dtype = job->dtype;
    bp.lib = lib;
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
    /* the description the flags filled is the run's */
    run->trainer.job = a.job;
    run->trainer.be = be;
    run->trainer.comm = &comm;
    run->n_data_paths = a.data_path ? a.n_data_paths : 0;
    run->data_paths = (const char *const *)a.data_paths;
    char cfgpath[4096];
    if (run->save_safetensors) {
        ptdp__cli_config_json_path(run->save_safetensors, cfgpath, sizeof cfgpath);
        run->save_safetensors_config = cfgpath;
    }
    char *dumped = NULL;
    if (run->dump_config) { /* every rank renders it; rank 0 writes it (ptdp_run_setup) */
        run->dump_config_text = dumped = ptdp_args_config_json(&a, PTDP_ARGS_TRAIN, B);
        PTDP_ASSERT(dumped); /* a few kB; out of memory here means nothing would run */
    }
    ptdp_run *r = NULL;
    rc = ptdp_run_setup(&r, run);
    if (rc) {
        ptdp_log_error("%s", ptdp_last_error());
        status = status_of(rc);
    } else {
        status = ptdp_run_finish(r, ptdp_run_loop(r));
    }
    ptdp_run_free(r);
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
    ptdp_gpt_config *model = &a.job.model, cfg;
    const char *load = a.run.load, *init_from = a.run.trainer.init_from;
    int rc;
    if (load) { /* the model shape comes from the checkpoint */
        const char *model_flag = model->num_layers      ? "--num-layers"
                                 : model->hidden        ? "--hidden-size"
                                 : model->heads         ? "--num-attention-heads"
                                 : model->seq_length    ? "--seq-length"
                                 : model->ffn_hidden    ? "--ffn-hidden-size"
                                 : model->max_positions ? "--max-position-embeddings"
                                 : init_from            ? "--init-from"
                                 : model->swiglu        ? "--swiglu"
                                 : strcmp(a.normalization, "LayerNorm") ? "--normalization"
                                 : strcmp(a.position_embedding_type, "learned_absolute")
                                     ? "--position-embedding-type"
                                 : a.group_query_attention ? "--group-query-attention"
                                 : model->untie            ? "--untie-embeddings-and-output-weights"
                                 : model->no_bias          ? "--disable-bias-linear"
                                                           : NULL;
        rc =
            !a.out ? ptdp_errorf(PTDP_EINVAL, "missing required flag --out (see --help)")
            : model_flag
                ? ptdp_errorf(PTDP_EINVAL,
                              "export --load takes the model from the checkpoint; drop %s (or drop "
                              "--load to export a new model)",
                              model_flag)
                : ptdp_ckpt_read_config(load, &cfg);
        if (rc == PTDP_OK) rc = ptdp_gpt_config_finish(&cfg, a.job.vocab_divisible_by, 1);
    } else {
        rc = PTDP_OK;
        if (init_from) { /* the shape flags not given come from the weights, as generate's */
            if (model->vocab == 50257) model->vocab = 0; /* the default: the file says */
            int64_t *const fields[PTDP_HF_NKEYS] = {&model->vocab, &model->max_positions,
                                                    &model->hidden, &model->num_layers,
                                                    &model->heads};
            rc = ptdp__cli_hf_fill_shape(init_from, fields);
            if (!model->seq_length) model->seq_length = model->max_positions; /* unused */
        }
        if (rc == PTDP_OK) rc = ptdp_args_job(&a, PTDP_ARGS_EXPORT, 1);
        cfg = *model;
    }
    ptdp_comm comm;
    ptdp_comm_init_single(&comm);
    ptdp_gpt_chunk *chunk = NULL;
    /* a parameter holder: s = 1 keeps its (unused) activations tiny */
    ptdp_job holder = ptdp_job_default_params();
    if (rc == PTDP_OK) {
        cfg.seq_length = 1;
        holder.model = cfg;
        ptdp_chunk_params cp = {.job = &holder,
                                .layer_end = cfg.num_layers,
                                .pre = 1,
                                .post = 1,
                                .slots = 1,
                                .tp = &comm.tensor,
                                .inference = 1};
        rc = ptdp_gpt_chunk_init(&chunk, &cp);
    }
    if (rc == PTDP_OK) {
        ptdp_ckpt_loaded ld;
        if (load) {
            rc = ptdp_ckpt_load(load, 0, &cfg, &chunk, NULL, 1, &comm, &ld);
            if (rc == PTDP_OK && !ld.found)
                rc = ptdp_errorf(PTDP_ENOTFOUND, "--load %s: no checkpoint there", load);
        } else if (init_from) {
            rc = ptdp__cli_check_init_from(init_from, &cfg, a.allow_extra_tensors);
            if (rc == PTDP_OK) rc = ptdp_hf_load_chunk(chunk, &cfg, 0, init_from);
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
