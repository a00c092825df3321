/* test_tp_init.c - each tensor-parallel shard initialises itself to exactly
 * the slice of the t = 1 tensor it owns (no MPI needed: initialisation uses
 * no communication, so a group object that only states size and rank will
 * do). Checked bitwise for t = 2, 3, 4 on every parameter. */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "backend_util.h"
#include "test.h"

static ptdp_gpt_chunk *make(const ptdp_job *job, ptdp_group *g) {
    ptdp_chunk_params cp = {.job = job,
                            .layer_end = job->model.num_layers,
                            .pre = 1,
                            .post = 1,
                            .slots = 1,
                            .be = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32),
                            .tp = g};
    ptdp_gpt_chunk *c = NULL;
    CHECK_OK(ptdp_gpt_chunk_init(&c, &cp));
    ptdp_gpt_chunk_init_params(c);
    return c;
}

int main(void) {
    for (int t = 2; t <= 4; t++) {
        ptdp_job job = ptdp_job_default_params();
        ptdp_gpt_config cfg = {.num_layers = 2,
                               .hidden = 48,
                               .heads = 12,
                               .seq_length = 8,
                               .vocab = 300,
                               .init_std = 0.02f,
                               .seed = 77};
        CHECK_OK(ptdp_gpt_config_finish(&cfg, 128,
                                        t)); /* same padded V for the full model and its shards */
        job.model = cfg;
        ptdp_group one = {.name = "tensor", .size = 1, .rank = 0};
        ptdp_gpt_chunk *full = make(&job, &one);
        int n, nf;
        const ptdp_param_spec *fs = ptdp_gpt_chunk_specs(full, &nf);
        float *fp = ptdp_gpt_chunk_params(full);
        for (int r = 0; r < t; r++) {
            ptdp_group g = {.name = "tensor", .size = t, .rank = r};
            ptdp_gpt_chunk *shard = make(&job, &g);
            const ptdp_param_spec *ss = ptdp_gpt_chunk_specs(shard, &n);
            CHECK(n == nf);
            float *sp = ptdp_gpt_chunk_params(shard);
            for (int i = 0; i < n && i < nf; i++) {
                CHECK(!strcmp(ss[i].name, fs[i].name));
                float *want = malloc(sizeof(float) * (size_t)ss[i].numel);
                ptdp_spec_scatter(&ss[i], r, fp + fs[i].offset, want);
                CHECK(memcmp(want, sp + ss[i].offset, sizeof(float) * (size_t)ss[i].numel) == 0);
                free(want);
            }
            ptdp_gpt_chunk_free(shard);
        }
        ptdp_gpt_chunk_free(full);
    }
    return test_done("test_tp_init");
}
