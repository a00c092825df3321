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

# every installed header compiles on its own, from C and from C++, in a project that has its own
# data/data.h and model/model.h first on the include path (ptdp's headers include each other by
# relative path, so they never pick up the project's; extern "C" keeps C++ linking to C names)
mkdir -p "$T/host/data" "$T/host/model"
printf '#error "the host project'"'"'s data/data.h was included by a ptdp header"\n' >"$T/host/data/data.h"
printf '#error "the host project'"'"'s model/model.h was included by a ptdp header"\n' >"$T/host/model/model.h"
nh=0
for h in $(cd "$T/prefix/include" && find ptdp -name '*.h' | sort); do
    nh=$((nh + 1))
    printf '#include <%s>\nint ptdp_header_test_%d;\n' "$h" "$nh" >"$T/h.c"
    cc -std=c11 -Wall -Werror -c -o "$T/h.o" -I"$T/host" "$T/h.c" $(pkg-config --cflags ptdp) >"$T/cc.out" 2>&1 ||
        bad "$h from C: $(head -3 "$T/cc.out")"
    cp "$T/h.c" "$T/h.cpp"
    c++ -std=c++17 -Wall -Werror -c -o "$T/h.o" -I"$T/host" "$T/h.cpp" $(pkg-config --cflags ptdp) >"$T/cc.out" 2>&1 ||
        bad "$h from C++: $(head -3 "$T/cc.out")"
    grep -q 'extern "C"' "$T/prefix/include/$h" || bad "$h has no extern \"C\" guard"
done
[ "$nh" -ge 15 ] && ok || bad "only $nh headers installed"
# a C++ program calls the library: C linkage of what the headers declare
printf '#include <ptdp/base/base.h>\n#include <ptdp/pipeline/schedule.h>\nint main() { return ptdp_schedule_kind_name(PTDP_SCHED_1F1B)[0] == 0; }\n' >"$T/prog.cpp"
c++ -std=c++17 -o "$T/prog" "$T/prog.cpp" $(pkg-config --cflags --libs ptdp) >"$T/cc.out" 2>&1 && "$T/prog" && ok ||
    bad "a C++ program linked with ptdp: $(head -3 "$T/cc.out")"

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
