#!/usr/bin/env bash
# End-to-end checks of `deltaserve serve`: starts real servers on 127.0.0.1
# (free ports) with the tiny model and runs tests/server/e2e.mjs (the official
# openai client plus raw HTTP) against them in these modes: main, queue (429),
# fault (engine failures), fault-phase (one request of a busy batch fails in a
# prefill, decode or verify step), fault-draft (a failed MTP draft call is
# counted, not fatal), seed (seeded answers reproduce, with and without
# speculation), drain (SIGTERM), drain-timeout and drain-again (a second
# SIGTERM). Prints ok/FAIL lines and
# "RESULT passed=N failed=M". Env: DS_BIN, DS_TMP, DS_ROOT (tests/run.sh).
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

# start NAME ARGS... : starts a server, sets $port and $pid, waits for /health
start() {
    local name=$1; shift
    local log="$DS_TMP/server-$name.log"
    : >"$log"   # the server writes it from the background: it must exist before the first look
    "$DS_BIN" serve -m "$model" --port 0 --api-key "$key" --served-model-name tiny --threads 2 "$@" >"$log" 2>&1 &
    pid=$!
    pids+=("$pid")
    if ! wait_ready "$log" "$pid" 200; then
        bad "server $name starts" "$(tail -n 5 "$log")"
        return 1
    fi
    ok "server $name starts"
}

# suite MODE : runs e2e.mjs against the last started server
suite() {
    local out
    out=$(cd "$DS_ROOT/tests/server" && DS_URL="http://127.0.0.1:$port" DS_KEY="$key" DS_MODEL=tiny DS_MODE="$1" \
          DS_SERVER_PID="$pid" timeout 120 node e2e.mjs 2>&1)
    echo "$out" | grep -E '^(ok|FAIL) '
    local line p f
    line=$(echo "$out" | grep -E '^RESULT passed=[0-9]+ failed=[0-9]+$' | tail -n 1)
    if [ -z "$line" ]; then bad "suite $1" "no RESULT line: $(echo "$out" | tail -n 5)"; return; fi
    p=${line#RESULT passed=}; p=${p%% *}; f=${line##*failed=}
    passed=$((passed + p)) failed=$((failed + f))
}

# stops: SIGTERM, expects exit 0
stop() {
    local name=$1
    kill -TERM "$pid" 2>/dev/null
    local rc=0
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then bad "server $name exits on SIGTERM" "still running"; kill -9 "$pid"; return; fi
    wait "$pid"; rc=$?
    [ "$rc" -eq 0 ] && ok "server $name exits 0 on SIGTERM" || bad "server $name exits 0 on SIGTERM" "exit $rc: $(tail -n 3 "$DS_TMP/server-$name.log")"
}

if ! [ -d "$DS_ROOT/tests/server/node_modules/openai" ]; then
    bad "openai client" "tests/server/node_modules missing (npm ci in tests/server)"
    echo "RESULT passed=$passed failed=$failed"; exit 1
fi

# listens on 127.0.0.1 only (no --host given): the socket in /proc/net/tcp, none in tcp6
listens_on_loopback() {
    local hex
    hex=$(printf '%04X' "$port")
    if grep -qE "^ *[0-9]+: 0100007F:$hex 00000000:0000 0A " /proc/net/tcp &&
       ! grep -qE "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:0000 0A " /proc/net/tcp6 2>/dev/null &&
       [ "$(grep -cE "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:0000 0A " /proc/net/tcp)" -eq 1 ]; then
        ok "default bind is 127.0.0.1 only"
    else
        bad "default bind is 127.0.0.1 only" "$(grep -E ":$hex " /proc/net/tcp /proc/net/tcp6 2>/dev/null | head -n 3)"
    fi
}

if start main --max-body-kb 256; then
    listens_on_loopback
    suite main
    stop main
    # the key (right and wrong ones were sent) and the prompts stay out of the log
    if grep -qF -- "$key" "$DS_TMP/server-main.log"; then bad "the API key is never logged" "found in the log"
    else ok "the API key is never logged"; fi
    if grep -q "prompt-marker" "$DS_TMP/server-main.log"; then bad "prompts are not logged" "found in the log"
    else ok "prompts are not logged"; fi
fi
if start queue --max-queue 1 --max-running 1 --no-prefix-cache; then
    suite queue
    stop queue
fi
# --max-connections 3: a fourth client gets in by closing the oldest idle one; with three streams
# running, /health is still answered (from the reserve) and a new completion gets 503
if start conn --max-connections 3; then
    out=$(timeout 120 /usr/bin/python3 - "$port" "$key" <<'PY'
import socket, sys, time
port, key = int(sys.argv[1]), sys.argv[2]
def get(path, body=None):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: Bearer %s\r\n" % ("POST" if body else "GET", path, key)
    if body: head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    s.sendall(head.encode() + b"\r\n" + (body or b""))
    data = b""
    try:
        while True:
            d = s.recv(4096)
            if not d: break
            data += d
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    return data[:12]
def closed(s):
    s.settimeout(10)
    try: return s.recv(1) == b""
    except ConnectionResetError: return True
    except socket.timeout: return False
idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
time.sleep(0.3)
fourth = get("/health")
oldest = closed(idle[0])
for s in idle: s.close()
streams = []
for i in range(3):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    body = b'{"prompt": "x", "max_tokens": 4000, "ignore_eos": true, "stream": true}'
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + key.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    s.recv(12)   # the stream has begun: this connection is busy
    streams.append(s)
probe = get("/health")
# connections the server has not finished closing yet count as idle ones a newcomer may replace:
# once they are gone, work on a reserve connection is refused
for _ in range(50):
    work = get("/v1/completions", b'{"prompt": "x", "max_tokens": 1}')
    if work != b"HTTP/1.1 200": break
    time.sleep(0.1)
for s in streams: s.close()
print("fourth=%r oldest_closed=%s probe=%r work=%r" % (fourth, oldest, probe, work))
PY
)
    case "$out" in
        "fourth=b'HTTP/1.1 200' oldest_closed=True probe=b'HTTP/1.1 200' work=b'HTTP/1.1 503'")
            ok "--max-connections: a new client closes the oldest idle one; busy, probes still answered" ;;
        *) bad "--max-connections" "$out" ;;
    esac
    stop conn
fi
# 300 idle and 20 slow (slowloris) clients: probes and requests answered, the idle and slow
# connections closed at --idle-timeout and --header-timeout
if start flood --idle-timeout 4 --header-timeout 3; then
    out=$(timeout 120 /usr/bin/python3 "$DS_ROOT/tests/cli/conn_flood.py" "$port" "$key" 4 3 2>&1)
    echo "$out" | grep -E '^(ok|FAIL|#) '
    line=$(echo "$out" | grep -E '^RESULT passed=[0-9]+ failed=[0-9]+$' | tail -n 1)
    if [ -z "$line" ]; then bad "conn_flood.py" "no RESULT line: $(echo "$out" | tail -n 3)"
    else p=${line#RESULT passed=}; p=${p%% *}; f=${line##*failed=}; passed=$((passed + p)) failed=$((failed + f)); fi
    stop flood
fi
if DS_FAULT_EVERY=1 DS_FAULT_AT_TOKEN=3 start fault; then
    suite fault
    stop fault
fi
# one request fails in a prefill, decode or verify step while others run (e2e.mjs fault-phase)
for phase in prefill decode verify; do
    # --spec-policy request: the greedy faulty request drafts (and so verifies) among five others, whatever
    # drafting costs in that batch
    if DS_FAULT_EVERY=3 DS_FAULT_PHASE=$phase start "fault-$phase" --spec-policy request; then
        DS_FAULT_PHASE=$phase suite fault-phase
        stop "fault-$phase"
    fi
done
# a failed MTP draft call: no request fails, /metrics counts it, the log says it
if DS_FAULT_EVERY=1 DS_FAULT_PHASE=draft start fault-draft; then
    suite fault-draft
    grep -q 'MTP draft call failed' "$DS_TMP/server-fault-draft.log" && ok "fault-draft: the failure is logged" ||
        bad "fault-draft: the failure is logged" "$(tail -n 3 "$DS_TMP/server-fault-draft.log")"
    stop fault-draft
fi
# a seed reproduces its answer with speculation (the defaults), alone and among 16 others, and it
# is the answer of a server that does not speculate; the head of this model agrees with it often
# enough for drafts to be accepted
agree_model="$DS_TMP/tiny-agree.gguf"
[ -f "$agree_model" ] || "$DS_BIN" make-model --shape tiny --mtp-agree 0.7 --out "$agree_model" >/dev/null 2>&1 ||
    bad "make-model --mtp-agree" "failed"
for spec in 3 0; do
    if model="$agree_model" start "seed-$spec" --spec-tokens "$spec"; then
        DS_SEED_SPEC=$spec DS_SEED_OUT="$DS_TMP/seed-answers-$spec.json" suite seed
        stop "seed-$spec"
    fi
done
if [ -s "$DS_TMP/seed-answers-3.json" ] && cmp -s "$DS_TMP/seed-answers-3.json" "$DS_TMP/seed-answers-0.json"; then
    ok "seed: the same answers with and without speculation"
else
    bad "seed: the same answers with and without speculation" "$(head -c 300 "$DS_TMP/seed-answers-3.json" 2>/dev/null) vs $(head -c 300 "$DS_TMP/seed-answers-0.json" 2>/dev/null)"
fi
if start drain; then
    suite drain
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then bad "drain: server exits after the stream" "still running"
    else wait "$pid"; rc=$?; [ "$rc" -eq 0 ] && ok "drain: server exits 0" || bad "drain: server exits 0" "exit $rc"; fi
fi
if start drain-timeout --drain-timeout 0.05; then
    suite drain-timeout
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then bad "drain timeout: server exits" "still running"; kill -9 "$pid"
    else wait "$pid"; rc=$?; [ "$rc" -eq 0 ] && ok "drain timeout: server exits 0 once every request ended visibly" || bad "drain timeout: server exits 0" "exit $rc"; fi
    grep -q "drain timed out: ending 1 request(s) with an error" "$DS_TMP/server-drain-timeout.log" && ok "drain timeout: the log says how many requests were ended" || bad "drain timeout log" "$(tail -n 3 "$DS_TMP/server-drain-timeout.log")"
fi
# a second SIGTERM during the drain: the running stream ends with its error event and the process
# exits 0 at once, long before --drain-timeout
if start drain-again --drain-timeout 600; then
    suite drain-again
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then bad "second SIGTERM: server exits" "still running"; kill -9 "$pid"
    else wait "$pid"; rc=$?; [ "$rc" -eq 0 ] && ok "second SIGTERM: server exits 0 once every request ended visibly" || bad "second SIGTERM: server exits 0" "exit $rc"; fi
    grep -q "SIGTERM again: ending 1 request(s) now with an error" "$DS_TMP/server-drain-again.log" && ok "second SIGTERM: the log says so" || bad "second SIGTERM log" "$(tail -n 3 "$DS_TMP/server-drain-again.log")"
fi
# the default model next to the binary (what `make run` serves)
if [ -f "$(dirname "$DS_BIN")/models/default.gguf" ]; then
    log="$DS_TMP/server-default.log"
    : >"$log"
    "$DS_BIN" serve --port 0 >"$log" 2>&1 & pid=$!; pids+=("$pid")
    for _ in $(seq 1 100); do grep -q "ready:" "$log" && break; sleep 0.1; done
    grep -q "ready: model 'default'" "$log" && ok "serve without -m serves models/default.gguf" || bad "serve without -m" "$(tail -n 3 "$log")"
    kill -TERM "$pid"; wait "$pid"
fi
echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
