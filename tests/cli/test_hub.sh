#!/usr/bin/env bash
# test_hub.sh - `deltaserve pull ORG/NAME[:QUANT]` and `serve -hf` against a
# stand-in of the Hugging Face hub's API (hub_standin.py, on 127.0.0.1): the
# file QUANT picks among several, the hub cache's layout (blobs/, snapshots/
# links, refs/main) and no second download, split shards, an interrupted
# download resumed with a Range request, a bad checksum refused and the file
# removed, HF_TOKEN sent and a 401 explained, --offline with and without the
# cache, and a server started with -hf answering a chat request.
#
# Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
# Env: DS_BIN, DS_TMP, DS_ROOT (tests/run.sh).
set -u
: "${DS_BIN:?}" "${DS_TMP:?}" "${DS_ROOT:?}"
PY=/usr/bin/python3
T=$(mktemp -d "$DS_TMP/hub.XXXXXX")
ulimit -c 0
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; shift 2; for l in "$@"; do echo "     $l"; done; failed=$((failed + 1)); }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; }
trap cleanup EXIT

# --- the repositories: a real model (the one served) and stand-in files ---
# (the mmproj is a real tower: generate -hf loads the one beside the model)
if ! "$DS_BIN" make-model --shape tiny --dtype q8_0 --seed 3 --out "$T/q8_0.gguf" --mtp-out "$T/mtp.gguf" \
        --mmproj "$T/mmproj.bin" --vision-layers 1 >/dev/null 2>"$T/mm.err"; then
    fail make-model "$(cat "$T/mm.err")"; echo "RESULT passed=$passed failed=$failed"; exit 1
fi
fake() { head -c "$2" /dev/urandom >"$T/$1"; }
fake q4_k_m.gguf 6000; fake iq4.bin 3000; fake q4ks.bin 3100
fake shard1.bin 4000; fake shard2.bin 3000; fake big8.bin 1000; fake flaky.bin 400000; fake bad.bin 5000
echo "# a tiny test model" >"$T/readme.md"
C1=1111111111111111111111111111111111111111 C2=2222222222222222222222222222222222222222
cat >"$T/config.json" <<JSON
{"repos": {
 "test/tiny-GGUF": {"commit": "$C1", "lfs": ["tiny-IQ4_XS.gguf", "tiny-Q4_K_M.gguf", "tiny-Q4_K_S.gguf",
     "tiny-Q8_0.gguf", "mmproj-tiny-F16.gguf", "mtp-tiny-Q8_0.gguf"],
   "files": {"README.md": "$T/readme.md", "tiny-IQ4_XS.gguf": "$T/iq4.bin", "tiny-Q4_K_M.gguf": "$T/q4_k_m.gguf",
     "tiny-Q4_K_S.gguf": "$T/q4ks.bin", "tiny-Q8_0.gguf": "$T/q8_0.gguf", "mmproj-tiny-F16.gguf": "$T/mmproj.bin",
     "mtp-tiny-Q8_0.gguf": "$T/mtp.gguf"}},
 "test/split-GGUF": {"commit": "$C2", "lfs": ["Q6_K/big-Q6_K-00001-of-00002.gguf", "Q6_K/big-Q6_K-00002-of-00002.gguf", "big-Q8_0.gguf"],
   "files": {"Q6_K/big-Q6_K-00001-of-00002.gguf": "$T/shard1.bin", "Q6_K/big-Q6_K-00002-of-00002.gguf": "$T/shard2.bin",
     "big-Q8_0.gguf": "$T/big8.bin"}},
 "test/flaky-GGUF": {"commit": "$C2", "lfs": ["flaky-Q4_K_M.gguf"], "cut_once": ["flaky-Q4_K_M.gguf"],
   "files": {"flaky-Q4_K_M.gguf": "$T/flaky.bin"}},
 "test/bad-GGUF": {"commit": "$C2", "lfs": ["bad-Q4_K_M.gguf"], "wrong_sha": ["bad-Q4_K_M.gguf"],
   "files": {"bad-Q4_K_M.gguf": "$T/bad.bin"}},
 "test/gated-GGUF": {"commit": "$C2", "lfs": ["gated-Q4_K_M.gguf"], "token": "hf_test_secret",
   "files": {"gated-Q4_K_M.gguf": "$T/big8.bin"}},
 "test/private-GGUF": {"commit": "$C2", "lfs": ["p-Q4_K_M.gguf"], "token": "hf_test_secret", "private": true,
   "files": {"p-Q4_K_M.gguf": "$T/big8.bin"}}
}}
JSON
"$PY" "$DS_ROOT/tests/cli/hub_standin.py" "$T/config.json" "$T/port" "$T/hub.log" 2>"$T/standin.err" &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$T/port" ] && break; kill -0 "${pids[0]}" 2>/dev/null || break; sleep 0.1; done
if [ ! -s "$T/port" ]; then
    fail stand-in "the hub stand-in did not start" "$(cat "$T/standin.err")"
    echo "RESULT passed=$passed failed=$failed"; exit 1
fi
export HF_ENDPOINT="http://127.0.0.1:$(cat "$T/port")" HF_HOME="$T/hf"
unset HF_TOKEN HF_HUB_CACHE HUGGINGFACE_HUB_CACHE HF_HUB_OFFLINE
REPO="$T/hf/hub/models--test--tiny-GGUF"

# pull ARGS...: runs `deltaserve pull`, stdout to $T/out, stderr to $T/err, exit code in $rc
pull() { timeout 60 "$DS_BIN" pull "$@" >"$T/out" 2>"$T/err"; rc=$?; }
sane() { ! grep -qE 'Sanitizer|runtime error|Segmentation' "$T/err"; }
resolves() { grep -c '/resolve/' "$T/hub.log"; }

# --- the quantization picked, the cache layout ---
pull test/tiny-GGUF
want="$REPO/snapshots/$C1/tiny-Q4_K_M.gguf"
if [ "$rc" -ne 0 ] || ! sane; then fail default-quant "exit $rc" "$(cat "$T/err")"
elif [ "$(cat "$T/out")" != "$want" ]; then fail default-quant "printed '$(cat "$T/out")', expected $want"
elif ! cmp -s "$want" "$T/q4_k_m.gguf"; then fail default-quant "the file differs from the repository's"
else ok "default-quant: no QUANT picks tiny-Q4_K_M.gguf among 4"; fi

sha=$(sha256sum "$T/q4_k_m.gguf" | cut -d' ' -f1)
link=$(readlink "$want")
if [ "$link" != "../../blobs/$sha" ]; then fail cache-layout "snapshot link is '$link', expected ../../blobs/$sha"
elif [ ! -f "$REPO/blobs/$sha" ] || [ -L "$REPO/blobs/$sha" ]; then fail cache-layout "no blob file blobs/$sha"
elif [ "$(cat "$REPO/refs/main" 2>/dev/null)" != "$C1" ]; then fail cache-layout "refs/main holds '$(cat "$REPO/refs/main" 2>/dev/null)'"
elif ls "$REPO/blobs" | grep -q 'incomplete\|lock'; then fail cache-layout "leftovers in blobs/: $(ls "$REPO/blobs")"
else ok "cache-layout: blobs/SHA256, snapshots/COMMIT/NAME -> ../../blobs/SHA256, refs/main = commit"; fi

if [ -L "$REPO/snapshots/$C1/mmproj-tiny-F16.gguf" ] && cmp -s "$REPO/snapshots/$C1/mmproj-tiny-F16.gguf" "$T/mmproj.bin" &&
   cmp -s "$REPO/snapshots/$C1/mtp-tiny-Q8_0.gguf" "$T/mtp.gguf" && grep -q "mtp $REPO/snapshots/$C1/mtp-tiny-Q8_0.gguf" "$T/err" &&
   [ ! -e "$REPO/snapshots/$C1/tiny-Q8_0.gguf" ] && [ ! -e "$REPO/snapshots/$C1/README.md" ]; then
    ok "sidecars: the mmproj and MTP files come along, nothing else"
else fail sidecars "snapshot: $(ls "$REPO/snapshots/$C1" | tr '\n' ' ')" "$(cat "$T/err")"; fi

pull test/tiny-GGUF:q8_0
if [ "$rc" -eq 0 ] && [ "$(cat "$T/out")" = "$REPO/snapshots/$C1/tiny-Q8_0.gguf" ] && cmp -s "$(cat "$T/out")" "$T/q8_0.gguf"; then
    ok "quant-any-case: :q8_0 picks tiny-Q8_0.gguf"
else fail quant-any-case "exit $rc, printed '$(cat "$T/out")'" "$(cat "$T/err")"; fi

pull test/tiny-GGUF:Q4_K_S
if [ "$rc" -eq 0 ] && [ "$(basename "$(cat "$T/out")")" = tiny-Q4_K_S.gguf ]; then ok "quant-exact: :Q4_K_S picks tiny-Q4_K_S.gguf, not Q4_K_M"
else fail quant-exact "exit $rc, printed '$(cat "$T/out")'" "$(cat "$T/err")"; fi

before=$(resolves)
pull test/tiny-GGUF:Q8_0
if [ "$rc" -eq 0 ] && [ "$(resolves)" -eq "$before" ] && grep -q '0 downloaded' "$T/err"; then
    ok "no-second-download: a second pull asks the hub for no file"
else fail no-second-download "exit $rc, $(( $(resolves) - before )) file requests" "$(cat "$T/err")"; fi

pull test/tiny-GGUF:Q5_K_M
if [ "$rc" -eq 1 ] && grep -q "Q5_K_M" "$T/err" && grep -q "tiny-IQ4_XS.gguf" "$T/err" && [ ! -s "$T/out" ] && sane; then
    ok "quant-missing: $(cat "$T/err")"
else fail quant-missing "exit $rc" "$(cat "$T/err")"; fi

before=$(wc -l <"$T/hub.log")
for bad in not-a-repo "a/b/c" "../x" "org/name:" "org/name:Q4 K"; do
    pull "$bad"
    if [ "$rc" -eq 2 ] && grep -q "ORG/NAME\|quantization after" "$T/err" && [ "$(wc -l <"$T/hub.log")" -eq "$before" ]; then ok "bad-spec '$bad': $(cat "$T/err")"
    else fail "bad-spec '$bad'" "exit $rc" "$(cat "$T/err")"; fi
done
pull test/tiny-GGUF --revision ../../escape
if [ "$rc" -eq 1 ] && grep -q "not a revision" "$T/err" && [ ! -e "$T/hf/escape" ]; then ok "bad-revision: $(cat "$T/err")"
else fail bad-revision "exit $rc" "$(cat "$T/err")"; fi

# --- split shards ---
pull test/split-GGUF:Q6_K
S="$T/hf/hub/models--test--split-GGUF/snapshots/$C2/Q6_K"
if [ "$rc" -eq 0 ] && [ "$(cat "$T/out")" = "$S/big-Q6_K-00001-of-00002.gguf" ] &&
   cmp -s "$S/big-Q6_K-00001-of-00002.gguf" "$T/shard1.bin" && cmp -s "$S/big-Q6_K-00002-of-00002.gguf" "$T/shard2.bin" &&
   [ "$(readlink "$S/big-Q6_K-00002-of-00002.gguf")" = "../../../blobs/$(sha256sum "$T/shard2.bin" | cut -d' ' -f1)" ]; then
    ok "split: both shards of a split GGUF in a subfolder, the first one printed"
else fail split "exit $rc, printed '$(cat "$T/out")'" "$(cat "$T/err")" "$(ls -l "$S" 2>&1)"; fi

# --- an interrupted download resumed ---
pull test/flaky-GGUF
F="$T/hf/hub/models--test--flaky-GGUF/snapshots/$C2/flaky-Q4_K_M.gguf"
ranges=$(grep '^GET /cdn/' "$T/hub.log" | grep -c 'range=bytes=[1-9][0-9]*-')
if [ "$rc" -eq 0 ] && cmp -s "$F" "$T/flaky.bin" && [ "$ranges" -ge 1 ]; then
    ok "resume: the download cut at half went on with $(grep '^GET /cdn/' "$T/hub.log" | grep -o 'range=bytes=[1-9][0-9]*-' | head -1)"
else fail resume "exit $rc, $ranges Range requests" "$(cat "$T/err")" "$(grep cdn "$T/hub.log")"; fi

# --- a bad checksum ---
pull test/bad-GGUF
B="$T/hf/hub/models--test--bad-GGUF"
if [ "$rc" -eq 1 ] && grep -q "checksum mismatch" "$T/err" && grep -q "removed" "$T/err" &&
   [ -z "$(ls -A "$B/blobs")" ] && [ ! -e "$B/snapshots/$C2/bad-Q4_K_M.gguf" ] && sane; then
    ok "bad-checksum: $(cat "$T/err")"
else fail bad-checksum "exit $rc, blobs: $(ls -A "$B/blobs" 2>&1)" "$(cat "$T/err")"; fi

# --- HF_TOKEN ---
pull test/gated-GGUF
G="$T/hf/hub/models--test--gated-GGUF"
if [ "$rc" -eq 1 ] && grep -q "401" "$T/err" && grep -q "HF_TOKEN" "$T/err" && grep -q "gated-Q4_K_M.gguf" "$T/err" &&
   [ -z "$(ls -A "$G/blobs" 2>/dev/null)" ] && sane; then ok "401-gated: $(cat "$T/err")"
else fail 401-gated "exit $rc, blobs: $(ls -A "$G/blobs" 2>&1)" "$(cat "$T/err")"; fi
pull test/private-GGUF
if [ "$rc" -eq 1 ] && grep -q "401" "$T/err" && grep -q "HF_TOKEN" "$T/err" && sane; then ok "401-private: $(cat "$T/err")"
else fail 401-private "exit $rc" "$(cat "$T/err")"; fi
HF_TOKEN=hf_wrong pull test/gated-GGUF
if [ "$rc" -eq 1 ] && grep -q "refused HF_TOKEN" "$T/err"; then ok "401-wrong-token: $(cat "$T/err")"
else fail 401-wrong-token "exit $rc" "$(cat "$T/err")"; fi
HF_TOKEN=hf_test_secret pull test/gated-GGUF
if [ "$rc" -eq 0 ] && cmp -s "$(cat "$T/out")" "$T/big8.bin" &&
   grep '/api/models/test/gated-GGUF/' "$T/hub.log" | tail -1 | grep -q 'auth=Bearer hf_test_secret' &&
   grep '/test/gated-GGUF/resolve/' "$T/hub.log" | tail -1 | grep -q 'auth=Bearer hf_test_secret'; then
    ok "token: HF_TOKEN goes as a Bearer token to the listing and the download"
else fail token "exit $rc" "$(cat "$T/err")" "$(grep gated "$T/hub.log")"; fi

# --- offline ---
before=$(wc -l <"$T/hub.log")
HF_ENDPOINT=http://127.0.0.1:1 pull test/tiny-GGUF:Q8_0 --offline
if [ "$rc" -eq 0 ] && [ "$(cat "$T/out")" = "$REPO/snapshots/$C1/tiny-Q8_0.gguf" ] && [ "$(wc -l <"$T/hub.log")" -eq "$before" ]; then
    ok "offline-cached: --offline finds the cached file without the network"
else fail offline-cached "exit $rc, printed '$(cat "$T/out")'" "$(cat "$T/err")"; fi
HF_HUB_OFFLINE=1 pull test/tiny-GGUF:IQ4_XS
if [ "$rc" -eq 1 ] && grep -q "offline" "$T/err" && grep -q "IQ4_XS" "$T/err" && grep -q "tiny-Q8_0.gguf" "$T/err" &&
   [ "$(wc -l <"$T/hub.log")" -eq "$before" ]; then
    ok "offline-not-cached: $(cat "$T/err")"
else fail offline-not-cached "exit $rc" "$(cat "$T/err")"; fi
pull test/never-GGUF --offline
if [ "$rc" -eq 1 ] && grep -q "offline" "$T/err" && grep -q "not in the hub cache" "$T/err"; then
    ok "offline-no-repo: $(cat "$T/err")"
else fail offline-no-repo "exit $rc" "$(cat "$T/err")"; fi
HF_ENDPOINT=http://127.0.0.1:1 pull test/tiny-GGUF:Q8_0
if [ "$rc" -eq 0 ] && [ "$(cat "$T/out")" = "$REPO/snapshots/$C1/tiny-Q8_0.gguf" ] && grep -q "using the cached snapshot" "$T/err"; then
    ok "unreachable: with the hub out of reach the cache is used, and said so"
else fail unreachable "exit $rc" "$(cat "$T/err")"; fi

# --- generate -hf (from the cache) ---
timeout 60 "$DS_BIN" generate -hf test/tiny-GGUF:Q8_0 --offline -p "hello" -n 2 --temp 0 >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 0 ] && grep -q '^hello' "$T/out" && grep -q "tiny-Q8_0.gguf (0 of 3 files downloaded)" "$T/err"; then
    ok "generate-hf: generate -hf --offline runs the cached model"
else fail generate-hf "exit $rc" "$(cat "$T/err")"; fi
timeout 60 "$DS_BIN" generate -hf test/tiny-GGUF -m "$T/q8_0.gguf" -p "hello" >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 2 ] && grep -q -- "-m .* and -hf .* both name a model" "$T/err"; then ok "m-and-hf: $(cat "$T/err")"
else fail m-and-hf "exit $rc" "$(cat "$T/err")"; fi

# --- serve -hf answers a chat request ---
. "$DS_ROOT/tests/cli/server_ready.sh"
"$DS_BIN" serve -hf test/tiny-GGUF:Q8_0 --port 0 --threads 2 --kv-mb 4 --state-mb 4 --cache-state-mb 4 \
    --spec-state-mb 4 --spec-policy request >"$T/serve.out" 2>"$T/serve.err" &
srv=$!
pids+=($srv)
if ! wait_ready "$T/serve.err" "$srv" 600; then
    fail serve-hf "the server did not start" "$(cat "$T/serve.err")"
else
    body='{"model":"test/tiny-GGUF:Q8_0","messages":[{"role":"user","content":"hi"}],"max_tokens":4}'
    code=$(curl -s -o "$T/chat.json" -w '%{http_code}' -H 'Content-Type: application/json' -d "$body" \
        "http://127.0.0.1:$port/v1/chat/completions")
    if [ "$code" = 200 ] && grep -q '"choices"' "$T/chat.json" && grep -q "loading $REPO/snapshots/$C1/tiny-Q8_0.gguf" "$T/serve.err"; then
        ok "serve-hf: serve -hf test/tiny-GGUF:Q8_0 loads the cached file and answers a chat request for that model"
    else fail serve-hf "HTTP $code" "$(head -c 400 "$T/chat.json")" "$(cat "$T/serve.err")"; fi
    # the repository's main file has no MTP head: drafts can only come from mtp-tiny-Q8_0.gguf beside it
    drafts=$(curl -s "http://127.0.0.1:$port/metrics" | awk '$1 ~ /^vllm:spec_decode_num_draft_tokens_total/ {print $2}')
    if awk -v d="${drafts:-0}" 'BEGIN {exit !(d > 0)}'; then ok "serve-hf-mtp: the separate MTP head drafts ($drafts draft tokens)"
    else fail serve-hf-mtp "no draft tokens: ${drafts:-none}" "$(cat "$T/serve.err")"; fi
fi
kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null

echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
