#!/usr/bin/env bash
# Installs what building and testing deltaserve need, if it is missing:
# Debian packages (compiler, libraries, numpy for the reference model).
# Safe to run again; does nothing when everything is there.
set -euo pipefail

debs=(gcc make pkg-config libcjson-dev python3 python3-numpy)
missing=()
for p in "${debs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: installing Debian packages: ${missing[*]}"
    sudo_cmd=""
    [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi
