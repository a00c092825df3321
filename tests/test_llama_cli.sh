# test_llama_cli.sh - the Llama family's flags from the outside: every bad
# input of issue 43 gets one "ptdp: error:" line naming the flag (on every
# rank, status 2, no training): t not dividing the key/value groups, heads
# not divisible by the groups, a SwiGLU width that does not split over t,
# SwiGLU with biases, a GPT checkpoint loaded under Llama flags and the
# reverse, a GPT-2 Hugging Face file under Llama flags and the reverse; a
# resumed Llama run equals an uninterrupted one. Layouts against one process:
# test_llama_matrix.sh.
source "$PTDP_SRC/tests/script_lib.sh"
export OMP_NUM_THREADS=1

SHAPE="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 128"
LLAMA="--normalization RMSNorm --swiglu --ffn-hidden-size 48 --position-embedding-type rope
  --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights
  --disable-bias-linear"
M="$SHAPE --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --lr-decay-iters 6 --train-iters 3 --mock-data
  --log-interval 1 --seed 5"

# expect_error NP STATUS "text" args...: every one of NP ranks prints the one line
expect_error() {
    local np=$1 want=$2 text=$3
    shift 3
    if [ "$np" = 1 ]; then
        "$PTDP" "$@" >"$tmp/out" 2>"$tmp/err"
    else
        "$MPIRUN" --oversubscribe -np "$np" "$PTDP" "$@" >"$tmp/out" 2>"$tmp/err"
    fi
    local rc=$?
    [[ "$rc" =~ ^($want)$ ]] && ok || bad "ptdp $* exited $rc, want $want"
    [ "$(grep -c 'ptdp: error: ' "$tmp/err")" = "$np" ] && ok ||
        bad "ptdp $*: want $np error lines, got: $(cat "$tmp/err")"
    [ "$(grep -cF -- "$text" "$tmp/err")" = "$np" ] && ok ||
        bad "ptdp $*: message lacks '$text': $(cat "$tmp/err")"
    ! grep -q 'iteration' "$tmp/out" && ok || bad "ptdp $*: trained before failing"
}

expect_error 2 2 "--num-query-groups 3 is not divisible by --tensor-model-parallel-size 2" \
    train $M $LLAMA --num-attention-heads 6 --hidden-size 48 --num-query-groups 3 \
    --tensor-model-parallel-size 2
expect_error 1 2 "--num-attention-heads 4 is not divisible by --num-query-groups 3" \
    train $M $LLAMA --num-query-groups 3
expect_error 2 2 "--swiglu: --ffn-hidden-size 45 is not divisible by --tensor-model-parallel-size 2" \
    train $M $LLAMA --ffn-hidden-size 45 --tensor-model-parallel-size 2
expect_error 1 2 "--swiglu with biases on the linear layers is not supported; add --disable-bias-linear" \
    train $M --swiglu
expect_error 1 2 "--rotary-percent 0.1 of the head size 8 rotates 0 dims" \
    train $M $LLAMA --rotary-percent 0.1

# checkpoints know their blocks: a GPT checkpoint under Llama flags, and the reverse
"$PTDP" train $M --save "$tmp/gpt" >/dev/null 2>&1 || bad "GPT run with --save failed"
"$PTDP" train $M $LLAMA --save "$tmp/llama" >/dev/null 2>&1 || bad "Llama run with --save failed"
expect_error 1 2 "was trained without --normalization RMSNorm but the flags give it (a GPT checkpoint under Llama flags?)" \
    train $M $LLAMA --load "$tmp/gpt" --train-iters 4
expect_error 1 2 "the checkpoint's model uses --normalization RMSNorm but the flags do not (a Llama checkpoint under GPT flags?)" \
    train $M --load "$tmp/llama" --train-iters 4
expect_error 1 2 "the checkpoint's model has 2 key/value groups (--num-query-groups) but the flags give 4" \
    train $M $LLAMA --num-query-groups 4 --load "$tmp/llama" --train-iters 4
# and resume: 3 iterations, then 3 more from the checkpoint, equal to 6 at once
"$PTDP" train $M $LLAMA --load "$tmp/llama" --save "$tmp/llama" --train-iters 6 \
    --log-jsonl "$tmp/resumed.jsonl" >/dev/null 2>&1 || bad "Llama resume failed"
"$PTDP" train $M $LLAMA --train-iters 6 --log-jsonl "$tmp/straight.jsonl" >/dev/null 2>&1 ||
    bad "Llama run of 6 failed"
last() { tail -1 "$1" | sed 's/"elapsed_ms":[^,]*,//; s/"tokens_per_s":[^,]*,//; s/"tflops":[^,]*,//'; }
[ -s "$tmp/resumed.jsonl" ] && [ "$(last "$tmp/resumed.jsonl")" = "$(last "$tmp/straight.jsonl")" ] &&
    ok || bad "Llama resume differs: $(last "$tmp/resumed.jsonl") vs $(last "$tmp/straight.jsonl")"
# --dump-config carries the blocks: the --config file repeats the run bit for bit
"$PTDP" train $M $LLAMA --rotary-base 5000 --dump-config "$tmp/d.json" --log-jsonl "$tmp/d1.jsonl" \
    >/dev/null 2>&1 && "$PTDP" train --config "$tmp/d.json" --log-jsonl "$tmp/d2.jsonl" >/dev/null 2>&1 &&
    grep -q '"rotary_base":.*5000' "$tmp/d.json" && grep -q '"swiglu":.*true' "$tmp/d.json" &&
    [ "$(last "$tmp/d1.jsonl")" = "$(last "$tmp/d2.jsonl")" ] && ok ||
    bad "--dump-config of a Llama run: $(cat "$tmp/d.json")"

# --use-checkpoint-args takes the blocks with the shape
"$PTDP" train --use-checkpoint-args --load "$tmp/llama" --train-iters 7 --lr 1e-3 --lr-decay-iters 6 \
    --mock-data --vocab-size 128 --micro-batch-size 2 --global-batch-size 8 >"$tmp/uca.out" 2>&1 &&
    grep -q "^--use-checkpoint-args: .*--normalization RMSNorm, --swiglu, --position-embedding-type rope, --group-query-attention, --untie-embeddings-and-output-weights, --disable-bias-linear" "$tmp/uca.out" &&
    ok || bad "--use-checkpoint-args of a Llama checkpoint: $(head -3 "$tmp/uca.out")"

# Hugging Face files of the other family
expect_error 1 2 "is a GPT-2 file (transformer.wte.weight) but the model flags give a Llama-family model" \
    train $M $LLAMA --init-from "$PTDP_SRC/tests/fixtures/gpt_a.safetensors" --allow-extra-tensors
expect_error 1 2 "is a Llama file (model.embed_tokens.weight) but the model flags give a GPT-2 model" \
    train $M --init-from "$PTDP_SRC/tests/fixtures/llama_a.safetensors" --allow-extra-tensors


# the model files under models/: SmolLM-135M's shape (2 layers of it here) and GPT-2 124M's
"$PTDP" train --config "$PTDP_SRC/models/smollm-135m.json" --num-layers 2 --seq-length 32 \
    --mock-data --lr 1e-4 --train-iters 1 --micro-batch-size 1 >"$tmp/smol.out" 2>&1 &&
    grep -q "^ptdp train: l=2 h=576 a=9 s=32 V=49152" "$tmp/smol.out" &&
    grep -q "^blocks: RMSNorm, SwiGLU ffn=1536, rotary embeddings, 3 key/value group(s), tied, no linear biases" "$tmp/smol.out" &&
    ok || bad "models/smollm-135m.json: $(head -3 "$tmp/smol.out")"
"$PTDP" train --config "$PTDP_SRC/models/gpt2-124m.json" --num-layers 1 --seq-length 32 \
    --mock-data --lr 1e-4 --train-iters 1 --micro-batch-size 1 >"$tmp/g2.out" 2>&1 &&
    grep -q "^ptdp train: l=1 h=768 a=12 s=32 V=50257" "$tmp/g2.out" && ! grep -q "^blocks:" "$tmp/g2.out" &&
    ok || bad "models/gpt2-124m.json: $(head -3 "$tmp/g2.out")"

# Megatron-LM checkpoints of the Llama model: out at t=2 p=2 (SwiGLU's gate and up rows joined
# per rank as Megatron's linear_fc1, the untied output_layer on the last stage, Llama's args)
# and back in: the same weights, bitwise
"$PTDP" checkpoint export-megatron "$tmp/llama" "$tmp/meg" --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 >"$tmp/meg.out" 2>&1 &&
    "$PTDP" checkpoint import-megatron "$tmp/meg" "$tmp/meg.back" >>"$tmp/meg.out" 2>&1 && ok ||
    bad "Megatron export/import of a Llama checkpoint: $(tail -3 "$tmp/meg.out")"
pt=$tmp/meg/iter_0000006/mp_rank_01_001/model_optim_rng.pt
grep -aq "decoder.layers.0.mlp.linear_fc1.weight" "$pt" && grep -aq "output_layer.weight" "$pt" &&
    grep -aq "RMSNorm" "$pt" && ok || bad "Megatron export lacks Llama's names or args"
"$PTDP" export --load "$tmp/llama" --out "$tmp/m1.safetensors" >/dev/null 2>&1 &&
    "$PTDP" export --load "$tmp/meg.back" --out "$tmp/m2.safetensors" >/dev/null 2>&1 &&
    cmp -s "$tmp/m1.safetensors" "$tmp/m2.safetensors" && ok ||
    bad "Megatron round trip of a Llama checkpoint changed the weights"
grep -q '"architectures":\["LlamaForCausalLM"\]' "$tmp/m1.config.json" && ok ||
    bad "export --load of a Llama checkpoint: $(cat "$tmp/m1.config.json")"
expect_error 1 2 "export --load takes the model from the checkpoint; drop --swiglu" \
    export --load "$tmp/llama" --swiglu --out "$tmp/m3.safetensors"

# Hugging Face Llama files: the fixture (llama_reference.py's LlamaForCausalLM tensors) exports
# as itself with a LlamaForCausalLM config.json; the export loads back bitwise; loading it on
# t=2 (each rank its rows of q/k/v, gate, up, o and down) and saving it again changes nothing
FIX=$PTDP_SRC/tests/fixtures/llama_a.safetensors
FS="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 131 $LLAMA"
"$PTDP" export $FS --init-from "$FIX" --allow-extra-tensors --out "$tmp/x1.safetensors" >/dev/null 2>&1 &&
    "$PTDP" export $FS --init-from "$tmp/x1.safetensors" --out "$tmp/x2.safetensors" >/dev/null 2>&1 &&
    ok || bad "Llama export failed"
cmp -s "$tmp/x1.safetensors" "$tmp/x2.safetensors" && ok || bad "Llama export round trip changed bytes"
grep -q '"architectures":\["LlamaForCausalLM"\]' "$tmp/x1.config.json" &&
    grep -q '"num_key_value_heads":2' "$tmp/x1.config.json" &&
    grep -q '"tie_word_embeddings":false' "$tmp/x1.config.json" && ok ||
    bad "Llama config.json: $(cat "$tmp/x1.config.json")"
for tname in model.embed_tokens.weight model.layers.1.self_attn.k_proj.weight lm_head.weight; do
    grep -aq "\"$tname\"" "$tmp/x1.safetensors" && ok || bad "export lacks $tname"
done
"$MPIRUN" --oversubscribe -np 2 "$PTDP" train $FS --micro-batch-size 2 --global-batch-size 4 --mock-data \
    --lr 0 --train-iters 1 --tensor-model-parallel-size 2 --init-from "$FIX" --allow-extra-tensors \
    --save-safetensors "$tmp/r2.safetensors" >"$tmp/r2.out" 2>&1 || bad "t=2 --init-from failed: $(tail -3 "$tmp/r2.out")"
"$PTDP_TOOLS/st_compare" --bitwise "$tmp/x1.safetensors" "$tmp/r2.safetensors" >/dev/null && ok ||
    bad "t=2 load and save of the Llama fixture changed it"
# ptdp generate on it: the blocks from its config.json, a KV cache of 2 groups; greedy tokens
# the same on t=2 (one group per rank) and from a ptdp checkpoint of it
G=(--prompt "1 2 3 4" --max-new-tokens 8 --temperature 0)
"$PTDP" generate --init-from "$FIX" --allow-extra-tensors "${G[@]}" >"$tmp/g1.out" 2>"$tmp/g1.err" &&
    "$MPIRUN" --oversubscribe -np 2 "$PTDP" generate --init-from "$FIX" --allow-extra-tensors "${G[@]}" \
        --tensor-model-parallel-size 2 >"$tmp/g2.out" 2>"$tmp/g2.err" && ok ||
    bad "Llama generate failed: $(tail -3 "$tmp/g1.err" "$tmp/g2.err")"
cat "$tmp/g1.out" "$tmp/g1.err" | grep -q "KV cache 3.0 KiB per rank" &&
    cat "$tmp/g2.out" "$tmp/g2.err" | grep -q "KV cache 1.5 KiB per rank" &&
    [ "$(head -1 "$tmp/g1.out")" = "$(head -1 "$tmp/g2.out")" ] && [ "$(head -1 "$tmp/g1.out" | wc -w)" = 12 ] &&
    ok || bad "Llama generate t=1 vs t=2: $(cat "$tmp/g1.out" "$tmp/g2.out")"
expect_error 1 2 "says num_key_value_heads 2 but the flags give 4 key/value groups" \
    export $FS --num-query-groups 4 --init-from "$tmp/x1.safetensors" --out "$tmp/x3.safetensors"
expect_error 1 2 "says tie_word_embeddings false; give --untie-embeddings-and-output-weights" \
    export ${FS/--untie-embeddings-and-output-weights/} --init-from "$tmp/x1.safetensors" --out "$tmp/x3.safetensors"
finish
