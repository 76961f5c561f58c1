#!/usr/bin/env bash
# The container image's Dockerfile and the Kubernetes manifests (deploy/kubernetes), checked
# offline by tests/deploy/run.mjs: the Kubernetes schemas (kubernetes-models), the schemas of the
# InferencePool, llm-d's endpoint picker configuration and the Kustomization (tests/deploy/schemas),
# the promises of the Dockerfile (bookworm, the README's set-up and build, a non-root user, the
# health check, the ports), the cross-checks between the files (labels, ports, the event block),
# and that each broken copy in tests/deploy/fixtures is refused. The memory limit is held against
# what `deltaserve info` prints for the model the image serves, made here as the Makefile makes it.
set -u
cd "$DS_ROOT"
dir=tests/deploy
work="$DS_TMP/deploy_files"
mkdir -p "$work"

give_up() { # name, reason
    echo "FAIL $1: $2"
    echo "RESULT passed=0 failed=1"
    exit 1
}

command -v node >/dev/null || give_up setup "node is not installed (scripts/setup.sh installs it)"
if [ ! -f "$dir/node_modules/kubernetes-models/package.json" ]; then
    (cd "$dir" && npm ci --no-audit --no-fund >"$work/npm.log" 2>&1) ||
        give_up setup "npm ci in $dir failed: $(tail -n 3 "$work/npm.log" | tr '\n' ' ')"
fi

# the image's model: the Makefile's default-model recipe, with its output here
recipe=$(sed -n 's/^\t\$(BIN) \(make-model .*\) --out \$@$/\1/p' Makefile)
[ -n "$recipe" ] || give_up setup "no default-model recipe (\$(BIN) make-model ... --out \$@) in the Makefile"
# shellcheck disable=SC2086
"$DS_BIN" $recipe --out "$work/default.gguf" >"$work/make-model.log" 2>&1 ||
    give_up setup "make-model failed: $(tail -n 3 "$work/make-model.log" | tr '\n' ' ')"
mib=$("$DS_BIN" info -m "$work/default.gguf" | sed -n 's/^serve memory *at most \([0-9]*\) MiB.*/\1/p')
[ -n "$mib" ] || give_up setup "deltaserve info prints no 'serve memory' line"
version=$(sed -n 's/^#define DS_VERSION "\(.*\)"$/\1/p' src/common/version.h)

node "$dir/run.mjs" "$DS_ROOT" --serve-memory-mib "$mib" --version "$version"
