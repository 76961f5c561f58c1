#!/usr/bin/env bash
# test_image_cli.sh - image input on the command line: `logits --images/--embd`
# and `generate --image` refuse bad input with a message naming it (exit 2 for
# a malformed option, 1 for input that does not fit the model), never a crash.
#
# Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
# Env: DS_BIN, DS_TMP (tests/run.sh).
set -u
: "${DS_BIN:?}" "${DS_TMP:?}"
T=$(mktemp -d "$DS_TMP/image-cli.XXXXXX")
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

# expect NAME RC WORD CMD... : exit code RC, WORD on stderr, no sanitizer report
expect() {
    local name=$1 want=$2 word=$3
    shift 3
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ "$rc" -ne "$want" ]; then fail "$name" "exit $rc, expected $want: $(head -c 400 "$T/err")"
    elif ! grep -qF -- "$word" "$T/err"; then fail "$name" "stderr does not say '$word': $(head -c 400 "$T/err")"
    elif grep -qE 'Sanitizer|runtime error' "$T/err"; then fail "$name" "sanitizer report"
    else ok "$name"; fi
}

M="$T/tiny.gguf"
"$DS_BIN" make-model --shape tiny --seed 2 --out "$M" >/dev/null 2>&1 || { echo "FAIL make-model"; echo "RESULT passed=0 failed=1"; exit 1; }
TOKS=1,2,3,4,5,6,7,8,9,10,11,12
# 6 image rows of 256 floats: tokens 3..8 as a merged 2 x 3 grid
head -c $((6 * 256 * 4)) /dev/zero >"$T/rows.f32"

"$DS_BIN" logits -m "$M" --tokens "$TOKS" --images 3:1:2:3 --embd "$T/rows.f32" --positions "$T/pos" --out "$T/l" 2>"$T/err"
if [ $? -eq 0 ] && [ "$(od -An -v -td4 -w12 "$T/pos" | sed -n 9p | tr -s ' ')" = " 3 4 5" ]; then
    ok "logits --images places the image's last token at (3, 4, 5)"
else
    fail "logits --images" "$(cat "$T/err"; od -An -v -td4 -w12 "$T/pos" 2>/dev/null | head -12)"
fi
expect "a malformed --images" 2 "not a list of FIRST:T:H:W" \
    "$DS_BIN" logits -m "$M" --tokens "$TOKS" --images 3:1:2 --embd "$T/rows.f32" --out "$T/l"
expect "--images without --embd" 2 "usage" "$DS_BIN" logits -m "$M" --tokens "$TOKS" --images 3:1:2:3 --out "$T/l"
expect "image rows of the wrong size" 1 "$T/rows.f32 is not 3072 F32 values" \
    "$DS_BIN" logits -m "$M" --tokens "$TOKS" --images 3:1:2:3 --embd "$T/rows.f32" --deepstack 1 --out "$T/l"
expect "an image past the prompt" 1 "image 0 (tokens 8..13) is out of order or outside the prompt of 12 tokens" \
    "$DS_BIN" logits -m "$M" --tokens "$TOKS" --images 8:1:2:3 --embd "$T/rows.f32" --out "$T/l"
expect "a DeepStack count past the limit" 2 "--deepstack" \
    "$DS_BIN" logits -m "$M" --tokens "$TOKS" --images 3:1:2:3 --embd "$T/rows.f32" --deepstack 9 --out "$T/l"
Q3="$T/qwen3.gguf"
"$DS_BIN" make-model --shape tiny-qwen3 --seed 2 --out "$Q3" >/dev/null 2>&1
expect "images for a model without M-RoPE" 1 "has no M-RoPE sections" \
    "$DS_BIN" logits -m "$Q3" --tokens "$TOKS" --images 3:1:2:3 --embd "$T/rows.f32" --out "$T/l"
expect "generate --image without a vision tower" 2 "give --mmproj PATH" \
    "$DS_BIN" generate -m "$M" -p hello -n 2 --image "$T/none.png"

rm -rf "$T"
echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
