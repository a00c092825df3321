/* comm.c - the backend-independent layer: groups from the rank layout,
 * per-group call/byte counters, dispatch to the group's backend table.
 * Not here: any MPI (mpi.c), any in-process logic (local.c), overlapping
 * schedulers (callers decide when to wait). */
#include "comm/comm.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The operation in flight, for the watchdog: one record per ptdp_comm, in
 * its `inflight` storage (comm.h keeps it opaque: no atomics in a public
 * header). The fields are written before `seq` turns odd (release) and read
 * after it is seen odd (acquire); one thread issues every operation. */
struct ptdp__inflight {
    atomic_uint_fast64_t seq;
    int op, peer;
    const struct ptdp_group *group;
    double since;
};
_Static_assert(sizeof(struct ptdp__inflight) <= PTDP_COMM_INFLIGHT_BYTES,
               "ptdp__inflight_storage is too small");
_Static_assert(_Alignof(struct ptdp__inflight) <= _Alignof(ptdp__inflight_storage),
               "ptdp__inflight_storage is not aligned enough");
static struct ptdp__inflight *inflight_of(ptdp_comm *c) {
    return (struct ptdp__inflight *)(void *)c->inflight.bytes;
}

/* The operation in flight, in the record of the group's ptdp_comm.
 * Both do nothing for a group of one (it never waits for anyone) or a
 * hand-made group. */
static void inflight_begin(const ptdp_group *g, int op, int peer) {
    if (!g || g->size <= 1 || !g->inflight) return;
    struct ptdp__inflight *f = g->inflight;
    f->op = op;
    f->group = g;
    f->peer = peer;
    f->since = ptdp_now();
    atomic_fetch_add_explicit(&f->seq, 1, memory_order_release);
}
static void inflight_end(const ptdp_group *g) {
    if (!g || g->size <= 1 || !g->inflight) return;
    atomic_fetch_add_explicit(&g->inflight->seq, 1, memory_order_release);
}

uint64_t ptdp__comm_inflight(const ptdp_comm *c, int *op, const ptdp_group **group, int *peer,
                             double *since) {
    const struct ptdp__inflight *f = inflight_of((ptdp_comm *)c);
    uint64_t s = atomic_load_explicit(&f->seq, memory_order_acquire);
    *op = f->op;
    *group = f->group;
    *peer = f->peer;
    *since = f->since;
    return s;
}

static const char *const op_names[] = {
#define PTDP__OP_NAME(e, s) s,
    PTDP_COMM_OPS(PTDP__OP_NAME)
#undef PTDP__OP_NAME
};
const char *ptdp_comm_op_name(ptdp_comm_op op) { return op_names[op]; }

static const size_t dtype_sizes[] = {
#define PTDP__DT_SIZE(e, s, n) n,
    PTDP_COMM_DTYPES(PTDP__DT_SIZE)
#undef PTDP__DT_SIZE
};
size_t ptdp_comm_dtype_size(ptdp_comm_dtype dt) { return dtype_sizes[dt]; }

/* A group of one needs no backend state: the local table serves it. */
static const ptdp_comm_ops *ops_of(const ptdp_group *g) {
    if (g->size <= 1) return &ptdp_comm_local_ops;
    PTDP_ASSERT_MSG(g->ops, "a group of more than one member without a backend");
    return g->ops;
}

static void group_single(ptdp_group *g, const char *name) {
    *g =
        (ptdp_group){.name = name, .ops = &ptdp_comm_local_ops, .impl = NULL, .size = 1, .rank = 0};
}

void ptdp_comm_init_single(ptdp_comm *c) {
    *c = (ptdp_comm){0};
    c->world_size = 1;
    c->t = c->p = c->d = 1;
    c->ops = &ptdp_comm_local_ops;
    group_single(&c->world, "world");
    c->world.inflight = inflight_of(c);
    group_single(&c->tensor, "tensor");
    group_single(&c->pipeline, "pipeline");
    group_single(&c->data, "data");
    group_single(&c->model, "model");
    group_single(&c->embedding, "embedding");
    c->in_embedding_group = 1;
}

/* Whether a launcher (mpirun, srun, mpiexec) started this process: each
 * sets one of these in every rank's environment. */
static int launched(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

int ptdp__comm_init_on(ptdp_comm *c, int *argc, char ***argv, const void *host) {
    ptdp_comm_init_single(c);
    /* A process started on its own is a one-process job: the in-process
     * backend, without MPI's start-up (Open MPI's singleton init forks a
     * daemon: half a second per process), unless the program embedding
     * ptdp runs MPI already or hands ptdp a communicator. */
    if (!host && !launched() && !ptdp__comm_mpi_running()) return PTDP_OK;
    c->ops = &ptdp_comm_mpi_ops;
    int rc = c->ops->init(c, argc, argv, host);
    if (rc != PTDP_OK) {
        c->ops = &ptdp_comm_local_ops;
        return rc;
    }
    c->initialized = 1;
    c->world.size = c->world_size;
    c->world.rank = c->world_rank;
    if (c->world_size > 1) c->world.ops = c->ops;
    return PTDP_OK;
}

int ptdp_comm_init(ptdp_comm *c, int *argc, char ***argv) {
    return ptdp__comm_init_on(c, argc, argv, NULL);
}

static void split(ptdp_comm *c, ptdp_group *g, const char *name, int color, int key) {
    g->name = name;
    g->impl = NULL;
    c->ops->split(c, g, color, key);
    g->ops = g->size > 1 ? c->ops : &ptdp_comm_local_ops;
    g->inflight = inflight_of(c);
}

/* World rank of member i of group g, from the layout and the split keys
 * below (rank = tp + t*(dp + d*pp)). */
static int member_rank(const ptdp_comm *c, const ptdp_group *g, int i) {
    const int t = c->t, d = c->d;
    if (g == &c->tensor) return i + t * (c->dp + d * c->pp);
    if (g == &c->pipeline) return c->tp + t * (c->dp + d * i);
    if (g == &c->data) return c->tp + t * (i + d * c->pp);
    if (g == &c->model) return i % t + t * (c->dp + d * (i / t));
    if (g == &c->embedding) return c->tp + t * (c->dp + d * (i ? c->p - 1 : 0));
    return i; /* world */
}

static void set_members(ptdp_comm *c) {
    ptdp_group *gs[] = {&c->world, &c->tensor, &c->pipeline, &c->data, &c->model, &c->embedding};
    for (int k = 0; k < 6; k++) {
        if (gs[k]->size <= 1) continue;
        gs[k]->members = malloc(sizeof(int32_t) * (size_t)gs[k]->size);
        PTDP_ASSERT_MSG(gs[k]->members, "out of memory at start-up");
        for (int i = 0; i < gs[k]->size; i++) gs[k]->members[i] = member_rank(c, gs[k], i);
    }
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
    split(c, &c->embedding, "embedding", c->in_embedding_group ? c->tp + t * c->dp : -1, c->pp);
    set_members(c);
    return PTDP_OK;
}

void ptdp_comm_finalize(ptdp_comm *c) {
    if (!c->initialized) return;
    ptdp__comm_watchdog_stop(c);
    ptdp_group *gs[] = {&c->tensor, &c->pipeline, &c->data, &c->model, &c->embedding, &c->world};
    for (int i = 0; i < 6; i++) {
        free(gs[i]->members);
        gs[i]->members = NULL;
    }
    for (int i = 0; i < 5; i++)
        if (gs[i]->impl) c->ops->group_free(gs[i]);
    c->ops->finalize(c);
    c->initialized = 0;
}

_Noreturn void ptdp_comm_abort(const ptdp_comm *c, int status) {
    fflush(stdout);
    fflush(stderr);
    if (c->initialized) c->ops->abort(c, status);
    exit(status);
}

int ptdp_comm_node_size(const ptdp_comm *c) {
    if (!c->initialized || c->world_size <= 1) return 1;
    return c->ops->node_size(c);
}

/* Counts only groups of more than one member: a group of one moves no
 * bytes, and the paper's formulas count none. */
static void count(ptdp_group *g, ptdp_comm_op op, int64_t bytes) {
    if (g->size <= 1) return;
    ptdp_fault_point(g->name, op_names[op]); /* tests: kill.tensor-all-reduce, ... */
    g->counters.calls[op]++;
    g->counters.bytes[op] += bytes;
}

static void allreduce(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt,
                      ptdp_comm_reduce op) {
    PTDP_ASSERT(n >= 0 && n <= INT32_MAX);
    count(g, PTDP_OP_ALLREDUCE, n * (int64_t)ptdp_comm_dtype_size(dt));
    inflight_begin(g, PTDP_OP_ALLREDUCE, -1);
    ops_of(g)->allreduce(g, buf, n, dt, op);
    inflight_end(g);
}

void ptdp_allreduce_sum_f32(ptdp_group *g, float *buf, int64_t n) {
    allreduce(g, buf, n, PTDP_COMM_F32, PTDP_COMM_SUM);
}
void ptdp_allreduce_max_f32(ptdp_group *g, float *buf, int64_t n) {
    allreduce(g, buf, n, PTDP_COMM_F32, PTDP_COMM_MAX);
}
void ptdp_allreduce_sum_f64(ptdp_group *g, double *buf, int64_t n) {
    allreduce(g, buf, n, PTDP_COMM_F64, PTDP_COMM_SUM);
}
void ptdp_allreduce_max_i32(ptdp_group *g, int32_t *buf, int64_t n) {
    allreduce(g, buf, n, PTDP_COMM_I32, PTDP_COMM_MAX);
}
void ptdp_allreduce_max_u64(ptdp_group *g, uint64_t *buf, int64_t n) {
    allreduce(g, buf, n, PTDP_COMM_U64, PTDP_COMM_MAX);
}

void ptdp_barrier(ptdp_group *g) {
    inflight_begin(g, PTDP_OP_COUNT, -1); /* PTDP_OP_COUNT: the watchdog says "barrier" */
    ops_of(g)->barrier(g);
    inflight_end(g);
}

void ptdp_allgather_dt(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt) {
    PTDP_ASSERT(n >= 0 && n <= INT32_MAX);
    count(g, PTDP_OP_ALLGATHER, n * (int64_t)ptdp_comm_dtype_size(dt));
    inflight_begin(g, PTDP_OP_ALLGATHER, -1);
    ops_of(g)->allgather(g, buf, n, dt);
    inflight_end(g);
}
void ptdp_allgather_f32(ptdp_group *g, float *buf, int64_t n) {
    ptdp_allgather_dt(g, buf, n, PTDP_COMM_F32);
}

static void reduce_scatter_sum(ptdp_group *g, const void *send, void *recv, int64_t n,
                               ptdp_comm_dtype dt) {
    const int64_t blocks = g->size > 1 ? g->size : 1, es = (int64_t)ptdp_comm_dtype_size(dt);
    const char *s = send, *r = recv;
    PTDP_ASSERT(n >= 0 && n * blocks <= INT32_MAX);
    PTDP_ASSERT_MSG(s + n * blocks * es <= r || r + n * es <= s,
                    "reduce-scatter: send and recv overlap");
    count(g, PTDP_OP_REDUCE_SCATTER, n * g->size * es);
    inflight_begin(g, PTDP_OP_REDUCE_SCATTER, -1);
    ops_of(g)->reduce_scatter(g, send, recv, n, dt);
    inflight_end(g);
}
void ptdp_reduce_scatter_sum_f32(ptdp_group *g, const float *send, float *recv, int64_t n) {
    reduce_scatter_sum(g, send, recv, n, PTDP_COMM_F32);
}

ptdp_comm_dtype ptdp_comm_act_dtype(ptdp_dtype dt) {
    return dt == PTDP_DTYPE_BF16   ? PTDP_COMM_BF16
           : dt == PTDP_DTYPE_FP16 ? PTDP_COMM_F16
                                   : PTDP_COMM_F32;
}

void ptdp_allreduce_sum_act(ptdp_group *g, float *buf, int64_t n, ptdp_dtype dt) {
    if (dt == PTDP_DTYPE_FP32 || g->size <= 1) {
        ptdp_allreduce_sum_f32(g, buf, n);
        return;
    }
    ptdp_pack_n(buf, buf, n, dt);
    allreduce(g, buf, n, ptdp_comm_act_dtype(dt), PTDP_COMM_SUM);
    ptdp_unpack_n(buf, buf, n, dt);
}

void ptdp_allgather_act(ptdp_group *g, float *buf, int64_t n, ptdp_dtype dt) {
    if (dt == PTDP_DTYPE_FP32 || g->size <= 1) {
        ptdp_allgather_f32(g, buf, n);
        return;
    }
    /* this member's block to its place among 16-bit blocks: 2 r n bytes in,
     * not after its fp32 place at 4 r n */
    ptdp_pack_n((uint16_t *)(void *)buf + (int64_t)g->rank * n, buf + (int64_t)g->rank * n, n, dt);
    ptdp_allgather_dt(g, buf, n, ptdp_comm_act_dtype(dt));
    ptdp_unpack_n(buf, buf, n * g->size, dt);
}

void ptdp_reduce_scatter_sum_act(ptdp_group *g, float *send, float *recv, int64_t n,
                                 ptdp_dtype dt) {
    if (dt == PTDP_DTYPE_FP32 || g->size <= 1) {
        ptdp_reduce_scatter_sum_f32(g, send, recv, n);
        return;
    }
    ptdp_pack_n(send, send, n * g->size, dt);
    reduce_scatter_sum(g, send, recv, n, ptdp_comm_act_dtype(dt));
    ptdp_unpack_n(recv, recv, n, dt);
}

void ptdp_gather_f32(ptdp_group *g, const float *send, int64_t n, float *recv, int root) {
    PTDP_ASSERT(n >= 0 && n <= INT32_MAX && root >= 0 && root < g->size);
    count(g, PTDP_OP_GATHER, n * 4);
    inflight_begin(g, PTDP_OP_GATHER, -1);
    ops_of(g)->gather(g, send, n, PTDP_COMM_F32, recv, root);
    inflight_end(g);
}

void ptdp_iallreduce_sum_f32(ptdp_group *g, float *buf, int64_t n, ptdp_comm_req *req) {
    PTDP_ASSERT(n >= 0 && n <= INT32_MAX);
    const ptdp_comm_ops *ops = ops_of(g);
    *req = PTDP_COMM_REQ_NULL;
    count(g, PTDP_OP_ALLREDUCE, n * 4);
    ops->iallreduce(g, buf, n, PTDP_COMM_F32, PTDP_COMM_SUM, req);
    req->ops = ops;
    req->group = g;
    req->op = PTDP_OP_ALLREDUCE;
    req->peer = -1;
}

void ptdp_ireduce_scatter_f32(ptdp_group *g, const float *send, float *recv, int64_t n,
                              ptdp_comm_req *req) {
    PTDP_ASSERT(n >= 0 && n <= INT32_MAX);
    const ptdp_comm_ops *ops = ops_of(g);
    *req = PTDP_COMM_REQ_NULL;
    count(g, PTDP_OP_REDUCE_SCATTER, n * g->size * 4);
    ops->ireduce_scatter(g, send, recv, n, PTDP_COMM_F32, req);
    req->ops = ops;
    req->group = g;
    req->op = PTDP_OP_REDUCE_SCATTER;
    req->peer = -1;
}

void *ptdp_gatherv_bytes(ptdp_group *g, const void *send, int64_t nbytes, int64_t *counts,
                         int root) {
    PTDP_ASSERT(nbytes >= 0 && nbytes <= INT32_MAX && root >= 0 && root < g->size);
    const ptdp_comm_ops *ops = ops_of(g);
    const int is_root = g->rank == root;
    /* the counts first (not counted: bookkeeping, not payload) */
    inflight_begin(g, PTDP_OP_GATHER, -1);
    ops->gather(g, &nbytes, 1, PTDP_COMM_I64, is_root ? counts : NULL, root);
    inflight_end(g);
    char *out = NULL;
    if (is_root) {
        int64_t total = 0;
        for (int r = 0; r < g->size; r++) total += counts[r];
        PTDP_ASSERT(total <= INT32_MAX);
        out = malloc((size_t)total + 1);
        PTDP_ASSERT(out);
    }
    count(g, PTDP_OP_GATHER, nbytes);
    inflight_begin(g, PTDP_OP_GATHER, -1);
    ops->gatherv(g, send, nbytes, out, is_root ? counts : NULL, root);
    inflight_end(g);
    return out;
}

void ptdp_isend_dt(ptdp_group *g, const void *buf, int64_t n, ptdp_comm_dtype dt, int peer, int tag,
                   ptdp_comm_req *req) {
    PTDP_ASSERT(g->size > 1 && n >= 0 && n <= INT32_MAX && peer >= 0 && peer < g->size);
    const ptdp_comm_ops *ops = ops_of(g);
    *req = PTDP_COMM_REQ_NULL;
    count(g, PTDP_OP_SEND, n * (int64_t)ptdp_comm_dtype_size(dt));
    ops->isend(g, buf, n, dt, peer, tag, req);
    req->ops = ops;
    req->group = g;
    req->op = PTDP_OP_SEND;
    req->peer = peer;
}
void ptdp_isend_f32(ptdp_group *g, const float *buf, int64_t n, int peer, int tag,
                    ptdp_comm_req *req) {
    ptdp_isend_dt(g, buf, n, PTDP_COMM_F32, peer, tag, req);
}

void ptdp_irecv_dt(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt, int peer, int tag,
                   ptdp_comm_req *req) {
    PTDP_ASSERT(g->size > 1 && n >= 0 && n <= INT32_MAX && peer >= 0 && peer < g->size);
    const ptdp_comm_ops *ops = ops_of(g);
    *req = PTDP_COMM_REQ_NULL;
    count(g, PTDP_OP_RECV, n * (int64_t)ptdp_comm_dtype_size(dt));
    ops->irecv(g, buf, n, dt, peer, tag, req);
    req->ops = ops;
    req->group = g;
    req->op = PTDP_OP_RECV;
    req->peer = peer;
}
void ptdp_irecv_f32(ptdp_group *g, float *buf, int64_t n, int peer, int tag, ptdp_comm_req *req) {
    ptdp_irecv_dt(g, buf, n, PTDP_COMM_F32, peer, tag, req);
}

void ptdp_wait(ptdp_comm_req *req) {
    if (!req->ops) return;
    const ptdp_group *g = req->group;
    inflight_begin(g, req->op, req->peer);
    req->ops->wait(req);
    inflight_end(g);
    *req = PTDP_COMM_REQ_NULL;
}

int ptdp_test(ptdp_comm_req *req) {
    if (!req->ops) return 1;
    if (!req->ops->test(req)) return 0;
    *req = PTDP_COMM_REQ_NULL;
    return 1;
}

void ptdp_comm_counters_reset(ptdp_comm *c) {
    ptdp_group *gs[] = {&c->world, &c->tensor, &c->pipeline, &c->data, &c->model, &c->embedding};
    for (int i = 0; i < 6; i++) gs[i]->counters = (ptdp_comm_counters){0};
}

void ptdp_comm_log_counters(const ptdp_comm *c) {
    const ptdp_group *gs[] = {&c->world, &c->tensor, &c->pipeline,
                              &c->data,  &c->model,  &c->embedding};
    for (int i = 0; i < 6; i++)
        for (int op = 0; op < PTDP_OP_COUNT; op++)
            if (gs[i]->counters.calls[op])
                ptdp_log("comm %-9s %-14s calls %8lld  bytes %12lld", gs[i]->name, op_names[op],
                         (long long)gs[i]->counters.calls[op],
                         (long long)gs[i]->counters.bytes[op]);
}
