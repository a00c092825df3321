#!/usr/bin/env bash
# Negative controls for the comparisons every invariance test relies on: a
# comparison that cannot fail proves nothing. For st_compare (weights) and
# compare_jsonl (loss and grad norm lines): a copy perturbed slightly beyond
# the tolerance must be reported, one perturbed within it must pass, and the
# key-bias exemption (--key-bias-atol) must cover the K third of c_attn.bias
# and nothing else. No training: the golden fixtures serve as files.
source "$PTDP_SRC/tests/parallel_lib.sh"
ST="$PTDP_TOOLS/st_compare"
PERTURB="$PTDP_TOOLS/st_perturb"

# A small model in HF GPT-2 names: the golden fixture of config A (h = 32, so
# c_attn.bias is [96] and its K third elements [32, 64)).
cp "$PTDP_SRC/tests/fixtures/gpt_a.safetensors" "$TMP/ref.safetensors" && ok || fail "copy the fixture"

# expect STATUS DESCRIPTION command...: the command's exit status must be STATUS
expect() {
    local want=$1 what=$2
    shift 2
    "$@" >"$TMP/cmd.out" 2>&1
    local rc=$?
    [ "$rc" -eq "$want" ] && ok || { fail "$what: status $rc, want $want"; cat "$TMP/cmd.out" >&2; }
}
# perturb NAME INDEX DELTA: $TMP/p.safetensors = ref with one element moved
perturb() { "$PERTURB" "$TMP/ref.safetensors" "$TMP/p.safetensors" "$@" >/dev/null || fail "st_perturb $*"; }

WTE=transformer.wte.weight
QKVB=transformer.h.1.attn.c_attn.bias
expect 0 "a file equals itself" "$ST" "$TMP/ref.safetensors" "$TMP/ref.safetensors" 0
expect 0 "a file equals itself bitwise" "$ST" --bitwise "$TMP/ref.safetensors" "$TMP/ref.safetensors"
perturb $WTE 1234 2e-5
expect 1 "2e-5 in one wte element, tolerance 1e-5" "$ST" "$TMP/ref.safetensors" "$TMP/p.safetensors" 1e-5
perturb $WTE 1234 5e-6
expect 0 "5e-6 in one wte element, tolerance 1e-5" "$ST" "$TMP/ref.safetensors" "$TMP/p.safetensors" 1e-5
expect 1 "5e-6 in one wte element, bitwise" "$ST" --bitwise "$TMP/ref.safetensors" "$TMP/p.safetensors"
expect 1 "5e-6 in one wte element, tolerance 0" "$ST" "$TMP/ref.safetensors" "$TMP/p.safetensors" 0
perturb transformer.ln_f.bias 31 nan
expect 1 "a NaN" "$ST" "$TMP/ref.safetensors" "$TMP/p.safetensors" 1e-5
expect 1 "another file (other tensors)" "$ST" "$TMP/ref.safetensors" "$PTDP_SRC/tests/fixtures/gpt_b.safetensors" 1e-5
# The key-bias exemption (tolerance lr x iterations = 2e-2 in the tests): K
# elements 32..63 within it pass, beyond it fail; Q (0..31) and V (64..95)
# elements of the same tensor keep 1e-5.
perturb $QKVB 32 1.5e-2
expect 0 "K bias moved 1.5e-2, key-bias tolerance 2e-2" "$ST" --key-bias-atol 2e-2 "$TMP/ref.safetensors" "$TMP/p.safetensors" 1e-5
expect 1 "K bias moved 1.5e-2 without the exemption" "$ST" "$TMP/ref.safetensors" "$TMP/p.safetensors" 1e-5
perturb $QKVB 63 2.5e-2
expect 1 "K bias moved 2.5e-2, key-bias tolerance 2e-2" "$ST" --key-bias-atol 2e-2 "$TMP/ref.safetensors" "$TMP/p.safetensors" 1e-5
for i in 31 64; do
    perturb $QKVB $i 2e-5
    expect 1 "c_attn.bias element $i (Q or V) moved 2e-5" "$ST" --key-bias-atol 2e-2 "$TMP/ref.safetensors" \
        "$TMP/p.safetensors" 1e-5
done

# compare_jsonl: one value 2e-5 relative off fails at 1e-5, 5e-6 off passes;
# a missing line, a non-number and an empty file fail.
jsonl() { # jsonl LOSS2 NORM3 > file: three iterations, line 2's loss and line 3's norm given
    printf '{"iteration":1,"lm_loss":5.70364478,"grad_norm":1.9389132,"lr":0.001}\n'
    printf '{"iteration":2,"lm_loss":%s,"grad_norm":2.05888764,"lr":0.0007}\n' "$1"
    printf '{"iteration":3,"lm_loss":5.73434266,"grad_norm":%s,"lr":0.0003}\n' "$2"
}
scaled() { awk -v x="$1" -v f="$2" 'BEGIN { printf "%.9g", x * f }'; }
jsonl 5.71576639 1.93952593 >"$TMP/a.jsonl"
expect 0 "jsonl equals itself" compare_jsonl "$TMP/a.jsonl" "$TMP/a.jsonl" lm_loss 1e-5
jsonl "$(scaled 5.71576639 1.00002)" 1.93952593 >"$TMP/b.jsonl"
expect 1 "loss 2e-5 relative off" compare_jsonl "$TMP/a.jsonl" "$TMP/b.jsonl" lm_loss 1e-5
expect 0 "grad_norm of the same file" compare_jsonl "$TMP/a.jsonl" "$TMP/b.jsonl" grad_norm 1e-5
jsonl "$(scaled 5.71576639 1.000005)" "$(scaled 1.93952593 0.999995)" >"$TMP/c.jsonl"
expect 0 "loss 5e-6 relative off" compare_jsonl "$TMP/a.jsonl" "$TMP/c.jsonl" lm_loss 1e-5
expect 0 "grad norm 5e-6 relative off" compare_jsonl "$TMP/a.jsonl" "$TMP/c.jsonl" grad_norm 1e-5
jsonl 5.71576639 "$(scaled 1.93952593 0.99998)" >"$TMP/d.jsonl"
expect 1 "grad norm 2e-5 relative off" compare_jsonl "$TMP/a.jsonl" "$TMP/d.jsonl" grad_norm 1e-5
head -2 "$TMP/a.jsonl" >"$TMP/short.jsonl"
expect 1 "a missing line" compare_jsonl "$TMP/a.jsonl" "$TMP/short.jsonl" lm_loss 1e-5
expect 1 "an extra line" compare_jsonl "$TMP/short.jsonl" "$TMP/a.jsonl" lm_loss 1e-5
jsonl null 1.93952593 >"$TMP/null.jsonl"
expect 1 "a null loss" compare_jsonl "$TMP/a.jsonl" "$TMP/null.jsonl" lm_loss 1e-5
expect 1 "null in both" compare_jsonl "$TMP/null.jsonl" "$TMP/null.jsonl" lm_loss 1e-5
: >"$TMP/empty.jsonl"
expect 1 "empty files" compare_jsonl "$TMP/empty.jsonl" "$TMP/empty.jsonl" lm_loss 1e-5
finish
