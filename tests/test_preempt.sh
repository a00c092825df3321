#!/usr/bin/env bash
# Preemption as Slurm does it (docs/reliability.md): a p=2 x d=2 job (4 ranks,
# ZeRO-1, dropout, validation every 4 iterations) on real data (Moby Dick,
# --data-path) runs with --exit-signal-handler; SIGTERM goes to every rank at
# once, as slurmstepd sends it to every task of a step. Checks:
# - every rank finishes the iteration in flight, the checkpoint of that
#   iteration is written and verifies, every rank exits 0 (mpirun's status 0);
# - --load continues from it, and the iterations after it (losses, gradient
#   norms, validation losses in the JSON-lines log) and the final checkpoint
#   (every weight and AdamW moment of the 4 shards, and the manifest) are
#   bitwise those of an uninterrupted run.
source "$PTDP_SRC/tests/parallel_lib.sh"

moby_dick
N=20 # iterations (about 100 ms each on 2 cores): the signal comes after iteration 2
ARGS="--data-path $TMP/moby_text_document $V --split 949,50,1 --num-layers 2 --hidden-size 32
 --num-attention-heads 2 --seq-length 32 --micro-batch-size 1 --global-batch-size 8 --train-iters $N
 --lr 1e-3 --lr-warmup-iters 2 --log-interval 100 --eval-interval 4 --eval-iters 1 --hidden-dropout 0.1
 --attention-dropout 0.1 --pipeline-model-parallel-size 2 --use-distributed-optimizer"
fields() { grep -o '"iteration":[0-9]*\|"lm_loss":[^,]*\|"grad_norm":[^,]*\|"val_loss":[^,}]*' "$1"; }
lines() { grep -c lm_loss "$1" 2>/dev/null || true; }

run_np 4 train $ARGS --save "$TMP/ref.ck" --log-jsonl "$TMP/ref.jsonl" >"$TMP/ref.out" 2>&1 && ok ||
    { fail "uninterrupted run"; tail -5 "$TMP/ref.out" >&2; }

# the preempted run: SIGTERM to the 4 ranks (mpirun's children) in one kill
"$MPIRUN" --oversubscribe -np 4 "$PTDP" train $ARGS --exit-signal-handler --save "$TMP/pre.ck" \
    --log-jsonl "$TMP/pre.jsonl" >"$TMP/pre.out" 2>&1 &
mpid=$!
for i in $(seq 1 1200); do [ "$(lines "$TMP/pre.jsonl")" -ge 2 ] 2>/dev/null && break; sleep 0.05; done
ranks=$(pgrep -P $mpid -x ptdp | tr '\n' ' ')
[ "$(echo $ranks | wc -w)" = 4 ] && ok || fail "expected 4 ranks under mpirun, found '$ranks'"
kill -TERM $ranks
wait $mpid
rc=$?
K=$(cat "$TMP/pre.ck/latest_checkpointed_iteration.txt" 2>/dev/null)
echo "SIGTERM to ranks $ranks: mpirun status $rc, checkpoint of iteration '$K' of $N"
[ $rc = 0 ] && ok || { fail "the preempted job exited with $rc"; tail -5 "$TMP/pre.out" >&2; }
[ -n "$K" ] && [ "$K" -ge 2 ] && [ "$K" -lt $N ] && ok ||
    fail "expected a checkpoint between iterations 2 and $((N - 1)), got '$K' (the signal came too late?)"
grep -q "exiting after iteration $K (SIGTERM received: --exit-signal-handler)" "$TMP/pre.out" && ok ||
    fail "no 'exiting after iteration $K' line: $(grep exiting "$TMP/pre.out")"
[ "$(lines "$TMP/pre.jsonl")" = "$K" ] && ok || fail "the preempted run logged $(lines "$TMP/pre.jsonl") iterations, not $K"
[ "$(grep -c "ptdp: error" "$TMP/pre.out")" = 0 ] && ok || fail "errors in the preempted run: $(grep error "$TMP/pre.out")"
"$PTDP" checkpoint verify "$TMP/pre.ck" >"$TMP/verify.out" 2>&1 && grep -q "iter_$(printf %07d "$K")" "$TMP/verify.out" &&
    ok || { fail "the preemption checkpoint does not verify"; cat "$TMP/verify.out" >&2; }
nf=$(fields "$TMP/pre.jsonl" | wc -l)
cmp <(fields "$TMP/ref.jsonl" | head -n "$nf") <(fields "$TMP/pre.jsonl") && ok ||
    fail "the preempted run's iterations differ from the uninterrupted run's"

# the resumed run
run_np 4 train $ARGS --load "$TMP/pre.ck" --save "$TMP/pre.ck" --log-jsonl "$TMP/res.jsonl" >"$TMP/res.out" 2>&1 && ok ||
    { fail "resumed run"; tail -5 "$TMP/res.out" >&2; }
grep -q "loaded checkpoint .*iteration $K, consumed samples $((K * 8))" "$TMP/res.out" && ok ||
    fail "did not resume from iteration $K: $(grep -i loaded "$TMP/res.out")"
cmp <(fields "$TMP/ref.jsonl" | tail -n +$((nf + 1))) <(fields "$TMP/res.jsonl") && ok ||
    { fail "resumed iterations differ from the uninterrupted run"; diff <(fields "$TMP/ref.jsonl") <(fields "$TMP/res.jsonl") | head >&2; }
[ "$(lines "$TMP/res.jsonl")" = $((N - K)) ] && ok || fail "the resumed run logged $(lines "$TMP/res.jsonl") iterations"
[ "$(fields "$TMP/res.jsonl" | grep -c val_loss)" -ge 2 ] && ok || fail "the resumed run logged no validation losses"
same_final_checkpoint "$TMP/ref.ck/iter_$(printf %07d $N)" "$TMP/pre.ck/iter_$(printf %07d $N)" 4
finish
