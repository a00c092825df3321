/* comm.h - process groups from the rank layout and the collectives and
 * point-to-point operations ptdp uses, over MPI on CPU (NCCL later for GPU
 * buffers, with MPI still launching the processes). Every call names its
 * group; per-group counters record calls and payload bytes per operation so
 * tests can check traffic against the paper's formulas.
 *
 * Rank layout (Megatron's default order): global rank = tp + t*(dp + d*pp).
 * A group of size 1 never calls MPI: single-process runs and unit tests need
 * no MPI_Init. */
#ifndef PTDP_COMM_H
#define PTDP_COMM_H

#include <mpi.h>
#include <stdint.h>

#include "base/base.h"

#define PTDP_COMM_OPS(X)                \
    X(PTDP_OP_ALLREDUCE, "all-reduce")   \
    X(PTDP_OP_ALLGATHER, "all-gather")   \
    X(PTDP_OP_GATHER, "gather")          \
    X(PTDP_OP_REDUCE_SCATTER, "reduce-scatter") \
    X(PTDP_OP_BROADCAST, "broadcast")    \
    X(PTDP_OP_SEND, "send")              \
    X(PTDP_OP_RECV, "recv")
typedef enum {
#define PTDP__OP_ENUM(e, s) e,
    PTDP_COMM_OPS(PTDP__OP_ENUM)
#undef PTDP__OP_ENUM
    PTDP_OP_COUNT
} ptdp_comm_op;
const char *ptdp_comm_op_name(ptdp_comm_op op);

typedef struct {
    int64_t calls[PTDP_OP_COUNT];
    int64_t bytes[PTDP_OP_COUNT]; /* payload bytes handed to the call */
} ptdp_comm_counters;

typedef struct {
    const char *name; /* "tensor", "pipeline", ... */
    MPI_Comm comm;    /* MPI_COMM_NULL when size == 1 or not a member */
    int size;
    int rank;
    ptdp_comm_counters counters;
} ptdp_group;

/* The parallel layout of this process. */
typedef struct {
    int world_size, world_rank;
    int t, p, d;    /* sizes */
    int tp, pp, dp; /* this rank's coordinates */
    int mpi_initialized;
    ptdp_group world, tensor, pipeline, data, model, embedding;
    int in_embedding_group; /* first or last pipeline stage */
} ptdp_comm;

/* Initialises MPI (a one-process run works without mpirun) and installs an
 * abort hook so a failing assert takes the whole job down. Collective over
 * the world. Returns PTDP_ECOMM on MPI failure. */
int ptdp_comm_init(ptdp_comm *c, int *argc, char ***argv);
/* A layout without MPI: world of size 1 (for tests and tools). */
void ptdp_comm_init_single(ptdp_comm *c);
/* Checks n == t*p*d (PTDP_ECONFIG with a message otherwise; every rank
 * returns the same verdict) and splits the communicators. Collective. */
int ptdp_comm_setup(ptdp_comm *c, int t, int p, int d);
void ptdp_comm_finalize(ptdp_comm *c);
/* Ends the whole job with `status` from any rank (MPI_Abort when running
 * under MPI with more than one rank, exit otherwise). */
_Noreturn void ptdp_comm_abort(const ptdp_comm *c, int status);

/* Collectives: every member of the group must call, in the same order.
 * In place on buf; block until done. Assert on MPI failure (ranks that cannot
 * talk cannot recover). */
void ptdp_allreduce_sum_f32(ptdp_group *g, float *buf, int64_t n);
void ptdp_allreduce_max_f32(ptdp_group *g, float *buf, int64_t n);
void ptdp_allreduce_sum_f64(ptdp_group *g, double *buf, int64_t n);
void ptdp_allreduce_max_i32(ptdp_group *g, int32_t *buf, int64_t n);
void ptdp_allreduce_max_u64(ptdp_group *g, uint64_t *buf, int64_t n);
void ptdp_barrier(ptdp_group *g);
/* In place: buf holds size blocks of n floats; block `rank` is this member's
 * contribution, every block is filled from its owner. */
void ptdp_allgather_f32(ptdp_group *g, float *buf, int64_t n);
/* Gathers n floats from every member into recv [size, n] on `root` (recv
 * may be NULL elsewhere). */
void ptdp_gather_f32(ptdp_group *g, const float *send, int64_t n, float *recv, int root);

/* Non-blocking collectives (complete with ptdp_wait). In place for the
 * all-reduce; the reduce-scatter sums size blocks of n floats of `send` and
 * leaves this member's block in recv. */
void ptdp_iallreduce_sum_f32(ptdp_group *g, float *buf, int64_t n, MPI_Request *req);
void ptdp_ireduce_scatter_f32(ptdp_group *g, const float *send, float *recv, int64_t n, MPI_Request *req);

/* Gathers a variable number of bytes from every member to `root`: returns
 * on root a malloc'd buffer of all contributions in rank order and fills
 * counts[size] (caller-owned, root only); NULL elsewhere. */
void *ptdp_gatherv_bytes(ptdp_group *g, const void *send, int64_t nbytes, int64_t *counts, int root);

/* Non-blocking point-to-point on a group (peer is the rank in the group).
 * The request must be completed with ptdp_wait before the buffer is reused. */
void ptdp_isend_f32(ptdp_group *g, const float *buf, int64_t n, int peer, int tag, MPI_Request *req);
void ptdp_irecv_f32(ptdp_group *g, float *buf, int64_t n, int peer, int tag, MPI_Request *req);
void ptdp_wait(MPI_Request *req);
/* Non-blocking check; also lets MPI progress the request (Open MPI moves
 * non-blocking collectives only inside MPI calls). 1 when complete. */
int ptdp_test(MPI_Request *req);

/* Adds the group's counters to a printable report; returns bytes written. */
void ptdp_comm_counters_reset(ptdp_comm *c);
void ptdp_comm_log_counters(const ptdp_comm *c);

#endif
