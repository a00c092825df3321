# test_schedule_cli.sh - `ptdp schedule`: output format of the lists and of
# --simulate, --draw, --help, and every documented bad input (exit status 2,
# one "ptdp: error:" line naming the flag).
source "$PTDP_SRC/tests/script_lib.sh"

# expect_error "flag named in the message" args...
expect_error() {
    local flag=$1
    shift
    "$PTDP" schedule "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ "$rc" -eq 2 ] && ok || bad "ptdp schedule $* exited $rc, want 2"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] && ok || bad "ptdp schedule $*: want one stderr line, got: $(cat "$tmp/err")"
    grep -q "ptdp: error: .*$flag" "$tmp/err" && ok || bad "ptdp schedule $*: message lacks '$flag': $(cat "$tmp/err")"
    [ ! -s "$tmp/out" ] && ok || bad "ptdp schedule $*: printed to stdout on error"
}

expect_error --num-microbatches --pipeline-model-parallel-size 4 --virtual-pipeline-model-parallel-size 2 --num-microbatches 6
expect_error --pipeline-model-parallel-size --virtual-pipeline-model-parallel-size 2 --num-microbatches 4
expect_error --virtual-pipeline-model-parallel-size --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 0 --num-microbatches 4
expect_error --num-microbatches --pipeline-model-parallel-size 2 --num-microbatches 0
expect_error --pipeline-model-parallel-size --pipeline-model-parallel-size 0 --num-microbatches 4
expect_error --pipeline-schedule --pipeline-model-parallel-size 2 --num-microbatches 4 --pipeline-schedule pipedream
expect_error --num-microbatches --pipeline-model-parallel-size 2
expect_error --forward-time --num-microbatches 2 --forward-time -1
expect_error --pipeline-schedule --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 --num-microbatches 4 --pipeline-schedule 1f1b
expect_error --num-microbatches --num-microbatchs 4
expect_error --weight-time --pipeline-model-parallel-size 2 --num-microbatches 4 --pipeline-schedule zb-h1 --backward-time 2 --weight-time 3
expect_error --stage-times --pipeline-model-parallel-size 2 --num-microbatches 4 --simulate --stage-times 1:2:1
expect_error --stage-times --pipeline-model-parallel-size 2 --num-microbatches 4 --simulate --stage-times 1:2:3,1:2
expect_error --virtual-pipeline-model-parallel-size --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 --num-microbatches 4 --pipeline-schedule zb-h1
expect_error --zb-costs --pipeline-model-parallel-size 2 --num-microbatches 4 --pipeline-schedule zb-v --zb-costs 3,3,x
expect_error --zb-costs --pipeline-model-parallel-size 2 --num-microbatches 4 --pipeline-schedule zb-v --zb-costs 0,3,2
expect_error --zb-costs --pipeline-model-parallel-size 2 --num-microbatches 4 --pipeline-schedule zb-v --zb-costs 1,2,3,4

# zb-v: times become the list scheduler's costs (per chunk F 3.8, B 3.75, W
# 2.45 -> 6,6,4), which plays W's into the steady state's gaps: idle 0.088 with
# unit costs, 0.046 with these (docs/schedules.md)
out=$("$PTDP" schedule --pipeline-model-parallel-size 2 --num-microbatches 8 --pipeline-schedule zb-v --simulate \
    --forward-time 7.6 --backward-time 12.4 --weight-time 4.9)
echo "$out" | grep -q "^zb-v list scheduler costs F,B,W = 6,6,4 (from the times" && ok || bad "zb-v costs: $out"
echo "$out" | grep -q "^idle fraction 0.0461997 " && ok || bad "zb-v cost-aware idle: $out"
out=$("$PTDP" schedule --pipeline-model-parallel-size 2 --num-microbatches 8 --pipeline-schedule zb-v --simulate \
    --forward-time 7.6 --backward-time 12.4 --weight-time 4.9 --zb-costs 1,1,1)
echo "$out" | grep -q "^idle fraction 0.0883191 " && ok || bad "zb-v unit-cost idle: $out"
# no times: unit costs, the same lists as --zb-costs 1,1,1
[ "$("$PTDP" schedule --pipeline-model-parallel-size 3 --num-microbatches 5 --pipeline-schedule zb-v)" = \
  "$("$PTDP" schedule --pipeline-model-parallel-size 3 --num-microbatches 5 --pipeline-schedule zb-v --zb-costs 1,1,1)" ] &&
    ok || bad "zb-v without times is not the unit-cost list"

# zb-h1: W actions in the lists; the simulated bubble with F = B = W is (p-1)/(3m)
out=$("$PTDP" schedule --pipeline-model-parallel-size 2 --num-microbatches 4 --pipeline-schedule zb-h1 --simulate --weight-time 1)
[ $? -eq 0 ] && ok || bad "zb-h1 p=2 m=4 failed"
[ "$(echo "$out" | head -2)" = "rank 0: F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3
rank 1: F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3" ] && ok || bad "zb-h1 p=2 m=4 printed: $out"
echo "$out" | grep -q "^bubble fraction 0.0833333 " && ok || bad "zb-h1 p=2 m=4 bubble: $out"
# per-stage times: the slower stage sets the pace (stage 1 backward 4 of which W 2)
out=$("$PTDP" schedule --pipeline-model-parallel-size 2 --num-microbatches 4 --pipeline-schedule zb-h1 --simulate \
    --stage-times 1:2:1,1:4:2)
echo "$out" | grep -q "^ideal time 20 " && ok || bad "zb-h1 --stage-times: $out"

# Output format: one line per rank.
out=$("$PTDP" schedule --pipeline-model-parallel-size 2 --num-microbatches 4)
[ $? -eq 0 ] && ok || bad "1f1b p=2 m=4 failed"
want="rank 0: F0 F1 B0 F2 B1 F3 B2 B3
rank 1: F0 B0 F1 B1 F2 B2 F3 B3"
[ "$out" = "$want" ] && ok || bad "1f1b p=2 m=4 printed:
$out"

out=$("$PTDP" schedule --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 --num-microbatches 4)
want="rank 0: F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0
rank 1: F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0"
[ "$out" = "$want" ] && ok || bad "interleaved p=2 v=2 m=4 printed:
$out"

out=$("$PTDP" schedule --pipeline-model-parallel-size 3 --num-microbatches 2 --pipeline-schedule gpipe)
[ "$(echo "$out" | grep -c '^rank [0-2]: F0 F1 B0 B1$')" -eq 3 ] && ok || bad "gpipe printed: $out"

# --simulate: paper's bubble (p-1)/(v*m) and stash counts.
out=$("$PTDP" schedule --pipeline-model-parallel-size 4 --num-microbatches 8 --simulate)
echo "$out" | grep -q '^makespan 33$' && ok || bad "1f1b makespan: $out"
echo "$out" | grep -q '^bubble fraction 0.375 ' && ok || bad "1f1b bubble: $out"
echo "$out" | grep -q '^peak stashed activations per rank (micro-batch x chunk): 4 3 2 1$' && ok || bad "1f1b stash: $out"
out=$("$PTDP" schedule --pipeline-model-parallel-size 4 --virtual-pipeline-model-parallel-size 2 \
    --num-microbatches 8 --simulate --draw "$tmp/t.svg")
echo "$out" | grep -q '^bubble fraction 0.1875 ' && ok || bad "interleaved bubble: $out"
head -c 4 "$tmp/t.svg" | grep -q '<svg' && tail -1 "$tmp/t.svg" | grep -q '</svg>' && ok || bad "svg not written"
out=$("$PTDP" schedule --pipeline-model-parallel-size 2 --num-microbatches 1 --simulate --comm-time 0.5)
echo "$out" | grep -q '^makespan 7$' && ok || bad "comm time makespan: $out"

# every text of a drawing fits inside it (the demo's p=2 v=2 drawing cut its legend's last
# entry at the right edge; and zb-v's six entries, v=4's eight): each <text>'s right end, at a
# generous 0.65 em a character, is within the width, and every y within the height
for d in "2 2 interleaved" "4 2 zb-v" "4 4 interleaved"; do
    set -- $d
    "$PTDP" schedule --pipeline-model-parallel-size $1 --virtual-pipeline-model-parallel-size $2 \
        --pipeline-schedule $3 --num-microbatches 4 --draw "$tmp/d.svg" >/dev/null 2>&1 || { bad "--draw $d"; continue; }
    awk -v what="$d" '
        /^<svg/ { match($0, /width="[0-9]+"/); W = substr($0, RSTART + 7, RLENGTH - 8) + 0
                  match($0, /height="[0-9]+"/); H = substr($0, RSTART + 8, RLENGTH - 9) + 0 }
        /<text/ { s = $0; match(s, /x="[0-9.]+"/); x = substr(s, RSTART + 3, RLENGTH - 4) + 0
                  match(s, /y="[0-9.]+"/); y = substr(s, RSTART + 3, RLENGTH - 4) + 0
                  fs = 11; if (match(s, /font-size="[0-9]+"/)) fs = substr(s, RSTART + 11, RLENGTH - 12) + 0
                  t = s; sub(/<\/text>.*/, "", t); sub(/.*>/, "", t)
                  w = 0.65 * fs * length(t)
                  if (s ~ /text-anchor="middle"/) x -= w / 2; else if (s ~ /text-anchor="end"/) x -= w
                  if (x < 0 || x + w > W || y > H) { printf "%s: \"%s\" spans x %g-%g, y %g, in %gx%g\n", what, t, x, x + w, y, W, H; bad = 1 } }
        END { exit bad }' "$tmp/d.svg" >"$tmp/fit" && ok || bad "text outside the drawing: $(cat "$tmp/fit")"
done

# --draw into a directory that does not exist: runtime failure, status 1.
"$PTDP" schedule --num-microbatches 2 --draw "$tmp/no/such/dir.svg" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q 'ptdp: error: --draw' "$tmp/err" && ok || bad "bad --draw path: $(cat "$tmp/err")"

# --help names every flag.
help=$("$PTDP" schedule --help)
[ $? -eq 0 ] && ok || bad "--help status"
for f in pipeline-model-parallel-size num-microbatches virtual-pipeline-model-parallel-size pipeline-schedule \
    simulate draw forward-time backward-time weight-time stage-times comm-time zb-costs; do
    echo "$help" | grep -q -- "--$f" && ok || bad "--help lacks --$f"
done

finish
