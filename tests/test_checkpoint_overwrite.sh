#!/usr/bin/env bash
# No command that writes a checkpoint destroys or rewinds one the user has
# (docs/checkpoint-format.md, "Writing where checkpoints are"):
# - train --save from scratch into a directory holding a later checkpoint,
#   and a resume from an earlier iteration of the --save directory, stop at
#   start-up (a message naming --overwrite-checkpoints on every rank, status
#   2, nothing trained, every file as it was); --load X --save X resumes, also
#   written X/; with --overwrite-checkpoints the run saves, and
#   latest_checkpointed_iteration.txt does not move back;
# - import-megatron into a directory holding a later checkpoint, or the same
#   iteration with AdamW state: refused, the directory untouched; with
#   --overwrite-checkpoints the import is written beside them (latest stays,
#   the summary says how to load it) and holds the known weights;
# - export-megatron into a directory that is not empty: refused, untouched;
#   with --overwrite-checkpoints the iteration is replaced whole (no file of
#   the older layout stays beside the new one, so a Megatron job at the old
#   layout cannot load stale weights), and the latest file does not move back.
source "$PTDP_SRC/tests/parallel_lib.sh"
FIX=$PTDP_SRC/tests/fixtures/megatron
MODEL="--num-layers 2 --hidden-size 8 --num-attention-heads 2 --ffn-hidden-size 32 --seq-length 16
 --max-position-embeddings 16 --vocab-size 50"
RUN="--mock-data $MODEL --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --lr-decay-iters 30
 --hidden-dropout 0 --attention-dropout 0 --log-interval 100"

# snap DIR: every file with its checksum (a directory left as it was has the same snap)
snap() { (cd "$1" && find . -type f | sort | xargs md5sum); }
latest() { cat "$1/latest_checkpointed_iteration.txt"; }
# refused NAME PATTERN DIR status...: status 2, PATTERN and the flag in the message, DIR's snap unchanged
refused() {
    local name=$1 pat=$2 dir=$3
    shift 3
    if [ "$1" != 2 ] || ! grep -q "ptdp: error: .*$pat.*--overwrite-checkpoints" "$TMP/$name.err" ||
        [ "$(snap "$dir")" != "$(cat "$TMP/$name.snap")" ]; then
        fail "$name: expected status 2, '$pat' naming --overwrite-checkpoints, $dir untouched (status $1)"
        cat "$TMP/$name.err" >&2
    else
        ok
    fi
}

# own.later: a training checkpoint of iteration 25 (AdamW state); own.same: of iteration 20
run_np 1 train $RUN --train-iters 25 --save "$TMP/own.later" >/dev/null 2>&1 &&
    run_np 1 train $RUN --train-iters 20 --save "$TMP/own.same" >/dev/null 2>&1 &&
    run_np 1 train $RUN --train-iters 20 --save "$TMP/own.two" --save-interval 10 >/dev/null 2>&1 &&
    [ "$(latest "$TMP/own.later")" = 25 ] && ok || fail "the training checkpoints to protect"

# ---- train --save
snap "$TMP/own.later" >"$TMP/scratch.snap"
run_np 2 train $RUN --train-iters 5 --save "$TMP/own.later" >"$TMP/scratch.out" 2>"$TMP/scratch.err"
refused scratch "holds a checkpoint of iteration 25, later than iteration 0 where this run starts" \
    "$TMP/own.later" $?
[ "$(grep -c "ptdp: error:" "$TMP/scratch.err")" = 2 ] && ! grep -q "iteration  *[0-9]*/" "$TMP/scratch.out" &&
    ok || fail "train --save into later checkpoints: one message per rank, before any iteration"
snap "$TMP/own.two" >"$TMP/rewind.snap"
run_np 1 train $RUN --train-iters 15 --load "$TMP/own.two/iter_0000010" --save "$TMP/own.two" \
    >/dev/null 2>"$TMP/rewind.err"
refused rewind "holds a checkpoint of iteration 20, later than iteration 10" "$TMP/own.two" $?
# resuming the --save directory's own checkpoint is what --load X --save X is for
run_np 1 train $RUN --train-iters 22 --load "$TMP/own.two" --save "$TMP/own.two" >"$TMP/res.out" 2>&1 &&
    [ "$(latest "$TMP/own.two")" = 22 ] && ok || { fail "--load X --save X"; tail -3 "$TMP/res.out" >&2; }
run_np 1 train $RUN --train-iters 22 --load "$TMP/own.two/" --save "$TMP/own.two" >"$TMP/res.out" 2>&1 &&
    ok || { fail "--load X/ --save X (nothing to train, nothing to save again)"; tail -3 "$TMP/res.out" >&2; }
# the flag: the run saves iteration 5 beside 25; latest stays at 25, 25 untouched
snap "$TMP/own.later" | grep iter_0000025 >"$TMP/keep25"
run_np 1 train $RUN --train-iters 5 --save "$TMP/own.later" --overwrite-checkpoints >"$TMP/flag.out" 2>&1 &&
    [ "$(latest "$TMP/own.later")" = 25 ] && [ -f "$TMP/own.later/iter_0000005/manifest.json" ] &&
    [ "$(snap "$TMP/own.later" | grep iter_0000025)" = "$(cat "$TMP/keep25")" ] &&
    grep -q "stays at iteration 25" "$TMP/flag.out" && ok ||
    { fail "train --overwrite-checkpoints: iteration 5 saved, latest still 25"; tail -3 "$TMP/flag.out" >&2; }
"$PTDP" train $RUN --train-iters 5 --overwrite-checkpoints >/dev/null 2>"$TMP/noflag.err"
[ $? = 2 ] && grep -q "overwrite-checkpoints applies to --save" "$TMP/noflag.err" && ok ||
    fail "--overwrite-checkpoints without --save"

# ---- import-megatron (the fixture is iteration 20)
snap "$TMP/own.later" >"$TMP/imp_later.snap"
"$PTDP" checkpoint import-megatron "$FIX/core_t2p2" "$TMP/own.later" >/dev/null 2>"$TMP/imp_later.err"
refused imp_later "already holds ptdp checkpoints (the newest: iteration 25)" "$TMP/own.later" $?
snap "$TMP/own.same" >"$TMP/imp_same.snap"
"$PTDP" checkpoint import-megatron "$FIX/core_t2p2" "$TMP/own.same" >/dev/null 2>"$TMP/imp_same.err"
refused imp_same "already holds ptdp checkpoints (the newest: iteration 20)" "$TMP/own.same" $?
"$PTDP" checkpoint info "$TMP/own.same" | grep -q "optimizer state yes" && ok ||
    fail "import over iteration 20: the AdamW state is gone"
# the flag: written beside iteration 25, which stays the latest; it holds the known weights
if "$PTDP" checkpoint import-megatron "$FIX/core_t2p2" "$TMP/own.later" --overwrite-checkpoints \
    >"$TMP/imp_flag.out" 2>&1 && [ "$(latest "$TMP/own.later")" = 25 ] &&
    grep -q "load this import with --load $TMP/own.later/iter_0000020" "$TMP/imp_flag.out" &&
    "$PTDP" export --load "$TMP/own.later/iter_0000020" --out "$TMP/imp.safetensors" >/dev/null 2>&1 &&
    "$PTDP_TOOLS/st_compare" --bitwise "$TMP/imp.safetensors" "$FIX/weights.safetensors" >/dev/null 2>&1; then ok; else
    fail "import-megatron --overwrite-checkpoints: written beside, latest kept, the known weights"
    cat "$TMP/imp_flag.out" >&2
fi

# ---- export-megatron
"$PTDP" checkpoint export-megatron "$TMP/own.same" "$TMP/meg" --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 >/dev/null 2>&1 && ok || fail "export-megatron t=2 p=2"
snap "$TMP/meg" >"$TMP/exp.snap"
"$PTDP" checkpoint export-megatron "$TMP/own.same" "$TMP/meg" >/dev/null 2>"$TMP/exp.err"
refused exp "meg is not empty (it holds " "$TMP/meg" $?
# the flag: iteration 20 replaced whole: one file, none of the t=2 p=2 layout beside it
files=$("$PTDP" checkpoint export-megatron "$TMP/own.same" "$TMP/meg" --overwrite-checkpoints \
    >/dev/null 2>"$TMP/exp2.err" && cd "$TMP/meg" && find . -type f -o -type d -name '*.tmp.*' | sort | tr '\n' ' ')
[ "$files" = "./iter_0000020/mp_rank_00/model_optim_rng.pt ./latest_checkpointed_iteration.txt " ] && ok ||
    { fail "export-megatron --overwrite-checkpoints left: $files"; cat "$TMP/exp2.err" >&2; }
"$PTDP" checkpoint import-megatron "$TMP/meg" "$TMP/back" >/dev/null 2>&1 &&
    "$PTDP" export --load "$TMP/back" --out "$TMP/back.safetensors" >/dev/null 2>&1 &&
    "$PTDP" export --load "$TMP/own.same" --out "$TMP/same.safetensors" >/dev/null 2>&1 &&
    "$PTDP_TOOLS/st_compare" --bitwise "$TMP/back.safetensors" "$TMP/same.safetensors" >/dev/null 2>&1 && ok ||
    fail "the replaced export does not hold the checkpoint's weights"
# a Megatron directory whose latest names a later iteration keeps it
echo 30 >"$TMP/meg/latest_checkpointed_iteration.txt"
"$PTDP" checkpoint export-megatron "$TMP/own.same" "$TMP/meg" --overwrite-checkpoints >"$TMP/exp3.out" 2>&1 &&
    [ "$(latest "$TMP/meg")" = 30 ] && grep -q "still says iteration 30" "$TMP/exp3.out" && ok ||
    { fail "export-megatron moved latest back from 30 to 20"; cat "$TMP/exp3.out" >&2; }
finish
