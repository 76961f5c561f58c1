#!/usr/bin/env bash
# make fuzz-smoke: for every fuzz target in $FUZZ_BUILD (built by make fuzz),
#   1. replays the reproducers in fuzz/regressions/<target>/ (crashes found
#      before, fixed since) and the seeds in fuzz/corpus/<target>/;
#   2. fuzzes for FUZZ_SECONDS (default 20) on a copy of the seed corpus in a
#      scratch folder, so the repository is never modified.
# Fails when any target crashes, leaks, times out or breaks an invariant; the
# input that did it is kept in $FUZZ_BUILD/crashes/<target>/ - add it to
# fuzz/regressions/<target>/ together with the fix.
set -u
cd "$(dirname "$0")/.."
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
tmp=$(mktemp -d /tmp/deltaserve-fuzz.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export TMPDIR="$tmp"   # fuzz_hf_config makes its model directories here
failed=()
for bin in "$FUZZ_BUILD"/fuzz_*; do
    [ -x "$bin" ] || continue
    t=$(basename "$bin")
    log="$tmp/$t.log"
    start=$SECONDS
    inputs=()
    for f in fuzz/regressions/"$t"/* fuzz/corpus/"$t"/*; do [ -f "$f" ] && inputs+=("$f"); done
    if ((${#inputs[@]})) && ! "$bin" -rss_limit_mb=2048 -timeout=10 "${inputs[@]}" >"$log" 2>&1; then
        echo "FAIL $t: a regression or seed input fails again"; grep -E '^(replay|Running:|==[0-9]+==ERROR|SUMMARY|fuzz invariant)' "$log" | tail -n 8 | sed 's/^/    /'
        failed+=("$t"); continue
    fi
    mkdir -p "$tmp/corpus/$t" "$tmp/artifacts/$t"
    cp fuzz/corpus/"$t"/* "$tmp/corpus/$t/" 2>/dev/null
    "$bin" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$tmp/artifacts/$t/" "$tmp/corpus/$t" >"$log" 2>&1
    rc=$?
    runs=$(grep -E '^stat::number_of_executed_units:' "$log" | awk '{print $2}')
    speed=$(grep -E '^stat::average_exec_per_sec:' "$log" | awk '{print $2}')
    if [ "$rc" -ne 0 ]; then
        mkdir -p "$FUZZ_BUILD/crashes/$t"
        cp "$tmp/artifacts/$t/"* "$FUZZ_BUILD/crashes/$t/" 2>/dev/null
        echo "FAIL $t (exit $rc): input kept in $FUZZ_BUILD/crashes/$t/"
        grep -E '==[0-9]+==ERROR|SUMMARY|fuzz invariant|runtime error|deadly signal|Test unit written' "$log" | head -n 8 | sed 's/^/    /'
        failed+=("$t")
    else
        printf '%-24s ok  %8s runs  %6s exec/s  %4ds\n' "$t" "${runs:-?}" "${speed:-?}" $((SECONDS - start))
    fi
done
if ((${#failed[@]})); then
    echo "fuzz-smoke: failing: ${failed[*]}"
    exit 1
fi
echo "fuzz-smoke: all targets passed"
