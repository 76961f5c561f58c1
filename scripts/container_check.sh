#!/usr/bin/env bash
# make container: builds the image (Dockerfile) with docker or podman, runs it, waits until
# /health answers 200 on the container's own port 8080 (asked from inside, with the curl the
# image's HEALTHCHECK uses), checks it runs as a non-root user, then stops it (SIGTERM: the
# server drains) and removes it. Where no container runtime works (none installed, or a client
# without a daemon), it says why and exits 0: the image cannot be built there.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^#define DS_VERSION "\(.*\)"$/\1/p' src/common/version.h)
image=${DS_IMAGE:-deltaserve:$version}

runtime="" why=()
for r in docker podman; do
    if ! command -v "$r" >/dev/null 2>&1; then why+=("$r: not installed"); continue; fi
    if out=$("$r" info 2>&1); then runtime=$r; break; fi
    why+=("$r: $(printf '%s\n' "$out" | grep -v '^\s*$' | tail -n 1)")
done
if [ -z "$runtime" ]; then
    echo "container: skipped, no container runtime works here:"
    printf '  %s\n' "${why[@]}"
    exit 0
fi

echo "container: building $image with $runtime"
# podman writes OCI images by default, which have no HEALTHCHECK: ask for Docker's format
fmt=()
[ "$runtime" = podman ] && fmt=(--format docker)
"$runtime" build "${fmt[@]}" -t "$image" .
name="deltaserve-check-$$"
trap '"$runtime" rm -f "$name" >/dev/null 2>&1 || true' EXIT
"$runtime" run -d --name "$name" "$image" >/dev/null
code=""
for _ in $(seq 1 120); do
    if [ "$("$runtime" inspect -f '{{.State.Running}}' "$name" 2>/dev/null)" != true ]; then
        echo "container: FAIL: the container stopped before /health answered; its log:"
        "$runtime" logs "$name" 2>&1 | tail -n 20 | sed 's/^/  /'
        exit 1
    fi
    code=$("$runtime" exec "$name" curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8080/health || true)
    [ "$code" = 200 ] && break
    sleep 1
done
if [ "$code" != 200 ]; then
    echo "container: FAIL: /health answered '${code:-nothing}' after 120 s; the log:"
    "$runtime" logs "$name" 2>&1 | tail -n 20 | sed 's/^/  /'
    exit 1
fi
uid=$("$runtime" exec "$name" id -u)
if [ "$uid" = 0 ]; then
    echo "container: FAIL: the server runs as root"
    exit 1
fi
"$runtime" stop -t 30 "$name" >/dev/null
echo "container: ok: $image answered /health with 200 inside the container, as uid $uid"
