/* local.c - the in-process communication backend: a world of one process.
 * Serves ptdp_comm_init_single (unit tests of the model, the executor and
 * the optimizer; tools such as export) and every group of size 1 in a job
 * of any backend. Each collective on a group of one is the identity (or a
 * copy when input and output differ); non-blocking ones are done when they
 * return, so a request needs no state. A group of one has no peer: comm.c
 * rejects point-to-point before it gets here.
 * Not here: threads posing as ranks (a later backend could add them). */
#include <string.h>

#include "comm/comm.h"

static size_t nbytes_of(int64_t n, ptdp_comm_dtype dt) {
    return (size_t)n * ptdp_comm_dtype_size(dt);
}

static void one_member(const ptdp_group *g) {
    PTDP_ASSERT_MSG(g->size <= 1, "the local backend serves groups of one process only");
}

static int local_init(ptdp_comm *c, int *argc, char ***argv, const void *host) {
    (void)host;
    c->world_size = 1;
    c->world_rank = 0;
    return PTDP_OK;
}

static void local_split(ptdp_comm *c, ptdp_group *g, int color, int key) {
    g->impl = NULL;
    g->size = color < 0 ? 0 : 1;
    g->rank = color < 0 ? -1 : 0;
}

static void local_group_free(ptdp_group *g) { g->impl = NULL; }
static void local_finalize(ptdp_comm *c) {}
static void local_abort(const ptdp_comm *c, int status) {}
static int local_node_size(const ptdp_comm *c) { return 1; }

static void local_allreduce(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt,
                            ptdp_comm_reduce op) {
    one_member(g);
}

static void local_allgather(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt) {
    one_member(g);
}

static void local_gather(ptdp_group *g, const void *send, int64_t n, ptdp_comm_dtype dt, void *recv,
                         int root) {
    one_member(g);
    if (recv != send && n > 0) memmove(recv, send, nbytes_of(n, dt));
}

static void local_gatherv(ptdp_group *g, const void *send, int64_t nbytes, void *recv,
                          const int64_t *counts, int root) {
    one_member(g);
    PTDP_ASSERT(counts[0] == nbytes);
    if (recv != send && nbytes > 0) memmove(recv, send, (size_t)nbytes);
}

static void local_reduce_scatter(ptdp_group *g, const void *send, void *recv, int64_t n,
                                 ptdp_comm_dtype dt) {
    one_member(g);
    if (n > 0) memcpy(recv, send, nbytes_of(n, dt));
}

static void local_barrier(ptdp_group *g) { one_member(g); }

static void local_iallreduce(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt,
                             ptdp_comm_reduce op, ptdp_comm_req *req) {
    one_member(g);
}

static void local_ireduce_scatter(ptdp_group *g, const void *send, void *recv, int64_t n,
                                  ptdp_comm_dtype dt, ptdp_comm_req *req) {
    one_member(g);
    if (recv != send && n > 0) memmove(recv, send, nbytes_of(n, dt));
}

static void local_isend(ptdp_group *g, const void *buf, int64_t n, ptdp_comm_dtype dt, int peer,
                        int tag, ptdp_comm_req *req) {
    PTDP_ASSERT_MSG(0, "point-to-point on a group of one process");
}

static void local_irecv(ptdp_group *g, void *buf, int64_t n, ptdp_comm_dtype dt, int peer, int tag,
                        ptdp_comm_req *req) {
    PTDP_ASSERT_MSG(0, "point-to-point on a group of one process");
}

static void local_wait(ptdp_comm_req *req) {}
static int local_test(ptdp_comm_req *req) { return 1; }

const ptdp_comm_ops ptdp_comm_local_ops = {
    .name = "local",
    .init = local_init,
    .split = local_split,
    .group_free = local_group_free,
    .finalize = local_finalize,
    .abort = local_abort,
    .node_size = local_node_size,
    .allreduce = local_allreduce,
    .allgather = local_allgather,
    .gather = local_gather,
    .gatherv = local_gatherv,
    .reduce_scatter = local_reduce_scatter,
    .barrier = local_barrier,
    .iallreduce = local_iallreduce,
    .ireduce_scatter = local_ireduce_scatter,
    .isend = local_isend,
    .irecv = local_irecv,
    .wait = local_wait,
    .test = local_test,
};
