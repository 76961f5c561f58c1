#!/usr/bin/env bash
# test_make_types.sh - make-model --dtype takes every llama-quantize file type
# name (any case) and gives each tensor the type llama-quantize would; it
# writes general.file_type as llama.cpp numbers it; --tensor-type REGEX=TYPE
# overrides (the first match wins, norms stay F32, rows the type's block does
# not divide fall back); bad arguments are refused naming the argument.
#
# The expected types come from tests/reference/llama_quant_ref.py (written
# from llama.cpp's rules, not from the C code), plus a few spelled out here.
#
# Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
# Uses $DS_BIN (default build/deltaserve) and $DS_TMP (default /tmp).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${DS_BIN:-$ROOT/build/deltaserve}
PY=/usr/bin/python3
T=$(mktemp -d "${DS_TMP:-/tmp}/make-types.XXXXXX")
trap 'rm -rf "$T"' EXIT
passed=0 failed=0

ok() { echo "ok $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; shift 2; for l in "$@"; do echo "     $l"; done; failed=$((failed + 1)); }

# check_types NAME FILE FTYPE [OVERRIDE...]: the file's tensor types and
# general.file_type against the reference plan
check_types() {
    local name=$1 file=$2 ftype=$3; shift 3
    local out
    if out=$(cd "$ROOT/tests/reference" && "$PY" - "$file" "$ftype" "$@" 2>&1 <<'EOF'
import sys
import llama_quant_ref as ref
import model_files
path, ftype, overrides = sys.argv[1], sys.argv[2], sys.argv[3:]
g = model_files.read_gguf(path)
ov = [tuple(o.rsplit("=", 1)) for o in overrides]
want = ref.plan(g, ftype, ov)
bad = [f"{n}: {t.type_name}, expected {want[n]}" for n, t in g.tensors.items() if t.type_name != want[n]]
if g.kv["general.file_type"].value != ref.FTYPES[ftype][0]:
    bad.append(f"general.file_type {g.kv['general.file_type'].value}, expected {ref.FTYPES[ftype][0]}")
print("\n".join(bad[:8]) if bad else " ".join(sorted(set(want.values()))))
sys.exit(1 if bad else 0)
EOF
    ); then
        ok "$name ($out)"
    else
        fail "$name" "types differ from llama-quantize's" "$out"
    fi
}

# make NAME OUT OPTIONS...: make-model, failing the test NAME when it does
make() {
    local name=$1 out=$2; shift 2
    if ! "$BIN" make-model "$@" --out "$out" >"$T/log" 2>&1; then
        fail "$name" "make-model $* failed" "$(tail -n 3 "$T/log")"
        return 1
    fi
}

# every file type, on a dense and a MoE model (lower case spellings for some:
# names are case-insensitive)
for ft in F32 F16 BF16 Q8_0 Q6_K Q5_K_M Q5_K_S Q4_K_M Q4_K_S Q3_K_L Q3_K_M Q3_K_S Q2_K Q2_K_S Q5_1 Q5_0 Q4_1 \
          Q4_0 IQ4_NL IQ4_XS IQ3_M IQ3_S IQ3_XS IQ3_XXS IQ2_M IQ2_S IQ2_XS IQ2_XXS IQ1_M IQ1_S TQ2_0 TQ1_0 MXFP4_MOE; do
    for shape in tiny tiny-moe; do
        spelled=$ft
        case $ft in Q4_K_M|Q8_0|IQ2_XS|F16) spelled=${ft,,};; esac
        make "$shape $ft" "$T/m.gguf" --shape "$shape" --dtype "$spelled" --seed 2 && check_types "$shape $ft" "$T/m.gguf" "$ft"
    done
done

# types spelled out, independent of the reference module. tiny: 4 layers and an
# MTP block (use_more_bits picks value and down projections 2 and 4 of 0..4),
# 4 query and 2 KV heads, untied embeddings, ssm_out rows of 128 (which K and
# IQ types' 256-blocks do not divide); tiny-moe: the same with 8 experts. With
# blk.0's value projection overridden, llama.cpp's count starts at blk.1.
spot() { # NAME FILE TENSOR=TYPE...
    local name=$1 file=$2; shift 2
    local out
    if out=$(cd "$ROOT/tests/reference" && "$PY" - "$file" "$@" 2>&1 <<'EOF'
import sys
import model_files
g = model_files.read_gguf(sys.argv[1])
bad = [f"{n}: {g.tensors[n].type_name}, expected {t}" for n, t in (a.split("=") for a in sys.argv[2:])
       if g.tensors[n].type_name != t]
print("\n".join(bad))
sys.exit(1 if bad else 0)
EOF
    ); then ok "$name"; else fail "$name" "unexpected types" "$out"; fi
}
make "spot tiny Q4_K_M" "$T/q4km.gguf" --shape tiny --dtype Q4_K_M &&
    spot "spot tiny Q4_K_M" "$T/q4km.gguf" output.weight=q6_k token_embd.weight=q4_k blk.0.attn_qkv.weight=q4_k \
        blk.2.attn_qkv.weight=q6_k blk.3.attn_v.weight=q4_k blk.4.attn_v.weight=q6_k blk.0.ffn_down.weight=q4_k \
        blk.2.ffn_down.weight=q6_k blk.4.ffn_down.weight=q6_k blk.0.ffn_up.weight=q4_k \
        blk.0.ssm_out.weight=q5_0 blk.0.ssm_conv1d.weight=f32 blk.0.ssm_norm.weight=f32 blk.0.ssm_a=f32
make "spot tiny Q2_K" "$T/q2k.gguf" --shape tiny --dtype q2_k &&
    spot "spot tiny Q2_K" "$T/q2k.gguf" output.weight=q6_k token_embd.weight=q2_k blk.0.attn_qkv.weight=q3_k \
        blk.3.attn_v.weight=q3_k blk.3.attn_k.weight=q2_k blk.3.attn_output.weight=q3_k blk.2.ffn_down.weight=q3_k \
        blk.2.ffn_up.weight=q2_k blk.0.ssm_out.weight=q4_0
make "spot tiny Q3_K_M" "$T/q3km.gguf" --shape tiny --dtype Q3_K_M &&
    spot "spot tiny Q3_K_M" "$T/q3km.gguf" blk.0.attn_qkv.weight=q5_k blk.1.attn_qkv.weight=q5_k \
        blk.2.attn_qkv.weight=q4_k blk.3.attn_output.weight=q4_k blk.0.ffn_down.weight=q4_k blk.0.ffn_up.weight=q3_k
make "spot tiny IQ2_XXS" "$T/iq2.gguf" --shape tiny --dtype IQ2_XXS &&
    spot "spot tiny IQ2_XXS" "$T/iq2.gguf" output.weight=q5_k token_embd.weight=q2_k blk.0.attn_qkv.weight=q2_k \
        blk.3.attn_output.weight=iq2_xxs blk.0.ffn_down.weight=iq2_xxs blk.0.ssm_out.weight=iq4_nl
make "spot tiny Q4_0" "$T/q40.gguf" --shape tiny --dtype Q4_0 &&
    spot "spot tiny Q4_0" "$T/q40.gguf" output.weight=q6_k token_embd.weight=q4_0 blk.0.ffn_down.weight=q4_0
make "spot tiny-moe Q4_K_M" "$T/moe.gguf" --shape tiny-moe --dtype Q4_K_M &&
    spot "spot tiny-moe Q4_K_M" "$T/moe.gguf" blk.3.attn_k.weight=q8_0 blk.3.attn_v.weight=q8_0 \
        blk.0.attn_qkv.weight=q8_0 blk.3.attn_output.weight=q5_k blk.0.ffn_down_exps.weight=q4_k \
        blk.2.ffn_down_exps.weight=q6_k blk.2.ffn_down_shexp.weight=q6_k blk.0.ffn_gate_inp.weight=f32 blk.0.ffn_gate_inp_shexp.weight=f32
make "spot tiny-moe MXFP4_MOE" "$T/mx.gguf" --shape tiny-moe --dtype mxfp4_moe &&
    spot "spot tiny-moe MXFP4_MOE" "$T/mx.gguf" output.weight=q8_0 token_embd.weight=q8_0 \
        blk.0.ffn_up_exps.weight=mxfp4 blk.0.ffn_up_shexp.weight=q8_0 blk.0.attn_qkv.weight=q8_0

# the same file type in any spelling, and llama-quantize's aliases, give the same bytes
if make "spellings" "$T/a.gguf" --shape tiny --dtype Q4_K_M --seed 3 && make "spellings" "$T/b.gguf" --shape tiny --dtype q4_K_m --seed 3 &&
    make "spellings" "$T/c.gguf" --shape tiny --dtype Q4_K --seed 3; then
    if cmp -s "$T/a.gguf" "$T/b.gguf" && cmp -s "$T/a.gguf" "$T/c.gguf"; then ok "spellings"
    else fail "spellings" "Q4_K_M, q4_K_m and Q4_K wrote different files"; fi
fi

# --tensor-type: the first matching regex decides, on top of the file type; norms,
# the router and the conv stay F32; a row the type's block does not divide falls back
ov=('blk\.0\.attn_qkv=Q5_0' 'ffn_(up|gate)=iq4_nl' 'ffn=q8_0' 'ssm_out=q4_K' 'norm|conv1d|gate_inp=q8_0' 'output\.weight$=bf16')
args=()
for o in "${ov[@]}"; do args+=(--tensor-type "$o"); done
make "overrides tiny" "$T/ov.gguf" --shape tiny --dtype Q4_K_M "${args[@]}" &&
    check_types "overrides tiny" "$T/ov.gguf" Q4_K_M "${ov[@]}" &&
    spot "overrides tiny spelled out" "$T/ov.gguf" blk.0.attn_qkv.weight=q5_0 blk.1.attn_qkv.weight=q4_k \
        blk.2.attn_qkv.weight=q4_k blk.3.attn_v.weight=q6_k blk.4.attn_v.weight=q4_k blk.0.ffn_up.weight=iq4_nl blk.0.ffn_gate.weight=iq4_nl blk.0.ffn_down.weight=q8_0 \
        blk.0.ssm_out.weight=q5_0 blk.0.attn_norm.weight=f32 blk.0.ssm_conv1d.weight=f32 output_norm.weight=f32 \
        output.weight=bf16 token_embd.weight=q4_k
make "overrides tiny-moe" "$T/ovm.gguf" --shape tiny-moe --dtype IQ3_XXS --tensor-type 'exps=q2_K' --tensor-type 'shexp=Q8_0' &&
    check_types "overrides tiny-moe" "$T/ovm.gguf" IQ3_XXS 'exps=q2_K' 'shexp=Q8_0'

# errors: usage errors (exit 2) whose message names the argument
refuse() { # NAME EXPECTED-IN-MESSAGE OPTIONS...
    local name=$1 want=$2; shift 2
    "$BIN" make-model --shape tiny --out "$T/err.gguf" "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ "$rc" -ne 2 ]; then fail "$name" "exit $rc, expected 2" "$(head -n 3 "$T/err")"
    elif ! grep -qF -- "$want" "$T/err"; then fail "$name" "message lacks '$want'" "$(head -n 3 "$T/err")"
    elif [ -e "$T/err.gguf" ]; then fail "$name" "a file was written"
    else ok "$name"; fi
    rm -f "$T/err.gguf"
}
refuse "unknown --dtype" "--dtype 'Q4_K_X'" --dtype Q4_K_X
refuse "bad regex" "--tensor-type 'attn_(q=q8_0': bad regex" --tensor-type 'attn_(q=q8_0'
refuse "unknown override type" "--tensor-type 'attn_q=q9_k': unknown type 'q9_k'" --tensor-type attn_q=q9_k
refuse "override without '='" "--tensor-type 'attn_q': expected REGEX=TYPE" --tensor-type attn_q
refuse "override without regex" "--tensor-type '=q8_0'" --tensor-type =q8_0
refuse "override without type" "--tensor-type 'attn_q=': no type" --tensor-type attn_q=
refuse "safetensors quantised" "safetensors checkpoints hold f32, f16, bf16 or fp8" --format safetensors --dtype Q4_K_M
refuse "safetensors override" "--tensor-type" --format safetensors --dtype bf16 --tensor-type attn_q=f16

echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
