/* common.c - small pieces shared by the commands. */
#include <omp.h>
#include <stdlib.h>

#include "cli/cli.h"

void ptdp__cli_set_threads(const ptdp_comm *c) {
    if (getenv("OMP_NUM_THREADS")) return;
    int local = 1;
    if (c->mpi_initialized && c->world_size > 1) {
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
        MPI_Comm_size(node, &local);
        MPI_Comm_free(&node);
    }
    int th = omp_get_num_procs() / local;
    omp_set_num_threads(th < 1 ? 1 : th);
}
