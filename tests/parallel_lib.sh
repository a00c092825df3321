# parallel_lib.sh - shared by the multi-rank script tests (sourced, not run).
# Needs PTDP, PTDP_SRC, PTDP_TOOLS, MPIRUN from CTest's environment; ok, fail,
# $TMP and finish come from script_lib.sh.
source "$PTDP_SRC/tests/script_lib.sh"
MPIRUN=${MPIRUN:-mpirun}
run_np() { # run_np N args...  (ptdp train under mpirun)
    local n=$1
    shift
    "$MPIRUN" --oversubscribe -np "$n" "$PTDP" "$@"
}

# compare_jsonl REF OTHER KEY RTOL: every iteration's KEY within RTOL relative
compare_jsonl() {
    local ref=$1 other=$2 key=$3 rtol=$4
    local out
    out=$(paste -d' ' <(grep -o "\"$key\":[^,}]*" "$ref" | cut -d: -f2) <(grep -o "\"$key\":[^,}]*" "$other" | cut -d: -f2) |
        awk -v rtol="$rtol" '{ n++; d = $1 - $2; if (d < 0) d = -d; r = $1 < 0 ? -$1 : $1;
             if (d > rtol * r) { bad++; printf "iteration %d: %s vs %s\n", n, $1, $2 } }
             END { if (n == 0) print "no lines"; exit (bad > 0 || n == 0) }')
    local rc=$?
    [ -n "$out" ] && echo "$out" | head -3 >&2
    return $rc
}
