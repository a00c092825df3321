/* embed_mpi.c - a program that owns MPI and runs ptdp on its ranks
 * (tests/test_embed_mpi.sh starts it under mpirun -np 3):
 *   embed_mpi world   ptdp_comm_init on every rank: MPI is already running,
 *                     so ptdp neither initialises nor finalises it
 *   embed_mpi sub     ptdp_comm_init_mpi on a communicator of all ranks but
 *                     the last: ptdp's world is those ranks only
 * In both, ptdp's data-parallel group sums the ranks' numbers, and after
 * ptdp_comm_finalize the program still talks over MPI_COMM_WORLD, whose
 * error handler ptdp left as it was. Prints "rank R: ok" per rank and exits
 * with the number of failed checks. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/comm_mpi.h"

static int fails;
#define EXPECT(cond)                                                                         \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "embed_mpi rank %d: FAIL line %d: %s\n", rank, __LINE__, #cond); \
            fails++;                                                                         \
        }                                                                                    \
    } while (0)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int sub_mode = argc > 1 && !strcmp(argv[1], "sub");
    MPI_Errhandler before, after;
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &before);

    MPI_Comm sub = MPI_COMM_NULL;
    if (sub_mode) MPI_Comm_split(MPI_COMM_WORLD, rank < size - 1 ? 0 : MPI_UNDEFINED, rank, &sub);
    if (!sub_mode || sub != MPI_COMM_NULL) {
        const int n = sub_mode ? size - 1 : size;
        ptdp_comm c;
        int rc = sub_mode ? ptdp_comm_init_mpi(&c, sub) : ptdp_comm_init(&c, &argc, &argv);
        EXPECT(rc == PTDP_OK);
        EXPECT(c.world_size == n && c.world_rank == rank);
        EXPECT(ptdp_comm_setup(&c, 1, 1, n) == PTDP_OK);
        float x = (float)(rank + 1);
        ptdp_allreduce_sum_f32(&c.data, &x, 1);
        EXPECT(x == (float)(n * (n + 1) / 2));
        ptdp_comm_finalize(&c);
        int running = 0;
        MPI_Initialized(&running);
        EXPECT(running); /* ptdp did not finalise the program's MPI */
        if (sub != MPI_COMM_NULL) MPI_Comm_free(&sub);
    }
    if (sub_mode && rank == size - 1) { /* not in ptdp's world: ptdp_comm_init_mpi refuses */
        ptdp_comm c;
        EXPECT(ptdp_comm_init_mpi(&c, MPI_COMM_NULL) == PTDP_EINVAL);
    }
    int one = 1, total = 0;
    MPI_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    EXPECT(total == size);
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &after);
    EXPECT(after == before);
    MPI_Errhandler_free(&before);
    MPI_Errhandler_free(&after);
    if (!fails) printf("rank %d: ok\n", rank);
    MPI_Finalize();
    return fails;
}
