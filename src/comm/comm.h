/* comm.h - process groups from the rank layout and the collectives and
 * point-to-point operations ptdp uses, behind a table of function pointers
 * (the communication backend, in the manner of ggml-backend and of the
 * compute table in kernels/kernels.h).
 *
 * Two layers:
 *  - this header's functions (comm.c): every call names its group, counts
 *    calls and payload bytes per operation on that group (so tests can check
 *    traffic against the paper's formulas) and dispatches to the group's
 *    backend. Counting lives here, never in a backend.
 *  - backends, one `ptdp_comm_ops` table each: "mpi" (mpi.c, CPU buffers,
 *    processes launched by mpirun) and "local" (local.c, one process: a world
 *    of size 1, for unit tests and tools; it also serves every group of size
 *    1 in an MPI job). NCCL will be a third table for GPU buffers, with MPI
 *    still launching the processes.
 * No file outside src/comm/ sees an MPI type or calls MPI.
 *
 * Rank layout (Megatron's default order): global rank = tp + t*(dp + d*pp).
 * A group of size 1 moves no bytes: it is served by the local backend, counts
 * nothing, and single-process runs need no MPI_Init.
 *
 * Requests: `ptdp_comm_req` is a small value with inline storage for the
 * backend's handle (an MPI_Request; later a CUDA event), so starting a
 * non-blocking operation never allocates. Callers keep them wherever they
 * keep the buffer (a bucket, an array per (direction, chunk, micro-batch)).
 * A zero-initialised request (PTDP_COMM_REQ_NULL) is complete; ptdp_wait
 * and a successful ptdp_test reset a request to complete, so waiting twice
 * is harmless. A request must not be copied while pending and waited on
 * through both copies. */
#ifndef PTDP_COMM_H
#define PTDP_COMM_H

#include <stdint.h>

#include "../base/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PTDP_COMM_OPS(X)                        \
    X(PTDP_OP_ALLREDUCE, "all-reduce")          \
    X(PTDP_OP_ALLGATHER, "all-gather")          \
    X(PTDP_OP_GATHER, "gather")                 \
    X(PTDP_OP_REDUCE_SCATTER, "reduce-scatter") \
    X(PTDP_OP_BROADCAST, "broadcast")           \
    X(PTDP_OP_SEND, "send")                     \
    X(PTDP_OP_RECV, "recv")
typedef enum {
#define PTDP__OP_ENUM(e, s) e,
    PTDP_COMM_OPS(PTDP__OP_ENUM)
#undef PTDP__OP_ENUM
        PTDP_OP_COUNT
} ptdp_comm_op;
const char *ptdp_comm_op_name(ptdp_comm_op op);

/* Element types and reductions the backends must support (name, bytes). */
#define PTDP_COMM_DTYPES(X)      \
    X(PTDP_COMM_F32, "f32", 4)   \
    X(PTDP_COMM_F64, "f64", 8)   \
    X(PTDP_COMM_I32, "i32", 4)   \
    X(PTDP_COMM_I64, "i64", 8)   \
    X(PTDP_COMM_U64, "u64", 8)   \
    X(PTDP_COMM_BYTE, "byte", 1) \
    X(PTDP_COMM_BF16, "bf16", 2) \
    X(PTDP_COMM_F16, "f16", 2)
typedef enum {
#define PTDP__DT_ENUM(e, s, n) e,
    PTDP_COMM_DTYPES(PTDP__DT_ENUM)
#undef PTDP__DT_ENUM
        PTDP_COMM_NDTYPES
} ptdp_comm_dtype;
size_t ptdp_comm_dtype_size(ptdp_comm_dtype dt);
typedef enum { PTDP_COMM_SUM, PTDP_COMM_MAX } ptdp_comm_reduce;

typedef struct {
    int64_t calls[PTDP_OP_COUNT];
    int64_t bytes[PTDP_OP_COUNT]; /* payload bytes handed to the call */
} ptdp_comm_counters;

typedef struct ptdp_comm_ops ptdp_comm_ops;
struct ptdp_group;

/* The operation this process is blocked in, for the watchdog (watchdog.c):
 * one record per ptdp_comm, its groups point at it. comm.c defines it (an
 * atomic sequence number, odd while an operation is in flight, and what the
 * watchdog names); here it is storage only, so that this header needs no
 * <stdatomic.h> and C++ programs can include it. */
struct ptdp__inflight;
#define PTDP_COMM_INFLIGHT_BYTES 64
typedef union {
    unsigned char bytes[PTDP_COMM_INFLIGHT_BYTES];
    void *align_p;
    int64_t align_i;
    double align_d;
} ptdp__inflight_storage;

/* A process group. Built by ptdp_comm_setup; a hand-made group
 * `{.name = "x", .size = 1, .rank = 0}` (ops NULL) is a valid group of one. */
typedef struct ptdp_group {
    const char *name;         /* "tensor", "pipeline", ... */
    const ptdp_comm_ops *ops; /* backend serving the group; NULL = local */
    void *impl;               /* backend's communicator (backend-owned); NULL
                                 when size == 1 or not a member */
    int size;                 /* 0 when this rank is not a member */
    int rank;                 /* -1 when not a member */
    ptdp_comm_counters counters;
    int32_t *members;                /* world rank of each member, in group-rank order
                                        (ptdp_comm_setup; NULL in hand-made groups): for
                                        the watchdog's message */
    struct ptdp__inflight *inflight; /* its ptdp_comm's record (NULL in hand-made groups) */
} ptdp_group;

/* A non-blocking operation in flight. Opaque: callers only pass its
 * address. `ops` is the backend that started it (NULL: complete). */
#define PTDP_COMM_REQ_BYTES 24 /* an MPI_Request is 8 bytes (Open MPI), 4 (MPICH) */
typedef struct {
    const ptdp_comm_ops *ops;
    const ptdp_group *group; /* what it is, for the watchdog's message */
    int op, peer;            /* ptdp_comm_op; the peer's group rank or -1 */
    union {
        unsigned char bytes[PTDP_COMM_REQ_BYTES];
        void *align_p;
        int64_t align_i;
    } impl;
} ptdp_comm_req;
#define PTDP_COMM_REQ_NULL ((ptdp_comm_req){.ops = NULL})

/* The parallel layout of this process. Its groups point into it (the
 * record of the operation in flight): it stays where ptdp_comm_init put it. */
typedef struct ptdp_comm {
    int world_size, world_rank;
    int t, p, d;              /* sizes */
    int tp, pp, dp;           /* this rank's coordinates */
    const ptdp_comm_ops *ops; /* the world's backend */
    int initialized;          /* ops->init succeeded; finalize pending */
    void *impl;               /* the world backend's own state (mpi.c: ptdp's communicator,
                                 whether ptdp started MPI) */
    ptdp_group world, tensor, pipeline, data, model, embedding;
    int in_embedding_group;          /* first or last pipeline stage */
    struct ptdp__watchdog *watchdog; /* ptdp_comm_watchdog_start; NULL if none */
    ptdp__inflight_storage inflight; /* what this process is blocked in (its groups'; comm.c) */
} ptdp_comm;

/* The backend table. comm.c calls an entry only with arguments it has
 * checked (n fits the backend, the group has a member here) and only for
 * groups the backend built, except that the local table serves every group
 * of size 1. Collective entries block until done; i* entries start the
 * operation, fill req->impl and return (comm.c sets req->ops). Entries
 * assert on failure (ranks that cannot talk cannot recover), except init
 * which returns a negative PTDP_E* code. Nothing here allocates, except
 * init/split (once, at start-up) and gatherv (checkpoints, export). */
struct ptdp_comm_ops {
    const char *name; /* "mpi", "local" */

    /* lifecycle: init fills c->world_size/world_rank and c->world.impl;
     * split builds g from colour/key over the world (colour < 0: this rank
     * is in no group; size/rank/impl set, impl NULL for a group of one);
     * group_free releases g->impl; finalize ends the backend; abort ends the
     * whole job from any rank (it may return: the caller then exits);
     * node_size counts this node's ranks (for threads per rank). */
    int (*init)(ptdp_comm *c, int *argc, char ***argv, const void *host);
    void (*split)(ptdp_comm *c, ptdp_group *g, int color, int key);
    void (*group_free)(ptdp_group *g);
    void (*finalize)(ptdp_comm *c);
    void (*abort)(const ptdp_comm *c, int status);
    int (*node_size)(const ptdp_comm *c);

    /* blocking collectives; buf in place unless named send/recv */
    void (*allreduce)(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt, ptdp_comm_reduce op);
    void (*allgather)(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt);
    void (*gather)(ptdp_group *g, const void *send, int64_t n, ptdp_comm_dtype dt, void *recv,
                   int root);
    /* bytes: nbytes from every member into recv at the offsets given by
     * counts[size] (root only; comm.c gathers the counts first) */
    void (*gatherv)(ptdp_group *g, const void *send, int64_t nbytes, void *recv,
                    const int64_t *counts, int root);
    /* sums size blocks of n elements of send; this member's block into recv
     * (send and recv do not overlap) */
    void (*reduce_scatter)(ptdp_group *g, const void *send, void *recv, int64_t n,
                           ptdp_comm_dtype dt);
    void (*barrier)(ptdp_group *g);

    /* non-blocking */
    void (*iallreduce)(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt, ptdp_comm_reduce op,
                       ptdp_comm_req *req);
    void (*ireduce_scatter)(ptdp_group *g, const void *send, void *recv, int64_t n,
                            ptdp_comm_dtype dt, ptdp_comm_req *req);
    void (*isend)(ptdp_group *g, const void *buf, int64_t n, ptdp_comm_dtype dt, int peer, int tag,
                  ptdp_comm_req *req);
    void (*irecv)(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt, int peer, int tag,
                  ptdp_comm_req *req);
    void (*wait)(ptdp_comm_req *req);
    int (*test)(ptdp_comm_req *req); /* 1 when complete */
};

/* Whether MPI is initialised and not yet finalised in this process (by ptdp
 * or by the program embedding it). mpi.c. */
int ptdp__comm_mpi_running(void);
/* ptdp_comm_init's work on the world `host` (NULL: MPI_COMM_WORLD; else
 * points at an MPI_Comm, comm_mpi.h). */
int ptdp__comm_init_on(ptdp_comm *c, int *argc, char ***argv, const void *host);

/* The two tables (static data; never modified). */
extern const ptdp_comm_ops ptdp_comm_mpi_ops;
extern const ptdp_comm_ops ptdp_comm_local_ops;

/* Starts the MPI backend when a launcher (mpirun, srun, mpiexec) started
 * this process or the program already initialised MPI, and installs an abort
 * hook so a failing assert takes the whole job down. A process started on its
 * own is a one-process job on the in-process backend (no MPI start-up at all).
 * ptdp calls MPI_Init only when nobody has (and then MPI_Finalize in
 * ptdp_comm_finalize); it works on its own duplicate of MPI_COMM_WORLD, on
 * which it sets MPI_ERRORS_RETURN, and changes nothing of the program's
 * communicators. To run ptdp on some of a program's ranks, see
 * ptdp_comm_init_mpi (comm/comm_mpi.h).
 * Called once, first thing, by every rank (collective over the world).
 * Returns PTDP_ECOMM on MPI failure (every rank that gets it says so; MPI
 * itself usually aborts the job first). */
int ptdp_comm_init(ptdp_comm *c, int *argc, char ***argv);
/* A layout on the local backend: world of size 1 (for tests and tools).
 * Cannot fail; needs no finalize (calling it is harmless). */
void ptdp_comm_init_single(ptdp_comm *c);
/* Checks n == t*p*d (PTDP_ECONFIG with a message otherwise; every rank
 * returns the same verdict) and splits the groups. Collective over the
 * world, once, after init. Groups of size 1 get the local backend. */
int ptdp_comm_setup(ptdp_comm *c, int t, int p, int d);
/* Frees the groups and ptdp's communicators, and ends MPI if ptdp started
 * it (a program that initialised MPI itself keeps it, and finalises it
 * itself). Every rank, last; collective over the world. */
void ptdp_comm_finalize(ptdp_comm *c);
/* Ends the whole job with `status` from any rank (MPI_Abort when running
 * under MPI with more than one rank, exit otherwise). */
PTDP_NORETURN void ptdp_comm_abort(const ptdp_comm *c, int status);
/* Ranks of this job on this node (1 on the local backend or a world of
 * one). Collective over the world under MPI (it splits the world by node):
 * every rank calls it, once, at start-up. */
int ptdp_comm_node_size(const ptdp_comm *c);

/* Blocking collectives: every member of the group must call, in the same
 * order, with the same n (and root). In place on buf. Assert on backend
 * failure (ranks that cannot talk cannot recover). Counted as one call of n
 * elements when the group has more than one member. */
void ptdp_allreduce_sum_f32(ptdp_group *g, float *buf, int64_t n);
void ptdp_allreduce_max_f32(ptdp_group *g, float *buf, int64_t n);
void ptdp_allreduce_sum_f64(ptdp_group *g, double *buf, int64_t n);
void ptdp_allreduce_max_i32(ptdp_group *g, int32_t *buf, int64_t n);
void ptdp_allreduce_max_u64(ptdp_group *g, uint64_t *buf, int64_t n);
void ptdp_barrier(ptdp_group *g); /* not counted */
/* In place: buf holds size blocks of n floats; block `rank` is this member's
 * contribution, every block is filled from its owner. Counts n floats. */
void ptdp_allgather_f32(ptdp_group *g, float *buf, int64_t n);
/* Sums size blocks of n floats of `send` [size, n] over the group and
 * leaves this member's block (block `rank`) in recv [n]; send and recv must
 * not overlap. The conjugate of ptdp_allgather_f32 (sequence parallelism:
 * the tensor group's all-reduce split in two). Counts n*size floats, the
 * bytes an all-reduce of `send` would count. */
void ptdp_reduce_scatter_sum_f32(ptdp_group *g, const float *send, float *recv, int64_t n);
/* Activations of a 16-bit run on the wire. Under --bf16/--fp16 the model's
 * activations and their gradients are bf16/fp16 values held in fp32 storage
 * (kernels.h); these move them as 16-bit values, as Megatron's bf16/fp16
 * tensors travel: half the bytes (counted as such). Each packs the values in
 * place (ptdp_pack_n), runs the operation on the 16-bit values and unpacks
 * the result into fp32 storage. The all-reduce and the reduce-scatter sum in
 * fp32 and round each partial sum to the 16-bit grid (what NCCL does with
 * bf16/fp16 buffers): over two members that is the rounded fp32 sum. With dt
 * fp32, and on a group of one, each is its _f32 call. */
void ptdp_allreduce_sum_act(ptdp_group *g, float *buf, int64_t n, ptdp_dtype dt);
/* As ptdp_allgather_f32: block `rank` of buf [size, n] is this member's. */
void ptdp_allgather_act(ptdp_group *g, float *buf, int64_t n, ptdp_dtype dt);
/* As ptdp_reduce_scatter_sum_f32; a 16-bit dt packs `send` in place (its
 * contents are lost). */
void ptdp_reduce_scatter_sum_act(ptdp_group *g, float *send, float *recv, int64_t n, ptdp_dtype dt);
/* The 16-bit building blocks of the pipeline's messages (the executor packs
 * and unpacks around them): buf holds n values of dt (PTDP_COMM_F32, BF16 or
 * F16) in its first n * size bytes. */
void ptdp_allgather_dt(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt);
void ptdp_isend_dt(ptdp_group *g, const void *buf, int64_t n, ptdp_comm_dtype dt, int peer, int tag,
                   ptdp_comm_req *req);
void ptdp_irecv_dt(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt, int peer, int tag,
                   ptdp_comm_req *req);
/* The element type a training precision's activations travel as. */
ptdp_comm_dtype ptdp_comm_act_dtype(ptdp_dtype dt);

/* Gathers n floats from every member into recv [size, n] on `root` (recv
 * may be NULL elsewhere). Counts n floats. */
void ptdp_gather_f32(ptdp_group *g, const float *send, int64_t n, float *recv, int root);

/* Non-blocking collectives: every member starts them in the same order and
 * completes them with ptdp_wait (or ptdp_test) before touching the buffers.
 * In place for the all-reduce (counts n floats); the reduce-scatter sums
 * size blocks of n floats of `send` and leaves this member's block in recv
 * (counts n*size floats). On a group of one the result is ready on return
 * and *req is complete. Never allocate. */
void ptdp_iallreduce_sum_f32(ptdp_group *g, float *buf, int64_t n, ptdp_comm_req *req);
void ptdp_ireduce_scatter_f32(ptdp_group *g, const float *send, float *recv, int64_t n,
                              ptdp_comm_req *req);

/* Gathers a variable number of bytes from every member to `root`: returns
 * on root a malloc'd buffer (caller frees) of all contributions in rank
 * order and fills counts[size] (caller-owned, root only); NULL elsewhere.
 * Collective; allocates (checkpoints and export only, never in an
 * iteration). Counts nbytes as one gather. */
void *ptdp_gatherv_bytes(ptdp_group *g, const void *send, int64_t nbytes, int64_t *counts,
                         int root);

/* Non-blocking point-to-point on a group of more than one member (peer is
 * the rank in the group; asserts otherwise). A send matches the receive
 * with the same (group, peer, tag); the buffer must not be touched until
 * the request completes (ptdp_wait). Counted on the group as send / recv of
 * n floats. Never allocate. */
void ptdp_isend_f32(ptdp_group *g, const float *buf, int64_t n, int peer, int tag,
                    ptdp_comm_req *req);
void ptdp_irecv_f32(ptdp_group *g, float *buf, int64_t n, int peer, int tag, ptdp_comm_req *req);
/* Blocks until req completes, then makes it complete (PTDP_COMM_REQ_NULL);
 * a complete request returns at once. Asserts on backend failure. */
void ptdp_wait(ptdp_comm_req *req);
/* Non-blocking check; also lets the backend progress the request (Open MPI
 * moves non-blocking collectives only inside MPI calls). 1 when complete
 * (the request is then reset as by ptdp_wait). */
int ptdp_test(ptdp_comm_req *req);

/* The watchdog (Megatron's --distributed-timeout-minutes): every blocking
 * operation and every ptdp_wait records what is in flight (operation, group,
 * peer, since when; ptdp_activity's iteration and phase). A thread wakes
 * every second or so; when one operation has been in flight for longer than
 * timeout_s it prints one line naming the operation, the group's members or
 * the peer, the phase and iteration, and which of those ranks on this host
 * have exited or are stopped (their pids are exchanged here), then ends the
 * whole job (the backend's abort: MPI_Abort, called from the thread, which
 * Open MPI serves without MPI_THREAD_MULTIPLE). Without it a lost rank that
 * the launcher does not report (srun without --kill-on-bad-exit, a stopped
 * or hung process, a lost host) leaves the others waiting forever.
 * Collective over the world (one all-gather), once, after ptdp_comm_setup;
 * does nothing on a world of one or when timeout_s <= 0. Returns PTDP_ENOMEM
 * or PTDP_ECOMM (thread creation) with a message; stopped by
 * ptdp_comm_finalize. watchdog.c. */
int ptdp_comm_watchdog_start(ptdp_comm *c, double timeout_s);
void ptdp__comm_watchdog_stop(ptdp_comm *c);
/* The operation c's groups have in flight, for the watchdog: returns a
 * sequence number, odd while one is in flight (then *op, *group, *peer
 * (group rank or -1) and *since (ptdp_now) describe it), even otherwise. */
uint64_t ptdp__comm_inflight(const ptdp_comm *c, int *op, const ptdp_group **group, int *peer,
                             double *since);

/* Zeroes every group's counters; logs the non-zero ones (one line per group
 * and operation: "comm GROUP OP calls N bytes B"). Local, not collective. */
void ptdp_comm_counters_reset(ptdp_comm *c);
void ptdp_comm_log_counters(const ptdp_comm *c);

#ifdef __cplusplus
}
#endif

#endif
