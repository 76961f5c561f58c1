#!/usr/bin/env bash
# test_serve_habits.sh - `deltaserve serve` takes the options vLLM's and
# llama-server's users type, with their meaning:
#   the model as a positional path; -c / --ctx-size / --max-model-len (the
#   context: a longer prompt is a 400 context_length_exceeded); -np /
#   --parallel (the running limit: a second request waits); --chat-template
#   FILE or inline text (the prompt is rendered with it; one that does not
#   compile stops the start naming FILE:LINE:COL); --version; several
#   --served-model-name names (each accepted, each listed, another is a 404);
#   IPv6 --host (::1, [::1], and :: taking IPv4 too); CORS (--allowed-origins:
#   preflight 204 without the key, Access-Control-Allow-Origin on answers,
#   errors and streams; nothing without the option).
#
# Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
# Env: DS_BIN, DS_TMP (tests/run.sh).
set -u
: "${DS_BIN:?}" "${DS_TMP:?}"
PY=/usr/bin/python3
T=$(mktemp -d "$DS_TMP/serve-habits.XXXXXX")
ulimit -c 0
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
check() { # NAME CONDITION-STATUS DETAIL
    if [ "$2" -eq 0 ]; then ok "$1"; else fail "$1" "$3"; fi
}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT

model="$T/tiny.gguf"
if ! "$DS_BIN" make-model --shape tiny --out "$model" >/dev/null 2>"$T/mm.err"; then
    fail make-model "$(cat "$T/mm.err")"
    echo "RESULT passed=$passed failed=$failed"; exit 1
fi

# start NAME ARGS... : `deltaserve serve ARGS --port 0`; sets $pid, $port, $url (the host as the
# ready line writes it); returns 1 when it did not become ready
start() {
    local name=$1; shift
    log="$T/server-$name.log"
    : >"$log"
    "$DS_BIN" serve "$@" --port 0 --threads 2 >"$log" 2>&1 &
    pid=$!
    pids+=("$pid")
    url=""
    for _ in $(seq 1 600); do
        url=$(sed -n 's/.*ready: .*\(http:\/\/.*:[0-9]*\)\/v1$/\1/p' "$log" | head -n 1)
        [ -n "$url" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$url" ]; then
        fail "server $name starts" "$(tail -n 3 "$log")"
        return 1
    fi
    port=${url##*:}
    ok "server $name starts ($url)"
}
stop() {
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}
# json FILE EXPR : the Python expression EXPR of the JSON in FILE (as j)
json() { "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null; }
# post URL BODY OUT [curl args...] : prints the status
post() {
    local u=$1 body=$2 out=$3; shift 3
    curl -s -o "$out" -w '%{http_code}' "$u" -H 'Content-Type: application/json' -d "$body" "$@"
}
chat() { # MODEL [CONTENT]
    printf '{"model": "%s", "messages": [{"role": "user", "content": "%s"}], "max_tokens": 1}' "$1" "${2:-hi}"
}

# --- --version ---
out=$("$DS_BIN" --version 2>&1); rc=$?
[ $rc -eq 0 ] && [[ "$out" =~ ^deltaserve\ [0-9]+\.[0-9]+\.[0-9]+\ \(build:\ [^\)]+\)$ ]]
check "deltaserve --version" $? "exit $rc: $out"
out2=$("$DS_BIN" serve --version 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$out2" = "$out" ]
check "deltaserve serve --version prints the same" $? "exit $rc: $out2"

# --- a positional model, names as vLLM's list, -c ---
if start positional "$model" --served-model-name alpha beta -c 64; then
    s=$(post "$url/v1/chat/completions" "$(chat alpha)" "$T/a.json")
    [ "$s" = 200 ] && [ "$(json "$T/a.json" 'j["model"]')" = alpha ]
    check "positional model serves; model alpha accepted" $? "status $s: $(head -c 300 "$T/a.json")"
    s=$(post "$url/v1/chat/completions" "$(chat beta)" "$T/b.json")
    [ "$s" = 200 ]
    check "second name beta accepted" $? "status $s: $(head -c 300 "$T/b.json")"
    s=$(post "$url/v1/chat/completions" "$(chat gamma)" "$T/g.json")
    [ "$s" = 404 ] && [ "$(json "$T/g.json" 'j["error"]["code"]')" = model_not_found ] &&
        grep -q "'alpha'" "$T/g.json" && grep -q "'beta'" "$T/g.json"
    check "unknown name -> 404 model_not_found naming both" $? "status $s: $(head -c 300 "$T/g.json")"
    curl -s "$url/v1/models" >"$T/models.json"
    [ "$(json "$T/models.json" '[m["id"] for m in j["data"]]')" = "['alpha', 'beta']" ] &&
        [ "$(json "$T/models.json" 'j["data"][1]["max_model_len"]')" = 64 ]
    check "/v1/models lists alpha and beta, max_model_len 64 (-c)" $? "$(head -c 400 "$T/models.json")"
    s=$(curl -s -o "$T/m.json" -w '%{http_code}' "$url/v1/models/beta")
    [ "$s" = 200 ] && [ "$(json "$T/m.json" 'j["id"]')" = beta ]
    check "/v1/models/beta" $? "status $s"
    long=$(printf 'word %.0s' $(seq 1 80))
    s=$(post "$url/v1/chat/completions" "$(chat alpha "$long")" "$T/long.json")
    [ "$s" = 400 ] && [ "$(json "$T/long.json" 'j["error"]["code"]')" = context_length_exceeded ]
    check "-c 64: a longer prompt -> 400 context_length_exceeded" $? "status $s: $(head -c 300 "$T/long.json")"
    stop
fi

# --- --model, the names repeated, --ctx-size, --chat-template FILE ---
printf '<<{%% for m in messages %%}{{ m.content }}{%% endfor %%}>>' >"$T/marker.jinja"
want=$("$DS_BIN" tokenize -m "$model" -p '<<hello there>>' --ids 2>/dev/null | wc -w)
if start template --model "$model" --served-model-name x --served-model-name y --ctx-size 128 \
        --chat-template "$T/marker.jinja"; then
    s=$(post "$url/v1/chat/completions" "$(chat y 'hello there')" "$T/t.json")
    got=$(json "$T/t.json" 'j["usage"]["prompt_tokens"]')
    [ "$s" = 200 ] && [ -n "$want" ] && [ "$want" -gt 0 ] && [ "$got" = "$want" ]
    check "--chat-template FILE renders the prompt (prompt_tokens $got = tokens of '<<hello there>>' $want)" $? \
        "status $s: $(head -c 300 "$T/t.json")"
    s=$(post "$url/v1/chat/completions" "$(chat x)" "$T/x.json")
    [ "$s" = 200 ] && [ "$(json "$T/x.json" 'j["model"]')" = x ]
    check "repeated --served-model-name: x accepted" $? "status $s"
    [ "$(curl -s "$url/v1/models" | "$PY" -c 'import json,sys; print([m["id"] for m in json.load(sys.stdin)["data"]])')" = "['x', 'y']" ]
    check "/v1/models lists x and y; --ctx-size taken" $? "$(curl -s "$url/v1/models")"
    stop
fi

# --- -np 1, an inline template, --max-model-len ---
if start parallel -m "$model" -np 1 --max-model-len 4096 --no-prefix-cache \
        --chat-template '{% for m in messages %}[{{ m.content }}]{% endfor %}'; then
    want=$("$DS_BIN" tokenize -m "$model" -p '[hi]' --ids 2>/dev/null | wc -w)
    s=$(post "$url/v1/chat/completions" "$(chat tiny)" "$T/i.json"  )
    got=$(json "$T/i.json" 'j["usage"]["prompt_tokens"]')
    [ "$s" = 200 ] && [ "$got" = "$want" ]
    check "inline --chat-template renders the prompt ($got = $want tokens of '[hi]')" $? "status $s: $(head -c 300 "$T/i.json")"
    long='{"model": "tiny", "prompt": "x", "max_tokens": 4000, "stream": true, "ignore_eos": true}'
    # metric NAME: its value in /metrics
    metric() { curl -s "$url/metrics" | sed -n "s/^vllm:$1{[^}]*} \([0-9.]*\)$/\1/p" | head -n 1; }
    # until NAME VALUE: waits for the state (60 s at most on a busy machine: never a fixed time)
    until_metric() {
        for _ in $(seq 1 600); do [ "$(metric "$1")" = "$2" ] && return 0; sleep 0.1; done
        return 1
    }
    curl -s -N "$url/v1/completions" -H 'Content-Type: application/json' -d "$long" >/dev/null &
    a=$!
    until_metric num_requests_running 1; r1=$?
    curl -s -N "$url/v1/completions" -H 'Content-Type: application/json' -d "$long" >/dev/null &
    b=$!
    until_metric num_requests_waiting 1; r2=$?
    running=$(metric num_requests_running)
    kill "$a" "$b" 2>/dev/null; wait "$a" "$b" 2>/dev/null
    [ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ "$running" = 1 ]
    check "-np 1: the second request waits (running 1, waiting 1)" $? \
        "first running: $r1, second waiting: $r2, running $running"
    stop
fi

# --- a template that does not compile ---
printf 'line one\n{%% if %%}\n' >"$T/bad.jinja"
timeout 60 "$DS_BIN" serve -m "$model" --port 0 --chat-template "$T/bad.jinja" >"$T/bad.out" 2>"$T/bad.err"
rc=$?
[ $rc -eq 1 ] && [ "$(grep -c '' "$T/bad.err")" -eq 1 ] && grep -q "$T/bad.jinja:2:[0-9]" "$T/bad.err"
check "a broken --chat-template: exit 1, one line naming FILE:2:COL" $? "exit $rc: $(head -c 400 "$T/bad.err")"
timeout 60 "$DS_BIN" serve -m "$model" --port 0 --chat-template "$T/no-such.jinja" >/dev/null 2>"$T/miss.err"
rc=$?
[ $rc -eq 1 ] && [ "$(grep -c '' "$T/miss.err")" -eq 1 ] && grep -q "no-such.jinja" "$T/miss.err"
check "a missing --chat-template file: exit 1, one line naming it" $? "exit $rc: $(cat "$T/miss.err")"

# --- IPv6 ---
if "$PY" -c 'import socket; s=socket.socket(socket.AF_INET6); s.bind(("::1", 0))' 2>/dev/null; then
    if start ipv6 -m "$model" --host ::1; then
        [ "$url" = "http://[::1]:$port" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://[::1]:$port/health")" = 200 ]
        check "--host ::1 serves on [::1]" $? "url $url"
        stop
    fi
    if start ipv6-brackets -m "$model" --host '[::1]'; then
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://[::1]:$port/v1/models")" = 200 ]
        check "--host [::1] serves" $? "url $url"
        stop
    fi
    if start dual -m "$model" --host ::; then
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://[::1]:$port/health")" = 200 ] &&
            [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ]
        check "--host :: serves IPv6 and IPv4 (dual stack)" $? "url $url"
        stop
    fi
else
    echo "skip IPv6: this machine has no IPv6 loopback (::1)"
fi

# --- CORS ---
origin=https://app.example
if start cors -m "$model" --api-key k --allowed-origins "[\"$origin\", \"http://localhost:5173\"]" \
        --served-model-name c; then
    h=$(curl -s -D - -o /dev/null -X OPTIONS "$url/v1/chat/completions" -H "Origin: $origin" \
        -H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: authorization, content-type' | tr -d '\r')
    echo "$h" | grep -q '^HTTP/1.1 204' &&
        echo "$h" | grep -qi "^access-control-allow-origin: $origin$" &&
        echo "$h" | grep -qi '^access-control-allow-methods: .*POST' &&
        echo "$h" | grep -qi '^access-control-allow-headers: .*authorization' &&
        echo "$h" | grep -qi '^access-control-max-age: [0-9]'
    check "preflight from an allowed origin: 204 with Allow-Origin/Methods/Headers/Max-Age, no key needed" $? "$h"
    h=$(curl -s -D - -o /dev/null -X OPTIONS "$url/v1/chat/completions" -H 'Origin: https://evil.example' \
        -H 'Access-Control-Request-Method: POST' | tr -d '\r')
    echo "$h" | grep -q '^HTTP/1.1 400' && ! echo "$h" | grep -qi '^access-control-allow-origin'
    check "preflight from another origin: 400 without Allow-Origin" $? "$h"
    h=$(curl -s -D - -o "$T/c.json" "$url/v1/chat/completions" -H "Origin: $origin" -H 'Authorization: Bearer k' \
        -H 'Content-Type: application/json' -d "$(chat c)" | tr -d '\r')
    echo "$h" | grep -q '^HTTP/1.1 200' && echo "$h" | grep -qi "^access-control-allow-origin: $origin$"
    check "an answer to an allowed origin carries Access-Control-Allow-Origin" $? "$h"
    h=$(curl -s -D - -o "$T/c.json" "$url/v1/chat/completions" -H "Origin: $origin" \
        -H 'Content-Type: application/json' -d "$(chat c)" | tr -d '\r')
    echo "$h" | grep -q '^HTTP/1.1 401' && echo "$h" | grep -qi "^access-control-allow-origin: $origin$"
    check "the request itself still needs the key; its 401 carries Allow-Origin" $? "$h"
    h=$(curl -s -N -D - -o "$T/sse.txt" "$url/v1/chat/completions" -H "Origin: $origin" -H 'Authorization: Bearer k' \
        -H 'Content-Type: application/json' \
        -d '{"model": "c", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": true}' | tr -d '\r')
    echo "$h" | grep -qi '^content-type: text/event-stream' && echo "$h" | grep -qi "^access-control-allow-origin: $origin$" &&
        grep -q '^data: \[DONE\]' "$T/sse.txt"
    check "an SSE stream carries Allow-Origin" $? "$h"
    h=$(curl -s -D - -o /dev/null "$url/v1/models" -H 'Origin: https://evil.example' -H 'Authorization: Bearer k' | tr -d '\r')
    echo "$h" | grep -q '^HTTP/1.1 200' && ! echo "$h" | grep -qi '^access-control-allow-origin'
    check "no Allow-Origin for another origin" $? "$h"
    stop
fi
if start cors-comma -m "$model" --allowed-origins '*' --allowed-methods 'GET,POST' --allowed-headers 'Content-Type,Authorization'; then
    h=$(curl -s -D - -o /dev/null -X OPTIONS "$url/v1/models" -H 'Origin: https://any.example' \
        -H 'Access-Control-Request-Method: GET' | tr -d '\r')
    echo "$h" | grep -q '^HTTP/1.1 204' && echo "$h" | grep -qi '^access-control-allow-origin: \*$' &&
        echo "$h" | grep -qi '^access-control-allow-methods: GET, POST$' &&
        echo "$h" | grep -qi '^access-control-allow-headers: Content-Type, Authorization$'
    check "--allowed-origins '*' and comma lists" $? "$h"
    stop
fi
if start no-cors -m "$model"; then
    h=$(curl -s -D - -o /dev/null -X OPTIONS "$url/v1/chat/completions" -H "Origin: $origin" \
        -H 'Access-Control-Request-Method: POST' | tr -d '\r')
    h2=$(curl -s -D - -o /dev/null "$url/v1/models" -H "Origin: $origin" | tr -d '\r')
    ! echo "$h$h2" | grep -qi '^access-control-'
    check "without --allowed-origins: no CORS headers" $? "$h $h2"
    stop
fi
timeout 30 "$DS_BIN" serve -m "$model" --port 0 --allowed-origins '["a", 1]' >/dev/null 2>"$T/co.err"
rc=$?
[ $rc -eq 2 ] && grep -q -- '--allowed-origins: item 2 is not a string' "$T/co.err"
check "a bad --allowed-origins list: exit 2 naming it" $? "exit $rc: $(cat "$T/co.err")"

! grep -lE 'Sanitizer|runtime error' "$T"/server-*.log
check "no sanitizer report in any server's log" $? "see above"

echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
