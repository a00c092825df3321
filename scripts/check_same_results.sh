#!/usr/bin/env bash
# check_same_results.sh [BASE_REV] [BUILD]: the fixed jobs below, run by the
# ptdp of BASE_REV (built here from a clean copy into $TMPDIR) and by the one
# in BUILD (default build/), must give bitwise the same results: every
# JSONL record but its timings, every checkpoint file, every export.
#
# Use it around a change that must not change results (a refactoring): run it
# on the same machine for both sides, since bits depend on the CPU (AVX2 and
# AVX-512 sum some rows in different lanes, docs/ARCHITECTURE.md) and on the
# thread count (fixed to 2 here). BASE_REV defaults to the commit before the
# backend/job-description redesign; any revision or branch name works.
#
# The jobs: one process in fp32 with dropout (saved, resumed, exported to
# Hugging Face and to Megatron); t2 p2 v2 d2 with ZeRO-1 (8 ranks, dropout);
# one process in bf16 and in fp16 (loss scaling); t2 d2 in bf16 with
# sequence parallelism; full and selective recomputation under p2.
# About 2 minutes on 2 cores after the two builds.
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
BASE_REV=${1:-c223318e}
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${2:-$SRC/build}" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ptdp-same.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

echo "== building $BASE_REV in $WORK/base"
mkdir -p "$WORK/base"
git -C "$SRC" archive "$BASE_REV" | tar -x -C "$WORK/base"
cmake -S "$WORK/base" -B "$WORK/base/build" -DCMAKE_BUILD_TYPE=Release -DPTDP_CUDA=OFF >/dev/null
cmake --build "$WORK/base/build" -j "$(nproc)" --target ptdp >/dev/null
OLD=$WORK/base/build/ptdp
NEW=$BUILD/ptdp
[ -x "$NEW" ] || { echo "no $NEW: build first (make build)" >&2; exit 2; }

SHAPE=(--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 500)
MODEL=("${SHAPE[@]}" --micro-batch-size 2 --global-batch-size 16 --lr 1e-3 --lr-warmup-iters 2 --lr-decay-iters 8 --mock-data
    --log-interval 1 --eval-interval 3 --eval-iters 2 --seed 7)

# run SIDE NAME NP args...: ptdp train on NP ranks in $WORK/SIDE/NAME
run() {
    local side=$1 name=$2 np=$3
    shift 3
    local bin=$OLD
    [ "$side" = new ] && bin=$NEW
    local dir=$WORK/$side/$name
    mkdir -p "$dir"
    (
        cd "$dir"
        if [ "$np" = 1 ]; then
            OMP_NUM_THREADS=2 "$bin" "$@" >out.txt 2>&1
        else
            OMP_NUM_THREADS=1 mpirun --oversubscribe -np "$np" "$bin" "$@" >out.txt 2>&1
        fi
    ) || { echo "$side/$name failed:" >&2; tail -5 "$dir/out.txt" >&2; exit 1; }
}

jobs_of() {
    local s=$1
    run "$s" fp32 1 train "${MODEL[@]}" --train-iters 6 --save ck --save-interval 3 \
        --log-jsonl log.jsonl --save-safetensors final.safetensors
    run "$s" fp32 1 train "${MODEL[@]}" --train-iters 8 --load ck --save ck2 --log-jsonl resume.jsonl
    run "$s" fp32 1 export --load ck --out export.safetensors
    run "$s" fp32 1 checkpoint export-megatron ck meg --tensor-model-parallel-size 2 \
        --pipeline-model-parallel-size 2
    run "$s" ptd 8 train "${MODEL[@]}" --train-iters 6 --tensor-model-parallel-size 2 \
        --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 \
        --use-distributed-optimizer --save ck --log-jsonl log.jsonl
    run "$s" bf16 1 train "${MODEL[@]}" --train-iters 6 --bf16 --save ck --log-jsonl log.jsonl
    run "$s" fp16 1 train "${MODEL[@]}" --train-iters 6 --fp16 --initial-loss-scale 65536 \
        --save ck --log-jsonl log.jsonl
    run "$s" bf16sp 4 train "${MODEL[@]}" --train-iters 4 --bf16 --tensor-model-parallel-size 2 \
        --sequence-parallel --use-distributed-optimizer --save ck --log-jsonl log.jsonl
    run "$s" recompute 2 train "${MODEL[@]}" --train-iters 4 --pipeline-model-parallel-size 2 \
        --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 \
        --log-jsonl log.jsonl
    run "$s" selective 2 train "${MODEL[@]}" --train-iters 4 --pipeline-model-parallel-size 2 \
        --pipeline-schedule zb-h1 --recompute-granularity selective --log-jsonl log.jsonl
}

echo "== running the jobs with $BASE_REV"
jobs_of old
echo "== running the jobs with $BUILD"
jobs_of new

# Results only: timings and throughput are not results.
strip_times() { sed -E 's/"(elapsed_ms|tokens_per_s|tflops)":[^,}]*,?//g' "$1"; }
bad=0
n=0
while IFS= read -r f; do
    rel=${f#"$WORK/old/"}
    n=$((n + 1))
    case "$rel" in
    */out.txt) continue ;;
    *.jsonl)
        cmp -s <(strip_times "$f") <(strip_times "$WORK/new/$rel") ||
            { echo "differs: $rel"; bad=1; } ;;
    *) cmp -s "$f" "$WORK/new/$rel" || { echo "differs: $rel"; bad=1; } ;;
    esac
done < <(find "$WORK/old" -type f | sort)
missing=$(cd "$WORK/old" && find . -type f | sort | diff - <(cd "$WORK/new" && find . -type f | sort) || true)
[ -z "$missing" ] || { echo "different sets of files:"; echo "$missing"; bad=1; }
if [ "$bad" = 0 ]; then
    echo "same results: $n files of $BASE_REV and of $BUILD bitwise equal (JSONL without timings)"
else
    echo "results differ from $BASE_REV" >&2
    exit 1
fi
