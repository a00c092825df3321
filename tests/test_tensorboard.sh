# test_tensorboard.sh - `ptdp train --tensorboard-dir`: the event file is read
# back by tests/tools/tb_decode (a reader written from the format description,
# sharing no code with src/train/tensorboard.c) which checks both CRC-32Cs of
# every record; every scalar is compared with the run's --log-jsonl values
# (Megatron's tag names: lm loss, learning-rate, grad-norm, batch-size,
# loss-scale, iteration-time, throughput, lm loss validation [ppl], their
# "vs samples" twins); the file name is TensorBoard's; only global rank 0
# writes; --tensorboard-log-interval; a corrupted byte is caught; an
# unwritable directory is one error before training.
source "$PTDP_SRC/tests/script_lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
DEC="$PTDP_TOOLS/tb_decode"
bash "$PTDP_SRC/scripts/fetch_data.sh" >/dev/null || { echo "FAIL: scripts/fetch_data.sh" >&2; exit 1; }
D="$PTDP_SRC/data"
V="--vocab-file $D/gpt2/encoder.json --merge-file $D/gpt2/vocab.bpe"
head -c 60000 "$D/moby-dick/data.txt" >"$tmp/text.txt"
"$PTDP" preprocess --input "$tmp/text.txt" --output-prefix "$tmp/moby" $V --append-eod >/dev/null 2>&1 && ok || bad "preprocess"
X="--data-path $tmp/moby_text_document $V --split 900,80,20 --num-layers 2 --hidden-size 32
 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2 --global-batch-size 4 --train-iters 4 --lr 1e-3
 --lr-warmup-iters 1 --eval-interval 2 --eval-iters 1 --log-interval 2"

"$PTDP" train $X --tensorboard-dir "$tmp/tb/run1" --log-jsonl "$tmp/a.jsonl" --log-throughput \
    --log-timers-to-tensorboard --log-validation-ppl-to-tensorboard >"$tmp/out" 2>&1 && ok || bad "run: $(tail -3 "$tmp/out")"
files=("$tmp"/tb/run1/*)
[ ${#files[@]} = 1 ] && ok || bad "want one event file, got ${files[*]}"
ev=${files[0]}
basename "$ev" | grep -Eq "^events\.out\.tfevents\.[0-9]{10}\.$(hostname)\.[0-9]+\.0$" && ok ||
    bad "event file name: $(basename "$ev")"
grep -qF "TensorBoard: writing $ev" "$tmp/out" && ok || bad "the start-up line does not name the file"
"$DEC" "$ev" >"$tmp/dec" 2>"$tmp/dec.err" && ok || bad "tb_decode: $(cat "$tmp/dec.err")"
[ "$(head -1 "$tmp/dec")" = "version brain.Event:2" ] && ok || bad "first record: $(head -1 "$tmp/dec")"

# scalar TAG STEP -> the decoded value (empty when absent)
scalar() { awk -F'\t' -v t="$1" -v s="$2" '$1 == s && $2 == t { print $3; exit }' "$tmp/dec"; }
count() { awk -F'\t' -v t="$1" '$2 == t { n++ } END { print n + 0 }' "$tmp/dec"; }
# jsonl ITERATION KEY [final] -> the value of KEY on that iteration's line
jsonl() {
    grep "\"iteration\":$1," "$tmp/a.jsonl" | grep "\"$2\":" | { if [ "${3:-}" = final ]; then grep final; else grep -v final; fi; } |
        sed "s/.*\"$2\":\([-0-9.eE+naif]*\).*/\1/" | head -1
}
# same TB JSON: float32 of the double (a relative difference within 2^-23)
same() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b
    exit !(a != "" && b != "" && d <= m * 1.2e-7 + 1e-30) }'; }
B=4
for it in 1 2 3 4; do
    for pair in "lm loss:lm_loss" "grad-norm:grad_norm" "learning-rate:lr"; do
        tag=${pair%%:*} key=${pair#*:}
        want=$(jsonl $it "$key")
        same "$(scalar "$tag" $it)" "$want" && ok || bad "iteration $it $tag: TensorBoard $(scalar "$tag" $it), JSONL $want"
        same "$(scalar "$tag vs samples" $((it * B)))" "$want" && ok || bad "iteration $it '$tag vs samples'"
    done
    [ "$(scalar batch-size $it)" = 4 ] && [ "$(scalar loss-scale $it)" = 1 ] && ok || bad "iteration $it batch-size/loss-scale"
done
[ "$(count "lm loss")" = 4 ] && [ "$(count grad-norm)" = 4 ] && ok || bad "want 4 lm loss and grad-norm scalars"
# --log-timers-to-tensorboard: every --log-interval (2, 4), with --log-throughput the throughput too
[ "$(count iteration-time)" = 2 ] && [ -n "$(scalar iteration-time 2)" ] && [ -n "$(scalar iteration-time 4)" ] && ok ||
    bad "iteration-time at 2 and 4: $(grep iteration-time "$tmp/dec")"
[ "$(count throughput)" = 2 ] && ok || bad "throughput at 2 and 4: $(grep throughput "$tmp/dec")"
# validation at 2 and 4 (every --eval-interval), then the end-of-training validation (4 again)
# and the test set ("lm loss test")
same "$(scalar "lm loss validation" 2)" "$(jsonl 2 val_loss)" && ok || bad "lm loss validation at 2"
vals=$(awk -F'\t' '$2 == "lm loss validation" && $1 == 4 { print $3 }' "$tmp/dec" | tr '\n' ' ')
set -- $vals
[ $# = 2 ] && same "$1" "$(jsonl 4 val_loss)" && same "$2" "$(jsonl 4 val_loss final)" && ok ||
    bad "lm loss validation at 4 (interval, final): $vals"
same "$(scalar "lm loss validation ppl" 2)" "$(jsonl 2 val_ppl)" && ok || bad "lm loss validation ppl"
same "$(scalar "lm loss validation vs samples" 8)" "$(jsonl 2 val_loss)" && ok || bad "lm loss validation vs samples"
same "$(scalar "lm loss test" 4)" "$(jsonl 4 test_loss final)" && ok || bad "lm loss test: $(grep test "$tmp/dec")"

# the reader can fail: one flipped byte in the last record's data
cp "$ev" "$tmp/corrupt"
size=$(wc -c <"$tmp/corrupt")
printf '\xff' | dd of="$tmp/corrupt" bs=1 seek=$((size - 6)) conv=notrunc 2>/dev/null
! "$DEC" "$tmp/corrupt" >/dev/null 2>"$tmp/dec.err" && grep -q "CRC does not match" "$tmp/dec.err" && ok ||
    bad "a corrupted record was not caught: $(cat "$tmp/dec.err")"

# without the optional flags: no timers, no ppl; --tensorboard-log-interval 2: iterations 2 and 4 only
"$PTDP" train $X --tensorboard-dir "$tmp/tb/run2" --tensorboard-log-interval 2 >/dev/null 2>&1 && ok || bad "run 2"
"$DEC" "$tmp"/tb/run2/* >"$tmp/dec" 2>/dev/null && ok || bad "decode run 2"
[ "$(awk -F'\t' '$2 == "lm loss" { printf "%s ", $1 }' "$tmp/dec")" = "2 4 " ] && ok ||
    bad "--tensorboard-log-interval 2: $(grep -P '\tlm loss\t' "$tmp/dec")"
[ "$(count iteration-time)" = 0 ] && [ "$(count "lm loss validation ppl")" = 0 ] && [ "$(count "lm loss validation")" = 3 ] && ok ||
    bad "run 2 wrote timers or ppl, or not the 3 validation points"

# several ranks: only global rank 0 writes
M="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 128 --mock-data
 --train-iters 2 --lr 1e-3 --global-batch-size 4"
"$MPIRUN" --oversubscribe -np 2 "$PTDP" train $M --tensor-model-parallel-size 2 --tensorboard-dir "$tmp/tb/mp" \
    >"$tmp/out" 2>&1 && ok || bad "2 ranks: $(tail -3 "$tmp/out")"
[ "$(ls "$tmp/tb/mp" | wc -l)" = 1 ] && "$DEC" "$tmp"/tb/mp/* >"$tmp/dec" 2>/dev/null && [ "$(count "lm loss")" = 2 ] && ok ||
    bad "2 ranks: want one event file with 2 losses: $(ls "$tmp/tb/mp")"

# an unwritable directory: one error, before training
touch "$tmp/afile"
"$PTDP" train $M --tensorboard-dir "$tmp/afile/tb" >"$tmp/out" 2>"$tmp/err"
[ $? = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "ptdp: error: --tensorboard-dir $tmp/afile/tb: cannot create" "$tmp/err" &&
    ! grep -q " iteration " "$tmp/out" && ok || bad "unwritable --tensorboard-dir: $(cat "$tmp/err")"
finish
