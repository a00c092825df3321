#!/usr/bin/env bash
# Communication counters, exact bytes, for the groups test_tp.sh and
# test_recompute_sg.sh do not check: the data-parallel bucket all-reduces,
# ZeRO-1's reduce-scatter and all-gather (--use-distributed-optimizer), the
# embedding group's tied-embedding all-reduce (p > 1), and the model group's
# gradient-norm all-reduce, and sequence parallelism's all-gathers and
# reduce-scatters in the tensor group, and the 16-bit messages of --bf16 and
# --fp16. Every expected number is derived below from the
# configuration alone (parameter shapes, 16-float alignment, padding of the
# flat buffer to 16*d, bucket cuts of --ddp-bucket-size); rank 0's whole
# `--log-comm` report must equal it line for line.
source "$PTDP_SRC/tests/parallel_lib.sh"

# h=12 (LayerNorm vectors 12 -> 16 floats), heads 2, s=4, V=100 -> 128.
h=12 f=48 s=4 V=128 iters=3 b=1
ARGS="--mock-data --num-layers 2 --hidden-size $h --num-attention-heads 2 --seq-length $s
 --vocab-size 100 --micro-batch-size $b --train-iters $iters --lr 1e-3 --log-interval $iters
 --hidden-dropout 0 --attention-dropout 0 --log-comm"

r16() { echo $(( ($1 + 15) / 16 * 16 )); } # every tensor starts 64-byte aligned
layer=$(( $(r16 $h) * 2 + $(r16 $((3 * h * h))) + $(r16 $((3 * h))) + $(r16 $((h * h))) + $(r16 $h)
    + $(r16 $h) * 2 + $(r16 $((f * h))) + $(r16 $f) + $(r16 $((h * f))) + $(r16 $h) ))
wte=$(r16 $((V * h))) wpe=$(r16 $((s * h))) lnf=$(( $(r16 $h) * 2 ))
pad() { echo $(( ($1 + $2 - 1) / $2 * $2 )); } # pad N MULTIPLE
# buckets: ptdp cuts buckets of (bucket / d * d) floats from the end of the
# flat buffer; the last (first in memory) one takes the rest
nbuckets() { local size=$(( $2 / $3 * $3 )); echo $(( ($1 + size - 1) / size )); } # numel bucket d

# report NP ARGS... : rank 0's counter lines as "group op calls bytes"
report() {
    local np=$1
    shift
    run_np "$np" train $ARGS "$@" >"$TMP/run.out" 2>&1 || { cat "$TMP/run.out" >&2; return 1; }
    grep "^\[0,0,0\] comm " "$TMP/run.out" | awk '{print $3, $4, $6, $8}'
}
expect() { # expect NAME GOT WANT
    if [ "$2" = "$3" ]; then ok; else
        fail "$1: counters differ"
        diff <(echo "$3") <(echo "$2") | sed 's/^/  /' >&2
    fi
}
# one all-reduce of one int32 on the world at start-up (did every rank
# start?); per iteration, the gradient norm: an all-reduce of 1 double (2 with ZeRO-1,
# the shards' squares) over the data group, 2 over the model group
WORLD="world all-reduce 1 4"

# 1. d=3, p=1: the flat buffer (one chunk, two layers) is padded to 16*3.
d=3 bucket=1000
numel=$(pad $((wte + wpe + 2 * layer + lnf)) $((16 * d)))
nb=$(nbuckets $numel $bucket $d)
got=$(report 3 --global-batch-size 6 --ddp-bucket-size $bucket)
want="$WORLD
data all-reduce $((iters * (nb + 1))) $((iters * (4 * numel + 8)))"
expect "d=3 buckets" "$got" "$want"

# 2. the same with ZeRO-1: per bucket a reduce-scatter (counted as the whole
# bucket: d blocks of len/d) and after the step an all-gather of len/d.
got=$(report 3 --global-batch-size 6 --ddp-bucket-size $bucket --use-distributed-optimizer)
want="$WORLD
data all-reduce $iters $((iters * 16))
data all-gather $((iters * nb)) $((iters * 4 * numel / d))
data reduce-scatter $((iters * nb)) $((iters * 4 * numel))"
expect "d=3 ZeRO-1" "$got" "$want"

# 3. p=2, d=2, ZeRO-1: rank 0 is the first stage (embeddings + layer 0); it
# sends m activations [s, b, h] and receives m gradients per iteration, and
# sums the tied word embedding's gradient [V, h] with the last stage.
d=2 bucket=500 B=4
m=$(( B / (b * d) ))
numel=$(pad $((wte + wpe + layer)) $((16 * d)))
nb=$(nbuckets $numel $bucket $d)
got=$(report 4 --global-batch-size $B --ddp-bucket-size $bucket --use-distributed-optimizer \
    --pipeline-model-parallel-size 2)
want="$WORLD
pipeline send $((iters * m)) $((iters * m * 4 * s * b * h))
pipeline recv $((iters * m)) $((iters * m * 4 * s * b * h))
data all-reduce $iters $((iters * 16))
data all-gather $((iters * nb)) $((iters * 4 * numel / d))
data reduce-scatter $((iters * nb)) $((iters * 4 * numel))
model all-reduce $iters $((iters * 16))
embedding all-reduce $iters $((iters * 4 * V * h))"
expect "p=2 d=2 ZeRO-1" "$got" "$want"
# the padding and the bucket cut must both matter in these cases
[ "$numel" -ne $((wte + wpe + layer)) ] && ok || fail "case 3 does not exercise the 16*d padding"

# 4. --sequence-parallel, t=2, p=2, d=1 (m=2): rank 0 holds the embeddings and
# layer 0 on positions [0, s/t). Per micro-batch, with N = s*b rows and the
# shard's Ns = N/t: the embedding's reduce-scatter, the layer's two forward
# reduce-scatters (after the row-parallel GEMMs) and two backward ones (the
# column-parallel input gradients), each counted as the N*h floats it sums,
# the bytes of the all-reduce it replaces; all-gathers of Ns*h floats: the
# two LayerNorm outputs forward, in the backward the two branch output
# gradients and the two LayerNorm outputs again (the layer keeps only its
# shard), and the embedding's output gradient. Per iteration the replicated
# parameters' gradients (position embedding [s, h]; ln1 w, b, attention-out
# bias, ln2 w, b, MLP-out bias: 6 of [h]) are all-reduced over the tensor
# group, 7 calls; pipeline messages carry the shard [s/t, b, h]; the tied
# embedding is V/t rows (V padded to 256 = 128*t).
#
# 5. The same under --bf16: the activations and their gradients travel as
# 16-bit values (2 bytes each: the all-gathers, the reduce-scatters, the
# pipeline's messages); the gradients of the replicated parameters, the tied
# embedding's and the norm's stay fp32 (Megatron's main_grad).
t=2 m=2
N=$((s * b)) Ns=$((s * b / 2))
for case in "4:" "2:--bf16"; do
    a=${case%%:*} prec=${case#*:} # bytes of an activation on the wire
    got=$(report 4 --global-batch-size $m --tensor-model-parallel-size $t --pipeline-model-parallel-size 2 \
        --sequence-parallel $prec)
    want="$WORLD
tensor all-reduce $((iters * 7)) $((iters * 4 * (s * h + 6 * h)))
tensor all-gather $((iters * m * 7)) $((iters * m * 7 * a * Ns * h))
tensor reduce-scatter $((iters * m * 5)) $((iters * m * 5 * a * N * h))
pipeline send $((iters * m)) $((iters * m * a * Ns * h))
pipeline recv $((iters * m)) $((iters * m * a * Ns * h))
model all-reduce $iters $((iters * 16))
embedding all-reduce $iters $((iters * 4 * 256 / t * h))"
    expect "t=2 p=2 --sequence-parallel $prec" "$got" "$want"
done

# 6. --fp16, t=2, p=2 without sequence parallelism: per micro-batch the
# embedding's all-reduce and the layer's two forward and two backward ones
# of N*h 16-bit values; the pipeline's messages are scattered (each tensor
# rank sends N*h/t values) and the received gradient is all-gathered over
# the tensor group (the paper's scatter/gather).
got=$(report 4 --global-batch-size $m --tensor-model-parallel-size $t --pipeline-model-parallel-size 2 \
    --fp16)
want="$WORLD
tensor all-reduce $((iters * m * 5)) $((iters * m * 5 * 2 * N * h))
tensor all-gather $((iters * m)) $((iters * m * 2 * N * h / t))
pipeline send $((iters * m)) $((iters * m * 2 * N * h / t))
pipeline recv $((iters * m)) $((iters * m * 2 * N * h / t))
model all-reduce $iters $((iters * 16))
embedding all-reduce $iters $((iters * 4 * 256 / t * h))"
expect "t=2 p=2 --fp16" "$got" "$want"
finish
