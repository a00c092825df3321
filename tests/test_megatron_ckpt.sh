#!/usr/bin/env bash
# Megatron-LM checkpoints in and out (`ptdp checkpoint import-megatron` /
# `export-megatron`, docs/megatron.md), on the fixtures of
# scripts/reference/make_megatron_fixtures.py (torch.save files of one tiny
# GPT's known weights, and the same weights as Hugging Face safetensors):
# - each fixture (Megatron-Core names t=1 p=1 with optimizer and RNG states,
#   Megatron-Core t=2 p=2 in bf16, Transformer Engine names, legacy nested
#   names t=2 as a release checkpoint, and a 4-layer t=1 p=2 interleaved one
#   with 2 virtual chunks) imports to exactly the known weights (exported
#   back to safetensors: bitwise equal);
# - `ptdp train` from the import (--finetune) logs bitwise the losses and
#   gradient norms of the same run started from the safetensors weights
#   (--init-from), and without --no-load-optim/--finetune says why it stops;
# - export then import round-trips bitwise (t=1 p=1, t=2 p=2, t=1 p=2), with
#   Megatron's file layout;
# - bad input (truncated or corrupted file, missing rank directory, a
#   torch_dist checkpoint, model flags the tensors contradict, sizes that do
#   not divide the model, bad usage): one message naming the problem, a
#   non-zero status, nothing written. The pickle and zip readers' own checks
#   are test_megatron.c's.
source "$PTDP_SRC/tests/script_lib.sh"
FIX=$PTDP_SRC/tests/fixtures/megatron
W=$FIX/weights.safetensors
MODEL="--num-layers 2 --hidden-size 8 --num-attention-heads 2 --ffn-hidden-size 32 --seq-length 16
 --max-position-embeddings 16 --vocab-size 50"
RUN="--mock-data $MODEL --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --train-iters 3
 --hidden-dropout 0 --attention-dropout 0 --log-interval 100"

# same_weights CKPT NAME [REF]: the ptdp checkpoint's weights, exported, equal the known ones
# (REF, by default weights.safetensors) bitwise
same_weights() {
    "$PTDP" export --load "$1" --out "$TMP/$2.safetensors" >"$TMP/$2.exp.out" 2>&1 &&
        "$PTDP_TOOLS/st_compare" --bitwise "$TMP/$2.safetensors" "${3:-$W}" >"$TMP/$2.cmp" 2>&1 ||
        { cat "$TMP/$2.exp.out" "$TMP/$2.cmp" >&2; return 1; }
}

# 1. every fixture imports to the known weights
for f in core_t1p1 core_t2p2 te_t1p1 legacy_t2p1; do
    if "$PTDP" checkpoint import-megatron "$FIX/$f" "$TMP/imp_$f" >"$TMP/$f.out" 2>&1 &&
        grep -q "model weights only" "$TMP/$f.out" && same_weights "$TMP/imp_$f" "imp_$f"; then ok; else
        fail "import-megatron $f: not the known weights"
        cat "$TMP/$f.out" >&2
    fi
done
# a 4-layer model of its own, t=1 p=2 with 2 virtual chunks per rank (model0, model1)
if "$PTDP" checkpoint import-megatron "$FIX/core_t1p2v2" "$TMP/imp_v2" >"$TMP/v2.out" 2>&1 &&
    grep -q "t=1 p=2 v=2" "$TMP/v2.out" && same_weights "$TMP/imp_v2" imp_v2 "$FIX/weights_l4.safetensors"; then ok; else
    fail "import-megatron of an interleaved (virtual pipeline) checkpoint"
    cat "$TMP/v2.out" >&2
fi
grep -q "t=2 p=2 v=1" "$TMP/core_t2p2.out" && grep -q "iteration 20" "$TMP/core_t2p2.out" &&
    grep -q "release" "$TMP/legacy_t2p1.out" && ok || fail "import summary (layout, iteration, release)"
"$PTDP" checkpoint verify "$TMP/imp_core_t2p2" >"$TMP/verify.out" 2>&1 && ok ||
    { fail "verify of an imported checkpoint"; cat "$TMP/verify.out" >&2; }
grep -q '"has_optimizer":[[:space:]]*false' "$TMP/imp_core_t2p2/iter_0000020/manifest.json" && ok ||
    fail "the imported manifest should say it has no optimizer state"

# 2. a run from the import equals a run from the same weights as safetensors
"$PTDP" train $RUN --init-from "$W" --log-jsonl "$TMP/st.jsonl" >"$TMP/st.out" 2>&1 ||
    { fail "train --init-from"; tail -3 "$TMP/st.out" >&2; }
"$PTDP" train $RUN --load "$TMP/imp_core_t2p2" --finetune --log-jsonl "$TMP/mg.jsonl" >"$TMP/mg.out" 2>&1 ||
    { fail "train --load (imported) --finetune"; tail -3 "$TMP/mg.out" >&2; }
fields() { grep -o '"iteration":[0-9]*\|"lm_loss":[^,]*\|"grad_norm":[^,]*' "$1" | paste -d' ' - - -; }
if [ "$(fields "$TMP/st.jsonl" | wc -l)" = 3 ] && [ "$(fields "$TMP/st.jsonl")" = "$(fields "$TMP/mg.jsonl")" ]; then ok; else
    fail "losses from the import differ from those of --init-from the same weights"
    diff <(fields "$TMP/st.jsonl") <(fields "$TMP/mg.jsonl") >&2
fi
if "$PTDP" train $RUN --load "$TMP/imp_core_t2p2" >"$TMP/noopt.out" 2>&1; then
    fail "--load of a weights-only checkpoint without --no-load-optim should stop"
else
    grep -q "no optimizer state.*--no-load-optim" "$TMP/noopt.out" && ok ||
        { fail "message for a weights-only --load"; cat "$TMP/noopt.out" >&2; }
fi

# 3. export then import round-trips bitwise
for tp in "1 1" "2 2" "1 2"; do
    set -- $tp
    out=$TMP/exp_t$1p$2
    if "$PTDP" checkpoint export-megatron "$TMP/imp_core_t1p1" "$out" --tensor-model-parallel-size "$1" \
        --pipeline-model-parallel-size "$2" >"$out.log" 2>&1 &&
        "$PTDP" checkpoint import-megatron "$out" "$out.back" >"$out.imp.log" 2>&1 &&
        same_weights "$out.back" "back_t$1p$2"; then ok; else
        fail "export-megatron t=$1 p=$2 then import: not the same weights"
        cat "$out.log" "$out.imp.log" >&2
    fi
done
files=$(cd "$TMP/exp_t2p2" && find . -type f | sort | tr '\n' ' ')
want="./iter_0000020/mp_rank_00_000/model_optim_rng.pt ./iter_0000020/mp_rank_00_001/model_optim_rng.pt ./iter_0000020/mp_rank_01_000/model_optim_rng.pt ./iter_0000020/mp_rank_01_001/model_optim_rng.pt ./latest_checkpointed_iteration.txt "
[ "$files" = "$want" ] && [ "$(cat "$TMP/exp_t2p2/latest_checkpointed_iteration.txt")" = 20 ] && ok ||
    fail "export-megatron t=2 p=2 layout: $files"
[ -f "$TMP/exp_t1p1/iter_0000020/mp_rank_00/model_optim_rng.pt" ] && ok || fail "export-megatron t=1 p=1 layout"

# 4. bad input: a message naming the problem, non-zero status, nothing written
# expect_fail NAME PATTERN OUT_DIR cmd...: fails, says PATTERN, OUT_DIR not created
expect_fail() {
    local name=$1 pat=$2 outdir=$3
    shift 3
    if "$@" >"$TMP/$name.err" 2>&1; then
        fail "$name: should fail"
    elif ! grep -q "ptdp: error: .*$pat" "$TMP/$name.err"; then
        fail "$name: message should match '$pat'"
        cat "$TMP/$name.err" >&2
    elif [ -e "$outdir" ]; then
        fail "$name: $outdir was written"
    else
        ok
    fi
}
bad=$TMP/bad
cp -r "$FIX/core_t1p1" "$bad.trunc"
f=$bad.trunc/iter_0000020/mp_rank_00/model_optim_rng.pt
head -c 20000 "$f" >"$f.x" && mv "$f.x" "$f"
expect_fail truncated "model_optim_rng.pt: .*truncated" "$TMP/o1" "$PTDP" checkpoint import-megatron "$bad.trunc" "$TMP/o1"
cp -r "$FIX/core_t1p1" "$bad.crc"
f=$bad.crc/iter_0000020/mp_rank_00/model_optim_rng.pt
printf '\377' | dd of="$f" bs=1 seek=100 conv=notrunc 2>/dev/null # inside data.pkl
expect_fail corrupted "data.pkl' fails its CRC-32 check" "$TMP/o2" "$PTDP" checkpoint import-megatron "$bad.crc" "$TMP/o2"
cp -r "$FIX/core_t2p2" "$bad.missing"
rm -r "$bad.missing/iter_0000020/mp_rank_01_001"
expect_fail missing_rank "some are missing" "$TMP/o3" "$PTDP" checkpoint import-megatron "$bad.missing" "$TMP/o3"
mkdir -p "$bad.dist/iter_0000005" && echo 5 >"$bad.dist/latest_checkpointed_iteration.txt"
touch "$bad.dist/iter_0000005/__0_0.distcp" "$bad.dist/iter_0000005/metadata.json"
expect_fail torch_dist "torch_dist checkpoint.*--ckpt-format torch" "$TMP/o4" "$PTDP" checkpoint import-megatron "$bad.dist" "$TMP/o4"
expect_fail wrong_shape "word_embeddings.weight. has shape \[32, 8\] but the model .* needs \[32, 32\]" "$TMP/o5" \
    "$PTDP" checkpoint import-megatron "$FIX/core_t2p2" "$TMP/o5" --hidden-size 32
expect_fail wrong_layers "hold 2 layers but the model has 3" "$TMP/o6" \
    "$PTDP" checkpoint import-megatron "$FIX/core_t1p1" "$TMP/o6" --num-layers 3
expect_fail not_megatron "no mp_rank_\* directories" "$TMP/o7" \
    "$PTDP" checkpoint import-megatron "$TMP/imp_core_t1p1" "$TMP/o7"
expect_fail bad_t "tensor-model-parallel-size 3 must divide" "$TMP/o8" \
    "$PTDP" checkpoint export-megatron "$TMP/imp_core_t1p1" "$TMP/o8" --tensor-model-parallel-size 3
expect_fail bad_p "pipeline-model-parallel-size 4 must divide" "$TMP/o9" \
    "$PTDP" checkpoint export-megatron "$TMP/imp_core_t1p1" "$TMP/o9" --pipeline-model-parallel-size 4
expect_fail bad_flag "unknown" "$TMP/o10" \
    "$PTDP" checkpoint export-megatron "$TMP/imp_core_t1p1" "$TMP/o10" --tensor-parallel 2
"$PTDP" checkpoint import-megatron "$FIX/core_t1p1" >"$TMP/usage.err" 2>&1
[ $? = 2 ] && grep -q "expected .ptdp checkpoint import-megatron MEGATRON_DIR OUT_DIR" "$TMP/usage.err" && ok ||
    { fail "usage error should exit 2"; cat "$TMP/usage.err" >&2; }
finish
