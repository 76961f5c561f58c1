#!/usr/bin/env bash
# test_help_readme.sh - README.md and every command's --help list the same
# options (tests/cli/help_readme.py compares them, command by command).
#
# The comparison is checked too: a README with one option taken out of the
# serve synopsis, and one with an option added that no --help has, must each
# make it fail naming that option (a check that cannot fail proves nothing).
#
# Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
# Env: DS_BIN, DS_TMP, DS_ROOT (tests/run.sh).
set -u
: "${DS_BIN:?}" "${DS_TMP:?}" "${DS_ROOT:?}"
PY=/usr/bin/python3
T=$(mktemp -d "$DS_TMP/help-readme.XXXXXX")
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
CHECK="$DS_ROOT/tests/cli/help_readme.py"

"$PY" "$CHECK" "$DS_BIN" "$DS_ROOT/README.md" >"$T/out" 2>&1
rc=$?
while IFS= read -r line; do
    case "$line" in
        "ok "*) ok "help = README: ${line#ok }" ;;
        "FAIL "*) fail "help = README" "${line#FAIL }" ;;
    esac
done <"$T/out"
[ $rc -eq 0 ] || grep -q '^FAIL ' "$T/out" || fail "help = README" "the check exited $rc: $(tail -n 5 "$T/out")"
grep -q '^ok serve' "$T/out" || grep -q '^FAIL serve' "$T/out" || fail "help = README" "serve was not checked"

# an option missing from the README's serve synopsis
sed 's/ \[--api-key KEY\] \[--served-model-name NAME\.\.\.\]/ [--served-model-name NAME...]/' "$DS_ROOT/README.md" >"$T/missing.md"
if cmp -s "$DS_ROOT/README.md" "$T/missing.md"; then
    fail "the check catches a missing option" "could not take --api-key out of the serve synopsis"
else
    "$PY" "$CHECK" "$DS_BIN" "$T/missing.md" >"$T/missing.out" 2>&1
    rc=$?
    [ $rc -ne 0 ] && grep -q '^FAIL serve: in --help, not in README.md: .*--api-key' "$T/missing.out"
    [ $? -eq 0 ] && ok "the check catches --api-key missing from the README" ||
        fail "the check catches a missing option" "exit $rc: $(cat "$T/missing.out")"
fi
# an option the README names that --help does not
sed 's/ \[--chunks K\]/ [--chunks K] [--no-such-option]/' "$DS_ROOT/README.md" >"$T/extra.md"
"$PY" "$CHECK" "$DS_BIN" "$T/extra.md" >"$T/extra.out" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q '^FAIL perplexity: in README.md, not in --help: --no-such-option' "$T/extra.out"
[ $? -eq 0 ] && ok "the check catches a README option that --help lacks" ||
    fail "the check catches an extra option" "exit $rc: $(cat "$T/extra.out")"

echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
