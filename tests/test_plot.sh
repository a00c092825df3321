# test_plot.sh - `ptdp plot`: two runs' --log-jsonl files (one from a real
# training run, one written here with validation and end-of-training lines)
# make one well-formed SVG (xmllint when installed, else a tag balance check)
# with one <polyline> per curve per run (training loss, validation loss where
# the run has any, learning rate, gradient norm, tokens/s), a circle per
# end-of-training evaluation and the runs' file names; nan values are left
# out; a log that goes back in iterations (a resumed run) is drawn once per
# iteration; -o must end in .svg; every bad input is one error naming the file
# and line.
source "$PTDP_SRC/tests/script_lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
"$PTDP" train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 128 --mock-data \
    --train-iters 6 --lr 1e-3 --log-jsonl "$tmp/real.jsonl" >/dev/null 2>&1 && ok || bad "training run"
cat >"$tmp/hand.jsonl" <<'J'
{"iteration":1,"consumed_samples":4,"lm_loss":10.5,"grad_norm":3.5,"lr":0.0005,"elapsed_ms":10,"tokens_per_s":900.5,"tflops":0.1,"skipped":0}
{"iteration":2,"consumed_samples":8,"lm_loss":9.75,"grad_norm":2.5,"lr":0.001,"elapsed_ms":10,"tokens_per_s":1000,"tflops":0.1,"skipped":0}
{"iteration":2,"val_loss":9.9,"val_ppl":19930.4}

{"iteration":3,"consumed_samples":12,"lm_loss":nan,"grad_norm":nan,"lr":0.001,"elapsed_ms":10,"tokens_per_s":1000,"tflops":0.1,"skipped":1}
{"iteration":4,"consumed_samples":16,"lm_loss":8.5,"grad_norm":1.5,"lr":0.0005,"elapsed_ms":10,"tokens_per_s":1100,"tflops":0.1,"skipped":0}
{"iteration":4,"val_loss":8.9,"val_ppl":7331.97}
{"iteration":4,"val_loss":8.8,"val_ppl":6634.24,"final":true}
{"iteration":4,"test_loss":8.7,"test_ppl":6002.91,"final":true}
J
"$PTDP" plot "$tmp/real.jsonl" "$tmp/hand.jsonl" -o "$tmp/p.svg" >"$tmp/out" 2>&1 && ok || bad "plot: $(cat "$tmp/out")"
if command -v xmllint >/dev/null; then
    xmllint --noout "$tmp/p.svg" && ok || bad "the SVG is not well-formed XML"
else
    [ "$(grep -o '<[a-z]' "$tmp/p.svg" | wc -l)" = "$(grep -o '</[a-z]*>\|/>' "$tmp/p.svg" | wc -l)" ] && ok || bad "unbalanced tags"
fi
head -1 "$tmp/p.svg" | grep -q '^<svg xmlns="http://www.w3.org/2000/svg"' && ok || bad "not an SVG"
# real: 4 curves (no validation lines); hand: 5
[ "$(grep -c '<polyline' "$tmp/p.svg")" = 9 ] && ok || bad "want 9 polylines, got $(grep -c '<polyline' "$tmp/p.svg")"
for run in real hand; do
    for what in "lm loss" "learning rate" "grad norm" "tokens/s"; do
        [ "$(grep -c "<polyline.*<title>$run.jsonl: $what</title>" "$tmp/p.svg")" = 1 ] && ok || bad "no '$run.jsonl: $what' curve"
    done
    grep -q ">$run.jsonl</text>" "$tmp/p.svg" && ok || bad "the legend lacks $run.jsonl"
done
grep -q '<polyline[^>]*stroke-dasharray[^>]*><title>hand.jsonl: validation loss</title>' "$tmp/p.svg" && ok || bad "no dashed validation curve"
[ "$(grep -c '<circle.*hand.jsonl: end-of-training loss' "$tmp/p.svg")" = 2 ] && ok || bad "want 2 end-of-training circles"
# the nan iteration is left out: hand's loss curve has 3 points
pts=$(grep '<title>hand.jsonl: lm loss</title>' "$tmp/p.svg" | sed 's/.*points="\([^"]*\)".*/\1/' | wc -w)
[ "$pts" = 3 ] && ok || bad "hand's loss curve has $pts points, want 3"
for t in "loss (training, validation)" "learning rate" "gradient norm (before clipping)" "tokens/s" iteration; do
    grep -qF ">$t</text>" "$tmp/p.svg" && ok || bad "no label '$t'"
done

# a log that goes back (a run resumed from iteration 2 by a ptdp that kept the records after
# it, and one with a skipped iteration's grad_norm left out): each iteration drawn once, in
# order, the later record winning
cat >"$tmp/again.jsonl" <<'J'
{"iteration":1,"consumed_samples":4,"lm_loss":10.5,"grad_norm":3.5,"lr":0.0005,"tokens_per_s":900}
{"iteration":2,"consumed_samples":8,"lm_loss":9.75,"grad_norm":2.5,"lr":0.001,"tokens_per_s":1000}
{"iteration":2,"val_loss":9.9,"val_ppl":19930.4}
{"iteration":3,"consumed_samples":12,"lm_loss":99,"grad_norm":1,"lr":0.001,"tokens_per_s":1000}
{"iteration":4,"consumed_samples":16,"lm_loss":98,"grad_norm":1,"lr":0.001,"tokens_per_s":1000}
{"iteration":4,"val_loss":97,"val_ppl":1}
{"iteration":3,"consumed_samples":12,"lm_loss":9.5,"lr":0.001,"tokens_per_s":1000,"skipped":1}
{"iteration":4,"consumed_samples":16,"lm_loss":9.25,"grad_norm":1.5,"lr":0.001,"tokens_per_s":1000}
{"iteration":4,"val_loss":9.3,"val_ppl":10938}
{"iteration":5,"consumed_samples":20,"lm_loss":9,"grad_norm":1.25,"lr":0.001,"tokens_per_s":1000}
J
"$PTDP" plot "$tmp/again.jsonl" -o "$tmp/again.svg" >"$tmp/out" 2>&1 && ok || bad "plot of a restarted log: $(cat "$tmp/out")"
# points of the curve TITLE: their x coordinates in order, and their count
xs() { grep "<title>again.jsonl: $1</title>" "$tmp/again.svg" | sed 's/.*points="\([^"]*\)".*/\1/' | tr ' ' '\n' | cut -d, -f1; }
[ "$(xs 'lm loss' | wc -l)" = 5 ] && [ "$(xs 'lm loss' | sort -n -c 2>&1)" = "" ] && [ "$(xs 'lm loss' | sort -u | wc -l)" = 5 ] &&
    ok || bad "restarted log: want 5 loss points going forward, got $(xs 'lm loss' | tr '\n' ' ')"
[ "$(xs 'validation loss' | wc -l)" = 2 ] && ok || bad "restarted log: want 2 validation points, got $(xs 'validation loss' | tr '\n' ' ')"
[ "$(xs 'grad norm' | wc -l)" = 4 ] && ok || bad "restarted log: want 4 grad norm points (3 skipped), got $(xs 'grad norm' | tr '\n' ' ')"
# the drawing is SVG: another extension is refused, nothing written
for o in "$tmp/p.png" "$tmp/p" "$tmp/p.svg.pdf"; do
    "$PTDP" plot "$tmp/real.jsonl" -o "$o" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ "$rc" = 2 ] && grep -qF "ptdp: error: ptdp plot: -o $o: ptdp plot writes SVG; give a name ending in .svg" "$tmp/err" &&
        [ ! -e "$o" ] && ok || bad "plot -o $o: status $rc: $(cat "$tmp/err")"
done
"$PTDP" plot "$tmp/real.jsonl" -o "$tmp/P.SVG" >/dev/null 2>&1 && [ -s "$tmp/P.SVG" ] && ok || bad "plot -o P.SVG"

# bad input: one error naming the file (and line), no drawing
expect() { # STATUS TEXT ARGS...
    local want=$1 text=$2; shift 2
    rm -f "$tmp/bad.svg"
    "$PTDP" plot "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ "$rc" = "$want" ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q '^ptdp: error: ' "$tmp/err" && grep -qF -- "$text" "$tmp/err" &&
        [ ! -e "$tmp/bad.svg" ] && ok || bad "plot $*: status $rc, want $want with '$text': $(cat "$tmp/err")"
}
printf '{"iteration":1,"lm_loss":2}\n{"iteration":2,"lm_loss":\n' >"$tmp/b1.jsonl"
expect 2 "$tmp/b1.jsonl:2: not a JSON object" "$tmp/real.jsonl" "$tmp/b1.jsonl" -o "$tmp/bad.svg"
printf '{"iteration":1,"lm_loss":"x"}\n' >"$tmp/b2.jsonl"
expect 2 "$tmp/b2.jsonl:1: \"lm_loss\" is not a number" "$tmp/b2.jsonl" -o "$tmp/bad.svg"
printf '{"lm_loss":2}\n' >"$tmp/b3.jsonl"
expect 2 "$tmp/b3.jsonl:1: no number \"iteration\"" "$tmp/b3.jsonl" -o "$tmp/bad.svg"
printf '{"iteration":1,"loss":2}\n' >"$tmp/b4.jsonl"
expect 2 "$tmp/b4.jsonl:1: neither" "$tmp/b4.jsonl" -o "$tmp/bad.svg"
printf '{"iteration":1,"val_loss":2}\n' >"$tmp/b5.jsonl"
expect 2 "$tmp/b5.jsonl: no training lines" "$tmp/b5.jsonl" -o "$tmp/bad.svg"
expect 1 "$tmp/none.jsonl: cannot open" "$tmp/none.jsonl" -o "$tmp/bad.svg"
expect 2 "-o FILE.svg" "$tmp/real.jsonl"
expect 2 "at least one LOG.jsonl" -o "$tmp/bad.svg"
expect 2 "unknown flag '--colour'" "$tmp/real.jsonl" --colour red -o "$tmp/bad.svg"
expect 1 "-o $tmp/nodir/p.svg" "$tmp/real.jsonl" -o "$tmp/nodir/p.svg"
"$PTDP" plot --help >"$tmp/out" && grep -q "usage: ptdp plot" "$tmp/out" && ok || bad "plot --help"
finish
