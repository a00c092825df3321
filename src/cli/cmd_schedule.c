/* cmd_schedule.c - `ptdp schedule`: prints every pipeline rank's action list,
 * and optionally simulates it (makespan, bubble fraction, peak stashed
 * activations) and draws it as an SVG timeline.
 *
 * Deliberately not here: schedule rules (pipeline/schedule.c) and timing
 * (plan/sim.c); this file only parses flags and formats results. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cli/cli.h"
#include "pipeline/pipeline.h"
#include "plan/plan.h"

/* "F:B[:W],..." -> [n] arrays; W defaults to B/2. Returns 0, or -1 with a
 * message naming the flag. */
static int parse_stage_times(const char *str, int n, double *f, double *b, double *w) {
    const char *q = str;
    for (int k = 0; k < n; k++) {
        char *end;
        f[k] = strtod(q, &end);
        if (end == q || *end != ':') goto bad;
        q = end + 1;
        b[k] = strtod(q, &end);
        if (end == q) goto bad;
        w[k] = b[k] / 2;
        if (*end == ':') {
            q = end + 1;
            w[k] = strtod(q, &end);
            if (end == q) goto bad;
        }
        if (!(f[k] >= 0 && b[k] >= 0 && w[k] >= 0 && w[k] <= b[k])) goto bad;
        if (k + 1 < n && *end != ',') goto bad;
        if (k + 1 == n && *end != 0) goto bad;
        q = end + 1;
    }
    return 0;
bad:
    ptdp_log_error("--stage-times must list %d virtual stages as F:B[:W] (times >= 0, W <= B), "
                   "separated by commas; got '%s'",
                   n, str);
    return -1;
}

static void usage(FILE *f, const ptdp_opt *opts, int nopts) {
    fprintf(
        f,
        "usage: ptdp schedule --pipeline-model-parallel-size P --num-microbatches M\n"
        "                     [--virtual-pipeline-model-parallel-size V] [--pipeline-schedule S]\n"
        "                     [--simulate] [--draw FILE.svg]\n"
        "                     [--forward-time X --backward-time Y --weight-time W --comm-time Z]\n"
        "                     [--stage-times F:B[:W],F:B[:W],...] [--zb-costs F,B,W]\n\n"
        "Prints each pipeline rank's ordered actions, one line per rank: 'rank R: F0 F1 B0 ...'.\n"
        "F3 is the forward of micro-batch 3, B3 its backward; with V > 1, F3.1 is micro-batch 3 on\n"
        "the rank's model chunk 1. zb-h1 and zb-v split the backward: B3 is the input gradient\n"
        "only and W3 the weight gradients (--weight-time of the --backward-time; default half).\n"
        "zb-v runs V = 2 chunks per rank in a V shape (chunk 0 of rank R is virtual stage R,\n"
        "chunk 1 is stage 2P-1-R); V is implied when not given.\n"
        "--stage-times gives each virtual stage 0..P*V-1 its own times for one micro-batch through\n"
        "that stage (forward, whole backward, its weight part), e.g. measured from a --trace.\n"
        "(chunk c is virtual stage c*P + R, except under zb-v). The default schedule is\n"
        "interleaved when V > 1, else 1f1b. Times are for one micro-batch through a rank's whole\n"
        "share of the model; each of its V chunks takes 1/V of it. --comm-time is the latency of\n"
        "one transfer.\n"
        "zb-v's lists come from a list scheduler that plays integer costs of a chunk's F, B and\n"
        "W: unit costs unless times are given (--forward-time, --backward-time, --weight-time or\n"
        "--stage-times, summed over the stages), which are scaled so the cheapest is 4, or\n"
        "--zb-costs F,B,W gives them as ptdp train does.\n\n"
        "flags:\n");
    ptdp_opts_help(f, opts, nopts);
}

int ptdp_cmd_schedule(int argc, char **argv) {
    int64_t p = 1, m = 0, v = 1;
    const char *sched = NULL, *draw = NULL, *stage_times = NULL, *zb_costs = NULL;
    int simulate = 0;
    double tf = 1.0, tb = 2.0, tw = -1.0, tc = 0.0;
    ptdp_opt opts[] = {
        {"pipeline-model-parallel-size", PTDP_OPT_INT, &p, "pipeline ranks p", NULL, 1, 1e6, 0},
        {"num-microbatches", PTDP_OPT_INT, &m, "micro-batches per iteration m (required)", NULL, 1,
         1e6, 0},
        {"virtual-pipeline-model-parallel-size", PTDP_OPT_INT, &v, "model chunks per rank v", NULL,
         1, 1e4, 0},
        {"pipeline-schedule", PTDP_OPT_STR, &sched,
         "schedule (default: interleaved if v > 1, else 1f1b; zb-v implies v = 2)",
         "gpipe|1f1b|interleaved|zb-h1|zb-v", 0, 0, 0},
        {"simulate", PTDP_OPT_BOOL, &simulate,
         "also print makespan, bubble fraction and peak stashed activations per rank", NULL, 0, 0,
         0},
        {"draw", PTDP_OPT_STR, &draw, "write the simulated timeline as SVG to this file", NULL, 0,
         0, 0},
        {"forward-time", PTDP_OPT_FLOAT, &tf, "forward time of one micro-batch on one rank", NULL,
         0, 1e12, 0},
        {"backward-time", PTDP_OPT_FLOAT, &tb, "backward time of one micro-batch on one rank", NULL,
         0, 1e12, 0},
        {"weight-time", PTDP_OPT_FLOAT, &tw,
         "weight-gradient part W of the backward time (zb-h1, zb-v; default: half of it)", NULL, 0,
         1e12, 0},
        {"stage-times", PTDP_OPT_STR, &stage_times,
         "per virtual stage times F:B[:W],... (overrides the three above)", NULL, 0, 0, 0},
        {"comm-time", PTDP_OPT_FLOAT, &tc, "time of one point-to-point transfer", NULL, 0, 1e12, 0},
        {"zb-costs", PTDP_OPT_STR, &zb_costs,
         "zb-v: relative integer costs of a chunk's F, B and W for the list scheduler (default: "
         "from the times when given, else 1,1,1)",
         NULL, 0, 0, 0},
    };
    int nopts = (int)(sizeof opts / sizeof opts[0]);
    int parsed = ptdp__cli_parse(opts, nopts, argc, argv, usage);
    if (parsed >= 0) return parsed;
    if (!ptdp_opt_find(opts, nopts, "num-microbatches")->seen) {
        ptdp_log_error("--num-microbatches is required (see ptdp schedule --help)");
        return 2;
    }
    if (tw < 0) tw = tb / 2;
    if (tw > tb) {
        ptdp_log_error("--weight-time (%g) must not exceed --backward-time (%g): W is part of the "
                       "backward",
                       tw, tb);
        return 2;
    }
    ptdp_schedule_params sp = ptdp_schedule_default_params();
    sp.p = (int)p;
    sp.m = (int)m;
    sp.v = (int)v;
    if (sched)
        sp.kind = ptdp_schedule_parse_kind(sched); /* choices already checked by the parser */
    /* zb-v's V shape is two chunks per rank: implied when v is not given */
    if (sp.kind == PTDP_SCHED_ZBV &&
        !ptdp_opt_find(opts, nopts, "virtual-pipeline-model-parallel-size")->seen)
        sp.v = 2;
    if (ptdp_schedule_check(&sp)) { /* before sizing the stage times by p*v */
        ptdp_log_error("%s", ptdp_last_error());
        return 2;
    }
    const int stages = sp.p * sp.v;
    double *st = stage_times ? malloc(sizeof(double) * 3 * (size_t)stages) : NULL;
    if (stage_times &&
        (!st || parse_stage_times(stage_times, stages, st, st + stages, st + 2 * stages))) {
        free(st);
        return 2;
    }
    if (zb_costs) {
        if (ptdp_schedule_parse_costs(zb_costs, "--zb-costs", &sp)) {
            ptdp_log_error("%s", ptdp_last_error());
            free(st);
            return 2;
        }
    } else if (st) { /* the whole pipeline's F, B and W: one cost triple for every chunk */
        double f = 0, b = 0, w = 0;
        for (int k = 0; k < stages; k++) {
            f += st[k];
            b += st[stages + k] - st[2 * stages + k];
            w += st[2 * stages + k];
        }
        ptdp_schedule_scale_costs(f, b, w, &sp);
    } else if (ptdp_opt_find(opts, nopts, "forward-time")->seen ||
               ptdp_opt_find(opts, nopts, "backward-time")->seen ||
               ptdp_opt_find(opts, nopts, "weight-time")->seen) {
        ptdp_schedule_scale_costs(tf, tb - tw, tw, &sp); /* per chunk: all three over v */
    }
    ptdp_schedule s;
    if (ptdp_schedule_init(&s, &sp)) {
        ptdp_log_error("%s", ptdp_last_error());
        free(st);
        return 2;
    }
    int status = 0;
    for (int r = 0; r < sp.p; r++) {
        ptdp_schedule_print_rank(stdout, &s, r);
        fputc('\n', stdout);
    }
    if (simulate || draw) {
        ptdp_sim_costs c = {
            .forward = tf / sp.v, .backward = tb / sp.v, .weight = tw / sp.v, .comm = tc};
        const int split = ptdp_schedule_splits_backward(&s.params);
        if (st) {
            c.stage_forward = st;
            c.stage_backward = st + stages;
            c.stage_weight = st + 2 * stages;
        }
        ptdp_sim_result res;
        if (ptdp_sim_run(&s, &c, &res)) {
            ptdp_log_error("%s", ptdp_last_error());
            ptdp_schedule_free(&s);
            free(st);
            return 1;
        }
        if (simulate) {
            if (st)
                printf("schedule %s: p=%d m=%d v=%d; per virtual stage times from --stage-times; "
                       "comm %g\n",
                       ptdp_schedule_kind_name(s.params.kind), sp.p, sp.m, sp.v, c.comm);
            else if (split)
                printf("schedule %s: p=%d m=%d v=%d; per chunk: forward %g backward %g (B %g, W "
                       "%g); comm %g\n",
                       ptdp_schedule_kind_name(s.params.kind), sp.p, sp.m, sp.v, c.forward,
                       c.backward, c.backward - c.weight, c.weight, c.comm);
            else
                printf("schedule %s: p=%d m=%d v=%d; per chunk: forward %g backward %g; comm %g\n",
                       ptdp_schedule_kind_name(s.params.kind), sp.p, sp.m, sp.v, c.forward,
                       c.backward, c.comm);
            if (s.params.kind == PTDP_SCHED_ZBV) {
                int cost[PTDP_ACT_COUNT];
                ptdp_schedule_played_costs(&sp, cost);
                printf("zb-v list scheduler costs F,B,W = %d,%d,%d%s\n", cost[PTDP_ACT_FWD],
                       cost[PTDP_ACT_BWD], cost[PTDP_ACT_WGT],
                       zb_costs    ? " (--zb-costs)"
                       : sp.cost_f ? " (from the times, the cheapest scaled to 4)"
                                   : " (unit)");
            }
            printf("makespan %g\n", res.makespan);
            printf("ideal time %g (busiest rank's compute)\n", res.ideal);
            if (st) /* no closed form for uneven stages */
                printf("bubble fraction %.6g (bubble time / ideal time)\n", res.bubble_fraction);
            else if (s.params.kind == PTDP_SCHED_ZBV) /* no closed form for the greedy order */
                printf("bubble fraction %.6g (bubble time / ideal time; zb-v: zero in the "
                       "paper's ideal model, the greedy order leaves some in the cool-down)\n",
                       res.bubble_fraction);
            else if (split) /* the paper's ZB-H1 bubble: (p-1)(F+B-W) against m(F+B+W) */
                printf("bubble fraction %.6g (bubble time / ideal time; (p-1)(F+B-W)/(m(F+B+W)) "
                       "= %.6g)\n",
                       res.bubble_fraction,
                       (sp.p - 1) * (tf + tb - 2 * tw) / ((double)sp.m * (tf + tb)));
            else
                printf("bubble fraction %.6g (bubble time / ideal time; (p-1)/(v*m) = %.6g)\n",
                       res.bubble_fraction, (double)(sp.p - 1) / ((double)sp.v * sp.m));
            printf("idle fraction %.6g (idle time / (p * makespan))\n", res.idle_fraction);
            printf("peak stashed activations per rank (micro-batch x chunk):");
            for (int r = 0; r < sp.p; r++) printf(" %d", res.peak_stash[r]);
            printf("\n");
        }
        if (draw) {
            FILE *f = fopen(draw, "w");
            if (!f) {
                ptdp_log_error("--draw: cannot open '%s' for writing", draw);
                status = 1;
            } else {
                int rc = ptdp_svg_write(f, &s, &res, NULL);
                if (fclose(f) || rc) {
                    ptdp_log_error("--draw: cannot write '%s'", draw);
                    status = 1;
                } else {
                    printf("timeline written to %s\n", draw);
                }
            }
        }
        ptdp_sim_result_free(&res);
    }
    free(st);
    ptdp_schedule_free(&s);
    return status;
}
