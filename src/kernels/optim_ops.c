/* optim_ops.c - the optimizer's element-wise kernels: AdamW, sums of squares
 * for the gradient norm, scaling, sums. Reductions use per-thread partials
 * combined in thread order (bitwise reproducible for a thread count). */
#include <math.h>
#include <omp.h>

#include "kernels/cpu.h"

void ptdp__adamw(float *param, const float *grad, float *m, float *v, int64_t n, float lr, float beta1,
                 float beta2, float eps, float wd, int64_t step) {
    /* PyTorch's AdamW, step by step, so fp32 results track the reference */
    const float bc1 = 1.0f - powf(beta1, (float)step);
    const float bc2s = sqrtf(1.0f - powf(beta2, (float)step));
    const float step_size = lr / bc1, decay = 1.0f - lr * wd;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i];
        float p = param[i] * decay;
        float mi = m[i] * beta1 + g * (1.0f - beta1);
        float vi = v[i] * beta2 + g * g * (1.0f - beta2);
        m[i] = mi;
        v[i] = vi;
        param[i] = p - step_size * (mi / (sqrtf(vi) / bc2s + eps));
    }
}

static double ordered_sum(const float *x, int64_t n, int squares) {
    double parts[256];
    int nthr = 1;
#pragma omp parallel
    {
        double acc = 0.0;
        int t = omp_get_thread_num();
#pragma omp single
        nthr = omp_get_num_threads();
#pragma omp for schedule(static)
        for (int64_t i = 0; i < n; i++) acc += squares ? (double)x[i] * x[i] : (double)x[i];
        if (t < 256) parts[t] = acc;
    }
    double total = 0.0;
    for (int k = 0; k < nthr && k < 256; k++) total += parts[k];
    return total;
}

double ptdp__sumsq(const float *x, int64_t n) { return ordered_sum(x, n, 1); }
double ptdp__sum(const float *x, int64_t n) { return ordered_sum(x, n, 0); }

void ptdp__scale(float *x, float a, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) x[i] *= a;
}
