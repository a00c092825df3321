/* perf.c - the planner's performance and memory model of one layout
 * (t, p, d, v, b, recomputation) of one job on one cluster: iteration time,
 * model TFLOP/s per device, bubble, time per communication kind, memory per
 * device. docs/planner.md writes every equation out; the names below follow
 * it.
 *
 * Time: a roofline per GEMM with a shape factor (tensor cores and CPU
 * kernels alike reach their best rate only on large dimensions), memory-bound
 * kernels at a fraction of the memory bandwidth, ring collectives with a
 * bandwidth and a latency term, the pipeline's forward and backward passes
 * timed by the schedule simulator (sim.c) with each virtual stage's own cost,
 * then the data-parallel reduction (partly hidden behind the last
 * micro-batch's backward when overlapped) and the optimizer step.
 * Memory: fp32 (what ptdp trains today) is memory.c's exact plan of every
 * pipeline rank; 16-bit is the paper's model (16 bytes per parameter with
 * fp16 gradients, 18 with bf16's fp32 gradients; activations of
 * s b h (10 + 24/t + 5 a s / (h t)) bytes per layer, (s b h / t)(34 + 5 a s
 * / h) with sequence parallelism, Korthikanti et al.).
 * Sequence parallelism: the all-reduces become reduce-scatter + all-gather
 * pairs (the same ring time), ptdp's backward gathers each LayerNorm output
 * once more (two all-gathers per layer), the element-wise work on the
 * residual stream and the pipeline messages shrink by t.
 *
 * Deliberately not here: link contention between collectives, kernel launch
 * latencies (the cluster's overhead_s stands for all fixed costs), overlap
 * of tensor-parallel communication with compute (Megatron of the paper does
 * not overlap it). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"

ptdp_plan_job ptdp_plan_job_default_params(void) {
    ptdp_plan_job pj = {.job = ptdp_job_default_params(),
                        .uneven_splits = 1,
                        .attn_saved_floats = NULL,
                        .attn_scratch_floats = 0,
                        .bf16_mlp16 = 0};
    pj.job.recompute = PTDP_RECOMPUTE_UNIFORM; /* what a layout that recomputes runs */
    pj.job.recompute_num_layers = 1;
    return pj;
}

int ptdp_plan_precision_of(const ptdp_job *job) {
    return job->dtype == PTDP_DTYPE_BF16   ? PTDP_PREC_BF16
           : job->dtype == PTDP_DTYPE_FP16 ? PTDP_PREC_FP16
                                           : PTDP_PREC_FP32;
}

double ptdp_plan_model_flops(const ptdp_plan_job *pj, int64_t vocab_padded, int recompute) {
    const ptdp_job *job = &pj->job;
    return ptdp_model_flops((double)job->global_batch, (double)job->model.seq_length,
                            (double)job->model.num_layers, (double)job->model.hidden,
                            (double)vocab_padded,
                            !recompute                                   ? PTDP_RECOMPUTE_NONE
                            : job->recompute == PTDP_RECOMPUTE_SELECTIVE ? PTDP_RECOMPUTE_SELECTIVE
                                                                         : PTDP_RECOMPUTE_UNIFORM);
}

int ptdp_plan_fp32_storage(const ptdp_cluster *c, const ptdp_plan_job *pj) {
    return c->shared_node > 0 && pj->job.dtype != PTDP_DTYPE_FP32;
}

/* Ring all-reduce of `bytes` over n devices joined by a link of bus
 * bandwidth bw and per-step latency lat: 2 (n-1)/n bytes/bw + 2 (n-1) lat. */
static double allreduce_s(double bytes, int n, double bw, double lat) {
    if (n <= 1) return 0.0;
    return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * lat;
}
/* Reduce-scatter or all-gather: half of a ring all-reduce. */
static double half_ring_s(double bytes, int n, double bw, double lat) {
    return 0.5 * allreduce_s(bytes, n, bw, lat);
}

/* A GEMM's shape factor: g(x) = x / (x + x_half) for each dimension. */
static double gemm_eff(const ptdp_cluster *c, double M, double N, double K) {
    const double x0 = c->gemm_half_dim;
    return c->gemm_efficiency * (M / (M + x0)) * (N / (N + x0)) * (K / (K + x0));
}
/* batch x [M, K] x [K, N] at the precision's peak. */
static double gemm_s(const ptdp_cluster *c, double peak, double batch, double M, double N,
                     double K) {
    return 2.0 * batch * M * N * K / (peak * gemm_eff(c, M, N, K));
}

/* Local parameters of one transformer layer on one tensor rank (memory.c's
 * twelve tensors). */
static double layer_params(int64_t h, int64_t ffn, int64_t t) {
    return (double)(3 * h / t * h + 3 * h / t + h * (h / t) + h + ffn / t * h + ffn / t +
                    h * (ffn / t) + h + 4 * h);
}

/* Checks what makes a layout impossible, with the search's reasons. */
static int check_layout(const ptdp_cluster *c, const ptdp_plan_job *pj, const ptdp_plan_layout *L,
                        int64_t ffn, int *m_out) {
    const ptdp_job *job = &pj->job;
    const int64_t t = L->t, p = L->p, d = L->d, v = L->v, b = L->b;
    const int64_t l = job->model.num_layers, h = job->model.hidden, a = job->model.heads;
    if (t < 1 || p < 1 || d < 1 || v < 1 || b < 1)
        return ptdp_errorf(PTDP_ECONFIG, "sizes must be positive");
    if (c->devices_per_node && t > c->devices_per_node)
        return ptdp_errorf(PTDP_ECONFIG, "t=%lld exceeds a node (%d devices)", (long long)t,
                           c->devices_per_node);
    if (c->devices_per_node && c->devices_per_node % t)
        return ptdp_errorf(PTDP_ECONFIG,
                           "t=%lld does not divide a node of %d devices (a tensor group would "
                           "span two nodes)",
                           (long long)t, c->devices_per_node);
    if (a % t)
        return ptdp_errorf(PTDP_ECONFIG, "heads %lld not divisible by t=%lld", (long long)a,
                           (long long)t);
    if (h % t || ffn % t)
        return ptdp_errorf(PTDP_ECONFIG, "hidden %lld or ffn %lld not divisible by t=%lld",
                           (long long)h, (long long)ffn, (long long)t);
    if (job->sequence_parallel && t > 1 && job->model.seq_length % t)
        return ptdp_errorf(PTDP_ECONFIG, "sequence parallelism: s=%lld not divisible by t=%lld",
                           (long long)job->model.seq_length, (long long)t);
    if (ptdp_stage_layout_is_even(&L->stages) && l % (p * v))
        return ptdp_errorf(PTDP_ECONFIG, "layers %lld not divisible by p x v = %lld", (long long)l,
                           (long long)(p * v));
    const int lrc = ptdp_stage_layout_check(&L->stages, l, (int)p, (int)v);
    if (lrc != PTDP_OK) return lrc;
    if (job->global_batch % (b * d))
        return ptdp_errorf(PTDP_ECONFIG, "batch %lld not divisible by b x d = %lld",
                           (long long)job->global_batch, (long long)(b * d));
    const int64_t m = job->global_batch / (b * d);
    if (m > 1000000)
        return ptdp_errorf(PTDP_ECONFIG, "too many micro-batches (%lld)", (long long)m);
    const int kind = job->schedule >= 0 ? job->schedule
                     : v > 1            ? PTDP_SCHED_INTERLEAVED
                                        : PTDP_SCHED_1F1B;
    if (kind == PTDP_SCHED_ZBV && (p < 2 || v != 2))
        return ptdp_errorf(PTDP_ECONFIG, "zb-v needs p >= 2 and v = 2 (got p=%lld, v=%lld)",
                           (long long)p, (long long)v);
    if ((kind == PTDP_SCHED_ZBH1 || kind == PTDP_SCHED_ZBV) && L->recompute &&
        job->recompute != PTDP_RECOMPUTE_SELECTIVE)
        return ptdp_errorf(PTDP_ECONFIG, "%s keeps activations until W: no full recomputation",
                           ptdp_schedule_kind_name(kind));
    if (v > 1 && p == 1) return ptdp_errorf(PTDP_ECONFIG, "v=%lld needs p > 1", (long long)v);
    if (v > 1 && kind != PTDP_SCHED_INTERLEAVED && kind != PTDP_SCHED_ZBV)
        return ptdp_errorf(PTDP_ECONFIG, "v=%lld needs the interleaved schedule", (long long)v);
    if (v == 1 && kind == PTDP_SCHED_INTERLEAVED)
        return ptdp_errorf(PTDP_ECONFIG, "the interleaved schedule needs v > 1");
    if (kind == PTDP_SCHED_INTERLEAVED && m % p)
        return ptdp_errorf(PTDP_ECONFIG,
                           "interleaved: micro-batches m=%lld not a multiple of p=%lld",
                           (long long)m, (long long)p);
    *m_out = (int)m;
    return PTDP_OK;
}

/* One layout of the job and what every step of its estimate reads. */
typedef struct {
    const ptdp_cluster *c;
    const ptdp_plan_job *pj;
    const ptdp_plan_layout *L;
    ptdp_job job;            /* the job at this layout, the model finished (Vp) */
    ptdp_schedule_params sp; /* its schedule, as the run builds it */
    int prec, m, cpu16, seqp, cores;
    int64_t ffn, Vp, n_all, k_node;
    /* the rates a rank of this layout gets; w: bytes of a stored activation,
     * wm: of one in a message, wg: of a gradient */
    double share, peak, ew_bw, w, wm, wg;
    double tp_bw, tp_lat, dp_bw, dp_lat, pp_bw, pp_lat;
    /* one layer, one micro-batch, one device; the loss head, the embedding,
     * one transfer between stages */
    double fwd, bwd, rerun, tp_f, tp_b, wgt, head, emb_f, emb_b, p2p;
    int selective;
} layout_est;

/* The job at layout L (check_layout passed): its sizes set, the
 * recomputation the layout asks for, the model's derived sizes for its t. */
static int layout_job(const ptdp_plan_job *pj, const ptdp_plan_layout *L, int m, ptdp_job *j) {
    *j = pj->job;
    j->t = L->t, j->p = L->p, j->d = L->d, j->v = L->v, j->micro_batch = L->b;
    j->global_batch = (int64_t)m * L->b * L->d;
    j->stages = L->stages;
    j->recompute = L->recompute ? pj->job.recompute : PTDP_RECOMPUTE_NONE;
    j->recompute_num_layers = pj->job.recompute_num_layers > 0 ? pj->job.recompute_num_layers : 1;
    j->model.max_positions = j->model.seq_length;
    return ptdp_gpt_config_finish(&j->model, j->vocab_divisible_by, L->t);
}

/* Step 1: the layout's job, schedule, the rates its ranks run at and the
 * links its groups use. */
static int setup(layout_est *x, const ptdp_cluster *c, const ptdp_plan_job *pj,
                 const ptdp_plan_layout *L) {
    memset(x, 0, sizeof *x);
    x->c = c, x->pj = pj, x->L = L;
    x->ffn = pj->job.model.ffn_hidden ? pj->job.model.ffn_hidden : 4 * pj->job.model.hidden;
    int rc = check_layout(c, pj, L, x->ffn, &x->m);
    if (rc) return rc;
    rc = layout_job(pj, L, x->m, &x->job);
    if (rc) return rc;
    x->Vp = x->job.model.vocab_padded;
    x->prec = ptdp_plan_precision_of(&pj->job);
    const int t = L->t, p = L->p, d = L->d, dpn = c->devices_per_node;
    /* ptdp's CPU tables keep 16-bit values in fp32 storage with fp32
     * gradients and send 16-bit messages (ptdp_plan_fp32_storage) */
    x->cpu16 = ptdp_plan_fp32_storage(c, pj);
    x->wm = ptdp_plan_precision_bytes(x->prec);
    x->w = x->cpu16 ? 4.0 : x->wm;
    x->wg = x->prec == PTDP_PREC_FP16 && !x->cpu16 ? 2.0 : 4.0;
    /* Processes sharing a node's C cores (shared_node = C): k ranks on the
     * node, each with max(1, C/k) threads, run at the node's rate times
     * min(1/k, 1/C) while they run; when k > C they also take turns
     * (simulate_pipeline). */
    x->n_all = (int64_t)t * p * d;
    x->k_node = ptdp_plan_ranks_per_node(c, x->n_all);
    x->cores = c->shared_node;
    x->share = x->cores ? 1.0 / (double)(x->k_node > x->cores ? x->cores : x->k_node) : 1.0;
    x->peak = c->peak_flops[x->prec] * x->share;
    x->ew_bw = c->mem_bandwidth * c->elementwise_efficiency[x->prec] * x->share;
    /* links: the tensor group lives in a node; the data group spans nodes
     * once t*d exceeds one; adjacent pipeline stages sit t*d ranks apart */
    x->tp_bw = c->intra_bandwidth, x->tp_lat = c->intra_latency;
    const int dp_inter = dpn && (int64_t)t * d > dpn, pp_inter = dpn && (int64_t)t * d >= dpn;
    x->dp_bw = dp_inter ? c->inter_bandwidth : c->intra_bandwidth;
    x->dp_lat = dp_inter ? c->inter_latency : c->intra_latency;
    x->pp_bw = pp_inter ? c->inter_bandwidth : c->intra_bandwidth;
    x->pp_lat = pp_inter ? c->inter_latency : c->intra_latency;
    x->seqp = pj->job.sequence_parallel && t > 1;
    x->selective = L->recompute && pj->job.recompute == PTDP_RECOMPUTE_SELECTIVE;
    /* zb-v's list scheduler plays the costs ptdp train gives it by default,
     * so the simulated lists are the ones the run executes */
    x->sp = ptdp_schedule_default_params();
    x->sp.p = p;
    x->sp.m = x->m;
    x->sp.v = L->v;
    x->sp.kind = pj->job.schedule;
    x->sp.kind = ptdp_schedule_resolve_kind(&x->sp);
    ptdp_schedule_flop_costs(pj->job.model.seq_length, pj->job.model.hidden, x->ffn, &x->sp);
    return PTDP_OK;
}

/* Step 2: one layer's forward and backward, the loss head, the embedding
 * and a transfer between stages (docs/planner.md's terms, into est). */
static void layer_costs(layout_est *x, ptdp_plan_estimate *est) {
    const ptdp_cluster *c = x->c;
    const ptdp_job *job = &x->pj->job;
    const int t = x->L->t, p = x->L->p, prec = x->prec;
    const double peak = x->peak, ew_bw = x->ew_bw, w = x->w, wm = x->wm;
    const double h = (double)job->model.hidden, s = (double)job->model.seq_length,
                 b = (double)x->L->b, a = (double)job->model.heads;
    const double N = s * b, hl = h / t, fl = (double)x->ffn / t, al = a / t, hd = h / a;
    /* core attention forward: the paper's two batched GEMMs (scores Q K^T,
     * context P V), or where the description measured ptdp's flash attention,
     * its forward's share (a third) of the tile work at that rate: the
     * causal tiles of 128 (nt (nt + 1) / 2 of nt^2), and no scores in memory */
    const int flash = c->attention_flops[prec] > 0;
    const double attn_core =
        flash ? 4 * b * al * s * s * hd * ptdp_plan_flash_causal(job->model.seq_length) /
                    (c->attention_flops[prec] * x->share)
              : gemm_s(c, peak, b * al, s, s, hd) + gemm_s(c, peak, b * al, s, hd, s);
    est->layer_attention_fwd_s = attn_core;
    /* one layer, one micro-batch, one device: forward */
    const double gemm_f = gemm_s(c, peak, 1, N, 3 * hl, h) + /* QKV, column-parallel */
                          attn_core +                        /* scores and context */
                          gemm_s(c, peak, 1, N, h, hl) +     /* attention out, row-parallel */
                          gemm_s(c, peak, 1, N, fl, h) +     /* MLP in */
                          gemm_s(c, peak, 1, N, h, fl);      /* MLP out */
    const double S = flash ? 0 : b * al * s * s; /* attention scores in memory on this device */
    /* sequence parallelism: the residual stream's element-wise work (LayerNorms,
     * dropouts, adds) on s/t positions */
    const double Nr = x->seqp ? N / t : N;
    const double ew_bytes = w * (10 * Nr * h + 4 * S + 2 * N * fl) + (S + 2 * Nr * h);
    const double ew_f = ew_bytes / ew_bw;
    /* an all-reduce, or its reduce-scatter + all-gather halves: the same ring time */
    const double ar_act = allreduce_s(N * h * wm, t, x->tp_bw, x->tp_lat);
    x->tp_f = 2 * ar_act;
    /* ptdp's sequence-parallel backward gathers both LayerNorm outputs again */
    x->tp_b = x->tp_f + (x->seqp ? 2 * half_ring_s(N * h * wm, t, x->tp_bw, x->tp_lat) : 0);
    est->layer_gemm_fwd_s = gemm_f;
    est->layer_elementwise_fwd_s = ew_f;
    est->layer_tp_fwd_s = x->tp_f;
    est->gemm_efficiency = gemm_eff(c, N, fl, h);
    x->fwd = gemm_f + ew_f + x->tp_f;
    x->bwd = 2 * gemm_f + 2 * ew_f + x->tp_b; /* input and weight gradients */
    est->layer_fwd_s = x->fwd;
    /* selective recomputation reruns core attention only: its two s x s
     * GEMMs and the softmax/dropout over the scores */
    const double attn_f = attn_core + (w * 4 * S + S) / ew_bw;
    x->rerun = x->selective ? attn_f : x->fwd;
    est->layer_bwd_s = x->bwd + (x->L->recompute ? x->rerun : 0);

    /* loss head (last stage; ptdp runs its backward inside the forward) and
     * embedding (first stage) */
    const double Vl = (double)x->Vp / t;
    x->head = 3 * gemm_s(c, peak, 1, N, Vl, h) + 6 * 4 * N * Vl / ew_bw +
              3 * allreduce_s(N * 4, t, x->tp_bw, x->tp_lat) + ar_act + 8 * N * h * w / ew_bw;
    x->emb_f = 4 * N * h * w / ew_bw + ar_act, x->emb_b = 4 * N * h * w / ew_bw;
    est->head_s = x->head;
    est->embedding_s = x->emb_f + x->emb_b;

    /* one transfer between stages: [s, b, h] (1/t of it with scatter/gather,
     * then an all-gather in the tensor group; with sequence parallelism the
     * message is the 1/t shard and nothing is gathered) */
    const int sg = job->scatter_gather && t > 1 && !x->seqp;
    x->p2p = 0;
    if (p > 1) {
        x->p2p = x->pp_lat + N * h * wm / (sg || x->seqp ? t : 1) / x->pp_bw;
        if (sg) x->p2p += half_ring_s(N * h * wm, t, x->tp_bw, x->tp_lat);
    }
    est->p2p_s = x->p2p;
    /* W of a zero-bubble schedule: the four weight GEMMs (and with sequence
     * parallelism the LayerNorm outputs gathered again) */
    x->wgt = gemm_s(c, peak, 1, N, 3 * hl, h) + gemm_s(c, peak, 1, N, h, hl) +
             gemm_s(c, peak, 1, N, fl, h) + gemm_s(c, peak, 1, N, h, fl) +
             (x->seqp ? 2 * half_ring_s(N * h * w, t, x->tp_bw, x->tp_lat) : 0);
}

/* Memory of pipeline rank `rank` at 16 bits (the paper's model). */
static void memory_16bit(const layout_est *x, int rank, double mem[PTDP_PMEM_COUNT],
                         double *params) {
    const ptdp_job *job = &x->pj->job;
    const ptdp_plan_layout *L = x->L;
    const ptdp_schedule_params *sp = &x->sp;
    const double w = ptdp_plan_precision_bytes(x->prec), wg = x->prec == PTDP_PREC_FP16 ? 2.0 : 4.0;
    const int64_t t = L->t, h = job->model.hidden, s = job->model.seq_length, b = L->b,
                  stages = (int64_t)L->p * L->v, ffn = x->ffn, Vp = x->Vp;
    const int64_t k = job->recompute_num_layers > 0 ? job->recompute_num_layers : 1;
    int64_t Lmax = 0;
    const double N = (double)(s * b), sq = x->seqp ? (double)t : 1.0;
    /* the paper's activation bytes of one layer without recomputation; with
     * sequence parallelism the 10 s b h of the residual stream's tensors
     * (LayerNorm inputs, dropout masks) is split too: (s b h / t)(34 + 5 a s / h) */
    const double attn = N * (double)h * 5.0 * (double)(job->model.heads * s) / (double)(h * t);
    const double full = N * (double)h * (10.0 / sq + 24.0 / (double)t) + attn;
    const double input = N * (double)h * w / sq;
    double P = 0, act = 0, work = 0;
    /* zero-bubble schedules keep the weight GEMMs' output gradients from B
     * to W: N (h + ffn/t + 3h/t) per layer (the attention output's N h in
     * the layer's xm, except with sequence parallelism) */
    const double wkeep = ptdp_schedule_splits_backward(sp)
                             ? N * ((double)h + (double)(ffn + 3 * h) / (double)t) * w +
                                   (sq > 1 ? N * (double)h * w : 0)
                             : 0;
    for (int c = 0; c < L->v; c++) {
        const int64_t stage = ptdp_schedule_stage(sp, rank, c);
        const int pre = stage == 0, post = stage == stages - 1;
        int64_t begin, end;
        ptdp_stage_layout_range(&L->stages, job->model.num_layers, L->p, L->v, (int)stage, &begin,
                                &end);
        const int64_t Lc = end - begin;
        if (Lc > Lmax) Lmax = Lc;
        P += (double)Lc * layer_params(h, ffn, t);
        if (pre || post) P += (double)(Vp / t * h);
        if (pre) P += (double)(s * h);
        if (post) P += 2.0 * (double)h;
        double slot = 0;
        if (!L->recompute) {
            slot = (double)Lc * (full + wkeep);
        } else if (job->recompute == PTDP_RECOMPUTE_SELECTIVE) {
            slot = (double)Lc * (full - attn + wkeep); /* Korthikanti et al.: 34 s b h / t */
        } else if (job->recompute == PTDP_RECOMPUTE_BLOCK) {
            const int64_t rc = k < Lc ? k : Lc;
            slot = (double)rc * input + (double)(Lc - rc) * full;
        } else {
            slot = (double)((Lc + k - 1) / k) * input;
        }
        act += slot * ptdp_schedule_chunk_inflight(sp, rank, c);
        if (post) work += N * (double)(Vp / t) * (w + 4.0); /* logits and their fp32 softmax */
    }
    if (L->recompute) /* one group rerun (selective: one layer's attention) */
        work += job->recompute == PTDP_RECOMPUTE_SELECTIVE ? attn
                                                           : (double)(k < Lmax ? k : Lmax) * full;
    if (L->p > 1) work += 4.0 * input; /* send and receive buffers */
    mem[PTDP_PMEM_WEIGHTS] = P * w;
    mem[PTDP_PMEM_GRADIENTS] = P * wg;
    mem[PTDP_PMEM_OPTIMIZER] = P * 12.0 / (job->distributed_optimizer ? (double)L->d : 1.0);
    mem[PTDP_PMEM_ACTIVATIONS] = act;
    mem[PTDP_PMEM_BUFFERS] = work;
    *params = P;
}

/* Memory of pipeline rank `rank` in fp32 storage: memory.c's exact plan of
 * the layout's job (of fp32 runs, and of ptdp's CPU --bf16/--fp16 runs,
 * which add fp32 master weights), with the CPU backend's numbers. */
static int memory_fp32(const layout_est *x, int rank, double mem[PTDP_PMEM_COUNT], double *params) {
    const ptdp_plan_job *pj = x->pj;
    const int64_t s = pj->job.model.seq_length, al = pj->job.model.heads / x->L->t, b = x->L->b;
    ptdp_job j = x->job;
    j.schedule = x->sp.kind;
    j.zb_costs[0] = x->sp.cost_f, j.zb_costs[1] = x->sp.cost_b, j.zb_costs[2] = x->sp.cost_w;
    const ptdp_plan_backend be = {.attn_saved_floats = pj->attn_saved_floats
                                                           ? pj->attn_saved_floats(s, b, al)
                                                           : b * al * s * s,
                                  .attn_scratch_floats = pj->attn_scratch_floats,
                                  .mlp16 = x->prec == PTDP_PREC_BF16 && pj->bf16_mlp16};
    size_t bytes[PTDP_MEM_NCAT];
    int rc = ptdp_plan_rank_memory(&j, rank, 0, &be, bytes);
    if (rc) return rc;
    mem[PTDP_PMEM_WEIGHTS] = (double)bytes[PTDP_MEM_WEIGHTS];
    mem[PTDP_PMEM_GRADIENTS] = (double)bytes[PTDP_MEM_GRADIENTS];
    mem[PTDP_PMEM_OPTIMIZER] = (double)bytes[PTDP_MEM_OPTIMIZER];
    mem[PTDP_PMEM_ACTIVATIONS] = (double)bytes[PTDP_MEM_ACTIVATIONS];
    mem[PTDP_PMEM_BUFFERS] =
        (double)(bytes[PTDP_MEM_WORKSPACE] + bytes[PTDP_MEM_PIPELINE] + bytes[PTDP_MEM_GRAD_SHARD]);
    *params = (double)bytes[PTDP_MEM_WEIGHTS] / 4.0;
    return PTDP_OK;
}

/* Step 3: memory per device, of the most loaded pipeline rank (the first
 * holds the most micro-batches, the last the loss head; with an uneven
 * split any rank may be the largest). */
static int memory(const layout_est *x, ptdp_plan_estimate *est) {
    const int p = x->L->p;
    double best_total = -1;
    const int even = ptdp_stage_layout_is_even(&x->L->stages);
    for (int r = 0; r < p; r += (p > 2 && even ? p - 1 : 1)) {
        double mem[PTDP_PMEM_COUNT], P = 0, total = 0;
        if (x->prec == PTDP_PREC_FP32 || x->cpu16) {
            const int rc = memory_fp32(x, r, mem, &P);
            if (rc) return rc;
        } else {
            memory_16bit(x, r, mem, &P);
        }
        for (int i = 0; i < PTDP_PMEM_COUNT; i++) total += mem[i];
        if (total > best_total) {
            best_total = total;
            memcpy(est->memory, mem, sizeof mem);
            est->params_per_device = P;
        }
        if (p == 1) break;
    }
    est->memory_bytes = best_total;
    return PTDP_OK;
}

/* Step 4: the pipeline, every virtual stage's forward and backward in the
 * simulator; *last_bwd: the last micro-batch's backward on the first rank,
 * what an overlapped reduction can hide behind. */
static int simulate_pipeline(const layout_est *x, ptdp_plan_estimate *est, double *last_bwd) {
    const ptdp_plan_layout *L = x->L;
    const ptdp_schedule_params *sp = &x->sp;
    const int64_t layers = x->pj->job.model.num_layers;
    const int p = L->p, v = L->v, stages = p * v;
    const int64_t k = x->pj->job.recompute_num_layers > 0 ? x->pj->job.recompute_num_layers : 1;
    double *sf = malloc(sizeof(double) * 3 * (size_t)stages);
    if (!sf) return ptdp_errorf(PTDP_ENOMEM, "planner: out of memory");
    double *sb = sf + stages, *sw = sf + 2 * stages;
    /* A stage's forward receives its input and sends its output (a backward
     * the gradients, the other way): in steady state each is a blocking
     * exchange with a neighbour that is itself computing, so both transfers
     * sit on the rank's timeline; the first and last stage have one. */
    for (int st = 0; st < stages; st++) {
        int64_t b0, e0; /* this stage's layers: the split may be uneven */
        ptdp_stage_layout_range(&L->stages, layers, p, v, st, &b0, &e0);
        const int64_t Lc = e0 - b0;
        const int64_t rc_layers = !L->recompute                                  ? 0
                                  : x->pj->job.recompute == PTDP_RECOMPUTE_BLOCK ? (k < Lc ? k : Lc)
                                                                                 : Lc;
        /* a neighbour on the same rank (zb-v's turn of the V) is no transfer */
        int r0 = -1, r1, r2 = -1, c0;
        ptdp_schedule_stage_owner(sp, st, &r1, &c0);
        if (st > 0) ptdp_schedule_stage_owner(sp, st - 1, &r0, &c0);
        if (st < stages - 1) ptdp_schedule_stage_owner(sp, st + 1, &r2, &c0);
        const double xfers = p > 1 ? (st > 0 && r0 != r1) + (st < stages - 1 && r2 != r1) : 0;
        sf[st] = (double)Lc * x->fwd + (st == 0 ? x->emb_f : 0) + (st == stages - 1 ? x->head : 0) +
                 xfers * x->p2p;
        sb[st] = (double)Lc * x->bwd + (double)rc_layers * x->rerun + (st == 0 ? x->emb_b : 0) +
                 xfers * x->p2p;
        sw[st] = (double)Lc * x->wgt;
    }
    ptdp_schedule sched;
    int rc = ptdp_schedule_init(&sched, sp);
    ptdp_sim_result res;
    if (rc == PTDP_OK) {
        /* per-stage costs only (the scalar ones, zero-initialised, are unused) */
        const ptdp_sim_costs costs = {
            .stage_forward = sf, .stage_backward = sb, .stage_weight = sw};
        rc = ptdp_sim_run(&sched, &costs, &res);
        ptdp_schedule_free(&sched);
    }
    if (rc) {
        free(sf);
        return rc;
    }
    est->pipeline_s = res.makespan;
    est->bubble_fraction = res.bubble_fraction;
    if (x->cores && x->k_node > x->cores) {
        /* more ranks than cores: a waiting rank yields its core, so the node
         * finishes no sooner than all its ranks' work spread over C cores */
        double work = 0;
        for (int r = 0; r < p; r++) work += res.busy[r];
        work *= (double)x->k_node / (double)p / (double)x->cores;
        if (work > est->pipeline_s) est->pipeline_s = work;
    }
    ptdp_sim_result_free(&res);
    *last_bwd = 0;
    for (int c2 = 0; c2 < v; c2++) *last_bwd += sb[ptdp_schedule_stage(sp, 0, c2)];
    free(sf);
    return PTDP_OK;
}

/* Step 5: around the pipeline: the data-parallel reduction (partly hidden
 * behind the last backward), the tied embedding, the optimizer, the fixed
 * overhead; the iteration and its model TFLOP/s. */
static void iteration(const layout_est *x, ptdp_plan_estimate *est, double last_bwd) {
    const ptdp_cluster *c = x->c;
    const ptdp_job *job = &x->pj->job;
    const ptdp_plan_layout *L = x->L;
    const int t = L->t, p = L->p, d = L->d, v = L->v, m = x->m;
    const double w = x->w, wg = x->wg, h = (double)job->model.hidden, Vl = (double)x->Vp / t;
    /* data parallelism: all-reduce (or reduce-scatter + all-gather of the
     * weights under ZeRO-1) of the rank's gradients */
    const double P = est->params_per_device;
    const int zero = job->distributed_optimizer;
    double reduce = zero ? half_ring_s(P * wg, d, x->dp_bw, x->dp_lat)
                         : allreduce_s(P * wg, d, x->dp_bw, x->dp_lat);
    const double gather = zero ? half_ring_s(P * w, d, x->dp_bw, x->dp_lat) : 0;
    est->dp_allreduce_s = reduce + gather;
    if (job->overlap_grad_reduce && d > 1) {
        const double buckets = ceil(P / (double)job->ddp_bucket_size);
        const double hidden = reduce - last_bwd, last = reduce / (buckets < 1 ? 1 : buckets);
        reduce = hidden > last ? hidden : last;
    }
    est->comm_s[PTDP_COMM_DATA] = reduce + gather;
    /* tied embedding: first and last stage sum their copies' gradients */
    est->comm_s[PTDP_COMM_EMBEDDING] = /* none when one rank holds both (zb-v) */
        p > 1 && x->sp.kind != PTDP_SCHED_ZBV
            ? allreduce_s(Vl * h * wg, 2, c->inter_bandwidth, c->inter_latency)
            : 0;
    /* optimizer: read gradient, weight, m, v; write weight, m, v (and the
     * 16-bit copy); the gradient norm reads the gradients, zeroing writes them */
    /* ptdp's CPU 16-bit runs: AdamW on the fp32 master (28) writing the
     * rounded working copy in the same pass (4) */
    const double opt_bytes = (x->prec == PTDP_PREC_FP32 ? 28.0
                              : x->cpu16                ? 32.0
                                                        : 24.0 + wg + w) +
                             2 * wg;
    est->optimizer_s = P / (zero ? d : 1) * opt_bytes / x->ew_bw;
    est->overhead_s = c->overhead_s;
    /* what the rank spends communicating inside the pipeline passes */
    int64_t rank_layers_max = 0;
    for (int r = 0; r < p; r++) {
        int64_t n = 0;
        for (int c2 = 0; c2 < v; c2++) {
            int64_t b0, e0;
            ptdp_stage_layout_range(&L->stages, job->model.num_layers, p, v,
                                    ptdp_schedule_stage(&x->sp, r, c2), &b0, &e0);
            n += e0 - b0;
        }
        if (n > rank_layers_max) rank_layers_max = n;
    }
    const double per_mb =
        (double)rank_layers_max * (x->tp_f * (L->recompute && !x->selective ? 2 : 1) + x->tp_b);
    est->comm_s[PTDP_COMM_TENSOR] = m * per_mb;
    est->comm_s[PTDP_COMM_PIPELINE] = p > 1 ? 4.0 * m * v * x->p2p : 0;
    est->iteration_s = est->pipeline_s + est->comm_s[PTDP_COMM_DATA] +
                       est->comm_s[PTDP_COMM_EMBEDDING] + est->optimizer_s + est->overhead_s;
    est->model_flops = ptdp_plan_model_flops(x->pj, x->Vp, L->recompute);
    est->tflops_per_device = est->model_flops / (est->iteration_s * (double)t * p * d) / 1e12;
}

double ptdp_plan_flash_causal(int64_t s) {
    const double sd = (double)s, tile = sd < 128 ? sd : 128, nt = ceil(sd / tile);
    return fmin(1.0, nt * (nt + 1) / 2 * tile * tile / (sd * sd));
}

/* time_if_oom 0: stop after the memory model when the layout does not fit
 * (the search needs no time for a rejected layout). */
int ptdp__plan_estimate(const ptdp_cluster *c, const ptdp_plan_job *job, const ptdp_plan_layout *L,
                        ptdp_plan_estimate *est, int time_if_oom) {
    memset(est, 0, sizeof *est);
    layout_est x;
    int rc = setup(&x, c, job, L);
    if (rc) return rc;
    est->act_bytes = x.w;
    est->msg_bytes = x.wm;
    est->grad_bytes = x.wg;
    est->schedule = x.sp.kind;
    est->m = x.m;
    est->vocab_padded = x.Vp;
    layer_costs(&x, est);
    rc = memory(&x, est);
    if (rc) return rc;
    if (!time_if_oom && est->memory_bytes > ptdp_plan_device_memory(c, x.n_all)) return PTDP_OK;
    double last_bwd = 0;
    rc = simulate_pipeline(&x, est, &last_bwd);
    if (rc) return rc;
    iteration(&x, est, last_bwd);
    return PTDP_OK;
}

int ptdp_plan_estimate_layout(const ptdp_cluster *c, const ptdp_plan_job *job,
                              const ptdp_plan_layout *L, ptdp_plan_estimate *est) {
    return ptdp__plan_estimate(c, job, L, est, 1);
}
