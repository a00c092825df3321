/* cuda_llama.cu - the Llama family's element-wise ops on the GPU, one per CPU
 * kernel with the same formulas: RMSNorm (norm.c; one block per row for the
 * row's mean of squares and the backward's row sum, one thread per column
 * summing the rows in order for dw), fused SwiGLU (act.c; a thread per
 * (row, unit), its bias gradient cuda_elem.cu's bias_bwd) and rotary
 * embeddings (rope.c; a thread per rotated pair, reading the fp32 table of
 * ptdp_rope_table_init). Compiled, and checked against the CPU backend by
 * tests/test_cuda_ops.c where a GPU is lent: until that has passed on one,
 * the backend declares them untested (PTDP_CAP_UNTESTED_*, cuda_backend.cu)
 * and runs needing them are refused. Not here: grouped-query attention
 * (cuda_attn.cu), vectorised loads. */
#include "kernels/cuda/cuda_internal.h"

#define T_ELEM 256 /* threads per block, element-wise kernels */
#define T_COL 128  /* threads per block, one thread per column */

static unsigned row_threads(int64_t n) { return n <= 64 ? 64 : n <= 128 ? 128 : 256; }

/* ---- RMSNorm ------------------------------------------------------------------ */

__global__ void rms_fwd_k(const float *x, const float *w, float *out, float *rstd, int64_t h, float eps) {
    const float *xr = x + blockIdx.x * h;
    float *o = out + blockIdx.x * h;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) s += xr[i] * xr[i];
    const float r = 1.0f / sqrtf(ptdp__block_sum(s) / (float)h + eps);
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) o[i] = xr[i] * r * w[i];
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}
void ptdp__cuda_rmsnorm_fwd(ptdp_backend *be, const float *x, const float *w, float *out, float *rstd, int64_t N,
                            int64_t h, float eps) {
    if (N == 0) return;
    rms_fwd_k<<<(unsigned)N, row_threads(h), 0, ptdp__cuda_stream(be)>>>(x, w, out, rstd, h, eps);
    PTDP_CUDA_LAUNCHED();
}

/* dx += rstd (g - xhat mean(g . xhat)), g = dout * w, xhat = x * rstd */
__global__ void rms_bwd_dx_k(const float *dout, const float *x, const float *w, const float *rstd, float *dx,
                             int64_t h) {
    const int64_t r0 = blockIdx.x * h;
    const float r = rstd[blockIdx.x];
    float sgx = 0.0f;
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) sgx += dout[r0 + i] * w[i] * (x[r0 + i] * r);
    sgx = ptdp__block_sum(sgx) / (float)h;
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x)
        dx[r0 + i] += r * (dout[r0 + i] * w[i] - x[r0 + i] * r * sgx);
}
/* dw[c] += sum_rows dout * xhat, rows in order */
__global__ void rms_bwd_dw_k(const float *dout, const float *x, const float *rstd, float *dw, int64_t N, int64_t h) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= h) return;
    float acc = 0.0f;
    for (int64_t n = 0; n < N; n++) acc += dout[n * h + c] * (x[n * h + c] * rstd[n]);
    dw[c] += acc;
}
void ptdp__cuda_rmsnorm_bwd(ptdp_backend *be, const float *dout, const float *x, const float *w, const float *rstd,
                            float *dx, float *dw, int64_t N, int64_t h) {
    if (N == 0) return;
    rms_bwd_dx_k<<<(unsigned)N, row_threads(h), 0, ptdp__cuda_stream(be)>>>(dout, x, w, rstd, dx, h);
    PTDP_CUDA_LAUNCHED();
    rms_bwd_dw_k<<<ptdp__blocks(h, T_COL), T_COL, 0, ptdp__cuda_stream(be)>>>(dout, x, rstd, dw, N, h);
    PTDP_CUDA_LAUNCHED();
}

/* ---- SwiGLU ---------------------------------------------------------------------- */

/* element e = r * fl + j: gate x[r, j], up x[r, fl + j] (kernels.h's layout) */
__global__ void swiglu_fwd_k(const float *x, const float *bias, float *out, int64_t total, int64_t fl) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= total) return;
    const int64_t r = e / fl, j = e % fl;
    const float a = x[r * 2 * fl + j] + (bias ? bias[j] : 0.0f), u = x[r * 2 * fl + fl + j] + (bias ? bias[fl + j] : 0.0f);
    const float sg = 1.0f / (1.0f + expf(-a));
    out[e] = a * sg * u;
}
/* dx may alias x: each thread reads its gate and up before writing them */
__global__ void swiglu_bwd_k(const float *dout, const float *x, const float *bias, float *dx, int64_t total, int64_t fl) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= total) return;
    const int64_t r = e / fl, j = e % fl;
    const float a = x[r * 2 * fl + j] + (bias ? bias[j] : 0.0f), u = x[r * 2 * fl + fl + j] + (bias ? bias[fl + j] : 0.0f);
    const float sg = 1.0f / (1.0f + expf(-a)), g = dout[e];
    dx[r * 2 * fl + j] = g * u * (sg * (1.0f + a * (1.0f - sg)));
    dx[r * 2 * fl + fl + j] = g * (a * sg);
}
void ptdp__cuda_swiglu_fwd(ptdp_backend *be, const float *x, const float *bias, float *out, int64_t N, int64_t fl) {
    if (N * fl == 0) return;
    swiglu_fwd_k<<<ptdp__blocks(N * fl, T_ELEM), T_ELEM, 0, ptdp__cuda_stream(be)>>>(x, bias, out, N * fl, fl);
    PTDP_CUDA_LAUNCHED();
}
void ptdp__cuda_swiglu_bwd(ptdp_backend *be, const float *dout, const float *x, const float *bias, float *dx,
                           float *dbias, int64_t N, int64_t fl) {
    if (N * fl == 0) return;
    swiglu_bwd_k<<<ptdp__blocks(N * fl, T_ELEM), T_ELEM, 0, ptdp__cuda_stream(be)>>>(dout, x, bias, dx, N * fl, fl);
    PTDP_CUDA_LAUNCHED();
    if (dbias) ptdp__cuda_bias_bwd(be, dx, dbias, N, 2 * fl);
}

/* ---- rotary embeddings ------------------------------------------------------------ */

/* a thread per pair (i, i + rd/2) of a query or key head: e = ((r * gl + gi) * (hpg + 1) + k) * half + i over
 * rows r = si * b + bi; sign -1: the inverse rotation (the backward) */
__global__ void rope_k(float *qkv, const float *table, int64_t total, int64_t b, int64_t gl, int64_t hpg, int64_t hd,
                       int64_t rd, int64_t pos0, float sign) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= total) return;
    const int64_t half = rd / 2, i = e % half, k = e / half % (hpg + 1), gi = e / half / (hpg + 1) % gl,
                  r = e / half / (hpg + 1) / gl;
    const float *c = table + (pos0 + r / b) * rd;
    float *x = qkv + r * gl * (hpg + 2) * hd + (gi * (hpg + 2) + k) * hd;
    const float a = x[i], y = x[i + half], ci = c[i], si = sign * c[half + i];
    x[i] = a * ci - y * si;
    x[i + half] = y * ci + a * si;
}
static void rope(ptdp_backend *be, float *qkv, const float *table, int64_t s, int64_t b, int64_t al, int64_t gl,
                 int64_t hd, int64_t rd, int64_t pos0, float sign) {
    PTDP_ASSERT(gl > 0 && al % gl == 0 && rd >= 2 && rd % 2 == 0 && rd <= hd);
    const int64_t hpg = al / gl, total = s * b * gl * (hpg + 1) * (rd / 2);
    if (total == 0) return;
    rope_k<<<ptdp__blocks(total, T_ELEM), T_ELEM, 0, ptdp__cuda_stream(be)>>>(qkv, table, total, b, gl, hpg, hd, rd,
                                                                              pos0, sign);
    PTDP_CUDA_LAUNCHED();
}
void ptdp__cuda_rope_fwd(ptdp_backend *be, float *qkv, const float *table, int64_t s, int64_t b, int64_t al, int64_t gl,
                         int64_t hd, int64_t rd, int64_t pos0) {
    rope(be, qkv, table, s, b, al, gl, hd, rd, pos0, 1.0f);
}
void ptdp__cuda_rope_bwd(ptdp_backend *be, float *dqkv, const float *table, int64_t s, int64_t b, int64_t al, int64_t gl,
                         int64_t hd, int64_t rd, int64_t pos0) {
    rope(be, dqkv, table, s, b, al, gl, hd, rd, pos0, -1.0f);
}
