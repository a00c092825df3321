/* executor.c - one pipeline rank's iteration: walk the schedule, move
 * activations and gradients between stages with non-blocking MPI, run the
 * chunks' forward and backward, keep a trace. */
#include "pipeline/executor.h"

#include <stdlib.h>
#include <string.h>

struct ptdp_executor {
    ptdp_executor_params p;
    ptdp_action *acts;   /* this rank's list */
    int nacts;
    int64_t msg;         /* floats per message: b*s*h */
    float *recv_buf;     /* [msg] */
    float *send_bufs;    /* [2][v][m][msg] */
    ptdp_comm_req *send_reqs; /* [2][v][m] */
    int *slot_of;        /* [v][m]: activation slot of (chunk, micro-batch) */
    int *slot_used;      /* [v][slots] */
    int slots;           /* per chunk (the largest of any chunk) */
    int inflight[64], peak[64]; /* per chunk: now, most so far */
    int last_bwd[64];           /* index in acts of chunk c's last backward */
    double epoch;
    ptdp_event *events;
    int64_t nevents;
};

/* With scatter/gather a message is this TP rank's 1/t slice of the
 * activation (identical on every TP rank), the rest comes by all-gather. */
static int sliced(const ptdp_executor *ex) { return ex->p.scatter_gather && ex->p.tensor && ex->p.tensor->size > 1; }

int ptdp_executor_init(ptdp_executor **out, const ptdp_executor_params *p) {
    *out = NULL;
    ptdp_executor *ex = calloc(1, sizeof *ex);
    if (!ex) return ptdp_errorf(PTDP_ENOMEM, "out of memory for the pipeline executor");
    ex->p = *p;
    const int m = p->sched.m, v = p->sched.v;
    ex->nacts = ptdp_schedule_len(&p->sched);
    ex->msg = p->tokens_per_mb * p->hidden;
    PTDP_ASSERT(!sliced(ex) || ex->msg % p->tensor->size == 0);
    ex->slots = 0;
    for (int c = 0; c < v; c++) {
        int k = ptdp_schedule_chunk_inflight(&p->sched, p->pp_rank, c);
        ex->slots = k > ex->slots ? k : ex->slots;
    }
    PTDP_ASSERT(v <= 64);
    ex->acts = calloc((size_t)ex->nacts, sizeof(ptdp_action));
    ex->recv_buf = malloc(sizeof(float) * (size_t)ex->msg);
    ex->send_bufs = p->sched.p > 1 ? malloc(sizeof(float) * (size_t)(2 * v * m) * (size_t)ex->msg) : NULL;
    ex->send_reqs = calloc((size_t)(2 * v * m), sizeof(ptdp_comm_req));
    ex->slot_of = calloc((size_t)(v * m), sizeof(int));
    ex->slot_used = calloc((size_t)(v * ex->slots), sizeof(int));
    ex->events = p->max_events ? calloc((size_t)p->max_events, sizeof(ptdp_event)) : NULL;
    if (!ex->acts || !ex->recv_buf || (p->sched.p > 1 && !ex->send_bufs) || !ex->send_reqs || !ex->slot_of ||
        !ex->slot_used || (p->max_events && !ex->events)) {
        int64_t floats = 2 * v * m * ex->msg;
        ptdp_executor_free(ex);
        return ptdp_errorf(PTDP_ENOMEM, "out of memory for the pipeline's send buffers (%lld floats)", (long long)floats);
    }
    int n = 0;
    int rc = ptdp_schedule_build(&p->sched, p->pp_rank, ex->acts, ex->nacts, &n);
    PTDP_ASSERT(rc == PTDP_OK && n == ex->nacts);
    for (int i = 0; i < 2 * v * m; i++) ex->send_reqs[i] = PTDP_COMM_REQ_NULL;
    for (int i = 0; i < ex->nacts; i++)
        if (ex->acts[i].kind == PTDP_ACT_BWD) ex->last_bwd[ex->acts[i].chunk] = i;
    ex->epoch = ptdp_now();
    *out = ex;
    return PTDP_OK;
}

void ptdp_executor_free(ptdp_executor *ex) {
    if (!ex) return;
    free(ex->acts);
    free(ex->recv_buf);
    free(ex->send_bufs);
    free(ex->send_reqs);
    free(ex->slot_of);
    free(ex->slot_used);
    free(ex->events);
    free(ex);
}

int ptdp_executor_peak_inflight(const ptdp_executor *ex, int chunk) { return ex->peak[chunk]; }

int ptdp_schedule_chunk_inflight(const ptdp_schedule_params *sp, int rank, int chunk) {
    int n = ptdp_schedule_len(sp), got = 0, now = 0, most = 0;
    ptdp_action *acts = malloc(sizeof(ptdp_action) * (size_t)n);
    PTDP_ASSERT(acts && ptdp_schedule_build(sp, rank, acts, n, &got) == PTDP_OK);
    for (int i = 0; i < got; i++)
        if (acts[i].chunk == chunk) {
            now += acts[i].kind == PTDP_ACT_FWD ? 1 : -1;
            most = now > most ? now : most;
        }
    free(acts);
    return most;
}

double ptdp_executor_now(const ptdp_executor *ex) { return ptdp_now() - ex->epoch; }

void ptdp_executor_record(ptdp_executor *ex, int kind, double t0, double t1, int64_t iteration) {
    if (!ex->events || ex->nevents >= ex->p.max_events) return;
    ex->events[ex->nevents++] = (ptdp_event){t0, t1 - t0, kind, -1, -1, (int)iteration};
}

static void record(ptdp_executor *ex, int kind, double t0, const ptdp_action *a, int64_t it) {
    if (!ex->events || ex->nevents >= ex->p.max_events) return;
    ex->events[ex->nevents++] = (ptdp_event){t0, ptdp_executor_now(ex) - t0, kind, a->microbatch, a->chunk, (int)it};
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

static float *send_buf(ptdp_executor *ex, int kind, int chunk, int mb) {
    const int m = ex->p.sched.m, v = ex->p.sched.v;
    return ex->send_bufs + ((int64_t)(kind * v + chunk) * m + mb) * ex->msg;
}
static ptdp_comm_req *send_req(ptdp_executor *ex, int kind, int chunk, int mb) {
    const int m = ex->p.sched.m, v = ex->p.sched.v;
    return &ex->send_reqs[(kind * v + chunk) * m + mb];
}

static void recv_from(ptdp_executor *ex, const ptdp_p2p *peer, int kind, int mb, int stage, const ptdp_action *a,
                      int64_t it) {
    double t0 = ptdp_executor_now(ex);
    ptdp_comm_req req;
    const int tag = ptdp_p2p_tag(&ex->p.sched, kind, mb, stage);
    if (sliced(ex)) {
        const int64_t n = ex->msg / ex->p.tensor->size;
        ptdp_irecv_f32(ex->p.pipeline, ex->recv_buf + ex->p.tensor->rank * n, n, peer->peer_rank, tag, &req);
        ptdp_wait(&req);
        ptdp_allgather_f32(ex->p.tensor, ex->recv_buf, n);
    } else {
        ptdp_irecv_f32(ex->p.pipeline, ex->recv_buf, ex->msg, peer->peer_rank, tag, &req);
        ptdp_wait(&req);
    }
    record(ex, PTDP_EV_RECV, t0, a, it);
}

static void send_to(ptdp_executor *ex, const float *buf, const ptdp_p2p *peer, int kind, int mb, ptdp_comm_req *req) {
    const int tag = ptdp_p2p_tag(&ex->p.sched, kind, mb, peer->peer_stage);
    if (sliced(ex)) {
        const int64_t n = ex->msg / ex->p.tensor->size;
        ptdp_isend_f32(ex->p.pipeline, buf + ex->p.tensor->rank * n, n, peer->peer_rank, tag, req);
    } else {
        ptdp_isend_f32(ex->p.pipeline, buf, ex->msg, peer->peer_rank, tag, req);
    }
}

void ptdp_executor_run(ptdp_executor *ex, const int32_t *tokens, int64_t b, int64_t s, float loss_scale,
                       int64_t iteration, int64_t mb_base, double *loss_sum) {
    const ptdp_schedule_params *sp = &ex->p.sched;
    const int r = ex->p.pp_rank, m = sp->m;
    *loss_sum = 0.0;
    for (int i = 0; i < ex->nacts; i++) {
        const ptdp_action *a = &ex->acts[i];
        ptdp_gpt_chunk *ch = ex->p.chunks[a->chunk];
        const int stage = ptdp_schedule_stage(sp, r, a->chunk);
        const int32_t *tok = tokens ? tokens + (int64_t)a->microbatch * b * (s + 1) : NULL;
        ptdp_p2p in, out;
        ptdp_action_p2p(sp, r, a, &in, &out);
        if (a->kind == PTDP_ACT_FWD) {
            if (in.peer_rank >= 0) recv_from(ex, &in, PTDP_ACT_FWD, a->microbatch, stage, a, iteration);
            int slot = take_slot(ex, a->chunk);
            if (++ex->inflight[a->chunk] > ex->peak[a->chunk]) ex->peak[a->chunk] = ex->inflight[a->chunk];
            ex->slot_of[a->chunk * m + a->microbatch] = slot;
            float *y = out.peer_rank >= 0 ? send_buf(ex, PTDP_ACT_FWD, a->chunk, a->microbatch) : NULL;
            double ls = 0.0, t0 = ptdp_executor_now(ex);
            ptdp_gpt_chunk_fwd(ch, slot, tok, in.peer_rank >= 0 ? ex->recv_buf : NULL, y, loss_scale, &ls,
                               iteration, mb_base + a->microbatch);
            record(ex, PTDP_EV_FWD, t0, a, iteration);
            *loss_sum += ls;
            if (y) send_to(ex, y, &out, PTDP_ACT_FWD, a->microbatch, send_req(ex, PTDP_ACT_FWD, a->chunk, a->microbatch));
        } else {
            if (in.peer_rank >= 0) recv_from(ex, &in, PTDP_ACT_BWD, a->microbatch, stage, a, iteration);
            int slot = ex->slot_of[a->chunk * m + a->microbatch];
            float *dx = out.peer_rank >= 0 ? send_buf(ex, PTDP_ACT_BWD, a->chunk, a->microbatch) : NULL;
            double t0 = ptdp_executor_now(ex);
            const int hooked = ex->p.last_bwd_hook && i == ex->last_bwd[a->chunk];
            if (hooked) ptdp_gpt_chunk_set_grad_hook(ch, ex->p.last_bwd_hook, ex->p.hook_ctx[a->chunk]);
            ptdp_gpt_chunk_bwd(ch, slot, in.peer_rank >= 0 ? ex->recv_buf : NULL, dx);
            if (hooked) ptdp_gpt_chunk_set_grad_hook(ch, NULL, NULL);
            record(ex, PTDP_EV_BWD, t0, a, iteration);
            ex->slot_used[a->chunk * ex->slots + slot] = 0;
            ex->inflight[a->chunk]--;
            if (dx) send_to(ex, dx, &out, PTDP_ACT_BWD, a->microbatch, send_req(ex, PTDP_ACT_BWD, a->chunk, a->microbatch));
        }
    }
    /* flush: every send must be delivered before the buffers are reused */
    double t0 = ptdp_executor_now(ex);
    for (int i = 0; i < 2 * sp->v * m; i++)
        ptdp_wait(&ex->send_reqs[i]);
    ptdp_executor_record(ex, PTDP_EV_SEND_WAIT, t0, ptdp_executor_now(ex), iteration);
}

static const char *event_name(int kind) {
    static const char *names[] = {"forward", "backward", "recv wait", "send wait", "optimizer", "grad reduce"};
    return names[kind];
}

int ptdp_executor_write_trace(ptdp_executor *ex, ptdp_group *world, int world_rank, int dp, int pp, int tp,
                              const char *path) {
    int64_t counts[4096];
    PTDP_ASSERT(world->size <= 4096);
    /* prefix every rank's events with its coordinates */
    int64_t nbytes = (int64_t)sizeof(int) * 4 + ex->nevents * (int64_t)sizeof(ptdp_event);
    char *mine = malloc((size_t)nbytes);
    PTDP_ASSERT(mine);
    int hdr[4] = {world_rank, dp, pp, tp};
    memcpy(mine, hdr, sizeof hdr);
    memcpy(mine + sizeof hdr, ex->events, (size_t)ex->nevents * sizeof(ptdp_event));
    char *all = ptdp_gatherv_bytes(world, mine, nbytes, counts, 0);
    free(mine);
    if (world->rank != 0) return PTDP_OK;
    FILE *f = fopen(path, "w");
    if (!f) {
        free(all);
        return ptdp_errorf(PTDP_EIO, "--trace %s: cannot open for writing", path);
    }
    fprintf(f, "{\"traceEvents\":[\n");
    int64_t off = 0;
    int first = 1;
    for (int r = 0; r < world->size; r++) {
        int h[4];
        memcpy(h, all + off, sizeof h);
        int64_t nev = (counts[r] - (int64_t)sizeof h) / (int64_t)sizeof(ptdp_event);
        fprintf(f, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"rank %d [dp %d, pp %d, tp %d]\"}}",
                first ? "" : ",\n", h[0], h[0], h[1], h[2], h[3]);
        first = 0;
        for (int64_t e = 0; e < nev; e++) {
            ptdp_event ev;
            memcpy(&ev, all + off + (int64_t)sizeof h + e * (int64_t)sizeof ev, sizeof ev);
            if (ev.microbatch >= 0)
                fprintf(f, ",\n{\"name\":\"%s %d.%d\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                           "\"args\":{\"iteration\":%d,\"microbatch\":%d,\"chunk\":%d}}",
                        ev.kind == PTDP_EV_FWD ? "F" : ev.kind == PTDP_EV_BWD ? "B" : event_name(ev.kind), ev.microbatch,
                        ev.chunk, event_name(ev.kind), h[0], ev.start * 1e6, ev.dur * 1e6, ev.iteration, ev.microbatch,
                        ev.chunk);
            else
                fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                           "\"args\":{\"iteration\":%d}}",
                        event_name(ev.kind), event_name(ev.kind), h[0], ev.start * 1e6, ev.dur * 1e6, ev.iteration);
        }
        off += counts[r];
    }
    fprintf(f, "\n]}\n");
    free(all);
    if (fclose(f) != 0) return ptdp_errorf(PTDP_EIO, "--trace %s: write failed", path);
    return PTDP_OK;
}
