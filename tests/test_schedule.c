/* test_schedule.c - pipeline schedules: hand-derived action lists, the
 * validator over a sweep of (p, m, v) and on deliberately broken lists, the
 * communication each action implies, and the simulator's bubble fractions,
 * makespans and stash counts against the paper's formulas. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "pipeline/pipeline.h"
#include "plan/plan.h"
#include "test.h"

/* Rank r's list as "F0 F1 B0 ..." in buf. */
static const char *list_str(const ptdp_schedule *s, int r, char *buf, size_t cap) {
    const ptdp_action *a = ptdp_schedule_rank(s, r);
    char one[32];
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; i < s->len && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%s", i ? " " : "",
                                ptdp_action_str(&s->params, &a[i], one));
    return buf;
}

static int list_is(int p, int m, int v, int kind, int rank, const char *want) {
    ptdp_schedule_params sp = {.p = p, .m = m, .v = v, .kind = kind};
    ptdp_schedule s;
    if (ptdp_schedule_init(&s, &sp)) return 0;
    char buf[4096];
    int ok = !strcmp(list_str(&s, rank, buf, sizeof buf), want);
    if (!ok)
        fprintf(stderr, "p=%d m=%d v=%d kind=%d rank %d:\n  got  %s\n  want %s\n", p, m, v, kind,
                rank, buf, want);
    ptdp_schedule_free(&s);
    return ok;
}

static void test_hand_lists(void) {
    /* GPipe: all forwards, then all backwards in micro-batch order. */
    CHECK(list_is(2, 3, 1, PTDP_SCHED_GPIPE, 0, "F0 F1 F2 B0 B1 B2"));
    CHECK(list_is(2, 3, 1, PTDP_SCHED_GPIPE, 1, "F0 F1 F2 B0 B1 B2"));
    /* 1F1B p=2 m=4: rank 0 warms up with p-r-1 = 1 forward. */
    CHECK(list_is(2, 4, 1, PTDP_SCHED_1F1B, 0, "F0 F1 B0 F2 B1 F3 B2 B3"));
    CHECK(list_is(2, 4, 1, PTDP_SCHED_1F1B, 1, "F0 B0 F1 B1 F2 B2 F3 B3"));
    /* 1F1B p=4 m=8, every rank (kind -1 resolves to 1f1b with v = 1). */
    CHECK(list_is(4, 8, 1, -1, 0, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"));
    CHECK(list_is(4, 8, 1, -1, 1, "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7"));
    CHECK(list_is(4, 8, 1, -1, 2, "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7"));
    CHECK(list_is(4, 8, 1, -1, 3, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"));
    /* Warm-up capped at m: p=4 m=2. */
    CHECK(list_is(4, 2, 1, PTDP_SCHED_1F1B, 0, "F0 F1 B0 B1"));
    /* Interleaved p=2 v=2 m=4. Forward order: (0,c0) (1,c0) (0,c1) (1,c1)
     * (2,c0) (3,c0) (2,c1) (3,c1); backward order mirrors the chunk.
     * Rank 0 warm-up (2-0-1)*2 + (2-1)*2 = 4, rank 1 warm-up 2. */
    CHECK(
        list_is(2, 4, 2, -1, 0,
                "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0"));
    CHECK(
        list_is(2, 4, 2, PTDP_SCHED_INTERLEAVED, 1,
                "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0"));
    /* Interleaved p=4 v=2 m=8: rank 0 warm-up 3*2 + 4 = 10, rank 3 warm-up 4. */
    CHECK(list_is(4, 8, 2, -1, 0,
                  "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 "
                  "F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0.0 F7.1 B1.0 "
                  "B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0"));
    CHECK(list_is(4, 8, 2, -1, 3,
                  "F0.0 F1.0 F2.0 F3.0 "
                  "F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.0 B0.0 F5.0 B1.0 F6.0 B2.0 F7.0 B3.0 "
                  "F4.1 B4.1 F5.1 B5.1 F6.1 B6.1 F7.1 B7.1 "
                  "B4.0 B5.0 B6.0 B7.0"));
}

static void test_params(void) {
    ptdp_schedule_params sp = ptdp_schedule_default_params();
    CHECK(sp.p == 1 && sp.m == 1 && sp.v == 1 && sp.kind == -1);
    CHECK(ptdp_schedule_parse_kind("gpipe") == PTDP_SCHED_GPIPE);
    CHECK(ptdp_schedule_parse_kind("1f1b") == PTDP_SCHED_1F1B);
    CHECK(ptdp_schedule_parse_kind("interleaved") == PTDP_SCHED_INTERLEAVED);
    CHECK(ptdp_schedule_parse_kind("zb") == PTDP_EINVAL);
    CHECK(strstr(ptdp_last_error(), "--pipeline-schedule") != NULL);
    CHECK(!strcmp(ptdp_schedule_kind_name(PTDP_SCHED_1F1B), "1f1b"));
    CHECK(!strcmp(ptdp_action_kind_short(PTDP_ACT_BWD), "B"));
    CHECK(!strcmp(ptdp_action_kind_name(PTDP_ACT_FWD), "forward"));
    CHECK(!strcmp(ptdp_schedule_kind_name(99), "?"));
    struct {
        ptdp_schedule_params sp;
        const char *flag;
    } bad[] = {
        {{.p = 0, .m = 4, .v = 1, .kind = -1}, "--pipeline-model-parallel-size"},
        {{.p = 2, .m = 0, .v = 1, .kind = -1}, "--num-microbatches"},
        {{.p = 2, .m = 4, .v = 0, .kind = -1}, "--virtual-pipeline-model-parallel-size"},
        {{.p = 1, .m = 4, .v = 2, .kind = -1}, "--virtual-pipeline-model-parallel-size"},
        {{.p = 4, .m = 6, .v = 2, .kind = -1}, "--num-microbatches"},
        {{.p = 2, .m = 4, .v = 1, .kind = PTDP_SCHED_INTERLEAVED},
         "--virtual-pipeline-model-parallel-size"},
        {{.p = 2, .m = 4, .v = 2, .kind = PTDP_SCHED_1F1B}, "--pipeline-schedule"},
        {{.p = 2, .m = 4, .v = 2, .kind = PTDP_SCHED_ZBV, .cost_f = -1}, "--zb-costs"},
        {{.p = 2, .m = 4, .v = 2, .kind = PTDP_SCHED_ZBV, .cost_w = PTDP_SCHEDULE_MAX_COST + 1},
         "--zb-costs"},
        {{.p = 2,
          .m = 2000000,
          .v = 2,
          .kind = PTDP_SCHED_ZBV,
          .cost_f = 1000,
          .cost_b = 1000,
          .cost_w = 1000},
         "--zb-costs"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(ptdp_schedule_check(&bad[i].sp) == PTDP_EINVAL);
        CHECK(strstr(ptdp_last_error(), bad[i].flag) != NULL);
        ptdp_schedule s;
        CHECK(ptdp_schedule_init(&s, &bad[i].sp) == PTDP_EINVAL);
        CHECK(s.acts == NULL);
    }
    /* Caller-owned buffer too small, rank out of range. */
    ptdp_schedule_params ok = {.p = 2, .m = 4, .v = 1, .kind = -1};
    ptdp_action buf[8];
    int n = -1;
    CHECK(ptdp_schedule_build(&ok, 0, buf, 7, &n) == PTDP_EINVAL);
    CHECK(ptdp_schedule_build(&ok, 2, buf, 8, &n) == PTDP_EINVAL);
    CHECK_OK(ptdp_schedule_build(&ok, 1, buf, 8, &n));
    CHECK(n == 8 && buf[0].kind == PTDP_ACT_FWD && buf[1].kind == PTDP_ACT_BWD);
    ptdp_schedule_free(NULL);
}

static void test_p2p(void) {
    /* 16 layers, p=4, v=2: each chunk holds 2 layers; rank 0 holds virtual
     * stages 0 (layers 1-2) and 4 (layers 9-10). */
    ptdp_schedule_params sp = {.p = 4, .m = 8, .v = 2, .kind = -1};
    CHECK(ptdp_schedule_stage(&sp, 0, 0) == 0 && ptdp_schedule_stage(&sp, 0, 1) == 4);
    CHECK(ptdp_schedule_stage(&sp, 3, 1) == 7);
    ptdp_p2p rx, tx;
    ptdp_action f00 = {PTDP_ACT_FWD, 5, 0}, f01 = {PTDP_ACT_FWD, 5, 1};
    ptdp_action_p2p(&sp, 0, &f00, &rx, &tx);
    CHECK(rx.peer_rank == -1);
    CHECK(tx.peer_rank == 1 && tx.peer_chunk == 0 && tx.peer_stage == 1);
    ptdp_action_p2p(&sp, 0, &f01, &rx, &tx); /* stage 4 <- stage 3 on rank 3 */
    CHECK(rx.peer_rank == 3 && rx.peer_chunk == 0 && rx.peer_stage == 3);
    CHECK(tx.peer_rank == 1 && tx.peer_chunk == 1 && tx.peer_stage == 5);
    ptdp_action b31 = {PTDP_ACT_BWD, 2, 1}, b00 = {PTDP_ACT_BWD, 2, 0}, b30 = {PTDP_ACT_BWD, 2, 0};
    ptdp_action_p2p(&sp, 3, &b31, &rx, &tx); /* last stage: gradient from the loss */
    CHECK(rx.peer_rank == -1);
    CHECK(tx.peer_rank == 2 && tx.peer_chunk == 1 && tx.peer_stage == 6);
    ptdp_action_p2p(&sp, 0, &b00, &rx, &tx);
    CHECK(rx.peer_rank == 1 && rx.peer_stage == 1 && tx.peer_rank == -1);
    ptdp_action_p2p(&sp, 3, &b30, &rx, NULL); /* stage 3 <- stage 4 on rank 0 */
    CHECK(rx.peer_rank == 0 && rx.peer_chunk == 1 && rx.peer_stage == 4);
    /* Tags are distinct over (kind, micro-batch, stage). */
    int seen = 0, dup = 0;
    char *used = calloc(2 * 8 * 8, 1);
    for (int k = 0; k < 2; k++)
        for (int mb = 0; mb < 8; mb++)
            for (int st = 0; st < 8; st++) {
                int t = ptdp_p2p_tag(&sp, k, mb, st);
                if (t < 0 || t >= 128 || used[t])
                    dup++;
                else
                    used[t] = 1, seen++;
            }
    CHECK(dup == 0 && seen == 128);
    free(used);
}

/* Every valid (kind, p, m, v) validates, with the expected peak stash, and
 * simulates to the paper's bubble fraction under uniform costs. */
static void test_sweep(void) {
    int valid = 0, invalid = 0, val_fail = 0, peak_fail = 0, bubble_fail = 0;
    int counts[PTDP_SCHED_COUNT] = {0};
    for (int kind = -1; kind < PTDP_SCHED_COUNT; kind++)
        for (int p = 1; p <= 5; p++)
            for (int m = 1; m <= 12; m++)
                for (int v = 1; v <= 3; v++) {
                    ptdp_schedule_params sp = {.p = p, .m = m, .v = v, .kind = kind};
                    ptdp_schedule s;
                    if (ptdp_schedule_init(&s, &sp)) {
                        invalid++;
                        continue;
                    }
                    valid++;
                    counts[s.params.kind]++;
                    int peak[5];
                    if (ptdp_schedule_validate(&s, peak)) {
                        val_fail++;
                        fprintf(stderr, "validate p=%d m=%d v=%d kind=%d: %s\n", p, m, v, kind,
                                ptdp_last_error());
                    }
                    for (int r = 0; r < p; r++) {
                        int want = ptdp_schedule_max_inflight(&s.params, r);
                        if (peak[r] != want) peak_fail++;
                        if (s.params.kind == PTDP_SCHED_GPIPE && peak[r] != m) peak_fail++;
                        if (s.params.kind == PTDP_SCHED_1F1B &&
                            (peak[r] > p || peak[r] != (p - r < m ? p - r : m)))
                            peak_fail++;
                    }
                    /* Uniform per-chunk costs tf/v, tb/v for several tb/tf ratios. */
                    for (int ratio = 1; ratio <= 3; ratio++) {
                        ptdp_sim_costs c = {
                            .forward = 1.0 / v, .backward = (double)ratio / v, .comm = 0.0};
                        ptdp_sim_result res;
                        if (ptdp_sim_run(&s, &c, &res)) {
                            bubble_fail++;
                            continue;
                        }
                        double want = (double)(p - 1) / ((double)v * m);
                        if (s.params.kind == PTDP_SCHED_ZBV) /* no closed form: test_zbv */
                            want = res.bubble_fraction;
                        if (fabs(res.bubble_fraction - want) > 1e-12) {
                            bubble_fail++;
                            fprintf(stderr,
                                    "bubble p=%d m=%d v=%d kind=%d ratio %d: %.12g want %.12g\n", p,
                                    m, v, s.params.kind, ratio, res.bubble_fraction, want);
                        }
                        for (int r = 0; r < p; r++)
                            if (res.peak_stash[r] != peak[r]) peak_fail++;
                        ptdp_sim_result_free(&res);
                    }
                    ptdp_schedule_free(&s);
                }
    CHECK(val_fail == 0);
    CHECK(peak_fail == 0);
    CHECK(bubble_fail == 0);
    CHECK(counts[PTDP_SCHED_GPIPE] == 5 * 12 && counts[PTDP_SCHED_1F1B] == 2 * 5 * 12);
    /* interleaved: p in 2..5, v in 2..3, m a multiple of p, twice (kind -1 and explicit). */
    CHECK(counts[PTDP_SCHED_INTERLEAVED] == 2 * 2 * (6 + 4 + 3 + 2));
    /* zb-v: p in 2..5, v = 2 only, any m */
    CHECK(counts[PTDP_SCHED_ZBV] == 4 * 12);
    CHECK(valid > 0 && invalid > 0);
}

static void test_sim_exact(void) {
    /* Makespans by hand with tf=1, tb=2: GPipe and 1F1B (m+p-1)(tf+tb);
     * interleaved m*(tf+tb) + (p-1)(tf+tb)/v. */
    struct {
        int p, m, v, kind;
        double makespan;
    } cases[] = {
        {4, 8, 1, PTDP_SCHED_GPIPE, 33},
        {4, 8, 1, PTDP_SCHED_1F1B, 33},
        {3, 5, 1, PTDP_SCHED_1F1B, 21},
        {4, 8, 2, -1, 28.5},
        {2, 4, 3, -1, 13},
        {1, 4, 1, -1, 12},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ptdp_schedule_params sp = {
            .p = cases[i].p, .m = cases[i].m, .v = cases[i].v, .kind = cases[i].kind};
        ptdp_schedule s;
        CHECK_OK(ptdp_schedule_init(&s, &sp));
        ptdp_sim_costs c = {.forward = 1.0 / sp.v, .backward = 2.0 / sp.v, .comm = 0};
        ptdp_sim_result res;
        CHECK_OK(ptdp_sim_run(&s, &c, &res));
        CHECK_CLOSE(res.makespan, cases[i].makespan, 1e-12, 1e-12);
        CHECK_CLOSE(res.ideal, 3.0 * sp.m, 1e-12, 1e-12);
        ptdp_sim_result_free(&res);
        ptdp_schedule_free(&s);
    }
    /* GPipe stashes m per rank, 1F1B at most p (rank 0). */
    ptdp_schedule_params g = {.p = 4, .m = 8, .v = 1, .kind = PTDP_SCHED_GPIPE},
                         o = {.p = 4, .m = 8, .v = 1, .kind = PTDP_SCHED_1F1B};
    ptdp_schedule sg, sf;
    CHECK_OK(ptdp_schedule_init(&sg, &g));
    CHECK_OK(ptdp_schedule_init(&sf, &o));
    int pg[4], pf[4];
    CHECK_OK(ptdp_schedule_validate(&sg, pg));
    CHECK_OK(ptdp_schedule_validate(&sf, pf));
    CHECK(pg[0] == 8 && pg[3] == 8);
    CHECK(pf[0] == 4 && pf[1] == 3 && pf[2] == 2 && pf[3] == 1);
    ptdp_schedule_free(&sg);
    /* Communication latency: p=2 m=1, tf=1 tb=2 tc=0.5:
     * F on rank 0 [0,1], F on rank 1 [1.5,2.5], B on rank 1 [2.5,4.5],
     * B on rank 0 [5,7]. */
    ptdp_schedule_params one = {.p = 2, .m = 1, .v = 1, .kind = -1};
    ptdp_schedule s1;
    CHECK_OK(ptdp_schedule_init(&s1, &one));
    ptdp_sim_costs c = {.forward = 1, .backward = 2, .comm = 0.5};
    ptdp_sim_result res;
    CHECK_OK(ptdp_sim_run(&s1, &c, &res));
    CHECK_CLOSE(res.makespan, 7.0, 0, 1e-12);
    CHECK_CLOSE(res.spans[1 * 2 + 0].start, 1.5, 0, 1e-12);
    CHECK_CLOSE(res.spans[0 * 2 + 1].start, 5.0, 0, 1e-12);
    CHECK_CLOSE(res.bubble_fraction, 4.0 / 3.0, 0, 1e-12);
    CHECK_CLOSE(res.idle_fraction, 8.0 / 14.0, 0, 1e-12);
    ptdp_sim_result_free(&res);
    ptdp_sim_result_free(NULL);
    ptdp_sim_costs neg = {.forward = -1, .backward = 1, .comm = 0};
    CHECK(ptdp_sim_run(&s1, &neg, &res) == PTDP_EINVAL);
    ptdp_schedule_free(&s1);

    /* SVG: one box per action, well-formed ends. */
    CHECK_OK(ptdp_schedule_init(&s1, &(ptdp_schedule_params){.p = 4, .m = 8, .v = 2, .kind = -1}));
    ptdp_sim_costs cu = {.forward = 0.5, .backward = 1, .comm = 0};
    CHECK_OK(ptdp_sim_run(&s1, &cu, &res));
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (f) {
        CHECK_OK(ptdp_svg_write(f, &s1, &res, "interleaved"));
        long sz = ftell(f);
        rewind(f);
        char *text = calloc((size_t)sz + 1, 1);
        CHECK(fread(text, 1, (size_t)sz, f) == (size_t)sz);
        CHECK(!strncmp(text, "<svg", 4) && strstr(text, "</svg>") != NULL);
        int boxes = 0;
        for (const char *q = text; (q = strstr(q, "<title>rank ")) != NULL; q++) boxes++;
        CHECK(boxes == 4 * 32);
        CHECK(strstr(text, "<title>rank 0 backward B7.0</title>") != NULL);
        free(text);
        fclose(f);
    }
    ptdp_sim_result_free(&res);
    ptdp_schedule_free(&s1);
    ptdp_schedule_free(&sf);
}

static void swap(ptdp_action *a, int i, int j) {
    ptdp_action t = a[i];
    a[i] = a[j];
    a[j] = t;
}

static void test_broken(void) {
    ptdp_schedule s;
    ptdp_schedule_params sp = {.p = 2, .m = 4, .v = 1, .kind = PTDP_SCHED_1F1B};
    /* Backward before forward: rank 0 "F0 F1 B0 ..." -> "B0 F1 F0 ...". */
    CHECK_OK(ptdp_schedule_init(&s, &sp));
    swap(s.acts, 0, 2);
    CHECK(ptdp_schedule_validate(&s, NULL) == PTDP_EINVAL);
    CHECK(strstr(ptdp_last_error(), "before its forward") != NULL);
    ptdp_schedule_free(&s);
    /* Duplicate forward, missing one. */
    CHECK_OK(ptdp_schedule_init(&s, &sp));
    s.acts[1].microbatch = 0;
    CHECK(ptdp_schedule_validate(&s, NULL) == PTDP_EINVAL);
    CHECK(strstr(ptdp_last_error(), "twice") != NULL);
    ptdp_schedule_free(&s);
    /* Out of range. */
    CHECK_OK(ptdp_schedule_init(&s, &sp));
    s.acts[3].chunk = 1;
    CHECK(ptdp_schedule_validate(&s, NULL) == PTDP_EINVAL);
    ptdp_schedule_free(&s);
    /* Too many in flight: rank 1 of 1F1B may hold p-r = 1; "F0 F1 B0 B1 ...". */
    CHECK_OK(ptdp_schedule_init(&s, &sp));
    ptdp_action *r1 = s.acts + s.len;
    swap(r1, 1, 2); /* F0 B0 F1 -> F0 F1 B0 */
    CHECK(ptdp_schedule_validate(&s, NULL) == PTDP_EINVAL);
    CHECK(strstr(ptdp_last_error(), "stashed") != NULL);
    ptdp_schedule_free(&s);
    /* A deadlocking pair: each list is fine alone, but rank 0 waits for B0
     * from rank 1 while rank 1 waits for F1 that rank 0 sends only after. */
    ptdp_schedule_params two = {.p = 2, .m = 2, .v = 1, .kind = PTDP_SCHED_1F1B};
    CHECK_OK(ptdp_schedule_init(&s, &two));
    const ptdp_action r0[4] = {
        {PTDP_ACT_FWD, 0, 0}, {PTDP_ACT_BWD, 0, 0}, {PTDP_ACT_FWD, 1, 0}, {PTDP_ACT_BWD, 1, 0}};
    const ptdp_action r1d[4] = {
        {PTDP_ACT_FWD, 1, 0}, {PTDP_ACT_BWD, 1, 0}, {PTDP_ACT_FWD, 0, 0}, {PTDP_ACT_BWD, 0, 0}};
    memcpy(s.acts, r0, sizeof r0);
    memcpy(s.acts + 4, r1d, sizeof r1d);
    CHECK(ptdp_schedule_validate(&s, NULL) == PTDP_EINVAL);
    CHECK(strstr(ptdp_last_error(), "deadlock") != NULL);
    CHECK(strstr(ptdp_last_error(), "rank 0 at B0 waits for rank 1") != NULL);
    ptdp_sim_result res;
    ptdp_sim_costs c = ptdp_sim_default_costs();
    CHECK(ptdp_sim_run(&s, &c, &res) == PTDP_EINVAL);
    CHECK(res.spans == NULL);
    /* The same pair in a consistent order is fine. */
    memcpy(s.acts + 4, r0, sizeof r0);
    CHECK_OK(ptdp_schedule_validate(&s, NULL));
    ptdp_schedule_free(&s);
    /* Interleaved: chunk 1's forward before chunk 0's on the previous rank
     * exists -> rank 0 would wait on itself via rank 1; a cross-rank cycle. */
    ptdp_schedule_params il = {.p = 2, .m = 2, .v = 2, .kind = -1};
    CHECK_OK(ptdp_schedule_init(&s, &il));
    ptdp_action *a0 = s.acts; /* F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0 */
    CHECK(a0[0].chunk == 0 && a0[2].chunk == 1);
    swap(a0, 0, 2); /* F0.1 first: needs stage 1 (rank 1, chunk 0) of micro-batch 0 */
    CHECK(ptdp_schedule_validate(&s, NULL) == PTDP_EINVAL);
    CHECK(strstr(ptdp_last_error(), "deadlock") != NULL);
    ptdp_schedule_free(&s);
}

/* The executor's send rings: the replay sizes them, a ring one slot smaller
 * than the minimum deadlocks, and the size does not grow with m where the
 * schedule bounds the messages in flight (1F1B, interleaved). */
static void test_send_buffers(void) {
    const struct {
        int p, v, kind;
    } cases[] = {{2, 1, PTDP_SCHED_1F1B},        {4, 1, PTDP_SCHED_1F1B},
                 {2, 2, PTDP_SCHED_INTERLEAVED}, {4, 2, PTDP_SCHED_INTERLEAVED},
                 {2, 1, PTDP_SCHED_GPIPE},       {3, 1, PTDP_SCHED_1F1B}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int K[2];
        for (int j = 0; j < 2; j++) {
            const int m = j ? 32 : 8;
            ptdp_schedule_params sp = {
                .p = cases[i].p, .m = m, .v = cases[i].v, .kind = cases[i].kind};
            ptdp_schedule s;
            CHECK_OK(ptdp_schedule_init(&s, &sp));
            K[j] = ptdp_schedule_send_buffers(&s);
            CHECK(K[j] >= 1 && K[j] <= m * sp.v);
            CHECK_OK(ptdp_schedule_replay(&s, K[j], NULL, NULL, NULL));
            if (K[j] - 2 >= 1)
                CHECK(ptdp_schedule_replay(&s, K[j] - 2, NULL, NULL, NULL) == PTDP_EINVAL);
            ptdp_schedule_free(&s);
        }
        fprintf(stderr, "send ring: %s p=%d v=%d: K=%d at m=8, K=%d at m=32\n",
                ptdp_schedule_kind_name(cases[i].kind), cases[i].p, cases[i].v, K[0], K[1]);
        if (cases[i].kind != PTDP_SCHED_GPIPE)
            CHECK(K[1] == K[0]); /* bounded by the schedule, not by m */
    }
}

/* ZB-H1 (zero bubble, 1F1B's memory): hand-derived lists, the published
 * shape, the bubble (p-1)(F+B-W)/(m(F+B+W)) with equal F, B, W (a third of
 * 1F1B's), the validator on W mistakes. */
static void test_zbh1(void) {
    /* p=2 m=4. Rank 0 keeps no W pending (W right after its B), rank 1 one. */
    CHECK(list_is(2, 4, 1, PTDP_SCHED_ZBH1, 0, "F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3"));
    CHECK(list_is(2, 4, 1, PTDP_SCHED_ZBH1, 1, "F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3"));
    /* p=4 m=8, first and last rank; m=2 < p: warm-up capped, W's at the end. */
    CHECK(list_is(4, 8, 1, PTDP_SCHED_ZBH1, 0,
                  "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7"));
    CHECK(list_is(4, 8, 1, PTDP_SCHED_ZBH1, 3,
                  "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7"));
    CHECK(list_is(4, 2, 1, PTDP_SCHED_ZBH1, 3, "F0 B0 F1 B1 W0 W1"));
    CHECK(list_is(4, 2, 1, PTDP_SCHED_ZBH1, 0, "F0 F1 B0 W0 B1 W1"));
    /* v > 1 is refused, naming the flag */
    ptdp_schedule_params bad = {.p = 2, .m = 4, .v = 2, .kind = PTDP_SCHED_ZBH1};
    CHECK(ptdp_schedule_check(&bad) == PTDP_EINVAL &&
          strstr(ptdp_last_error(), "--virtual-pipeline-model-parallel-size"));
    CHECK(ptdp_schedule_parse_kind("zb-h1") == PTDP_SCHED_ZBH1);

    /* The published shape, for every p <= 5, m <= 12: leaving W's out gives
     * exactly 1F1B's list (same warm-up p-r-1, same steady state, same
     * cool-down); W's run in micro-batch order, each after its own B; rank r
     * keeps at most r W's pending, so after its last B it runs r+1 W's (the
     * cool-down filled), and in the steady state (from the first W on)
     * every B is followed by its W's turn; live activations peak at min(p, m)
     * on every rank; with F = B = W the bubble is a third of 1F1B's. */
    int shape_fail = 0, bubble_fail = 0, mem_fail = 0;
    for (int p = 1; p <= 5; p++)
        for (int m = 1; m <= 12; m++) {
            ptdp_schedule_params zp = {.p = p, .m = m, .v = 1, .kind = PTDP_SCHED_ZBH1},
                                 op = {.p = p, .m = m, .v = 1, .kind = PTDP_SCHED_1F1B};
            ptdp_schedule z, o;
            if (ptdp_schedule_init(&z, &zp) || ptdp_schedule_init(&o, &op)) {
                shape_fail++;
                continue;
            }
            if (z.len != 3 * m) shape_fail++;
            int peak[5];
            if (ptdp_schedule_validate(&z, peak)) shape_fail++;
            for (int r = 0; r < p; r++) {
                const ptdp_action *za = ptdp_schedule_rank(&z, r), *oa = ptdp_schedule_rank(&o, r);
                int j = 0, nw = 0, last_b = -1, pending = 0, most_pending = 0;
                for (int i = 0; i < z.len; i++) {
                    if (za[i].kind == PTDP_ACT_WGT) {
                        if (za[i].microbatch != nw++) shape_fail++;
                        pending--;
                        continue;
                    }
                    if (za[i].kind == PTDP_ACT_BWD) {
                        last_b = i;
                        if (++pending > most_pending) most_pending = pending;
                    }
                    if (j >= o.len || za[i].kind != oa[j].kind ||
                        za[i].microbatch != oa[j].microbatch)
                        shape_fail++;
                    j++;
                }
                const int defer = r < m ? r : m - 1; /* W's held back beyond the current B */
                if (most_pending != defer + 1 || z.len - 1 - last_b != defer + 1) shape_fail++;
                if (peak[r] != (p < m ? p : m) ||
                    ptdp_schedule_chunk_inflight(&zp, r, 0) != peak[r])
                    mem_fail++;
            }
            if (m >= p) { /* F = B = W = 1: backward 2 of which weight 1 */
                ptdp_sim_costs c = {.forward = 1, .backward = 2, .weight = 1, .comm = 0};
                ptdp_sim_result rz, ro;
                if (ptdp_sim_run(&z, &c, &rz) || ptdp_sim_run(&o, &c, &ro)) {
                    bubble_fail++;
                } else {
                    const double want = (double)(p - 1) / (3.0 * m);
                    if (fabs(rz.bubble_fraction - want) > 1e-12 ||
                        fabs(rz.bubble_fraction * 3 - ro.bubble_fraction) > 1e-12 ||
                        fabs(rz.makespan - (3.0 * m + p - 1)) > 1e-12) {
                        bubble_fail++;
                        fprintf(stderr, "zb-h1 p=%d m=%d: bubble %.12g want %.12g, makespan %g\n",
                                p, m, rz.bubble_fraction, want, rz.makespan);
                    }
                    ptdp_sim_result_free(&rz);
                    ptdp_sim_result_free(&ro);
                }
            }
            ptdp_schedule_free(&z);
            ptdp_schedule_free(&o);
        }
    CHECK(shape_fail == 0);
    CHECK(bubble_fail == 0);
    CHECK(mem_fail == 0);

    /* Separate costs: p=2 m=2, F=1, B=2, W=1 (backward 3): rank 0 F0 [0,1]
     * F1 [1,2]; rank 1 F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7] W0 [7,8] W1
     * [8,9]; rank 0 B0 [4,6] W0 [6,7] B1 [7,9] W1 [9,10]. */
    ptdp_schedule_params two = {.p = 2, .m = 2, .v = 1, .kind = PTDP_SCHED_ZBH1};
    ptdp_schedule s2;
    CHECK_OK(ptdp_schedule_init(&s2, &two));
    ptdp_sim_costs c3 = {.forward = 1, .backward = 3, .weight = 1, .comm = 0};
    ptdp_sim_result r2;
    CHECK_OK(ptdp_sim_run(&s2, &c3, &r2));
    CHECK_CLOSE(r2.makespan, 10, 0, 1e-12);
    CHECK_CLOSE(r2.spans[2].start, 4, 0, 1e-12);          /* rank 0's B0 */
    CHECK_CLOSE(r2.spans[s2.len + 4].start, 7, 0, 1e-12); /* rank 1's W0 */
    ptdp_sim_result_free(&r2);
    ptdp_sim_costs heavy = {.forward = 1, .backward = 1, .weight = 2, .comm = 0};
    CHECK(ptdp_sim_run(&s2, &heavy, &r2) == PTDP_EINVAL &&
          strstr(ptdp_last_error(), "weight > backward"));

    /* Broken lists: W before its B, W twice (so one missing), a W in a
     * schedule that does not split the backward. */
    ptdp_action *a = (ptdp_action *)ptdp_schedule_rank(&s2, 0); /* F0 F1 B0 W0 B1 W1 */
    swap(a, 2, 3);
    CHECK(ptdp_schedule_validate(&s2, NULL) == PTDP_EINVAL &&
          strstr(ptdp_last_error(), "before the backward B"));
    swap(a, 2, 3);
    a[5].microbatch = 0;
    CHECK(ptdp_schedule_validate(&s2, NULL) == PTDP_EINVAL &&
          strstr(ptdp_last_error(), "runs W0 twice"));
    a[5].microbatch = 1;
    CHECK_OK(ptdp_schedule_validate(&s2, NULL));
    ptdp_schedule_free(&s2);
    ptdp_schedule_params of = {.p = 2, .m = 2, .v = 1, .kind = PTDP_SCHED_1F1B};
    ptdp_schedule s3;
    CHECK_OK(ptdp_schedule_init(&s3, &of));
    ((ptdp_action *)ptdp_schedule_rank(&s3, 1))[3].kind = PTDP_ACT_WGT;
    CHECK(ptdp_schedule_validate(&s3, NULL) == PTDP_EINVAL &&
          strstr(ptdp_last_error(), "out of range"));
    ptdp_schedule_free(&s3);
    /* A W moves nothing. */
    ptdp_action w = {PTDP_ACT_WGT, 0, 0};
    ptdp_p2p in, out;
    ptdp_action_p2p(&two, 1, &w, &in, &out);
    CHECK(in.peer_rank == -1 && out.peer_rank == -1);
}

/* ZB-V: the V-shaped mapping, a hand-derived list, the shape of the
 * generated lists over a sweep, its bubble with F = B = W against ZB-H1's,
 * and the validator on broken ZB-V lists. */
static void test_zbv(void) {
    /* p=4: chunk 0 of rank r is stage r, chunk 1 stage 7-r; the inverse
     * agrees; the interleaved mapping is unchanged (c*p + r). */
    ptdp_schedule_params v4 = {.p = 4, .m = 8, .v = 2, .kind = PTDP_SCHED_ZBV},
                         il = {.p = 4, .m = 8, .v = 2, .kind = PTDP_SCHED_INTERLEAVED};
    CHECK(ptdp_schedule_stage(&v4, 0, 1) == 7 && ptdp_schedule_stage(&v4, 3, 1) == 4 &&
          ptdp_schedule_stage(&v4, 2, 0) == 2 && ptdp_schedule_stage(&il, 0, 1) == 4);
    int inverse_fail = 0;
    for (int k = 0; k < 8; k++) {
        int r, c, r2, c2;
        ptdp_schedule_stage_owner(&v4, k, &r, &c);
        ptdp_schedule_stage_owner(&il, k, &r2, &c2);
        if (ptdp_schedule_stage(&v4, r, c) != k || ptdp_schedule_stage(&il, r2, c2) != k ||
            r2 != k % 4)
            inverse_fail++;
    }
    CHECK(inverse_fail == 0);
    /* the turn of the V on rank 3 is local both ways; rank 0 holds both ends */
    ptdp_p2p in, out;
    ptdp_action f30 = {PTDP_ACT_FWD, 0, 0}, b31 = {PTDP_ACT_BWD, 0, 1}, f01 = {PTDP_ACT_FWD, 0, 1};
    ptdp_action_p2p(&v4, 3, &f30, &in, &out);
    CHECK(in.peer_rank == 2 && out.peer_rank == 3 && out.peer_chunk == 1 && out.peer_stage == 4);
    ptdp_action_p2p(&v4, 3, &b31, &in, &out);
    CHECK(in.peer_rank == 2 && in.peer_stage == 5 && out.peer_rank == 3 && out.peer_chunk == 0);
    ptdp_action_p2p(&v4, 0, &f01, &in, &out);
    CHECK(in.peer_rank == 1 && in.peer_stage == 6 && out.peer_rank == -1);

    /* p=2 m=4, derived by hand from the rules of zbv.c (unit costs, at each
     * time an idle rank takes a B whose input arrived, else an F within 2p =
     * 4 stashed (chunk 1 first), else its oldest W). t=0: rank 0 F0.0. t=1:
     * rank 0 F1.0, rank 1 F0.0. t=2: rank 0 F2.0 (F0.1 needs stage 2, done at
     * 3), rank 1 F0.1 (chunk 1 first). t=3: rank 0 F0.1 (4 stashed), rank 1
     * F1.0. t=4: rank 0 B0.1 (the loss stage's own forward is done), rank 1
     * F1.1. t=5: rank 0 is full (4) and has no B: W0.1; rank 1 B0.1. t=6:
     * rank 0 F1.1, rank 1 B0.0 (its chunk 1's B at 5 is local). t=7: rank 0
     * B0.0 (arrived at 7), rank 1 has no B (B1.1 waits for rank 0) and is
     * full: W0.1. t=8: rank 0 B1.1, rank 1 F2.0 (3 stashed). t=9: rank 0
     * W0.0 (full, no B), rank 1 B1.1; t=10: rank 0 F3.0, rank 1 B1.0; ...
     * the cool-down pairs B's with the W's left. */
    CHECK(list_is(2, 4, 2, PTDP_SCHED_ZBV, 0,
                  "F0.0 F1.0 F2.0 F0.1 B0.1 W0.1 F1.1 B0.0 B1.1 W0.0 F3.0 B1.0 W1.1 F2.1 B2.1 "
                  "W1.0 W2.1 B2.0 W2.0 F3.1 B3.1 W3.1 B3.0 W3.0"));
    CHECK(list_is(2, 4, 2, PTDP_SCHED_ZBV, 1,
                  "F0.0 F0.1 F1.0 F1.1 B0.1 B0.0 W0.1 F2.0 B1.1 B1.0 W0.0 F2.1 W1.1 F3.0 B2.1 "
                  "B2.0 W1.0 F3.1 W2.1 W2.0 B3.1 B3.0 W3.1 W3.0"));
    /* refused: other v, p = 1 */
    ptdp_schedule_params bad = {.p = 2, .m = 4, .v = 3, .kind = PTDP_SCHED_ZBV};
    CHECK(ptdp_schedule_check(&bad) == PTDP_EINVAL && strstr(ptdp_last_error(), "zb-v") &&
          strstr(ptdp_last_error(), "--virtual-pipeline-model-parallel-size 2"));
    bad.p = 1, bad.v = 2;
    CHECK(ptdp_schedule_check(&bad) == PTDP_EINVAL &&
          strstr(ptdp_last_error(), "--pipeline-model-parallel-size >= 2"));
    CHECK(ptdp_schedule_parse_kind("zb-v") == PTDP_SCHED_ZBV);

    /* The shape, p <= 8, m <= 24: valid (deadlock-free, B before W, within
     * the bound) with the bound reached (min(2p, 2m) on every rank); per
     * chunk F's, B's and W's each in micro-batch order; rank r starts with
     * min(2(p-r)-1, m) chunk-0 forwards before its first chunk-1 forward;
     * with F = B = W (1 per chunk) the makespan is 6m + p - 1 for p <= 4
     * (half ZB-H1's bubble: (p-1)/(6m)) and the bubble below ZB-H1's
     * (p-1)/(3m) up to p = 8, m >= p. */
    int shape_fail = 0, mem_fail = 0, bubble_fail = 0;
    for (int p = 2; p <= 8; p++)
        for (int m = 1; m <= 24; m++) {
            ptdp_schedule_params sp = {.p = p, .m = m, .v = 2, .kind = PTDP_SCHED_ZBV};
            ptdp_schedule z;
            int peak[8];
            if (ptdp_schedule_init(&z, &sp) || ptdp_schedule_validate(&z, peak)) {
                shape_fail++;
                fprintf(stderr, "zb-v p=%d m=%d: %s\n", p, m, ptdp_last_error());
                continue;
            }
            for (int r = 0; r < p; r++) {
                const ptdp_action *a = ptdp_schedule_rank(&z, r);
                int next[3][2] = {{0}}, f0 = 0, seen_f1 = 0;
                for (int i = 0; i < z.len; i++) {
                    if (a[i].microbatch != next[a[i].kind][a[i].chunk]++) shape_fail++;
                    if (a[i].kind == PTDP_ACT_FWD && a[i].chunk == 1) seen_f1 = 1;
                    if (a[i].kind == PTDP_ACT_FWD && a[i].chunk == 0 && !seen_f1) f0++;
                }
                if (f0 != (2 * (p - r) - 1 < m ? 2 * (p - r) - 1 : m)) shape_fail++;
                if (peak[r] != (2 * p < 2 * m ? 2 * p : 2 * m)) mem_fail++;
            }
            ptdp_sim_costs c = {.forward = 1, .backward = 2, .weight = 1, .comm = 0};
            ptdp_sim_result res;
            if (m >= p && ptdp_sim_run(&z, &c, &res) == PTDP_OK) {
                if ((p <= 4 && fabs(res.makespan - (6.0 * m + p - 1)) > 1e-12) ||
                    !(res.bubble_fraction < (p - 1) / (3.0 * m)) ||
                    fabs(res.ideal - 6.0 * m) > 1e-12) {
                    bubble_fail++;
                    fprintf(stderr, "zb-v p=%d m=%d: makespan %g bubble %g\n", p, m, res.makespan,
                            res.bubble_fraction);
                }
                ptdp_sim_result_free(&res);
            } else if (m >= p) {
                bubble_fail++;
            }
            ptdp_schedule_free(&z);
        }
    CHECK(shape_fail == 0);
    CHECK(mem_fail == 0);
    CHECK(bubble_fail == 0);

    /* Broken ZB-V lists (p=2 m=4, rank 0 as above, rank 1 "F0.0 F0.1 ..."). */
    ptdp_schedule_params two = {.p = 2, .m = 4, .v = 2, .kind = PTDP_SCHED_ZBV};
    ptdp_schedule s;
    CHECK_OK(ptdp_schedule_init(&s, &two));
    ptdp_action *a0 = (ptdp_action *)ptdp_schedule_rank(&s, 0);
    ptdp_action *a1 = (ptdp_action *)ptdp_schedule_rank(&s, 1);
    swap(a0, 5, 6); /* F1.1 before W0.1: 5 stashed */
    CHECK(ptdp_schedule_validate(&s, NULL) == PTDP_EINVAL &&
          strstr(ptdp_last_error(), "holds 5 stashed activations") &&
          strstr(ptdp_last_error(), "the zb-v schedule allows 4"));
    swap(a0, 5, 6);
    swap(a0, 4, 5); /* W0.1 before B0.1 */
    CHECK(ptdp_schedule_validate(&s, NULL) == PTDP_EINVAL &&
          strstr(ptdp_last_error(), "before the backward B"));
    swap(a0, 4, 5);
    swap(a1, 0, 1); /* F0.1 (stage 2) before F0.0 (stage 1) on the same rank */
    CHECK(ptdp_schedule_validate(&s, NULL) == PTDP_EINVAL &&
          strstr(ptdp_last_error(), "rank 1 at F0.1 waits for rank 1"));
    swap(a1, 0, 1);
    CHECK_OK(ptdp_schedule_validate(&s, NULL));
    ptdp_schedule_free(&s);
}

/* zb-v with non-unit costs: a hand-played case, the validator over a grid of
 * (p, m, costs), the scaling of times and FLOPs to costs, and the --zb-costs
 * parser. */
static void test_zbv_costs(void) {
    /* p=2, m=2, F=2 B=2 W=1. Stages: rank 0 holds 0 and 3, rank 1 holds 1
     * and 2; at most 4 stashed chunk activations. Played by hand (time: rank
     * 0's action, rank 1's action; "-" idle):
     *   0: F0.0 -      2: F1.0 F0.0   4: -    F0.1   6: F0.1 F1.0
     *   8: B0.1 F1.1  10: F1.1 B0.1  12: B1.1 B0.0  14: B0.0 B1.1
     *  16: W0.1 B1.0  17: W1.1 (rank 0: B1.0's input, rank 1's B1.0, comes
     *      at 18, so the W's of the older B's fill 16..18)
     *  18: B1.0 W0.1  19: -    W0.0  20: W0.0 W1.1  21: W1.0 W1.0  (end 22)
     * With unit costs rank 0 runs B1.0 before W1.1 instead: its input comes
     * one step after B0.0, not two. */
    ptdp_schedule_params sp = {.p = 2, .m = 2, .v = 2, .kind = PTDP_SCHED_ZBV};
    sp.cost_f = 2, sp.cost_b = 2, sp.cost_w = 1;
    ptdp_schedule s;
    char buf[4096];
    CHECK_OK(ptdp_schedule_init(&s, &sp));
    CHECK(!strcmp(list_str(&s, 0, buf, sizeof buf),
                  "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 B0.0 W0.1 W1.1 B1.0 W0.0 W1.0"));
    CHECK(!strcmp(list_str(&s, 1, buf, sizeof buf),
                  "F0.0 F0.1 F1.0 F1.1 B0.1 B0.0 B1.1 B1.0 W0.1 W0.0 W1.1 W1.0"));
    CHECK_OK(ptdp_schedule_validate(&s, NULL));
    ptdp_schedule_free(&s);
    CHECK(list_is(2, 2, 2, PTDP_SCHED_ZBV, 0,
                  "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 B0.0 W0.1 B1.0 W1.1 W0.0 W1.0"));

    /* The grid: every list valid (deadlock-free, B before W, within the
     * bound), per chunk F's, B's and W's each in micro-batch order, whatever
     * the costs: W cheap, W dearer than B, F dominant, unit, large. */
    static const int costs[][3] = {{0, 0, 0}, {2, 2, 1}, {6, 6, 4}, {1, 1, 3},   {8, 8, 1},
                                   {3, 5, 2}, {1, 4, 1}, {5, 1, 1}, {7, 11, 13}, {1000, 999, 1}};
    int fail = 0;
    for (size_t c = 0; c < sizeof costs / sizeof costs[0]; c++)
        for (int p = 2; p <= 6; p++)
            for (int m = 1; m <= 20; m++) {
                ptdp_schedule_params g = {.p = p, .m = m, .v = 2, .kind = PTDP_SCHED_ZBV};
                g.cost_f = costs[c][0], g.cost_b = costs[c][1], g.cost_w = costs[c][2];
                int peak[6];
                if (ptdp_schedule_init(&s, &g) || ptdp_schedule_validate(&s, peak)) {
                    fail++;
                    fprintf(stderr, "zb-v p=%d m=%d costs %d,%d,%d: %s\n", p, m, g.cost_f, g.cost_b,
                            g.cost_w, ptdp_last_error());
                    continue;
                }
                for (int r = 0; r < p; r++) {
                    const ptdp_action *a = ptdp_schedule_rank(&s, r);
                    int next[3][2] = {{0}};
                    for (int i = 0; i < s.len; i++)
                        if (a[i].microbatch != next[a[i].kind][a[i].chunk]++) fail++;
                    if (peak[r] > 2 * (p < m ? p : m)) fail++;
                }
                ptdp_schedule_free(&s);
            }
    CHECK(fail == 0);

    /* Cost-aware lists idle less than unit-cost ones when the simulator runs
     * them with those costs (W cheaper than F and B, as measured on CPUs). */
    for (int p = 2; p <= 4; p += 2)
        for (int m = 8; m <= 16; m += 8) {
            double idle[2];
            for (int aware = 0; aware < 2; aware++) {
                ptdp_schedule_params g = {.p = p, .m = m, .v = 2, .kind = PTDP_SCHED_ZBV};
                if (aware) g.cost_f = 6, g.cost_b = 6, g.cost_w = 4;
                ptdp_sim_costs sc = {.forward = 6, .backward = 10, .weight = 4};
                ptdp_sim_result res;
                CHECK_OK(ptdp_schedule_init(&s, &g));
                CHECK_OK(ptdp_sim_run(&s, &sc, &res));
                idle[aware] = res.idle_fraction;
                ptdp_sim_result_free(&res);
                ptdp_schedule_free(&s);
            }
            fprintf(stderr, "zb-v p=%d m=%d F,B,W=6,6,4: idle %.4f unit-cost order, %.4f aware\n",
                    p, m, idle[0], idle[1]);
            CHECK(idle[1] < idle[0]);
        }

    /* Times -> costs: the cheapest becomes 4, ratios rounded; zero or bad
     * times give unit costs. */
    ptdp_schedule_params k = ptdp_schedule_default_params();
    ptdp_schedule_scale_costs(3.8, 3.75, 2.45, &k);
    CHECK(k.cost_f == 6 && k.cost_b == 6 && k.cost_w == 4);
    ptdp_schedule_scale_costs(1, 0, 1, &k);
    CHECK(k.cost_f == 4 && k.cost_b == 1 && k.cost_w == 4);
    ptdp_schedule_scale_costs(0, 0, 0, &k);
    CHECK(k.cost_f == 0 && k.cost_b == 0 && k.cost_w == 0);
    ptdp_schedule_scale_costs(NAN, 1, 1, &k);
    CHECK(k.cost_f == 0 && k.cost_b == 0 && k.cost_w == 0);
    ptdp_schedule_scale_costs(1e9, 1, 1, &k);
    CHECK(k.cost_f == PTDP_SCHEDULE_MAX_COST && k.cost_b == 4 && k.cost_w == 4);
    /* FLOPs: GPT-2 small (s 1024, h 768): G = 2 s (4h^2 + 8h^2) = 14.16e9,
     * A = 4 s^2 h = 3.22e9 per sequence: F 17.30, B 20.45, W 14.16 -> 5,6,4;
     * s 128, h 64: attention weighs more, F 131072 B 163840 W 98304 per 128
     * -> 5,7,4 */
    ptdp_schedule_flop_costs(1024, 768, 0, &k);
    CHECK(k.cost_f == 5 && k.cost_b == 6 && k.cost_w == 4);
    ptdp_schedule_flop_costs(128, 64, 256, &k);
    CHECK(k.cost_f == 5 && k.cost_b == 7 && k.cost_w == 4);
    /* near 1:1:1 for the usual shapes (attention is s/(6h) of the GEMMs):
     * bench_bubble's model 4,5,4; test_zb's 4,4,4; a GPT-3-sized layer 4,4,4 */
    ptdp_schedule_flop_costs(128, 256, 0, &k);
    CHECK(k.cost_f == 4 && k.cost_b == 5 && k.cost_w == 4);
    ptdp_schedule_flop_costs(16, 48, 0, &k);
    CHECK(k.cost_f == 4 && k.cost_b == 4 && k.cost_w == 4);
    ptdp_schedule_flop_costs(2048, 12288, 0, &k);
    CHECK(k.cost_f == 4 && k.cost_b == 4 && k.cost_w == 4);

    /* --zb-costs */
    CHECK_OK(ptdp_schedule_parse_costs("3,3,2", "--zb-costs", &k));
    CHECK(k.cost_f == 3 && k.cost_b == 3 && k.cost_w == 2);
    const char *bad[] = {"",      "3,3",      "3,3,2,1", "0,1,1", "1,-1,1",
                         "1,1,x", "1,1,1001", "1.5,1,1", NULL};
    for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        CHECK(ptdp_schedule_parse_costs(bad[i], "--zb-costs", &k) == PTDP_EINVAL);
        CHECK(strstr(ptdp_last_error(), "--zb-costs") != NULL);
    }
    CHECK(k.cost_f == 3 && k.cost_b == 3 && k.cost_w == 2); /* untouched on error */
}

int main(void) {
    test_send_buffers();
    test_hand_lists();
    test_params();
    test_p2p();
    test_sweep();
    test_sim_exact();
    test_broken();
    test_zbh1();
    test_zbv();
    test_zbv_costs();
    return test_done("test_schedule");
}
