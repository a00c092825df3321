#!/usr/bin/env bash
# run.sh - everything ptdp checks on the GPU machine, in one call of at most
# about 5 minutes, each step under its own time limit, every result under
# $OUT (default ./gpu-out): what the card is, the CUDA op tests (against the
# CPU backend on the same inputs), compute-sanitizer's memcheck and racecheck
# on them, the golden tests, a short GPT-2-124M training run, the GEMM
# benchmark and PyTorch on the same model. Needs .gpu/ from
# scripts/gpu/prepare.sh (built on the development machine), the GPU
# machine's CUDA 13 and PyTorch. A step that fails or times out is recorded
# in $OUT/summary.txt and the next one runs.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
[ -d .gpu ] || { echo "run.sh: no .gpu/: run scripts/gpu/prepare.sh first (and carry .gpu)" >&2; exit 2; }
mkdir -p .gpu/lib && tar xzf .gpu/libs.tgz -C .gpu/lib
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PTDP_SOURCE_DIR=$PWD OMP_NUM_THREADS=${OMP_NUM_THREADS:-16}
BIN=$PWD/.gpu/bin
summary=$OUT/summary.txt
echo "revision $(cat .gpu/revision), $(date -u +%FT%TZ)" >"$summary"

# step NAME LIMIT_S COMMAND...: runs it with stdout and stderr in $OUT/NAME.txt
step() {
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
    local rc=$?
    local what=ok
    [ "$rc" = 0 ] || what="status $rc"
    [ "$rc" = 124 ] && what="timed out after ${limit} s"
    [ "$rc" = 77 ] && what="skipped"
    printf '%-22s %-24s %4d s  %s\n' "$name" "$what" $((SECONDS - t0)) "$(tail -1 "$OUT/$name.txt")" >>"$summary"
}

step gpu 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
step test_cuda_ops 120 "$BIN/test_cuda_ops"
step test_golden_cuda 120 "$BIN/test_golden_cuda"
if command -v compute-sanitizer >/dev/null; then
    step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 1 "$BIN/test_cuda_ops"
    step racecheck 150 compute-sanitizer --tool racecheck --error-exitcode 1 "$BIN/test_cuda_ops"
fi
# GPT-2 124M (l=12 h=768 a=12 s=1024 V=50257), mock data, 8 micro-batches of 8
step train_124m 150 "$BIN/ptdp" train --device cuda --num-layers 12 --hidden-size 768 \
    --num-attention-heads 12 --seq-length 1024 --micro-batch-size 8 --global-batch-size 8 \
    --train-iters 8 --lr 6e-4 --mock-data --log-interval 1 --eval-iters 0 \
    --hidden-dropout 0 --attention-dropout 0 --log-jsonl "$OUT/train_124m.jsonl"
step bench_cuda_gemm 60 "$BIN/bench_cuda_gemm" --n 8192 --reps 10
step torch_124m 180 python3 scripts/reference/bench_torch_gpu.py --micro-batch 8
cat "$summary"
