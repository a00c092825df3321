/* plan.h - the planner: a discrete-event simulator that times the pipeline
 * schedules of pipeline/schedule.h, and an SVG timeline of the result.
 *
 * Uses base and the schedule generators only; never comm or kernels, so it
 * runs anywhere (laptop, login node); and the memory model of a training
 * rank (memory.c). Deliberately not here yet: per-stage cost estimates from
 * the model shape, and the search over (t, p, d, v, b) configurations. */
#ifndef PTDP_PLAN_H
#define PTDP_PLAN_H

#include <stdio.h>

#include "base/base.h"
#include "pipeline/schedule.h"

/* Costs of one action on one model chunk (any time unit). With a model of
 * l layers split over p ranks and v chunks, a chunk holds l/(p*v) layers:
 * pass tf/v and tb/v where tf, tb are a rank's whole-stage times. */
typedef struct {
    double forward;  /* one forward of one micro-batch through one chunk */
    double backward; /* one backward of one micro-batch through one chunk */
    double comm;     /* latency of one point-to-point transfer between ranks;
                        it delays the receiver but occupies no compute time */
} ptdp_sim_costs;

/* forward 1, backward 2, comm 0. */
ptdp_sim_costs ptdp_sim_default_costs(void);

typedef struct {
    double start, end;
} ptdp_sim_span;

typedef struct {
    int p;                /* pipeline ranks */
    int len;              /* actions per rank */
    ptdp_sim_span *spans; /* [p][len], aligned with ptdp_schedule_rank(s, r) */
    double *busy;         /* [p] compute time of each rank */
    int *peak_stash;      /* [p] peak stashed (micro-batch, chunk) activations */
    double makespan;      /* end of the last action (all ranks start at 0) */
    double ideal;         /* max over ranks of busy: the time without bubble */
    /* The paper's bubble time fraction: (makespan - ideal) / ideal, i.e.
     * bubble time / ideal time; (p-1)/m for GPipe and 1F1B and (p-1)/(v*m)
     * for interleaved with uniform costs and comm 0. */
    double bubble_fraction;
    /* Idle share of the devices: sum_r (makespan - busy_r) / (p * makespan). */
    double idle_fraction;
} ptdp_sim_result;

/* Times the lists of s: each rank runs its actions in order; an action
 * starts when the rank is free and its input has arrived (the producing
 * action's end, plus costs->comm when the producer is on another rank).
 * Sends are eager, as in ptdp_schedule_validate. Allocates the result's
 * arrays (free with ptdp_sim_result_free); on error *res is left freed.
 * Returns PTDP_EINVAL (negative costs, malformed or deadlocking lists),
 * PTDP_ENOMEM. Pure: no I/O, no global state. */
int ptdp_sim_run(const ptdp_schedule *s, const ptdp_sim_costs *costs, ptdp_sim_result *res);

/* Frees and zeroes; NULL or a zeroed result is a no-op. */
void ptdp_sim_result_free(ptdp_sim_result *res);

/* Writes an SVG timeline in the style of the paper's Figures 3 and 4: one
 * row per rank, forward and backward boxes labelled with the micro-batch
 * (chunk shown by shade), the bubble as empty space, a time axis. `title`
 * may be NULL. Returns PTDP_OK or PTDP_EIO if writing fails. Does not close
 * f. */
int ptdp_svg_write(FILE *f, const ptdp_schedule *s, const ptdp_sim_result *res, const char *title);

/* ---- line charts (chart.c): `ptdp plot` draws training logs with it ------- */
/* One curve: n points (x[i], y[i]); non-finite y are left out. `run` picks
 * the colour (one per run); validation curves are dashed; `markers_only`
 * draws a circle per point instead of a line (end-of-training values). */
typedef struct {
    const char *name; /* tooltip, e.g. "a.jsonl: lm loss" */
    int n;
    const double *x, *y;
    int run;
    int dashed, markers_only;
} ptdp_chart_series;
/* One panel: a y quantity against the shared x quantity. */
typedef struct {
    const char *title;
    int nseries;
    const ptdp_chart_series *series;
} ptdp_chart_panel;
/* Writes panels two to a row, each with its axes, ticks and curves, under a
 * legend naming the runs (runs[r] is the label of colour r), in the hand-made
 * style of ptdp_svg_write: one <polyline> per curve with a <title>. PTDP_EIO
 * when the write fails. */
int ptdp_chart_write(FILE *f, const char *title, const char *xlabel, const ptdp_chart_panel *panels,
                     int npanels, const char *const *runs, int nruns);
/* A tick step of 1, 2 or 5 times a power of ten giving about `ticks` ticks
 * over span (svg.c and chart.c). */
double ptdp__svg_tick_step(double span, int ticks);

/* ---- memory ----------------------------------------------------------------- */
#include <stdint.h>

/* One model chunk on one rank (fp32 activations). */
typedef struct {
    int64_t layers;          /* layers in the chunk */
    int64_t h, a, ffn, s, b; /* hidden, heads, MLP width, sequence, micro-batch */
    int64_t t;               /* tensor-parallel size */
    int64_t vocab_padded;
    int pre, post; /* first / last pipeline stage */
    int recompute; /* ptdp_recompute_method (base.h) */
    int64_t recompute_num_layers;
    /* the compute backend's numbers (the plan does not know the kernels):
     * floats attention saves per layer and micro-batch, ops->
     * attention_saved_floats(s, b, a/t), and floats of its shared scratch,
     * ptdp_attention_scratch_floats(s, threads) */
    int64_t attn_saved_floats, attn_scratch_floats;
} ptdp_plan_mem;

/* Bytes one stashed micro-batch holds until its backward, and bytes of
 * workspace shared by all of them, exactly as the model carves them; a
 * rank's activation peak is per_slot x (most micro-batches in flight) +
 * shared. The formula is written out in memory.c and docs/performance.md. */
void ptdp_plan_activation_bytes(const ptdp_plan_mem *m, double *per_slot, double *shared);

/* One training rank: the model shape, the layout and this rank's place in
 * it, the schedule (kind resolved, m set), ZeRO-1 and recomputation. */
typedef struct {
    int64_t layers;          /* l, the whole model */
    int64_t h, a, ffn, s, b; /* hidden, heads, MLP width, sequence, micro-batch */
    int64_t vocab_padded, max_positions;
    int64_t t, d; /* tensor- and data-parallel sizes (p, v: sched) */
    int pp_rank, dp_rank;
    ptdp_schedule_params sched;
    int zero;              /* --use-distributed-optimizer */
    int64_t bucket_floats; /* --ddp-bucket-size */
    int recompute;         /* ptdp_recompute_method (base.h) */
    int64_t recompute_num_layers;
    int64_t attn_saved_floats, attn_scratch_floats; /* as in ptdp_plan_mem */
    int master_weights; /* --bf16/--fp16: fp32 master weights beside m and v */
} ptdp_plan_rank;
/* No model (the caller sets the shape and the two attention numbers, which
 * default to 0), t = d = 1, rank 0, the default schedule, no ZeRO-1,
 * Megatron's 40,000,000-float buckets, no recomputation. */
ptdp_plan_rank ptdp_plan_rank_default_params(void);

/* Bytes of every memory category (PTDP_MEM_*) the rank allocates, as the
 * trainer carves them. Returns PTDP_ENOMEM, or an error of the schedule
 * (p > 1: the send-ring size comes from replaying every rank's list). */
int ptdp_plan_rank_memory(const ptdp_plan_rank *r, size_t bytes[PTDP_MEM_NCAT]);

#endif
