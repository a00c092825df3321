/* act.c - the element-wise kernels around the GEMMs, fused as in the paper:
 * bias + GeLU, bias + dropout + residual add, plus plain bias add/backward;
 * and the Llama family's fused SwiGLU (gate and up halves of one GEMM).
 * Column reductions (bias gradients) are split by columns across threads so
 * every sum runs over rows in one fixed order: bitwise reproducible. The _r
 * forms (the 16-bit backends') round each row right after writing it; the
 * forms on bf16 storage are half/act_b16.c's. */
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/fastmath.h"

#define GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

int ptdp__dropout_keep(ptdp_dropout d, uint64_t e) {
    uint32_t r[4];
    ptdp_rng_u32x4(d.key, (d.offset + e) >> 2, r);
    uint32_t thr = (uint32_t)((double)d.p * 4294967296.0);
    return r[(d.offset + e) & 3] >= thr;
}

uint64_t ptdp__dropout_row_index(ptdp_dropout d, int64_t r, int64_t w) {
    if (d.b <= 0) return (uint64_t)(r * w);
    const int64_t si = r / d.b, bi = r % d.b;
    return ((((uint64_t)si) << 24) + (uint64_t)(d.sample0 + bi)) * (uint64_t)w;
}

void ptdp__bias_add_r(float *y, const float *bias, int64_t N, int64_t n, ptdp__round_fn rnd) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        for (int64_t j = 0; j < n; j++) y[r * n + j] += bias[j];
        if (rnd) rnd(y + r * n, n);
    }
}

void ptdp__bias_add(float *y, const float *bias, int64_t N, int64_t n) {
    ptdp__bias_add_r(y, bias, N, n, NULL);
}

/* columns [j0, j0 + 64) of dbias += the column sums of dy [N, n], rows in
 * order (half/act_b16.c sums bf16 values the same way) */
__attribute__((always_inline)) static inline void bias_cols(const float *dy, float *dbias,
                                                            int64_t N, int64_t n, int64_t j0) {
    const int64_t j1 = j0 + 64 < n ? j0 + 64 : n;
    float acc[64] = {0};
    for (int64_t r = 0; r < N; r++)
        for (int64_t j = j0; j < j1; j++) acc[j - j0] += dy[r * n + j];
    for (int64_t j = j0; j < j1; j++) dbias[j] += acc[j - j0];
}

void ptdp__bias_bwd(const float *dy, float *dbias, int64_t N, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t j0 = 0; j0 < n; j0 += 64) bias_cols(dy, dbias, N, n, j0);
}

/* One row of each GeLU pass, out of line and cloned for AVX-512 (chosen at
 * run time): the tanh polynomial is compute-bound, and twice the lanes pay
 * where the CPU has them. */
PTDP__ROW_CLONES void ptdp__gelu_fwd_row(const float *xr, const float *bias, float *o, int64_t n) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++) {
        float u = xr[j] + bias[j];
        float t = ptdp__tanhf(GELU_C * (u + GELU_A * u * u * u));
        o[j] = 0.5f * u * (1.0f + t);
    }
}

PTDP__ROW_CLONES void ptdp__gelu_bwd_row(const float *g, const float *xr, const float *bias,
                                         float *d, int64_t n) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++) {
        float u = xr[j] + bias[j];
        float t = ptdp__tanhf(GELU_C * (u + GELU_A * u * u * u));
        float dg =
            0.5f * (1.0f + t) + 0.5f * u * (1.0f - t * t) * GELU_C * (1.0f + 3.0f * GELU_A * u * u);
        d[j] = g[j] * dg;
    }
}

void ptdp__bias_gelu_fwd_r(const float *x, const float *bias, float *out, int64_t N, int64_t n,
                           ptdp__round_fn rnd) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        ptdp__gelu_fwd_row(x + r * n, bias, out + r * n, n);
        if (rnd) rnd(out + r * n, n);
    }
}

void ptdp__bias_gelu_fwd(const float *x, const float *bias, float *out, int64_t N, int64_t n) {
    ptdp__bias_gelu_fwd_r(x, bias, out, N, n, NULL);
}

void ptdp__bias_gelu_bwd_r(const float *dout, const float *x, const float *bias, float *dx,
                           float *dbias, int64_t N, int64_t n, ptdp__round_fn rnd) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        ptdp__gelu_bwd_row(dout + r * n, x + r * n, bias, dx + r * n, n);
        if (rnd) rnd(dx + r * n, n);
    }
    ptdp__bias_bwd(dx, dbias, N, n);
}

void ptdp__bias_gelu_bwd(const float *dout, const float *x, const float *bias, float *dx,
                         float *dbias, int64_t N, int64_t n) {
    ptdp__bias_gelu_bwd_r(dout, x, bias, dx, dbias, N, n, NULL);
}

/* SwiGLU rows: gate a = x[j] (+ bias[j]), up u = x[fl + j] (+ bias[fl + j]),
 * sg = 1 / (1 + e^-a) (ptdp__expf clamps, so a << 0 gives sg ~ 0 and a >> 0
 * gives 1, never a NaN), silu(a) = a sg. Cloned for AVX-512 like GeLU's; a
 * recomputed forward and the backward compute silu in the same bits. */
static inline float sigmoid_f(float a) { return 1.0f / (1.0f + ptdp__expf(-a)); }

PTDP__ROW_CLONES void ptdp__swiglu_fwd_row(const float *x, const float *bias, float *o,
                                           int64_t fl) {
    const float *u = x + fl;
    if (bias) {
        const float *bg = bias, *bu = bias + fl;
#pragma omp simd
        for (int64_t j = 0; j < fl; j++) {
            const float a = x[j] + bg[j];
            o[j] = a * sigmoid_f(a) * (u[j] + bu[j]);
        }
    } else {
#pragma omp simd
        for (int64_t j = 0; j < fl; j++) o[j] = x[j] * sigmoid_f(x[j]) * u[j];
    }
}

/* d(gate) = g u sg (1 + a (1 - sg)), d(up) = g silu(a); d may alias x (each
 * element read before its own write) */
PTDP__ROW_CLONES void ptdp__swiglu_bwd_row(const float *g, const float *x, const float *bias,
                                           float *d, int64_t fl) {
    static const float zero[64];
    for (int64_t j0 = 0; j0 < fl; j0 += 64) { /* zero bias without a branch in the loop */
        const int64_t m = fl - j0 < 64 ? fl - j0 : 64;
        const float *bg = bias ? bias + j0 : zero, *bu = bias ? bias + fl + j0 : zero;
        const float *xa = x + j0, *xu = x + fl + j0, *gr = g + j0;
        float *da = d + j0, *du = d + fl + j0;
#pragma omp simd
        for (int64_t j = 0; j < m; j++) {
            const float a = xa[j] + bg[j], u = xu[j] + bu[j], sg = sigmoid_f(a);
            da[j] = gr[j] * u * (sg * (1.0f + a * (1.0f - sg)));
            du[j] = gr[j] * (a * sg);
        }
    }
}

void ptdp__swiglu_fwd_r(const float *x, const float *bias, float *out, int64_t N, int64_t fl,
                        ptdp__round_fn rnd) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        ptdp__swiglu_fwd_row(x + r * 2 * fl, bias, out + r * fl, fl);
        if (rnd) rnd(out + r * fl, fl);
    }
}

void ptdp__swiglu_fwd(const float *x, const float *bias, float *out, int64_t N, int64_t fl) {
    ptdp__swiglu_fwd_r(x, bias, out, N, fl, NULL);
}

void ptdp__swiglu_bwd_r(const float *dout, const float *x, const float *bias, float *dx,
                        float *dbias, int64_t N, int64_t fl, ptdp__round_fn rnd) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        ptdp__swiglu_bwd_row(dout + r * fl, x + r * 2 * fl, bias, dx + r * 2 * fl, fl);
        if (rnd) rnd(dx + r * 2 * fl, 2 * fl);
    }
    if (dbias) ptdp__bias_bwd(dx, dbias, N, 2 * fl);
}

void ptdp__swiglu_bwd(const float *dout, const float *x, const float *bias, float *dx, float *dbias,
                      int64_t N, int64_t fl) {
    ptdp__swiglu_bwd_r(dout, x, bias, dx, dbias, N, fl, NULL);
}

void ptdp__bias_dropout_add_fwd_r(const float *x, const float *bias, const float *resid, float *out,
                                  int64_t N, int64_t h, ptdp_dropout drop, ptdp__round_fn rnd) {
    if (drop.p == 0.0f) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < N; r++) {
            for (int64_t j = 0; j < h; j++)
                out[r * h + j] = resid[r * h + j] + (x[r * h + j] + bias[j]);
            if (rnd) rnd(out + r * h, h);
        }
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        float tmp[256];
        for (int64_t j0 = 0; j0 < h; j0 += 256) {
            int64_t m = h - j0 < 256 ? h - j0 : 256;
            const int64_t e0 = r * h + j0;
            for (int64_t j = 0; j < m; j++) tmp[j] = x[e0 + j] + bias[j0 + j];
            ptdp__dropout_apply(tmp, tmp, m, drop,
                                ptdp__dropout_row_index(drop, r, h) + (uint64_t)j0);
            for (int64_t j = 0; j < m; j++) out[e0 + j] = resid[e0 + j] + tmp[j];
        }
        if (rnd) rnd(out + r * h, h);
    }
}

void ptdp__bias_dropout_add_fwd(const float *x, const float *bias, const float *resid, float *out,
                                int64_t N, int64_t h, ptdp_dropout drop) {
    ptdp__bias_dropout_add_fwd_r(x, bias, resid, out, N, h, drop, NULL);
}

void ptdp__bias_dropout_add_bwd_r(const float *dout, float *dx, float *dbias, int64_t N, int64_t h,
                                  ptdp_dropout drop, ptdp__round_fn rnd) {
    if (drop.p != 0.0f || dx != dout || rnd) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < N; r++) {
            if (drop.p != 0.0f)
                ptdp__dropout_apply(dout + r * h, dx + r * h, h, drop,
                                    ptdp__dropout_row_index(drop, r, h));
            else if (dx != dout)
                memcpy(dx + r * h, dout + r * h, sizeof(float) * (size_t)h);
            if (rnd) rnd(dx + r * h, h);
        }
    }
    ptdp__bias_bwd(dx, dbias, N, h);
}

void ptdp__bias_dropout_add_bwd(const float *dout, float *dx, float *dbias, int64_t N, int64_t h,
                                ptdp_dropout drop) {
    ptdp__bias_dropout_add_bwd_r(dout, dx, dbias, N, h, drop, NULL);
}

/* Forward and backward are the same operation: keep-mask times 1/(1-p). */
void ptdp__dropout_inplace(float *x, int64_t n, ptdp_dropout drop) {
    if (drop.p == 0.0f) return;
    if (drop.b > 0) { /* an activation [s, b, width], keyed by sample */
        const int64_t w = drop.width, rows = n / w;
        PTDP_ASSERT(w > 0 && rows * w == n);
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++)
            ptdp__dropout_apply(x + r * w, x + r * w, w, drop, ptdp__dropout_row_index(drop, r, w));
        return;
    }
    const int64_t blk = 4096;
#pragma omp parallel for schedule(static)
    for (int64_t e0 = 0; e0 < n; e0 += blk)
        ptdp__dropout_apply(x + e0, x + e0, n - e0 < blk ? n - e0 : blk, drop, (uint64_t)e0);
}
