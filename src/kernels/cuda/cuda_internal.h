/* cuda_internal.h - internal to src/kernels/cuda: the error check every CUDA
 * and cuBLAS call goes through, the backend's instance (ptdp__cuda: cuBLAS
 * handle, stream, workspace), the device Philox4x32-10 and block reductions
 * shared by the .cu files. CUDA C++ only; the C side sees kernels.h's
 * ptdp_backend_open. */
#ifndef PTDP_KERNELS_CUDA_INTERNAL_H
#define PTDP_KERNELS_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#ifndef _Noreturn
#define _Noreturn [[noreturn]] /* base.h is C11; this header is C++ */
#endif
#include "kernels/kernels.h"
}

/* Ops return void, so a failing CUDA call is a broken contract (device lost,
 * bad launch): an assert naming the call and CUDA's reason. */
#define PTDP_CUDA_CHECK(call)                                                           \
    do {                                                                                \
        cudaError_t ptdp__ce = (call);                                                  \
        if (ptdp__ce != cudaSuccess)                                                    \
            ptdp__assert_fail(#call, __FILE__, __LINE__, cudaGetErrorString(ptdp__ce)); \
    } while (0)
#define PTDP_CUBLAS_CHECK(cs, call)                                                             \
    do {                                                                                        \
        cublasStatus_t ptdp__bs = (call);                                                       \
        if (ptdp__bs != CUBLAS_STATUS_SUCCESS)                                                  \
            ptdp__assert_fail(#call, __FILE__, __LINE__, (cs)->blasfn.status_string(ptdp__bs)); \
    } while (0)
/* after every kernel launch: catches bad configurations at once */
#define PTDP_CUDA_LAUNCHED() PTDP_CUDA_CHECK(cudaGetLastError())

/* cuBLAS is loaded with dlopen when a backend is opened, not linked: libcublas/libcublasLt are
 * hundreds of MB that every process would otherwise map and relocate at start (0.4 s per `ptdp`
 * process, most of the test suite's time on a machine without a GPU). The few entry points used: */
typedef struct {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSgemm_v2) sgemm;
    decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
    decltype(&cublasGetStatusString) status_string;
} ptdp__cublas_fns;

/* The CUDA backend's instance: the ops (be, whose impl points back here)
 * and everything it keeps. Its ops run on `stream`, in the order they are
 * called; download, sum and sumsq synchronise with it. The stream is the
 * legacy default one (0) for now: ordered with every other CUDA call of the
 * process, as the executor's host-side transfers need. */
typedef struct {
    ptdp_backend be;
    ptdp__cublas_fns blasfn;
    cublasHandle_t blas; /* fp32 math, TF32 off, on `stream` */
    cudaStream_t stream; /* 0: the legacy default stream */
    float *ws;           /* attention workspace, ws_floats floats */
    int64_t ws_floats;
    double *partials; /* reduction partials, PTDP_CUDA_RED_BLOCKS + 1 doubles */
    int own_ws;       /* ws and partials were allocated by the instance at first use (not a
                         workspace it was given): freed at close */
} ptdp__cuda;
/* cs's workspace and partials: the one it was given (workspace_set) or,
 * without one, PTDP_CUDA_ATT_WS_FLOATS floats allocated at first use */
void ptdp__cuda_workspace(ptdp__cuda *cs);
static inline ptdp__cuda *ptdp__cuda_of(ptdp_backend *be) { return (ptdp__cuda *)be->impl; }
static inline cudaStream_t ptdp__cuda_stream(ptdp_backend *be) { return ptdp__cuda_of(be)->stream; }

#define PTDP_CUDA_RED_BLOCKS 264                    /* 2 per H100 multiprocessor */
#define PTDP_CUDA_ATT_WS_FLOATS ((int64_t)32 << 20) /* 128 MiB */

static inline unsigned ptdp__blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    PTDP_ASSERT(b < (int64_t)1 << 31);
    return (unsigned)(b ? b : 1);
}

/* Dropout keep rule of kernels.h's ptdp__dropout_keep, on the device: word
 * (offset + e) & 3 of Philox4x32-10 at counter (offset + e) >> 2, compared
 * with thr = p * 2^32 (computed on the host as the CPU does). */
__device__ __forceinline__ uint32_t ptdp__philox_word(ptdp_rng_key key, uint64_t a) {
    uint64_t idx = a >> 2;
    uint32_t c0 = (uint32_t)idx, c1 = (uint32_t)(idx >> 32), c2 = (uint32_t)key.stream,
             c3 = (uint32_t)(key.stream >> 32);
    uint32_t k0 = (uint32_t)key.seed, k1 = (uint32_t)(key.seed >> 32);
#pragma unroll
    for (int r = 0; r < 10; r++) {
        uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c1 = lo1;
        c3 = lo0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    switch (a & 3) {
    case 0:
        return c0;
    case 1:
        return c1;
    case 2:
        return c2;
    default:
        return c3;
    }
}

/* Host side of a dropout site: threshold and scale exactly as dropout.c. */
typedef struct {
    ptdp_rng_key key;
    uint64_t offset;
    uint32_t thr;
    float sc;
    int64_t b, sample0, heads, head0; /* global numbering (kernels.h) */
} ptdp__cuda_drop;
static inline ptdp__cuda_drop ptdp__cuda_drop_make(ptdp_dropout d) {
    ptdp__cuda_drop r;
    r.key = d.key;
    r.offset = d.offset;
    r.b = d.b;
    r.sample0 = d.sample0;
    r.heads = d.heads;
    r.head0 = d.head0;
    r.thr = (uint32_t)((double)d.p * 4294967296.0);
    r.sc = 1.0f / (1.0f - d.p);
    return r;
}
/* Number of element e of a [s*b, w] site: kernels.h's sample keying when
 * d.b > 0 (the CPU's ptdp__dropout_row_index), else e. */
__device__ __forceinline__ uint64_t ptdp__drop_index(ptdp__cuda_drop d, uint64_t e, int64_t w) {
    if (d.b <= 0) return e;
    const int64_t r = (int64_t)(e / (uint64_t)w), j = (int64_t)(e % (uint64_t)w);
    const int64_t si = r / d.b, bi = r % d.b;
    return ((((uint64_t)si) << 24) + (uint64_t)(d.sample0 + bi)) * (uint64_t)w + (uint64_t)j;
}
__device__ __forceinline__ float ptdp__drop_apply(ptdp__cuda_drop d, uint64_t e, float v) {
    return ptdp__philox_word(d.key, d.offset + e) >= d.thr ? v * d.sc : 0.0f;
}

/* Block-wide sum / max of one value per thread (blockDim.x a multiple of 32,
 * at most 1024); every thread gets the result. */
template <typename T> __device__ __forceinline__ T ptdp__warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <typename T> __device__ T ptdp__block_sum(T v) {
    __shared__ T part[32];
    v = ptdp__warp_sum(v);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); /* part[] may still be read by a previous call */
    if (lane == 0) part[w] = v;
    __syncthreads();
    T t = lane < nw ? part[lane] : (T)0;
    return ptdp__warp_sum(t);
}
__device__ __forceinline__ float ptdp__block_max(float v) {
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) part[w] = v;
    __syncthreads();
    float t = lane < nw ? part[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, o));
    return t;
}

/* row-major GEMM on be's stream, batched with element strides */
void ptdp__cuda_gemm_batched(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                             float alpha, const float *A, int64_t lda, int64_t sA, const float *B,
                             int64_t ldb, int64_t sB, float beta, float *C, int64_t ldc, int64_t sC,
                             int64_t batch);

/* the ops defined in cuda_elem.cu / cuda_attn.cu / cuda_llama.cu, gathered into the instance by
 * cuda_backend.cu */
void ptdp__cuda_layernorm_fwd(ptdp_backend *be, const float *x, const float *w, const float *b,
                              float *out, float *mean, float *rstd, int64_t N, int64_t h,
                              float eps);
void ptdp__cuda_layernorm_bwd(ptdp_backend *be, const float *dout, const float *x, const float *w,
                              const float *mean, const float *rstd, float *dx, float *dw, float *db,
                              int64_t N, int64_t h);
void ptdp__cuda_bias_add(ptdp_backend *be, float *y, const float *bias, int64_t N, int64_t n);
void ptdp__cuda_bias_bwd(ptdp_backend *be, const float *dy, float *dbias, int64_t N, int64_t n);
void ptdp__cuda_bias_gelu_fwd(ptdp_backend *be, const float *x, const float *bias, float *out,
                              int64_t N, int64_t n);
void ptdp__cuda_bias_gelu_bwd(ptdp_backend *be, const float *dout, const float *x,
                              const float *bias, float *dx, float *dbias, int64_t N, int64_t n);
void ptdp__cuda_bias_dropout_add_fwd(ptdp_backend *be, const float *x, const float *bias,
                                     const float *resid, float *out, int64_t N, int64_t h,
                                     ptdp_dropout drop);
void ptdp__cuda_bias_dropout_add_bwd(ptdp_backend *be, const float *dout, float *dx, float *dbias,
                                     int64_t N, int64_t h, ptdp_dropout drop);
void ptdp__cuda_dropout_inplace(ptdp_backend *be, float *x, int64_t n, ptdp_dropout drop);
/* dst[e] = keep(base + e) ? src[e] / (1 - p) : 0, e < n (dst may alias src) */
void ptdp__cuda_dropout_apply(ptdp_backend *be, const float *src, float *dst, int64_t n,
                              ptdp_dropout drop, uint64_t base);
void ptdp__cuda_attention_fwd(ptdp_backend *be, const float *qkv, float *ctx, float *probs,
                              float *scratch, int64_t s, int64_t b, int64_t al, int64_t hd,
                              ptdp_dropout drop);
/* saved = probs [b, al, s, s] (attention_saved_floats: b*al*s*s); bwd ignores ctx */
void ptdp__cuda_attention_bwd(ptdp_backend *be, const float *dctx, const float *qkv,
                              const float *ctx, const float *probs, float *dqkv, float *scratch,
                              int64_t s, int64_t b, int64_t al, int64_t hd, ptdp_dropout drop);
/* the same with al query heads over gl key/value groups (kernels.h's attention_gqa_*) */
void ptdp__cuda_attention_gqa_fwd(ptdp_backend *be, const float *qkv, float *ctx, float *probs,
                                  float *scratch, int64_t s, int64_t b, int64_t al, int64_t gl,
                                  int64_t hd, ptdp_dropout drop);
void ptdp__cuda_attention_gqa_bwd(ptdp_backend *be, const float *dctx, const float *qkv,
                                  const float *ctx, const float *probs, float *dqkv, float *scratch,
                                  int64_t s, int64_t b, int64_t al, int64_t gl, int64_t hd,
                                  ptdp_dropout drop);
int64_t ptdp__cuda_attention_saved_floats(ptdp_backend *be, int64_t s, int64_t b, int64_t al);
/* floats of workspace the attention of (s, b, al, gl; gl 0: al) runs in without chunking its
 * tasks more than the unplanned workspace would */
int64_t ptdp__cuda_attention_ws_floats(int64_t s, int64_t b, int64_t al, int64_t gl);
/* the Llama family's element-wise ops (cuda_llama.cu) */
void ptdp__cuda_rmsnorm_fwd(ptdp_backend *be, const float *x, const float *w, float *out,
                            float *rstd, int64_t N, int64_t h, float eps);
void ptdp__cuda_rmsnorm_bwd(ptdp_backend *be, const float *dout, const float *x, const float *w,
                            const float *rstd, float *dx, float *dw, int64_t N, int64_t h);
void ptdp__cuda_swiglu_fwd(ptdp_backend *be, const float *x, const float *bias, float *out,
                           int64_t N, int64_t fl);
void ptdp__cuda_swiglu_bwd(ptdp_backend *be, const float *dout, const float *x, const float *bias,
                           float *dx, float *dbias, int64_t N, int64_t fl);
void ptdp__cuda_rope_fwd(ptdp_backend *be, float *qkv, const float *table, int64_t s, int64_t b,
                         int64_t al, int64_t gl, int64_t hd, int64_t rd, int64_t pos0);
void ptdp__cuda_rope_bwd(ptdp_backend *be, float *dqkv, const float *table, int64_t s, int64_t b,
                         int64_t al, int64_t gl, int64_t hd, int64_t rd, int64_t pos0);
void ptdp__cuda_embed_fwd(ptdp_backend *be, const int32_t *tokens, int64_t ld, const float *wte,
                          int64_t v0, int64_t Vl, float *out, int64_t s, int64_t b, int64_t h);
void ptdp__cuda_embed_bwd(ptdp_backend *be, const int32_t *tokens, int64_t ld, const float *dout,
                          float *dwte, int64_t v0, int64_t Vl, int64_t s, int64_t b, int64_t h);
void ptdp__cuda_pos_add_fwd(ptdp_backend *be, float *out, const float *wpe, int64_t s, int64_t b,
                            int64_t h);
void ptdp__cuda_pos_add_bwd(ptdp_backend *be, const float *dout, float *dwpe, int64_t s, int64_t b,
                            int64_t h);
void ptdp__cuda_xent_max(ptdp_backend *be, const float *logits, float *rowmax, int64_t N,
                         int64_t Vl, int64_t v0, int64_t V);
void ptdp__cuda_xent_sums(ptdp_backend *be, float *logits, const float *gmax,
                          const int32_t *targets, int64_t ld, float *sumexp, float *tgt, int64_t s,
                          int64_t b, int64_t Vl, int64_t v0, int64_t V);
void ptdp__cuda_xent_loss(ptdp_backend *be, const float *sumexp, const float *gmax,
                          const float *tgt, float *loss, int64_t N);
void ptdp__cuda_xent_bwd(ptdp_backend *be, float *logits, const float *sumexp,
                         const int32_t *targets, int64_t ld, int64_t s, int64_t b, int64_t Vl,
                         int64_t v0, int64_t V, float scale);
void ptdp__cuda_adamw(ptdp_backend *be, float *param, const float *grad, float gscale, float *m,
                      float *v, int64_t n, float lr, float beta1, float beta2, float eps, float wd,
                      int64_t step);
double ptdp__cuda_sumsq(ptdp_backend *be, const float *x, int64_t n);
double ptdp__cuda_sum(ptdp_backend *be, const float *x, int64_t n);

#endif
