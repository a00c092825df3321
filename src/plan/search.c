/* search.c - the planner's search: every layout (t, p, d, v, b,
 * recomputation) of n devices that the pins allow, each predicted by
 * perf.c, ranked by predicted iteration time (the same global batch, so the
 * fastest iteration is the highest throughput), rejected ones with their
 * reason.
 *
 * What is searched: t and p over the divisors of n (d = n / (t p)), v over
 * the divisors of l/p (interleaving needs p > 1), b over the divisors of
 * B/d up to 64, recomputation off and on, and with p > 1 the stage splits
 * of Megatron's flags that differ from the even one (splits()). Deliberately
 * not searched: the recomputation method and group size, scatter/gather,
 * ZeRO-1 and the schedule (the job's flags fix them), hand-made layout
 * strings. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"

static int cmp_candidate(const void *x, const void *y) {
    const ptdp_plan_candidate *a = x, *b = y;
    if (a->fits != b->fits) return b->fits - a->fits;
    if (a->fits)
        return (a->est.iteration_s > b->est.iteration_s) -
               (a->est.iteration_s < b->est.iteration_s);
    return 0;
}

static int check_job(const ptdp_plan_job *pj, int n) {
    if (n < 1) return ptdp_errorf(PTDP_EINVAL, "--num-devices must be at least 1");
    const ptdp_gpt_config *m = &pj->job.model;
    const struct {
        int64_t v;
        const char *flag;
    } req[] = {{m->num_layers, "--num-layers"},     {m->hidden, "--hidden-size"},
               {m->heads, "--num-attention-heads"}, {m->seq_length, "--seq-length"},
               {m->vocab, "--vocab-size"},          {pj->job.global_batch, "--global-batch-size"}};
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (req[i].v < 1) return ptdp_errorf(PTDP_EINVAL, "missing required flag %s", req[i].flag);
    if (m->hidden % m->heads)
        return ptdp_errorf(PTDP_EINVAL,
                           "--hidden-size %lld is not divisible by --num-attention-heads %lld "
                           "(every head needs h/a channels)",
                           (long long)m->hidden, (long long)m->heads);
    return PTDP_OK;
}

/* 1 when L gives every virtual stage the even split's layers. */
static int same_as_even(const ptdp_stage_layout *L, int64_t l, int p, int v) {
    for (int k = 0; k < p * v; k++) {
        int64_t b, e, b0, e0;
        ptdp_stage_layout_range(L, l, p, v, k, &b, &e);
        ptdp_stage_layout_range(NULL, l, p, v, k, &b0, &e0);
        if (b != b0 || e != e0) return 0;
    }
    return 1;
}

/* The splits tried for (p, v) into out[0..6): the even one (when valid) and,
 * with p > 1, those of Megatron's flags that move layers: the embedding
 * and/or the loss counted as a layer, and a last rank lighter by one or two
 * layers per chunk (the loss head is the heaviest piece of a stage when V is
 * large against l). Returns how many. */
static int splits(const ptdp_plan_job *job, int p, int v, ptdp_stage_layout out[6]) {
    const int64_t l = job->job.model.num_layers;
    int n = 0;
    memset(out, 0, sizeof(ptdp_stage_layout) * 6);
    n++; /* even: the estimate rejects it with its reason when l % (p v) */
    if (p < 2 || !job->uneven_splits) return n;
    const int acc[3][2] = {{1, 1}, {0, 1}, {1, 0}};
    for (int i = 0; i < 3; i++) {
        ptdp_stage_layout L = {.embedding = acc[i][0], .loss = acc[i][1]};
        if (ptdp_stage_layout_check(&L, l, p, v) == PTDP_OK && !same_as_even(&L, l, p, v))
            out[n++] = L;
    }
    for (int64_t j = 1; j <= 2; j++) {
        ptdp_stage_layout L = {.last = (l / p / v - j) * v};
        if (L.last > 0 && ptdp_stage_layout_check(&L, l, p, v) == PTDP_OK) out[n++] = L;
    }
    return n;
}

/* "does not fit: needs X of Y per device", saying where Y comes from on a
 * node whose ranks share its memory. */
static void fit_reason(const ptdp_cluster *c, int n, double need, char *buf, size_t cap) {
    const double gib = 1073741824.0;
    int k = snprintf(buf, cap, "does not fit: needs %.1f GiB of %.1f GiB per device", need / gib,
                     ptdp_plan_device_memory(c, n) / gib);
    if (c->shared_node > 0 && k > 0 && (size_t)k < cap)
        snprintf(buf + k, cap - (size_t)k, " (the node's %.1f GiB shared by %lld ranks)",
                 c->memory_bytes / gib, (long long)ptdp_plan_ranks_per_node(c, n));
}

int ptdp_plan_search(const ptdp_cluster *c, const ptdp_plan_job *job, int n,
                     const ptdp_plan_pins *pins, ptdp_plan_candidate **out, int *count, int *nfit) {
    *out = NULL;
    *count = *nfit = 0;
    int rc = check_job(job, n);
    if (rc) return rc;
    const int64_t layers = job->job.model.num_layers, B = job->job.global_batch;
    int cap = 256, len = 0;
    ptdp_plan_candidate *cand = malloc(sizeof *cand * (size_t)cap);
    if (!cand) return ptdp_errorf(PTDP_ENOMEM, "planner: out of memory");
    for (int t = 1; t <= n; t++) {
        if (n % t || (pins->t && t != pins->t)) continue;
        for (int p = 1; p <= n / t; p++) {
            if ((n / t) % p || (pins->p && p != pins->p)) continue;
            const int d = n / (t * p);
            for (int v = 1; v <= layers; v++) {
                if (pins->v ? v != pins->v : (v > 1 && (p == 1 || (layers / p) % v))) continue;
                if (!pins->v && v > 1 && layers % p) continue;
                for (int b = 1; b <= (pins->b ? pins->b : 64); b++) {
                    if (pins->b ? b != pins->b : (B / d) % b != 0) continue;
                    ptdp_stage_layout split[6];
                    const int nsplit = pins->stages ? 1 : splits(job, p, v, split);
                    if (pins->stages) split[0] = *pins->stages;
                    for (int r = 0; r <= 1; r++)
                        for (int si = 0; si < nsplit; si++) {
                            if (pins->recompute >= 0 && r != pins->recompute) continue;
                            if (len == cap) {
                                ptdp_plan_candidate *g =
                                    realloc(cand, sizeof *cand * (size_t)cap * 2);
                                if (!g) {
                                    free(cand);
                                    return ptdp_errorf(PTDP_ENOMEM, "planner: out of memory");
                                }
                                cand = g;
                                cap *= 2;
                            }
                            ptdp_plan_candidate *k = &cand[len++];
                            memset(k, 0, sizeof *k);
                            k->layout = (ptdp_plan_layout){.t = t,
                                                           .p = p,
                                                           .d = d,
                                                           .v = v,
                                                           .b = b,
                                                           .recompute = r,
                                                           .stages = split[si]};
                            rc = ptdp__plan_estimate(c, job, &k->layout, &k->est, 0);
                            if (rc == PTDP_ENOMEM) {
                                free(cand);
                                return rc;
                            }
                            if (rc) {
                                snprintf(k->reason, sizeof k->reason, "%s", ptdp_last_error());
                            } else if (k->est.memory_bytes > ptdp_plan_device_memory(c, n)) {
                                fit_reason(c, n, k->est.memory_bytes, k->reason, sizeof k->reason);
                            } else {
                                k->fits = 1;
                                (*nfit)++;
                            }
                        }
                }
            }
        }
    }
    qsort(cand, (size_t)len, sizeof *cand, cmp_candidate);
    if (*nfit == 0) {
        const char *why = len ? cand[0].reason : "no (t, p) divides the device count";
        /* prefer a memory reason: the layouts that could run but do not fit */
        for (int i = 0; i < len; i++)
            if (!strncmp(cand[i].reason, "does not fit", 12)) {
                why = cand[i].reason;
                break;
            }
        rc = ptdp_errorf(PTDP_ECONFIG,
                         "no layout of %d devices can run this job (%d tried; e.g. %s)", n, len,
                         why);
        free(cand);
        return rc;
    }
    *out = cand;
    *count = len;
    return PTDP_OK;
}
