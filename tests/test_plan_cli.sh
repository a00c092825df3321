# test_plan_cli.sh - `ptdp plan`: the table, --json (one object, a layouts
# array best first with the documented fields), pins, --explain, and every
# documented bad input (exit status 2, one "ptdp: error:" line), and a
# description --calibrate writes.
source "$PTDP_SRC/tests/script_lib.sh"

model=(--num-layers 24 --hidden-size 2304 --num-attention-heads 24 --seq-length 2048
    --vocab-size 51200 --global-batch-size 512 --fp16)

# expect_error "text of the message" args...
expect_error() {
    local want=$1
    shift
    "$PTDP" plan "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ "$rc" -eq 2 ] && ok || bad "ptdp plan $* exited $rc, want 2"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] && ok || bad "ptdp plan $*: want one stderr line, got: $(cat "$tmp/err")"
    grep -q "ptdp: error: .*$want" "$tmp/err" && ok || bad "ptdp plan $*: message lacks '$want': $(cat "$tmp/err")"
    [ ! -s "$tmp/out" ] && ok || bad "ptdp plan $*: printed to stdout on error"
}

expect_error --cluster --num-devices 32 "${model[@]}"
expect_error --num-devices --cluster a100-superpod "${model[@]}"
expect_error "cannot open cluster file" --cluster no-such-cluster --num-devices 32 "${model[@]}"
sed '/"mem_bandwidth"/d' "$PTDP_SRC/clusters/a100-superpod.json" >"$tmp/missing.json"
expect_error 'missing key "mem_bandwidth"' --cluster "$tmp/missing.json" --num-devices 32 "${model[@]}"
expect_error "not divisible by --num-attention-heads" --cluster a100-superpod --num-devices 32 \
    --num-layers 24 --hidden-size 2304 --num-attention-heads 25 --seq-length 2048 --global-batch-size 512
expect_error "no layout of 7 devices" --cluster a100-superpod --num-devices 7 "${model[@]}"
expect_error "exceeds a node" --cluster a100-superpod --num-devices 32 "${model[@]}" --tensor-model-parallel-size 16
expect_error "exclude each other" --cluster a100-superpod --num-devices 32 "${model[@]}" --bf16
expect_error --explain --cluster a100-superpod --num-devices 32 "${model[@]}" --explain
expect_error --recompute-method --cluster a100-superpod --num-devices 32 "${model[@]}" --recompute-method sideways
# the Llama family's flags are `ptdp train`'s: the planner names the one it does not model
expect_error "--swiglu: ptdp plan models GPT's blocks" --cluster a100-superpod --num-devices 32 "${model[@]}" --swiglu
expect_error "--num-query-groups: ptdp plan models GPT's blocks" --cluster a100-superpod --num-devices 32 "${model[@]}" --num-query-groups=4

# The table and the best layout's flags.
"$PTDP" plan --cluster a100-superpod --num-devices 32 "${model[@]}" >"$tmp/table" 2>&1
[ $? -eq 0 ] && ok || bad "plan failed: $(cat "$tmp/table")"
grep -q "^   1 " "$tmp/table" && ok || bad "no ranked row: $(cat "$tmp/table")"
grep -q "mpirun -np 32 ptdp train .*--tensor-model-parallel-size" "$tmp/table" && ok || bad "no train flags: $(cat "$tmp/table")"
grep -q "layouts rejected: .*does not fit in memory" "$tmp/table" && ok || bad "no rejection summary: $(cat "$tmp/table")"

# --json: one object, layouts best first with the documented fields.
"$PTDP" plan --cluster a100-superpod --num-devices 32 "${model[@]}" --json --show-rejected >"$tmp/json"
[ $? -eq 0 ] && ok || bad "plan --json failed"
python3 - "$tmp/json" <<'PY' && ok || bad "--json output: $(head -c 2000 "$tmp/json")"
import json, sys
o = json.load(open(sys.argv[1]))
L = o["layouts"]
assert len(L) > 1
for k in ("t", "p", "d", "v", "b", "recompute", "iteration_s", "tflops_per_device",
          "memory_bytes_per_device", "bubble_fraction", "comm_s", "memory"):
    assert k in L[0], k
assert all(L[i]["iteration_s"] <= L[i + 1]["iteration_s"] for i in range(len(L) - 1))
assert all(x["t"] * x["p"] * x["d"] == 32 for x in L)
assert all(x["memory_bytes_per_device"] <= 80e9 for x in L)
assert any("does not fit" in r["reason"] for r in o["rejected"])
assert o["best_flags"].startswith("ptdp train")
PY

# Pins: only the rest is searched.
"$PTDP" plan --cluster a100-superpod --num-devices 32 "${model[@]}" --json \
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --recompute-granularity full >"$tmp/pinned"
python3 - "$tmp/pinned" <<'PY' && ok || bad "pinned --json: $(head -c 2000 "$tmp/pinned")"
import json, sys
L = json.load(open(sys.argv[1]))["layouts"]
assert L and all(x["t"] == 2 and x["p"] == 2 and x["d"] == 8 and x["recompute"] == "full" for x in L)
PY

# Selective recomputation (pinned): every layout says so, its flags are
# Megatron's, and for one layout it needs less memory than none and more
# than full, and more FLOPs than none (core attention rerun, s/(18h))
expect_error "go with --recompute-granularity full" --cluster a100-superpod --num-devices 32 "${model[@]}" \
    --recompute-granularity selective --recompute-method uniform
pin="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1 --virtual-pipeline-model-parallel-size 1"
for g in selective full; do
    "$PTDP" plan --cluster a100-superpod --num-devices 32 "${model[@]}" --json $pin --recompute-granularity $g >"$tmp/rc_$g"
done
"$PTDP" plan --cluster a100-superpod --num-devices 32 "${model[@]}" --json $pin --no-recompute >"$tmp/rc_none"
python3 - "$tmp" <<'PY' && ok || bad "selective plan: $(head -c 1500 "$tmp/rc_selective")"
import json, sys
o = {g: json.load(open(f"{sys.argv[1]}/rc_{g}")) for g in ("selective", "full", "none")}
L = {g: o[g]["layouts"][0] for g in o}
assert all(x["recompute"] == "selective" for x in o["selective"]["layouts"])
assert o["selective"]["best_flags"].endswith("--recompute-granularity selective") or \
    "--recompute-granularity selective " in o["selective"]["best_flags"]
m = {g: L[g]["memory_bytes_per_device"] for g in L}
assert m["full"] < m["selective"] < m["none"], m
PY

# --sequence-parallel (t pinned to 2, no recomputation): the flag is in the best flags, the
# activations shrink and nothing else in memory does; a sequence length that t does not divide
# leaves no layout
"$PTDP" plan --cluster a100-superpod --num-devices 32 "${model[@]}" --json $pin --no-recompute \
    --sequence-parallel >"$tmp/sp"
python3 - "$tmp" <<'PY' && ok || bad "sequence-parallel plan: $(head -c 1500 "$tmp/sp")"
import json, sys
o = {g: json.load(open(f"{sys.argv[1]}/{g}")) for g in ("sp", "rc_none")}
assert "--sequence-parallel" in o["sp"]["best_flags"] and "--sequence-parallel" not in o["rc_none"]["best_flags"]
a, b = o["sp"]["layouts"][0]["memory"], o["rc_none"]["layouts"][0]["memory"]
assert a["activations"] < b["activations"] and a["weights"] == b["weights"], (a, b)
PY
expect_error "no layout of 32 devices" --cluster a100-superpod --num-devices 32 "${model[@]}" $pin \
    --sequence-parallel --seq-length 2047

# --explain prints the equations' terms for the pinned layout.
"$PTDP" plan --cluster a100-superpod --num-devices 32 "${model[@]}" --explain \
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 >"$tmp/explain"
[ $? -eq 0 ] && ok || bad "--explain failed"
for term in T_gemm T_ew T_tp T_iter "bubble fraction" "memory per device"; do
    grep -q "$term" "$tmp/explain" && ok || bad "--explain lacks $term: $(cat "$tmp/explain")"
done

# The local description plans ptdp's own fp32 runs.
"$PTDP" plan --cluster local --num-devices 4 --num-layers 4 --hidden-size 256 --num-attention-heads 4 \
    --seq-length 128 --vocab-size 8192 --global-batch-size 16 --json >"$tmp/local"
[ $? -eq 0 ] && ok || bad "plan --cluster local failed"

# ... and its --bf16/--fp16 runs as ptdp's CPU backends run them (16-bit values in fp32 storage,
# fp32 master weights): the predicted memory is the plan ptdp train allocates, to the byte, but
# for the compute backend's own workspace (the native bf16 GEMMs' weight copies and scratch,
# which only an open backend can size: docs/planner.md), 4 bytes per parameter more than fp32's;
# the table says which storage it predicts.
small=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 256
    --global-batch-size 4 --micro-batch-size 2)
for prec in "" --bf16 --fp16; do
    "$PTDP" plan --cluster local --num-devices 1 "${small[@]}" $prec --no-recompute --threads 1 --json \
        >"$tmp/lp$prec" 2>&1 || bad "plan --cluster local $prec failed: $(cat "$tmp/lp$prec")"
    OMP_NUM_THREADS=1 "$PTDP" train "${small[@]}" $prec --mock-data --train-iters 1 --lr 1e-4 \
        >"$tmp/lt$prec" 2>&1 || bad "train $prec failed: $(tail -3 "$tmp/lt$prec")"
    pred=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["layouts"][0]["memory_bytes_per_device"]))' "$tmp/lp$prec")
    got=$(grep -o "memory plan total .*(\([0-9]*\) bytes)" "$tmp/lt$prec" | grep -o "([0-9]* bytes)" | tr -dc 0-9)
    bws=$(awk '$1 == "backend" && $2 == "workspace" { print $3; exit }' "$tmp/lt$prec")
    [ -n "$got" ] && [ -n "$bws" ] && [ "$pred" = "$((got - bws))" ] && ok ||
        bad "local ${prec:-fp32}: planned $pred bytes, train allocates $got ($bws of them the backend's workspace)"
    eval "mem${prec#--}=$pred"
done
# the master weights: half the fp32 run's AdamW moments (4 of its 8 bytes per parameter)
opt=$(awk '$1 == "optimizer" && $2 == "state" { print $3; exit }' "$tmp/lt")
# and where the CPU's bf16 table keeps the MLP's activations in bf16 (the bf16 run says so), a
# bf16 run carves fc and gl of its 2 layers and the workspace's dfc (N fl = 64 x 256 values
# each) at 2 bytes a value: 5 x 32768 bytes less than fp16's
mlp=0
grep -q "the MLP's own activations in bf16 storage" "$tmp/lt--bf16" && mlp=$((5 * 64 * 256 * 2))
[ -n "$opt" ] && [ "$((memfp16 - mem))" = "$((opt / 2))" ] && [ "$((memfp16 - membf16))" = "$mlp" ] && ok ||
    bad "local: bf16 $membf16, fp16 $memfp16, fp32 $mem bytes (fp32 optimizer state $opt, MLP storage $mlp): 16-bit runs add the master weights"
"$PTDP" plan --cluster local --num-devices 1 "${small[@]}" --bf16 --no-recompute >"$tmp/lpt" 2>&1
grep -q "this prediction is for ptdp's CPU bf16: 16-bit values in fp32 storage" "$tmp/lpt" && ok ||
    bad "local --bf16: the table does not say which storage it predicts: $(tail -4 "$tmp/lpt")"
grep -q "^ptdp train .* --bf16 --train-iters N" "$tmp/lpt" && ok ||
    bad "local --bf16: the best layout's flags lack --bf16: $(grep '^ptdp train' "$tmp/lpt")"
# ---- ranks sharing a node share its memory: each of the job's k ranks on the node has 1/k of
# it (the issue: a 2-rank job was planned with 1/8 of the machine and refused, then ran) -----
sed -e 's/"devices_per_node": [0-9]*/"devices_per_node": 0/' \
    -e 's/"memory_bytes": [0-9.e+]*/"memory_bytes": 16e9/' -e '/"machine"/d' \
    "$PTDP_SRC/clusters/local.json" >"$tmp/node16.json"
gpt2m=(--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --vocab-size 50257
    --global-batch-size 8)
"$PTDP" plan --cluster "$tmp/node16.json" --num-devices 2 "${gpt2m[@]}" --json >"$tmp/fit.json" 2>"$tmp/err"
[ $? -eq 0 ] && ok || bad "GPT-2 medium on 2 ranks sharing 16 GB: $(cat "$tmp/err")"
python3 - "$tmp/fit.json" <<'PY' && ok || bad "2 ranks sharing 16 GB: $(head -c 600 "$tmp/fit.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["device_memory_bytes"] == 8e9, j["device_memory_bytes"]
assert j["layouts"] and all(x["memory_bytes_per_device"] <= 8e9 for x in j["layouts"])
assert j["layouts"][0]["memory_bytes_per_device"] > 16e9 / 8  # the old 1/8 share would refuse it
PY
"$PTDP" plan --cluster "$tmp/node16.json" --num-devices 2 "${gpt2m[@]}" >"$tmp/out" 2>&1
grep -q "cluster local: 2 ranks, 2 per node, each with 7.5 GiB (the node's 14.9 GiB over its ranks)" "$tmp/out" &&
    ok || bad "the table's header does not say the memory per rank: $(head -2 "$tmp/out")"
# a job that needs more than half of the node on each of 2 ranks is refused, saying so
expect_error "does not fit: needs .* GiB of 7.5 GiB per device (the node's 14.9 GiB shared by 2 ranks)" \
    --cluster "$tmp/node16.json" --num-devices 2 --num-layers 24 --hidden-size 2048 \
    --num-attention-heads 16 --seq-length 1024 --vocab-size 50257 --global-batch-size 8
# 4 ranks: a quarter each
"$PTDP" plan --cluster "$tmp/node16.json" --num-devices 4 "${gpt2m[@]}" --json >"$tmp/fit4.json" 2>&1
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["device_memory_bytes"] == 4e9' "$tmp/fit4.json" &&
    ok || bad "4 ranks sharing 16 GB: $(head -c 300 "$tmp/fit4.json")"
# `plan --help` calls the shipped local description "this machine" only when --calibrate wrote
# it here: an installed copy whose description names another machine says so, and so does the
# table planned on it
mkdir -p "$tmp/inst/bin" "$tmp/inst/share/ptdp/clusters"
cp "$PTDP" "$tmp/inst/bin/ptdp"
sed 's/"name": "local",/"name": "local", "machine": "Other CPU, 64 cores, 512 GiB",/' "$tmp/node16.json" \
    >"$tmp/inst/share/ptdp/clusters/local.json"
"$tmp/inst/bin/ptdp" plan --help >"$tmp/help" 2>&1
grep -q "local (measured by --calibrate on Other CPU, 64 cores, 512 GiB," "$tmp/help" &&
    grep -q "^not on this machine, " "$tmp/help" && ! grep -q "this machine:" "$tmp/help" && ok ||
    bad "plan --help with a description of another machine: $(grep -A2 'local' "$tmp/help")"
"$tmp/inst/bin/ptdp" plan --cluster local --num-devices 2 "${gpt2m[@]}" >"$tmp/out" 2>&1
grep -q "^note: this description was measured on Other CPU, 64 cores, 512 GiB, not on this machine" "$tmp/out" &&
    ok || bad "plan on another machine's description: $(head -3 "$tmp/out")"

# --calibrate writes a description the planner reads, with ptdp's flash attention and the
# memory-bound kernels measured per precision, and --explain charges attention as that kernel
OMP_NUM_THREADS=1 "$PTDP" plan --calibrate --out "$tmp/cal.json" >"$tmp/cal.out" 2>&1 ||
    bad "plan --calibrate failed: $(tail -3 "$tmp/cal.out")"
python3 - "$tmp/cal.json" <<'PY' && ok || bad "calibrated description: $(cat "$tmp/cal.json")"
import json, sys
c = json.load(open(sys.argv[1]))
precs = ("fp32", "fp16", "bf16")
att, ew = c["attention_flops"], c["elementwise_efficiency"]
ew = ew if isinstance(ew, dict) else {p: ew for p in precs}
assert all(att[p] > 1e8 and 0 < ew[p] <= 1 for p in precs), (att, ew)
# the node (this machine) holds every rank of a job and its memory is the node's, which the
# planner divides among them: at least half of the machine's memory was available
total = [int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemTotal:")][0]
assert c["devices_per_node"] == 0 and c["shared_node"] >= 1, c
assert 0.5 * total <= c["memory_bytes"] <= total, (c["memory_bytes"], total)
assert c["machine"].endswith(" GiB") and " cores, " in c["machine"], c["machine"]
PY
"$PTDP" plan --cluster "$tmp/cal.json" --num-devices 1 "${small[@]}" --no-recompute \
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --explain >"$tmp/cal.explain" 2>&1
grep -q "core attention: ptdp's flash attention" "$tmp/cal.explain" && ok ||
    bad "plan on a calibrated description: $(head -12 "$tmp/cal.explain")"
finish
