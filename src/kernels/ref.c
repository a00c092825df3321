/* ref.c - plain reference versions of the kernels: single thread, obvious
 * loops, double accumulation. Tests compare every fast kernel with these;
 * the Llama family's (RMSNorm, SwiGLU, rotary embeddings, grouped-query
 * attention) have their backwards here too. */
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

void ptdp_ref_rmsnorm_fwd(const float *x, const float *w, float *out, float *rstd, int64_t N,
                          int64_t h, float eps) {
    for (int64_t n = 0; n < N; n++) {
        double ms = 0;
        for (int64_t i = 0; i < h; i++) ms += (double)x[n * h + i] * x[n * h + i];
        const double r = 1.0 / sqrt(ms / (double)h + eps);
        for (int64_t i = 0; i < h; i++) out[n * h + i] = (float)(x[n * h + i] * r * w[i]);
        if (rstd) rstd[n] = (float)r;
    }
}

/* dx_i += r (g_i w_i - xhat_i mean_j(g_j w_j xhat_j)), xhat = x r; dw_i += sum_rows g_i xhat_i */
void ptdp_ref_rmsnorm_bwd(const float *dout, const float *x, const float *w, float *dx, float *dw,
                          int64_t N, int64_t h, float eps) {
    double *acc = calloc((size_t)h, sizeof(double));
    PTDP_ASSERT(acc);
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * h, *g = dout + n * h;
        double ms = 0, sgx = 0;
        for (int64_t i = 0; i < h; i++) ms += (double)xr[i] * xr[i];
        const double r = 1.0 / sqrt(ms / (double)h + eps);
        for (int64_t i = 0; i < h; i++) sgx += (double)g[i] * w[i] * xr[i] * r;
        sgx /= (double)h;
        for (int64_t i = 0; i < h; i++) {
            dx[n * h + i] = (float)(dx[n * h + i] + r * ((double)g[i] * w[i] - xr[i] * r * sgx));
            acc[i] += (double)g[i] * xr[i] * r;
        }
    }
    for (int64_t i = 0; i < h; i++) dw[i] = (float)(dw[i] + acc[i]);
    free(acc);
}

float ptdp_ref_silu(float x) { return (float)((double)x / (1.0 + exp(-(double)x))); }

void ptdp_ref_swiglu_fwd(const float *x, const float *bias, float *out, int64_t N, int64_t fl) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < fl; j++) {
            const double a = (double)x[n * 2 * fl + j] + (bias ? bias[j] : 0.0),
                         u = (double)x[n * 2 * fl + fl + j] + (bias ? bias[fl + j] : 0.0);
            out[n * fl + j] = (float)(a / (1.0 + exp(-a)) * u);
        }
}

void ptdp_ref_swiglu_bwd(const float *dout, const float *x, const float *bias, float *dx,
                         float *dbias, int64_t N, int64_t fl) {
    double *acc = calloc((size_t)(2 * fl), sizeof(double));
    PTDP_ASSERT(acc);
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < fl; j++) {
            const double a = (double)x[n * 2 * fl + j] + (bias ? bias[j] : 0.0),
                         u = (double)x[n * 2 * fl + fl + j] + (bias ? bias[fl + j] : 0.0);
            const double sg = 1.0 / (1.0 + exp(-a)), g = dout[n * fl + j];
            const double da = g * u * sg * (1.0 + a * (1.0 - sg)), du = g * a * sg;
            dx[n * 2 * fl + j] = (float)da, dx[n * 2 * fl + fl + j] = (float)du;
            acc[j] += da, acc[fl + j] += du;
        }
    if (dbias)
        for (int64_t j = 0; j < 2 * fl; j++) dbias[j] = (float)(dbias[j] + acc[j]);
    free(acc);
}

void ptdp_ref_rope(float *qkv, int64_t s, int64_t b, int64_t al, int64_t gl, int64_t hd, int64_t rd,
                   int64_t pos0, double theta, int inverse) {
    const int64_t hpg = al / gl, W = (al + 2 * gl) * hd, half = rd / 2;
    for (int64_t si = 0; si < s; si++)
        for (int64_t i = 0; i < half; i++) {
            const double f = (double)(pos0 + si) * (1.0 / pow(theta, (double)(2 * i) / (double)rd));
            const double c = cos(f), sn = inverse ? -sin(f) : sin(f);
            for (int64_t bi = 0; bi < b; bi++)
                for (int64_t gi = 0; gi < gl; gi++)
                    for (int64_t k = 0; k <= hpg; k++) { /* the query heads and the key head */
                        float *x = qkv + (si * b + bi) * W + (gi * (hpg + 2) + k) * hd;
                        const double x1 = x[i], x2 = x[i + half];
                        x[i] = (float)(x1 * c - x2 * sn);
                        x[i + half] = (float)(x2 * c + x1 * sn);
                    }
        }
}

/* query head j of sequence bi: its q, k, v rows (row stride ld3) in the GQA layout */
static void gqa_heads(int64_t bi, int64_t j, int64_t al, int64_t gl, int64_t hd, int64_t *q,
                      int64_t *k, int64_t *v) {
    const int64_t hpg = al / gl, g0 = (bi * gl + j / hpg) * (hpg + 2) * hd;
    *q = g0 + (j % hpg) * hd, *k = g0 + hpg * hd, *v = *k + hd;
}

void ptdp_ref_attention_gqa_fwd(const float *qkv, float *ctx, int64_t s, int64_t b, int64_t al,
                                int64_t gl, int64_t hd) {
    const int64_t ld3 = b * (al + 2 * gl) * hd, ldc = b * al * hd;
    double *p = malloc(sizeof(double) * (size_t)s);
    PTDP_ASSERT(p);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t j = 0; j < al; j++) {
            int64_t q, k, v;
            gqa_heads(bi, j, al, gl, hd, &q, &k, &v);
            const float *Q = qkv + q, *K = qkv + k, *V = qkv + v;
            for (int64_t i = 0; i < s; i++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t kk = 0; kk <= i; kk++) {
                    double d = 0;
                    for (int64_t e = 0; e < hd; e++) d += (double)Q[i * ld3 + e] * K[kk * ld3 + e];
                    p[kk] = d / sqrt((double)hd);
                    mx = fmax(mx, p[kk]);
                }
                for (int64_t kk = 0; kk <= i; kk++) sum += (p[kk] = exp(p[kk] - mx));
                for (int64_t e = 0; e < hd; e++) {
                    double acc = 0;
                    for (int64_t kk = 0; kk <= i; kk++) acc += p[kk] / sum * V[kk * ld3 + e];
                    ctx[i * ldc + (bi * al + j) * hd + e] = (float)acc;
                }
            }
        }
    free(p);
}

/* P = softmax, dP = dctx v^T, dS = scale P (dP - rowsum(P dP)); dq = dS k,
 * dk += dS^T q and dv += P^T dctx over the group's query heads, in double */
void ptdp_ref_attention_gqa_bwd(const float *dctx, const float *qkv, float *dqkv, int64_t s,
                                int64_t b, int64_t al, int64_t gl, int64_t hd) {
    const int64_t ld3 = b * (al + 2 * gl) * hd, ldc = b * al * hd;
    const double scale = 1.0 / sqrt((double)hd);
    double *P = malloc(sizeof(double) * (size_t)(s * s)),
           *dP = malloc(sizeof(double) * (size_t)(s * s)),
           *acc = calloc((size_t)(s * ld3), sizeof(double));
    PTDP_ASSERT(P && dP && acc);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t j = 0; j < al; j++) {
            int64_t q, k, v;
            gqa_heads(bi, j, al, gl, hd, &q, &k, &v);
            const float *Q = qkv + q, *K = qkv + k, *V = qkv + v, *dC = dctx + (bi * al + j) * hd;
            for (int64_t i = 0; i < s; i++) {
                double mx = -INFINITY, sum = 0, D = 0;
                for (int64_t kk = 0; kk <= i; kk++) {
                    double d = 0, g = 0;
                    for (int64_t e = 0; e < hd; e++) {
                        d += (double)Q[i * ld3 + e] * K[kk * ld3 + e];
                        g += (double)dC[i * ldc + e] * V[kk * ld3 + e];
                    }
                    P[i * s + kk] = d * scale, dP[i * s + kk] = g;
                    mx = fmax(mx, d * scale);
                }
                for (int64_t kk = 0; kk <= i; kk++)
                    sum += (P[i * s + kk] = exp(P[i * s + kk] - mx));
                for (int64_t kk = 0; kk <= i; kk++) D += (P[i * s + kk] /= sum) * dP[i * s + kk];
                for (int64_t kk = 0; kk <= i; kk++)
                    dP[i * s + kk] = scale * P[i * s + kk] * (dP[i * s + kk] - D);
            }
            for (int64_t i = 0; i < s; i++)
                for (int64_t kk = 0; kk <= i; kk++)
                    for (int64_t e = 0; e < hd; e++) {
                        acc[q + i * ld3 + e] += dP[i * s + kk] * K[kk * ld3 + e];
                        acc[k + kk * ld3 + e] += dP[i * s + kk] * Q[i * ld3 + e];
                        acc[v + kk * ld3 + e] += P[i * s + kk] * dC[i * ldc + e];
                    }
        }
    for (int64_t i = 0; i < s * ld3; i++) dqkv[i] = (float)acc[i];
    free(P), free(dP), free(acc);
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
