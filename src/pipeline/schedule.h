/* schedule.h - the pure half of pipeline parallelism: schedules as data (pure generators of
 * each pipeline rank's ordered list of compute actions: GPipe, 1F1B,
 * interleaved 1F1B, ZB-H1, ZB-V), the point-to-point transfers each action
 * implies, the
 * replay that proves a set of lists well formed and free of deadlock (and
 * that the simulator in plan/ times), and the executor that runs one rank's
 * list over its model chunks (pipeline.h).
 *
 * Why two headers in one folder: this half is pure (no comm, no tensors,
 * no model), so plan/ (which must run anywhere) includes it without pulling
 * in comm or model; everything else includes pipeline.h. Timing is
 * plan/plan.h's (the discrete-event simulator).
 *
 * Vocabulary (the shape legend of kernels.h): p pipeline ranks, v model chunks per
 * rank, m micro-batches per iteration. The model's pipeline is virtual
 * stages 0 .. p*v-1 and a micro-batch's forward visits them in increasing
 * order (its backward in decreasing order). Which rank and chunk hold a
 * stage is ptdp_schedule_stage's business alone: chunk c on pipeline rank r
 * is virtual stage c*p + r (the interleaved order), except under ZB-V, whose
 * V shape puts chunk 0 of rank r on stage r and chunk 1 on stage 2p-1-r (so
 * rank 0 holds the first and the last stage, and rank p-1 hands stage p-1's
 * output to stage p without a message). Virtual stage 0 embeds tokens,
 * stage p*v-1 computes the loss; every other forward receives its input from
 * the previous stage and every backward (except the last stage's) receives
 * its output gradient from the next stage. */
#ifndef PTDP_SCHEDULE_H
#define PTDP_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../base/job.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Action kinds: X(enum, short name used in printed lists, long name).
 * Backward B is the whole backward of the chunk for the schedules that do not
 * split it; under a zero-bubble schedule (ptdp_schedule_splits_backward) B
 * computes only the input gradient (what the previous stage waits for) and
 * W, later on the same rank, the weight gradients of the same micro-batch. */
#define PTDP_ACTION_KINDS(X)         \
    X(PTDP_ACT_FWD, "F", "forward")  \
    X(PTDP_ACT_BWD, "B", "backward") \
    X(PTDP_ACT_WGT, "W", "weight")

typedef enum {
#define PTDP__ACT_ENUM(e, s, l) e,
    PTDP_ACTION_KINDS(PTDP__ACT_ENUM)
#undef PTDP__ACT_ENUM
        PTDP_ACT_COUNT
} ptdp_action_kind;

/* The schedules' kinds (PTDP_SCHEDULE_KINDS) are named in base/job.h, the
 * job description that chooses one. */

/* One compute action of one rank. */
typedef struct {
    int kind;       /* ptdp_action_kind */
    int microbatch; /* 0 .. m-1 */
    int chunk;      /* 0 .. v-1, local model chunk on this rank */
} ptdp_action;

typedef struct {
    int p;    /* pipeline-model-parallel size, >= 1 */
    int m;    /* micro-batches per iteration, >= 1 */
    int v;    /* model chunks per rank (virtual pipeline size), >= 1 */
    int kind; /* ptdp_schedule_kind, or -1: interleaved if v > 1, else 1f1b */
    /* Relative integer costs of one chunk's F, B (input gradient) and W
     * (weight gradients) that zb-v's list scheduler plays (zbv.c); 0 counts
     * as 1, so zeroed costs give the unit-cost lists. Every rank must build
     * the same lists: fill them from the model's shape
     * (ptdp_schedule_flop_costs) or from the command line, never from timing
     * on one rank. The other schedules ignore them. */
    int cost_f, cost_b, cost_w;
} ptdp_schedule_params;

/* p = m = v = 1, kind -1 (automatic), unit costs. */
ptdp_schedule_params ptdp_schedule_default_params(void);

/* The schedule a finished job (ptdp_job_finish) runs: its p, v and kind, m =
 * B / (b d) micro-batches, and zb-v's costs: the job's --zb-costs, else
 * ptdp_schedule_flop_costs of its model (the same on every rank; the trainer
 * and the planner both ask here, so the planner simulates the lists the run
 * executes). */
ptdp_schedule_params ptdp_schedule_of_job(const ptdp_job *job);

/* Largest cost accepted in ptdp_schedule_params (the scheduler's clock is an
 * int and walks m * (F + B + W) per chunk). */
#define PTDP_SCHEDULE_MAX_COST 1000

/* Scales three non-negative times (any unit) of one chunk's F, B and W to
 * integer costs: the smallest positive time becomes 4 and the others keep
 * their ratio to it, rounded, at least 1 and at most PTDP_SCHEDULE_MAX_COST.
 * All zero (or not finite): unit costs (0, 0, 0). Pure and deterministic, so
 * ranks that feed it the same numbers get the same costs. */
void ptdp_schedule_scale_costs(double f, double b, double w, ptdp_schedule_params *sp);

/* The costs from the FLOPs of one transformer layer (every chunk of an even
 * split holds the same layers, and tensor parallelism, the micro-batch and
 * the layer count scale F, B and W alike): with G = the four GEMMs' 2 s
 * (4h^2 + 2 h ffn) FLOPs per sequence and A = core attention's 4 s^2 h,
 * F = G + A, B = G + 2A (input-gradient GEMMs, attention's backward), W = G
 * (weight-gradient GEMMs), scaled by ptdp_schedule_scale_costs. The
 * embedding and the loss head are left out. Used by the trainer and the
 * planner alike, so the planner simulates the lists the run executes.
 * ffn 0 means 4h. */
void ptdp_schedule_flop_costs(int64_t seq_length, int64_t hidden, int64_t ffn,
                              ptdp_schedule_params *sp);

/* The costs zb-v's list scheduler plays, indexed by ptdp_action_kind:
 * cost_f, cost_b, cost_w, each 0 read as 1 (unit). */
void ptdp_schedule_played_costs(const ptdp_schedule_params *sp, int cost[PTDP_ACT_COUNT]);

/* Parses "F,B,W" (three positive integers <= PTDP_SCHEDULE_MAX_COST) into
 * sp's costs. Returns PTDP_OK or PTDP_EINVAL with a message naming `flag`. */
int ptdp_schedule_parse_costs(const char *str, const char *flag, ptdp_schedule_params *sp);

/* "F"/"B", "forward"/"backward", "gpipe"/"1f1b"/"interleaved"; "?" when out
 * of range. Static strings. */
const char *ptdp_action_kind_short(int kind);
const char *ptdp_action_kind_name(int kind);
const char *ptdp_schedule_kind_name(int kind);

/* Name -> kind. Returns the kind (>= 0), or PTDP_EINVAL with a message
 * listing the accepted names. */
int ptdp_schedule_parse_kind(const char *name);

/* Resolves kind -1 to the default (interleaved if v > 1, else 1f1b). */
int ptdp_schedule_resolve_kind(const ptdp_schedule_params *sp);

/* 1 when the schedule's lists carry W actions (zero-bubble: zb-h1, zb-v), so
 * the backward runs as B (input gradient) and W (weight gradients). */
int ptdp_schedule_splits_backward(const ptdp_schedule_params *sp);

/* Checks the parameters. Returns PTDP_OK or PTDP_EINVAL with a message that
 * names the offending flag (--pipeline-model-parallel-size,
 * --num-microbatches, --virtual-pipeline-model-parallel-size,
 * --pipeline-schedule). Rules: p, m, v >= 1; v > 1 needs p > 1 and the
 * interleaved or zb-v schedule; interleaved needs v > 1 and m a multiple of
 * p; zb-v needs p > 1 and v = 2 (callers that take flags imply v = 2 when
 * zb-v is asked for and v is not given). */
int ptdp_schedule_check(const ptdp_schedule_params *sp);

/* Actions per rank: 2*m*v (one forward and one backward per micro-batch and
 * chunk), 3*m*v when the backward is split (one W each too). Assumes checked
 * params. */
int ptdp_schedule_len(const ptdp_schedule_params *sp);

/* Forwards rank `rank` runs before its first backward. GPipe: m; 1F1B and
 * ZB-H1: min(p-r-1, m); interleaved: min((p-r-1)*2 + (v-1)*p, m*v); ZB-V:
 * counted in its generated list (2p-1 on rank 0 when m allows). */
int ptdp_schedule_warmup(const ptdp_schedule_params *sp, int rank);

/* The most (micro-batch, chunk) activations rank `rank` may hold stashed at
 * once (forward done, backward not yet; with a split backward: W not yet):
 * GPipe m; ZB-H1 min(p, m) on every rank (1F1B's peak, the first rank's: rank
 * r defers up to r W's); ZB-V min(2p, 2m) chunk activations on every rank
 * (each chunk holds half a rank's layers: p whole-stage activations, 1F1B's
 * peak); otherwise min(warmup + 1, m*v), i.e. min(p-r, m) for 1F1B. */
int ptdp_schedule_max_inflight(const ptdp_schedule_params *sp, int rank);

/* Writes rank `rank`'s ordered actions into the caller's out[0..cap) and
 * their count into *n (= ptdp_schedule_len). Pure: no I/O; no allocation
 * except under zb-v, whose generator plays every rank (zbv.c) and takes
 * O(p*m) scratch. Returns PTDP_EINVAL (message) for bad params or rank, or
 * when cap is too small; PTDP_ENOMEM (zb-v). */
int ptdp_schedule_build(const ptdp_schedule_params *sp, int rank, ptdp_action *out, int cap,
                        int *n);

/* ---- stage layouts ------------------------------------------------------------ */
/* Which global layers each virtual stage holds (ptdp_stage_layout and
 * ptdp_stage_layout_range) is part of the job description: base/job.h. */

/* ---- the whole pipeline's lists ------------------------------------------ */
typedef struct {
    ptdp_schedule_params params; /* kind resolved */
    int len;                     /* actions per rank, 2*m*v */
    ptdp_action *acts;           /* [p][len], owned */
} ptdp_schedule;

/* Builds every rank's list. Returns PTDP_EINVAL for bad params,
 * PTDP_ENOMEM; on failure *s is left freed. Free with ptdp_schedule_free. */
int ptdp_schedule_init(ptdp_schedule *s, const ptdp_schedule_params *sp);
/* Frees and zeroes; NULL or a zeroed struct is a no-op. */
void ptdp_schedule_free(ptdp_schedule *s);
/* Rank r's list of s->len actions (borrowed). */
const ptdp_action *ptdp_schedule_rank(const ptdp_schedule *s, int rank);

/* ---- communication implied by an action --------------------------------- */
/* One point-to-point transfer of an action. A forward receives the
 * activation [s, b, h] of the same micro-batch from virtual stage k-1 and
 * sends its output to stage k+1; a backward receives the output gradient
 * from stage k+1 and sends the input gradient to stage k-1. Missing ends
 * (stage 0's input, stage p*v-1's output) have peer_rank -1. The message is
 * identified by (kind, microbatch, receiving stage): an executor can derive
 * a unique MPI tag from ptdp_p2p_tag. With p = 1 there are no transfers. */
typedef struct {
    int peer_rank;  /* pipeline rank on the other end, or -1: no transfer */
    int peer_chunk; /* the peer's local chunk */
    int peer_stage; /* the peer's virtual stage */
} ptdp_p2p;

/* The one mapping between (rank, chunk) and virtual stage, for every
 * schedule: chunk*p + rank, or under zb-v rank for chunk 0 and 2p-1-rank for
 * chunk 1. ptdp_schedule_stage_owner is its inverse. Pure; assume checked
 * params and arguments in range. */
int ptdp_schedule_stage(const ptdp_schedule_params *sp, int rank, int chunk);
void ptdp_schedule_stage_owner(const ptdp_schedule_params *sp, int stage, int *rank, int *chunk);

/* Fills *recv and *send for action a run by rank `rank`. Either may be NULL.
 * Assumes checked params and an action within range (asserts). */
void ptdp_action_p2p(const ptdp_schedule_params *sp, int rank, const ptdp_action *a, ptdp_p2p *recv,
                     ptdp_p2p *send);

/* A tag unique within one iteration for the message that the action
 * (kind, microbatch) delivers to virtual stage `dst_stage`:
 * (microbatch * p*v + dst_stage) * 2 + kind. Non-negative. */
int ptdp_p2p_tag(const ptdp_schedule_params *sp, int kind, int microbatch, int dst_stage);

/* Formats an action as "F3" (v == 1) or "F3.1" (micro-batch 3, chunk 1).
 * buf must hold 32 chars; returns buf. */
char *ptdp_action_str(const ptdp_schedule_params *sp, const ptdp_action *a, char *buf);

/* Prints "rank R: F0 F1 B0 ..." for one rank (no trailing newline). */
void ptdp_schedule_print_rank(FILE *f, const ptdp_schedule *s, int rank);

/* ---- validation ----------------------------------------------------------- */
/* Proves the lists in s (any content, e.g. edited by hand) well formed:
 *  1. every action is in range, and each (micro-batch, chunk) has exactly one
 *     forward and one backward on every rank (and one W when the schedule
 *     splits the backward, none otherwise);
 *  2. every backward comes after its own forward on the same rank, every W
 *     after its own backward;
 *  3. the number of stashed activations never exceeds
 *     ptdp_schedule_max_inflight for the rank (GPipe m, 1F1B p-r, ...);
 *  4. the set of lists is free of deadlock under the executor's model:
 *     sends are eager (posted non-blocking, never wait for the receiver),
 *     a compute action blocks until the transfer it receives was sent. The
 *     check replays all ranks until each list is finished; if no rank can
 *     progress, it reports every blocked rank and what it waits for. This
 *     also proves the forward of virtual stage k of a micro-batch exists and
 *     is ordered after stage k-1's on the previous rank.
 * peak, if not NULL, receives each rank's peak stashed count ([p]).
 * Returns PTDP_OK or PTDP_EINVAL with a message naming rank and action. */
int ptdp_schedule_validate(const ptdp_schedule *s, int *peak);

/* Slots chunk `chunk` needs on `rank` for a schedule: the most forwards of
 * that chunk whose backward (with a split backward: W) has not run yet,
 * walking the rank's list. */
int ptdp_schedule_chunk_inflight(const ptdp_schedule_params *sp, int rank, int chunk);

/* ---- replay ---------------------------------------------------------------- */
/* The one replay of a set of lists under the executor's communication model,
 * shared by the validator (does every list finish?), the simulator (when
 * does each action start?) and the executor's buffer sizing. Ranks take
 * their next action whenever its input exists: the forward of virtual stage
 * k needs stage k-1's forward of the same micro-batch, a backward needs the
 * next stage's backward (the last stage's: its own forward), a W its own
 * backward (W moves no data).
 * send_buffers = 0: eager sends, each from its own buffer (never blocks).
 * send_buffers = K > 0: each rank sends each direction (activations,
 * gradients) from a ring of K buffers, and an action that sends can start
 * only once the message last sent from its ring slot has been received
 * (the receiving action was taken), which is what the executor does. */
typedef struct {
    int rank, index; /* the action taken: ptdp_schedule_rank(s, rank)[index] */
    const ptdp_action *action;
    ptdp_p2p from;      /* where its input comes from (peer_rank -1: no transfer) */
    int producer_rank;  /* the action whose output it consumes, */
    int producer_index; /* or -1, -1 (the first stage's forward) */
} ptdp_replay_step;
typedef void (*ptdp_replay_fn)(void *ctx, const ptdp_replay_step *step);
/* Replays s, calling fn (may be NULL) for each action taken, in an order
 * consistent with every dependency. Returns PTDP_OK when every list
 * finishes; PTDP_EINVAL (no message) when no rank can progress, with
 * stuck[r] (caller-owned [p], may be NULL) the index each rank waits at.
 * PTDP_ENOMEM with a message. Expects lists that pass the per-rank checks
 * of ptdp_schedule_validate (every action in range, each exactly once). */
int ptdp_schedule_replay(const ptdp_schedule *s, int send_buffers, ptdp_replay_fn fn, void *ctx,
                         int *stuck);
/* The smallest ring of send buffers per direction with which the lists
 * cannot deadlock, plus one so a sender never waits for the receiver of its
 * previous message: what the executor allocates instead of one buffer per
 * message. At most m*v. */
int ptdp_schedule_send_buffers(const ptdp_schedule *s);

/* Internal (zbv.c): the ZB-V generator behind ptdp_schedule_build, for
 * checked zb-v params; writes 6*m actions into out. PTDP_OK, PTDP_ENOMEM, or
 * PTDP_EINVAL when its greedy player stalls (never seen for p <= 12,
 * m <= 40 with unit costs, nor for p <= 6, m <= 20 with the costs that
 * test_schedule sweeps). */
int ptdp__schedule_zbv_build(const ptdp_schedule_params *sp, int rank, ptdp_action *out);

#ifdef __cplusplus
}
#endif

#endif
