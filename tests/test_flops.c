/* test_flops.c - the model-FLOP count that `ptdp train`, `bench_train` and
 * the planner report (ptdp_gpt_flops_per_iter, ptdp_plan_model_flops) against
 * the GEMMs the model really issues: a whole-model chunk runs one micro-batch
 * forward and backward through a copy of the CPU backend whose gemm op adds up
 * 2 M N K. Attention's s x s products run inside the attention op (on tiles,
 * skipping the causal upper triangle), so they are not seen here; the count
 * has them as 72 B s l h^2 * s / (6h) (96 with full recomputation), which
 * the test takes off. What remains must be exact: the six layer GEMMs and
 * their gradients (72 B s l h^2, 96 with the recomputed forward) and the
 * logit layer's three GEMMs, which nothing recomputes (6 B s h V). */
#include <string.h>

#include "model/model.h"
#include "plan/plan.h"
#include "backend_util.h"
#include "test.h"

static ptdp_backend *real;
static double counted;

static void counting_gemm(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                          float beta, float *C, int64_t ldc) {
    (void)be;
    counted += 2.0 * (double)M * (double)N * (double)K;
    real->gemm(real, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* FLOPs of one micro-batch of b sequences through the backend's gemm */
static double run(const ptdp_gpt_config *cfg, ptdp_backend *ops, int64_t b, int recompute) {
    ptdp_group one = {.name = "tensor", .size = 1, .rank = 0};
    ptdp_job job = ptdp_job_default_params();
    job.model = *cfg;
    job.micro_batch = b;
    job.recompute = recompute;
    job.recompute_num_layers = 1;
    ptdp_chunk_params cp = ptdp_chunk_default_params();
    cp.job = &job;
    cp.layer_end = cfg->num_layers;
    cp.pre = cp.post = 1;
    cp.slots = 1;
    cp.be = ops;
    cp.tp = &one;
    ptdp_gpt_chunk *c = NULL;
    CHECK_OK(ptdp_gpt_chunk_init(&c, &cp));
    if (!c) return -1;
    ptdp_gpt_chunk_init_params(c);
    const int64_t s = cfg->seq_length;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(b * (s + 1)));
    for (int64_t i = 0; i < b * (s + 1); i++) tok[i] = (int32_t)((i * 37 + 11) % cfg->vocab);
    double loss = 0.0;
    counted = 0.0;
    ptdp_gpt_chunk_zero_grads(c);
    ptdp_gpt_chunk_fwd(c, 0, tok, NULL, NULL, 1.0f / (float)(b * s), &loss, 1, 0);
    ptdp_gpt_chunk_bwd(c, 0, NULL, NULL);
    CHECK(isfinite(loss) && loss > 0.0);
    free(tok);
    ptdp_gpt_chunk_free(c);
    return counted;
}

int main(void) {
    ptdp_gpt_config cfg = {.num_layers = 3,
                           .hidden = 64,
                           .heads = 4,
                           .seq_length = 32,
                           .vocab = 300,
                           .init_std = 0.02f,
                           .seed = 5};
    CHECK_OK(ptdp_gpt_config_finish(&cfg, 128, 1));
    real = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
    ptdp_backend ops = *real;
    ops.gemm = counting_gemm;
    const int64_t b = 2;
    const double B = (double)b, s = (double)cfg.seq_length, l = (double)cfg.num_layers,
                 h = (double)cfg.hidden, V = (double)cfg.vocab_padded;
    CHECK(cfg.vocab_padded == 384);
    for (int full = 0; full <= 1; full++) {
        const int rec = full ? PTDP_RECOMPUTE_UNIFORM : PTDP_RECOMPUTE_NONE;
        const double attention = (full ? 96.0 : 72.0) * B * s * l * h * h * s / (6.0 * h);
        const double gemms = run(&cfg, &ops, b, rec);
        /* by hand: 24 B s h^2 per layer and pass (QKV 6, projection 2, MLP
         * 8 + 8), three passes (four with the recomputed forward); the
         * logits 2 B s h V, three times */
        CHECK_CLOSE(gemms, (full ? 4.0 : 3.0) * 24.0 * B * s * h * h * l + 6.0 * B * s * h * V,
                    1e-12, 0);
        CHECK_CLOSE(ptdp_gpt_flops_per_iter(&cfg, b, rec) - attention, gemms, 1e-12, 0);
        ptdp_plan_job j = ptdp_plan_job_default_params();
        j.job.model.num_layers = cfg.num_layers;
        j.job.model.hidden = cfg.hidden;
        j.job.model.seq_length = cfg.seq_length;
        j.job.global_batch = b;
        CHECK_CLOSE(ptdp_plan_model_flops(&j, cfg.vocab_padded, full) - attention, gemms, 1e-12, 0);
    }
    return test_done("test_flops");
}
