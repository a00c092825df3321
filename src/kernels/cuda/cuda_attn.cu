/* cuda_attn.cu - causal self-attention core on the GPU: cuBLAS strided-
 * batched GEMMs over all (sequence, head) pairs around a causal softmax
 * kernel (one block per row), attention dropout from the device Philox with
 * attention.c's element numbering (task*s*s + i*s + j, the flat index into
 * probs), so masks are the CPU's. The GEMMs run over full [s, s] blocks
 * (the zeros above the diagonal make that equal to the CPU's causal
 * blocking up to summation order). Scores are computed into probs and
 * normalised in place; the dropped-out probabilities and the backward's dP
 * live in the backend's workspace (planned with the rank's memory:
 * ptdp__cuda_attention_ws_floats), tasks taken in chunks that fit it. The
 * caller's scratch is not used. The probabilities are what this backend
 * saves for the backward (attention_saved_floats = b*al*s*s; the CPU
 * backend saves only a logsumexp per row). With key/value groups the GEMMs run once per query head of a group
 * over all (sequence, group) pairs, reading the group's k and v in place. Not here: flash-style tiling. */
#include "kernels/cuda/cuda_internal.h"

#define T_ROW 256
#define T_ELEM 256 /* threads per block, element-wise kernels */

/* row r = task*s + i of P: P[i, j] = softmax(scale * S[i, 0..i]), zero for j > i (in place over S) */
__global__ void softmax_fwd_k(float *P, int64_t s, float scale) {
    float *pr = P + (int64_t)blockIdx.x * s;
    const int64_t n = (int64_t)(blockIdx.x % s) + 1;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, pr[j]);
    mx = ptdp__block_max(mx);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float e = expf(scale * (pr[j] - mx));
        pr[j] = e;
        sum += e;
    }
    float inv = 1.0f / ptdp__block_sum(sum);
    for (int64_t j = threadIdx.x; j < s; j += blockDim.x) pr[j] = j < n ? pr[j] * inv : 0.0f;
}

/* dS = scale * P * (dP - rowsum(dP * P)) in place over dP, zero above the diagonal */
__global__ void softmax_bwd_k(const float *P, float *dP, int64_t s, float scale) {
    const float *pr = P + (int64_t)blockIdx.x * s;
    float *d = dP + (int64_t)blockIdx.x * s;
    const int64_t n = (int64_t)(blockIdx.x % s) + 1;
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) dot += d[j] * pr[j];
    dot = ptdp__block_sum(dot);
    for (int64_t j = threadIdx.x; j < s; j += blockDim.x) d[j] = j < n ? scale * pr[j] * (d[j] - dot) : 0.0f;
}

static unsigned rows(int64_t nt, int64_t s) {
    PTDP_ASSERT(nt * s < (int64_t)1 << 31);
    return (unsigned)(nt * s);
}

/* tasks per chunk when each task needs `per` floats of workspace */
static int64_t chunk_tasks(ptdp_backend *be, int64_t per, int64_t T) {
    ptdp__cuda_workspace(ptdp__cuda_of(be));
    int64_t nt = ptdp__cuda_of(be)->ws_floats / per;
    PTDP_ASSERT_MSG(nt >= 1, "sequence too long for the CUDA attention workspace");
    return nt < T ? nt : T;
}

/* Dropout on n tasks' [s, s] blocks starting at task t0; task (bi, j) uses
 * block bi*heads + head0 + j of the site when drop.heads > 0 (global head
 * numbering, kernels.h), else block task: attention.c's numbering. */
__global__ void attn_drop_k(const float *src, float *dst, int64_t total, ptdp__cuda_drop d, int64_t t0, int64_t ss,
                            int64_t al, int64_t heads, int64_t head0) {
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= total) return;
    const int64_t task = t0 + e / ss, r = e % ss;
    const int64_t blk = d.b > 0 ? (d.sample0 + task / al) * (heads ? heads : al) + head0 + task % al : task;
    dst[e] = ptdp__drop_apply(d, (uint64_t)(blk * ss + r), src[e]);
}
static void attn_dropout(ptdp_backend *be, const float *src, float *dst, int64_t n, int64_t ss, int64_t t0, int64_t al,
                         ptdp_dropout drop) {
    if (n * ss == 0) return;
    attn_drop_k<<<ptdp__blocks(n * ss, T_ELEM), T_ELEM, 0, ptdp__cuda_stream(be)>>>(src, dst, n * ss, ptdp__cuda_drop_make(drop), t0, ss, al,
                                                          drop.heads, drop.head0);
    PTDP_CUDA_LAUNCHED();
}

/* With key/value groups (al/gl = hpg query heads a group, qkv [s, b, gl, hpg + 2, hd]): each strided batched GEMM
 * runs over the b*gl (sequence, group) pairs for one query head of every group in turn, so the group's k and v
 * are read in place (no copy per query head); probs stays [b, al, s, s] by query head, the tasks of a group
 * consecutive. hpg = 1 (multi-head attention) is the same calls as before groups. */
void ptdp__cuda_attention_gqa_fwd(ptdp_backend *be, const float *qkv, float *ctx, float *probs, float *scratch,
                                  int64_t s, int64_t b, int64_t al, int64_t gl, int64_t hd, ptdp_dropout drop) {
    PTDP_ASSERT(gl > 0 && al % gl == 0);
    const int64_t hpg = al / gl, G = b * gl, W3 = (hpg + 2) * hd, ld3 = G * W3, ldc = b * al * hd, ss = s * s;
    const float scale = 1.0f / sqrtf((float)hd);
    (void)scratch;
    if (G == 0 || s == 0) return;
    /* scores S = Q K^T into probs, then the softmax in place */
    for (int64_t jj = 0; jj < hpg; jj++)
        ptdp__cuda_gemm_batched(be, 0, 1, s, s, hd, 1.0f, qkv + jj * hd, ld3, W3, qkv + hpg * hd, ld3, W3, 0.0f,
                                probs + jj * ss, s, hpg * ss, G);
    softmax_fwd_k<<<rows(G * hpg, s), T_ROW, 0, ptdp__cuda_stream(be)>>>(probs, s, scale);
    PTDP_CUDA_LAUNCHED();
    if (drop.p == 0.0f) {
        for (int64_t jj = 0; jj < hpg; jj++)
            ptdp__cuda_gemm_batched(be, 0, 0, s, hd, s, 1.0f, probs + jj * ss, s, hpg * ss, qkv + (hpg + 1) * hd, ld3,
                                    W3, 0.0f, ctx + jj * hd, ldc, hpg * hd, G);
        return;
    }
    const int64_t ng = chunk_tasks(be, hpg * ss, G); /* groups per chunk */
    for (int64_t g0 = 0; g0 < G; g0 += ng) {
        const int64_t n = G - g0 < ng ? G - g0 : ng;
        float *Pd = ptdp__cuda_of(be)->ws;
        attn_dropout(be, probs + g0 * hpg * ss, Pd, n * hpg, ss, g0 * hpg, al, drop);
        for (int64_t jj = 0; jj < hpg; jj++)
            ptdp__cuda_gemm_batched(be, 0, 0, s, hd, s, 1.0f, Pd + jj * ss, s, hpg * ss,
                                    qkv + g0 * W3 + (hpg + 1) * hd, ld3, W3, 0.0f, ctx + (g0 * hpg + jj) * hd, ldc,
                                    hpg * hd, n);
    }
}

void ptdp__cuda_attention_fwd(ptdp_backend *be, const float *qkv, float *ctx, float *probs, float *scratch, int64_t s,
                              int64_t b, int64_t al, int64_t hd, ptdp_dropout drop) {
    ptdp__cuda_attention_gqa_fwd(be, qkv, ctx, probs, scratch, s, b, al, al, hd, drop);
}

int64_t ptdp__cuda_attention_ws_floats(int64_t s, int64_t b, int64_t al, int64_t gl) {
    /* dropout's backward holds dP and dropout(P) of a chunk of groups: 2 s^2 a query head; at least
     * one group, at most the fixed workspace of an unplanned instance */
    const int64_t hpg = gl > 0 ? al / gl : 1, all = 2 * b * al * s * s, one = 2 * hpg * s * s;
    if (one >= PTDP_CUDA_ATT_WS_FLOATS) return one;
    return all < PTDP_CUDA_ATT_WS_FLOATS ? all : PTDP_CUDA_ATT_WS_FLOATS;
}

int64_t ptdp__cuda_attention_saved_floats(ptdp_backend *be, int64_t s, int64_t b, int64_t al) { return b * al * s * s; }

/* ctx is not needed: the stored probabilities give rowsum(dP * P) directly. A chunk of groups at a time; a
 * group's dk and dv add up its query heads' in turn (beta 1 after the first). */
void ptdp__cuda_attention_gqa_bwd(ptdp_backend *be, const float *dctx, const float *qkv, const float *ctx,
                                  const float *probs, float *dqkv, float *scratch, int64_t s, int64_t b, int64_t al,
                                  int64_t gl, int64_t hd, ptdp_dropout drop) {
    PTDP_ASSERT(gl > 0 && al % gl == 0);
    const int64_t hpg = al / gl, G = b * gl, W3 = (hpg + 2) * hd, ld3 = G * W3, ldc = b * al * hd, ss = s * s;
    const float scale = 1.0f / sqrtf((float)hd);
    const int dropping = drop.p > 0.0f;
    (void)ctx, (void)scratch;
    if (G == 0 || s == 0) return;
    const int64_t ng = chunk_tasks(be, hpg * ss * (dropping ? 2 : 1), G);
    for (int64_t g0 = 0; g0 < G; g0 += ng) {
        const int64_t n = G - g0 < ng ? G - g0 : ng, nt = n * hpg;
        const float *P = probs + g0 * hpg * ss, *Q = qkv + g0 * W3, *K = Q + hpg * hd, *V = K + hd;
        const float *dC = dctx + g0 * hpg * hd;
        float *dQ = dqkv + g0 * W3, *dK = dQ + hpg * hd, *dV = dK + hd;
        float *dP = ptdp__cuda_of(be)->ws, *Pd = dP + nt * ss;
        const float *Puse = P;
        if (dropping) {
            attn_dropout(be, P, Pd, nt, ss, g0 * hpg, al, drop);
            Puse = Pd;
        }
        /* dPd = dC V^T, dropout', softmax' */
        for (int64_t jj = 0; jj < hpg; jj++)
            ptdp__cuda_gemm_batched(be, 0, 1, s, s, hd, 1.0f, dC + jj * hd, ldc, hpg * hd, V, ld3, W3, 0.0f,
                                    dP + jj * ss, s, hpg * ss, n);
        if (dropping) attn_dropout(be, dP, dP, nt, ss, g0 * hpg, al, drop);
        softmax_bwd_k<<<rows(nt, s), T_ROW, 0, ptdp__cuda_stream(be)>>>(P, dP, s, scale);
        PTDP_CUDA_LAUNCHED();
        /* dQ = dS K, dV += Pd^T dC, dK += dS^T Q */
        for (int64_t jj = 0; jj < hpg; jj++) {
            const float beta = jj ? 1.0f : 0.0f;
            ptdp__cuda_gemm_batched(be, 0, 0, s, hd, s, 1.0f, dP + jj * ss, s, hpg * ss, K, ld3, W3, 0.0f,
                                    dQ + jj * hd, ld3, W3, n);
            ptdp__cuda_gemm_batched(be, 1, 0, s, hd, s, 1.0f, Puse + jj * ss, s, hpg * ss, dC + jj * hd, ldc,
                                    hpg * hd, beta, dV, ld3, W3, n);
            ptdp__cuda_gemm_batched(be, 1, 0, s, hd, s, 1.0f, dP + jj * ss, s, hpg * ss, Q + jj * hd, ld3, W3, beta,
                                    dK, ld3, W3, n);
        }
    }
}

void ptdp__cuda_attention_bwd(ptdp_backend *be, const float *dctx, const float *qkv, const float *ctx,
                              const float *probs, float *dqkv, float *scratch, int64_t s, int64_t b, int64_t al,
                              int64_t hd, ptdp_dropout drop) {
    ptdp__cuda_attention_gqa_bwd(be, dctx, qkv, ctx, probs, dqkv, scratch, s, b, al, al, hd, drop);
}
