#!/usr/bin/env bash
# Faults during training (docs/reliability.md):
# - a rank killed with SIGKILL at each phase (forward, pipeline send, tensor
#   all-reduce, data-parallel bucket reduction, ZeRO-1 all-gather, checkpoint
#   write), under a launcher that does not tear the job down by itself
#   (mpirun --mca orte_abort_on_non_zero_status 0, as srun without
#   --kill-on-bad-exit): the watchdog of every other rank ends the job after
#   --distributed-timeout-minutes with one line naming the operation in flight
#   and the lost rank; non-zero status, the job down within 30 s of the kill
#   (printed);
# - a stopped (hung) rank: the same, naming it "stopped";
# - plain mpirun: Open MPI ends the job by itself and names the rank;
# - resume after the kill during the checkpoint write (real data, t=2 x p=2 x
#   d=2): the interrupted checkpoint is not taken as latest, the previous one
#   verifies, and the resumed iterations (losses, validation losses) and the
#   final checkpoint (weights and AdamW moments, bitwise) equal the
#   uninterrupted run's.
source "$PTDP_SRC/tests/parallel_lib.sh"

ARGS="--mock-data --num-layers 4 --hidden-size 48 --num-attention-heads 4 --seq-length 16
 --micro-batch-size 1 --global-batch-size 8 --vocab-size 300 --lr 1e-3 --train-iters 6 --log-interval 100"
TIMEOUT_MIN=0.05 # 3 s: the watchdog's bound in these tests
NOABORT="--mca orte_abort_on_non_zero_status 0"

# start NAME FAULT NP [--launcher FLAGS] ptdp flags...: launches the job in the
# background (most of its time is the watchdog's wait, so the jobs overlap);
# $TMP/NAME.rc gets its status and the time it ended.
start() {
    local name=$1 fault=$2 np=$3 launcher=$NOABORT
    shift 3
    if [ "${1:-}" = "--launcher" ]; then
        launcher=$2
        shift 2
    fi
    (
        PTDP_FAULT=$fault timeout 120 "$MPIRUN" $launcher --oversubscribe -np "$np" -x PTDP_FAULT "$PTDP" train \
            $ARGS --distributed-timeout-minutes $TIMEOUT_MIN "$@" >"$TMP/$name.out" 2>&1
        echo "$? $(date +%s.%N)" >"$TMP/$name.rc"
    ) &
}
# check NAME FAULT NP REGEX (after the job ended): a non-zero status (124 = still
# hanging after 120 s), the end within 30 s of the kill, the dying rank announced
# itself and a surviving rank's message matches REGEX
check() {
    local name=$1 fault=$2 np=$3 re=$4 rc t1 tk secs
    read -r rc t1 <"$TMP/$name.rc" || { fail "$name: the job left no status"; return; }
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && ok || { fail "$name: status $rc (124: hung)"; return; }
    # the injection's line carries the time of the kill
    tk=$(grep -o "PTDP_FAULT=${fault%%@*}: rank .* raises .*time [0-9.]*" "$TMP/$name.out" | grep -o '[0-9.]*$' | head -1)
    [ -n "$tk" ] && ok || { fail "$name: the fault was not injected"; tail -5 "$TMP/$name.out" >&2; return; }
    secs=$(echo "$t1 - $tk" | bc)
    echo "$name: $fault, $np ranks: status $rc, the job ended $secs s after the kill"
    # the bound: the watchdog's 3 s, its tick, MPI_Abort, plus slack for a loaded machine
    [ "$(echo "$secs < 30" | bc)" = 1 ] && ok || fail "$name: the job took $secs s to end after the kill"
    grep -Eq "$re" "$TMP/$name.out" && ok || { fail "$name: no message matching '$re'"; tail -20 "$TMP/$name.out" >&2; }
}
killed() { # killed NAME FAULT NP REGEX [--launcher FLAGS] ptdp flags...: start, wait, check
    local name=$1 fault=$2 np=$3 re=$4
    shift 4
    start "$name" "$fault" "$np" "$@"
    wait
    check "$name" "$fault" "$np" "$re"
}

LOST='world rank 1 \(pid [0-9]+ on this host\) has exited'
W="has not completed after [0-9]+ s \(.*iteration 3; --distributed-timeout-minutes 0.05\)"
T2="--tensor-model-parallel-size 2" P2="--pipeline-model-parallel-size 2"
start forward kill.forward@1:3 2 $P2
start p2p kill.pipeline-send@0:3 2 $P2
start tensor kill.tensor-all-reduce@1:3 2 $T2
start bucket kill.data-all-reduce@1:3 2
start zero kill.data-all-gather@1:3 2 --use-distributed-optimizer
start stop stop.tensor-all-reduce@1:3 2 $T2
# plain mpirun: Open MPI notices the death and kills the job itself (about 2 s)
start mpirun kill.tensor-all-reduce@1:3 2 --launcher "" $T2
# the watchdog stays quiet in a healthy run (the same bound, 6 iterations)
(run_np 2 train $ARGS $T2 --distributed-timeout-minutes $TIMEOUT_MIN >"$TMP/healthy.out" 2>&1
    echo $? >"$TMP/healthy.rc") &
wait
check forward kill.forward@1:3 2 "pipeline (recv from|send to) world rank 1 $W: $LOST"
check p2p kill.pipeline-send@0:3 2 \
    "pipeline (recv from|send to) world rank 0 $W: world rank 0 \(pid [0-9]+ on this host\) has exited"
check tensor kill.tensor-all-reduce@1:3 2 "rank 0: the tensor all-reduce \(world ranks 0,1\) $W: $LOST"
check bucket kill.data-all-reduce@1:3 2 "rank 0: the data all-reduce \(world ranks 0,1\) $W: $LOST"
check zero kill.data-all-gather@1:3 2 "rank 0: the data all-gather \(world ranks 0,1\) $W: $LOST"
check stop stop.tensor-all-reduce@1:3 2 \
    "tensor all-reduce \(world ranks 0,1\) $W: world rank 1 \(pid [0-9]+ on this host\) has stopped"
check mpirun kill.tensor-all-reduce@1:3 2 "process rank 1 .* exited on signal 9"
[ "$(cat "$TMP/healthy.rc")" = 0 ] && ! grep -q "has not completed" "$TMP/healthy.out" && ok ||
    fail "a healthy run with the watchdog failed"

# Resume after a kill during the checkpoint write, t=2 x p=2 x d=2 on Moby Dick.
moby_dick
ARGS="--data-path $TMP/moby_text_document $V --split 949,50,1 --num-layers 4 --hidden-size 64
 --num-attention-heads 4 --seq-length 32 --micro-batch-size 1 --global-batch-size 8 --train-iters 8 --lr 1e-3
 --lr-warmup-iters 2 --log-interval 100 --eval-interval 2 --eval-iters 1 --hidden-dropout 0.1
 --attention-dropout 0.1 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
 --use-distributed-optimizer"
fields() { grep -o '"iteration":[0-9]*\|"lm_loss":[^,]*\|"grad_norm":[^,]*\|"val_loss":[^,}]*' "$1"; }
run_np 8 train $ARGS --save "$TMP/ref.ck" --log-jsonl "$TMP/ref.jsonl" >"$TMP/ref.out" 2>&1 && ok ||
    { fail "uninterrupted run"; tail -5 "$TMP/ref.out" >&2; }
killed ckpt kill.checkpoint-write@5:4 8 "rank [0-9]: the world all-reduce \(world ranks 0,1,2,3,4,5,6,7\) has not completed after [0-9]+ s \(checkpoint save, iteration 4; .*world rank 5 \(pid [0-9]+ on this host\) has exited" \
    --save "$TMP/k.ck" --save-interval 2
[ "$(cat "$TMP/k.ck/latest_checkpointed_iteration.txt")" = 2 ] && [ ! -e "$TMP/k.ck/iter_0000004/manifest.json" ] &&
    ok || fail "the interrupted checkpoint moved latest or has a manifest"
ls "$TMP/k.ck/iter_0000004/" | grep -q "rank_00005.safetensors.tmp." && ok ||
    fail "expected the killed rank's partial shard (a .tmp. file) in iter_0000004"
"$PTDP" checkpoint verify "$TMP/k.ck" >"$TMP/verify.out" 2>&1 && grep -q "iter_0000002" "$TMP/verify.out" && ok ||
    { fail "the previous checkpoint does not verify"; cat "$TMP/verify.out" >&2; }
run_np 8 train $ARGS --load "$TMP/k.ck" --save "$TMP/k.ck" --log-jsonl "$TMP/res.jsonl" >"$TMP/res.out" 2>&1 && ok ||
    { fail "resumed run"; tail -5 "$TMP/res.out" >&2; }
grep -q "loaded checkpoint .*iteration 2, consumed samples 16" "$TMP/res.out" && ok || fail "did not resume from iteration 2"
grep -q "removed .*rank_00005.safetensors.tmp" "$TMP/res.out" && ok || fail "the partial shard was not removed"
# iterations 3..8 and the validation losses at 4, 6, 8 (and the final ones), bitwise
cmp <(fields "$TMP/ref.jsonl" | sed -n '/"iteration":3$/,$p') <(fields "$TMP/res.jsonl") && ok ||
    { fail "resumed iterations differ from the uninterrupted run"; diff <(fields "$TMP/ref.jsonl") <(fields "$TMP/res.jsonl") | head >&2; }
[ "$(fields "$TMP/res.jsonl" | grep -c val_loss)" -ge 3 ] && ok || fail "the resumed run logged no validation losses"
same_final_checkpoint "$TMP/ref.ck/iter_0000008" "$TMP/k.ck/iter_0000008" 8
"$PTDP" checkpoint verify "$TMP/k.ck" >/dev/null 2>&1 && ok || fail "the resumed run's checkpoint does not verify"
finish
