# test_thread_policy.sh - ptdp's OpenMP waiting policy (docs/performance.md,
# "Two jobs on one machine"): with neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT
# in the environment, `ptdp train` runs with ptdp's spin count (it sets the
# variable and runs itself again before libgomp starts), on every rank; a
# variable the user set is kept as it is, with no second start. libgomp's
# OMP_DISPLAY_ENV shows what it read. Timing is bench/bench_share.sh's.
source "$PTDP_SRC/tests/script_lib.sh"
export OMP_NUM_THREADS=2
M="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 128
   --train-iters 1 --lr 1e-3 --mock-data"

# ptdp's default, as --version states it without the variables
want=$(env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY "$PTDP" --version |
    sed -n 's/^OpenMP idle threads: spin then sleep, GOMP_SPINCOUNT=\([0-9]*\) (ptdp.s default.*/\1/p')
[ -n "$want" ] && [ "$want" -gt 0 ] && [ "$want" -lt 300000 ] && ok ||
    bad "--version does not state ptdp's spin count: $("$PTDP" --version | tail -1)"
# spins SPINCOUNT-lines: the GOMP_SPINCOUNT values libgomp displayed, one per libgomp start
spins() { sed -n "s/^ *GOMP_SPINCOUNT = '\([0-9]*\)'.*/\1/p" "$1" | tr '\n' ' ' | sed 's/ $//'; }

# nothing set: ptdp's value reaches libgomp; the first start (libgomp's own default) is replaced
# before it runs anything, so the run trains once
env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=verbose "$PTDP" train $M >"$tmp/out" 2>&1
[ $? = 0 ] && [ "$(spins "$tmp/out")" = "300000 $want" ] && [ "$(grep -c '^done:' "$tmp/out")" = 1 ] && ok ||
    bad "no variable set: libgomp read '$(spins "$tmp/out")', want '300000 $want'; $(tail -2 "$tmp/out")"
# on every rank of an mpirun job
env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY "$MPIRUN" --oversubscribe -np 2 -x OMP_DISPLAY_ENV=verbose \
    "$PTDP" train $M >"$tmp/out" 2>&1
[ $? = 0 ] && [ "$(spins "$tmp/out" | tr ' ' '\n' | grep -c "^$want$")" = 2 ] && ok ||
    bad "2 ranks: libgomp read '$(spins "$tmp/out")', want $want twice"
# the user's choice wins, and ptdp starts once
for v in "GOMP_SPINCOUNT=300000:300000" "GOMP_SPINCOUNT=0:0" "OMP_WAIT_POLICY=passive:0"; do
    set_to=${v%:*}
    env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY "$set_to" OMP_DISPLAY_ENV=verbose "$PTDP" train $M >"$tmp/out" 2>&1
    [ $? = 0 ] && [ "$(spins "$tmp/out")" = "${v##*:}" ] && ok ||
        bad "$set_to: libgomp read '$(spins "$tmp/out")', want '${v##*:}' once"
done
# commands without parallel work start once
env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=verbose "$PTDP" --version >"$tmp/out" 2>&1
[ "$(spins "$tmp/out")" = "300000" ] && ok || bad "--version started twice: '$(spins "$tmp/out")'"
finish
