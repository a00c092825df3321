#!/usr/bin/env bash
# bench_bubble.sh - the pipeline bubble of real runs against the simulator's
# prediction. For p in {2, 4} and m in {8, 16} it trains the same small GPT
# (t = d = 1, one OpenMP thread per rank) under 1f1b, interleaved (v = 2),
# zb-h1 and zb-v (v = 2, V-shaped) with --trace, and from the trace of the timed iterations computes, per
# iteration, the window from the first compute event of any rank to the last
# one's end, each rank's busy time (its F, B and W boxes) and
#   idle fraction   = sum_r (window - busy_r) / (p * window)   (idle / total)
#   bubble fraction = (window - max_r busy_r) / max_r busy_r   (the paper's)
# (medians over iterations and repetitions). It then gives `ptdp schedule
# --simulate` the same schedule with each virtual stage's measured mean F, B
# and W times (--stage-times; comm 0) and prints the prediction beside the
# measurement, one JSON line per (p, m, schedule). Not a test: times depend on
# the machine and on what else runs on it (a loaded machine inflates waits).
#
# usage: bench/bench_bubble.sh [BUILD_DIR] [--reps N] [--iters N] [--p "2 4"] [--m "8 16"]
#                              [--scheds "1f1b interleaved zb-h1 zb-v"] [--keep-traces DIR]
#   --keep-traces: keep each layout's last trace as DIR/p{p}_m{m}_{schedule}.json
#   (draw one with bench/trace_svg.sh).
set -u
build=build
reps=3
iters=4
plist="2 4"
mlist="8 16"
scheds="1f1b interleaved zb-h1 zb-v"
keep=""
while [ $# -gt 0 ]; do
    case $1 in
    --reps) reps=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --p) plist=$2; shift 2 ;;
    --m) mlist=$2; shift 2 ;;
    --scheds) scheds=$2; shift 2 ;;
    --keep-traces) keep=$2; mkdir -p "$keep"; shift 2 ;;
    *) build=$1; shift ;;
    esac
done
ptdp=$build/ptdp
[ -x "$ptdp" ] || { echo "bench_bubble: $ptdp not found (build first)" >&2; exit 1; }
mpirun=${MPIRUN:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 8 layers so p = 4 with v = 2 has one layer per chunk; a small vocabulary so
# the loss head (in the last stage's forward) does not dominate that stage.
model="--mock-data --num-layers 8 --hidden-size 256 --num-attention-heads 4 --seq-length 128
 --vocab-size 512 --micro-batch-size 1 --lr 1e-4 --log-interval 1000"

# trace_stats TRACE P V FIRST_ITER VSHAPE: "idle bubble stage_times" where stage_times is
# the --stage-times list (ms) F:B+W:W per virtual stage (W 0 when there is none);
# VSHAPE 1: chunk c of rank r is stage r (c = 0) or 2p-1-r (zb-v), else c*p + r.
trace_stats() {
    awk -v p="$2" -v v="$3" -v first="$4" -v vshape="$5" '
    function num(key,   i, r) {
        if (!match($0, "\"" key "\":[-0-9.]+")) return -1
        r = substr($0, RSTART, RLENGTH); sub(/.*:/, "", r); return r + 0 }
    /"cat":"(forward|backward|weight)"/ {
        it = num("iteration"); if (it < first) next
        k = /"cat":"forward"/ ? 0 : /"cat":"backward"/ ? 1 : 2
        r = num("tid"); c = num("chunk"); ts = num("ts"); d = num("dur")
        st = vshape ? (c ? 2 * p - 1 - r : r) : c * p + r
        sum[k, st] += d; cnt[k, st]++
        busy[it, r] += d
        if (!((it) in lo) || ts < lo[it]) lo[it] = ts
        if (!((it) in hi) || ts + d > hi[it]) hi[it] = ts + d
        its[it] = 1
    }
    END {
        n = 0
        for (it in its) {
            w = hi[it] - lo[it]; idle = 0; mx = 0
            for (r = 0; r < p; r++) { idle += w - busy[it, r]; if (busy[it, r] > mx) mx = busy[it, r] }
            n++; I[n] = idle / (p * w); Bf[n] = (w - mx) / mx
        }
        # medians (insertion sort; a handful of iterations)
        for (i = 2; i <= n; i++) for (j = i; j > 1 && I[j] < I[j-1]; j--) { t = I[j]; I[j] = I[j-1]; I[j-1] = t }
        for (i = 2; i <= n; i++) for (j = i; j > 1 && Bf[j] < Bf[j-1]; j--) { t = Bf[j]; Bf[j] = Bf[j-1]; Bf[j-1] = t }
        mi = n % 2 ? I[(n+1)/2] : (I[n/2] + I[n/2+1]) / 2
        mb = n % 2 ? Bf[(n+1)/2] : (Bf[n/2] + Bf[n/2+1]) / 2
        s = ""
        for (st = 0; st < p * v; st++) {
            f = sum[0, st] / cnt[0, st] / 1000; b = sum[1, st] / cnt[1, st] / 1000
            ww = cnt[2, st] ? sum[2, st] / cnt[2, st] / 1000 : 0
            s = s (st ? "," : "") sprintf("%.3f:%.3f:%.3f", f, b + ww, ww)
        }
        printf "%.4f %.4f %s\n", mi, mb, s
    }' "$1"
}

median() { sort -g | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2 }'; }

for p in $plist; do
    for m in $mlist; do
        for sched in $scheds; do
            v=1 vshape=0
            [ "$sched" = interleaved ] && v=2
            [ "$sched" = zb-v ] && v=2 vshape=1
            : >"$tmp/idle"; : >"$tmp/bubble"; : >"$tmp/iter"
            stage_times=""
            for rep in $(seq "$reps"); do
                if ! "$mpirun" -np "$p" -x OMP_NUM_THREADS "$ptdp" train $model --pipeline-model-parallel-size "$p" \
                    --virtual-pipeline-model-parallel-size "$v" --pipeline-schedule "$sched" \
                    --global-batch-size "$m" --train-iters $((iters + 1)) --trace "$tmp/t.json" \
                    --log-jsonl "$tmp/l.jsonl" >"$tmp/out" 2>&1; then
                    echo "bench_bubble: p=$p m=$m $sched failed:" >&2
                    tail -3 "$tmp/out" >&2
                    continue
                fi
                read -r idle bubble st < <(trace_stats "$tmp/t.json" "$p" "$v" 2 "$vshape")
                echo "$idle" >>"$tmp/idle"
                echo "$bubble" >>"$tmp/bubble"
                grep -o '"elapsed_ms":[0-9.]*' "$tmp/l.jsonl" | tail -n "$iters" | cut -d: -f2 >>"$tmp/iter"
                stage_times=$st # the last repetition's per-stage means feed the simulator
                [ -n "$keep" ] && cp "$tmp/t.json" "$keep/p${p}_m${m}_${sched}.json"
            done
            [ -s "$tmp/idle" ] || continue
            sim=$("$ptdp" schedule --pipeline-model-parallel-size "$p" --virtual-pipeline-model-parallel-size "$v" \
                --pipeline-schedule "$sched" --num-microbatches "$m" --simulate --stage-times "$stage_times")
            sim_idle=$(echo "$sim" | awk '/^idle fraction/ { print $3 }')
            sim_bubble=$(echo "$sim" | awk '/^bubble fraction/ { print $3 }')
            printf '{"p":%d,"m":%d,"schedule":"%s","v":%d,"reps":%d,"measured_idle":%s,"measured_idle_min":%s,"measured_idle_max":%s,"measured_bubble":%s,"sim_idle":%s,"sim_bubble":%s,"iter_ms":%s,"stage_times_ms":"%s"}\n' \
                "$p" "$m" "$sched" "$v" "$reps" "$(median <"$tmp/idle")" "$(sort -g "$tmp/idle" | head -1)" \
                "$(sort -g "$tmp/idle" | tail -1)" "$(median <"$tmp/bubble")" "$sim_idle" "$sim_bubble" \
                "$(median <"$tmp/iter")" "$stage_times"
        done
    done
done
