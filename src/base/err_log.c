/* err_log.c - error codes, per-thread error messages, always-on asserts and
 * rank-tagged logging. Ranks print to stdout/stderr and the launcher collects
 * them; a program embedding ptdp may take the lines through a sink or keep
 * only errors. Deliberately no log files. */
#define _POSIX_C_SOURCE 200809L
#include "base.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* room for a report of every bad flag of a command line (cli/) */
static _Thread_local char g_errmsg[4096];
/* Rank identity is process-wide, written once at start-up before any thread
 * runs; the abort hook likewise. */
static int g_rank = -1, g_dp, g_pp, g_tp;
static ptdp_abort_fn g_abort_hook;
/* The embedding program's choices (ptdp_log_set_sink / _level), set before
 * ptdp's threads start. */
static ptdp_log_fn g_sink;
static void *g_sink_user;
static int g_level = PTDP_LOG_INFO;
/* What the iterating thread is doing; another thread (comm's watchdog) reads
 * it only once the iterating thread has been blocked for seconds, so plain
 * stores are enough (a torn read could only garble a message). */
static volatile int64_t g_iteration;
static const char *volatile g_phase = "";

const char *ptdp_strerror(int code) {
    switch (code) {
#define PTDP__ERR_CASE(name, val, msg) \
    case val:                          \
        return msg;
        PTDP_ERRORS(PTDP__ERR_CASE)
#undef PTDP__ERR_CASE
    }
    return "unknown error";
}

int ptdp_errorf(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_errmsg, sizeof g_errmsg, fmt, ap);
    va_end(ap);
    return code;
}

const char *ptdp_last_error(void) { return g_errmsg; }

void ptdp_set_abort_hook(ptdp_abort_fn fn) { g_abort_hook = fn; }

static void prefix(FILE *f) {
    if (g_rank >= 0) fprintf(f, "[%d,%d,%d] ", g_dp, g_pp, g_tp);
}

/* Formats one whole line and hands it to the sink, or to the kernel in one
 * write, so lines from several ranks sharing a terminal or pipe never
 * interleave. */
static void emit(ptdp_log_level level, int with_prefix, const char *lead, const char *fmt,
                 va_list ap) {
    if ((int)level > g_level) return;
    char buf[4096];
    int n = 0;
    if (with_prefix && g_rank >= 0) n = snprintf(buf, sizeof buf, "[%d,%d,%d] ", g_dp, g_pp, g_tp);
    n += snprintf(buf + n, sizeof buf - (size_t)n, "%s", lead);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    n = m < 0 ? n : (n + m < (int)sizeof buf - 1 ? n + m : (int)sizeof buf - 2);
    if (g_sink) {
        buf[n] = 0;
        g_sink(g_sink_user, level, buf);
        return;
    }
    fflush(stdout);
    buf[n++] = '\n';
    ssize_t w = write(level == PTDP_LOG_ERROR ? 2 : 1, buf, (size_t)n);
    (void)w;
}

void ptdp_log_set_sink(ptdp_log_fn fn, void *user) {
    g_sink = fn;
    g_sink_user = user;
}

void ptdp_log_set_level(int level) { g_level = level; }

_Noreturn void ptdp__assert_fail(const char *expr, const char *file, int line, const char *msg) {
    fflush(stdout);
    prefix(stderr);
    fprintf(stderr, "ptdp: internal error on rank %d at %s:%d: assertion `%s' failed%s%s\n",
            g_rank < 0 ? 0 : g_rank, file, line, expr, msg ? ": " : "", msg ? msg : "");
    fflush(stderr);
    if (g_abort_hook) g_abort_hook();
    abort();
}

void ptdp_log_set_rank(int global_rank, int dp, int pp, int tp) {
    g_rank = global_rank;
    g_dp = dp;
    g_pp = pp;
    g_tp = tp;
}

int ptdp_log_rank(void) { return g_rank < 0 ? 0 : g_rank; }

void ptdp_log(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emit(PTDP_LOG_INFO, 1, "", fmt, ap);
    va_end(ap);
}

void ptdp_log0(const char *fmt, ...) {
    if (g_rank > 0) return;
    va_list ap;
    va_start(ap, fmt);
    emit(PTDP_LOG_INFO, 0, "", fmt, ap);
    va_end(ap);
}

void ptdp_log_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emit(PTDP_LOG_ERROR, 1, "ptdp: error: ", fmt, ap);
    va_end(ap);
}

double ptdp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *ptdp_fmt_bytes(double bytes, char *buf) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        u++;
    }
    snprintf(buf, 32, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
    return buf;
}

/* Grows the buffer by doubling so pipes (unknown size) work too. */
int ptdp_read_file(const char *path, const char *what, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return ptdp_errorf(PTDP_EIO, "cannot open %s '%s': %s", what, path, strerror(errno));
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) free(buf);
        buf = nb;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return ptdp_errorf(PTDP_ENOMEM, "out of memory reading '%s'", path);
    if (err) {
        free(buf);
        return ptdp_errorf(PTDP_EIO, "error reading %s '%s'", what, path);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return PTDP_OK;
}

/* One entry of PTDP_FAULT: NAME[@RANK][:ITER]. Matches when the name is
 * equal and the rank (if given) is this process's global rank; *iter
 * receives ITER or -1. */
static int fault_entry(const char *e, size_t len, const char *name, int64_t *iter) {
    char buf[128];
    if (len >= sizeof buf) return 0;
    memcpy(buf, e, len);
    buf[len] = 0;
    *iter = -1;
    char *colon = strchr(buf, ':');
    if (colon) {
        *colon = 0;
        *iter = strtoll(colon + 1, NULL, 10);
    }
    char *at = strchr(buf, '@');
    if (at) {
        *at = 0;
        if (atoi(at + 1) != ptdp_log_rank()) return 0;
    }
    return strcmp(buf, name) == 0;
}

static int fault_match(const char *name, int check_iter, int64_t iteration) {
    const char *spec = getenv("PTDP_FAULT");
    if (!spec || !*spec) return 0;
    for (const char *e = spec; *e;) {
        size_t len = strcspn(e, ",");
        int64_t it;
        if (fault_entry(e, len, name, &it) && (!check_iter || it < 0 || it == iteration)) return 1;
        e += len;
        if (*e == ',') e++;
    }
    return 0;
}

int ptdp_fault(const char *name) { return fault_match(name, 0, 0); }
int ptdp_fault_at(const char *name, int64_t iteration) { return fault_match(name, 1, iteration); }

void ptdp_activity_set(int64_t iteration, const char *phase) {
    g_iteration = iteration;
    g_phase = phase;
}
void ptdp_activity_phase(const char *phase) { g_phase = phase; }
int64_t ptdp_activity_iteration(void) { return g_iteration; }
const char *ptdp_activity_phase_name(void) { return g_phase; }

void ptdp_fault_point(const char *group, const char *what) {
    /* cached: comm.c calls this on every operation */
    static int read;
    static const char *spec;
    if (!read) {
        spec = getenv("PTDP_FAULT");
        read = 1;
    }
    if (!spec || !*spec) return;
    char name[96];
    const char *verbs[2] = {"kill", "stop"};
    for (int v = 0; v < 2; v++) {
        snprintf(name, sizeof name, "%s.%s%s%s", verbs[v], group ? group : "", group ? "-" : "",
                 what);
        if (!ptdp_fault_at(name, g_iteration)) continue;
        /* once per process: a stopped rank that the job's teardown continues must not
         * stop again at the next matching point of the same iteration */
        static int fired;
        if (fired) return;
        fired = 1;
        /* the wall-clock time lets a test measure how long the others take to exit */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ptdp_log_error("PTDP_FAULT=%s: rank %d raises %s at %s%s%s, iteration %lld (fault "
                       "injection; time %.3f)",
                       name, ptdp_log_rank(), v ? "SIGSTOP" : "SIGKILL", group ? group : "",
                       group ? " " : "", what, (long long)g_iteration,
                       (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec);
        raise(v ? SIGSTOP : SIGKILL);
    }
}
