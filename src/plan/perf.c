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
    return (ptdp_plan_job){.layers = 0,
                           .h = 0,
                           .a = 0,
                           .ffn = 0,
                           .s = 0,
                           .vocab = 0,
                           .vocab_divisible_by = 128,
                           .global_batch = 0,
                           .precision = PTDP_PREC_FP32,
                           .schedule = -1,
                           .scatter_gather = 1,
                           .sequence_parallel = 0,
                           .zero = 0,
                           .overlap_grad_reduce = 1,
                           .uneven_splits = 1,
                           .recompute_method = PTDP_RECOMPUTE_UNIFORM,
                           .recompute_num_layers = 1,
                           .bucket_floats = 40000000,
                           .attn_saved_floats = NULL,
                           .attn_scratch_floats = 0};
}

double ptdp_plan_model_flops(const ptdp_plan_job *job, int64_t vocab_padded, int recompute) {
    return ptdp_model_flops((double)job->global_batch, (double)job->s, (double)job->layers,
                            (double)job->h, (double)vocab_padded,
                            !recompute ? PTDP_RECOMPUTE_NONE
                            : job->recompute_method == PTDP_RECOMPUTE_SELECTIVE
                                ? PTDP_RECOMPUTE_SELECTIVE
                                : PTDP_RECOMPUTE_UNIFORM);
}

int ptdp_plan_fp32_storage(const ptdp_cluster *c, const ptdp_plan_job *job) {
    return c->shared_node > 0 && job->precision != PTDP_PREC_FP32;
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
static int check_layout(const ptdp_cluster *c, const ptdp_plan_job *job, const ptdp_plan_layout *L,
                        int64_t ffn, int *m_out) {
    const int64_t t = L->t, p = L->p, d = L->d, v = L->v, b = L->b;
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
    if (job->a % t)
        return ptdp_errorf(PTDP_ECONFIG, "heads %lld not divisible by t=%lld", (long long)job->a,
                           (long long)t);
    if (job->h % t || ffn % t)
        return ptdp_errorf(PTDP_ECONFIG, "hidden %lld or ffn %lld not divisible by t=%lld",
                           (long long)job->h, (long long)ffn, (long long)t);
    if (job->sequence_parallel && t > 1 && job->s % t)
        return ptdp_errorf(PTDP_ECONFIG, "sequence parallelism: s=%lld not divisible by t=%lld",
                           (long long)job->s, (long long)t);
    if (ptdp_stage_layout_is_even(&L->stages) && job->layers % (p * v))
        return ptdp_errorf(PTDP_ECONFIG, "layers %lld not divisible by p x v = %lld",
                           (long long)job->layers, (long long)(p * v));
    const int lrc = ptdp_stage_layout_check(&L->stages, job->layers, (int)p, (int)v);
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
        job->recompute_method != PTDP_RECOMPUTE_SELECTIVE)
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

/* Memory of one pipeline rank at 16 bits (the paper's model). */
static void memory_16bit(const ptdp_plan_job *job, const ptdp_plan_layout *L,
                         const ptdp_schedule_params *sp, int rank, int64_t ffn, int64_t Vp,
                         double mem[PTDP_PMEM_COUNT], double *params) {
    const double w = ptdp_plan_precision_bytes(job->precision),
                 wg = job->precision == PTDP_PREC_FP16 ? 2.0 : 4.0;
    const int64_t t = L->t, h = job->h, s = job->s, b = L->b, stages = (int64_t)L->p * L->v;
    const int64_t k = job->recompute_num_layers > 0 ? job->recompute_num_layers : 1;
    int64_t Lmax = 0;
    const double N = (double)(s * b), sq = job->sequence_parallel && t > 1 ? (double)t : 1.0;
    /* the paper's activation bytes of one layer without recomputation; with
     * sequence parallelism the 10 s b h of the residual stream's tensors
     * (LayerNorm inputs, dropout masks) is split too: (s b h / t)(34 + 5 a s / h) */
    const double attn = N * (double)h * 5.0 * (double)(job->a * s) / (double)(h * t);
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
        ptdp_stage_layout_range(&L->stages, job->layers, L->p, L->v, (int)stage, &begin, &end);
        const int64_t Lc = end - begin;
        if (Lc > Lmax) Lmax = Lc;
        P += (double)Lc * layer_params(h, ffn, t);
        if (pre || post) P += (double)(Vp / t * h);
        if (pre) P += (double)(s * h);
        if (post) P += 2.0 * (double)h;
        double slot = 0;
        if (!L->recompute) {
            slot = (double)Lc * (full + wkeep);
        } else if (job->recompute_method == PTDP_RECOMPUTE_SELECTIVE) {
            slot = (double)Lc * (full - attn + wkeep); /* Korthikanti et al.: 34 s b h / t */
        } else if (job->recompute_method == PTDP_RECOMPUTE_BLOCK) {
            const int64_t rc = k < Lc ? k : Lc;
            slot = (double)rc * input + (double)(Lc - rc) * full;
        } else {
            slot = (double)((Lc + k - 1) / k) * input;
        }
        act += slot * ptdp_schedule_chunk_inflight(sp, rank, c);
        if (post) work += N * (double)(Vp / t) * (w + 4.0); /* logits and their fp32 softmax */
    }
    if (L->recompute) /* one group rerun (selective: one layer's attention) */
        work += job->recompute_method == PTDP_RECOMPUTE_SELECTIVE
                    ? attn
                    : (double)(k < Lmax ? k : Lmax) * full;
    if (L->p > 1) work += 4.0 * input; /* send and receive buffers */
    mem[PTDP_PMEM_WEIGHTS] = P * w;
    mem[PTDP_PMEM_GRADIENTS] = P * wg;
    mem[PTDP_PMEM_OPTIMIZER] = P * 12.0 / (job->zero ? (double)L->d : 1.0);
    mem[PTDP_PMEM_ACTIVATIONS] = act;
    mem[PTDP_PMEM_BUFFERS] = work;
    *params = P;
}

/* Memory of one pipeline rank in fp32 storage: memory.c's exact plan (of
 * fp32 runs, and of ptdp's CPU --bf16/--fp16 runs, which add fp32 master
 * weights). */
static int memory_fp32(const ptdp_plan_job *job, const ptdp_plan_layout *L,
                       const ptdp_schedule_params *sp, int rank, int64_t ffn, int64_t Vp,
                       double mem[PTDP_PMEM_COUNT], double *params) {
    ptdp_plan_rank r = ptdp_plan_rank_default_params();
    r.master_weights = job->precision != PTDP_PREC_FP32; /* ptdp's CPU --bf16/--fp16 */
    r.mlp16 = job->precision == PTDP_PREC_BF16 && job->bf16_mlp16;
    r.layers = job->layers;
    r.h = job->h;
    r.a = job->a;
    r.ffn = ffn;
    r.s = job->s;
    r.b = L->b;
    r.vocab_padded = Vp;
    r.max_positions = job->s;
    r.t = L->t;
    r.d = L->d;
    r.pp_rank = rank;
    r.sched = *sp;
    r.layout = L->stages;
    r.zero = job->zero;
    r.bucket_floats = job->bucket_floats;
    r.recompute = L->recompute ? job->recompute_method : PTDP_RECOMPUTE_NONE;
    r.recompute_num_layers = job->recompute_num_layers > 0 ? job->recompute_num_layers : 1;
    const int64_t al = job->a / L->t;
    r.attn_saved_floats = job->attn_saved_floats ? job->attn_saved_floats(job->s, L->b, al)
                                                 : L->b * al * job->s * job->s;
    r.attn_scratch_floats = job->attn_scratch_floats;
    r.sequence_parallel = job->sequence_parallel && L->t > 1;
    size_t bytes[PTDP_MEM_NCAT];
    int rc = ptdp_plan_rank_memory(&r, bytes);
    if (rc) return rc;
    mem[PTDP_PMEM_WEIGHTS] = (double)bytes[PTDP_MEM_WEIGHTS];
    mem[PTDP_PMEM_GRADIENTS] = (double)bytes[PTDP_MEM_GRADIENTS];
    mem[PTDP_PMEM_OPTIMIZER] = (double)bytes[PTDP_MEM_OPTIMIZER];
    mem[PTDP_PMEM_ACTIVATIONS] = (double)bytes[PTDP_MEM_ACTIVATIONS];
    mem[PTDP_PMEM_BUFFERS] = (double)(bytes[PTDP_MEM_WORKSPACE] + bytes[PTDP_MEM_PIPELINE] +
                                      bytes[PTDP_MEM_GRAD_SHARD] + bytes[PTDP_MEM_EVAL]);
    *params = (double)bytes[PTDP_MEM_WEIGHTS] / 4.0;
    return PTDP_OK;
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
    const int64_t ffn = job->ffn ? job->ffn : 4 * job->h;
    int m = 0;
    int rc = check_layout(c, job, L, ffn, &m);
    if (rc) return rc;
    const int t = L->t, p = L->p, d = L->d, v = L->v, dpn = c->devices_per_node;
    const int64_t mult = job->vocab_divisible_by * t;
    const int64_t Vp = (job->vocab + mult - 1) / mult * mult;
    /* w: bytes of a stored activation; wm: of one in a message; wg: of a
     * gradient. ptdp's CPU tables keep 16-bit values in fp32 storage with
     * fp32 gradients and send 16-bit messages (ptdp_plan_fp32_storage). */
    const int cpu16 = ptdp_plan_fp32_storage(c, job);
    const double wm = ptdp_plan_precision_bytes(job->precision), w = cpu16 ? 4.0 : wm,
                 wg = job->precision == PTDP_PREC_FP16 && !cpu16 ? 2.0 : 4.0;
    est->act_bytes = w;
    est->msg_bytes = wm;
    est->grad_bytes = wg;
    /* Processes sharing a node's C cores (shared_node = C): k ranks on the
     * node, each with max(1, C/k) threads, run at the node's rate times
     * min(1/k, 1/C) while they run; when k > C they also take turns (below). */
    const int64_t n_all = (int64_t)t * p * d, k_node = ptdp_plan_ranks_per_node(c, n_all);
    const int cores = c->shared_node;
    const double share = cores ? 1.0 / (double)(k_node > cores ? cores : k_node) : 1.0;
    const double peak = c->peak_flops[job->precision] * share;
    const double ew_bw = c->mem_bandwidth * c->elementwise_efficiency[job->precision] * share;
    const double h = (double)job->h, s = (double)job->s, b = (double)L->b, a = (double)job->a;
    const double N = s * b, hl = h / t, fl = (double)ffn / t, al = a / t, hd = h / a;
    /* links: the tensor group lives in a node; the data group spans nodes
     * once t*d exceeds one; adjacent pipeline stages sit t*d ranks apart */
    const double tp_bw = c->intra_bandwidth, tp_lat = c->intra_latency;
    const int dp_inter = dpn && (int64_t)t * d > dpn, pp_inter = dpn && (int64_t)t * d >= dpn;
    const double dp_bw = dp_inter ? c->inter_bandwidth : c->intra_bandwidth,
                 dp_lat = dp_inter ? c->inter_latency : c->intra_latency;
    const double pp_bw = pp_inter ? c->inter_bandwidth : c->intra_bandwidth,
                 pp_lat = pp_inter ? c->inter_latency : c->intra_latency;

    /* core attention forward: the paper's two batched GEMMs (scores Q K^T,
     * context P V), or where the description measured ptdp's flash attention,
     * its forward's share (a third) of the tile work at that rate: the
     * causal tiles of 128 (nt (nt + 1) / 2 of nt^2), and no scores in memory */
    const int flash = c->attention_flops[job->precision] > 0;
    const double attn_core =
        flash ? 4 * b * al * s * s * hd * ptdp_plan_flash_causal(job->s) /
                    (c->attention_flops[job->precision] * share)
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
    const int seqp = job->sequence_parallel && t > 1;
    const double Nr = seqp ? N / t : N;
    const double ew_bytes = w * (10 * Nr * h + 4 * S + 2 * N * fl) + (S + 2 * Nr * h);
    const double ew_f = ew_bytes / ew_bw;
    /* an all-reduce, or its reduce-scatter + all-gather halves: the same ring time */
    const double ar_act = allreduce_s(N * h * wm, t, tp_bw, tp_lat);
    const double tp_f = 2 * ar_act;
    /* ptdp's sequence-parallel backward gathers both LayerNorm outputs again */
    const double tp_b = tp_f + (seqp ? 2 * half_ring_s(N * h * wm, t, tp_bw, tp_lat) : 0);
    est->layer_gemm_fwd_s = gemm_f;
    est->layer_elementwise_fwd_s = ew_f;
    est->layer_tp_fwd_s = tp_f;
    est->gemm_efficiency = gemm_eff(c, N, fl, h);
    const double fwd = gemm_f + ew_f + tp_f;
    const double bwd = 2 * gemm_f + 2 * ew_f + tp_b; /* input and weight gradients */
    est->layer_fwd_s = fwd;
    /* selective recomputation reruns core attention only: its two s x s
     * GEMMs and the softmax/dropout over the scores */
    const double attn_f = attn_core + (w * 4 * S + S) / ew_bw;
    const int selective = L->recompute && job->recompute_method == PTDP_RECOMPUTE_SELECTIVE;
    const double rerun = selective ? attn_f : fwd;
    est->layer_bwd_s = bwd + (L->recompute ? rerun : 0);

    /* loss head (last stage; ptdp runs its backward inside the forward) and
     * embedding (first stage) */
    const double Vl = (double)Vp / t;
    const double head = 3 * gemm_s(c, peak, 1, N, Vl, h) + 6 * 4 * N * Vl / ew_bw +
                        3 * allreduce_s(N * 4, t, tp_bw, tp_lat) + ar_act + 8 * N * h * w / ew_bw;
    const double emb_f = 4 * N * h * w / ew_bw + ar_act, emb_b = 4 * N * h * w / ew_bw;
    est->head_s = head;
    est->embedding_s = emb_f + emb_b;

    /* one transfer between stages: [s, b, h] (1/t of it with scatter/gather,
     * then an all-gather in the tensor group; with sequence parallelism the
     * message is the 1/t shard and nothing is gathered) */
    const int sg = job->scatter_gather && t > 1 && !seqp;
    double p2p = 0;
    if (p > 1) {
        p2p = pp_lat + N * h * wm / (sg || seqp ? t : 1) / pp_bw;
        if (sg) p2p += half_ring_s(N * h * wm, t, tp_bw, tp_lat);
    }
    est->p2p_s = p2p;

    ptdp_schedule_params sp = ptdp_schedule_default_params();
    sp.p = p;
    sp.m = m;
    sp.v = v;
    sp.kind = job->schedule;
    sp.kind = ptdp_schedule_resolve_kind(&sp);
    /* zb-v's list scheduler plays the costs ptdp train gives it by default,
     * so the simulated lists are the ones the run executes */
    ptdp_schedule_flop_costs(job->s, job->h, ffn, &sp);
    est->schedule = sp.kind;
    est->m = m;
    est->vocab_padded = Vp;
    /* memory: the most loaded pipeline rank (the first holds the most
     * micro-batches, the last the loss head; with an uneven split any rank
     * may be the largest) */
    double best_total = -1;
    const int even = ptdp_stage_layout_is_even(&L->stages);
    for (int r = 0; r < p; r += (p > 2 && even ? p - 1 : 1)) {
        double mem[PTDP_PMEM_COUNT], P = 0, total = 0;
        if (job->precision == PTDP_PREC_FP32 || cpu16) {
            rc = memory_fp32(job, L, &sp, r, ffn, Vp, mem, &P);
            if (rc) return rc;
        } else {
            memory_16bit(job, L, &sp, r, ffn, Vp, mem, &P);
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

    if (!time_if_oom && est->memory_bytes > ptdp_plan_device_memory(c, n_all)) return PTDP_OK;

    /* the pipeline: every virtual stage's forward and backward in the simulator */
    const int stages = p * v;
    const int64_t k = job->recompute_num_layers > 0 ? job->recompute_num_layers : 1;
    double *sf = malloc(sizeof(double) * 3 * (size_t)stages);
    if (!sf) return ptdp_errorf(PTDP_ENOMEM, "planner: out of memory");
    double *sb = sf + stages, *sw = sf + 2 * stages;
    /* W of a zero-bubble schedule: the four weight GEMMs (and with sequence
     * parallelism the LayerNorm outputs gathered again) */
    const double wgt = gemm_s(c, peak, 1, N, 3 * hl, h) + gemm_s(c, peak, 1, N, h, hl) +
                       gemm_s(c, peak, 1, N, fl, h) + gemm_s(c, peak, 1, N, h, fl) +
                       (seqp ? 2 * half_ring_s(N * h * w, t, tp_bw, tp_lat) : 0);
    /* A stage's forward receives its input and sends its output (a backward
     * the gradients, the other way): in steady state each is a blocking
     * exchange with a neighbour that is itself computing, so both transfers
     * sit on the rank's timeline; the first and last stage have one. */
    int64_t rank_layers_max = 0;
    for (int r = 0; r < p; r++) {
        int64_t n = 0;
        for (int c2 = 0; c2 < v; c2++) {
            int64_t b0, e0;
            ptdp_stage_layout_range(&L->stages, job->layers, p, v, ptdp_schedule_stage(&sp, r, c2),
                                    &b0, &e0);
            n += e0 - b0;
        }
        if (n > rank_layers_max) rank_layers_max = n;
    }
    for (int st = 0; st < stages; st++) {
        int64_t b0, e0; /* this stage's layers: the split may be uneven */
        ptdp_stage_layout_range(&L->stages, job->layers, p, v, st, &b0, &e0);
        const int64_t Lc = e0 - b0;
        const int64_t rc_layers = !L->recompute ? 0
                                  : job->recompute_method == PTDP_RECOMPUTE_BLOCK
                                      ? (k < Lc ? k : Lc)
                                      : Lc;
        /* a neighbour on the same rank (zb-v's turn of the V) is no transfer */
        int r0 = -1, r1, r2 = -1, c0;
        ptdp_schedule_stage_owner(&sp, st, &r1, &c0);
        if (st > 0) ptdp_schedule_stage_owner(&sp, st - 1, &r0, &c0);
        if (st < stages - 1) ptdp_schedule_stage_owner(&sp, st + 1, &r2, &c0);
        const double xfers = p > 1 ? (st > 0 && r0 != r1) + (st < stages - 1 && r2 != r1) : 0;
        sf[st] =
            (double)Lc * fwd + (st == 0 ? emb_f : 0) + (st == stages - 1 ? head : 0) + xfers * p2p;
        sb[st] = (double)Lc * bwd + (double)rc_layers * rerun + (st == 0 ? emb_b : 0) + xfers * p2p;
        sw[st] = (double)Lc * wgt;
    }
    ptdp_schedule sched;
    rc = ptdp_schedule_init(&sched, &sp);
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
    if (cores && k_node > cores) {
        /* more ranks than cores: a waiting rank yields its core, so the node
         * finishes no sooner than all its ranks' work spread over C cores */
        double work = 0;
        for (int r = 0; r < p; r++) work += res.busy[r];
        work *= (double)k_node / (double)p / (double)cores;
        if (work > est->pipeline_s) est->pipeline_s = work;
    }
    ptdp_sim_result_free(&res);
    /* the last micro-batch's backward on the first rank: what an overlapped
     * reduction can hide behind */
    double last_bwd = 0;
    for (int c2 = 0; c2 < v; c2++) last_bwd += sb[ptdp_schedule_stage(&sp, 0, c2)];
    free(sf);

    /* data parallelism: all-reduce (or reduce-scatter + all-gather of the
     * weights under ZeRO-1) of the rank's gradients */
    const double P = est->params_per_device;
    double reduce =
        job->zero ? half_ring_s(P * wg, d, dp_bw, dp_lat) : allreduce_s(P * wg, d, dp_bw, dp_lat);
    const double gather = job->zero ? half_ring_s(P * w, d, dp_bw, dp_lat) : 0;
    est->dp_allreduce_s = reduce + gather;
    if (job->overlap_grad_reduce && d > 1) {
        const double buckets = ceil(P / (double)job->bucket_floats);
        const double hidden = reduce - last_bwd, last = reduce / (buckets < 1 ? 1 : buckets);
        reduce = hidden > last ? hidden : last;
    }
    est->comm_s[PTDP_COMM_DATA] = reduce + gather;
    /* tied embedding: first and last stage sum their copies' gradients */
    est->comm_s[PTDP_COMM_EMBEDDING] = /* none when one rank holds both (zb-v) */
        p > 1 && sp.kind != PTDP_SCHED_ZBV
            ? allreduce_s(Vl * h * wg, 2, c->inter_bandwidth, c->inter_latency)
            : 0;
    /* optimizer: read gradient, weight, m, v; write weight, m, v (and the
     * 16-bit copy); the gradient norm reads the gradients, zeroing writes them */
    /* ptdp's CPU 16-bit runs: AdamW on the fp32 master (28) writing the
     * rounded working copy in the same pass (4) */
    const double opt_bytes = (job->precision == PTDP_PREC_FP32 ? 28.0
                              : cpu16                          ? 32.0
                                                               : 24.0 + wg + w) +
                             2 * wg;
    est->optimizer_s = P / (job->zero ? d : 1) * opt_bytes / ew_bw;
    est->overhead_s = c->overhead_s;
    /* what the rank spends communicating inside the pipeline passes */
    const double per_mb =
        (double)rank_layers_max * (tp_f * (L->recompute && !selective ? 2 : 1) + tp_b);
    est->comm_s[PTDP_COMM_TENSOR] = m * per_mb;
    est->comm_s[PTDP_COMM_PIPELINE] = p > 1 ? 4.0 * m * v * p2p : 0;
    est->iteration_s = est->pipeline_s + est->comm_s[PTDP_COMM_DATA] +
                       est->comm_s[PTDP_COMM_EMBEDDING] + est->optimizer_s + est->overhead_s;
    est->model_flops = ptdp_plan_model_flops(job, Vp, L->recompute);
    est->tflops_per_device = est->model_flops / (est->iteration_s * (double)t * p * d) / 1e12;
    return PTDP_OK;
}

int ptdp_plan_estimate_layout(const ptdp_cluster *c, const ptdp_plan_job *job,
                              const ptdp_plan_layout *L, ptdp_plan_estimate *est) {
    return ptdp__plan_estimate(c, job, L, est, 1);
}
