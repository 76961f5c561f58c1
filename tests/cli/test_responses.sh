#!/usr/bin/env bash
# End-to-end checks of POST /v1/responses (OpenAI's Responses API): starts
# `deltaserve serve` with the tiny model and runs tests/server/responses.mjs
# (the official openai client plus raw HTTP) against it: in mode main, and in
# mode fault on a server whose model fails every request after 3 tokens.
# Prints ok/FAIL lines and "RESULT passed=N failed=M". Env: DS_BIN, DS_TMP, DS_ROOT.
set -u
: "${DS_BIN:?}" "${DS_TMP:?}" "${DS_ROOT:?}"
. "$DS_ROOT/tests/cli/server_ready.sh"
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
model="$DS_TMP/tiny.gguf"
[ -f "$model" ] || "$DS_BIN" make-model --shape tiny --out "$model" >/dev/null || { bad make-model "failed"; echo "RESULT passed=$passed failed=$failed"; exit 1; }
key="test-key-$$"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT

if ! [ -d "$DS_ROOT/tests/server/node_modules/openai" ]; then
    bad "openai client" "tests/server/node_modules missing (npm ci in tests/server)"
    echo "RESULT passed=$passed failed=$failed"; exit 1
fi

# run NAME MODE ARGS... : starts a server, runs responses.mjs in MODE against it, stops it
run() {
    local name=$1 mode=$2; shift 2
    local log="$DS_TMP/server-responses-$name.log"
    : >"$log"
    "$DS_BIN" serve -m "$model" --port 0 --api-key "$key" --served-model-name tiny --threads 2 "$@" >"$log" 2>&1 &
    pid=$!
    pids+=("$pid")
    if ! wait_ready "$log" "$pid" 200; then bad "server $name starts" "$(tail -n 5 "$log")"; return; fi
    fold_results "responses $mode" "$(cd "$DS_ROOT/tests/server" && DS_URL="http://127.0.0.1:$port" DS_KEY="$key" \
                                      DS_MODEL=tiny DS_MODE="$mode" timeout 300 node responses.mjs 2>&1)"
    stop_server "server $name" "$pid" "$log"
}

run main main --ctx 4096
DS_FAULT_EVERY=1 DS_FAULT_AT_TOKEN=3 run fault fault
echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
