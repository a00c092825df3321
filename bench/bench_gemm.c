/* bench_gemm.c - the GEMM library candidates (oneDNN, OpenBLAS) on the exact
 * GEMM calls one iteration of the model makes (src/model/gpt.c, t = 1), for
 * the benchmark configurations:
 *   b: l=4  h=256 a=4  s=128  b=8 V=8192
 *   c: l=6  h=384 a=6  s=256  b=4 V=50304
 *   d: l=12 h=768 a=12 s=1024 b=1 V=50304 (GPT-2 small; l, a assumed)
 * all with N = s*b = 1024 token rows. Per layer: the four forward GEMMs
 * (qkv, proj, fc1, fc2: gemm(0,1,...)), each one's weight gradient
 * (gemm(1,0,...), beta 1) and input gradient (gemm(0,0,...)); per iteration:
 * the logits GEMM and its two backward GEMMs. Each call is timed as the
 * median of --reps runs (default 5) after 0.1 s of warm-up calls, and printed as a JSON
 * line per (config, shape, lib); then a line per (config, lib) with the GEMM
 * time of one micro-batch iteration, l * layer GEMMs + head GEMMs (without
 * activation recomputation, which would add the forward layer GEMMs once
 * more). OpenBLAS reads OPENBLAS_CORETYPE at load, so every line carries the
 * value this process saw. Attention's per-head GEMMs are not here (they run
 * inside the attention kernel, single-threaded per head).
 *
 * Usage: bench_gemm [--config b|c|d] [--lib onednn|openblas] [--reps N] */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

typedef struct {
    const char *name;
    int64_t l, h, s, b, V;
} config;

typedef struct {
    const char *name;
    int per_layer; /* 1: counted l times per iteration; 0: once (head) */
    int ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    float beta;
} gemm_shape;

/* The calls of gpt.c's layer_fwd, layer_bwd and head_fwd_bwd with t = 1
 * (hl = h, fl = 4h, Vl = V). */
static int shapes_for(const config *c, gemm_shape *out) {
    const int64_t N = c->s * c->b, h = c->h, fl = 4 * h, V = c->V;
    gemm_shape s[] = {
        {"qkv_fwd", 1, 0, 1, N, 3 * h, h, h, h, 3 * h, 0.0f},
        {"proj_fwd", 1, 0, 1, N, h, h, h, h, h, 0.0f},
        {"fc1_fwd", 1, 0, 1, N, fl, h, h, h, fl, 0.0f},
        {"fc2_fwd", 1, 0, 1, N, h, fl, fl, fl, h, 0.0f},
        {"fc2_dw", 1, 1, 0, h, fl, N, h, fl, fl, 1.0f},
        {"fc2_dx", 1, 0, 0, N, fl, h, h, fl, fl, 0.0f},
        {"fc1_dw", 1, 1, 0, fl, h, N, fl, h, h, 1.0f},
        {"fc1_dx", 1, 0, 0, N, h, fl, fl, h, h, 0.0f},
        {"proj_dw", 1, 1, 0, h, h, N, h, h, h, 1.0f},
        {"proj_dx", 1, 0, 0, N, h, h, h, h, h, 0.0f},
        {"qkv_dw", 1, 1, 0, 3 * h, h, N, 3 * h, h, h, 1.0f},
        {"qkv_dx", 1, 0, 0, N, h, 3 * h, 3 * h, h, h, 0.0f},
        {"logits_fwd", 0, 0, 1, N, V, h, h, h, V, 0.0f},
        {"logits_dw", 0, 1, 0, V, h, N, V, h, h, 1.0f},
        {"logits_dx", 0, 0, 0, N, h, V, V, h, h, 0.0f},
    };
    int n = (int)(sizeof s / sizeof s[0]);
    memcpy(out, s, sizeof s);
    return n;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static float *alloc_fill(int64_t n, float scale) {
    float *p = malloc(sizeof(float) * (size_t)n);
    if (!p) {
        fprintf(stderr, "bench_gemm: out of memory (%lld floats)\n", (long long)n);
        exit(1);
    }
    for (int64_t i = 0; i < n; i++)
        p[i] = scale * ((float)((i * 2654435761u) % 1000) * 0.002f - 1.0f);
    return p;
}

/* Median ms of one call over reps runs after 0.1 s of warm-up calls. */
static ptdp_backend *O; /* the CPU backend of the library being timed */

static double time_gemm(const gemm_shape *g, int reps) {
    int64_t ar = g->ta ? g->K : g->M, br = g->tb ? g->N : g->K;
    float *A = alloc_fill(ar * g->lda, 0.1f), *B = alloc_fill(br * g->ldb, 0.1f),
          *C = alloc_fill(g->M * g->ldc, 0.0f);
    double t[64];
    /* fresh buffers run slow for their first calls too (measured: 8 calls at 2x the
     * time for qkv_fwd of (d) after warm_up): 0.1 s of calls before timing */
    for (double t0 = omp_get_wtime(); omp_get_wtime() - t0 < 0.1;)
        O->gemm(O, g->ta, g->tb, g->M, g->N, g->K, 1.0f, A, g->lda, B, g->ldb, g->beta, C, g->ldc);
    for (int r = 0; r < reps; r++) {
        double t0 = omp_get_wtime();
        O->gemm(O, g->ta, g->tb, g->M, g->N, g->K, 1.0f, A, g->lda, B, g->ldb, g->beta, C, g->ldc);
        t[r] = (omp_get_wtime() - t0) * 1e3;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    free(A);
    free(B);
    free(C);
    return t[reps / 2];
}

/* The first GEMMs of a process (or after switching library) run several
 * times slower than later ones (thread pools starting, JIT, clocks ramping):
 * measured 8 ms vs 1 ms for the first shape. Burn ~0.3 s before timing. */
static void warm_up(void) {
    const int64_t n = 1024;
    float *A = alloc_fill(n * n, 0.1f), *B = alloc_fill(n * n, 0.1f), *C = alloc_fill(n * n, 0.0f);
    double t0 = omp_get_wtime();
    while (omp_get_wtime() - t0 < 0.3) O->gemm(O, 0, 1, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
    free(A);
    free(B);
    free(C);
}

int main(int argc, char **argv) {
    const config configs[] = {
        {"b", 4, 256, 128, 8, 8192},
        {"c", 6, 384, 256, 4, 50304},
        {"d", 12, 768, 1024, 1, 50304},
    };
    const char *only_cfg = NULL;
    int only_lib = -1, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            only_cfg = argv[++i];
        } else if (!strcmp(argv[i], "--lib") && i + 1 < argc) {
            ptdp_gemm_lib lib;
            if (ptdp_gemm_lib_parse(argv[++i], &lib)) {
                fprintf(stderr, "bench_gemm: %s\n", ptdp_last_error());
                return 2;
            }
            only_lib = (int)lib;
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
            if (reps < 1 || reps > 64) reps = 5;
        } else {
            fprintf(stderr,
                    "usage: bench_gemm [--config b|c|d] [--lib onednn|openblas] [--reps N]\n");
            return 2;
        }
    }
    const char *ct = getenv("OPENBLAS_CORETYPE");
    const char *coretype = ct ? ct : "";
    const ptdp_gemm_lib libs[2] = {PTDP_GEMM_ONEDNN, PTDP_GEMM_OPENBLAS};
    for (size_t ci = 0; ci < sizeof configs / sizeof configs[0]; ci++) {
        const config *c = &configs[ci];
        if (only_cfg && strcmp(only_cfg, c->name)) continue;
        gemm_shape sh[32];
        int ns = shapes_for(c, sh);
        for (int l = 0; l < 2; l++) {
            if (only_lib >= 0 && only_lib != (int)libs[l]) continue;
            ptdp_backend_params bp = ptdp_backend_default_params();
            bp.lib = libs[l];
            if (ptdp_backend_open(&O, &bp) != PTDP_OK) {
                fprintf(stderr, "bench_gemm: %s\n", ptdp_last_error());
                return 1;
            }
            warm_up();
            double layer_ms = 0, head_ms = 0, layer_flop = 0, head_flop = 0;
            for (int k = 0; k < ns; k++) {
                const gemm_shape *g = &sh[k];
                double ms = time_gemm(g, reps), flop = 2.0 * (double)g->M * g->N * g->K;
                if (g->per_layer)
                    layer_ms += ms, layer_flop += flop;
                else
                    head_ms += ms, head_flop += flop;
                printf(
                    "{\"bench\":\"gemm\",\"config\":\"%s\",\"shape\":\"%s\",\"lib\":\"%s\",\"ta\":%d,\"tb\":%d,"
                    "\"M\":%lld,\"N\":%lld,\"K\":%lld,\"beta\":%g,\"threads\":%d,\"reps\":%d,\"ms\":%.3f,"
                    "\"gflops\":%.1f,\"env_OPENBLAS_CORETYPE\":\"%s\"}\n",
                    c->name, g->name, ptdp_gemm_lib_name(libs[l]), g->ta, g->tb, (long long)g->M,
                    (long long)g->N, (long long)g->K, (double)g->beta, omp_get_max_threads(), reps,
                    ms, flop / ms * 1e-6, coretype);
                fflush(stdout);
            }
            double total_ms = c->l * layer_ms + head_ms, total_flop = c->l * layer_flop + head_flop;
            printf(
                "{\"bench\":\"gemm_total\",\"config\":\"%s\",\"lib\":\"%s\",\"l\":%lld,\"h\":%lld,\"s\":%lld,"
                "\"b\":%lld,\"V\":%lld,\"layer_ms\":%.3f,\"head_ms\":%.3f,\"iter_gemm_ms\":%.2f,"
                "\"gflops\":%.1f,\"threads\":%d,\"env_OPENBLAS_CORETYPE\":\"%s\",\"openblas_core\":\"%s\"}\n",
                c->name, ptdp_gemm_lib_name(libs[l]), (long long)c->l, (long long)c->h,
                (long long)c->s, (long long)c->b, (long long)c->V, layer_ms, head_ms, total_ms,
                total_flop / total_ms * 1e-6, omp_get_max_threads(), coretype,
                openblas_get_corename());
            fflush(stdout);
            ptdp_backend_close(O);
        }
    }
    return 0;
}
