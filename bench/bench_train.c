/* bench_train.c - time whole training iterations (forward, backward, gradient
 * norm, AdamW) of one rank through the trainer API, for four GPT sizes from
 * tiny to GPT-2 small and two Llama-shaped models of c's and d's FLOPs. Mock data, fp32, dropout 0
 * (--dropout), global batch = micro-batch b, OpenMP threads from OMP_NUM_THREADS or the default;
 * --precision bf16|fp16 runs the 16-bit backends (fp16 with a constant loss scale of 1024, so no
 * iteration is skipped). Prints one JSON line per configuration: median/min/all iteration times,
 * tokens/s, model TFLOP/s (the paper's formula, ptdp_gpt_flops_per_iter) and % of the GEMM peak of
 * the run's precision: --peak-gflops, or else measured on this machine before the runs and again
 * after each configuration's timed iterations, the best of those (each the best of 5 GEMMs 2048^3
 * after 2 warm-ups through the run's table: its GEMM library, threads and precision, so bf16 is
 * held to the bf16 matmul's rate; each printed as a "train_peak" line): on a shared host a busy
 * moment at one measurement then cannot lift the percentage. Not here: parallel runs (mpirun),
 * memory peaks.
 *
 * Usage: bench_train [--config a|b|c|cl|d|dl|all] [--iters N] [--warmup W]
 *                    [--gemm onednn|openblas] [--peak-gflops X] [--dropout P]
 *                    [--precision P[,P...]] [--rounds R]
 * A list of precisions (e.g. fp32,bf16) runs each configuration in every
 * precision in turn, --rounds times (default 1), and after each round
 * prints a "train_ratio" line: the first precision's median over each
 * other's, measured minutes apart in one process (this machine is shared:
 * compare ratios taken in one window, not medians taken hours apart);
 * after the rounds a "train_ratio_summary" line with their median.
 * --dropout sets the hidden and attention dropout (default 0; Megatron's
 * GPT default is 0.1), to time the mask generation.
 * Defaults: all configurations, 2 warm-up + 5 timed iterations (d: 1 + 3
 * unless --iters/--warmup are given). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "sgemm_rate.h"
#include "train/train.h"

typedef struct {
    const char *name;
    int64_t l, h, a, s, b, V;
    int64_t g, ffn; /* the Llama-shaped ones: key/value groups and SwiGLU width (0: GPT) */
} bench_config;

/* cl and dl are Llama-shaped (RMSNorm, SwiGLU, rotary embeddings, a/3 key/value
 * groups, no biases, tied embeddings as SmolLM's) with the FLOPs of c and d
 * (Megatron's count, ptdp_gpt_megatron_flops: the groups' saving of 2/3 h^2 per
 * layer goes to a wider SwiGLU, 1.5 ffn/h = 4 + 2/3 - ~0.01). */
static const bench_config configs[] = {
    {"a", 2, 128, 4, 64, 8, 512, 0, 0},       {"b", 4, 256, 4, 128, 8, 8192, 0, 0},
    {"c", 6, 384, 6, 256, 4, 50304, 0, 0},    {"cl", 6, 384, 6, 256, 4, 50304, 2, 1192},
    {"d", 12, 768, 12, 1024, 1, 50304, 0, 0}, {"dl", 12, 768, 12, 1024, 1, 50304, 4, 2384},
};
#define NCONFIGS (int)(sizeof configs / sizeof configs[0])

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: bench_train [--config a|b|c|cl|d|dl|all] [--iters N] [--warmup W] [--gemm onednn|openblas] "
        "[--peak-gflops X] [--dropout P] [--precision fp32|bf16|fp16[,...]] [--rounds R]\n");
}

/* The GEMM rate of this machine with the run's library, threads and
 * precision (the backend's gemm: bf16 is oneDNN's bf16 matmul where the CPU has
 * one, fp16 the fp32 GEMM on fp16 values): the best GFLOP/s of 5 GEMMs
 * 2048^3 after 2 warm-ups, so that another tenant's burst while it is
 * measured cannot lower the peak below what the run then reaches (the
 * median is printed too; bench_peak's gemm_peak and gemm_peak_bf16 measure
 * the same, with more detail). */
static double measure_peak(ptdp_gemm_lib lib, ptdp_dtype dtype) {
    const int64_t n = 2048;
    double t[5];
    if (bench_gemm_times(lib, dtype, n, 5, t)) return 0;
    const double flop = 2.0 * (double)n * n * n, best = flop / t[0] * 1e-9;
    ptdp_backend *be = bench_backend(lib, dtype); /* for its name */
    printf("{\"bench\":\"train_peak\",\"lib\":\"%s\",\"precision\":\"%s\",\"table\":\"%s\","
           "\"M\":%lld,\"N\":%lld,\"K\":%lld,\"threads\":%d,\"reps\":5,\"gflops_best\":%.1f,"
           "\"gflops_median\":%.1f}\n",
           ptdp_gemm_lib_name(lib), ptdp_dtype_name(dtype), be->name, (long long)n, (long long)n,
           (long long)n, omp_get_max_threads(), best, flop / t[2] * 1e-9);
    ptdp_backend_close(be);
    fflush(stdout);
    return best;
}

/* Runs one configuration; returns 0 and its median ms in *median, or 1
 * after printing why it could not. */
static int run(const bench_config *bc, int warmup, int iters, ptdp_gemm_lib lib, double peak_gflops,
               int remeasure, float dropout, ptdp_dtype dtype, double *median) {
    ptdp_comm comm;
    ptdp_comm_init_single(&comm);
    ptdp_trainer_params tp = ptdp_trainer_default_params();
    ptdp_job *job = &tp.job;
    ptdp_gpt_config *cfg = &job->model;
    cfg->num_layers = bc->l;
    cfg->hidden = bc->h;
    cfg->heads = bc->a;
    cfg->seq_length = bc->s;
    cfg->vocab = bc->V;
    cfg->hidden_dropout = dropout;
    cfg->attention_dropout = dropout;
    if (bc->ffn) {
        cfg->rmsnorm = cfg->swiglu = cfg->rope = cfg->no_bias = 1;
        cfg->query_groups = bc->g;
        cfg->ffn_hidden = bc->ffn;
    }
    job->micro_batch = bc->b;
    job->global_batch = bc->b;
    job->train_iters = warmup + iters;
    job->lr = 1e-4;
    job->min_lr = 1e-5;
    job->lr_decay_style = PTDP_LR_CONSTANT;
    job->dtype = dtype;
    if (dtype == PTDP_DTYPE_FP16) job->loss_scale = 1024.0;
    tp.be = bench_backend(lib, dtype);
    tp.comm = &comm;
    ptdp_trainer *tr = NULL;
    if (ptdp_trainer_init(&tr, &tp)) {
        fprintf(stderr, "bench_train: config %s: %s\n", bc->name, ptdp_last_error());
        ptdp_backend_close(tp.be);
        return 1;
    }
    ptdp_batches data;
    ptdp_batches_mock(&data, bc->s, bc->V, 1234);
    const int64_t B = bc->b, s = bc->s;
    int32_t *batch = malloc(sizeof(int32_t) * (size_t)(B * (s + 1)));
    double *ms = malloc(sizeof(double) * (size_t)(iters > 0 ? iters : 1));
    if (!batch || !ms) {
        fprintf(stderr, "bench_train: out of memory\n");
        exit(1);
    }
    ptdp_step_stats st;
    for (int it = 0; it < warmup + iters; it++) {
        ptdp_batches_get(&data, (int64_t)it * B, B, batch);
        double t0 = ptdp_now();
        PTDP_ASSERT_MSG(ptdp_trainer_step(tr, batch, &st) == PTDP_OK, ptdp_last_error());
        double dt = ptdp_now() - t0;
        if (it >= warmup) ms[it - warmup] = dt * 1e3;
    }
    double *sorted = malloc(sizeof(double) * (size_t)(iters > 0 ? iters : 1));
    memcpy(sorted, ms, sizeof(double) * (size_t)iters);
    double med = bench_sort_median(sorted, iters);
    *median = med;
    if (remeasure) { /* the peak again, after the timed iterations: the best of the two */
        const double again = measure_peak(lib, dtype);
        if (again > peak_gflops) peak_gflops = again;
    }
    double flops = ptdp_gpt_flops_per_iter(&ptdp_trainer_job(tr)->model, B, 0);
    double tflops = flops / (med / 1e3) / 1e12;
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    printf(
        "{\"bench\":\"train\",\"config\":\"%s\",\"l\":%lld,\"h\":%lld,\"a\":%lld,\"s\":%lld,\"b\":%lld,"
        "\"V\":%lld,\"g\":%lld,\"ffn\":%lld,\"dropout\":%g,\"precision\":\"%s\",\"threads\":%d,"
        "\"gemm\":\"%s\",\"warmup\":%d,\"iters\":%d,\"ms_median\":%.3f,\"ms_min\":%.3f,\"ms_all\":[",
        bc->name, (long long)bc->l, (long long)bc->h, (long long)bc->a, (long long)s, (long long)B,
        (long long)ptdp_gpt_groups(&ptdp_trainer_job(tr)->model),
        (long long)ptdp_trainer_job(tr)->model.ffn_hidden, (long long)bc->V, (double)dropout,
        ptdp_dtype_name(dtype), omp_get_max_threads(), ptdp_gemm_lib_name(lib), warmup, iters, med,
        sorted[0]);
    for (int i = 0; i < iters; i++) printf("%s%.3f", i ? "," : "", ms[i]);
    printf("],\"tokens_per_s\":%.1f,\"model_tflops\":%.5f,\"megatron_tflops\":%.5f,",
           (double)(B * s) / (med / 1e3), tflops,
           ptdp_gpt_megatron_flops(&ptdp_trainer_job(tr)->model, B) / (med / 1e3) / 1e12);
    if (peak_gflops > 0)
        printf("\"peak_gflops\":%.1f,\"pct_of_peak\":%.2f,", peak_gflops,
               100.0 * tflops * 1e3 / peak_gflops);
    else
        printf("\"pct_of_peak\":null,");
    printf("\"final_loss\":%.6f,\"env_OPENBLAS_CORETYPE\":\"%s\"}\n", st.loss,
           coretype ? coretype : "");
    fflush(stdout);
    free(sorted);
    free(ms);
    free(batch);
    ptdp_batches_close(&data);
    ptdp_trainer_free(tr);
    ptdp_backend_close(tp.be);
    return 0;
}

int main(int argc, char **argv) {
    const char *which = "all", *gemm = "onednn", *precision = "fp32";
    int iters = -1, warmup = -1, rounds = 1;
    double peak = 0, dropout = 0;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_train: unknown flag or missing value: %s\n", f);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        char *end = NULL;
        if (!strcmp(f, "--config"))
            which = v;
        else if (!strcmp(f, "--gemm"))
            gemm = v;
        else if (!strcmp(f, "--iters"))
            iters = (int)strtol(v, &end, 10);
        else if (!strcmp(f, "--warmup"))
            warmup = (int)strtol(v, &end, 10);
        else if (!strcmp(f, "--peak-gflops"))
            peak = strtod(v, &end);
        else if (!strcmp(f, "--dropout"))
            dropout = strtod(v, &end);
        else if (!strcmp(f, "--precision"))
            precision = v;
        else if (!strcmp(f, "--rounds"))
            rounds = (int)strtol(v, &end, 10);
        else {
            fprintf(stderr, "bench_train: unknown flag %s\n", f);
            usage(stderr);
            return 2;
        }
        if (end && (*end || end == v)) {
            fprintf(stderr, "bench_train: %s expects a number, got '%s'\n", f, v);
            return 2;
        }
    }
    if ((iters != -1 && iters < 1) || warmup < -1 || rounds < 1 || rounds > 100) {
        fprintf(stderr, "bench_train: --iters and --rounds must be >= 1 (rounds <= 100) and "
                        "--warmup >= 0\n");
        return 2;
    }
    if (dropout < 0 || dropout >= 1) {
        fprintf(stderr, "bench_train: --dropout must be in [0, 1)\n");
        return 2;
    }
    ptdp_gemm_lib lib;
    if (ptdp_gemm_lib_parse(gemm, &lib)) {
        fprintf(stderr, "bench_train: %s\n", ptdp_last_error());
        return 2;
    }
    enum { MAXP = 3 };
    ptdp_dtype dts[MAXP];
    int np = 0;
    for (const char *p = precision; np <= MAXP;) {
        const size_t len = strcspn(p, ",");
        int k = -1;
        for (int d = 0; d < MAXP; d++)
            if (strlen(ptdp_dtype_name((ptdp_dtype)d)) == len &&
                !strncmp(p, ptdp_dtype_name((ptdp_dtype)d), len))
                k = d;
        if (k < 0 || np == MAXP) {
            fprintf(stderr,
                    "bench_train: --precision must be fp32, bf16 or fp16, or a list of up to "
                    "three of them (fp32,bf16), got '%s'\n",
                    precision);
            return 2;
        }
        dts[np++] = (ptdp_dtype)k;
        if (!p[len]) break;
        p += len + 1;
    }
    int known = !strcmp(which, "all");
    for (int i = 0; i < NCONFIGS; i++) known |= !strcmp(which, configs[i].name);
    const int remeasure = known && peak <= 0;
    double peaks[MAXP];
    for (int k = 0; k < np; k++) peaks[k] = remeasure ? measure_peak(lib, dts[k]) : peak;
    int found = 0, rc = 0;
    for (int i = 0; i < NCONFIGS; i++) {
        if (strcmp(which, "all") && strcmp(which, configs[i].name)) continue;
        found = 1;
        int big = configs[i].name[0] == 'd';
        int w = warmup >= 0 ? warmup : big ? 1 : 2;
        int n = iters >= 1 ? iters : big ? 3 : 5;
        double ratio[MAXP][100];
        for (int r = 0; r < rounds && !rc; r++) {
            double med[MAXP];
            for (int k = 0; k < np && !rc; k++)
                rc |= run(&configs[i], w, n, lib, peaks[k], remeasure, (float)dropout, dts[k],
                          &med[k]);
            if (rc || np < 2) continue;
            printf("{\"bench\":\"train_ratio\",\"config\":\"%s\",\"round\":%d", configs[i].name,
                   r + 1);
            for (int k = 1; k < np; k++) {
                ratio[k][r] = med[0] / med[k];
                printf(",\"%s_over_%s\":%.3f", ptdp_dtype_name(dts[0]), ptdp_dtype_name(dts[k]),
                       ratio[k][r]);
            }
            printf("}\n");
        }
        if (rc || np < 2) continue;
        printf("{\"bench\":\"train_ratio_summary\",\"config\":\"%s\",\"rounds\":%d",
               configs[i].name, rounds);
        for (int k = 1; k < np; k++) {
            const double m = bench_sort_median(ratio[k], rounds);
            const char *a = ptdp_dtype_name(dts[0]), *b = ptdp_dtype_name(dts[k]);
            printf(",\"%s_over_%s_median\":%.3f,\"%s_over_%s_min\":%.3f,\"%s_over_%s_max\":%.3f", a,
                   b, m, a, b, ratio[k][0], a, b, ratio[k][rounds - 1]);
        }
        printf("}\n");
        fflush(stdout);
    }
    if (!found) {
        fprintf(stderr, "bench_train: --config must be a, b, c, cl, d, dl or all, got '%s'\n",
                which);
        return 2;
    }
    return rc;
}
