/* test_ckpt_guard.c - the library's rule that no save destroys or rewinds a
 * checkpoint (ckpt.h, docs/checkpoint-format.md), for programs that call
 * ptdp_ckpt_save themselves: one process saves a small model into a
 * directory and
 * - saving the same iteration again, or an earlier one, fails with
 *   PTDP_ECONFIG naming --overwrite-checkpoints and leaves every file as it
 *   was;
 * - with meta.overwrite the earlier iteration is written, and the latest
 *   file stays at the newer one; a later iteration moves it on;
 * - ptdp_ckpt_newest and ptdp_ckpt_check_save_dir (train's start-up check)
 *   answer from the files: refused from scratch, from an earlier iteration of
 *   the same directory and with --finetune; allowed (and "resumes") for the
 *   directory's own newest checkpoint, and with overwrite. */
#define _DEFAULT_SOURCE /* mkdtemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "test.h"

static char dir[64];

static ptdp_gpt_chunk *tiny_model(ptdp_job *job, ptdp_group *one) {
    *job = ptdp_job_default_params();
    ptdp_gpt_config *cfg = &job->model;
    *cfg = (ptdp_gpt_config){.num_layers = 1,
                             .hidden = 8,
                             .heads = 2,
                             .seq_length = 4,
                             .max_positions = 4,
                             .vocab = 16,
                             .init_std = 0.02f,
                             .seed = 1};
    CHECK_OK(ptdp_gpt_config_finish(cfg, 8, 1));
    *one = (ptdp_group){.name = "tensor", .size = 1, .rank = 0};
    ptdp_chunk_params cp = ptdp_chunk_default_params();
    cp.job = job, cp.layer_end = cfg->num_layers, cp.pre = cp.post = 1, cp.tp = one;
    cp.inference = 1;
    ptdp_gpt_chunk *c = NULL;
    CHECK_OK(ptdp_gpt_chunk_init(&c, &cp));
    if (c) ptdp_gpt_chunk_init_params(c);
    return c;
}

static int save(ptdp_gpt_chunk *c, const ptdp_gpt_config *cfg, int64_t it, int overwrite) {
    ptdp_comm comm;
    ptdp_comm_init_single(&comm);
    ptdp_optimizer none = {0};
    ptdp_lr_schedule lr = {.max_lr = 1e-3, .samples_per_step = 1, .decay_samples = 10};
    ptdp_adamw_params adam = ptdp_adamw_default_params();
    ptdp_ckpt_meta meta = {.iteration = it,
                           .consumed_samples = it,
                           .optimizer_step = it,
                           .cfg = cfg,
                           .micro_batch = 1,
                           .global_batch = 1,
                           .lr = &lr,
                           .adam = &adam,
                           .v = 1,
                           .no_optimizer = 1,
                           .overwrite = overwrite};
    int rc = ptdp_ckpt_save(dir, &meta, &c, &none, 1, &comm);
    ptdp_comm_finalize(&comm);
    return rc;
}

/* The whole text of a small file ("" when missing), for comparisons. */
static void slurp(const char *name, char *out, size_t cap) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    out[0] = 0;
    FILE *f = fopen(p, "rb");
    if (!f) return;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    fclose(f);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/ptdp_guard_XXXXXX");
    PTDP_ASSERT(mkdtemp(dir));
    ptdp_job job;
    ptdp_group one;
    ptdp_gpt_chunk *c = tiny_model(&job, &one);
    const ptdp_gpt_config cfg = job.model;
    if (!c) return test_done("test_ckpt_guard");
    static char before[1 << 16], after[1 << 16], latest[32];

    CHECK_OK(save(c, &cfg, 5, 0));
    slurp("latest_checkpointed_iteration.txt", latest, sizeof latest);
    CHECK(!strcmp(latest, "5\n"));
    slurp("iter_0000005/manifest.json", before, sizeof before);
    /* the same iteration again, and an earlier one: refused, nothing touched */
    for (int64_t it = 5; it >= 3; it -= 2) {
        CHECK(save(c, &cfg, it, 0) == PTDP_ECONFIG);
        CHECK(strstr(ptdp_last_error(), "already holds a checkpoint of iteration 5") != NULL);
        CHECK(strstr(ptdp_last_error(), "--overwrite-checkpoints") != NULL);
    }
    slurp("iter_0000005/manifest.json", after, sizeof after);
    CHECK(before[0] && !strcmp(before, after));
    slurp("iter_0000003/manifest.json", after, sizeof after);
    CHECK(!after[0]);
    slurp("latest_checkpointed_iteration.txt", latest, sizeof latest);
    CHECK(!strcmp(latest, "5\n"));

    /* overwrite: written beside, the latest file does not move back */
    CHECK_OK(save(c, &cfg, 3, 1));
    slurp("iter_0000003/manifest.json", after, sizeof after);
    CHECK(after[0] != 0);
    slurp("latest_checkpointed_iteration.txt", latest, sizeof latest);
    CHECK(!strcmp(latest, "5\n"));
    CHECK_OK(save(c, &cfg, 7, 0));
    slurp("latest_checkpointed_iteration.txt", latest, sizeof latest);
    CHECK(!strcmp(latest, "7\n"));
    int64_t newest = -1;
    CHECK(ptdp_ckpt_newest(dir, &newest) == 1 && newest == 7);

    /* train's start-up check */
    char it3[128];
    snprintf(it3, sizeof it3, "%s/iter_0000003", dir);
    int resumes = -1;
    CHECK(ptdp_ckpt_check_save_dir(dir, NULL, 0, 0, &resumes) == PTDP_ECONFIG);
    CHECK(strstr(ptdp_last_error(), "iteration 7, later than iteration 0") != NULL);
    CHECK(ptdp_ckpt_check_save_dir(dir, it3, 0, 0, &resumes) == PTDP_ECONFIG);
    CHECK(strstr(ptdp_last_error(), "later than iteration 3") != NULL);
    CHECK(ptdp_ckpt_check_save_dir(dir, dir, 1, 0, &resumes) == PTDP_ECONFIG); /* --finetune */
    CHECK(ptdp_ckpt_check_save_dir(dir, dir, 0, 0, &resumes) == PTDP_OK && resumes == 1);
    CHECK(ptdp_ckpt_check_save_dir(dir, NULL, 0, 1, &resumes) == PTDP_OK && resumes == 0);
    char empty[96];
    snprintf(empty, sizeof empty, "%s/none", dir);
    CHECK(ptdp_ckpt_newest(empty, &newest) == 0);
    CHECK(ptdp_ckpt_check_save_dir(empty, NULL, 0, 0, &resumes) == PTDP_OK && resumes == 0);

    ptdp_gpt_chunk_free(c);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_done("test_ckpt_guard");
}
