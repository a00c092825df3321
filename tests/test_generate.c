/* test_generate.c - KV-cache decoding against the full forward
 * (ptdp_gpt_chunk_logits) on the HF fixtures, greedy generation against the
 * argmax chain of full forwards, and the sampler: top-k = 1 is greedy, a
 * fixed seed reproduces, filters keep to their sets, padded vocabulary ids
 * are never drawn; the same on the Llama fixture (key/value groups in the
 * cache, rotary positions from the cache's length). Single process (t = 1); the t = 2 equality is
 * in test_generate_cli.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/hf.h"
#include "model/model.h"
#include "backend_util.h"
#include "test.h"

typedef struct {
    ptdp_gpt_config cfg;
    ptdp_job job; /* the chunk's: cfg, one sequence */
    ptdp_comm comm;
    ptdp_gpt_chunk *chunk;
} model;

static int64_t meta_i(ptdp_st_file *f, const char *k) { return atoll(ptdp_st_metadata(f, k)); }

static int load(model *m, const char *file) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/fixtures/%s", PTDP_SOURCE_DIR, file);
    ptdp_st_file *f = NULL;
    CHECK_OK(ptdp_st_open(&f, path));
    if (!f) return -1;
    memset(m, 0, sizeof *m);
    const int llama = ptdp_st_metadata(f, "n_kv_groups") != NULL; /* llama_reference.py's */
    m->cfg.num_layers = meta_i(f, "n_layer");
    m->cfg.hidden = meta_i(f, llama ? "hidden_size" : "n_embd");
    m->cfg.heads = meta_i(f, "n_head");
    m->cfg.vocab = meta_i(f, "vocab_size");
    m->cfg.max_positions = meta_i(f, llama ? "seq_length" : "n_positions");
    m->cfg.seq_length = m->cfg.max_positions;
    m->cfg.init_std = 0.02f;
    if (llama) { /* rotary positions, 4 query heads over 2 cached key/value groups, SwiGLU */
        m->cfg.rmsnorm = m->cfg.swiglu = m->cfg.rope = m->cfg.untie = m->cfg.no_bias = 1;
        m->cfg.query_groups = meta_i(f, "n_kv_groups");
        m->cfg.ffn_hidden = meta_i(f, "ffn_hidden_size");
    }
    ptdp_st_close(f);
    CHECK_OK(ptdp_gpt_config_finish(&m->cfg, 128, 1));
    ptdp_comm_init_single(&m->comm);
    m->job = ptdp_job_default_params();
    m->job.model = m->cfg;
    ptdp_chunk_params cp = {.job = &m->job,
                            .layer_begin = 0,
                            .layer_end = m->cfg.num_layers,
                            .pre = 1,
                            .post = 1,
                            .slots = 1,
                            .be = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32),
                            .tp = &m->comm.tensor};
    CHECK_OK(ptdp_gpt_chunk_init(&m->chunk, &cp));
    if (!m->chunk) return -1;
    ptdp_gpt_chunk_set_training(m->chunk, 0);
    int rc = ptdp_hf_load_chunk(m->chunk, &m->cfg, 0, path);
    CHECK_OK(rc);
    return rc;
}

/* (a) every position's KV-cache logits equal the full forward's */
static void test_logits(model *m) {
    const int64_t s = m->cfg.seq_length, V = m->cfg.vocab, Vp = m->cfg.vocab_padded;
    int32_t tok[64];
    for (int64_t i = 0; i < s; i++) tok[i] = (int32_t)((i * 37 + 11) % V);
    float *full = malloc(sizeof(float) * (size_t)(s * Vp));
    ptdp_gpt_chunk_logits(m->chunk, tok, s, full);
    ptdp_generator *g = NULL;
    CHECK_OK(ptdp_generator_init(&g, m->chunk, &m->cfg, &m->comm.tensor, s));
    if (!g) return;
    int bad = 0;
    for (int64_t p = 0; p < s; p++) {
        const float *lg = NULL;
        CHECK_OK(ptdp_generator_next_logits(g, tok[p], &lg));
        for (int64_t v = 0; v < V; v++) {
            double a = lg[v], b = full[p * Vp + v];
            if (fabs(a - b) > 1e-6 + 1e-5 * fabs(b) && bad++ < 5)
                fprintf(stderr, "  position %lld id %lld: cache %.9g full %.9g\n", (long long)p,
                        (long long)v, a, b);
        }
        for (int64_t v = V; v < Vp; v++) bad += !(isinf(lg[v]) && lg[v] < 0);
    }
    CHECK(bad == 0);
    /* a batched prompt pass (5 rows at once), then single steps */
    ptdp_generator_reset(g);
    const float *lg = NULL;
    CHECK_OK(ptdp_generator_prefill(g, tok, 5, &lg));
    for (int64_t v = 0; v < V; v++) CHECK_CLOSE(lg[v], full[4 * Vp + v], 1e-5, 1e-6);
    for (int64_t p = 5; p < s; p++) CHECK_OK(ptdp_generator_next_logits(g, tok[p], &lg));
    for (int64_t v = 0; v < V; v++) CHECK_CLOSE(lg[v], full[(s - 1) * Vp + v], 1e-5, 1e-6);
    /* errors: beyond max_len, bad ids, too long at init */
    CHECK(ptdp_generator_next_logits(g, tok[0], &lg) == PTDP_EINVAL);
    ptdp_generator_reset(g);
    CHECK(ptdp_generator_next_logits(g, (int32_t)V, &lg) == PTDP_EINVAL);
    CHECK(ptdp_generator_next_logits(g, -1, &lg) == PTDP_EINVAL);
    CHECK(ptdp_generator_len(g) == 0);
    ptdp_generator *g2 = NULL;
    CHECK(ptdp_generator_init(&g2, m->chunk, &m->cfg, NULL, m->cfg.max_positions + 1) ==
          PTDP_ECONFIG);
    CHECK(g2 == NULL);
    ptdp_generator_free(g);
    free(full);
}

/* generates to n tokens from a prompt of np; returns the sequence in out */
static void generate(model *m, const int32_t *prompt, int64_t np, int64_t n,
                     const ptdp_sampling_params *sp, int32_t *out) {
    ptdp_generator *g = NULL;
    CHECK_OK(ptdp_generator_init(&g, m->chunk, &m->cfg, NULL, n));
    if (!g) return;
    memcpy(out, prompt, sizeof(int32_t) * (size_t)np);
    const float *lg = NULL;
    CHECK_OK(ptdp_generator_prefill(g, prompt, np, &lg));
    for (int64_t k = np; k < n; k++) {
        out[k] = ptdp_generator_sample(g, lg, sp, (uint64_t)(k - np));
        if (k + 1 < n) CHECK_OK(ptdp_generator_next_logits(g, out[k], &lg));
    }
    ptdp_generator_free(g);
}

/* (b) greedy = argmax chain of full forwards; (c) top-k = 1 is greedy */
static void test_greedy(model *m) {
    const int64_t s = m->cfg.seq_length, V = m->cfg.vocab, Vp = m->cfg.vocab_padded;
    const int32_t prompt[3] = {5, 17, 42};
    int32_t a[64], b[64], ref[64];
    ptdp_sampling_params sp = ptdp_sampling_default_params();
    sp.temperature = 0;
    generate(m, prompt, 3, s, &sp, a);
    generate(m, prompt, 3, s, &sp, b);
    CHECK(memcmp(a, b, sizeof(int32_t) * (size_t)s) == 0);
    float *full = malloc(sizeof(float) * (size_t)(s * Vp));
    memset(ref, 0, sizeof ref);
    memcpy(ref, prompt, sizeof prompt);
    for (int64_t k = 3; k < s; k++) {
        ptdp_gpt_chunk_logits(m->chunk, ref, s, full); /* rows after k-1 do not affect row k-1 */
        const float *row = full + (k - 1) * Vp;
        int32_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (row[v] > row[best]) best = (int32_t)v;
        ref[k] = best;
    }
    int same = memcmp(a, ref, sizeof(int32_t) * (size_t)s) == 0;
    if (!same)
        for (int64_t k = 0; k < s; k++)
            fprintf(stderr, "  %lld: kv %d full %d\n", (long long)k, a[k], ref[k]);
    CHECK(same);
    sp.temperature = 0.7f;
    sp.top_k = 1;
    generate(m, prompt, 3, s, &sp, b);
    CHECK(memcmp(a, b, sizeof(int32_t) * (size_t)s) == 0);
    /* sampling: a seed reproduces; another seed (very likely) differs */
    sp.temperature = 1.5f;
    sp.top_k = 0;
    sp.seed = 7;
    generate(m, prompt, 3, s, &sp, a);
    generate(m, prompt, 3, s, &sp, b);
    CHECK(memcmp(a, b, sizeof(int32_t) * (size_t)s) == 0);
    sp.seed = 8;
    generate(m, prompt, 3, s, &sp, b);
    CHECK(memcmp(a, b, sizeof(int32_t) * (size_t)s) != 0);
    free(full);
}

/* the sampler's sets on hand-made logits */
static void test_sampler(void) {
    enum { V = 10 };
    float l[V] = {0, 3, 1, 2.9f, -1, 0.5f, 3, -2, 0, 1};
    int32_t idx[V];
    float prob[V];
    ptdp_sampling_params sp = ptdp_sampling_default_params();
    sp.temperature = 0;
    CHECK(ptdp_sample_logits(l, V, &sp, 0, idx, prob) == 1); /* ties: lowest id */
    sp.temperature = 1;
    sp.top_k = 1;
    CHECK(ptdp_sample_logits(l, V, &sp, 0, idx, prob) == 1);
    int hits[V] = {0};
    sp.top_k = 3; /* {1, 6, 3} */
    for (uint64_t d = 0; d < 3000; d++) hits[ptdp_sample_logits(l, V, &sp, d, idx, prob)]++;
    CHECK(hits[1] + hits[6] + hits[3] == 3000 && hits[1] > 0 && hits[6] > 0 && hits[3] > 0);
    /* p(1) = p(6) ~ 0.31 each, p(3) ~ 0.28: top-p 0.5 keeps {1, 6} */
    memset(hits, 0, sizeof hits);
    sp.top_k = 0;
    sp.top_p = 0.5f;
    for (uint64_t d = 0; d < 3000; d++) hits[ptdp_sample_logits(l, V, &sp, d, idx, prob)]++;
    CHECK(hits[1] + hits[6] == 3000 && hits[1] > 1000 && hits[6] > 1000);
    /* top-k 3 then top-p 0.7 of the renormalised set: {1, 6, 3} (0.34+0.34 < 0.7) */
    memset(hits, 0, sizeof hits);
    sp.top_k = 3;
    sp.top_p = 0.7f;
    for (uint64_t d = 0; d < 3000; d++) hits[ptdp_sample_logits(l, V, &sp, d, idx, prob)]++;
    CHECK(hits[1] + hits[6] + hits[3] == 3000 && hits[3] > 0);
    /* plain sampling follows softmax: id 7 (p ~ 0.002) rare, 1 frequent */
    memset(hits, 0, sizeof hits);
    sp.top_k = 0;
    sp.top_p = 1;
    for (uint64_t d = 0; d < 20000; d++) hits[ptdp_sample_logits(l, V, &sp, d, idx, prob)]++;
    CHECK(hits[1] > 5000 && hits[1] < 7500 && hits[7] < 150);
}

/* padded vocabulary (gpt_b: V = 201 of 256) is never drawn */
static void test_padding(model *m) {
    CHECK(m->cfg.vocab_padded > m->cfg.vocab);
    ptdp_generator *g = NULL;
    CHECK_OK(ptdp_generator_init(&g, m->chunk, &m->cfg, NULL, 4));
    if (!g) return;
    const float *lg = NULL;
    const int32_t prompt[2] = {1, 2};
    CHECK_OK(ptdp_generator_prefill(g, prompt, 2, &lg));
    int bad = 0;
    const float temps[3] = {0.0f, 1.0f, 50.0f};
    for (int ti = 0; ti < 3; ti++) {
        ptdp_sampling_params sp = ptdp_sampling_default_params();
        sp.temperature = temps[ti];
        for (uint64_t d = 0; d < 2000; d++) {
            sp.top_k = (int64_t)(d % 3) * 150; /* off, 150, 300 (>= V: off) */
            sp.top_p = d % 2 ? 0.95f : 1.0f;
            int32_t t = ptdp_generator_sample(g, lg, &sp, d);
            bad += t < 0 || t >= m->cfg.vocab;
        }
    }
    CHECK(bad == 0);
    ptdp_generator_free(g);
}

int main(void) {
    model a, b;
    if (load(&a, "gpt_a.safetensors") == 0) {
        test_logits(&a);
        test_greedy(&a);
    }
    ptdp_gpt_chunk_free(a.chunk);
    test_sampler();
    if (load(&b, "gpt_b.safetensors") == 0) {
        test_logits(&b);
        test_padding(&b);
    }
    ptdp_gpt_chunk_free(b.chunk);
    model c; /* the Llama family: the cache holds key/value groups, rotated keys */
    if (load(&c, "llama_a.safetensors") == 0) {
        test_logits(&c);
        test_greedy(&c);
    }
    ptdp_gpt_chunk_free(c.chunk);
    return test_done("test_generate");
}
