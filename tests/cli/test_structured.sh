#!/usr/bin/env bash
# Structured output end to end (issue 15): starts `deltaserve serve` with the tiny
# random-weight model on a free port and runs tests/server/structured.mjs (the official
# openai client, and Python's jsonschema / re / json as independent checkers) against it.
# Prints ok/FAIL lines and "RESULT passed=N failed=M". Env: DS_BIN, DS_TMP, DS_ROOT (tests/run.sh).
set -u
: "${DS_BIN:?}" "${DS_TMP:?}" "${DS_ROOT:?}"
. "$DS_ROOT/tests/cli/server_ready.sh"
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
finish() { echo "RESULT passed=$passed failed=$failed"; [ "$failed" -eq 0 ]; exit; }

if ! [ -d "$DS_ROOT/tests/server/node_modules/openai" ]; then
    bad "openai client" "tests/server/node_modules missing (npm ci in tests/server)"; finish
fi
if ! /usr/bin/python3 -c 'import jsonschema' 2>/dev/null; then
    bad "python3-jsonschema" "not installed (scripts/setup.sh)"; finish
fi
model="$DS_TMP/tiny-structured.gguf"
"$DS_BIN" make-model --shape tiny --out "$model" >/dev/null || { bad make-model "failed"; finish; }
key="test-key-$$"
log="$DS_TMP/server-structured.log"
: >"$log"
"$DS_BIN" serve -m "$model" --port 0 --api-key "$key" --served-model-name tiny --threads 2 >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null' EXIT
if ! wait_ready "$log" "$pid" 200; then bad "server starts" "$(tail -n 5 "$log")"; finish; fi
ok "server starts"
fold_results "structured.mjs" "$(cd "$DS_ROOT/tests/server" && DS_URL="http://127.0.0.1:$port" DS_KEY="$key" DS_MODEL=tiny \
                                  timeout 300 node structured.mjs 2>&1)"
stop_server "server" "$pid" "$log"
finish
