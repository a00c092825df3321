/* replay.c - the replay of a set of per-rank action lists under the
 * executor's communication model (see ptdp_schedule_replay): the validator's
 * deadlock check, the simulator's timing (plan/sim.c) and the executor's
 * send-buffer sizing all walk the lists through this one loop.
 *
 * Deliberately not here: timing (the callback's business) and a rendezvous
 * model of the receive side (receives are posted right before the action
 * that needs them and waited for, which is what "taken" means here). */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "pipeline/pipeline.h"

/* Index of (kind, micro-batch, virtual stage). */
static size_t ev_idx(const ptdp_schedule_params *sp, int kind, int mb, int stage) {
    return ((size_t)kind * sp->m + (size_t)mb) * (size_t)(sp->p * sp->v) + (size_t)stage;
}

typedef struct {
    const ptdp_schedule *s;
    int K;         /* send ring size, 0: unbounded */
    int *pos;      /* [kinds*m*p*v]: rank*len + index of the action that ran (kind, mb, stage),
                      -1: not yet */
    int *next;     /* [p] */
    int *sent;     /* [p][2] messages sent per direction */
    int64_t *ring; /* [p][2][K] ev_idx of the action that receives the slot's message, -1: free */
} replay;

/* Whether action a of rank r can be taken now; fills the step. */
static int ready(replay *rp, int r, const ptdp_action *a, ptdp_replay_step *st) {
    const ptdp_schedule_params *sp = &rp->s->params;
    ptdp_p2p to;
    ptdp_action_p2p(sp, r, a, &st->from, &to);
    const int k = ptdp_schedule_stage(sp, r, a->chunk);
    int prod;
    if (a->kind == PTDP_ACT_WGT) /* its own backward */
        prod = rp->pos[ev_idx(sp, PTDP_ACT_BWD, a->microbatch, k)];
    else if (st->from.peer_rank < 0) /* first stage's forward, or last stage's backward */
        prod = a->kind == PTDP_ACT_FWD ? -2 : rp->pos[ev_idx(sp, PTDP_ACT_FWD, a->microbatch, k)];
    else
        prod = rp->pos[ev_idx(sp, a->kind, a->microbatch, st->from.peer_stage)];
    if (prod == -1) return 0;
    if (rp->K && to.peer_rank >= 0) {
        int64_t occ =
            rp->ring[((int64_t)r * 2 + a->kind) * rp->K + rp->sent[r * 2 + a->kind] % rp->K];
        if (occ >= 0 && rp->pos[occ] < 0)
            return 0; /* its buffer still holds an unreceived message */
    }
    st->producer_rank = prod < 0 ? -1 : prod / rp->s->len;
    st->producer_index = prod < 0 ? -1 : prod % rp->s->len;
    return 1;
}

static void take(replay *rp, int r, const ptdp_action *a) {
    const ptdp_schedule_params *sp = &rp->s->params;
    ptdp_p2p from, to;
    ptdp_action_p2p(sp, r, a, &from, &to);
    rp->pos[ev_idx(sp, a->kind, a->microbatch, ptdp_schedule_stage(sp, r, a->chunk))] =
        r * rp->s->len + rp->next[r];
    if (rp->K && to.peer_rank >= 0) {
        int *n = &rp->sent[r * 2 + a->kind];
        rp->ring[((int64_t)r * 2 + a->kind) * rp->K + *n % rp->K] =
            (int64_t)ev_idx(sp, a->kind, a->microbatch, to.peer_stage);
        ++*n;
    }
}

int ptdp_schedule_replay(const ptdp_schedule *s, int send_buffers, ptdp_replay_fn fn, void *ctx,
                         int *stuck) {
    const ptdp_schedule_params *sp = &s->params;
    const int p = sp->p;
    const size_t nev = PTDP_ACT_COUNT * (size_t)sp->m * (size_t)p * (size_t)sp->v;
    replay rp = {
        .s = s,
        .K = send_buffers,
        .pos = malloc(sizeof(int) * nev),
        .next = calloc((size_t)p, sizeof(int)),
        .sent = calloc((size_t)p * 2, sizeof(int)),
        .ring =
            send_buffers ? malloc(sizeof(int64_t) * (size_t)p * 2 * (size_t)send_buffers) : NULL,
    };
    int rc = PTDP_OK;
    if (!rp.pos || !rp.next || !rp.sent || (send_buffers && !rp.ring)) {
        rc = ptdp_errorf(PTDP_ENOMEM, "schedule replay: out of memory");
        goto out;
    }
    for (size_t i = 0; i < nev; i++) rp.pos[i] = -1;
    for (int64_t i = 0; i < (int64_t)p * 2 * send_buffers; i++) rp.ring[i] = -1;
    /* In rounds: each rank runs as far as it can. A step depends only on
     * actions already taken, so the order of the rounds changes nothing a
     * callback can observe through producer indices. */
    int finished = 0, progress = 1;
    while (progress && finished < p) {
        progress = 0;
        for (int r = 0; r < p; r++) {
            const ptdp_action *acts = ptdp_schedule_rank(s, r);
            ptdp_replay_step st;
            while (rp.next[r] < s->len && ready(&rp, r, &acts[rp.next[r]], &st)) {
                st.rank = r;
                st.index = rp.next[r];
                st.action = &acts[rp.next[r]];
                take(&rp, r, st.action);
                if (fn) fn(ctx, &st);
                if (++rp.next[r] == s->len) finished++;
                progress = 1;
            }
        }
    }
    if (finished < p) rc = PTDP_EINVAL;
    if (stuck)
        for (int r = 0; r < p; r++) stuck[r] = rp.next[r];
out:
    free(rp.pos);
    free(rp.next);
    free(rp.sent);
    free(rp.ring);
    return rc;
}

int ptdp_schedule_send_buffers(const ptdp_schedule *s) {
    const int most = s->params.m * s->params.v;
    int lo = 1, hi = most; /* deadlock-freedom is monotone in K; K = m*v never waits */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        int rc = ptdp_schedule_replay(s, mid, NULL, NULL, NULL);
        PTDP_ASSERT(rc != PTDP_ENOMEM);
        if (rc == PTDP_OK)
            hi = mid;
        else
            lo = mid + 1;
    }
    int k = lo + 1 < most ? lo + 1 : most;
    /* the search assumes each direction is received in the order it is sent
     * (true of the generated schedules); never trust it blindly */
    return ptdp_schedule_replay(s, k, NULL, NULL, NULL) == PTDP_OK ? k : most;
}
