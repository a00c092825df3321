/* test_api_checks.c - the library checks what `ptdp train` checks (issue
 * 44, item 2): a program that fills a job through the public headers gets
 * PTDP_EINVAL / PTDP_ECONFIG with a message naming the flag of the field
 * to change, from ptdp_job_check and from ptdp_trainer_init, instead of a
 * wrong loss, an assertion or a crash; a step already left to the library
 * (ptdp_gpt_config_finish) is done by it; tokens outside the vocabulary
 * are an error of the step. One case per finding of the issue. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "train/train.h"
#include "backend_util.h"
#include "test.h"

/* CHECK with the message printed when it fails */
#define CHECK_MSG(cond, ...)                   \
    do {                                       \
        CHECK(cond);                           \
        if (!(cond)) {                         \
            fprintf(stderr, "  " __VA_ARGS__); \
            fprintf(stderr, "\n");             \
        }                                      \
    } while (0)

enum { L = 2, H = 32, A = 4, S = 8, V = 100 };

/* A small job as a program would fill it: shape, length, --lr. The model
 * is left unfinished (no ptdp_gpt_config_finish). */
static ptdp_trainer_params params(ptdp_comm *comm) {
    ptdp_trainer_params p = ptdp_trainer_default_params();
    p.job.model.num_layers = L;
    p.job.model.hidden = H;
    p.job.model.heads = A;
    p.job.model.seq_length = S;
    p.job.model.vocab = V;
    p.job.model.hidden_dropout = p.job.model.attention_dropout = 0.0f;
    p.job.train_iters = 2;
    p.job.lr = 1e-3;
    p.be = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
    p.comm = comm;
    return p;
}

/* ptdp_trainer_init refuses p with a message containing `want` (and no
 * trainer); ptdp_job_check refuses the job alike when `job_too`. */
static void refused(const ptdp_trainer_params *p, const char *want, int job_too) {
    ptdp_trainer *tr = (ptdp_trainer *)1;
    const int rc = ptdp_trainer_init(&tr, p);
    CHECK(rc == PTDP_EINVAL || rc == PTDP_ECONFIG);
    CHECK(tr == NULL);
    CHECK_MSG(strstr(ptdp_last_error(), want) != NULL, "%s: got \"%s\"", want, ptdp_last_error());
    if (!job_too) return;
    const int jrc = ptdp_job_check(&p->job);
    CHECK(jrc == PTDP_EINVAL || jrc == PTDP_ECONFIG);
    CHECK_MSG(strstr(ptdp_last_error(), want) != NULL, "%s: got \"%s\"", want, ptdp_last_error());
}

static int32_t *tokens(int64_t B, int32_t bad) {
    int32_t *t = malloc(sizeof(int32_t) * (size_t)(B * (S + 1)));
    for (int64_t i = 0; i < B * (S + 1); i++) t[i] = (int32_t)((i * 7 + 3) % V);
    if (bad) t[B * (S + 1) - 2] = bad;
    return t;
}

int main(void) {
    ptdp_comm comm;
    ptdp_comm_init_single(&comm);

    /* a global batch of 3 with micro-batch 2: was status 0 and two thirds
     * of the loss */
    ptdp_trainer_params p = params(&comm);
    p.job.micro_batch = 2;
    p.job.global_batch = 3;
    refused(&p, "--global-batch-size 3 is not a multiple of --micro-batch-size 2", 1);

    /* micro-batch 0: was SIGFPE */
    p = params(&comm);
    p.job.micro_batch = 0;
    refused(&p, "--micro-batch-size", 1);

    /* no compute backend: was SIGSEGV */
    p = params(&comm);
    p.be = NULL;
    refused(&p, "compute backend", 0);

    /* no learning rate: the schedule was 0 and training did nothing; now
     * --lr is required, as on the command line */
    p = params(&comm);
    p.job.lr = -1;
    refused(&p, "--lr", 1);
    /* ... and the defaults are the CLI's */
    CHECK(ptdp_job_default_params().adam.clip_grad == 1.0 &&
          ptdp_job_default_params().micro_batch == 1 &&
          ptdp_job_default_params().lr_decay_style == PTDP_LR_LINEAR);

    /* ptdp_gpt_config_finish forgotten (the shape as given, vocab_padded 0):
     * the library finishes the model itself; was an assertion in the GEMM.
     * With --lr given the step moves the weights and the loss is ~ln V. */
    p = params(&comm);
    p.job.global_batch = 2;
    ptdp_trainer *tr = NULL;
    CHECK_OK(ptdp_trainer_init(&tr, &p));
    if (tr) {
        CHECK(ptdp_trainer_job(tr)->model.vocab_padded == 128);
        ptdp_gpt_chunk *c = ptdp_trainer_chunk(tr);
        const float w0 = ptdp_gpt_chunk_params(c)[5];
        int32_t *tok = tokens(2, 0);
        ptdp_step_stats st;
        CHECK_OK(ptdp_trainer_step(tr, tok, &st));
        CHECK_MSG(fabs(st.loss - log((double)V)) < 0.5, "loss %g, ln V %g", st.loss,
                  log((double)V));
        CHECK(ptdp_gpt_chunk_params(c)[5] != w0);

        /* a token at or above V: was accepted and gave a wrong loss */
        const int64_t it = ptdp_trainer_iteration(tr);
        int32_t *bad = tokens(2, V);
        CHECK(ptdp_trainer_step(tr, bad, &st) == PTDP_EINVAL);
        CHECK_MSG(strstr(ptdp_last_error(), "token id 100") != NULL &&
                      strstr(ptdp_last_error(), "--vocab-size 100") != NULL,
                  "got \"%s\"", ptdp_last_error());
        CHECK(ptdp_trainer_iteration(tr) == it); /* nothing trained */
        bad[3] = -1;
        CHECK(ptdp_trainer_step(tr, bad, &st) == PTDP_EINVAL);
        free(bad);
        free(tok);
        ptdp_trainer_free(tr);
    }
    return test_done("test_api_checks");
}
