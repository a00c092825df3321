/* generate.c - KV-cache decoding and sampling (API in model.h).
 *
 * One step over n new rows (N = n <= PREFILL_CHUNK, positions pos0..pos0+n-1),
 * per layer, with hl = h/t, fl = 4h/t, al = a/t (the Llama family: RMSNorm for
 * LN, the queries and keys rotated at their positions before the cache, al
 * query heads over g/t cached key/value groups, SwiGLU for the GeLU MLP, no
 * biases, an untied output layer):
 *   ln = LN1(x)           qkv = ln Wqkv^T + b          (column-parallel)
 *   K[j][pos0+i], V[j][pos0+i] <- k, v of row i, head j (append to cache)
 *   S = q_j K_j[0..L)^T   P = softmax(S / sqrt(hd), offset-causal)
 *   ctx_j = P V_j[0..L)   y = all-reduce(ctx Wo^T)     (row-parallel)
 *   xm = x + y + bo       ...MLP as in layer.c...        x <- xm + all-reduce(gl W2^T) + b2
 * with L = pos0 + n. The logits come from the last row only. The model is
 * the chunk's own parameters (ptdp_gpt_chunk_param_ptrs); nothing is copied.
 * Not here: dropout (generation is evaluation), batching of sequences. */
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ptdp_generator {
    ptdp_gpt_chunk *chunk;
    const ptdp_gpt_config *cfg;
    ptdp_backend *be;
    ptdp_group *tp;
    const ptdp_model_ptrs *P;
    int t, rank;
    int64_t nl, h, hl, fl, al, hd, V, Vp, Vl, v0, max_len, C, len;
    int64_t kvl, ql, rd; /* key/value groups g/t, QKV row (a + 2g) hd/t, rotary dims */
    void *mem;           /* backend memory: cache + work buffers */
    float *kc, *vc;      /* [nl, kvl, max_len, hd] each */
    int32_t *tok;        /* [C] */
    float *x, *ln, *mean, *rstd, *qkv, *ctx, *tmp, *xm, *fc, *gl; /* [C, h|ql|hl|fl], [C];
                                                                     SwiGLU: fc [C, 2 fl] */
    float *rope;                                 /* [max_len, rd] rotary table (rope) */
    float *zbias;                                /* [max(h, fl)] zeros (no linear biases) */
    float *S;                                    /* [C, max_len] attention scores of one head */
    float *lnf, *lnf_mean, *lnf_rstd, *logits_l; /* [h], [1], [1], [Vl] */
    float *host_l;                               /* [Vl] host */
    float *logits;                               /* [Vp] host, full */
    int32_t *idx;                                /* [Vp] host sampling scratch */
    float *prob;                                 /* [Vp] host sampling scratch */
};

ptdp_sampling_params ptdp_sampling_default_params(void) {
    ptdp_sampling_params p = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 1234};
    return p;
}

size_t ptdp_generator_cache_bytes(const ptdp_gpt_config *cfg, int t, int64_t max_len) {
    return 2 * sizeof(float) * (size_t)cfg->num_layers * (size_t)max_len *
           (size_t)(ptdp_gpt_groups(cfg) / t * (cfg->hidden / cfg->heads));
}

typedef struct {
    size_t off;
    char *base; /* NULL: count only */
} carver;

static void *carve(carver *cv, size_t bytes) {
    void *p = cv->base ? cv->base + cv->off : NULL;
    cv->off += (bytes + 63) & ~(size_t)63;
    return p;
}
#define CARVE_F(cv, n) ((float *)carve((cv), sizeof(float) * (size_t)(n)))

static void plan(ptdp_generator *g, carver *cv) {
    const int64_t C = g->C, h = g->h;
    g->kc = CARVE_F(cv, g->nl * g->max_len * g->kvl * g->hd);
    g->vc = CARVE_F(cv, g->nl * g->max_len * g->kvl * g->hd);
    g->tok = carve(cv, sizeof(int32_t) * (size_t)C);
    g->x = CARVE_F(cv, C * h);
    g->ln = CARVE_F(cv, C * h);
    g->mean = CARVE_F(cv, C);
    g->rstd = CARVE_F(cv, C);
    g->qkv = CARVE_F(cv, C * g->ql);
    g->ctx = CARVE_F(cv, C * g->hl);
    g->tmp = CARVE_F(cv, C * h);
    g->xm = CARVE_F(cv, C * h);
    g->fc = CARVE_F(cv, g->cfg->swiglu ? C * 2 * g->fl : ptdp_mlp_floats(g->be, C * g->fl));
    g->gl = CARVE_F(cv, g->cfg->swiglu ? C * g->fl : ptdp_mlp_floats(g->be, C * g->fl));
    g->rope = g->rd ? CARVE_F(cv, ptdp_rope_table_floats(g->max_len, g->rd)) : NULL;
    g->zbias = CARVE_F(cv, h > g->fl ? h : g->fl); /* zeroed by alloc */
    g->S = CARVE_F(cv, C * g->max_len);
    g->lnf = CARVE_F(cv, h);
    g->lnf_mean = CARVE_F(cv, 1);
    g->lnf_rstd = CARVE_F(cv, 1);
    g->logits_l = CARVE_F(cv, g->Vl);
}

int ptdp_generator_init(ptdp_generator **out, ptdp_gpt_chunk *chunk, const ptdp_gpt_config *cfg,
                        ptdp_group *tp, int64_t max_len) {
    *out = NULL;
    if (max_len < 1 || max_len > cfg->max_positions)
        return ptdp_errorf(
            PTDP_ECONFIG,
            "a sequence of %lld tokens (prompt + new tokens) does not fit the model's %lld positions "
            "(--max-position-embeddings)",
            (long long)max_len, (long long)cfg->max_positions);
    ptdp_generator *g = calloc(1, sizeof *g);
    if (!g) return ptdp_errorf(PTDP_ENOMEM, "out of host memory for the generator");
    g->chunk = chunk;
    g->cfg = cfg;
    g->tp = tp;
    g->t = tp ? tp->size : 1;
    g->rank = tp ? tp->rank : 0;
    g->P = ptdp_gpt_chunk_param_ptrs(chunk);
    PTDP_ASSERT_MSG(g->P->wte && (g->P->wpe || cfg->rope) && g->P->lnf_w,
                    "the generator needs a chunk holding the whole model");
    g->nl = cfg->num_layers;
    g->h = cfg->hidden;
    g->hl = cfg->hidden / g->t;
    g->fl = cfg->ffn_hidden / g->t;
    g->al = cfg->heads / g->t;
    g->hd = cfg->hidden / cfg->heads;
    g->kvl = ptdp_gpt_groups(cfg) / g->t;
    g->ql = (g->al + 2 * g->kvl) * g->hd;
    g->rd = ptdp_gpt_rotary_dims(cfg);
    g->V = cfg->vocab;
    g->Vp = cfg->vocab_padded;
    g->Vl = g->Vp / g->t;
    g->v0 = g->rank * g->Vl;
    g->max_len = max_len;
    g->C = max_len < PTDP_GENERATE_PREFILL_CHUNK ? max_len : PTDP_GENERATE_PREFILL_CHUNK;
    /* the offset-causal softmax (decode_attn.c) runs on host memory, so a
     * backend of host memory is the only kind generate.c supports for now */
    g->be = ptdp_gpt_chunk_backend(chunk);
    PTDP_ASSERT_MSG(!(g->be->caps & PTDP_CAP_DEVICE_MEMORY),
                    "generation runs on a backend of host memory (the CPU) only");
    carver dry = {0, NULL};
    plan(g, &dry);
    g->mem = g->be->alloc(g->be, dry.off);
    g->host_l = malloc(sizeof(float) * (size_t)g->Vl);
    g->logits = malloc(sizeof(float) * (size_t)g->Vp);
    g->idx = malloc(sizeof(int32_t) * (size_t)g->Vp);
    g->prob = malloc(sizeof(float) * (size_t)g->Vp);
    if (!g->mem || !g->host_l || !g->logits || !g->idx || !g->prob) {
        char b[32];
        int rc = ptdp_errorf(PTDP_ENOMEM,
                             "cannot allocate the generator (%s of KV cache and work buffers)",
                             ptdp_fmt_bytes((double)dry.off, b));
        ptdp_generator_free(g);
        return rc;
    }
    carver cv = {0, g->mem};
    plan(g, &cv);
    if (g->rope) ptdp_rope_table_init(g->be, g->rope, max_len, g->rd, cfg->rotary_base);
    *out = g;
    return PTDP_OK;
}

void ptdp_generator_free(ptdp_generator *g) {
    if (!g) return;
    if (g->mem) g->be->free(g->be, g->mem);
    free(g->host_l);
    free(g->logits);
    free(g->idx);
    free(g->prob);
    free(g);
}

void ptdp_generator_reset(ptdp_generator *g) { g->len = 0; }
int64_t ptdp_generator_len(const ptdp_generator *g) { return g->len; }

/* Attention of n new rows over the cache of layer i (after appending).
 * A QKV row holds per key/value group its al/kvl query heads, then its key
 * and its value (multi-head attention: one query head per group); query
 * head j reads group j / (al/kvl). */
static void attend(ptdp_generator *g, int64_t i, int64_t n, int64_t pos0) {
    ptdp_backend *be = g->be;
    const int64_t hd = g->hd, hl = g->hl, ql = g->ql, M = g->max_len, L = pos0 + n;
    const int64_t per = g->al / g->kvl, gw = (per + 2) * hd; /* query heads, width of a group */
    float *K = g->kc + i * g->kvl * M * hd, *Vc = g->vc + i * g->kvl * M * hd;
    for (int64_t r = 0; r < n; r++)
        for (int64_t k = 0; k < g->kvl; k++) {
            const float *src = g->qkv + r * ql + k * gw + per * hd;
            be->copy(be, K + (k * M + pos0 + r) * hd, src, hd);
            be->copy(be, Vc + (k * M + pos0 + r) * hd, src + hd, hd);
        }
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t j = 0; j < g->al; j++) {
        const int64_t k = j / per;
        be->gemm(be, 0, 1, n, L, hd, 1.0f, g->qkv + k * gw + (j % per) * hd, ql, K + k * M * hd, hd,
                 0.0f, g->S, L);
        ptdp__decode_softmax(g->S, n, L, pos0, scale);
        be->gemm(be, 0, 0, n, hd, L, 1.0f, g->S, L, Vc + k * M * hd, hd, 0.0f, g->ctx + j * hd, hl);
    }
}

/* The norm of the model (LayerNorm or RMSNorm) over n rows. */
static void norm(ptdp_generator *g, const float *x, const float *w, const float *b, float *out,
                 float *mean, float *rstd, int64_t n) {
    ptdp_backend *be = g->be;
    if (g->cfg->rmsnorm)
        be->rmsnorm_fwd(be, x, w, out, rstd, n, g->h, g->cfg->ln_eps);
    else
        be->layernorm_fwd(be, x, w, b, out, mean, rstd, n, g->h, g->cfg->ln_eps);
}

static void allreduce(ptdp_generator *g, float *buf, int64_t n) {
    /* 16-bit runs: 16-bit values on the wire, the sum back on the grid */
    if (g->t > 1) ptdp_allreduce_sum_act(g->tp, buf, n, g->be->dtype);
}

/* Runs n <= C new rows through the model, appending to the cache. */
static void forward_rows(ptdp_generator *g, const int32_t *tokens, int64_t n) {
    ptdp_backend *be = g->be;
    const ptdp_gpt_config *cfg = g->cfg;
    const int64_t h = g->h, hl = g->hl, fl = g->fl, pos0 = g->len;
    const ptdp_dropout none = {.p = 0.0f};
    be->upload(be, g->tok, tokens, sizeof(int32_t) * (size_t)n);
    be->embed_fwd(be, g->tok, n, g->P->wte, g->v0, g->Vl, g->x, n, 1, h);
    allreduce(g, g->x, n * h);
    if (g->P->wpe) be->pos_add_fwd(be, g->x, g->P->wpe + pos0 * h, n, 1, h);
    const float *z = g->zbias;
    for (int64_t i = 0; i < g->nl; i++) {
        const ptdp_layer_ptrs *W = &g->P->layers[i];
        norm(g, g->x, W->ln1_w, W->ln1_b, g->ln, g->mean, g->rstd, n);
        be->gemm(be, 0, 1, n, g->ql, h, 1.0f, g->ln, h, W->qkv_w, h, 0.0f, g->qkv, g->ql);
        if (W->qkv_b) be->bias_add(be, g->qkv, W->qkv_b, n, g->ql);
        if (g->rope) /* the rows' positions are the cache's: pos0 on */
            be->rope_fwd(be, g->qkv, g->rope, n, 1, g->al, g->kvl, g->hd, g->rd, pos0);
        attend(g, i, n, pos0);
        be->gemm(be, 0, 1, n, h, hl, 1.0f, g->ctx, hl, W->proj_w, hl, 0.0f, g->tmp, h);
        allreduce(g, g->tmp, n * h);
        be->bias_dropout_add_fwd(be, g->tmp, W->proj_b ? W->proj_b : z, g->x, g->xm, n, h, none);
        norm(g, g->xm, W->ln2_w, W->ln2_b, g->ln, g->mean, g->rstd, n);
        if (cfg->swiglu) {
            be->gemm(be, 0, 1, n, fl, h, 1.0f, g->ln, h, W->gate_w, h, 0.0f, g->fc, 2 * fl);
            be->gemm(be, 0, 1, n, fl, h, 1.0f, g->ln, h, W->up_w, h, 0.0f, g->fc + fl, 2 * fl);
            be->swiglu_fwd(be, g->fc, NULL, g->gl, n, fl);
            be->gemm(be, 0, 1, n, h, fl, 1.0f, g->gl, fl, W->fc2_w, fl, 0.0f, g->tmp, h);
        } else {
            be->mlp_fwd(be, g->ln, W->fc1_w, W->fc1_b ? W->fc1_b : z, W->fc2_w, g->fc, g->gl,
                        g->tmp, n, h, fl);
        }
        allreduce(g, g->tmp, n * h);
        be->bias_dropout_add_fwd(be, g->tmp, W->fc2_b ? W->fc2_b : z, g->xm, g->x, n, h, none);
    }
    g->len += n;
}

/* Full logits [Vp] of the last row in g->x (n rows), identical on all ranks. */
static void last_logits(ptdp_generator *g, int64_t n) {
    ptdp_backend *be = g->be;
    const int64_t h = g->h;
    norm(g, g->x + (n - 1) * h, g->P->lnf_w, g->P->lnf_b, g->lnf, g->lnf_mean, g->lnf_rstd, 1);
    be->gemm(be, 0, 1, 1, g->Vl, h, 1.0f, g->lnf, h, g->P->out_w, h, 0.0f, g->logits_l, g->Vl);
    if (g->t == 1) {
        be->download(be, g->logits, g->logits_l, sizeof(float) * (size_t)g->Vl);
    } else {
        /* zero-filled sum: every slot gets exactly one rank's value */
        memset(g->logits, 0, sizeof(float) * (size_t)g->Vp);
        be->download(be, g->logits + g->v0, g->logits_l, sizeof(float) * (size_t)g->Vl);
        ptdp_allreduce_sum_f32(g->tp, g->logits, g->Vp);
    }
    for (int64_t v = g->V; v < g->Vp; v++) g->logits[v] = -INFINITY;
}

int ptdp_generator_prefill(ptdp_generator *g, const int32_t *tokens, int64_t n,
                           const float **logits) {
    if (n < 1) return ptdp_errorf(PTDP_EINVAL, "no tokens to process");
    if (g->len + n > g->max_len)
        return ptdp_errorf(PTDP_EINVAL,
                           "%lld tokens after %lld exceed the generator's %lld positions",
                           (long long)n, (long long)g->len, (long long)g->max_len);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= g->V)
            return ptdp_errorf(PTDP_EINVAL, "token id %d is outside the vocabulary [0, %lld)",
                               tokens[i], (long long)g->V);
    int64_t done = 0, last = 0;
    while (done < n) {
        last = n - done < g->C ? n - done : g->C;
        forward_rows(g, tokens + done, last);
        done += last;
    }
    if (logits) {
        last_logits(g, last);
        *logits = g->logits;
    }
    return PTDP_OK;
}

int ptdp_generator_next_logits(ptdp_generator *g, int32_t token, const float **logits) {
    return ptdp_generator_prefill(g, &token, 1, logits);
}

/* ---- sampling ------------------------------------------------------------ */

/* a ranks before b: larger logit, then smaller id (deterministic ties) */
static int before(const float *l, int32_t a, int32_t b) {
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

static void sift_down(const float *l, int32_t *heap, int64_t n, int64_t i) {
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && before(l, heap[c + 1], heap[c])) c++;
        if (!before(l, heap[c], heap[i])) return;
        int32_t tmp = heap[i];
        heap[i] = heap[c];
        heap[c] = tmp;
        i = c;
    }
}

static int32_t argmax(const float *l, int64_t V) {
    int32_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (l[v] > l[best]) best = (int32_t)v;
    return best;
}

int32_t ptdp_sample_logits(const float *logits, int64_t V, const ptdp_sampling_params *sp,
                           uint64_t draw, int32_t *idx, float *prob) {
    if (sp->temperature <= 0.0f || sp->top_k == 1) return argmax(logits, V);
    const double invT = 1.0 / (double)sp->temperature;
    const float mx = logits[argmax(logits, V)];
    const ptdp_rng_key key = ptdp_rng_key_make(sp->seed, "generate");
    const double u = (double)ptdp_rng_uniform(key, draw); /* (0, 1] */
    const int filter = (sp->top_k > 0 && sp->top_k < V) || sp->top_p < 1.0f;
    if (!filter) {
        double Z = 0;
        for (int64_t v = 0; v < V; v++) Z += exp(((double)logits[v] - mx) * invT);
        double target = u * Z, cum = 0;
        for (int64_t v = 0; v < V; v++) {
            cum += exp(((double)logits[v] - mx) * invT);
            if (cum >= target) return (int32_t)v;
        }
        return argmax(logits, V);
    }
    /* Pop candidates in rank order from a max-heap: O(V + m log V) for the m
     * tokens kept. With top-k, top-p applies to the renormalised top-k set
     * (Hugging Face's order: temperature, top-k, top-p). */
    for (int64_t v = 0; v < V; v++) idx[v] = (int32_t)v;
    for (int64_t i = V / 2 - 1; i >= 0; i--) sift_down(logits, idx, V, i);
    double Z = 0;
    if (sp->top_k <= 0 || sp->top_k >= V)
        for (int64_t v = 0; v < V; v++) Z += exp(((double)logits[v] - mx) * invT);
    const int64_t kmax = sp->top_k > 0 && sp->top_k < V ? sp->top_k : V;
    int64_t m = 0, heap_n = V;
    double cum = 0;
    int32_t *sel = idx + V; /* popped ids go to the tail, best at V-1 */
    while (m < kmax) {
        int32_t top = idx[0];
        idx[0] = idx[heap_n - 1];
        idx[--heap_n] = top;
        sift_down(logits, idx, heap_n, 0);
        prob[m] = (float)exp(((double)logits[top] - mx) * invT);
        cum += prob[m];
        m++;
        if (kmax == V && cum >= (double)sp->top_p * Z) break;
    }
    if (kmax < V && sp->top_p < 1.0f) { /* top-p within the top-k set */
        double Zk = cum, c = 0;
        int64_t keep = 0;
        while (keep < m) {
            c += prob[keep++];
            if (c >= (double)sp->top_p * Zk) break;
        }
        m = keep;
        cum = c;
    }
    double target = u * cum, c = 0;
    for (int64_t k = 0; k < m; k++) {
        c += prob[k];
        if (c >= target) return sel[-1 - k];
    }
    return sel[-1 - (m - 1)];
}

int32_t ptdp_generator_sample(ptdp_generator *g, const float *logits,
                              const ptdp_sampling_params *sp, uint64_t draw) {
    return ptdp_sample_logits(logits, g->V, sp, draw, g->idx, g->prob);
}
