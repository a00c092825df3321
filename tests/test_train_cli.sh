# test_train_cli.sh - `ptdp train` and `ptdp export` from the outside: every
# documented bad input (exit status 2 for a bad flag, configuration or input
# file contents, 1 for a file that cannot be opened, read or written; one
# "ptdp: error:" line naming the flag or file; no training), --help, --config
# (keys with dashes or underscores, flags win), the --log-jsonl keys, the
# Megatron LR schedule, export's file layout, and a safetensors round trip.
source "$PTDP_SRC/tests/script_lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# Tiny model; the shapes of tests/fixtures/gpt_a.safetensors.
MODEL="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 128"
M="$MODEL --train-iters 2 --lr 1e-3"
FIXTURE=$PTDP_SRC/tests/fixtures/gpt_a.safetensors

# expect_error STATUS "text the message must contain" command args...
# (STATUS may be an alternation such as "1|2").
# Errors found after MPI starts carry the "[dp,pp,tp] " log prefix.
expect_error() {
    local want=$1 text=$2
    shift 2
    "$PTDP" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [[ "$rc" =~ ^($want)$ ]] && ok || bad "ptdp $* exited $rc, want $want"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] && ok || bad "ptdp $*: want one stderr line, got: $(cat "$tmp/err")"
    grep -Eq '^(\[[0-9]+,[0-9]+,[0-9]+\] )?ptdp: error: ' "$tmp/err" && ok ||
        bad "ptdp $*: stderr does not start with 'ptdp: error:': $(cat "$tmp/err")"
    grep -qF -- "$text" "$tmp/err" && ok || bad "ptdp $*: message lacks '$text': $(cat "$tmp/err")"
    ! grep -q 'iteration' "$tmp/out" && ok || bad "ptdp $*: trained before failing"
}

# ---- flag syntax ----------------------------------------------------------
expect_error 2 "did you mean '--num-layers'" train $M --mock-data --num-layer 2
expect_error 2 "did you mean '--hidden-dropout'" train $M --mock-data --hiden-dropout 0
expect_error 2 "--seed needs a value" train $M --mock-data --seed
expect_error 2 "--num-layers expects an integer" train $M --mock-data --num-layers two
expect_error 2 "--micro-batch-size expects an integer" train $M --mock-data --micro-batch-size 1.5
expect_error 2 "--lr expects a number" train $M --mock-data --lr fast
expect_error 2 "--hidden-dropout must be between" train $M --mock-data --hidden-dropout 1.5
expect_error 2 "--num-layers must be between" train $M --mock-data --num-layers 0
expect_error 2 "--lr-decay-style must be one of" train $M --mock-data --lr-decay-style foo
expect_error 2 "--gemm must be one of" train $M --mock-data --gemm foo
expect_error 2 "--device must be one of" train $M --mock-data --device tpu
expect_error 2 "unexpected argument 'stray'" train $M --mock-data stray

# Megatron flags ptdp lacks get a specific message, not a spelling guess; --overlap-grad-reduce is accepted
expect_error 2 "--fp8-format is not supported: ptdp trains in fp32, bf16 or fp16" train $M --mock-data --fp8-format e4m3
expect_error 2 "--qk-layernorm is not supported: ptdp's GPT is GPT-2's" train $M --mock-data --qk-layernorm
expect_error 2 "--use-rotary-position-embeddings is not supported: older Megatron-LM's name: use --position-embedding-type rope" train $M --mock-data --use-rotary-position-embeddings
expect_error 2 "--wandb-project is not supported: see --tensorboard-dir or --log-jsonl" train $M --mock-data --wandb-project x
# --sequence-parallel splits s across the tensor group: t = 3 does not divide s = 16, and every
# rank says so (3 ranks, 3 identical lines, status 2, no training)
"$MPIRUN" --oversubscribe -np 3 "$PTDP" train $M --mock-data --hidden-size 48 --num-attention-heads 6 \
    --tensor-model-parallel-size 3 --sequence-parallel >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 2 ] && [ "$(grep -c '^ptdp: error: --sequence-parallel splits the sequence across the tensor-parallel group: --seq-length 16 is not divisible by --tensor-model-parallel-size 3' "$tmp/err")" = 3 ] &&
    ! grep -q iteration "$tmp/out" && ok || bad "--sequence-parallel with t=3, s=16: status $rc, $(head -3 "$tmp/err")"
# with t = 1 there is nothing to split: Megatron turns it off, so does ptdp
"$PTDP" train $M --mock-data --sequence-parallel >"$tmp/out" 2>"$tmp/err" && ok ||
    bad "--sequence-parallel with t=1: $(cat "$tmp/err")"
expect_error 2 "--recompute-method and --recompute-num-layers go with --recompute-granularity full" \
    train $M --mock-data --recompute-granularity selective --recompute-method uniform
expect_error 2 "--recompute-granularity must be one of" train $M --mock-data --recompute-granularity some
# full recomputation needs --recompute-num-layers (Megatron's TransformerConfig), at most the
# layers of a pipeline rank
RCF="--recompute-granularity full --recompute-method"
expect_error 2 "--recompute-method uniform needs --recompute-num-layers N (the layers of each recomputed group)" \
    train $M --mock-data $RCF uniform
expect_error 2 "--recompute-method block needs --recompute-num-layers N" train $M --mock-data $RCF block
expect_error 2 "--recompute-num-layers 3 is more than the model's --num-layers 2; give 1 to 2" \
    train $M --mock-data $RCF uniform --recompute-num-layers 3
"$PTDP" train $M --mock-data $RCF block --recompute-num-layers 2 >/dev/null 2>"$tmp/err" && ok ||
    bad "--recompute-num-layers equal to the layers: $(cat "$tmp/err")"
"$MPIRUN" --oversubscribe -np 2 "$PTDP" train $M --mock-data --num-layers 4 --pipeline-model-parallel-size 2 \
    $RCF uniform --recompute-num-layers 3 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 2 ] && [ "$(grep -c '^ptdp: error: --recompute-num-layers 3 is more than the 2 layers of a pipeline rank (--num-layers 4 over --pipeline-model-parallel-size 2); give 1 to 2' "$tmp/err")" = 2 ] &&
    ! grep -q iteration "$tmp/out" && ok || bad "--recompute-num-layers 3 with 2 layers per stage: status $rc, $(cat "$tmp/err")"
"$PTDP" train $M --mock-data --overlap-grad-reduce >/dev/null 2>"$tmp/err" && ok || bad "--overlap-grad-reduce: $(cat "$tmp/err")"
expect_error 2 "--ffn-hidden-size 255 is not divisible by --tensor-model-parallel-size 2" \
    train $M --mock-data --ffn-hidden-size 255 --tensor-model-parallel-size 2

# ---- required flags -------------------------------------------------------
expect_error 2 "--num-layers" train --hidden-size 32 --num-attention-heads 4 --seq-length 16 --train-iters 2 --lr 1e-3 --mock-data
expect_error 2 "--hidden-size" train --num-layers 2 --num-attention-heads 4 --seq-length 16 --train-iters 2 --lr 1e-3 --mock-data
expect_error 2 "--num-attention-heads" train --num-layers 2 --hidden-size 32 --seq-length 16 --train-iters 2 --lr 1e-3 --mock-data
expect_error 2 "--seq-length" train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --train-iters 2 --lr 1e-3 --mock-data
expect_error 2 "--train-iters" train $MODEL --lr 1e-3 --mock-data
expect_error 2 "--lr" train $MODEL --train-iters 2 --mock-data
expect_error 2 "no training data" train $M
expect_error 2 "--out" export $MODEL

# ---- consistency between flags --------------------------------------------
printf '\x01\x00%.0s' $(seq 40) >"$tmp/ones.bin"
expect_error 2 "exclude each other" train $M --mock-data --token-file "$tmp/ones.bin"
expect_error 2 "--hidden-size 30 is not divisible by --num-attention-heads 4" train $M --mock-data --hidden-size 30
expect_error 2 "--global-batch-size 3 is not a multiple of --micro-batch-size 2" \
    train $M --mock-data --micro-batch-size 2 --global-batch-size 3
expect_error 2 "--max-position-embeddings" train $M --mock-data --max-position-embeddings 8
expect_error 2 "--min-lr" train $M --mock-data --min-lr 1e-2
expect_error 2 "--lr-warmup-iters 5 must be below --lr-decay-iters 5" \
    train $M --mock-data --lr-warmup-iters 5 --lr-decay-iters 5

# ---- --config ------------------------------------------------------------
expect_error 1 "$tmp/none.json" train $M --mock-data --config "$tmp/none.json"
printf '{"num_layers": 2,' >"$tmp/broken.json"
expect_error 2 "$tmp/broken.json" train $M --mock-data --config "$tmp/broken.json"
printf '[2]' >"$tmp/array.json"
expect_error 2 "$tmp/array.json" train $M --mock-data --config "$tmp/array.json"
printf '{"num_layer": 2}' >"$tmp/unknown.json"
expect_error 2 "did you mean '--num-layers'" train $M --mock-data --config "$tmp/unknown.json"
printf '{"num_layers": "two"}' >"$tmp/type.json"
expect_error 2 "--num-layers expects an integer" train $M --mock-data --config "$tmp/type.json"
printf '{"num_layers": [2]}' >"$tmp/type2.json"
expect_error 2 "key 'num_layers' must be a number, string or boolean" train $M --mock-data --config "$tmp/type2.json"
# hostile files: nesting is bounded before cJSON parses; 1e300 is no integer
{ printf '%.0s[' $(seq 100); printf 1; printf '%.0s]' $(seq 100); } >"$tmp/deep.json"
expect_error 2 "--config $tmp/deep.json: JSON nested deeper than 32 levels" train $M --mock-data --config "$tmp/deep.json"
printf '{"num_layers": 1e300}' >"$tmp/huge.json"
expect_error 2 "--num-layers expects an integer" train $M --mock-data --config "$tmp/huge.json"

# ---- input files (cannot open: 1; bad contents: 2) ---------------------------
expect_error 1 "$tmp/none.bin" train $M --token-file "$tmp/none.bin"
printf 'abc' >"$tmp/odd.bin"
expect_error 2 "$tmp/odd.bin: 3 bytes is not a whole number" train $M --token-file "$tmp/odd.bin"
printf '\x01\x00%.0s' $(seq 10) >"$tmp/short.bin"
expect_error 2 "$tmp/short.bin: holds 10 tokens" train $M --token-file "$tmp/short.bin"
{ cat "$tmp/ones.bin"; printf '\x80\x00'; } >"$tmp/big.bin"
expect_error 2 "token 128 at position 40 is not below the vocabulary size 128" train $M --token-file "$tmp/big.bin"
expect_error 1 "$tmp/none.safetensors" train $M --mock-data --init-from "$tmp/none.safetensors"
expect_error 2 "has shape [128,32] but the model flags need [128,64]" \
    train $M --mock-data --hidden-size 64 --init-from "$FIXTURE"
expect_error 1 "--log-jsonl $tmp/nodir/log.jsonl" train $M --mock-data --log-jsonl "$tmp/nodir/log.jsonl"
# outputs written at the end are checked before training starts
expect_error 1 "--save-safetensors $tmp/nodir/w.safetensors" train $M --mock-data --save-safetensors "$tmp/nodir/w.safetensors"
expect_error 1 "--trace $tmp/nodir/t.json" train $M --mock-data --trace "$tmp/nodir/t.json"
echo '{"save_safetensors": 12345}' >"$tmp/numstr.json"
expect_error 2 "key 'save_safetensors' must be a string" train $M --mock-data --config "$tmp/numstr.json"
expect_error 1 "$tmp/none.safetensors" export $MODEL --init-from "$tmp/none.safetensors" --out "$tmp/x.safetensors"
expect_error 2 "has shape [128,32] but the model flags need [128,64]" \
    export $MODEL --hidden-size 64 --init-from "$FIXTURE" --out "$tmp/x.safetensors"
expect_error 1 "$tmp/nodir/x.safetensors" export $MODEL --out "$tmp/nodir/x.safetensors"
# weights that do not fit the flags are refused, not used in part (the fixture: l=2, a=4)
expect_error 2 "--num-layers 1 but the file holds 2 layers" train $M --mock-data --num-layers 1 --init-from "$FIXTURE"
expect_error 2 "--num-layers 3 but the file holds 2 layers" train $M --mock-data --num-layers 3 --init-from "$FIXTURE"
expect_error 2 "--num-attention-heads 2 but the metadata of $FIXTURE says n_head 4" \
    train $M --mock-data --num-attention-heads 2 --init-from "$FIXTURE"
expect_error 2 "--num-layers 1 but the file holds 2 layers" \
    export $MODEL --num-layers 1 --init-from "$FIXTURE" --out "$tmp/x.safetensors"
"$PTDP" export $MODEL --num-layers 1 --init-from "$FIXTURE" --allow-extra-tensors --out "$tmp/first.safetensors" \
    >/dev/null 2>"$tmp/err" && ok || bad "--allow-extra-tensors: $(cat "$tmp/err")"
# two exports into one folder keep their own configs; the config beside the file is checked
"$PTDP" export $MODEL --num-attention-heads 8 --out "$tmp/a8.safetensors" >/dev/null 2>&1
"$PTDP" export $MODEL --out "$tmp/a4.safetensors" >/dev/null 2>&1
grep -q '"n_head":8' "$tmp/a8.config.json" && grep -q '"n_head":4' "$tmp/a4.config.json" && ok ||
    bad "exports overwrote each other's config"
expect_error 2 "--num-attention-heads 4 but $tmp/a8.config.json says n_head 8" \
    train $M --mock-data --init-from "$tmp/a8.safetensors"
cp "$tmp/a8.safetensors" "$tmp/old.safetensors"; cp "$tmp/a8.config.json" "$tmp/config.json"
expect_error 2 "--num-attention-heads 4 but $tmp/config.json says n_head 8" \
    train $M --mock-data --init-from "$tmp/old.safetensors"
rm -f "$tmp/config.json"
# export --init-from takes the shape flags it is not given from the config beside the weights
# (as generate does): same bytes as the export that wrote them; a flag given is still checked
"$PTDP" export --init-from "$tmp/a8.safetensors" --out "$tmp/re8.safetensors" >/dev/null 2>"$tmp/err" &&
    cmp -s "$tmp/a8.safetensors" "$tmp/re8.safetensors" && cmp -s "$tmp/a8.config.json" "$tmp/re8.config.json" && ok ||
    bad "export --init-from without shape flags: $(cat "$tmp/err")"
"$PTDP" export --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 8 --vocab-size 100 \
    --out "$tmp/v100.safetensors" >/dev/null 2>&1
"$PTDP" export --init-from "$tmp/v100.safetensors" --out "$tmp/re100.safetensors" >/dev/null 2>"$tmp/err" &&
    cmp -s "$tmp/v100.safetensors" "$tmp/re100.safetensors" && ok || bad "export --init-from, vocabulary 100: $(cat "$tmp/err")"
expect_error 2 "--num-attention-heads 4 but $tmp/a8.config.json says n_head 8" \
    export --init-from "$tmp/a8.safetensors" --num-attention-heads 4 --out "$tmp/x.safetensors"

# a tiny --ddp-bucket-size (one collective per few gradients) is refused with a sensible size
expect_error 2 "--ddp-bucket-size 1 cuts this rank's" train $M --mock-data --ddp-bucket-size 1
# ---- resuming: reports, the LR schedule, flags that need --load ------------------
R="$MODEL --mock-data --lr 1e-3 --lr-decay-iters 10 --log-interval 1"
"$PTDP" train $R --train-iters 5 --save "$tmp/rs.ck" --log-jsonl "$tmp/rs.jsonl" >/dev/null 2>&1 || bad "resume: first run"
"$PTDP" train $R --train-iters 7 --load "$tmp/rs.ck" --log-jsonl "$tmp/rs.jsonl" >"$tmp/out" 2>&1
grep -q "done: 2 iterations (6 to 7) in" "$tmp/out" && ok || bad "resume: done line: $(grep done "$tmp/out")"
[ "$(grep -c '"lm_loss"' "$tmp/rs.jsonl")" = 7 ] && ok || bad "resume: --log-jsonl lost the history: $(cat "$tmp/rs.jsonl")"
"$PTDP" train $R --train-iters 3 --load "$tmp/rs.ck" >"$tmp/out" 2>&1
grep -q "nothing trained: the checkpoint is at iteration 5 and --train-iters 3" "$tmp/out" && ok ||
    bad "resume below the checkpoint: $(tail -1 "$tmp/out")"
expect_error 2 "the learning-rate schedule differs from the checkpoint's" train $R --lr 2e-3 --train-iters 7 --load "$tmp/rs.ck"
# the flags it names are spelled as --help lists them
for f in --use-checkpoint-opt-param-scheduler --override-opt-param-scheduler; do
    grep -qF -- "$f" "$tmp/err" && "$PTDP" train --help | grep -qF -- "$f" && ok || bad "the message names $f otherwise: $(cat "$tmp/err")"
done
expect_error 2 "--lr-decay-iters defaults to --train-iters" train ${R/--lr-decay-iters 10/} --train-iters 7 --load "$tmp/rs.ck"
for f in --use-checkpoint-opt_param-scheduler --override-opt_param-scheduler; do
    "$PTDP" train $R --lr 2e-3 --train-iters 6 --load "$tmp/rs.ck" $f >"$tmp/out" 2>&1 && ok || bad "$f: $(tail -1 "$tmp/out")"
    echo "$f $(grep -o 'learning rate: [^ ]*' "$tmp/out")" >>"$tmp/lrs"
done
# iteration 6 steps with lr(5) and logs lr(6), Megatron's lr after the scheduler step
grep -q "use-checkpoint.*4.000000E-04" "$tmp/lrs" && grep -q "override.*8.000000E-04" "$tmp/lrs" && ok ||
    bad "scheduler flags: $(cat "$tmp/lrs")"
# debris of an interrupted save: verify names it, the next save removes it
echo partial >"$tmp/rs.ck/iter_0000005/rank_00000.safetensors.tmp.4242"
"$PTDP" checkpoint verify "$tmp/rs.ck" >"$tmp/out" 2>&1 && grep -q "stray file rank_00000.safetensors.tmp.4242" "$tmp/out" &&
    ok || bad "verify does not mention the stray temporary: $(cat "$tmp/out")"
"$PTDP" train $R --train-iters 6 --load "$tmp/rs.ck" --save "$tmp/rs.ck" >/dev/null 2>&1 &&
    [ ! -e "$tmp/rs.ck/iter_0000005/rank_00000.safetensors.tmp.4242" ] && ok || bad "the next save left the temporary"
expect_error 2 "--finetune applies to the checkpoint of --load" train $M --mock-data --finetune
expect_error 2 "--no-load-optim applies to the checkpoint of --load" train $M --mock-data --no-load-optim
expect_error 2 "--init-from and --load exclude each other" train $M --mock-data --load "$tmp/rs.ck" --init-from "$FIXTURE"
expect_error 2 "export --load takes the model from the checkpoint; drop --num-layers" \
    export --load "$tmp/rs.ck" --num-layers 8 --out "$tmp/x.safetensors"

# ---- --exit-signal-handler: SIGTERM (a preemption notice) finishes the iteration in flight,
# saves and exits 0, on every rank even when only some got the signal; the resumed run is
# bitwise the uninterrupted one
S="$MODEL --mock-data --lr 1e-3 --lr-decay-iters 400 --log-interval 1"
lines() { grep -c lm_loss "$1" 2>/dev/null || true; }
"$PTDP" train $S --train-iters 400 --exit-signal-handler --save "$tmp/sig" --log-jsonl "$tmp/sig.jsonl" \
    >"$tmp/sig.out" 2>&1 &
pid=$!
for i in $(seq 1 1200); do [ "$(lines "$tmp/sig.jsonl")" -ge 3 ] 2>/dev/null && break; sleep 0.05; done
kill -TERM $pid
wait $pid
rc=$?
n=$(cat "$tmp/sig/latest_checkpointed_iteration.txt" 2>/dev/null)
[ $rc = 0 ] && grep -q "exiting after iteration $n (SIGTERM received: --exit-signal-handler)" "$tmp/sig.out" &&
    [ "$n" -ge 3 ] && [ "$n" -lt 400 ] && ok || bad "SIGTERM: status $rc, checkpoint '$n': $(tail -2 "$tmp/sig.out")"
"$PTDP" train $S --train-iters $((n + 3)) --load "$tmp/sig" --log-jsonl "$tmp/sigr.jsonl" >/dev/null 2>&1
"$PTDP" train $S --train-iters $((n + 3)) --log-jsonl "$tmp/sigf.jsonl" >/dev/null 2>&1
[ "$(grep -o '"lm_loss":[^,]*,"grad_norm":[^,]*' "$tmp/sigf.jsonl" | tail -3)" = \
  "$(grep -o '"lm_loss":[^,]*,"grad_norm":[^,]*' "$tmp/sigr.jsonl")" ] && ok ||
    bad "the run resumed after SIGTERM differs from the uninterrupted one"
# two ranks (d = 2), SIGTERM to rank 1 only: both stop after the same iteration and save
"$MPIRUN" --oversubscribe -np 2 "$PTDP" train $S --train-iters 400 --exit-signal-handler --save "$tmp/sig2" \
    --log-jsonl "$tmp/sig2.jsonl" >"$tmp/sig2.out" 2>&1 &
mpid=$!
for i in $(seq 1 1200); do [ "$(lines "$tmp/sig2.jsonl")" -ge 3 ] 2>/dev/null && break; sleep 0.05; done
rank1=$(pgrep -f -- "--log-jsonl $tmp/sig2.jsonl" | while read -r q; do
    [ "$q" != "$mpid" ] && tr '\0' '\n' <"/proc/$q/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && echo "$q"
done)
[ -n "$rank1" ] && kill -TERM $rank1
wait $mpid
rc=$?
n=$(cat "$tmp/sig2/latest_checkpointed_iteration.txt" 2>/dev/null)
[ -n "$rank1" ] && [ $rc = 0 ] && grep -q "exiting after iteration $n (SIGTERM received" "$tmp/sig2.out" && ok ||
    bad "SIGTERM to rank 1 of 2: status $rc, pid '$rank1', checkpoint '$n': $(tail -2 "$tmp/sig2.out")"
# a signal handler run inside oneDNN's JIT sgemm writes its frame into the heap (its kernels
# point rsp there; docs/reliability.md): SIGTERM every 2 ms through an iteration of a one-thread
# run made of oneDNN GEMMs must stop it cleanly (a handler that only set a flag aborted 6 of 6)
OMP_NUM_THREADS=1 "$PTDP" train --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 \
    --vocab-size 8192 --micro-batch-size 4 --global-batch-size 8 --train-iters 400 --lr 1e-4 --mock-data \
    --exit-signal-handler --save "$tmp/sig3" --log-jsonl "$tmp/sig3.jsonl" >"$tmp/sig3.out" 2>&1 &
pid=$!
for i in $(seq 1 1200); do [ "$(lines "$tmp/sig3.jsonl")" -ge 1 ] 2>/dev/null && break; sleep 0.02; done
while kill -TERM $pid 2>/dev/null; do sleep 0.002; done
wait $pid
rc=$?
n=$(cat "$tmp/sig3/latest_checkpointed_iteration.txt" 2>/dev/null)
[ $rc = 0 ] && [ -n "$n" ] && "$PTDP" checkpoint verify "$tmp/sig3" >/dev/null 2>&1 && ok ||
    bad "SIGTERM every 2 ms: status $rc, checkpoint '$n': $(tail -2 "$tmp/sig3.out")"

# ---- commands and help ------------------------------------------------------
"$PTDP" >/dev/null 2>&1
[ $? -eq 2 ] && ok || bad "ptdp with no arguments should exit 2"
"$PTDP" --help >"$tmp/out" 2>&1
[ $? -eq 0 ] && grep -q train "$tmp/out" && ok || bad "ptdp --help"
expect_error 2 "unknown command 'trian'" trian $M
# --version: CMakeLists.txt's version, the build's git revision, the backends, the CPU's extensions
"$PTDP" --version >"$tmp/ver" 2>&1 && ok || bad "ptdp --version failed"
want=$(sed -n 's/^project(ptdp VERSION \([0-9.]*\).*/\1/p' "$PTDP_SRC/CMakeLists.txt")
head -1 "$tmp/ver" | grep -Eq "^ptdp $want \(git ([0-9a-f]{12}(-dirty)?|unknown)\)$" && ok || bad "version line: $(head -1 "$tmp/ver")"
# (the revision is read when the binary is built: a commit since then makes HEAD newer, not different)
rev=$(sed -n 's/.*(git \([0-9a-f]*\).*/\1/p' "$tmp/ver")
if git -C "$PTDP_SRC" rev-parse HEAD >/dev/null 2>&1; then
    [ -n "$rev" ] && git -C "$PTDP_SRC" merge-base --is-ancestor "$rev" HEAD && ok ||
        bad "version: git revision '$rev' is not HEAD or an ancestor: $(head -1 "$tmp/ver")"
fi
"$PTDP" train $M --mock-data --device cuda >/dev/null 2>"$tmp/err"
if grep -q "^backends: cpu (GEMM: onednn, openblas), cuda" "$tmp/ver"; then
    ! grep -q "built without the CUDA backend" "$tmp/err" && ok || bad "--version says cuda, train says no: $(cat "$tmp/err")"
else
    grep -q "^backends: cpu (GEMM: onednn, openblas); cuda not built" "$tmp/ver" && grep -q "built without the CUDA backend" "$tmp/err" &&
        ok || bad "--version backends: $(cat "$tmp/ver" "$tmp/err")"
fi
# the start line names the CPU run's GEMM library whatever the precision
for pg in "--bf16 --gemm openblas:openblas" "--fp16:onednn" "--gemm openblas:openblas"; do
    "$PTDP" train $M --mock-data ${pg%%:*} 2>&1 | head -1 | grep -q "GEMM ${pg##*:}\$" && ok ||
        bad "train ${pg%%:*}: the start line does not say GEMM ${pg##*:}"
done
if grep -q '^flags' /proc/cpuinfo 2>/dev/null; then
    for f in avx2 f16c avx512f avx512_bf16; do
        if grep -qw "$f" <(grep -m1 '^flags' /proc/cpuinfo); then w=" $f"; else w=" no-$f"; fi
        grep '^cpu (at run time):' "$tmp/ver" | grep -q -- "$w\( \|$\)" && ok || bad "--version: want '$w': $(tail -1 "$tmp/ver")"
    done
fi
"$PTDP" train --help >"$tmp/help" 2>&1
[ $? -eq 0 ] && ok || bad "ptdp train --help status"
for f in num-layers hidden-size num-attention-heads ffn-hidden-size seq-length max-position-embeddings vocab-size \
    make-vocab-size-divisible-by init-method-std hidden-dropout attention-dropout seed tensor-model-parallel-size \
    init-from config micro-batch-size global-batch-size train-iters lr min-lr lr-decay-style lr-warmup-iters \
    lr-warmup-fraction lr-decay-iters weight-decay clip-grad adam-beta1 adam-beta2 adam-eps \
    pipeline-model-parallel-size mock-data token-file data-path split vocab-file merge-file tokenizer-type \
    eval-interval eval-iters log-interval log-jsonl log-comm save-safetensors gemm; do
    grep -q -- "--$f " "$tmp/help" && ok || bad "ptdp train --help lacks --$f"
done
# grouped as Megatron's arguments.py: a title line, then its flags
for g in "network size" initialization regularization training "learning rate" distributed \
    "data and dataloader" tokenizer validation checkpointing logging; do
    grep -qx "$g:" "$tmp/help" && ok || bad "ptdp train --help lacks the group '$g:'"
done
awk '/^learning rate:/ { g = 1; next } /^$/ { g = 0 } g && /^  --lr-decay-style / { found = 1 } END { exit !found }' \
    "$tmp/help" && ok || bad "--lr-decay-style is not in the learning rate group"
"$PTDP" export --help >"$tmp/help" 2>&1
[ $? -eq 0 ] && grep -q -- "--out " "$tmp/help" && grep -q -- "--init-from " "$tmp/help" && ok ||
    bad "ptdp export --help: $(cat "$tmp/help")"

# ---- --config trains; the command line wins --------------------------------
cat >"$tmp/model.json" <<'JSON'
{"num-layers": 2, "hidden_size": 32, "num_attention_heads": 4, "seq-length": 16, "vocab_size": 128,
 "train_iters": 5, "lr": 1e-3, "mock_data": true, "log-interval": 1, "hidden_dropout": 0.0}
JSON
"$PTDP" train --config "$tmp/model.json" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && [ "$(grep -c ' iteration ' "$tmp/out")" -eq 5 ] && ok || bad "--config run: $(cat "$tmp/out" "$tmp/err")"
"$PTDP" train --config "$tmp/model.json" --train-iters 2 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && [ "$(grep -c ' iteration ' "$tmp/out")" -eq 2 ] && ok ||
    bad "--train-iters on the command line should override the config: $(cat "$tmp/out" "$tmp/err")"

# ---- --dump-config: the run's flags as a --config file that repeats the run exactly -----
DC="$MODEL --mock-data --lr 2e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 1 --train-iters 4
 --global-batch-size 4 --micro-batch-size 2 --seed 77 --hidden-dropout 0.2 --weight-decay 0.05 --adam-beta2 0.95
 --clip-grad 0.5 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
 --no-overlap-grad-reduce"
"$PTDP" train $DC --dump-config "$tmp/dump.json" --log-jsonl "$tmp/d1.jsonl" >"$tmp/out" 2>&1 && ok ||
    bad "--dump-config run: $(tail -2 "$tmp/out")"
for k in '"lr":	0.002' '"min_lr":	0.0001' '"lr_decay_style":	"cosine"' '"seed":	77' '"hidden_dropout":	0.2' \
    '"recompute_method":	"uniform"' '"overlap_grad_reduce":	false' '"mock_data":	true' '"global_batch_size":	4' \
    '"adam_beta2":	0.95' '"log_jsonl":	"'"$tmp/d1.jsonl"'"'; do
    grep -qF -- "$k" "$tmp/dump.json" && ok || bad "--dump-config lacks $k: $(cat "$tmp/dump.json")"
done
! grep -q '"config"\|"dump_config"\|"load"\|"no_overlap_grad_reduce"\|"norm_epsilon"' "$tmp/dump.json" && ok ||
    bad "--dump-config wrote itself, an unset flag or an alias"
"$PTDP" train --config "$tmp/dump.json" --log-jsonl "$tmp/d2.jsonl" >"$tmp/out" 2>&1 && ok ||
    bad "--config of a dumped config: $(tail -2 "$tmp/out")"
strip() { sed 's/"elapsed_ms".*//' "$1"; }
[ "$(wc -l <"$tmp/d1.jsonl")" = 4 ] && [ "$(strip "$tmp/d1.jsonl")" = "$(strip "$tmp/d2.jsonl")" ] && ok ||
    bad "the run from --dump-config differs: $(cat "$tmp/d1.jsonl" "$tmp/d2.jsonl")"
"$PTDP" train $DC --seed 78 --log-jsonl "$tmp/d3.jsonl" >/dev/null 2>&1
[ "$(strip "$tmp/d1.jsonl")" != "$(strip "$tmp/d3.jsonl")" ] && ok || bad "the comparison cannot fail (--seed 78 gave the same run)"
# the dumped file takes every flag of the run, --train-samples included (and no --train-iters then)
"$PTDP" train ${DC/--train-iters 4/--train-samples 12} --lr-warmup-iters 0 --dump-config "$tmp/dump2.json" >/dev/null 2>&1 &&
    grep -q '"train_samples":	12' "$tmp/dump2.json" && ! grep -q '"train_iters"' "$tmp/dump2.json" && ok ||
    bad "--dump-config with --train-samples: $(grep train_ "$tmp/dump2.json")"
expect_error 1 "--dump-config $tmp/nodir/c.json: cannot write" train $M --mock-data --dump-config "$tmp/nodir/c.json"
# --data-path in a config file is a JSON list, one word a string: a path with a space in it
# survives --dump-config then --config; the one-string form still works; a relative path
# in the file is relative to the working directory (as on the command line), not the file
mkdir -p "$tmp/my data" "$tmp/cfgdir"
cp "$PTDP_SRC/tests/fixtures/data/worked.bin" "$tmp/my data/a_text_document.bin"
cp "$PTDP_SRC/tests/fixtures/data/worked.idx" "$tmp/my data/a_text_document.idx"
DP="--num-layers 1 --hidden-size 32 --num-attention-heads 4 --seq-length 4 --vocab-size 128 --lr 1e-3
 --train-iters 2 --split 1,0,0 --hidden-dropout 0 --attention-dropout 0"
"$PTDP" train $DP --data-path 1 "$tmp/my data/a_text_document" --dump-config "$tmp/sp.json" \
    --log-jsonl "$tmp/sp1.jsonl" >"$tmp/out" 2>&1 && ok || bad "--data-path with a space: $(tail -2 "$tmp/out")"
tr -d ' \t\n' <"$tmp/sp.json" | grep -qF '"data_path":["1","'"$tmp"'/mydata/a_text_document"]' && ok ||
    bad "--dump-config: data_path is not a list of the words: $(grep -A3 data_path "$tmp/sp.json")"
grep -qF '"'"$tmp"'/my data/a_text_document"' "$tmp/sp.json" && ok || bad "--dump-config lost the space"
"$PTDP" train --config "$tmp/sp.json" --log-jsonl "$tmp/sp2.jsonl" >"$tmp/out" 2>&1 && ok ||
    bad "--config with a data path holding a space: $(tail -2 "$tmp/out")"
[ -s "$tmp/sp1.jsonl" ] && [ "$(strip "$tmp/sp1.jsonl")" = "$(strip "$tmp/sp2.jsonl")" ] && ok ||
    bad "the run from a dumped --data-path differs: $(cat "$tmp/sp1.jsonl" "$tmp/sp2.jsonl")"
ln -s "$tmp/my data" "$tmp/mydata"
printf '{"data_path": "1 mydata/a_text_document"}\n' >"$tmp/cfgdir/str.json"
(cd "$tmp" && "$PTDP" train $DP --config cfgdir/str.json --log-jsonl "$tmp/sp3.jsonl") >"$tmp/out" 2>&1 &&
    [ "$(strip "$tmp/sp1.jsonl")" = "$(strip "$tmp/sp3.jsonl")" ] && ok ||
    bad "--config's one-string data_path, relative to the working directory: $(tail -2 "$tmp/out")"
printf '{"data_path": ["my data/a_text_document"]}\n' >"$tmp/cfgdir/list.json"
(cd "$tmp" && "$PTDP" train $DP --config cfgdir/list.json) >"$tmp/out" 2>&1 && ok ||
    bad "--config's list data_path, relative to the working directory: $(tail -2 "$tmp/out")"
printf '{"data_path": ["1", 2]}\n' >"$tmp/cfgdir/bad.json"
expect_error 2 "key 'data_path' must be a list of strings" train $DP --config "$tmp/cfgdir/bad.json"
printf '{"data_path": []}\n' >"$tmp/cfgdir/empty.json"
expect_error 2 "key 'data_path' is an empty list" train $DP --config "$tmp/cfgdir/empty.json"

# ---- --log-jsonl and the LR schedule ---------------------------------------
"$PTDP" train $MODEL --mock-data --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 2 --lr-decay-style linear \
    --train-iters 6 --log-jsonl "$tmp/log.jsonl" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && ok || bad "jsonl run failed: $(cat "$tmp/err")"
[ "$(wc -l <"$tmp/log.jsonl")" -eq 6 ] && ok || bad "want 6 JSON lines, got $(wc -l <"$tmp/log.jsonl")"
for k in iteration lm_loss grad_norm lr elapsed_ms tokens_per_s tflops; do
    [ "$(grep -c "\"$k\":[-0-9.eE+]*[,}]" "$tmp/log.jsonl")" -eq 6 ] && ok || bad "JSON lines lack \"$k\""
done
seq_iters=$(sed 's/.*"iteration":\([0-9]*\).*/\1/' "$tmp/log.jsonl" | tr '\n' ' ')
[ "$seq_iters" = "1 2 3 4 5 6 " ] && ok || bad "iterations in the JSON lines: $seq_iters"
# Megatron: iteration k steps with the lr of step k - 1 and logs the lr after
# its scheduler step, lr(k); warm-up lr*k/W for k <= W, then linear from lr
# at k = W to min-lr at k = decay-iters (6).
lrs=$(sed 's/.*"lr":\([-0-9.eE+]*\).*/\1/' "$tmp/log.jsonl" | tr '\n' ' ')
echo "$lrs" | awk '{ split("5e-4 1e-3 7.75e-4 5.5e-4 3.25e-4 1e-4", w, " ")
    for (i = 1; i <= 6; i++) { d = $i - w[i]; if (d < 0) d = -d; if (d > 1e-9) exit 1 } }' && ok ||
    bad "LR schedule: got $lrs, want 5e-4 1e-3 7.75e-4 5.5e-4 3.25e-4 1e-4"
# Cosine, no warm-up: lr_min + (lr - lr_min)(1 + cos(pi k/4))/2 for k <= 4, then min-lr
# (logged: k = 1..6).
"$PTDP" train $MODEL --mock-data --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-decay-iters 4 \
    --train-iters 6 --log-jsonl "$tmp/cos.jsonl" >/dev/null 2>&1
lrs=$(sed 's/.*"lr":\([-0-9.eE+]*\).*/\1/' "$tmp/cos.jsonl" | tr '\n' ' ')
echo "$lrs" | awk '{ split("8.68198052e-4 5.5e-4 2.31801948e-4 1e-4 1e-4 1e-4", w, " ")
    for (i = 1; i <= 6; i++) { d = $i - w[i]; if (d < 0) d = -d; if (d > 1e-9) exit 1 } }' && ok ||
    bad "cosine LR schedule: got $lrs"

# Sample-based schedules (Megatron's --train-samples, --lr-*-samples): the
# scheduler counts B samples per step and the warm-up fraction is not rounded
# to whole iterations: decay 14 samples, warm-up 0.3 x 14 = 4.2 samples, B = 4,
# logged after steps 1..3 (n = 4, 8, 12): lr 4/4.2, then 1 - (n - 4.2)/9.8.
S="$MODEL --mock-data --lr 1e-3 --global-batch-size 4"
"$PTDP" train $S --train-samples 14 --lr-warmup-fraction 0.3 --log-jsonl "$tmp/smp.jsonl" >"$tmp/out" 2>&1 &&
    grep -q -- "--train-samples 14: 3 iterations of 4 samples" "$tmp/out" && ok || bad "--train-samples: $(cat "$tmp/out")"
lrs=$(sed 's/.*"lr":\([-0-9.eE+]*\).*/\1/' "$tmp/smp.jsonl" | tr '\n' ' ')
echo "$lrs" | awk '{ split("9.52380952e-4 6.12244898e-4 2.04081633e-4", w, " ")
    if (NF != 3) exit 1
    for (i = 1; i <= 3; i++) { d = $i - w[i]; if (d < 0) d = -d; if (d > 1e-11) exit 1 } }' && ok ||
    bad "sample-based LR schedule: got $lrs"
# iterations and samples describe the same run: identical JSON lines but the clock
"$PTDP" train $S --train-iters 3 --lr-warmup-iters 1 --lr-decay-iters 3 --log-jsonl "$tmp/it.jsonl" >/dev/null 2>&1
"$PTDP" train $S --train-samples 12 --lr-warmup-samples 4 --lr-decay-samples 12 --log-jsonl "$tmp/sm.jsonl" >/dev/null 2>&1
strip() { sed 's/"elapsed_ms".*//' "$1"; }
[ -s "$tmp/it.jsonl" ] && [ "$(strip "$tmp/it.jsonl")" = "$(strip "$tmp/sm.jsonl")" ] && ok ||
    bad "--train-samples 12 differs from --train-iters 3: $(cat "$tmp/it.jsonl" "$tmp/sm.jsonl")"
expect_error 2 "--lr-warmup-iters counts iterations, and this run counts samples (--train-samples); use --lr-warmup-samples" \
    train $S --train-samples 12 --lr-warmup-iters 1
expect_error 2 "--lr-decay-samples counts samples, and this run counts iterations (--train-iters); use --lr-decay-iters" \
    train $S --train-iters 3 --lr-decay-samples 8
expect_error 2 "give --train-iters or --train-samples, not both" train $S --train-iters 3 --train-samples 12
expect_error 2 "--train-samples 3 is less than one global batch (4 samples)" train $S --train-samples 3
expect_error 2 "give --lr-warmup-samples or --lr-warmup-fraction, not both" \
    train $S --train-samples 12 --lr-warmup-samples 4 --lr-warmup-fraction 0.1
expect_error 2 "missing required flag --train-iters (or --train-samples)" train $MODEL --mock-data --lr 1e-3

# --log-throughput: Megatron's FLOP formula, 12 B s l h^2 ((2 + s/2h) + ffn/h + Vp/2lh) per
# iteration; l=2 h=32 s=32 ffn=128 Vp=128 B=4: 12*4*32*2*1024*(2.5 + 4 + 1) = 23592960
# (the paper's formula gives 24379392); throughput x elapsed time must give it back.
"$PTDP" train $MODEL --seq-length 32 --mock-data --lr 1e-3 --global-batch-size 4 --train-iters 3 \
    --log-throughput --log-interval 1 --log-jsonl "$tmp/thr.jsonl" >"$tmp/out" 2>&1
[ "$(grep -c 'throughput per GPU (TFLOP/s/GPU): [0-9.]* |' "$tmp/out")" = 3 ] && ok ||
    bad "--log-throughput: no Megatron throughput field: $(grep iteration "$tmp/out" | head -1)"
sed 's/.*"elapsed_ms":\([0-9.]*\).*"throughput":\([-0-9.eE+]*\).*/\1 \2/' "$tmp/thr.jsonl" |
    awk '{ f = $2 * $1 / 1e3 * 1e12; d = f / 23592960 - 1; if (d < 0) d = -d; if (d > 0.01 || $1 < 0.1) bad++; n++ }
         END { exit (n != 3 || bad) }' && ok || bad "--log-throughput FLOPs: $(cat "$tmp/thr.jsonl")"
! grep -q '"throughput"' "$tmp/smp.jsonl" && ok || bad "throughput logged without --log-throughput"

# ---- export layout ------------------------------------------------------------
"$PTDP" export $MODEL --out "$tmp/e.safetensors" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && ok || bad "export failed: $(cat "$tmp/err")"
# safetensors: 8-byte little-endian header length, then the JSON header.
hlen=$(od -An -tu8 -N8 "$tmp/e.safetensors" | tr -d ' ')
head -c $((8 + hlen)) "$tmp/e.safetensors" | tail -c "$hlen" >"$tmp/header.json"
for t in transformer.wte.weight transformer.wpe.weight transformer.h.0.ln_1.weight transformer.h.0.attn.c_attn.weight \
    transformer.h.1.mlp.c_proj.bias transformer.ln_f.weight transformer.ln_f.bias; do
    grep -q "\"$t\":{\"dtype\":\"F32\"" "$tmp/header.json" && ok || bad "export header lacks $t"
done
grep -q '"transformer.wte.weight":{"dtype":"F32","shape":\[128,32\]' "$tmp/header.json" && ok || bad "wte shape"
size=$(wc -c <"$tmp/e.safetensors")
last=$(grep -o '"data_offsets":\[[0-9]*,[0-9]*\]' "$tmp/header.json" | sed 's/.*,\([0-9]*\)\]/\1/' | sort -n | tail -1)
[ "$size" -eq $((8 + hlen + last)) ] && ok || bad "export size $size != 8 + $hlen + $last"
for k in '"model_type":"gpt2"' '"n_embd":32' '"n_layer":2' '"n_head":4' '"vocab_size":128' '"n_positions":16'; do
    grep -qF "$k" "$tmp/e.config.json" && ok || bad "e.config.json lacks $k: $(cat "$tmp/e.config.json")"
done

# ---- safetensors round trip --------------------------------------------------
# --train-iters 0 is refused (0 counts as missing), so load-and-save goes
# through one step at --lr 0, which leaves every weight as it is.
RT="$MODEL --max-position-embeddings 16 --mock-data --train-iters 1 --lr 0"
"$PTDP" train $RT --init-from "$FIXTURE" --save-safetensors "$tmp/r1.safetensors" >/dev/null 2>"$tmp/err" &&
    "$PTDP" train $RT --init-from "$tmp/r1.safetensors" --save-safetensors "$tmp/r2.safetensors" >/dev/null 2>>"$tmp/err"
[ $? -eq 0 ] && ok || bad "round trip runs failed: $(cat "$tmp/err")"
cmp -s "$tmp/r1.safetensors" "$tmp/r2.safetensors" && ok || bad "train --init-from/--save-safetensors round trip changed bytes"
"$PTDP" export $MODEL --init-from "$FIXTURE" --out "$tmp/x1.safetensors" >/dev/null 2>&1 &&
    "$PTDP" export $MODEL --init-from "$tmp/x1.safetensors" --out "$tmp/x2.safetensors" >/dev/null 2>&1
cmp -s "$tmp/x1.safetensors" "$tmp/x2.safetensors" && ok || bad "export --init-from round trip changed bytes"
cmp -s "$tmp/x1.safetensors" "$tmp/r1.safetensors" && ok || bad "export and train --lr 0 wrote different weights"

# Megatron's architecture flags for what ptdp's GPT fixes: the fixed values are accepted and change
# nothing, other values are refused naming the flag; --norm-epsilon/--layernorm-epsilon set the
# LayerNorm epsilon; current Megatron's name for v equals the old one
A=(train --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 1
   --global-batch-size 4 --vocab-size 128 --mock-data --lr 1e-3 --train-iters 3 --log-interval 1)
expect_error 2 "--normalization must be one of LayerNorm|RMSNorm, got 'Layernorm'" "${A[@]}" --normalization Layernorm
"$PTDP" "${A[@]}" --log-jsonl "$tmp/arch0.jsonl" >/dev/null 2>&1 || bad "plain run failed"
"$PTDP" "${A[@]}" --normalization LayerNorm --position-embedding-type learned_absolute --norm-epsilon 1e-5 \
    --log-jsonl "$tmp/arch1.jsonl" >/dev/null 2>&1 || bad "run with Megatron's architecture flags failed"
"$PTDP" "${A[@]}" --layernorm-epsilon 1e-2 --log-jsonl "$tmp/arch2.jsonl" >/dev/null 2>&1 || bad "--layernorm-epsilon run failed"
loss() { grep -o '"lm_loss":[^,]*' "$1" | tail -1; }
[ -n "$(loss "$tmp/arch0.jsonl")" ] && [ "$(loss "$tmp/arch0.jsonl")" = "$(loss "$tmp/arch1.jsonl")" ] && ok ||
    bad "the fixed architecture values changed the run"
[ "$(loss "$tmp/arch0.jsonl")" != "$(loss "$tmp/arch2.jsonl")" ] && ok || bad "--layernorm-epsilon changed nothing"
# (the layout checks see the alias: v = 2 without pipeline stages is refused as with the old name)
expect_error 2 "virtual pipeline stages (v = 2) need --pipeline-model-parallel-size > 1" "${A[@]}" \
    --num-virtual-stages-per-pipeline-rank 2

# Megatron's iteration line: the first iteration this run trains is logged even off the interval,
# the timestamp comes first, the loss scale is always printed, skipped and nan iterations are
# counted per interval, each its own count
"$PTDP" "${A[@]}" --log-interval 5 >"$tmp/line.out" 2>&1 || bad "log-interval run failed"
[ "$(grep -c ' iteration ' "$tmp/line.out")" = 2 ] && grep -q ' iteration        1/       3 |' "$tmp/line.out" &&
    grep -q ' iteration        3/       3 |' "$tmp/line.out" && ok ||
    bad "want the lines of iterations 1 (first) and 3 (last): $(grep ' iteration ' "$tmp/line.out")"
grep -Eq '^ \[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\] iteration ' "$tmp/line.out" && ok ||
    bad "the iteration line does not start with a timestamp"
grep -q '| lm loss: [0-9.E+-]* | loss scale: 1.0 | grad norm: ' "$tmp/line.out" &&
    grep -q 'number of skipped iterations:   0 | number of nan iterations:   0 |' "$tmp/line.out" && ok ||
    bad "loss scale or the skipped/nan counts missing: $(grep ' iteration ' "$tmp/line.out" | head -1)"

# Megatron's --exit-interval and --exit-duration-in-mins: stop after that iteration with status 0,
# saving a checkpoint with --save, from which --load continues exactly where an uninterrupted run is
E=(train --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 1
   --global-batch-size 4 --vocab-size 128 --mock-data --lr 1e-3 --lr-decay-iters 10 --train-iters 5 --log-interval 1)
"$PTDP" "${E[@]}" --log-jsonl "$tmp/ex_full.jsonl" >/dev/null 2>&1 || bad "uninterrupted run failed"
"$PTDP" "${E[@]}" --exit-interval 2 --save "$tmp/exck" --log-jsonl "$tmp/ex_a.jsonl" >"$tmp/ex_a.out" 2>&1 && ok ||
    bad "--exit-interval run did not exit 0: $(tail -2 "$tmp/ex_a.out")"
grep -q "exiting after iteration 2 (--exit-interval)" "$tmp/ex_a.out" &&
    [ "$(cat "$tmp/exck/latest_checkpointed_iteration.txt")" = 2 ] &&
    [ "$(grep -c '"lm_loss"' "$tmp/ex_a.jsonl")" = 2 ] && ok || bad "--exit-interval 2 did not stop and save at 2"
"$PTDP" "${E[@]}" --load "$tmp/exck" --log-jsonl "$tmp/ex_b.jsonl" >/dev/null 2>&1 || bad "resume after exit failed"
lm() { grep -o '"iteration":[0-9]*\|"lm_loss":[^,]*' "$1" | paste -d' ' - -; }
cmp -s <(lm "$tmp/ex_full.jsonl" | tail -3) <(lm "$tmp/ex_b.jsonl" | tail -3) && ok ||
    bad "iterations 3-5 after --exit-interval and --load differ from the uninterrupted run"
"$PTDP" "${E[@]}" --exit-duration-in-mins 1e-7 >"$tmp/ex_d.out" 2>&1 &&
    grep -q "exiting after iteration 1 (--exit-duration-in-mins)" "$tmp/ex_d.out" && ok ||
    bad "--exit-duration-in-mins did not stop after the first iteration: $(tail -2 "$tmp/ex_d.out")"

# Megatron's --check-for-nan-in-loss-and-grad (on by default): a nan gradient (fault injection on one
# rank) stops the run at that iteration on every rank with a message; --no-check-for-nan-in-loss-and-grad
# skips that iteration instead (no step) and counts it in the log line
PTDP_FAULT=nan:2 "$PTDP" "${E[@]}" >"$tmp/nan1.out" 2>&1
[ $? = 1 ] && grep -q "ptdp: error: iteration 2: the gradient norm is nan" "$tmp/nan1.out" && ok ||
    bad "a nan gradient did not stop the run: $(tail -2 "$tmp/nan1.out")"
PTDP_FAULT=nan:2 "$PTDP" "${E[@]}" --no-check-for-nan-in-loss-and-grad --log-jsonl "$tmp/nan2.jsonl" >"$tmp/nan2.out" 2>&1 &&
    grep -q '"iteration":2,.*"skipped":1,' "$tmp/nan2.jsonl" && [ "$(grep -c '"skipped":1' "$tmp/nan2.jsonl")" = 1 ] &&
    grep -q "iteration        2/.*number of skipped iterations:   1 | number of nan iterations:   1 |" "$tmp/nan2.out" && ok ||
    bad "--no-check-for-nan-in-loss-and-grad did not skip exactly iteration 2: $(grep skipped "$tmp/nan2.jsonl")"
PTDP_FAULT=nan@1:2 "$MPIRUN" --oversubscribe -np 2 -x PTDP_FAULT "$PTDP" "${E[@]}" --tensor-model-parallel-size 2 \
    >"$tmp/nan3.out" 2>&1
[ $? != 0 ] && [ "$(grep -c "ptdp: error: iteration 2: the gradient norm is nan" "$tmp/nan3.out")" = 2 ] && ok ||
    bad "a nan gradient on rank 1 did not stop both ranks: $(grep error "$tmp/nan3.out")"

finish
