/* sim.c - discrete-event timing of pipeline schedules: per-action start and
 * end, makespan, bubble fraction and peak stashed activations per rank.
 *
 * Per-stage costs (embedding on the first stage, loss on the last) come
 * from ptdp_sim_costs' optional per virtual stage arrays.
 * Deliberately not here: contention on links (a transfer costs a fixed
 * latency and never queues behind another), memory in bytes, and any
 * dependency on comm or kernels. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

ptdp_sim_costs ptdp_sim_default_costs(void) {
    ptdp_sim_costs c = {.forward = 1.0,
                        .backward = 2.0,
                        .weight = 1.0,
                        .comm = 0.0,
                        .stage_forward = NULL,
                        .stage_backward = NULL,
                        .stage_weight = NULL};
    return c;
}

void ptdp_sim_result_free(ptdp_sim_result *res) {
    if (!res) return;
    free(res->spans);
    free(res->busy);
    free(res->peak_stash);
    memset(res, 0, sizeof *res);
}

/* The replay's callback: an action starts when its rank is free and its
 * input has arrived (the producer's end plus the transfer cost). */
typedef struct {
    const ptdp_schedule *s;
    const ptdp_sim_costs *costs;
    ptdp_sim_result *res;
    double *free_at; /* [p] when each rank's compute is free */
} sim_ctx;

static void sim_step(void *ctx, const ptdp_replay_step *st) {
    sim_ctx *c = ctx;
    const int len = c->s->len;
    double in = 0.0;
    if (st->producer_rank >= 0) {
        in = c->res->spans[(size_t)st->producer_rank * len + st->producer_index].end;
        if (st->from.peer_rank >= 0 && st->from.peer_rank != st->rank) in += c->costs->comm;
    }
    const ptdp_sim_costs *k = c->costs;
    const int kind = st->action->kind;
    const int stage = ptdp_schedule_stage(&c->s->params, st->rank, st->action->chunk);
    double dur = kind == PTDP_ACT_FWD
                     ? (k->stage_forward ? k->stage_forward[stage] : k->forward)
                     : (k->stage_backward ? k->stage_backward[stage] : k->backward);
    if (ptdp_schedule_splits_backward(&c->s->params) && kind != PTDP_ACT_FWD) {
        const double w = k->stage_weight ? k->stage_weight[stage] : k->weight;
        dur = kind == PTDP_ACT_WGT ? w : dur - w; /* B is the backward without W */
    }
    double t0 = c->free_at[st->rank] > in ? c->free_at[st->rank] : in;
    ptdp_sim_span *span = &c->res->spans[(size_t)st->rank * len + st->index];
    span->start = t0;
    span->end = t0 + dur;
    c->free_at[st->rank] = span->end;
    c->res->busy[st->rank] += dur;
}

int ptdp_sim_run(const ptdp_schedule *s, const ptdp_sim_costs *costs, ptdp_sim_result *res) {
    memset(res, 0, sizeof *res);
    const int stages = s->params.p * s->params.v;
    /* W's cost is the part of the backward it takes, so only schedules that
     * split the backward look at it */
    const int split = ptdp_schedule_splits_backward(&s->params);
    for (int k = 0; k < stages; k++) {
        const double b = costs->stage_backward ? costs->stage_backward[k] : costs->backward;
        const double w = costs->stage_weight ? costs->stage_weight[k] : costs->weight;
        if ((costs->stage_forward && !(costs->stage_forward[k] >= 0)) || !(b >= 0) ||
            (split && !(w >= 0 && w <= b)))
            return ptdp_errorf(PTDP_EINVAL,
                               "simulator: stage %d has a negative cost%s (forward %g, backward "
                               "%g, weight %g)",
                               k, split ? " or weight > backward" : "",
                               costs->stage_forward ? costs->stage_forward[k] : costs->forward, b,
                               w);
    }
    if (!(costs->forward >= 0 && costs->backward >= 0 && costs->comm >= 0))
        return ptdp_errorf(
            PTDP_EINVAL, "simulator costs must be non-negative (forward %g, backward %g, comm %g)",
            costs->forward, costs->backward, costs->comm);
    const ptdp_schedule_params *sp = &s->params;
    int p = sp->p;
    /* Validation first: the replay below assumes complete, deadlock-free lists. */
    int *peak = malloc(sizeof(int) * (size_t)p);
    if (!peak) return ptdp_errorf(PTDP_ENOMEM, "simulator: out of memory");
    int rc = ptdp_schedule_validate(s, peak);
    if (rc) {
        free(peak);
        return rc;
    }
    double *free_at = calloc((size_t)p, sizeof(double));
    res->spans = malloc(sizeof(ptdp_sim_span) * (size_t)p * (size_t)s->len);
    res->busy = calloc((size_t)p, sizeof(double));
    res->peak_stash = peak;
    if (!free_at || !res->spans || !res->busy) {
        free(free_at);
        ptdp_sim_result_free(res);
        return ptdp_errorf(PTDP_ENOMEM, "simulator: out of memory");
    }
    res->p = p;
    res->len = s->len;
    /* An action's start depends only on its rank's previous action and its
     * producer, both taken before it, so the replay's order of rounds does
     * not change any time. */
    sim_ctx ctx = {.s = s, .costs = costs, .res = res, .free_at = free_at};
    rc = ptdp_schedule_replay(s, 0, sim_step, &ctx, NULL);
    PTDP_ASSERT_MSG(rc == PTDP_OK, "validated schedule stalled in the simulator");
    res->makespan = 0;
    res->ideal = 0;
    double idle = 0;
    for (int r = 0; r < p; r++) {
        if (free_at[r] > res->makespan) res->makespan = free_at[r];
        if (res->busy[r] > res->ideal) res->ideal = res->busy[r];
    }
    for (int r = 0; r < p; r++) idle += res->makespan - res->busy[r];
    res->bubble_fraction = res->ideal > 0 ? (res->makespan - res->ideal) / res->ideal : 0.0;
    res->idle_fraction = res->makespan > 0 ? idle / (p * res->makespan) : 0.0;
    free(free_at);
    return PTDP_OK;
}
