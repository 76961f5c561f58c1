#!/usr/bin/env bash
# `deltaserve tokenize` and `deltaserve detokenize` on the command line:
# round trips, output formats, bad bytes, streaming and error exits. Uses
# the generated tokenizer of a make-model model (one token per byte, so a
# character splits over several tokens).
set -u
work="$DS_TMP/tokenize_cli"
mkdir -p "$work"
passed=0 failed=0

check() { # name, then a command that must succeed
    local name=$1
    shift
    if "$@" >"$work/check.log" 2>&1; then
        echo "ok $name"
        passed=$((passed + 1))
    else
        echo "FAIL $name: $(tail -n 3 "$work/check.log" | tr '\n' ' ')"
        failed=$((failed + 1))
    fi
}

ds() { "$DS_BIN" "$@"; }
gguf="$work/tiny.gguf"
hf="$work/tiny-hf"
ds make-model --shape tiny --out "$gguf" >/dev/null 2>&1
ds make-model --shape tiny --format safetensors --out "$hf" >/dev/null 2>&1

roundtrip() { # model, file: tokenize --ids | detokenize gives the file back
    ds tokenize -m "$1" -f "$2" --ids >"$work/ids.txt" && ds detokenize -m "$1" -f "$work/ids.txt" >"$work/back.bin" &&
        cmp "$2" "$work/back.bin"
}
printf 'Hello, world!\n<|im_start|>user\n\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80\tend\n' >"$work/text.txt"
check roundtrip_gguf roundtrip "$gguf" "$work/text.txt"
check roundtrip_hf_dir roundtrip "$hf" "$work/text.txt"
check roundtrip_config_json roundtrip "$hf/config.json" "$work/text.txt"
check roundtrip_tokenizer_json roundtrip "$hf/tokenizer.json" "$work/text.txt"

same_ids() {
    [ "$(ds tokenize -m "$gguf" -f "$work/text.txt" --ids)" = "$(ds tokenize -m "$hf" -f "$work/text.txt" --ids)" ]
}
check gguf_and_hf_agree same_ids

# bad bytes: each maximal ill-formed subpart is one U+FFFD; NUL stays
printf 'a\xff\x00b\xe2\x82' >"$work/bad.bin"
printf 'a\xef\xbf\xbd\x00b\xef\xbf\xbd' >"$work/bad_fixed.bin"
bad_bytes() {
    ds tokenize -m "$gguf" -f "$work/bad.bin" --ids >"$work/ids.txt" &&
        ds detokenize -m "$gguf" -f "$work/ids.txt" >"$work/back.bin" && cmp "$work/bad_fixed.bin" "$work/back.bin"
}
check invalid_utf8_and_nul bad_bytes

json_output() {
    ds tokenize -m "$gguf" -p 'Hi <think>' --json >"$work/out.json" &&
        /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["ids"])==d["n_tokens"]==len(d["pieces"]) and d["pieces"][-1]=="<think>", d' "$work/out.json"
}
check tokenize_json json_output

stdin_input() { [ "$(printf 'abc' | ds tokenize -m "$gguf" -f - --ids)" = "$(ds tokenize -m "$gguf" -p abc --ids)" ]; }
check tokenize_stdin stdin_input

no_special() {
    local with without eos
    with=$(ds tokenize -m "$gguf" -p '<|im_end|>' --ids)
    without=$(ds tokenize -m "$gguf" -p '<|im_end|>' --ids --no-special)
    [ "$(echo "$with" | wc -w)" -eq 1 ] && [ "$(echo "$without" | wc -w)" -gt 1 ]
}
check no_special no_special

# streaming: the emoji's four byte tokens release it only with the last one
stream() {
    local ids
    ids=$(ds tokenize -m "$gguf" -p $'\xf0\x9f\x98\x80' --ids)
    ds detokenize -m "$gguf" -i "$ids" --stream >"$work/stream.txt" &&
        [ "$(cut -f3 "$work/stream.txt" | tr '\n' ,)" = "held 1,held 2,held 3,held 0,held 0," ] &&
        [ "$(sed -n 4p "$work/stream.txt" | cut -f2)" = $'"\xf0\x9f\x98\x80"' ]
}
check detokenize_stream stream

detok_json() {
    ds detokenize -m "$gguf" -i '[72, 105]' --json | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["text"]=="Hi" and d["hex"]=="4869", d'
}
check detokenize_json detok_json

# a "\u0000" in a --jsonl-in text is a NUL byte like hex 00, not the end of the text
nul_in_jsonl_text() {
    printf '{"text":"a\\u0000b"}\n{"hex":"610062"}\n' >"$work/nul.jsonl"
    ds tokenize -m "$gguf" --jsonl-in "$work/nul.jsonl" >"$work/nul.out" &&
        /usr/bin/python3 -c 'import json,sys; a,b=[json.loads(l) for l in open(sys.argv[1])]; assert a==b and a["text_hex"]=="610062" and len(a["ids"])==3, (a,b)' "$work/nul.out"
}
check nul_in_jsonl_text nul_in_jsonl_text

# detokenize --json: the text keeps a NUL byte (as \u0000) instead of ending there
detok_json_nul() {
    local ids
    printf '{"hex":"610062"}\n' >"$work/nul-hex.jsonl"
    ids=$(ds tokenize -m "$gguf" --jsonl-in "$work/nul-hex.jsonl" |
        /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["ids"])') &&
        ds detokenize -m "$gguf" -i "$ids" --json |
        /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["text"]=="a\x00b" and d["hex"]=="610062", d'
}
check detokenize_json_nul detok_json_nul


fails_with() { # exit code, text the message must contain, command...
    local code=$1 text=$2
    shift 2
    "$@" >"$work/err.out" 2>"$work/err.txt"
    local rc=$?
    [ "$rc" -eq "$code" ] && grep -qF -- "$text" "$work/err.txt"
}
check missing_model fails_with 1 /nonexistent/model.gguf ds tokenize -m /nonexistent/model.gguf -p hi
check id_out_of_range fails_with 1 "outside the vocabulary" ds detokenize -m "$gguf" -i '1 99999999'
check not_an_id_list fails_with 1 "not part of a list" ds detokenize -m "$gguf" -i '1 x'
check unknown_option fails_with 2 "unknown option" ds tokenize -m "$gguf" -p hi --frobnicate
check no_text fails_with 2 "required" ds tokenize -m "$gguf"
check not_a_tokenizer fails_with 1 "$work/text.txt" ds tokenize -m "$work/text.txt" -p hi

# a tokenizer.json token with "\u0000" cannot be held (tokens end at NUL): refused, saying where
/usr/bin/python3 - "$hf/tokenizer.json" "$work/nul-tokenizer.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
t["model"]["vocab"]["\u0000"] = max(t["model"]["vocab"].values()) + 1
json.dump(t, open(sys.argv[2], "w"))
PY
check nul_in_vocab_token fails_with 1 "nul-tokenizer.json: not valid JSON at byte" ds tokenize -m "$work/nul-tokenizer.json" -p hi

echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
