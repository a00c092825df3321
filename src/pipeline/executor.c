/* executor.c - one pipeline rank's iteration: walk the schedule, move
 * activations and gradients between stages with non-blocking sends from a
 * ring of buffers per direction (sized by replaying the schedule), run the
 * chunks' forward and backward (under zb-h1 and zb-v as B, input gradient,
 * and W, weight gradients, where the list says), record trace events
 * (written by trace.c). A transfer between two stages of the same rank
 * (zb-v's turn of the V on rank p-1) is no message: the consumer reads the
 * producer's ring slot, which the replay behind the ring's size keeps
 * untouched until then. */
#include "pipeline/pipeline.h"

#include <stdlib.h>
#include <string.h>

/* A receive of a list: the action, the pipeline rank it receives from, the
 * tag. */
typedef struct {
    int act, peer, tag;
} exrecv;

/* One of a rank's lists and the receives it makes, in order. */
typedef struct {
    ptdp_action *acts;
    int nacts;
    exrecv *recvs; /* [nrecv] */
    int nrecv;
} exlist;

struct ptdp_executor {
    ptdp_executor_params p;
    /* lists[0]: the schedule's (training); lists[1]: forward only (evaluation):
     * F(k, c) for each micro-batch k, this rank's chunks in stage order */
    exlist lists[2];
    /* the list being run (one of lists[]) */
    ptdp_action *acts;
    int nacts;
    int64_t msg;   /* floats per message: b*s*h */
    int K;         /* send ring slots per direction (ptdp_schedule_send_buffers) */
    float *bufs;   /* [2 + 2K][msg] (p > 1): two receive buffers, then the rings */
    exrecv *recvs; /* the running list's receives */
    int nrecv;
    int next_recv; /* the receive posted and not yet waited for (nrecv: none) */
    ptdp_comm_req recv_req;
    ptdp_comm_req *send_reqs; /* [2][K] */
    int sent[2];              /* messages sent this iteration per direction */
    int *slot_of;             /* [v][m]: activation slot of (chunk, micro-batch) */
    float **local;            /* [2][m]: ring slot holding the local hand-off of
                                 (direction, micro-batch), zb-v only */
    int *slot_used;           /* [v][slots] */
    int slots;                /* per chunk (the largest of any chunk) */
    int inflight[PTDP_MAX_CHUNKS], peak[PTDP_MAX_CHUNKS]; /* per chunk: now, most so far */
    int last_bwd[PTDP_MAX_CHUNKS]; /* index in acts of chunk c's last backward (split: W) */
    int split;                     /* the schedule splits the backward into B and W */
    double epoch;
    int untraced; /* evaluation: no events (the trace's capacity is the training's) */
    ptdp_event *events;
    int64_t nevents;
};

/* With scatter/gather a message is this TP rank's 1/t slice of the
 * activation (identical on every TP rank), the rest comes by all-gather. */
static int sliced(const ptdp_executor *ex) {
    return ex->p.scatter_gather && ex->p.tensor && ex->p.tensor->size > 1;
}

/* Evaluation's list: every micro-batch through this rank's chunks in
 * stage order, one micro-batch after the other, as the forward of one
 * process would run it (for each k, F(k, c) in increasing virtual stage).
 * Each link carries its messages in the order the receiver takes them and
 * every dependency goes to a later stage, so any ring size is free of
 * deadlock; a hand-off between two stages of this rank (zb-v's turn) is
 * read by the very next action. */
static void forward_list(ptdp_executor *ex) {
    const ptdp_schedule_params *sp = &ex->p.sched;
    const int v = sp->v;
    int order[PTDP_MAX_CHUNKS]; /* this rank's chunks by increasing stage */
    for (int c = 0; c < v; c++) order[c] = c;
    for (int i = 1; i < v; i++)
        for (int j = i; j > 0 && ptdp_schedule_stage(sp, ex->p.pp_rank, order[j]) <
                                     ptdp_schedule_stage(sp, ex->p.pp_rank, order[j - 1]);
             j--) {
            const int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    exlist *l = &ex->lists[1];
    int n = 0;
    for (int k = 0; k < sp->m; k++)
        for (int c = 0; c < v; c++)
            l->acts[n++] = (ptdp_action){.kind = PTDP_ACT_FWD, .microbatch = k, .chunk = order[c]};
}

/* The receives of list l in order: each action whose input comes from
 * another pipeline rank. */
static void plan_receives(ptdp_executor *ex, exlist *l) {
    const ptdp_schedule_params *sp = &ex->p.sched;
    const int r = ex->p.pp_rank;
    l->nrecv = 0;
    for (int i = 0; i < l->nacts; i++) {
        const ptdp_action *a = &l->acts[i];
        ptdp_p2p in, out;
        ptdp_action_p2p(sp, r, a, &in, &out);
        if (a->kind == PTDP_ACT_WGT || in.peer_rank < 0 || in.peer_rank == r) continue;
        const int stage = ptdp_schedule_stage(sp, r, a->chunk);
        l->recvs[l->nrecv].act = i;
        l->recvs[l->nrecv].peer = in.peer_rank;
        l->recvs[l->nrecv++].tag = ptdp_p2p_tag(sp, a->kind, a->microbatch, stage);
    }
}

static void use_list(ptdp_executor *ex, int which) {
    const exlist *l = &ex->lists[which];
    ex->acts = l->acts;
    ex->nacts = l->nacts;
    ex->recvs = l->recvs;
    ex->nrecv = l->nrecv;
}

ptdp_executor_params ptdp_executor_default_params(void) {
    return (ptdp_executor_params){.sched = ptdp_schedule_default_params()};
}

int ptdp_executor_init(ptdp_executor **out, const ptdp_executor_params *p) {
    *out = NULL;
    ptdp_executor *ex = calloc(1, sizeof *ex);
    if (!ex) return ptdp_errorf(PTDP_ENOMEM, "out of memory for the pipeline executor");
    ex->p = *p;
    const int m = p->sched.m, v = p->sched.v;
    ex->lists[0].nacts = ptdp_schedule_len(&p->sched);
    ex->lists[1].nacts = m * v;
    ex->msg = p->tokens_per_mb * p->hidden;
    PTDP_ASSERT(!sliced(ex) || ex->msg % p->tensor->size == 0);
    ex->slots = 0;
    for (int c = 0; c < v; c++) {
        int k = ptdp_schedule_chunk_inflight(&p->sched, p->pp_rank, c);
        ex->slots = k > ex->slots ? k : ex->slots;
    }
    PTDP_ASSERT(v <= PTDP_MAX_CHUNKS);
    ex->K = 1;
    if (p->sched.p > 1) { /* the ring's size comes from replaying every rank's list */
        ptdp_schedule all;
        if (ptdp_schedule_init(&all, &p->sched) != PTDP_OK) {
            ptdp_executor_free(ex);
            return PTDP_ENOMEM;
        }
        ex->K = ptdp_schedule_send_buffers(&all);
        ptdp_schedule_free(&all);
    }
    for (int l = 0; l < 2; l++) {
        ex->lists[l].acts = calloc((size_t)ex->lists[l].nacts, sizeof(ptdp_action));
        ex->lists[l].recvs = calloc((size_t)ex->lists[l].nacts + 1, sizeof *ex->lists[l].recvs);
    }
    ptdp_executor_bind(ex, p->mem);
    ex->send_reqs = calloc((size_t)(2 * ex->K), sizeof(ptdp_comm_req));
    ex->slot_of = calloc((size_t)(v * m), sizeof(int));
    ex->slot_used = calloc((size_t)(v * ex->slots), sizeof(int));
    ex->local = calloc((size_t)(2 * m), sizeof(float *));
    ex->events = p->max_events ? calloc((size_t)p->max_events, sizeof(ptdp_event)) : NULL;
    if (!ex->lists[0].acts || !ex->lists[0].recvs || !ex->lists[1].acts || !ex->lists[1].recvs ||
        !ex->send_reqs || !ex->slot_of || !ex->slot_used || !ex->local ||
        (p->max_events && !ex->events)) {
        ptdp_executor_free(ex);
        return ptdp_errorf(PTDP_ENOMEM, "out of memory for the pipeline executor");
    }
    int n = 0;
    int rc = ptdp_schedule_build(&p->sched, p->pp_rank, ex->lists[0].acts, ex->lists[0].nacts, &n);
    PTDP_ASSERT(rc == PTDP_OK && n == ex->lists[0].nacts);
    forward_list(ex);
    for (int i = 0; i < 2 * ex->K; i++) ex->send_reqs[i] = PTDP_COMM_REQ_NULL;
    for (int l = 0; l < 2; l++) plan_receives(ex, &ex->lists[l]);
    use_list(ex, 0);
    ex->next_recv = ex->nrecv;
    ex->recv_req = PTDP_COMM_REQ_NULL;
    ex->split = ptdp_schedule_splits_backward(&p->sched);
    for (int i = 0; i < ex->nacts; i++)
        if (ex->acts[i].kind == (ex->split ? PTDP_ACT_WGT : PTDP_ACT_BWD))
            ex->last_bwd[ex->acts[i].chunk] = i;
    ex->epoch = ptdp_now();
    *out = ex;
    return PTDP_OK;
}

void ptdp_executor_bind(ptdp_executor *ex, ptdp_mem *m) {
    const size_t n = ex->p.sched.p > 1 ? (size_t)(2 + 2 * ex->K) * (size_t)ex->msg : 0;
    ex->bufs = n ? ptdp_arena_carve(&m->cat[PTDP_MEM_PIPELINE], sizeof(float) * n) : NULL;
}

void ptdp_executor_free(ptdp_executor *ex) {
    if (!ex) return;
    for (int l = 0; l < 2; l++) {
        free(ex->lists[l].acts);
        free(ex->lists[l].recvs);
    }
    free(ex->send_reqs);
    free(ex->slot_of);
    free(ex->slot_used);
    free(ex->local);
    free(ex->events);
    free(ex);
}

int ptdp_executor_peak_inflight(const ptdp_executor *ex, int chunk) { return ex->peak[chunk]; }

double ptdp_executor_now(const ptdp_executor *ex) { return ptdp_now() - ex->epoch; }

void ptdp_executor_record(ptdp_executor *ex, int kind, double t0, double t1, int64_t iteration) {
    if (!ex->events || ex->nevents >= ex->p.max_events) return;
    ex->events[ex->nevents++] = (ptdp_event){t0, t1 - t0, kind, -1, -1, (int)iteration};
}

static void record(ptdp_executor *ex, int kind, double t0, const ptdp_action *a, int64_t it) {
    if (!ex->events || ex->nevents >= ex->p.max_events || ex->untraced) return;
    ex->events[ex->nevents++] =
        (ptdp_event){t0, ptdp_executor_now(ex) - t0, kind, a->microbatch, a->chunk, (int)it};
}

static int take_slot(ptdp_executor *ex, int chunk) {
    for (int k = 0; k < ex->slots; k++)
        if (!ex->slot_used[chunk * ex->slots + k]) {
            ex->slot_used[chunk * ex->slots + k] = 1;
            return k;
        }
    PTDP_ASSERT_MSG(0, "more micro-batches in flight than the schedule allows");
    return -1;
}

/* The next ring slot of direction `kind`, once the message it last carried
 * has been delivered (ptdp_schedule_send_buffers proved that this wait
 * cannot deadlock); *req is its request. */
static float *next_send_buf(ptdp_executor *ex, int kind, ptdp_comm_req **req) {
    const int slot = ex->sent[kind]++ % ex->K;
    *req = &ex->send_reqs[kind * ex->K + slot];
    ptdp_wait(*req); /* no-op when the slot is unused */
    return ex->bufs + (2 + (int64_t)kind * ex->K + slot) * ex->msg;
}

/* Receive j of the iteration (the j-th action that takes a message) lands in
 * receive buffer j % 2, and is posted as soon as receive j - 1 has been
 * waited for, so it is matched the moment the message arrives. Without a
 * single-copy mechanism between processes (Open MPI's shared-memory
 * transport without CMA, as in many containers) a message longer than the
 * eager limit moves only after the receiver has matched it and while the
 * sender is inside MPI; a receive posted late, when the sender has gone back
 * to computing, waits for the sender's next MPI call. */
static float *recv_buffer(const ptdp_executor *ex, int j) { return ex->bufs + (j & 1) * ex->msg; }

/* Messages travel in the backend's precision (Megatron's bf16/fp16 tensors):
 * a 16-bit run packs the values in place before a send and unpacks them
 * after the receive (and the scatter/gather all-gather), half the bytes. */
static ptdp_comm_dtype msg_dtype(const ptdp_executor *ex) {
    return ptdp_comm_act_dtype(ex->p.be->dtype);
}
/* Element i of a message buffer as the dtype packs it. */
static char *msg_at(const ptdp_executor *ex, float *buf, int64_t i) {
    return (char *)buf + i * (int64_t)ptdp_comm_dtype_size(msg_dtype(ex));
}

static void post_recv(ptdp_executor *ex, int j) {
    ex->next_recv = j;
    if (j >= ex->nrecv) return;
    const int peer = ex->recvs[j].peer, tag = ex->recvs[j].tag;
    float *buf = recv_buffer(ex, j);
    const ptdp_comm_dtype dt = msg_dtype(ex);
    if (sliced(ex)) {
        const int64_t n = ex->msg / ex->p.tensor->size;
        ptdp_irecv_dt(ex->p.pipeline, msg_at(ex, buf, ex->p.tensor->rank * n), n, dt, peer, tag,
                      &ex->recv_req);
    } else {
        ptdp_irecv_dt(ex->p.pipeline, buf, ex->msg, dt, peer, tag, &ex->recv_req);
    }
}

/* The input of action i (direction `kind`): a local hand-off's ring slot,
 * or its receive buffer once the message from peer has arrived. */
static const float *recv_from(ptdp_executor *ex, const ptdp_p2p *peer, int kind, int mb, int i,
                              int64_t it) {
    if (peer->peer_rank == ex->p.pp_rank) {
        const float *x = ex->local[kind * ex->p.sched.m + mb];
        PTDP_ASSERT(x);
        ex->local[kind * ex->p.sched.m + mb] = NULL;
        return x;
    }
    const int j = ex->next_recv;
    PTDP_ASSERT(j < ex->nrecv && ex->recvs[j].act == i && ex->recvs[j].peer == peer->peer_rank);
    double t0 = ptdp_executor_now(ex);
    float *buf = recv_buffer(ex, j);
    ptdp_wait(&ex->recv_req);
    if (sliced(ex))
        ptdp_allgather_dt(ex->p.tensor, buf, ex->msg / ex->p.tensor->size, msg_dtype(ex));
    ptdp_unpack_n(buf, buf, ex->msg, ex->p.be->dtype);
    record(ex, PTDP_EV_RECV, t0, &ex->acts[i], it);
    post_recv(ex, j + 1);
    return buf;
}

static void send_to(ptdp_executor *ex, float *buf, const ptdp_p2p *peer, int kind, int mb,
                    ptdp_comm_req *req) {
    if (peer->peer_rank == ex->p.pp_rank) { /* local: the slot waits for its reader */
        ex->local[kind * ex->p.sched.m + mb] = buf;
        *req = PTDP_COMM_REQ_NULL;
        return;
    }
    const int tag = ptdp_p2p_tag(&ex->p.sched, kind, mb, peer->peer_stage);
    const ptdp_comm_dtype dt = msg_dtype(ex);
    int64_t i0 = 0, n = ex->msg;
    if (sliced(ex)) {
        n = ex->msg / ex->p.tensor->size;
        i0 = ex->p.tensor->rank * n;
    }
    char *at = msg_at(ex, buf, i0); /* not after buf + i0: packing may overlap */
    ptdp_pack_n(at, buf + i0, n, ex->p.be->dtype);
    ptdp_isend_dt(ex->p.pipeline, at, n, dt, peer->peer_rank, tag, req);
}

/* Moves the pending sends on: a message longer than the eager limit needs
 * the sender inside MPI after the receiver has matched it (see recv_buffer),
 * so each action starts by testing the sends in flight, which bounds that
 * wait by one action. */
static void progress_sends(ptdp_executor *ex) {
    for (int i = 0; i < 2 * ex->K; i++) ptdp_test(&ex->send_reqs[i]);
}

/* Every send must be delivered before the buffers are reused. */
static void flush(ptdp_executor *ex, int64_t iteration, int traced) {
    ptdp_activity_phase("pipeline flush");
    double t0 = ptdp_executor_now(ex);
    for (int i = 0; i < 2 * ex->K; i++) ptdp_wait(&ex->send_reqs[i]);
    ex->sent[0] = ex->sent[1] = 0;
    if (traced) ptdp_executor_record(ex, PTDP_EV_SEND_WAIT, t0, ptdp_executor_now(ex), iteration);
}

void ptdp_executor_run(ptdp_executor *ex, const int32_t *tokens, int64_t b, int64_t s,
                       const float *loss_scales, int64_t iteration, int64_t mb_base,
                       double *loss_sum) {
    const ptdp_schedule_params *sp = &ex->p.sched;
    const int r = ex->p.pp_rank, m = sp->m;
    *loss_sum = 0.0;
    use_list(ex, 0);
    post_recv(ex, 0);
    for (int i = 0; i < ex->nacts; i++) {
        const ptdp_action *a = &ex->acts[i];
        ptdp_gpt_chunk *ch = ex->p.chunks[a->chunk];
        progress_sends(ex);
        const int32_t *tok = tokens ? tokens + (int64_t)a->microbatch * b * (s + 1) : NULL;
        ptdp_p2p in, out;
        ptdp_action_p2p(sp, r, a, &in, &out);
        ptdp_activity_phase(a->kind == PTDP_ACT_FWD ? "forward" : "backward");
        if (a->kind == PTDP_ACT_FWD) {
            const float *x = in.peer_rank >= 0
                                 ? recv_from(ex, &in, PTDP_ACT_FWD, a->microbatch, i, iteration)
                                 : NULL;
            const int slot = take_slot(ex, a->chunk);
            if (++ex->inflight[a->chunk] > ex->peak[a->chunk])
                ex->peak[a->chunk] = ex->inflight[a->chunk];
            ex->slot_of[a->chunk * m + a->microbatch] = slot;
            ptdp_comm_req *req = NULL;
            float *y = out.peer_rank >= 0 ? next_send_buf(ex, PTDP_ACT_FWD, &req) : NULL;
            double ls = 0.0, t0 = ptdp_executor_now(ex);
            ptdp_fault_point(NULL, "forward"); /* tests: kill.forward@R:ITER */
            ptdp_gpt_chunk_fwd(ch, slot, tok, x, y, loss_scales[a->microbatch], &ls, iteration,
                               mb_base + a->microbatch);
            record(ex, PTDP_EV_FWD, t0, a, iteration);
            *loss_sum += ls;
            if (y) send_to(ex, y, &out, PTDP_ACT_FWD, a->microbatch, req);
        } else if (a->kind == PTDP_ACT_WGT) { /* weight gradients: no transfer */
            const int slot = ex->slot_of[a->chunk * m + a->microbatch];
            double t0 = ptdp_executor_now(ex);
            const int hooked = ex->p.last_bwd_hook && i == ex->last_bwd[a->chunk];
            if (hooked)
                ptdp_gpt_chunk_set_grad_hook(ch, ex->p.last_bwd_hook, ex->p.hook_ctx[a->chunk]);
            ptdp_gpt_chunk_bwd_weight(ch, slot);
            if (hooked) ptdp_gpt_chunk_set_grad_hook(ch, NULL, NULL);
            record(ex, PTDP_EV_WGT, t0, a, iteration);
            ex->slot_used[a->chunk * ex->slots + slot] = 0;
            ex->inflight[a->chunk]--;
        } else {
            const float *dy = in.peer_rank >= 0
                                  ? recv_from(ex, &in, PTDP_ACT_BWD, a->microbatch, i, iteration)
                                  : NULL;
            int slot = ex->slot_of[a->chunk * m + a->microbatch];
            ptdp_comm_req *req = NULL;
            float *dx = out.peer_rank >= 0 ? next_send_buf(ex, PTDP_ACT_BWD, &req) : NULL;
            double t0 = ptdp_executor_now(ex);
            const int hooked = ex->p.last_bwd_hook && i == ex->last_bwd[a->chunk];
            if (hooked)
                ptdp_gpt_chunk_set_grad_hook(ch, ex->p.last_bwd_hook, ex->p.hook_ctx[a->chunk]);
            if (ex->split) /* B: the input gradient; the slot stays for W */
                ptdp_gpt_chunk_bwd_input(ch, slot, dy, dx);
            else
                ptdp_gpt_chunk_bwd(ch, slot, dy, dx);
            if (hooked) ptdp_gpt_chunk_set_grad_hook(ch, NULL, NULL);
            record(ex, PTDP_EV_BWD, t0, a, iteration);
            if (!ex->split) {
                ex->slot_used[a->chunk * ex->slots + slot] = 0;
                ex->inflight[a->chunk]--;
            }
            if (dx) send_to(ex, dx, &out, PTDP_ACT_BWD, a->microbatch, req);
        }
    }
    flush(ex, iteration, 1);
}

void ptdp_executor_run_forward(ptdp_executor *ex, const int32_t *tokens, int64_t b, int64_t s,
                               int64_t iteration, double *loss_sum) {
    const ptdp_schedule_params *sp = &ex->p.sched;
    const int r = ex->p.pp_rank;
    *loss_sum = 0.0;
    use_list(ex, 1);
    ex->untraced = 1;
    post_recv(ex, 0);
    for (int i = 0; i < ex->nacts; i++) {
        const ptdp_action *a = &ex->acts[i];
        progress_sends(ex);
        ptdp_p2p in, out;
        ptdp_action_p2p(sp, r, a, &in, &out);
        ptdp_activity_phase("evaluation");
        const float *x =
            in.peer_rank >= 0 ? recv_from(ex, &in, PTDP_ACT_FWD, a->microbatch, i, -1) : NULL;
        const int slot = take_slot(ex, a->chunk); /* free again once the forward is done */
        ptdp_comm_req *req = NULL;
        float *y = out.peer_rank >= 0 ? next_send_buf(ex, PTDP_ACT_FWD, &req) : NULL;
        double ls = 0.0;
        ptdp_gpt_chunk_fwd(ex->p.chunks[a->chunk], slot,
                           tokens ? tokens + (int64_t)a->microbatch * b * (s + 1) : NULL, x, y,
                           0.0f, &ls, iteration, a->microbatch);
        ex->slot_used[a->chunk * ex->slots + slot] = 0;
        *loss_sum += ls;
        if (y) send_to(ex, y, &out, PTDP_ACT_FWD, a->microbatch, req);
    }
    flush(ex, iteration, 0);
    ex->untraced = 0;
    use_list(ex, 0);
    ex->next_recv = ex->nrecv;
}

int64_t ptdp__executor_events(const ptdp_executor *ex, const ptdp_event **events) {
    *events = ex->events;
    return ex->nevents;
}
