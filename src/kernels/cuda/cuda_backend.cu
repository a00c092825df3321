/* cuda_backend.cu - the CUDA compute backend (fp32): device memory, GEMM
 * through cuBLAS (row-major by the transpose trick, TF32 off so results are
 * comparable with the CPU backend), the double-precision reductions, and the
 * table that gathers the kernels of cuda_elem.cu and cuda_attn.cu. Not here:
 * streams (everything runs on the default stream), bf16/fp16, NCCL. */
#include <dlfcn.h>
#include <stdio.h>

#include "kernels/cuda/cuda_internal.h"

ptdp__cuda_state ptdp__cuda;

/* ---- memory ---------------------------------------------------------------- */

/* Zeroed like the CPU backend's alloc; NULL on failure (the CUDA error is
 * cleared so it does not surface at the next launch check). */
static void *cuda_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    PTDP_CUDA_CHECK(cudaMemset(p, 0, bytes ? bytes : 256));
    return p;
}
static void cuda_free(void *p) {
    if (p) PTDP_CUDA_CHECK(cudaFree(p));
}
static void cuda_upload(void *dst, const void *host, size_t bytes) {
    PTDP_CUDA_CHECK(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice));
}
static void cuda_download(void *host, const void *src, size_t bytes) {
    PTDP_CUDA_CHECK(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost));
}
static void cuda_zero(float *x, int64_t n) {
    PTDP_CUDA_CHECK(cudaMemsetAsync(x, 0, sizeof(float) * (size_t)n, 0));
}
static void cuda_copy(float *dst, const float *src, int64_t n) {
    PTDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, sizeof(float) * (size_t)n, cudaMemcpyDeviceToDevice, 0));
}

/* ---- GEMM ------------------------------------------------------------------ */

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the same
 * buffers with the operands swapped, each transpose flag kept. */
void ptdp__cuda_gemm_batched(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                             const float *A, int64_t lda, int64_t sA, const float *B, int64_t ldb,
                             int64_t sB, float beta, float *C, int64_t ldc, int64_t sC, int64_t batch) {
    const int64_t lim = INT32_MAX;
    PTDP_ASSERT(M <= lim && N <= lim && K <= lim && lda <= lim && ldb <= lim && ldc <= lim && batch <= lim);
    if (M == 0 || N == 0 || batch == 0) return;
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1)
        PTDP_CUBLAS_CHECK(ptdp__cuda.blasfn.sgemm(ptdp__cuda.blas, ob, oa, (int)N, (int)M, (int)K, &alpha, B, (int)ldb, A,
                                      (int)lda, &beta, C, (int)ldc));
    else
        PTDP_CUBLAS_CHECK(ptdp__cuda.blasfn.sgemm_strided_batched(ptdp__cuda.blas, ob, oa, (int)N, (int)M, (int)K, &alpha, B,
                                                    (int)ldb, sB, A, (int)lda, sA, &beta, C, (int)ldc, sC,
                                                    (int)batch));
}

static void cuda_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                      const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    ptdp__cuda_gemm_batched(ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

/* ---- reductions: double accumulation, fixed order --------------------------- */

/* Block k sums the grid-stride elements k, k + G*T, ... in double; the
 * partials are then added by one block in a fixed order: the result is
 * bitwise reproducible run to run (not equal to the CPU's order). */
template <int SQUARES> __global__ void red_partial(const float *x, int64_t n, double *partials) {
    double acc = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double v = (double)x[i];
        acc += SQUARES ? v * v : v;
    }
    acc = ptdp__block_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}
__global__ void red_final(double *partials, int nparts) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += partials[i];
    acc = ptdp__block_sum(acc);
    if (threadIdx.x == 0) partials[nparts] = acc;
}
static double reduce(const float *x, int64_t n, int squares) {
    double *p = ptdp__cuda.partials, out;
    if (squares)
        red_partial<1><<<PTDP_CUDA_RED_BLOCKS, 256>>>(x, n, p);
    else
        red_partial<0><<<PTDP_CUDA_RED_BLOCKS, 256>>>(x, n, p);
    PTDP_CUDA_LAUNCHED();
    red_final<<<1, 256>>>(p, PTDP_CUDA_RED_BLOCKS);
    PTDP_CUDA_LAUNCHED();
    PTDP_CUDA_CHECK(cudaMemcpy(&out, p + PTDP_CUDA_RED_BLOCKS, sizeof out, cudaMemcpyDeviceToHost));
    return out;
}
double ptdp__cuda_sumsq(const float *x, int64_t n) { return reduce(x, n, 1); }
double ptdp__cuda_sum(const float *x, int64_t n) { return reduce(x, n, 0); }

/* ---- the table ------------------------------------------------------------- */

/* fp32 only: activations are already on the grid */
static void cuda_quantize_none(float *x, int64_t n) {
    (void)x;
    (void)n;
}

static const ptdp_ops cuda_ops = {
    .name = "cuda",
    .dtype = PTDP_DTYPE_FP32,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .zero = cuda_zero,
    .copy = cuda_copy,
    .quantize = cuda_quantize_none,
    .gemm = cuda_gemm,
    .layernorm_fwd = ptdp__cuda_layernorm_fwd,
    .layernorm_bwd = ptdp__cuda_layernorm_bwd,
    .bias_add = ptdp__cuda_bias_add,
    .bias_bwd = ptdp__cuda_bias_bwd,
    .bias_gelu_fwd = ptdp__cuda_bias_gelu_fwd,
    .bias_gelu_bwd = ptdp__cuda_bias_gelu_bwd,
    .bias_dropout_add_fwd = ptdp__cuda_bias_dropout_add_fwd,
    .bias_dropout_add_bwd = ptdp__cuda_bias_dropout_add_bwd,
    .dropout_fwd = ptdp__cuda_dropout_inplace,
    .dropout_bwd = ptdp__cuda_dropout_inplace,
    .attention_fwd = ptdp__cuda_attention_fwd,
    .attention_bwd = ptdp__cuda_attention_bwd,
    .attention_saved_floats = ptdp__cuda_attention_saved_floats,
    .embed_fwd = ptdp__cuda_embed_fwd,
    .embed_bwd = ptdp__cuda_embed_bwd,
    .pos_add_fwd = ptdp__cuda_pos_add_fwd,
    .pos_add_bwd = ptdp__cuda_pos_add_bwd,
    .xent_max = ptdp__cuda_xent_max,
    .xent_sums = ptdp__cuda_xent_sums,
    .xent_loss = ptdp__cuda_xent_loss,
    .xent_bwd = ptdp__cuda_xent_bwd,
    .mask_rows = NULL, /* optional (--eod-mask-loss): not on the GPU yet */
    .adamw = ptdp__cuda_adamw,
    .adamw_master = NULL, /* fp32 only: no master weights */
    .sumsq = ptdp__cuda_sumsq,
    .sum = ptdp__cuda_sum,
    .weights_changed = NULL, /* fp32: nothing converted */
    .head_bwd = NULL,        /* the composition: xent_bwd and two GEMMs */
    .head_logits = NULL,     /* gemm, then xent_max */
    .mlp_store = PTDP_DTYPE_FP32,
    .mlp_fwd = NULL, /* the MLP's compositions of gemm and bias_gelu */
    .mlp_bwd_b = NULL,
    .mlp_bwd_w = NULL,
};

/* Loads cuBLAS (see cuda_internal.h); PTDP_EBACKEND naming the library and
 * dlerror when it cannot. */
static int load_cublas(void) {
    const char *names[] = {"libcublas.so.13", "libcublas.so"};
    void *h = NULL;
    for (int i = 0; i < 2 && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return ptdp_errorf(PTDP_EBACKEND,
                           "CUDA backend: cannot load cuBLAS (libcublas.so.13): %s; add the CUDA "
                           "toolkit's lib64 to LD_LIBRARY_PATH",
                           dlerror());
    ptdp__cublas_fns *f = &ptdp__cuda.blasfn;
    const struct {
        void **slot;
        const char *sym;
    } want[] = {{(void **)&f->create, "cublasCreate_v2"},
                {(void **)&f->set_math_mode, "cublasSetMathMode"},
                {(void **)&f->sgemm, "cublasSgemm_v2"},
                {(void **)&f->sgemm_strided_batched, "cublasSgemmStridedBatched"},
                {(void **)&f->status_string, "cublasGetStatusString"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!(*want[i].slot = dlsym(h, want[i].sym)))
            return ptdp_errorf(PTDP_EBACKEND, "CUDA backend: cuBLAS lacks %s", want[i].sym);
    return PTDP_OK;
}

static int cuda_init_state(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return ptdp_errorf(PTDP_EBACKEND, "CUDA backend: no usable GPU (%s)",
                           e != cudaSuccess ? cudaGetErrorString(e) : "no device");
    }
    if ((e = cudaSetDevice(0)) != cudaSuccess)
        return ptdp_errorf(PTDP_EBACKEND, "CUDA backend: cudaSetDevice(0): %s", cudaGetErrorString(e));
    int rc = load_cublas();
    if (rc != PTDP_OK) return rc;
    if (ptdp__cuda.blasfn.create(&ptdp__cuda.blas) != CUBLAS_STATUS_SUCCESS)
        return ptdp_errorf(PTDP_EBACKEND, "CUDA backend: cuBLAS could not be initialised");
    /* fp32 GEMMs in fp32: no TF32 tensor-core rounding of the inputs */
    PTDP_CUBLAS_CHECK(ptdp__cuda.blasfn.set_math_mode(ptdp__cuda.blas, CUBLAS_DEFAULT_MATH));
    ptdp__cuda.ws_floats = PTDP_CUDA_ATT_WS_FLOATS;
    if (cudaMalloc((void **)&ptdp__cuda.ws, sizeof(float) * (size_t)ptdp__cuda.ws_floats) != cudaSuccess ||
        cudaMalloc((void **)&ptdp__cuda.partials, sizeof(double) * (PTDP_CUDA_RED_BLOCKS + 1)) != cudaSuccess) {
        (void)cudaGetLastError();
        return ptdp_errorf(PTDP_ENOMEM, "CUDA backend: cannot allocate the %lld-byte workspace",
                           (long long)(sizeof(float) * (size_t)ptdp__cuda.ws_floats));
    }
    return PTDP_OK;
}

extern "C" const ptdp_ops *ptdp_cuda_ops(void) {
    static int rc = 1; /* 1: not tried yet */
    if (rc == 1) rc = cuda_init_state();
    else if (rc != PTDP_OK)
        ptdp_errorf(rc, "CUDA backend: no usable GPU (initialisation failed earlier)");
    return rc == PTDP_OK ? &cuda_ops : NULL;
}
