/* err_log.c - error codes, per-thread error messages, always-on asserts and
 * rank-tagged logging. Deliberately no log levels or files: ranks print to
 * stdout/stderr and the launcher collects them. */
#define _POSIX_C_SOURCE 200809L
#include "base.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char g_errmsg[1024];
/* Rank identity is process-wide, written once at start-up before any thread
 * runs; the abort hook likewise. */
static int g_rank = -1, g_dp, g_pp, g_tp;
static ptdp_abort_fn g_abort_hook;

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
    prefix(stdout);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    fflush(stdout);
    va_end(ap);
}

void ptdp_log0(const char *fmt, ...) {
    if (g_rank > 0) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    fflush(stdout);
    va_end(ap);
}

void ptdp_log_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    prefix(stderr);
    fputs("ptdp: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
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
