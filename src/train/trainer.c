/* trainer.c - one rank's training state and iteration. Set-up: the job's
 * checks, this rank's v model chunks with their data-parallel reducers and
 * optimizers, the executor, one memory plan for all of them (carved twice:
 * sizes, then blocks). The step: zero gradients, run the pipeline schedule
 * over the chunks (forward/backward per micro-batch; loss gradients scaled
 * by 1/(B*s) so the result is the mean over the global batch whatever b, m
 * or d are), sum the tied embedding's gradient over the first and last stage
 * (an all-reduce, or a local sum when one rank holds both, as under zb-v),
 * all-reduce gradients over the data-parallel group, global norm, clip,
 * AdamW. With p = v = 1 the schedule is the plain micro-batch loop (1F1B
 * with no warm-up). Evaluation: the forward passes of a batch, stage after
 * stage.
 *
 * Not here: checkpoints (checkpoint.c), the reports of the memory plan
 * (log.c), the replicas' check (optim/ddp.c), the loop around the step
 * (run.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "ckpt/hf.h"
#include "pipeline/pipeline.h"
#include "plan/plan.h"
#include "train/train_internal.h"

/* The tied word embedding's spec in a chunk (by role), or NULL. */
static const ptdp_param_spec *find_wte(ptdp_gpt_chunk *c) {
    int n;
    const ptdp_param_spec *sp = ptdp_gpt_chunk_specs(c, &n);
    for (int i = 0; i < n; i++)
        if (sp[i].role == PTDP_ROLE_EMBEDDING) return &sp[i];
    return NULL;
}

ptdp_trainer_params ptdp_trainer_default_params(void) {
    return (ptdp_trainer_params){
        .job = ptdp_job_default_params(),
        .be = NULL,
        .comm = NULL,
        .init_from = NULL,
        .lr = NULL,
        .trace_events = 0,
        .check_nonfinite = 0,
    };
}

/* Floats of one stage-to-stage message: [s, b, h], or this rank's [s/t, b,
 * h] with sequence parallelism. */
static int64_t msg_floats(const ptdp_job *j) {
    const int64_t n = j->micro_batch * j->model.seq_length * j->model.hidden;
    return ptdp_job_sequence_parallel(j) ? n / j->t : n;
}

/* The shapes the compute backend plans its own memory for: a layer's and
 * the loss head's ops, the layers and heads of this rank's chunks. */
static ptdp_backend_job backend_job(const ptdp_trainer *tr) {
    const ptdp_job *jb = tr->job;
    const ptdp_gpt_config *m = &jb->model;
    const int64_t t = jb->t;
    ptdp_backend_job j = {.s = m->seq_length,
                          .b = jb->micro_batch,
                          .h = m->hidden,
                          .hl = m->hidden / t,
                          .fl = m->ffn_hidden / t,
                          .al = m->heads / t,
                          .hd = m->hidden / m->heads,
                          .gl = ptdp_gpt_groups(m) / t,
                          .swiglu = m->swiglu,
                          .Vl = 0,
                          .layers = 0,
                          .heads = 0,
                          .threads = omp_get_max_threads()};
    const int64_t stages = jb->p * jb->v;
    for (int c = 0; c < tr->v; c++) {
        int64_t begin, end, stage = ptdp_schedule_stage(&tr->sched, tr->p.comm->pp, c);
        ptdp_job_stage_layers(jb, stage, &begin, &end);
        j.layers += end - begin;
        j.heads += stage == stages - 1;
    }
    if (j.heads) j.Vl = m->vocab_padded / t;
    return j;
}

/* The backend's workspace, one piece of its category (twice, like every
 * subsystem: over the plan arena, then over the block). */
static void carve_backend(ptdp_trainer *tr) {
    tr->bws_block =
        ptdp_arena_carve(&tr->mem.cat[PTDP_MEM_BACKEND],
                         ptdp_backend_workspace_bytes(&tr->bws, tr->bjob.layers, tr->bjob.heads));
}

/* What the planner's memory model needs from the compute backend. */
static ptdp_plan_backend plan_backend(const ptdp_trainer *tr) {
    ptdp_backend *be = tr->p.be;
    const ptdp_job *j = tr->job;
    return (ptdp_plan_backend){
        .attn_saved_floats = be->attention_saved_floats(be, j->model.seq_length, j->micro_batch,
                                                        j->model.heads / j->t),
        .attn_scratch_floats = be->attention_scratch_floats(be, j->model.seq_length),
        .mlp16 = be->mlp_store != PTDP_DTYPE_FP32,
        .ws_fixed = tr->bws.fixed,
        .ws_per_layer = tr->bws.per_layer,
        .ws_per_head = tr->bws.per_head};
}

/* What ptdp_trainer_init needs before it builds anything: a job that passes
 * its rules (finished into tr->p.job), a backend that has what the job uses,
 * a communicator laid out as the job says. */
static int check_params(ptdp_trainer *tr) {
    const ptdp_trainer_params *p = &tr->p;
    if (!p->be)
        return ptdp_errorf(PTDP_EINVAL, "the trainer needs a compute backend "
                                        "(ptdp_trainer_params.be: open one with "
                                        "ptdp_backend_open)");
    if (!p->comm)
        return ptdp_errorf(PTDP_EINVAL, "the trainer needs a communicator "
                                        "(ptdp_trainer_params.comm: ptdp_comm_init and "
                                        "ptdp_comm_setup, or ptdp_comm_init_single)");
    int rc = ptdp_job_finish(&tr->p.job);
    if (rc) return rc;
    const ptdp_job *j = &tr->p.job;
    const ptdp_comm *c = p->comm;
    if (c->t != j->t || c->p != j->p || c->d != j->d)
        return ptdp_errorf(PTDP_ECONFIG,
                           "the communicator is laid out t=%d p=%d d=%d and the job t=%lld p=%lld "
                           "d=%lld (--tensor-model-parallel-size, --pipeline-model-parallel-size, "
                           "ranks / (t x p)); set the job's t, p and d to the communicator's",
                           c->t, c->p, c->d, (long long)j->t, (long long)j->p, (long long)j->d);
    if (p->be->dtype != j->dtype)
        return ptdp_errorf(PTDP_ECONFIG,
                           "the compute backend computes in %s and the job asks for %s (--bf16, "
                           "--fp16); open the backend with the job's dtype",
                           ptdp_dtype_name(p->be->dtype), ptdp_dtype_name(j->dtype));
    return ptdp_backend_check(p->be, (j->model.hidden_dropout > 0 ? PTDP_NEED_DROPOUT : 0) |
                                         (j->eod_mask_loss ? PTDP_NEED_ROW_MASK : 0) |
                                         ptdp_gpt_backend_needs(&j->model));
}

/* Chunk c of this rank (virtual stage ptdp_schedule_stage), its
 * data-parallel reducer and its optimizer, carved from the plan arenas. */
static int build_chunk(ptdp_trainer *tr, int c) {
    const ptdp_job *j = tr->job;
    ptdp_comm *comm = tr->p.comm;
    const ptdp_schedule_params *sp = &tr->sched;
    const int64_t stage = ptdp_schedule_stage(sp, comm->pp, c), stages = j->p * j->v;
    int64_t begin, end;
    ptdp_job_stage_layers(j, stage, &begin, &end);
    const ptdp_chunk_params cp = {
        .job = j,
        .layer_begin = begin,
        .layer_end = end,
        .pre = stage == 0,
        .post = stage == stages - 1,
        .slots = ptdp_schedule_chunk_inflight(sp, comm->pp, c),
        .be = tr->p.be,
        .tp = &comm->tensor,
        .numel_multiple = 16 * (int64_t)comm->d,
        .inference = 0,
        .split_backward = ptdp_schedule_splits_backward(sp),
        .mem = &tr->mem,
    };
    int rc = ptdp_gpt_chunk_init(&tr->chunks[c], &cp);
    if (rc) return rc;
    /* with p > 1 the tied embedding's gradient is summed over the first and
     * last stage before its bucket may start */
    const ptdp_param_spec *wte = (cp.pre || cp.post) && comm->p > 1 && !tr->job->model.untie
                                     ? find_wte(tr->chunks[c])
                                     : NULL;
    const ptdp_ddp_params dp = {
        .data = &comm->data,
        .be = tr->p.be,
        .params = ptdp_gpt_chunk_params(tr->chunks[c]),
        .grads = ptdp_gpt_chunk_grads(tr->chunks[c]),
        .numel = ptdp_gpt_chunk_numel(tr->chunks[c]),
        .bucket_floats = j->ddp_bucket_size,
        .zero = j->distributed_optimizer,
        .hold_below = wte ? wte->offset + wte->numel : 0,
        .mem = &tr->mem,
        .check_finite = tr->p.check_nonfinite,
    };
    rc = ptdp_ddp_init(&tr->ddp[c], &dp);
    if (rc) return rc;
    int n;
    const ptdp_param_spec *specs = ptdp_gpt_chunk_specs(tr->chunks[c], &n);
    return ptdp_optim_init(&tr->opts[c], tr->p.be, &j->adam, specs, n,
                           ptdp_gpt_chunk_params(tr->chunks[c]), tr->ddp[c], comm->tensor.rank,
                           cp.pre, &tr->mem);
}

static int build_executor(ptdp_trainer *tr) {
    const ptdp_job *j = tr->job;
    ptdp_comm *comm = tr->p.comm;
    ptdp_executor_params ep = ptdp_executor_default_params();
    ep.sched = tr->sched;
    ep.pp_rank = comm->pp;
    ep.pipeline = &comm->pipeline;
    ep.be = tr->p.be;
    ep.mem = &tr->mem;
    ep.chunks = tr->chunks;
    ep.tokens_per_mb = msg_floats(j) / j->model.hidden;
    ep.hidden = j->model.hidden;
    ep.max_events = tr->p.trace_events;
    ep.tensor = &comm->tensor;
    /* a sequence-parallel message is already this rank's 1/t: nothing left
     * to scatter */
    ep.scatter_gather = j->scatter_gather && !ptdp_job_sequence_parallel(j);
    ep.last_bwd_hook = j->overlap_grad_reduce && comm->d > 1 ? ptdp_ddp_grads_ready : NULL;
    ep.hook_ctx = (void **)tr->ddp;
    return ptdp_executor_init(&tr->ex, &ep);
}

/* Everything was carved from plan arenas (sizes only): one block per
 * category, then every subsystem carves again, in the same order, and the
 * backend gets its workspace. */
static int allocate(ptdp_trainer *tr) {
    ptdp_backend *be = tr->p.be;
    tr->bjob = backend_job(tr);
    int rc = ptdp_backend_workspace_size(be, &tr->bjob, &tr->bws);
    if (rc) return rc;
    carve_backend(tr);
    rc = ptdp_backend_mem_alloc(be, &tr->mem);
    if (rc) return rc;
    for (int c = 0; c < tr->v; c++) {
        ptdp_gpt_chunk_bind(tr->chunks[c], &tr->mem);
        float *w = ptdp_gpt_chunk_params(tr->chunks[c]);
        ptdp_ddp_bind(tr->ddp[c], w, ptdp_gpt_chunk_grads(tr->chunks[c]), &tr->mem);
        ptdp_optim_bind(&tr->opts[c], w, tr->ddp[c], &tr->mem);
    }
    ptdp_executor_bind(tr->ex, &tr->mem);
    carve_backend(tr);
    PTDP_ASSERT_MSG(ptdp_mem_exact(&tr->mem), "a subsystem carved differently from its plan");
    rc = ptdp_backend_workspace_set(
        be, &tr->bjob, tr->bws_block,
        ptdp_backend_workspace_bytes(&tr->bws, tr->bjob.layers, tr->bjob.heads));
    if (rc) return rc;
    /* the planner's prediction, from the job alone */
    const ptdp_plan_backend pb = plan_backend(tr);
    rc = ptdp_plan_rank_memory(tr->job, tr->p.comm->pp, tr->p.comm->dp, &pb, tr->predicted);
    tr->ondemand0 = be->ondemand_bytes;
    return rc;
}

/* Megatron's initialisation (or --init-from); 16-bit runs: the fp32 values
 * become the master weights. */
static int init_weights(ptdp_trainer *tr) {
    for (int c = 0; c < tr->v; c++) {
        if (tr->p.init_from) {
            int rc = ptdp_hf_load_chunk(tr->chunks[c], &tr->job->model, tr->p.comm->tensor.rank,
                                        tr->p.init_from);
            if (rc) return rc;
        } else {
            ptdp_gpt_chunk_init_params(tr->chunks[c]);
        }
        ptdp_optim_take_master(&tr->opts[c], ptdp_gpt_chunk_numel(tr->chunks[c]));
    }
    return PTDP_OK;
}

int ptdp_trainer_init(ptdp_trainer **out, const ptdp_trainer_params *p) {
    *out = NULL;
    ptdp_trainer *tr = calloc(1, sizeof *tr);
    if (!tr) return ptdp_errorf(PTDP_ENOMEM, "out of memory");
    tr->p = *p;
    tr->job = &tr->p.job;
    ptdp_mem_plan(&tr->mem);
    int rc = check_params(tr);
    if (rc == PTDP_OK) {
        tr->sched = ptdp_schedule_of_job(tr->job);
        tr->v = tr->sched.v;
        tr->lr = p->lr ? *p->lr : ptdp_lr_schedule_of_job(tr->job);
        tr->lr.samples_per_step = tr->job->global_batch;
        tr->scaler = ptdp_loss_scaler_of_job(tr->job);
        rc = ptdp_schedule_check(&tr->sched);
    }
    if (rc == PTDP_OK) {
        tr->hash_buf = malloc(sizeof(float) * (size_t)PTDP__HASH_FLOATS);
        tr->loss_scales = malloc(sizeof(float) * (size_t)tr->sched.m);
        if (!tr->hash_buf || !tr->loss_scales) rc = ptdp_errorf(PTDP_ENOMEM, "out of memory");
    }
    for (int c = 0; rc == PTDP_OK && c < tr->v; c++) rc = build_chunk(tr, c);
    if (rc == PTDP_OK) rc = build_executor(tr);
    if (rc == PTDP_OK) rc = allocate(tr);
    if (rc == PTDP_OK) rc = init_weights(tr);
    if (rc != PTDP_OK) {
        ptdp_trainer_free(tr);
        return rc;
    }
    *out = tr;
    return PTDP_OK;
}

void ptdp_trainer_free(ptdp_trainer *tr) {
    if (!tr) return;
    for (int c = 0; c < PTDP_MAX_CHUNKS; c++) {
        if (tr->chunks[c]) ptdp_optim_free(&tr->opts[c]);
        ptdp_ddp_free(tr->ddp[c]);
        ptdp_gpt_chunk_free(tr->chunks[c]);
    }
    ptdp_executor_free(tr->ex);
    /* the backend gives back what it kept in its workspace before the block goes */
    if (tr->bws_block) ptdp_backend_workspace_set(tr->p.be, &tr->bjob, NULL, 0);
    if (tr->p.be) ptdp_backend_mem_free(tr->p.be, &tr->mem);
    free(tr->hash_buf);
    free(tr->loss_scales);
    free(tr);
}

ptdp_gpt_chunk *ptdp_trainer_chunk(ptdp_trainer *tr) { return tr->chunks[0]; }
int ptdp_trainer_num_chunks(const ptdp_trainer *tr) { return tr->v; }
const ptdp_schedule_params *ptdp_trainer_schedule(const ptdp_trainer *tr) { return &tr->sched; }
const ptdp_job *ptdp_trainer_job(const ptdp_trainer *tr) { return tr->job; }
ptdp_gpt_chunk *ptdp_trainer_chunk_at(ptdp_trainer *tr, int c) { return tr->chunks[c]; }
int64_t ptdp_trainer_iteration(const ptdp_trainer *tr) { return tr->iteration; }

/* The pipeline rank and chunk holding virtual stage 0 (last = 0) or the
 * last one (last = 1). */
static void end_stage(const ptdp_trainer *tr, int last, int *rank, int *chunk) {
    const ptdp_schedule_params *sp = &tr->sched;
    ptdp_schedule_stage_owner(sp, last ? sp->p * sp->v - 1 : 0, rank, chunk);
}

/* The first and last stage each hold the tied word embedding; their
 * gradients are summed so both copies take the same step: over the
 * two-rank embedding group, or, when one rank holds both stages in two
 * chunks (zb-v's rank 0), in place (a + b, bitwise the all-reduce's sum). */
static void reduce_tied_embedding(ptdp_trainer *tr) {
    ptdp_comm *comm = tr->p.comm;
    int r0, c0, rl, cl;
    end_stage(tr, 0, &r0, &c0);
    end_stage(tr, 1, &rl, &cl);
    if (comm->p == 1 || (comm->pp != r0 && comm->pp != rl) || tr->job->model.untie) return;
    ptdp_gpt_chunk *c = tr->chunks[comm->pp == r0 ? c0 : cl];
    const ptdp_param_spec *wte = find_wte(c);
    PTDP_ASSERT(wte);
    float *g = ptdp_gpt_chunk_grads(c) + wte->offset;
    if (r0 != rl) {
        ptdp_allreduce_sum_f32(&comm->embedding, g, wte->numel);
        return;
    }
    ptdp_gpt_chunk *c2 = tr->chunks[cl];
    const ptdp_param_spec *wte2 = find_wte(c2);
    PTDP_ASSERT(wte2 && wte2->numel == wte->numel && c2 != c);
    float *g2 = ptdp_gpt_chunk_grads(c2) + wte2->offset;
    ptdp_backend *be = tr->p.be;
    be->bias_bwd(be, g2, g, 1, wte->numel); /* g += g2 */
    be->copy(be, g2, g, wte->numel);
}

/* Sequence parallelism: a parameter replicated across the tensor group
 * (LayerNorms, the row-parallel biases, the position embeddings) saw only
 * this rank's sequence shard, so its gradient is a partial sum; Megatron
 * all-reduces those over the tensor group after the data-parallel reduction
 * (finalize_model_grads). Sums commute, so doing it after the data-parallel
 * sum gives the same total; under ZeRO-1 it runs on the summed shard this
 * rank owns, which lies at the same flat offsets on every tensor rank. */
static void reduce_sequence_parallel(ptdp_trainer *tr) {
    if (!ptdp_job_sequence_parallel(tr->job)) return;
    ptdp_group *tg = &tr->p.comm->tensor;
    for (int c = 0; c < tr->v; c++) {
        int n;
        const ptdp_param_spec *sp = ptdp_gpt_chunk_specs(tr->chunks[c], &n);
        for (int k = 0; k < ptdp_ddp_num_owned(tr->ddp[c]); k++) {
            int64_t off, len;
            ptdp_ddp_owned(tr->ddp[c], k, &off, &len);
            for (int i = 0; i < n; i++) {
                if (sp[i].split != PTDP_SPLIT_NONE) continue;
                const int64_t lo = sp[i].offset > off ? sp[i].offset : off,
                              hi = sp[i].offset + sp[i].numel < off + len
                                       ? sp[i].offset + sp[i].numel
                                       : off + len;
                if (lo < hi)
                    ptdp_allreduce_sum_f32(tg, ptdp_ddp_grad_at(tr->ddp[c], lo, hi - lo), hi - lo);
            }
        }
    }
}

/* Tokens of micro-batch `mb` (of [m, b, s+1] batch) that take part in the
 * loss: those whose input is not the EOD token (--eod-mask-loss). */
static int64_t counted_tokens(const ptdp_job *j, const int32_t *batch, int64_t mb) {
    const int64_t s = j->model.seq_length, b = j->micro_batch;
    const int32_t *t = batch + mb * b * (s + 1);
    int64_t n = 0;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t si = 0; si < s; si++) n += t[bi * (s + 1) + si] != j->eod_token;
    return n;
}

/* Each micro-batch's loss-gradient scale, and (returned) the tokens of this
 * replica's micro-batches that count. Megatron: every token of the global
 * batch weighs 1/(B s); with --eod-mask-loss each micro-batch's loss is the
 * mean over its counted tokens and the micro-batches are averaged (1/(n_k
 * B/b) per token; a micro-batch with nothing to count adds nothing). */
static int64_t loss_scales(ptdp_trainer *tr, const int32_t *batch) {
    const ptdp_job *j = tr->job;
    const int64_t s = j->model.seq_length, b = j->micro_batch, m = tr->sched.m;
    int64_t total = 0;
    for (int64_t k = 0; k < m; k++) {
        /* fp16: the loss scale multiplies every gradient (a power of 2: exact) */
        const double S = tr->scaler.scale;
        tr->loss_scales[k] = (float)(S / ((double)j->global_batch * (double)s));
        if (!j->eod_mask_loss || !batch) continue;
        const int64_t n = counted_tokens(j, batch, k);
        tr->loss_scales[k] = n ? (float)(S / ((double)n * (double)(j->global_batch / b))) : 0.0f;
        total += n;
    }
    return total;
}

/* Every token id of this rank's share of the batch is in [0, V): an id
 * outside would read past the embedding and give a wrong loss. One pass
 * over B/d (s + 1) ids, nothing next to a step's work. */
static int check_tokens(const ptdp_trainer *tr, const int32_t *batch) {
    const ptdp_job *j = tr->job;
    const int64_t n = j->global_batch / j->d * (j->model.seq_length + 1), V = j->model.vocab;
    for (int64_t i = 0; batch && i < n; i++)
        if (batch[i] < 0 || batch[i] >= V)
            return ptdp_errorf(PTDP_EINVAL,
                               "token id %lld at position %lld of the batch is outside the "
                               "vocabulary [0, %lld) (--vocab-size %lld)",
                               (long long)batch[i], (long long)i, (long long)V, (long long)V);
    return PTDP_OK;
}

int ptdp_trainer_step(ptdp_trainer *tr, const int32_t *batch, ptdp_step_stats *st) {
    const ptdp_job *j = tr->job;
    ptdp_comm *comm = tr->p.comm;
    const int64_t s = j->model.seq_length, b = j->micro_batch, m = tr->sched.m;
    const int bad = check_tokens(tr, batch);
    if (bad) return bad;
    const int64_t counted = loss_scales(tr, batch);
    for (int c = 0; c < tr->v; c++) ptdp_gpt_chunk_zero_grads(tr->chunks[c]);
    double loss_sum = 0.0;
    if (ptdp_fault_at("nan", tr->iteration + 1)) { /* tests: a nan gradient on this rank, */
        float nan = NAN; /* put before backward so it flows through the reductions */
        tr->p.be->upload(tr->p.be, ptdp_gpt_chunk_grads(tr->chunks[0]), &nan, sizeof nan);
    }
    ptdp_executor_run(tr->ex, batch, b, s, tr->loss_scales, tr->iteration, comm->dp * m, &loss_sum);
    if (ptdp_fault_at("nan-loss", tr->iteration + 1)) loss_sum = NAN; /* tests: this rank's loss */
    if (tr->p.check_nonfinite) { /* this rank's own values, before anything is reduced */
        tr->nonfinite = isfinite(loss_sum) ? 0 : PTDP_NONFINITE_LOSS;
        for (int c = 0; c < tr->v; c++)
            if (ptdp_ddp_local_nonfinite(tr->ddp[c])) tr->nonfinite |= PTDP_NONFINITE_GRAD;
    }

    double t0 = ptdp_executor_now(tr->ex);
    reduce_tied_embedding(tr);
    /* data parallelism: gradients were scaled by 1/(B*s), so the sum over the
     * replicas is the gradient of the global mean */
    ptdp_activity_phase("gradient reduction");
    for (int c = 0; c < tr->v; c++) ptdp_ddp_finish(tr->ddp[c]);
    reduce_sequence_parallel(tr);
    /* the loss and its token count live on the last stage (both t times over:
     * every tensor rank there holds them), the norm's pieces on every
     * stage (and with ZeRO-1 on every data-parallel shard) */
    int last_rank, last_chunk;
    end_stage(tr, 1, &last_rank, &last_chunk);
    const int last = comm->pp == last_rank, nl = j->eod_mask_loss ? 2 : 1; /* loss[, count] */
    double sums[3] = {loss_sum, nl == 2 && last ? (double)counted : 0.0, 0.0};
    for (int c = 0; c < tr->v; c++) sums[nl] += ptdp_optim_grad_sumsq(&tr->opts[c]);
    ptdp_allreduce_sum_f64(&comm->data, sums, j->distributed_optimizer ? nl + 1 : nl);
    ptdp_allreduce_sum_f64(&comm->model, sums, nl + 1);
    ptdp_executor_record(tr->ex, PTDP_EV_REDUCE, t0, ptdp_executor_now(tr->ex), tr->iteration);
    /* the gradients are S times the loss's (S = 1 without loss scaling); an
     * overflow anywhere makes the all-reduced norm inf/nan on every rank, so
     * all skip together */
    ptdp_loss_scaler *ls = &tr->scaler;
    const double S = ls->scale, norm = sqrt(sums[nl]) / S;
    double lr = ptdp_lr_at(&tr->lr, tr->opts[0].step);
    st->skipped = !isfinite(norm);
    t0 = ptdp_executor_now(tr->ex);
    ptdp_activity_phase("optimizer step"); /* ZeRO-1's all-gather of the updated weights */
    if (!st->skipped)
        for (int c = 0; c < tr->v; c++) {
            ptdp_optim_step(&tr->opts[c], norm, lr, 1.0 / S);
            ptdp_ddp_gather_params(tr->ddp[c]);
        }
    ptdp_loss_scaler_update(ls, st->skipped);
    st->loss_scale = ls->scale;
    st->loss_scaling = ls->dynamic || ls->scale != 1.0;
    ptdp_executor_record(tr->ex, PTDP_EV_OPTIM, t0, ptdp_executor_now(tr->ex), tr->iteration);
    tr->iteration++;
    st->iteration = tr->iteration;
    /* the model group (TP x PP) summed the loss t times over (every TP rank
     * of the last stage holds it) */
    st->loss = sums[0] / (double)comm->t /
               (j->eod_mask_loss ? sums[1] / (double)comm->t /* Megatron: over counted tokens */
                                 : (double)j->global_batch * (double)s);
    st->grad_norm = norm;
    /* Megatron logs the learning rate after the scheduler's step: the one the
     * next iteration uses (iteration 1 of a warm-up shows lr / warm-up) */
    st->lr = ptdp_lr_at(&tr->lr, tr->opts[0].step);
    return PTDP_OK;
}

/* Forward only: the executor's evaluation list (every micro-batch through
 * the stages in order, the same transfers as a step's), no dropout, no
 * gradients. */
double ptdp_trainer_eval(ptdp_trainer *tr, const int32_t *batch) {
    const ptdp_job *j = tr->job;
    ptdp_comm *comm = tr->p.comm;
    const int64_t s = j->model.seq_length, b = j->micro_batch, m = tr->sched.m;
    double loss_sum[2] = {0.0, 0.0}; /* masked loss, counted tokens (--eod-mask-loss) */
    for (int c = 0; c < tr->v; c++) ptdp_gpt_chunk_set_training(tr->chunks[c], 0);
    ptdp_executor_run_forward(tr->ex, batch, b, s, tr->iteration, &loss_sum[0]);
    for (int c = 0; c < tr->v; c++) ptdp_gpt_chunk_set_training(tr->chunks[c], 1);
    int last_rank, last_chunk;
    end_stage(tr, 1, &last_rank, &last_chunk);
    for (int64_t k = 0; j->eod_mask_loss && comm->pp == last_rank && k < m; k++)
        loss_sum[1] += (double)counted_tokens(j, batch, k);
    const int nl = j->eod_mask_loss ? 2 : 1; /* the count only when masking */
    ptdp_allreduce_sum_f64(&comm->data, loss_sum, nl);
    ptdp_allreduce_sum_f64(&comm->pipeline, loss_sum, nl);
    return loss_sum[0] / (j->eod_mask_loss ? loss_sum[1] : (double)j->global_batch * (double)s);
}

void ptdp_trainer_memory(const ptdp_trainer *tr, size_t carved[PTDP_MEM_NCAT],
                         size_t predicted[PTDP_MEM_NCAT]) {
    for (int k = 0; k < PTDP_MEM_NCAT; k++) {
        if (carved) carved[k] = tr->mem.cat[k].size;
        if (predicted) predicted[k] = tr->predicted[k];
    }
}

size_t ptdp_trainer_backend_unplanned(const ptdp_trainer *tr) {
    return tr->p.be->ondemand_bytes - tr->ondemand0;
}

void ptdp_trainer_activation_memory(const ptdp_trainer *tr, ptdp_act_memory *am) {
    const ptdp_plan_backend pb = plan_backend(tr);
    memset(am, 0, sizeof *am);
    for (int c = 0; c < tr->v; c++) {
        size_t slot, sh;
        ptdp_gpt_chunk_activation_split(tr->chunks[c], &slot, &sh);
        int peak = ptdp_executor_peak_inflight(tr->ex, c);
        am->measured += (double)peak * (double)slot + (double)sh;
        am->stash += (double)peak * (double)slot;
        am->stashed_microbatches += peak;
        const int64_t stage = ptdp_schedule_stage(&tr->sched, tr->p.comm->pp, c);
        double ps, psh;
        ptdp_plan_activation_bytes(tr->job, stage, &pb, &ps, &psh);
        am->predicted += ps * ptdp_schedule_chunk_inflight(&tr->sched, tr->p.comm->pp, c) + psh;
    }
}

void ptdp_trainer_perturb(ptdp_trainer *tr) {
    float x, *w = ptdp_gpt_chunk_params(tr->chunks[0]);
    tr->p.be->download(tr->p.be, &x, w, sizeof x);
    x += 1e-3f;
    tr->p.be->upload(tr->p.be, w, &x, sizeof x);
}

int ptdp_trainer_replicas_identical(ptdp_trainer *tr) {
    return ptdp_ddp_replicas_identical(tr->ddp, tr->v, tr->hash_buf, PTDP__HASH_FLOATS);
}

void ptdp_trainer_nonfinite_ranks(ptdp_trainer *tr, int32_t *flags) {
    ptdp_comm *c = tr->p.comm;
    for (int w = 0; w < c->world_size; w++) flags[w] = 0;
    flags[c->world_rank] = tr->nonfinite;
    ptdp_allreduce_max_i32(&c->world, flags, c->world_size);
}

int ptdp_trainer_write_trace(ptdp_trainer *tr, const char *path) {
    ptdp_comm *c = tr->p.comm;
    return ptdp_executor_write_trace(tr->ex, &c->world, c->world_rank, c->dp, c->pp, c->tp, path);
}
