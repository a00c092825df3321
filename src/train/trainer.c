/* trainer.c - one rank's iteration: zero gradients, run the pipeline
 * schedule over this rank's v model chunks (forward/backward per micro-batch;
 * loss gradients scaled by 1/(B*s) so the result is the mean over the global
 * batch whatever b, m or d are), sum the tied embedding's gradient over the
 * first and last stage (an all-reduce, or a local sum when one rank holds
 * both, as under zb-v), all-reduce gradients over the data-parallel
 * group, global norm, clip, AdamW. With p = v = 1 the schedule is the plain
 * micro-batch loop (1F1B with no warm-up). */
#include "train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>
#include <sys/resource.h>

#include "ckpt/ckpt.h"
#include "ckpt/hf.h"
#include "pipeline/pipeline.h"
#include "plan/plan.h"

struct ptdp_trainer {
    ptdp_trainer_params p;
    int v;
    ptdp_gpt_chunk *chunks[PTDP_MAX_CHUNKS];
    ptdp_optimizer opts[PTDP_MAX_CHUNKS];
    ptdp_ddp *ddp[PTDP_MAX_CHUNKS];
    ptdp_executor *ex;
    float *eval_buf;                 /* [2, b*s*h]: evaluation's stage-to-stage transfers (p > 1) */
    ptdp_backend_job job;            /* what the backend plans its own memory for */
    ptdp_backend_workspace bws;      /* its answer */
    void *bws_block;                 /* its workspace, from the backend category (NULL: none) */
    size_t ondemand0;                /* the backend's own allocations before the first step */
    ptdp_mem mem;                    /* every tensor of the rank: one block per category */
    size_t predicted[PTDP_MEM_NCAT]; /* the planner's bytes per category */
    int64_t iteration;
    float *loss_scales; /* [m] host: each micro-batch's loss-gradient scale */
    float *hash_buf;    /* [HASH_CHUNK] host floats: --check-dp-replicas downloads
                           the parameters through it (backend memory may not be
                           host memory) */
    int nonfinite;      /* check_nonfinite: PTDP_NONFINITE_* of the last step, this rank */
};

#define HASH_CHUNK ((int64_t)1 << 18) /* floats (1 MiB) per download */

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
        .micro_batch = 1,
        .global_batch = 1,
        .adam = ptdp_adamw_default_params(),
        .sched = {.p = 0}, /* p = the comm's, v = 1, kind from v */
        .recompute_method = PTDP_RECOMPUTE_NONE,
        .overlap_grad_reduce = 1,
        .scaler = ptdp_loss_scaler_constant(1.0),
    };
}

/* Sequence parallelism in effect: Megatron turns it off when t = 1. */
static int seq_par(const ptdp_trainer_params *p) { return p->sequence_parallel && p->comm->t > 1; }

/* Floats of one stage-to-stage message: [s, b, h], or this rank's [s/t, b,
 * h] with sequence parallelism. */
static int64_t msg_floats(const ptdp_trainer_params *p) {
    const int64_t n = p->micro_batch * p->cfg.seq_length * p->cfg.hidden;
    return seq_par(p) ? n / p->comm->t : n;
}

/* Evaluation's two stage-to-stage buffers [2, msg] (p > 1). */
static void carve_eval(ptdp_trainer *tr) {
    const ptdp_trainer_params *p = &tr->p;
    const size_t n = 2 * (size_t)msg_floats(p);
    tr->eval_buf =
        p->comm->p > 1 ? ptdp_arena_carve(&tr->mem.cat[PTDP_MEM_EVAL], sizeof(float) * n) : NULL;
}

/* The shapes the compute backend plans its own memory for: a layer's and
 * the loss head's ops, the layers and heads of this rank's chunks. */
static ptdp_backend_job backend_job(const ptdp_trainer *tr) {
    const ptdp_trainer_params *p = &tr->p;
    const int64_t t = p->comm->t;
    ptdp_backend_job j = {.s = p->cfg.seq_length,
                          .b = p->micro_batch,
                          .h = p->cfg.hidden,
                          .hl = p->cfg.hidden / t,
                          .fl = p->cfg.ffn_hidden / t,
                          .al = p->cfg.heads / t,
                          .hd = p->cfg.hidden / p->cfg.heads,
                          .gl = ptdp_gpt_groups(&p->cfg) / t,
                          .swiglu = p->cfg.swiglu,
                          .Vl = 0,
                          .layers = 0,
                          .heads = 0,
                          .threads = omp_get_max_threads()};
    const int64_t stages = (int64_t)p->sched.p * tr->v;
    for (int c = 0; c < tr->v; c++) {
        int64_t begin, end, stage = ptdp_schedule_stage(&p->sched, p->comm->pp, c);
        ptdp_stage_layout_range(&p->layout, p->cfg.num_layers, p->sched.p, tr->v, (int)stage,
                                &begin, &end);
        j.layers += end - begin;
        j.heads += stage == stages - 1;
    }
    if (j.heads) j.Vl = p->cfg.vocab_padded / t;
    return j;
}

/* The backend's workspace, one piece of its category (twice, like every
 * subsystem: over the plan arena, then over the block). */
static void carve_backend(ptdp_trainer *tr) {
    tr->bws_block =
        ptdp_arena_carve(&tr->mem.cat[PTDP_MEM_BACKEND],
                         ptdp_backend_workspace_bytes(&tr->bws, tr->job.layers, tr->job.heads));
}

/* The model's blocks as the planner's memory model describes them. */
static ptdp_plan_blocks plan_blocks(const ptdp_gpt_config *cfg) {
    return (ptdp_plan_blocks){.groups = ptdp_gpt_groups(cfg),
                              .rotary_dims = ptdp_gpt_rotary_dims(cfg),
                              .swiglu = cfg->swiglu,
                              .rmsnorm = cfg->rmsnorm,
                              .untie = cfg->untie,
                              .no_bias = cfg->no_bias};
}

/* The planner's prediction of this rank's memory, from the configuration. */
static int plan_rank(const ptdp_trainer *tr, size_t bytes[PTDP_MEM_NCAT]) {
    const ptdp_trainer_params *p = &tr->p;
    const ptdp_comm *comm = p->comm;
    ptdp_plan_rank r = ptdp_plan_rank_default_params();
    r.layers = p->cfg.num_layers;
    r.h = p->cfg.hidden;
    r.a = p->cfg.heads;
    r.ffn = p->cfg.ffn_hidden;
    r.s = p->cfg.seq_length;
    r.b = p->micro_batch;
    r.vocab_padded = p->cfg.vocab_padded;
    r.max_positions = p->cfg.max_positions;
    r.t = comm->t;
    r.d = comm->d;
    r.pp_rank = comm->pp;
    r.dp_rank = comm->dp;
    r.sched = p->sched;
    r.layout = p->layout;
    r.zero = p->distributed_optimizer;
    if (p->ddp_bucket_floats) r.bucket_floats = p->ddp_bucket_floats;
    r.recompute = p->recompute_method;
    r.recompute_num_layers = p->recompute_num_layers;
    r.attn_saved_floats = p->be->attention_saved_floats(p->be, r.s, r.b, p->cfg.heads / comm->t);
    r.attn_scratch_floats = p->be->attention_scratch_floats(p->be, r.s);
    r.master_weights = p->be->dtype != PTDP_DTYPE_FP32;
    r.mlp16 = p->be->mlp_store != PTDP_DTYPE_FP32;
    r.backend_fixed = tr->bws.fixed;
    r.backend_per_layer = tr->bws.per_layer;
    r.backend_per_head = tr->bws.per_head;
    r.sequence_parallel = seq_par(p);
    r.blocks = plan_blocks(&p->cfg);
    return ptdp_plan_rank_memory(&r, bytes);
}

int ptdp_trainer_init(ptdp_trainer **out, const ptdp_trainer_params *p) {
    *out = NULL;
    ptdp_trainer *tr = calloc(1, sizeof *tr);
    if (!tr) return ptdp_errorf(PTDP_ENOMEM, "out of memory");
    tr->p = *p;
    tr->hash_buf = malloc(sizeof(float) * (size_t)HASH_CHUNK);
    if (!tr->hash_buf) {
        free(tr);
        return ptdp_errorf(PTDP_ENOMEM, "out of memory");
    }
    ptdp_mem_plan(&tr->mem);
    ptdp_comm *comm = p->comm;
    ptdp_schedule_params sp = p->sched;
    if (sp.p == 0) sp = (ptdp_schedule_params){.p = comm->p, .m = 1, .v = 1, .kind = -1};
    sp.m = (int)(p->global_batch / (p->micro_batch * comm->d));
    sp.kind = ptdp_schedule_resolve_kind(&sp);
    if (!sp.cost_f && !sp.cost_b && !sp.cost_w) /* the shape alone: the same on every rank */
        ptdp_schedule_flop_costs(p->cfg.seq_length, p->cfg.hidden, p->cfg.ffn_hidden, &sp);
    tr->p.sched = sp;
    tr->loss_scales = malloc(sizeof(float) * (size_t)(sp.m > 0 ? sp.m : 1));
    int rc = !tr->loss_scales
                 ? ptdp_errorf(PTDP_ENOMEM, "out of memory")
                 : ptdp_backend_check(p->be, (p->cfg.hidden_dropout > 0 ? PTDP_NEED_DROPOUT : 0) |
                                                 (p->eod_mask_loss ? PTDP_NEED_ROW_MASK : 0) |
                                                 ptdp_gpt_backend_needs(&p->cfg));
    if (rc == PTDP_OK) rc = ptdp_schedule_check(&sp);
    tr->v = sp.v;
    const int64_t stages = (int64_t)sp.p * sp.v;
    if (rc == PTDP_OK) rc = ptdp_stage_layout_check(&p->layout, p->cfg.num_layers, sp.p, sp.v);
    if (rc == PTDP_OK && ptdp_schedule_splits_backward(&sp) &&
        p->recompute_method != PTDP_RECOMPUTE_NONE &&
        p->recompute_method != PTDP_RECOMPUTE_SELECTIVE)
        rc = ptdp_errorf(PTDP_ECONFIG,
                         "--pipeline-schedule %s keeps activations until the weight gradients "
                         "(W) run; it cannot be combined with --recompute-granularity full",
                         ptdp_schedule_kind_name(sp.kind));
    if (rc == PTDP_OK && sp.v > PTDP_MAX_CHUNKS)
        rc = ptdp_errorf(PTDP_ECONFIG, "at most %d model chunks per rank", PTDP_MAX_CHUNKS);
    for (int c = 0; rc == PTDP_OK && c < sp.v; c++) {
        const int slots = ptdp_schedule_chunk_inflight(&sp, comm->pp, c);
        int64_t stage = ptdp_schedule_stage(&sp, comm->pp, c), begin, end;
        ptdp_stage_layout_range(&p->layout, p->cfg.num_layers, sp.p, sp.v, (int)stage, &begin,
                                &end);
        ptdp_chunk_params cp = {
            .cfg = &tr->p.cfg,
            .layer_begin = begin,
            .layer_end = end,
            .pre = stage == 0,
            .post = stage == stages - 1,
            .micro_batch = p->micro_batch,
            .slots = slots,
            .be = p->be,
            .tp = &comm->tensor,
            .recompute_method = p->recompute_method,
            .recompute_num_layers = p->recompute_num_layers,
            .numel_multiple = 16 * (int64_t)comm->d,
            .eod_mask_loss = p->eod_mask_loss,
            .eod_token = p->eod_token,
            .sequence_parallel = seq_par(p),
            .inference = 0,
            .split_backward = ptdp_schedule_splits_backward(&sp),
            .mem = &tr->mem,
        };
        rc = ptdp_gpt_chunk_init(&tr->chunks[c], &cp);
        if (rc == PTDP_OK) {
            /* with p > 1 the tied embedding's gradient is summed over the first
             * and last stage before its bucket may start */
            const ptdp_param_spec *wte = (cp.pre || cp.post) && comm->p > 1 && !p->cfg.untie
                                             ? find_wte(tr->chunks[c])
                                             : NULL;
            const ptdp_ddp_params dflt = ptdp_ddp_default_params();
            ptdp_ddp_params dp = {
                .data = &comm->data,
                .be = p->be,
                .params = ptdp_gpt_chunk_params(tr->chunks[c]),
                .grads = ptdp_gpt_chunk_grads(tr->chunks[c]),
                .numel = ptdp_gpt_chunk_numel(tr->chunks[c]),
                .bucket_floats = p->ddp_bucket_floats ? p->ddp_bucket_floats : dflt.bucket_floats,
                .zero = p->distributed_optimizer,
                .hold_below = wte ? wte->offset + wte->numel : 0,
                .mem = &tr->mem,
                .check_finite = p->check_nonfinite,
            };
            rc = ptdp_ddp_init(&tr->ddp[c], &dp);
        }
        if (rc == PTDP_OK) {
            int n;
            const ptdp_param_spec *specs = ptdp_gpt_chunk_specs(tr->chunks[c], &n);
            rc = ptdp_optim_init(&tr->opts[c], p->be, &p->adam, specs, n,
                                 ptdp_gpt_chunk_params(tr->chunks[c]), tr->ddp[c],
                                 comm->tensor.rank, cp.pre, &tr->mem);
        }
    }
    if (rc == PTDP_OK) {
        ptdp_executor_params ep = ptdp_executor_default_params();
        ep.sched = sp;
        ep.pp_rank = comm->pp;
        ep.pipeline = &comm->pipeline;
        ep.be = p->be;
        ep.mem = &tr->mem;
        ep.chunks = tr->chunks;
        ep.tokens_per_mb = msg_floats(p) / p->cfg.hidden;
        ep.hidden = p->cfg.hidden;
        ep.max_events = p->trace_events;
        ep.tensor = &comm->tensor;
        /* a sequence-parallel message is already this rank's 1/t: nothing
         * left to scatter */
        ep.scatter_gather = p->scatter_gather && !seq_par(p);
        ep.last_bwd_hook = p->overlap_grad_reduce && comm->d > 1 ? ptdp_ddp_grads_ready : NULL;
        ep.hook_ctx = (void **)tr->ddp;
        rc = ptdp_executor_init(&tr->ex, &ep);
    }
    /* Everything above carved from plan arenas (sizes only); now one block per
     * category, and every subsystem carves again, in the same order. */
    if (rc == PTDP_OK) carve_eval(tr);
    if (rc == PTDP_OK) { /* the backend's own memory, planned with the rest */
        tr->job = backend_job(tr);
        rc = ptdp_backend_workspace_size(p->be, &tr->job, &tr->bws);
        if (rc == PTDP_OK) carve_backend(tr);
    }
    if (rc == PTDP_OK) rc = ptdp_backend_mem_alloc(p->be, &tr->mem);
    if (rc == PTDP_OK) {
        for (int c = 0; c < tr->v; c++) {
            ptdp_gpt_chunk_bind(tr->chunks[c], &tr->mem);
            float *w = ptdp_gpt_chunk_params(tr->chunks[c]);
            ptdp_ddp_bind(tr->ddp[c], w, ptdp_gpt_chunk_grads(tr->chunks[c]), &tr->mem);
            ptdp_optim_bind(&tr->opts[c], w, tr->ddp[c], &tr->mem);
        }
        ptdp_executor_bind(tr->ex, &tr->mem);
        carve_eval(tr);
        carve_backend(tr);
        PTDP_ASSERT_MSG(ptdp_mem_exact(&tr->mem), "a subsystem carved differently from its plan");
        rc = ptdp_backend_workspace_set(
            p->be, &tr->job, tr->bws_block,
            ptdp_backend_workspace_bytes(&tr->bws, tr->job.layers, tr->job.heads));
        if (rc == PTDP_OK) rc = plan_rank(tr, tr->predicted);
        tr->ondemand0 = p->be->ondemand_bytes;
    }
    for (int c = 0; rc == PTDP_OK && c < tr->v; c++) {
        if (p->init_from)
            rc = ptdp_hf_load_chunk(tr->chunks[c], &tr->p.cfg, comm->tensor.rank, p->init_from);
        else
            ptdp_gpt_chunk_init_params(tr->chunks[c]);
        /* 16-bit runs: the fp32 values become the master weights */
        if (rc == PTDP_OK)
            ptdp_optim_take_master(&tr->opts[c], ptdp_gpt_chunk_numel(tr->chunks[c]));
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
    for (int c = 0; c < PTDP_MAX_CHUNKS; c++) {
        if (tr->chunks[c]) ptdp_optim_free(&tr->opts[c]);
        ptdp_ddp_free(tr->ddp[c]);
        ptdp_gpt_chunk_free(tr->chunks[c]);
    }
    ptdp_executor_free(tr->ex);
    /* the backend gives back what it kept in its workspace before the block goes */
    if (tr->bws_block) ptdp_backend_workspace_set(tr->p.be, &tr->job, NULL, 0);
    ptdp_backend_mem_free(tr->p.be, &tr->mem);
    free(tr->hash_buf);
    free(tr->loss_scales);
    free(tr);
}

ptdp_gpt_chunk *ptdp_trainer_chunk(ptdp_trainer *tr) { return tr->chunks[0]; }
int ptdp_trainer_num_chunks(const ptdp_trainer *tr) { return tr->v; }
const ptdp_schedule_params *ptdp_trainer_schedule(const ptdp_trainer *tr) { return &tr->p.sched; }
ptdp_gpt_chunk *ptdp_trainer_chunk_at(ptdp_trainer *tr, int c) { return tr->chunks[c]; }

/* The pipeline rank and chunk holding virtual stage 0 (last = 0) or the
 * last one (last = 1). */
static void end_stage(const ptdp_trainer *tr, int last, int *rank, int *chunk) {
    const ptdp_schedule_params *sp = &tr->p.sched;
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
    if (comm->p == 1 || (comm->pp != r0 && comm->pp != rl) || tr->p.cfg.untie) return;
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
    if (!seq_par(&tr->p)) return;
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
static int64_t counted_tokens(const ptdp_trainer_params *p, const int32_t *batch, int64_t mb) {
    const int64_t s = p->cfg.seq_length, b = p->micro_batch;
    const int32_t *t = batch + mb * b * (s + 1);
    int64_t n = 0;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t si = 0; si < s; si++) n += t[bi * (s + 1) + si] != p->eod_token;
    return n;
}

/* Each micro-batch's loss-gradient scale, and (returned) the tokens of this
 * replica's micro-batches that count. Megatron: every token of the global
 * batch weighs 1/(B s); with --eod-mask-loss each micro-batch's loss is the
 * mean over its counted tokens and the micro-batches are averaged (1/(n_k
 * B/b) per token; a micro-batch with nothing to count adds nothing). */
static int64_t loss_scales(ptdp_trainer *tr, const int32_t *batch) {
    const ptdp_trainer_params *p = &tr->p;
    const int64_t s = p->cfg.seq_length, b = p->micro_batch, m = p->sched.m;
    int64_t total = 0;
    for (int64_t k = 0; k < m; k++) {
        /* fp16: the loss scale multiplies every gradient (a power of 2: exact) */
        const double S = tr->p.scaler.scale;
        tr->loss_scales[k] = (float)(S / ((double)p->global_batch * (double)s));
        if (!p->eod_mask_loss || !batch) continue;
        const int64_t n = counted_tokens(p, batch, k);
        tr->loss_scales[k] = n ? (float)(S / ((double)n * (double)(p->global_batch / b))) : 0.0f;
        total += n;
    }
    return total;
}

void ptdp_trainer_step(ptdp_trainer *tr, const int32_t *batch, ptdp_step_stats *st) {
    const ptdp_trainer_params *p = &tr->p;
    ptdp_comm *comm = p->comm;
    const int64_t s = p->cfg.seq_length, b = p->micro_batch, m = p->sched.m;
    const int64_t counted = loss_scales(tr, batch);
    for (int c = 0; c < tr->v; c++) ptdp_gpt_chunk_zero_grads(tr->chunks[c]);
    double loss_sum = 0.0;
    if (ptdp_fault_at("nan", tr->iteration + 1)) { /* tests: a nan gradient on this rank, */
        float nan = NAN; /* put before backward so it flows through the reductions */
        p->be->upload(p->be, ptdp_gpt_chunk_grads(tr->chunks[0]), &nan, sizeof nan);
    }
    ptdp_executor_run(tr->ex, batch, b, s, tr->loss_scales, tr->iteration, comm->dp * m, &loss_sum);
    if (ptdp_fault_at("nan-loss", tr->iteration + 1)) loss_sum = NAN; /* tests: this rank's loss */
    if (p->check_nonfinite) { /* this rank's own values, before anything is reduced */
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
    const int last = comm->pp == last_rank, nl = p->eod_mask_loss ? 2 : 1; /* loss[, count] */
    double sums[3] = {loss_sum, nl == 2 && last ? (double)counted : 0.0, 0.0};
    for (int c = 0; c < tr->v; c++) sums[nl] += ptdp_optim_grad_sumsq(&tr->opts[c]);
    ptdp_allreduce_sum_f64(&comm->data, sums, p->distributed_optimizer ? nl + 1 : nl);
    ptdp_allreduce_sum_f64(&comm->model, sums, nl + 1);
    ptdp_executor_record(tr->ex, PTDP_EV_REDUCE, t0, ptdp_executor_now(tr->ex), tr->iteration);
    /* the gradients are S times the loss's (S = 1 without loss scaling); an
     * overflow anywhere makes the all-reduced norm inf/nan on every rank, so
     * all skip together */
    ptdp_loss_scaler *ls = &tr->p.scaler;
    const double S = ls->scale, norm = sqrt(sums[nl]) / S;
    double lr = ptdp_lr_at(&p->lr, tr->opts[0].step);
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
               (p->eod_mask_loss ? sums[1] / (double)comm->t /* Megatron: over counted tokens */
                                 : (double)p->global_batch * (double)s);
    st->grad_norm = norm;
    /* Megatron logs the learning rate after the scheduler's step: the one the
     * next iteration uses (iteration 1 of a warm-up shows lr / warm-up) */
    st->lr = ptdp_lr_at(&p->lr, tr->opts[0].step);
}

/* Forward only, stage after stage with blocking transfers (no schedule
 * needed: nothing overlaps; a hand-off between two chunks of this rank
 * stays in buf). Activation slot 0 of each chunk is free between
 * iterations. */
double ptdp_trainer_eval(ptdp_trainer *tr, const int32_t *batch) {
    const ptdp_trainer_params *p = &tr->p;
    ptdp_comm *comm = p->comm;
    const int64_t s = p->cfg.seq_length, b = p->micro_batch, m = p->sched.m, P = comm->p;
    const int64_t n = msg_floats(p), stages = P * tr->v;
    float *buf = tr->eval_buf;
    double loss_sum[2] = {0.0, 0.0}; /* masked loss, counted tokens (--eod-mask-loss) */
    for (int c = 0; c < tr->v; c++) ptdp_gpt_chunk_set_training(tr->chunks[c], 0);
    for (int64_t k = 0; k < m; k++)
        for (int64_t stage = 0; stage < stages; stage++) {
            int r, c, prev_r = -1, next_r = -1, unused;
            ptdp_schedule_stage_owner(&p->sched, (int)stage, &r, &c);
            if (r != comm->pp) continue;
            if (stage > 0) ptdp_schedule_stage_owner(&p->sched, (int)stage - 1, &prev_r, &unused);
            if (stage < stages - 1)
                ptdp_schedule_stage_owner(&p->sched, (int)stage + 1, &next_r, &unused);
            ptdp_comm_req req;
            if (stage > 0 && prev_r == r) { /* from this rank's previous stage */
                p->be->copy(p->be, buf, buf + n, n);
            } else if (stage > 0) {
                ptdp_irecv_f32(&comm->pipeline, buf, n, prev_r, (int)stage, &req);
                ptdp_wait(&req);
            }
            double ls = 0.0;
            ptdp_gpt_chunk_fwd(tr->chunks[c], 0, batch ? batch + k * b * (s + 1) : NULL,
                               stage > 0 ? buf : NULL, stage < stages - 1 ? buf + n : NULL, 0.0f,
                               &ls, tr->iteration, k);
            loss_sum[0] += ls;
            if (stage == stages - 1 && p->eod_mask_loss)
                loss_sum[1] += (double)counted_tokens(p, batch, k);
            if (stage < stages - 1 && next_r != r) {
                ptdp_isend_f32(&comm->pipeline, buf + n, n, next_r, (int)(stage + 1), &req);
                ptdp_wait(&req);
            }
        }
    for (int c = 0; c < tr->v; c++) ptdp_gpt_chunk_set_training(tr->chunks[c], 1);
    const int nl = p->eod_mask_loss ? 2 : 1; /* the count only when masking */
    ptdp_allreduce_sum_f64(&comm->data, loss_sum, nl);
    ptdp_allreduce_sum_f64(&comm->pipeline, loss_sum, nl);
    return loss_sum[0] / (p->eod_mask_loss ? loss_sum[1] : (double)p->global_batch * (double)s);
}

void ptdp_trainer_memory(const ptdp_trainer *tr, size_t carved[PTDP_MEM_NCAT],
                         size_t predicted[PTDP_MEM_NCAT]) {
    for (int k = 0; k < PTDP_MEM_NCAT; k++) {
        if (carved) carved[k] = tr->mem.cat[k].size;
        if (predicted) predicted[k] = tr->predicted[k];
    }
}

void ptdp_trainer_log_memory(const ptdp_trainer *tr) {
    const ptdp_comm *comm = tr->p.comm;
    size_t carved[PTDP_MEM_NCAT], pred[PTDP_MEM_NCAT], tc = 0, tp = 0;
    ptdp_trainer_memory(tr, carved, pred);
    for (int k = 0; k < PTDP_MEM_NCAT; k++) {
        tc += carved[k];
        tp += pred[k];
        if (carved[k] != pred[k])
            ptdp_log("memory plan MISMATCH: %s carved %zu bytes, predicted %zu",
                     ptdp_mem_category_name(k), carved[k], pred[k]);
    }
    if (comm->dp == 0 && comm->tp == 0) {
        char tab[2048], b1[32];
        int n = snprintf(tab, sizeof tab,
                         "memory plan (pipeline stage %d; one block per category):\n"
                         "    %-20s %14s %14s %12s",
                         comm->pp, "category", "bytes", "predicted", "(bytes)");
        for (int k = 0; k <= PTDP_MEM_NCAT && n > 0 && (size_t)n < sizeof tab; k++) {
            const size_t c = k < PTDP_MEM_NCAT ? carved[k] : tc,
                         q = k < PTDP_MEM_NCAT ? pred[k] : tp;
            n += snprintf(tab + n, sizeof tab - (size_t)n, "\n    %-20s %14zu %14zu %12s",
                          k < PTDP_MEM_NCAT ? ptdp_mem_category_name(k) : "total", c, q,
                          ptdp_fmt_bytes((double)c, b1));
        }
        ptdp_log("%s", tab);
    }
    int64_t n = 0;
    for (int c = 0; c < tr->v; c++) n += ptdp_gpt_chunk_numel(tr->chunks[c]);
    const double per = (double)carved[PTDP_MEM_OPTIMIZER] / (double)(n ? n : 1);
    if (tr->p.be->dtype == PTDP_DTYPE_FP32)
        ptdp_log0(
            "memory per parameter: weights 4 B, gradients 4 B, optimizer state %.2f B (AdamW m and v in fp32 = 8 B; "
            "the fp32 weights are the master copy; the paper's mixed-precision optimizer keeps 12 B); "
            "with --use-distributed-optimizer 8/d = %.2f B, without 8 B",
            per, 8.0 / comm->d);
    else
        ptdp_log0(
            "memory per parameter: weights 4 B (%s values, fp32 storage), gradients 4 B (fp32), "
            "optimizer state %.2f B (fp32 master weights, AdamW m and v = 12 B, the paper's); with "
            "--use-distributed-optimizer 12/d = %.2f B, without 12 B%s",
            ptdp_dtype_name(tr->p.be->dtype), per, 12.0 / comm->d,
            tr->p.be->caps & PTDP_CAP_WEIGHT_COPIES
                ? "; in the backend workspace, the native GEMMs' bf16 copies of the weights, about "
                  "4 B (two layouts of 2 B)"
                : "");
}

void ptdp_trainer_log_peak_memory(const ptdp_trainer *tr) {
    const ptdp_comm *comm = tr->p.comm;
    const size_t beyond = tr->p.be->ondemand_bytes - tr->ondemand0;
    if (beyond) /* the plan was to hold all of it */
        ptdp_log("memory plan MISMATCH: the compute backend allocated %zu bytes beyond its planned "
                 "workspace during the run",
                 beyond);
    struct rusage ru;
    if (comm->dp != 0 || comm->tp != 0 || getrusage(RUSAGE_SELF, &ru) != 0) return;
    const double rss = (double)ru.ru_maxrss * 1024.0; /* Linux: kilobytes */
    const double plan = (double)ptdp_mem_total(&tr->mem);
    char b1[32], b2[32];
    ptdp_log(
        "peak resident memory %s (%.0f bytes); memory plan total %s (%.0f bytes); difference %+.0f bytes "
        "(code, libraries, host bookkeeping, data, transient host buffers)",
        ptdp_fmt_bytes(rss, b1), rss, ptdp_fmt_bytes(plan, b2), plan, rss - plan);
}

void ptdp_trainer_activation_memory(const ptdp_trainer *tr, ptdp_act_memory *am) {
    const ptdp_trainer_params *p = &tr->p;
    const ptdp_comm *comm = p->comm;
    memset(am, 0, sizeof *am);
    const int64_t stages = (int64_t)p->sched.p * tr->v;
    for (int c = 0; c < tr->v; c++) {
        size_t slot, sh;
        ptdp_gpt_chunk_activation_split(tr->chunks[c], &slot, &sh);
        int peak = ptdp_executor_peak_inflight(tr->ex, c);
        am->measured += (double)peak * (double)slot + (double)sh;
        am->stash += (double)peak * (double)slot;
        am->stashed_microbatches += peak;
        int64_t stage = ptdp_schedule_stage(&p->sched, comm->pp, c), begin, end;
        ptdp_stage_layout_range(&p->layout, p->cfg.num_layers, p->sched.p, tr->v, (int)stage,
                                &begin, &end);
        const ptdp_plan_mem pm = {
            .layers = end - begin,
            .h = p->cfg.hidden,
            .a = p->cfg.heads,
            .ffn = p->cfg.ffn_hidden,
            .s = p->cfg.seq_length,
            .b = p->micro_batch,
            .t = comm->t,
            .vocab_padded = p->cfg.vocab_padded,
            .pre = stage == 0,
            .post = stage == stages - 1,
            .recompute = p->recompute_method,
            .recompute_num_layers = p->recompute_num_layers,
            .sequence_parallel = seq_par(p),
            .split_backward = ptdp_schedule_splits_backward(&p->sched),
            .attn_saved_floats = p->be->attention_saved_floats(
                p->be, p->cfg.seq_length, p->micro_batch, p->cfg.heads / comm->t),
            .attn_scratch_floats = p->be->attention_scratch_floats(p->be, p->cfg.seq_length),
            .mlp16 = p->be->mlp_store != PTDP_DTYPE_FP32,
            .blocks = plan_blocks(&p->cfg)};
        double ps, psh;
        ptdp_plan_activation_bytes(&pm, &ps, &psh);
        am->predicted += ps * ptdp_schedule_chunk_inflight(&p->sched, comm->pp, c) + psh;
    }
}

void ptdp_trainer_perturb(ptdp_trainer *tr) {
    float x, *w = ptdp_gpt_chunk_params(tr->chunks[0]);
    tr->p.be->download(tr->p.be, &x, w, sizeof x);
    x += 1e-3f;
    tr->p.be->upload(tr->p.be, w, &x, sizeof x);
}

int ptdp_trainer_replicas_identical(ptdp_trainer *tr) {
    uint64_t h = PTDP_FNV1A_INIT;
    /* FNV-1a runs byte by byte: hashing piece after piece through the host
     * buffer gives the hash of the whole */
    for (int c = 0; c < tr->v; c++) {
        const float *w = ptdp_gpt_chunk_params(tr->chunks[c]);
        const int64_t n = ptdp_gpt_chunk_numel(tr->chunks[c]);
        for (int64_t i = 0; i < n; i += HASH_CHUNK) {
            const size_t bytes = sizeof(float) * (size_t)(n - i < HASH_CHUNK ? n - i : HASH_CHUNK);
            tr->p.be->download(tr->p.be, tr->hash_buf, w + i, bytes);
            h = ptdp_fnv1a(tr->hash_buf, bytes, h);
        }
    }
    uint64_t mm[2] = {h, ~h}; /* max of h and of ~h: equal iff all equal */
    ptdp_allreduce_max_u64(&tr->p.comm->data, mm, 2);
    return mm[0] == h && mm[1] == ~h;
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

/* ---- checkpoints ---------------------------------------------------------- */

int64_t ptdp_trainer_iteration(const ptdp_trainer *tr) { return tr->iteration; }

void ptdp_trainer_full_precision(ptdp_trainer *tr, int on) {
    for (int c = 0; c < tr->v; c++) {
        if (!tr->opts[c].master) continue;
        if (on) {
            ptdp_optim_master_to_params(&tr->opts[c]);
            ptdp_ddp_gather_params(tr->ddp[c]);
        } else {
            ptdp_optim_round_params(&tr->opts[c], ptdp_gpt_chunk_numel(tr->chunks[c]));
        }
    }
}

int ptdp_trainer_save(ptdp_trainer *tr, const char *dir, int64_t consumed_samples, int overwrite) {
    ptdp_ckpt_meta meta = {.iteration = tr->iteration,
                           .consumed_samples = consumed_samples,
                           .optimizer_step = tr->opts[0].step,
                           .cfg = &tr->p.cfg,
                           .micro_batch = tr->p.micro_batch,
                           .global_batch = tr->p.global_batch,
                           .lr = &tr->p.lr,
                           .adam = &tr->p.adam,
                           .v = tr->v,
                           .zero = tr->p.distributed_optimizer,
                           .scaler = &tr->p.scaler,
                           .overwrite = overwrite};
    /* checkpoints hold the fp32 master weights whatever the precision */
    ptdp_trainer_full_precision(tr, 1);
    int rc = ptdp_ckpt_save(dir, &meta, tr->chunks, tr->opts, tr->v, tr->p.comm);
    ptdp_trainer_full_precision(tr, 0);
    return rc;
}

int ptdp_trainer_load(ptdp_trainer *tr, const char *dir, int load_optim, int restore_iteration,
                      ptdp_ckpt_loaded *out) {
    int rc =
        ptdp_ckpt_load(dir, load_optim, &tr->p.cfg, tr->chunks, tr->opts, tr->v, tr->p.comm, out);
    if (rc == PTDP_OK && out->found && restore_iteration) tr->iteration = out->iteration;
    /* fp16: the dynamic scaler goes on where it was (with the optimizer state) */
    if (rc == PTDP_OK && out->found && load_optim && out->has_scaler && tr->p.scaler.dynamic) {
        tr->p.scaler.scale = out->loss_scale;
        tr->p.scaler.growth_tracker = out->growth_tracker;
        tr->p.scaler.hysteresis_tracker = (int)out->hysteresis_tracker;
    }
    for (int c = 0; rc == PTDP_OK && out->found && c < tr->v; c++) /* fp32 values: the masters */
        ptdp_optim_take_master(&tr->opts[c], ptdp_gpt_chunk_numel(tr->chunks[c]));
    return rc;
}
