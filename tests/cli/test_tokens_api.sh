#!/usr/bin/env bash
# Tokens over HTTP and the completions fields of issue 16, end to end: starts
# `deltaserve serve` with the tiny model (a free port) and runs
# tests/server/tokens.mjs (raw HTTP and the official openai client) against it:
# /tokenize and /detokenize in vLLM's and llama-server's shapes, the render
# routes against real runs, several prompts, echo, suffix, best_of and
# logit_bias (streamed and not). Prints ok/FAIL lines and
# "RESULT passed=N failed=M". Env: DS_BIN, DS_TMP, DS_ROOT (tests/run.sh).
set -u
: "${DS_BIN:?}" "${DS_TMP:?}" "${DS_ROOT:?}"
. "$DS_ROOT/tests/cli/server_ready.sh"
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
finish() { echo "RESULT passed=$passed failed=$failed"; exit $((failed > 0)); }
if ! [ -d "$DS_ROOT/tests/server/node_modules/openai" ]; then
    bad "openai client" "tests/server/node_modules missing (npm ci in tests/server)"; finish
fi
model="$DS_TMP/tiny.gguf"
[ -f "$model" ] || "$DS_BIN" make-model --shape tiny --out "$model" >/dev/null || { bad make-model "failed"; finish; }
log="$DS_TMP/server-tokens.log"
: >"$log"
"$DS_BIN" serve -m "$model" --port 0 --served-model-name tiny --threads 2 >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null' EXIT
if ! wait_ready "$log" "$pid" 300; then bad "server starts" "$(tail -n 5 "$log")"; finish; fi
ok "server starts"
fold_results "tokens.mjs" "$(cd "$DS_ROOT/tests/server" && DS_URL="http://127.0.0.1:$port" DS_MODEL=tiny timeout 300 node tokens.mjs 2>&1)"
stop_server "server" "$pid" "$log"
finish
