/* test_comm_local.c - the communication layer without MPI: (1) the local
 * backend (ptdp_comm_init_single): every collective on a group of one is
 * the identity or a copy, requests complete at once, nothing is counted;
 * (2) the backend-independent layer (comm.c) over a recording backend that
 * poses as a group of 3: every call reaches the table exactly once with
 * its arguments, the per-group counters are exact, and a request's life
 * (pending, test, wait, wait again) follows comm.h's contract. */
#include <string.h>

#include "comm/comm.h"
#include "test.h"

static int counters_zero(const ptdp_group *g) {
    for (int op = 0; op < PTDP_OP_COUNT; op++)
        if (g->counters.calls[op] || g->counters.bytes[op]) return 0;
    return 1;
}

static void test_local(void) {
    ptdp_comm c;
    ptdp_comm_init_single(&c);
    CHECK(c.ops == &ptdp_comm_local_ops && !strcmp(c.ops->name, "local"));
    CHECK(c.world_size == 1 && c.world_rank == 0 && c.in_embedding_group);
    CHECK_OK(ptdp_comm_setup(&c, 1, 1, 1));
    CHECK(ptdp_comm_setup(&c, 2, 1, 1) == PTDP_ECONFIG);
    CHECK(ptdp_comm_node_size(&c) == 1);
    ptdp_group *gs[] = {&c.world, &c.tensor, &c.pipeline, &c.data, &c.model, &c.embedding};
    for (int i = 0; i < 6; i++) CHECK(gs[i]->size == 1 && gs[i]->rank == 0);

    float f[6] = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -1.0f}, f0[6];
    memcpy(f0, f, sizeof f);
    double dd[2] = {0.1, -3.0};
    int32_t i32[2] = {-4, 9};
    uint64_t u64[2] = {~0ull, 5};
    ptdp_allreduce_sum_f32(&c.tensor, f, 6);
    ptdp_allreduce_max_f32(&c.pipeline, f, 6);
    ptdp_allgather_f32(&c.tensor, f, 6);
    CHECK(!memcmp(f, f0, sizeof f));
    ptdp_allreduce_sum_f64(&c.model, dd, 2);
    CHECK(dd[0] == 0.1 && dd[1] == -3.0);
    ptdp_allreduce_max_i32(&c.world, i32, 2);
    CHECK(i32[0] == -4 && i32[1] == 9);
    ptdp_allreduce_max_u64(&c.data, u64, 2);
    CHECK(u64[0] == ~0ull && u64[1] == 5);
    ptdp_barrier(&c.world);

    float g[6] = {0};
    ptdp_gather_f32(&c.model, f, 6, g, 0);
    CHECK(!memcmp(g, f0, sizeof g));
    int64_t counts[1] = {-1};
    char *all = ptdp_gatherv_bytes(&c.world, "hello", 5, counts, 0);
    CHECK(all && counts[0] == 5 && !memcmp(all, "hello", 5));
    free(all);

    /* requests: a zeroed one is complete; a local one is done on return */
    ptdp_comm_req req = PTDP_COMM_REQ_NULL;
    CHECK(ptdp_test(&req) == 1);
    ptdp_wait(&req);
    CHECK(sizeof(ptdp_comm_req) <= 48);
    ptdp_iallreduce_sum_f32(&c.data, f, 6, &req);
    CHECK(ptdp_test(&req) == 1 && req.ops == NULL);
    CHECK(!memcmp(f, f0, sizeof f));
    float shard[6] = {0};
    ptdp_ireduce_scatter_f32(&c.data, f, shard, 6, &req);
    ptdp_wait(&req);
    ptdp_wait(&req); /* twice is harmless */
    CHECK(req.ops == NULL && !memcmp(shard, f0, sizeof shard));
    float rs[6] = {0};
    ptdp_reduce_scatter_sum_f32(&c.tensor, f, rs, 6);
    CHECK(!memcmp(rs, f0, sizeof rs));

    /* a group of one moves no bytes: nothing counted */
    for (int i = 0; i < 6; i++) CHECK(counters_zero(gs[i]));

    /* a hand-made group of one (as tools build) needs no backend */
    ptdp_group one = {.name = "one", .size = 1, .rank = 0};
    ptdp_allreduce_sum_f32(&one, f, 6);
    ptdp_gather_f32(&one, f, 3, g, 0);
    CHECK(!memcmp(g, f0, 3 * sizeof(float)) && counters_zero(&one));
    ptdp_comm_finalize(&c);
}

/* ---- a recording backend posing as rank 1 of a group of 3 ---- */
typedef struct {
    int calls, allreduce, allgather, gather, gatherv, barrier, iallreduce, ireduce_scatter, isend,
        irecv, reduce_scatter;
    int waits, tests;
    int64_t last_n;
    ptdp_comm_dtype last_dt;
    ptdp_comm_reduce last_op;
    int last_peer, last_tag, last_root;
} rec_log;
static rec_log R;

typedef struct {
    uint32_t magic;
    int polls_left; /* test() says pending this many times */
} rec_req;
static rec_req *rr(ptdp_comm_req *r) { return (rec_req *)(void *)r->impl.bytes; }
static void start_req(ptdp_comm_req *r) { *rr(r) = (rec_req){.magic = 0xC0FFEE, .polls_left = 2}; }

static void rec(int *which, int64_t n, ptdp_comm_dtype dt) {
    R.calls++;
    (*which)++;
    R.last_n = n;
    R.last_dt = dt;
}
static void rec_allreduce(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt,
                          ptdp_comm_reduce op) {
    rec(&R.allreduce, n, dt);
    R.last_op = op;
}
static void rec_allgather(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt) {
    rec(&R.allgather, n, dt);
}
static void rec_gather(ptdp_group *g, const void *send, int64_t n, ptdp_comm_dtype dt, void *recv,
                       int root) {
    rec(&R.gather, n, dt);
    R.last_root = root;
    if (recv) /* every member sent the same */
        for (int r = 0; r < g->size; r++)
            memcpy((char *)recv + (size_t)r * (size_t)n * ptdp_comm_dtype_size(dt), send,
                   (size_t)n * ptdp_comm_dtype_size(dt));
}
static void rec_gatherv(ptdp_group *g, const void *send, int64_t nbytes, void *recv,
                        const int64_t *counts, int root) {
    rec(&R.gatherv, nbytes, PTDP_COMM_BYTE);
    R.last_root = root;
    if (recv)
        for (int r = 0; r < g->size; r++)
            memcpy((char *)recv + r * nbytes, send, (size_t)counts[r]);
}
static void rec_reduce_scatter(ptdp_group *g, const void *send, void *recv, int64_t n,
                               ptdp_comm_dtype dt) {
    rec(&R.reduce_scatter, n, dt);
}
static void rec_barrier(ptdp_group *g) { rec(&R.barrier, 0, PTDP_COMM_BYTE); }
static void rec_iallreduce(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt,
                           ptdp_comm_reduce op, ptdp_comm_req *req) {
    rec(&R.iallreduce, n, dt);
    R.last_op = op;
    start_req(req);
}
static void rec_ireduce_scatter(ptdp_group *g, const void *send, void *recv, int64_t n,
                                ptdp_comm_dtype dt, ptdp_comm_req *req) {
    rec(&R.ireduce_scatter, n, dt);
    start_req(req);
}
static void rec_isend(ptdp_group *g, const void *buf, int64_t n, ptdp_comm_dtype dt, int peer,
                      int tag, ptdp_comm_req *req) {
    rec(&R.isend, n, dt);
    R.last_peer = peer;
    R.last_tag = tag;
    start_req(req);
}
static void rec_irecv(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt, int peer, int tag,
                      ptdp_comm_req *req) {
    rec(&R.irecv, n, dt);
    R.last_peer = peer;
    R.last_tag = tag;
    start_req(req);
}
static void rec_wait(ptdp_comm_req *req) {
    PTDP_ASSERT(rr(req)->magic == 0xC0FFEE);
    R.waits++;
}
static int rec_test(ptdp_comm_req *req) {
    PTDP_ASSERT(rr(req)->magic == 0xC0FFEE);
    R.tests++;
    return rr(req)->polls_left-- <= 0;
}

static const ptdp_comm_ops rec_ops = {
    .name = "recording",
    .allreduce = rec_allreduce,
    .allgather = rec_allgather,
    .gather = rec_gather,
    .gatherv = rec_gatherv,
    .reduce_scatter = rec_reduce_scatter,
    .barrier = rec_barrier,
    .iallreduce = rec_iallreduce,
    .ireduce_scatter = rec_ireduce_scatter,
    .isend = rec_isend,
    .irecv = rec_irecv,
    .wait = rec_wait,
    .test = rec_test,
};

static void test_dispatch_and_counters(void) {
    ptdp_group g = {.name = "fake", .ops = &rec_ops, .size = 3, .rank = 1};
    float f[64] = {0};
    double dd[4] = {0};
    int32_t i32[4] = {0};
    uint64_t u64[4] = {0};

    ptdp_allreduce_sum_f32(&g, f, 5);
    CHECK(R.allreduce == 1 && R.last_n == 5 && R.last_dt == PTDP_COMM_F32 &&
          R.last_op == PTDP_COMM_SUM);
    ptdp_allreduce_max_f32(&g, f, 4);
    CHECK(R.last_op == PTDP_COMM_MAX && R.last_dt == PTDP_COMM_F32);
    ptdp_allreduce_sum_f64(&g, dd, 3);
    CHECK(R.last_dt == PTDP_COMM_F64 && R.last_op == PTDP_COMM_SUM);
    ptdp_allreduce_max_i32(&g, i32, 2);
    CHECK(R.last_dt == PTDP_COMM_I32 && R.last_op == PTDP_COMM_MAX);
    ptdp_allreduce_max_u64(&g, u64, 1);
    CHECK(R.last_dt == PTDP_COMM_U64 && R.allreduce == 5);

    ptdp_comm_req req = PTDP_COMM_REQ_NULL;
    ptdp_iallreduce_sum_f32(&g, f, 10, &req);
    CHECK(R.iallreduce == 1 && R.last_n == 10 && req.ops == &rec_ops);
    CHECK(ptdp_test(&req) == 0 && ptdp_test(&req) == 0 && req.ops == &rec_ops);
    CHECK(ptdp_test(&req) == 1 && req.ops == NULL && R.tests == 3);
    CHECK(ptdp_test(&req) == 1 && R.tests == 3); /* complete: the backend is not asked */

    ptdp_ireduce_scatter_f32(&g, f, f + 12, 4, &req);
    CHECK(R.ireduce_scatter == 1 && R.last_n == 4);
    ptdp_wait(&req);
    ptdp_wait(&req);
    CHECK(R.waits == 1 && req.ops == NULL);

    ptdp_allgather_f32(&g, f, 2);
    CHECK(R.allgather == 1 && R.last_n == 2);
    ptdp_reduce_scatter_sum_f32(&g, f, f + 30, 5); /* blocking: 3 blocks of 5 in, 5 out */
    CHECK(R.reduce_scatter == 1 && R.last_n == 5 && R.last_dt == PTDP_COMM_F32);
    float recv[9];
    ptdp_gather_f32(&g, f, 3, recv, 1);
    CHECK(R.gather == 1 && R.last_root == 1);
    int64_t counts[3];
    char *all = ptdp_gatherv_bytes(&g, "abcdefg", 7, counts, 1);
    CHECK(R.gather == 2 && R.last_dt != PTDP_COMM_F32 && R.gatherv == 1);
    CHECK(all && counts[0] == 7 && counts[2] == 7 && !memcmp(all + 14, "abcdefg", 7));
    free(all);
    ptdp_barrier(&g);
    CHECK(R.barrier == 1);

    ptdp_comm_req s = PTDP_COMM_REQ_NULL, r = PTDP_COMM_REQ_NULL;
    ptdp_isend_f32(&g, f, 6, 2, 9, &s);
    CHECK(R.isend == 1 && R.last_peer == 2 && R.last_tag == 9);
    ptdp_irecv_f32(&g, f + 6, 6, 0, 11, &r);
    CHECK(R.irecv == 1 && R.last_peer == 0 && R.last_tag == 11);
    ptdp_wait(&s);
    ptdp_wait(&r);
    CHECK(R.waits == 3);

    /* every ptdp_* call reached the table once (gatherv: counts + data) */
    CHECK(R.calls == 5 + 1 + 1 + 1 + 1 + 1 + 2 + 1 + 2);
    /* exact counters: payload bytes handed to each call; barrier and the
     * gatherv's counts are not payload */
    const ptdp_comm_counters *k = &g.counters;
    CHECK(k->calls[PTDP_OP_ALLREDUCE] == 6 &&
          k->bytes[PTDP_OP_ALLREDUCE] == 20 + 16 + 24 + 8 + 8 + 40);
    CHECK(k->calls[PTDP_OP_REDUCE_SCATTER] == 2 &&
          k->bytes[PTDP_OP_REDUCE_SCATTER] == 4 * 3 * 4 + 5 * 3 * 4);
    CHECK(k->calls[PTDP_OP_ALLGATHER] == 1 && k->bytes[PTDP_OP_ALLGATHER] == 8);
    CHECK(k->calls[PTDP_OP_GATHER] == 2 && k->bytes[PTDP_OP_GATHER] == 12 + 7);
    CHECK(k->calls[PTDP_OP_SEND] == 1 && k->bytes[PTDP_OP_SEND] == 24);
    CHECK(k->calls[PTDP_OP_RECV] == 1 && k->bytes[PTDP_OP_RECV] == 24);
    CHECK(k->calls[PTDP_OP_BROADCAST] == 0 && k->bytes[PTDP_OP_BROADCAST] == 0);
}

int main(void) {
    test_local();
    test_dispatch_and_counters();
    return test_done("test_comm_local");
}
