#!/usr/bin/env bash
# Pipeline parallelism: GPipe, 1F1B and interleaved 1F1B for p in {2,3,4},
# v in {1,2,3}, and combined with t=2, give the same loss and grad norm as one
# process at every one of 20 iterations (1e-5 relative) and the same final
# weights (1e-5 absolute), at Megatron's --adam-eps 1e-8. One slice is exempt:
# the K third of each c_attn.bias has an analytically zero gradient (the
# softmax cancels q.b_k), so AdamW may turn its fp32 rounding noise into steps
# of up to about lr; it is held to lr x iterations = 2e-2 (compare_weights).
# Also: the --trace file, invalid layouts and uneven stage splits (status 2
# on every rank, Megatron's rules), and a
# rank that dies bringing the job down instead of hanging.
source "$PTDP_SRC/tests/parallel_lib.sh"

ARGS="--mock-data --num-layers 12 --hidden-size 48 --num-attention-heads 12 --seq-length 16
 --micro-batch-size 1 --global-batch-size 12 --vocab-size 300 --train-iters 20 --lr 1e-3
 --lr-warmup-iters 2 --weight-decay 0.1 --adam-eps 1e-8 --hidden-dropout 0 --attention-dropout 0
 --log-interval 20"

run_np 1 train $ARGS --log-jsonl "$TMP/ref.jsonl" --save-safetensors "$TMP/ref.safetensors" >"$TMP/ref.out" 2>&1 &&
    ok || { fail "single-process run"; cat "$TMP/ref.out" >&2; }

check() { # check NAME NP flags...
    local name=$1 np=$2
    shift 2
    run_vs_ref "$name" "$np" $ARGS "$@"
}
# 12 layers: v = 2 for p = 2 and 3, v = 3 for p = 4 (one layer per model chunk)
for p in 2 3 4; do
    v=$((p == 4 ? 3 : 2)) trace=()
    [ $p = 2 ] && trace=(--trace "$TMP/trace.json") # checked below
    check "gpipe_p$p" $p --pipeline-model-parallel-size $p --pipeline-schedule gpipe
    check "1f1b_p$p" $p --pipeline-model-parallel-size $p --pipeline-schedule 1f1b "${trace[@]}"
    check "interleaved_p${p}_v$v" $p --pipeline-model-parallel-size $p --virtual-pipeline-model-parallel-size $v
done
check "t2_1f1b_p2" 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
check "t2_gpipe_p2" 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --pipeline-schedule gpipe
check "t2_interleaved_p2_v2" 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
    --num-layers-per-virtual-pipeline-stage 3

# The trace of 1f1b_p2: one track per rank with forward and backward boxes.
for r in 0 1; do
    grep -q "\"name\":\"rank $r " "$TMP/trace.json" && ok || fail "trace has no track for rank $r"
    [ "$(grep -c "\"tid\":$r,.*\"cat\":\"forward\"\|\"cat\":\"forward\".*\"tid\":$r," "$TMP/trace.json")" -eq 240 ] && ok ||
        fail "trace: rank $r should have 20 iterations x 12 forwards"
done

# Invalid layouts: status 2 and the message from every rank, before any work.
expect_error() { # expect_error NP "message part" flags... (after $ARGS)
    local np=$1 msg=$2
    shift 2
    expect_np_error "$np" "$msg" $ARGS "$@"
}
expect_error 2 "interleaved schedule needs the number of micro-batches (5" --pipeline-model-parallel-size 2 \
    --virtual-pipeline-model-parallel-size 2 --global-batch-size 5
expect_error 3 "num-layers 12 is not divisible by --pipeline-model-parallel-size 3 x virtual stages 3" \
    --pipeline-model-parallel-size 3 --virtual-pipeline-model-parallel-size 3
expect_error 1 "need --pipeline-model-parallel-size > 1" --virtual-pipeline-model-parallel-size 2
expect_error 2 "need the interleaved schedule" --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 \
    --pipeline-schedule 1f1b
# Uneven stages (docs/schedules.md): Megatron's rules, each with its message.
PP2="--pipeline-model-parallel-size 2"
expect_error 2 "decoder-first-pipeline-num-layers 3 is not divisible by the virtual pipeline size 2" $PP2 \
    --virtual-pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 3
expect_error 2 "decoder-first/last-pipeline-num-layers .10, 6. add up to more than --num-layers 12" $PP2 \
    --decoder-first-pipeline-num-layers 10 --decoder-last-pipeline-num-layers 6
expect_error 2 "num-layers 12 + 1 must be divisible by --pipeline-model-parallel-size 2" $PP2 \
    --account-for-loss-in-pipeline-split
expect_error 2 "cannot be combined with --account-for-embedding/loss-in-pipeline-split" $PP2 \
    --decoder-last-pipeline-num-layers 5 --account-for-embedding-in-pipeline-split
expect_error 2 "layout has 2 transformer layers t; --num-layers is 12" $PP2 --pipeline-model-parallel-layout "Et|tL"
expect_error 2 "the embedding E must be the first entry" $PP2 --pipeline-model-parallel-layout "tE|t*11,L"
expect_error 2 "the loss L must be the last entry" $PP2 --pipeline-model-parallel-layout "Et*6|Lt*6"
expect_error 2 "layout has 3 stages, not a multiple of --pipeline-model-parallel-size 2" $PP2 \
    --pipeline-model-parallel-layout "Et*4|t*4|t*4L"
expect_error 2 "virtual-pipeline-model-parallel-size 3 conflicts with --pipeline-model-parallel-layout" $PP2 \
    --virtual-pipeline-model-parallel-size 3 --pipeline-model-parallel-layout "Et*3|t*3|t*3|t*3L"
expect_error 2 "stage 1 is empty" $PP2 --pipeline-model-parallel-layout "Et*6||t*3|t*3L"
expect_error 1 "need --pipeline-model-parallel-size > 1" --decoder-first-pipeline-num-layers 4

# A rank that dies takes the job down (non-zero status, a message), no hang.
start=$(date +%s)
PTDP_FAULT=die@1:3 timeout 60 "$MPIRUN" --oversubscribe -np 2 -x PTDP_FAULT \
    "$PTDP" train $ARGS --pipeline-model-parallel-size 2 >"$TMP/die.out" 2>&1
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && ok || fail "job with a dead rank: status $rc (124 = hung until timeout)"
grep -q "rank 1 dies at iteration 3" "$TMP/die.out" && ok || fail "no message from the dying rank"
[ $(($(date +%s) - start)) -lt 60 ] && ok || fail "the job took too long to come down"
# A rank that fails to start (before any collective) takes every rank down
# with a message, no hang.
PTDP_FAULT=start@1 timeout 60 "$MPIRUN" --oversubscribe -np 2 -x PTDP_FAULT "$PTDP" train $ARGS \
    --pipeline-model-parallel-size 2 >"$TMP/start.out" 2>&1
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && ok || fail "a rank failing at start: status $rc (124 = hung)"
grep -q "rank 1 fails to start" "$TMP/start.out" && grep -q "another rank failed to start" "$TMP/start.out" && ok ||
    fail "failing start: expected the failing rank's message and the others' 'another rank failed to start'"
finish
