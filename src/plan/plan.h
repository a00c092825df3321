/* plan.h - the planner: a discrete-event simulator that times the pipeline
 * schedules of pipeline/schedule.h (sim.c), an SVG timeline of the result
 * (svg.c), the memory model of a training rank (memory.c), cluster
 * descriptions (cluster.c), the performance model of one layout (perf.c) and
 * the search over layouts (search.c) behind `ptdp plan`.
 *
 * Uses base, the schedule generators and cJSON only; never comm or kernels,
 * so it runs anywhere (laptop, login node). The equations of the performance
 * model are in docs/planner.md. */
#ifndef PTDP_PLAN_H
#define PTDP_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "../base/base.h"
#include "../base/job.h"
#include "../pipeline/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Costs of one action on one model chunk (any time unit). With a model of
 * l layers split over p ranks and v chunks, a chunk holds l/(p*v) layers:
 * pass tf/v and tb/v where tf, tb are a rank's whole-stage times. */
typedef struct {
    double forward;  /* one forward of one micro-batch through one chunk */
    double backward; /* one backward of one micro-batch through one chunk */
    double weight;   /* the part of `backward` that is weight gradients: under a
                        schedule that splits the backward (zb-h1) B costs
                        backward - weight and W costs weight; ignored otherwise */
    double comm;     /* latency of one point-to-point transfer between ranks;
                        it delays the receiver but occupies no compute time */
    /* Optional per virtual stage costs ([p*v], borrowed; NULL: every stage
     * costs forward/backward), e.g. the embedding on stage 0 and the loss
     * head on the last stage. stage_weight: the W part of stage_backward. */
    const double *stage_forward, *stage_backward, *stage_weight;
} ptdp_sim_costs;

/* forward 1, backward 2 (of which weight 1), comm 0. */
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

/* What only the compute backend knows about a job's memory (the planner
 * cannot ask the kernels): the trainer hands over its backend's numbers,
 * the planner's search the CPU backend's for each layout. */
typedef struct {
    /* floats attention saves per layer and micro-batch, be->
     * attention_saved_floats(s, b, a/t), and floats of its shared scratch,
     * be->attention_scratch_floats(s) */
    int64_t attn_saved_floats, attn_scratch_floats;
    int mlp16; /* the MLP's fc, gl and dfc in 16 bits, N fl / 2 floats each
                  (ptdp_mlp_floats: the native bf16 backend) */
    /* the backend's own memory for this job, its three numbers
     * (ptdp_backend_workspace_size, kernels.h): bytes fixed, per transformer
     * layer and per loss head the rank holds; 0: none */
    size_t ws_fixed, ws_per_layer, ws_per_head;
} ptdp_plan_backend;

/* Of a finished job (ptdp_job_finish): the bytes one stashed micro-batch of
 * virtual stage `stage`'s chunk holds until its backward, and the bytes of
 * workspace all of them share, exactly as the model carves them; a chunk's
 * activation peak is per_slot x (most micro-batches in flight) + shared.
 * The formula is written out in memory.c and docs/performance.md. */
void ptdp_plan_activation_bytes(const ptdp_job *job, int64_t stage, const ptdp_plan_backend *be,
                                double *per_slot, double *shared);

/* Of a finished job: the bytes of every memory category (PTDP_MEM_*) the
 * rank at pipeline rank pp_rank and data-parallel rank dp_rank allocates, as
 * the trainer carves them (the 16-bit jobs of the CPU backends: fp32
 * storage and fp32 master weights). Returns PTDP_ENOMEM, or an error of the
 * schedule (p > 1: the send rings' size comes from replaying every rank's
 * list). */
int ptdp_plan_rank_memory(const ptdp_job *job, int pp_rank, int dp_rank,
                          const ptdp_plan_backend *be, size_t bytes[PTDP_MEM_NCAT]);

/* ---- cluster descriptions ------------------------------------------------------ */
/* Precisions the planner models: X(enum, name, bytes of a weight/activation). */
#define PTDP_PLAN_PRECISIONS(X)  \
    X(PTDP_PREC_FP32, "fp32", 4) \
    X(PTDP_PREC_FP16, "fp16", 2) \
    X(PTDP_PREC_BF16, "bf16", 2)
typedef enum {
#define PTDP__PREC_ENUM(e, s, w) e,
    PTDP_PLAN_PRECISIONS(PTDP__PREC_ENUM)
#undef PTDP__PREC_ENUM
        PTDP_PREC_COUNT
} ptdp_plan_precision;
const char *ptdp_plan_precision_name(int prec); /* "?" when out of range */
int ptdp_plan_precision_bytes(int prec);        /* 4 or 2 */

/* One kind of device and how devices are wired (docs/planner.md shows the
 * JSON file: one key per field, every field required). Links: "intra" joins
 * the devices of one node, "inter" a device to a device of another node;
 * bandwidths are per device, in bytes/s, and are the bus bandwidth a ring
 * collective reaches (what nccl-tests report), latencies in seconds per
 * ring step or message. */
typedef struct {
    char name[64];
    double peak_flops[PTDP_PREC_COUNT]; /* dense GEMM peak per device, FLOP/s */
    /* usable memory of a device; on a shared node (shared_node > 0) the
     * node's, which its ranks share (ptdp_plan_device_memory) */
    double memory_bytes;
    /* devices (ranks) per node; 0 on a shared node: one node holds every
     * rank of the job (`local`, one machine) */
    int devices_per_node;
    double mem_bandwidth; /* device memory bandwidth, bytes/s */
    double intra_bandwidth, intra_latency;
    double inter_bandwidth, inter_latency;
    double gemm_efficiency; /* best fraction of peak a large GEMM reaches */
    double gemm_half_dim;   /* a GEMM dimension of this size halves its factor */
    /* fraction of mem_bandwidth memory-bound kernels reach, per precision
     * (the file gives one number for all, or an object like peak_flops) */
    double elementwise_efficiency[PTDP_PREC_COUNT];
    /* optional (0: absent): ptdp's flash attention measured on this device,
     * FLOP/s of its tile work (the causal tiles only); where given, core
     * attention is that work at this rate, with no s x s scores in memory,
     * instead of the paper's two batched GEMMs and softmax traffic */
    double attention_flops[PTDP_PREC_COUNT];
    double overhead_s; /* fixed cost per iteration (launches, logging, data) */
    /* 0: every device has its own compute and memory (GPUs). C > 0: the
     * devices of a node are processes sharing its C CPU cores (`local`):
     * peak_flops and mem_bandwidth are the whole node's; each of the k =
     * min(n, devices_per_node) ranks on a node runs at 1/min(k, C) of them,
     * and with k > C the ranks take turns (docs/planner.md). */
    int shared_node;
    /* optional ("": absent): the machine --calibrate measured, as
     * ptdp__cli_machine describes it ("AMD EPYC, 2 cores, 23 GiB") */
    char machine[128];
} ptdp_cluster;

/* Ranks a job of n devices puts on one node: min(n, devices_per_node), or n
 * when devices_per_node is 0. Pure. */
int64_t ptdp_plan_ranks_per_node(const ptdp_cluster *c, int64_t n);
/* Memory one device of a job of n devices has: memory_bytes, or on a shared
 * node the node's memory_bytes over the job's ranks on it. Pure. */
double ptdp_plan_device_memory(const ptdp_cluster *c, int64_t n);

/* The share of the s x s scores ptdp's flash attention computes: its tiles
 * of 128 at or below the diagonal, n (n + 1) / 2 of n^2 (n = ceil(s / 128)),
 * 1 for s <= 128 (the attention_flops model, docs/planner.md) */
double ptdp_plan_flash_causal(int64_t s);

/* Parses a cluster description from JSON text; `origin` names it in
 * messages. PTDP_EFORMAT naming the file and the missing or bad key. */
int ptdp_cluster_parse(const char *json, const char *origin, ptdp_cluster *c);
/* Reads a file, then ptdp_cluster_parse. PTDP_EIO / PTDP_EFORMAT. */
int ptdp_cluster_load(const char *path, ptdp_cluster *c);
/* Writes c as a JSON object that ptdp_cluster_parse reads back. PTDP_EIO. */
int ptdp_cluster_write(FILE *f, const ptdp_cluster *c);

/* ---- the performance model -------------------------------------------------------- */
/* What the performance model predicts: a job description (base/job.h) for
 * every layout of it, and what only the planner needs. The search varies
 * the job's t, p, d, v, micro_batch, stages and whether to recompute (its
 * values in `job` are not used); the rest of the job holds for every
 * layout: the model (vocab unpadded, padded per layout to a multiple of
 * vocab_divisible_by x t), global_batch B, dtype, schedule (-1: interleaved
 * if v > 1, else 1f1b), scatter_gather (when t > 1), sequence_parallel (in
 * layouts with t > 1; needs s % t == 0; replaces scatter/gather),
 * distributed_optimizer (ZeRO-1), overlap_grad_reduce, ddp_bucket_size
 * (fp32 memory plan), and recompute / recompute_num_layers: the method a
 * layout that recomputes uses (0 layers: 1). */
typedef struct {
    ptdp_job job;
    int uneven_splits; /* the search also tries Megatron's uneven stage splits (p > 1) */
    /* fp32 (ptdp's own memory plan): the compute backend's numbers, which
     * the plan cannot ask the kernels for: floats attention saves per layer
     * and micro-batch, the CPU's ptdp_attention_saved_floats_cpu (NULL: the
     * probabilities, b al s^2), and the floats of its shared scratch,
     * ptdp_attention_scratch_floats(s, threads per rank). Not counted: the
     * backend's own workspace (ptdp_backend_workspace_size: the native bf16
     * GEMMs' weight copies, about 4 bytes per parameter, and scratch), which
     * only an open backend can size */
    int64_t (*attn_saved_floats)(int64_t s, int64_t b, int64_t al);
    int64_t attn_scratch_floats;
    int bf16_mlp16; /* the CPU's bf16 backend keeps the MLP's activations in bf16
                       (be->mlp_store): --bf16 plans count them so */
} ptdp_plan_job;
/* The job's defaults (ptdp_job_default_params: no model, fp32, automatic
 * schedule, scatter/gather on, no sequence parallelism, no ZeRO-1, overlap
 * on, Megatron's buckets) with uniform recomputation of 1 layer for the
 * layouts that recompute, the uneven splits searched, attention saving its
 * probabilities, no scratch. The caller sets the model's shape and B. */
ptdp_plan_job ptdp_plan_job_default_params(void);
/* The precision (ptdp_plan_precision) of a job's dtype. */
int ptdp_plan_precision_of(const ptdp_job *job);

/* One layout: what the search varies. */
typedef struct {
    int t, p, d, v, b;
    int recompute;            /* 0 none, 1 the job's recompute_method (full with its group size, or
                                 selective) */
    ptdp_stage_layout stages; /* layers per virtual stage (zeroed: the even split) */
} ptdp_plan_layout;

/* Communication kinds the estimate times. */
#define PTDP_PLAN_COMMS(X)            \
    X(PTDP_COMM_TENSOR, "tensor")     \
    X(PTDP_COMM_PIPELINE, "pipeline") \
    X(PTDP_COMM_DATA, "data")         \
    X(PTDP_COMM_EMBEDDING, "embedding")
typedef enum {
#define PTDP__PCOMM_ENUM(e, s) e,
    PTDP_PLAN_COMMS(PTDP__PCOMM_ENUM)
#undef PTDP__PCOMM_ENUM
        PTDP_COMM_COUNT
} ptdp_plan_comm;
const char *ptdp_plan_comm_name(int kind);

/* Memory kinds of the estimate (per device, the most loaded pipeline rank). */
#define PTDP_PLAN_MEMS(X)                   \
    X(PTDP_PMEM_WEIGHTS, "weights")         \
    X(PTDP_PMEM_GRADIENTS, "gradients")     \
    X(PTDP_PMEM_OPTIMIZER, "optimizer")     \
    X(PTDP_PMEM_ACTIVATIONS, "activations") \
    X(PTDP_PMEM_BUFFERS, "buffers")
typedef enum {
#define PTDP__PMEM_ENUM(e, s) e,
    PTDP_PLAN_MEMS(PTDP__PMEM_ENUM)
#undef PTDP__PMEM_ENUM
        PTDP_PMEM_COUNT
} ptdp_plan_mem_kind;
const char *ptdp_plan_mem_name(int kind);

/* The prediction for one layout, with the terms of its equations
 * (docs/planner.md names them) for --explain. Times in seconds. */
typedef struct {
    int m;        /* micro-batches per pipeline, B / (b d) */
    int schedule; /* resolved kind */
    int64_t vocab_padded;
    double iteration_s;             /* the prediction */
    double tflops_per_device;       /* the paper's model FLOPs / (iteration_s * n) / 1e12 */
    double model_flops;             /* the paper's F (ptdp_plan_model_flops) */
    double bubble_fraction;         /* from the simulator: (makespan - ideal) / ideal */
    double pipeline_s;              /* the simulated makespan of the forward and backward passes */
    double comm_s[PTDP_COMM_COUNT]; /* per iteration, on the busiest rank's critical path */
    double optimizer_s;             /* the optimizer step (memory bound) */
    double overhead_s;              /* the cluster's fixed cost */
    double memory[PTDP_PMEM_COUNT]; /* bytes per device */
    double memory_bytes;            /* their sum */
    /* terms of one layer, one micro-batch, one device */
    double layer_gemm_fwd_s, layer_elementwise_fwd_s, layer_tp_fwd_s;
    double layer_attention_fwd_s;    /* core attention's share of layer_gemm_fwd_s */
    double layer_fwd_s, layer_bwd_s; /* backward includes the recomputed forward */
    double gemm_efficiency;          /* of the layer's largest GEMM */
    double head_s, embedding_s;      /* loss head (forward + backward) and embedding */
    double p2p_s;                    /* one point-to-point transfer between stages */
    double dp_allreduce_s;           /* the whole gradient reduction, before overlap */
    double params_per_device;        /* on the most loaded pipeline rank */
    double act_bytes, msg_bytes;     /* of an activation stored, and in a message */
    double grad_bytes;               /* of a gradient */
} ptdp_plan_estimate;

/* Checks the layout against the job and cluster (divisibility, t within a
 * node, n = t p d) and predicts it. Returns PTDP_OK, or PTDP_ECONFIG with a
 * message saying why the layout cannot run (the search's rejection
 * reason), PTDP_ENOMEM. Memory that does not fit is not an error: compare
 * est->memory_bytes with ptdp_plan_device_memory(c, t p d). Pure. */
int ptdp_plan_estimate_layout(const ptdp_cluster *c, const ptdp_plan_job *job,
                              const ptdp_plan_layout *L, ptdp_plan_estimate *est);
/* 1 when a 16-bit job on this cluster is modelled as ptdp's CPU tables run
 * it: a cluster of processes sharing a node's cores (shared_node > 0, what
 * `--calibrate` writes) with --bf16/--fp16 keeps 16-bit values in fp32
 * storage (memory.c's exact plan with fp32 master weights; 4-byte
 * activations and gradients) and sends 2-byte messages. Elsewhere (GPU
 * clusters) 16 bits mean Megatron's 16-bit storage. */
int ptdp_plan_fp32_storage(const ptdp_cluster *c, const ptdp_plan_job *job);

/* The paper's FLOPs of one iteration: its eq. (3), 96 B s l h^2 (1 + s/(6h) +
 * V/(16 l h)), with full recomputation; without, the layers' 72 B s l h^2
 * (1 + s/(6h)) and the logit layer's 6 B s h V, which no recomputation
 * reruns (72 B s l h^2 (1 + s/(6h) + V/(12 l h))); V padded. Selective
 * recomputation (job->recompute_method) adds 4 B s^2 h l. */
double ptdp_plan_model_flops(const ptdp_plan_job *job, int64_t vocab_padded, int recompute);

/* ---- the search ------------------------------------------------------------------------ */
/* Values a search must keep (0 or -1: free). */
typedef struct {
    int t, p, v, b; /* 0: searched */
    int recompute;  /* -1: searched (none and full), else fixed */
    /* a stage split given by the flags (pinned: only this one), or NULL */
    const ptdp_stage_layout *stages;
} ptdp_plan_pins;

typedef struct {
    ptdp_plan_layout layout;
    ptdp_plan_estimate est; /* valid when reason[0] == 0 or the layout only does not fit */
    int fits;               /* 1: runs and fits in memory */
    char reason[200];       /* why rejected ("" when it fits) */
} ptdp_plan_candidate;

/* Every layout of n devices the pins allow: ranked ones first (fit in
 * memory, best predicted iteration time first), then the rejected ones with
 * their reason. *out is malloc'd (caller frees), *count its length, *nfit
 * how many fit. PTDP_EINVAL with one message when the job itself is wrong
 * (heads not divisible, zero sizes) or when no layout of n devices can run
 * at all (the message gives the commonest reason); PTDP_ENOMEM. */
int ptdp_plan_search(const ptdp_cluster *c, const ptdp_plan_job *job, int n,
                     const ptdp_plan_pins *pins, ptdp_plan_candidate **out, int *count, int *nfit);

#ifdef __cplusplus
}
#endif

#endif
