/* cluster.c - cluster descriptions for the planner: one JSON object per
 * file (the files in clusters/), every field required, read into a ptdp_cluster and
 * written back (`ptdp plan --calibrate`). Also the planner's name tables.
 *
 * File layout (all numbers; units in the key names' docs, docs/planner.md):
 *   {"name": "a100-superpod",
 *    "peak_flops": {"fp32": 19.5e12, "fp16": 312e12, "bf16": 312e12},
 *    "memory_bytes": 80e9, "devices_per_node": 8, "mem_bandwidth": 2.0e12,
 *    "intra_bandwidth": 2.3e11, "intra_latency": 1e-5,
 *    "inter_bandwidth": 2.5e10, "inter_latency": 1e-5,
 *    "gemm_efficiency": 0.8, "gemm_half_dim": 64, "elementwise_efficiency": 0.7,
 *    "overhead_s": 0.0, "shared_node": 0}
 * "elementwise_efficiency" may also be an object per precision, as
 * peak_flops is; "attention_flops" (such an object) is optional: ptdp's
 * flash attention measured by `--calibrate`; so is "machine", a string
 * naming the machine `--calibrate` measured. With "shared_node" > 0 the
 * devices are processes sharing one node's cores and memory: peak_flops,
 * mem_bandwidth and memory_bytes are the node's, and "devices_per_node" may
 * be 0 (one node holds the whole job). Unknown keys are refused (a misspelt key would
 * otherwise silently keep a default). Deliberately not here: heterogeneous devices, topologies
 * other than nodes of equal size joined by one fabric. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

const char *ptdp_plan_precision_name(int prec) {
    static const char *names[] = {
#define PTDP__PREC_NAME(e, s, w) s,
        PTDP_PLAN_PRECISIONS(PTDP__PREC_NAME)
#undef PTDP__PREC_NAME
    };
    return prec >= 0 && prec < PTDP_PREC_COUNT ? names[prec] : "?";
}

int ptdp_plan_precision_bytes(int prec) {
    static const int bytes[] = {
#define PTDP__PREC_BYTES(e, s, w) w,
        PTDP_PLAN_PRECISIONS(PTDP__PREC_BYTES)
#undef PTDP__PREC_BYTES
    };
    PTDP_ASSERT(prec >= 0 && prec < PTDP_PREC_COUNT);
    return bytes[prec];
}

const char *ptdp_plan_comm_name(int kind) {
    static const char *names[] = {
#define PTDP__PCOMM_NAME(e, s) s,
        PTDP_PLAN_COMMS(PTDP__PCOMM_NAME)
#undef PTDP__PCOMM_NAME
    };
    return kind >= 0 && kind < PTDP_COMM_COUNT ? names[kind] : "?";
}

const char *ptdp_plan_mem_name(int kind) {
    static const char *names[] = {
#define PTDP__PMEM_NAME(e, s) s,
        PTDP_PLAN_MEMS(PTDP__PMEM_NAME)
#undef PTDP__PMEM_NAME
    };
    return kind >= 0 && kind < PTDP_PMEM_COUNT ? names[kind] : "?";
}

/* The numeric fields: key, offset, lower bound (exclusive unless zero_ok). */
typedef struct {
    const char *key;
    size_t off;
    int zero_ok;
} field;
#define FIELD(k, z) \
    { #k, offsetof(ptdp_cluster, k), z }
static const field fields[] = {
    FIELD(memory_bytes, 0),    FIELD(mem_bandwidth, 0),   FIELD(intra_bandwidth, 0),
    FIELD(intra_latency, 1),   FIELD(inter_bandwidth, 0), FIELD(inter_latency, 1),
    FIELD(gemm_efficiency, 0), FIELD(gemm_half_dim, 1),   FIELD(overhead_s, 1),
};
#undef FIELD
#define NFIELDS (int)(sizeof fields / sizeof fields[0])

static int number(const cJSON *root, const char *key, const char *origin, double *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it) return ptdp_errorf(PTDP_EFORMAT, "cluster %s: missing key \"%s\"", origin, key);
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
        return ptdp_errorf(PTDP_EFORMAT, "cluster %s: key \"%s\" must be a number", origin, key);
    *out = it->valuedouble;
    return PTDP_OK;
}

/* key: an object {fp32, fp16, bf16} of positive numbers into out (each at
 * most 1 with frac), or with scalar_ok one number for all three. */
static int per_precision(const cJSON *root, const char *key, const char *origin, int scalar_ok,
                         int frac, double *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    const char *what =
        scalar_ok ? "a number or an object: fp32, fp16, bf16" : "an object: fp32, fp16, bf16";
    if (!it)
        return ptdp_errorf(PTDP_EFORMAT, "cluster %s: missing key \"%s\" (%s)", origin, key, what);
    const int scalar = scalar_ok && cJSON_IsNumber(it);
    if (!scalar && !cJSON_IsObject(it))
        return ptdp_errorf(PTDP_EFORMAT, "cluster %s: key \"%s\" must be %s", origin, key, what);
    for (int p = 0; p < PTDP_PREC_COUNT; p++) {
        const char *prec = ptdp_plan_precision_name(p);
        const cJSON *v = scalar ? it : cJSON_GetObjectItemCaseSensitive(it, prec);
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble) ||
            (frac && v->valuedouble > 1))
            return ptdp_errorf(PTDP_EFORMAT, "cluster %s: missing or bad \"%s%s%s\" (%s)", origin,
                               key, scalar ? "" : ".", scalar ? "" : prec,
                               frac ? "a fraction of peak, above 0 and at most 1" : "positive");
        out[p] = v->valuedouble;
    }
    return PTDP_OK;
}

int ptdp_cluster_parse(const char *json, const char *origin, ptdp_cluster *c) {
    memset(c, 0, sizeof *c);
    char what[300];
    snprintf(what, sizeof what, "cluster %s", origin);
    if (ptdp_json_check(json, strlen(json), PTDP_JSON_MAX_DEPTH, what)) return PTDP_EFORMAT;
    cJSON *root = cJSON_Parse(json);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ptdp_errorf(PTDP_EFORMAT, "cluster %s: not a JSON object", origin);
    }
    int rc = PTDP_OK;
    for (cJSON *it = root->child; it && rc == PTDP_OK; it = it->next) {
        int known = !strcmp(it->string, "name") || !strcmp(it->string, "peak_flops") ||
                    !strcmp(it->string, "devices_per_node") || !strcmp(it->string, "shared_node") ||
                    !strcmp(it->string, "description") ||
                    !strcmp(it->string, "elementwise_efficiency") ||
                    !strcmp(it->string, "attention_flops") || !strcmp(it->string, "machine");
        for (int i = 0; i < NFIELDS; i++) known |= !strcmp(it->string, fields[i].key);
        if (!known)
            rc = ptdp_errorf(PTDP_EFORMAT, "cluster %s: unknown key \"%s\"", origin, it->string);
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (rc == PTDP_OK && !cJSON_IsString(name))
        rc = ptdp_errorf(PTDP_EFORMAT, "cluster %s: missing key \"name\" (a string)", origin);
    if (rc == PTDP_OK) snprintf(c->name, sizeof c->name, "%s", name->valuestring);
    const cJSON *peak = cJSON_GetObjectItemCaseSensitive(root, "peak_flops");
    if (rc == PTDP_OK && !cJSON_IsObject(peak))
        rc = ptdp_errorf(PTDP_EFORMAT,
                         "cluster %s: missing key \"peak_flops\" (an object: fp32, fp16, bf16)",
                         origin);
    for (int p = 0; p < PTDP_PREC_COUNT && rc == PTDP_OK; p++) {
        char key[64];
        snprintf(key, sizeof key, "peak_flops.%s", ptdp_plan_precision_name(p));
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(peak, ptdp_plan_precision_name(p));
        if (!it || !cJSON_IsNumber(it) || !(it->valuedouble > 0))
            rc = ptdp_errorf(PTDP_EFORMAT, "cluster %s: missing or non-positive key \"%s\"", origin,
                             key);
        else
            c->peak_flops[p] = it->valuedouble;
    }
    double dpn = 0;
    if (rc == PTDP_OK) rc = number(root, "devices_per_node", origin, &dpn);
    double shared = 0;
    if (rc == PTDP_OK) rc = number(root, "shared_node", origin, &shared);
    if (rc == PTDP_OK && !(shared >= 0 && shared == floor(shared) && shared <= 1e6))
        rc = ptdp_errorf(PTDP_EFORMAT,
                         "cluster %s: \"shared_node\" must be 0 (devices) or the cores the "
                         "ranks of a node share",
                         origin);
    c->shared_node = (int)shared;
    if (rc == PTDP_OK && !(dpn >= (shared > 0 ? 0 : 1) && dpn == floor(dpn) && dpn <= 1e6))
        rc = ptdp_errorf(PTDP_EFORMAT,
                         "cluster %s: \"devices_per_node\" must be a positive integer (or 0 "
                         "with \"shared_node\": one node holds every rank of the job)",
                         origin);
    c->devices_per_node = (int)dpn;
    const cJSON *machine = cJSON_GetObjectItemCaseSensitive(root, "machine");
    if (rc == PTDP_OK && machine && !cJSON_IsString(machine))
        rc = ptdp_errorf(PTDP_EFORMAT, "cluster %s: \"machine\" must be a string", origin);
    if (rc == PTDP_OK && machine)
        snprintf(c->machine, sizeof c->machine, "%s", machine->valuestring);
    for (int i = 0; i < NFIELDS && rc == PTDP_OK; i++) {
        double *dst = (double *)((char *)c + fields[i].off);
        rc = number(root, fields[i].key, origin, dst);
        if (rc == PTDP_OK && !(fields[i].zero_ok ? *dst >= 0 : *dst > 0))
            rc = ptdp_errorf(PTDP_EFORMAT, "cluster %s: \"%s\" must be %s (got %g)", origin,
                             fields[i].key, fields[i].zero_ok ? "non-negative" : "positive", *dst);
    }
    if (rc == PTDP_OK && c->gemm_efficiency > 1)
        rc = ptdp_errorf(PTDP_EFORMAT,
                         "cluster %s: \"gemm_efficiency\" is a fraction of peak (at most 1)",
                         origin);
    if (rc == PTDP_OK)
        rc = per_precision(root, "elementwise_efficiency", origin, 1, 1, c->elementwise_efficiency);
    if (rc == PTDP_OK && cJSON_GetObjectItemCaseSensitive(root, "attention_flops"))
        rc = per_precision(root, "attention_flops", origin, 0, 0, c->attention_flops);
    cJSON_Delete(root);
    if (rc) memset(c, 0, sizeof *c);
    return rc;
}

int ptdp_cluster_load(const char *path, ptdp_cluster *c) {
    char *text = NULL;
    size_t len = 0;
    int rc = ptdp_read_file(path, "cluster file", &text, &len);
    if (rc) return rc;
    rc = ptdp_cluster_parse(text, path, c);
    free(text);
    return rc;
}

static void write_per_precision(FILE *f, const char *key, const double *v) {
    fprintf(f, ",\n  \"%s\": {", key);
    for (int p = 0; p < PTDP_PREC_COUNT; p++)
        fprintf(f, "%s\"%s\": %.6g", p ? ", " : "", ptdp_plan_precision_name(p), v[p]);
    fprintf(f, "}");
}

int64_t ptdp_plan_ranks_per_node(const ptdp_cluster *c, int64_t n) {
    return c->devices_per_node > 0 && c->devices_per_node < n ? c->devices_per_node : n;
}

double ptdp_plan_device_memory(const ptdp_cluster *c, int64_t n) {
    return c->shared_node > 0 ? c->memory_bytes / (double)ptdp_plan_ranks_per_node(c, n)
                              : c->memory_bytes;
}

int ptdp_cluster_write(FILE *f, const ptdp_cluster *c) {
    fprintf(f, "{\n  \"name\": \"%s\",\n", c->name);
    if (c->machine[0]) fprintf(f, "  \"machine\": \"%s\",\n", c->machine);
    fprintf(f, "  \"peak_flops\": {");
    for (int p = 0; p < PTDP_PREC_COUNT; p++)
        fprintf(f, "%s\"%s\": %.6g", p ? ", " : "", ptdp_plan_precision_name(p), c->peak_flops[p]);
    fprintf(f, "},\n  \"devices_per_node\": %d,\n  \"shared_node\": %d", c->devices_per_node,
            c->shared_node);
    for (int i = 0; i < NFIELDS; i++)
        fprintf(f, ",\n  \"%s\": %.6g", fields[i].key,
                *(const double *)((const char *)c + fields[i].off));
    const double *ew = c->elementwise_efficiency;
    int same = 1;
    for (int p = 1; p < PTDP_PREC_COUNT; p++) same &= ew[p] == ew[0];
    if (same)
        fprintf(f, ",\n  \"elementwise_efficiency\": %.6g", ew[0]);
    else
        write_per_precision(f, "elementwise_efficiency", ew);
    if (c->attention_flops[0] > 0) write_per_precision(f, "attention_flops", c->attention_flops);
    fprintf(f, "\n}\n");
    return ferror(f) ? ptdp_errorf(PTDP_EIO, "cannot write the cluster description") : PTDP_OK;
}
