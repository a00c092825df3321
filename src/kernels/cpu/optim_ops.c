/* optim_ops.c - the optimizer's element-wise kernels: AdamW, sums of squares
 * for the gradient norm, scaling, sums. Reductions use per-thread partials
 * combined in thread order (bitwise reproducible for a thread count). */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/fastmath.h"

/* PyTorch's AdamW, step by step, so fp32 results track the reference, on
 * elements [i0, i1); with work, the new value rounded to bf16 is written
 * there as well (the bf16 backend's working weights, rounded in the same loop) */
static inline void adamw_range(float *param, float *work, const float *grad, float gscale, float *m,
                               float *v, int64_t i0, int64_t i1, float beta1, float beta2,
                               float eps, float step_size, float decay, float bc2s) {
    for (int64_t i = i0; i < i1; i++) {
        float g = grad[i] * gscale;
        float p = param[i] * decay;
        float mi = m[i] * beta1 + g * (1.0f - beta1);
        float vi = v[i] * beta2 + g * g * (1.0f - beta2);
        m[i] = mi;
        v[i] = vi;
        p = p - step_size * (mi / (sqrtf(vi) / bc2s + eps));
        param[i] = p;
        if (work) work[i] = ptdp__bf16_round(p);
    }
}

enum { ADAM_BLOCK = 16384 }; /* elements a thread updates at a time: 4 arrays in L2 */

/* AdamW over n elements in blocks. With work, the 16-bit backends' working
 * weights are written too, in the same pass over memory: bf16 rounded in
 * the update's loop; fp16 copied from each block and rounded there by
 * ptdp_round_f16_n while the block is still in cache. */
static void adamw_blocks(float *param, float *work, ptdp_dtype dt, const float *grad, float gscale,
                         float *m, float *v, int64_t n, float lr, float beta1, float beta2,
                         float eps, float wd, int64_t step) {
    const float bc1 = 1.0f - powf(beta1, (float)step);
    const float bc2s = sqrtf(1.0f - powf(beta2, (float)step));
    const float step_size = lr / bc1, decay = 1.0f - lr * wd;
    const int64_t nb = (n + ADAM_BLOCK - 1) / ADAM_BLOCK;
    float *w16 = work && dt == PTDP_DTYPE_BF16 ? work : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < nb; k++) {
        const int64_t i0 = k * ADAM_BLOCK, i1 = i0 + ADAM_BLOCK < n ? i0 + ADAM_BLOCK : n;
        if (w16)
            adamw_range(param, w16, grad, gscale, m, v, i0, i1, beta1, beta2, eps, step_size, decay,
                        bc2s);
        else
            adamw_range(param, NULL, grad, gscale, m, v, i0, i1, beta1, beta2, eps, step_size,
                        decay, bc2s);
        if (work && !w16) {
            memcpy(work + i0, param + i0, sizeof(float) * (size_t)(i1 - i0));
            ptdp_round_f16_n(work + i0, i1 - i0);
        }
    }
}

void ptdp__adamw(float *param, const float *grad, float gscale, float *m, float *v, int64_t n,
                 float lr, float beta1, float beta2, float eps, float wd, int64_t step) {
    adamw_blocks(param, NULL, PTDP_DTYPE_FP32, grad, gscale, m, v, n, lr, beta1, beta2, eps, wd,
                 step);
}

void ptdp__adamw_master(float *master, float *work, ptdp_dtype dt, const float *grad, float gscale,
                        float *m, float *v, int64_t n, float lr, float beta1, float beta2,
                        float eps, float wd, int64_t step) {
    PTDP_ASSERT(dt == PTDP_DTYPE_BF16 || dt == PTDP_DTYPE_FP16);
    adamw_blocks(master, work, dt, grad, gscale, m, v, n, lr, beta1, beta2, eps, wd, step);
}

/* Sum (or sum of squares) of x[i0, i1) in double over 8 interleaved lanes
 * added in lane order at the end: vectorised, and a fixed order for a
 * given range. */
static double range_sum(const float *x, int64_t i0, int64_t i1, int squares) {
    double lane[8] = {0};
    int64_t i = i0;
    if (squares)
        for (; i + 8 <= i1; i += 8)
            for (int k = 0; k < 8; k++) lane[k] += (double)x[i + k] * x[i + k];
    else
        for (; i + 8 <= i1; i += 8)
            for (int k = 0; k < 8; k++) lane[k] += (double)x[i + k];
    for (; i < i1; i++) lane[0] += squares ? (double)x[i] * x[i] : (double)x[i];
    double acc = 0.0;
    for (int k = 0; k < 8; k++) acc += lane[k];
    return acc;
}

/* Thread t sums the t-th contiguous 1/nthr of x; parts are added in thread
 * order: bitwise reproducible for a thread count. Small inputs (per-tensor
 * calls on biases and LayerNorm weights) stay on one thread. */
static double ordered_sum(const float *x, int64_t n, int squares) {
    if (n < 32768) return range_sum(x, 0, n, squares);
    double parts[256];
    int nthr = 1;
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
#pragma omp single
        nthr = nt;
        int64_t chunk = (n + nt - 1) / nt, i0 = t * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
        if (t < 256) parts[t] = i0 < i1 ? range_sum(x, i0, i1, squares) : 0.0;
    }
    double total = 0.0;
    for (int k = 0; k < nthr && k < 256; k++) total += parts[k];
    return total;
}

double ptdp__sumsq(const float *x, int64_t n) { return ordered_sum(x, n, 1); }
double ptdp__sum(const float *x, int64_t n) { return ordered_sum(x, n, 0); }
