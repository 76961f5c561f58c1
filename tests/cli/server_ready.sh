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
