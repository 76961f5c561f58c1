#!/usr/bin/env bash
# test_data_parallel.sh - `deltaserve serve --data-parallel N`: a supervisor and N ranks.
#
# - Two ranks on --port P and P + 1 (one endpoint per rank, as llm-d's InferencePool scores
#   them): the start names each rank with its pid and port; both answer a greedy completion,
#   the same text; each rank's /metrics labels its lines engine="r", counts only its own
#   request, and carries vllm:cache_config_info (block_size = the checkpoint interval of the
#   hybrid tiny model, num_gpu_blocks = the KV pool in those blocks) and
#   vllm:lora_requests_info (no adapters), in valid Prometheus text; SIGTERM to the supervisor
#   ends every process, exit 0.
# - A SIGTERM a rank gets both directly and through the supervisor (a process-group signal) is
#   one stop: a running request finishes; two to the supervisor end it at once, with an error.
# - SIGKILL to one rank: the supervisor stops the other and exits non-zero naming the rank
#   and the signal.
# - --reuse-port: both ranks listen on one port; 40 connections, each rank answers some of
#   them (each rank's own request counter, read from the /metrics answers of both ranks on
#   that port); SIGKILL to the supervisor still leaves no rank behind.
# - --data-parallel-rank R started by hand: one server that is rank R (its label, its line).
# - Bad settings are refused before anything starts: --data-parallel 0, a rank not below the
#   size, a last rank's port past 65535, --reuse-port with --port 0.
#
# Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
# Env: DS_BIN, DS_TMP, DS_ROOT (tests/run.sh).
set -u
: "${DS_BIN:?}" "${DS_TMP:?}" "${DS_ROOT:?}"
PY=/usr/bin/python3
PROM="$DS_ROOT/tests/cli/prom_text.py"
T=$(mktemp -d "$DS_TMP/data-parallel.XXXXXX")
ulimit -c 0
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $(printf '%s' "$2" | head -c 600)"; failed=$((failed + 1)); }
model="$DS_TMP/tiny.gguf"
[ -f "$model" ] || "$DS_BIN" make-model --shape tiny --out "$model" >/dev/null ||
    { bad make-model "failed"; echo "RESULT passed=$passed failed=$failed"; exit 1; }
procs=()   # every supervisor and rank started, killed at the end should a check have failed
cleanup() { for p in "${procs[@]}"; do kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT
t0=$(date +%s)

# free_ports N: a port P with P..P+N-1 free on 127.0.0.1
free_ports() {
    "$PY" - "$1" <<'EOF'
import socket, sys
n = int(sys.argv[1])
for _ in range(200):
    held = [socket.socket()]
    held[0].bind(("127.0.0.1", 0))
    p = held[0].getsockname()[1]
    try:
        for i in range(1, n):
            s = socket.socket()
            held.append(s)
            s.bind(("127.0.0.1", p + i))
    except OSError:
        continue
    finally:
        for s in held:
            s.close()
    print(p)
    break
EOF
}

# start NAME ARGS...: a supervisor (serve ARGS) in the background; sets $sup and $log
start() {
    log="$T/$1.log"
    : >"$log"
    shift
    "$DS_BIN" serve -m "$model" --served-model-name tiny --threads 1 "$@" >"$log" 2>&1 &
    sup=$!
    procs+=("$sup")
}

# wait_ready N: until N "ready:" lines are in $log (20 s at most); sets $rank_pid[r] from the
# supervisor's "rank R: pid P" lines
declare -a rank_pid
wait_ready() {
    local n=$1
    for _ in $(seq 1 200); do
        [ "$(grep -c 'ready: ' "$log")" -ge "$n" ] && break
        kill -0 "$sup" 2>/dev/null || break
        sleep 0.1
    done
    rank_pid=()
    local r p
    while read -r r p; do rank_pid[$r]=$p; procs+=("$p"); done < <(sed -n 's/.*: rank \([0-9]*\): pid \([0-9]*\),.*/\1 \2/p' "$log")
    [ "$(grep -c 'ready: ' "$log")" -ge "$n" ]
}

# gone PID...: all have ended within 20 s
gone() {
    for _ in $(seq 1 200); do
        local left=0 p
        for p in "$@"; do kill -0 "$p" 2>/dev/null && left=1; done
        [ $left -eq 0 ] && return 0
        sleep 0.1
    done
    return 1
}

# stopped NAME PID WANT: PID (a child of this shell) exits within 30 s with WANT ("0" or "nonzero")
stopped() {
    local name=$1 pid=$2 want=$3 rc
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then bad "$name" "still running after 30 s"; return 1; fi
    wait "$pid"; rc=$?
    if { [ "$want" = 0 ] && [ $rc -eq 0 ]; } || { [ "$want" = nonzero ] && [ $rc -ne 0 ]; }; then
        ok "$name (exit $rc)"; return 0
    fi
    bad "$name" "exit $rc: $(tail -n 4 "$log" | tr '\n' '|')"
    return 1
}

completion() {   # PORT: the greedy text of a short completion ("" and a FAIL-worthy line when not 200)
    curl -s --max-time 60 "http://127.0.0.1:$1/v1/completions" -H 'Content-Type: application/json' \
        -d '{"model": "tiny", "prompt": "The data parallel ranks", "max_tokens": 12, "temperature": 0}' |
        "$PY" -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["text"]))' 2>/dev/null
}

# --- two ranks, a port each ---
base=$(free_ports 2)
start dp2 --data-parallel 2 --port "$base" --state-checkpoint-interval 128
if ! wait_ready 2; then
    bad "two ranks start" "$(tail -n 5 "$log" | tr '\n' '|')"
else
    ok "two ranks start"
    if grep -q "rank 0: pid ${rank_pid[0]}, port $base\$" "$log" && grep -q "rank 1: pid ${rank_pid[1]}, port $((base + 1))\$" "$log" &&
       grep -q "ready: .*127.0.0.1:$base/v1, rank 0 of 2" "$log" && grep -q "ready: .*127.0.0.1:$((base + 1))/v1, rank 1 of 2" "$log"; then
        ok "the start names each rank, its pid and its port ($base, $((base + 1)))"
    else bad "the start names each rank" "$(cat "$log" | tr '\n' '|')"; fi
    a=$(completion "$base") b=$(completion "$((base + 1))")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "both ranks answer, the same greedy text $a"
    else bad "both ranks answer the same greedy text" "rank 0: '$a', rank 1: '$b'"; fi
    for r in 0 1; do
        m="$T/metrics$r"
        curl -s "http://127.0.0.1:$((base + r))/metrics" >"$m"
        fmt=$("$PY" "$PROM" check "$m" 2>&1)
        [ "$fmt" = ok ] && ok "rank $r: /metrics is valid Prometheus text" || bad "rank $r: /metrics format" "$fmt"
        engines=$(grep -v '^#' "$m" | grep -o 'engine="[0-9]*"' | sort -u | tr '\n' ' ')
        n_engine=$(grep -v '^#' "$m" | grep -c 'engine="')
        n_model=$(grep -v '^#' "$m" | grep -c 'model_name="tiny"')
        if [ "$engines" = "engine=\"$r\" " ] && [ "$n_model" -gt 50 ] && [ "$n_engine" -gt "$n_model" ]; then
            ok "rank $r: every per-engine line is labelled engine=\"$r\" ($n_model lines)"
        else bad "rank $r: engine label" "labels seen: '$engines', $n_engine labelled lines, $n_model model lines"; fi
        own=$("$PY" "$PROM" get "$m" deltaserve:request_success_total engine="$r")
        [ "$own" = 1 ] && ok "rank $r counts its own request (request_success_total 1)" ||
            bad "rank $r counts its own request" "request_success_total '$own'"
        pages=$("$PY" "$PROM" get "$m" deltaserve:kv_pages_total engine="$r")
        cc=$("$PY" "$PROM" labels "$m" vllm:cache_config_info)
        want=$("$PY" - "$cc" "$r" "${pages%.*}" <<'EOF'
import json, sys
labels, r, pages = json.loads(sys.argv[1] or "{}"), sys.argv[2], int(sys.argv[3] or 0)
want = {"engine": r, "block_size": "128", "num_gpu_blocks": str(pages * 16 // 128),
        "kv_cache_size_tokens": str(pages * 16), "enable_prefix_caching": "True", "mamba_block_size": "128"}
bad = {k: (labels.get(k), v) for k, v in want.items() if labels.get(k) != v}
print("ok" if pages > 0 and not bad else f"labels {labels}, wrong (got, want): {bad}")
EOF
)
        [ "$want" = ok ] && ok "rank $r: vllm:cache_config_info block_size 128, num_gpu_blocks $((${pages%.*} * 16 / 128))" ||
            bad "rank $r: vllm:cache_config_info" "$want"
        lora=$("$PY" "$PROM" get "$m" vllm:lora_requests_info max_lora=0 running_lora_adapters= waiting_lora_adapters=)
        now=$(date +%s)
        if [ -n "$lora" ] && [ "${lora%.*}" -ge "$t0" ] && [ "${lora%.*}" -le "$now" ]; then
            ok "rank $r: vllm:lora_requests_info{max_lora=\"0\", no adapters} = a Unix time ($lora)"
        else bad "rank $r: vllm:lora_requests_info" "value '$lora' (expected a time in $t0..$now)"; fi
    done
    # a chat answer of each rank, in the same second: ids made from the clock and a per-process counter
    # were the same on both
    ids=$(for r in 0 1; do curl -s --max-time 60 "http://127.0.0.1:$((base + r))/v1/chat/completions" \
        -H 'Content-Type: application/json' -d '{"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 1}' | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["id"])' 2>/dev/null; done | sort -u | wc -l)
    [ "$ids" = 2 ] && ok "the ranks' answers have different ids" || bad "the ranks' answers have different ids" "$ids distinct"
    kill -TERM "$sup"
    stopped "SIGTERM to the supervisor: every rank drains and it exits 0" "$sup" 0
    gone "${rank_pid[@]}" && ok "no rank left after SIGTERM (pids ${rank_pid[*]})" ||
        bad "no rank left after SIGTERM" "still running: ${rank_pid[*]}"
    grep -q "SIGTERM: passing it to 2 rank(s)" "$log" && [ "$(grep -c 'SIGTERM: draining' "$log")" -eq 2 ] &&
        ok "the ranks got the SIGTERM once each" || bad "SIGTERM forwarded" "$(tail -n 6 "$log" | tr '\n' '|')"
fi

# --- a SIGTERM to the whole process group (systemd's default stop, a shell's kill -- -PGID)
# reaches each rank twice, from the sender and through the supervisor: that is one stop, and a
# running request finishes. Played in the order that tells (the direct one first, taken, then
# the supervisor's). Two SIGTERMs to the supervisor are two stops: the request ends at once,
# with an error its client sees ---
# two_signals MODE: a long streamed request on rank 0, then (group) SIGTERM to rank 0 and then
# to the supervisor, or (twice) two to the supervisor, each sent once the one before was taken;
# prints the stream's status, finish reasons and whether it carried an error
two_signals() {
    # long enough to run for a good while after the first signal: ~0.3 s here, seconds under
    # the sanitizers with a fifth of the tokens
    "$PY" - "$1" "$base" "$sup" "${rank_pid[0]}" "$log" "$([ -n "${DS_SANITIZE:-}" ] && echo 200 || echo 1000)" <<'EOF'
import http.client, json, os, signal, sys, time
mode, port, sup, rank0, log, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
c.request("POST", "/v1/completions", json.dumps({"model": "tiny", "prompt": "a long one", "max_tokens": n,
          "temperature": 0, "ignore_eos": True, "stream": True}), {"Content-Type": "application/json"})
r = c.getresponse()
first = r.read(20)                     # the stream has begun: the request is running
os.kill(rank0 if mode == "group" else sup, signal.SIGTERM)
for _ in range(2000):                  # rank 0 took it and drains
    if "SIGTERM: draining 1 request(s)" in open(log).read():
        break
    time.sleep(0.005)
os.kill(sup, signal.SIGTERM)
rest = (first + r.read()).decode()
reasons = [json.loads(l[6:])["choices"][0]["finish_reason"] for l in rest.split("\n")
           if l.startswith("data: {") and '"choices"' in l]
print(f"status {r.status} finish {[x for x in reasons if x]} error {'error' in rest}")
EOF
}
base=$(free_ports 2)
start dp2-group --data-parallel 2 --port "$base"
if wait_ready 2; then
    out=$(two_signals group)
    [ "$out" = "status 200 finish ['length'] error False" ] &&
        ok "a rank signalled directly and through the supervisor drains once: the running request finishes" ||
        bad "one stop from a group SIGTERM" "$out; $(grep -E 'SIGTERM|rank' "$log" | tr '\n' '|')"
    stopped "the supervisor exits 0 after a group SIGTERM" "$sup" 0
    gone "${rank_pid[@]}" || bad "no rank left after a group SIGTERM" "still running: ${rank_pid[*]}"
else bad "two ranks start (group)" "$(tail -n 5 "$log")"; fi
base=$(free_ports 2)
start dp2-twice --data-parallel 2 --port "$base"
if wait_ready 2; then
    out=$(two_signals twice)
    [[ "$out" == "status 200 finish "*" error True" ]] && grep -q "SIGTERM again: ending 1 request(s) now" "$log" &&
        ok "SIGTERM twice to the supervisor: the running request ends at once, with an error" ||
        bad "SIGTERM twice to the supervisor" "$out; $(grep -E 'SIGTERM|rank' "$log" | tr '\n' '|')"
    stopped "the supervisor exits 0 after SIGTERM twice" "$sup" 0
    gone "${rank_pid[@]}" || bad "no rank left after SIGTERM twice" "still running: ${rank_pid[*]}"
else bad "two ranks start (twice)" "$(tail -n 5 "$log")"; fi

# --- a rank killed: the supervisor stops the other and fails ---
base=$(free_ports 2)
start dp2-kill --data-parallel 2 --port "$base"
if wait_ready 2; then
    kill -9 "${rank_pid[1]}"
    stopped "SIGKILL to rank 1: the supervisor exits non-zero" "$sup" nonzero
    grep -q "rank 1 (pid ${rank_pid[1]}) was killed by signal 9 (Killed); stopping the other 1 rank(s)" "$log" &&
        ok "the supervisor names the rank and the signal" || bad "the supervisor names the dead rank" "$(tail -n 4 "$log" | tr '\n' '|')"
    gone "${rank_pid[0]}" && ok "rank 0 stopped with it" || bad "rank 0 stopped" "pid ${rank_pid[0]} still runs"
else bad "two ranks start (kill)" "$(tail -n 5 "$log" | tr '\n' '|')"; fi

# --- a rank that cannot start (its port is taken): the supervisor stops the other and fails ---
base=$(free_ports 2)
"$PY" -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); time.sleep(60)' "$((base + 1))" &
holder=$!
procs+=("$holder")
for _ in $(seq 1 50); do grep -qi ":$(printf '%04X' $((base + 1))) 00000000:0000 0A" /proc/net/tcp && break; sleep 0.1; done
start dp2-busy --data-parallel 2 --port "$base"
wait_ready 2
stopped "rank 1's port taken: the supervisor exits non-zero" "$sup" nonzero
grep -q "cannot listen on 127.0.0.1:$((base + 1)): Address already in use" "$log" &&
    grep -q "rank 1 (pid ${rank_pid[1]}) exited with status 1; stopping the other 1 rank(s)" "$log" &&
    ok "the rank says why, the supervisor names it" || bad "a rank that cannot start" "$(tail -n 5 "$log")"
gone "${rank_pid[0]}" && ok "rank 0 stopped with it" || bad "rank 0 stopped" "pid ${rank_pid[0]} still runs"
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

# --- one port shared with SO_REUSEPORT ---
port=$(free_ports 1)
start dp2-reuse --data-parallel 2 --reuse-port --port "$port"
if wait_ready 2; then
    [ "$(grep -c "listening on http://127.0.0.1:$port (loading .*, rank [01] of 2)" "$log")" -eq 2 ] &&
        ok "both ranks listen on port $port" || bad "both ranks listen on one port" "$(grep listening "$log" | tr '\n' '|')"
    out=$("$PY" - "$port" <<'EOF'
import http.client, json, re, sys
port = int(sys.argv[1])
body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 2, "temperature": 0})
codes = []
for _ in range(40):   # a connection each: the kernel picks a rank per connection
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    codes.append(c.getresponse().status)
    c.close()
# each rank's own count, from the /metrics answers of whichever rank takes the connection
count = {}
for _ in range(200):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    m = re.search(r'^deltaserve:request_success_total\{[^}]*engine="(\d+)"[^}]*\} (\d+)$', text, re.M)
    count[m.group(1)] = int(m.group(2))
    if len(count) == 2:
        break
print(f"codes {sorted(set(codes))} counts {json.dumps(count, sort_keys=True)} total {sum(count.values())}")
EOF
)
    if [[ "$out" =~ ^codes\ \[200\]\ counts\ \{\"0\":\ ([1-9][0-9]*),\ \"1\":\ ([1-9][0-9]*)\}\ total\ 40$ ]]; then
        ok "40 connections on one port: rank 0 answered ${BASH_REMATCH[1]}, rank 1 ${BASH_REMATCH[2]}"
    else bad "both ranks serve the shared port" "$out"; fi
    kill -9 "$sup"
    wait "$sup" 2>/dev/null
    gone "${rank_pid[@]}" && ok "SIGKILL to the supervisor leaves no rank behind" ||
        bad "no orphan after the supervisor's SIGKILL" "still running: ${rank_pid[*]}"
else bad "two ranks start on one port" "$(tail -n 5 "$log" | tr '\n' '|')"; fi

# --- one rank started by hand ---
port=$(free_ports 1)
start rank1 --data-parallel 2 --data-parallel-rank 1 --port "$port"
if wait_ready 1; then
    labels=$(curl -s "http://127.0.0.1:$port/metrics" | grep -o 'engine="[0-9]*"' | sort -u | tr '\n' ' ')
    grep -q "ready: .*127.0.0.1:$port/v1, rank 1 of 2" "$log" && [ "$labels" = 'engine="1" ' ] &&
        ok "--data-parallel-rank 1: one server on --port, labelled engine=\"1\"" ||
        bad "--data-parallel-rank 1" "labels '$labels'; $(grep ready "$log")"
    kill -TERM "$sup"
    stopped "the hand-started rank exits 0 on SIGTERM" "$sup" 0
else bad "a rank started by hand" "$(tail -n 5 "$log" | tr '\n' '|')"; fi

# --- refused settings: exit 2, one line naming the problem, nothing started ---
refused() {   # NAME WORD -- ARGS...
    local name=$1 word=$2
    shift 3
    timeout 20 "$DS_BIN" serve -m "$model" "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ $rc -eq 2 ] && [ "$(grep -c '' "$T/err")" -eq 1 ] && grep -qF -- "$word" "$T/err" && [ ! -s "$T/out" ]; then
        ok "$name refused: $(cat "$T/err")"
    else bad "$name refused" "exit $rc: $(cat "$T/err" | tr '\n' '|')"; fi
}
refused "--data-parallel 0" "--data-parallel '0' is not an integer in 1..64" -- --data-parallel 0
refused "a rank not below the size" "--data-parallel-rank 2 is not below --data-parallel 2" -- --data-parallel 2 --data-parallel-rank 2
refused "a rank without the size" "--data-parallel-rank 1 is not below --data-parallel 1" -- --data-parallel-rank 1
refused "the last rank's port past 65535" "rank 3 would listen on port 65537, past 65535" -- --data-parallel 4 --port 65534
refused "--reuse-port with --port 0" "--reuse-port needs a fixed --port" -- --data-parallel 2 --reuse-port --port 0

reports=$(grep -lE 'Sanitizer|runtime error' "$T"/*.log 2>/dev/null)
[ -z "$reports" ] && ok "no sanitizer report in any log" || bad "sanitizer reports" "$(grep -hE -A3 'Sanitizer|runtime error' $reports | head -n 12)"

echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
