# test_megatron_flags.sh - Megatron-LM launch scripts in `ptdp train`: two of
# Megatron-LM's own flag lists (tests/fixtures/megatron_flags/) are read whole
# (every flag ptdp cannot run named in one message, before anything runs) and,
# once the refused flag is dropped, train; every row of docs/megatron.md's
# three flag tables does what the row says (accepted with ptdp's meaning,
# accepted and noted once at start-up, or refused with its reason);
# --recompute-activations is --recompute-granularity selective bit for bit;
# --use-checkpoint-args takes the model from --load's checkpoint.
source "$PTDP_SRC/tests/script_lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
FIX="$PTDP_SRC/tests/fixtures/megatron_flags"
DOC="$PTDP_SRC/docs/megatron.md"
M="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 128
   --train-iters 2 --lr 1e-3 --mock-data"
# A model small enough to train in a moment, appended after a script's flags (the last value
# of a flag wins); the script's dataset becomes --mock-data (data flags have tests of their own)
SMALL="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
   --max-position-embeddings 32 --micro-batch-size 1 --global-batch-size 2 --train-iters 2
   --lr-decay-iters 2 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1
   --vocab-size 128 --eval-iters 1 --log-interval 1 --mock-data"

# words FILE [DROP]: the fixture's flags as words, paths in $tmp, data flags and DROP left out
words() {
    grep -v '^#' "$1" | grep -v -e '^--data-path ' -e '^--vocab-file ' -e '^--merge-file ' |
        { if [ -n "${2:-}" ]; then grep -v -- "^$2\b"; else cat; fi; } |
        sed "s|@[A-Z_]*@|$tmp/&|; s|@||g" | tr '\n' ' '
}

# ---- Megatron-LM's GPT-3 175B example script: one refused flag, the rest runs ----------------
"$PTDP" train $(words "$FIX/gpt3_175b.args") >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
    grep -qx "ptdp: error: --rampup-batch-size is not supported: the global batch is constant (--global-batch-size); drop the flag" "$tmp/err" &&
    ok || bad "175B script: want the one refused flag --rampup-batch-size, got status $rc: $(cat "$tmp/err")"
"$PTDP" train $(words "$FIX/gpt3_175b.args" --rampup-batch-size) $SMALL >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 0 ] && [ "$(grep -c '\] iteration ' "$tmp/out")" = 2 ] &&
    [ "$(grep -c '^note: --attention-backend auto is accepted and changes nothing in ptdp' "$tmp/out")" = 1 ] &&
    ok || bad "175B script without --rampup-batch-size: status $rc: $(tail -3 "$tmp/out") $(cat "$tmp/err")"

# ---- a Megatron-LM GPT functional test's flags, on 2 ranks: each inert flag noted once -------
"$MPIRUN" --oversubscribe -np 2 "$PTDP" train $(words "$FIX/gpt3_uniform_full_recompute.args") $SMALL \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 0 ] && [ "$(grep -c '\] iteration ' "$tmp/out")" = 2 ] && ok ||
    bad "functional-test flags: status $rc: $(tail -3 "$tmp/out") $(cat "$tmp/err")"
for f in log-params-norm log-num-zeros-in-grad "timing-log-level 0" "distributed-backend nccl" \
    "transformer-impl transformer_engine" deterministic-mode no-gradient-accumulation-fusion \
    use-mcore-models "ckpt-format torch_dist" dist-ckpt-optim-fully-reshardable \
    "dist-ckpt-strictness log_all" "data-cache-path $tmp/DATA_CACHE_PATH" "attention-backend unfused" \
    log-memory-to-tensorboard async-save use-persistent-ckpt-worker; do
    [ "$(grep -c -- "^note: --$f is accepted and changes nothing in ptdp: " "$tmp/out")" = 1 ] && ok ||
        bad "want one note for --$f: $(grep -c -- "--$f" "$tmp/out") lines"
done

# ---- every unknown or refused flag of a command line in one message, on the command line and
# in a --config file; nothing runs --------------------------------------------------------------
"$PTDP" train $M --qk-layernorm --rampup-batch-size 16 16 100 --no-such-flag 3 --num-layer 2 \
    --optimizer sgd --use-mcore-models >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 2 ] && ! grep -q iteration "$tmp/out" && ok || bad "refused flags: status $rc"
head -1 "$tmp/err" | grep -qx "ptdp: error: 5 flags are unknown or not supported (nothing was run):" && ok ||
    bad "refused flags: first line $(head -1 "$tmp/err")"
for want in "  --qk-layernorm is not supported: ptdp's GPT is GPT-2's (no LayerNorm on queries and keys); drop the flag" \
    "  --rampup-batch-size is not supported: the global batch is constant" \
    "  unknown flag '--no-such-flag'" "  unknown flag '--num-layer'; did you mean '--num-layers'?" \
    "  --optimizer: ptdp's optimizer is AdamW (Megatron-LM's adam, with decoupled --weight-decay); use --optimizer adam or drop the flag (got 'sgd')"; do
    grep -qF -- "$want" "$tmp/err" && ok || bad "refused flags: no line '$want' in $(cat "$tmp/err")"
done
[ "$(wc -l <"$tmp/err")" = 6 ] && ok || bad "refused flags: want 6 lines, got $(cat "$tmp/err")"
printf '{"qk_layernorm": true, "num_workers": 2, "wandb_project": "x"}\n' >"$tmp/cfg.json"
"$PTDP" train $M --config "$tmp/cfg.json" --context-parallel-size 2 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 2 ] && grep -q "^ptdp: error: 3 flags are unknown or not supported" "$tmp/err" &&
    grep -qF -- "--wandb-project is not supported" "$tmp/err" &&
    grep -qF -- "--context-parallel-size is not supported" "$tmp/err" && ok ||
    bad "--config with refused keys: status $rc: $(cat "$tmp/err")"

# ---- docs/megatron.md's tables, row by row ----------------------------------------------------
# rows SECTION: the backticked flags (with their example values) of a table under "### SECTION"
rows() {
    awk -v s="### $1" '$0 == s {on = 1; next} /^#/ {on = 0} on && /^\| `/' "$DOC" |
        cut -d'|' -f2 | grep -o '`--[^`]*`' | tr -d '`'
}
mapfile -t inert < <(rows "Accepted, changes nothing in ptdp")
mapfile -t refused < <(rows "Refused, with what to use")
mapfile -t meaning < <(rows "Accepted with their ptdp meaning")
[ "${#inert[@]}" -gt 40 ] && [ "${#refused[@]}" -gt 45 ] && [ "${#meaning[@]}" -ge 4 ] && ok ||
    bad "docs/megatron.md: ${#inert[@]} inert, ${#refused[@]} refused, ${#meaning[@]} meaning rows"
all=()
for f in "${inert[@]}"; do all+=($f); done
"$PTDP" train $M --train-iters 0 "${all[@]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 0 ] && ok || bad "the inert flags of docs/megatron.md together: status $rc: $(cat "$tmp/err")"
for f in "${inert[@]}"; do
    # a flag given twice (two of its values) is noted once, with its first value
    grep -qF -- "note: ${f%% *}" "$tmp/out" && ok ||
        bad "docs/megatron.md says $f is accepted: no start-up note"
done
# the refused rows a dozen at a time: one message, a line naming each, nothing unknown
for ((i = 0; i < ${#refused[@]}; i += 12)); do
    batch=("${refused[@]:i:12}")
    words=()
    for f in "${batch[@]}"; do words+=($f); done
    "$PTDP" train $M "${words[@]}" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ "$rc" = 2 ] && [ "$(wc -l <"$tmp/err")" = $((${#batch[@]} + 1)) ] && ! grep -q "unknown flag" "$tmp/err" &&
        ok || bad "docs/megatron.md's refused rows ${batch[*]}: status $rc, $(cat "$tmp/err")"
    for f in "${batch[@]}"; do
        grep -qF -- "  ${f%% *}" "$tmp/err" && ok || bad "docs/megatron.md says $f is refused by name: $(cat "$tmp/err")"
    done
done
"$PTDP" train --help >"$tmp/help"
for f in "${meaning[@]}"; do
    grep -qF -- "  ${f%% *} " "$tmp/help" && ok || bad "docs/megatron.md: ${f%% *} is not in train --help"
done

# ---- --recompute-activations is Megatron's selective recomputation, bit for bit ---------------
R="$M --num-layers 2 --train-iters 3 --hidden-dropout 0.1 --attention-dropout 0.1"
"$PTDP" train $R --recompute-activations --log-jsonl "$tmp/ra.jsonl" >/dev/null 2>&1 &&
    "$PTDP" train $R --recompute-granularity selective --log-jsonl "$tmp/sel.jsonl" >/dev/null 2>&1 && ok ||
    bad "--recompute-activations runs failed"
strip() { sed 's/"elapsed_ms":[^,]*,//; s/"tokens_per_s":[^,]*,//; s/"tflops":[^,]*,//' "$1"; }
[ -s "$tmp/ra.jsonl" ] && [ "$(strip "$tmp/ra.jsonl")" = "$(strip "$tmp/sel.jsonl")" ] && ok ||
    bad "--recompute-activations differs from --recompute-granularity selective"
"$PTDP" train $M --recompute-activations --recompute-granularity full --recompute-method uniform \
    --recompute-num-layers 1 >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -qF -- "--recompute-activations (selective recomputation) and --recompute-granularity full exclude each other" "$tmp/err" &&
    ok || bad "--recompute-activations with full: $(cat "$tmp/err")"

# ---- --use-checkpoint-args: the model flags from --load's checkpoint --------------------------
"$PTDP" train --use-checkpoint-args --load "$tmp/ck" --save "$tmp/ck" $M --num-layers 3 \
    --ffn-hidden-size 64 >"$tmp/out" 2>"$tmp/err"
[ $? = 0 ] && grep -q "^--use-checkpoint-args: no checkpoint in $tmp/ck yet" "$tmp/out" && ok ||
    bad "--use-checkpoint-args before the first checkpoint: $(cat "$tmp/err")"
"$PTDP" train --use-checkpoint-args --load "$tmp/ck" --train-iters 3 --lr-decay-iters 2 --lr 1e-3 \
    --mock-data --vocab-size 128 >"$tmp/out" 2>"$tmp/err"
[ $? = 0 ] && grep -q "^--use-checkpoint-args: --num-layers 3, --hidden-size 32, --num-attention-heads 4, --ffn-hidden-size 64, --seq-length 16" "$tmp/out" &&
    grep -q "l=3 h=32 a=4 s=16" "$tmp/out" && ok ||
    bad "--use-checkpoint-args: $(head -3 "$tmp/out") $(cat "$tmp/err")"
"$PTDP" train --use-checkpoint-args $M >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -qF "there is no --load" "$tmp/err" && ok || bad "--use-checkpoint-args without --load: $(cat "$tmp/err")"

finish
