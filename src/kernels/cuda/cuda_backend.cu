/* cuda_backend.cu - the CUDA compute backend (fp32): an instance
 * (ptdp__cuda) with device memory, GEMM through cuBLAS (row-major by the
 * transpose trick, TF32 off so results are comparable with the CPU
 * backend), the double-precision reductions, and the ops of cuda_elem.cu,
 * cuda_attn.cu and cuda_llama.cu gathered into it. Each instance has its
 * own cuBLAS handle and workspace. Not here: streams of its own (the legacy default
 * stream), bf16/fp16, NCCL. */
#include <dlfcn.h>
#include <stdio.h>

#include "kernels/cuda/cuda_internal.h"

/* ---- memory ---------------------------------------------------------------- */

/* Zeroed like the CPU backend's alloc; NULL on failure (the CUDA error is
 * cleared so it does not surface at the next launch check). */
static void *cuda_alloc(ptdp_backend *be, size_t bytes) {
    (void)be;
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    PTDP_CUDA_CHECK(cudaMemset(p, 0, bytes ? bytes : 256));
    return p;
}
static void cuda_free(ptdp_backend *be, void *p) {
    (void)be;
    if (p) PTDP_CUDA_CHECK(cudaFree(p));
}
static void cuda_upload(ptdp_backend *be, void *dst, const void *host, size_t bytes) {
    (void)be;
    PTDP_CUDA_CHECK(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice));
}
static void cuda_download(ptdp_backend *be, void *host, const void *src, size_t bytes) {
    (void)be;
    PTDP_CUDA_CHECK(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost));
}
static void cuda_zero(ptdp_backend *be, float *x, int64_t n) {
    PTDP_CUDA_CHECK(cudaMemsetAsync(x, 0, sizeof(float) * (size_t)n, ptdp__cuda_stream(be)));
}
static void cuda_copy(ptdp_backend *be, float *dst, const float *src, int64_t n) {
    PTDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, sizeof(float) * (size_t)n, cudaMemcpyDeviceToDevice,
                                    ptdp__cuda_stream(be)));
}

/* ---- GEMM ------------------------------------------------------------------ */

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the same
 * buffers with the operands swapped, each transpose flag kept. */
void ptdp__cuda_gemm_batched(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                             const float *A, int64_t lda, int64_t sA, const float *B, int64_t ldb,
                             int64_t sB, float beta, float *C, int64_t ldc, int64_t sC, int64_t batch) {
    const int64_t lim = INT32_MAX;
    PTDP_ASSERT(M <= lim && N <= lim && K <= lim && lda <= lim && ldb <= lim && ldc <= lim && batch <= lim);
    if (M == 0 || N == 0 || batch == 0) return;
    ptdp__cuda *cs = ptdp__cuda_of(be);
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1)
        PTDP_CUBLAS_CHECK(cs, cs->blasfn.sgemm(cs->blas, ob, oa, (int)N, (int)M, (int)K, &alpha, B, (int)ldb, A,
                                      (int)lda, &beta, C, (int)ldc));
    else
        PTDP_CUBLAS_CHECK(cs, cs->blasfn.sgemm_strided_batched(cs->blas, ob, oa, (int)N, (int)M, (int)K, &alpha, B,
                                                    (int)ldb, sB, A, (int)lda, sA, &beta, C, (int)ldc, sC,
                                                    (int)batch));
}

static void cuda_gemm(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                      int64_t ldc) {
    ptdp__cuda_gemm_batched(be, ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
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
static double reduce(ptdp_backend *be, const float *x, int64_t n, int squares) {
    ptdp__cuda_workspace(ptdp__cuda_of(be));
    double *p = ptdp__cuda_of(be)->partials, out;
    cudaStream_t st = ptdp__cuda_stream(be);
    if (squares)
        red_partial<1><<<PTDP_CUDA_RED_BLOCKS, 256, 0, st>>>(x, n, p);
    else
        red_partial<0><<<PTDP_CUDA_RED_BLOCKS, 256, 0, st>>>(x, n, p);
    PTDP_CUDA_LAUNCHED();
    red_final<<<1, 256, 0, st>>>(p, PTDP_CUDA_RED_BLOCKS);
    PTDP_CUDA_LAUNCHED();
    PTDP_CUDA_CHECK(cudaMemcpyAsync(&out, p + PTDP_CUDA_RED_BLOCKS, sizeof out, cudaMemcpyDeviceToHost, st));
    PTDP_CUDA_CHECK(cudaStreamSynchronize(st));
    return out;
}
double ptdp__cuda_sumsq(ptdp_backend *be, const float *x, int64_t n) { return reduce(be, x, n, 1); }
double ptdp__cuda_sum(ptdp_backend *be, const float *x, int64_t n) { return reduce(be, x, n, 0); }

/* ---- the instance ---------------------------------------------------------- */

/* fp32 only: activations are already on the grid */
static void cuda_quantize_none(ptdp_backend *be, float *x, int64_t n) { (void)be, (void)x, (void)n; }

static int64_t cuda_attention_scratch_floats(ptdp_backend *be, int64_t s) {
    (void)be, (void)s;
    return 0; /* its own workspace (ws) */
}

/* Loads cuBLAS into cs (see cuda_internal.h); PTDP_EBACKEND naming the
 * library and dlerror when it cannot. The library stays loaded (dlopen
 * counts references; one load per process whatever the instances). */
static int load_cublas(ptdp__cuda *cs) {
    const char *names[] = {"libcublas.so.13", "libcublas.so"};
    void *h = NULL;
    for (int i = 0; i < 2 && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return ptdp_errorf(PTDP_EBACKEND,
                           "CUDA backend: cannot load cuBLAS (libcublas.so.13): %s; add the CUDA "
                           "toolkit's lib64 to LD_LIBRARY_PATH",
                           dlerror());
    ptdp__cublas_fns *f = &cs->blasfn;
    const struct {
        void **slot;
        const char *sym;
    } want[] = {{(void **)&f->create, "cublasCreate_v2"},
                {(void **)&f->destroy, "cublasDestroy_v2"},
                {(void **)&f->set_math_mode, "cublasSetMathMode"},
                {(void **)&f->sgemm, "cublasSgemm_v2"},
                {(void **)&f->sgemm_strided_batched, "cublasSgemmStridedBatched"},
                {(void **)&f->status_string, "cublasGetStatusString"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!(*want[i].slot = dlsym(h, want[i].sym)))
            return ptdp_errorf(PTDP_EBACKEND, "CUDA backend: cuBLAS lacks %s", want[i].sym);
    return PTDP_OK;
}

/* ---- memory of its own (kernels.h's memory contract) -------------------------
 * The attention's workspace (dP and dropout(P) of a chunk of tasks) and the
 * reductions' partials, one block: planned with the rank's memory, sized
 * for the job's (s, b, al); or, in an instance given none, 128 MiB at first
 * use, counted in ondemand_bytes. cuBLAS's handle and its own workspace
 * stay cuBLAS's (outside the plan). */
static size_t lines(size_t bytes) { return (bytes + 63) / 64 * 64; }
static const size_t PARTIALS_BYTES = sizeof(double) * (PTDP_CUDA_RED_BLOCKS + 1);

static void release_ws(ptdp__cuda *cs) {
    if (cs->own_ws) {
        cudaFree(cs->ws);
        cudaFree(cs->partials);
    }
    cs->ws = NULL, cs->partials = NULL, cs->ws_floats = 0, cs->own_ws = 0;
}

void ptdp__cuda_workspace(ptdp__cuda *cs) {
    if (cs->ws) return;
    const size_t bytes = sizeof(float) * (size_t)PTDP_CUDA_ATT_WS_FLOATS;
    PTDP_CUDA_CHECK(cudaMalloc((void **)&cs->ws, bytes));
    PTDP_CUDA_CHECK(cudaMalloc((void **)&cs->partials, PARTIALS_BYTES));
    cs->ws_floats = PTDP_CUDA_ATT_WS_FLOATS, cs->own_ws = 1;
    cs->be.ondemand_bytes += bytes + PARTIALS_BYTES;
}

static size_t ws_bytes(const ptdp_backend_job *job) {
    return lines(sizeof(float) * (size_t)ptdp__cuda_attention_ws_floats(job->s, job->b, job->al, job->gl));
}

static int cuda_workspace_size(ptdp_backend *be, const ptdp_backend_job *job, ptdp_backend_workspace *ws) {
    (void)be;
    ws->fixed = ws_bytes(job) + lines(PARTIALS_BYTES);
    ws->per_layer = ws->per_head = 0;
    return PTDP_OK;
}

static int cuda_workspace_set(ptdp_backend *be, const ptdp_backend_job *job, void *block, size_t bytes) {
    ptdp__cuda *cs = ptdp__cuda_of(be);
    release_ws(cs);
    if (!block) return PTDP_OK;
    PTDP_ASSERT_MSG(bytes == ws_bytes(job) + lines(PARTIALS_BYTES), "a backend workspace not of its size");
    cs->ws = (float *)block;
    cs->ws_floats = ptdp__cuda_attention_ws_floats(job->s, job->b, job->al, job->gl);
    cs->partials = (double *)((char *)block + ws_bytes(job));
    return PTDP_OK;
}

static void cuda_close(ptdp_backend *be) {
    ptdp__cuda *cs = ptdp__cuda_of(be);
    release_ws(cs);
    if (cs->blas) cs->blasfn.destroy(cs->blas);
    free(cs);
}

/* the ops, on an instance whose impl is set */
static void cuda_ops(ptdp_backend *be) {
    be->name = "cuda";
    be->device = PTDP_DEVICE_CUDA;
    be->dtype = PTDP_DTYPE_FP32;
    be->lib = PTDP_GEMM_ONEDNN; /* unused: cuBLAS */
    /* the Llama family's ops are compiled but have not yet run on a GPU against the CPU backend
     * (tests/test_cuda_ops.c): runs that need them are refused, naming the flag, until they have */
    be->caps = PTDP_CAP_DEVICE_MEMORY | PTDP_CAP_UNTESTED_RMSNORM | PTDP_CAP_UNTESTED_SWIGLU |
               PTDP_CAP_UNTESTED_ROPE | PTDP_CAP_UNTESTED_GQA;
    be->mlp_store = PTDP_DTYPE_FP32;
    be->alloc = cuda_alloc;
    be->free = cuda_free;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->zero = cuda_zero;
    be->copy = cuda_copy;
    be->quantize = cuda_quantize_none;
    be->gemm = cuda_gemm;
    be->layernorm_fwd = ptdp__cuda_layernorm_fwd;
    be->layernorm_bwd = ptdp__cuda_layernorm_bwd;
    be->bias_add = ptdp__cuda_bias_add;
    be->bias_bwd = ptdp__cuda_bias_bwd;
    be->bias_gelu_fwd = ptdp__cuda_bias_gelu_fwd;
    be->bias_gelu_bwd = ptdp__cuda_bias_gelu_bwd;
    be->bias_dropout_add_fwd = ptdp__cuda_bias_dropout_add_fwd;
    be->bias_dropout_add_bwd = ptdp__cuda_bias_dropout_add_bwd;
    be->dropout_fwd = ptdp__cuda_dropout_inplace;
    be->dropout_bwd = ptdp__cuda_dropout_inplace;
    be->attention_fwd = ptdp__cuda_attention_fwd;
    be->attention_bwd = ptdp__cuda_attention_bwd;
    be->attention_gqa_fwd = ptdp__cuda_attention_gqa_fwd;
    be->attention_gqa_bwd = ptdp__cuda_attention_gqa_bwd;
    be->rmsnorm_fwd = ptdp__cuda_rmsnorm_fwd;
    be->rmsnorm_bwd = ptdp__cuda_rmsnorm_bwd;
    be->swiglu_fwd = ptdp__cuda_swiglu_fwd;
    be->swiglu_bwd = ptdp__cuda_swiglu_bwd;
    be->rope_fwd = ptdp__cuda_rope_fwd;
    be->rope_bwd = ptdp__cuda_rope_bwd;
    be->attention_saved_floats = ptdp__cuda_attention_saved_floats;
    be->attention_scratch_floats = cuda_attention_scratch_floats;
    be->embed_fwd = ptdp__cuda_embed_fwd;
    be->embed_bwd = ptdp__cuda_embed_bwd;
    be->pos_add_fwd = ptdp__cuda_pos_add_fwd;
    be->pos_add_bwd = ptdp__cuda_pos_add_bwd;
    be->xent_max = ptdp__cuda_xent_max;
    be->xent_sums = ptdp__cuda_xent_sums;
    be->xent_loss = ptdp__cuda_xent_loss;
    be->xent_bwd = ptdp__cuda_xent_bwd;
    be->mask_rows = NULL; /* optional (--eod-mask-loss): not on the GPU yet */
    be->head_logits = ptdp_head_logits_composed; /* gemm, then xent_max */
    be->head_bwd = ptdp_head_bwd_composed;       /* xent_bwd and two GEMMs */
    be->mlp_fwd = ptdp_mlp_fwd_composed;         /* gemm and bias_gelu */
    be->mlp_bwd_b = ptdp_mlp_bwd_b_composed;
    be->mlp_bwd_w = ptdp_mlp_bwd_w_composed;
    be->adamw = ptdp__cuda_adamw;
    be->adamw_master = NULL; /* fp32 only: no master weights */
    be->sumsq = ptdp__cuda_sumsq;
    be->sum = ptdp__cuda_sum;
    be->workspace_size = cuda_workspace_size;
    be->workspace_set = cuda_workspace_set;
    be->close = cuda_close;
}

extern "C" int ptdp__cuda_backend_open(ptdp_backend **out, const ptdp_backend_params *p) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return ptdp_errorf(PTDP_EBACKEND, "CUDA backend: no usable GPU (%s)",
                           e != cudaSuccess ? cudaGetErrorString(e) : "no device");
    }
    if (p->gpu < 0 || p->gpu >= n)
        return ptdp_errorf(PTDP_EBACKEND, "CUDA backend: no GPU %d (this machine has %d)", p->gpu, n);
    if ((e = cudaSetDevice(p->gpu)) != cudaSuccess)
        return ptdp_errorf(PTDP_EBACKEND, "CUDA backend: cudaSetDevice(%d): %s", p->gpu,
                           cudaGetErrorString(e));
    ptdp__cuda *cs = (ptdp__cuda *)calloc(1, sizeof *cs);
    if (!cs) return ptdp_errorf(PTDP_ENOMEM, "out of memory for the CUDA backend");
    cs->be.impl = cs;
    cuda_ops(&cs->be);
    int rc = load_cublas(cs);
    if (rc == PTDP_OK && cs->blasfn.create(&cs->blas) != CUBLAS_STATUS_SUCCESS) {
        cs->blas = NULL;
        rc = ptdp_errorf(PTDP_EBACKEND, "CUDA backend: cuBLAS could not be initialised");
    }
    /* fp32 GEMMs in fp32: no TF32 tensor-core rounding of the inputs */
    if (rc == PTDP_OK) PTDP_CUBLAS_CHECK(cs, cs->blasfn.set_math_mode(cs->blas, CUBLAS_DEFAULT_MATH));
    if (rc != PTDP_OK) {
        cuda_close(&cs->be);
        return rc;
    }
    *out = &cs->be;
    return PTDP_OK;
}
