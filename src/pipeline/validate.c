/* validate.c - proves a set of per-rank action lists well formed and free of
 * deadlock (see ptdp_schedule_validate in schedule.h for the exact rules and
 * the communication model: eager non-blocking sends, blocking receives).
 *
 * Deliberately not here: a rendezvous (synchronous-send) model, which would
 * also constrain the order in which a rank posts its sends; the executor
 * posts every send non-blocking and waits for it lazily, so eager semantics
 * are the ones it relies on. Timing is plan/sim.c's business. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "pipeline/pipeline.h"

/* fpos, bpos, wpos: [m*v] scratch. With a split backward a stashed
 * activation lives until its W (which reads it), otherwise until its B. */
static int check_rank(const ptdp_schedule *s, int r, int *fpos, int *bpos, int *wpos,
                      int *peak_out) {
    const ptdp_schedule_params *sp = &s->params;
    const ptdp_action *acts = ptdp_schedule_rank(s, r);
    int total = sp->m * sp->v, inflight = 0, peak = 0, limit = ptdp_schedule_max_inflight(sp, r);
    const int split = ptdp_schedule_splits_backward(sp);
    char buf[32];
    for (int i = 0; i < total; i++) fpos[i] = bpos[i] = wpos[i] = -1;
    for (int i = 0; i < s->len; i++) {
        const ptdp_action *a = &acts[i];
        if (a->kind < 0 || a->kind >= (split ? PTDP_ACT_COUNT : PTDP_ACT_WGT) ||
            a->microbatch < 0 || a->microbatch >= sp->m || a->chunk < 0 || a->chunk >= sp->v)
            return ptdp_errorf(
                PTDP_EINVAL,
                "rank %d action %d (kind %d, micro-batch %d, chunk %d) is out of range", r, i,
                a->kind, a->microbatch, a->chunk);
        int id = a->microbatch * sp->v + a->chunk;
        ptdp_action_str(sp, a, buf);
        if (a->kind == PTDP_ACT_FWD) {
            if (fpos[id] >= 0)
                return ptdp_errorf(PTDP_EINVAL, "rank %d runs %s twice (actions %d and %d)", r, buf,
                                   fpos[id], i);
            fpos[id] = i;
            if (++inflight > peak) peak = inflight;
            if (inflight > limit)
                return ptdp_errorf(
                    PTDP_EINVAL,
                    "rank %d holds %d stashed activations at action %d (%s); the %s schedule "
                    "allows %d",
                    r, inflight, i, buf, ptdp_schedule_kind_name(sp->kind), limit);
        } else if (a->kind == PTDP_ACT_WGT) {
            if (wpos[id] >= 0)
                return ptdp_errorf(PTDP_EINVAL, "rank %d runs %s twice (actions %d and %d)", r, buf,
                                   wpos[id], i);
            if (bpos[id] < 0)
                return ptdp_errorf(PTDP_EINVAL,
                                   "rank %d runs weight gradients %s (action %d) before the "
                                   "backward B of the same micro-batch",
                                   r, buf, i);
            wpos[id] = i;
            inflight--;
        } else {
            if (bpos[id] >= 0)
                return ptdp_errorf(PTDP_EINVAL, "rank %d runs %s twice (actions %d and %d)", r, buf,
                                   bpos[id], i);
            if (fpos[id] < 0)
                return ptdp_errorf(PTDP_EINVAL,
                                   "rank %d runs backward %s (action %d) before its forward", r,
                                   buf, i);
            bpos[id] = i;
            if (!split) inflight--;
        }
    }
    for (int id = 0; id < total; id++) {
        ptdp_action a = {fpos[id] < 0   ? PTDP_ACT_FWD
                         : bpos[id] < 0 ? PTDP_ACT_BWD
                                        : PTDP_ACT_WGT,
                         id / sp->v, id % sp->v};
        if (fpos[id] < 0 || bpos[id] < 0 || (split && wpos[id] < 0))
            return ptdp_errorf(PTDP_EINVAL, "rank %d never runs %s", r,
                               ptdp_action_str(sp, &a, buf));
    }
    if (peak_out) *peak_out = peak;
    return PTDP_OK;
}

/* The replay (replay.c) with eager sends; on deadlock, one message naming
 * every blocked rank and whom it waits for. */
static int check_deadlock(const ptdp_schedule *s) {
    const ptdp_schedule_params *sp = &s->params;
    int *stuck = malloc(sizeof(int) * (size_t)sp->p);
    if (!stuck) return ptdp_errorf(PTDP_ENOMEM, "schedule validation: out of memory");
    int rc = ptdp_schedule_replay(s, 0, NULL, NULL, stuck);
    if (rc == PTDP_EINVAL) {
        char msg[512], buf[32];
        int off = 0;
        for (int r = 0; r < sp->p && off < (int)sizeof msg - 80; r++) {
            if (stuck[r] == s->len) continue;
            const ptdp_action *a = &ptdp_schedule_rank(s, r)[stuck[r]];
            ptdp_p2p from;
            ptdp_action_p2p(sp, r, a, &from, NULL);
            ptdp_action_str(sp, a, buf);
            off +=
                snprintf(msg + off, sizeof msg - (size_t)off, "%srank %d at %s waits for rank %d",
                         off ? "; " : "", r, buf, from.peer_rank);
        }
        rc = ptdp_errorf(PTDP_EINVAL, "schedule deadlocks: %s", msg);
    }
    free(stuck);
    return rc;
}

int ptdp_schedule_validate(const ptdp_schedule *s, int *peak) {
    const ptdp_schedule_params *sp = &s->params;
    int rc = ptdp_schedule_check(sp);
    if (rc) return rc;
    if (s->len != ptdp_schedule_len(sp))
        return ptdp_errorf(PTDP_EINVAL, "schedule has %d actions per rank, expected %d", s->len,
                           ptdp_schedule_len(sp));
    int total = sp->m * sp->v;
    int *pos = malloc(sizeof(int) * 3 * (size_t)total);
    if (!pos) return ptdp_errorf(PTDP_ENOMEM, "schedule validation: out of memory");
    for (int r = 0; r < sp->p && !rc; r++)
        rc = check_rank(s, r, pos, pos + total, pos + 2 * total, peak ? &peak[r] : NULL);
    free(pos);
    if (rc) return rc;
    return check_deadlock(s);
}
