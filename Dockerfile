# deltaserve in a container: the default model served on 0.0.0.0:8080, KV events
# published on 5557 when the deployment asks for them (--kv-events-endpoint).
#
#   docker build -t deltaserve .
#   docker run --rm -p 8080:8080 deltaserve                   # flags after the image go to `serve`
#   docker run --rm -p 8080:8080 -p 5557:5557 deltaserve --kv-events-endpoint 'tcp://*:5557'
#
# Two stages. The build stage runs the README's own set-up (scripts/setup.sh, as
# root, so without sudo) and build (`make`: the binary and the default model it
# embeds). The runtime stage holds the binary, the model and only the shared
# libraries the binary loads: the Debian packages that own them are read off the
# built binary (ldd, dpkg -S) and installed at the versions it was built against,
# so the list never goes stale when the build gains a library.
# tests/cli/test_deploy_files.sh checks the promises made here; `make container`
# builds the image and waits for /health inside it.

FROM debian:bookworm-20250520-slim AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /src
# the set-up first, on its own layer: it changes far less often than the sources
COPY scripts/setup.sh scripts/setup.sh
# DS_SETUP_NPM=0: the image runs no test, so the npm packages of tests/ are left out
RUN DS_SETUP_NPM=0 bash scripts/setup.sh && rm -rf /var/lib/apt/lists/*
COPY Makefile ./
COPY src src
RUN make -j"$(nproc)" all \
 && for f in $(ldd build/deltaserve | awk '$3 ~ /^\// { print $3 }'); do \
        dpkg -S "$f" 2>/dev/null || dpkg -S "$(readlink -f "$f")" 2>/dev/null \
            || dpkg -S "/usr$f" 2>/dev/null || dpkg -S "${f#/usr}" 2>/dev/null \
            || { echo "no Debian package owns $f" >&2; exit 1; }; \
    done | cut -d: -f1 | sort -u \
       | xargs dpkg-query -W -f='${Package}=${Version}\n' > build/runtime-packages \
 && cat build/runtime-packages

FROM debian:bookworm-20250520-slim AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=build /src/build/runtime-packages /tmp/runtime-packages
# curl: the HEALTHCHECK's client (libcurl is among the runtime libraries anyway)
RUN apt-get update \
 && xargs -a /tmp/runtime-packages apt-get install -y --no-install-recommends curl ca-certificates \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages \
 && useradd --system --uid 10001 --user-group --create-home --home-dir /home/deltaserve \
            --shell /usr/sbin/nologin deltaserve
# `serve` finds models/default.gguf next to its binary
COPY --from=build /src/build/deltaserve /opt/deltaserve/deltaserve
COPY --from=build /src/build/models/default.gguf /opt/deltaserve/models/default.gguf
RUN ln -s /opt/deltaserve/deltaserve /usr/local/bin/deltaserve
USER 10001:10001
WORKDIR /home/deltaserve
# 8080: HTTP (OpenAI API, /health, /metrics); 5557: ZeroMQ KV events (--kv-events-endpoint)
EXPOSE 8080 5557
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8080/health"]
# the image's arguments (CMD, or Kubernetes' args) are appended: a later flag wins
ENTRYPOINT ["/opt/deltaserve/deltaserve", "serve", "--host", "0.0.0.0", "--port", "8080"]
CMD []
