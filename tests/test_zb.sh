#!/usr/bin/env bash
# Zero-bubble pipeline schedule ZB-H1 (--pipeline-schedule zb-h1: each
# backward split into B, the input gradient, and W, the weight gradients,
# run later on the same rank). With dropout on, p = 2, 3, 4 give the single
# process's loss and grad norm at every one of 20 iterations (1e-5 relative;
# also with selective recomputation at p = 2, and t = 2 x p = 2 with
# --sequence-parallel)
# and its final weights (1e-5 absolute; the K third of c_attn.bias within
# lr x iterations, see compare_weights), and every run's memory plan equals
# the planner's prediction (the W buffers included). ZB-H1 adds each
# micro-batch's weight gradients in the same order as 1F1B, so at p = 2 the
# two schedules log bitwise the same losses and norms. Also: W boxes in the
# --trace file, and the refused combinations (status 2 on every rank).
# Layouts with d and ZeRO-1 are in the invariance matrix (test_matrix.sh).
#
# ZB-V (--pipeline-schedule zb-v: two chunks per rank in a V, v = 2 implied;
# rank 0 holds the embedding and the loss head): p = 2 (with a checkpoint at
# iteration 10), p = 3, p = 4 (12 layers over 8 stages by
# --pipeline-model-parallel-layout), p = 3 with the lists of --zb-costs 3,3,2
# and p = 2 x d = 2 with ZeRO-1 give the
# single process's losses, grad norms and final weights with the same
# tolerances, memory plan = prediction; the turn of the V is no message
# (2m sends per rank and iteration, no tied-embedding all-reduce); the p = 2
# checkpoint resumes at p = 1 (1f1b) and at p = 3 (zb-v) with the reference's
# losses and final weights; W boxes of both chunks in the trace; refusals.
source "$PTDP_SRC/tests/parallel_lib.sh"

ARGS="--mock-data --num-layers 12 --hidden-size 48 --num-attention-heads 12 --seq-length 16
 --micro-batch-size 1 --global-batch-size 8 --vocab-size 300 --train-iters 20 --lr 1e-3
 --lr-warmup-iters 2 --weight-decay 0.1 --adam-eps 1e-8 --hidden-dropout 0.1 --attention-dropout 0.1
 --log-interval 20"

run_np 1 train $ARGS --log-jsonl "$TMP/ref.jsonl" --save-safetensors "$TMP/ref.safetensors" >"$TMP/ref.out" 2>&1 &&
    ok || { fail "single-process run"; cat "$TMP/ref.out" >&2; }

# p = 2, 3, 4, p = 2 with selective recomputation (B reruns core attention; W needs nothing it
# drops), and t = 2 x p = 2 with sequence parallelism (W gathers the LayerNorm output shards again)
for run in 2 3 4 2:selective 2:sp; do
    p=${run%%:*} np=${run%%:*}
    name=zbh1_p$p
    extra=""
    [ "$run" = 2:selective ] && name=zbh1_p2_selective && extra="--recompute-granularity selective"
    [ "$run" = 2:sp ] && name=zbh1_t2p2_sp np=4 extra="--tensor-model-parallel-size 2 --sequence-parallel"
    if run_vs_ref "$name" "$np" $ARGS --pipeline-model-parallel-size $p --pipeline-schedule zb-h1 $extra; then
        check_plan "$TMP/$name.out" "$p" && ok || fail "$name: memory plan differs from the prediction"
        # every rank stashes min(p, m) = p micro-batches (1F1B's rank 0), measured = predicted
        [ "$(grep -c "$p micro-batches stashed" "$TMP/$name.out")" -eq "$p" ] && ok ||
            fail "$name: expected $p micro-batches stashed on each of $p stages"
    fi
done

# Bitwise the same iteration as 1F1B at p = 2, with a trace of both.
run_np 2 train $ARGS --pipeline-model-parallel-size 2 --pipeline-schedule 1f1b --log-jsonl "$TMP/1f1b.jsonl" \
    >"$TMP/1f1b.out" 2>&1 && ok || fail "1f1b p=2 run"
strip() { grep -o '"lm_loss":[^,]*,"grad_norm":[^,]*' "$1"; }
[ -n "$(strip "$TMP/1f1b.jsonl")" ] && [ "$(strip "$TMP/1f1b.jsonl")" = "$(strip "$TMP/zbh1_p2.jsonl")" ] && ok ||
    fail "zb-h1 and 1f1b at p=2 should log bitwise the same losses and grad norms"

run_np 2 train $ARGS --train-iters 2 --pipeline-model-parallel-size 2 --pipeline-schedule zb-h1 \
    --trace "$TMP/trace.json" >"$TMP/trace.out" 2>&1 && ok || fail "zb-h1 --trace run"
for r in 0 1; do
    [ "$(grep -c "\"name\":\"W [0-9]*\.0\",\"cat\":\"weight\",\"ph\":\"X\",\"pid\":0,\"tid\":$r," "$TMP/trace.json")" -eq 16 ] &&
        ok || fail "trace: rank $r should have 2 iterations x 8 W boxes"
done

# ---- ZB-V ----
for run in 2 3 4 2:zero 3:costs; do
    p=${run%%:*} np=${run%%:*} name=zbv_p${run%%:*} extra=""
    [ "$p" = 2 ] && [ "$run" = 2 ] && extra="--log-comm --save $TMP/zbv.ck --save-interval 10"
    # 12 layers do not split evenly over 8 stages: rank 0 holds E+t and t+L
    [ "$p" = 4 ] && extra="--pipeline-model-parallel-layout Et|tt|tt|t|t|tt|tt|tL"
    [ "$run" = 2:zero ] && np=4 name=zbv_p2_d2_zero extra="--use-distributed-optimizer"
    # costs other than the FLOPs' (4,4,4 for this shape: the unit-cost lists) give other lists
    [ "$run" = 3:costs ] && name=zbv_p3_costs extra="--zb-costs 3,3,2"
    if run_vs_ref "$name" "$np" $ARGS --pipeline-model-parallel-size $p --pipeline-schedule zb-v $extra; then
        check_plan "$TMP/$name.out" "$p" && ok || fail "$name: memory plan differs from the prediction"
        # each stage's activation line: measured peak bytes = predicted bytes
        act=$(grep -o "measured peak [^(]*([0-9]* bytes;.*predicted [^(]*([0-9]* bytes)" "$TMP/$name.out" |
            sed 's/.*measured peak [^(]*(\([0-9]*\) bytes;.*predicted [^(]*(\([0-9]*\) bytes)/\1 \2/')
        [ "$(echo "$act" | grep -c .)" -eq "$p" ] && [ -z "$(echo "$act" | awk '$1 != $2')" ] && ok ||
            fail "$name: activation memory measured != predicted: $act"
    fi
done
# m = 8 per iteration, 20 iterations: 2 sends per micro-batch on every rank
# (rank 1's F of stage 1 -> 2 and B of stage 2 -> 1 stay local), s*b*h floats
# each; the tied embedding is summed on rank 0 without the embedding group.
for r in 0 1; do
    grep -q "^\[0,$r,0\] comm pipeline  send           calls      320  bytes       983040$" "$TMP/zbv_p2.out" &&
        ok || fail "zbv_p2: rank $r should send 320 messages of 3072 bytes: $(grep "comm pipeline" "$TMP/zbv_p2.out")"
done
grep -q "comm embedding" "$TMP/zbv_p2.out" && fail "zbv_p2: the tied embedding went through the embedding group" || ok
# the checkpoint of iteration 10 resumes under other layouts (global layer numbering)
echo 10 >"$TMP/zbv.ck/latest_checkpointed_iteration.txt"
for run in 1:1f1b 3:zb-v; do
    p=${run%%:*} s=${run#*:}
    run_np "$p" train $ARGS --pipeline-model-parallel-size $p --pipeline-schedule $s --load "$TMP/zbv.ck" \
        --log-jsonl "$TMP/res$p.jsonl" --save-safetensors "$TMP/res$p.safetensors" >"$TMP/res$p.out" 2>&1 &&
        ok || { fail "zb-v checkpoint resumed at p=$p ($s)"; tail -3 "$TMP/res$p.out" >&2; continue; }
    grep -q '"iteration":11,' "$TMP/res$p.jsonl" && ! grep -q '"iteration":10,' "$TMP/res$p.jsonl" && ok ||
        fail "p=$p: resume should start at iteration 11"
    compare_jsonl <(tail -1 "$TMP/ref.jsonl") <(tail -1 "$TMP/res$p.jsonl") lm_loss 1e-5 && ok ||
        fail "p=$p resumed from zb-v: loss at iteration 20 differs"
    compare_weights "$TMP/ref.safetensors" "$TMP/res$p.safetensors" 2e-2 && ok ||
        fail "p=$p resumed from zb-v: final weights differ"
done
run_np 2 train $ARGS --train-iters 2 --pipeline-model-parallel-size 2 --pipeline-schedule zb-v \
    --trace "$TMP/vtrace.json" >"$TMP/vtrace.out" 2>&1 && ok || fail "zb-v --trace run"
for r in 0 1; do
    for c in 0 1; do
        [ "$(grep -c "\"name\":\"W [0-9]*\.$c\",\"cat\":\"weight\",\"ph\":\"X\",\"pid\":0,\"tid\":$r," "$TMP/vtrace.json")" -eq 16 ] &&
            ok || fail "zb-v trace: rank $r chunk $c should have 2 iterations x 8 W boxes"
    done
done

expect_error() { # expect_error NP "message part" flags... (after $ARGS)
    local np=$1 msg=$2
    shift 2
    expect_np_error "$np" "$msg" $ARGS "$@"
}
expect_error 2 "zb-h1 keeps activations until the weight gradients" --pipeline-model-parallel-size 2 \
    --pipeline-schedule zb-h1 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
expect_error 2 "runs one model chunk per rank" --pipeline-model-parallel-size 2 --pipeline-schedule zb-h1 \
    --virtual-pipeline-model-parallel-size 2
expect_error 2 "zb-v runs two model chunks per rank" --pipeline-model-parallel-size 2 --pipeline-schedule zb-v \
    --virtual-pipeline-model-parallel-size 3
expect_error 1 "zb-v runs two model chunks per rank" --pipeline-schedule zb-v
expect_error 2 "zb-v keeps activations until the weight gradients" --pipeline-model-parallel-size 2 \
    --pipeline-schedule zb-v --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
expect_error 2 "with --pipeline-schedule zb-v (rank 0" --pipeline-model-parallel-size 2 --pipeline-schedule zb-v \
    --decoder-first-pipeline-num-layers 4
expect_error 2 "--zb-costs sets the costs zb-v" --pipeline-model-parallel-size 2 --pipeline-schedule zb-h1 \
    --zb-costs 3,3,2
expect_error 2 "--zb-costs wants three positive integers" --pipeline-model-parallel-size 2 \
    --pipeline-schedule zb-v --zb-costs 3,0,2
finish
