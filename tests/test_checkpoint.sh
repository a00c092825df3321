#!/usr/bin/env bash
# Checkpoints (--save/--load, ptdp checkpoint info/verify, export --load and
# --export-dtype bf16/fp16 with the fp16 range check, generate --load):
# - exact resume: a checkpoint of iteration 10 (of a run that stopped there, or
#   of the uninterrupted run itself) resumed with the same layout
#   gives bitwise the same lm_loss/grad_norm for iterations 11-20 as the
#   uninterrupted run, and its checkpoint at iteration 20 holds bitwise the
#   same weights and AdamW moments (every tensor of every shard; the manifests
#   are identical too) (plain, t=2 x p=2, d=2 with ZeRO-1, p=2 x v=2);
# - resharding: a checkpoint saved under one layout resumes under others and
#   matches the uninterrupted run's loss and grad norm within 1e-5 relative and
#   its final weights within 1e-5 absolute (the K third of c_attn.bias within
#   lr x 10 iterations = 1e-2, see compare_weights in parallel_lib.sh);
#   uneven stage splits included (layer numbering is global);
# - --finetune / --no-load-optim, a failed save leaving the previous
#   checkpoint loadable, and bad input (truncated, corrupted or missing shard,
#   newer format, wrong model shape): a message naming the file on every rank,
#   non-zero status, no training.
# --lr-decay-iters 20 so a 10-iteration run has the schedule of the 20-iteration
# one; Megatron's --adam-eps 1e-8; dropout 0.
source "$PTDP_SRC/tests/parallel_lib.sh"

ARGS="--mock-data --num-layers 4 --hidden-size 48 --num-attention-heads 4 --seq-length 16
 --micro-batch-size 1 --global-batch-size 8 --vocab-size 300 --lr 1e-3 --lr-warmup-iters 2 --lr-decay-iters 20
 --weight-decay 0.1 --adam-eps 1e-8 --hidden-dropout 0 --attention-dropout 0 --log-interval 100"
T2P2="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"
ZERO="--use-distributed-optimizer"

fields() { grep -o '"iteration":[0-9]*\|"lm_loss":[^,]*\|"grad_norm":[^,]*' "$1" | paste -d' ' - - -; }
last10() { fields "$1" | tail -10; }

# same_checkpoint A B: A and B's latest checkpoints hold the same shard files,
# each with bitwise the same tensors (weights and AdamW moments), dtypes, shapes
# and metadata, and identical manifest.json files (no field may differ: same
# iteration, data position, optimizer step, layout, shard records and CRCs).
same_checkpoint() {
    local a=$1/iter_0000020 b=$2/iter_0000020 f n=0
    [ "$(cat "$1/latest_checkpointed_iteration.txt")" = 20 ] && [ "$(cat "$2/latest_checkpointed_iteration.txt")" = 20 ] ||
        { echo "latest is not iteration 20" >&2; return 1; }
    [ "$(cd "$a" && ls)" = "$(cd "$b" && ls)" ] || { echo "different files" >&2; return 1; }
    grep -q '"kind":[[:space:]]*"exp_avg_sq"' "$a/manifest.json" || { echo "no optimizer state in $a" >&2; return 1; }
    cmp "$a/manifest.json" "$b/manifest.json" >&2 || return 1
    for f in "$a"/rank_*.safetensors; do
        "$PTDP_TOOLS/st_compare" --bitwise "$f" "$b/${f##*/}" >/dev/null || return 1
        n=$((n + 1))
    done
    [ "$n" -gt 0 ]
}

# exact NAME NP flags...: uninterrupted 20 vs 10 + resume 10, bitwise. With
# EXPORT_10 the 10 are a run of their own that stops there (saving at 5 and 10);
# without, the resume starts from the uninterrupted run's own checkpoint at 10
# (it saves every 5), copied out: one run fewer, and both ways of reaching
# iteration 10 are covered.
exact() {
    local name=$1 np=$2 every=()
    shift 2
    [ -n "${EXPORT_10:-}" ] || every=(--save-interval 5)
    run_np "$np" train $ARGS "$@" --train-iters 20 --log-jsonl "$TMP/$name.full.jsonl" --save "$TMP/$name.full.ck" \
        "${every[@]}" ${EXPORT_FULL:+--save-safetensors "$TMP/$name.full.safetensors"} >"$TMP/$name.full.out" 2>&1 ||
        { fail "$name: uninterrupted run"; tail -5 "$TMP/$name.full.out" >&2; return; }
    if [ -n "${EXPORT_10:-}" ]; then
        run_np "$np" train $ARGS "$@" --train-iters 10 --save "$TMP/$name.ck" --save-interval 5 \
            --save-safetensors "$TMP/$name.it10.safetensors" >"$TMP/$name.a.out" 2>&1 ||
            { fail "$name: first half"; tail -5 "$TMP/$name.a.out" >&2; return; }
        [ "$(cat "$TMP/$name.ck/latest_checkpointed_iteration.txt")" = 10 ] && [ -d "$TMP/$name.ck/iter_0000005" ] && ok ||
            fail "$name: expected iter_0000005, iter_0000010 and latest = 10"
    else
        [ "$(cat "$TMP/$name.full.ck/latest_checkpointed_iteration.txt")" = 20 ] &&
            [ "$(ls "$TMP/$name.full.ck" | grep -c '^iter_00000[0-9][05]$')" = 4 ] && ok ||
            fail "$name: expected iter_0000005, 10, 15, 20 and latest = 20"
        mkdir -p "$TMP/$name.ck" && cp -r "$TMP/$name.full.ck/iter_0000005" "$TMP/$name.full.ck/iter_0000010" "$TMP/$name.ck/" &&
            echo 10 >"$TMP/$name.ck/latest_checkpointed_iteration.txt"
    fi
    run_np "$np" train $ARGS "$@" --train-iters 20 --load "$TMP/$name.ck" --log-jsonl "$TMP/$name.res.jsonl" \
        --save "$TMP/$name.res.ck" >"$TMP/$name.b.out" 2>&1 ||
        { fail "$name: resumed run"; tail -5 "$TMP/$name.b.out" >&2; return; }
    [ "$(fields "$TMP/$name.res.jsonl" | wc -l)" -eq 10 ] && ok || fail "$name: resumed run should log 10 iterations"
    cmp -s <(last10 "$TMP/$name.full.jsonl") <(last10 "$TMP/$name.res.jsonl") && ok ||
        { fail "$name: resumed iterations 11-20 are not bitwise equal"; diff <(last10 "$TMP/$name.full.jsonl") \
            <(last10 "$TMP/$name.res.jsonl") | head -4 >&2; }
    same_checkpoint "$TMP/$name.full.ck" "$TMP/$name.res.ck" && ok ||
        fail "$name: the resumed run's weights or optimizer state at iteration 20 are not bitwise equal"
}
# exports only where used: the resharding sources' final weights, t2p2's at iteration 10
EXPORT_FULL=1 exact plain 1
EXPORT_FULL=1 EXPORT_10=1 exact t2p2 4 $T2P2
EXPORT_FULL=1 exact d2zero 2 $ZERO
EXPORT_FULL=1 exact p2v2 2 --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2
# same_checkpoint can fail: one weight or one AdamW moment element of one shard moved
for key in param/layers.1.mlp.dense_h_to_4h.weight exp_avg/layers.0.self_attention.dense.weight/0; do
    cp -r "$TMP/plain.res.ck" "$TMP/moved.ck"
    "$PTDP_TOOLS/st_perturb" "$TMP/plain.res.ck/iter_0000020/rank_00000.safetensors" \
        "$TMP/moved.ck/iter_0000020/rank_00000.safetensors" "$key" 7 1e-7 >/dev/null &&
        ! same_checkpoint "$TMP/plain.full.ck" "$TMP/moved.ck" 2>/dev/null && ok ||
        fail "same_checkpoint missed a change of 1e-7 in element 7 of $key"
    rm -rf "$TMP/moved.ck"
done

# reshard FROM NAME NP flags...: resume FROM's iteration-10 checkpoint under another layout
reshard() {
    local from=$1 name=$2 np=$3
    shift 3
    run_np "$np" train $ARGS "$@" --train-iters 20 --load "$TMP/$from.ck" --log-jsonl "$TMP/$name.jsonl" \
        --save-safetensors "$TMP/$name.safetensors" >"$TMP/$name.out" 2>&1 ||
        { fail "$name: run failed"; tail -5 "$TMP/$name.out" >&2; return; }
    tail -10 "$TMP/$from.full.jsonl" >"$TMP/$name.ref.jsonl"
    compare_jsonl "$TMP/$name.ref.jsonl" "$TMP/$name.jsonl" lm_loss 1e-5 && ok || fail "$name: loss differs"
    compare_jsonl "$TMP/$name.ref.jsonl" "$TMP/$name.jsonl" grad_norm 1e-5 && ok || fail "$name: grad norm differs"
    compare_weights "$TMP/$from.full.safetensors" "$TMP/$name.safetensors" 1e-2 && ok || fail "$name: final weights differ"
}
reshard t2p2 t2p2_to_d2zero 2 $ZERO
reshard t2p2 t2p2_to_p2v2 2 --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2
reshard t2p2 t2p2_to_plain 1
reshard d2zero d2zero_to_t2p2 4 $T2P2
reshard d2zero d2zero_to_t2d2 4 --tensor-model-parallel-size 2
reshard p2v2 p2v2_to_t2zero 4 --tensor-model-parallel-size 2 $ZERO
# Uneven stages keep global layer numbers: a checkpoint of a 3+1 split resumes
# under the even p=2 split, and t2p2's even checkpoint under a 1+3 split. The
# uneven run's own references are the one process's (the same iteration).
run_np 2 train $ARGS --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout "Et*3|t,L" --train-iters 10 \
    --save "$TMP/uneven.ck" >"$TMP/uneven.out" 2>&1 && ok || { fail "uneven split: run failed"; tail -5 "$TMP/uneven.out" >&2; }
cp "$TMP/plain.full.jsonl" "$TMP/uneven.full.jsonl"
cp "$TMP/plain.full.safetensors" "$TMP/uneven.full.safetensors"
reshard uneven uneven_to_p2 2 --pipeline-model-parallel-size 2
reshard t2p2 t2p2_to_first1 2 --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 1

# info and verify
"$PTDP" checkpoint info "$TMP/t2p2.ck" >"$TMP/info.txt" 2>&1 && ok || fail "checkpoint info failed"
grep -q "iteration 10, consumed samples 80" "$TMP/info.txt" && grep -q "t=2 p=2 d=1 v=1" "$TMP/info.txt" &&
    grep -q "rank_00003.safetensors" "$TMP/info.txt" && grep -q "layers.3.mlp.dense_4h_to_h.weight .*\[48, 192\]" \
    "$TMP/info.txt" && ok || { fail "checkpoint info output"; cat "$TMP/info.txt" >&2; }
for n in plain t2p2 d2zero p2v2; do
    "$PTDP" checkpoint verify "$TMP/$n.ck" >"$TMP/verify.txt" 2>&1 && grep -q "OK" "$TMP/verify.txt" && ok ||
        { fail "checkpoint verify $n"; cat "$TMP/verify.txt" >&2; }
done
# d=2 ZeRO-1: both data-parallel ranks wrote their optimizer shard
[ -f "$TMP/d2zero.ck/iter_0000010/rank_00001.safetensors" ] && ok || fail "ZeRO-1 rank 1 wrote no optimizer shard"

# export --load from a t=2 x p=2 checkpoint equals the run's own export at iteration 10
"$PTDP" export --load "$TMP/t2p2.ck" --out "$TMP/exp.safetensors" >"$TMP/exp.out" 2>&1 && ok ||
    { fail "export --load"; cat "$TMP/exp.out" >&2; }
"$PTDP_TOOLS/st_compare" "$TMP/t2p2.it10.safetensors" "$TMP/exp.safetensors" 0 >/dev/null && ok ||
    fail "export --load differs from the weights at iteration 10"

# --export-dtype bf16 / fp16: the header names the dtype; every value is the fp32 export's,
# rounded (half an ulp: |w| < 2 here, so 2^-8 for bf16, 2^-11 for fp16); the file loads back
# exactly (export --init-from it in fp32 holds the widened values) and generates
MODEL="--num-layers 4 --hidden-size 48 --num-attention-heads 4 --seq-length 16 --vocab-size 300"
header() { head -c $((8 + $(od -An -tu8 -N8 "$1"))) "$1" | tail -c +9; }
for spec in fp32:F32:0 bf16:BF16:0.00391 fp16:F16:0.000489; do
    IFS=: read -r dt name tol <<<"$spec"
    f="$TMP/exp.$dt.safetensors"
    "$PTDP" export --load "$TMP/t2p2.ck" --export-dtype "$dt" --out "$f" >"$TMP/exp.out" 2>&1 && ok ||
        { fail "export --export-dtype $dt"; cat "$TMP/exp.out" >&2; continue; }
    [ "$(header "$f" | grep -o '"dtype":"[A-Z0-9]*"' | sort -u)" = "\"dtype\":\"$name\"" ] && ok ||
        fail "export --export-dtype $dt: header dtypes $(header "$f" | grep -o '"dtype":"[A-Z0-9]*"' | sort -u)"
    "$PTDP_TOOLS/st_compare" "$TMP/exp.safetensors" "$f" "$tol" >/dev/null && ok ||
        fail "export --export-dtype $dt: values are not the fp32 ones rounded"
    "$PTDP" export $MODEL --init-from "$f" --out "$TMP/back.$dt.safetensors" >"$TMP/exp.out" 2>&1 &&
        "$PTDP_TOOLS/st_compare" "$f" "$TMP/back.$dt.safetensors" 0 >/dev/null && ok ||
        { fail "a $dt export does not load back exactly"; cat "$TMP/exp.out" >&2; }
    "$PTDP" generate --init-from "$f" --prompt "5 17 42" --max-new-tokens 4 --temperature 0 \
        >"$TMP/gen.$dt.out" 2>&1 && [ "$(head -1 "$TMP/gen.$dt.out" | wc -w)" -eq 7 ] && ok ||
        { fail "generate --init-from a $dt export"; cat "$TMP/gen.$dt.out" >&2; }
done
[ "$(stat -c %s "$TMP/exp.bf16.safetensors")" -lt "$(stat -c %s "$TMP/exp.safetensors")" ] && ok ||
    fail "a bf16 export is not smaller than the fp32 one"
# fp16 refuses a weight beyond its range instead of writing inf, and says what to use
"$PTDP_TOOLS/st_perturb" "$TMP/exp.safetensors" "$TMP/big.safetensors" transformer.h.1.mlp.c_fc.weight 7 1e5 \
    >/dev/null && cp "$TMP/exp.config.json" "$TMP/big.config.json"
"$PTDP" export $MODEL --init-from "$TMP/big.safetensors" --export-dtype fp16 --out "$TMP/big16.safetensors" \
    >"$TMP/big.out" 2>&1
[ $? -ne 0 ] && grep -q "transformer.h.1.mlp.c_fc.weight element 7 is 1.*beyond fp16.*--export-dtype bf16" \
    "$TMP/big.out" && [ ! -e "$TMP/big16.safetensors" ] && ok ||
    { fail "export --export-dtype fp16 of a value > 65504"; cat "$TMP/big.out" >&2; }
"$PTDP" export $MODEL --init-from "$TMP/big.safetensors" --export-dtype bf16 --out "$TMP/big16.safetensors" \
    >/dev/null 2>&1 && ok || fail "export --export-dtype bf16 of a value > 65504"

# --no-load-optim keeps the iteration, --finetune restarts at 1
run_np 1 train $ARGS --train-iters 12 --load "$TMP/plain.ck" --no-load-optim --log-jsonl "$TMP/nlo.jsonl" \
    >"$TMP/nlo.out" 2>&1 && [ "$(fields "$TMP/nlo.jsonl" | head -1 | cut -d' ' -f1)" = '"iteration":11' ] && ok ||
    fail "--no-load-optim should resume at iteration 11"
run_np 1 train $ARGS --train-iters 2 --load "$TMP/plain.ck" --finetune --log-jsonl "$TMP/ft.jsonl" \
    >"$TMP/ft.out" 2>&1 && [ "$(fields "$TMP/ft.jsonl" | head -1 | cut -d' ' -f1)" = '"iteration":1' ] && ok ||
    fail "--finetune should start at iteration 1"
# ...with the checkpoint's weights: its first loss is not the fresh model's
[ "$(fields "$TMP/ft.jsonl" | head -1 | cut -d' ' -f2)" != "$(fields "$TMP/plain.full.jsonl" | head -1 | cut -d' ' -f2)" ] &&
    ok || fail "--finetune did not load the weights"
# --load of an empty directory: warning, start from scratch (Megatron)
mkdir -p "$TMP/empty"
run_np 1 train $ARGS --train-iters 1 --load "$TMP/empty" >"$TMP/empty.out" 2>&1 &&
    grep -q "holds no checkpoint" "$TMP/empty.out" && ok || fail "--load of an empty directory"

# A save that fails on one rank leaves the previous checkpoint current.
cp -r "$TMP/t2p2.ck" "$TMP/fault.ck"
PTDP_FAULT=save@2 "$MPIRUN" --oversubscribe -np 4 -x PTDP_FAULT "$PTDP" train $ARGS $T2P2 \
    --train-iters 12 --load "$TMP/fault.ck" --save "$TMP/fault.ck" >"$TMP/fault.out" 2>&1
rc=$?
[ "$rc" -ne 0 ] && ok || fail "a failed save should fail the run"
[ "$(grep -c "injected failure" "$TMP/fault.out")" -eq 4 ] && ok || { fail "failed save: message on every rank";
    cat "$TMP/fault.out" >&2; }
[ "$(cat "$TMP/fault.ck/latest_checkpointed_iteration.txt")" = 10 ] && [ ! -f "$TMP/fault.ck/iter_0000012/manifest.json" ] &&
    ok || fail "failed save moved the latest pointer or wrote a manifest"
"$PTDP" checkpoint verify "$TMP/fault.ck" >/dev/null 2>&1 && ok || fail "previous checkpoint no longer verifies"

# Bad input: message naming the file on each of 2 ranks, non-zero status, no training.
# (bad_load, not bad: script_lib's fail calls bad)
bad_load() { # bad_load NAME "message part" [flags]
    local name=$1 msg=$2
    shift 2
    run_np 2 train $ARGS --train-iters 20 --load "$TMP/$name" "$@" >"$TMP/bad.out" 2>"$TMP/bad.err"
    local rc=$?
    [ "$rc" -ne 0 ] || { fail "$name: expected a non-zero status"; return; }
    [ "$(grep -c "ptdp: error:.*$msg" "$TMP/bad.err")" -eq 2 ] && ok ||
        { fail "$name: expected '$msg' from each of 2 ranks"; cat "$TMP/bad.err" >&2; }
    grep -q "iteration .*/" "$TMP/bad.out" && fail "$name: training started" || ok
    if [ -z "${NOVERIFY:-}" ]; then
        "$PTDP" checkpoint verify "$TMP/$name" >/dev/null 2>"$TMP/ver.err"
        [ $? -eq 1 ] && grep -q "ptdp: error:.*$msg" "$TMP/ver.err" && ok ||
            { fail "$name: verify should fail with '$msg'"; cat "$TMP/ver.err" >&2; }
    fi
}
F=iter_0000010/rank_00001.safetensors
cp -r "$TMP/t2p2.ck" "$TMP/trunc" && truncate -s -100 "$TMP/trunc/$F"
bad_load trunc "rank_00001.safetensors: the file is .* bytes but manifest.json says"
cp -r "$TMP/t2p2.ck" "$TMP/corrupt" && printf 'X' | dd of="$TMP/corrupt/$F" bs=1 seek=5000 conv=notrunc status=none
bad_load corrupt "rank_00001.safetensors: checksum mismatch"
cp -r "$TMP/t2p2.ck" "$TMP/missing" && rm "$TMP/missing/$F"
bad_load missing "rank_00001.safetensors: cannot open"
# a shard that is a symbolic link out of the checkpoint directory (here to an
# identical file, so only the link itself is wrong) is refused by name
cp -r "$TMP/t2p2.ck" "$TMP/escape" && rm "$TMP/escape/$F" && ln -s "$TMP/t2p2.ck/$F" "$TMP/escape/$F"
bad_load escape "rank_00001.safetensors: a symbolic link to .* outside the checkpoint directory: refused"
cp -r "$TMP/t2p2.ck" "$TMP/newer" && sed -i 's/"version":[[:space:]]*1,/"version": 2,/' "$TMP/newer/iter_0000010/manifest.json"
bad_load newer "manifest.json: format version 2 is newer"
cp -r "$TMP/t2p2.ck" "$TMP/nomanifest" && rm "$TMP/nomanifest/iter_0000010/manifest.json"
bad_load nomanifest "cannot open the checkpoint manifest .*/manifest.json': No such file"
NOVERIFY=1 bad_load t2p2.ck "the checkpoint's model has --hidden-size 48 but the flags give 64" --hidden-size 64
NOVERIFY=1 bad_load t2p2.ck "the checkpoint's model has --num-layers 4 but the flags give 8" --num-layers 8
"$PTDP" checkpoint verify "$TMP/empty" >/dev/null 2>&1
[ $? -eq 1 ] && ok || fail "verify of an empty directory should exit 1"
"$PTDP" checkpoint frobnicate "$TMP/empty" >/dev/null 2>&1
[ $? -eq 2 ] && ok || fail "bad usage should exit 2"
run_np 1 train $ARGS --train-iters 1 --save-interval 5 >/dev/null 2>"$TMP/si.err"
[ $? -eq 2 ] && grep -q "save-interval needs --save" "$TMP/si.err" && ok || fail "--save-interval without --save"

# generate --load: the t2p2 checkpoint, read by t=1 and by t=2, samples greedily
# exactly what --init-from the same weights (exported at iteration 10) does.
gen() { "$@" --prompt "1 2 3 4" --max-new-tokens 6 --temperature 0 2>/dev/null | tail -1; }
want=$(gen "$PTDP" generate --init-from "$TMP/t2p2.it10.safetensors")
got1=$(gen "$PTDP" generate --load "$TMP/t2p2.ck")
got2=$(gen run_np 2 generate --load "$TMP/t2p2.ck" --tensor-model-parallel-size 2)
[ -n "$want" ] && [ "$got1" = "$want" ] && [ "$got2" = "$want" ] && ok ||
    fail "generate --load: '$got1' (t=1), '$got2' (t=2), want '$want'"

finish
