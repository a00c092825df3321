/* comm16.c - the 16-bit activation collectives of --bf16/--fp16 (comm.h:
 * ptdp_allreduce_sum_act, ptdp_allgather_act, ptdp_reduce_scatter_sum_act)
 * over the world as one tensor group, on however many ranks mpirun starts.
 * Every rank builds every rank's inputs (on the 16-bit grid, of many
 * magnitudes and signs) and checks its results:
 *   - all-gather: every block bit for bit;
 *   - all-reduce, reduce-scatter: on the grid; over two ranks bit for bit the
 *     fp32 sum rounded once; over k ranks within k u sum|x| of the exact sum
 *     (at most k - 1 partial sums each rounded by at most u |partial| <=
 *     u sum|x|, plus the fp32 additions); an fp16 sum past 65504 is inf;
 *   - every rank holds the same bits (gathered on rank 0);
 *   - the counters count 2 bytes per value.
 * Prints "comm16: N checks passed, M failed" on rank 0; exit status 1 on a
 * failure anywhere. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "comm/comm.h"

static int g_pass, g_fail;
static void check(int cond, const char *what, ptdp_dtype dt, int64_t i) {
    if (cond) {
        g_pass++;
        return;
    }
    if (g_fail++ < 10)
        fprintf(stderr, "FAIL comm16 %s %s at %lld\n", ptdp_dtype_name(dt), what, (long long)i);
}

static float grid(float f, ptdp_dtype dt) {
    return dt == PTDP_DTYPE_BF16 ? ptdp_bf16_to_f32(ptdp_f32_to_bf16(f))
                                 : ptdp_f16_to_f32(ptdp_f32_to_f16(f));
}
static int on_grid(float f, ptdp_dtype dt) {
    const float g = grid(f, dt);
    return memcmp(&g, &f, 4) == 0 || (isnan(f) && isnan(g));
}
/* rank r's value i (stream `s`): on the grid, |x| from 2^-12 to 2^12; index 0
 * is 60000 on every rank (an fp16 sum over two ranks or more overflows) */
static float input(int s, int r, int64_t i, ptdp_dtype dt) {
    if (i == 0) return grid(60000.0f, dt);
    uint64_t h = ptdp_hash_mix((uint64_t)(s * 1000 + r), (uint64_t)i);
    const float m = (float)(h & 0xffffff) / 16777216.0f - 0.5f;
    return grid(ldexpf(m, (int)((h >> 24) % 24) - 11), dt);
}

/* got = a sum over k ranks of xs[r] (r = 0..k-1) */
static void check_sum(float got, const float *xs, int k, ptdp_dtype dt, int64_t i) {
    const double u = dt == PTDP_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
    double exact = 0, mag = 0;
    float f32 = 0;
    for (int r = 0; r < k; r++) {
        exact += xs[r];
        mag += fabs(xs[r]);
        f32 += xs[r];
    }
    check(on_grid(got, dt), "sum off the grid", dt, i);
    if (dt == PTDP_DTYPE_FP16 && fabs(exact) > 65519.0) {
        check(isinf(got), "fp16 overflow is not inf", dt, i);
        return;
    }
    if (k == 2) {
        const float want = grid(f32, dt);
        check(memcmp(&got, &want, 4) == 0, "two-rank sum is not the rounded fp32 sum", dt, i);
    } else {
        check(fabs(got - exact) <= k * u * mag, "sum outside its bound", dt, i);
    }
}

/* every rank's n results equal rank 0's, bit for bit */
static void check_same(ptdp_group *g, const float *res, int64_t n, ptdp_dtype dt) {
    float *all = malloc(sizeof(float) * (size_t)(n * g->size));
    ptdp_gather_f32(g, res, n, all, 0);
    if (g->rank == 0)
        for (int r = 1; r < g->size; r++)
            check(memcmp(all, all + r * n, sizeof(float) * (size_t)n) == 0,
                  "ranks hold different sums", dt, r);
    free(all);
}

static void run(ptdp_group *g, ptdp_dtype dt) {
    const int k = g->size, me = g->rank;
    const int64_t n = 3001; /* not a multiple of the 512- and 1024-value blocks */
    float *buf = malloc(sizeof(float) * (size_t)(n * k)), *xs = malloc(sizeof(float) * (size_t)k);
    float *recv = malloc(sizeof(float) * (size_t)n);

    /* all-reduce */
    ptdp_comm_counters before = g->counters;
    for (int64_t i = 0; i < n; i++) buf[i] = input(1, me, i, dt);
    ptdp_allreduce_sum_act(g, buf, n, dt);
    for (int64_t i = 0; i < n; i++) {
        for (int r = 0; r < k; r++) xs[r] = input(1, r, i, dt);
        check_sum(buf[i], xs, k, dt, i);
    }
    check(g->counters.bytes[PTDP_OP_ALLREDUCE] - before.bytes[PTDP_OP_ALLREDUCE] == 2 * n,
          "all-reduce counted other than 2 bytes a value", dt, -1);
    check_same(g, buf, n, dt);

    /* all-gather: the other blocks start as NaN */
    for (int64_t i = 0; i < n * k; i++) buf[i] = NAN;
    for (int64_t i = 0; i < n; i++) buf[me * n + i] = input(2, me, i, dt);
    ptdp_allgather_act(g, buf, n, dt);
    for (int r = 0; r < k; r++)
        for (int64_t i = 0; i < n; i++) {
            const float want = input(2, r, i, dt);
            check(memcmp(&buf[r * n + i], &want, 4) == 0, "all-gather block differs", dt, i);
        }

    /* reduce-scatter: rank r's block j is input(3 + j, r, i) */
    for (int j = 0; j < k; j++)
        for (int64_t i = 0; i < n; i++) buf[j * n + i] = input(3 + j, me, i, dt);
    before = g->counters;
    ptdp_reduce_scatter_sum_act(g, buf, recv, n, dt);
    for (int64_t i = 0; i < n; i++) {
        for (int r = 0; r < k; r++) xs[r] = input(3 + me, r, i, dt);
        check_sum(recv[i], xs, k, dt, i);
    }
    check(g->counters.bytes[PTDP_OP_REDUCE_SCATTER] - before.bytes[PTDP_OP_REDUCE_SCATTER] ==
              2 * n * k,
          "reduce-scatter counted other than 2 bytes a value", dt, -1);
    free(buf);
    free(xs);
    free(recv);
}

int main(int argc, char **argv) {
    ptdp_comm c;
    if (ptdp_comm_init(&c, &argc, &argv) != PTDP_OK || ptdp_comm_setup(&c, c.world_size, 1, 1)) {
        fprintf(stderr, "comm16: %s\n", ptdp_last_error());
        return 2;
    }
    run(&c.tensor, PTDP_DTYPE_BF16);
    run(&c.tensor, PTDP_DTYPE_FP16);
    int bad = g_fail;
    ptdp_allreduce_max_i32(&c.world, &bad, 1);
    if (c.world_rank == 0)
        printf("comm16 over %d ranks: %d checks passed, %d failed (on this rank)\n", c.world_size,
               g_pass, g_fail);
    ptdp_comm_finalize(&c);
    return bad ? 1 : 0;
}
