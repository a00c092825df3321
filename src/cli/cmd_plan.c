/* cmd_plan.c - `ptdp plan`: predicts iteration time, model TFLOP/s and memory
 * per device of every parallel layout (t, p, d, v, b, recomputation) of a
 * model on a cluster, ranks those that fit, says why the others cannot run,
 * prints the best one's `ptdp train` flags; --explain shows the terms of the
 * equations for one layout, --json one object for scripts, --calibrate
 * measures this machine (cmd_plan_calibrate.c).
 *
 * Deliberately not here: the model (src/plan/perf.c, docs/planner.md) and the
 * search (src/plan/search.c); this file parses flags and formats results. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "cli/cli.h"
#include "kernels/kernels.h"
#include "plan/plan.h"

#ifndef PTDP_CLUSTER_DIR
#define PTDP_CLUSTER_DIR "clusters"
#endif

/* The flags of `ptdp plan` that are not the job's: the cluster, the layout
 * pins, the output. The job's (model, batch, options) go straight into a
 * ptdp_plan_job. */
typedef struct {
    const char *cluster, *recompute_granularity, *recompute_method, *schedule, *out;
    int64_t n, b, t, p, v, rc_layers, top, threads;
    int64_t first, last; /* --decoder-first/last-pipeline-num-layers */
    int account_embedding, account_loss, even_only;
    const char *layout; /* --pipeline-model-parallel-layout */
    int fp16, bf16, no_recompute, sg, no_sg, json, explain, rejected, calibrate;
} plan_flags;

static void cluster_path(const char *name, char *buf, size_t cap);

/* What the shipped `local` description is: this machine only when
 * --calibrate wrote it here (its "machine" names this one). */
static void describe_local(char *buf, size_t cap) {
    char path[4096], here[128];
    ptdp_cluster c;
    cluster_path("local", path, sizeof path);
    ptdp__cli_machine(here, sizeof here);
    if (ptdp_cluster_load(path, &c) != PTDP_OK)
        snprintf(buf, cap, "local (missing or unreadable: %s; write it with --calibrate)", path);
    else if (!strcmp(c.machine, here))
        snprintf(buf, cap, "local (this machine: %s, measured by --calibrate)", here);
    else
        snprintf(buf, cap,
                 "local (measured by --calibrate on %s,\nnot on this machine, %s: `ptdp plan "
                 "--calibrate --out FILE`\nmeasures this one for --cluster FILE)",
                 c.machine[0] ? c.machine : "another machine", here);
}

static void usage(FILE *f, const ptdp_opt *opts, int nopts) {
    char local[4608];
    describe_local(local, sizeof local);
    fprintf(
        f,
        "usage: ptdp plan --cluster NAME|FILE --num-devices N --num-layers L --hidden-size H\n"
        "                 --num-attention-heads A --seq-length S --global-batch-size B\n"
        "                 [--vocab-size V] [--fp16|--bf16] [--recompute-granularity full]\n"
        "                 [--tensor-model-parallel-size T] [--pipeline-model-parallel-size P]\n"
        "                 [--virtual-pipeline-model-parallel-size V] [--micro-batch-size b]\n"
        "                 [--json] [--explain] [--show-rejected]\n"
        "       ptdp plan --calibrate [--out FILE.json]   (mpirun -np 2 or more: also links)\n\n"
        "Predicts every layout (t, p, d = N/(t p), v, b, recomputation) of the model on N "
        "devices\nof the cluster, ranks those that fit in memory by predicted iteration time "
        "and prints\nthe best one's `ptdp train` flags. Given parallel sizes are pinned and "
        "only the rest is\nsearched. Clusters shipped: a100-superpod, h100-dgx, and\n%s.\n"
        "On a description of ranks sharing a node (local), each of the job's ranks on the "
        "node\nhas the node's memory over their number. The model and its equations: "
        "docs/planner.md.\n\nflags:\n",
        local);
    ptdp_opts_help(f, opts, nopts);
}

/* A shipped description by name: next to an installed binary
 * (PREFIX/bin/ptdp -> PREFIX/share/ptdp/clusters), else in the source tree
 * the build came from. A path (with / or .json) is taken as it is. */
static void cluster_path(const char *name, char *buf, size_t cap) {
    if (strchr(name, '/') || strstr(name, ".json")) {
        snprintf(buf, cap, "%s", name);
        return;
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            int k = snprintf(buf, cap, "%s/../share/ptdp/clusters/%s.json", exe, name);
            if (k > 0 && (size_t)k < cap && access(buf, R_OK) == 0) return;
        }
    }
    snprintf(buf, cap, "%s/%s.json", PTDP_CLUSTER_DIR, name);
}

/* Megatron's --recompute-granularity ("full": the method is in the flags;
 * "selective") or "none". */
static const char *recompute_name(const ptdp_plan_job *job, int on) {
    return !on ? "none" : job->job.recompute == PTDP_RECOMPUTE_SELECTIVE ? "selective" : "full";
}

/* The classes of rejection, for the summary line. */
static const char *reason_class(const char *r) {
    if (!strncmp(r, "does not fit", 12)) return "does not fit in memory";
    if (strstr(r, "node")) return "t exceeds or straddles a node";
    return "divisibility";
}

static void print_flags(FILE *f, const plan_flags *F, const ptdp_plan_job *job,
                        const ptdp_plan_candidate *k) {
    const ptdp_plan_layout *L = &k->layout;
    fprintf(f, "ptdp train --num-layers %lld --hidden-size %lld --num-attention-heads %lld",
            (long long)job->job.model.num_layers, (long long)job->job.model.hidden,
            (long long)job->job.model.heads);
    if (job->job.model.ffn_hidden)
        fprintf(f, " --ffn-hidden-size %lld", (long long)job->job.model.ffn_hidden);
    fprintf(f,
            " --seq-length %lld --vocab-size %lld --global-batch-size %lld --micro-batch-size %d",
            (long long)job->job.model.seq_length, (long long)job->job.model.vocab,
            (long long)job->job.global_batch, L->b);
    fprintf(f, " --tensor-model-parallel-size %d --pipeline-model-parallel-size %d", L->t, L->p);
    if (L->v > 1 && !F->layout) fprintf(f, " --virtual-pipeline-model-parallel-size %d", L->v);
    if (F->layout) fprintf(f, " --pipeline-model-parallel-layout \"%s\"", F->layout);
    if (L->stages.first)
        fprintf(f, " --decoder-first-pipeline-num-layers %lld", (long long)L->stages.first);
    if (L->stages.last)
        fprintf(f, " --decoder-last-pipeline-num-layers %lld", (long long)L->stages.last);
    if (L->stages.embedding) fprintf(f, " --account-for-embedding-in-pipeline-split");
    if (L->stages.loss) fprintf(f, " --account-for-loss-in-pipeline-split");
    if (job->job.schedule >= 0)
        fprintf(f, " --pipeline-schedule %s", ptdp_schedule_kind_name(job->job.schedule));
    if (L->recompute && job->job.recompute == PTDP_RECOMPUTE_SELECTIVE)
        fprintf(f, " --recompute-granularity selective");
    else if (L->recompute)
        fprintf(f,
                " --recompute-granularity full --recompute-method %s --recompute-num-layers %lld",
                ptdp_recompute_method_name(job->job.recompute),
                (long long)(job->job.recompute_num_layers > 0 ? job->job.recompute_num_layers : 1));
    if (L->t > 1 && job->job.sequence_parallel) fprintf(f, " --sequence-parallel");
    if (L->t > 1 && !job->job.scatter_gather && !job->job.sequence_parallel)
        fprintf(f, " --no-scatter-gather-tensors-in-pipeline");
    if (job->job.distributed_optimizer) fprintf(f, " --use-distributed-optimizer");
    if (!job->job.overlap_grad_reduce) fprintf(f, " --no-overlap-grad-reduce");
    if (ptdp_plan_precision_of(&job->job) != PTDP_PREC_FP32)
        fprintf(f, " --%s", ptdp_plan_precision_name(ptdp_plan_precision_of(&job->job)));
}

static void json_layout(FILE *f, const ptdp_plan_job *job, const ptdp_plan_candidate *k) {
    const ptdp_plan_layout *L = &k->layout;
    char sbuf[512];
    const ptdp_plan_estimate *e = &k->est;
    fprintf(f,
            "{\"t\": %d, \"p\": %d, \"d\": %d, \"v\": %d, \"b\": %d, \"m\": %d, "
            "\"recompute\": \"%s\", \"schedule\": \"%s\", \"iteration_s\": %.6g, "
            "\"tflops_per_device\": %.6g, \"memory_bytes_per_device\": %.0f, "
            "\"bubble_fraction\": %.6g, \"pipeline_s\": %.6g, \"optimizer_s\": %.6g, "
            "\"stage_layers\": \"%s\", \"memory\": {",
            L->t, L->p, L->d, L->v, L->b, e->m, recompute_name(job, L->recompute),
            ptdp_schedule_kind_name(e->schedule), e->iteration_s, e->tflops_per_device,
            e->memory_bytes, e->bubble_fraction, e->pipeline_s, e->optimizer_s,
            ptdp_stage_layout_str(&L->stages, job->job.model.num_layers, L->p, L->v, sbuf,
                                  sizeof sbuf));
    for (int i = 0; i < PTDP_PMEM_COUNT; i++)
        fprintf(f, "%s\"%s\": %.0f", i ? ", " : "", ptdp_plan_mem_name(i), e->memory[i]);
    fprintf(f, "}, \"comm_s\": {");
    for (int i = 0; i < PTDP_COMM_COUNT; i++)
        fprintf(f, "%s\"%s\": %.6g", i ? ", " : "", ptdp_plan_comm_name(i), e->comm_s[i]);
    fprintf(f, "}}");
}

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void print_json(const plan_flags *F, const ptdp_cluster *c, const ptdp_plan_job *job,
                       const ptdp_plan_candidate *cand, int count, int nfit) {
    FILE *f = stdout;
    fprintf(f, "{\"cluster\": ");
    json_string(f, c->name);
    fprintf(f,
            ", \"num_devices\": %lld, \"precision\": \"%s\", \"model\": {\"num_layers\": %lld, "
            "\"hidden_size\": %lld, \"num_attention_heads\": %lld, \"ffn_hidden_size\": %lld, "
            "\"seq_length\": %lld, \"vocab_size\": %lld, \"global_batch_size\": %lld}, "
            "\"device_memory_bytes\": %.0f, \"num_fit\": %d, \"num_rejected\": %d,\n "
            "\"best_flags\": \"",
            (long long)F->n, ptdp_plan_precision_name(ptdp_plan_precision_of(&job->job)),
            (long long)job->job.model.num_layers, (long long)job->job.model.hidden,
            (long long)job->job.model.heads,
            (long long)(job->job.model.ffn_hidden ? job->job.model.ffn_hidden
                                                  : 4 * job->job.model.hidden),
            (long long)job->job.model.seq_length, (long long)job->job.model.vocab,
            (long long)job->job.global_batch, ptdp_plan_device_memory(c, F->n), nfit, count - nfit);
    print_flags(f, F, job, &cand[0]);
    fprintf(f, "\",\n \"layouts\": [");
    for (int i = 0; i < nfit; i++) {
        fprintf(f, "%s\n  ", i ? "," : "");
        json_layout(f, job, &cand[i]);
    }
    fprintf(f, "],\n \"rejected\": [");
    for (int i = nfit, first = 1; i < count && F->rejected; i++, first = 0) {
        const ptdp_plan_layout *L = &cand[i].layout;
        fprintf(f,
                "%s\n  {\"t\": %d, \"p\": %d, \"d\": %d, \"v\": %d, \"b\": %d, "
                "\"recompute\": \"%s\", \"reason\": ",
                first ? "" : ",", L->t, L->p, L->d, L->v, L->b, recompute_name(job, L->recompute));
        json_string(f, cand[i].reason);
        fputc('}', f);
    }
    fprintf(f, "]}\n");
}

static void print_table(const plan_flags *F, const ptdp_cluster *c, const ptdp_plan_job *job,
                        const ptdp_plan_candidate *cand, int count, int nfit) {
    char b1[32], b2[32], here[128];
    printf("model: l=%lld h=%lld a=%lld s=%lld V=%lld, global batch %lld, %s; cluster %s: ",
           (long long)job->job.model.num_layers, (long long)job->job.model.hidden,
           (long long)job->job.model.heads, (long long)job->job.model.seq_length,
           (long long)job->job.model.vocab, (long long)job->job.global_batch,
           ptdp_plan_precision_name(ptdp_plan_precision_of(&job->job)), c->name);
    if (c->shared_node > 0)
        printf("%lld ranks, %lld per node, each with %s (the node's %s over its ranks)\n",
               (long long)F->n, (long long)ptdp_plan_ranks_per_node(c, F->n),
               ptdp_fmt_bytes(ptdp_plan_device_memory(c, F->n), b1),
               ptdp_fmt_bytes(c->memory_bytes, b2));
    else
        printf("%lld devices of %s, %d per node\n", (long long)F->n,
               ptdp_fmt_bytes(c->memory_bytes, b1), c->devices_per_node);
    ptdp__cli_machine(here, sizeof here);
    if (c->machine[0] && strcmp(c->machine, here))
        printf("note: this description was measured on %s, not on this machine (%s); `ptdp plan "
               "--calibrate --out FILE` measures this one\n",
               c->machine, here);
    printf("%4s %3s %4s %5s %3s %3s %5s %-9s %10s %9s %7s %11s %9s %9s %9s  %s\n", "rank", "t", "p",
           "d", "v", "b", "m", "recompute", "iter (s)", "TFLOP/s", "bubble", "memory", "tensor",
           "pipeline", "data", "layers per stage");
    const int shown = F->top > 0 && F->top < nfit ? (int)F->top : nfit;
    for (int i = 0; i < shown; i++) {
        const ptdp_plan_layout *L = &cand[i].layout;
        const ptdp_plan_estimate *e = &cand[i].est;
        char sbuf[512];
        ptdp_stage_layout_str(&L->stages, job->job.model.num_layers, L->p, L->v, sbuf, sizeof sbuf);
        if (strlen(sbuf) > 40) strcpy(sbuf + 36, " ..."); /* long pipelines: the start */
        printf("%4d %3d %4d %5d %3d %3d %5d %-9s %10.4g %9.4g %7.3f %11s %9.3g %9.3g %9.3g  %s\n",
               i + 1, L->t, L->p, L->d, L->v, L->b, e->m, recompute_name(job, L->recompute),
               e->iteration_s, e->tflops_per_device, e->bubble_fraction,
               ptdp_fmt_bytes(e->memory_bytes, b2), e->comm_s[PTDP_COMM_TENSOR],
               e->comm_s[PTDP_COMM_PIPELINE], e->comm_s[PTDP_COMM_DATA], sbuf);
    }
    if (shown < nfit) printf("(%d more layouts fit; --top 0 shows all)\n", nfit - shown);
    const ptdp_plan_estimate *e = &cand[0].est;
    printf("\nbest: memory per device");
    for (int i = 0; i < PTDP_PMEM_COUNT; i++)
        printf("%s %s %s", i ? "," : "", ptdp_plan_mem_name(i), ptdp_fmt_bytes(e->memory[i], b1));
    printf("\n");
    if (F->n > 1) printf("mpirun -np %lld ", (long long)F->n);
    print_flags(stdout, F, job, &cand[0]);
    printf(" --train-iters N --lr X --mock-data\n");
    if (ptdp_plan_fp32_storage(c, job))
        printf("(this prediction is for ptdp's CPU %s: 16-bit values in fp32 storage, fp32 "
               "gradients and master weights, 2-byte messages)\n",
               ptdp_plan_precision_name(ptdp_plan_precision_of(&job->job)));
    else if (ptdp_plan_precision_of(&job->job) != PTDP_PREC_FP32)
        printf("(this prediction is for %s storage as in Megatron; ptdp train --bf16/--fp16 "
               "computes in 16 bits but stores fp32 today)\n",
               ptdp_plan_precision_name(ptdp_plan_precision_of(&job->job)));
    if (count > nfit) {
        const char *classes[3] = {"does not fit in memory", "t exceeds or straddles a node",
                                  "divisibility"};
        int n[3] = {0, 0, 0};
        for (int i = nfit; i < count; i++)
            for (int k = 0; k < 3; k++)
                if (!strcmp(reason_class(cand[i].reason), classes[k])) n[k]++;
        printf("\n%d layouts rejected:", count - nfit);
        for (int k = 0; k < 3; k++)
            if (n[k]) printf(" %d %s;", n[k], classes[k]);
        printf(F->rejected ? "\n" : " (--show-rejected lists them)\n");
        for (int i = nfit; i < count && F->rejected; i++) {
            const ptdp_plan_layout *L = &cand[i].layout;
            printf("  t=%d p=%d d=%d v=%d b=%d recompute=%s: %s\n", L->t, L->p, L->d, L->v, L->b,
                   recompute_name(job, L->recompute), cand[i].reason);
        }
    }
}

static void print_explain(const ptdp_cluster *c, const ptdp_plan_job *job,
                          const ptdp_plan_candidate *k) {
    const ptdp_plan_layout *L = &k->layout;
    const ptdp_plan_estimate *e = &k->est;
    const int cpu16 = ptdp_plan_fp32_storage(c, job);
    const double n = (double)L->t * L->p * L->d;
    const int64_t ffn =
        job->job.model.ffn_hidden ? job->job.model.ffn_hidden : 4 * job->job.model.hidden;
    char b1[32];
    printf("layout t=%d p=%d d=%d v=%d b=%d m=B/(b d)=%d recompute=%s schedule=%s on %s\n", L->t,
           L->p, L->d, L->v, L->b, e->m, recompute_name(job, L->recompute),
           ptdp_schedule_kind_name(e->schedule), c->name);
    printf("peak %.4g FLOP/s (%s), GEMM efficiency eff_max %.3g x g(M) g(N) g(K), "
           "g(x) = x/(x + %.4g)\n",
           c->peak_flops[ptdp_plan_precision_of(&job->job)],
           ptdp_plan_precision_name(ptdp_plan_precision_of(&job->job)), c->gemm_efficiency,
           c->gemm_half_dim);
    printf("\none layer, one micro-batch, one device (N = s b = %lld tokens, w = %.0f bytes "
           "stored, w_m = %.0f in messages%s):\n",
           (long long)(job->job.model.seq_length * L->b), e->act_bytes, e->msg_bytes,
           cpu16 ? ": ptdp's CPU 16-bit values in fp32 storage" : "");
    const int flash = c->attention_flops[ptdp_plan_precision_of(&job->job)] > 0;
    printf("  GEMMs forward       T_gemm = sum 2 M N K / (peak eff) = %.6g s (MLP-in GEMM eff "
           "%.3f)\n",
           e->layer_gemm_fwd_s, e->gemm_efficiency);
    if (flash)
        printf("    of which core attention: ptdp's flash attention, 4 b a/t s^2 (h/a) x causal "
               "tiles / %.4g FLOP/s = %.6g s\n",
               c->attention_flops[ptdp_plan_precision_of(&job->job)], e->layer_attention_fwd_s);
    else
        printf("    of which core attention: the scores and context GEMMs, %.6g s\n",
               e->layer_attention_fwd_s);
    printf("  memory-bound fwd    T_ew = [w (10 N h + 4 S + 2 N f/t) + S + 2 N h] / (%.4g B/s x "
           "%.3g) = %.6g s  (S = %s, f = %lld)\n",
           c->mem_bandwidth, c->elementwise_efficiency[ptdp_plan_precision_of(&job->job)],
           e->layer_elementwise_fwd_s, flash ? "0: flash attention keeps no scores" : "b a/t s^2",
           (long long)ffn);
    printf("  tensor all-reduces  T_tp = 2 x [2 (t-1)/t N h w_m / %.4g + 2 (t-1) %.3g] = %.6g s\n",
           c->intra_bandwidth, c->intra_latency, e->layer_tp_fwd_s);
    printf("  forward  T_f = T_gemm + T_ew + T_tp = %.6g s\n", e->layer_fwd_s);
    const int selective = L->recompute && job->job.recompute == PTDP_RECOMPUTE_SELECTIVE;
    const int seqp = job->job.sequence_parallel && L->t > 1;
    if (seqp)
        printf("  sequence parallelism: each all-reduce is a reduce-scatter + all-gather (same "
               "ring time); T_ew's 10 N h and 2 N h terms on N/t rows; the backward gathers both "
               "LayerNorm outputs again: T_tp,b = T_tp + 2 x (t-1)/t N h w_m / bw + ...\n");
    printf("  backward T_b = 2 T_gemm + 2 T_ew + T_tp%s%s = %.6g s\n", seqp ? ",b" : "",
           selective      ? " + core attention's forward (selective recomputation)"
           : L->recompute ? " + T_f (recomputed forward)"
                          : "",
           e->layer_bwd_s);
    char sbuf[512];
    printf(
        "\nstages: layers per virtual stage %s (ranks, then ' | ' between chunks), %d "
        "chunk(s) per rank; loss head %.6g s, embedding %.6g s per micro-batch\n",
        ptdp_stage_layout_str(&L->stages, job->job.model.num_layers, L->p, L->v, sbuf, sizeof sbuf),
        L->v, e->head_s, e->embedding_s);
    printf("  one transfer between stages T_p2p = lat + N h w_m%s / bw%s = %.6g s (two per action "
           "inside the pipeline)\n",
           L->t > 1 && (job->job.scatter_gather || job->job.sequence_parallel) ? " / t" : "",
           L->t > 1 && job->job.sequence_parallel ? " (the sequence shard)"
           : L->t > 1 && job->job.scatter_gather  ? " + all-gather in the tensor group"
                                                  : "",
           e->p2p_s);
    printf("  pipeline (simulated, per-stage costs): makespan %.6g s, bubble fraction %.4f "
           "((p-1)/(v m) = %.4f)\n",
           e->pipeline_s, e->bubble_fraction, (double)(L->p - 1) / ((double)L->v * e->m));
    printf("\niteration:\n");
    printf("  data-parallel reduction of %.4g parameters x %s gradients over d=%d: %.6g s, "
           "exposed %.6g s%s\n",
           e->params_per_device, e->grad_bytes == 2.0 ? "2-byte" : "4-byte", L->d,
           e->dp_allreduce_s, e->comm_s[PTDP_COMM_DATA],
           job->job.overlap_grad_reduce ? " (overlapped with the last micro-batch's backward)"
                                        : "");
    printf("  tied-embedding all-reduce %.6g s, optimizer step %.6g s, fixed overhead %.6g s\n",
           e->comm_s[PTDP_COMM_EMBEDDING], e->optimizer_s, e->overhead_s);
    printf("  T_iter = pipeline + data + embedding + optimizer + overhead = %.6g s\n",
           e->iteration_s);
    printf("  F = %d B s l h^2 (1 + s/(6h)%s) + 6 B s h V = %.6g FLOP; F / (n T_iter) = %.4g "
           "TFLOP/s per device\n",
           L->recompute && !selective ? 96 : 72, selective ? " + s/(18h)" : "", e->model_flops,
           e->model_flops / (n * e->iteration_s) / 1e12);
    printf("  communication on the critical path per iteration:");
    for (int i = 0; i < PTDP_COMM_COUNT; i++)
        printf(" %s %.4g s", ptdp_plan_comm_name(i), e->comm_s[i]);
    printf("\nmemory per device (most loaded pipeline rank, %.4g parameters):",
           e->params_per_device);
    for (int i = 0; i < PTDP_PMEM_COUNT; i++)
        printf(" %s %s", ptdp_plan_mem_name(i), ptdp_fmt_bytes(e->memory[i], b1));
    char b2[32];
    const double have = ptdp_plan_device_memory(c, (int64_t)n);
    printf("; total %s of %s%s\n", ptdp_fmt_bytes(e->memory_bytes, b1), ptdp_fmt_bytes(have, b2),
           e->memory_bytes > have ? " (DOES NOT FIT)" : "");
}

/* The flag table: F's flags and the job's (fields of pj->job); returns the
 * count. */
static int plan_table(plan_flags *F, ptdp_plan_job *pj, ptdp_opt *opts, int cap) {
    ptdp_job *job = &pj->job;
    ptdp_gpt_config *model = &job->model;
    const ptdp_opt table[] = {
        {"cluster", PTDP_OPT_STR, &F->cluster,
         "cluster description: a100-superpod, h100-dgx, local, or a JSON file (required)", NULL, 0,
         0, 0},
        {"num-devices", PTDP_OPT_INT, &F->n, "devices (ranks) to plan for (required)", NULL, 1, 1e7,
         0},
        {"num-layers", PTDP_OPT_INT, &model->num_layers, "transformer layers l (required)", NULL, 1,
         1e5, 0},
        {"hidden-size", PTDP_OPT_INT, &model->hidden, "hidden size h (required)", NULL, 1, 1e7, 0},
        {"num-attention-heads", PTDP_OPT_INT, &model->heads, "attention heads a (required)", NULL,
         1, 1e5, 0},
        {"ffn-hidden-size", PTDP_OPT_INT, &model->ffn_hidden, "MLP width (0: 4h)", NULL, 0, 1e8, 0},
        {"seq-length", PTDP_OPT_INT, &model->seq_length, "sequence length s (required)", NULL, 1,
         1e7, 0},
        {"vocab-size", PTDP_OPT_INT, &model->vocab, "vocabulary size V", NULL, 2, 1e9, 0},
        {"make-vocab-size-divisible-by", PTDP_OPT_INT, &job->vocab_divisible_by,
         "pad V to a multiple of this x t", NULL, 1, 1e6, 0},
        {"global-batch-size", PTDP_OPT_INT, &job->global_batch, "global batch size B (required)",
         NULL, 1, 1e12, 0},
        {"micro-batch-size", PTDP_OPT_INT, &F->b, "pin the micro-batch size b", NULL, 1, 1e6, 0},
        {"tensor-model-parallel-size", PTDP_OPT_INT, &F->t, "pin t", NULL, 1, 1e6, 0},
        {"pipeline-model-parallel-size", PTDP_OPT_INT, &F->p, "pin p", NULL, 1, 1e6, 0},
        {"virtual-pipeline-model-parallel-size", PTDP_OPT_INT, &F->v,
         "pin v (model chunks per pipeline rank)", NULL, 1, 1e5, 0},
        {"decoder-first-pipeline-num-layers", PTDP_OPT_INT, &F->first,
         "pin an uneven split: layers on the first pipeline rank", NULL, 1, 1e5, 0},
        {"decoder-last-pipeline-num-layers", PTDP_OPT_INT, &F->last,
         "pin an uneven split: layers on the last pipeline rank", NULL, 1, 1e5, 0},
        {"account-for-embedding-in-pipeline-split", PTDP_OPT_BOOL, &F->account_embedding,
         "pin a split counting the embedding as a layer", NULL, 0, 1, 0},
        {"account-for-loss-in-pipeline-split", PTDP_OPT_BOOL, &F->account_loss,
         "pin a split counting the loss as a layer", NULL, 0, 1, 0},
        {"pipeline-model-parallel-layout", PTDP_OPT_STR, &F->layout,
         "pin a layout string such as \"E|t*3|t*3|t*2,L\" (sets v)", NULL, 0, 0, 0},
        {"even-stages-only", PTDP_OPT_BOOL, &F->even_only,
         "search only the even split (default: Megatron's uneven splits too)", NULL, 0, 1, 0},
        {"pipeline-schedule", PTDP_OPT_STR, &F->schedule,
         "schedule (default: interleaved if v > 1, else 1f1b; zb-h1 and zb-v split the backward "
         "into B and W; zb-v needs v = 2)",
         "gpipe|1f1b|interleaved|zb-h1|zb-v", 0, 0, 0},
        {"fp16", PTDP_OPT_BOOL, &F->fp16,
         "plan for fp16 weights and activations (fp32 master weights and Adam)", NULL, 0, 1, 0},
        {"bf16", PTDP_OPT_BOOL, &F->bf16, "plan for bf16 (fp32 gradients, master weights, Adam)",
         NULL, 0, 1, 0},
        {"recompute-granularity", PTDP_OPT_STR, &F->recompute_granularity,
         "pin full or selective activation recomputation (default: search none and full)",
         "full|selective", 0, 0, 0},
        {"recompute-method", PTDP_OPT_STR, &F->recompute_method,
         "uniform (default) or block, when recomputing", "uniform|block", 0, 0, 0},
        {"recompute-num-layers", PTDP_OPT_INT, &F->rc_layers,
         "layers per recompute group (uniform) or per chunk (block); default 1", NULL, 1, 1e5, 0},
        {"no-recompute", PTDP_OPT_BOOL, &F->no_recompute, "pin no recomputation", NULL, 0, 1, 0},
        {"scatter-gather-tensors-in-pipeline", PTDP_OPT_BOOL, &F->sg,
         "send 1/t of each activation between stages (the default)", NULL, 0, 1, 0},
        {"no-scatter-gather-tensors-in-pipeline", PTDP_OPT_BOOL, &F->no_sg,
         "send whole activations between stages", NULL, 0, 1, 0},
        {"sequence-parallel", PTDP_OPT_BOOL, &job->sequence_parallel,
         "sequence parallelism in every layout with t > 1 (layouts whose t does not divide "
         "--seq-length are rejected)",
         NULL, 0, 1, 0},
        {"use-distributed-optimizer", PTDP_OPT_BOOL, &job->distributed_optimizer,
         "ZeRO-1: optimizer state sharded over the data-parallel group", NULL, 0, 1, 0},
        {"overlap-grad-reduce", PTDP_OPT_BOOL, &job->overlap_grad_reduce,
         "overlap the data-parallel reduction with the last backward (ptdp's default)", NULL, 0, 1,
         0},
        {"no-overlap-grad-reduce", PTDP_OPT_NEGBOOL, &job->overlap_grad_reduce,
         "reduce gradients after the whole backward (Megatron of the paper)", NULL, 0, 1, 0},
        {"ddp-bucket-size", PTDP_OPT_INT, &job->ddp_bucket_size,
         "gradient elements per reduction bucket", NULL, 1, 1e15, 0},
        {"threads", PTDP_OPT_INT, &F->threads,
         "fp32: OpenMP threads per rank (attention scratch in the memory plan; ptdp train gives "
         "each rank cores / ranks)",
         NULL, 1, 4096, 0},
        {"json", PTDP_OPT_BOOL, &F->json, "print one JSON object (layouts best first)", NULL, 0, 1,
         0},
        {"explain", PTDP_OPT_BOOL, &F->explain,
         "show the terms of the equations for the best layout of the pinned sizes", NULL, 0, 1, 0},
        {"show-rejected", PTDP_OPT_BOOL, &F->rejected, "list every rejected layout and why", NULL,
         0, 1, 0},
        {"top", PTDP_OPT_INT, &F->top, "layouts in the table (0: all)", NULL, 0, 1e9, 0},
        {"calibrate", PTDP_OPT_BOOL, &F->calibrate,
         "measure this machine and write a cluster description (see --out)", NULL, 0, 1, 0},
        {"out", PTDP_OPT_STR, &F->out, "--calibrate: the file to write (default: stdout)", NULL, 0,
         0, 0},
    };
    const int n = (int)(sizeof table / sizeof table[0]);
    PTDP_ASSERT(n <= cap);
    memcpy(opts, table, sizeof table);
    return n;
}

/* Required flags and the ones that exclude each other: 0, or the exit
 * status after one error line. */
static int check_flags(const plan_flags *F, const ptdp_plan_job *pj) {
    const ptdp_gpt_config *m = &pj->job.model;
    const struct {
        int missing;
        const char *flag;
    } req[] = {{!F->cluster, "--cluster"},
               {!F->n, "--num-devices"},
               {!m->num_layers, "--num-layers"},
               {!m->hidden, "--hidden-size"},
               {!m->heads, "--num-attention-heads"},
               {!m->seq_length, "--seq-length"},
               {!pj->job.global_batch, "--global-batch-size"}};
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (req[i].missing) {
            ptdp_log_error("missing required flag %s (see ptdp plan --help)", req[i].flag);
            return 2;
        }
    const char *excl =
        F->fp16 && F->bf16 ? "--fp16 and --bf16"
        : F->sg && F->no_sg
            ? "--scatter-gather-tensors-in-pipeline and --no-scatter-gather-tensors-in-pipeline"
        : F->no_recompute && F->recompute_granularity ? "--no-recompute and --recompute-granularity"
                                                      : NULL;
    if (excl) {
        ptdp_log_error("%s exclude each other; give one", excl);
        return 2;
    }
    const int selective =
        F->recompute_granularity && !strcmp(F->recompute_granularity, "selective");
    if (selective && (F->recompute_method || F->rc_layers)) {
        ptdp_log_error("--recompute-method and --recompute-num-layers go with "
                       "--recompute-granularity full; selective reruns core attention in every "
                       "layer");
        return 2;
    }
    if (F->no_recompute && (F->recompute_method || F->rc_layers)) {
        ptdp_log_error("--recompute-method and --recompute-num-layers need recomputation; drop "
                       "--no-recompute");
        return 2;
    }
    return 0;
}

/* The flags that resolve into the job (precision, schedule, scatter/gather,
 * the recomputation a layout that recomputes runs) and the CPU backend's
 * numbers for ptdp's own memory plan. */
static void resolve_job(const plan_flags *F, ptdp_plan_job *pj) {
    ptdp_job *job = &pj->job;
    job->dtype = F->fp16 ? PTDP_DTYPE_FP16 : F->bf16 ? PTDP_DTYPE_BF16 : PTDP_DTYPE_FP32;
    job->schedule = F->schedule ? ptdp_schedule_parse_kind(F->schedule) : -1;
    job->scatter_gather = !F->no_sg;
    const int selective =
        F->recompute_granularity && !strcmp(F->recompute_granularity, "selective");
    job->recompute = selective             ? PTDP_RECOMPUTE_SELECTIVE
                     : F->recompute_method ? ptdp_recompute_method_parse(F->recompute_method)
                                           : PTDP_RECOMPUTE_UNIFORM;
    job->recompute_num_layers = F->rc_layers ? F->rc_layers : 1;
    /* ptdp's CPU backend's attention numbers for its own memory plan, and
     * whether its bf16 backend keeps the MLP's activations in bf16 here */
    pj->attn_saved_floats = ptdp_attention_saved_floats_cpu;
    pj->attn_scratch_floats = ptdp_attention_scratch_floats(job->model.seq_length, (int)F->threads);
    ptdp_backend_params bp = ptdp_backend_default_params();
    bp.dtype = PTDP_DTYPE_BF16;
    ptdp_backend *bf16 = NULL;
    pj->bf16_mlp16 = ptdp_backend_open(&bf16, &bp) == PTDP_OK && bf16->mlp_store != PTDP_DTYPE_FP32;
    ptdp_backend_close(bf16);
    pj->uneven_splits = !F->even_only;
}

/* The pins of the search: the sizes given, the stage split of the flags or
 * of a layout string (which also sets v). 0, or the exit status after one
 * error line. */
static int make_pins(plan_flags *F, ptdp_plan_pins *pins, ptdp_stage_layout *split) {
    *split = (ptdp_stage_layout){.first = F->first,
                                 .last = F->last,
                                 .embedding = F->account_embedding,
                                 .loss = F->account_loss};
    if (F->layout) {
        int lrc = ptdp_stage_layout_parse(F->layout, split);
        if (lrc == PTDP_OK && (!F->p || split->nstages % F->p))
            lrc = ptdp_errorf(PTDP_ECONFIG,
                              "--pipeline-model-parallel-layout needs --pipeline-model-parallel-"
                              "size P, a divisor of its %d stages",
                              split->nstages);
        if (lrc != PTDP_OK) {
            ptdp_log_error("%s", ptdp_last_error());
            return 2;
        }
        split->first = F->first, split->last = F->last;
        split->embedding = F->account_embedding, split->loss = F->account_loss;
        if (F->v && F->v != split->nstages / F->p) {
            ptdp_log_error("--virtual-pipeline-model-parallel-size %lld conflicts with "
                           "--pipeline-model-parallel-layout (v = %lld)",
                           (long long)F->v, (long long)(split->nstages / F->p));
            return 2;
        }
        F->v = split->nstages / F->p;
    }
    *pins = (ptdp_plan_pins){.stages = ptdp_stage_layout_is_even(split) ? NULL : split,
                             .t = (int)F->t,
                             .p = (int)F->p,
                             .v = (int)F->v,
                             .b = (int)F->b,
                             .recompute = F->recompute_granularity ? 1
                                          : F->no_recompute        ? 0
                                                                   : -1};
    if (F->explain && (!F->t || !F->p)) {
        ptdp_log_error("--explain shows one layout: pin it with --tensor-model-parallel-size and "
                       "--pipeline-model-parallel-size (and optionally -v, -b, recomputation)");
        return 2;
    }
    return 0;
}

/* Searches the layouts and prints the result as asked; returns the exit
 * status. */
static int search_and_print(const plan_flags *F, const ptdp_cluster *c, const ptdp_plan_job *pj,
                            const ptdp_plan_pins *pins, const ptdp_stage_layout *split) {
    ptdp_plan_candidate *cand = NULL;
    int count = 0, nfit = 0;
    int rc = ptdp_plan_search(c, pj, (int)F->n, pins, &cand, &count, &nfit);
    if (rc && F->explain && rc != PTDP_ENOMEM && F->n % (F->t * F->p) == 0) {
        /* the pinned layout may run but not fit: explain it all the same */
        ptdp_plan_candidate one = {.layout = {.t = (int)F->t,
                                              .p = (int)F->p,
                                              .d = (int)(F->n / (F->t * F->p)),
                                              .v = F->v ? (int)F->v : 1,
                                              .b = F->b ? (int)F->b : 1,
                                              .recompute = pins->recompute != 0,
                                              .stages = *split}};
        if (ptdp_plan_estimate_layout(c, pj, &one.layout, &one.est) == PTDP_OK) {
            print_explain(c, pj, &one);
            return 0;
        }
    }
    if (rc) {
        ptdp_log_error("%s", ptdp_last_error());
        return rc == PTDP_ENOMEM ? 1 : 2;
    }
    if (F->explain)
        print_explain(c, pj, &cand[0]);
    else if (F->json)
        print_json(F, c, pj, cand, count, nfit);
    else
        print_table(F, c, pj, cand, count, nfit);
    free(cand);
    return 0;
}

/* The Llama family's flags (docs/llama.md): `ptdp train` takes them, the
 * planner's cost model does not know their blocks yet. One message naming
 * the flag instead of "unknown flag". */
static int refuse_llama_flags(int argc, char **argv) {
    static const char *const llama[] = {
        "normalization",           "swiglu",
        "position-embedding-type", "rotary-base",
        "rotary-percent",          "group-query-attention",
        "num-query-groups",        "untie-embeddings-and-output-weights",
        "disable-bias-linear",     "norm-epsilon"};
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--", 2)) continue;
        const char *name = argv[i] + 2;
        size_t n = strcspn(name, "=");
        for (size_t k = 0; k < sizeof llama / sizeof llama[0]; k++)
            if (strlen(llama[k]) == n && !strncmp(name, llama[k], n)) {
                ptdp_log_error("--%s: ptdp plan models GPT's blocks (LayerNorm, GeLU MLP, "
                               "multi-head attention, learned positions) and not yet the Llama "
                               "family's; plan the GPT of the same FLOPs (docs/llama.md) or "
                               "measure the layouts with ptdp train",
                               llama[k]);
                return 2;
            }
    }
    return 0;
}

int ptdp_cmd_plan(int argc, char **argv) {
    plan_flags F = {.cluster = NULL,
                    .recompute_granularity = NULL,
                    .recompute_method = NULL,
                    .schedule = NULL,
                    .out = NULL,
                    .top = 20,
                    .threads = 1};
    ptdp_plan_job pj = ptdp_plan_job_default_params();
    ptdp_opt opts[64];
    const int nopts = plan_table(&F, &pj, opts, 64);
    if (refuse_llama_flags(argc, argv)) return 2;
    int parsed = ptdp__cli_parse(opts, nopts, argc, argv, usage);
    if (parsed >= 0) return parsed;
    if (F.calibrate) return ptdp__cli_plan_calibrate(F.out);
    int status = check_flags(&F, &pj);
    if (status) return status;
    char path[4096];
    cluster_path(F.cluster, path, sizeof path);
    ptdp_cluster c;
    if (ptdp_cluster_load(path, &c)) {
        ptdp_log_error("--cluster: %s", ptdp_last_error());
        return 2;
    }
    resolve_job(&F, &pj);
    ptdp_plan_pins pins;
    ptdp_stage_layout split;
    status = make_pins(&F, &pins, &split);
    return status ? status : search_and_print(&F, &c, &pj, &pins, &split);
}
