#!/usr/bin/env bash
# soak.sh [BUILD] - `make soak`: a long run of a tiny t=2 x p=2 x d=2 job (8
# ranks, ZeRO-1, dropout, validation every 100 iterations) checkpointing every
# 100 iterations, watched from outside (docs/reliability.md, "Soak run"):
# - at 50 iterations past every hundred (between two checkpoints) it prints
#   each rank's resident memory (VmRSS of /proc/PID/status, and of it
#   RssAnon: the heap and anonymous mappings, where a leak of ptdp's would
#   show; the rest is pages of files and of Open MPI's shared-memory
#   segments, touched as they are first used) and open file descriptors
#   (entries of /proc/PID/fd);
# - from the first sample (iteration 150) to the last, every rank's VmRSS
#   may grow by at most SOAK_RSS_TOL_KB (default 1024 KiB), its RssAnon by
#   at most SOAK_ANON_TOL_KB (default 512 KiB), and its descriptor count
#   must not change; over the second half (from the first sample past
#   SOAK_ITERS/2 to the last: iterations 1050 to 1950 and 9 checkpoints by
#   default) RssAnon may grow by at most SOAK_ANON_HALF_TOL_KB (default 64
#   KiB), so a leak of 73 bytes per iteration or 7 KiB per checkpoint fails;
# - the losses, gradient norms and validation losses of every iteration are
#   bitwise those of a reference run of the same job without --save, and a
#   run resumed from the checkpoint halfway logs the next 100 iterations
#   bitwise as the soak run did.
# Not part of `make test` (about 10 minutes on 2 cores). Exits 1 when a check
# fails. Environment: SOAK_ITERS (default 2000, a multiple of 100, >= 400),
# SOAK_DIR (kept; default a temporary directory, removed on success),
# SOAK_RSS_TOL_KB, SOAK_ANON_TOL_KB, SOAK_ANON_HALF_TOL_KB, MPIRUN.
set -uo pipefail
BUILD=${1:-build}
PTDP=$(readlink -f "$BUILD/ptdp")
[ -x "$PTDP" ] || { echo "soak: $BUILD/ptdp is missing (make build)" >&2; exit 1; }
MPIRUN=${MPIRUN:-mpirun}
ITERS=${SOAK_ITERS:-2000}
TOL_KB=${SOAK_RSS_TOL_KB:-1024}
ANON_KB=${SOAK_ANON_TOL_KB:-512}
HALF_KB=${SOAK_ANON_HALF_TOL_KB:-64}
[ $((ITERS % 100)) = 0 ] && [ "$ITERS" -ge 400 ] || { echo "soak: SOAK_ITERS must be a multiple of 100, >= 400" >&2; exit 1; }
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
OUT=${SOAK_DIR:-$(mktemp -d /tmp/ptdp_soak.XXXXXX)}
mkdir -p "$OUT"
HALF=$((ITERS / 200 * 100))

ARGS="--mock-data --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --vocab-size 256
 --micro-batch-size 1 --global-batch-size 16 --lr 1e-3 --lr-warmup-iters 100 --lr-decay-iters $ITERS
 --hidden-dropout 0.1 --attention-dropout 0.1 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
 --use-distributed-optimizer --eval-interval 100 --eval-iters 1 --log-interval 100"
fields() { grep -o '"iteration":[0-9]*\|"lm_loss":[^,]*\|"grad_norm":[^,]*\|"val_loss":[^,}]*' "$1"; }
lines() { grep -c lm_loss "$1" 2>/dev/null || true; }
failed=0
check() { # check CONDITION-STATUS MESSAGE
    if [ "$1" = 0 ]; then echo "soak: ok: $2"; else echo "soak: FAIL: $2" >&2; failed=1; fi
}

# ---- the soak run, sampled from outside -------------------------------------
echo "soak: $ITERS iterations of t=2 p=2 d=2 (8 ranks), checkpoints every 100, in $OUT"
t0=$(date +%s.%N)
"$MPIRUN" --oversubscribe -np 8 "$PTDP" train $ARGS --train-iters "$ITERS" --save "$OUT/ck" --save-interval 100 \
    --log-jsonl "$OUT/soak.jsonl" >"$OUT/soak.out" 2>&1 &
mpid=$!
ranks=""
for i in $(seq 1 600); do
    ranks=$(pgrep -P $mpid -x ptdp | tr '\n' ' ')
    [ "$(echo $ranks | wc -w)" = 8 ] && break
    sleep 0.1
done
# the ranks by world rank (OMPI_COMM_WORLD_RANK in each one's environment)
declare -A pid_of
for q in $ranks; do
    w=$(tr '\0' '\n' <"/proc/$q/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ -n "$w" ] && pid_of[$w]=$q
done
printf "%-9s %-55s %-55s %s\n" iteration "VmRSS (KiB) of world ranks 0..7" "RssAnon (KiB) of ranks 0..7" \
    "open fds of ranks 0..7" | tee "$OUT/samples.txt"
next=150
while kill -0 $mpid 2>/dev/null; do
    n=$(lines "$OUT/soak.jsonl")
    if [ -n "$n" ] && [ "$n" -ge $next ] && [ $next -lt "$ITERS" ]; then
        rss="" anon="" fds=""
        for w in 0 1 2 3 4 5 6 7; do
            q=${pid_of[$w]:-0}
            rss+="$(awk '/^VmRSS:/ { print $2 }' "/proc/$q/status" 2>/dev/null || echo -) "
            anon+="$(awk '/^RssAnon:/ { print $2 }' "/proc/$q/status" 2>/dev/null || echo -) "
            fds+="$(ls "/proc/$q/fd" 2>/dev/null | wc -l) "
        done
        printf "%-9s %-55s %-55s %s\n" "$n" "$rss" "$anon" "$fds" | tee -a "$OUT/samples.txt"
        next=$((next + 100))
    fi
    sleep 0.1
done
wait $mpid
rc=$?
t1=$(date +%s.%N)
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
echo "soak: the soak run took $secs s, status $rc"
check $rc "the soak run exited 0"
[ "$(lines "$OUT/soak.jsonl")" = "$ITERS" ]
check $? "the soak run logged $ITERS iterations"
[ "$(cat "$OUT/ck/latest_checkpointed_iteration.txt" 2>/dev/null)" = "$ITERS" ]
check $? "the last checkpoint is iteration $ITERS ($(ls -d "$OUT"/ck/iter_* | wc -l) checkpoints kept)"

# flat from the first sample to the last: RSS within TOL_KB, the same descriptors
nsamp=$(($(wc -l <"$OUT/samples.txt") - 1))
[ "$nsamp" -ge 2 ]
check $? "$nsamp samples taken"
first=$(sed -n 2p "$OUT/samples.txt") last=$(tail -1 "$OUT/samples.txt")
# fields: 1 iteration, 2-9 VmRSS, 10-17 RssAnon, 18-25 descriptors of world ranks 0..7
awk -v tol="$TOL_KB" -v atol="$ANON_KB" -v a="$first" -v b="$last" 'BEGIN {
        split(a, x, " "); split(b, y, " "); bad = 0; m = 0; ma = 0
        for (i = 2; i <= 9; i++) {
            d = y[i] - x[i]; da = y[i + 8] - x[i + 8]
            if (d > m) m = d; if (da > ma) ma = da
            if (x[i] !~ /^[0-9]+$/ || x[i + 8] !~ /^[0-9]+$/ || d > tol || da > atol) bad = 1
            if (x[i + 16] != y[i + 16]) bad = 1
            fa = fa x[i + 16] " "; fb = fb y[i + 16] " "
        }
        printf "soak: from iteration %s to %s: largest growth of a rank: VmRSS %d KiB (tolerance %d), RssAnon %d KiB (tolerance %d); descriptors %s-> %s\n",
            x[1], y[1], m, tol, ma, atol, fa, fb
        exit bad }'
check $? "resident memory flat (VmRSS within $TOL_KB KiB, RssAnon within $ANON_KB KiB) and descriptor counts unchanged on every rank"
mid=$(awk -v h=$HALF 'NR > 1 && $1 >= h { print; exit }' "$OUT/samples.txt")
awk -v tol="$HALF_KB" -v a="$mid" -v b="$last" 'BEGIN {
        split(a, x, " "); split(b, y, " "); bad = 0; ma = 0
        for (i = 10; i <= 17; i++) { da = y[i] - x[i]; if (da > ma) ma = da; if (x[i] !~ /^[0-9]+$/ || da > tol) bad = 1 }
        printf "soak: second half, iteration %s to %s: largest RssAnon growth of a rank %d KiB (tolerance %d)\n", x[1], y[1], ma, tol
        exit bad }'
check $? "no heap growth over the second half (RssAnon within $HALF_KB KiB)"

# ---- the reference: the same job without --save ------------------------------
t2=$(date +%s.%N)
"$MPIRUN" --oversubscribe -np 8 "$PTDP" train $ARGS --train-iters "$ITERS" --log-jsonl "$OUT/ref.jsonl" \
    >"$OUT/ref.out" 2>&1
rc=$?
echo "soak: the reference run took $(awk -v a="$t2" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s, status $rc"
check $rc "the reference run exited 0"
cmp -s <(fields "$OUT/ref.jsonl") <(fields "$OUT/soak.jsonl")
check $? "losses, gradient norms and validation losses of all $ITERS iterations bitwise the reference's"

# ---- resumed halfway ---------------------------------------------------------
mkdir -p "$OUT/half"
cp -r "$OUT/ck/iter_$(printf %07d $HALF)" "$OUT/half/"
echo $HALF >"$OUT/half/latest_checkpointed_iteration.txt"
"$MPIRUN" --oversubscribe -np 8 "$PTDP" train $ARGS --train-iters "$ITERS" --exit-interval $((HALF + 100)) \
    --load "$OUT/half" --log-jsonl "$OUT/half.jsonl" >"$OUT/half.out" 2>&1
check $? "the run resumed from iteration $HALF exited 0"
cmp -s <(fields "$OUT/half.jsonl") <(fields "$OUT/soak.jsonl" | sed -n "/^\"iteration\":$((HALF + 1))\$/,/^\"iteration\":$((HALF + 101))\$/p" | sed '$d')
check $? "iterations $((HALF + 1))-$((HALF + 100)) resumed from the checkpoint of iteration $HALF bitwise the soak run's"

echo "soak: {\"iterations\":$ITERS,\"ranks\":8,\"soak_s\":$secs,\"samples\":$nsamp,\"rss_tol_kb\":$TOL_KB,\"anon_tol_kb\":$ANON_KB,\"anon_half_tol_kb\":$HALF_KB,\"failed\":$failed}"
if [ $failed = 0 ] && [ -z "${SOAK_DIR:-}" ]; then rm -rf "$OUT"; fi
[ $failed = 0 ] && echo "soak: passed" || echo "soak: FAILED (kept $OUT)" >&2
exit $failed
