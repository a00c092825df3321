/* comm.c - MPI process groups and collectives with call/byte counters.
 * Not here: NCCL (GPU buffers) or overlapping schedulers; callers decide when
 * to wait. */
#include "comm/comm.h"

#include <stdlib.h>
#include <string.h>

static const char *const op_names[] = {
#define PTDP__OP_NAME(e, s) s,
    PTDP_COMM_OPS(PTDP__OP_NAME)
#undef PTDP__OP_NAME
};
const char *ptdp_comm_op_name(ptdp_comm_op op) { return op_names[op]; }

#define MPI_CHECK(call)                                                      \
    do {                                                                     \
        int mpi__rc = (call);                                                \
        if (mpi__rc != MPI_SUCCESS) {                                        \
            char mpi__msg[MPI_MAX_ERROR_STRING];                             \
            int mpi__len = 0;                                                \
            MPI_Error_string(mpi__rc, mpi__msg, &mpi__len);                  \
            ptdp__assert_fail(#call, __FILE__, __LINE__, mpi__msg);          \
        }                                                                    \
    } while (0)

static void mpi_abort_hook(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Abort(MPI_COMM_WORLD, 134);
}

static void group_single(ptdp_group *g, const char *name) {
    g->name = name;
    g->comm = MPI_COMM_NULL;
    g->size = 1;
    g->rank = 0;
}

void ptdp_comm_init_single(ptdp_comm *c) {
    *c = (ptdp_comm){0};
    c->world_size = 1;
    c->t = c->p = c->d = 1;
    group_single(&c->world, "world");
    group_single(&c->tensor, "tensor");
    group_single(&c->pipeline, "pipeline");
    group_single(&c->data, "data");
    group_single(&c->model, "model");
    group_single(&c->embedding, "embedding");
    c->in_embedding_group = 1;
}

int ptdp_comm_init(ptdp_comm *c, int *argc, char ***argv) {
    ptdp_comm_init_single(c);
    if (MPI_Init(argc, argv) != MPI_SUCCESS) return ptdp_errorf(PTDP_ECOMM, "MPI_Init failed");
    c->mpi_initialized = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &c->world_size));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank));
    ptdp_set_abort_hook(mpi_abort_hook);
    c->world.comm = c->world_size > 1 ? MPI_COMM_WORLD : MPI_COMM_NULL;
    c->world.size = c->world_size;
    c->world.rank = c->world_rank;
    return PTDP_OK;
}

static void split(ptdp_comm *c, ptdp_group *g, const char *name, int color, int key) {
    MPI_Comm sub = MPI_COMM_NULL;
    g->name = name;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, key, &sub));
    if (sub == MPI_COMM_NULL) {
        g->size = 0;
        g->rank = -1;
        g->comm = MPI_COMM_NULL;
        return;
    }
    MPI_CHECK(MPI_Comm_size(sub, &g->size));
    MPI_CHECK(MPI_Comm_rank(sub, &g->rank));
    if (g->size == 1) {
        MPI_Comm_free(&sub);
        sub = MPI_COMM_NULL;
    }
    g->comm = sub;
}

int ptdp_comm_setup(ptdp_comm *c, int t, int p, int d) {
    if (t < 1 || p < 1 || d < 1) return ptdp_errorf(PTDP_ECONFIG, "parallel sizes must be >= 1");
    if ((int64_t)t * p * d != c->world_size)
        return ptdp_errorf(PTDP_ECONFIG,
                           "the job has %d ranks but --tensor-model-parallel-size %d x "
                           "--pipeline-model-parallel-size %d x data-parallel size %d = %d; "
                           "launch with mpirun -np %d",
                           c->world_size, t, p, d, t * p * d, t * p * d);
    c->t = t;
    c->p = p;
    c->d = d;
    int r = c->world_rank;
    c->tp = r % t;
    c->dp = (r / t) % d;
    c->pp = r / (t * d);
    ptdp_log_set_rank(r, c->dp, c->pp, c->tp);
    c->in_embedding_group = c->pp == 0 || c->pp == p - 1;
    if (c->world_size == 1) return PTDP_OK;
    /* tensor: same (dp, pp); pipeline: same (tp, dp); data: same (tp, pp) */
    split(c, &c->tensor, "tensor", c->dp + d * c->pp, c->tp);
    split(c, &c->pipeline, "pipeline", c->tp + t * c->dp, c->pp);
    split(c, &c->data, "data", c->tp + t * c->pp, c->dp);
    split(c, &c->model, "model", c->dp, c->tp + t * c->pp);
    split(c, &c->embedding, "embedding", c->in_embedding_group ? c->tp + t * c->dp : MPI_UNDEFINED,
          c->pp);
    return PTDP_OK;
}

void ptdp_comm_finalize(ptdp_comm *c) {
    if (!c->mpi_initialized) return;
    ptdp_group *gs[] = {&c->tensor, &c->pipeline, &c->data, &c->model, &c->embedding};
    for (int i = 0; i < 5; i++)
        if (gs[i]->comm != MPI_COMM_NULL) MPI_Comm_free(&gs[i]->comm);
    MPI_Finalize();
    c->mpi_initialized = 0;
}

_Noreturn void ptdp_comm_abort(const ptdp_comm *c, int status) {
    fflush(stdout);
    fflush(stderr);
    if (c->mpi_initialized && c->world_size > 1) MPI_Abort(MPI_COMM_WORLD, status);
    if (c->mpi_initialized) MPI_Finalize();
    exit(status);
}

static void count(ptdp_group *g, ptdp_comm_op op, int64_t bytes) {
    g->counters.calls[op]++;
    g->counters.bytes[op] += bytes;
}

static void allreduce(ptdp_group *g, void *buf, int64_t n, MPI_Datatype ty, MPI_Op op, int64_t esize) {
    if (g->size <= 1) return;
    PTDP_ASSERT(n <= INT32_MAX);
    count(g, PTDP_OP_ALLREDUCE, n * esize);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, ty, op, g->comm));
}

void ptdp_allreduce_sum_f32(ptdp_group *g, float *buf, int64_t n) { allreduce(g, buf, n, MPI_FLOAT, MPI_SUM, 4); }
void ptdp_allreduce_max_f32(ptdp_group *g, float *buf, int64_t n) { allreduce(g, buf, n, MPI_FLOAT, MPI_MAX, 4); }
void ptdp_allreduce_sum_f64(ptdp_group *g, double *buf, int64_t n) { allreduce(g, buf, n, MPI_DOUBLE, MPI_SUM, 8); }
void ptdp_allreduce_max_i32(ptdp_group *g, int32_t *buf, int64_t n) { allreduce(g, buf, n, MPI_INT32_T, MPI_MAX, 4); }

void ptdp_iallreduce_sum_f32(ptdp_group *g, float *buf, int64_t n, MPI_Request *req) {
    *req = MPI_REQUEST_NULL;
    if (g->size <= 1) return;
    PTDP_ASSERT(n <= INT32_MAX);
    count(g, PTDP_OP_ALLREDUCE, n * 4);
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, g->comm, req));
}

void ptdp_ireduce_scatter_f32(ptdp_group *g, const float *send, float *recv, int64_t n, MPI_Request *req) {
    *req = MPI_REQUEST_NULL;
    if (g->size <= 1) {
        memcpy(recv, send, sizeof(float) * (size_t)n);
        return;
    }
    PTDP_ASSERT(n <= INT32_MAX);
    count(g, PTDP_OP_REDUCE_SCATTER, n * g->size * 4);
    MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, (int)n, MPI_FLOAT, MPI_SUM, g->comm, req));
}

void ptdp_allreduce_max_u64(ptdp_group *g, uint64_t *buf, int64_t n) { allreduce(g, buf, n, MPI_UINT64_T, MPI_MAX, 8); }

void ptdp_barrier(ptdp_group *g) {
    if (g->size > 1) MPI_CHECK(MPI_Barrier(g->comm));
}

void ptdp_allgather_f32(ptdp_group *g, float *buf, int64_t n) {
    if (g->size <= 1) return;
    PTDP_ASSERT(n <= INT32_MAX);
    count(g, PTDP_OP_ALLGATHER, n * 4);
    MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, (int)n, MPI_FLOAT, buf, (int)n, MPI_FLOAT, g->comm));
}

void ptdp_gather_f32(ptdp_group *g, const float *send, int64_t n, float *recv, int root) {
    if (g->size <= 1) {
        for (int64_t i = 0; i < n; i++) recv[i] = send[i];
        return;
    }
    PTDP_ASSERT(n <= INT32_MAX);
    count(g, PTDP_OP_GATHER, n * 4);
    MPI_CHECK(MPI_Gather(send, (int)n, MPI_FLOAT, recv, (int)n, MPI_FLOAT, root, g->comm));
}

void *ptdp_gatherv_bytes(ptdp_group *g, const void *send, int64_t nbytes, int64_t *counts, int root) {
    PTDP_ASSERT(nbytes <= INT32_MAX);
    if (g->size <= 1) {
        void *out = malloc((size_t)nbytes + 1);
        PTDP_ASSERT(out);
        memcpy(out, send, (size_t)nbytes);
        counts[0] = nbytes;
        return out;
    }
    int n = (int)nbytes, *cnt = NULL, *displ = NULL;
    char *out = NULL;
    if (g->rank == root) {
        cnt = calloc((size_t)g->size, sizeof(int));
        displ = calloc((size_t)g->size, sizeof(int));
        PTDP_ASSERT(cnt && displ);
    }
    MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, cnt, 1, MPI_INT, root, g->comm));
    if (g->rank == root) {
        int64_t total = 0;
        for (int r = 0; r < g->size; r++) {
            displ[r] = (int)total;
            counts[r] = cnt[r];
            total += cnt[r];
        }
        PTDP_ASSERT(total <= INT32_MAX);
        out = malloc((size_t)total + 1);
        PTDP_ASSERT(out);
    }
    count(g, PTDP_OP_GATHER, nbytes);
    MPI_CHECK(MPI_Gatherv(send, n, MPI_BYTE, out, cnt, displ, MPI_BYTE, root, g->comm));
    free(cnt);
    free(displ);
    return out;
}

void ptdp_isend_f32(ptdp_group *g, const float *buf, int64_t n, int peer, int tag, MPI_Request *req) {
    PTDP_ASSERT(g->size > 1 && n <= INT32_MAX);
    count(g, PTDP_OP_SEND, n * 4);
    MPI_CHECK(MPI_Isend(buf, (int)n, MPI_FLOAT, peer, tag, g->comm, req));
}

void ptdp_irecv_f32(ptdp_group *g, float *buf, int64_t n, int peer, int tag, MPI_Request *req) {
    PTDP_ASSERT(g->size > 1 && n <= INT32_MAX);
    count(g, PTDP_OP_RECV, n * 4);
    MPI_CHECK(MPI_Irecv(buf, (int)n, MPI_FLOAT, peer, tag, g->comm, req));
}

void ptdp_wait(MPI_Request *req) {
    if (*req != MPI_REQUEST_NULL) MPI_CHECK(MPI_Wait(req, MPI_STATUS_IGNORE));
}

int ptdp_test(MPI_Request *req) {
    if (*req == MPI_REQUEST_NULL) return 1;
    int done = 0;
    MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
    return done;
}

void ptdp_comm_counters_reset(ptdp_comm *c) {
    ptdp_group *gs[] = {&c->world, &c->tensor, &c->pipeline, &c->data, &c->model, &c->embedding};
    for (int i = 0; i < 6; i++) gs[i]->counters = (ptdp_comm_counters){0};
}

void ptdp_comm_log_counters(const ptdp_comm *c) {
    const ptdp_group *gs[] = {&c->world, &c->tensor, &c->pipeline, &c->data, &c->model, &c->embedding};
    for (int i = 0; i < 6; i++)
        for (int op = 0; op < PTDP_OP_COUNT; op++)
            if (gs[i]->counters.calls[op])
                ptdp_log("comm %-9s %-14s calls %8lld  bytes %12lld", gs[i]->name, op_names[op],
                         (long long)gs[i]->counters.calls[op], (long long)gs[i]->counters.bytes[op]);
}
