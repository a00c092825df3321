/* bench_kernels.c - the fp32 memory-bound kernels of one layer (LayerNorm,
 * bias + GeLU, the bias gradient, bias + residual add; and the Llama family's
 * in their place: RMSNorm, SwiGLU of width 8h/3, the MLP of the same FLOPs)
 * on the token rows of the benchmark configurations (N = s * b = 1024 rows of
 * h or 4h floats, as bench_gemm.c describes them), then one layer's
 * attention, forward and backward, through the fp32 backend and the bf16 one
 * (native bf16 tiles where the CPU has AVX512_BF16), with a key/value group
 * per head and with the Llama-shaped 2, 2 or 4 groups, and the rotary
 * embeddings of that QKV. Each kernel runs --reps times (default 50; the
 * attention a fifth of that) after 3 warm-ups; one JSON line per (config,
 * kernel) with the median and, for the element-wise kernels, the bytes they
 * must move at least (every input read once, every output written once) over
 * that time. Last, the bf16 copies of the weights the native bf16 GEMM makes
 * once per step (both orientations of one layer's four weights, and of the
 * tied embedding), by ptdp's own packer (both orientations in one pass, and
 * each on its own) and by oneDNN's reorder in turn, each
 * after 64 MiB of other writes (the weights come from memory in training);
 * skipped without a native bf16 matmul. Then the bf16 backend's optimizer step
 * on the configuration's parameter count: AdamW on the fp32 masters with the
 * rounded working copy written in the same pass (adamw_master), against
 * AdamW, then the copy and its rounding as passes of their own. Then the
 * bf16 table's loss-head backward, its one op against the composition
 * (bench_head). And the bf16 backend's element-wise ops, rounding each row as
 * they write it, against the fp32 op and a rounding pass (bench_rounding),
 * and its attention with each head's operands packed once against packing
 * at every tile (bench_attention_packs).
 * Speed goals
 * are read off bench_train; this is where a kernel change is measured alone.
 *
 * Usage: bench_kernels [--config b|c|d] [--reps N] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/cpu/half/half.h"
#include "kernels/kernels.h"

typedef struct {
    const char *name;
    int64_t h, s, b; /* s * b = N_ROWS; heads of 64 */
    int64_t l;       /* layers */
} config;

/* the CPU backend over oneDNN of each precision, opened on first use and
 * closed at the end of main */
static ptdp_backend *backends[3];
static ptdp_backend *cpu(ptdp_dtype dt) {
    if (!backends[dt]) {
        ptdp_backend_params p = ptdp_backend_default_params();
        p.dtype = dt;
        if (ptdp_backend_open(&backends[dt], &p) != PTDP_OK) {
            fprintf(stderr, "bench_kernels: %s\n", ptdp_last_error());
            exit(1);
        }
    }
    return backends[dt];
}

static const config CONFIGS[] = {
    {"b", 256, 128, 8, 4}, {"c", 384, 256, 4, 6}, {"d", 768, 1024, 1, 12}};
enum { N_ROWS = 1024 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the JSON lines of two ways timed in alternation, t [reps][2] (column 1:
 * impl1, 0: impl0): median and best of each; fields, a JSON fragment, goes
 * after "impl" */
static void print_pair(const char *config, const char *kernel, const char *impl1, const char *impl0,
                       const char *fields, const double *t, int reps) {
    double *u = malloc(sizeof(double) * (size_t)reps);
    for (int col = 1; col >= 0; col--) {
        for (int r = 0; r < reps; r++) u[r] = t[r * 2 + col];
        qsort(u, (size_t)reps, sizeof *u, cmp_double);
        printf("{\"bench\":\"kernel\",\"config\":\"%s\",\"kernel\":\"%s\",\"impl\":\"%s\",%s,"
               "\"threads\":%d,\"reps\":%d,\"ms_median\":%.3f,\"ms_best\":%.3f}\n",
               config, kernel, col ? impl1 : impl0, fields, omp_get_max_threads(), reps,
               u[reps / 2] * 1e3, u[0] * 1e3);
    }
    free(u);
}

/* the key/value groups of the Llama-shaped attention beside each config's
 * (heads of 64): 2, 2 and 4 groups for 4, 6 and 12 heads */
static int64_t llama_groups(const config *c) { return c->h / 64 == 12 ? 4 : 2; }

/* one layer's attention (al = h / 64 heads, over gl key/value groups; gl =
 * al: attention_fwd/_bwd, else attention_gqa_*) through the backend of dtype */
static void bench_attention(const config *c, ptdp_dtype dt, int64_t gl, int reps, double *t) {
    ptdp_backend *o = cpu(dt);
    const int64_t s = c->s, b = c->b, hd = 64, al = c->h / hd, n = s * b * al * hd;
    const int64_t nq = s * b * (al + 2 * gl) * hd;
    float *qkv = malloc(sizeof(float) * nq), *ctx = malloc(sizeof(float) * n),
          *dctx = malloc(sizeof(float) * n), *dqkv = malloc(sizeof(float) * nq),
          *saved = malloc(sizeof(float) * o->attention_saved_floats(o, s, b, al)),
          *scr = malloc(sizeof(float) * ptdp_attention_scratch_floats(s, omp_get_max_threads()));
    for (int64_t e = 0; e < nq; e++) qkv[e] = (float)((e * 7919) % 1000) * 2e-3f - 1.0f;
    for (int64_t e = 0; e < n; e++) dctx[e] = (float)((e * 104729) % 1000) * 1e-3f - 0.5f;
    ptdp_dropout nodrop = {0};
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < 3 + reps; r++) {
            double t0 = ptdp_now();
            if (k == 0 && gl == al)
                o->attention_fwd(o, qkv, ctx, saved, scr, s, b, al, hd, nodrop);
            else if (k == 0)
                o->attention_gqa_fwd(o, qkv, ctx, saved, scr, s, b, al, gl, hd, nodrop);
            else if (gl == al)
                o->attention_bwd(o, dctx, qkv, ctx, saved, dqkv, scr, s, b, al, hd, nodrop);
            else
                o->attention_gqa_bwd(o, dctx, qkv, ctx, saved, dqkv, scr, s, b, al, gl, hd, nodrop);
            if (r >= 3) t[r - 3] = ptdp_now() - t0;
        }
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        printf(
            "{\"bench\":\"kernel\",\"config\":\"%s\",\"kernel\":\"attention%s_%s\",\"table\":\"%s\","
            "\"s\":%lld,\"b\":%lld,\"heads\":%lld,\"groups\":%lld,\"threads\":%d,\"reps\":%d,"
            "\"ms_median\":%.4f,\"ms_best\":%.4f}\n",
            c->name, gl == al ? "" : "_gqa", k ? "bwd" : "fwd", o->name, (long long)s, (long long)b,
            (long long)al, (long long)gl, omp_get_max_threads(), reps, t[reps / 2] * 1e3,
            t[0] * 1e3);
    }
    free(qkv), free(ctx), free(dctx), free(dqkv), free(saved), free(scr);
}

/* Rotary embeddings on one layer's QKV [N, (al + 2 gl) 64] (the query and
 * key heads rotated in place, forward and backward), through the backend
 * of dtype: what a Llama layer adds where a GPT one adds position
 * embeddings once per model. GB/s over the q and k values read and written. */
static void bench_rope(const config *c, ptdp_dtype dt, int reps, double *t) {
    ptdp_backend *o = cpu(dt);
    const int64_t hd = 64, al = c->h / hd, gl = llama_groups(c), N = N_ROWS;
    const int64_t n = N * (al + 2 * gl) * hd;
    float *qkv = malloc(sizeof(float) * n), *table = malloc(sizeof(float) * c->s * hd);
    for (int64_t e = 0; e < n; e++) qkv[e] = (float)((e * 7919) % 1000) * 2e-3f - 1.0f;
    ptdp_rope_table_init(o, table, c->s, hd, 10000.0);
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < 3 + reps; r++) {
            const double t0 = ptdp_now();
            (k ? o->rope_bwd : o->rope_fwd)(o, qkv, table, c->s, c->b, al, gl, hd, hd, 0);
            if (r >= 3) t[r - 3] = ptdp_now() - t0;
        }
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        const double bytes = 2.0 * (double)(N * (al + gl) * hd) * 4.0;
        printf("{\"bench\":\"kernel\",\"config\":\"%s\",\"kernel\":\"rope_%s\",\"table\":\"%s\","
               "\"rows\":%lld,\"heads\":%lld,\"groups\":%lld,\"threads\":%d,\"reps\":%d,"
               "\"ms_median\":%.4f,\"ms_best\":%.4f,\"gb_per_s\":%.1f}\n",
               c->name, k ? "bwd" : "fwd", o->name, (long long)N, (long long)al, (long long)gl,
               omp_get_max_threads(), reps, t[reps / 2] * 1e3, t[0] * 1e3,
               bytes / t[reps / 2] * 1e-9);
    }
    free(qkv), free(table);
}

/* The bf16 attention (AVX512_BF16) with each head's q, k, v and dctx packed
 * once (ptdp__attention_fwd_bf16, _bwd_bf16: the backend's) against the tile
 * GEMM packing both operands of every tile product; the two alternate.
 * Outputs unrounded in both (the backend rounds after either). */
static void bench_attention_packs(const config *c, int reps) {
    ptdp_backend *be = cpu(PTDP_DTYPE_BF16);
    if (!(be->caps & PTDP_CAP_ATTENTION16)) return;
    const int64_t s = c->s, b = c->b, hd = 64, al = c->h / hd, n = s * b * al * hd;
    float *qkv = malloc(sizeof(float) * 3 * n), *ctx = malloc(sizeof(float) * n),
          *dctx = malloc(sizeof(float) * n), *dqkv = malloc(sizeof(float) * 3 * n),
          *lse = malloc(sizeof(float) * (size_t)(s * b * al)),
          *scr = malloc(sizeof(float) * ptdp_attention_scratch_floats(s, omp_get_max_threads()));
    double *t = malloc(sizeof(double) * (size_t)reps * 2);
    for (int64_t e = 0; e < 3 * n; e++) qkv[e] = (float)((e * 7919) % 1000) * 2e-3f - 1.0f;
    for (int64_t e = 0; e < n; e++) dctx[e] = (float)((e * 104729) % 1000) * 1e-3f - 0.5f;
    ptdp_round_bf16_n(qkv, 3 * n), ptdp_round_bf16_n(dctx, n);
    const ptdp_dropout nodrop = {0};
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < 3 + reps; r++)
            for (int packed = 1; packed >= 0; packed--) {
                const double t0 = ptdp_now();
                if (k == 0 && packed)
                    ptdp__attention_fwd_bf16(be, qkv, ctx, lse, scr, s, b, al, al, hd, nodrop);
                else if (k == 0)
                    ptdp__attention_fwd(be, ptdp__gemm_tile_bf16, qkv, ctx, lse, scr, s, b, al, al,
                                        hd, nodrop);
                else if (packed)
                    ptdp__attention_bwd_bf16(be, dctx, qkv, ctx, lse, dqkv, scr, s, b, al, al, hd,
                                             nodrop);
                else
                    ptdp__attention_bwd(be, ptdp__gemm_tile_bf16, dctx, qkv, ctx, lse, dqkv, scr, s,
                                        b, al, al, hd, nodrop);
                if (r >= 3) t[(r - 3) * 2 + packed] = ptdp_now() - t0;
            }
        char fields[96];
        snprintf(fields, sizeof fields, "\"s\":%lld,\"b\":%lld,\"heads\":%lld", (long long)s,
                 (long long)b, (long long)al);
        print_pair(c->name, k ? "bf16_attention_bwd" : "bf16_attention_fwd", "packed_per_head",
                   "packed_per_tile", fields, t, reps);
    }
    free(qkv), free(ctx), free(dctx), free(dqkv), free(lse), free(scr), free(t);
}

static void flush_caches(void *p) { memset(p, 1, (size_t)64 << 20); }

/* The bf16 weight copies of one layer ([3h, h], [h, h], [4h, h], [h, 4h],
 * each as W^T for the forward and W for the input gradient) and of the
 * embedding [V, h]: each copy made once and converted 1 + reps times (the
 * first a warm-up), 64 MiB of other writes before each; the medians summed.
 * By ptdp's packer both orientations in one pass (what a step does once
 * both copies exist), each orientation on its own, and oneDNN's reorder. */
static void bench_weight_copies(const config *c, int reps) {
    const int64_t h = c->h, V = c->h == 256 ? 8192 : 50304;
    const int64_t W[5][2] = {{3 * h, h}, {h, h}, {4 * h, h}, {h, 4 * h}, {V, h}};
    float *B = malloc(sizeof(float) * (size_t)(V * h));
    char *flush = malloc((size_t)64 << 20);
    double *t = malloc(sizeof(double) * (size_t)(reps + 1));
    if (!B || !flush || !t) return;
    for (int64_t e = 0; e < V * h; e++) B[e] = (float)((e * 7919) % 1000) * 2e-3f - 1.0f;
    for (int part = 0; part < 2; part++)     /* the layer's 8 copies, the embedding's 2 */
        for (int own = 2; own >= 0; own--) { /* one pass, ptdp's packer, oneDNN's reorder */
            double med = 0, best = 0, elems = 0;
            for (int w = part ? 4 : 0; w < (part ? 5 : 4); w++)
                for (int tb = own == 2; tb < 2; tb++) { /* own 2: both from tb 1 */
                    const int64_t R = W[w][0], C = W[w][1];
                    flush_caches(flush);
                    if (ptdp__gemm_bf16_pack_probe(cpu(PTDP_DTYPE_BF16), tb, N_ROWS, tb ? R : C,
                                                   tb ? C : R, B, C, own, NULL, 0, NULL, t,
                                                   reps + 1, flush_caches, flush)) {
                        if (own == 2) goto next; /* layouts the one pass does not write */
                        goto done;
                    }
                    qsort(t + 1, (size_t)reps, sizeof *t, cmp_double);
                    med += t[1 + reps / 2], best += t[1];
                    elems += (double)(R * C) * (own == 2 ? 2 : 1);
                }
            printf("{\"bench\":\"kernel\",\"config\":\"%s\",\"kernel\":\"bf16_weight_copies_%s\","
                   "\"impl\":\"%s\",\"values\":%.0f,\"threads\":%d,\"reps\":%d,"
                   "\"ms_median\":%.4f,\"ms_best\":%.4f,\"gb_per_s\":%.1f}\n",
                   c->name, part ? "embedding" : "layer",
                   own == 2 ? "ptdp_one_pass"
                   : own    ? "ptdp"
                            : "onednn_reorder",
                   elems, omp_get_max_threads(), reps, med * 1e3, best * 1e3,
                   6.0 * elems / med * 1e-9);
        next:;
        }
done:
    free(B), free(flush), free(t);
}

/* The bf16 backend's optimizer step over n parameters (a GPT of h, l, V):
 * fused (adamw_master) and in three passes (adamw, copy, quantize). */
static void bench_optimizer(const config *c, int reps) {
    ptdp_backend *o = cpu(PTDP_DTYPE_BF16);
    const int64_t h = c->h, V = c->h == 256 ? 8192 : 50304;
    const int64_t n = c->l * 12 * h * h + V * h + 1024 * h;
    float *a[5];
    for (int i = 0; i < 5; i++) {
        a[i] = malloc(sizeof(float) * (size_t)n);
        if (!a[i]) return;
        for (int64_t e = 0; e < n; e++)
            a[i][e] = i == 3 ? 0.0f : (float)((e * 7919 + i) % 1000) * 1e-3f;
    }
    float *master = a[0], *work = a[1], *grad = a[2], *m = a[3], *v = a[4];
    double *t = malloc(sizeof(double) * (size_t)reps * 2);
    for (int r = 0; r < 1 + reps; r++)
        for (int fused = 1; fused >= 0; fused--) {
            const double t0 = ptdp_now();
            if (fused) {
                o->adamw_master(o, master, work, grad, 1.0f, m, v, n, 1e-4f, 0.9f, 0.95f, 1e-8f,
                                0.1f, r + 1);
            } else {
                o->adamw(o, master, grad, 1.0f, m, v, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, r + 1);
                o->copy(o, work, master, n);
                o->quantize(o, work, n);
            }
            if (r > 0) t[(r - 1) * 2 + fused] = ptdp_now() - t0;
        }
    char fields[64];
    snprintf(fields, sizeof fields, "\"params\":%lld", (long long)n);
    print_pair(c->name, "bf16_optimizer_step", "adamw_master", "adamw_copy_quantize", fields, t,
               reps);
    free(t);
    for (int i = 0; i < 5; i++) free(a[i]);
}

/* The bf16 backend's loss head over the configuration's N x V logits, forward
 * and backward (the logits GEMM, the cross-entropy's max and sums, its
 * gradient and the two GEMMs on it): the backend's ops (logits in bf16 where
 * the CPU has native bf16: head_logits, xent_sums, head_bwd) against the
 * composition on fp32 logits (gemm, xent_max and xent_sums rounding what they
 * read, xent_bwd and its rounding, then the GEMMs converting dl twice),
 * alternating. Skipped where the backend has no fused head. */
static void bench_head(const config *c, int reps) {
    ptdp_backend *o = cpu(PTDP_DTYPE_BF16);
    if (!(o->caps & PTDP_CAP_FUSED_HEAD)) return;
    const int64_t h = c->h, V = c->h == 256 ? 8192 : 50304, N = N_ROWS;
    float *L = malloc(sizeof(float) * (size_t)(N * V)), *sumexp = malloc(sizeof(float) * N),
          *gmax = malloc(sizeof(float) * N), *tgt = malloc(sizeof(float) * N),
          *x = malloc(sizeof(float) * (size_t)(N * h)),
          *wte = malloc(sizeof(float) * (size_t)(V * h)), *dw = calloc((size_t)(V * h), 4),
          *dx = malloc(sizeof(float) * (size_t)(N * h));
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(N + c->b));
    double *t = malloc(sizeof(double) * (size_t)reps * 2);
    if (!L || !sumexp || !gmax || !tgt || !x || !wte || !dw || !dx || !tok || !t) return;
    for (int64_t i = 0; i < N * h; i++) x[i] = (float)((i * 31) % 200) * 1e-2f - 1.0f;
    for (int64_t i = 0; i < V * h; i++) wte[i] = (float)((i * 17) % 300) * 1e-3f - 0.15f;
    for (int64_t i = 0; i < N + c->b; i++) tok[i] = (int32_t)((i * 104729) % V);
    o->quantize(o, x, N * h);
    o->quantize(o, wte, V * h);
    ptdp_backend_weights_register(o, wte, V * h);
    const ptdp_xent_grad xg = {sumexp, gmax, tok + 1, c->s + 1, c->s, c->b,
                               V,      0,    V,       1.0f / N, NULL, 0};
    for (int r = 0; r < 1 + reps; r++)
        for (int fused = 1; fused >= 0; fused--) {
            const double t0 = ptdp_now();
            if (fused) {
                o->head_logits(o, x, wte, h, L, gmax, N, V, 0, V);
                o->xent_sums(o, L, gmax, tok + 1, c->s + 1, sumexp, tgt, c->s, c->b, V, 0, V);
                o->head_bwd(o, L, &xg, x, wte, h, dw, dx);
            } else {
                o->gemm(o, 0, 1, N, V, h, 1.0f, x, h, wte, h, 0.0f, L, V);
                ptdp__xent_max_bf16(L, gmax, N, V, 0, V);
                ptdp__xent_sums_bf16(L, gmax, tok + 1, c->s + 1, sumexp, tgt, c->s, c->b, V, 0, V);
                ptdp_head_bwd_composed(o, L, &xg, x, wte, h, dw, dx);
            }
            if (r > 0) t[(r - 1) * 2 + fused] = ptdp_now() - t0;
        }
    char fields[96];
    snprintf(fields, sizeof fields, "\"N\":%lld,\"V\":%lld,\"h\":%lld", (long long)N, (long long)V,
             (long long)h);
    print_pair(c->name, "bf16_head", "table", "composed_fp32_logits", fields, t, reps);
    ptdp_backend_weights_register(o, wte, 0);
    free(L), free(sumexp), free(gmax), free(tgt), free(x), free(wte), free(dw), free(dx), free(tok);
    free(t);
}

typedef struct {
    float *x, *y, *dy, *dx, *w, *bias, *dw, *db, *mean, *rstd, *resid;
    int64_t N, h, fl; /* fl: the SwiGLU width of the MLP of a GPT's FLOPs, 8h/3 up to 64 */
} bufs;

static void run(int k, bufs *B) {
    const int64_t N = B->N, h = B->h;
    ptdp_dropout nodrop = {0};
    switch (k) {
    case 0:
        ptdp__layernorm_fwd(B->x, B->w, B->bias, B->y, B->mean, B->rstd, N, h, 1e-5f);
        break;
    case 1:
        ptdp__layernorm_bwd(B->dy, B->x, B->w, B->mean, B->rstd, B->dx, B->dw, B->db, N, h);
        break;
    case 2:
        ptdp__bias_gelu_fwd(B->x, B->bias, B->y, N, 4 * h);
        break;
    case 3:
        ptdp__bias_gelu_bwd(B->dy, B->x, B->bias, B->dx, B->db, N, 4 * h);
        break;
    case 4:
        ptdp__bias_bwd(B->dy, B->db, N, 3 * h);
        break;
    case 5:
        ptdp__bias_dropout_add_fwd(B->x, B->bias, B->resid, B->y, N, h, nodrop);
        break;
    case 6:
        ptdp__rmsnorm_fwd(B->x, B->w, B->y, B->rstd, N, h, 1e-5f);
        break;
    case 7:
        ptdp__rmsnorm_bwd(B->dy, B->x, B->w, B->rstd, B->dx, B->dw, N, h);
        break;
    case 8:
        ptdp__swiglu_fwd(B->x, NULL, B->y, N, B->fl);
        break;
    default:
        ptdp__swiglu_bwd(B->dy, B->x, NULL, B->dx, NULL, N, B->fl);
        break;
    }
}

enum { KERNELS = 10 };
static const char *NAMES[KERNELS] = {"layernorm_fwd",    "layernorm_bwd", "bias_gelu_fwd",
                                     "bias_gelu_bwd",    "bias_bwd (3h)", "bias_add_residual",
                                     "rmsnorm_fwd",      "rmsnorm_bwd",   "swiglu_fwd (8h/3)",
                                     "swiglu_bwd (8h/3)"};

/* The bf16 backend's element-wise ops (kernel k of run() but the bias
 * gradient's), each row rounded as it is written, against the fp32 op
 * followed by a rounding pass over its output; the two alternate. */
static void bench_rounding(const config *c, bufs *B, int reps) {
    ptdp_backend *o = cpu(PTDP_DTYPE_BF16);
    const int64_t N = B->N, h = B->h;
    const ptdp_dropout nodrop = {0};
    double *t = malloc(sizeof(double) * (size_t)reps * 2);
    for (int k = 0; k < 6; k++) {
        if (k == 4) continue;
        for (int r = 0; r < 3 + reps; r++)
            for (int fused = 1; fused >= 0; fused--) {
                const double t0 = ptdp_now();
                if (!fused) {
                    run(k, B);
                    ptdp_round_bf16_n(k == 1 || k == 3 ? B->dx : B->y,
                                      (k == 2 || k == 3 ? 4 : 1) * N * h);
                } else if (k == 0) {
                    o->layernorm_fwd(o, B->x, B->w, B->bias, B->y, B->mean, B->rstd, N, h, 1e-5f);
                } else if (k == 1) {
                    o->layernorm_bwd(o, B->dy, B->x, B->w, B->mean, B->rstd, B->dx, B->dw, B->db, N,
                                     h);
                } else if (k == 2) {
                    o->bias_gelu_fwd(o, B->x, B->bias, B->y, N, 4 * h);
                } else if (k == 3) {
                    o->bias_gelu_bwd(o, B->dy, B->x, B->bias, B->dx, B->db, N, 4 * h);
                } else {
                    o->bias_dropout_add_fwd(o, B->x, B->bias, B->resid, B->y, N, h, nodrop);
                }
                if (r >= 3) t[(r - 3) * 2 + fused] = ptdp_now() - t0;
            }
        char name[64];
        snprintf(name, sizeof name, "bf16_%s", NAMES[k]);
        print_pair(c->name, name, "rounded_per_row", "fp32_then_rounding_pass", "\"rows\":1024", t,
                   reps);
    }
    free(t);
}

/* floats each kernel must read and write at least, per row */
static double floats_per_row(int k, const bufs *B) {
    static const double per_h[] = {2, 4, 8, 12, 3, 3, 2, 4};
    return k < 8 ? per_h[k] * (double)B->h : (k == 8 ? 3.0 : 5.0) * (double)B->fl;
}

int main(int argc, char **argv) {
    const char *only = NULL;
    int reps = 50;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            only = argv[++i];
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_kernels [--config b|c|d] [--reps N]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    double *t = malloc((size_t)reps * sizeof *t);
    for (size_t c = 0; c < sizeof CONFIGS / sizeof *CONFIGS; c++) {
        if (only && strcmp(only, CONFIGS[c].name)) continue;
        const int64_t N = N_ROWS, h = CONFIGS[c].h, fl = (8 * h / 3 + 63) / 64 * 64;
        const int64_t big = N * (4 * h > 2 * fl ? 4 * h : 2 * fl);
        bufs B = {.N = N, .h = h, .fl = fl};
        float **all[] = {&B.x, &B.y, &B.dy, &B.dx, &B.resid};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
            *all[i] = malloc((size_t)big * sizeof(float));
            for (int64_t e = 0; e < big; e++) (*all[i])[e] = (float)((e * 7919 + i) % 1000) * 1e-3f;
        }
        B.w = calloc((size_t)4 * h, sizeof(float));
        B.bias = calloc((size_t)4 * h, sizeof(float));
        B.dw = calloc((size_t)4 * h, sizeof(float));
        B.db = calloc((size_t)4 * h, sizeof(float));
        B.mean = calloc((size_t)N, sizeof(float));
        B.rstd = calloc((size_t)N, sizeof(float));
        for (int64_t i = 0; i < 4 * h; i++) B.w[i] = 1.0f + 1e-3f * (float)(i % 7);
        ptdp__layernorm_fwd(B.x, B.w, B.bias, B.y, B.mean, B.rstd, N, h, 1e-5f);
        for (int k = 0; k < KERNELS; k++) {
            for (int r = 0; r < 3; r++) run(k, &B);
            for (int r = 0; r < reps; r++) {
                double t0 = ptdp_now();
                run(k, &B);
                t[r] = ptdp_now() - t0;
            }
            qsort(t, (size_t)reps, sizeof *t, cmp_double);
            double med = t[reps / 2], bytes = floats_per_row(k, &B) * (double)N * 4.0;
            printf("{\"bench\":\"kernel\",\"config\":\"%s\",\"kernel\":\"%s\",\"rows\":%lld,"
                   "\"h\":%lld,\"threads\":%d,\"reps\":%d,\"ms_median\":%.4f,\"ms_best\":%.4f,"
                   "\"gb_per_s\":%.1f}\n",
                   CONFIGS[c].name, NAMES[k], (long long)N, (long long)h, omp_get_max_threads(),
                   reps, med * 1e3, t[0] * 1e3, bytes / med * 1e-9);
        }
        bench_rounding(&CONFIGS[c], &B, reps);
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(*all[i]);
        free(B.w), free(B.bias), free(B.dw), free(B.db), free(B.mean), free(B.rstd);
        const int areps = reps / 5 > 1 ? reps / 5 : 1;
        const int64_t al = CONFIGS[c].h / 64, gl = llama_groups(&CONFIGS[c]);
        bench_attention(&CONFIGS[c], PTDP_DTYPE_FP32, al, areps, t);
        bench_attention(&CONFIGS[c], PTDP_DTYPE_BF16, al, areps, t);
        bench_attention(&CONFIGS[c], PTDP_DTYPE_FP32, gl, areps, t);
        bench_attention(&CONFIGS[c], PTDP_DTYPE_BF16, gl, areps, t);
        bench_rope(&CONFIGS[c], PTDP_DTYPE_FP32, reps, t);
        bench_rope(&CONFIGS[c], PTDP_DTYPE_BF16, reps, t);
        bench_attention_packs(&CONFIGS[c], areps);
        bench_weight_copies(&CONFIGS[c], areps);
        bench_optimizer(&CONFIGS[c], areps);
        bench_head(&CONFIGS[c], areps);
    }
    free(t);
    for (int d = 0; d < 3; d++) ptdp_backend_close(backends[d]);
    return 0;
}
