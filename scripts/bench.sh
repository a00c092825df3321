#!/usr/bin/env bash
# bench.sh BUILD_DIR - `make bench`: this machine's peaks (bench_peak), the
# GEMM candidates (bench_gemm), the layer's memory-bound kernels
# (bench_kernels), then whole training iterations (bench_train) with
# "% of peak" measured against the best oneDNN GEMM rate bench_peak found.
# Prints every JSON line and appends them to out/bench.jsonl, each batch
# preceded by a {"bench":"env",...} line recording the machine state.
# Extra arguments for bench_train go in BENCH_TRAIN_ARGS (e.g.
# BENCH_TRAIN_ARGS="--config a" for a quick run); the default runs a, b, c, d.
set -eu
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
case $build in /*) ;; *) build=$PWD/$build ;; esac
if [ ! -x "$build/bench_train" ]; then
    echo "bench.sh: $build/bench_train is missing; run 'make build' first" >&2
    exit 1
fi
mkdir -p "$root/out"
log=$root/out/bench.jsonl

emit() { # prints the JSON lines of stdin and appends them to the log
    grep '^{' | tee -a "$log"
}

threads=${OMP_NUM_THREADS:-$(nproc)}
load=$(cut -d' ' -f1-3 /proc/loadavg)
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //; s/"//g')
printf '{"bench":"env","date":"%s","host":"%s","cpu":"%s","nproc":%s,"OMP_NUM_THREADS":"%s","OPENBLAS_CORETYPE":"%s","OPENBLAS_L2_SIZE":"%s","loadavg":"%s","git":"%s"}\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(hostname)" "$cpu" "$(nproc)" "${OMP_NUM_THREADS:-}" "${OPENBLAS_CORETYPE:-}" "${OPENBLAS_L2_SIZE:-}" \
    "$load" "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" | emit

peak=0
if [ -x "$build/bench_peak" ]; then
    echo "== bench_peak (threads: $threads)" >&2
    "$build/bench_peak" | emit >"$root/out/.bench_peak.$$"
    cat "$root/out/.bench_peak.$$"
    # The best oneDNN GEMM rate: the yardstick bench_train's default GEMM can reach.
    peak=$(grep '"bench":"gemm_peak"' "$root/out/.bench_peak.$$" | grep '"lib":"onednn"' |
        sed 's/.*"gflops":\([0-9.]*\).*/\1/' | sort -g | tail -1)
    rm -f "$root/out/.bench_peak.$$"
    peak=${peak:-0}
fi
if [ -x "$build/bench_gemm" ]; then
    echo "== bench_gemm" >&2
    "$build/bench_gemm" | emit
fi
if [ -x "$build/bench_kernels" ]; then
    echo "== bench_kernels" >&2
    "$build/bench_kernels" | emit
fi
echo "== bench_train (peak ${peak} GFLOP/s)" >&2
# shellcheck disable=SC2086
"$build/bench_train" --peak-gflops "$peak" ${BENCH_TRAIN_ARGS:-} | emit
echo "== appended to $log" >&2
