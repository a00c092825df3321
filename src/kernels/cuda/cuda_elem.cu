/* cuda_elem.cu - the CUDA kernels around the GEMMs, one per CPU kernel of
 * act.c, norm.c, dropout.c, embed_xent.c and optim_ops.c, with the same
 * formulas. Row reductions (LayerNorm statistics, softmax-like sums) use one
 * block per row; column reductions (bias, LayerNorm weight, embedding and
 * position gradients) use one thread per column summing rows in order, so
 * bias/embedding/position gradients are bitwise those of the CPU. Dropout
 * masks are the CPU's exactly (device Philox, cuda_internal.h). Not here:
 * vectorised loads, fused multi-row blocks (first version: correct, simple). */
#include "kernels/cuda/cuda_internal.h"

#define GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f
#define T_ELEM 256 /* threads per block, element-wise kernels */
#define T_ROW 256  /* threads per block, one block per row */
#define T_COL 128  /* threads per block, one thread per column */

static unsigned row_threads(int64_t n) { return n <= 64 ? 64 : n <= 128 ? 128 : T_ROW; }

/* ---- LayerNorm ---------------------------------------------------------------- */

__global__ void ln_fwd_k(const float *x, const float *w, const float *b, float *out, float *mean, float *rstd,
                         int64_t h, float eps) {
    const float *xr = x + blockIdx.x * h;
    float *o = out + blockIdx.x * h;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) s += xr[i];
    float m = ptdp__block_sum(s) / (float)h;
    float v = 0.0f;
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
        float d = xr[i] - m;
        v += d * d;
    }
    v = ptdp__block_sum(v) / (float)h;
    float r = 1.0f / sqrtf(v + eps);
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) o[i] = (xr[i] - m) * r * w[i] + b[i];
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = m;
        rstd[blockIdx.x] = r;
    }
}
void ptdp__cuda_layernorm_fwd(ptdp_backend *be, const float *x, const float *w, const float *b, float *out, float *mean,
                              float *rstd, int64_t N, int64_t h, float eps) {
    if (N == 0) return;
    ln_fwd_k<<<(unsigned)N, row_threads(h), 0, ptdp__cuda_stream(be)>>>(x, w, b, out, mean, rstd, h, eps);
    PTDP_CUDA_LAUNCHED();
}

/* dx += rstd * (g - mean(g) - xhat * mean(g . xhat)), g = dout * w */
__global__ void ln_bwd_dx_k(const float *dout, const float *x, const float *w, const float *mean,
                            const float *rstd, float *dx, int64_t h) {
    const int64_t r0 = blockIdx.x * h;
    const float m = mean[blockIdx.x], r = rstd[blockIdx.x];
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
        float gi = dout[r0 + i] * w[i];
        sg += gi;
        sgx += gi * ((x[r0 + i] - m) * r);
    }
    sg = ptdp__block_sum(sg) / (float)h;
    sgx = ptdp__block_sum(sgx) / (float)h;
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
        float xh = (x[r0 + i] - m) * r;
        dx[r0 + i] += r * (dout[r0 + i] * w[i] - sg - xh * sgx);
    }
}
/* dw[c] += sum_rows dout * xhat, db[c] += sum_rows dout */
__global__ void ln_bwd_dwdb_k(const float *dout, const float *x, const float *mean, const float *rstd, float *dw,
                              float *db, int64_t N, int64_t h) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= h) return;
    float aw = 0.0f, ab = 0.0f;
    for (int64_t n = 0; n < N; n++) {
        float g = dout[n * h + c];
        aw += g * ((x[n * h + c] - mean[n]) * rstd[n]);
        ab += g;
    }
    dw[c] += aw;
    db[c] += ab;
}
void ptdp__cuda_layernorm_bwd(ptdp_backend *be, const float *dout, const float *x, const float *w, const float *mean,
                              const float *rstd, float *dx, float *dw, float *db, int64_t N, int64_t h) {
    if (N == 0) return;
    ln_bwd_dx_k<<<(unsigned)N, row_threads(h), 0, ptdp__cuda_stream(be)>>>(dout, x, w, mean, rstd, dx, h);
    PTDP_CUDA_LAUNCHED();
    ln_bwd_dwdb_k<<<ptdp__blocks(h, T_COL), T_COL, 0, ptdp__cuda_stream(be)>>>(dout, x, mean, rstd, dw, db, N, h);
    PTDP_CUDA_LAUNCHED();
}

/* ---- bias, GeLU ---------------------------------------------------------------- */

__global__ void bias_add_k(float *y, const float *bias, int64_t total, int64_t n) {
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < total) y[e] += bias[e % n];
}
void ptdp__cuda_bias_add(ptdp_backend *be, float *y, const float *bias, int64_t N, int64_t n) {
    if (N * n == 0) return;
    bias_add_k<<<ptdp__blocks(N * n, T_ELEM), T_ELEM, 0, ptdp__cuda_stream(be)>>>(y, bias, N * n, n);
    PTDP_CUDA_LAUNCHED();
}

/* rows summed in order, then added once: act.c's order, bitwise */
__global__ void bias_bwd_k(const float *dy, float *dbias, int64_t N, int64_t n) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    float acc = 0.0f;
    for (int64_t r = 0; r < N; r++) acc += dy[r * n + j];
    dbias[j] += acc;
}
void ptdp__cuda_bias_bwd(ptdp_backend *be, const float *dy, float *dbias, int64_t N, int64_t n) {
    if (n == 0) return;
    bias_bwd_k<<<ptdp__blocks(n, T_COL), T_COL, 0, ptdp__cuda_stream(be)>>>(dy, dbias, N, n);
    PTDP_CUDA_LAUNCHED();
}

__global__ void bias_gelu_fwd_k(const float *x, const float *bias, float *out, int64_t total, int64_t n) {
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= total) return;
    float u = x[e] + bias[e % n];
    float t = tanhf(GELU_C * (u + GELU_A * u * u * u));
    out[e] = 0.5f * u * (1.0f + t);
}
__global__ void bias_gelu_bwd_k(const float *dout, const float *x, const float *bias, float *dx, int64_t total,
                                int64_t n) {
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= total) return;
    float u = x[e] + bias[e % n];
    float t = tanhf(GELU_C * (u + GELU_A * u * u * u));
    float dg = 0.5f * (1.0f + t) + 0.5f * u * (1.0f - t * t) * GELU_C * (1.0f + 3.0f * GELU_A * u * u);
    dx[e] = dout[e] * dg;
}
void ptdp__cuda_bias_gelu_fwd(ptdp_backend *be, const float *x, const float *bias, float *out, int64_t N, int64_t n) {
    if (N * n == 0) return;
    bias_gelu_fwd_k<<<ptdp__blocks(N * n, T_ELEM), T_ELEM, 0, ptdp__cuda_stream(be)>>>(x, bias, out, N * n, n);
    PTDP_CUDA_LAUNCHED();
}
void ptdp__cuda_bias_gelu_bwd(ptdp_backend *be, const float *dout, const float *x, const float *bias, float *dx, float *dbias,
                              int64_t N, int64_t n) {
    if (N * n == 0) return;
    bias_gelu_bwd_k<<<ptdp__blocks(N * n, T_ELEM), T_ELEM, 0, ptdp__cuda_stream(be)>>>(dout, x, bias, dx, N * n, n);
    PTDP_CUDA_LAUNCHED();
    ptdp__cuda_bias_bwd(be, dx, dbias, N, n);
}

/* ---- dropout ------------------------------------------------------------------- */

/* out = resid + dropout(x + bias); element e = r*h + j of the site */
__global__ void bda_fwd_k(const float *x, const float *bias, const float *resid, float *out, int64_t total,
                          int64_t h, ptdp__cuda_drop d, int use) {
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= total) return;
    float v = x[e] + bias[e % h];
    if (use) v = ptdp__drop_apply(d, ptdp__drop_index(d, (uint64_t)e, h), v);
    out[e] = resid[e] + v;
}
void ptdp__cuda_bias_dropout_add_fwd(ptdp_backend *be, const float *x, const float *bias, const float *resid, float *out,
                                     int64_t N, int64_t h, ptdp_dropout drop) {
    if (N * h == 0) return;
    bda_fwd_k<<<ptdp__blocks(N * h, T_ELEM), T_ELEM, 0, ptdp__cuda_stream(be)>>>(x, bias, resid, out, N * h, h,
                                                        ptdp__cuda_drop_make(drop), drop.p != 0.0f);
    PTDP_CUDA_LAUNCHED();
}

/* w: the row width of a [s*b, w] site for the sample keying (drop.b > 0) */
__global__ void drop_apply_k(const float *src, float *dst, int64_t n, ptdp__cuda_drop d, uint64_t base, int64_t w) {
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) dst[e] = ptdp__drop_apply(d, ptdp__drop_index(d, base + (uint64_t)e, w), src[e]);
}
static void dropout_rows(ptdp_backend *be, const float *src, float *dst, int64_t n, ptdp_dropout drop, int64_t w) {
    if (n == 0) return;
    drop_apply_k<<<ptdp__blocks(n, T_ELEM), T_ELEM, 0, ptdp__cuda_stream(be)>>>(src, dst, n, ptdp__cuda_drop_make(drop), 0, w);
    PTDP_CUDA_LAUNCHED();
}
void ptdp__cuda_dropout_apply(ptdp_backend *be, const float *src, float *dst, int64_t n, ptdp_dropout drop, uint64_t base) {
    if (n == 0) return;
    PTDP_ASSERT(drop.b <= 0); /* flat numbering only; sites keyed by sample go through dropout_rows */
    drop_apply_k<<<ptdp__blocks(n, T_ELEM), T_ELEM, 0, ptdp__cuda_stream(be)>>>(src, dst, n, ptdp__cuda_drop_make(drop), base, 1);
    PTDP_CUDA_LAUNCHED();
}

void ptdp__cuda_bias_dropout_add_bwd(ptdp_backend *be, const float *dout, float *dx, float *dbias, int64_t N, int64_t h,
                                     ptdp_dropout drop) {
    if (drop.p == 0.0f) {
        if (dx != dout && N * h != 0) PTDP_CUDA_CHECK(cudaMemcpyAsync(dx, dout, sizeof(float) * (size_t)(N * h),
                                                                 cudaMemcpyDeviceToDevice,
                                                                 ptdp__cuda_stream(be)));
    } else {
        dropout_rows(be, dout, dx, N * h, drop, h);
    }
    ptdp__cuda_bias_bwd(be, dx, dbias, N, h);
}

/* forward and backward are the same: keep-mask times 1/(1-p) */
void ptdp__cuda_dropout_inplace(ptdp_backend *be, float *x, int64_t n, ptdp_dropout drop) {
    if (drop.p == 0.0f) return;
    dropout_rows(be, x, x, n, drop, drop.b > 0 ? drop.width : 1);
}

/* ---- embedding, position --------------------------------------------------------- */

__global__ void embed_fwd_k(const int32_t *tokens, int64_t ld, const float *wte, int64_t v0, int64_t Vl,
                            float *out, int64_t total, int64_t b, int64_t h) {
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= total) return;
    int64_t n = e / h, i = e % h, si = n / b, bi = n % b;
    int64_t t = (int64_t)tokens[bi * ld + si] - v0;
    out[e] = (t >= 0 && t < Vl) ? wte[t * h + i] : 0.0f;
}
void ptdp__cuda_embed_fwd(ptdp_backend *be, const int32_t *tokens, int64_t ld, const float *wte, int64_t v0, int64_t Vl,
                          float *out, int64_t s, int64_t b, int64_t h) {
    if (s * b * h == 0) return;
    embed_fwd_k<<<ptdp__blocks(s * b * h, T_ELEM), T_ELEM, 0, ptdp__cuda_stream(be)>>>(tokens, ld, wte, v0, Vl, out, s * b * h, b, h);
    PTDP_CUDA_LAUNCHED();
}

/* one thread per column, tokens in order: embed_xent.c's order, bitwise */
__global__ void embed_bwd_k(const int32_t *tokens, int64_t ld, const float *dout, float *dwte, int64_t v0,
                            int64_t Vl, int64_t N, int64_t b, int64_t h) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= h) return;
    for (int64_t n = 0; n < N; n++) {
        int64_t t = (int64_t)tokens[(n % b) * ld + n / b] - v0;
        if (t >= 0 && t < Vl) dwte[t * h + j] += dout[n * h + j];
    }
}
void ptdp__cuda_embed_bwd(ptdp_backend *be, const int32_t *tokens, int64_t ld, const float *dout, float *dwte, int64_t v0,
                          int64_t Vl, int64_t s, int64_t b, int64_t h) {
    if (h == 0) return;
    embed_bwd_k<<<ptdp__blocks(h, T_COL), T_COL, 0, ptdp__cuda_stream(be)>>>(tokens, ld, dout, dwte, v0, Vl, s * b, b, h);
    PTDP_CUDA_LAUNCHED();
}

__global__ void pos_fwd_k(float *out, const float *wpe, int64_t total, int64_t b, int64_t h) {
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < total) out[e] += wpe[(e / h / b) * h + e % h];
}
void ptdp__cuda_pos_add_fwd(ptdp_backend *be, float *out, const float *wpe, int64_t s, int64_t b, int64_t h) {
    if (s * b * h == 0) return;
    pos_fwd_k<<<ptdp__blocks(s * b * h, T_ELEM), T_ELEM, 0, ptdp__cuda_stream(be)>>>(out, wpe, s * b * h, b, h);
    PTDP_CUDA_LAUNCHED();
}
__global__ void pos_bwd_k(const float *dout, float *dwpe, int64_t s, int64_t b, int64_t h) {
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= s * h) return;
    int64_t si = e / h, i = e % h;
    float acc = dwpe[e];
    for (int64_t bi = 0; bi < b; bi++) acc += dout[(si * b + bi) * h + i];
    dwpe[e] = acc;
}
void ptdp__cuda_pos_add_bwd(ptdp_backend *be, const float *dout, float *dwpe, int64_t s, int64_t b, int64_t h) {
    if (s * h == 0) return;
    pos_bwd_k<<<ptdp__blocks(s * h, T_ELEM), T_ELEM, 0, ptdp__cuda_stream(be)>>>(dout, dwpe, s, b, h);
    PTDP_CUDA_LAUNCHED();
}

/* ---- vocabulary-parallel cross-entropy ---------------------------------------------- */

static int64_t valid_cols(int64_t Vl, int64_t v0, int64_t V) {
    int64_t n = V - v0;
    return n < 0 ? 0 : n > Vl ? Vl : n;
}

__global__ void xent_max_k(const float *logits, float *rowmax, int64_t Vl, int64_t nv) {
    const float *l = logits + blockIdx.x * Vl;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < nv; c += blockDim.x) m = fmaxf(m, l[c]);
    m = ptdp__block_max(m);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = m;
}
void ptdp__cuda_xent_max(ptdp_backend *be, const float *logits, float *rowmax, int64_t N, int64_t Vl, int64_t v0, int64_t V) {
    if (N == 0) return;
    xent_max_k<<<(unsigned)N, T_ROW, 0, ptdp__cuda_stream(be)>>>(logits, rowmax, Vl, valid_cols(Vl, v0, V));
    PTDP_CUDA_LAUNCHED();
}

/* Reads the target logit, then overwrites the row with e = exp(l - gmax)
 * (0 at padding) while summing: xent_bwd scales e and never calls exp. */
__global__ void xent_sums_k(float *logits, const float *gmax, const int32_t *targets, int64_t ld,
                            float *sumexp, float *tgt, int64_t b, int64_t Vl, int64_t v0, int64_t nv) {
    const int64_t n = blockIdx.x;
    float *l = logits + n * Vl;
    const float m = gmax[n];
    const int64_t t = (int64_t)targets[(n % b) * ld + n / b] - v0;
    const float tv = (t >= 0 && t < nv) ? l[t] : 0.0f;
    __syncthreads(); /* every thread has read l[t] before any overwrites it */
    float acc = 0.0f;
    for (int64_t c = threadIdx.x; c < nv; c += blockDim.x) {
        float e = expf(l[c] - m);
        l[c] = e;
        acc += e;
    }
    for (int64_t c = nv + threadIdx.x; c < Vl; c += blockDim.x) l[c] = 0.0f;
    acc = ptdp__block_sum(acc);
    if (threadIdx.x == 0) {
        sumexp[n] = acc;
        tgt[n] = tv;
    }
}
void ptdp__cuda_xent_sums(ptdp_backend *be, float *logits, const float *gmax, const int32_t *targets, int64_t ld,
                          float *sumexp, float *tgt, int64_t s, int64_t b, int64_t Vl, int64_t v0, int64_t V) {
    if (s * b == 0) return;
    xent_sums_k<<<(unsigned)(s * b), T_ROW, 0, ptdp__cuda_stream(be)>>>(logits, gmax, targets, ld, sumexp, tgt, b, Vl, v0,
                                               valid_cols(Vl, v0, V));
    PTDP_CUDA_LAUNCHED();
}

__global__ void xent_loss_k(const float *sumexp, const float *gmax, const float *tgt, float *loss, int64_t N) {
    int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N) loss[n] = logf(sumexp[n]) + gmax[n] - tgt[n];
}
void ptdp__cuda_xent_loss(ptdp_backend *be, const float *sumexp, const float *gmax, const float *tgt, float *loss, int64_t N) {
    if (N == 0) return;
    xent_loss_k<<<ptdp__blocks(N, T_ELEM), T_ELEM, 0, ptdp__cuda_stream(be)>>>(sumexp, gmax, tgt, loss, N);
    PTDP_CUDA_LAUNCHED();
}

/* logits hold e = exp(l - gmax) from xent_sums */
__global__ void xent_bwd_k(float *logits, const float *sumexp, const int32_t *targets, int64_t ld, int64_t total,
                           int64_t b, int64_t Vl, int64_t v0, int64_t nv, float scale) {
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= total) return;
    int64_t n = e / Vl, c = e % Vl;
    if (c >= nv) {
        logits[e] = 0.0f;
        return;
    }
    float v = logits[e] * (scale / sumexp[n]);
    int64_t t = (int64_t)targets[(n % b) * ld + n / b] - v0;
    if (c == t) v -= scale;
    logits[e] = v;
}
void ptdp__cuda_xent_bwd(ptdp_backend *be, float *logits, const float *sumexp, const int32_t *targets, int64_t ld, int64_t s,
                         int64_t b, int64_t Vl, int64_t v0, int64_t V, float scale) {
    if (s * b * Vl == 0) return;
    xent_bwd_k<<<ptdp__blocks(s * b * Vl, T_ELEM), T_ELEM, 0, ptdp__cuda_stream(be)>>>(logits, sumexp, targets, ld, s * b * Vl, b, Vl, v0,
                                                              valid_cols(Vl, v0, V), scale);
    PTDP_CUDA_LAUNCHED();
}

/* ---- optimizer ------------------------------------------------------------------ */

__global__ void adamw_k(float *param, const float *grad, float gscale, float *m, float *v, int64_t n, float beta1,
                        float beta2, float eps, float step_size, float decay, float bc2s) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = __fmul_rn(grad[i], gscale); /* rounded on its own, as a scale pass would leave it */
    float p = param[i] * decay;
    float mi = m[i] * beta1 + g * (1.0f - beta1);
    float vi = v[i] * beta2 + g * g * (1.0f - beta2);
    m[i] = mi;
    v[i] = vi;
    param[i] = p - step_size * (mi / (sqrtf(vi) / bc2s + eps));
}
/* bias corrections on the host, as optim_ops.c computes them */
void ptdp__cuda_adamw(ptdp_backend *be, float *param, const float *grad, float gscale, float *m, float *v, int64_t n, float lr,
                      float beta1, float beta2, float eps, float wd, int64_t step) {
    if (n == 0) return;
    const float bc1 = 1.0f - powf(beta1, (float)step);
    const float bc2s = sqrtf(1.0f - powf(beta2, (float)step));
    adamw_k<<<ptdp__blocks(n, T_ELEM), T_ELEM, 0, ptdp__cuda_stream(be)>>>(param, grad, gscale, m, v, n, beta1, beta2, eps, lr / bc1,
                                                  1.0f - lr * wd, bc2s);
    PTDP_CUDA_LAUNCHED();
}

