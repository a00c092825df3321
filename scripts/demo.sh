#!/usr/bin/env bash
# demo.sh BUILD_DIR - `make demo`: a small end-to-end run on one machine.
# 1. writes a structured token stream (16 fixed 16-token "phrases" in random
#    order, tokens from a 512-word vocabulary) to out/demo_tokens.bin;
# 2. trains a 4-layer GPT (h=256, s=128, b=8) on it for 200 iterations
#    (20-60 s on 2 cores), logging every 10 iterations and every
#    iteration as JSON to out/demo_train.jsonl;
# 3. prints the first and last loss, and writes the weights as Hugging Face
#    GPT-2 safetensors: out/demo.safetensors with out/config.json.
# The loss starts near ln(512) = 6.2 and falls towards ln(16)/16 = 0.17, the
# floor set by the random order of the phrases. (Real text arrives when the
# data pipeline is wired into `ptdp train`.)
set -eu
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
case $build in /*) ;; *) build=$PWD/$build ;; esac
ptdp=$build/ptdp
if [ ! -x "$ptdp" ]; then
    echo "demo.sh: $ptdp is missing; run 'make build' first" >&2
    exit 1
fi
out=$root/out
mkdir -p "$out"
ITERS=${DEMO_ITERS:-200}

echo "== 1. data: a structured token stream"
bash "$root/scripts/make_pattern_tokens.sh" "$out/demo_tokens.bin" 200000 phrases 16 16 512 42
echo "wrote $out/demo_tokens.bin ($(($(wc -c <"$out/demo_tokens.bin") / 2)) uint16 tokens: 16 phrases of 16 tokens, vocabulary 512)"
echo

echo "== 2. train: GPT l=4 h=256 a=4 s=128 b=8, $ITERS iterations"
set -x
"$ptdp" train \
    --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 \
    --micro-batch-size 8 --vocab-size 512 --token-file "$out/demo_tokens.bin" \
    --train-iters "$ITERS" --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 10 --lr-decay-style cosine \
    --hidden-dropout 0 --attention-dropout 0 \
    --log-interval 10 --log-jsonl "$out/demo_train.jsonl" \
    --save-safetensors "$out/demo.safetensors"
{ set +x; } 2>/dev/null
echo

echo "== 3. summary"
loss() { sed 's/.*"lm_loss":\([-0-9.eE+naif]*\).*/\1/' "$out/demo_train.jsonl" | sed -n "$1"; }
first=$(loss 1p)
last=$(loss '$p')
ms=$(sed 's/.*"elapsed_ms":\([0-9.]*\).*/\1/' "$out/demo_train.jsonl" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
echo "first loss $first, last loss $last (floor about 0.17); median $ms ms per iteration"
echo "per-iteration log: $out/demo_train.jsonl"
echo "weights:           $out/demo.safetensors (Hugging Face GPT-2 layout) and $out/config.json"
if ! awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < 0.5 * f) }'; then
    echo "demo.sh: the loss did not fall as expected" >&2
    exit 1
fi
