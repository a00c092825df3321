#!/usr/bin/env bash
# prepare.sh - build, on a machine without a GPU, everything the GPU machine
# runs (scripts/gpu/run.sh) into .gpu/ (git-ignored, about 30 MB, under the
# device tool's 64 MiB carry limit): the ptdp binary, the CUDA op and golden
# tests, the GEMM benchmark, and the shared libraries they need that the GPU
# machine lacks (oneDNN, OpenBLAS, cJSON, libgomp; compressed). The GPU
# machine brings its own CUDA 13 driver and libraries and its own Open MPI
# 4.1.6 (libmpi.so.40, the same as Debian's), so neither is carried.
#   bash scripts/gpu/prepare.sh          then, on the GPU machine:
#   bash scripts/gpu/run.sh              (docs/gpu.md)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${GPU_BUILD:-build-gpu}
# Hopper's own instructions where kernels use them (sm_90a), plain sm_90 and
# A100 machine code, and PTX for later GPUs
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DPTDP_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${GPU_ARCHS:-80-real;90a-real;90}" >/dev/null
cmake --build "$B" -j "$(nproc)" --target ptdp test_cuda_ops test_golden_cuda bench_cuda_gemm >/dev/null
grep -q "cuda (--device cuda)" <("$B/ptdp" --version) ||
    { echo "prepare.sh: $B/ptdp has no CUDA backend (nvcc not found?)" >&2; exit 1; }
rm -rf .gpu
mkdir -p .gpu/bin .gpu/libs
cp "$B/ptdp" "$B/tests/test_cuda_ops" "$B/tests/test_golden_cuda" "$B/bench_cuda_gemm" .gpu/bin/
# every library the binaries load beyond glibc, the C++ runtime, MPI and CUDA
ldd .gpu/bin/* | awk '/=> \// {print $3}' | sort -u |
    grep -v -E '/lib(c|m|dl|rt|pthread|stdc\+\+|gcc_s)\.so|/libmpi|/libopen-(rte|pal)|/libhwloc|/libevent|/libudev|/libz\.|/libcuda|/libcublas' |
    while read -r l; do cp -L "$l" .gpu/libs/; done
tar czf .gpu/libs.tgz -C .gpu/libs . && rm -r .gpu/libs
git rev-parse --short HEAD >.gpu/revision 2>/dev/null || echo unknown >.gpu/revision
du -sh .gpu | awk '{print "prepare.sh: .gpu is " $1 " (carry it: run(carry=[\".gpu\"]))"}'
