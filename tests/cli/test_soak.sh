#!/usr/bin/env bash
# test_soak.sh - the soak test (tests/soak/soak.mjs) in its CI size: a server on
# 127.0.0.1 with the tiny model and budgets small enough to force preemption
# (--kv-mb 2: 128 pages of 16 tokens, also the context), a mix of good and bad
# requests and clients that leave, then the checks of soak.mjs; then SIGTERM
# must end the server with exit 0 and its log must hold no sanitizer report.
# The server's engine checks its invariants after every step
# (DS_CHECK_INVARIANTS=1): a broken one aborts the server, which fails the run.
#
# The CI size is bounded both ways (SOAK_REQUESTS and SOAK_SECONDS, whichever
# comes first); under the sanitizers (DS_SANITIZE) it does less and reports
# RSS without checking it. The long version is the same script with larger
# bounds, e.g. SOAK_SECONDS=3600 SOAK_REQUESTS=1000000 (README, "Tests").
# Prints ok/FAIL lines and "RESULT passed=N failed=M". Env: DS_BIN, DS_TMP, DS_ROOT.
set -u
: "${DS_BIN:?}" "${DS_TMP:?}" "${DS_ROOT:?}"
. "$DS_ROOT/tests/cli/server_ready.sh"
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
finish() { echo "RESULT passed=$passed failed=$failed"; [ "$failed" -eq 0 ]; exit; }

if [ -n "${DS_SANITIZE:-}" ]; then
    : "${SOAK_REQUESTS:=240}" "${SOAK_SECONDS:=50}" "${SOAK_WARMUP:=50}" "${SOAK_RSS_TOLERANCE:=-1}"
else
    : "${SOAK_REQUESTS:=700}" "${SOAK_SECONDS:=50}" "${SOAK_WARMUP:=100}" "${SOAK_RSS_TOLERANCE:=0.05}"
fi
export SOAK_REQUESTS SOAK_SECONDS SOAK_WARMUP SOAK_RSS_TOLERANCE
model="$DS_TMP/soak-tiny.gguf"
"$DS_BIN" make-model --shape tiny --out "$model" >/dev/null || { bad make-model failed; finish; }
export DS_CHECK_INVARIANTS=1
key="soak-key-$$"
log="$DS_TMP/server-soak.log"
: >"$log"
"$DS_BIN" serve -m "$model" --port 0 --api-key "$key" --served-model-name tiny --threads 2 \
    --kv-mb 2 --state-mb 1 --cache-state-mb 0.5 --max-running 8 --max-body-kb 64 >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null' EXIT
if ! wait_ready "$log" "$pid" 300; then bad "soak server starts" "$(tail -n 5 "$log")"; finish; fi
ok "soak server starts"

# the soak's own deadline is SOAK_SECONDS plus the settling waits; the timeout only stops a hang
out=$(SOAK_URL="http://127.0.0.1:$port" SOAK_KEY="$key" SOAK_MODEL=tiny SOAK_PID="$pid" SOAK_MAX_BODY_KB=64 \
      timeout $((SOAK_SECONDS + 120)) node "$DS_ROOT/tests/soak/soak.mjs" 2>&1)
rc=$?
echo "$out" | grep -E '^(ok|FAIL|#) |^     '
line=$(echo "$out" | grep -E '^RESULT passed=[0-9]+ failed=[0-9]+$' | tail -n 1)
if [ -z "$line" ]; then
    bad "soak" "no RESULT line (exit $rc): $(echo "$out" | tail -n 5)"
else
    p=${line#RESULT passed=}; p=${p%% *}; f=${line##*failed=}
    passed=$((passed + p)) failed=$((failed + f))
fi

kill -TERM "$pid" 2>/dev/null
for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then bad "soak server exits on SIGTERM" "still running"; kill -9 "$pid"
else
    wait "$pid"; rc=$?
    [ "$rc" -eq 0 ] && ok "soak server exits 0 on SIGTERM" || bad "soak server exits 0 on SIGTERM" "exit $rc: $(tail -n 3 "$log")"
fi
if grep -qE 'Sanitizer|runtime error' "$log"; then bad "no sanitizer report in the server log" "$(grep -m 3 -E 'Sanitizer|runtime error' "$log")"
else ok "no sanitizer report in the server log"; fi
if grep -q 'invariant is broken' "$log"; then bad "engine invariants held after every step" "$(grep -m 1 'invariant is broken' "$log")"
else ok "engine invariants held after every step"; fi
finish
