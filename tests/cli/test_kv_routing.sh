#!/usr/bin/env bash
# llm-d's precise prefix routing played against a real server: runs
# tests/scale/predict_cached.py (a subscriber and index with llm-d's key
# scheme and sequence rules; 300 requests, each one's cached_tokens predicted
# from the KV events before it is sent; evictions, a restart, lost batches
# refilled from the replay socket), then chats with images on the tiny model
# with a vision tower, keyed from the render answers' features as llm-d keys
# them. Prints ok/FAIL lines and
# "RESULT passed=N failed=M". Env: DS_BIN, DS_TMP, DS_ROOT (tests/run.sh).
set -u
: "${DS_BIN:?}" "${DS_TMP:?}" "${DS_ROOT:?}"
exec /usr/bin/python3 "$DS_ROOT/tests/scale/predict_cached.py"
