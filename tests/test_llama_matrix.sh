#!/usr/bin/env bash
# The invariance matrix with the Llama family's blocks (issue 43): one model
# with RMSNorm, SwiGLU, rotary embeddings, 6 query heads over 2 key/value
# groups, an untied output layer and no biases (4 layers, h=48, ffn 64, V=300
# padded per t, s=16), dropout 0.1, B=8, 10 iterations, under layouts with
# t in {1, 2} (SwiGLU's gate and up split by columns, the groups over t), p in
# {1, 2} with and without interleaving, d = 2 with ZeRO-1, sequence
# parallelism, selective and full recomputation and zero-bubble schedules:
# each gives the single process's loss and grad norm (1e-5 relative) and its
# final weights (1e-5 absolute), and its memory plan equals the planner's.
# bf16 layouts equal the single-process bf16 run within test_mixed_precision.sh's
# tolerances (loss 2^-9, grad norm 2^-7). The fast suite runs a few layouts;
# MATRIX=full (test_full_llama_matrix.sh) runs them all.
source "$PTDP_SRC/tests/parallel_lib.sh"

ARGS="--mock-data --num-layers 4 --hidden-size 48 --num-attention-heads 6 --seq-length 16
 --normalization RMSNorm --swiglu --ffn-hidden-size 64 --position-embedding-type rope
 --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear
 --global-batch-size 8 --vocab-size 300 --train-iters 10 --lr 1e-3 --lr-warmup-iters 2
 --lr-decay-style cosine --weight-decay 0.1 --adam-eps 1e-8 --hidden-dropout 0.1 --attention-dropout 0.1
 --log-interval 100 --check-dp-replicas"

run_np 1 train $ARGS --micro-batch-size 1 --log-jsonl "$TMP/ref.jsonl" --save-safetensors "$TMP/ref.safetensors" \
    >"$TMP/ref.out" 2>&1 && ok || { fail "single process"; cat "$TMP/ref.out" >&2; }
check_plan "$TMP/ref.out" 1 && ok || fail "single process: memory plan differs from the prediction"

RCU="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
RCS="--recompute-granularity selective"
ZERO=--use-distributed-optimizer
V2=--virtual-pipeline-model-parallel-size
SP=--sequence-parallel
# name : t p d : extra flags
MATRIX_FAST=(
    "t2p2d2_interleaved_zero_sp:2 2 2:--micro-batch-size 1 $V2 2 $ZERO $SP"
)
MATRIX_FULL=(
    "t2p1d1_selective_b2:2 1 1:--micro-batch-size 2 $RCS"
    "t1p2d1_1f1b:1 2 1:--micro-batch-size 1"
    "t2p1d1:2 1 1:--micro-batch-size 1"
    "t1p1d2_zero:1 1 2:--micro-batch-size 1 $ZERO"
    "t2p2d1_interleaved_rcu:2 2 1:--micro-batch-size 1 $V2 2 $RCU"
    "t1p2d2_interleaved_zero_selective:1 2 2:--micro-batch-size 2 $V2 2 $ZERO $RCS"
    "t2p1d2_sp_rcu_b2:2 1 2:--micro-batch-size 2 $SP $RCU"
    "t2p2d1_gpipe_sp:2 2 1:--micro-batch-size 1 --pipeline-schedule gpipe $SP"
    "t1p2d2_zbh1_zero:1 2 2:--micro-batch-size 1 --pipeline-schedule zb-h1 $ZERO"
    "t2p2d1_zbv_b2:2 2 1:--micro-batch-size 2 --pipeline-schedule zb-v"
)
entries=("${MATRIX_FAST[@]}")
[ "${MATRIX:-fast}" = full ] && entries+=("${MATRIX_FULL[@]}")
for entry in "${entries[@]}"; do
    IFS=: read -r name tpd flags <<<"$entry"
    read -r t p d <<<"$tpd"
    run_vs_ref "$name" $((t * p * d)) $ARGS --tensor-model-parallel-size "$t" \
        --pipeline-model-parallel-size "$p" $flags || continue
    check_plan "$TMP/$name.out" "$p" && ok || fail "$name: memory plan differs from the prediction"
done

# bf16: layouts against the single-process bf16 run
run_np 1 train $ARGS --bf16 --micro-batch-size 1 --log-jsonl "$TMP/ref16.jsonl" >"$TMP/ref16.out" 2>&1 &&
    ok || { fail "single process bf16"; tail -5 "$TMP/ref16.out" >&2; }
check_plan "$TMP/ref16.out" 1 && ok || fail "bf16 single process: memory plan differs"
B16=("t2p2d1_bf16_sp:2 2 1:--micro-batch-size 1 $SP")
[ "${MATRIX:-fast}" = full ] && B16+=("t2p1d2_bf16_zero_selective:2 1 2:--micro-batch-size 2 $ZERO $RCS"
    "t1p2d2_bf16_interleaved:1 2 2:--micro-batch-size 1 $V2 2")
for entry in "${B16[@]}"; do
    IFS=: read -r name tpd flags <<<"$entry"
    read -r t p d <<<"$tpd"
    if ! run_np $((t * p * d)) train $ARGS --bf16 --tensor-model-parallel-size "$t" \
        --pipeline-model-parallel-size "$p" $flags --log-jsonl "$TMP/$name.jsonl" >"$TMP/$name.out" 2>&1; then
        fail "$name: run failed"
        tail -5 "$TMP/$name.out" >&2
        continue
    fi
    compare_jsonl "$TMP/ref16.jsonl" "$TMP/$name.jsonl" lm_loss 0.001953125 && ok || fail "$name: loss differs"
    compare_jsonl "$TMP/ref16.jsonl" "$TMP/$name.jsonl" grad_norm 0.0078125 && ok || fail "$name: grad norm differs"
    check_plan "$TMP/$name.out" "$p" && ok || fail "$name: memory plan differs from the prediction"
done
finish
