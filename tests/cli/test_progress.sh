#!/usr/bin/env bash
# test_progress.sh - long work shows a progress bar on a terminal, and only there.
#
# make-model and loading a model's weights (here through `generate`) run under
# `script`, which gives them a terminal: the bar is drawn and ends at 100%.
# The same commands with stderr in a file draw nothing.
# Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
# Env: DS_BIN, DS_TMP (tests/run.sh).
set -u
: "${DS_BIN:?}" "${DS_TMP:?}"
T=$(mktemp -d "$DS_TMP/progress.XXXXXX")
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
if ! command -v script >/dev/null; then
    bad "script" "the script command (bsdutils) is missing: make test installs it"
    echo "RESULT passed=$passed failed=$failed"; exit 1
fi
# on_terminal OUT CMD... : runs CMD with a terminal as stdout and stderr, its output into OUT
on_terminal() {
    local out=$1; shift
    local cmd
    printf -v cmd '%q ' "$@"
    timeout 120 script -qec "$cmd" /dev/null >"$out" 2>&1 </dev/null
}
model="$T/tiny.gguf"
on_terminal "$T/make.tty" "$DS_BIN" make-model --shape tiny --out "$model"
if grep -aq "make-model.*100%" "$T/make.tty"; then ok "make-model draws a bar that reaches 100% on a terminal"
else bad "make-model bar" "$(tr '\r' '\n' <"$T/make.tty" | tail -n 3)"; fi
on_terminal "$T/gen.tty" "$DS_BIN" generate -m "$model" -p x -n 2
if grep -aq "loading weights.*100%" "$T/gen.tty"; then ok "loading a model draws a bar that reaches 100% on a terminal"
else bad "loading bar" "$(tr '\r' '\n' <"$T/gen.tty" | tail -n 3)"; fi
"$DS_BIN" make-model --shape tiny --out "$T/tiny2.gguf" >"$T/make.out" 2>"$T/make.err"
"$DS_BIN" generate -m "$model" -p x -n 2 >"$T/gen.out" 2>"$T/gen.err"
if ! grep -aq "%" "$T/make.err" && ! grep -aq "loading weights" "$T/gen.err"; then ok "no bar when stderr is not a terminal"
else bad "no bar off a terminal" "$(head -c 200 "$T/make.err" "$T/gen.err")"; fi
# stdout and stderr into one pipe: the text ends its line before the statistics begin theirs
"$DS_BIN" generate -m "$model" -p x -n 3 2>&1 | cat >"$T/gen.both"
if grep -aq "^prompt: [0-9]* tokens" "$T/gen.both"; then ok "generate: statistics on their own line when stdout and stderr share a pipe"
else bad "generate statistics line" "$(tail -c 200 "$T/gen.both")"; fi
echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
