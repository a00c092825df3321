/* trainer.c - the iteration: zero gradients, forward and backward each
 * micro-batch (loss gradients scaled by 1/(B*s) so the result is the mean over
 * the global batch whatever b is), global norm, clip, AdamW. */
#include "cli/trainer.h"

#include <math.h>
#include <stdlib.h>

#include "ckpt/ckpt.h"

struct ptdp_trainer {
    ptdp_trainer_params p;
    ptdp_gpt_chunk *chunk;
    ptdp_optimizer opt;
    int64_t iteration;
};

int ptdp_trainer_init(ptdp_trainer **out, const ptdp_trainer_params *p) {
    *out = NULL;
    ptdp_trainer *tr = calloc(1, sizeof *tr);
    if (!tr) return ptdp_errorf(PTDP_ENOMEM, "out of memory");
    tr->p = *p;
    ptdp_chunk_params cp = {
        .cfg = &tr->p.cfg,
        .layer_begin = 0,
        .layer_end = p->cfg.num_layers,
        .pre = 1,
        .post = 1,
        .micro_batch = p->micro_batch,
        .slots = 1,
        .ops = p->ops,
        .tp = &p->comm->tensor,
    };
    int rc = ptdp_gpt_chunk_init(&tr->chunk, &cp);
    if (rc == PTDP_OK) {
        if (p->init_from)
            rc = ptdp_hf_load_chunk(tr->chunk, &tr->p.cfg, p->comm->tensor.rank, p->init_from);
        else
            ptdp_gpt_chunk_init_params(tr->chunk);
    }
    if (rc == PTDP_OK) {
        int n;
        const ptdp_param_spec *specs = ptdp_gpt_chunk_specs(tr->chunk, &n);
        rc = ptdp_optim_init(&tr->opt, p->ops, &p->adam, specs, n, ptdp_gpt_chunk_params(tr->chunk),
                             ptdp_gpt_chunk_grads(tr->chunk), ptdp_gpt_chunk_numel(tr->chunk),
                             p->comm->tensor.rank, 1);
    }
    if (rc != PTDP_OK) {
        ptdp_trainer_free(tr);
        return rc;
    }
    *out = tr;
    return PTDP_OK;
}

void ptdp_trainer_free(ptdp_trainer *tr) {
    if (!tr) return;
    ptdp_optim_free(&tr->opt);
    ptdp_gpt_chunk_free(tr->chunk);
    free(tr);
}

ptdp_gpt_chunk *ptdp_trainer_chunk(ptdp_trainer *tr) { return tr->chunk; }

void ptdp_trainer_step(ptdp_trainer *tr, const int32_t *batch, ptdp_step_stats *st) {
    const ptdp_trainer_params *p = &tr->p;
    ptdp_comm *comm = p->comm;
    const int64_t s = p->cfg.seq_length, b = p->micro_batch, d = comm->d;
    const int64_t m = p->global_batch / (b * d);
    const float loss_scale = (float)(1.0 / ((double)p->global_batch * (double)s));
    ptdp_gpt_chunk_zero_grads(tr->chunk);
    double loss_sum = 0.0;
    for (int64_t k = 0; k < m; k++) {
        double ls = 0.0;
        ptdp_gpt_chunk_fwd(tr->chunk, 0, batch + k * b * (s + 1), NULL, NULL, loss_scale, &ls, tr->iteration,
                           comm->dp * m + k);
        ptdp_gpt_chunk_bwd(tr->chunk, 0, NULL, NULL);
        loss_sum += ls;
    }
    /* data parallelism: gradients were scaled by 1/(B*s), so the sum over the
     * replicas is the gradient of the global mean */
    ptdp_allreduce_sum_f32(&comm->data, ptdp_gpt_chunk_grads(tr->chunk), ptdp_gpt_chunk_numel(tr->chunk));
    ptdp_allreduce_sum_f64(&comm->data, &loss_sum, 1);
    double sumsq = ptdp_optim_grad_sumsq(&tr->opt);
    ptdp_allreduce_sum_f64(&comm->model, &sumsq, 1);
    double norm = sqrt(sumsq);
    double lr = ptdp_lr_at(&p->lr, tr->opt.step);
    st->skipped = !isfinite(norm);
    if (!st->skipped) ptdp_optim_step(&tr->opt, norm, lr);
    tr->iteration++;
    st->iteration = tr->iteration;
    st->loss = loss_sum / ((double)p->global_batch * (double)s);
    st->grad_norm = norm;
    st->lr = lr;
}

double ptdp_trainer_eval(ptdp_trainer *tr, const int32_t *batch) {
    const ptdp_trainer_params *p = &tr->p;
    ptdp_comm *comm = p->comm;
    const int64_t s = p->cfg.seq_length, b = p->micro_batch, m = p->global_batch / (b * comm->d);
    double loss_sum = 0.0;
    ptdp_gpt_chunk_set_training(tr->chunk, 0);
    for (int64_t k = 0; k < m; k++) {
        double ls = 0.0;
        ptdp_gpt_chunk_fwd(tr->chunk, 0, batch + k * b * (s + 1), NULL, NULL, 0.0f, &ls, tr->iteration, k);
        loss_sum += ls;
    }
    ptdp_gpt_chunk_set_training(tr->chunk, 1);
    ptdp_allreduce_sum_f64(&comm->data, &loss_sum, 1);
    return loss_sum / ((double)p->global_batch * (double)s);
}

void ptdp_trainer_log_memory(const ptdp_trainer *tr) {
    size_t pb, ab;
    ptdp_gpt_chunk_bytes(tr->chunk, &pb, &ab);
    int64_t n = ptdp_gpt_chunk_numel(tr->chunk);
    char b1[32], b2[32], b3[32], b4[32];
    ptdp_log0("memory (rank 0): parameters %s (%lld), gradients %s, optimizer state %s (AdamW m and v, fp32), "
              "activations+workspace %s",
              ptdp_fmt_bytes((double)n * 4, b1), (long long)n, ptdp_fmt_bytes((double)n * 4, b2),
              ptdp_fmt_bytes((double)n * 8, b3), ptdp_fmt_bytes((double)ab, b4));
    (void)pb;
}
