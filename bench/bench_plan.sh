#!/usr/bin/env bash
# bench_plan.sh - the planner's `local` description against ptdp's own runs:
# for layouts of configurations (b) and (c) of docs/performance.md (t, p, d up
# to 8 ranks, each schedule, recomputation), prints the predicted iteration
# time and memory per device (`ptdp plan --cluster local --json`, every size
# pinned) next to `ptdp train`'s measured median iteration time and the
# memory plan the run allocated (the largest "memory plan total" of its
# ranks), one JSON line per layout and a table at the end. Not a test: the
# times depend on the machine and on what else runs on it.
#
# usage: bench/bench_plan.sh [BUILD_DIR] [--iters N] [--cluster NAME|FILE] [--bf16|--fp16]
#                            [--compare NAME|FILE]
#   BUILD_DIR: where ptdp is (default: build); N timed iterations (default 5,
#   after 2 warm-up iterations); the cluster defaults to local; --bf16/--fp16
#   plan and train every layout in that precision (ptdp's CPU 16-bit runs);
#   --compare adds a second description's predictions of the same runs (two
#   calibrations, or two models, judged on one set of measurements).
set -u
build=build
iters=5
cluster=local
compare=""
prec=""
while [ $# -gt 0 ]; do
    case $1 in
    --iters) iters=$2; shift 2 ;;
    --bf16|--fp16) prec=$1; shift ;;
    --cluster) cluster=$2; shift 2 ;;
    --compare) compare=$2; shift 2 ;;
    *) build=$1; shift ;;
    esac
done
ptdp=$build/ptdp
[ -x "$ptdp" ] || { echo "bench_plan: $ptdp not found (build first)" >&2; exit 1; }
mpirun=${MPIRUN:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

model_b="--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --vocab-size 8192"
model_c="--num-layers 6 --hidden-size 384 --num-attention-heads 6 --seq-length 256 --vocab-size 50304"
# config ranks t p v b B schedule recompute(none|full)
layouts=(
    "b 1 1 1 1 8 16 - none"
    "b 2 2 1 1 8 16 - none"
    "b 2 1 2 1 8 16 1f1b none"
    "b 2 1 1 1 8 16 - none"
    "b 2 1 2 1 4 16 gpipe full"
    "b 4 2 2 1 4 16 1f1b full"
    "b 4 1 2 2 4 16 interleaved none"
    "b 4 1 4 1 4 16 1f1b none"
    "b 8 2 2 1 4 16 1f1b none"
    "c 1 1 1 1 4 8 - none"
    "c 2 2 1 1 4 8 - none"
    "c 2 1 2 1 2 8 1f1b full"
    "c 4 2 2 1 2 8 1f1b none"
    "c 8 2 2 1 2 8 1f1b full"
)
rows=()
for lay in "${layouts[@]}"; do
    read -r cfg n t p v b B sched rc <<<"$lay"
    model=$model_b
    [ "$cfg" = c ] && model=$model_c
    flags="$model --global-batch-size $B --micro-batch-size $b --tensor-model-parallel-size $t --pipeline-model-parallel-size $p $prec"
    [ "$v" -gt 1 ] && flags="$flags --virtual-pipeline-model-parallel-size $v"
    [ "$sched" != - ] && flags="$flags --pipeline-schedule $sched"
    if [ "$rc" = full ]; then
        flags="$flags --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
        planrc=""
    else
        planrc="--no-recompute"
    fi
    # shellcheck disable=SC2086
    # ptdp train gives each rank (cores / ranks) threads: the attention scratch counts them
    threads=$(($(nproc) / n))
    [ "$threads" -lt 1 ] && threads=1
    # --even-stages-only: ptdp train below splits the layers evenly
    if ! "$ptdp" plan --cluster "$cluster" --num-devices "$n" $flags $planrc --threads "$threads" --even-stages-only \
        --virtual-pipeline-model-parallel-size "$v" --json >"$tmp/plan.json" 2>"$tmp/plan.err"; then
        echo "bench_plan: plan failed for '$lay': $(cat "$tmp/plan.err")" >&2
        continue
    fi
    echo '{"layouts":[{"iteration_s":0}]}' >"$tmp/plan2.json"
    # shellcheck disable=SC2086
    if [ -n "$compare" ] && ! "$ptdp" plan --cluster "$compare" --num-devices "$n" $flags $planrc --threads "$threads" \
        --even-stages-only --virtual-pipeline-model-parallel-size "$v" --json >"$tmp/plan2.json" 2>"$tmp/plan.err"; then
        echo "bench_plan: plan --cluster $compare failed for '$lay': $(cat "$tmp/plan.err")" >&2
        continue
    fi
    # shellcheck disable=SC2086
    # one rank runs without mpirun: Open MPI would bind it to one core
    launch=("$mpirun" --bind-to none -np "$n") # each rank takes cores / ranks threads
    [ "$n" -eq 1 ] && launch=()
    if ! timeout 900 "${launch[@]}" "$ptdp" train $flags --mock-data --train-iters $((iters + 2)) --lr 1e-4 \
        --hidden-dropout 0 --attention-dropout 0 --log-interval 1 --log-jsonl "$tmp/run.jsonl" >"$tmp/run.out" 2>&1; then
        echo "bench_plan: train failed for '$lay': $(tail -3 "$tmp/run.out")" >&2
        continue
    fi
    line=$(python3 - "$tmp/plan.json" "$tmp/run.jsonl" "$tmp/run.out" "$lay" "${prec:---fp32}" "$tmp/plan2.json" <<'PY'
import json, re, statistics, sys
plan = json.load(open(sys.argv[1]))["layouts"][0]
plan2 = json.load(open(sys.argv[6]))["layouts"][0]
its = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
ms = statistics.median([x["elapsed_ms"] for x in its[2:]])
mem = max(int(m) for m in re.findall(r"memory plan total .*?\((\d+) bytes\)", open(sys.argv[3]).read()))
cfg, n, t, p, v, b, B, sched, rc = sys.argv[4].split()
out = dict(config=cfg, ranks=int(n), t=int(t), p=int(p), d=plan["d"], v=int(v), b=int(b), B=int(B),
           schedule=plan["schedule"], recompute=rc, precision=sys.argv[5][2:],
           predicted_ms=round(plan["iteration_s"] * 1e3, 1), measured_ms=round(ms, 1),
           time_error=round(plan["iteration_s"] * 1e3 / ms - 1, 4),
           predicted_bytes=int(plan["memory_bytes_per_device"]), measured_plan_bytes=mem,
           memory_error=round(plan["memory_bytes_per_device"] / mem - 1, 4),
           load=float(open("/proc/loadavg").read().split()[0]))
if plan2["iteration_s"] > 0:
    out.update(compare_predicted_ms=round(plan2["iteration_s"] * 1e3, 1),
               compare_time_error=round(plan2["iteration_s"] * 1e3 / ms - 1, 4))
print(json.dumps(out))
PY
)
    echo "$line"
    rows+=("$line")
done
printf '%s\n' "${rows[@]}" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
print("\n%-3s %2s %2s %2s %2s %2s %2s %-11s %-4s %10s %10s %7s %7s" % ("cfg", "n", "t", "p", "d", "v", "b", "schedule", "rc", "pred ms", "meas ms", "time", "memory"))
for r in rows:
    print("%-3s %2d %2d %2d %2d %2d %2d %-11s %-4s %10.1f %10.1f %+6.1f%% %+6.1f%%" % (r["config"], r["ranks"], r["t"], r["p"], r["d"], r["v"], r["b"], r["schedule"], r["recompute"], r["predicted_ms"], r["measured_ms"], 100 * r["time_error"], 100 * r["memory_error"]))
ok_t = sum(abs(r["time_error"]) <= 0.15 for r in rows)
ok_m = sum(abs(r["memory_error"]) <= 0.05 for r in rows)
print("%d layouts: time within 15%%: %d, memory within 5%%: %d; load average during the runs %.1f to %.1f" % (len(rows), ok_t, ok_m, min(r["load"] for r in rows), max(r["load"] for r in rows)))
cmp = [r for r in rows if "compare_time_error" in r]
if cmp:
    print("the compared description on the same runs: time within 15%%: %d of %d (errors %s)" % (sum(abs(r["compare_time_error"]) <= 0.15 for r in cmp), len(cmp), " ".join("%+.1f%%" % (100 * r["compare_time_error"]) for r in cmp)))
'
