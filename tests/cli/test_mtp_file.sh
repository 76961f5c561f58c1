#!/usr/bin/env bash
# test_mtp_file.sh - the MTP head from a file of its own, end to end:
#   - make-model --mtp-out writes a main file without a head and the head
#     alone; `bench --spec-tokens` with the pair (--mtp-model) reports the
#     single file's acceptance counters; `generate` and `info` take the flag;
#   - a pair that does not belong together is refused by generate, bench and
#     serve with one line naming both files and the difference: a main file
#     that has a head, another layer count, architecture, hidden size or
#     vocabulary (the last two from a head file whose metadata / embedding
#     shape is edited in place), a head file without a head;
#   - make-model refuses --mtp-out without a head or for safetensors.
# Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
# Env: DS_BIN, DS_TMP (tests/run.sh). Port used: 18741.
set -u
: "${DS_BIN:?}" "${DS_TMP:?}"
PY=/usr/bin/python3
T=$(mktemp -d "$DS_TMP/mtpfile.XXXXXX")
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
mk() { "$DS_BIN" make-model --seed 5 "$@" >/dev/null 2>>"$T/mm.err"; }
if ! mk --shape tiny --mtp-agree 0.6 --out "$T/single.gguf" ||
   ! mk --shape tiny --mtp-agree 0.6 --out "$T/main.gguf" --mtp-out "$T/mtp-main.gguf" ||
   ! mk --shape tiny --layers 3 --no-mtp --out "$T/main3.gguf" ||
   ! mk --shape tiny-moe --no-mtp --out "$T/moe.gguf"; then
    bad make-model "$(tail -n 2 "$T/mm.err")"; echo "RESULT passed=$passed failed=$failed"; exit 1
fi

# the same speculation (each request by its own acceptance, not by measured costs): every counter
# bench reports but the speeds
bench() { timeout 300 "$DS_BIN" bench -t 1 --spec-tokens 3 --spec-batch 4 -n 24 --spec-policy request --json "$@"; }
if bench -m "$T/single.gguf" >"$T/one.json" 2>"$T/one.err" &&
   bench -m "$T/main.gguf" --mtp-model "$T/mtp-main.gguf" >"$T/two.json" 2>"$T/two.err"; then
    why=$("$PY" -c "
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
keys = ['acceptance', 'draft_acceptance', 'mean_accepted', 'drafted', 'batch_verifying_per_step']
diff = [k for k in keys if a[k] != b[k]]
print('' if not diff and a['drafted'] > 0 else 'differ: %s; single %s pair %s' % (diff, [a[k] for k in keys], [b[k] for k in keys]))
" "$T/one.json" "$T/two.json" 2>&1)
    [ -z "$why" ] && ok "bench --spec-tokens: the pair's acceptance counters are the single file's" || bad "bench counters" "$why"
else
    bad "bench with --mtp-model" "$(tail -n 2 "$T/one.err" "$T/two.err")"
fi

if "$DS_BIN" generate -m "$T/single.gguf" -p "hello" -n 12 --temp 0 >"$T/g1" 2>/dev/null &&
   "$DS_BIN" generate -m "$T/main.gguf" --mtp-model "$T/mtp-main.gguf" -p "hello" -n 12 --temp 0 >"$T/g2" 2>/dev/null &&
   cmp -s "$T/g1" "$T/g2"; then
    ok "generate --mtp-model: the single file's text"
else
    bad "generate --mtp-model" "exit or text differs"
fi

out=$("$DS_BIN" info -m "$T/main.gguf" --mtp-model "$T/mtp-main.gguf" 2>&1)
[[ $out == *"+ 1 MTP block"* ]] && [[ $out == *"MTP head       from $T/mtp-main.gguf"* ]] &&
    ok "info --mtp-model: the head's block and where it came from" || bad "info --mtp-model" "$out"

# head files that do not fit: hidden size (metadata edited) and vocabulary (embedding rows edited)
"$PY" - "$T/mtp-main.gguf" "$T/mtp-h128.gguf" "$T/mtp-vocab.gguf" <<'EOF'
import struct, sys
src, h128, vocab = sys.argv[1:4]
buf = bytearray(open(src, "rb").read())
key = b"qwen35.embedding_length"
i = buf.index(struct.pack("<Q", len(key)) + key) + 8 + len(key)
assert struct.unpack_from("<I", buf, i)[0] == 4  # uint32
a = bytearray(buf)
struct.pack_into("<I", a, i + 4, 128)
open(h128, "wb").write(a)
name = b"token_embd.weight"
j = buf.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
assert struct.unpack_from("<I", buf, j)[0] == 2  # n_dims
rows = struct.unpack_from("<Q", buf, j + 12)[0]
b = bytearray(buf)
struct.pack_into("<Q", b, j + 12, rows - 64)
open(vocab, "wb").write(b)
EOF

# refused CMD MAIN HEAD WHAT: the command exits 1 with one line naming both files and WHAT
refused() {
    local cmd=$1 main=$2 head=$3 what=$4 out
    case $cmd in
    generate) out=$(timeout 60 "$DS_BIN" generate -m "$T/$main" --mtp-model "$T/$head" -p hi -n 2 2>&1 >/dev/null) ;;
    bench) out=$(timeout 60 "$DS_BIN" bench -m "$T/$main" --mtp-model "$T/$head" --spec-tokens 2 -n 4 -t 1 2>&1 >/dev/null) ;;
    serve) out=$(timeout 60 "$DS_BIN" serve -m "$T/$main" --mtp-model "$T/$head" --port 18741 2>&1 >/dev/null) ;;
    esac
    local rc=$?
    if [ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && [[ $out == *"$main"* ]] &&
       [[ $out == *"$head"* ]] && [[ $out == *"$what"* ]]; then
        ok "$cmd refuses $main + $head: $what"
    else
        bad "$cmd $main + $head" "exit $rc: $out"
    fi
}
refused generate single.gguf mtp-main.gguf "already has an MTP head"
refused generate main3.gguf mtp-main.gguf "decoder layer count 3, the head's model has 4"
refused generate moe.gguf mtp-main.gguf "architecture qwen35moe, the head's is qwen35"
refused generate main.gguf mtp-h128.gguf "hidden size 256, the head's model has 128"
refused generate main.gguf mtp-vocab.gguf "vocabulary (token_embd rows) 1088, the head's model has 1024"
refused generate main.gguf main.gguf "has no MTP head"
refused bench single.gguf mtp-main.gguf "already has an MTP head"
refused serve main3.gguf mtp-main.gguf "decoder layer count 3"

out=$("$DS_BIN" make-model --shape tiny --no-mtp --out "$T/x.gguf" --mtp-out "$T/y.gguf" 2>&1)
[ $? -eq 1 ] && [[ $out == *"has no MTP head"* ]] && ok "make-model --mtp-out without a head is refused" ||
    bad "make-model --mtp-out --no-mtp" "$out"
out=$("$DS_BIN" make-model --shape tiny --format safetensors --out "$T/x-hf" --mtp-out "$T/y.gguf" 2>&1)
[ $? -eq 1 ] && [[ $out == *"GGUF only"* ]] && ok "make-model --mtp-out with safetensors is refused" ||
    bad "make-model --mtp-out safetensors" "$out"

rm -rf "$T"
echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
