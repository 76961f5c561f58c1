#!/usr/bin/env bash
# Every symbol libdeltaserve.a defines for the linker carries the project's
# prefix: ds_ for functions and variables, DS_ for constant tables. A program
# that links the library with others (jansson, libmicrohttpd, a fuzzer, an
# embedding application) must not meet a second `js_trim` or `wtf8_decode`;
# a helper used by one file only is static. One FAIL line names each symbol
# and the object that defines it.
set -u
lib="$DS_BUILD/libdeltaserve.a"
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
finish() { echo "RESULT passed=$passed failed=$failed"; exit $((failed > 0)); }

if ! command -v nm >/dev/null 2>&1; then fail symbols "nm (binutils) is not installed"; finish; fi
if [ ! -f "$lib" ]; then fail symbols "no $lib (make tests-bin builds it)"; finish; fi

# -A prefixes each line with "archive:object:"; defined globals are the
# lines "ARCHIVE:OBJECT:VALUE TYPE NAME" (T D B R W V ... as nm prints them).
if ! nm -g --defined-only -A "$lib" >"$DS_TMP/symbols.txt" 2>"$DS_TMP/symbols.err"; then
    fail symbols "nm failed on $lib: $(head -n 3 "$DS_TMP/symbols.err")"
    finish
fi
total=0 bad=0
while read -r where type name; do
    [ -n "${name:-}" ] || continue
    obj=${where%:*}; obj=${obj##*:}
    # AddressSanitizer adds one "__odr_asan.NAME" per global NAME: judge NAME
    base=${name#__odr_asan.}
    total=$((total + 1))
    case "$base" in
        ds_*|DS_*) ;;
        *) bad=$((bad + 1)); fail "symbol_$base" "$obj defines $type $name without the ds_ prefix (prefix it, or make it static)" ;;
    esac
done <"$DS_TMP/symbols.txt"

# a library that lists nothing would pass vacuously
if [ "$total" -lt 100 ]; then
    fail symbols_listed "only $total defined symbols found in $lib"
else
    ok symbols_listed
fi
echo "# $total defined symbols, $bad without the prefix"
[ "$bad" -eq 0 ] && ok symbols_prefixed
finish
