#!/usr/bin/env bash
# Runs every test of the suite and prints one closing line "N passed, N failed".
#
# A test program prints "ok NAME" / "FAIL NAME: ..." lines and ends with
# "RESULT passed=N failed=M". Three kinds are run:
#   $BUILD/tests/test_*         C unit tests (tests/unit/test_*.c)
#   tests/reference/test_*.py   checks against independent NumPy code (Debian's python3)
#   tests/cli/test_*.sh         end-to-end checks of the deltaserve command line
# Each gets DS_BIN (the deltaserve binary), DS_BUILD and DS_TMP (a scratch folder).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export DS_BUILD="$PWD/$BUILD" DS_BIN="$PWD/$BUILD/deltaserve" DS_ROOT="$PWD"
export DS_TMP=$(mktemp -d /tmp/deltaserve-tests.XXXXXX)
# under the sanitizers every engine also checks its bookkeeping after every step
# (ds_engine_check_invariants; a broken invariant aborts with its name)
if [ -n "${DS_SANITIZE:-}" ]; then export DS_CHECK_INVARIANTS=1; fi
trap 'rm -rf "$DS_TMP"' EXIT
PY=/usr/bin/python3
passed=0 failed=0 broken=()

run_one() { # name, command...
    local name=$1; shift
    local log="$DS_TMP/$(basename "$name").log" start=$SECONDS
    "$@" >"$log" 2>&1
    local rc=$?
    local line p f
    line=$(grep -E '^RESULT passed=[0-9]+ failed=[0-9]+$' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        p=0 f=1
        echo "FAIL $name: no RESULT line (exit $rc)"; tail -n 20 "$log" | sed 's/^/    /'
    else
        p=${line#RESULT passed=}; p=${p%% *}; f=${line##*failed=}
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $name: exit $rc"; tail -n 20 "$log" | sed 's/^/    /'; fi
        grep -E '^(FAIL|     )' "$log" | sed "s/^/    [$name] /"
    fi
    passed=$((passed + p)) failed=$((failed + f))
    [ "$f" -eq 0 ] || broken+=("$name")
    printf '%-40s %4d passed %3d failed  %4ds\n' "$name" "$p" "$f" $((SECONDS - start))
}

for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] && run_one "$(basename "$t")" "$t"
done
for t in tests/reference/test_*.py; do
    [ -f "$t" ] && run_one "$(basename "$t")" "$PY" "$t"
done
for t in tests/cli/test_*.sh; do
    [ -f "$t" ] && run_one "$(basename "$t")" bash "$t"
done

[ ${#broken[@]} -eq 0 ] || echo "failing: ${broken[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
