/* test_log.c - what an embedding program controls of ptdp's output
 * (base.h): a sink receives every line, whole, with its level, and nothing
 * reaches stdout or stderr; the level keeps only errors, or nothing; NULL
 * restores the default, one write per line. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include <unistd.h>

#include "test.h"

typedef struct {
    int n;
    ptdp_log_level level[8];
    char line[8][128];
} captured;

static void sink(void *user, ptdp_log_level level, const char *line) {
    captured *c = user;
    if (c->n < 8) {
        c->level[c->n] = level;
        snprintf(c->line[c->n], sizeof c->line[0], "%s", line);
    }
    c->n++;
}

/* Runs the three logging calls with fds 1 and 2 sent to a file; returns the
 * bytes that reached them in buf. */
static size_t log_three(char *buf, size_t cap) {
    char path[] = "/tmp/ptdp_test_log_XXXXXX";
    int fd = mkstemp(path);
    PTDP_ASSERT(fd >= 0);
    fflush(stdout);
    int out = dup(1), err = dup(2);
    dup2(fd, 1);
    dup2(fd, 2);
    ptdp_log("info %d", 1);
    ptdp_log0("rank zero %s", "line");
    ptdp_log_error("bad %s", "flag");
    fflush(stdout);
    dup2(out, 1);
    dup2(err, 2);
    close(out);
    close(err);
    ssize_t n = pread(fd, buf, cap - 1, 0);
    close(fd);
    unlink(path);
    buf[n > 0 ? n : 0] = 0;
    return n > 0 ? (size_t)n : 0;
}

int main(void) {
    char buf[1024];
    /* default: one line each, errors prefixed */
    log_three(buf, sizeof buf);
    CHECK(strstr(buf, "info 1\n") && strstr(buf, "rank zero line\n") &&
          strstr(buf, "ptdp: error: bad flag\n"));

    captured c = {0};
    ptdp_log_set_sink(sink, &c);
    CHECK(log_three(buf, sizeof buf) == 0); /* nothing on stdout or stderr */
    CHECK(c.n == 3);
    CHECK(c.level[0] == PTDP_LOG_INFO && !strcmp(c.line[0], "info 1"));
    CHECK(c.level[1] == PTDP_LOG_INFO && !strcmp(c.line[1], "rank zero line"));
    CHECK(c.level[2] == PTDP_LOG_ERROR && !strcmp(c.line[2], "ptdp: error: bad flag"));

    /* the rank prefix is part of the line once the rank is known */
    ptdp_log_set_rank(0, 1, 2, 3);
    c.n = 0;
    ptdp_log("x");
    CHECK(c.n == 1 && !strcmp(c.line[0], "[1,2,3] x"));

    ptdp_log_set_level(PTDP_LOG_ERROR);
    c.n = 0;
    log_three(buf, sizeof buf);
    CHECK(c.n == 1 && c.level[0] == PTDP_LOG_ERROR);
    ptdp_log_set_level(PTDP_LOG_NONE);
    c.n = 0;
    log_three(buf, sizeof buf);
    CHECK(c.n == 0);

    /* back to the default */
    ptdp_log_set_sink(NULL, NULL);
    ptdp_log_set_level(PTDP_LOG_ERROR);
    log_three(buf, sizeof buf);
    CHECK(!strstr(buf, "info 1") && strstr(buf, "[1,2,3] ptdp: error: bad flag\n"));
    ptdp_log_set_level(PTDP_LOG_INFO);
    log_three(buf, sizeof buf);
    CHECK(strstr(buf, "[1,2,3] info 1\n") != NULL);
    return test_done("test_log");
}
