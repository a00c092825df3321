# test_train_learns.sh - `ptdp train` learns: on a token file holding the
# pattern 0 1 .. 15 repeated, a small GPT's loss must fall below 30% of its
# first value within 60 iterations; as a control, on --mock-data (hashed
# tokens, nothing to learn) it must stay near ln(V). Loss values come from
# --log-jsonl. Dropout is off so the run is deterministic.
source "$PTDP_SRC/tests/script_lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

bash "$PTDP_SRC/scripts/make_pattern_tokens.sh" "$tmp/pattern.bin" 4096 count 16 &&
    [ "$(wc -c <"$tmp/pattern.bin")" -eq 8192 ] && ok || bad "make_pattern_tokens.sh failed"
[ "$(od -An -tu2 -j 30 -N 4 "$tmp/pattern.bin" | tr -s ' ')" = " 15 0" ] && ok || bad "pattern bytes are wrong"

MODEL="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 4 --vocab-size 64
    --lr 3e-3 --hidden-dropout 0 --attention-dropout 0 --log-interval 20"

losses() { sed 's/.*"lm_loss":\([-0-9.eE+naif]*\).*/\1/' "$1" | tr '\n' ' '; }

"$PTDP" train $MODEL --train-iters 60 --token-file "$tmp/pattern.bin" --log-jsonl "$tmp/pattern.jsonl" \
    >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && ok || bad "training on the pattern failed: $(cat "$tmp/err")"
[ "$(wc -l <"$tmp/pattern.jsonl")" -eq 60 ] && ok || bad "want 60 JSON lines"
l=$(losses "$tmp/pattern.jsonl")
echo "$l" | awk '{ if (!($1 > 3 && $1 < 5)) exit 1; if (!($NF < 0.3 * $1)) exit 1 }' && ok ||
    bad "pattern not learned: first loss should be near ln 64 = 4.16 and the last below 30% of it; losses: $l"
# The loss at the end is far below the loss after 10 iterations, not just noise.
echo "$l" | awk '{ if (!($60 < 0.5 * $10)) exit 1 }' && ok || bad "loss stopped falling early: $l"

"$PTDP" train $MODEL --train-iters 30 --mock-data --log-jsonl "$tmp/mock.jsonl" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && ok || bad "training on mock data failed: $(cat "$tmp/err")"
l=$(losses "$tmp/mock.jsonl")
echo "$l" | awk '{ if (!($NF > 0.8 * log(64))) exit 1 }' && ok || bad "mock data (random tokens) should not be learnable: $l"

finish
