#!/usr/bin/env bash
# test_kv_events.sh - `deltaserve serve --kv-events-endpoint`, as a router sees it.
#
# Starts the server on the tiny model (make-model --shape tiny) with KV events and a replay
# socket (each on a port zmq picks, read back from the start-up line), in the
# map form and then the older array form, and runs kv_events_client.py against
# it: topic, consecutive sequence numbers, payload shape, every field of every
# event, chains against the prompts' tokens, images' keys in extra_keys (the map
# run has a vision tower), replay from a sequence and its end
# marker, /metrics. A wildcard --host puts $POD_IP in the topic. Then a second
# server on the first one's busy KV events
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
model="$DS_TMP/tiny.gguf"   # the tiny model, as the other server tests make it (shared with them)
[ -f "$model" ] || "$DS_BIN" make-model --shape tiny --out "$model" >/dev/null ||
    { bad make-model "failed"; echo "RESULT passed=$passed failed=$failed"; exit 1; }
# the map run serves a model with a small vision tower, so that images reach the events
vmodel="$T/vtiny.gguf" vproj="$T/mmproj-vtiny.gguf"
"$DS_BIN" make-model --shape tiny --out "$vmodel" --mmproj "$vproj" --vision-layers 2 >"$T/vmake.log" 2>&1 ||
    { bad "make-model --mmproj" "$(tail -n 3 "$T/vmake.log")"; echo "RESULT passed=$passed failed=$failed"; exit 1; }
server=""
trap '[ -n "$server" ] && kill -9 "$server" 2>/dev/null' EXIT

# run_format FORMAT: one server and the client's checks against it; leaves it running as $server
# (its KV events endpoint in $kv_pub)
run_format() {
    local fmt=$1 log="$T/serve-$1.log" images=()
    local m=(-m "$model")
    [ "$fmt" = map ] && { m=(-m "$vmodel" --mmproj "$vproj"); images=(images); }
    "$DS_BIN" serve "${m[@]}" --served-model-name default --port 0 --threads 2 \
        --state-checkpoint-interval $BLOCK --kv-events-format "$fmt" \
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
    fold_results "$fmt" "$(timeout 120 "$PY" "$HERE/kv_events_client.py" "$port" "$pub" "$replay" "$fmt" $BLOCK "${images[@]}" 2>&1)"
    kv_pub=$pub
}

run_format map
if [ -n "$server" ]; then
    # the first server holds its KV events port: a second one asking for it must not start
    busy=$(sed 's/127\.0\.0\.1/*/' <<<"$kv_pub")
    timeout 120 "$DS_BIN" serve -m "$model" --port 0 --threads 2 --kv-events-endpoint "$busy" >"$T/busy.out" 2>"$T/busy.err"
    rc=$?
    errs=$(grep -v -e '^deltaserve serve: listening on http://' -e '^deltaserve serve: MTP drafts over token ids' "$T/busy.err")
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

# a wildcard --host: the topic names the pod's address ($POD_IP) and the first served model name
POD_IP=10.1.2.3 "$DS_BIN" serve -m "$model" --host 0.0.0.0 --port 0 --threads 2 --served-model-name first second \
    --kv-events-endpoint 'tcp://127.0.0.1:*' >"$T/pod.log" 2>&1 &
server=$!
line=""
for _ in $(seq 1 600); do
    line=$(grep 'KV events on ' "$T/pod.log")
    [ -n "$line" ] && break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
done
hport=$(sed -n 's/.*listening on http:\/\/0.0.0.0:\([0-9]*\).*/\1/p' "$T/pod.log" | head -n 1)
if [ -n "$hport" ] && [[ "$line" == *"topic 'kv@10.1.2.3:$hport@first'"* ]]; then
    ok "--host 0.0.0.0: the topic is kv@\$POD_IP:PORT@first-name"
else
    bad "--host 0.0.0.0: the topic is kv@\$POD_IP:PORT@first-name" "$(tail -n 3 "$T/pod.log")"
fi
kill -9 "$server" 2>/dev/null; wait "$server" 2>/dev/null; server=""

timeout 120 "$DS_BIN" serve -m "$model" --port 0 --threads 2 --kv-events-endpoint 'tcp://127.0.0.1:notaport' \
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
