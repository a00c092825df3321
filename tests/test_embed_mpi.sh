# test_embed_mpi.sh - ptdp inside a program that owns MPI (issue: a host that
# called MPI_Init aborted in ptdp_comm_init, "MPI_Init ... more than once"):
# tests/tools/embed_mpi.c on 3 ranks, ptdp on all of them and on a
# sub-communicator of two; the program keeps using MPI afterwards.
. "$PTDP_SRC/tests/parallel_lib.sh"
for mode in world sub; do
    "$MPIRUN" --oversubscribe -np 3 "$PTDP_TOOLS/embed_mpi" "$mode" >"$TMP/$mode.out" 2>&1
    rc=$?
    [ "$rc" = 0 ] && [ "$(grep -c '^rank [0-2]: ok$' "$TMP/$mode.out")" = 3 ] && ok ||
        fail "embed_mpi $mode: status $rc: $(cat "$TMP/$mode.out")"
done
finish
