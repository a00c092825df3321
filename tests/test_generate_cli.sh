# test_generate_cli.sh - `ptdp generate`: flag errors (one `ptdp: error:`
# line naming the flag, status 2), greedy ids from the HF fixture, a fixed
# seed reproducing, and the tensor-parallel run (mpirun -np 2, t = 2) giving
# the same greedy ids as t = 1. The logits' equality with the full forward
# is test_generate.c's job.
. "$PTDP_SRC/tests/parallel_lib.sh"
F="$PTDP_SRC/tests/fixtures/gpt_a.safetensors" # l=2 h=32 a=4 V=128, 16 positions

# expect_error STATUS FLAG args...: one error line naming FLAG, exit STATUS
expect_error() {
    local want=$1 flag=$2
    shift 2
    "$PTDP" generate "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    if [ "$rc" -ne "$want" ]; then
        fail "generate $* exited $rc, expected $want"
    elif [ "$(grep -c '^.*ptdp: error:' "$TMP/err")" -ne 1 ] || ! grep -q -- "$flag" "$TMP/err"; then
        fail "generate $*: expected one error line naming $flag, got: $(cat "$TMP/err")"
    else
        ok
    fi
}
expect_error 2 --init-from --prompt "1 2"
expect_error 2 --prompt --init-from "$F"
expect_error 2 --max-new-tokens --init-from "$F" --prompt "1 2" --max-new-tokens 15
expect_error 2 --top-p --init-from "$F" --prompt "1 2" --top-p 0
expect_error 2 --top-p --init-from "$F" --prompt "1 2" --top-p 1.5
expect_error 2 --temperature --init-from "$F" --prompt "1 2" --temperature -1
expect_error 2 --prompt --init-from "$F" --prompt "1 x"
expect_error 2 --prompt --init-from "$F" --prompt "1 128"
expect_error 1 --init-from --init-from "$TMP/missing.safetensors" --prompt "1 2"
expect_error 2 --tensor-model-parallel-size --init-from "$F" --prompt "1 2" --tensor-model-parallel-size 2

# weights that do not fit the flags (the fixture: l=2, a=4, metadata n_head 4) are refused
expect_error 2 "--num-layers 1 but the file holds 2 layers" --init-from "$F" --prompt "1 2" --max-new-tokens 3 --num-layers 1
expect_error 2 "--num-layers 3 but the file holds 2 layers" --init-from "$F" --prompt "1 2" --max-new-tokens 3 --num-layers 3
expect_error 2 "--num-attention-heads 2 but" --init-from "$F" --prompt "1 2" --max-new-tokens 3 --num-attention-heads 2
expect_error 2 "--num-attention-heads 16 but" --init-from "$F" --prompt "1 2" --max-new-tokens 3 --num-attention-heads 16
"$PTDP" generate --init-from "$F" --prompt "1 2" --max-new-tokens 3 --num-layers 1 --allow-extra-tensors >/dev/null 2>&1 && ok ||
    fail "--allow-extra-tensors does not load the first layer"

gen() { "$PTDP" generate --init-from "$F" --prompt "5 17 42" --max-new-tokens 13 "$@" 2>"$TMP/err"; }
# gen_src SOURCE...: the same greedy run with another prompt source
gen_src() { "$PTDP" generate --init-from "$F" --max-new-tokens 13 --temperature 0 "$@" 2>"$TMP/err"; }
greedy=$(gen --temperature 0) || fail "greedy run failed: $(cat "$TMP/err")"
n=$(echo "$greedy" | wc -w)
[ "$n" -eq 16 ] && ok || fail "greedy: expected 16 ids, got '$greedy'"
case "$greedy" in "5 17 42 "*) ok ;; *) fail "greedy output does not start with the prompt: '$greedy'" ;; esac
grep -q "tokens/s" "$TMP/err" && ok || fail "no tokens/s summary on stderr"
[ "$(gen --temperature 0)" = "$greedy" ] && ok || fail "greedy is not deterministic"
[ "$(gen --temperature 0.8 --top-k 1 --seed 9)" = "$greedy" ] && ok || fail "top-k 1 differs from greedy"
s1=$(gen --seed 11 --top-k 20 --top-p 0.9)
[ "$(gen --seed 11 --top-k 20 --top-p 0.9)" = "$s1" ] && ok || fail "a fixed seed does not reproduce"
# shape flags override the file: the same model named explicitly
[ "$(gen --temperature 0 --num-layers 2 --hidden-size 32 --num-attention-heads 4)" = "$greedy" ] && ok ||
    fail "explicit shape flags change the output"

# a config.json beside the weights whose shape values are out of range or not whole numbers:
# one error naming the key and the value (generate, and train --init-from), never a cast of
# 1e300 to an integer
cp "$F" "$TMP/h.safetensors"
for c in 'n_layer:1e300:n_layer is 1e+300; want a whole number from 1 to 100000' \
    'n_embd:32.5:n_embd is 32.5; want a whole number from 1 to 1000000' \
    'n_head:"four":n_head is not a number' 'vocab_size:-128:vocab_size is -128'; do
    IFS=: read -r key val msg <<<"$c"
    echo "{\"$key\": $val}" >"$TMP/h.config.json"
    expect_error 2 "h.config.json: $msg" --init-from "$TMP/h.safetensors" --prompt "1 2"
    "$PTDP" train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 \
        --vocab-size 128 --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --lr 1e-3 \
        --init-from "$TMP/h.safetensors" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    [ "$rc" -ne 0 ] && [ "$(grep -c 'ptdp: error:' "$TMP/err")" -eq 1 ] && grep -q -- "h.config.json: $msg" "$TMP/err" &&
        ok || fail "train --init-from with $key $val in config.json: status $rc, $(cat "$TMP/err")"
done
rm "$TMP/h.config.json"

# tensor parallel: t = 2 ranks, same greedy ids
tp=$("$MPIRUN" --oversubscribe -np 2 "$PTDP" generate --init-from "$F" --prompt "5 17 42" --max-new-tokens 13 \
    --temperature 0 --tensor-model-parallel-size 2 2>"$TMP/err_tp")
[ "$tp" = "$greedy" ] && ok || fail "t=2 greedy '$tp' differs from t=1 '$greedy' ($(cat "$TMP/err_tp"))"
# the same in 16 bits (the tensor all-reduces move 16-bit values)
for prec in bf16 fp16; do
    one=$("$PTDP" generate --init-from "$F" --prompt "5 17 42" --max-new-tokens 13 --temperature 0 --$prec 2>/dev/null)
    two=$("$MPIRUN" --oversubscribe -np 2 "$PTDP" generate --init-from "$F" --prompt "5 17 42" --max-new-tokens 13 \
        --temperature 0 --tensor-model-parallel-size 2 --$prec 2>"$TMP/err_tp")
    [ -n "$one" ] && [ "$two" = "$one" ] && ok || fail "--$prec t=2 greedy '$two' differs from t=1 '$one' ($(cat "$TMP/err_tp"))"
done

# the prompt from standard input (--prompt -), from a file, and one per line (Megatron's
# --sample-input-file): the same continuation as --prompt; each line's sample does not depend
# on the lines before it; JSON lines on stdout or in --sample-output-file
[ "$(echo "5 17 42" | gen_src --prompt -)" = "$greedy" ] && ok || fail "--prompt - (stdin) differs from --prompt"
printf '5 17 42\n' >"$TMP/p.txt"
[ "$(gen_src --prompt-file "$TMP/p.txt")" = "$greedy" ] && ok || fail "--prompt-file differs from --prompt"
printf '9 9\n\n5 17 42\r\n' >"$TMP/lines.txt"
gen_src --sample-input-file "$TMP/lines.txt" >"$TMP/samples.jsonl" || fail "--sample-input-file failed: $(cat "$TMP/err")"
[ "$(wc -l <"$TMP/samples.jsonl")" -eq 2 ] && ok || fail "--sample-input-file: expected 2 JSON lines (empty line skipped), got $(cat "$TMP/samples.jsonl")"
want="{\"prompt\":\"5 17 42\",\"text\":\"${greedy#5 17 42 }\"}"
[ "$(sed -n 2p "$TMP/samples.jsonl")" = "$want" ] && ok ||
    fail "second prompt's sample '$(sed -n 2p "$TMP/samples.jsonl")' is not the lone prompt's '$want'"
grep -q '^{"prompt":"9 9","text":"' "$TMP/samples.jsonl" && ok || fail "first sample line: $(head -1 "$TMP/samples.jsonl")"
gen_src --sample-input-file "$TMP/lines.txt" --sample-output-file "$TMP/out.jsonl" >"$TMP/stdout" &&
    cmp -s "$TMP/out.jsonl" "$TMP/samples.jsonl" && [ ! -s "$TMP/stdout" ] && ok ||
    fail "--sample-output-file does not hold the samples (or they went to stdout too)"
expect_error 2 "give one of --prompt, --prompt-file" --init-from "$F" --prompt "1 2" --prompt-file "$TMP/p.txt"
expect_error 2 "--sample-output-file goes with --sample-input-file" --init-from "$F" --prompt "1 2" --sample-output-file "$TMP/o"
expect_error 2 "would destroy the prompts" --init-from "$F" --sample-input-file "$TMP/lines.txt" --sample-output-file "$TMP/lines.txt"
cmp -s "$TMP/lines.txt" <(printf '9 9\n\n5 17 42\r\n') && ok || fail "the prompts file was changed"
expect_error 1 "--prompt-file $TMP/none.txt" --init-from "$F" --prompt-file "$TMP/none.txt"
expect_error 2 "line 3: token id 500" --init-from "$F" --max-new-tokens 3 --sample-input-file <(printf '1\n\n2 500\n')
printf '\n\n' >"$TMP/empty.txt"
expect_error 2 "no prompts" --init-from "$F" --sample-input-file "$TMP/empty.txt"
# t = 2: rank 0 reads standard input and the file; both ranks generate the same
tp=$(echo "5 17 42" | "$MPIRUN" --oversubscribe -np 2 "$PTDP" generate --init-from "$F" --prompt - \
    --max-new-tokens 13 --temperature 0 --tensor-model-parallel-size 2 2>"$TMP/err_tp")
[ "$tp" = "$greedy" ] && ok || fail "t=2 --prompt - gives '$tp', not '$greedy' ($(cat "$TMP/err_tp"))"
"$MPIRUN" --oversubscribe -np 2 "$PTDP" generate --init-from "$F" --prompt-file "$TMP/none.txt" \
    --tensor-model-parallel-size 2 >/dev/null 2>"$TMP/err_tp"
rc=$?
[ "$rc" -ne 0 ] && [ "$(grep -c 'ptdp: error:' "$TMP/err_tp")" -eq 1 ] && grep -q "none.txt" "$TMP/err_tp" && ok ||
    fail "t=2 missing --prompt-file: status $rc, $(cat "$TMP/err_tp")"

finish
