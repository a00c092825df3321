/* run.c - a whole training run as a library: set-up (data sources, output
 * checks, the trainer, the start-up agreement, --load), the loop (iterations,
 * evaluation, checkpoint cadence) and the finish (final checkpoint, reports,
 * trace, exported weights). `ptdp train` fills a ptdp_run_params from its
 * flags and calls ptdp_run_setup / ptdp_run_loop / ptdp_run_finish; logging
 * sinks live in log.c. Not here: flag parsing and MPI start-up (cli/). */
#define _POSIX_C_SOURCE 200809L
#include "train/train.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/hf.h"
#include "train/train_internal.h"

ptdp_run_params ptdp_run_default_params(void) {
    return (ptdp_run_params){
        .trainer = ptdp_trainer_default_params(),
        .log_interval = 100,
        .eval_interval = 1000,
        .eval_iters = 100,
        .split = "969,30,1",
        .tensorboard_log_interval = 1,
        .log_loss_scale_to_tensorboard = 1,
        .log_learning_rate_to_tensorboard = 1,
        .check_for_nan = 1,
    };
}

/* Opens the training, validation and test samples; sets r->n_evals (every
 * --eval-interval, and once more at the end, as Megatron) and r->has_test. */
static int open_data(ptdp_run *r) {
    const ptdp_run_params *p = &r->p;
    const ptdp_job *job = r->job;
    const int64_t s = job->model.seq_length, Bg = job->global_batch, V = job->model.vocab;
    int rc = PTDP_OK;
    r->n_evals = p->eval_iters ? r->train_iters / p->eval_interval + 1 : 0;
    if (p->n_data_paths) {
        ptdp_gpt_data_params gp = ptdp_gpt_data_default_params();
        rc = ptdp_gpt_data_parse_paths(&gp, p->n_data_paths, (char **)p->data_paths);
        gp.split = p->split;
        gp.seq_length = s;
        gp.seed = job->model.seed;
        gp.vocab_size = V;
        gp.num_samples[PTDP_SPLIT_TRAIN] = r->train_iters * Bg;
        gp.num_samples[PTDP_SPLIT_VALID] = r->n_evals * p->eval_iters * Bg;
        gp.num_samples[PTDP_SPLIT_TEST] = p->eval_iters * Bg;
        if (rc == PTDP_OK) rc = ptdp_gpt_data_open(&r->gpt, &gp);
        if (rc == PTDP_OK) {
            ptdp_batches_gpt(&r->data, r->gpt, PTDP_SPLIT_TRAIN, s);
            if (r->n_evals && ptdp_gpt_data_num_samples(r->gpt, PTDP_SPLIT_VALID) > 0) {
                ptdp_batches_gpt(&r->valid, r->gpt, PTDP_SPLIT_VALID, s);
            } else if (r->n_evals) { /* a 0 in --split's validation part (data.h) */
                ptdp_log0("no validation: --split %s gives the validation split no documents "
                          "(as Megatron, the run skips evaluation; --eval-iters 0 says so "
                          "without this line)",
                          p->split);
                r->n_evals = 0;
            }
            r->has_test = p->eval_iters && ptdp_gpt_data_num_samples(r->gpt, PTDP_SPLIT_TEST) > 0;
            if (r->has_test) ptdp_batches_gpt(&r->test, r->gpt, PTDP_SPLIT_TEST, s);
        }
    } else {
        r->n_evals = 0; /* mock data and token files have no validation split */
        if (p->token_file)
            rc = ptdp_batches_open_file(&r->data, p->token_file, s, V);
        else
            ptdp_batches_mock(&r->data, s, V, job->model.seed);
    }
    return rc;
}

/* Outputs written at the end must be writable now, not after training. */
static int check_outputs(const ptdp_run_params *p) {
    const char *outputs[2][2] = {{"--save-safetensors", p->save_safetensors},
                                 {"--trace", p->trace}};
    for (int i = 0; i < 2; i++)
        if (outputs[i][1]) {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s", outputs[i][1]);
            char *slash = strrchr(dir, '/');
            if (slash) *slash = 0;
            if (access(slash ? (dir[0] ? dir : "/") : ".", W_OK) != 0)
                return ptdp_errorf(PTDP_EIO,
                                   "%s %s: the directory is not writable (or does not exist)",
                                   outputs[i][0], outputs[i][1]);
        }
    /* a file where the checkpoint folder should be would fail only at the
     * first save, a whole --save-interval later */
    struct stat st;
    if (p->save && stat(p->save, &st) == 0 && !S_ISDIR(st.st_mode))
        return ptdp_errorf(PTDP_EINVAL,
                           "--save %s: exists and is not a directory; --save names the folder of "
                           "the checkpoints (give another path, or move the file away)",
                           p->save);
    return p->save ? ptdp_ckpt_prepare_dir(p->save) : PTDP_OK;
}

/* --dump-config: the run's flags as a --config file, written before
 * training starts (rank 0). */
static int dump_config(const ptdp_run *r) {
    const ptdp_run_params *p = &r->p;
    if (!p->dump_config || r->comm->world_rank != 0) return PTDP_OK;
    FILE *f = fopen(p->dump_config, "w");
    int bad = !f || fputs(p->dump_config_text, f) < 0 || fputc('\n', f) == EOF;
    if (f && fclose(f)) bad = 1;
    return bad ? ptdp_errorf(PTDP_EIO, "--dump-config %s: cannot write the file", p->dump_config)
               : PTDP_OK;
}

/* Everything before it is local to this rank (no collective). Agree before
 * the first collective, so a failure on some ranks (memory, a file one node
 * cannot read) brings every rank down with a message instead of leaving the
 * others waiting in a collective. */
static int agree(ptdp_comm *comm, int rc) {
    int32_t bad = rc != PTDP_OK;
    ptdp_allreduce_max_i32(&comm->world, &bad, 1);
    if (bad && rc == PTDP_OK)
        rc = ptdp_errorf(PTDP_ECOMM, "another rank failed to start (see its message); stopping");
    return rc;
}

static int agree_on_start(ptdp_comm *comm, int rc) {
    if (rc == PTDP_OK && ptdp_fault("start"))
        rc = ptdp_errorf(PTDP_ENOMEM, "PTDP_FAULT=start: rank %d fails to start (fault injection)",
                         comm->world_rank);
    return agree(comm, rc);
}

/* Megatron: --finetune loads weights only (iteration 0, fresh optimizer,
 * data from the start); --no-load-optim keeps the iteration and data
 * position but starts a fresh optimizer (and so the LR schedule). */
static int load_checkpoint(ptdp_run *r) {
    const ptdp_run_params *p = &r->p;
    int rc = ptdp_trainer_load(r->tr, p->load, !p->no_load_optim && !p->finetune, !p->finetune,
                               &r->loaded);
    if (rc == PTDP_OK && !r->loaded.found)
        ptdp_log0("warning: --load %s holds no checkpoint (no latest_checkpointed_iteration.txt); "
                  "starting from scratch",
                  p->load);
    else if (rc == PTDP_OK)
        ptdp_log0("loaded checkpoint %s: iteration %lld, consumed samples %lld%s", r->loaded.path,
                  (long long)r->loaded.iteration, (long long)r->loaded.consumed_samples,
                  p->finetune        ? " (--finetune: weights only, starting at iteration 0)"
                  : p->no_load_optim ? " (--no-load-optim: fresh optimizer)"
                                     : "");
    return rc;
}

static int lr_differs(const ptdp_lr_schedule *a, const ptdp_lr_schedule *b) {
    const double tol = 1e-12;
    return fabs(a->max_lr - b->max_lr) > tol * fabs(a->max_lr) ||
           fabs(a->min_lr - b->min_lr) > tol * fabs(a->min_lr) ||
           a->warmup_samples != b->warmup_samples || a->decay_samples != b->decay_samples ||
           a->style != b->style;
}

/* Megatron's OptimizerParamScheduler.load_state_dict: a resumed run keeps the
 * checkpoint's schedule; flags that say otherwise are an error unless
 * --override-opt-param-scheduler (the flags win) or
 * --use-checkpoint-opt-param-scheduler (the checkpoint wins). A fresh
 * optimizer (--no-load-optim, --finetune) starts the flags' schedule. Reads
 * only the manifest (every rank, no collective); sets r->resuming. */
static int check_schedule(ptdp_run *r) {
    const ptdp_run_params *p = &r->p;
    if (!p->load || p->finetune) return PTDP_OK;
    ptdp_lr_schedule ck;
    int found = 0;
    ptdp_gpt_config cfg;
    if (ptdp_ckpt_read_config(p->load, &cfg) != PTDP_OK)
        return PTDP_OK; /* none there: load says so */
    r->resuming = 1;
    int has_optim = 1;
    if (!p->no_load_optim && ptdp_ckpt_read_has_optimizer(p->load, &has_optim) == PTDP_OK &&
        !has_optim)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--load %s: the checkpoint holds model weights only, no optimizer "
                           "state (made by `ptdp checkpoint import-megatron`?); add "
                           "--no-load-optim to keep its iteration and data position with a fresh "
                           "optimizer, or --finetune to start from iteration 0",
                           p->load);
    int rc = ptdp_ckpt_read_lr(p->load, &ck, &found);
    if (rc || !found || p->no_load_optim || p->override_scheduler) return rc;
    ptdp_lr_schedule *mine = &r->lr;
    *mine = p->trainer.lr ? *p->trainer.lr : ptdp_lr_schedule_of_job(r->job);
    if (p->use_checkpoint_scheduler) {
        *mine = ck;
        mine->samples_per_step = r->job->global_batch;
        r->p.trainer.lr = mine;
        return PTDP_OK;
    }
    if (!lr_differs(mine, &ck)) return PTDP_OK;
    static const char *const styles[] = {"constant", "linear", "cosine"};
    return ptdp_errorf(
        PTDP_ECONFIG,
        "--load %s: the learning-rate schedule differs from the checkpoint's (flags: --lr %g "
        "--min-lr %g, warm-up %g samples, decay to sample %g, --lr-decay-style %s; checkpoint: "
        "%g, %g, %g, %g, %s; schedules count samples, iterations x --global-batch-size, and "
        "--lr-decay-iters defaults to --train-iters); give the checkpoint's values, "
        "--use-checkpoint-opt-param-scheduler to keep them, or --override-opt-param-scheduler "
        "to use the flags'",
        p->load, mine->max_lr, mine->min_lr, mine->warmup_samples, mine->decay_samples,
        styles[mine->style], ck.max_lr, ck.min_lr, ck.warmup_samples, ck.decay_samples,
        styles[ck.style]);
}

int ptdp_run_setup(ptdp_run **out, const ptdp_run_params *p) {
    *out = NULL;
    if (!p->trainer.comm)
        return ptdp_errorf(PTDP_EINVAL, "the run needs a communicator (ptdp_run_params.trainer."
                                        "comm: ptdp_comm_init and ptdp_comm_setup)");
    ptdp_run *r = calloc(1, sizeof *r);
    if (!r) return ptdp_errorf(PTDP_ENOMEM, "out of memory");
    r->p = *p;
    r->job = &r->p.trainer.job;
    r->comm = p->trainer.comm;
    r->p.trainer.check_nonfinite = p->check_for_nan;
    /* every rank holds the same job: all fail alike, before any collective */
    int rc = ptdp_job_finish(&r->p.trainer.job);
    if (rc == PTDP_OK) {
        r->train_iters = ptdp_job_train_iters(r->job);
        const int64_t m = ptdp_job_micro_batches(r->job);
        /* --trace: per (micro-batch, chunk) F, B, W and two receive waits */
        r->p.trainer.trace_events = p->trace ? 64 + r->train_iters * (5 * m * r->job->v + 8) : 0;
    }
    if (rc == PTDP_OK) rc = open_data(r);
    if (rc == PTDP_OK) rc = check_outputs(p);
    /* no save may replace or rewind a checkpoint --save holds (before any work) */
    if (rc == PTDP_OK && p->save)
        rc = ptdp_ckpt_check_save_dir(p->save, p->load, p->finetune, p->overwrite_checkpoints,
                                      &r->resumes_save);
    if (rc == PTDP_OK) rc = dump_config(r);
    if (rc == PTDP_OK) rc = check_schedule(r);
    if (rc == PTDP_OK) rc = ptdp__log_open(r);
    if (rc == PTDP_OK) rc = ptdp_trainer_init(&r->tr, &r->p.trainer);
    rc = agree_on_start(r->comm, rc);
    if (rc == PTDP_OK && p->load) rc = load_checkpoint(r);
    /* rank 0 rewrites a resumed run's --log-jsonl: every rank learns how it went */
    if (rc == PTDP_OK && p->load && p->log_jsonl) rc = agree(r->comm, ptdp__log_resume(r));
    if (rc == PTDP_OK) {
        const int64_t Bl = r->job->global_batch / r->comm->d; /* this data-parallel rank's share */
        /* zeroed: the middle pipeline stages read no data and pass valid ids */
        r->batch = calloc((size_t)(Bl * (r->job->model.seq_length + 1)), sizeof(int32_t));
        r->nonfinite = calloc((size_t)r->comm->world_size, sizeof(int32_t));
        if (!r->batch || !r->nonfinite)
            rc = ptdp_errorf(PTDP_ENOMEM, "out of memory for the batch");
    }
    if (rc != PTDP_OK) {
        ptdp_run_free(r);
        return rc;
    }
    ptdp__log_start(r);
    *out = r;
    return PTDP_OK;
}

/* Mean loss over --eval-iters batches of `split` (the validation split, or
 * the test split at the end), from batch round x eval_iters on. */
static double evaluate(ptdp_run *r, const ptdp_batches *split, int64_t round) {
    const ptdp_run_params *p = &r->p;
    const int64_t B = r->job->global_batch, Bl = B / r->comm->d;
    /* only the first and last pipeline stage read data */
    const int reads_data = r->comm->pp == 0 || r->comm->pp == r->comm->p - 1;
    double vl = 0;
    ptdp_activity_phase("evaluation");
    for (int64_t e = 0; e < p->eval_iters; e++) {
        if (reads_data)
            ptdp_batches_get(split, (round * p->eval_iters + e) * B + r->comm->dp * Bl, Bl,
                             r->batch);
        vl += ptdp_trainer_eval(r->tr, r->batch);
    }
    return vl / (double)p->eval_iters;
}

/* Saves a checkpoint of the current iteration; 0 or an exit status of 1. */
static int save(ptdp_run *r) {
    ptdp_activity_phase("checkpoint save");
    if (ptdp_trainer_save(r->tr, r->p.save, r->consumed, r->p.overwrite_checkpoints)) {
        ptdp_log_error("%s", ptdp_last_error());
        return 1;
    }
    r->last_saved = ptdp_trainer_iteration(r->tr);
    ptdp_log0("saved checkpoint %s/iter_%07lld", r->p.save, (long long)r->last_saved);
    return 0;
}

/* --check-for-nan-in-loss-and-grad stops the run: one line on every rank
 * naming the iteration and the ranks whose own loss or gradient (before the
 * reductions) was nan/inf, as Megatron checks each rank's local gradient.
 * A collective over the world; every rank gets here after the same step
 * (the loss and the norm it tests are all-reduced). */
static void report_nonfinite(ptdp_run *r) {
    const ptdp_comm *c = r->comm;
    const ptdp_step_stats *st = &r->st;
    ptdp_trainer_nonfinite_ranks(r->tr, r->nonfinite);
    char where[640];
    int len = 0, shown = 0, more = 0;
    static const char *what[4] = {"", "loss", "gradient", "loss and gradient"};
    for (int w = 0; w < c->world_size; w++) {
        const int f = r->nonfinite[w] & 3;
        if (!f) continue;
        if (shown == 8) {
            more++;
            continue;
        }
        /* global rank = tp + t * (dp + d * pp) */
        len +=
            snprintf(where + len, sizeof where - (size_t)len, "%sworld rank %d [%d,%d,%d] (%s)",
                     shown ? ", " : "", w, w / c->t % c->d, w / (c->t * c->d), w % c->t, what[f]);
        shown++;
    }
    if (more) snprintf(where + len, sizeof where - (size_t)len, " and %d more ranks", more);
    const int loss_bad = !isfinite(st->loss);
    ptdp_log_error("iteration %lld: the %s is %s; %s%s (stopping; the step was not applied; "
                   "--no-check-for-nan-in-loss-and-grad skips such iterations instead)",
                   (long long)st->iteration, loss_bad ? "loss" : "gradient norm",
                   isnan(loss_bad ? st->loss : st->grad_norm) ? "nan" : "inf",
                   shown ? "non-finite before the reductions on " : "",
                   shown ? where
                         : "every rank's own loss and gradient were finite before the "
                           "reductions (their sums overflowed)");
}

/* --exit-signal-handler: SIGTERM (a scheduler's preemption notice) stops the
 * loop after the iteration in flight. The signal is blocked from before MPI
 * and OpenMP start their threads (ptdp_run_catch_sigterm), so no handler
 * runs on a computing thread: it stays pending until the loop takes it
 * between iterations. A handler must not run there: oneDNN's JIT sgemm
 * kernels (Debian's 2.6; fixed upstream in 2026, oneDNN pull request 4855)
 * point rsp into a heap workspace, and the kernel writes the signal frame
 * below rsp, into the heap. The handler stays for threads that started
 * before main (OpenBLAS's), which never run oneDNN. */
static volatile sig_atomic_t sigterm_flag = 0;
static void on_sigterm(int sig) {
    (void)sig;
    sigterm_flag = 1;
}

void ptdp_run_catch_sigterm(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sa.sa_flags = SA_RESTART; /* interrupted system calls resume */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/* Whether a SIGTERM has come, taking a pending one. */
static int sigterm_received(void) {
    sigset_t pend;
    if (!sigterm_flag && sigpending(&pend) == 0 && sigismember(&pend, SIGTERM)) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        const struct timespec zero = {0, 0};
        if (sigtimedwait(&set, NULL, &zero) == SIGTERM) sigterm_flag = 1;
    }
    return sigterm_flag != 0;
}

int ptdp_run_loop(ptdp_run *r) {
    const ptdp_run_params *p = &r->p;
    ptdp_comm *comm = r->comm;
    const int64_t B = r->job->global_batch, Bl = B / comm->d;
    /* only the first and last pipeline stage read data */
    const int reads_data = comm->pp == 0 || comm->pp == comm->p - 1;
    const int64_t start_iter = ptdp_trainer_iteration(r->tr);
    r->consumed = r->loaded.found && !p->finetune ? r->loaded.consumed_samples : 0;
    r->last_saved = -1;
    if (r->loaded.found && r->resumes_save) r->last_saved = start_iter; /* --load X --save X */
    r->eval_round = p->eval_interval ? start_iter / p->eval_interval : 0;
    if (p->exit_signal_handler) {
        if (!p->save)
            ptdp_log0("warning: --exit-signal-handler without --save: a SIGTERM stops the run "
                      "after the iteration, with nothing saved");
    }
    r->st.iteration = start_iter;
    const double t_start = ptdp_now();
    for (int64_t it = start_iter; it < r->train_iters; it++) {
        if (ptdp_fault_at("die", it + 1)) { /* tests: the other ranks must not hang */
            ptdp_log_error("PTDP_FAULT=die: rank %d dies at iteration %lld (fault injection)",
                           comm->world_rank, (long long)(it + 1));
            abort();
        }
        ptdp_activity_set(it + 1, "training");
        if (reads_data) ptdp_batches_get(&r->data, r->consumed + comm->dp * Bl, Bl, r->batch);
        double t0 = ptdp_now();
        if (ptdp_trainer_step(r->tr, r->batch, &r->st)) { /* a token id outside the vocabulary */
            ptdp_log_error("%s", ptdp_last_error());
            ptdp_comm_abort(comm, 1);
        }
        double dt = ptdp_now() - t0;
        r->consumed += B;
        if (ptdp_fault_at("perturb", r->st.iteration)) /* tests: --check-dp-replicas must fail */
            ptdp_trainer_perturb(r->tr);
        if (p->check_dp_replicas && !ptdp_trainer_replicas_identical(r->tr)) {
            ptdp_log_error(
                "--check-dp-replicas: data-parallel replicas differ after iteration %lld",
                (long long)r->st.iteration);
            ptdp_comm_abort(comm, 1);
        }
        ptdp__log_iteration(r, dt, it == r->train_iters - 1);
        /* Megatron's --check-for-nan-in-loss-and-grad: the loss and the norm are
         * all-reduced, so every rank takes the same decision */
        /* (under loss scaling a non-finite gradient is an overflow the scaler
         * handles: the step was skipped and the scale backs off) */
        if (p->check_for_nan &&
            (!isfinite(r->st.loss) || (!isfinite(r->st.grad_norm) && !r->st.loss_scaling))) {
            report_nonfinite(r);
            return 1;
        }
        if (r->n_evals && r->st.iteration % p->eval_interval == 0)
            ptdp__log_validation(r, evaluate(r, &r->valid, r->eval_round++), NULL);
        if (p->save && p->save_interval && r->st.iteration % p->save_interval == 0 && save(r))
            return 1;
        /* Megatron's --exit-interval / --exit-duration-in-mins / --exit-signal-handler:
         * stop here (the finish saves a checkpoint with --save). The clock and the
         * signals are agreed over the world, so every rank stops after the same
         * iteration even when only some got SIGTERM. */
        int32_t stop[3] = {p->exit_interval > 0 && r->st.iteration % p->exit_interval == 0, 0, 0};
        if (p->exit_duration_mins > 0 || p->exit_signal_handler) {
            stop[1] =
                p->exit_duration_mins > 0 && (ptdp_now() - t_start) / 60.0 > p->exit_duration_mins;
            stop[2] = p->exit_signal_handler && sigterm_received();
            ptdp_allreduce_max_i32(&comm->world, &stop[1], 2);
        }
        if ((stop[0] || stop[1] || stop[2]) && it + 1 < r->train_iters) {
            ptdp_log0("exiting after iteration %lld (%s)", (long long)r->st.iteration,
                      stop[2]   ? "SIGTERM received: --exit-signal-handler"
                      : stop[0] ? "--exit-interval"
                                : "--exit-duration-in-mins");
            r->exited = 1;
            break;
        }
    }
    return 0;
}

int ptdp_run_finish(ptdp_run *r, int status) {
    const ptdp_run_params *p = &r->p;
    ptdp_comm *comm = r->comm;
    if (status == 0 && p->save && r->last_saved != ptdp_trainer_iteration(r->tr)) status = save(r);
    /* Megatron, after training: "iteration N on validation set", then "on
     * test set" (not after --exit-interval / --exit-duration-in-mins) */
    if (status == 0 && !r->exited && r->n_evals)
        ptdp__log_validation(r, evaluate(r, &r->valid, r->eval_round++), "validation");
    if (status == 0 && !r->exited && r->has_test)
        ptdp__log_validation(r, evaluate(r, &r->test, 0), "test");
    ptdp__log_finish(r);
    if (p->trace && ptdp_trainer_write_trace(r->tr, p->trace)) {
        ptdp_log_error("%s", ptdp_last_error());
        status = 1;
    } else if (p->trace) {
        ptdp_log0("wrote the trace %s (open it in https://ui.perfetto.dev or chrome://tracing)",
                  p->trace);
    }
    /* the fp32 master weights (a collective over the data group under ZeRO-1) */
    if (p->save_safetensors) ptdp_trainer_full_precision(r->tr, 1);
    if (p->save_safetensors && comm->dp == 0) {
        ptdp_gpt_chunk *chunks[PTDP_MAX_CHUNKS];
        int nc = ptdp_trainer_num_chunks(r->tr);
        for (int c = 0; c < nc; c++) chunks[c] = ptdp_trainer_chunk_at(r->tr, c);
        if (ptdp_hf_export(chunks, nc, &r->job->model, &comm->model, comm->tp, comm->t,
                           p->save_safetensors, p->save_safetensors_config, PTDP_ST_F32)) {
            ptdp_log_error("%s", ptdp_last_error());
            status = 1;
        } else {
            ptdp_log0("wrote %s and %s", p->save_safetensors, p->save_safetensors_config);
        }
    }
    return status;
}

void ptdp_run_free(ptdp_run *r) {
    if (!r) return;
    free(r->batch);
    free(r->nonfinite);
    ptdp__log_close(r);
    ptdp_trainer_free(r->tr);
    ptdp_batches_close(&r->data);
    ptdp_gpt_data_free(r->gpt);
    free(r);
}
