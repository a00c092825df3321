#!/usr/bin/env bash
# bench_share.sh [BUILD_DIR] [--rounds R] [--iters N] [--configs "small c"]
#                [--policies "libgomp ptdp passive spin:1000 ..."] [--pairs 0|1]
# How ptdp's OpenMP threads share a machine (docs/performance.md, "Two jobs
# on one machine"). For each round, configuration and waiting policy (the
# policies in a new order every round, so a change of the machine's load
# falls on all of them) it runs one `ptdp train` alone, then two identical
# ones at the same time, and prints one JSON line per run with the median
# iteration time (iterations after the first 3):
#   {"bench":"share","config":"small","policy":"ptdp","mode":"alone","ms":27.0,...}
#   {"bench":"share",...,"mode":"pair","ms":[55.1,56.0],...}
# (sleeps_per_iter: voluntary context switches per iteration, the times a
# thread went to sleep and had to be woken: what a waiting policy costs on a
# quiet machine, counted rather than timed, so a busy machine blurs it less)
# then per configuration and policy a summary over the rounds:
#   {"bench":"share_summary","config":"small","policy":"ptdp","alone_ms":27.0,
#    "pair_ms":55.5,"pair_over_alone":2.06,"alone_over_libgomp":1.01,...}
# pair_over_alone is the slowdown of each of two jobs sharing the machine
# (2 is a fair share of 2 cores); alone_over_libgomp the cost of the policy on
# a quiet machine against libgomp's own default.
# Policies: libgomp (GOMP_SPINCOUNT=300000, libgomp's default: ptdp before
# it set its own), ptdp (nothing set: ptdp's default), passive
# (OMP_WAIT_POLICY=passive), active (OMP_WAIT_POLICY=active), spin:N
# (GOMP_SPINCOUNT=N). Configurations: small (the job of the report: l=4
# h=256 a=4 s=64 b=2 B=4, mock data) and c (docs/performance.md's config (c):
# l=6 h=384 a=6 s=256 b=4 V=50304). Each process uses the machine's cores
# (OMP_NUM_THREADS unset unless you set it).
set -u
build=${1:-build}
case $build in --*) build=build ;; *) shift || true ;; esac
rounds=3 iters=20 configs="small c" policies="libgomp ptdp passive spin:300 spin:3000" pairs=1
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --configs) configs=$2; shift 2 ;;
    --policies) policies=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    *) echo "bench_share.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
ptdp=$build/ptdp
[ -x "$ptdp" ] || { echo "bench_share.sh: $ptdp is missing; build first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

flags() {
    case $1 in
    small) echo "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 64
        --micro-batch-size 2 --global-batch-size 4" ;;
    c) echo "--num-layers 6 --hidden-size 384 --num-attention-heads 6 --seq-length 256
        --micro-batch-size 4 --global-batch-size 4 --vocab-size 50304" ;;
    *) echo "bench_share.sh: unknown config $1" >&2; exit 2 ;;
    esac
}
# env_of POLICY: the environment a run gets (as env(1) arguments)
env_of() {
    case $1 in
    libgomp) echo "-u OMP_WAIT_POLICY GOMP_SPINCOUNT=300000" ;;
    ptdp) echo "-u OMP_WAIT_POLICY -u GOMP_SPINCOUNT" ;;
    passive) echo "-u GOMP_SPINCOUNT OMP_WAIT_POLICY=passive" ;;
    active) echo "-u GOMP_SPINCOUNT OMP_WAIT_POLICY=active" ;;
    spin:*) echo "-u OMP_WAIT_POLICY GOMP_SPINCOUNT=${1#spin:}" ;;
    *) echo "bench_share.sh: unknown policy $1" >&2; exit 2 ;;
    esac
}
# run CONFIG POLICY OUT: one training run, its log in OUT and, where GNU time is
# installed, its voluntary context switches (a thread that sleeps: all its
# threads together) in OUT.cs
timer=()
[ -x /usr/bin/time ] && timer=(/usr/bin/time -f %w -o)
run() {
    local t=()
    [ ${#timer[@]} -gt 0 ] && t=("${timer[@]}" "$3.cs")
    # shellcheck disable=SC2046
    "${t[@]}" env $(env_of "$2") "$ptdp" train $(flags "$1") --mock-data --train-iters "$iters" \
        --lr 1e-4 --log-interval 1 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 >"$3" 2>&1
}
# sleeps LOG: voluntary context switches per iteration (null without GNU time)
sleeps() { [ -s "$1.cs" ] && awk -v n="$iters" '{printf "%.1f", $1 / n}' "$1.cs" || echo null; }
# median_ms LOG: the median iteration time after the first 3 iterations
median_ms() {
    grep -o 'elapsed time per iteration (ms): [0-9.]*' "$1" | awk '{print $NF}' | tail -n +4 |
        sort -g | awk '{a[NR] = $1} END {if (NR == 0) print "null"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
load() { cut -d' ' -f1 /proc/loadavg; }

printf '{"bench":"share_env","date":"%s","cpu":"%s","nproc":%s,"loadavg":"%s","OMP_NUM_THREADS":"%s","iters":%s,"rounds":%s}\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')" \
    "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" "${OMP_NUM_THREADS:-}" "$iters" "$rounds"
results=$tmp/results
: >"$results"
for r in $(seq 1 "$rounds"); do
    # rotate the policies' order every round
    read -ra pol_list <<<"$policies"
    np=${#pol_list[@]}
    order=""
    for i in $(seq 0 $((np - 1))); do order="$order ${pol_list[$(((i + r - 1) % np))]}"; done
    for cfg in $configs; do
        for pol in $order; do
            l0=$(load)
            run "$cfg" "$pol" "$tmp/a.log"
            a=$(median_ms "$tmp/a.log")
            printf '{"bench":"share","round":%s,"config":"%s","policy":"%s","mode":"alone","ms":%s,"sleeps_per_iter":%s,"loadavg":%s}\n' \
                "$r" "$cfg" "$pol" "$a" "$(sleeps "$tmp/a.log")" "$l0" | tee -a "$results"
            [ "$pairs" = 1 ] || continue
            l0=$(load)
            run "$cfg" "$pol" "$tmp/p1.log" &
            p1=$!
            run "$cfg" "$pol" "$tmp/p2.log" &
            p2=$!
            wait $p1 $p2
            b1=$(median_ms "$tmp/p1.log")
            b2=$(median_ms "$tmp/p2.log")
            printf '{"bench":"share","round":%s,"config":"%s","policy":"%s","mode":"pair","ms":[%s,%s],"loadavg":%s}\n' \
                "$r" "$cfg" "$pol" "$b1" "$b2" "$l0" | tee -a "$results"
        done
    done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
alone, pair = {}, {}
for x in rows:
    k = (x["config"], x["policy"])
    if x["mode"] == "alone" and x["ms"] is not None:
        alone.setdefault(k, []).append(x["ms"])
    if x["mode"] == "pair" and None not in x["ms"]:
        pair.setdefault(k, []).append(sum(x["ms"]) / 2)
for (cfg, pol) in sorted(alone):
    a = statistics.median(alone[(cfg, pol)])
    out = {"bench": "share_summary", "config": cfg, "policy": pol, "alone_ms": round(a, 2),
           "alone_runs": alone[(cfg, pol)]}
    if (cfg, pol) in pair:
        p = statistics.median(pair[(cfg, pol)])
        out.update(pair_ms=round(p, 2), pair_runs=pair[(cfg, pol)], pair_over_alone=round(p / a, 3))
    if (cfg, "libgomp") in alone:
        base = statistics.median(alone[(cfg, "libgomp")])
        out["alone_over_libgomp"] = round(a / base, 4)
        if (cfg, pol) in pair:
            # the goal: a pair each at most 1.2 x 2 of the quiet job (libgomp's default alone)
            out["pair_over_libgomp_alone"] = round(p / base, 3)
    print(json.dumps(out))
PY
