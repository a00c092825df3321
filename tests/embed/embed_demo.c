/* embed_demo.c - a program that embeds ptdp's installed library (built by
 * tests/test_install.sh with `pkg-config --cflags --libs ptdp`): one
 * single-process GPT chunk, its logits for a few tokens, and the 1F1B
 * schedule of rank 0 for p = 4, m = 8. Prints what it computed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <ptdp/model/model.h>
#include <ptdp/pipeline/schedule.h>

int main(void) {
    ptdp_gpt_config cfg = {.num_layers = 2,
                           .hidden = 32,
                           .heads = 4,
                           .seq_length = 8,
                           .max_positions = 8,
                           .vocab = 100,
                           .init_std = 0.02f,
                           .ln_eps = 1e-5f,
                           .seed = 1};
    if (ptdp_gpt_config_finish(&cfg, 128, 1) != PTDP_OK) return 1;
    ptdp_job job = ptdp_job_default_params(); /* forward only: its model, one sequence */
    job.model = cfg;
    ptdp_chunk_params p = ptdp_chunk_default_params();
    p.job = &job;
    p.layer_end = cfg.num_layers;
    p.pre = p.post = 1;
    p.inference = 1;
    ptdp_gpt_chunk *c;
    if (ptdp_gpt_chunk_init(&c, &p) != PTDP_OK) return 1;
    ptdp_gpt_chunk_init_params(c);
    ptdp_gpt_chunk_set_training(c, 0);
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float *logits = malloc(sizeof(float) * (size_t)(8 * cfg.vocab_padded));
    ptdp_gpt_chunk_logits(c, tok, 8, logits);
    double sum = 0;
    for (int64_t i = 0; i < 8 * cfg.vocab_padded; i++) sum += fabs(logits[i]);
    printf("logits: %lld values, mean |x| %.6f\n", (long long)(8 * cfg.vocab_padded),
           sum / (double)(8 * cfg.vocab_padded));
    ptdp_schedule_params sp = ptdp_schedule_default_params();
    sp.p = 4;
    sp.m = 8;
    printf("1f1b p=4 m=8: rank 0 runs %d actions, %d warm-up forwards\n", ptdp_schedule_len(&sp),
           ptdp_schedule_warmup(&sp, 0));
    free(logits);
    ptdp_gpt_chunk_free(c);
    return sum > 0 && isfinite(sum) ? 0 : 1;
}
