#!/usr/bin/env bash
# test_make_model_threads.sh - make-model quantises on several threads, and
# the file it writes must not depend on how many: for the same seed and
# options, --threads 1, 2 and 3 give the same bytes (GGUF at every dtype the
# mixes use, and a Hugging Face directory).
#
# Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
# Uses $DS_BIN (default build/deltaserve) and $DS_TMP (default /tmp).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${DS_BIN:-$ROOT/build/deltaserve}
T=$(mktemp -d "${DS_TMP:-/tmp}/make-threads.XXXXXX")
trap 'rm -rf "$T"' EXIT
passed=0 failed=0

ok() { echo "ok $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; shift 2; for l in "$@"; do echo "     $l"; done; failed=$((failed + 1)); }

# same_for_threads NAME FORMAT MAKE-MODEL-OPTIONS...
same_for_threads() {
    local name=$1 format=$2; shift 2
    local t out ref=""
    for t in 1 2 3; do
        out="$T/$name.t$t"
        if ! "$BIN" make-model "$@" --format "$format" --threads "$t" --out "$out" >"$T/log" 2>&1; then
            fail "$name" "make-model --threads $t failed" "$(tail -n 3 "$T/log")"
            return
        fi
        if [ -z "$ref" ]; then ref=$out
        elif ! diff -r "$ref" "$out" >/dev/null; then
            fail "$name" "--threads $t wrote other bytes than --threads 1"
            return
        fi
    done
    ok "$name"
}

same_for_threads "tiny q4_k_m gguf" gguf --shape tiny --dtype q4_k_m --seed 3
same_for_threads "tiny-moe q4_k_m gguf" gguf --shape tiny-moe --dtype q4_k_m --seed 4
same_for_threads "tiny q8_0 gguf" gguf --shape tiny --dtype q8_0 --seed 5
same_for_threads "tiny-qwen3 f16 gguf" gguf --shape tiny-qwen3 --dtype f16 --seed 6
same_for_threads "tiny-moe bf16 safetensors" safetensors --shape tiny-moe --dtype bf16 --seed 7 --shard-mb 1

echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
