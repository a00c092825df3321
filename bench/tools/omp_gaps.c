/* omp_gaps.c - an LD_PRELOAD library that counts a program's OpenMP parallel
 * regions and the gaps between them, for choosing how long idle threads
 * spin (docs/performance.md, "Two jobs on one machine"):
 *
 *   LD_PRELOAD=build/libomp_gaps.so GOMP_SPINCOUNT=10000 build/ptdp train ...
 *   omp_gaps: 10167 regions; gaps between them (CPU time of the thread that
 *   starts them), up to 1e-06 s: 0, 3e-06: 6267, ...
 *
 * A gap is the CPU time the starting thread spends between the end of one
 * region (GOMP_parallel, which gcc emits for `omp parallel` and oneDNN's
 * OpenMP build calls) and the start of the next: the time the team's other
 * threads wait. CPU time, not wall time, so a busy machine that takes the
 * core away does not lengthen it. A waiting thread that spins for less than
 * a gap sleeps and must be woken for the next region.
 *
 * Not here: nested regions, tasks, other threads' regions (it follows
 * whichever thread calls; ptdp's regions all start on the main thread). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const double edges[] = {1e-6, 3e-6, 10e-6, 30e-6, 100e-6, 300e-6, 1e-3, 3e-3, 10e-3, 1e30};
#define NBINS (int)(sizeof edges / sizeof edges[0])
static long hist[NBINS], regions;
static double last_end = -1;

static void __attribute__((destructor)) report(void) {
    fprintf(stderr,
            "omp_gaps: %ld regions; gaps between them (CPU time of the thread that starts "
            "them),",
            regions);
    for (int i = 0; i + 1 < NBINS; i++) fprintf(stderr, " up to %g s: %ld,", edges[i], hist[i]);
    fprintf(stderr, " longer: %ld\n", hist[NBINS - 1]);
}

typedef void (*parallel_fn)(void (*)(void *), void *, unsigned, unsigned);

void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags) {
    static parallel_fn real;
    if (!real) real = (parallel_fn)dlsym(RTLD_NEXT, "GOMP_parallel");
    if (last_end >= 0) {
        const double g = cpu_now() - last_end;
        int i = 0;
        while (i + 1 < NBINS && g > edges[i]) i++;
        hist[i]++;
    }
    real(fn, data, num_threads, flags);
    regions++;
    last_end = cpu_now();
}
