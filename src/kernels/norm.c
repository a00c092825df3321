/* norm.c - LayerNorm forward and backward over the last dimension, one OpenMP
 * thread per block of rows. Statistics in fp32 with a two-pass mean/variance
 * (what PyTorch's CPU kernel effectively computes). Not here: RMSNorm. */
#include <math.h>
#include <omp.h>

#include "kernels/cpu.h"

void ptdp__layernorm_fwd(const float *x, const float *w, const float *b, float *out, float *mean,
                         float *rstd, int64_t N, int64_t h, float eps) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * h;
        float *o = out + n * h;
        float m = 0.0f;
        for (int64_t i = 0; i < h; i++) m += xr[i];
        m /= (float)h;
        float v = 0.0f;
        for (int64_t i = 0; i < h; i++) {
            float d = xr[i] - m;
            v += d * d;
        }
        v /= (float)h;
        float r = 1.0f / sqrtf(v + eps);
        for (int64_t i = 0; i < h; i++) o[i] = (xr[i] - m) * r * w[i] + b[i];
        mean[n] = m;
        rstd[n] = r;
    }
}

/* dx_i = rstd * (g_i - mean(g) - xhat_i * mean(g . xhat)), g = dout * w.
 * Weight and bias gradients: each thread sums its static block of rows, then
 * the partial sums are added in thread order, so results are bitwise
 * reproducible for a given thread count (resume relies on that). */
void ptdp__layernorm_bwd(const float *dout, const float *x, const float *w, const float *mean,
                         const float *rstd, float *dx, float *dw, float *db, int64_t N, int64_t h) {
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
            float sg = 0.0f, sgx = 0.0f;
            for (int64_t i = 0; i < h; i++) {
                float xh = (xr[i] - m) * r;
                float gi = g[i] * w[i];
                sg += gi;
                sgx += gi * xh;
                dwl[i] += g[i] * xh;
                dbl[i] += g[i];
            }
            sg /= (float)h;
            sgx /= (float)h;
            for (int64_t i = 0; i < h; i++) {
                float xh = (xr[i] - m) * r;
                d[i] += r * (g[i] * w[i] - sg - xh * sgx);
            }
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
