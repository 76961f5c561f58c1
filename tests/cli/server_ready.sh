# server_ready.sh - sourced by the test scripts that start `deltaserve serve --port 0`.
#
# wait_ready LOG PID TENTHS: waits up to TENTHS tenths of a second for the server
# writing LOG to say both its port and "ready:"; sets $port. Returns 1 when the
# process ended first or time ran out.
wait_ready() {
    local log=$1 server=$2 tenths=$3
    port=""
    for _ in $(seq 1 "$tenths"); do
        port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log" | head -n 1)
        [ -n "$port" ] && grep -q "ready:" "$log" && return 0
        kill -0 "$server" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# The two below call the sourcing script's ok NAME and bad NAME WHY.
#
# fold_results NAME OUTPUT: prints the ok/FAIL lines of a client suite's OUTPUT and adds its
# "RESULT passed=N failed=M" line to $passed and $failed; no RESULT line is one failure.
fold_results() {
    local name=$1 out=$2 line p f
    echo "$out" | grep -E '^(ok|FAIL) '
    line=$(echo "$out" | grep -E '^RESULT passed=[0-9]+ failed=[0-9]+$' | tail -n 1)
    if [ -z "$line" ]; then
        bad "$name" "no RESULT line: $(echo "$out" | tail -n 5)"
    else
        p=${line#RESULT passed=}; p=${p%% *}; f=${line##*failed=}
        passed=$((passed + p)) failed=$((failed + f))
    fi
}

# stop_server NAME PID LOG: SIGTERM, then the server must exit 0 within 10 s (ok/bad NAME).
stop_server() {
    local name=$1 server=$2 log=$3 rc
    kill -TERM "$server" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$server" 2>/dev/null; then bad "$name exits on SIGTERM" "still running"; kill -9 "$server"; return; fi
    wait "$server" 2>/dev/null; rc=$?
    [ "$rc" -eq 0 ] && ok "$name exits 0 on SIGTERM" || bad "$name exits 0 on SIGTERM" "exit $rc: $(tail -n 3 "$log")"
}
