/* norm.c - LayerNorm and RMSNorm, forward and backward, over the last
 * dimension, one OpenMP thread per block of rows. Statistics in fp32:
 * LayerNorm's with a two-pass mean/variance (what PyTorch's CPU kernel
 * effectively computes), RMSNorm's mean of squares in one pass. Not here:
 * a norm with a learned offset on RMSNorm, a fused residual add. */
#include <math.h>
#include <omp.h>

#include "kernels/cpu/cpu.h"

/* A row's sums run in 16 fixed lanes (element i adds into lane i % 16) and
 * the lanes are added pairwise at the end: the same order, so the same bits,
 * on AVX2 and AVX-512, and vector adds where one running sum would be a chain
 * of dependent scalar adds (4 cycles each: the forward ran at 13 GB/s). */
enum { LANES = 16 };

static inline float lanes_total(float *acc) {
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

void ptdp__layernorm_fwd_r(const float *x, const float *w, const float *b, float *out, float *mean,
                           float *rstd, int64_t N, int64_t h, float eps, ptdp__round_fn rnd) {
    const int64_t hv = h - h % LANES;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * h;
        float *o = out + n * h;
        float acc[LANES] = {0};
        for (int64_t i = 0; i < hv; i += LANES)
            for (int j = 0; j < LANES; j++) acc[j] += xr[i + j];
        for (int64_t i = hv; i < h; i++) acc[i - hv] += xr[i];
        const float m = lanes_total(acc) / (float)h;
        float acc2[LANES] = {0};
        for (int64_t i = 0; i < hv; i += LANES)
            for (int j = 0; j < LANES; j++) {
                float d = xr[i + j] - m;
                acc2[j] += d * d;
            }
        for (int64_t i = hv; i < h; i++) acc2[i - hv] += (xr[i] - m) * (xr[i] - m);
        const float v = lanes_total(acc2) / (float)h;
        const float r = 1.0f / sqrtf(v + eps);
        for (int64_t i = 0; i < h; i++) o[i] = (xr[i] - m) * r * w[i] + b[i];
        if (rnd) rnd(o, h);
        mean[n] = m;
        rstd[n] = r;
    }
}

/* dx_i = rstd * (g_i - mean(g) - xhat_i * mean(g . xhat)), g = dout * w.
 * Weight and bias gradients: each thread sums its static block of rows, then
 * the partial sums are added in thread order, so results are bitwise
 * reproducible for a given thread count (resume relies on that). */
void ptdp__layernorm_fwd(const float *x, const float *w, const float *b, float *out, float *mean,
                         float *rstd, int64_t N, int64_t h, float eps) {
    ptdp__layernorm_fwd_r(x, w, b, out, mean, rstd, N, h, eps, NULL);
}

void ptdp__layernorm_bwd_r(const float *dout, const float *x, const float *w, const float *mean,
                           const float *rstd, float *dx, float *dw, float *db, int64_t N, int64_t h,
                           ptdp__round_fn rnd) {
    float *parts[256];
    int nthr = 1;
#pragma omp parallel
    {
        float local[2 * h]; /* VLA: h is at most a few thousand */
        float *dwl = local, *dbl = local + h;
        for (int64_t i = 0; i < 2 * h; i++) local[i] = 0.0f;
        int t = omp_get_thread_num();
        PTDP_ASSERT(t < 256);
        parts[t] = local;
#pragma omp single
        nthr = omp_get_num_threads();
#pragma omp for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            const float *g = dout + n * h, *xr = x + n * h;
            float *d = dx + n * h;
            float m = mean[n], r = rstd[n];
            float ag[LANES] = {0}, agx[LANES] = {0};
            for (int64_t i0 = 0; i0 < h; i0 += LANES) {
                const int64_t len = h - i0 < LANES ? h - i0 : LANES;
                for (int64_t j = 0; j < len; j++) {
                    const int64_t i = i0 + j;
                    float xh = (xr[i] - m) * r;
                    float gi = g[i] * w[i];
                    ag[j] += gi;
                    agx[j] += gi * xh;
                    dwl[i] += g[i] * xh;
                    dbl[i] += g[i];
                }
            }
            const float sg = lanes_total(ag) / (float)h, sgx = lanes_total(agx) / (float)h;
            for (int64_t i = 0; i < h; i++) {
                float xh = (xr[i] - m) * r;
                d[i] += r * (g[i] * w[i] - sg - xh * sgx);
            }
            if (rnd) rnd(d, h);
        }
        /* implicit barrier above; the single below runs while the other
         * threads wait at its barrier, so their stack buffers stay alive */
#pragma omp single
        for (int k = 0; k < nthr; k++)
            for (int64_t i = 0; i < h; i++) {
                dw[i] += parts[k][i];
                db[i] += parts[k][h + i];
            }
    }
}

void ptdp__layernorm_bwd(const float *dout, const float *x, const float *w, const float *mean,
                         const float *rstd, float *dx, float *dw, float *db, int64_t N, int64_t h) {
    ptdp__layernorm_bwd_r(dout, x, w, mean, rstd, dx, dw, db, N, h, NULL);
}

/* RMSNorm (Megatron's --normalization RMSNorm, Hugging Face's LlamaRMSNorm):
 * out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps), the mean of squares
 * in LayerNorm's 16 fixed lanes (the same bits on AVX2 and AVX-512). */
void ptdp__rmsnorm_fwd_r(const float *x, const float *w, float *out, float *rstd, int64_t N,
                         int64_t h, float eps, ptdp__round_fn rnd) {
    const int64_t hv = h - h % LANES;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * h;
        float *o = out + n * h;
        float acc[LANES] = {0};
        for (int64_t i = 0; i < hv; i += LANES)
            for (int j = 0; j < LANES; j++) acc[j] += xr[i + j] * xr[i + j];
        for (int64_t i = hv; i < h; i++) acc[i - hv] += xr[i] * xr[i];
        const float r = 1.0f / sqrtf(lanes_total(acc) / (float)h + eps);
        for (int64_t i = 0; i < h; i++) o[i] = xr[i] * r * w[i];
        if (rnd) rnd(o, h);
        rstd[n] = r;
    }
}

void ptdp__rmsnorm_fwd(const float *x, const float *w, float *out, float *rstd, int64_t N,
                       int64_t h, float eps) {
    ptdp__rmsnorm_fwd_r(x, w, out, rstd, N, h, eps, NULL);
}

/* dx_i += rstd * (g_i - xhat_i * mean(g . xhat)), g = dout * w, xhat = x *
 * rstd; dw += sum_rows dout * xhat in per-thread partials added in thread
 * order, as LayerNorm's. */
void ptdp__rmsnorm_bwd_r(const float *dout, const float *x, const float *w, const float *rstd,
                         float *dx, float *dw, int64_t N, int64_t h, ptdp__round_fn rnd) {
    float *parts[256];
    int nthr = 1;
#pragma omp parallel
    {
        float dwl[h]; /* VLA: h is at most a few thousand */
        for (int64_t i = 0; i < h; i++) dwl[i] = 0.0f;
        int t = omp_get_thread_num();
        PTDP_ASSERT(t < 256);
        parts[t] = dwl;
#pragma omp single
        nthr = omp_get_num_threads();
#pragma omp for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            const float *g = dout + n * h, *xr = x + n * h;
            float *d = dx + n * h;
            const float r = rstd[n];
            float agx[LANES] = {0};
            for (int64_t i0 = 0; i0 < h; i0 += LANES) {
                const int64_t len = h - i0 < LANES ? h - i0 : LANES;
                for (int64_t j = 0; j < len; j++) {
                    const int64_t i = i0 + j;
                    const float xh = xr[i] * r;
                    agx[j] += g[i] * w[i] * xh;
                    dwl[i] += g[i] * xh;
                }
            }
            const float sgx = lanes_total(agx) / (float)h;
            for (int64_t i = 0; i < h; i++) d[i] += r * (g[i] * w[i] - xr[i] * r * sgx);
            if (rnd) rnd(d, h);
        }
#pragma omp single
        for (int k = 0; k < nthr; k++)
            for (int64_t i = 0; i < h; i++) dw[i] += parts[k][i];
    }
}

void ptdp__rmsnorm_bwd(const float *dout, const float *x, const float *w, const float *rstd,
                       float *dx, float *dw, int64_t N, int64_t h) {
    ptdp__rmsnorm_bwd_r(dout, x, w, rstd, dx, dw, N, h, NULL);
}
