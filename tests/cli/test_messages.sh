#!/usr/bin/env bash
# Anthropic's Messages API end to end (issue 16): starts `deltaserve serve` with the tiny
# random-weight model on free ports and runs tests/server/messages.mjs (the official
# @anthropic-ai/sdk client and raw HTTP) against it: once as it is (main), once with every
# request's model call failing after 3 tokens (fault). Prints ok/FAIL lines and
# "RESULT passed=N failed=M". Env: DS_BIN, DS_TMP, DS_ROOT (tests/run.sh).
set -u
: "${DS_BIN:?}" "${DS_TMP:?}" "${DS_ROOT:?}"
. "$DS_ROOT/tests/cli/server_ready.sh"
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
finish() { echo "RESULT passed=$passed failed=$failed"; [ "$failed" -eq 0 ]; exit; }

if ! [ -d "$DS_ROOT/tests/server/node_modules/@anthropic-ai/sdk" ]; then
    bad "@anthropic-ai/sdk client" "tests/server/node_modules missing (npm ci in tests/server)"; finish
fi
model="$DS_TMP/tiny-messages.gguf"
"$DS_BIN" make-model --shape tiny --out "$model" >/dev/null || { bad make-model "failed"; finish; }
key="test-key-$$"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null' EXIT

# run MODE ARGS...: a server with ARGS, messages.mjs in MODE against it, then SIGTERM
run() {
    local mode=$1; shift
    local log="$DS_TMP/server-messages-$mode.log"
    : >"$log"
    "$DS_BIN" serve -m "$model" --port 0 --api-key "$key" --served-model-name tiny --threads 2 "$@" >"$log" 2>&1 &
    pid=$!
    if ! wait_ready "$log" "$pid" 200; then bad "server $mode starts" "$(tail -n 5 "$log")"; return; fi
    ok "server $mode starts"
    fold_results "messages.mjs $mode" "$(cd "$DS_ROOT/tests/server" && DS_URL="http://127.0.0.1:$port" DS_KEY="$key" \
                                         DS_MODEL=tiny DS_MODE="$mode" timeout 300 node messages.mjs 2>&1)"
    stop_server "server $mode" "$pid" "$log"
    pid=""
}

run main
run fault --fault-every 1 --fault-at-token 3
finish
