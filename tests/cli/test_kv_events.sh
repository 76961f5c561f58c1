#!/usr/bin/env bash
# test_kv_events.sh - `deltaserve serve --kv-events-endpoint`, as a router sees it.
#
# Starts the server on the tiny default model with KV events and a replay
# socket (each on a port zmq picks, read back from the start-up line), in the
# map form and then the older array form, and runs kv_events_client.py against
# it: topic, consecutive sequence numbers, payload shape, every field of every
# event, chains against the prompts' tokens, replay from a sequence and its end
# marker, /metrics. Then a second server on the first one's busy KV events
# port must refuse to start (exit 1, one line naming the endpoint and zmq's
# reason), as must a malformed endpoint and --kv-events-format other than map
# or array (exit 2).
#
# Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
# Env: DS_BIN, DS_TMP (tests/run.sh).
set -u
: "${DS_BIN:?}" "${DS_TMP:?}"
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
T=$(mktemp -d "$DS_TMP/kv-events.XXXXXX")
ulimit -c 0
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
. "$HERE/server_ready.sh"
BLOCK=64
server=""
trap '[ -n "$server" ] && kill -9 "$server" 2>/dev/null' EXIT

# run_format FORMAT: one server, the client's checks, SIGTERM; leaves $server running when KEEP=1
run_format() {
    local fmt=$1 log="$T/serve-$1.log"
    "$DS_BIN" serve --port 0 --threads 2 --state-checkpoint-interval $BLOCK --kv-events-format "$fmt" \
        --kv-events-endpoint 'tcp://127.0.0.1:*' --kv-events-replay-endpoint 'tcp://127.0.0.1:*' >"$log" 2>&1 &
    server=$!
    if ! wait_ready "$log" "$server" 600; then
        bad "$fmt: server starts" "$(tail -n 5 "$log")"
        kill -9 "$server" 2>/dev/null; server=""
        return 1
    fi
    local line pub replay
    line=$(grep 'KV events on ' "$log")
    pub=$(sed -n 's/.*KV events on \(tcp:[^,]*\),.*/\1/p' <<<"$line")
    replay=$(sed -n 's/.*replay on \(tcp:[^,]*\),.*/\1/p' <<<"$line")
    if [ -z "$pub" ] || [ -z "$replay" ] || [[ "$line" != *"topic 'kv@127.0.0.1:$port@default'"* ]] ||
       [[ "$line" != *"$fmt form, blocks of $BLOCK tokens"* ]]; then
        bad "$fmt: the start-up line names the sockets, topic, form and block size" "$line"
    else
        ok "$fmt: the start-up line names the sockets, topic, form and block size"
    fi
    fold_results "$fmt" "$(timeout 120 "$PY" "$HERE/kv_events_client.py" "$port" "$pub" "$replay" "$fmt" $BLOCK 2>&1)"
    kv_pub=$pub
}

run_format map
if [ -n "$server" ]; then
    # the first server holds its KV events port: a second one asking for it must not start
    busy=$(sed 's/127\.0\.0\.1/*/' <<<"$kv_pub")
    timeout 120 "$DS_BIN" serve --port 0 --threads 2 --kv-events-endpoint "$busy" >"$T/busy.out" 2>"$T/busy.err"
    rc=$?
    errs=$(grep -v '^deltaserve serve: listening on http://' "$T/busy.err")
    if [ "$rc" -eq 1 ] && [ "$(grep -c '' <<<"$errs")" -eq 1 ] && [[ "$errs" == *"--kv-events-endpoint $busy"* ]] &&
       [[ "$errs" == *"Address already in use"* ]]; then
        ok "a busy endpoint refuses to start: $errs"
    else
        bad "a busy endpoint refuses to start" "exit $rc: $(head -c 600 "$T/busy.err")"
    fi
    stop_server "map server" "$server" "$T/serve-map.log"
    server=""
fi
run_format array
[ -n "$server" ] && { stop_server "array server" "$server" "$T/serve-array.log"; server=""; }

timeout 120 "$DS_BIN" serve --port 0 --threads 2 --kv-events-endpoint 'tcp://127.0.0.1:notaport' \
    >"$T/badep.out" 2>"$T/badep.err"
rc=$?
if [ "$rc" -eq 1 ] && grep -q -- '--kv-events-endpoint tcp://127.0.0.1:notaport: Invalid argument' "$T/badep.err"; then
    ok "a malformed endpoint refuses to start"
else
    bad "a malformed endpoint refuses to start" "exit $rc: $(head -c 600 "$T/badep.err")"
fi
"$DS_BIN" serve --kv-events-format json >/dev/null 2>"$T/fmt.err"
rc=$?
if [ "$rc" -eq 2 ] && grep -q "must be map or array, got 'json'" "$T/fmt.err"; then ok "--kv-events-format json is refused"
else bad "--kv-events-format json is refused" "exit $rc: $(cat "$T/fmt.err")"; fi
"$DS_BIN" serve --kv-events-replay-endpoint 'tcp://*:5558' >/dev/null 2>"$T/rep.err"
rc=$?
if [ "$rc" -eq 2 ] && grep -q "needs --kv-events-endpoint" "$T/rep.err"; then ok "a replay endpoint alone is refused"
else bad "a replay endpoint alone is refused" "exit $rc: $(cat "$T/rep.err")"; fi

echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
