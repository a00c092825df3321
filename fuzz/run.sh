#!/usr/bin/env bash
# `make fuzz`: builds the libFuzzer harnesses with clang under ASan + UBSan
# (build-fuzz/, -DPTDP_FUZZ=ON) and runs each for FUZZ_SECONDS (default 60),
# one at a time, in one process each. FUZZ_RUNS=N runs N executions instead;
# FUZZ_ONLY="bpe idx" picks harnesses. New inputs go to build-fuzz/corpus/NAME
# (the committed seeds in fuzz/corpus/NAME are read, never written); a crash
# leaves build-fuzz/artifacts/NAME-crash-* and stops with exit 1. Each run's
# last lines (executions, exec/s) are kept in build-fuzz/logs/NAME.log.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${FUZZ_BUILD:-build-fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-60}
NAMES=${FUZZ_ONLY:-"safetensors manifest idx bpe config jsonl decode_ids token_file pickle zip torch"}
if ! command -v clang >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
    bash scripts/setup.sh fuzz
fi
if [ ! -f "$B/CMakeCache.txt" ]; then
    CC=clang cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTDP_FUZZ=ON -DPTDP_CUDA=OFF >/dev/null
fi
targets=()
for n in $NAMES; do targets+=("fuzz_$n"); done
cmake --build "$B" -j "${JOBS:-$(nproc)}" --target "${targets[@]}"
mkdir -p "$B/artifacts" "$B/logs"
status=0
for n in $NAMES; do
    mkdir -p "$B/corpus/$n"
    dict=()
    case $n in manifest | config | jsonl | safetensors | bpe) dict=(-dict=fuzz/json.dict) ;; esac
    limit=(-max_total_time="$SECONDS_EACH")
    [ -n "${FUZZ_RUNS:-}" ] && limit=(-runs="$FUZZ_RUNS")
    echo "fuzz: $n (${FUZZ_RUNS:-$SECONDS_EACH s}${FUZZ_RUNS:+ runs})"
    if ! "$B/fuzz/fuzz_$n" "${limit[@]}" -max_len=65536 -rss_limit_mb=4096 -print_final_stats=1 \
        "${dict[@]}" -artifact_prefix="$B/artifacts/$n-" "$B/corpus/$n" "fuzz/corpus/$n" \
        >"$B/logs/$n.log" 2>&1; then
        echo "fuzz: $n FAILED; see $B/logs/$n.log and $B/artifacts/$n-*" >&2
        tail -40 "$B/logs/$n.log" >&2
        status=1
        continue
    fi
    grep -E "^stat::number_of_executed_units|^stat::average_exec_per_sec|^stat::new_units_added" "$B/logs/$n.log" |
        sed "s/^/fuzz: $n /"
done
exit $status
