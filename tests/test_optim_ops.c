/* test_optim_ops.c - the optimizer's element-wise kernels
 * (src/kernels/cpu/optim_ops.c) through the CPU backend: AdamW against PyTorch's
 * formula in double, the 16-bit backends' one-pass AdamW (adamw_master)
 * against AdamW, copy and rounding bit for bit, the gradient multiplier
 * (gscale) against a scale pass bit for bit, and the reductions,
 * zero and copy. Tolerances: updates are lr-sized on O(1) parameters, so
 * fp32 keeps about 1e-7 of them; reductions accumulate in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "backend_util.h"
#include "test.h"

static void test_adamw(ptdp_backend *o) {
    const int64_t n = 37;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
    float p[37], m[37], v[37], g[37];
    double pd[37], md[37], vd[37];
    fill_normal(p, n, 11, 1.0f);
    for (int64_t i = 0; i < n; i++) {
        m[i] = v[i] = 0.0f;
        pd[i] = p[i];
        md[i] = vd[i] = 0.0;
    }
    for (int step = 1; step <= 3; step++) {
        fill_normal(g, n, 20 + (uint64_t)step, 1.0f);
        g[0] = 0.0f; /* pure decay on one element */
        o->adamw(o, p, g, 1.0f, m, v, n, lr, b1, b2, eps, wd, step);
        double bc1 = 1.0 - pow((double)b1, step), bc2 = 1.0 - pow((double)b2, step);
        for (int64_t i = 0; i < n; i++) {
            pd[i] *= 1.0 - (double)lr * wd;
            md[i] = (double)b1 * md[i] + (1.0 - (double)b1) * g[i];
            vd[i] = (double)b2 * vd[i] + (1.0 - (double)b2) * (double)g[i] * g[i];
            pd[i] -= (double)lr / bc1 * md[i] / (sqrt(vd[i]) / sqrt(bc2) + eps);
        }
    }
    float pr[37], mr[37], vr[37];
    for (int64_t i = 0; i < n; i++) {
        pr[i] = (float)pd[i];
        mr[i] = (float)md[i];
        vr[i] = (float)vd[i];
    }
    /* updates are lr-sized (1e-2) on O(1) params: fp32 keeps ~1e-7 of p */
    check_arr("adamw param", p, pr, n, 1e-6, 1e-7);
    check_arr("adamw m", m, mr, n, 1e-5, 1e-8);
    check_arr("adamw v", v, vr, n, 1e-5, 1e-10);
}

/* The 16-bit backends' adamw_master (AdamW on the master, the working copy
 * written and rounded in the same pass, block by block) gives exactly what
 * adamw, copy and quantize give: master, m, v and the working copy, bit for
 * bit, over several blocks and a tail. Its gradient multiplier gscale
 * (unscale and clip) gives what scaling the gradient first gives, and so
 * does the fp32 backend's adamw's, against the same reference. */
static void test_adamw_master(void) {
    const int64_t n = 3 * 16384 + 777;
    float *p = fmalloc(n), *m = fmalloc(n), *v = fmalloc(n), *g = fmalloc(n), *w = fmalloc(n);
    float *p2 = fmalloc(n), *m2 = fmalloc(n), *v2 = fmalloc(n), *w2 = fmalloc(n);
    float *g2 = fmalloc(n), *p3 = fmalloc(n), *m3 = fmalloc(n), *v3 = fmalloc(n);
    const ptdp_dtype dts[] = {PTDP_DTYPE_BF16, PTDP_DTYPE_FP16};
    for (int lib = 0; lib < 2; lib++)
        for (int k = 0; k < 2; k++) {
            ptdp_backend *o = test_cpu_backend(lib ? PTDP_GEMM_OPENBLAS : PTDP_GEMM_ONEDNN, dts[k]);
            CHECK(o->adamw_master != NULL);
            if (!o->adamw_master) continue;
            fill_normal(p, n, 31, 1.0f);
            memcpy(p2, p, sizeof(float) * (size_t)n), memcpy(p3, p, sizeof(float) * (size_t)n);
            memset(m, 0, sizeof(float) * (size_t)n), memset(v, 0, sizeof(float) * (size_t)n);
            memset(m2, 0, sizeof(float) * (size_t)n), memset(v2, 0, sizeof(float) * (size_t)n);
            memset(m3, 0, sizeof(float) * (size_t)n), memset(v3, 0, sizeof(float) * (size_t)n);
            ptdp_backend *f =
                test_cpu_backend(lib ? PTDP_GEMM_OPENBLAS : PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
            for (int step = 1; step <= 3; step++) {
                const float gs = step == 2 ? 0.3f : 1.0f / 1024; /* clip; unscale */
                fill_normal(g, n, 40 + (uint64_t)step, 100.0f);
                o->adamw_master(o, p, w, g, gs, m, v, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
                f->adamw(f, p3, g, gs, m3, v3, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
                for (int64_t i = 0; i < n; i++) g2[i] = g[i] * gs; /* a scale pass */
                o->adamw(o, p2, g2, 1.0f, m2, v2, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
                o->copy(o, w2, p2, n);
                o->quantize(o, w2, n);
            }
            CHECK(!memcmp(p, p2, sizeof(float) * (size_t)n));
            CHECK(!memcmp(m, m2, sizeof(float) * (size_t)n));
            CHECK(!memcmp(v, v2, sizeof(float) * (size_t)n));
            CHECK(!memcmp(w, w2, sizeof(float) * (size_t)n));
            CHECK(!memcmp(p3, p2, sizeof(float) * (size_t)n));
            CHECK(!memcmp(m3, m2, sizeof(float) * (size_t)n));
            CHECK(!memcmp(v3, v2, sizeof(float) * (size_t)n));
            CHECK(memcmp(w, p, sizeof(float) * (size_t)n) != 0); /* the copy is rounded */
        }
    free(p), free(m), free(v), free(g), free(w), free(p2), free(m2), free(v2), free(w2);
    free(g2), free(p3), free(m3), free(v3);
}

static void test_reductions(ptdp_backend *o) {
    const int64_t n = 100003;
    float *x = fmalloc(n), *y = fmalloc(n);
    fill_normal(x, n, 12, 1.0f);
    double s = 0, q = 0;
    for (int64_t i = 0; i < n; i++) {
        s += x[i];
        q += (double)x[i] * x[i];
    }
    CHECK_CLOSE(o->sum(o, x, n), s, 1e-12, 1e-9);
    CHECK_CLOSE(o->sumsq(o, x, n), q, 1e-12, 1e-9);
    CHECK(o->sum(o, x, 0) == 0.0 && o->sumsq(o, x, 0) == 0.0);
    o->zero(o, y, n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += y[i] != 0.0f;
    CHECK(bad == 0);
    o->copy(o, y, x, n);
    CHECK(memcmp(x, y, sizeof(float) * (size_t)n) == 0);
    free(x);
    free(y);
}

int main(void) {
    ptdp_backend *o = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
    CHECK(o != NULL);
    test_adamw(o);
    test_adamw_master();
    test_reductions(o);
    return test_done("test_optim_ops");
}
