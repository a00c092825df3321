/* sim.c - discrete-event timing of pipeline schedules: per-action start and
 * end, makespan, bubble fraction and peak stashed activations per rank.
 *
 * Deliberately not here: contention on links (a transfer costs a fixed
 * latency and never queues behind another), per-stage cost differences
 * (embedding on the first stage, loss on the last), memory in bytes, and
 * any dependency on comm or kernels. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

ptdp_sim_costs ptdp_sim_default_costs(void) {
    ptdp_sim_costs c = {.forward = 1.0, .backward = 2.0, .comm = 0.0};
    return c;
}

void ptdp_sim_result_free(ptdp_sim_result *res) {
    if (!res) return;
    free(res->spans);
    free(res->busy);
    free(res->peak_stash);
    memset(res, 0, sizeof *res);
}

static size_t end_idx(const ptdp_schedule_params *sp, int kind, int mb, int stage) {
    return ((size_t)kind * sp->m + (size_t)mb) * (size_t)(sp->p * sp->v) + (size_t)stage;
}

int ptdp_sim_run(const ptdp_schedule *s, const ptdp_sim_costs *costs, ptdp_sim_result *res) {
    memset(res, 0, sizeof *res);
    if (!(costs->forward >= 0 && costs->backward >= 0 && costs->comm >= 0))
        return ptdp_errorf(PTDP_EINVAL, "simulator costs must be non-negative (forward %g, backward %g, comm %g)",
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
    size_t nev = 2 * (size_t)sp->m * (size_t)p * (size_t)sp->v;
    double *end = malloc(sizeof(double) * nev);        /* end time of (kind, mb, stage), or -1 */
    double *free_at = calloc((size_t)p, sizeof(double)); /* when each rank's compute is free */
    int *next = calloc((size_t)p, sizeof(int));
    res->spans = malloc(sizeof(ptdp_sim_span) * (size_t)p * (size_t)s->len);
    res->busy = calloc((size_t)p, sizeof(double));
    res->peak_stash = peak;
    if (!end || !free_at || !next || !res->spans || !res->busy) {
        free(end);
        free(free_at);
        free(next);
        ptdp_sim_result_free(res);
        return ptdp_errorf(PTDP_ENOMEM, "simulator: out of memory");
    }
    res->p = p;
    res->len = s->len;
    for (size_t i = 0; i < nev; i++) end[i] = -1.0;

    /* Replay in rounds like the validator. An action's start depends only on
     * its rank's previous action and its producer, both finished before it
     * is taken, so the order of the rounds does not change any time. */
    int finished = 0;
    while (finished < p) {
        int progress = 0;
        for (int r = 0; r < p; r++) {
            const ptdp_action *acts = ptdp_schedule_rank(s, r);
            while (next[r] < s->len) {
                const ptdp_action *a = &acts[next[r]];
                int k = ptdp_schedule_stage(sp, r, a->chunk);
                ptdp_p2p from;
                ptdp_action_p2p(sp, r, a, &from, NULL);
                double in;
                if (from.peer_rank < 0) {
                    in = a->kind == PTDP_ACT_FWD ? 0.0 : end[end_idx(sp, PTDP_ACT_FWD, a->microbatch, k)];
                } else {
                    in = end[end_idx(sp, a->kind, a->microbatch, from.peer_stage)];
                    if (in < 0) break; /* not produced yet */
                    if (from.peer_rank != r) in += costs->comm;
                }
                double dur = a->kind == PTDP_ACT_FWD ? costs->forward : costs->backward;
                double t0 = free_at[r] > in ? free_at[r] : in;
                ptdp_sim_span *span = &res->spans[(size_t)r * s->len + next[r]];
                span->start = t0;
                span->end = t0 + dur;
                free_at[r] = span->end;
                res->busy[r] += dur;
                end[end_idx(sp, a->kind, a->microbatch, k)] = span->end;
                if (++next[r] == s->len) finished++;
                progress = 1;
            }
        }
        PTDP_ASSERT_MSG(progress, "validated schedule stalled in the simulator");
    }
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
    free(end);
    free(free_at);
    free(next);
    return PTDP_OK;
}
