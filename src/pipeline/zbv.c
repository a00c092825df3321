/* zbv.c - the ZB-V generator (Qi et al., "Zero Bubble Pipeline Parallelism",
 * ICLR 2024, and its V-shape follow-up "Pipeline Parallelism with
 * Controllable Memory"): two model chunks per rank in a V (chunk 0 of rank r
 * is virtual stage r, chunk 1 is stage 2p-1-r), each backward split into B
 * (input gradient) and W (weight gradients).
 *
 * The lists come from a greedy list scheduler in the manner of the paper's
 * heuristic, not from a hard-coded pattern: every rank is played on a clock
 * where a chunk's F, B and W take the integer costs of ptdp_schedule_params
 * (cost_f, cost_b, cost_w; 0 counts as 1, so zeroed params play unit costs;
 * transfers free) and, whenever it is idle, takes the first of
 *   1. a B whose output gradient has arrived (the critical path: the stage
 *      before waits for it); of two, the one whose input came first, chunk 0
 *      on a tie;
 *   2. an F whose input has arrived, if one more stashed activation stays
 *      within the bound; chunk 1 before chunk 0 (finish a micro-batch
 *      before starting a new one);
 *   3. the W of its oldest B (W's fill what would be bubbles);
 * and otherwise waits. Per chunk, F's, B's and W's each run in micro-batch
 * order, so the weight gradients add up in the same order as in every other
 * schedule. The bound is 1F1B's peak activation memory: at most min(2p, 2m)
 * chunk activations stashed (forward done, W not yet) on any rank, i.e. p
 * micro-batches of a whole rank's layers. What comes out is the warm-up of
 * chunk-0 forwards (2p-1 on rank 0), chunk-1 forwards as their inputs come
 * back down the V, a steady state pairing F and B with W's in the gaps, and
 * a cool-down of B's and W's. The play is only how the order is chosen: the
 * executor runs the order whatever the real costs are, and the validator
 * proves it well formed, deadlock-free and within the bound.
 *
 * Why costs: where W is much cheaper than F and B (on CPUs a chunk's W is
 * about 0.65 of its F), an order played with unit costs expects a W to fill
 * a gap as long as an F and leaves steady-state gaps that do not shrink with
 * m; played with the real ratios the W's land where they fit (simulated idle
 * at p = 2, m = 16 with F 3.8, B 3.75, W 2.45 per chunk: 0.075 unit-cost
 * order, 0.024 with costs 6,6,4; docs/schedules.md). The costs must be the
 * same on every rank (each plays every rank and keeps its own list), so they
 * come from the model's shape or the command line, never from timing.
 *
 * Deliberately not here: the ILP-optimal schedules of the paper (a bubble
 * remains in the cool-down, a few per cent of the iteration), per-stage
 * costs (one triple for every chunk: the first and last stage's embedding
 * and loss head are not played), and transfer times. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "pipeline/pipeline.h"

enum { NOT_YET = -1 };

typedef struct {
    const ptdp_schedule_params *sp;
    int *done; /* [3][m][2p] finish time of (kind, micro-batch, stage), NOT_YET */
    int *next; /* [p][3][2] next micro-batch per rank, kind and chunk */
    int *busy; /* [p] the time each rank is free again */
    int *held; /* [p] stashed chunk activations */
    int *len;  /* [p] actions written for rank `rank` / played per rank */
} player;

static int *done_at(player *pl, int kind, int mb, int stage) {
    return &pl->done[((size_t)kind * pl->sp->m + (size_t)mb) * 2 * pl->sp->p + (size_t)stage];
}

static int *next_of(player *pl, int r, int kind, int chunk) {
    return &pl->next[(r * 3 + kind) * 2 + chunk];
}

/* When the input of rank r's next action (kind, chunk) arrived (<= now), or
 * NOT_YET: not arrived, or the chunk has no such action left. */
static int arrived(player *pl, int r, int kind, int chunk, int now) {
    const ptdp_schedule_params *sp = pl->sp;
    const int mb = *next_of(pl, r, kind, chunk), k = ptdp_schedule_stage(sp, r, chunk);
    const int last = 2 * sp->p - 1;
    if (mb >= sp->m) return NOT_YET;
    int t;
    if (kind == PTDP_ACT_FWD)
        t = k == 0 ? 0 : *done_at(pl, PTDP_ACT_FWD, mb, k - 1);
    else if (kind == PTDP_ACT_BWD)
        t = *done_at(pl, k == last ? PTDP_ACT_FWD : PTDP_ACT_BWD, mb, k == last ? k : k + 1);
    else /* W: only after a B of the same chunk */
        t = mb < *next_of(pl, r, PTDP_ACT_BWD, chunk) ? *done_at(pl, PTDP_ACT_BWD, mb, k) : NOT_YET;
    return t != NOT_YET && t <= now ? t : NOT_YET;
}

/* Rule order of the file comment: the chunk rank r acts on for `kind`, or -1. */
static int pick(player *pl, int r, int kind, int now, int limit) {
    const int t0 = arrived(pl, r, kind, 0, now), t1 = arrived(pl, r, kind, 1, now);
    if (kind == PTDP_ACT_FWD) {
        if (pl->held[r] >= limit) return -1;
        return t1 != NOT_YET ? 1 : t0 != NOT_YET ? 0 : -1;
    }
    if (t0 == NOT_YET) return t1 == NOT_YET ? -1 : 1;
    return t1 != NOT_YET && t1 < t0 ? 1 : 0;
}

int ptdp__schedule_zbv_build(const ptdp_schedule_params *sp, int rank, ptdp_action *out) {
    const int p = sp->p, m = sp->m, per_rank = 6 * m;
    const int limit = ptdp_schedule_max_inflight(sp, rank);
    const size_t ndone = (size_t)3 * m * 2 * p;
    int *mem = malloc(sizeof(int) * (ndone + (size_t)p * (6 + 3)));
    if (!mem) return ptdp_errorf(PTDP_ENOMEM, "zb-v schedule: out of memory");
    player pl = {.sp = sp, .done = mem};
    pl.next = pl.done + ndone;
    pl.busy = pl.next + 6 * p;
    pl.held = pl.busy + p;
    pl.len = pl.held + p;
    for (size_t i = 0; i < ndone; i++) pl.done[i] = NOT_YET;
    memset(pl.next, 0, sizeof(int) * (size_t)p * 9);
    static const int order[3] = {PTDP_ACT_BWD, PTDP_ACT_FWD, PTDP_ACT_WGT};
    int cost[PTDP_ACT_COUNT]; /* 0 is unit cost: zeroed params give the unit-cost lists */
    ptdp_schedule_played_costs(sp, cost);
    int finished = 0, rc = PTDP_OK;
    for (int now = 0; finished < p;) {
        /* Nothing changes between two finishing times (an input arrives when
         * its producer finishes), so the clock jumps to the next one; with
         * unit costs that is now + 1, the old step. */
        int next = -1;
        for (int r = 0; r < p; r++) {
            if (pl.len[r] < per_rank && pl.busy[r] <= now) {
                int kind = -1, chunk = -1;
                for (int i = 0; i < 3 && chunk < 0; i++) {
                    kind = order[i];
                    chunk = pick(&pl, r, kind, now, limit);
                }
                if (chunk >= 0) {
                    int *nx = next_of(&pl, r, kind, chunk);
                    const ptdp_action a = {.kind = kind, .microbatch = *nx, .chunk = chunk};
                    ++*nx;
                    pl.held[r] += kind == PTDP_ACT_FWD ? 1 : kind == PTDP_ACT_WGT ? -1 : 0;
                    pl.busy[r] = now + cost[kind];
                    *done_at(&pl, kind, a.microbatch, ptdp_schedule_stage(sp, r, chunk)) =
                        pl.busy[r];
                    if (r == rank) out[pl.len[r]] = a;
                    if (++pl.len[r] == per_rank) finished++;
                }
            }
            /* finished ranks count too: their last outputs still arrive */
            if (pl.busy[r] > now && (next < 0 || pl.busy[r] < next)) next = pl.busy[r];
        }
        if (finished == p) break;
        if (next < 0) { /* nobody acts and nobody is still busy */
            rc = ptdp_errorf(PTDP_EINVAL,
                             "zb-v: the greedy scheduler found no order for "
                             "--pipeline-model-parallel-size %d and --num-microbatches %d",
                             p, m);
            break;
        }
        now = next;
    }
    free(mem);
    return rc;
}
