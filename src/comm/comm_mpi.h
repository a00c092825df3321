/* comm_mpi.h - ptdp inside a program that uses MPI itself: the one part of
 * ptdp's interface that names an MPI type, kept apart so that comm.h (and
 * everything above it) compiles without <mpi.h>.
 *
 * A program that owns MPI (it called MPI_Init, it will call MPI_Finalize)
 * can run ptdp on all its ranks with ptdp_comm_init, which then neither
 * initialises nor finalises MPI, or on some of them with ptdp_comm_init_mpi
 * on a communicator of its own:
 *
 *     MPI_Init(&argc, &argv);
 *     MPI_Comm sub;                          // ranks 0..3 train, the rest do other work
 *     MPI_Comm_split(MPI_COMM_WORLD, rank < 4 ? 0 : MPI_UNDEFINED, rank, &sub);
 *     if (sub != MPI_COMM_NULL) {
 *         ptdp_comm c;
 *         ptdp_comm_init_mpi(&c, sub);       // ptdp's world: a duplicate of sub
 *         ptdp_comm_setup(&c, t, p, d);      // t * p * d == 4
 *         ...                                // train, save, generate
 *         ptdp_comm_finalize(&c);            // frees ptdp's communicators only
 *         MPI_Comm_free(&sub);
 *     }
 *     ...                                    // the program goes on using MPI
 *     MPI_Finalize();
 *
 * ptdp never changes the error handler of a communicator it did not create
 * (it sets MPI_ERRORS_RETURN on its own duplicates) and sends nothing on the
 * program's communicators. An internal error (a failed assertion) still ends
 * the whole job with MPI_Abort on MPI_COMM_WORLD: a rank that stops in the
 * middle of a collective would leave the others waiting. */
#ifndef PTDP_COMM_MPI_H
#define PTDP_COMM_MPI_H

#include <mpi.h>

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ptdp_comm_init on the world `comm` (ptdp works on a duplicate of it):
 * world_size and world_rank are comm's size and this rank's rank in it.
 * MPI must be initialised (PTDP_EINVAL otherwise, and for MPI_COMM_NULL).
 * Collective over comm: every member calls it, and nobody else. */
int ptdp_comm_init_mpi(ptdp_comm *c, MPI_Comm comm);

#ifdef __cplusplus
}
#endif

#endif
