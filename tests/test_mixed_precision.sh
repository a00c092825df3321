#!/usr/bin/env bash
# test_mixed_precision.sh - Megatron's --bf16 and --fp16 end to end (see
# docs/mixed-precision.md): bf16 tracks fp32; bf16 under 11 parallel layouts
# equals the single-process bf16 run; fp16's dynamic loss scaler skips and
# backs off exactly by Megatron's rule, skips the same iterations on every
# layout, and an injected non-finite gradient on one rank skips the
# iteration everywhere; checkpoints hold fp32 master weights (bitwise resume,
# fp16 -> fp32 -> bf16 resumes); 200 iterations on Moby Dick keep bf16
# within 1% of fp32; bad precision flags give one error each.
#
# Tolerances. bf16 keeps 8 significant bits: unit roundoff u = 2^-8 = 3.9e-3
# (half an ulp; one ulp is 2u = 2^-7 relative). A layout changes only the
# order of fp32 sums before a rounding (tensor-parallel partial sums and GEMM
# shapes, micro-batch grouping of weight gradients), so each rounded value
# may land one ulp away from the single process's; over more than two tensor
# ranks the 16-bit all-reduces and reduce-scatters also round each partial
# sum (as NCCL sums bf16 buffers), a few such roundings more per value (t=4,
# with and without sequence parallelism, measured up to 4.6e-5 on the loss and
# 2.3e-3 on the grad norm). Losses average many token
# losses and agree to u/2 (rtol 2^-9); gradient norms, after a few updates
# from such gradients, to one ulp (rtol 2^-7: with native bf16 GEMMs tensor
# parallelism measured 4.1e-3 at iteration 6, 2.0e-3 with fp32 GEMMs).
# Against fp32 over 8 iterations the bf16 loss differs by rounding noise of
# the same kind: rtol u.
source "$PTDP_SRC/tests/parallel_lib.sh"
export OMP_NUM_THREADS=1

M="--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 256 --mock-data
 --lr 1e-3 --micro-batch-size 1 --global-batch-size 8 --train-iters 8 --log-interval 1 --lr-decay-iters 20
 --hidden-dropout 0.1 --attention-dropout 0.1"

# ---- bf16 tracks fp32; the start-up line says which path runs -----------------------
run_np 1 train $M --log-jsonl "$TMP/f32.jsonl" >"$TMP/f32.out" 2>&1 && ok || fail "fp32 run: $(tail -3 "$TMP/f32.out")"
run_np 1 train $M --bf16 --log-jsonl "$TMP/b1.jsonl" >"$TMP/b1.out" 2>&1 && ok || fail "bf16 run: $(tail -3 "$TMP/b1.out")"
grep -q "mixed precision: bf16 activations and working weights, fp32 arithmetic, fp32 master weights" "$TMP/b1.out" &&
    grep -Eq "bf16 values in fp32 storage \(every op rounds its outputs(; the MLP's own activations in bf16 storage)?\), 16-bit messages between ranks; compute backend cpu/onednn/bf16(-native \(GEMMs: oneDNN's native bf16 matmul|  \(GEMMs: fp32 on)" "$TMP/b1.out" &&
    ok || fail "no start-up line for bf16: $(grep 'mixed precision' "$TMP/b1.out")"
grep -q "optimizer state 12.00 B (fp32 master weights" "$TMP/b1.out" && ok || fail "bf16: optimizer state is not 12 B"
check_plan "$TMP/b1.out" 1 && ok || fail "bf16: memory plan differs from the allocation"
# the native table (AVX512_BF16) stores the MLP's fc and gl (and the workspace's dfc) in bf16:
# per layer 2 x N fl values (N = 32 tokens, fl = 256) of 2 bytes less, 4 layers in the stash
act_bytes() { sed -n 's/.*activation memory (pipeline stage 0): measured peak [^(]*(\([0-9]*\) bytes.*predicted [^(]*(\([0-9]*\) bytes).*/\1 \2/p' "$1"; }
read -r af32 pf32 <<<"$(act_bytes "$TMP/f32.out")"
read -r ab16 pb16 <<<"$(act_bytes "$TMP/b1.out")"
if grep -q "the MLP's own activations in bf16 storage" "$TMP/b1.out"; then
    [ "$ab16" = "$pb16" ] && [ $((af32 - ab16)) = $((4 * 2 * 32 * 256 * 2 + 32 * 256 * 2)) ] && ok ||
        fail "bf16 MLP storage: activation peak $ab16 (predicted $pb16) against fp32's $af32, want 147456 bytes less"
else
    [ "$ab16" = "$af32" ] && ok || fail "bf16 without native MLP storage: activation peak $ab16, fp32's $af32"
fi
compare_jsonl "$TMP/f32.jsonl" "$TMP/b1.jsonl" lm_loss 0.00390625 && ok || fail "bf16 does not track fp32"
! cmp -s <(grep -o '"lm_loss":[^,]*' "$TMP/f32.jsonl") <(grep -o '"lm_loss":[^,]*' "$TMP/b1.jsonl") && ok ||
    fail "bf16 losses equal fp32's bit for bit: nothing was rounded"

# ---- bf16 under 11 layouts (two zero-bubble: B and W apart) equals one bf16 process (dropout on) -------------------------
L=("2:--tensor-model-parallel-size 2"
   "2:--pipeline-model-parallel-size 2"
   "2:--pipeline-model-parallel-size 2 --pipeline-schedule gpipe"
   "2:--pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2"
   "2:--use-distributed-optimizer"
   "2:--pipeline-model-parallel-size 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
   "4:--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"
   "4:--tensor-model-parallel-size 2 --use-distributed-optimizer --sequence-parallel"
   "4:--tensor-model-parallel-size 4 --sequence-parallel"
   "2:--pipeline-model-parallel-size 2 --pipeline-schedule zb-h1"
   "2:--pipeline-model-parallel-size 2 --pipeline-schedule zb-v")
i=0
for l in "${L[@]}"; do
    i=$((i + 1))
    run_np "${l%%:*}" train $M --bf16 ${l#*:} --log-jsonl "$TMP/l$i.jsonl" >"$TMP/l$i.out" 2>&1 && ok ||
        fail "bf16 ${l#*:}: $(tail -3 "$TMP/l$i.out")"
    compare_jsonl "$TMP/b1.jsonl" "$TMP/l$i.jsonl" lm_loss 0.001953125 && ok || fail "bf16 ${l#*:}: lm_loss differs"
    compare_jsonl "$TMP/b1.jsonl" "$TMP/l$i.jsonl" grad_norm 0.0078125 && ok || fail "bf16 ${l#*:}: grad_norm differs"
done

# ---- fp16: Megatron's dynamic scaler from 2^32 ------------------------------------------
# With hysteresis 2 the first overflow keeps the scale, every later one halves it; after
# --loss-scale-window 3 clean iterations in a row it doubles (and hysteresis is refilled).
F="$M --fp16 --train-iters 24 --loss-scale-window 3"
run_np 1 train $F --log-jsonl "$TMP/h1.jsonl" >"$TMP/h1.out" 2>&1 && ok || fail "fp16 run: $(tail -3 "$TMP/h1.out")"
grep -q "dynamic loss scale from 4.29497e+09 (window 3, hysteresis 2)" "$TMP/h1.out" && ok || fail "fp16 start-up line"
paste -d' ' <(grep -o '"skipped":[01]' "$TMP/h1.jsonl" | cut -d: -f2) \
    <(grep -o '"loss_scale":[0-9.e+]*' "$TMP/h1.jsonl" | cut -d: -f2) >"$TMP/h1.seq"
awk 'BEGIN { s = 4294967296; hy = 2; g = 0 }
     { if ($1 == 1) { g = 0; hy--; if (hy <= 0) s = s / 2 < 1 ? 1 : s / 2 }
       else if (++g == 3) { g = 0; hy = 2; s *= 2 }
       if ($2 + 0 != s) { printf "iteration %d: scale %s, want %.0f\n", NR, $2, s; bad = 1 }
       skipped += $1 }
     END { exit (bad || NR != 24) }' "$TMP/h1.seq" && ok || fail "fp16 loss scales do not follow Megatron's rule"
[ "$(head -1 "$TMP/h1.seq")" = "1 4294967296" ] && ok || fail "fp16: iteration 1 at 2^32 should overflow and skip"
grep -q '^0 ' "$TMP/h1.seq" && ok || fail "fp16: the scale never came down to a working value"
awk '$1 == 0 { n++; if (prev != "" && $2 > prev) up = 1 } { prev = $2 } END { exit !(up) }' "$TMP/h1.seq" && ok ||
    fail "fp16: the scale never grew after the window: $(tr '\n' ',' <"$TMP/h1.seq")"
grep -q "loss scale: 4294967296.0 |" "$TMP/h1.out" && ok || fail "fp16: the log line does not print the loss scale"
# the same iterations are skipped, with the same scales, on other layouts
for l in "2:--tensor-model-parallel-size 2" "4:--pipeline-model-parallel-size 2 --use-distributed-optimizer"; do
    run_np "${l%%:*}" train $F ${l#*:} --log-jsonl "$TMP/h.jsonl" >"$TMP/h.out" 2>&1 && ok || fail "fp16 ${l#*:}"
    [ "$(grep -o '"skipped":[01],"loss_scale":[0-9.e+]*' "$TMP/h.jsonl")" = \
      "$(grep -o '"skipped":[01],"loss_scale":[0-9.e+]*' "$TMP/h1.jsonl")" ] && ok ||
        fail "fp16 ${l#*:}: skipped iterations or scales differ from one process"
done
# an inf/nan gradient on one rank (fault injection) skips the iteration on every rank;
# the replicas stay identical and the run goes on
PTDP_FAULT=nan@1:3 run_np 2 train $M --fp16 --initial-loss-scale 1024 --train-iters 5 --check-dp-replicas \
    --log-jsonl "$TMP/nan.jsonl" >"$TMP/nan.out" 2>&1 && ok || fail "fp16 with a nan on rank 1: $(tail -3 "$TMP/nan.out")"
[ "$(grep -o '"skipped":[01]' "$TMP/nan.jsonl" | cut -d: -f2 | tr -d '\n')" = 00100 ] && ok ||
    fail "the nan on rank 1 at iteration 3 should skip iteration 3 only: $(grep -o '"skipped":[01]' "$TMP/nan.jsonl" | tr '\n' ' ')"
grep -q "iteration        3/.*loss scale: 1024.0 |.*number of skipped iterations:   1 | number of nan iterations:   0 |" \
    "$TMP/nan.out" && ok || fail "iteration 3: one skipped, no nan iteration (the loss was finite), scale kept by hysteresis"

# ---- checkpoints hold fp32 master weights ------------------------------------------------
C="$M --train-iters 6"
run_np 1 train $C --bf16 --save "$TMP/ck" --save-interval 3 --log-jsonl "$TMP/c6.jsonl" >/dev/null 2>&1 && ok || fail "bf16 save"
echo 3 >"$TMP/ck/latest_checkpointed_iteration.txt"
run_np 1 train $C --bf16 --load "$TMP/ck" --log-jsonl "$TMP/c3.jsonl" >/dev/null 2>&1 && ok || fail "bf16 resume"
[ "$(grep -o '"lm_loss":[^,]*,"grad_norm":[^,]*' "$TMP/c6.jsonl" | tail -3)" = \
  "$(grep -o '"lm_loss":[^,]*,"grad_norm":[^,]*' "$TMP/c3.jsonl")" ] && ok || fail "bf16 resume is not bitwise"
# fp16 -> fp32 -> bf16, resharded on the way (the fp16 checkpoint's scaler is ignored by fp32)
run_np 1 train $C --fp16 --initial-loss-scale 1024 --train-iters 2 --save "$TMP/mix" >/dev/null 2>&1 && ok || fail "fp16 save"
run_np 2 train $C --train-iters 4 --load "$TMP/mix" --save "$TMP/mix" --tensor-model-parallel-size 2 >/dev/null 2>&1 &&
    ok || fail "fp16 checkpoint -> fp32 t=2"
run_np 2 train $C --bf16 --load "$TMP/mix" --pipeline-model-parallel-size 2 --log-jsonl "$TMP/mix.jsonl" >"$TMP/mix.out" 2>&1 &&
    ok || fail "fp32 checkpoint -> bf16 p=2: $(tail -2 "$TMP/mix.out")"
compare_jsonl <(grep -o '"lm_loss":[^,]*' "$TMP/f32.jsonl" | sed -n 5,6p) "$TMP/mix.jsonl" lm_loss 0.0078125 && ok ||
    fail "fp16 -> fp32 -> bf16 drifted from the fp32 run by more than 2u"

# fp16 resumes bitwise too, the dynamic scaler where it was (scale, growth and hysteresis)
H="$M --fp16 --train-iters 16 --loss-scale-window 3"
run_np 1 train $H --save "$TMP/h16" --save-interval 12 --log-jsonl "$TMP/h16.jsonl" >/dev/null 2>&1 && ok || fail "fp16 save"
echo 12 >"$TMP/h16/latest_checkpointed_iteration.txt"
run_np 1 train $H --load "$TMP/h16" --log-jsonl "$TMP/h12.jsonl" >/dev/null 2>&1 && ok || fail "fp16 resume"
grep -q '"loss_scale"' "$TMP/h16/iter_0000012/manifest.json" && ok || fail "fp16: no scaler state in the manifest"
[ "$(grep -o '"lm_loss".*"skipped":[01],"loss_scale":[0-9.e+]*' "$TMP/h16.jsonl" | sed 's/"elapsed_ms[^,]*,"tokens_per_s[^,]*,"tflops[^,]*,//' | tail -4)" = \
  "$(grep -o '"lm_loss".*"skipped":[01],"loss_scale":[0-9.e+]*' "$TMP/h12.jsonl" | sed 's/"elapsed_ms[^,]*,"tokens_per_s[^,]*,"tflops[^,]*,//')" ] &&
    ok || fail "fp16 resume is not bitwise (losses, skips, scales)"
# generation in bf16 and fp16 from the bf16 run's checkpoint
for f in --bf16 --fp16 ""; do
    "$PTDP" generate --load "$TMP/ck" --prompt "1 2 3" --max-new-tokens 4 --temperature 0 $f >"$TMP/g$f" 2>&1 &&
        [ "$(wc -w <"$TMP/g$f")" -ge 7 ] && ok || fail "generate $f: $(cat "$TMP/g$f")"
done

# ---- 200 iterations on Moby Dick: bf16 within 1% of fp32 --------------------------------
moby_dick
X="--data-path $TMP/moby_text_document $V --split 100,0,0 --eval-iters 0 --num-layers 2 --hidden-size 64
 --num-attention-heads 4 --seq-length 64 --micro-batch-size 4 --global-batch-size 8 --train-iters 200 --lr 3e-3
 --lr-warmup-iters 10 --log-interval 50 --hidden-dropout 0 --attention-dropout 0"
run_np 1 train $X --log-jsonl "$TMP/m32.jsonl" >/dev/null 2>&1 && ok || fail "Moby Dick fp32"
run_np 1 train $X --bf16 --log-jsonl "$TMP/m16.jsonl" >/dev/null 2>&1 && ok || fail "Moby Dick bf16"
last10() { grep -o '"lm_loss":[^,]*' "$1" | tail -10 | cut -d: -f2 | awk '{ s += $1 } END { printf "%.6f", s / NR }'; }
a=$(last10 "$TMP/m32.jsonl") b=$(last10 "$TMP/m16.jsonl")
awk -v a="$a" -v b="$b" 'BEGIN { d = (a - b) / a; if (d < 0) d = -d; exit !(d < 0.01 && a < 9) }' && ok ||
    fail "Moby Dick, mean loss of iterations 191-200: fp32 $a, bf16 $b (want within 1%, and learning)"
echo "Moby Dick iterations 191-200: fp32 $a, bf16 $b" >&2

# ---- bad precision flags ------------------------------------------------------------------
for c in "--bf16 --fp16|give --bf16 or --fp16, not both" "--loss-scale 128|--loss-scale applies to --fp16" \
    "--bf16 --device cuda|the CUDA backend trains in fp32 only so far"; do
    "$PTDP" train $M ${c%%|*} >"$TMP/o" 2>"$TMP/e"
    [ $? -eq 2 ] && [ "$(wc -l <"$TMP/e")" = 1 ] && grep -qF -- "${c#*|}" "$TMP/e" && ok || fail "${c%%|*}: $(cat "$TMP/e")"
done
finish
