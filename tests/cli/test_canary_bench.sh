#!/usr/bin/env bash
# test_canary_bench.sh - `deltaserve canary` and `deltaserve bench-serve`
# against a running server, end to end.
#
# The server is `deltaserve serve -m tiny.gguf` when that command (with its
# --fault-every test hook) exists, else tests/cli/stub_openai_server.py (a
# note says which). Checks:
#   - canary against a healthy server exits 0 with only "ok" lines;
#   - canary and bench-serve against a faulty server (serve --fault-every 1)
#     exit 1 and name the failed checks;
#   - the incident, replayed by the stub (--fault: HTTP 200, finish_reason
#     "error", content null, zero usage): canary fails finish_reason, content
#     and usage in all four requests;
#   - bench-serve, random workload at a Poisson rate and shared-prefix at a
#     fixed concurrency: --json has every field, completed == num-prompts,
#     failed == 0; --svg is well-formed XML; the table prints;
#   - bench-serve counts failed requests (--fault-every 3: 2 of 6 fail, each
#     reported with a reason) and exits 1;
#   - canary --api responses and --api messages pass against the stub's
#     well-behaved answers and against deltaserve serve, and fail, naming the check, on each of the stub's --misbehave
#     answers: status failed inside a 200, no terminal event / message_stop,
#     input_tokens 0, events out of order, an error event mid-stream;
#   - bench-serve --api responses and --api messages measure the same workload;
#   - bad options exit 2.
# Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${DS_BIN:-$ROOT/build/deltaserve}
PY=/usr/bin/python3
STUB="$ROOT/tests/cli/stub_openai_server.py"
T=$(mktemp -d "${DS_TMP:-/tmp}/canary-bench.XXXXXX")
ulimit -c 0
passed=0 failed=0
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT

ok() { echo "ok $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; shift 2; for l in "$@"; do echo "     $l"; done; failed=$((failed + 1)); }

free_port() {
    "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_health PORT PID: 0 once GET /health answers 200 (at most 30 s)
wait_health() {
    "$PY" - "$1" "$2" <<'EOF'
import os, sys, time, urllib.request
port, pid = sys.argv[1], int(sys.argv[2])
end = time.time() + 30
while time.time() < end:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit(1)
    try:
        with urllib.request.urlopen("http://127.0.0.1:%s/health" % port, timeout=2) as r:
            if r.status == 200:
                sys.exit(0)
    except Exception:
        pass
    time.sleep(0.1)
sys.exit(1)
EOF
}

# start_server NAME ARGS... -> sets PORT; the server's log is $T/NAME.log
start_server() {
    local name=$1; shift
    PORT=$(free_port)
    if [ "$REAL" = 1 ]; then
        "$BIN" serve -m "$MODEL" --port "$PORT" "$@" >"$T/$name.log" 2>&1 &
    else
        "$PY" "$STUB" --port "$PORT" "$@" >"$T/$name.log" 2>&1 &
    fi
    local pid=$!
    pids+=("$pid")
    if wait_health "$PORT" "$pid"; then ok "$name server up"; return 0; fi
    fail "$name server up" "no /health 200 within 30 s on port $PORT" "$(tail -n 5 "$T/$name.log")"
    return 1
}

# json_check NAME FILE N: the bench JSON has every field, completed == N, failed == 0
json_check() {
    local why
    why=$("$PY" - "$2" "$3" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("not JSON: %s" % e); sys.exit(0)
n = int(sys.argv[2])
keys = ["completed", "failed", "request_throughput", "output_tok_s", "total_tok_s", "duration_s",
        "total_input_tokens", "total_output_tokens"]
for m in ("ttft", "tpot", "itl", "e2e"):
    keys += ["%s_ms_%s" % (m, s) for s in ("mean", "p50", "p99")]
missing = [k for k in keys if k not in d]
if missing:
    print("missing fields: " + " ".join(missing))
elif d["completed"] != n or d["failed"] != 0:
    print("completed=%s failed=%s, want %d and 0 (errors: %s)" % (d["completed"], d["failed"], n, d.get("errors")))
elif not all(isinstance(d[k], (int, float)) and d[k] >= 0 for k in keys):
    print("a field is not a non-negative number: " + ", ".join("%s=%s" % (k, d[k]) for k in keys))
elif d["request_throughput"] <= 0 or d["output_tok_s"] <= 0 or d["total_output_tokens"] < n:
    print("no throughput: %s" % {k: d[k] for k in keys[:8]})
elif not (d["ttft_ms_p50"] <= d["ttft_ms_p99"] and d["e2e_ms_p50"] <= d["e2e_ms_p99"] and d["ttft_ms_p99"] <= d["e2e_ms_max"] + 1e-6):
    print("percentiles out of order: %s" % {k: d[k] for k in keys[8:]})
EOF
)
    if [ -n "$why" ]; then fail "$1" "$why" "$(head -c 600 "$2")"; else ok "$1"; fi
}

svg_check() {
    local why
    why=$("$PY" -c '
import sys, xml.etree.ElementTree as E
try:
    r = E.parse(sys.argv[1]).getroot()
except Exception as e:
    print("not well-formed XML: %s" % e); sys.exit(0)
if r.tag != "{http://www.w3.org/2000/svg}svg": print("root is %s, not svg" % r.tag)
elif len(r.findall(".//{http://www.w3.org/2000/svg}rect")) < 10: print("too few bars")
' "$2" 2>&1)
    if [ -n "$why" ]; then fail "$1" "$why"; else ok "$1"; fi
}

sanitizer_clean() { ! grep -qE 'Sanitizer|runtime error|Segmentation|core dumped' "$@"; }

# ---------------------------------------------------------------------------
REAL=0 HAVE_SERVE=0
MODEL="$T/tiny.gguf"
if "$BIN" serve --help >/dev/null 2>&1 && "$BIN" serve --help 2>&1 | grep -q -- '--fault-every'; then
    REAL=1 HAVE_SERVE=1
    if "$BIN" make-model --shape tiny --out "$MODEL" >"$T/make.log" 2>&1; then ok "make-model tiny"
    else fail "make-model tiny" "$(tail -n 3 "$T/make.log")"; fi
    echo "note: testing against deltaserve serve"
else
    echo "note: deltaserve serve (with --fault-every) is not built; testing against tests/cli/stub_openai_server.py"
fi

# bad options
"$BIN" canary >/dev/null 2>&1; a=$?
"$BIN" canary ftp://127.0.0.1:1 >/dev/null 2>&1; b=$?
"$BIN" bench-serve http://127.0.0.1:1 --workload nope >/dev/null 2>&1; c=$?
"$BIN" bench-serve http://127.0.0.1:1 --num-prompts 0 >/dev/null 2>&1; d=$?
"$BIN" canary http://127.0.0.1:1 --api nope >/dev/null 2>&1; e=$?
"$BIN" bench-serve http://127.0.0.1:1 --api completions >/dev/null 2>&1; f=$?
if [ "$a$b$c$d$e$f" = 222222 ]; then ok "bad options exit 2"; else fail "bad options exit 2" "exit codes $a $b $c $d $e $f"; fi
# nothing listening: a failure, not a hang or a crash
"$BIN" canary "http://127.0.0.1:$(free_port)" --timeout 5 >"$T/refused.out" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q '^FAIL .*http' "$T/refused.out" && sanitizer_clean "$T/refused.out"; then ok "canary connection refused"
else fail "canary connection refused" "exit $rc" "$(head -n 5 "$T/refused.out")"; fi

# --- healthy server ---------------------------------------------------------
if start_server healthy; then
    URL="http://127.0.0.1:$PORT"
    "$BIN" canary "$URL" --max-tokens 16 >"$T/canary.out" 2>"$T/canary.err"; rc=$?
    nok=$(grep -c '^ok ' "$T/canary.out"); nfail=$(grep -c '^FAIL' "$T/canary.out")
    if [ $rc -eq 0 ] && [ "$nfail" -eq 0 ] && [ "$nok" -ge 28 ] && sanitizer_clean "$T/canary.err"; then
        ok "canary healthy ($nok checks)"
    else
        fail "canary healthy" "exit $rc, $nok ok, $nfail FAIL" "$(grep '^FAIL' "$T/canary.out" | head -n 8)" "$(tail -n 3 "$T/canary.err")"
    fi

    "$BIN" bench-serve "$URL" --workload random --num-prompts 6 --input-len 24 --output-len 8 --request-rate 20 \
        --seed 3 --json --svg "$T/random.svg" >"$T/random.json" 2>"$T/random.err"; rc=$?
    if [ $rc -eq 0 ] && sanitizer_clean "$T/random.err"; then json_check "bench random poisson json" "$T/random.json" 6
    else fail "bench random poisson json" "exit $rc" "$(tail -n 5 "$T/random.err")"; fi
    svg_check "bench random svg" "$T/random.svg"

    "$BIN" bench-serve "$URL" --workload shared-prefix --num-prompts 6 --prefix-len 32 --prefix-groups 2 --input-len 8 \
        --output-len 8 --concurrency 2 --json --svg "$T/shared.svg" >"$T/shared.json" 2>"$T/shared.err"; rc=$?
    if [ $rc -eq 0 ] && sanitizer_clean "$T/shared.err"; then json_check "bench shared-prefix concurrency json" "$T/shared.json" 6
    else fail "bench shared-prefix concurrency json" "exit $rc" "$(tail -n 5 "$T/shared.err")"; fi
    svg_check "bench shared-prefix svg" "$T/shared.svg"

    "$BIN" bench-serve "$URL" --num-prompts 4 --input-len 8 --output-len 4 --concurrency 4 >"$T/table.out" 2>"$T/table.err"; rc=$?
    if [ $rc -eq 0 ] && grep -q '^Successful requests: *4$' "$T/table.out" && grep -q '^Failed requests: *0$' "$T/table.out" \
        && grep -q '^P99 TTFT (ms):' "$T/table.out" && grep -q '^Output token throughput (tok/s):' "$T/table.out"; then
        ok "bench table"
    else fail "bench table" "exit $rc" "$(head -n 12 "$T/table.out")" "$(tail -n 3 "$T/table.err")"; fi
fi

# --- faulty server: serve --fault-every 1 (every model call fails) -----------
if [ "$HAVE_SERVE" = 1 ] && start_server faulty --fault-every 1; then
    "$BIN" canary "http://127.0.0.1:$PORT" --max-tokens 16 >"$T/fcanary.out" 2>"$T/fcanary.err"; rc=$?
    names=$(grep '^FAIL' "$T/fcanary.out" | sed -E 's/^FAIL [^:]*: ([a-z_-]+):.*/\1/' | sort -u | tr '\n' ' ')
    if [ $rc -eq 1 ] && [ -n "$names" ] && sanitizer_clean "$T/fcanary.err"; then
        ok "canary faulty server exits 1 (failed: $names)"
    else fail "canary faulty server exits 1" "exit $rc, failed checks: '$names'" "$(tail -n 5 "$T/fcanary.out")"; fi
    "$BIN" bench-serve "http://127.0.0.1:$PORT" --num-prompts 3 --input-len 8 --output-len 4 --json >"$T/fbench.out" 2>"$T/fbench.err"; rc=$?
    if [ $rc -eq 1 ] && grep -qi 'fail' "$T/fbench.err" "$T/fbench.out" && sanitizer_clean "$T/fbench.err"; then ok "bench faulty server exits 1"
    else fail "bench faulty server exits 1" "exit $rc" "$(tail -n 3 "$T/fbench.err")"; fi
fi

# --- the incident (stub): HTTP 200, finish_reason "error", content null, zero usage
REAL=0
if start_server incident --fault; then
    "$BIN" canary "http://127.0.0.1:$PORT" --max-tokens 16 >"$T/icanary.out" 2>"$T/icanary.err"; rc=$?
    why=""
    [ $rc -eq 1 ] || why="exit $rc, want 1;"
    # each of the three checks must name it, in all four requests
    for check in finish_reason content usage; do
        n=$(grep -c "^FAIL [^:]*: $check:" "$T/icanary.out")
        [ "$n" -eq 4 ] || why="$why $check failed $n times (want 4);"
    done
    grep -q '^FAIL [^:]*: finish_reason: "error"' "$T/icanary.out" || why="$why finish_reason line does not say \"error\";"
    grep -q '^FAIL [^:]*: usage: zero token counts' "$T/icanary.out" || why="$why usage line does not say zero token counts;"
    sanitizer_clean "$T/icanary.err" || why="$why sanitizer report;"
    if [ -z "$why" ]; then ok "canary catches the incident (finish_reason, content, usage)"
    else fail "canary catches the incident" "$why" "$(grep '^FAIL' "$T/icanary.out" | head -n 6)"; fi
    "$BIN" bench-serve "http://127.0.0.1:$PORT" --num-prompts 3 --input-len 8 --output-len 4 >"$T/ibench.out" 2>"$T/ibench.err"; rc=$?
    if [ $rc -eq 1 ] && grep -q 'finish_reason "error"' "$T/ibench.err" && sanitizer_clean "$T/ibench.err"; then ok "bench incident server exits 1"
    else fail "bench incident server exits 1" "exit $rc" "$(tail -n 3 "$T/ibench.err")"; fi
fi

# --- failures are counted, never dropped (every 3rd request fails) ----------
[ "$HAVE_SERVE" = 1 ] && REAL=1
every_args=(--fault-every 3)
if start_server every3 "${every_args[@]}"; then
    # request 1 is bench-serve's test request; of the next 6, the 2nd and 5th fail
    "$BIN" bench-serve "http://127.0.0.1:$PORT" --num-prompts 6 --input-len 8 --output-len 4 --concurrency 2 --json \
        --svg "$T/every3.svg" >"$T/every3.json" 2>"$T/every3.err"; rc=$?
    why=$("$PY" -c '
import json, sys
d = json.load(open(sys.argv[1]))
errs = d.get("errors", [])
if (d["completed"], d["failed"]) != (4, 2): print("completed=%s failed=%s, want 4 and 2" % (d["completed"], d["failed"]))
elif sum(e["count"] for e in errs) != 2 or not all(e["reason"] and e["example"] for e in errs): print("errors: %s" % errs)
elif sys.argv[2] == "0" and [(e["reason"], e["count"]) for e in errs] != [("bad finish_reason", 2)]: print("errors: %s" % errs)
' "$T/every3.json" "$REAL" 2>&1)
    if [ $rc -eq 1 ] && [ -z "$why" ] && sanitizer_clean "$T/every3.err"; then ok "bench counts failed requests"
    else fail "bench counts failed requests" "exit $rc; $why" "$(head -c 300 "$T/every3.json")" "$(tail -n 3 "$T/every3.err")"; fi
    svg_check "bench svg with failures" "$T/every3.svg"
fi

# --- the agent APIs: Responses and Messages ---------------------------------
# canary_api NAME URL API: canary --api API exits 0 with only ok lines
canary_api() {
    "$BIN" canary "$2" --api "$3" --max-tokens 16 >"$T/$1.out" 2>"$T/$1.err"; local rc=$?
    local nok nfail
    nok=$(grep -c '^ok ' "$T/$1.out"); nfail=$(grep -c '^FAIL' "$T/$1.out")
    if [ $rc -eq 0 ] && [ "$nfail" -eq 0 ] && [ "$nok" -ge 28 ] && sanitizer_clean "$T/$1.err"; then ok "$1 ($nok checks)"
    else fail "$1" "exit $rc, $nok ok, $nfail FAIL" "$(grep '^FAIL' "$T/$1.out" | head -n 8)" "$(tail -n 3 "$T/$1.err")"; fi
}
REAL=0
if start_server agent-apis; then
    for api in responses messages; do
        canary_api "canary --api $api (stub)" "http://127.0.0.1:$PORT" "$api"
        "$BIN" bench-serve "http://127.0.0.1:$PORT" --api "$api" --num-prompts 4 --input-len 8 --output-len 6 --concurrency 2 \
            --json >"$T/bench-$api.json" 2>"$T/bench-$api.err"; rc=$?
        if [ $rc -eq 0 ] && sanitizer_clean "$T/bench-$api.err"; then json_check "bench-serve --api $api json" "$T/bench-$api.json" 4
        else fail "bench-serve --api $api json" "exit $rc" "$(tail -n 5 "$T/bench-$api.err")"; fi
    done
fi
# each misbehaviour: exit 1 and FAIL lines naming the check that caught it (responses check, messages check)
for case in "failed status stop_reason" "no-stop terminal message_stop" "zero-input usage usage" \
            "out-of-order order order" "error-event no-error-event no-error-event"; do
    set -- $case
    mode=$1
    if start_server "misbehave-$mode" --misbehave "$mode"; then
        for api in responses messages; do
            want=$2; [ "$api" = messages ] && want=$3
            "$BIN" canary "http://127.0.0.1:$PORT" --api "$api" --max-tokens 16 >"$T/m-$mode-$api.out" 2>"$T/m-$mode-$api.err"; rc=$?
            n=$(grep -c "^FAIL [^:]*: $want:" "$T/m-$mode-$api.out")
            if [ $rc -eq 1 ] && [ "$n" -ge 2 ] && sanitizer_clean "$T/m-$mode-$api.err"; then
                ok "canary --api $api catches $mode ($n x $want)"
            else fail "canary --api $api catches $mode" "exit $rc, $n FAIL lines for '$want' (want >= 2)" \
                "$(grep '^FAIL' "$T/m-$mode-$api.out" | head -n 4)"; fi
        done
        [ "$mode" = out-of-order ] && continue # bench-serve times events; the canary checks their order
        "$BIN" bench-serve "http://127.0.0.1:$PORT" --api messages --num-prompts 2 --input-len 8 --output-len 4 --json \
            >"$T/mb-$mode.json" 2>"$T/mb-$mode.err"; rc=$?
        "$BIN" bench-serve "http://127.0.0.1:$PORT" --api responses --num-prompts 2 --input-len 8 --output-len 4 --json \
            >"$T/rb-$mode.json" 2>"$T/rb-$mode.err"; rc2=$?
        if [ $rc -eq 1 ] && [ $rc2 -eq 1 ]; then ok "bench-serve fails on $mode (exit $rc $rc2)"
        else fail "bench-serve fails on $mode" "exit $rc (messages) $rc2 (responses), want 1" "$(tail -n 2 "$T/mb-$mode.err")"; fi
    fi
done
# the real server: the canary of each agent API passes against deltaserve serve
if [ "$HAVE_SERVE" = 1 ]; then
    REAL=1
    if start_server real-agent-apis; then
        for api in responses messages; do
            canary_api "canary --api $api (deltaserve serve)" "http://127.0.0.1:$PORT" "$api"
        done
    fi
fi

echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
