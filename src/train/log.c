/* log.c - the logging sinks of a training run: Megatron's iteration and
 * validation lines (rank 0), --log-jsonl (rank 0, one JSON object per line,
 * flushed as it goes), --tensorboard-dir (rank 0, Megatron's scalar names;
 * the file format is tensorboard.c's), the start-up lines with the memory
 * plan (allocated next to predicted, per category) and the end-of-run
 * report (time, activation memory measured vs predicted, peak resident
 * memory, --log-comm counters). */
#define _POSIX_C_SOURCE 200809L /* localtime_r, getline, fsync */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "train/train_internal.h"

int ptdp__log_open(ptdp_run *r) {
    const char *path = r->p.log_jsonl;
    /* a resumed run continues the history (Megatron's TensorBoard logs do):
     * ptdp__log_resume opens the file once the checkpoint's iteration is
     * known; here only the check that it can be written */
    if (path && r->comm->world_rank == 0) {
        FILE *f = fopen(path, r->resuming ? "a" : "w");
        if (!f) return ptdp_errorf(PTDP_EIO, "--log-jsonl %s: cannot open for writing", path);
        if (r->resuming)
            fclose(f);
        else
            r->jsonl = f;
    }
    /* a resumed run starts a new event file in the same directory; TensorBoard
     * reads them all as one run (as with Megatron's SummaryWriter) */
    if (r->p.tensorboard_dir && r->comm->world_rank == 0)
        return ptdp__tb_open(&r->tb, r->p.tensorboard_dir);
    return PTDP_OK;
}

/* The iteration of a --log-jsonl line (every record starts with it), or -1
 * for a line that is no record of ptdp's. */
static long long record_iteration(const char *line) {
    static const char head[] = "{\"iteration\":";
    if (strncmp(line, head, sizeof head - 1)) return -1;
    char *end;
    long long it = strtoll(line + sizeof head - 1, &end, 10);
    return end != line + sizeof head - 1 && (*end == ',' || *end == '}') ? it : -1;
}

int ptdp__log_resume(ptdp_run *r) {
    const char *path = r->p.log_jsonl;
    if (!path || r->comm->world_rank != 0 || r->jsonl) return PTDP_OK;
    /* the records of iterations after the checkpoint's (a run that went on
     * past its last checkpoint, then crashed) are dropped, so the log reads
     * as one run: the file is rewritten into a temporary one beside it and
     * renamed over it, so a crash here leaves the old file or the new one */
    const int64_t keep_to = r->loaded.found && !r->p.finetune ? r->loaded.iteration : -1;
    FILE *in = keep_to >= 0 ? fopen(path, "r") : NULL;
    int64_t dropped = 0;
    if (in) {
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
        FILE *out = fopen(tmp, "w");
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        int bad = !out;
        while (!bad && (n = getline(&line, &cap, in)) > 0) {
            /* a record cut short by the crash (no newline) goes too */
            if (record_iteration(line) > keep_to || line[n - 1] != '\n') {
                dropped++;
                continue;
            }
            bad = fwrite(line, 1, (size_t)n, out) != (size_t)n;
        }
        free(line);
        bad |= ferror(in);
        fclose(in);
        if (out) {
            bad |= fflush(out) != 0 || fsync(fileno(out)) != 0;
            bad |= fclose(out) != 0;
        }
        if (!bad && dropped && rename(tmp, path) != 0) bad = 1;
        if (bad || !dropped) remove(tmp);
        if (bad)
            return ptdp_errorf(PTDP_EIO,
                               "--log-jsonl %s: cannot rewrite it without the records after "
                               "iteration %lld (the checkpoint's): %s",
                               path, (long long)keep_to, strerror(errno));
    }
    if (!(r->jsonl = fopen(path, "a")))
        return ptdp_errorf(PTDP_EIO, "--log-jsonl %s: cannot open for writing", path);
    if (dropped)
        ptdp_log0("--log-jsonl %s: dropped %lld record%s after iteration %lld, which this run "
                  "repeats from the checkpoint",
                  path, (long long)dropped, dropped == 1 ? "" : "s", (long long)keep_to);
    return PTDP_OK;
}

void ptdp__log_close(ptdp_run *r) {
    if (r->jsonl) fclose(r->jsonl);
    r->jsonl = NULL;
    ptdp__tb_close(r->tb);
    r->tb = NULL;
}

/* One TensorBoard scalar at `step` and, as Megatron writes most of them, the
 * same value under "TAG vs samples" at the consumed-sample count. A failed
 * write stops the TensorBoard sink (one message), never the training. */
static void tb_scalar(ptdp_run *r, const char *tag, double v, int vs_samples) {
    if (!r->tb) return;
    char t2[128];
    snprintf(t2, sizeof t2, "%s vs samples", tag);
    if (ptdp__tb_scalar(r->tb, tag, r->st.iteration, v) ||
        (vs_samples && ptdp__tb_scalar(r->tb, t2, r->consumed, v))) {
        ptdp_log_error("%s; no more TensorBoard scalars in this run", ptdp_last_error());
        ptdp__tb_close(r->tb);
        r->tb = NULL;
    }
}

/* Megatron's training_log: every --tensorboard-log-interval iterations. */
static void tb_iteration(ptdp_run *r) {
    const ptdp_run_params *p = &r->p;
    const ptdp_step_stats *st = &r->st;
    if (!r->tb || st->iteration % p->tensorboard_log_interval) return;
    if (p->log_learning_rate_to_tensorboard) tb_scalar(r, "learning-rate", st->lr, 1);
    tb_scalar(r, "batch-size", (double)r->job->global_batch, 1);
    tb_scalar(r, "lm loss", st->loss, 1);
    if (p->log_loss_scale_to_tensorboard) tb_scalar(r, "loss-scale", st->loss_scale, 1);
    if (p->log_world_size_to_tensorboard) tb_scalar(r, "world-size", r->comm->world_size, 1);
    /* Megatron's optimizer returns no norm for a skipped step (its gradient
     * was not finite) and training_log then writes none */
    if (!st->skipped) tb_scalar(r, "grad-norm", st->grad_norm, 1);
}

void ptdp__log_start(ptdp_run *r) {
    const ptdp_trainer_params *tp = &r->p.trainer;
    const ptdp_job *job = r->job;
    const ptdp_gpt_config *cfg = &job->model;
    const ptdp_comm *comm = r->comm;
    ptdp_backend *be = tp->be;
    char be_desc[256];
    ptdp_log0(
        "ptdp train: l=%lld h=%lld a=%lld s=%lld V=%lld (padded %lld), b=%lld B=%lld, %lld iterations; "
        "t=%d p=%d d=%d: %d rank(s) x %d thread(s), GEMM %s",
        (long long)cfg->num_layers, (long long)cfg->hidden, (long long)cfg->heads,
        (long long)cfg->seq_length, (long long)cfg->vocab, (long long)cfg->vocab_padded,
        (long long)job->micro_batch, (long long)job->global_batch, (long long)r->train_iters,
        comm->t, comm->p, comm->d, comm->world_size, omp_get_max_threads(),
        be->device == PTDP_DEVICE_CUDA ? "cublas" : ptdp_gemm_lib_name(be->lib));
    if (ptdp_gpt_is_llama(cfg)) /* the blocks that differ from GPT-2's */
        ptdp_log0("blocks: %s, %s ffn=%lld, %s, %lld key/value group(s), %s, %s",
                  cfg->rmsnorm ? "RMSNorm" : "LayerNorm", cfg->swiglu ? "SwiGLU" : "GeLU",
                  (long long)cfg->ffn_hidden,
                  cfg->rope ? "rotary embeddings" : "learned absolute positions",
                  (long long)ptdp_gpt_groups(cfg), cfg->untie ? "untied output layer" : "tied",
                  cfg->no_bias ? "no linear biases" : "linear biases");
    ptdp_log0("compute backend %s", ptdp_backend_describe(be, be_desc, sizeof be_desc));
    if (!ptdp_stage_layout_is_even(&job->stages)) {
        char buf[512];
        const int zbv = job->schedule == PTDP_SCHED_ZBV;
        ptdp_log0("pipeline stages: transformer layers per virtual stage %s (%s)",
                  ptdp_stage_layout_str(&job->stages, cfg->num_layers, comm->p, (int)job->v, buf,
                                        sizeof buf),
                  zbv ? "zb-v: chunk 0 of ranks 0..p-1 | chunk 1 of ranks p-1..0"
                      : "ranks 0..p-1, then ' | ' between model chunks");
    }
    const ptdp_schedule_params *sp = ptdp_trainer_schedule(r->tr);
    if (sp->kind == PTDP_SCHED_ZBV)
        ptdp_log0("zb-v: lists played with costs F,B,W = %d,%d,%d per chunk (%s)", sp->cost_f,
                  sp->cost_b, sp->cost_w,
                  job->zb_costs[0] ? "--zb-costs" : "from the layer's FLOPs; --zb-costs sets them");
    if (be->dtype != PTDP_DTYPE_FP32) {
        const ptdp_loss_scaler ls = ptdp_loss_scaler_of_job(job);
        char scale[96] = "no loss scaling";
        if (ls.dynamic)
            snprintf(scale, sizeof scale, "dynamic loss scale from %g (window %lld, hysteresis %d)",
                     ls.scale, (long long)ls.window, ls.hysteresis);
        else if (ls.scale != 1.0)
            snprintf(scale, sizeof scale, "constant loss scale %g", ls.scale);
        ptdp_log0("mixed precision: %s activations and working weights, fp32 arithmetic, fp32 "
                  "master weights and AdamW state, %s; %s values in fp32 storage (every op rounds "
                  "its outputs%s), 16-bit messages between ranks; compute backend %s (GEMMs: %s)",
                  ptdp_dtype_name(be->dtype), scale, ptdp_dtype_name(be->dtype),
                  be->mlp_store != PTDP_DTYPE_FP32 && !cfg->swiglu
                      ? "; the MLP's own activations in bf16 storage"
                      : "",
                  be->name,
                  !(be->caps & PTDP_CAP_NATIVE_GEMM16) ? "fp32 on 16-bit-valued inputs"
                  : be->caps & PTDP_CAP_ATTENTION16
                      ? "oneDNN's native bf16 matmul, fp32 accumulation; attention's tiles in "
                        "bf16 with AVX512_BF16"
                      : "oneDNN's native bf16 matmul, fp32 accumulation");
    }
    if (r->tb)
        ptdp_log0("TensorBoard: writing %s (tensorboard --logdir %s)", ptdp__tb_path(r->tb),
                  r->p.tensorboard_dir);
    ptdp__log_memory(r->tr);
}

/* ,"key":value (printf's fmt), left out when the value is not finite: JSON
 * (RFC 8259) has no nan or inf. */
static void json_field(FILE *f, const char *key, const char *fmt, double v) {
    if (!isfinite(v)) return;
    fprintf(f, ",\"%s\":", key);
    fprintf(f, fmt, v);
}

void ptdp__log_iteration(ptdp_run *r, double dt, int last) {
    const ptdp_run_params *p = &r->p;
    const ptdp_step_stats *st = &r->st;
    const int64_t B = r->job->global_batch, s = r->job->model.seq_length;
    const int n = r->comm->world_size;
    /* the paper's count: full recomputation reruns the layers' forward */
    const double flops = ptdp_gpt_flops_per_iter(&r->job->model, B, r->job->recompute);
    r->t_interval += dt;
    r->t_total += dt;
    /* Megatron's training_log averages the loss over the iterations that
     * advanced (a skipped step's loss is left out) */
    if (!st->skipped) {
        r->loss_interval += st->loss;
        r->advanced_interval++;
    }
    r->n_interval++;
    r->iters_run++;
    r->skipped_total += st->skipped;
    r->skipped_interval += st->skipped;
    r->nan_interval += !isfinite(st->loss) || (!isfinite(st->grad_norm) && !st->loss_scaling);
    /* --log-throughput: Megatron's FLOP count per GPU (here: per process) */
    const double mflops = ptdp_gpt_megatron_flops(&r->job->model, B);
    char thr[64] = "";
    if (r->jsonl) {
        /* a skipped iteration has no gradient norm (Megatron's line has none
         * either); non-finite values are left out, never written as nan */
        FILE *f = r->jsonl;
        fprintf(f, "{\"iteration\":%lld,\"consumed_samples\":%lld", (long long)st->iteration,
                (long long)r->consumed);
        json_field(f, "lm_loss", "%.9g", st->loss);
        json_field(f, "grad_norm", "%.9g", st->skipped ? NAN : st->grad_norm);
        json_field(f, "lr", "%.9g", st->lr);
        json_field(f, "elapsed_ms", "%.3f", dt * 1e3);
        json_field(f, "tokens_per_s", "%.1f", (double)(B * s) / dt);
        json_field(f, "tflops", "%.4f", flops / dt / n / 1e12);
        if (p->log_throughput) json_field(f, "throughput", "%.9g", mflops / dt / n / 1e12);
        fprintf(f, ",\"skipped\":%d", st->skipped);
        json_field(f, "loss_scale", "%.17g", st->loss_scale);
        fputs("}\n", f);
        fflush(f);
    }
    /* Megatron's training_log: every --log-interval, the last iteration, and
     * the first one this run trains; the timestamp first, the loss scale
     * always (1.0 without loss scaling: fp32, bf16), skipped and nan iterations
     * counted over the interval, each its own count; the loss averaged over
     * the interval's iterations that advanced (none: no loss), the grad norm
     * of the iteration logged (skipped: none) */
    tb_iteration(r);
    if (st->iteration % p->log_interval == 0 || last || r->iters_run == 1) {
        double ms = r->t_interval / (double)r->n_interval * 1e3;
        /* Megatron: timers go to TensorBoard on the regular schedule only, not
         * on the extra line of the first iteration */
        if (p->log_timers_to_tensorboard && st->iteration % p->log_interval == 0) {
            tb_scalar(r, "iteration-time", ms / 1e3, 0);
            if (p->log_throughput) tb_scalar(r, "throughput", mflops / (ms / 1e3) / n / 1e12, 0);
        }
        char stamp[32], loss[48] = "", gnorm[48] = "";
        time_t now = time(NULL);
        struct tm tmv;
        strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tmv));
        thr[0] = 0;
        if (p->log_throughput)
            snprintf(thr, sizeof thr, "throughput per GPU (TFLOP/s/GPU): %.3f | ",
                     mflops / (ms / 1e3) / n / 1e12);
        if (r->advanced_interval)
            snprintf(loss, sizeof loss, "lm loss: %.6E | ",
                     r->loss_interval / (double)r->advanced_interval);
        if (!st->skipped) snprintf(gnorm, sizeof gnorm, "grad norm: %.3f | ", st->grad_norm);
        ptdp_log0(
            " [%s] iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): %.1f | "
            "%sthroughput per process (TFLOP/s): %.3f | tokens per second: %.0f | learning rate: %.6E | "
            "global batch size: %5lld | %sloss scale: %.1f | %s"
            "number of skipped iterations: %3lld | number of nan iterations: %3lld |",
            stamp, (long long)st->iteration, (long long)r->train_iters, (long long)r->consumed, ms,
            thr, flops / (ms / 1e3) / n / 1e12, (double)(B * s) / (ms / 1e3), st->lr, (long long)B,
            loss, st->loss_scale, gnorm, (long long)r->skipped_interval,
            (long long)r->nan_interval);
        r->t_interval = r->loss_interval = 0;
        r->n_interval = r->advanced_interval = r->skipped_interval = r->nan_interval = 0;
    }
}

void ptdp__log_validation(ptdp_run *r, double vl, const char *set) {
    /* Megatron's evaluate_and_print_results: the line between two rules one
     * character longer than it; the PPL's exponent capped at 20 */
    const double ppl = exp(fmin(20.0, vl));
    char line[256], rule[256];
    int n = snprintf(line, sizeof line,
                     " validation loss at iteration %lld%s%s%s | lm loss value: %.6E | lm loss "
                     "PPL: %.6E | ",
                     (long long)r->st.iteration, set ? " on " : "", set ? set : "",
                     set ? " set" : "", vl, ppl);
    n = n + 1 < (int)sizeof rule ? n + 1 : (int)sizeof rule - 1;
    memset(rule, '-', (size_t)n);
    rule[n] = 0;
    ptdp_log0("%s\n%s\n%s", rule, line, rule);
    /* Megatron writes "lm loss validation" (and the test set under that tag
     * too, where it overwrites the validation point of the same iteration);
     * ptdp writes the test set as "lm loss test" */
    const int test = set && !strcmp(set, "test");
    tb_scalar(r, test ? "lm loss test" : "lm loss validation", vl, 1);
    if (r->p.log_validation_ppl_to_tensorboard)
        tb_scalar(r, test ? "lm loss test ppl" : "lm loss validation ppl", ppl, 1);
    if (r->jsonl) {
        const char *k = test ? "test" : "val";
        char key[16];
        fprintf(r->jsonl, "{\"iteration\":%lld", (long long)r->st.iteration);
        snprintf(key, sizeof key, "%s_loss", k);
        json_field(r->jsonl, key, "%.9g", vl);
        snprintf(key, sizeof key, "%s_ppl", k);
        json_field(r->jsonl, key, "%.9g", ppl);
        fputs(set ? ",\"final\":true}\n" : "}\n", r->jsonl);
        fflush(r->jsonl);
    }
}

void ptdp__log_finish(ptdp_run *r) {
    const ptdp_comm *comm = r->comm;
    const int64_t iters = r->iters_run; /* this run's, not the checkpoint's */
    if (iters == 0 && r->loaded.found && !r->p.finetune)
        ptdp_log0(
            "done: nothing trained: the checkpoint is at iteration %lld and --train-iters %lld counts from "
            "the start of training (as in Megatron); give --train-iters above %lld to go on",
            (long long)r->loaded.iteration, (long long)r->train_iters,
            (long long)r->loaded.iteration);
    else if (iters == 0)
        ptdp_log0("done: nothing trained (--train-iters %lld)", (long long)r->train_iters);
    else if (iters == r->st.iteration)
        ptdp_log0("done: %lld iterations in %.1f s (%.1f ms per iteration), final lm loss %.6f",
                  (long long)iters, r->t_total, r->t_total / (double)iters * 1e3, r->st.loss);
    else
        ptdp_log0(
            "done: %lld iterations (%lld to %lld) in %.1f s (%.1f ms per iteration), final lm loss %.6f",
            (long long)iters, (long long)(r->st.iteration - iters + 1), (long long)r->st.iteration,
            r->t_total, r->t_total / (double)iters * 1e3, r->st.loss);
    if (r->p.log_comm) ptdp_comm_log_counters(comm);
    if (comm->tp == 0 && comm->dp == 0 && iters > 0) {
        ptdp_act_memory am;
        ptdp_trainer_activation_memory(r->tr, &am);
        char b1[32], b2[32], b3[32];
        ptdp_log(
            "activation memory (pipeline stage %d): measured peak %s (%.0f bytes; %d micro-batches stashed, "
            "%s), predicted %s (%.0f bytes)",
            comm->pp, ptdp_fmt_bytes(am.measured, b1), am.measured, am.stashed_microbatches,
            ptdp_fmt_bytes(am.stash, b2), ptdp_fmt_bytes(am.predicted, b3), am.predicted);
    }
    ptdp__log_peak_memory(r->tr);
}

/* ---- the memory plan ------------------------------------------------------ */

void ptdp__log_memory(const ptdp_trainer *tr) {
    const ptdp_comm *comm = tr->p.comm;
    size_t carved[PTDP_MEM_NCAT], pred[PTDP_MEM_NCAT], tc = 0, tp = 0;
    ptdp_trainer_memory(tr, carved, pred);
    for (int k = 0; k < PTDP_MEM_NCAT; k++) {
        tc += carved[k];
        tp += pred[k];
        if (carved[k] != pred[k])
            ptdp_log("memory plan MISMATCH: %s carved %zu bytes, predicted %zu",
                     ptdp_mem_category_name(k), carved[k], pred[k]);
    }
    if (comm->dp == 0 && comm->tp == 0) {
        char tab[2048], b1[32];
        int n = snprintf(tab, sizeof tab,
                         "memory plan (pipeline stage %d; one block per category):\n"
                         "    %-20s %14s %14s %12s",
                         comm->pp, "category", "bytes", "predicted", "(bytes)");
        for (int k = 0; k <= PTDP_MEM_NCAT && n > 0 && (size_t)n < sizeof tab; k++) {
            const size_t c = k < PTDP_MEM_NCAT ? carved[k] : tc,
                         q = k < PTDP_MEM_NCAT ? pred[k] : tp;
            n += snprintf(tab + n, sizeof tab - (size_t)n, "\n    %-20s %14zu %14zu %12s",
                          k < PTDP_MEM_NCAT ? ptdp_mem_category_name(k) : "total", c, q,
                          ptdp_fmt_bytes((double)c, b1));
        }
        ptdp_log("%s", tab);
    }
    int64_t n = 0;
    for (int c = 0; c < tr->v; c++) n += ptdp_gpt_chunk_numel(tr->chunks[c]);
    const double per = (double)carved[PTDP_MEM_OPTIMIZER] / (double)(n ? n : 1);
    const ptdp_backend *be = tr->p.be;
    if (be->dtype == PTDP_DTYPE_FP32)
        ptdp_log0(
            "memory per parameter: weights 4 B, gradients 4 B, optimizer state %.2f B (AdamW m and v in fp32 = 8 B; "
            "the fp32 weights are the master copy; the paper's mixed-precision optimizer keeps 12 B); "
            "with --use-distributed-optimizer 8/d = %.2f B, without 8 B",
            per, 8.0 / comm->d);
    else
        ptdp_log0(
            "memory per parameter: weights 4 B (%s values, fp32 storage), gradients 4 B (fp32), "
            "optimizer state %.2f B (fp32 master weights, AdamW m and v = 12 B, the paper's); with "
            "--use-distributed-optimizer 12/d = %.2f B, without 12 B%s",
            ptdp_dtype_name(be->dtype), per, 12.0 / comm->d,
            be->caps & PTDP_CAP_WEIGHT_COPIES
                ? "; in the backend workspace, the native GEMMs' bf16 copies of the weights, about "
                  "4 B (two layouts of 2 B)"
                : "");
}

void ptdp__log_peak_memory(const ptdp_trainer *tr) {
    const ptdp_comm *comm = tr->p.comm;
    const size_t beyond = ptdp_trainer_backend_unplanned(tr);
    if (beyond) /* the plan was to hold all of it */
        ptdp_log("memory plan MISMATCH: the compute backend allocated %zu bytes beyond its planned "
                 "workspace during the run",
                 beyond);
    struct rusage ru;
    if (comm->dp != 0 || comm->tp != 0 || getrusage(RUSAGE_SELF, &ru) != 0) return;
    const double rss = (double)ru.ru_maxrss * 1024.0; /* Linux: kilobytes */
    const double plan = (double)ptdp_mem_total(&tr->mem);
    char b1[32], b2[32];
    ptdp_log(
        "peak resident memory %s (%.0f bytes); memory plan total %s (%.0f bytes); difference %+.0f bytes "
        "(code, libraries, host bookkeeping, data, transient host buffers)",
        ptdp_fmt_bytes(rss, b1), rss, ptdp_fmt_bytes(plan, b2), plan, rss - plan);
}
