/* ref.c - plain reference versions of the kernels: single thread, obvious
 * loops, double accumulation. Tests compare every fast kernel with these. */
#include <math.h>
#include <stdlib.h>

#include "kernels/kernels.h"

void ptdp_ref_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                   int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double a = ta ? A[k * lda + i] : A[i * lda + k];
                double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                acc += a * b;
            }
            C[i * ldc + j] = (float)(alpha * acc + (beta == 0.0f ? 0.0 : beta * C[i * ldc + j]));
        }
}

void ptdp_ref_layernorm_fwd(const float *x, const float *w, const float *b, float *out, int64_t N,
                            int64_t h, float eps) {
    for (int64_t n = 0; n < N; n++) {
        double m = 0, v = 0;
        for (int64_t i = 0; i < h; i++) m += x[n * h + i];
        m /= (double)h;
        for (int64_t i = 0; i < h; i++) v += (x[n * h + i] - m) * (x[n * h + i] - m);
        v /= (double)h;
        double r = 1.0 / sqrt(v + eps);
        for (int64_t i = 0; i < h; i++)
            out[n * h + i] = (float)((x[n * h + i] - m) * r * w[i] + b[i]);
    }
}

float ptdp_ref_gelu(float x) {
    double u = x;
    return (float)(0.5 * u * (1.0 + tanh(0.79788456080286535588 * (u + 0.044715 * u * u * u))));
}

void ptdp_ref_softmax_causal(const float *scores, float *probs, int64_t s, float scale) {
    for (int64_t i = 0; i < s; i++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; j++) mx = fmax(mx, (double)scale * scores[i * s + j]);
        for (int64_t j = 0; j <= i; j++) sum += exp((double)scale * scores[i * s + j] - mx);
        for (int64_t j = 0; j < s; j++)
            probs[i * s + j] =
                j <= i ? (float)(exp((double)scale * scores[i * s + j] - mx) / sum) : 0.0f;
    }
}

void ptdp_ref_attention_fwd(const float *qkv, float *ctx, int64_t s, int64_t b, int64_t al,
                            int64_t hd) {
    const int64_t ld3 = b * al * 3 * hd, ldc = b * al * hd;
    double *p = malloc(sizeof(double) * (size_t)s);
    PTDP_ASSERT(p);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t j = 0; j < al; j++) {
            const float *Q = qkv + bi * al * 3 * hd + j * 3 * hd, *K = Q + hd, *V = Q + 2 * hd;
            for (int64_t i = 0; i < s; i++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t k = 0; k <= i; k++) {
                    double d = 0;
                    for (int64_t e = 0; e < hd; e++) d += (double)Q[i * ld3 + e] * K[k * ld3 + e];
                    p[k] = d / sqrt((double)hd);
                    mx = fmax(mx, p[k]);
                }
                for (int64_t k = 0; k <= i; k++) sum += (p[k] = exp(p[k] - mx));
                for (int64_t e = 0; e < hd; e++) {
                    double acc = 0;
                    for (int64_t k = 0; k <= i; k++) acc += p[k] / sum * V[k * ld3 + e];
                    ctx[i * ldc + bi * al * hd + j * hd + e] = (float)acc;
                }
            }
        }
    free(p);
}

double ptdp_ref_xent(const float *logits, const int32_t *targets, int64_t N, int64_t Vpad,
                     int64_t V) {
    double total = 0;
    for (int64_t n = 0; n < N; n++) {
        const float *l = logits + n * Vpad;
        double mx = -INFINITY, sum = 0;
        for (int64_t c = 0; c < V; c++) mx = fmax(mx, l[c]);
        for (int64_t c = 0; c < V; c++) sum += exp(l[c] - mx);
        total += log(sum) + mx - l[targets[n]];
    }
    return total / (double)N;
}
