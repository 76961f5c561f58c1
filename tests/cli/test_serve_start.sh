#!/usr/bin/env bash
# test_serve_start.sh - `deltaserve serve` when it cannot start.
#
# A port already in use, a model file that is missing, not a model, cut short
# or unreadable, and engine budgets too small for even one sequence must each
# end the process (no hang: every run is under `timeout`) with a non-zero exit
# and exactly one error line on stderr naming the problem. The only other line
# allowed is the "listening on ... (loading PATH)" progress line, printed once
# the socket and the model file are known to be good, before the weights and
# the engine's pools are set up.
#
# Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
# Env: DS_BIN, DS_TMP (tests/run.sh).
set -u
: "${DS_BIN:?}" "${DS_TMP:?}"
PY=/usr/bin/python3
T=$(mktemp -d "$DS_TMP/serve-start.XXXXXX")
ulimit -c 0
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; shift 2; for l in "$@"; do echo "     $l"; done; failed=$((failed + 1)); }

model="$T/tiny.gguf"
if ! "$DS_BIN" make-model --shape tiny --out "$model" >/dev/null 2>"$T/mm.err"; then
    fail make-model "$(cat "$T/mm.err")"
    echo "RESULT passed=$passed failed=$failed"; exit 1
fi

# expect_start_error NAME EXIT WORD... -- ARGS... : runs serve ARGS, expects exit code EXIT, one
# error line mentioning each WORD, nothing else but the progress line, nothing on stdout
expect_start_error() {
    local name=$1 want_rc=$2
    shift 2
    local words=()
    while [ "$1" != "--" ]; do words+=("$1"); shift; done
    shift
    timeout 60 "$DS_BIN" serve --threads 2 "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    local errs why=""
    errs=$(grep -v '^deltaserve serve: listening on http://' "$T/err")
    if [ "$rc" -eq 124 ]; then why="still running after 60 s"
    elif [ "$rc" -ne "$want_rc" ]; then why="exit code $rc, expected $want_rc"
    elif [ -s "$T/out" ]; then why="output on stdout"
    elif grep -qE 'Sanitizer|runtime error|Segmentation|core dumped' "$T/err"; then why="sanitizer report"
    elif [ "$(printf '%s' "$errs" | grep -c '')" -ne 1 ]; then why="$(printf '%s' "$errs" | grep -c '') error lines, expected 1"
    else
        for w in "${words[@]}"; do
            if [[ "$errs" != *"$w"* ]]; then why="the error does not mention '$w'"; break; fi
        done
    fi
    if [ -n "$why" ]; then fail "$name" "$why" "stderr: $(head -c 800 "$T/err")"; else ok "$name: $errs"; fi
}

# --- the port ---
# a listener on a free port, held by Python while the server tries it
"$PY" - "$T/port" <<'EOF' &
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
EOF
holder=$!
for _ in $(seq 1 100); do [ -s "$T/port" ] && break; sleep 0.1; done
port=$(cat "$T/port" 2>/dev/null)
if [ -n "$port" ]; then
    expect_start_error "port already in use" 1 "127.0.0.1:$port" "in use" -- -m "$model" --port "$port"
else
    fail "port already in use" "could not hold a port"
fi
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
expect_start_error "host not an IP address" 2 "--host" "localhost-ish" -- -m "$model" --port 0 --host localhost-ish
expect_start_error "host not on this machine" 1 "192.0.2.1" -- -m "$model" --port 0 --host 192.0.2.1

# --- the model file ---
expect_start_error "missing model file" 1 "$T/no-such-model.gguf" "no such file" -- -m "$T/no-such-model.gguf" --port 0
head -c 100000 "$model" >"$T/cut.gguf"
expect_start_error "model file cut short" 1 "$T/cut.gguf" -- -m "$T/cut.gguf" --port 0
head -c 4096 /dev/urandom >"$T/noise.gguf"
expect_start_error "not a model file" 1 "$T/noise.gguf" -- -m "$T/noise.gguf" --port 0
mkdir -p "$T/empty-dir"
expect_start_error "directory without a model" 1 "$T/empty-dir" -- -m "$T/empty-dir" --port 0
cp "$model" "$T/locked.gguf" && chmod 000 "$T/locked.gguf"
if [ "$(id -u)" -ne 0 ]; then
    expect_start_error "unreadable model file" 1 "$T/locked.gguf" -- -m "$T/locked.gguf" --port 0
else
    echo "# unreadable model file: not checked (root reads files without permission)"
fi

# --- budgets too small for one sequence ---
expect_start_error "state budget too small" 1 "--state-mb 0.01" "does not hold one sequence" -- -m "$model" --port 0 --state-mb 0.01
expect_start_error "KV budget too small" 1 "--kv-mb 0.001" "does not hold one page" -- -m "$model" --port 0 --kv-mb 0.001

# --- options ---
expect_start_error "unknown fault phase" 2 "--fault-phase" "sometimes" -- -m "$model" --port 0 --fault-phase sometimes
expect_start_error "budget not a number" 2 "--kv-mb" -- -m "$model" --port 0 --kv-mb lots

# --- the model's context: context_length (tiny: 4096), times the YaRN factor when the config asks ---
expect_start_error "max model len past the context" 1 "--max-model-len 5000" "4096" "--allow-long-context" -- \
    -m "$model" --port 0 --max-model-len 5000
yarn="$T/tiny-yarn2.gguf"
"$DS_BIN" make-model --shape tiny --yarn 2 --out "$yarn" >/dev/null 2>&1
expect_start_error "max model len past the YaRN context" 1 "--max-model-len 9000" "8192" "YaRN" -- \
    -m "$yarn" --port 0 --max-model-len 9000
. "$(dirname "$0")/server_ready.sh"
# max_model_len_of NAME WANT ARGS...: starts serve ARGS, /v1/models must say max_model_len WANT
max_model_len_of() {
    local name=$1 want=$2
    shift 2
    "$DS_BIN" serve --threads 2 --port 0 --kv-mb 64 "$@" >"$T/ml.out" 2>"$T/ml.err" &
    local pid=$!
    if ! wait_ready "$T/ml.err" "$pid" 600; then
        fail "$name" "did not start" "stderr: $(head -c 800 "$T/ml.err")"
    else
        local got
        got=$("$PY" -c 'import json, sys, urllib.request
print(json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v1/models"))["data"][0]["max_model_len"])' "$port")
        if [ "$got" = "$want" ]; then ok "$name: max_model_len $got"; else fail "$name" "max_model_len $got, expected $want"; fi
    fi
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
}
max_model_len_of "YaRN doubles the context" 8192 -m "$yarn"
max_model_len_of "--allow-long-context" 9000 -m "$yarn" --max-model-len 9000 --allow-long-context
VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 max_model_len_of "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" 5000 -m "$model" --max-model-len 5000

echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
