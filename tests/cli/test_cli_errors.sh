#!/usr/bin/env bash
# test_cli_errors.sh - `deltaserve info` and `make-model` end to end.
#
# Bad model files of each kind (made here from valid ones: truncated, wrong
# magic, offset out of range, unknown tensor type, shape mismatch, missing
# tensor, unknown dtype, missing/contradictory config field, missing shard...)
# must give exactly one line on stderr naming the file and the tensor or
# field, nothing on stdout, exit code 1, and no crash or sanitizer report.
# `info` on valid GGUF and Hugging Face models must print the expected
# architecture, layer kinds, dtype counts, parameter counts, KV bytes per token
# and DeltaNet bytes per sequence. make-model's bad options exit 2 with a message.
#
# Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
# Uses $DS_BIN (default build/deltaserve) and $DS_TMP (default a new temp dir).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${DS_BIN:-$ROOT/build/deltaserve}
PY=/usr/bin/python3
T=$(mktemp -d "${DS_TMP:-/tmp}/cli-errors.XXXXXX")
trap 'rm -rf "$T"' EXIT
ulimit -c 0
passed=0 failed=0

ok() { echo "ok $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; shift 2; for l in "$@"; do echo "     $l"; done; failed=$((failed + 1)); }

# run_info NAME PATH -> sets rc, out, err
run_info() {
    "$BIN" info -m "$2" >"$T/out" 2>"$T/err"
    rc=$?
    out=$(cat "$T/out")
    err=$(cat "$T/err")
}

# expect_error NAME PATH WORD... : exit 1, one stderr line naming PATH and each WORD, empty stdout
expect_error() {
    local name=$1 path=$2
    shift 2
    run_info "$name" "$path"
    local lines
    lines=$(printf '%s' "$err" | grep -c '')
    local why=""
    if [ "$rc" -ne 1 ]; then why="exit code $rc, expected 1"
    elif [ "$lines" -ne 1 ]; then why="$lines lines on stderr, expected 1"
    elif [ -n "$out" ]; then why="output on stdout"
    elif [[ "$err" != *"$path"* ]]; then why="stderr does not name $path"
    elif grep -qE 'Sanitizer|runtime error|Segmentation|core dumped' "$T/err"; then why="sanitizer report"
    else
        for w in "$@"; do
            if [[ "$err" != *"$w"* ]]; then why="stderr does not mention '$w'"; break; fi
        done
    fi
    if [ -n "$why" ]; then fail "$name" "$why" "stderr: $(head -c 600 "$T/err")"; else ok "$name"; fi
}

# expect_lines NAME PATH REGEX... : exit 0, nothing on stderr, each regex matches a line of stdout
expect_lines() {
    local name=$1 path=$2
    shift 2
    run_info "$name" "$path"
    local why=""
    if [ "$rc" -ne 0 ]; then why="exit code $rc: $err"
    elif [ -n "$err" ]; then why="stderr: $err"
    else
        for re in "$@"; do
            if ! grep -qE "$re" "$T/out"; then why="no line matches '$re'"; break; fi
        done
    fi
    if [ -n "$why" ]; then fail "$name" "$why" "$(cat "$T/out")"; else ok "$name"; fi
}

make_model() { # OUT ARGS...
    local out=$1
    shift
    if ! "$BIN" make-model --out "$out" "$@" >"$T/mm.out" 2>"$T/mm.err"; then
        fail "make-model $*" "exit $?" "$(cat "$T/mm.err")"
        return 1
    fi
}

# --- file surgery, with Python (GGUF header fields, safetensors headers, JSON) ---
cat >"$T/patch.py" <<'EOF'
import json, struct, sys

def gguf_fields(buf):
    """name -> (offset of n_dims, offset of the type field, offset of the offset field) per tensor."""
    p = 24
    n_t, n_kv = struct.unpack_from("<QQ", buf, 8)
    size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    def skip(t, p):
        if t == 8:
            (n,) = struct.unpack_from("<Q", buf, p)
            return p + 8 + n
        return p + size[t]
    for _ in range(n_kv):
        (kl,) = struct.unpack_from("<Q", buf, p); p += 8 + kl
        (t,) = struct.unpack_from("<I", buf, p); p += 4
        if t == 9:
            et, n = struct.unpack_from("<IQ", buf, p); p += 12
            for _ in range(n):
                p = skip(et, p)
        else:
            p = skip(t, p)
    out = {}
    for _ in range(n_t):
        (nl,) = struct.unpack_from("<Q", buf, p)
        name = buf[p + 8:p + 8 + nl].decode(); p += 8 + nl
        nd_at = p
        (nd,) = struct.unpack_from("<I", buf, p); p += 4 + 8 * nd
        out[name] = (nd_at, p, p + 4)
        p += 12
    return out

def rw_safetensors(path, edit):
    buf = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", buf)
    hdr = json.loads(buf[8:8 + n])
    edit(hdr)
    js = json.dumps(hdr).encode()
    js += b" " * (-len(js) % 8)
    open(path, "wb").write(struct.pack("<Q", len(js)) + js + buf[8 + n:])

def set_json(path, keypath, value):
    cfg = json.load(open(path))
    *parents, last = keypath.split(".")
    obj = cfg
    for k in parents:
        obj = obj[k]
    if value == "DELETE":
        del obj[last]
    else:
        obj[last] = json.loads(value)
    json.dump(cfg, open(path, "w"), indent=1)

op, path = sys.argv[1], sys.argv[2]
if op in ("tensor-offset", "tensor-type", "tensor-ndims"):
    buf = bytearray(open(path, "rb").read())
    nd_at, type_at, off_at = gguf_fields(buf)[sys.argv[3]]
    if op == "tensor-offset":
        struct.pack_into("<Q", buf, off_at, int(sys.argv[4]))
    elif op == "tensor-type":
        struct.pack_into("<I", buf, type_at, int(sys.argv[4]))
    else:
        struct.pack_into("<I", buf, nd_at, int(sys.argv[4]))
    open(path, "wb").write(buf)
elif op == "rename":  # same length: a header byte replacement
    buf = open(path, "rb").read()
    old, new = sys.argv[3].encode(), sys.argv[4].encode()
    assert len(old) == len(new) and buf.count(old) >= 1
    i = buf.index(old)
    open(path, "wb").write(buf[:i] + new + buf[i + len(old):])
elif op == "key-u32":  # a metadata key's u32 value: the key's bytes, then its type (4 = u32), then the value
    buf = bytearray(open(path, "rb").read())
    key = sys.argv[3].encode()
    i = buf.index(key + struct.pack("<I", 4)) + len(key)
    struct.pack_into("<I", buf, i + 4, int(sys.argv[4]))
    open(path, "wb").write(buf)
elif op == "magic":
    buf = bytearray(open(path, "rb").read())
    buf[0:4] = b"GGUX"
    open(path, "wb").write(buf)
elif op == "st-dtype":
    rw_safetensors(path, lambda h: h[sys.argv[3]].__setitem__("dtype", sys.argv[4]))
elif op == "st-drop":
    rw_safetensors(path, lambda h: h.pop(sys.argv[3]))
elif op == "st-shape":
    rw_safetensors(path, lambda h: h[sys.argv[3]].__setitem__("shape", json.loads(sys.argv[4])))
elif op == "st-offsets":
    rw_safetensors(path, lambda h: h[sys.argv[3]].__setitem__("data_offsets", json.loads(sys.argv[4])))
elif op == "json":
    set_json(path, sys.argv[3], sys.argv[4])
else:
    sys.exit("unknown op " + op)
EOF
patch() { "$PY" "$T/patch.py" "$@" || { fail "patch $*" "python failed"; return 1; }; }
copy() { rm -rf "$2"; cp -r "$1" "$2"; }

# --- valid models ---
G=$T/tiny.gguf
H=$T/tiny-hf
S=$T/tiny-sharded
make_model "$G" --shape tiny --dtype f32 || exit 1
make_model "$H" --shape tiny --dtype bf16 --format safetensors || exit 1
make_model "$S" --shape tiny --dtype bf16 --format safetensors --shard-mb 1 || exit 1
make_model "$T/moe.gguf" --shape tiny-moe --dtype q8_0 || exit 1
make_model "$T/moe-hf" --shape tiny-moe --dtype bf16 --format safetensors --split-experts || exit 1
make_model "$T/q3.gguf" --shape tiny-qwen3 --dtype f32 || exit 1
make_model "$T/q4.gguf" --shape tiny --dtype q4_k_m || exit 1

# --- info on valid models ---
expect_lines "info gguf tiny" "$G" \
    '^model +.*tiny\.gguf \(GGUF\)$' '^architecture +qwen35 \(' '^layer kinds +DDDA\+M ' \
    '^tensors +71: f32 x71$' '^parameters +2797048 total .* 2797048 active per token .*, MTP 787840$' \
    '^KV cache +512 bytes per token' '^DeltaNet state 53760 bytes per sequence' \
    '^deltanet .*4 value heads x 32 \(tiled order\)'
expect_lines "info safetensors tiny" "$H" \
    '^model +.*tiny-hf \(safetensors\)$' '^architecture +qwen35 \(' '^layer kinds +DDDA\+M ' \
    '^tensors +71: f32 x30 bf16 x41$' '^parameters +2797048 total .* 2797048 active per token .*, MTP 787840$' \
    '^KV cache +512 bytes per token' '^DeltaNet state 53760 bytes per sequence' '\(grouped order\)'
expect_lines "info safetensors sharded" "$S" '^tensors +71: f32 x30 bf16 x41$' '^parameters +2797048 total'
expect_lines "info via config.json" "$H/config.json" '^architecture +qwen35 \(' '^tensors +71:'
expect_lines "info gguf tiny-moe q8_0" "$T/moe.gguf" \
    '^architecture +qwen35moe \(' '^layer kinds +DDDA\+M ' '^tensors +96: f32 x[0-9]+ q8_0 x[0-9]+$' \
    '^parameters +8311288 total .* 3592696 active per token .*, MTP 2166400$' '^KV cache +512 bytes' \
    '^DeltaNet state 53760 bytes' '^ffn +MoE: 8 experts, 2 per token'
expect_lines "info safetensors tiny-moe split" "$T/moe-hf" \
    '^architecture +qwen35moe \(' '^parameters +8311288 total .* 3592696 active per token'
expect_lines "info gguf tiny-qwen3" "$T/q3.gguf" \
    '^architecture +qwen3 \(' '^layer kinds +AA ' '^tensors +25: f32 x25$' \
    '^parameters +1738240 total .* 1738240 active per token \([^)]*\)$' '^KV cache +1024 bytes per token'
if grep -q '^DeltaNet state' "$T/out" 2>/dev/null; then fail "info qwen3 has no DeltaNet state" "$(cat "$T/out")"; else ok "info qwen3 has no DeltaNet state"; fi
expect_lines "info gguf q4_k_m" "$T/q4.gguf" '^tensors +71: f32 x30 q4_k x33 q6_k x5 q5_0 x3$' '^parameters +2797048 total'

# --- bad GGUF files ---
size=$(stat -c %s "$G")
head -c 3 "$G" >"$T/cut3.gguf"
expect_error "gguf truncated in the magic" "$T/cut3.gguf" truncated
head -c 20000 "$G" >"$T/cut-header.gguf"
expect_error "gguf truncated in the header" "$T/cut-header.gguf"
head -c $((size - 1000)) "$G" >"$T/cut-data.gguf"
expect_error "gguf truncated in the data" "$T/cut-data.gguf" "'output.weight'" "past the end"
: >"$T/empty.gguf"
expect_error "gguf empty file" "$T/empty.gguf" truncated
cp "$G" "$T/magic.gguf" && patch magic "$T/magic.gguf"
expect_error "gguf wrong magic" "$T/magic.gguf" magic
cp "$G" "$T/offset.gguf" && patch tensor-offset "$T/offset.gguf" blk.1.ssm_a 1099511627776
expect_error "gguf offset out of range" "$T/offset.gguf" "'blk.1.ssm_a'" "past the end"
cp "$G" "$T/misaligned.gguf" && patch tensor-offset "$T/misaligned.gguf" blk.1.ssm_a 4
expect_error "gguf offset misaligned" "$T/misaligned.gguf" "'blk.1.ssm_a'" aligned
cp "$G" "$T/type.gguf" && patch tensor-type "$T/type.gguf" blk.2.ffn_up.weight 77
expect_error "gguf unknown tensor type" "$T/type.gguf" "'blk.2.ffn_up.weight'" "ggml type 77"
cp "$G" "$T/ndims.gguf" && patch tensor-ndims "$T/ndims.gguf" blk.0.attn_norm.weight 7
expect_error "gguf bad n_dims" "$T/ndims.gguf" "'blk.0.attn_norm.weight'" dimensions
cp "$G" "$T/missing.gguf" && patch rename "$T/missing.gguf" blk.0.ssm_out.weight blk.0.ssm_ouX.weight
expect_error "gguf missing tensor" "$T/missing.gguf" "'blk.0.ssm_out.weight'" missing
cp "$G" "$T/shape.gguf" && patch rename "$T/shape.gguf" qwen35.embedding_length qwen35.embedding_lengtX
expect_error "gguf missing metadata key" "$T/shape.gguf" "qwen35.embedding_length" missing
cp "$G" "$T/arch.gguf" && patch rename "$T/arch.gguf" qwen35.block_count qwen35.block_counX
expect_error "gguf missing block_count" "$T/arch.gguf" "qwen35.block_count"
cp "$G" "$T/kvheads.gguf" && patch key-u32 "$T/kvheads.gguf" qwen35.attention.head_count_kv 0
expect_error "gguf zero kv heads: the key is named" "$T/kvheads.gguf" "'qwen35.attention.head_count_kv'" positive
expect_error "missing path" "$T/no-such-model.gguf" "no such file"

# --- bad Hugging Face directories ---
copy "$H" "$T/h-shape" && patch json "$T/h-shape/config.json" text_config.hidden_size 512
expect_error "hf shape mismatch (hidden_size)" "$T/h-shape" "'token_embd.weight'" shape
copy "$H" "$T/h-nofield" && patch json "$T/h-nofield/config.json" text_config.num_attention_heads DELETE
expect_error "hf missing config field" "$T/h-nofield" "config.json" "'num_attention_heads'" missing
copy "$H" "$T/h-contra" && patch json "$T/h-contra/config.json" num_hidden_layers 8
expect_error "hf contradictory config field" "$T/h-contra" "config.json" "'num_hidden_layers'" differs
copy "$H" "$T/h-retype" && patch json "$T/h-retype/config.json" text_config.linear_num_value_heads '"4"'
expect_error "hf config field of the wrong type" "$T/h-retype" "config.json" "'linear_num_value_heads'"
copy "$H" "$T/h-layers" && patch json "$T/h-layers/config.json" text_config.layer_types '["linear_attention"]'
expect_error "hf layer_types of the wrong length" "$T/h-layers" "config.json" layer_types
copy "$H" "$T/h-badjson" && printf '{"model_type": ' >"$T/h-badjson/config.json"
expect_error "hf config.json not JSON" "$T/h-badjson" "config.json" JSON
copy "$H" "$T/h-noconfig" && rm "$T/h-noconfig/config.json"
expect_error "hf no config.json" "$T/h-noconfig" "config.json"
copy "$H" "$T/h-dtype" && patch st-dtype "$T/h-dtype/model.safetensors" model.language_model.layers.0.linear_attn.in_proj_z.weight BX16
expect_error "hf unknown dtype" "$T/h-dtype" "model.safetensors" "in_proj_z.weight" "BX16"
copy "$H" "$T/h-i16" && patch st-dtype "$T/h-i16/model.safetensors" model.language_model.layers.0.linear_attn.in_proj_z.weight I16
expect_error "hf unsupported dtype" "$T/h-i16" "model.safetensors" "in_proj_z.weight" "I16"
copy "$H" "$T/h-drop" && patch st-drop "$T/h-drop/model.safetensors" model.language_model.layers.1.mlp.up_proj.weight
expect_error "hf missing tensor" "$T/h-drop" "'blk.1.ffn_up.weight'" missing
copy "$H" "$T/h-tshape" && patch st-shape "$T/h-tshape/model.safetensors" model.language_model.layers.1.mlp.up_proj.weight '[256, 512]'
expect_error "hf tensor shape mismatch" "$T/h-tshape" "'blk.1.ffn_up.weight'" shape
copy "$H" "$T/h-offs" && patch st-offsets "$T/h-offs/model.safetensors" model.language_model.norm.weight '[0, 99999999]'
expect_error "hf offsets out of range" "$T/h-offs" "model.safetensors" "model.language_model.norm.weight" data_offsets
copy "$H" "$T/h-trunc" && truncate -s 100000 "$T/h-trunc/model.safetensors"
expect_error "hf truncated safetensors" "$T/h-trunc" "model.safetensors"
copy "$H" "$T/h-len" && printf '\xff\xff\xff\x00\x00\x00\x00\x00' | dd of="$T/h-len/model.safetensors" conv=notrunc status=none
expect_error "hf header length past the end" "$T/h-len" "model.safetensors" "header length"
copy "$S" "$T/s-missing" && rm "$T/s-missing/model-00002-of-"*.safetensors
expect_error "hf missing shard" "$T/s-missing" "model-00002-of-"
copy "$S" "$T/s-index" && "$PY" - "$T/s-index/model.safetensors.index.json" <<'EOF'
import json, sys
p = sys.argv[1]
idx = json.load(open(p))
idx["weight_map"]["model.language_model.norm.weight"] = "model-00099-of-00099.safetensors"
json.dump(idx, open(p, "w"))
EOF
expect_error "hf index names a missing shard" "$T/s-index" "model-00099-of-00099.safetensors"
copy "$S" "$T/s-wrong" && "$PY" - "$T/s-wrong/model.safetensors.index.json" <<'EOF'
import json, sys
p = sys.argv[1]
idx = json.load(open(p))
files = sorted(set(idx["weight_map"].values()))
name = "model.language_model.norm.weight"
idx["weight_map"][name] = [f for f in files if f != idx["weight_map"][name]][0]
json.dump(idx, open(p, "w"))
EOF
expect_error "hf index names the wrong shard" "$T/s-wrong" "model.language_model.norm.weight"
mkdir -p "$T/empty-dir"
expect_error "directory without a model" "$T/empty-dir" "config.json"

# --- make-model's bad options: exit 2 with a message ---
bad_option() { # NAME ARGS...
    local name=$1
    shift
    "$BIN" make-model "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ "$rc" -ne 2 ]; then fail "make-model $name" "exit $rc, expected 2" "$(head -c 300 "$T/err")"
    elif [ ! -s "$T/err" ]; then fail "make-model $name" "no message"
    elif grep -qE 'Sanitizer|runtime error' "$T/err"; then fail "make-model $name" "sanitizer report"
    else ok "make-model $name"; fi
}
bad_option "unknown option" --shape tiny --out "$T/x.gguf" --frobnicate
bad_option "no --shape" --out "$T/x.gguf"
bad_option "no --out" --shape tiny
bad_option "bad --dtype" --shape tiny --out "$T/x.gguf" --dtype q3_k_x
bad_option "bad --format" --shape tiny --out "$T/x.gguf" --format onnx
bad_option "--layers 0" --shape tiny --out "$T/x.gguf" --layers 0
bad_option "--layers not a number" --shape tiny --out "$T/x.gguf" --layers four
bad_option "--layers too many" --shape tiny --out "$T/x.gguf" --layers 512
bad_option "--seed negative" --shape tiny --out "$T/x.gguf" --seed -1
bad_option "--scale zero" --shape tiny --out "$T/x.gguf" --scale 0
bad_option "--shard-mb 0" --shape tiny --out "$T/x" --format safetensors --shard-mb 0
bad_option "value missing" --shape tiny --out
"$BIN" info >"$T/out" 2>"$T/err"
rc=$?
if [ $rc -eq 2 ] && [ -s "$T/err" ]; then ok "info without -m"; else fail "info without -m" "exit $rc"; fi
# rejected by make-model itself after parsing: a non-zero exit and one line naming the problem
rejected() { # NAME WORD ARGS...
    local name=$1 word=$2
    shift 2
    "$BIN" make-model "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ "$rc" -eq 0 ] || [ "$rc" -ge 128 ]; then fail "make-model $name" "exit $rc"
    elif [ "$(grep -c '' "$T/err")" -ne 1 ] || ! grep -q -- "$word" "$T/err"; then fail "make-model $name" "message: $(cat "$T/err")"
    else ok "make-model $name (exit $rc)"; fi
}
rejected "unknown shape" "unknown shape 'nope'" --shape nope --out "$T/x.gguf"
"$BIN" make-model --shape nope --out "$T/x.gguf" 2>/dev/null; rc=$?
[ "$rc" -eq 2 ] && ok "make-model unknown shape is a usage error (exit 2, as a bad --dtype)" || fail "make-model unknown shape" "exit $rc, expected 2"
rejected "q8_0 safetensors" "safetensors" --shape tiny --out "$T/x" --format safetensors --dtype q8_0
rejected "unwritable output" "/nonexistent-dir/x.gguf" --shape tiny --out /nonexistent-dir/x.gguf
rejected "missing tokenizer file" "no-such-tokenizer.json" --shape tiny --out "$T/x.gguf" --tokenizer "$T/no-such-tokenizer.json"

echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
