/* cmd_plan_calibrate.c - `ptdp plan --calibrate`: measures what the
 * planner's model needs on the machine at hand and writes a cluster
 * description (the shipped clusters/local.json came from it):
 *   - GEMM rate by shape: ptdp's CPU GEMM (oneDNN) on the shapes of a
 *     layer's GEMMs, every rank at once; the node's rate is their sum. The
 *     fit gives eff_max x peak (written as the peak, gemm_efficiency 1) and
 *     gemm_half_dim of the model's shape factor g(x) = x / (x + x_half);
 *   - memory bandwidth: a streaming triad; per precision (the fp32, bf16
 *     and fp16 tables): attention_flops, the rate of ptdp's flash attention
 *     (its causal tile work), and elementwise_efficiency, one layer's other
 *     memory-bound kernels' model bytes over their time, as a fraction of
 *     the triad's bandwidth;
 *   - under mpirun -np 2 or more: MPI all-reduce (bus bandwidth and
 *     per-step latency) and point-to-point between ranks 0 and 1.
 * The node is one machine whose ranks share its cores (shared_node: their
 * number) and its memory (memory_bytes: what the kernel says is available,
 * which `ptdp plan` divides among the job's ranks); it holds every rank of a
 * job (devices_per_node 0), and "machine" names it (ptdp__cli_machine).
 * The bf16 peak is the bf16 table's GEMM on the same shapes (the fit's
 * x_half kept) where that table runs oneDNN's native bf16 matmul, else
 * the fp32 one; the fp16 peak is the fp32 one (fp16 runs fp32 GEMMs on the
 * CPU).
 *
 * Deliberately not here: measuring more than one node, or thread scaling. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "kernels/kernels.h"
#include "plan/plan.h"

typedef void (*bench_fn)(void *ctx);

void ptdp__cli_machine(char *buf, size_t cap) {
    char model[96] = "unknown CPU", line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        const char *colon = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && colon) {
            snprintf(model, sizeof model, "%s", colon + 1 + (colon[1] == ' '));
            model[strcspn(model, "\n")] = 0;
            break;
        }
    }
    if (f) fclose(f);
    double kb = 0;
    f = fopen("/proc/meminfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %lf kB", &kb) == 1) break;
    if (f) fclose(f);
    snprintf(buf, cap, "%s, %ld cores, %.0f GiB", model, sysconf(_SC_NPROCESSORS_ONLN),
             kb / 1048576.0);
}

/* The model's GEMM shape factor g(M) g(N) g(K), g(x) = x / (x + x0). */
static double shape_factor(const int64_t shape[3], double x0) {
    double g = 1;
    for (int k = 0; k < 3; k++) g *= (double)shape[k] / ((double)shape[k] + x0);
    return g;
}
/* log P that fits rate = P g(shape) best in the log: mean log(rate / g). */
static double mean_log_peak(const int64_t (*shapes)[3], const double *rate, int ns, double x0) {
    double sum = 0;
    for (int i = 0; i < ns; i++) sum += log(rate[i] / shape_factor(shapes[i], x0));
    return sum / ns;
}

typedef struct {
    ptdp_backend *ops;
    int64_t M, N, K;
    float *A, *B, *C;
} gemm_ctx;
static void run_gemm(void *p) {
    gemm_ctx *g = p;
    g->ops->gemm(g->ops, 0, 1, g->M, g->N, g->K, 1.0f, g->A, g->K, g->B, g->K, 0.0f, g->C, g->N);
}

typedef struct {
    float *x, *y, *z, *bias;
    int64_t n, rows, cols;
    ptdp_backend *ops;
} stream_ctx;
static void run_triad(void *p) {
    stream_ctx *s = p;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < s->n; i++) s->z[i] = s->x[i] + 0.5f * s->y[i];
}
static void run_gelu(void *p) {
    stream_ctx *s = p;
    s->ops->bias_gelu_fwd(s->ops, s->x, s->bias, s->z, s->rows, s->cols);
}

typedef struct {
    ptdp_group *g;
    float *buf;
    int64_t n;
} comm_ctx;
static void run_allreduce(void *p) {
    comm_ctx *c = p;
    ptdp_allreduce_sum_f32(c->g, c->buf, c->n);
}
/* Ping-pong between ranks 0 and 1 (others only wait at the barrier). */
static void run_pingpong(void *p) {
    comm_ctx *c = p;
    ptdp_comm_req r = PTDP_COMM_REQ_NULL;
    const int me = c->g->rank;
    if (me == 0) {
        ptdp_isend_f32(c->g, c->buf, c->n, 1, 7, &r);
        ptdp_wait(&r);
        ptdp_irecv_f32(c->g, c->buf, c->n, 1, 8, &r);
        ptdp_wait(&r);
    } else if (me == 1) {
        ptdp_irecv_f32(c->g, c->buf, c->n, 0, 7, &r);
        ptdp_wait(&r);
        ptdp_isend_f32(c->g, c->buf, c->n, 0, 8, &r);
        ptdp_wait(&r);
    }
    ptdp_barrier(c->g);
}

/* The memory-bound kernels of one layer (forward and backward) at config
 * (c)'s shape, through ptdp's own table: what the model's T_ew stands for;
 * and its attention, timed apart (the description's attention_flops). */
typedef struct {
    ptdp_backend *ops;
    int64_t s, b, h, al, hd, f;
    float *x, *y, *z, *w, *bias, *mean, *rstd, *qkv, *dqkv, *ctx, *probs, *scratch, *big, *big2;
} layer_ctx;
static void run_layer_ew(void *p) {
    layer_ctx *L = p;
    ptdp_backend *o = L->ops;
    const int64_t N = L->s * L->b, h = L->h, f = L->f;
    const ptdp_dropout nod = {.p = 0};
    for (int k = 0; k < 2; k++) { /* two LayerNorms */
        o->layernorm_fwd(o, L->x, L->w, L->bias, L->y, L->mean, L->rstd, N, h, 1e-5f);
        o->layernorm_bwd(o, L->y, L->x, L->w, L->mean, L->rstd, L->z, L->w + h, L->bias + h, N, h);
        o->bias_dropout_add_fwd(o, L->y, L->bias, L->x, L->z, N, h, nod);
        o->bias_dropout_add_bwd(o, L->z, L->y, L->bias + h, N, h, nod);
    }
    o->bias_add(o, L->qkv, L->bias, N, 3 * h);
    o->bias_bwd(o, L->qkv, L->bias + h, N, 3 * h);
    o->bias_gelu_fwd(o, L->big, L->bias, L->big2, N, f);
    o->bias_gelu_bwd(o, L->big2, L->big, L->bias, L->big2, L->bias + h, N, f);
}
/* ptdp's flash attention of one layer, forward and backward */
static void run_attention(void *p) {
    layer_ctx *L = p;
    ptdp_backend *o = L->ops;
    const ptdp_dropout nod = {.p = 0};
    o->attention_fwd(o, L->qkv, L->ctx, L->probs, L->scratch, L->s, L->b, L->al, L->hd, nod);
    o->attention_bwd(o, L->y, L->qkv, L->ctx, L->probs, L->dqkv, L->scratch, L->s, L->b, L->al,
                     L->hd, nod);
}

/* Every rank runs fn at the same time: a barrier, then each rank's time;
 * a repetition takes as long as its slowest rank. Returns the fastest
 * repetition (all ranks get the same value). */
static double best_of_all(ptdp_comm *comm, bench_fn fn, void *ctx, int reps) {
    fn(ctx);
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        /* from the first barrier's end to the last rank's finish: a rank
         * that waits for a core starts late, and its own clock would not see it */
        if (comm->world_size > 1) ptdp_barrier(&comm->world);
        double t0 = ptdp_now();
        fn(ctx);
        if (comm->world_size > 1) ptdp_barrier(&comm->world);
        double dt = ptdp_now() - t0;
        if (comm->world_size > 1) {
            float v = (float)dt;
            ptdp_allreduce_max_f32(&comm->world, &v, 1);
            dt = v;
        }
        if (dt < best) best = dt;
    }
    return best;
}

static void close_backends(ptdp_backend **bes) {
    for (int p = 0; p < PTDP_PREC_COUNT; p++) ptdp_backend_close(bes[p]);
}

/* The GEMMs of configs like (b) and (c): tokens x {h, 3h, 4h} x {h, 4h},
 * plus squares. */
static const int64_t gemm_shapes[][3] = {
    {1024, 256, 256},  {1024, 768, 256},   {1024, 1024, 256}, {1024, 256, 1024}, {1024, 384, 384},
    {1024, 1152, 384}, {1024, 1536, 384},  {1024, 384, 1536}, {128, 128, 64},    {256, 256, 256},
    {512, 512, 512},   {2048, 2048, 2048}, {128, 128, 128},   {2048, 512, 2048}, {64, 64, 64}};
#define NSHAPES ((int)(sizeof gemm_shapes / sizeof gemm_shapes[0]))

/* What the steps measured beyond the cluster's fields (for the summary). */
typedef struct {
    double gemm_peak, x_half; /* the fp32 GEMM's fitted peak and half dimension */
    int native16;             /* oneDNN's native bf16 matmul (else emulated) */
    double bw, gelu;          /* triad and bias+GeLU bytes/s */
} calib_summary;

/* The fp32 (oneDNN) backend and each 16-bit one. */
static int open_backends(ptdp_backend *bes[PTDP_PREC_COUNT]) {
    static const ptdp_dtype dts[PTDP_PREC_COUNT] = {[PTDP_PREC_FP32] = PTDP_DTYPE_FP32,
                                                    [PTDP_PREC_FP16] = PTDP_DTYPE_FP16,
                                                    [PTDP_PREC_BF16] = PTDP_DTYPE_BF16};
    for (int p = 0; p < PTDP_PREC_COUNT; p++) {
        ptdp_backend_params bp = ptdp_backend_default_params();
        bp.dtype = dts[p];
        if (ptdp_backend_open(&bes[p], &bp) != PTDP_OK) {
            char why[512]; /* ptdp_errorf writes where ptdp_last_error reads */
            snprintf(why, sizeof why, "%s", ptdp_last_error());
            for (int q = 0; q < p; q++) ptdp_backend_close(bes[q]);
            return ptdp_errorf(PTDP_EIO, "--calibrate: %s", why);
        }
    }
    return PTDP_OK;
}

/* GEMM rates on every rank at once (the node's rate is the sum), fitted
 * to log rate = log P + sum log g(dim) over x_half on a grid: peak_flops,
 * gemm_efficiency 1, gemm_half_dim; bf16's own peak where it is native. */
static int calibrate_gemm(ptdp_comm *comm, ptdp_backend **bes, ptdp_cluster *c,
                          calib_summary *sum) {
    const int n = comm->world_size, ns = NSHAPES;
    double rate[32], rate16[32];
    float *A = malloc(sizeof(float) * 2048 * 2048 * 3);
    if (!A) return ptdp_errorf(PTDP_ENOMEM, "--calibrate: out of memory");
    for (int64_t i = 0; i < 2048 * 2048 * 3; i++) A[i] = (float)((i * 7) % 13) * 0.01f;
    ptdp_backend *bf16 = bes[PTDP_PREC_BF16];
    const int native = (bf16->caps & PTDP_CAP_NATIVE_GEMM16) != 0;
    for (int i = 0; i < ns * (1 + native); i++) {
        gemm_ctx g = {.ops = i < ns ? bes[PTDP_PREC_FP32] : bf16,
                      .M = gemm_shapes[i % ns][0],
                      .N = gemm_shapes[i % ns][1],
                      .K = gemm_shapes[i % ns][2],
                      .A = A,
                      .B = A + 2048 * 2048,
                      .C = A + 2 * 2048 * 2048};
        const double flops = 2.0 * g.M * g.N * g.K;
        const int reps = flops > 4e9 ? 3 : flops > 2e8 ? 10 : 50;
        (i < ns ? rate : rate16)[i % ns] = n * flops / best_of_all(comm, run_gemm, &g, reps);
    }
    free(A);
    double best_err = 1e30, best_x0 = 0, best_P = 0;
    for (double x0 = 0; x0 <= 256; x0 += 2) {
        const double logP = mean_log_peak(gemm_shapes, rate, ns, x0);
        double err = 0;
        for (int i = 0; i < ns; i++) {
            const double r = log(rate[i]) - logP - log(shape_factor(gemm_shapes[i], x0));
            err += r * r;
        }
        if (err < best_err) best_err = err, best_x0 = x0, best_P = exp(logP);
    }
    for (int p = 0; p < PTDP_PREC_COUNT; p++) c->peak_flops[p] = best_P;
    if (native) /* the same shape factor */
        c->peak_flops[PTDP_PREC_BF16] = exp(mean_log_peak(gemm_shapes, rate16, ns, best_x0));
    c->gemm_efficiency = 1.0;
    c->gemm_half_dim = best_x0;
    sum->gemm_peak = best_P, sum->x_half = best_x0, sum->native16 = native;
    return PTDP_OK;
}

/* Memory bandwidth (triad: 12 bytes per element) and the bias+GeLU kernel
 * (read and write 4 bytes per element): mem_bandwidth and a first
 * elementwise_efficiency. */
static int calibrate_memory(ptdp_comm *comm, ptdp_backend *ops, ptdp_cluster *c,
                            calib_summary *sum) {
    const int n = comm->world_size;
    const int64_t cols = 1536, rows = 8192, len = rows * cols;
    stream_ctx s = {.x = malloc(sizeof(float) * (size_t)len),
                    .y = malloc(sizeof(float) * (size_t)len),
                    .z = malloc(sizeof(float) * (size_t)len),
                    .bias = calloc((size_t)cols, sizeof(float)),
                    .n = len,
                    .rows = rows,
                    .cols = cols,
                    .ops = ops};
    int rc = PTDP_OK;
    if (!s.x || !s.y || !s.z || !s.bias) {
        rc = ptdp_errorf(PTDP_ENOMEM, "--calibrate: out of memory");
    } else {
        for (int64_t i = 0; i < len; i++) s.x[i] = s.y[i] = (float)(i % 17) * 0.1f;
        sum->bw = n * 12.0 * len / best_of_all(comm, run_triad, &s, 5);
        sum->gelu = n * 8.0 * len / best_of_all(comm, run_gelu, &s, 5);
        c->mem_bandwidth = sum->bw;
        for (int p = 0; p < PTDP_PREC_COUNT; p++)
            c->elementwise_efficiency[p] = sum->gelu / sum->bw;
    }
    free(s.x);
    free(s.y);
    free(s.z);
    free(s.bias);
    return rc;
}

/* elementwise_efficiency: the model's bytes of one layer's memory-bound
 * work, forward and backward (3 x bytes_ew with no scores in memory,
 * docs/planner.md), over the time ptdp's kernels take for it, as a
 * fraction of the triad's bandwidth; attention_flops: the causal tile work
 * of ptdp's flash attention (12 b a s^2 (h/a) x causal, forward and
 * backward) over its time. Both through each precision's table: the 16-bit
 * ones add a rounding pass to every op, and bf16's attention tiles may run
 * natively. Left at calibrate_memory's numbers when memory is short. */
static void calibrate_layer(ptdp_comm *comm, ptdp_backend **bes, ptdp_cluster *c, double bw) {
    const int n = comm->world_size;
    layer_ctx L = {.s = 256, .b = 4, .h = 384, .al = 6, .hd = 64, .f = 1536};
    const int64_t N = L.s * L.b, S = L.b * L.al * L.s * L.s;
    const int th = omp_get_max_threads();
    const int64_t sizes[] = {N * L.h,     N * L.h, N * L.h, 4 * L.h,
                             6 * L.h,     N,       N,       3 * N * L.h,
                             3 * N * L.h, N * L.h, S,       ptdp_attention_scratch_floats(L.s, th),
                             N * L.f,     N * L.f};
    float **ptrs[] = {&L.x,   &L.y,    &L.z,   &L.w,     &L.bias,    &L.mean, &L.rstd,
                      &L.qkv, &L.dqkv, &L.ctx, &L.probs, &L.scratch, &L.big,  &L.big2};
    int okay = 1;
    for (int i = 0; i < 14; i++) {
        *ptrs[i] = calloc((size_t)sizes[i], sizeof(float));
        okay &= *ptrs[i] != NULL;
    }
    if (okay) {
        for (int64_t i = 0; i < N * L.h; i++) L.x[i] = (float)(i % 11) * 0.1f;
        for (int64_t i = 0; i < 3 * N * L.h; i++) L.qkv[i] = (float)(i % 7) * 0.01f;
        for (int64_t i = 0; i < L.h; i++) L.w[i] = 1.0f;
        const double attn_work = 12.0 * L.b * L.al * L.s * L.s * L.hd * ptdp_plan_flash_causal(L.s);
        const double bytes = 3.0 * (4.0 * (10.0 * N * L.h + 2.0 * N * L.f) + 2.0 * N * L.h);
        for (int p = 0; p < PTDP_PREC_COUNT; p++) {
            L.ops = bes[p];
            const double t_attn = best_of_all(comm, run_attention, &L, 5);
            const double t_rest = best_of_all(comm, run_layer_ew, &L, 5);
            c->attention_flops[p] = n * attn_work / t_attn;
            const double eff = bytes / t_rest / (bw / n);
            c->elementwise_efficiency[p] = eff < 1 ? eff : 1;
            if (comm->world_rank == 0)
                fprintf(stderr,
                        "calibrate: one layer at config (c)'s shape, %s: flash attention "
                        "%.3g ms (%.4g GFLOP/s of tile work), other memory-bound kernels "
                        "%.3g ms (%.3g of the triad's bandwidth)\n",
                        ptdp_plan_precision_name(p), t_attn * 1e3, c->attention_flops[p] / 1e9,
                        t_rest * 1e3, eff);
        }
    }
    for (int i = 0; i < 14; i++) free(*ptrs[i]);
}

/* The node: one node holds every rank of a job, sharing its cores and its
 * memory (MemAvailable; `ptdp plan` gives each of a job's k ranks 1/k). */
static void describe_node(ptdp_cluster *c) {
    c->devices_per_node = 0;
    c->shared_node = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (c->shared_node < 1) c->shared_node = 1;
    ptdp__cli_machine(c->machine, sizeof c->machine);
    FILE *f = fopen("/proc/meminfo", "r");
    double kb = 0;
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
        fclose(f);
    }
    c->memory_bytes = kb > 0 ? kb * 1024.0 : 1e9;
    c->overhead_s = 0;
}

/* The links: all-reduce bus bandwidth and per-step latency between the
 * ranks (the model's transfers use them; point-to-point is reported too);
 * one process: guesses from the memory bandwidth. */
static int calibrate_links(ptdp_comm *comm, ptdp_cluster *c, double bw) {
    const int n = comm->world_size, root = comm->world_rank == 0;
    if (n == 1) {
        if (root)
            fprintf(stderr, "calibrate: one process: link numbers are guesses from the memory "
                            "bandwidth; run under mpirun -np 2 or more to measure them\n");
        c->intra_bandwidth = c->inter_bandwidth = bw / 8;
        c->intra_latency = c->inter_latency = 5e-6;
        return PTDP_OK;
    }
    const int64_t big = 1 << 20;
    comm_ctx cc = {.g = &comm->world, .buf = calloc((size_t)big, sizeof(float)), .n = big};
    if (!cc.buf) return ptdp_errorf(PTDP_ENOMEM, "--calibrate: out of memory");
    const double t_big = best_of_all(comm, run_allreduce, &cc, 5);
    cc.n = 1;
    const double t_small = best_of_all(comm, run_allreduce, &cc, 50);
    c->intra_latency = t_small / (2.0 * (n - 1));
    c->intra_bandwidth =
        2.0 * (n - 1) / n * 4.0 * big / (t_big - t_small > 0 ? t_big - t_small : t_big);
    cc.n = big;
    const double pp_big = best_of_all(comm, run_pingpong, &cc, 5) / 2;
    cc.n = 1;
    const double pp_small = best_of_all(comm, run_pingpong, &cc, 50) / 2;
    if (root)
        fprintf(stderr,
                "calibrate: point-to-point %.3g GB/s, latency %.3g us (all-reduce bus %.3g "
                "GB/s, %.3g us per step)\n",
                4.0 * big / (pp_big - pp_small) / 1e9, pp_small * 1e6, c->intra_bandwidth / 1e9,
                c->intra_latency * 1e6);
    c->inter_bandwidth = c->intra_bandwidth;
    c->inter_latency = c->intra_latency;
    free(cc.buf);
    return PTDP_OK;
}

/* Rank 0: the summary line, then the cluster file to `out` (NULL: stdout).
 * The exit status. */
static int write_calibration(const char *out, const ptdp_cluster *c, const calib_summary *sum,
                             int n) {
    fprintf(stderr,
            "calibrate: %d rank(s), %d threads each: GEMM %.4g GFLOP/s (x_half %.0f), "
            "bf16 GEMM %.4g GFLOP/s (%s), memory %.3g GB/s, bias+GeLU %.3g GB/s\n",
            n, omp_get_max_threads(), sum->gemm_peak / 1e9, sum->x_half,
            c->peak_flops[PTDP_PREC_BF16] / 1e9,
            sum->native16 ? "oneDNN's native bf16 matmul" : "emulated: the fp32 GEMM",
            sum->bw / 1e9, sum->gelu / 1e9);
    FILE *f = out ? fopen(out, "w") : stdout;
    if (!f) {
        ptdp_log_error("--out: cannot open '%s' for writing", out);
        return 2;
    }
    int status = 0;
    if (ptdp_cluster_write(f, c)) {
        ptdp_log_error("--out: %s", ptdp_last_error());
        status = 1;
    }
    if (out && fclose(f)) status = 1;
    return status;
}

int ptdp__cli_plan_calibrate(const char *out) {
    ptdp_comm comm;
    int argc = 0;
    char **argv = NULL;
    if (ptdp_comm_init(&comm, &argc, &argv)) {
        ptdp_log_error("%s", ptdp_last_error());
        return 1;
    }
    ptdp__cli_set_threads(&comm);
    ptdp_backend *bes[PTDP_PREC_COUNT] = {NULL};
    if (open_backends(bes)) {
        ptdp_log_error("%s", ptdp_last_error());
        ptdp_comm_finalize(&comm);
        return 1;
    }
    ptdp_cluster c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "local");
    calib_summary sum = {0};
    int rc = calibrate_gemm(&comm, bes, &c, &sum);
    if (!rc) rc = calibrate_memory(&comm, bes[PTDP_PREC_FP32], &c, &sum);
    if (!rc) calibrate_layer(&comm, bes, &c, sum.bw);
    if (!rc) describe_node(&c);
    if (!rc) rc = calibrate_links(&comm, &c, sum.bw);
    int status = rc ? 1 : 0;
    if (rc)
        ptdp_log_error("%s", ptdp_last_error());
    else if (comm.world_rank == 0)
        status = write_calibration(out, &c, &sum, comm.world_size);
    close_backends(bes);
    ptdp_comm_finalize(&comm);
    return status;
}
