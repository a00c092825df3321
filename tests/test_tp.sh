#!/usr/bin/env bash
# Tensor parallelism, dropout 0.1 (attention-probability masks are drawn by
# global head, so t does not change them): for t in 1..4 the same job gives the same loss and grad
# norm at every one of 20 iterations (1e-5 relative) and the same final
# weights (1e-5 absolute: AdamW divides by sqrt(v), so elements whose gradient
# is ~0 move by fp32 noise x lr); the tensor group's all-reduce count and
# payload are exactly the paper's; bad layouts fail on every rank, status 2.
source "$PTDP_SRC/tests/parallel_lib.sh"

# 12 heads and 4h = 192 divide by 1, 2, 3, 4; V = 300 pads to 384 or 512.
ARGS="--mock-data --num-layers 2 --hidden-size 48 --num-attention-heads 12 --seq-length 16
 --micro-batch-size 2 --global-batch-size 4 --vocab-size 300 --train-iters 20 --lr 1e-3
 --lr-warmup-iters 2 --lr-decay-style cosine --weight-decay 0.1 --hidden-dropout 0.1
 --attention-dropout 0.1 --log-interval 20"

for t in 1 2 3 4; do
    if run_np "$t" train $ARGS --tensor-model-parallel-size "$t" --log-jsonl "$TMP/t$t.jsonl" \
        --save-safetensors "$TMP/t$t.safetensors" --log-comm >"$TMP/t$t.out" 2>&1; then ok; else
        fail "t=$t run failed"; cat "$TMP/t$t.out" >&2; fi
done
for t in 2 3 4; do
    compare_jsonl "$TMP/t1.jsonl" "$TMP/t$t.jsonl" lm_loss 1e-5 && ok || fail "t=$t loss differs from t=1"
    compare_jsonl "$TMP/t1.jsonl" "$TMP/t$t.jsonl" grad_norm 1e-5 && ok || fail "t=$t grad norm differs from t=1"
    "$PTDP_TOOLS/st_compare" "$TMP/t1.safetensors" "$TMP/t$t.safetensors" 1e-5 && ok || fail "t=$t final weights differ"
done

# Per micro-batch on the tensor group: 2 all-reduces of b*s*h per layer
# forward and 2 backward, 1 of b*s*h for the embedding, 3 of b*s for the
# cross-entropy (max, target logit, sum of exponentials) and 1 of b*s*h for
# the output layer's input gradient. l=2, b*s=32, h=48, m=2, 20 iterations.
l=2 N=32 h=48 m=2 iters=20
calls=$(( iters * m * (4 * l + 1 + 3 + 1) ))
bytes=$(( iters * m * 4 * (4 * l * N * h + N * h + 3 * N + N * h) ))
for t in 2 3 4; do
    line=$(grep "^\[0,0,0\] comm tensor *all-reduce" "$TMP/t$t.out")
    got_calls=$(echo "$line" | awk '{print $6}')
    got_bytes=$(echo "$line" | awk '{print $8}')
    [ "$got_calls" = "$calls" ] && ok || fail "t=$t: $got_calls tensor all-reduces, expected $calls"
    [ "$got_bytes" = "$bytes" ] && ok || fail "t=$t: $got_bytes bytes all-reduced, expected $bytes"
done

# Bad layouts: rejected on every rank before any work, status 2.
expect_error() { expect_np_error "$@"; } # NP "message part" args...
SMALL="--mock-data --num-layers 2 --hidden-size 48 --seq-length 16 --train-iters 2 --lr 1e-3"
expect_error 2 "num-attention-heads 3 is not divisible by --tensor-model-parallel-size 2" $SMALL --num-attention-heads 3 --tensor-model-parallel-size 2
expect_error 3 "not a multiple of --tensor-model-parallel-size 2" $SMALL --num-attention-heads 12 --tensor-model-parallel-size 2
expect_error 3 "--ffn-hidden-size 100 is not divisible by --tensor-model-parallel-size 3" $SMALL --num-attention-heads 12 --ffn-hidden-size 100 --tensor-model-parallel-size 3 --micro-batch-size 1
expect_error 4 "global-batch-size 2 is not a multiple" $SMALL --num-attention-heads 12 --tensor-model-parallel-size 2 --micro-batch-size 2 --global-batch-size 2
finish
