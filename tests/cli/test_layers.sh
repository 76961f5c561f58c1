#!/usr/bin/env bash
# test_layers.sh - the folders of src/ are layers, each built on the ones
# before it in LAYERS. A file may include headers of its own layer and of
# earlier ones; an include of a later layer (or of a folder that is not a
# layer) is a FAIL naming file:line. A folder of src/ missing from LAYERS is
# a FAIL too, so that a new layer gets its place in the order.
#
# The checker is first run on a small made-up tree with known violations, so
# that a checker that finds nothing cannot pass.
#
# Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
# Uses $DS_ROOT (default the repository) and $DS_TMP (default /tmp).
set -u
ROOT=${DS_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
T=$(mktemp -d "${DS_TMP:-/tmp}/layers.XXXXXX")
trap 'rm -rf "$T"' EXIT
passed=0 failed=0

ok() { echo "ok $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; shift 2; for l in "$@"; do echo "     $l"; done; failed=$((failed + 1)); }

# Lowest first. jinja has no folder yet: the Jinja engine moves there from
# src/server, and its place is already here.
LAYERS=(common kernels loading image tokenizer model engine grammar jinja server cli)

rank() { # layer name -> its index in LAYERS, or nothing
    local i
    for i in "${!LAYERS[@]}"; do [ "${LAYERS[$i]}" = "$1" ] && { echo "$i"; return; }; done
}

# check SRC: prints one line per violation under SRC, nothing when clean
check() {
    local src=$1 dir layer own file line target r
    for dir in "$src"/*/; do
        layer=$(basename "$dir")
        own=$(rank "$layer")
        if [ -z "$own" ]; then
            echo "src/$layer/: a folder that is not in the layer order (add it to LAYERS in tests/cli/test_layers.sh)"
            continue
        fi
        # every '#include "folder/...' of every .c and .h below the layer's folder
        while IFS= read -r line; do
            file=${line%%:*}; line=${line#*:}
            local no=${line%%:*} text=${line#*:}
            target=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"/]*)\/.*/\1/' <<<"$text")
            r=$(rank "$target")
            if [ -z "$r" ]; then
                echo "src/${file#"$src"/}:$no: includes \"$target/...\", which is not a layer"
            elif [ "$r" -gt "$own" ]; then
                echo "src/${file#"$src"/}:$no: $layer includes $target, a layer above it"
            fi
        done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"/]+/' --include='*.c' --include='*.h' "$dir" | sort)
    done
}

# --- the checker on a made-up tree: it must name each violation ---
mkdir -p "$T/src/common" "$T/src/loading" "$T/src/tokenizer" "$T/src/model" "$T/src/kernels/x86" "$T/src/extra"
printf '#include "common/status.h"\n#include "tokenizer/vocab.h"\n' >"$T/src/loading/bad.c"
printf '#include "loading/gguf.h"\n#include "model/model.h"\n' >"$T/src/tokenizer/up.h"
printf '#include "kernels/ops.h"\n  #  include "engine/engine.h"\n' >"$T/src/kernels/x86/bad_avx2.c"
printf '#include "jinja/jinja.h"\n#include "nowhere/x.h"\n#include <stdio.h>\n#include "local.h"\n' >"$T/src/model/m.c"
printf '#include "common/status.h"\n' >"$T/src/extra/x.c"
got=$(check "$T/src")
want='src/extra/: a folder that is not in the layer order (add it to LAYERS in tests/cli/test_layers.sh)
src/kernels/x86/bad_avx2.c:2: kernels includes engine, a layer above it
src/loading/bad.c:2: loading includes tokenizer, a layer above it
src/model/m.c:1: model includes jinja, a layer above it
src/model/m.c:2: includes "nowhere/...", which is not a layer
src/tokenizer/up.h:2: tokenizer includes model, a layer above it'
if [ "$got" = "$want" ]; then ok "checker finds includes against the order"
else fail "checker finds includes against the order" "unexpected report:" "$got"; fi

# --- the repository ---
[ -d "$ROOT/src" ] || { fail "src layers" "no $ROOT/src"; echo "RESULT passed=$passed failed=$failed"; exit 1; }
got=$(check "$ROOT/src")
if [ -z "$got" ]; then ok "src includes follow the layer order (${LAYERS[*]})"
else
    mapfile -t lines <<<"$got"
    fail "src includes follow the layer order (${LAYERS[*]})" "${#lines[@]} include(s) against it:" "${lines[@]}"
fi

echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
