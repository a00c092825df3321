/* test_plan.c - the planner's formulas against hand-computed values (bubble,
 * per-stage simulator costs, the paper's communication volumes per
 * micro-batch for t, p and d, memory per category at 16 bits, the model
 * FLOPs), the search (memory limits respected, rejection reasons, pins),
 * bad input (cluster file with a missing key, heads that do not divide, a
 * device count no layout can use), and the paper's Table 1 on the shipped
 * A100 description: the three rows of the issue within 5%, all ten rows with
 * a mean absolute error of at most 5% and none off by more than 10%. */
#define _GNU_SOURCE
#include <string.h>

#include "plan/plan.h"
#include "test.h"

/* A cluster with round numbers: the GEMM and memory-bound terms are exact
 * when gemm_half_dim is 0 and the efficiencies 1. */
static ptdp_cluster round_cluster(void) {
    ptdp_cluster c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "round");
    for (int p = 0; p < PTDP_PREC_COUNT; p++) c.peak_flops[p] = 1e12;
    c.memory_bytes = 1e15;
    c.devices_per_node = 8;
    c.mem_bandwidth = 1e11;
    c.intra_bandwidth = 1e10;
    c.intra_latency = 0;
    c.inter_bandwidth = 1e9;
    c.inter_latency = 0;
    c.gemm_efficiency = 1;
    c.gemm_half_dim = 0;
    for (int p = 0; p < PTDP_PREC_COUNT; p++) c.elementwise_efficiency[p] = 1;
    c.overhead_s = 0;
    return c;
}

static ptdp_plan_job small_job(void) {
    ptdp_plan_job j = ptdp_plan_job_default_params();
    j.job.model.num_layers = 8;
    j.job.model.hidden = 256;
    j.job.model.heads = 8;
    j.job.model.seq_length = 128;
    j.job.model.vocab = 1024;
    j.job.global_batch = 64;
    j.job.dtype = PTDP_DTYPE_FP16;
    j.job.overlap_grad_reduce = 0;
    return j;
}

static void test_bubble(void) {
    /* uniform costs: the paper's (p-1)/m and (p-1)/(v m) */
    const int cases[][3] = {{4, 8, 1}, {4, 8, 2}, {2, 4, 1}, {8, 16, 4}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ptdp_schedule_params sp = ptdp_schedule_default_params();
        sp.p = cases[i][0];
        sp.m = cases[i][1];
        sp.v = cases[i][2];
        ptdp_schedule s;
        CHECK_OK(ptdp_schedule_init(&s, &sp));
        ptdp_sim_costs c = ptdp_sim_default_costs();
        c.forward /= sp.v;
        c.backward /= sp.v;
        ptdp_sim_result r;
        CHECK_OK(ptdp_sim_run(&s, &c, &r));
        CHECK_CLOSE(r.bubble_fraction, (double)(sp.p - 1) / (sp.v * sp.m), 1e-9, 1e-12);
        ptdp_sim_result_free(&r);
        ptdp_schedule_free(&s);
    }
    /* per-stage costs, p=2, m=1 (1F1B): F on stage 0 (1), F on stage 1 (2),
     * B on stage 1 (3), B on stage 0 (4) run one after another: 10 */
    ptdp_schedule_params sp = ptdp_schedule_default_params();
    sp.p = 2;
    sp.m = 1;
    ptdp_schedule s;
    CHECK_OK(ptdp_schedule_init(&s, &sp));
    const double f[2] = {1, 2}, b[2] = {4, 3};
    ptdp_sim_costs c = {
        .forward = 0, .backward = 0, .comm = 0, .stage_forward = f, .stage_backward = b};
    ptdp_sim_result r;
    CHECK_OK(ptdp_sim_run(&s, &c, &r));
    CHECK_CLOSE(r.makespan, 10.0, 1e-12, 0);
    CHECK_CLOSE(r.ideal, 5.0, 1e-12, 0); /* stage 0: 1 + 4 */
    ptdp_sim_result_free(&r);
    const double neg[2] = {1, -1};
    c.stage_forward = neg;
    CHECK(ptdp_sim_run(&s, &c, &r) == PTDP_EINVAL);
    ptdp_schedule_free(&s);
}

static void test_volumes(void) {
    const ptdp_cluster c = round_cluster();
    ptdp_plan_job j = small_job();
    const double w = 2, N = 128.0 * 2, h = 256; /* fp16, s b tokens with b = 2 */
    /* t: 2 all-reduces of s b h per layer forward (the paper's 4 per layer
     * forward and backward), ring: 2 (t-1)/t bytes / bw */
    ptdp_plan_layout L = {.t = 4, .p = 1, .d = 2, .v = 1, .b = 2, .recompute = 0};
    ptdp_plan_estimate e;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &e));
    CHECK_CLOSE(e.layer_tp_fwd_s, 2 * (2.0 * 3 / 4 * N * h * w / 1e10), 1e-12, 0);
    CHECK_CLOSE(e.p2p_s, 0.0, 0, 0);
    /* GEMMs forward: 2 N (3h^2 + h^2 + 8h^2)/t + 2 x 2 b s^2 h / t FLOPs at 1e12 */
    const double gemm = (2 * N * 12 * h * h + 4 * 2 * 128.0 * 128 * h) / 4 / 1e12;
    CHECK_CLOSE(e.layer_gemm_fwd_s, gemm, 1e-9, 0);
    /* memory-bound: w (10 N h + 4 S + 2 N 4h/t) + S + 2 N h bytes, S = b a/t s^2 */
    const double S = 2.0 * 2 * 128 * 128;
    CHECK_CLOSE(e.layer_elementwise_fwd_s,
                (w * (10 * N * h + 4 * S + 2 * N * 4 * h / 4) + S + 2 * N * h) / 1e11, 1e-12, 0);
    /* d: all-reduce of the rank's gradients, 2 (d-1)/d P wg / bw; t d = 8
     * fills the node: intra-node */
    CHECK_CLOSE(e.dp_allreduce_s, 2.0 * 1 / 2 * e.params_per_device * 2 / 1e10, 1e-12, 0);
    CHECK_CLOSE(e.comm_s[PTDP_COMM_DATA], e.dp_allreduce_s, 1e-12, 0);
    /* p: s b h per micro-batch between stages (s b h / t with scatter/gather,
     * then an all-gather of (t-1)/t s b h in the tensor group); t d = 16
     * crosses nodes */
    L = (ptdp_plan_layout){.t = 4, .p = 2, .d = 4, .v = 1, .b = 2, .recompute = 0};
    j.job.global_batch = 64;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &e));
    CHECK_CLOSE(e.p2p_s, N * h * w / 4 / 1e9 + 3.0 / 4 * N * h * w / 1e10, 1e-12, 0);
    /* sequence parallelism: the message is the s/t shard, nothing gathered;
     * the tensor group's all-reduces become reduce-scatter + all-gather pairs
     * of the same ring time; the residual stream's element-wise work shrinks */
    const double tp_fwd = e.layer_tp_fwd_s, ew_fwd = e.layer_elementwise_fwd_s;
    j.job.sequence_parallel = 1;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &e));
    CHECK_CLOSE(e.p2p_s, N * h * w / 4 / 1e9, 1e-12, 0);
    CHECK_CLOSE(e.layer_tp_fwd_s, tp_fwd, 1e-12, 0);
    CHECK_CLOSE(e.layer_elementwise_fwd_s, ew_fwd - (w * 10 + 2) * N * h * 3 / 4 / 1e11, 1e-12, 0);
    j.job.sequence_parallel = 0;
    j.job.scatter_gather = 0;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &e));
    CHECK_CLOSE(e.p2p_s, N * h * w / 1e9, 1e-12, 0);
    /* recomputation adds a forward to every backward */
    L.recompute = 1;
    ptdp_plan_estimate e2;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &e2));
    CHECK_CLOSE(e2.layer_bwd_s, e.layer_bwd_s + e.layer_fwd_s, 1e-12, 0);
    CHECK(e2.iteration_s > e.iteration_s);
}

static void test_memory(void) {
    const ptdp_cluster c = round_cluster();
    ptdp_plan_job j = small_job();
    const double l = 8, h = 256, s = 128, b = 2, a = 8, V = 1024;
    const double P = l * (12 * h * h + 13 * h) + V * h + s * h + 2 * h;
    ptdp_plan_layout L = {.t = 1, .p = 1, .d = 1, .v = 1, .b = 2, .recompute = 0};
    ptdp_plan_estimate e;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &e));
    CHECK_CLOSE(e.params_per_device, P, 1e-12, 0);
    /* fp16: 2 + 2 + 12 = the paper's 16 bytes per parameter */
    CHECK_CLOSE(e.memory[PTDP_PMEM_WEIGHTS], 2 * P, 1e-12, 0);
    CHECK_CLOSE(e.memory[PTDP_PMEM_GRADIENTS], 2 * P, 1e-12, 0);
    CHECK_CLOSE(e.memory[PTDP_PMEM_OPTIMIZER], 12 * P, 1e-12, 0);
    /* activations: one micro-batch in flight (p = 1), s b h (34 + 5 a s / h) per layer */
    CHECK_CLOSE(e.memory[PTDP_PMEM_ACTIVATIONS], l * s * b * h * (34 + 5 * a * s / h), 1e-12, 0);
    CHECK_CLOSE(e.memory[PTDP_PMEM_BUFFERS], s * b * V * 6, 1e-12, 0); /* logits 2 + 4 bytes */
    /* sequence parallelism with t = 4: Korthikanti et al.'s (s b h / t)(34 + 5 a s / h) */
    j.job.sequence_parallel = 1;
    L.t = 4;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &e));
    CHECK_CLOSE(e.memory[PTDP_PMEM_ACTIVATIONS], l * s * b * h / 4 * (34 + 5 * a * s / h), 1e-12,
                0);
    j.job.model.seq_length = 126; /* not divisible by t: rejected */
    CHECK(ptdp_plan_estimate_layout(&c, &j, &L, &e) == PTDP_ECONFIG);
    CHECK(strstr(ptdp_last_error(), "not divisible by t=4"));
    j = small_job();
    L.t = 1;
    /* full recomputation: only each layer's 16-bit input, plus one layer rerun */
    L.recompute = 1;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &e));
    CHECK_CLOSE(e.memory[PTDP_PMEM_ACTIVATIONS], l * 2 * s * b * h, 1e-12, 0);
    CHECK_CLOSE(e.memory[PTDP_PMEM_BUFFERS], s * b * V * 6 + s * b * h * (34 + 5 * a * s / h),
                1e-12, 0);
    /* bf16: fp32 gradients, 18 bytes per parameter; ZeRO-1 shards the 12 over d */
    j.job.dtype = PTDP_DTYPE_BF16;
    j.job.distributed_optimizer = 1;
    j.job.global_batch = 64;
    L = (ptdp_plan_layout){.t = 2, .p = 1, .d = 4, .v = 1, .b = 2, .recompute = 1};
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &e));
    const double P2 = l * (6 * h * h + 9.5 * h) + V / 2 * h + s * h + 2 * h; /* t = 2 */
    CHECK_CLOSE(e.params_per_device, P2, 1e-12, 0);
    CHECK_CLOSE(e.memory[PTDP_PMEM_GRADIENTS], 4 * P2, 1e-12, 0);
    CHECK_CLOSE(e.memory[PTDP_PMEM_OPTIMIZER], 12 * P2 / 4, 1e-12, 0);
    /* fp32 is memory.c's exact plan: weights are 4 bytes per (aligned) parameter */
    j = small_job();
    j.job.dtype = PTDP_DTYPE_FP32;
    L = (ptdp_plan_layout){.t = 1, .p = 2, .d = 1, .v = 1, .b = 2, .recompute = 1};
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &e));
    CHECK(e.memory[PTDP_PMEM_WEIGHTS] >= 4 * (4 * (12 * h * h + 13 * h) + V * h));
    CHECK(e.memory[PTDP_PMEM_OPTIMIZER] > 1.9 * e.memory[PTDP_PMEM_WEIGHTS] &&
          e.memory[PTDP_PMEM_OPTIMIZER] <= 2 * e.memory[PTDP_PMEM_WEIGHTS]);
    /* the paper's eq. (3) */
    j = small_job();
    CHECK_CLOSE(ptdp_plan_model_flops(&j, 1024, 1),
                96.0 * 64 * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)), 1e-12, 0);
    /* without recomputation the layers lose their second forward, the logit
     * layer (never recomputed) keeps its 6 B s h V */
    CHECK_CLOSE(ptdp_plan_model_flops(&j, 1024, 0),
                72.0 * 64 * s * l * h * h * (1 + s / (6 * h)) + 6.0 * 64 * s * h * V, 1e-12, 0);
}

static void test_search(void) {
    ptdp_cluster c = round_cluster();
    ptdp_plan_job j = small_job();
    ptdp_plan_pins pins = {.t = 0, .p = 0, .v = 0, .b = 0, .recompute = -1};
    ptdp_plan_candidate *cand;
    int count, nfit;
    CHECK_OK(ptdp_plan_search(&c, &j, 8, &pins, &cand, &count, &nfit));
    CHECK(nfit > 0 && count >= nfit);
    for (int i = 1; i < nfit; i++) CHECK(cand[i].est.iteration_s >= cand[i - 1].est.iteration_s);
    const double mem0 = cand[0].est.memory_bytes;
    free(cand);
    /* a memory limit below the best layout's need: every ranked layout fits it */
    c.memory_bytes = mem0 * 0.9;
    CHECK_OK(ptdp_plan_search(&c, &j, 8, &pins, &cand, &count, &nfit));
    int oom = 0;
    for (int i = 0; i < count; i++) {
        if (i < nfit) CHECK(cand[i].fits && cand[i].est.memory_bytes <= c.memory_bytes);
        if (i >= nfit) CHECK(!cand[i].fits && cand[i].reason[0]);
        oom += !strncmp(cand[i].reason, "does not fit", 12);
    }
    CHECK(oom > 0);
    free(cand);
    /* pins: every layout has them; t above a node is a reason */
    c = round_cluster();
    c.devices_per_node = 2;
    pins.t = 4;
    CHECK(ptdp_plan_search(&c, &j, 8, &pins, &cand, &count, &nfit) == PTDP_ECONFIG);
    CHECK(strstr(ptdp_last_error(), "exceeds a node") != NULL);
    c = round_cluster();
    pins = (ptdp_plan_pins){.t = 2, .p = 2, .v = 0, .b = 0, .recompute = 1};
    CHECK_OK(ptdp_plan_search(&c, &j, 8, &pins, &cand, &count, &nfit));
    for (int i = 0; i < nfit; i++)
        CHECK(cand[i].layout.t == 2 && cand[i].layout.p == 2 && cand[i].layout.d == 2 &&
              cand[i].layout.recompute == 1);
    free(cand);
    /* bad input: heads that do not divide the hidden size, a device count no
     * layout can use (7: not t (heads 8), not p (8 layers), not d (B 64)) */
    pins = (ptdp_plan_pins){.t = 0, .p = 0, .v = 0, .b = 0, .recompute = -1};
    j.job.model.heads = 6;
    CHECK(ptdp_plan_search(&c, &j, 8, &pins, &cand, &count, &nfit) == PTDP_EINVAL);
    CHECK(strstr(ptdp_last_error(), "--num-attention-heads") != NULL);
    j = small_job();
    CHECK(ptdp_plan_search(&c, &j, 7, &pins, &cand, &count, &nfit) == PTDP_ECONFIG);
    CHECK(strstr(ptdp_last_error(), "no layout of 7 devices") != NULL);
}

/* Ranks sharing a node's cores (local): k ranks on C cores run at 1/min(k,
 * C) of the node; with k > C the pipeline lasts at least the busy time of
 * every rank over C. */
static void test_shared_node(void) {
    ptdp_cluster c = round_cluster();
    c.shared_node = 2;
    ptdp_plan_job j = small_job();
    j.job.dtype = PTDP_DTYPE_FP32;
    ptdp_plan_layout one = {.t = 1, .p = 1, .d = 1, .v = 1, .b = 8, .recompute = 0};
    ptdp_plan_estimate e1, e4;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &one, &e1));
    /* four data-parallel replicas on two cores: each does a quarter of the
     * work at half the node's rate, two at a time: the same compute time */
    ptdp_plan_layout four = {.t = 1, .p = 1, .d = 4, .v = 1, .b = 2, .recompute = 0};
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &four, &e4));
    CHECK_CLOSE(e4.pipeline_s, e1.pipeline_s, 0.02, 0);
    CHECK_CLOSE(e4.layer_gemm_fwd_s, e1.layer_gemm_fwd_s / 2, 0.05, 0); /* b/4 at rate/2 */
    c.shared_node = 0; /* own devices: four times faster */
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &four, &e4));
    CHECK(e4.pipeline_s < 0.3 * e1.pipeline_s);
}

static void test_cluster_file(void) {
    ptdp_cluster c;
    const char *good =
        "{\"name\": \"x\", \"peak_flops\": {\"fp32\": 1, \"fp16\": 2, \"bf16\": 2},"
        " \"memory_bytes\": 1e9, \"devices_per_node\": 4, \"shared_node\": 0, \"mem_bandwidth\": 1e9,"
        " \"intra_bandwidth\": 1e9, \"intra_latency\": 0, \"inter_bandwidth\": 1e8,"
        " \"inter_latency\": 1e-5, \"gemm_efficiency\": 0.5, \"gemm_half_dim\": 8,"
        " \"elementwise_efficiency\": 0.5, \"overhead_s\": 0}";
    CHECK_OK(ptdp_cluster_parse(good, "good", &c));
    CHECK(c.devices_per_node == 4 && c.peak_flops[PTDP_PREC_FP16] == 2);
    /* every key is required; the message names it */
    char bad[2048];
    snprintf(bad, sizeof bad, "%s", good);
    char *k = strstr(bad, " \"mem_bandwidth\": 1e9,");
    memmove(k, k + strlen(" \"mem_bandwidth\": 1e9,"),
            strlen(k + strlen(" \"mem_bandwidth\": 1e9,")) + 1);
    CHECK(ptdp_cluster_parse(bad, "bad.json", &c) == PTDP_EFORMAT);
    CHECK(strstr(ptdp_last_error(), "mem_bandwidth") && strstr(ptdp_last_error(), "bad.json"));
    CHECK(ptdp_cluster_parse("{\"name\": \"x\"}", "bad.json", &c) == PTDP_EFORMAT);
    CHECK(ptdp_cluster_parse("[1]", "bad.json", &c) == PTDP_EFORMAT);
    snprintf(bad, sizeof bad, "%s", good);
    bad[strlen(bad) - 1] = 0;
    strcat(bad, ", \"gemm_eficiency\": 1}");
    CHECK(ptdp_cluster_parse(bad, "bad.json", &c) == PTDP_EFORMAT);
    CHECK(strstr(ptdp_last_error(), "gemm_eficiency") != NULL);
    /* write and read back */
    CHECK_OK(ptdp_cluster_parse(good, "good", &c));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK_OK(ptdp_cluster_write(f, &c));
    fclose(f);
    ptdp_cluster c2;
    CHECK_OK(ptdp_cluster_parse(buf, "written", &c2));
    CHECK(c2.inter_latency == c.inter_latency && c2.devices_per_node == 4);
    CHECK(c2.elementwise_efficiency[PTDP_PREC_BF16] == 0.5 && c2.attention_flops[0] == 0);
    free(buf);
    /* elementwise_efficiency per precision and the optional attention_flops
     * (what --calibrate writes): read, written and read back */
    snprintf(bad, sizeof bad, "%s",
             "{\"name\": \"x\", \"peak_flops\": {\"fp32\": 1, \"fp16\": 2, \"bf16\": 2},"
             " \"memory_bytes\": 1e9, \"devices_per_node\": 4, \"shared_node\": 2,"
             " \"mem_bandwidth\": 1e9, \"intra_bandwidth\": 1e9, \"intra_latency\": 0,"
             " \"inter_bandwidth\": 1e8, \"inter_latency\": 1e-5, \"gemm_efficiency\": 0.5,"
             " \"gemm_half_dim\": 8, \"overhead_s\": 0,"
             " \"elementwise_efficiency\": {\"fp32\": 0.8, \"fp16\": 0.6, \"bf16\": 0.7},"
             " \"attention_flops\": {\"fp32\": 2e11, \"fp16\": 1.8e11, \"bf16\": 2.7e11}}");
    CHECK_OK(ptdp_cluster_parse(bad, "per-precision", &c));
    CHECK(c.elementwise_efficiency[PTDP_PREC_FP32] == 0.8 &&
          c.elementwise_efficiency[PTDP_PREC_FP16] == 0.6 &&
          c.elementwise_efficiency[PTDP_PREC_BF16] == 0.7);
    CHECK(c.attention_flops[PTDP_PREC_BF16] == 2.7e11);
    f = open_memstream(&buf, &len);
    CHECK_OK(ptdp_cluster_write(f, &c));
    fclose(f);
    CHECK_OK(ptdp_cluster_parse(buf, "written", &c2));
    CHECK(!memcmp(c2.elementwise_efficiency, c.elementwise_efficiency,
                  sizeof c.elementwise_efficiency) &&
          !memcmp(c2.attention_flops, c.attention_flops, sizeof c.attention_flops));
    free(buf);
    /* a shared node (what --calibrate writes): one node holds every rank
     * (devices_per_node 0), whose memory_bytes is the node's, 1/k for each of
     * the job's k ranks; "machine" is read and written back; a node of
     * devices (GPUs) keeps its per-device memory and needs a device count */
    char shared[2048];
    snprintf(shared, sizeof shared, "%s",
             "{\"name\": \"x\", \"machine\": \"Some CPU, 2 cores, 24 GiB\","
             " \"peak_flops\": {\"fp32\": 1, \"fp16\": 2, \"bf16\": 2},"
             " \"memory_bytes\": 24e9, \"devices_per_node\": 0, \"shared_node\": 2,"
             " \"mem_bandwidth\": 1e9, \"intra_bandwidth\": 1e9, \"intra_latency\": 0,"
             " \"inter_bandwidth\": 1e9, \"inter_latency\": 0, \"gemm_efficiency\": 1,"
             " \"gemm_half_dim\": 8, \"overhead_s\": 0, \"elementwise_efficiency\": 1}");
    CHECK_OK(ptdp_cluster_parse(shared, "shared", &c));
    CHECK(!strcmp(c.machine, "Some CPU, 2 cores, 24 GiB"));
    CHECK(ptdp_plan_ranks_per_node(&c, 6) == 6 && ptdp_plan_device_memory(&c, 2) == 12e9 &&
          ptdp_plan_device_memory(&c, 8) == 3e9);
    f = open_memstream(&buf, &len);
    CHECK_OK(ptdp_cluster_write(f, &c));
    fclose(f);
    CHECK_OK(ptdp_cluster_parse(buf, "written", &c2));
    CHECK(!strcmp(c2.machine, c.machine) && c2.devices_per_node == 0 && c2.memory_bytes == 24e9);
    free(buf);
    c.devices_per_node = 4; /* 8 ranks: 4 per node, each node's memory over its 4 */
    CHECK(ptdp_plan_ranks_per_node(&c, 8) == 4 && ptdp_plan_device_memory(&c, 8) == 6e9);
    c.shared_node = 0;
    CHECK(ptdp_plan_device_memory(&c, 8) == 24e9);
    char *zero = strstr(shared, "\"shared_node\": 2");
    zero[strlen("\"shared_node\": ")] = '0';
    CHECK(ptdp_cluster_parse(shared, "gpus", &c) == PTDP_EFORMAT);
    CHECK(strstr(ptdp_last_error(), "devices_per_node") != NULL);
    /* a precision missing, an efficiency above 1, a rate that is not an object */
    const char *bads[][2] = {
        {"\"bf16\": 0.7}", "\"bf17\": 0.7}"},
        {"\"fp32\": 0.8", "\"fp32\": 1.8"},
        {"\"attention_flops\": {\"fp32\": 2e11, \"fp16\": 1.8e11, \"bf16\": 2.7e11}",
         "\"attention_flops\": 2e11"},
    };
    const char *names[] = {"elementwise_efficiency.bf16", "elementwise_efficiency.fp32",
                           "attention_flops"};
    for (int i = 0; i < 3; i++) {
        char b2[2048];
        snprintf(b2, sizeof b2, "%s", bad);
        char *at = strstr(b2, bads[i][0]);
        CHECK(at != NULL);
        if (!at) continue;
        char tail[2048];
        snprintf(tail, sizeof tail, "%s", at + strlen(bads[i][0]));
        snprintf(at, sizeof b2 - (size_t)(at - b2), "%s%s", bads[i][1], tail);
        CHECK(ptdp_cluster_parse(b2, "bad.json", &c) == PTDP_EFORMAT);
        CHECK(strstr(ptdp_last_error(), names[i]) != NULL);
    }
}

/* With attention_flops, core attention is ptdp's flash attention: its
 * forward is 4 b (a/t) s^2 (h/a) x the causal tiles' share, at that rate,
 * and the scores leave the memory-bound bytes. */
static void test_flash_attention_term(void) {
    ptdp_cluster c = round_cluster();
    ptdp_plan_job j = small_job(); /* s = 128: one tile, nothing skipped */
    j.job.dtype = PTDP_DTYPE_FP32;
    ptdp_plan_layout L = {.t = 2, .p = 1, .d = 1, .v = 1, .b = 2, .recompute = 0};
    ptdp_plan_estimate gemm, flash;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &gemm));
    /* the paper's GEMMs at 1e12: 2 x 2 b (a/t) s^2 (h/a) */
    const double al = 4, hd = 32, b = 2, s = 128;
    CHECK_CLOSE(gemm.layer_attention_fwd_s, 4 * b * al * s * s * hd / 1e12, 1e-9, 0);
    for (int p = 0; p < PTDP_PREC_COUNT; p++) c.attention_flops[p] = 2.5e11;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &flash));
    CHECK_CLOSE(flash.layer_attention_fwd_s, 4 * b * al * s * s * hd / 2.5e11, 1e-9, 0);
    /* the memory-bound bytes lose w 4 S + S (S = b (a/t) s^2) */
    const double S = b * al * s * s;
    CHECK_CLOSE(gemm.layer_elementwise_fwd_s - flash.layer_elementwise_fwd_s,
                (4 * 4 * S + S) / 1e11, 1e-9, 0);
    /* s = 512: 4 tiles a side, 10 of 16 computed */
    j.job.model.seq_length = 512;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &flash));
    CHECK_CLOSE(flash.layer_attention_fwd_s, 4 * b * al * 512.0 * 512 * hd * 10 / 16 / 2.5e11, 1e-9,
                0);
}

/* The paper's Table 1: heads, hidden, layers, t, p, GPUs, batch, TFLOP/s,
 * and the micro-batch size and model chunks per rank the authors launched
 * each row with (Megatron-LM's examples/sc21/run_table_1.sh: MBS, and v =
 * layers / p / --num-layers-per-virtual-pipeline-stage, 1 without it). */
static const struct {
    double params;
    int a, h, l, t, p, n, B;
    double tflops;
    int named;   /* one of the three rows the issue names (within 5%) */
    int b, v;    /* the authors' micro-batch size and chunks per rank */
    int pick_ok; /* the planner's own pick is the paper's (t, p) or within 3%
                    of it (0: the four rows docs/planner.md says it misses) */
} table1[] = {
    {1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 1, 16, 1, 1},
    {3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 0, 16, 1, 1},
    {7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 0, 16, 1, 0},
    {18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 0, 8, 1, 0},
    {39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 0, 4, 1, 0},
    {76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 0, 2, 3, 1},
    {145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 1, 2, 2, 0},
    {310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 0, 1, 2, 1},
    {529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 0, 1, 3, 1},
    {1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 1, 1, 1, 1},
};

/* A Table 1 row as the paper ran it: fp16, full recomputation, interleaved
 * schedule with scatter/gather, s 2048, V 51,200, the data-parallel
 * reduction after the backward. */
static ptdp_plan_job table1_job(size_t i) {
    ptdp_plan_job j = ptdp_plan_job_default_params();
    j.job.model.num_layers = table1[i].l;
    j.job.model.hidden = table1[i].h;
    j.job.model.heads = table1[i].a;
    j.job.model.seq_length = 2048;
    j.job.model.vocab = 51200;
    j.job.global_batch = table1[i].B;
    j.job.dtype = PTDP_DTYPE_FP16;
    j.job.overlap_grad_reduce = 0;
    return j;
}

/* Every row predicted with t and p pinned to the paper's and v and b either
 * searched (authors = 0) or pinned to the authors' (authors = 1): the three
 * named rows within 5%, every row within 10%, the mean absolute error at
 * most 5%. Every row must fit. */
static void table1_fit(const ptdp_cluster *c, int authors) {
    double sum = 0, worst = 0;
    const size_t rows = sizeof table1 / sizeof table1[0];
    for (size_t i = 0; i < rows; i++) {
        ptdp_plan_job j = table1_job(i);
        ptdp_plan_pins pins = {.t = table1[i].t,
                               .p = table1[i].p,
                               .v = authors ? table1[i].v : 0,
                               .b = authors ? table1[i].b : 0,
                               .recompute = 1};
        ptdp_plan_candidate *cand;
        int count, nfit;
        CHECK_OK(ptdp_plan_search(c, &j, table1[i].n, &pins, &cand, &count, &nfit));
        CHECK(nfit > 0);
        if (nfit == 0) {
            free(cand);
            continue;
        }
        if (authors) CHECK(cand[0].layout.v == table1[i].v && cand[0].layout.b == table1[i].b);
        const double got = cand[0].est.tflops_per_device, err = got / table1[i].tflops - 1;
        printf("%7.1fB t=%d p=%d v=%d b=%d (%s): predicted %.1f, paper %.0f TFLOP/s (%+.1f%%)\n",
               table1[i].params, table1[i].t, table1[i].p, (int)cand[0].layout.v,
               (int)cand[0].layout.b, authors ? "the authors'" : "searched", got, table1[i].tflops,
               100 * err);
        if (table1[i].named) CHECK_CLOSE(got, table1[i].tflops, 0.05, 0);
        CHECK_CLOSE(got, table1[i].tflops, 0.10, 0);
        sum += fabs(err);
        worst = fabs(err) > worst ? fabs(err) : worst;
        free(cand);
    }
    const double mae = sum / rows;
    printf("mean absolute error %.2f%%, worst %.2f%%\n", 100 * mae, 100 * worst);
    CHECK(mae <= 0.05);
}

/* The planner's own pick for every row (t, p, v, b searched, recomputation
 * on) against the best layout with the paper's (t, p): the pick is the
 * paper's (t, p) or predicted within 3% of it on the six rows where
 * docs/planner.md says so; the other four are printed, not checked (the
 * model leans to pipelining there, which the docs explain). */
static void table1_picks(const ptdp_cluster *c) {
    int met = 0;
    for (size_t i = 0; i < sizeof table1 / sizeof table1[0]; i++) {
        const ptdp_plan_job j = table1_job(i);
        const ptdp_plan_pins paper = {.t = table1[i].t, .p = table1[i].p, .recompute = 1},
                             open = {.recompute = 1};
        ptdp_plan_candidate *best, *pinned;
        int count, nbest, npinned;
        CHECK_OK(ptdp_plan_search(c, &j, table1[i].n, &open, &best, &count, &nbest));
        CHECK_OK(ptdp_plan_search(c, &j, table1[i].n, &paper, &pinned, &count, &npinned));
        CHECK(nbest > 0 && npinned > 0);
        if (nbest > 0 && npinned > 0) {
            const ptdp_plan_layout *L = &best[0].layout;
            const int same = L->t == table1[i].t && L->p == table1[i].p;
            const double gain = pinned[0].est.iteration_s / best[0].est.iteration_s - 1;
            const int ok = same || gain <= 0.03;
            printf("%7.1fB pick t=%d p=%d v=%d b=%d, %.1f%% ahead of the paper's (%d, %d)%s\n",
                   table1[i].params, (int)L->t, (int)L->p, (int)L->v, (int)L->b, 100 * gain,
                   table1[i].t, table1[i].p, ok ? "" : " (goal not met)");
            CHECK(gain >= 0); /* the open search includes the paper's (t, p) */
            if (table1[i].pick_ok) CHECK(ok);
            met += ok;
        }
        free(best);
        free(pinned);
    }
    printf("the pick is the paper's (t, p) or within 3%% of it on %d of 10 rows\n", met);
}

static void test_table1(void) {
    ptdp_cluster c;
    CHECK_OK(ptdp_cluster_load(PTDP_SOURCE_DIR "/clusters/a100-superpod.json", &c));
    table1_fit(&c, 0);
    table1_fit(&c, 1);
    table1_picks(&c);
}

/* Uneven stages: with a vocabulary large against the layers (config (c)'s
 * shape) the loss head makes the last stage the slowest, so for p = 2 the
 * search ranks a split with fewer layers on the last rank above the even
 * one; a pinned split is the only one searched; the estimate's memory is the
 * heavier rank's; an invalid split is a reason, not a crash. */
static void test_uneven(void) {
    ptdp_cluster c = round_cluster();
    ptdp_plan_job j = small_job();
    j.job.model.num_layers = 6, j.job.model.hidden = 384, j.job.model.heads = 6,
    j.job.model.seq_length = 256, j.job.model.vocab = 50304, j.job.global_batch = 16;
    j.job.dtype = PTDP_DTYPE_FP32;
    ptdp_plan_pins pins = {.t = 1, .p = 2, .v = 1, .b = 4, .recompute = 0};
    ptdp_plan_candidate *cand;
    int count, nfit;
    CHECK_OK(ptdp_plan_search(&c, &j, 2, &pins, &cand, &count, &nfit));
    int even = -1;
    for (int i = 0; i < nfit; i++)
        if (ptdp_stage_layout_is_even(&cand[i].layout.stages)) even = i;
    CHECK(nfit >= 2 && even > 0); /* an uneven split ranks first */
    int64_t b, e;
    ptdp_stage_layout_range(&cand[0].layout.stages, 6, 2, 1, 1, &b, &e);
    CHECK(e - b < 3); /* the last rank holds fewer layers */
    if (even > 0) CHECK(cand[0].est.iteration_s < cand[even].est.iteration_s);
    free(cand);
    /* the even split only */
    j.uneven_splits = 0;
    CHECK_OK(ptdp_plan_search(&c, &j, 2, &pins, &cand, &count, &nfit));
    CHECK(nfit == 1 && ptdp_stage_layout_is_even(&cand[0].layout.stages));
    free(cand);
    /* pinned: all six layers on the first rank, the loss head alone */
    ptdp_stage_layout L;
    CHECK_OK(ptdp_stage_layout_parse("Etttttt|L", &L));
    pins.stages = &L;
    CHECK_OK(ptdp_plan_search(&c, &j, 2, &pins, &cand, &count, &nfit));
    CHECK(nfit == 1 && cand[0].layout.stages.nstages == 2);
    ptdp_plan_estimate one;
    ptdp_plan_layout lay = cand[0].layout;
    free(cand);
    lay.stages = (ptdp_stage_layout){.first = 0};
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &lay, &one));
    /* rank 0 with six layers' weights outweighs the even split's heavier rank */
    ptdp_plan_estimate six;
    lay.stages = L;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &lay, &six));
    CHECK(six.memory[PTDP_PMEM_ACTIVATIONS] > one.memory[PTDP_PMEM_ACTIVATIONS]);
    L.stage_layers[0] = 5; /* 5 t for 6 layers */
    lay.stages = L;
    CHECK(ptdp_plan_estimate_layout(&c, &j, &lay, &one) == PTDP_ECONFIG);
}

/* The zero-bubble schedules in the model: zb-h1 keeps per stashed layer
 * N (h + ffn/t + 3h/t) w more bytes (its stash count on rank 0 is 1F1B's, so
 * the activations grow by exactly (full + keep) / full) and hides W in the
 * bubble (a shorter pipeline than 1F1B's); zb-v needs v = 2, counts no
 * tied-embedding all-reduce (rank 0 holds both copies); full recomputation
 * is refused with both. */
static void test_zero_bubble(void) {
    const ptdp_cluster c = round_cluster();
    ptdp_plan_job j = small_job(); /* l 8, h 256, a 8, s 128, V 1024, B 64, fp16 */
    ptdp_plan_layout L = {.t = 1, .p = 4, .d = 1, .v = 1, .b = 1, .recompute = 0};
    ptdp_plan_estimate o, z;
    j.job.schedule = PTDP_SCHED_1F1B;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &o));
    j.job.schedule = PTDP_SCHED_ZBH1;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &z));
    CHECK(z.schedule == PTDP_SCHED_ZBH1);
    const double N = 128, h = 256, full = N * h * 34 + N * h * 5 * 8 * 128 / h,
                 keep = N * (h + (4 * h + 3 * h)) * 2;
    CHECK_CLOSE(z.memory[PTDP_PMEM_ACTIVATIONS],
                o.memory[PTDP_PMEM_ACTIVATIONS] * (full + keep) / full, 1e-12, 0);
    CHECK(z.pipeline_s < o.pipeline_s && z.bubble_fraction < o.bubble_fraction);
    L.recompute = 1;
    CHECK(ptdp_plan_estimate_layout(&c, &j, &L, &z) == PTDP_ECONFIG &&
          strstr(ptdp_last_error(), "no full recomputation"));
    j.job.recompute = PTDP_RECOMPUTE_SELECTIVE;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &z));
    j.job.recompute = PTDP_RECOMPUTE_UNIFORM;
    L.recompute = 0;
    /* zb-v: v = 2 only */
    j.job.schedule = PTDP_SCHED_ZBV;
    CHECK(ptdp_plan_estimate_layout(&c, &j, &L, &z) == PTDP_ECONFIG &&
          strstr(ptdp_last_error(), "zb-v needs p >= 2 and v = 2"));
    L = (ptdp_plan_layout){.t = 1, .p = 2, .d = 1, .v = 2, .b = 1, .recompute = 0};
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &z));
    CHECK(z.schedule == PTDP_SCHED_ZBV && z.comm_s[PTDP_COMM_EMBEDDING] == 0);
    CHECK(z.bubble_fraction >= 0 && z.bubble_fraction < 0.5);
    j.job.schedule = PTDP_SCHED_INTERLEAVED;
    CHECK_OK(ptdp_plan_estimate_layout(&c, &j, &L, &o));
    CHECK(o.comm_s[PTDP_COMM_EMBEDDING] > 0);
}

int main(void) {
    test_uneven();
    test_zero_bubble();
    test_bubble();
    test_volumes();
    test_memory();
    test_search();
    test_shared_node();
    test_cluster_file();
    test_flash_attention_term();
    test_table1();
    return test_done("test_plan");
}
