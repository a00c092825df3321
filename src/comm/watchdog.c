/* watchdog.c - Megatron's --distributed-timeout-minutes for ptdp: a thread
 * per rank that ends the job when one communication operation has been in
 * flight for longer than the timeout, with one line saying what was in
 * flight and which peer is lost.
 *
 * Why a thread: under mpirun a rank that dies is usually reported by Open
 * MPI, which then kills the job in about two seconds; but a rank that hangs
 * (stopped, stuck on a file system, a lost host) or a launcher that does not
 * tear the job down (srun without --kill-on-bad-exit, mpirun with
 * orte_abort_on_non_zero_status 0) leaves the other ranks waiting forever in
 * a collective. MPI 3 has no timeouts and Open MPI 4.1 (Debian's) has no
 * ULFM, so the only portable remedy is to watch the clock from outside the
 * blocked call and abort.
 *
 * Naming the lost rank: a point-to-point operation names its peer; a
 * collective only knows its members. At start the ranks exchange their pid
 * and a hash of their host name, so the watchdog can say which members on
 * its own host have exited or are stopped (/proc/PID/stat); members on other
 * hosts are listed. Not here: recording what is in flight (comm.c). */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"

struct ptdp__watchdog {
    ptdp_comm *comm;
    double timeout_s;
    int64_t *who; /* [world][2]: pid, host hash */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
};

static uint64_t host_hash(void) {
    char name[256] = "";
    gethostname(name, sizeof name - 1);
    return ptdp_hash_str(name);
}

/* "exited", "stopped" or NULL (running, or not on this host) for world rank r. */
static const char *peer_state(const struct ptdp__watchdog *w, int r) {
    if ((uint64_t)w->who[2 * r + 1] != host_hash()) return NULL;
    pid_t pid = (pid_t)w->who[2 * r];
    if (kill(pid, 0) != 0 && errno == ESRCH) return "exited";
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f) return "exited";
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *rp = strrchr(buf, ')'); /* the state follows "(comm) " */
    if (!rp || rp[1] != ' ') return NULL;
    switch (rp[2]) {
    case 'T':
    case 't':
        return "stopped";
    case 'Z':
    case 'X':
        return "exited";
    default:
        return NULL;
    }
}

/* Appends to buf what the watchdog knows about world rank r. */
static void describe_peer(const struct ptdp__watchdog *w, int r, char *buf, size_t cap, int *lost) {
    const char *st = peer_state(w, r);
    size_t len = strlen(buf);
    if (st) {
        snprintf(buf + len, cap - len, "%sworld rank %d (pid %lld on this host) has %s",
                 *lost ? "; " : "", r, (long long)w->who[2 * r], st);
        (*lost)++;
    }
}

_Noreturn static void fire(struct ptdp__watchdog *w, int op, const ptdp_group *g, int peer,
                           double waited) {
    const ptdp_comm *c = w->comm;
    char what[160], lost[1024] = "", members[512] = "";
    const char *opname = op >= 0 && op < PTDP_OP_COUNT ? ptdp_comm_op_name(op) : "barrier";
    int nlost = 0;
    if (peer >= 0 && g->members) {
        int pr = g->members[peer];
        snprintf(what, sizeof what, "%s %s %s world rank %d", g->name, opname,
                 op == PTDP_OP_SEND ? "to" : "from", pr);
        describe_peer(w, pr, lost, sizeof lost, &nlost);
    } else {
        snprintf(what, sizeof what, "%s %s", g->name, opname);
        size_t len = 0;
        for (int i = 0; g->members && i < g->size && len + 16 < sizeof members; i++) {
            len += (size_t)snprintf(members + len, sizeof members - len, "%s%d", i ? "," : "",
                                    g->members[i]);
            if (g->members[i] != c->world_rank)
                describe_peer(w, g->members[i], lost, sizeof lost, &nlost);
        }
    }
    const char *phase = ptdp_activity_phase_name();
    ptdp_log_error("rank %d: the %s%s%s%s has not completed after %.0f s (%s%siteration %lld; "
                   "--distributed-timeout-minutes %g): %s; ending the job",
                   c->world_rank, what, members[0] ? " (world ranks " : "", members,
                   members[0] ? ")" : "", waited, phase, phase[0] ? ", " : "",
                   (long long)ptdp_activity_iteration(), w->timeout_s / 60.0,
                   nlost ? lost
                         : "no rank it waits for on this host has exited or stopped: a rank on "
                           "another host is lost, or one is hung");
    fflush(stdout);
    fflush(stderr);
    c->ops->abort(c, 1);
    _exit(1);
}

static void *watch(void *arg) {
    struct ptdp__watchdog *w = arg;
    /* wake often enough that the job ends within about a tenth of the
     * timeout after it, at most once a second */
    double tick = w->timeout_s / 10 < 1 ? w->timeout_s / 10 : 1;
    if (tick < 0.05) tick = 0.05;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec + tick;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        if (w->stop) break;
        int op, peer;
        const ptdp_group *g;
        double since;
        uint64_t seq = ptdp__comm_inflight(w->comm, &op, &g, &peer, &since);
        double waited = ptdp_now() - since;
        /* the fields are stable: the iterating thread is blocked in that call
         * (the sequence number is checked again after reading them) */
        if (seq % 2 == 1 && waited > w->timeout_s) {
            int op2, peer2;
            const ptdp_group *g2;
            double since2;
            if (ptdp__comm_inflight(w->comm, &op2, &g2, &peer2, &since2) == seq)
                fire(w, op, g, peer, waited);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int ptdp_comm_watchdog_start(ptdp_comm *c, double timeout_s) {
    if (c->world_size <= 1 || !c->initialized || timeout_s <= 0 || c->watchdog) return PTDP_OK;
    struct ptdp__watchdog *w = calloc(1, sizeof *w);
    int64_t *who = calloc((size_t)c->world_size * 2, sizeof *who);
    /* a few bytes at start-up: without them the all-gather below could not
     * run on this rank, and the others would wait in it */
    PTDP_ASSERT_MSG(w && who, "out of memory starting the watchdog");
    who[2 * c->world_rank] = (int64_t)getpid();
    who[2 * c->world_rank + 1] = (int64_t)host_hash();
    c->ops->allgather(&c->world, who, 2, PTDP_COMM_I64);
    *w = (struct ptdp__watchdog){.comm = c, .timeout_s = timeout_s, .who = who};
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, watch, w) != 0) {
        free(who);
        free(w);
        return ptdp_errorf(PTDP_ECOMM, "cannot start the watchdog thread");
    }
    c->watchdog = w;
    return PTDP_OK;
}

void ptdp__comm_watchdog_stop(ptdp_comm *c) {
    struct ptdp__watchdog *w = c->watchdog;
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->who);
    free(w);
    c->watchdog = NULL;
}
