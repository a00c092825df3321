#!/usr/bin/env bash
# `cmake --install` (what `make install PREFIX=...` runs) into a temporary
# prefix: the binary runs from there and finds the planner's clusters under
# PREFIX/share, and a program compiled with nothing but
# `pkg-config --cflags --libs ptdp` links the core library, builds a GPT
# chunk, computes its logits and a schedule (tests/embed/embed_demo.c).
set -u
pass=0 fails=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

cmake --install "$PTDP_BUILD" --prefix "$T/prefix" >"$T/install.out" 2>&1 && ok || bad "install: $(tail -3 "$T/install.out")"
for f in bin/ptdp lib/libptdpcore.a lib/pkgconfig/ptdp.pc include/ptdp/model/model.h include/ptdp/train/train.h \
    share/ptdp/clusters/a100-superpod.json; do
    [ -f "$T/prefix/$f" ] && ok || bad "not installed: $f"
done
[ -z "$(find "$T/prefix/include" -name '*_internal.h')" ] && ok || bad "internal headers installed"
"$T/prefix/bin/ptdp" --version >"$T/v.out" 2>&1 && grep -q "^ptdp " "$T/v.out" && ok || bad "installed ptdp --version: $(cat "$T/v.out")"
# the installed binary reads the installed clusters, not the source tree's
cp -r "$T/prefix" "$T/moved"
sed -i 's/"devices_per_node": *[0-9]*/"devices_per_node": 4/' "$T/moved/share/ptdp/clusters/a100-superpod.json"
"$T/moved/bin/ptdp" plan --cluster a100-superpod --num-devices 8 --num-layers 4 --hidden-size 1024 \
    --num-attention-heads 16 --seq-length 1024 --global-batch-size 64 --tensor-model-parallel-size 8 >"$T/plan.out" 2>&1
grep -q "node" "$T/plan.out" && ok || bad "the moved install did not read its own clusters (t=8 > 4 per node): $(tail -3 "$T/plan.out")"

export PKG_CONFIG_PATH="$T/prefix/lib/pkgconfig"
cc -std=c11 -O1 -o "$T/embed" "$PTDP_SRC/tests/embed/embed_demo.c" $(pkg-config --cflags --libs ptdp) >"$T/cc.out" 2>&1 &&
    ok || bad "compile against the installed library: $(head -5 "$T/cc.out")"
OMP_NUM_THREADS=1 "$T/embed" >"$T/embed.out" 2>&1 && grep -q "rank 0 runs 16 actions, 3 warm-up forwards" "$T/embed.out" &&
    grep -q "logits: 1024 values" "$T/embed.out" && ok || bad "embedded program: $(cat "$T/embed.out")"

# the CUDA backend: not in a program linked with ptdp alone (the message names ptdp-cuda); in
# one linked with ptdp-cuda where the build has it (here without a GPU: "no-gpu")
cc -std=c11 -O1 -o "$T/embed_cuda" "$PTDP_SRC/tests/embed/embed_cuda.c" $(pkg-config --cflags --libs ptdp) \
    >"$T/cc.out" 2>&1 && "$T/embed_cuda" >"$T/cuda.out" 2>&1 &&
    grep -q "^cuda: unsupported .*pkg-config --libs ptdp-cuda" "$T/cuda.out" && ok ||
    bad "CUDA without ptdp-cuda: $(cat "$T/cc.out" "$T/cuda.out" 2>/dev/null | head -5)"
if grep -q "cuda (--device cuda)" "$T/v.out"; then # a build with nvcc
    [ -f "$T/prefix/lib/pkgconfig/ptdp-cuda.pc" ] && [ -f "$T/prefix/lib/libptdpcuda.a" ] && ok ||
        bad "a CUDA build does not install libptdpcuda.a and ptdp-cuda.pc"
    cc -std=c11 -O1 -o "$T/embed_cuda2" "$PTDP_SRC/tests/embed/embed_cuda.c" \
        $(pkg-config --cflags --libs ptdp-cuda) >"$T/cc.out" 2>&1 && ok ||
        bad "compile with ptdp-cuda: $(head -5 "$T/cc.out")"
    "$T/embed_cuda2" >"$T/cuda.out" 2>&1
    grep -q -E "^cuda: (opened|no-gpu)" "$T/cuda.out" && ok || bad "CUDA with ptdp-cuda: $(cat "$T/cuda.out")"
fi

echo "test_install: $pass checks passed, $fails failed"
[ "$fails" = 0 ]
