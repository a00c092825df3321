# test_llama_cli.sh - the Llama family's flags from the outside: every bad
# input of issue 43 gets one "ptdp: error:" line naming the flag (on every
# rank, status 2, no training): t not dividing the key/value groups, heads
# not divisible by the groups, a SwiGLU width that does not split over t,
# SwiGLU with biases, a GPT checkpoint loaded under Llama flags and the
# reverse, a GPT-2 Hugging Face file under Llama flags and the reverse; and
# a Llama-shaped run with every block on two layouts (t=2 with GQA over t and
# sequence parallelism, p=2) that equals one process. The full matrix is
# test_full_llama_matrix.sh.
source "$PTDP_SRC/tests/script_lib.sh"
export OMP_NUM_THREADS=1

SHAPE="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 128"
LLAMA="--normalization RMSNorm --swiglu --ffn-hidden-size 48 --position-embedding-type rope
  --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights
  --disable-bias-linear"
M="$SHAPE --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --lr-decay-iters 6 --train-iters 3 --mock-data
  --log-interval 1 --seed 5"

# expect_error NP STATUS "text" args...: every one of NP ranks prints the one line
expect_error() {
    local np=$1 want=$2 text=$3
    shift 3
    if [ "$np" = 1 ]; then
        "$PTDP" "$@" >"$tmp/out" 2>"$tmp/err"
    else
        "$MPIRUN" --oversubscribe -np "$np" "$PTDP" "$@" >"$tmp/out" 2>"$tmp/err"
    fi
    local rc=$?
    [[ "$rc" =~ ^($want)$ ]] && ok || bad "ptdp $* exited $rc, want $want"
    [ "$(grep -c 'ptdp: error: ' "$tmp/err")" = "$np" ] && ok ||
        bad "ptdp $*: want $np error lines, got: $(cat "$tmp/err")"
    [ "$(grep -cF -- "$text" "$tmp/err")" = "$np" ] && ok ||
        bad "ptdp $*: message lacks '$text': $(cat "$tmp/err")"
    ! grep -q 'iteration' "$tmp/out" && ok || bad "ptdp $*: trained before failing"
}

expect_error 2 2 "--num-query-groups 3 is not divisible by --tensor-model-parallel-size 2" \
    train $M $LLAMA --num-attention-heads 6 --hidden-size 48 --num-query-groups 3 \
    --tensor-model-parallel-size 2
expect_error 1 2 "--num-attention-heads 4 is not divisible by --num-query-groups 3" \
    train $M $LLAMA --num-query-groups 3
expect_error 2 2 "--swiglu: --ffn-hidden-size 45 is not divisible by --tensor-model-parallel-size 2" \
    train $M $LLAMA --ffn-hidden-size 45 --tensor-model-parallel-size 2
expect_error 1 2 "--swiglu with biases on the linear layers is not supported; add --disable-bias-linear" \
    train $M --swiglu
expect_error 1 2 "--rotary-percent 0.1 of the head size 8 rotates 0 dims" \
    train $M $LLAMA --rotary-percent 0.1

# checkpoints know their blocks: a GPT checkpoint under Llama flags, and the reverse
"$PTDP" train $M --save "$tmp/gpt" >/dev/null 2>&1 || bad "GPT run with --save failed"
"$PTDP" train $M $LLAMA --save "$tmp/llama" >/dev/null 2>&1 || bad "Llama run with --save failed"
expect_error 1 2 "was trained without --normalization RMSNorm but the flags give it (a GPT checkpoint under Llama flags?)" \
    train $M $LLAMA --load "$tmp/gpt" --train-iters 4
expect_error 1 2 "the checkpoint's model uses --normalization RMSNorm but the flags do not (a Llama checkpoint under GPT flags?)" \
    train $M --load "$tmp/llama" --train-iters 4
expect_error 1 2 "the checkpoint's model has 2 key/value groups (--num-query-groups) but the flags give 4" \
    train $M $LLAMA --num-query-groups 4 --load "$tmp/llama" --train-iters 4
# and resume: 3 iterations, then 3 more from the checkpoint, equal to 6 at once
"$PTDP" train $M $LLAMA --load "$tmp/llama" --save "$tmp/llama" --train-iters 6 \
    --log-jsonl "$tmp/resumed.jsonl" >/dev/null 2>&1 || bad "Llama resume failed"
"$PTDP" train $M $LLAMA --train-iters 6 --log-jsonl "$tmp/straight.jsonl" >/dev/null 2>&1 ||
    bad "Llama run of 6 failed"
last() { tail -1 "$1" | sed 's/"elapsed_ms":[^,]*,//; s/"tokens_per_s":[^,]*,//; s/"tflops":[^,]*,//'; }
[ -s "$tmp/resumed.jsonl" ] && [ "$(last "$tmp/resumed.jsonl")" = "$(last "$tmp/straight.jsonl")" ] &&
    ok || bad "Llama resume differs: $(last "$tmp/resumed.jsonl") vs $(last "$tmp/straight.jsonl")"

# Hugging Face files of the other family
expect_error 1 2 "is a GPT-2 file (transformer.wte.weight) but the model flags give a Llama-family model" \
    train $M $LLAMA --init-from "$PTDP_SRC/tests/fixtures/gpt_a.safetensors" --allow-extra-tensors
expect_error 1 2 "is a Llama file (model.embed_tokens.weight) but the model flags give a GPT-2 model" \
    train $M --init-from "$PTDP_SRC/tests/fixtures/llama_a.safetensors" --allow-extra-tensors

# one process against t=2 (groups over t, sequence parallelism) and p=2: the same losses and norms
"$PTDP" train $M $LLAMA --hidden-dropout 0.1 --attention-dropout 0.1 \
    --log-jsonl "$tmp/one.jsonl" >/dev/null 2>&1 || bad "one-process Llama run failed"
"$MPIRUN" --oversubscribe -np 2 "$PTDP" train $M $LLAMA --hidden-dropout 0.1 --attention-dropout 0.1 \
    --tensor-model-parallel-size 2 --sequence-parallel --log-jsonl "$tmp/t2.jsonl" >/dev/null 2>&1 ||
    bad "t=2 Llama run failed"
"$MPIRUN" --oversubscribe -np 2 "$PTDP" train $M $LLAMA --hidden-dropout 0.1 --attention-dropout 0.1 \
    --pipeline-model-parallel-size 2 --log-jsonl "$tmp/p2.jsonl" >/dev/null 2>&1 ||
    bad "p=2 Llama run failed"
for run in t2 p2; do
    python3 - "$tmp/one.jsonl" "$tmp/$run.jsonl" <<'PY' && ok || bad "$run differs from one process"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 3, (len(a), len(b))
for x, y in zip(a, b):
    for k in ("lm_loss", "grad_norm"):
        assert abs(x[k] - y[k]) <= 1e-5 * abs(x[k]), (k, x[k], y[k])
PY
done
finish
