#!/usr/bin/env bash
# test_vision_file.sh - the vision tower from the command line:
#   - make-model --mmproj writes an mmproj GGUF llama.cpp's way (clip keys,
#     projector qwen3vl_merger, the deepstack flags asked for) and --format
#     safetensors --vision puts the tower in the directory;
#   - info prints the tower it finds beside a GGUF model (the one mmproj*,
#     or the one that shares the model's name among several), the one of a
#     Hugging Face directory, the one --mmproj names; --no-mmproj prints none;
#   - a tower that does not load is an error naming it, whether --mmproj
#     named it or it was found beside the model (generate and info), and
#     --no-mmproj then loads the model; --mmproj with --no-mmproj is refused;
#   - make-model refuses a shape without a tower and a bad --deepstack.
# Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
# Env: DS_BIN, DS_TMP (tests/run.sh).
set -u
: "${DS_BIN:?}" "${DS_TMP:?}"
PY=/usr/bin/python3
T=$(mktemp -d "$DS_TMP/visionfile.XXXXXX")
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
mk() { "$DS_BIN" make-model --seed 3 --no-mtp "$@" >/dev/null 2>>"$T/mm.err"; }
mkdir -p "$T/one" "$T/two" "$T/broken"
if ! mk --shape tiny --out "$T/one/model.gguf" --mmproj "$T/one/mmproj-model-f32.gguf" --deepstack 0,1 ||
   ! mk --shape tiny --out "$T/two/Tiny-A-Q8.gguf" --mmproj "$T/two/mmproj-Tiny-A-F16.gguf" --vision-layers 1 ||
   ! mk --shape tiny --out "$T/two/Tiny-B-Q8.gguf" --mmproj "$T/two/mmproj-Tiny-B-F16.gguf" ||
   ! mk --shape tiny --format safetensors --vision --deepstack 1 --out "$T/hf"; then
    bad make-model "$(tail -n 2 "$T/mm.err")"; echo "RESULT passed=$passed failed=$failed"; exit 1
fi

# the file says what llama.cpp's converter says
why=$("$PY" - "$T/one/mmproj-model-f32.gguf" <<'EOF' 2>&1
import struct, sys
b = open(sys.argv[1], 'rb').read()
assert b[:4] == b'GGUF', 'not GGUF'
for key, want in [(b'clip.projector_type', b'qwen3vl_merger'), (b'general.architecture', b'clip')]:
    i = b.find(key)
    assert i > 0, key
    n = struct.unpack_from('<Q', b, i + len(key) + 4)[0]
    got = b[i + len(key) + 12:i + len(key) + 12 + n]
    assert got == want, (key, got)
i = b.find(b'clip.vision.is_deepstack_layers')
assert i > 0, 'no is_deepstack_layers'
t, et, n = struct.unpack_from('<IIQ', b, i + len('clip.vision.is_deepstack_layers'))
flags = list(b[i + 31 + 16:i + 31 + 16 + n])
assert (t, et, flags) == (9, 7, [1, 1]), (t, et, flags)
for name in [b'v.patch_embd.weight.1', b'v.deepstack.1.fc2.bias', b'mm.2.weight', b'v.position_embd.weight']:
    assert name in b, name
EOF
)
[ -z "$why" ] && ok "make-model --mmproj: clip keys, qwen3vl_merger, DeepStack flags, tensor names" ||
    bad "make-model --mmproj" "$why"

info() { "$DS_BIN" info "$@" >"$T/info.out" 2>"$T/info.err"; }
if info -m "$T/one/model.gguf" && grep -q "^vision tower   $T/one/mmproj-model-f32.gguf" "$T/info.out" &&
   grep -q "deepstack    after blocks 0, 1" "$T/info.out" && grep -q "blocks       2, width 64, 4 heads" "$T/info.out"; then
    ok "info finds the mmproj beside a GGUF model"
else
    bad "info beside" "$(cat "$T/info.out" "$T/info.err" | tail -n 8)"
fi
if info -m "$T/two/Tiny-A-Q8.gguf" && grep -q "mmproj-Tiny-A-F16.gguf" "$T/info.out" &&
   grep -q "blocks       1," "$T/info.out" &&
   info -m "$T/two/Tiny-B-Q8.gguf" && grep -q "mmproj-Tiny-B-F16.gguf" "$T/info.out"; then
    ok "info: among several mmproj files, the one sharing the model's name"
else
    bad "info best match" "$(cat "$T/info.out" "$T/info.err" | grep -i "vision\|error" | tail -n 4)"
fi
cp "$T/one/model.gguf" "$T/two/Other.gguf"
if info -m "$T/two/Other.gguf" && ! grep -q "vision tower" "$T/info.out"; then
    ok "info: several mmproj files, none named for the model: no guess"
else
    bad "info no guess" "$(grep -i "vision" "$T/info.out" "$T/info.err")"
fi
if info -m "$T/hf" && grep -q "^vision tower   $T/hf" "$T/info.out" && grep -q "after blocks 1" "$T/info.out"; then
    ok "info prints the tower of a Hugging Face directory"
else
    bad "info hf" "$(cat "$T/info.out" "$T/info.err" | tail -n 8)"
fi
if info -m "$T/two/Other.gguf" --mmproj "$T/two/mmproj-Tiny-A-F16.gguf" &&
   grep -q "^vision tower   $T/two/mmproj-Tiny-A-F16.gguf" "$T/info.out"; then
    ok "info --mmproj PATH"
else
    bad "info --mmproj" "$(cat "$T/info.out" "$T/info.err" | tail -n 4)"
fi
if info -m "$T/one/model.gguf" --no-mmproj && ! grep -q "vision tower" "$T/info.out" &&
   info -m "$T/hf" --no-mmproj && ! grep -q "vision tower" "$T/info.out"; then
    ok "info --no-mmproj"
else
    bad "info --no-mmproj" "$(cat "$T/info.out" "$T/info.err" | tail -n 4)"
fi

# towers that do not load: errors naming them
cp "$T/one/model.gguf" "$T/broken/model.gguf"
head -c 100000 "$T/one/mmproj-model-f32.gguf" >"$T/broken/mmproj-model.gguf"
"$DS_BIN" info -m "$T/one/model.gguf" --mmproj "$T/one/model.gguf" >/dev/null 2>"$T/e1"; rc=$?
[ $rc -eq 1 ] && grep -q "model.gguf: general.architecture is 'qwen35', not 'clip'" "$T/e1" &&
    ok "info --mmproj naming a text model: refused naming it" || bad "info --mmproj text" "rc=$rc $(cat "$T/e1")"
"$DS_BIN" info -m "$T/one/model.gguf" --mmproj "$T/nope.gguf" >/dev/null 2>"$T/e2"; rc=$?
[ $rc -eq 1 ] && grep -q "nope.gguf: no such file" "$T/e2" && ok "info --mmproj missing file" ||
    bad "info --mmproj missing" "rc=$rc $(cat "$T/e2")"
for cmd in info generate; do
    extra=""
    [ $cmd = generate ] && extra="-p hi -n 2 --temp 0"
    # shellcheck disable=SC2086
    timeout 120 "$DS_BIN" $cmd -m "$T/broken/model.gguf" $extra >/dev/null 2>"$T/e3"; rc=$?
    if [ $rc -eq 1 ] && grep -q "broken/mmproj-model.gguf" "$T/e3" && grep -q "found beside the model" "$T/e3"; then
        ok "$cmd: a broken mmproj found beside the model is an error naming it"
    else
        bad "$cmd broken beside" "rc=$rc $(cat "$T/e3")"
    fi
    # shellcheck disable=SC2086
    timeout 120 "$DS_BIN" $cmd -m "$T/broken/model.gguf" --no-mmproj $extra >/dev/null 2>"$T/e4"; rc=$?
    [ $rc -eq 0 ] && ok "$cmd --no-mmproj skips it" || bad "$cmd --no-mmproj" "rc=$rc $(cat "$T/e4")"
done
timeout 120 "$DS_BIN" generate -m "$T/one/model.gguf" --mmproj "$T/one/mmproj-model-f32.gguf" -p hi -n 2 --temp 0 \
    >/dev/null 2>"$T/e5"; rc=$?
[ $rc -eq 0 ] && ok "generate --mmproj PATH loads the tower" || bad "generate --mmproj" "rc=$rc $(cat "$T/e5")"
"$DS_BIN" info -m "$T/one/model.gguf" --mmproj "$T/one/mmproj-model-f32.gguf" --no-mmproj >/dev/null 2>"$T/e6"; rc=$?
[ $rc -eq 1 ] && grep -q "contradict" "$T/e6" && ok "--mmproj with --no-mmproj is refused" ||
    bad "--mmproj --no-mmproj" "rc=$rc $(cat "$T/e6")"
# a tower for another width: refused naming both files
mk --shape qwen3.5-0.8b --layers 1 --out "$T/wide.gguf" --mmproj "$T/mmproj-wide.gguf" --vision-layers 1
"$DS_BIN" info -m "$T/one/model.gguf" --mmproj "$T/mmproj-wide.gguf" >/dev/null 2>"$T/e7"; rc=$?
[ $rc -eq 1 ] && grep -q "mmproj-wide.gguf writes 1024-wide embeddings, but the model .*model.gguf is 256 wide" "$T/e7" &&
    ok "a tower of another width is refused naming both files" || bad "width" "rc=$rc $(cat "$T/e7")"

# make-model's own refusals
"$DS_BIN" make-model --shape tiny-qwen3 --out "$T/q3.gguf" --mmproj "$T/mmproj-q3.gguf" >/dev/null 2>"$T/e8"; rc=$?
[ $rc -eq 1 ] && grep -q "shape 'tiny-qwen3' has no vision tower" "$T/e8" && ok "make-model: a shape without a tower" ||
    bad "make-model no tower" "rc=$rc $(cat "$T/e8")"
"$DS_BIN" make-model --shape tiny --out "$T/x.gguf" --mmproj "$T/mmproj-x.gguf" --deepstack 1,0 >/dev/null 2>"$T/e9"; rc=$?
[ $rc -eq 2 ] && grep -q "deepstack '1,0'" "$T/e9" && ok "make-model --deepstack not increasing" ||
    bad "make-model --deepstack order" "rc=$rc $(cat "$T/e9")"
"$DS_BIN" make-model --shape tiny --out "$T/x.gguf" --mmproj "$T/mmproj-x.gguf" --deepstack 2 >/dev/null 2>"$T/e10"; rc=$?
[ $rc -eq 1 ] && grep -q "\-\-deepstack names block 2, not an increasing block index below 2" "$T/e10" &&
    ok "make-model --deepstack beyond the tower's blocks" || bad "make-model --deepstack range" "rc=$rc $(cat "$T/e10")"

rm -rf "$T"
echo "RESULT passed=$passed failed=$failed"
[ $failed -eq 0 ]
