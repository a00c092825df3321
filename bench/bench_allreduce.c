/* bench_allreduce.c - MPI all-reduce bandwidth on this machine for the
 * gradient bucket sizes ptdp uses (run under mpirun -np N). Prints one JSON
 * line per size: median time of 10 in-place float sums and the bus bandwidth
 * 2(n-1)/n * bytes / time (what a ring moves per rank, as nccl-tests report).
 * Not a test. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const long sizes[] = {1000, 10000, 100000, 1000000, 4000000, 10000000, 40000000};
    float *buf = malloc(sizeof(float) * 40000000L);
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 1);
    for (long i = 0; i < 40000000L; i++) buf[i] = 1.0f;
    for (int k = 0; k < (int)(sizeof sizes / sizeof sizes[0]); k++) {
        long n = sizes[k];
        int reps = n >= 10000000 ? 5 : 10;
        double t[10];
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* warm-up */
        for (int r = 0; r < reps; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            t[r] = MPI_Wtime() - t0;
        }
        qsort(t, (size_t)reps, sizeof t[0], cmp);
        double med = t[reps / 2], bytes = 4.0 * (double)n;
        if (rank == 0)
            printf(
                "{\"bench\":\"allreduce\",\"ranks\":%d,\"floats\":%ld,\"bytes\":%.0f,\"ms_median\":%.4f,"
                "\"algbw_GBps\":%.3f,\"busbw_GBps\":%.3f}\n",
                size, n, bytes, med * 1e3, bytes / med / 1e9,
                bytes / med / 1e9 * 2.0 * (size - 1) / size);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
