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
#include "cli/args.h"
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
    ptdp_opt opts[96];
    int n = ptdp_args_table(&a, which, opts, 96);
    if (which == PTDP_ARGS_TRAIN)
        fprintf(f, "usage: ptdp train [flags]   (Megatron-LM's flag names; --config FILE.json takes the same keys)\n\n"
                   "Trains a GPT model. Required: --num-layers --hidden-size --num-attention-heads --seq-length\n"
                   "--train-iters --lr and a data source (--data-path PREFIX, --token-file FILE or --mock-data).\n"
                   "Parallel layout: mpirun -np n with n = t x p x d (--tensor-model-parallel-size t,\n"
                   "--pipeline-model-parallel-size p; d is derived).\n\n");
    else
        fprintf(f, "usage: ptdp %s --out FILE.safetensors [model flags] [--init-from FILE | --load CHECKPOINT_DIR]\n\n"
                   "Writes the model's weights (Megatron initialisation from --seed, or --init-from) as Hugging Face\n"
                   "GPT-2 safetensors, with config.json beside it.\n\n", cmd);
    ptdp_opts_help(f, opts, n);
}

/* Parse + validate; returns 0 to go on, else the exit status (help: 0). */
static int parse(ptdp_args *a, int which, const char *cmd, int argc, char **argv, void **keep, int *done) {
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
    ptdp_comm comm;
    if (ptdp_comm_init(&comm, &argc, &argv)) {
        ptdp_log_error("%s", ptdp_last_error());
        ptdp_args_free(keep);
        return 1;
    }
    ptdp_trainer_params tp = {0};
    int d = 1, rc = PTDP_OK;
    if (a.vocab_file) { /* the vocabulary size comes from the tokenizer */
        ptdp_tokenizer *tok = NULL;
        int st = ptdp__cli_open_tokenizer(&tok, a.vocab_file, a.merge_file);
        if (st) {
            ptdp_comm_finalize(&comm);
            ptdp_args_free(keep);
            return st;
        }
        a.vocab_size = ptdp_tokenizer_vocab_size(tok);
        ptdp_tokenizer_free(tok);
    }
    rc = ptdp_args_model_config(&a, PTDP_ARGS_TRAIN, comm.world_size, &tp.cfg, &d);
    ptdp_gemm_lib lib = PTDP_GEMM_ONEDNN;
    if (rc == PTDP_OK) rc = ptdp_gemm_lib_parse(a.gemm, &lib);
    if (rc == PTDP_OK) rc = ptdp_comm_setup(&comm, (int)a.tensor_model_parallel_size, (int)a.pipeline_model_parallel_size, d);
    if (rc) {
        ptdp_log_error("%s", ptdp_last_error());
        ptdp_comm_finalize(&comm);
        ptdp_args_free(keep);
        return status_of(rc);
    }
    ptdp__cli_set_threads(&comm);
    ptdp_cpu_set_gemm(lib);
    const int64_t s = tp.cfg.seq_length;
    tp.micro_batch = a.micro_batch_size;
    tp.global_batch = a.global_batch_size ? a.global_batch_size : a.micro_batch_size * d;
    ptdp_args_optim(&a, &tp.lr, &tp.adam);
    tp.ops = ptdp_cpu_ops();
    tp.comm = &comm;
    tp.init_from = a.init_from;
    tp.sched.p = (int)a.pipeline_model_parallel_size;
    tp.sched.v = a.virtual_pipeline_model_parallel_size ? (int)a.virtual_pipeline_model_parallel_size
                 : a.num_layers_per_virtual_pipeline_stage
                     ? (int)(a.num_layers / (a.pipeline_model_parallel_size * a.num_layers_per_virtual_pipeline_stage))
                     : 1;
    tp.sched.kind = a.pipeline_schedule ? ptdp_schedule_parse_kind(a.pipeline_schedule) : -1;
    tp.recompute_method = !a.recompute_method ? PTDP_RECOMPUTE_NONE
                          : !strcmp(a.recompute_method, "uniform") ? PTDP_RECOMPUTE_UNIFORM
                                                                    : PTDP_RECOMPUTE_BLOCK;
    tp.recompute_num_layers = a.recompute_num_layers ? a.recompute_num_layers : 1;
    tp.scatter_gather = a.no_scatter_gather ? 0 : (a.scatter_gather || a.tensor_model_parallel_size > 1);
    tp.ddp_bucket_floats = a.ddp_bucket_size;
    tp.overlap_grad_reduce = a.overlap_grad_reduce;
    tp.distributed_optimizer = a.use_distributed_optimizer;
    {
        int64_t m = tp.global_batch / (tp.micro_batch * d);
        tp.trace_events = a.trace ? 64 + a.train_iters * (4 * m * tp.sched.v + 8) : 0;
    }

    ptdp_batches data, valid;
    ptdp_gpt_data *gpt = NULL;
    memset(&valid, 0, sizeof valid);
    const int64_t Bg = tp.global_batch;
    int64_t n_evals = a.eval_iters ? a.train_iters / a.eval_interval + 1 : 0;
    if (a.data_path) {
        ptdp_gpt_data_params gp = ptdp_gpt_data_default_params();
        rc = ptdp_gpt_data_parse_paths(&gp, a.n_data_paths, (char **)a.data_paths);
        gp.split = a.split;
        gp.seq_length = s;
        gp.seed = (uint64_t)a.seed;
        gp.vocab_size = tp.cfg.vocab;
        gp.num_samples[PTDP_SPLIT_TRAIN] = a.train_iters * Bg;
        gp.num_samples[PTDP_SPLIT_VALID] = n_evals * a.eval_iters * Bg;
        gp.num_samples[PTDP_SPLIT_TEST] = 0;
        if (rc == PTDP_OK) rc = ptdp_gpt_data_open(&gpt, &gp);
        if (rc == PTDP_OK) {
            ptdp_batches_gpt(&data, gpt, PTDP_SPLIT_TRAIN, s);
            if (n_evals && ptdp_gpt_data_num_samples(gpt, PTDP_SPLIT_VALID) > 0)
                ptdp_batches_gpt(&valid, gpt, PTDP_SPLIT_VALID, s);
            else
                n_evals = 0;
        }
    } else {
        n_evals = 0; /* mock data and token files have no validation split */
        if (a.token_file)
            rc = ptdp_batches_open_file(&data, a.token_file, s, tp.cfg.vocab);
        else
            ptdp_batches_mock(&data, s, tp.cfg.vocab, (uint64_t)a.seed);
    }
    /* outputs written at the end must be writable now, not after training */
    const char *outputs[2][2] = {{"--save-safetensors", a.save_safetensors}, {"--trace", a.trace}};
    for (int i = 0; i < 2 && rc == PTDP_OK; i++)
        if (outputs[i][1]) {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s", outputs[i][1]);
            char *slash = strrchr(dir, '/');
            if (slash) *slash = 0;
            if (access(slash ? (dir[0] ? dir : "/") : ".", W_OK) != 0)
                rc = ptdp_errorf(PTDP_EIO, "%s %s: the directory is not writable (or does not exist)", outputs[i][0],
                                 outputs[i][1]);
        }
    if (rc == PTDP_OK && a.save) rc = ptdp_ckpt_prepare_dir(a.save);
    FILE *jsonl = NULL;
    if (rc == PTDP_OK && a.log_jsonl && comm.world_rank == 0 && !(jsonl = fopen(a.log_jsonl, "w")))
        rc = ptdp_errorf(PTDP_EIO, "--log-jsonl %s: cannot open for writing", a.log_jsonl);
    ptdp_trainer *tr = NULL;
    if (rc == PTDP_OK) rc = ptdp_trainer_init(&tr, &tp);
    /* Everything above is local to this rank (no collective). Agree before
     * the first collective, so a failure on some ranks (memory, a file one
     * node cannot read) brings every rank down with a message instead of
     * leaving the others waiting in a collective. */
    {
        int32_t bad = rc != PTDP_OK;
        if (!bad && ptdp_fault("start")) {
            bad = 1;
            rc = ptdp_errorf(PTDP_ENOMEM, "PTDP_FAULT=start: rank %d fails to start (fault injection)",
                             comm.world_rank);
        }
        ptdp_allreduce_max_i32(&comm.world, &bad, 1);
        if (bad && rc == PTDP_OK)
            rc = ptdp_errorf(PTDP_ECOMM, "another rank failed to start (see its message); stopping");
    }
    /* Megatron: --finetune loads weights only (iteration 0, fresh optimizer,
     * data from the start); --no-load-optim keeps the iteration and data
     * position but starts a fresh optimizer (and so the LR schedule). */
    ptdp_ckpt_loaded loaded = {0};
    if (rc == PTDP_OK && a.load) {
        rc = ptdp_trainer_load(tr, a.load, !a.no_load_optim && !a.finetune, !a.finetune, &loaded);
        if (rc == PTDP_OK && !loaded.found)
            ptdp_log0("warning: --load %s holds no checkpoint (no latest_checkpointed_iteration.txt); "
                      "starting from scratch", a.load);
        else if (rc == PTDP_OK)
            ptdp_log0("loaded checkpoint %s: iteration %lld, consumed samples %lld%s", loaded.path,
                      (long long)loaded.iteration, (long long)loaded.consumed_samples,
                      a.finetune ? " (--finetune: weights only, starting at iteration 0)"
                      : a.no_load_optim ? " (--no-load-optim: fresh optimizer)" : "");
    }
    if (rc) {
        ptdp_log_error("%s", ptdp_last_error());
        if (jsonl) fclose(jsonl);
        ptdp_batches_close(&data);
        ptdp_gpt_data_free(gpt);
        ptdp_comm_finalize(&comm);
        ptdp_args_free(keep);
        return status_of(rc);
    }

    const ptdp_gpt_config *cfg = &tp.cfg;
    const int64_t B = tp.global_batch;
    ptdp_log0("ptdp train: l=%lld h=%lld a=%lld s=%lld V=%lld (padded %lld), b=%lld B=%lld, %lld iterations; "
              "t=%d p=%d d=%d: %d rank(s) x %d thread(s), GEMM %s",
              (long long)cfg->num_layers, (long long)cfg->hidden, (long long)cfg->heads, (long long)s,
              (long long)cfg->vocab, (long long)cfg->vocab_padded, (long long)tp.micro_batch, (long long)B,
              (long long)a.train_iters, comm.t, comm.p, comm.d, comm.world_size, omp_get_max_threads(),
              ptdp_gemm_lib_name(lib));
    ptdp_trainer_log_memory(tr);

    const int64_t Bl = B / d; /* this data-parallel rank's share */
    int32_t *batch = malloc(sizeof(int32_t) * (size_t)(Bl * (s + 1)));
    PTDP_ASSERT_MSG(batch, "out of memory for the batch");
    /* the paper's 96 instead of 72: full recomputation reruns the forward */
    const double flops = ptdp_gpt_flops_per_iter(cfg, B, tp.recompute_method != PTDP_RECOMPUTE_NONE);
    double t_interval = 0, loss_interval = 0, t_total = 0;
    int64_t n_interval = 0, skipped_total = 0, eval_round = 0;
    ptdp_step_stats st = {0};
    /* only the first and last pipeline stage read data */
    const int reads_data = comm.pp == 0 || comm.pp == comm.p - 1;
    const int64_t start_iter = ptdp_trainer_iteration(tr);
    int64_t consumed = loaded.found && !a.finetune ? loaded.consumed_samples : 0, last_saved = -1;
    if (loaded.found && !a.finetune && a.save && !strcmp(a.save, a.load)) last_saved = start_iter;
    eval_round = a.eval_interval ? start_iter / a.eval_interval : 0;
    st.iteration = start_iter;
    status = 0;
    for (int64_t it = start_iter; it < a.train_iters; it++) {
        if (ptdp_fault_at("die", it + 1)) { /* tests: the other ranks must not hang */
            ptdp_log_error("PTDP_FAULT=die: rank %d dies at iteration %lld (fault injection)", comm.world_rank,
                           (long long)(it + 1));
            abort();
        }
        if (reads_data) ptdp_batches_get(&data, consumed + comm.dp * Bl, Bl, batch);
        double t0 = ptdp_now();
        ptdp_trainer_step(tr, batch, &st);
        double dt = ptdp_now() - t0;
        consumed += B;
        if (ptdp_fault_at("perturb", st.iteration)) { /* tests: --check-dp-replicas must fail */
            float one = 1e-3f, *w = ptdp_gpt_chunk_params(ptdp_trainer_chunk(tr));
            float x;
            tp.ops->download(&x, w, sizeof x);
            x += one;
            tp.ops->upload(w, &x, sizeof x);
        }
        if (a.check_dp_replicas && !ptdp_trainer_replicas_identical(tr)) {
            ptdp_log_error("--check-dp-replicas: data-parallel replicas differ after iteration %lld",
                           (long long)st.iteration);
            ptdp_comm_abort(&comm, 1);
        }
        t_interval += dt;
        t_total += dt;
        loss_interval += st.loss;
        n_interval++;
        skipped_total += st.skipped;
        double tflops = flops / dt / comm.world_size / 1e12, tps = (double)(B * s) / dt;
        if (jsonl) {
            fprintf(jsonl,
                    "{\"iteration\":%lld,\"consumed_samples\":%lld,\"lm_loss\":%.9g,\"grad_norm\":%.9g,\"lr\":%.9g,"
                    "\"elapsed_ms\":%.3f,\"tokens_per_s\":%.1f,\"tflops\":%.4f,\"skipped\":%d}\n",
                    (long long)st.iteration, (long long)consumed, st.loss, st.grad_norm, st.lr, dt * 1e3, tps,
                    tflops, st.skipped);
            fflush(jsonl);
        }
        if (st.iteration % a.log_interval == 0 || it == a.train_iters - 1) {
            double ms = t_interval / (double)n_interval * 1e3;
            ptdp_log0(" iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): %.1f | "
                      "throughput per process (TFLOP/s): %.3f | tokens per second: %.0f | learning rate: %.6E | "
                      "global batch size: %5lld | lm loss: %.6E | grad norm: %.3f | "
                      "number of skipped iterations: %3lld | number of nan iterations: %3lld |",
                      (long long)st.iteration, (long long)a.train_iters, (long long)consumed, ms,
                      flops / (ms / 1e3) / comm.world_size / 1e12, (double)(B * s) / (ms / 1e3), st.lr, (long long)B,
                      loss_interval / (double)n_interval, st.grad_norm, (long long)skipped_total,
                      (long long)skipped_total);
            t_interval = loss_interval = 0;
            n_interval = 0;
        }
        if (n_evals && (st.iteration % a.eval_interval == 0 || it == a.train_iters - 1)) {
            double vl = 0;
            for (int64_t e = 0; e < a.eval_iters; e++) {
                if (reads_data) ptdp_batches_get(&valid, (eval_round * a.eval_iters + e) * B + comm.dp * Bl, Bl, batch);
                vl += ptdp_trainer_eval(tr, batch);
            }
            eval_round++;
            vl /= (double)a.eval_iters;
            ptdp_log0("-----------------------------------------------------------------------------------------\n"
                      " validation loss at iteration %lld | lm loss value: %.6E | lm loss PPL: %.6E |\n"
                      "-----------------------------------------------------------------------------------------",
                      (long long)st.iteration, vl, exp(vl));
            if (jsonl) {
                fprintf(jsonl, "{\"iteration\":%lld,\"val_loss\":%.9g,\"val_ppl\":%.9g}\n", (long long)st.iteration, vl,
                        exp(vl));
                fflush(jsonl);
            }
        }
        if (a.save && a.save_interval && st.iteration % a.save_interval == 0) {
            if (ptdp_trainer_save(tr, a.save, consumed)) {
                ptdp_log_error("%s", ptdp_last_error());
                status = 1;
                break;
            }
            last_saved = st.iteration;
            ptdp_log0("saved checkpoint %s/iter_%07lld", a.save, (long long)st.iteration);
        }
    }
    if (status == 0 && a.save && last_saved != ptdp_trainer_iteration(tr)) {
        if (ptdp_trainer_save(tr, a.save, consumed)) {
            ptdp_log_error("%s", ptdp_last_error());
            status = 1;
        } else {
            ptdp_log0("saved checkpoint %s/iter_%07lld", a.save, (long long)ptdp_trainer_iteration(tr));
        }
    }
    ptdp_log0("done: %lld iterations in %.1f s (%.1f ms per iteration), final lm loss %.6f",
              (long long)a.train_iters, t_total, a.train_iters ? t_total / (double)a.train_iters * 1e3 : 0.0, st.loss);
    if (a.log_comm) ptdp_comm_log_counters(&comm);
    if (comm.tp == 0 && comm.dp == 0 && a.train_iters > 0) {
        ptdp_act_memory am;
        ptdp_trainer_activation_memory(tr, &am);
        char b1[32], b2[32], b3[32];
        ptdp_log("activation memory (pipeline stage %d): measured peak %s (%.0f bytes; %d micro-batches stashed, "
                 "%s), predicted %s (%.0f bytes)",
                 comm.pp, ptdp_fmt_bytes(am.measured, b1), am.measured, am.stashed_microbatches,
                 ptdp_fmt_bytes(am.stash, b2), ptdp_fmt_bytes(am.predicted, b3), am.predicted);
    }
    if (a.trace && ptdp_trainer_write_trace(tr, a.trace)) {
        ptdp_log_error("%s", ptdp_last_error());
        status = 1;
    } else if (a.trace) {
        ptdp_log0("wrote the trace %s (open it in https://ui.perfetto.dev or chrome://tracing)", a.trace);
    }
    if (a.save_safetensors && comm.dp == 0) {
        char cfgpath[4096];
        ptdp__cli_config_json_path(a.save_safetensors, cfgpath, sizeof cfgpath);
        ptdp_gpt_chunk *chunks[PTDP_MAX_CHUNKS];
        int nc = ptdp_trainer_num_chunks(tr);
        for (int c = 0; c < nc; c++) chunks[c] = ptdp_trainer_chunk_at(tr, c);
        if (ptdp_hf_export(chunks, nc, cfg, &comm.model, comm.tp, comm.t, a.save_safetensors, cfgpath)) {
            ptdp_log_error("%s", ptdp_last_error());
            status = 1;
        } else {
            ptdp_log0("wrote %s and %s", a.save_safetensors, cfgpath);
        }
    }
    free(batch);
    if (jsonl) fclose(jsonl);
    ptdp_trainer_free(tr);
    ptdp_batches_close(&data);
    ptdp_gpt_data_free(gpt);
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
        rc = a.out ? ptdp_ckpt_read_config(a.load, &cfg)
                   : ptdp_errorf(PTDP_EINVAL, "missing required flag --out (see --help)");
        if (rc == PTDP_OK) rc = ptdp_gpt_config_finish(&cfg, a.make_vocab_size_divisible_by, 1);
    } else {
        rc = ptdp_args_model_config(&a, PTDP_ARGS_EXPORT, 1, &cfg, NULL);
    }
    ptdp_comm comm;
    ptdp_comm_init_single(&comm);
    ptdp_gpt_chunk *chunk = NULL;
    if (rc == PTDP_OK) {
        cfg.seq_length = 1; /* a parameter holder: its (unused) activations stay tiny */
        ptdp_chunk_params cp = {.cfg = &cfg, .layer_end = cfg.num_layers, .pre = 1, .post = 1, .micro_batch = 1,
                                .slots = 1, .ops = ptdp_cpu_ops(), .tp = &comm.tensor, .inference = 1};
        rc = ptdp_gpt_chunk_init(&chunk, &cp);
    }
    if (rc == PTDP_OK) {
        ptdp_ckpt_loaded ld;
        if (a.load) {
            rc = ptdp_ckpt_load(a.load, 0, &cfg, &chunk, NULL, 1, &comm, &ld);
            if (rc == PTDP_OK && !ld.found) rc = ptdp_errorf(PTDP_ENOTFOUND, "--load %s: no checkpoint there", a.load);
        } else if (a.init_from) {
            rc = ptdp_hf_load_chunk(chunk, &cfg, 0, a.init_from);
        } else {
            ptdp_gpt_chunk_init_params(chunk);
        }
    }
    char cfgpath[4096];
    if (rc == PTDP_OK) {
        ptdp__cli_config_json_path(a.out, cfgpath, sizeof cfgpath);
        rc = ptdp_hf_export(&chunk, 1, &cfg, &comm.model, 0, 1, a.out, cfgpath);
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
