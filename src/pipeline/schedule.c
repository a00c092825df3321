/* schedule.c - generators of per-rank action lists for GPipe, 1F1B
 * (PipeDream-Flush), interleaved 1F1B and ZB-H1 (zero bubble with 1F1B's
 * peak memory; ZB-V's generator is zbv.c), the name tables, the mapping
 * between (rank, chunk) and virtual stage, and the point-to-point transfers
 * each action implies.
 *
 * Deliberately not here: validation (validate.c), timing (plan/sim.c), and
 * anything that touches MPI or tensors. Generators allocate nothing except
 * ptdp_schedule_init, which allocates the [p][2*m*v] action array once. */
#include "pipeline/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static const char *const act_short[] = {
#define PTDP__X(e, s, l) s,
    PTDP_ACTION_KINDS(PTDP__X)
#undef PTDP__X
};
static const char *const act_long[] = {
#define PTDP__X(e, s, l) l,
    PTDP_ACTION_KINDS(PTDP__X)
#undef PTDP__X
};
static const char *const sched_names[] = {
#define PTDP__X(e, s) s,
    PTDP_SCHEDULE_KINDS(PTDP__X)
#undef PTDP__X
};

ptdp_schedule_params ptdp_schedule_default_params(void) {
    ptdp_schedule_params sp = {.p = 1, .m = 1, .v = 1, .kind = -1};
    return sp;
}

void ptdp_schedule_scale_costs(double f, double b, double w, ptdp_schedule_params *sp) {
    const double t[3] = {f, b, w};
    int *out[3] = {&sp->cost_f, &sp->cost_b, &sp->cost_w};
    double lo = 0;
    for (int i = 0; i < 3; i++) {
        if (!(t[i] >= 0 && t[i] <= 1e300)) lo = -1; /* negative, NaN or infinite */
        if (lo >= 0 && t[i] > 0 && (lo == 0 || t[i] < lo)) lo = t[i];
    }
    /* 4 steps for the cheapest: ratios survive to within an eighth, and the
     * clock stays short (m * (F + B + W) steps per chunk) */
    for (int i = 0; i < 3; i++) {
        const double x = lo > 0 ? 4.0 * t[i] / lo + 0.5 : 0;
        *out[i] = lo <= 0                      ? 0
                  : x < 1                      ? 1
                  : x > PTDP_SCHEDULE_MAX_COST ? PTDP_SCHEDULE_MAX_COST
                                               : (int)x;
    }
}

void ptdp_schedule_flop_costs(int64_t seq_length, int64_t hidden, int64_t ffn,
                              ptdp_schedule_params *sp) {
    const double s = (double)seq_length, h = (double)hidden;
    const double fh = (double)(ffn > 0 ? ffn : 4 * hidden);
    const double G = 2.0 * s * (4.0 * h * h + 2.0 * h * fh); /* QKV, out, MLP in and out */
    const double A = 4.0 * s * s * h;                        /* Q K^T and P V */
    ptdp_schedule_scale_costs(G + A, G + 2.0 * A, G, sp);
}

ptdp_schedule_params ptdp_schedule_of_job(const ptdp_job *job) {
    ptdp_schedule_params sp = {.p = (int)job->p,
                               .m = (int)ptdp_job_micro_batches(job),
                               .v = (int)job->v,
                               .kind = job->schedule,
                               .cost_f = job->zb_costs[0],
                               .cost_b = job->zb_costs[1],
                               .cost_w = job->zb_costs[2]};
    sp.kind = ptdp_schedule_resolve_kind(&sp);
    if (!sp.cost_f && !sp.cost_b && !sp.cost_w) /* the shape alone: the same on every rank */
        ptdp_schedule_flop_costs(job->model.seq_length, job->model.hidden, job->model.ffn_hidden,
                                 &sp);
    return sp;
}

void ptdp_schedule_played_costs(const ptdp_schedule_params *sp, int cost[PTDP_ACT_COUNT]) {
    cost[PTDP_ACT_FWD] = sp->cost_f > 0 ? sp->cost_f : 1;
    cost[PTDP_ACT_BWD] = sp->cost_b > 0 ? sp->cost_b : 1;
    cost[PTDP_ACT_WGT] = sp->cost_w > 0 ? sp->cost_w : 1;
}

int ptdp_schedule_parse_costs(const char *str, const char *flag, ptdp_schedule_params *sp) {
    int c[3];
    const char *q = str ? str : "";
    for (int i = 0; i < 3; i++) {
        char *end;
        const long x = strtol(q, &end, 10);
        if (end == q || x < 1 || x > PTDP_SCHEDULE_MAX_COST || *end != (i < 2 ? ',' : 0))
            return ptdp_errorf(PTDP_EINVAL,
                               "%s wants three positive integers F,B,W (at most %d each), the "
                               "relative costs of a chunk's forward, input gradient and weight "
                               "gradients, e.g. 3,3,2; got '%s'",
                               flag, PTDP_SCHEDULE_MAX_COST, str ? str : "(null)");
        c[i] = (int)x;
        q = end + 1;
    }
    sp->cost_f = c[0];
    sp->cost_b = c[1];
    sp->cost_w = c[2];
    return PTDP_OK;
}

const char *ptdp_action_kind_short(int kind) {
    return kind >= 0 && kind < PTDP_ACT_COUNT ? act_short[kind] : "?";
}

const char *ptdp_action_kind_name(int kind) {
    return kind >= 0 && kind < PTDP_ACT_COUNT ? act_long[kind] : "?";
}

const char *ptdp_schedule_kind_name(int kind) {
    return kind >= 0 && kind < PTDP_SCHED_COUNT ? sched_names[kind] : "?";
}

int ptdp_schedule_parse_kind(const char *name) {
    for (int k = 0; k < PTDP_SCHED_COUNT; k++)
        if (name && !strcmp(name, sched_names[k])) return k;
    return ptdp_errorf(PTDP_EINVAL,
                       "--pipeline-schedule must be one of gpipe|1f1b|interleaved|zb-h1|zb-v, got "
                       "'%s'",
                       name ? name : "(null)");
}

int ptdp_schedule_resolve_kind(const ptdp_schedule_params *sp) {
    if (sp->kind >= 0) return sp->kind;
    return sp->v > 1 ? PTDP_SCHED_INTERLEAVED : PTDP_SCHED_1F1B;
}

int ptdp_schedule_splits_backward(const ptdp_schedule_params *sp) {
    const int kind = ptdp_schedule_resolve_kind(sp);
    return kind == PTDP_SCHED_ZBH1 || kind == PTDP_SCHED_ZBV;
}

int ptdp_schedule_check(const ptdp_schedule_params *sp) {
    if (sp->p < 1)
        return ptdp_errorf(PTDP_EINVAL, "--pipeline-model-parallel-size must be at least 1, got %d",
                           sp->p);
    if (sp->m < 1)
        return ptdp_errorf(PTDP_EINVAL, "--num-microbatches must be at least 1, got %d", sp->m);
    if (sp->v < 1)
        return ptdp_errorf(PTDP_EINVAL,
                           "--virtual-pipeline-model-parallel-size must be at least 1, got %d",
                           sp->v);
    if (sp->kind < -1 || sp->kind >= PTDP_SCHED_COUNT)
        return ptdp_errorf(PTDP_EINVAL, "--pipeline-schedule: unknown schedule %d", sp->kind);
    /* Overflow guard: tags and array sizes are ints. */
    if ((long long)sp->p * sp->m * sp->v > 10000000LL)
        return ptdp_errorf(PTDP_EINVAL,
                           "--num-microbatches %d x --pipeline-model-parallel-size %d x "
                           "--virtual-pipeline-model-parallel-size %d is too large",
                           sp->m, sp->p, sp->v);
    if (sp->cost_f < 0 || sp->cost_b < 0 || sp->cost_w < 0 || sp->cost_f > PTDP_SCHEDULE_MAX_COST ||
        sp->cost_b > PTDP_SCHEDULE_MAX_COST || sp->cost_w > PTDP_SCHEDULE_MAX_COST)
        return ptdp_errorf(
            PTDP_EINVAL,
            "--zb-costs: the costs F,B,W must be between 1 and %d (0: unit), got %d,%d,%d",
            PTDP_SCHEDULE_MAX_COST, sp->cost_f, sp->cost_b, sp->cost_w);
    int kind = ptdp_schedule_resolve_kind(sp);
    /* zb-v's player keeps an int clock, which ends before every rank's work
     * one after another: p * 2m chunks of F + B + W */
    int cost[PTDP_ACT_COUNT];
    ptdp_schedule_played_costs(sp, cost);
    const long long work = (long long)cost[PTDP_ACT_FWD] + cost[PTDP_ACT_BWD] + cost[PTDP_ACT_WGT];
    if (kind == PTDP_SCHED_ZBV && (long long)sp->p * 2 * sp->m * work > 2000000000LL)
        return ptdp_errorf(PTDP_EINVAL,
                           "zb-v: --num-microbatches %d x --pipeline-model-parallel-size %d with "
                           "--zb-costs %d,%d,%d is too long a play; give smaller costs",
                           sp->m, sp->p, sp->cost_f, sp->cost_b, sp->cost_w);
    if (kind == PTDP_SCHED_ZBV && (sp->p < 2 || sp->v != 2))
        return ptdp_errorf(PTDP_EINVAL,
                           "--pipeline-schedule zb-v runs two model chunks per rank in a V shape: "
                           "it needs --pipeline-model-parallel-size >= 2 (got %d) and "
                           "--virtual-pipeline-model-parallel-size 2 or left out (got %d)",
                           sp->p, sp->v);
    if (sp->v > 1 && sp->p == 1)
        return ptdp_errorf(
            PTDP_EINVAL,
            "--virtual-pipeline-model-parallel-size %d needs --pipeline-model-parallel-size > 1",
            sp->v);
    if (sp->v > 1 && kind != PTDP_SCHED_INTERLEAVED && kind != PTDP_SCHED_ZBV)
        return ptdp_errorf(
            PTDP_EINVAL,
            "--pipeline-schedule %s supports only --virtual-pipeline-model-parallel-size 1 "
            "(got %d); use interleaved or zb-v",
            sched_names[kind], sp->v);
    if (kind == PTDP_SCHED_INTERLEAVED) {
        if (sp->v < 2)
            return ptdp_errorf(
                PTDP_EINVAL,
                "--pipeline-schedule interleaved needs --virtual-pipeline-model-parallel-size "
                ">= 2, got %d",
                sp->v);
        if (sp->m % sp->p)
            return ptdp_errorf(
                PTDP_EINVAL,
                "--num-microbatches (%d) must be a multiple of --pipeline-model-parallel-size "
                "(%d) for the interleaved schedule",
                sp->m, sp->p);
    }
    return PTDP_OK;
}

int ptdp_schedule_len(const ptdp_schedule_params *sp) {
    return (ptdp_schedule_splits_backward(sp) ? 3 : 2) * sp->m * sp->v;
}

int ptdp_schedule_warmup(const ptdp_schedule_params *sp, int rank) {
    int kind = ptdp_schedule_resolve_kind(sp), w;
    if (kind == PTDP_SCHED_ZBV) { /* no closed form: count the generated list */
        ptdp_action *acts = malloc(sizeof(ptdp_action) * (size_t)ptdp_schedule_len(sp));
        int n = 0;
        PTDP_ASSERT(acts && ptdp_schedule_build(sp, rank, acts, ptdp_schedule_len(sp), &n) == 0);
        for (w = 0; w < n && acts[w].kind == PTDP_ACT_FWD; w++) {}
        free(acts);
        return w;
    }
    switch (kind) {
    case PTDP_SCHED_GPIPE:
        return sp->m * sp->v;
    case PTDP_SCHED_1F1B:
    case PTDP_SCHED_ZBH1:
        w = sp->p - rank - 1;
        return w < sp->m ? w : sp->m;
    default:
        w = (sp->p - rank - 1) * 2 + (sp->v - 1) * sp->p;
        return w < sp->m * sp->v ? w : sp->m * sp->v;
    }
}

int ptdp_schedule_max_inflight(const ptdp_schedule_params *sp, int rank) {
    int total = sp->m * sp->v;
    if (ptdp_schedule_resolve_kind(sp) == PTDP_SCHED_GPIPE) return total;
    if (ptdp_schedule_resolve_kind(sp) == PTDP_SCHED_ZBH1) return sp->p < total ? sp->p : total;
    if (ptdp_schedule_resolve_kind(sp) == PTDP_SCHED_ZBV)
        return 2 * sp->p < total ? 2 * sp->p : total;
    int w = ptdp_schedule_warmup(sp, rank) + 1;
    return w < total ? w : total;
}

/* k-th forward (or backward) of the interleaved order. Forwards take
 * micro-batches in groups of p: the group's micro-batches on chunk 0, then
 * on chunk 1, ...; the k-th backward is the k-th forward's micro-batch on
 * the mirrored chunk v-1-c, so the deepest stage's backward comes first. */
static ptdp_action interleaved_kth(const ptdp_schedule_params *sp, int k, int kind) {
    int pv = sp->p * sp->v;
    int group = k / pv, in_group = k % pv;
    ptdp_action a;
    a.kind = kind;
    a.microbatch = group * sp->p + in_group % sp->p;
    a.chunk = in_group / sp->p;
    if (kind == PTDP_ACT_BWD) a.chunk = sp->v - 1 - a.chunk;
    return a;
}

static ptdp_action kth(const ptdp_schedule_params *sp, int kind, int k, int sched) {
    if (sched == PTDP_SCHED_INTERLEAVED) return interleaved_kth(sp, k, kind);
    ptdp_action a = {kind, k, 0};
    return a;
}

/* ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): 1F1B's
 * order of forwards and input-gradient backwards, with each micro-batch's W
 * (weight gradients) run after its B. Rank r keeps up to r W's pending: in
 * the cool-down rank r waits for the input gradients of later ranks, and the
 * later the rank the longer it waits (rank p-1 finishes its last B
 * (p-1) B-times before rank 0), so the deferred W's fill exactly that wait.
 * Live activations (forward done, W not yet) peak at (p-r-1) + 1 + r = p on
 * every rank, 1F1B's peak on rank 0. W's run oldest first, so the weight
 * gradients of a chunk add up in micro-batch order, as in every schedule. */
static void zbh1_build(const ptdp_schedule_params *sp, int rank, ptdp_action *out) {
    const int m = sp->m, warm = ptdp_schedule_warmup(sp, rank);
    int i = 0, nf = 0, nb = 0, nw = 0;
    for (; nf < warm; nf++) out[i++] = (ptdp_action){PTDP_ACT_FWD, nf, 0};
    while (nb < m) {
        if (nf < m) out[i++] = (ptdp_action){PTDP_ACT_FWD, nf++, 0};
        out[i++] = (ptdp_action){PTDP_ACT_BWD, nb++, 0};
        if (nb - nw > rank) out[i++] = (ptdp_action){PTDP_ACT_WGT, nw++, 0};
    }
    while (nw < m) out[i++] = (ptdp_action){PTDP_ACT_WGT, nw++, 0};
    PTDP_ASSERT(i == 3 * m);
}

int ptdp_schedule_build(const ptdp_schedule_params *sp, int rank, ptdp_action *out, int cap,
                        int *n) {
    int rc = ptdp_schedule_check(sp);
    if (rc) return rc;
    if (rank < 0 || rank >= sp->p)
        return ptdp_errorf(PTDP_EINVAL, "pipeline rank %d out of range [0, %d)", rank, sp->p);
    int len = ptdp_schedule_len(sp);
    if (cap < len)
        return ptdp_errorf(PTDP_EINVAL, "schedule needs %d actions, buffer holds %d", len, cap);
    int sched = ptdp_schedule_resolve_kind(sp);
    if (sched == PTDP_SCHED_ZBH1) {
        zbh1_build(sp, rank, out);
        *n = len;
        return PTDP_OK;
    }
    if (sched == PTDP_SCHED_ZBV) {
        rc = ptdp__schedule_zbv_build(sp, rank, out);
        if (rc == PTDP_OK) *n = len;
        return rc;
    }
    int total = sp->m * sp->v, warm = ptdp_schedule_warmup(sp, rank);
    int i = 0, nf = 0, nb = 0;
    /* Warm-up forwards, then steady state (one forward, one backward), then
     * the remaining backwards. GPipe is the case warm-up = all forwards. */
    for (; nf < warm; nf++) out[i++] = kth(sp, PTDP_ACT_FWD, nf, sched);
    while (nf < total) {
        out[i++] = kth(sp, PTDP_ACT_FWD, nf++, sched);
        out[i++] = kth(sp, PTDP_ACT_BWD, nb++, sched);
    }
    while (nb < total) out[i++] = kth(sp, PTDP_ACT_BWD, nb++, sched);
    PTDP_ASSERT(i == len);
    *n = len;
    return PTDP_OK;
}

int ptdp_schedule_init(ptdp_schedule *s, const ptdp_schedule_params *sp) {
    memset(s, 0, sizeof *s);
    int rc = ptdp_schedule_check(sp);
    if (rc) return rc;
    s->params = *sp;
    s->params.kind = ptdp_schedule_resolve_kind(sp);
    s->len = ptdp_schedule_len(sp);
    s->acts = malloc(sizeof(ptdp_action) * (size_t)s->len * (size_t)sp->p);
    if (!s->acts) {
        memset(s, 0, sizeof *s);
        return ptdp_errorf(PTDP_ENOMEM, "schedule: cannot allocate %d x %d actions", sp->p,
                           2 * sp->m * sp->v);
    }
    for (int r = 0; r < sp->p; r++) {
        int n;
        rc = ptdp_schedule_build(&s->params, r, s->acts + (size_t)r * s->len, s->len, &n);
        if (rc) {
            ptdp_schedule_free(s);
            return rc;
        }
    }
    return PTDP_OK;
}

void ptdp_schedule_free(ptdp_schedule *s) {
    if (!s) return;
    free(s->acts);
    memset(s, 0, sizeof *s);
}

const ptdp_action *ptdp_schedule_rank(const ptdp_schedule *s, int rank) {
    PTDP_ASSERT(rank >= 0 && rank < s->params.p);
    return s->acts + (size_t)rank * s->len;
}

int ptdp_schedule_stage(const ptdp_schedule_params *sp, int rank, int chunk) {
    if (ptdp_schedule_resolve_kind(sp) == PTDP_SCHED_ZBV)
        return chunk == 0 ? rank : 2 * sp->p - 1 - rank;
    return chunk * sp->p + rank;
}

void ptdp_schedule_stage_owner(const ptdp_schedule_params *sp, int stage, int *rank, int *chunk) {
    PTDP_ASSERT(stage >= 0 && stage < sp->p * sp->v);
    if (ptdp_schedule_resolve_kind(sp) == PTDP_SCHED_ZBV) {
        *chunk = stage < sp->p ? 0 : 1;
        *rank = stage < sp->p ? stage : 2 * sp->p - 1 - stage;
    } else {
        *chunk = stage / sp->p;
        *rank = stage % sp->p;
    }
}

static ptdp_p2p stage_peer(const ptdp_schedule_params *sp, int stage) {
    ptdp_p2p x = {-1, -1, -1};
    if (stage < 0 || stage >= sp->p * sp->v) return x;
    ptdp_schedule_stage_owner(sp, stage, &x.peer_rank, &x.peer_chunk);
    x.peer_stage = stage;
    return x;
}

void ptdp_action_p2p(const ptdp_schedule_params *sp, int rank, const ptdp_action *a, ptdp_p2p *recv,
                     ptdp_p2p *send) {
    PTDP_ASSERT(rank >= 0 && rank < sp->p && a->chunk >= 0 && a->chunk < sp->v);
    PTDP_ASSERT(a->kind >= 0 && a->kind < PTDP_ACT_COUNT);
    if (a->kind == PTDP_ACT_WGT) { /* weight gradients: nothing moves */
        const ptdp_p2p none = {-1, -1, -1};
        if (recv) *recv = none;
        if (send) *send = none;
        return;
    }
    int k = ptdp_schedule_stage(sp, rank, a->chunk);
    int up = a->kind == PTDP_ACT_FWD ? k - 1 : k + 1;   /* where the input comes from */
    int down = a->kind == PTDP_ACT_FWD ? k + 1 : k - 1; /* where the output goes */
    if (recv) *recv = stage_peer(sp, up);
    if (send) *send = stage_peer(sp, down);
}

int ptdp_p2p_tag(const ptdp_schedule_params *sp, int kind, int microbatch, int dst_stage) {
    return (microbatch * sp->p * sp->v + dst_stage) * 2 + kind;
}

char *ptdp_action_str(const ptdp_schedule_params *sp, const ptdp_action *a, char *buf) {
    if (sp->v > 1)
        snprintf(buf, 32, "%s%d.%d", ptdp_action_kind_short(a->kind), a->microbatch, a->chunk);
    else
        snprintf(buf, 32, "%s%d", ptdp_action_kind_short(a->kind), a->microbatch);
    return buf;
}

void ptdp_schedule_print_rank(FILE *f, const ptdp_schedule *s, int rank) {
    const ptdp_action *acts = ptdp_schedule_rank(s, rank);
    char buf[32];
    fprintf(f, "rank %d:", rank);
    for (int i = 0; i < s->len; i++) fprintf(f, " %s", ptdp_action_str(&s->params, &acts[i], buf));
}

int ptdp_schedule_chunk_inflight(const ptdp_schedule_params *sp, int rank, int chunk) {
    int n = ptdp_schedule_len(sp), got = 0, now = 0, most = 0;
    /* a slot is given back at the action that last reads it */
    const int release_kind = ptdp_schedule_splits_backward(sp) ? PTDP_ACT_WGT : PTDP_ACT_BWD;
    ptdp_action *acts = malloc(sizeof(ptdp_action) * (size_t)n);
    PTDP_ASSERT(acts && ptdp_schedule_build(sp, rank, acts, n, &got) == PTDP_OK);
    for (int i = 0; i < got; i++) {
        if (acts[i].chunk != chunk) continue;
        if (acts[i].kind == PTDP_ACT_FWD) now++;
        if (acts[i].kind == release_kind) now--;
        most = now > most ? now : most;
    }
    free(acts);
    return most;
}
