/* trace.c - the Chrome/Perfetto trace of a run (--trace): every rank's
 * executor events gathered to rank 0 and written as JSON "X" (complete)
 * events, one track per rank named by its [dp, pp, tp] coordinates. Open the
 * file in https://ui.perfetto.dev or chrome://tracing.
 * Deliberately not here: recording (executor.c records into a buffer
 * planned at start-up). */
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline.h"

const char *ptdp_event_kind_name(int kind) {
    static const char *names[] = {
#define PTDP__EV_NAME(e, s) s,
        PTDP_EVENT_KINDS(PTDP__EV_NAME)
#undef PTDP__EV_NAME
    };
    PTDP_ASSERT(kind >= 0 && kind < PTDP_EV_COUNT);
    return names[kind];
}

int ptdp_executor_write_trace(ptdp_executor *ex, ptdp_group *world, int world_rank, int dp, int pp,
                              int tp, const char *path) {
    int64_t counts[4096];
    PTDP_ASSERT(world->size <= 4096);
    /* prefix every rank's events with its coordinates */
    const ptdp_event *events;
    const int64_t nevents = ptdp__executor_events(ex, &events);
    int64_t nbytes = (int64_t)sizeof(int) * 4 + nevents * (int64_t)sizeof(ptdp_event);
    char *mine = malloc((size_t)nbytes);
    PTDP_ASSERT(mine);
    int hdr[4] = {world_rank, dp, pp, tp};
    memcpy(mine, hdr, sizeof hdr);
    memcpy(mine + sizeof hdr, events, (size_t)nevents * sizeof(ptdp_event));
    char *all = ptdp_gatherv_bytes(world, mine, nbytes, counts, 0);
    free(mine);
    if (world->rank != 0) return PTDP_OK;
    FILE *f = fopen(path, "w");
    if (!f) {
        free(all);
        return ptdp_errorf(PTDP_EIO, "--trace %s: cannot open for writing", path);
    }
    fprintf(f, "{\"traceEvents\":[\n");
    int64_t off = 0;
    int first = 1;
    for (int r = 0; r < world->size; r++) {
        int h[4];
        memcpy(h, all + off, sizeof h);
        int64_t nev = (counts[r] - (int64_t)sizeof h) / (int64_t)sizeof(ptdp_event);
        fprintf(
            f,
            "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"rank %d [dp %d, pp %d, tp %d]\"}}",
            first ? "" : ",\n", h[0], h[0], h[1], h[2], h[3]);
        first = 0;
        for (int64_t e = 0; e < nev; e++) {
            ptdp_event ev;
            memcpy(&ev, all + off + (int64_t)sizeof h + e * (int64_t)sizeof ev, sizeof ev);
            if (ev.microbatch >= 0)
                fprintf(
                    f,
                    ",\n{\"name\":\"%s %d.%d\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"iteration\":%d,\"microbatch\":%d,\"chunk\":%d}}",
                    ev.kind == PTDP_EV_FWD   ? "F"
                    : ev.kind == PTDP_EV_BWD ? "B"
                    : ev.kind == PTDP_EV_WGT ? "W"
                                             : ptdp_event_kind_name(ev.kind),
                    ev.microbatch, ev.chunk, ptdp_event_kind_name(ev.kind), h[0], ev.start * 1e6,
                    ev.dur * 1e6, ev.iteration, ev.microbatch, ev.chunk);
            else
                fprintf(
                    f,
                    ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"iteration\":%d}}",
                    ptdp_event_kind_name(ev.kind), ptdp_event_kind_name(ev.kind), h[0],
                    ev.start * 1e6, ev.dur * 1e6, ev.iteration);
        }
        off += counts[r];
    }
    fprintf(f, "\n]}\n");
    free(all);
    if (fclose(f) != 0) return ptdp_errorf(PTDP_EIO, "--trace %s: write failed", path);
    return PTDP_OK;
}
