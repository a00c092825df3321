# test_train_logs.sh - what a training run logs around skipped iterations and
# restarts, where Megatron has a rule: every --log-jsonl line of fp16 runs
# (overflowing and injected-nan skips) is strict JSON (python3's json with
# NaN and Infinity refused) and a skipped iteration's line has no grad_norm;
# the iteration line averages lm loss over the interval's iterations that
# advanced, prints no loss for an interval where none did and no grad norm
# for a skipped iteration; TensorBoard writes no grad-norm for a skipped
# step; a run resumed after a crash drops the records after its checkpoint
# from --log-jsonl (each iteration once, in order); --save naming a file is
# refused before training.
source "$PTDP_SRC/tests/script_lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
M="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 128 --mock-data
 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3"

# strict_json FILE: every line a JSON object, nan/inf refused
strict_json() {
    python3 - "$1" <<'PY'
import json, sys
def refuse(c):
    raise ValueError("not JSON: " + c)
n = 0
for i, line in enumerate(open(sys.argv[1]), 1):
    try:
        o = json.loads(line, parse_constant=refuse)
    except ValueError as e:
        sys.exit(f"{sys.argv[1]}:{i}: {e}: {line.strip()}")
    if not isinstance(o, dict):
        sys.exit(f"{sys.argv[1]}:{i}: not an object")
    n += 1
sys.exit(0 if n else "no lines")
PY
}

# ---- fp16: the scaler's own overflows from 2^32 (every iteration skipped here)
"$PTDP" train $M --fp16 --train-iters 4 --log-jsonl "$tmp/o.jsonl" >"$tmp/o.out" 2>&1 && ok || bad "fp16 run: $(tail -2 "$tmp/o.out")"
grep -q '"skipped":1' "$tmp/o.jsonl" && ok || bad "no skipped iteration from 2^32: $(cat "$tmp/o.jsonl")"
strict_json "$tmp/o.jsonl" && ok || bad "fp16 overflow run: invalid JSON lines"

# ---- fp16 with skips at known iterations (a nan in the gradient: 1, 2, 3, 6)
PTDP_FAULT=nan:1,nan:2,nan:3,nan:6 "$PTDP" train $M --fp16 --initial-loss-scale 1024 --train-iters 9 \
    --log-interval 3 --log-jsonl "$tmp/f.jsonl" --tensorboard-dir "$tmp/tb" >"$tmp/f.out" 2>&1 && ok ||
    bad "fp16 run with skips: $(tail -2 "$tmp/f.out")"
strict_json "$tmp/f.jsonl" && ok || bad "fp16 run with skips: invalid JSON lines"
# the Megatron lines against the JSONL: printed at 1 (the first), 3, 6, 9
python3 - "$tmp/f.jsonl" "$tmp/f.out" <<'PY' && ok || bad "iteration lines: $(grep ' iteration ' "$tmp/f.out" | sed 's/.*global batch size/.../')"
import json, re, sys
recs = {o["iteration"]: o for o in map(json.loads, open(sys.argv[1]))}
skipped = sorted(i for i, o in recs.items() if o["skipped"])
assert skipped == [1, 2, 3, 6], skipped
assert all(("grad_norm" in o) == (not o["skipped"]) for o in recs.values()), "grad_norm on a skipped line"
prev, seen = 0, []
for line in open(sys.argv[2]):
    m = re.search(r" iteration +(\d+)/", line)
    if not m:
        continue
    it = int(m.group(1))
    adv = [recs[i]["lm_loss"] for i in range(prev + 1, it + 1) if not recs[i]["skipped"]]
    loss = re.search(r"\| lm loss: ([^ ]+) \|", line)
    gn = re.search(r"\| grad norm: ([^ ]+) \|", line)
    if adv:
        want = sum(adv) / len(adv)
        assert loss and abs(float(loss.group(1)) - want) <= 1e-6 * want, (it, loss, want)
    else:
        assert not loss, f"iteration {it}: an interval of skipped iterations prints a loss"
    if recs[it]["skipped"]:
        assert not gn, f"iteration {it}: a skipped iteration prints a grad norm"
    else:
        assert gn and abs(float(gn.group(1)) - recs[it]["grad_norm"]) < 1e-3, (it, gn)
    seen.append(it)
    prev = it
assert seen == [1, 3, 6, 9], seen
PY
ev=("$tmp"/tb/*)
"$PTDP_TOOLS/tb_decode" "${ev[0]}" >"$tmp/dec" 2>"$tmp/dec.err" && ok || bad "tb_decode: $(cat "$tmp/dec.err")"
[ "$(awk -F'\t' '$2 == "grad-norm" { printf "%s ", $1 }' "$tmp/dec")" = "4 5 7 8 9 " ] && ok ||
    bad "grad-norm scalars at $(awk -F'\t' '$2 == "grad-norm" { printf "%s=%s ", $1, $3 }' "$tmp/dec"), want 4 5 7 8 9"
[ "$(awk -F'\t' '$2 == "lm loss" { n++ } END { print n }' "$tmp/dec")" = 9 ] && ok || bad "want an lm loss scalar per iteration"
"$PTDP" plot "$tmp/f.jsonl" -o "$tmp/f.svg" >/dev/null 2>"$tmp/err" && ok || bad "plot of the fp16 log: $(cat "$tmp/err")"

# ---- a crash after the last checkpoint, then a resume: one record per iteration
R="$M --train-iters 8 --save $tmp/ck --save-interval 4 --log-jsonl $tmp/r.jsonl"
(ulimit -c 0; PTDP_FAULT=die:7 "$PTDP" train $R >"$tmp/r1.out" 2>&1) 2>/dev/null && bad "the run did not die at iteration 7"
[ "$(grep -o '"iteration":[0-9]*' "$tmp/r.jsonl" | tr '\n' ' ')" = "$(printf '"iteration":%d ' 1 2 3 4 5 6)" ] && ok ||
    bad "the crashed run's log: $(cut -c1-40 "$tmp/r.jsonl")"
head -4 "$tmp/r.jsonl" >"$tmp/r4.jsonl"
"$PTDP" train $R --load "$tmp/ck" >"$tmp/r2.out" 2>&1 && ok || bad "resume: $(tail -2 "$tmp/r2.out")"
[ "$(grep -o '"iteration":[0-9]*' "$tmp/r.jsonl" | tr '\n' ' ')" = "$(printf '"iteration":%d ' 1 2 3 4 5 6 7 8)" ] && ok ||
    bad "the resumed log repeats or loses iterations: $(cut -c1-40 "$tmp/r.jsonl")"
cmp -s "$tmp/r4.jsonl" <(head -4 "$tmp/r.jsonl") && ok || bad "the records up to the checkpoint changed"
grep -qF -- "--log-jsonl $tmp/r.jsonl: dropped 2 records after iteration 4" "$tmp/r2.out" && ok ||
    bad "no line about the dropped records: $(grep -i jsonl "$tmp/r2.out")"
strict_json "$tmp/r.jsonl" && ok || bad "resumed log: invalid JSON lines"
ls "$tmp" | grep -q 'r.jsonl.tmp' && bad "temporary left: $(ls "$tmp")" || ok

# ---- --save naming a file: refused before training, like an unwritable folder
: >"$tmp/file"
"$PTDP" train $M --train-iters 2 --save "$tmp/file" --save-interval 100 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
    grep -qF -- "ptdp: error: --save $tmp/file: exists and is not a directory" "$tmp/err" && ok ||
    bad "--save FILE: status $rc: $(cat "$tmp/err")"
! grep -q ' iteration ' "$tmp/out" && ok || bad "--save FILE: trained before failing"
[ -f "$tmp/file" ] && [ ! -s "$tmp/file" ] && ok || bad "--save FILE: the file changed"
finish
