/* mpi.c - the MPI communication backend (CPU buffers; processes launched by
 * mpirun). Fills `ptdp_comm_mpi_ops`; comm.c has already checked arguments
 * and counted the call. Every MPI call is checked: a failure is a broken
 * job, so it asserts (the abort hook then takes every rank down).
 * A group's impl is a malloc'd mpi_group (made once, at setup): its
 * MPI_Comm and the job's two 16-bit sum operations, which the world's made
 * at init and every group shares; a request's inline storage holds its
 * MPI_Request, so starting an operation allocates nothing. ptdp's world is
 * its own duplicate of MPI_COMM_WORLD or of the communicator a program hands
 * it (comm_mpi.h), so its messages never meet the program's, and ptdp calls
 * MPI_Init and MPI_Finalize only when nobody else did. Not here: counting,
 * groups of one (the local backend). */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/comm_mpi.h"

_Static_assert(sizeof(MPI_Request) <= PTDP_COMM_REQ_BYTES,
               "MPI_Request does not fit ptdp_comm_req");

#define MPI_CHECK(call)                                             \
    do {                                                            \
        int mpi__rc = (call);                                       \
        if (mpi__rc != MPI_SUCCESS) {                               \
            char mpi__msg[MPI_MAX_ERROR_STRING];                    \
            int mpi__len = 0;                                       \
            MPI_Error_string(mpi__rc, mpi__msg, &mpi__len);         \
            ptdp__assert_fail(#call, __FILE__, __LINE__, mpi__msg); \
        }                                                           \
    } while (0)

/* a group of the MPI backend: its communicator, and the sums of bf16 and
 * fp16 values (MPI has neither type: user operations), made by the world's
 * at init (ops_owner) and shared by the groups split from it */
typedef struct {
    MPI_Comm comm;
    MPI_Op sum16[2]; /* bf16, fp16 */
    int ops_owner;
} mpi_group;

/* the world's backend state (ptdp_comm.impl) */
typedef struct {
    MPI_Comm comm; /* ptdp's world: a duplicate, freed at finalize */
    int owns_mpi;  /* ptdp called MPI_Init, so it calls MPI_Finalize */
} mpi_world;

static const mpi_group *group_of(const ptdp_group *g) { return (const mpi_group *)g->impl; }
static MPI_Comm world_of(const ptdp_comm *c) { return ((const mpi_world *)c->impl)->comm; }
static MPI_Comm comm_of(const ptdp_group *g) { return group_of(g)->comm; }
static MPI_Request *req_of(ptdp_comm_req *r) { return (MPI_Request *)(void *)r->impl.bytes; }

static MPI_Datatype mpi_type(ptdp_comm_dtype dt) {
    switch (dt) {
    case PTDP_COMM_F32:
        return MPI_FLOAT;
    case PTDP_COMM_F64:
        return MPI_DOUBLE;
    case PTDP_COMM_I32:
        return MPI_INT32_T;
    case PTDP_COMM_I64:
        return MPI_INT64_T;
    case PTDP_COMM_U64:
        return MPI_UINT64_T;
    case PTDP_COMM_BYTE:
        return MPI_BYTE;
    case PTDP_COMM_BF16:
    case PTDP_COMM_F16:
        return MPI_UINT16_T;
    default:
        break;
    }
    PTDP_ASSERT_MSG(0, "unknown communication data type");
    return MPI_DATATYPE_NULL;
}
/* Sums of bf16 / fp16 values (MPI has neither type): each pair is added in
 * fp32 and the sum rounded back to 16 bits, as NCCL reduces such buffers.
 * Created at init (the world's mpi_group), freed before MPI_Finalize. */
static void sum16(const void *in, void *inout, int len, ptdp_dtype dt) {
    enum { BLK = 512 };
    float a[BLK], b[BLK];
    for (int i0 = 0; i0 < len; i0 += BLK) {
        const int m = len - i0 < BLK ? len - i0 : BLK;
        uint16_t *io = (uint16_t *)inout + i0;
        ptdp_unpack_n(a, (const uint16_t *)in + i0, m, dt);
        ptdp_unpack_n(b, io, m, dt);
        for (int i = 0; i < m; i++) a[i] += b[i];
        ptdp_pack_n(io, a, m, dt);
    }
}
static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *ty) {
    (void)ty;
    sum16(in, inout, *len, PTDP_DTYPE_BF16);
}
static void sum_f16(void *in, void *inout, int *len, MPI_Datatype *ty) {
    (void)ty;
    sum16(in, inout, *len, PTDP_DTYPE_FP16);
}

static MPI_Op mpi_op(const ptdp_group *g, ptdp_comm_reduce op, ptdp_comm_dtype dt) {
    if (dt == PTDP_COMM_BF16 || dt == PTDP_COMM_F16) {
        PTDP_ASSERT_MSG(op == PTDP_COMM_SUM, "16-bit reductions are sums only");
        return group_of(g)->sum16[dt == PTDP_COMM_F16];
    }
    return op == PTDP_COMM_MAX ? MPI_MAX : MPI_SUM;
}

static void mpi_abort_hook(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Abort(MPI_COMM_WORLD, 134);
}

/* a group over comm with the world's sums (world NULL: it makes them) */
static mpi_group *box(MPI_Comm comm, const mpi_group *world) {
    mpi_group *b = malloc(sizeof *b);
    PTDP_ASSERT(b);
    *b = (mpi_group){.comm = comm, .sum16 = {MPI_OP_NULL, MPI_OP_NULL}, .ops_owner = !world};
    if (world) {
        b->sum16[0] = world->sum16[0], b->sum16[1] = world->sum16[1];
    } else {
        MPI_CHECK(MPI_Op_create(sum_bf16, 1, &b->sum16[0]));
        MPI_CHECK(MPI_Op_create(sum_f16, 1, &b->sum16[1]));
    }
    return b;
}

int ptdp__comm_mpi_running(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

static int mpi_init(ptdp_comm *c, int *argc, char ***argv, const void *host) {
    mpi_world *w = calloc(1, sizeof *w);
    if (!w) return ptdp_errorf(PTDP_ENOMEM, "out of memory at start-up");
    if (!ptdp__comm_mpi_running()) {
        if (host) {
            free(w);
            return ptdp_errorf(PTDP_EINVAL, "ptdp_comm_init_mpi: MPI is not initialised");
        }
        if (MPI_Init(argc, argv) != MPI_SUCCESS) {
            free(w);
            return ptdp_errorf(PTDP_ECOMM, "MPI_Init failed");
        }
        w->owns_mpi = 1;
    }
    MPI_CHECK(MPI_Comm_dup(host ? *(const MPI_Comm *)host : MPI_COMM_WORLD, &w->comm));
    MPI_CHECK(MPI_Comm_set_errhandler(w->comm, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_size(w->comm, &c->world_size));
    MPI_CHECK(MPI_Comm_rank(w->comm, &c->world_rank));
    ptdp_set_abort_hook(mpi_abort_hook);
    c->impl = w;
    c->world.impl = c->world_size > 1 ? box(w->comm, NULL) : NULL;
    return PTDP_OK;
}

int ptdp_comm_init_mpi(ptdp_comm *c, MPI_Comm comm) {
    if (comm == MPI_COMM_NULL) {
        ptdp_comm_init_single(c);
        return ptdp_errorf(PTDP_EINVAL, "ptdp_comm_init_mpi: MPI_COMM_NULL (is this rank in the "
                                        "communicator? only its members call)");
    }
    return ptdp__comm_init_on(c, NULL, NULL, &comm);
}

static void mpi_split(ptdp_comm *c, ptdp_group *g, int color, int key) {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split(world_of(c), color < 0 ? MPI_UNDEFINED : color, key, &sub));
    g->impl = NULL;
    if (sub == MPI_COMM_NULL) {
        g->size = 0;
        g->rank = -1;
        return;
    }
    MPI_CHECK(MPI_Comm_size(sub, &g->size));
    MPI_CHECK(MPI_Comm_rank(sub, &g->rank));
    if (g->size == 1)
        MPI_CHECK(MPI_Comm_free(&sub));
    else
        g->impl = box(sub, c->world.impl);
}

static void mpi_group_free(ptdp_group *g) {
    mpi_group *b = g->impl;
    if (!b) return;
    if (!b->ops_owner) MPI_CHECK(MPI_Comm_free(&b->comm)); /* the world's is mpi_world's */
    for (int i = 0; b->ops_owner && i < 2; i++) MPI_CHECK(MPI_Op_free(&b->sum16[i]));
    free(b);
    g->impl = NULL;
}

/* after every other group's group_free: the world's goes last, with the sums */
static void mpi_finalize(ptdp_comm *c) {
    mpi_group_free(&c->world);
    mpi_world *w = c->impl;
    MPI_CHECK(MPI_Comm_free(&w->comm));
    if (w->owns_mpi) MPI_CHECK(MPI_Finalize());
    free(w);
    c->impl = NULL;
}

static void mpi_abort(const ptdp_comm *c, int status) {
    if (c->world_size > 1) MPI_Abort(world_of(c), status);
    if (((const mpi_world *)c->impl)->owns_mpi) MPI_Finalize();
}

static int mpi_node_size(const ptdp_comm *c) {
    MPI_Comm node;
    int n = 1;
    MPI_CHECK(MPI_Comm_split_type(world_of(c), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_size(node, &n));
    MPI_CHECK(MPI_Comm_free(&node));
    return n;
}

static void mpi_allreduce(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt,
                          ptdp_comm_reduce op) {
    MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(dt), mpi_op(g, op, dt), comm_of(g)));
}

static void mpi_allgather(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt) {
    MPI_Datatype ty = mpi_type(dt);
    MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, (int)n, ty, buf, (int)n, ty, comm_of(g)));
}

static void mpi_gather(ptdp_group *g, const void *send, int64_t n, ptdp_comm_dtype dt, void *recv,
                       int root) {
    MPI_Datatype ty = mpi_type(dt);
    MPI_CHECK(MPI_Gather(send, (int)n, ty, recv, (int)n, ty, root, comm_of(g)));
}

static void mpi_gatherv(ptdp_group *g, const void *send, int64_t nbytes, void *recv,
                        const int64_t *counts, int root) {
    int *cnt = NULL, *displ = NULL;
    if (g->rank == root) {
        cnt = calloc((size_t)g->size, sizeof(int));
        displ = calloc((size_t)g->size, sizeof(int));
        PTDP_ASSERT(cnt && displ);
        int64_t total = 0;
        for (int r = 0; r < g->size; r++) {
            displ[r] = (int)total;
            cnt[r] = (int)counts[r];
            total += counts[r];
        }
    }
    MPI_CHECK(
        MPI_Gatherv(send, (int)nbytes, MPI_BYTE, recv, cnt, displ, MPI_BYTE, root, comm_of(g)));
    free(cnt);
    free(displ);
}

static void mpi_reduce_scatter(ptdp_group *g, const void *send, void *recv, int64_t n,
                               ptdp_comm_dtype dt) {
    MPI_CHECK(MPI_Reduce_scatter_block(send, recv, (int)n, mpi_type(dt),
                                       mpi_op(g, PTDP_COMM_SUM, dt), comm_of(g)));
}

static void mpi_barrier(ptdp_group *g) { MPI_CHECK(MPI_Barrier(comm_of(g))); }

static void mpi_iallreduce(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt,
                           ptdp_comm_reduce op, ptdp_comm_req *req) {
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(dt), mpi_op(g, op, dt), comm_of(g),
                             req_of(req)));
}

static void mpi_ireduce_scatter(ptdp_group *g, const void *send, void *recv, int64_t n,
                                ptdp_comm_dtype dt, ptdp_comm_req *req) {
    MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, (int)n, mpi_type(dt),
                                        mpi_op(g, PTDP_COMM_SUM, dt), comm_of(g), req_of(req)));
}

static void mpi_isend(ptdp_group *g, const void *buf, int64_t n, ptdp_comm_dtype dt, int peer,
                      int tag, ptdp_comm_req *req) {
    MPI_CHECK(MPI_Isend(buf, (int)n, mpi_type(dt), peer, tag, comm_of(g), req_of(req)));
}

static void mpi_irecv(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt, int peer, int tag,
                      ptdp_comm_req *req) {
    MPI_CHECK(MPI_Irecv(buf, (int)n, mpi_type(dt), peer, tag, comm_of(g), req_of(req)));
}

static void mpi_wait(ptdp_comm_req *req) { MPI_CHECK(MPI_Wait(req_of(req), MPI_STATUS_IGNORE)); }

static int mpi_test(ptdp_comm_req *req) {
    int done = 0;
    MPI_CHECK(MPI_Test(req_of(req), &done, MPI_STATUS_IGNORE));
    return done;
}

const ptdp_comm_ops ptdp_comm_mpi_ops = {
    .name = "mpi",
    .init = mpi_init,
    .split = mpi_split,
    .group_free = mpi_group_free,
    .finalize = mpi_finalize,
    .abort = mpi_abort,
    .node_size = mpi_node_size,
    .allreduce = mpi_allreduce,
    .allgather = mpi_allgather,
    .gather = mpi_gather,
    .gatherv = mpi_gatherv,
    .reduce_scatter = mpi_reduce_scatter,
    .barrier = mpi_barrier,
    .iallreduce = mpi_iallreduce,
    .ireduce_scatter = mpi_ireduce_scatter,
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .wait = mpi_wait,
    .test = mpi_test,
};
