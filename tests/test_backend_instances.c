/* test_backend_instances.c - two compute backends in one process share
 * nothing (kernels.h: a backend is an instance whose state lives in it).
 * A small GPT trains 4 steps through the trainer (its memory planned, the
 * backend's workspace included) on its own instance, alone; then two such
 * runs, each on its own instance with other weights (another seed), go
 * (1) interleaved step by step on one thread and (2) at once on two
 * threads, and each must give bitwise the losses, gradient norms and final
 * weights it gives alone. Pairs: fp32 and bf16 (the native bf16 backend
 * where the CPU has it: weight copies, GEMM plans, attention packs of its
 * own), and two bf16 instances. Then closing one instance leaves the other
 * running as before. A backend whose state were shared (one weight-copy
 * cache, one scratch, one plan) would mix the runs' weights or, on two
 * threads, their scratch. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "train/train.h"
#include "test.h"

#define STEPS 4

typedef struct {
    ptdp_dtype dtype;
    uint64_t seed;
    double loss[STEPS], norm[STEPS];
    uint64_t weights; /* FNV-1a of the final parameters */
} result;

/* one run: its backend, communicator, trainer and data */
typedef struct {
    ptdp_backend *be;
    ptdp_comm comm;
    ptdp_trainer *tr;
    ptdp_batches data;
    int32_t *batch;
    int64_t B, s;
    result *out;
} run;

static int run_open(run *r, result *out) {
    memset(r, 0, sizeof *r);
    r->out = out;
    ptdp_backend_params bp = ptdp_backend_default_params();
    bp.dtype = out->dtype;
    if (ptdp_backend_open(&r->be, &bp) != PTDP_OK) return 0;
    ptdp_comm_init_single(&r->comm);
    ptdp_trainer_params tp = ptdp_trainer_default_params();
    ptdp_job *job = &tp.job;
    job->model.num_layers = 2;
    job->model.hidden = 64;
    job->model.heads = 4;
    job->model.vocab = 300;
    job->model.seq_length = 32;
    job->model.seed = out->seed;
    job->model.hidden_dropout = 0.1f;
    job->model.attention_dropout = 0.0f;
    job->micro_batch = 2;
    job->global_batch = 4;
    job->train_iters = 10;
    job->lr = job->min_lr = 1e-3;
    job->lr_decay_style = PTDP_LR_CONSTANT;
    job->dtype = out->dtype;
    tp.be = r->be;
    tp.comm = &r->comm;
    if (ptdp_trainer_init(&r->tr, &tp) != PTDP_OK) return 0;
    const ptdp_gpt_config *cfg = &ptdp_trainer_job(r->tr)->model;
    ptdp_batches_mock(&r->data, cfg->seq_length, cfg->vocab, out->seed);
    r->B = job->global_batch, r->s = cfg->seq_length;
    r->batch = malloc(sizeof(int32_t) * (size_t)(r->B * (r->s + 1)));
    return r->batch != NULL;
}

static void run_step(run *r, int it) {
    ptdp_batches_get(&r->data, it * r->B, r->B, r->batch);
    ptdp_step_stats st;
    CHECK_OK(ptdp_trainer_step(r->tr, r->batch, &st));
    r->out->loss[it] = st.loss;
    r->out->norm[it] = st.grad_norm;
}

static void run_close(run *r) {
    if (r->tr) {
        ptdp_gpt_chunk *c = ptdp_trainer_chunk(r->tr);
        const int64_t n = ptdp_gpt_chunk_numel(c);
        float *w = malloc(sizeof(float) * (size_t)n);
        ptdp_gpt_chunk_download_params(c, w);
        r->out->weights = ptdp_fnv1a(w, sizeof(float) * (size_t)n, PTDP_FNV1A_INIT);
        free(w);
    }
    free(r->batch);
    ptdp_batches_close(&r->data);
    ptdp_trainer_free(r->tr);
    ptdp_backend_close(r->be);
}

static void alone(result *out) {
    run r;
    CHECK(run_open(&r, out));
    for (int it = 0; r.tr && it < STEPS; it++) run_step(&r, it);
    run_close(&r);
}

static void *thread_main(void *arg) {
    alone(arg);
    return NULL;
}

static int same(const result *a, const result *b, const char *how) {
    const int ok = !memcmp(a->loss, b->loss, sizeof a->loss) &&
                   !memcmp(a->norm, b->norm, sizeof a->norm) && a->weights == b->weights;
    if (!ok)
        printf("  %s %s (seed %llu): differs from its run alone (loss %.9g vs %.9g)\n", how,
               ptdp_dtype_name(a->dtype), (unsigned long long)a->seed, a->loss[STEPS - 1],
               b->loss[STEPS - 1]);
    return ok;
}

static void pair(ptdp_dtype d0, ptdp_dtype d1) {
    result ref[2] = {{.dtype = d0, .seed = 11}, {.dtype = d1, .seed = 12}};
    for (int k = 0; k < 2; k++) alone(&ref[k]);
    CHECK(ref[0].weights != ref[1].weights); /* two different models */
    printf("pair %s + %s: alone %.7f and %.7f after %d steps\n", ptdp_dtype_name(d0),
           ptdp_dtype_name(d1), ref[0].loss[STEPS - 1], ref[1].loss[STEPS - 1], STEPS);

    /* interleaved on one thread: step of one, step of the other */
    result got[2] = {ref[0], ref[1]};
    run r[2];
    int opened = 1;
    for (int k = 0; k < 2; k++) opened &= run_open(&r[k], &got[k]);
    CHECK(opened);
    for (int it = 0; opened && it < STEPS; it++)
        for (int k = 0; k < 2; k++) run_step(&r[k], it);
    for (int k = 0; k < 2; k++) run_close(&r[k]);
    for (int k = 0; k < 2; k++) CHECK(same(&got[k], &ref[k], "interleaved"));

    /* the first closed after two steps, the second goes on */
    result late[2] = {ref[0], ref[1]};
    opened = 1;
    for (int k = 0; k < 2; k++) opened &= run_open(&r[k], &late[k]);
    CHECK(opened);
    for (int it = 0; opened && it < 2; it++)
        for (int k = 0; k < 2; k++) run_step(&r[k], it);
    run_close(&r[0]);
    for (int it = 2; opened && it < STEPS; it++) run_step(&r[1], it);
    run_close(&r[1]);
    CHECK(same(&late[1], &ref[1], "after the other's close"));

    /* at once, one thread each */
    result thr[2] = {ref[0], ref[1]};
    pthread_t t[2];
    for (int k = 0; k < 2; k++) CHECK(pthread_create(&t[k], NULL, thread_main, &thr[k]) == 0);
    for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
    for (int k = 0; k < 2; k++) CHECK(same(&thr[k], &ref[k], "on two threads"));
}

int main(void) {
    pair(PTDP_DTYPE_FP32, PTDP_DTYPE_BF16);
    pair(PTDP_DTYPE_BF16, PTDP_DTYPE_BF16);
    return test_done("test_backend_instances");
}
