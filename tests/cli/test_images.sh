#!/usr/bin/env bash
# Images in, end to end: make-model writes the tiny model with a small random
# vision tower (--mmproj, 2 blocks); python3-pil makes PNG and JPEG images of
# several sizes and the bad ones (too many pixels, too large, zero size; the
# truncated ones are cut in images.mjs); then `deltaserve serve` runs twice,
# with the tower (a local media folder, a local HTTP server as the one allowed
# domain, tight image limits) and without it (--no-mmproj), and
# tests/server/images.mjs (the official openai client and raw HTTP) checks
# token counts, the prefix cache over images, every refusal, file:// and
# http(s), the Responses and Messages APIs and /v1/models. Prints ok/FAIL
# lines and "RESULT passed=N failed=M".
# Env: DS_BIN, DS_TMP, DS_ROOT (tests/run.sh).
set -u
: "${DS_BIN:?}" "${DS_TMP:?}" "${DS_ROOT:?}"
. "$DS_ROOT/tests/cli/server_ready.sh"
passed=0 failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
pids=()
finish() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    echo "RESULT passed=$passed failed=$failed"
    exit $((failed > 0))
}
if ! [ -d "$DS_ROOT/tests/server/node_modules/openai" ]; then
    bad "openai client" "tests/server/node_modules missing (npm ci in tests/server)"; finish
fi
work="$DS_TMP/images"
rm -rf "$work"
mkdir -p "$work/img" "$work/media"
model="$work/vtiny.gguf" mmproj="$work/mmproj-vtiny.gguf"
if ! "$DS_BIN" make-model --shape tiny --out "$model" --mmproj "$mmproj" --vision-layers 2 >"$work/make.log" 2>&1; then
    bad "make-model --mmproj" "$(tail -n 3 "$work/make.log")"; finish
fi
ok "make-model writes the model and its mmproj"

# the images: sizes that are multiples of 32 at or above 256 x 256, so that smart resize keeps them
if ! /usr/bin/python3 - "$work/img" >"$work/pil.log" 2>&1 <<'EOF'
import os, random, struct, sys
from PIL import Image
d = sys.argv[1]
def grad(w, h, seed):
    r = random.Random(seed)
    im = Image.new('RGB', (w, h))
    px = im.load()
    a, b, c = r.randrange(256), r.randrange(256), r.randrange(256)
    for y in range(h):
        for x in range(w):
            px[x, y] = ((x + a) % 256, (y + b) % 256, (x * y + c) % 256)
    return im
grad(256, 256, 1).save(f'{d}/a256.png')
grad(320, 256, 2).save(f'{d}/b320x256.png')
grad(480, 352, 3).save(f'{d}/c480x352.jpg', quality=90)
grad(256, 512, 4).save(f'{d}/d256x512.jpg', quality=90)
Image.new('RGB', (256, 256), (200, 20, 20)).save(f'{d}/e256_red.png')
Image.new('RGB', (256, 256), (20, 20, 200)).save(f'{d}/e256_blue.png')
Image.new('RGB', (1100, 1000), (9, 9, 9)).save(f'{d}/big1100x1000.png')      # past --max-image-pixels 1000000
Image.frombytes('RGB', (700, 700), os.urandom(700 * 700 * 3)).save(f'{d}/noise.png')  # past --max-image-mb 1
# a GIF of 0 x 0 pixels (screen and frame; libpng refuses a 0 x 0 PNG header as corrupt before any
# decoder sees its size, giflib reads it): hand-written, PIL will not write one
screen = b'GIF89a' + struct.pack('<HHBBB', 0, 0, 0x80, 0, 0) + b'\x00\x00\x00\xff\xff\xff'
frame = b'\x2c' + struct.pack('<HHHHB', 0, 0, 0, 0, 0) + b'\x02\x02\x44\x01\x00'
with open(f'{d}/zero.gif', 'wb') as f:
    f.write(screen + frame + b'\x3b')
EOF
then
    bad "images made" "$(tail -n 3 "$work/pil.log")"; finish
fi
cp "$work/img/a256.png" "$work/media/a256.png"
cp "$work/img/e256_red.png" "$work/outside.png"
ln -s "$work/outside.png" "$work/media/link.png"

# a local HTTP server of the images: the one domain the server may fetch from
http_port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
(cd "$work/img" && exec /usr/bin/python3 -m http.server "$http_port" --bind 127.0.0.1 >"$work/http.log" 2>&1) &
pids+=($!)

log="$work/server.log" log_text="$work/server-text.log"
"$DS_BIN" serve -m "$model" --mmproj "$mmproj" --port 0 --served-model-name tiny --threads 2 \
    --state-checkpoint-interval 64 --max-image-pixels 1000000 --max-image-mb 1 --limit-mm-per-prompt 4 \
    --allowed-local-media-path "$work/media" --allowed-media-domains 127.0.0.1 >"$log" 2>&1 &
pid=$!
pids+=($pid)
if ! wait_ready "$log" "$pid" 600; then bad "server with the tower starts" "$(tail -n 5 "$log")"; finish; fi
port_v=$port
grep -q "vision tower $mmproj" "$log" && ok "start-up names the tower" || bad "start-up names the tower" "$(head -n 5 "$log")"
"$DS_BIN" serve -m "$model" --no-mmproj --port 0 --served-model-name tiny --threads 2 >"$log_text" 2>&1 &
pid_text=$!
pids+=($pid_text)
if ! wait_ready "$log_text" "$pid_text" 600; then bad "server without the tower starts" "$(tail -n 5 "$log_text")"; finish; fi
port_t=$port
ok "servers start"

fold_results "images.mjs" "$(cd "$DS_ROOT/tests/server" && DS_URL="http://127.0.0.1:$port_v" DS_URL_TEXT="http://127.0.0.1:$port_t" \
    DS_MODEL=tiny DS_IMG="$work/img" DS_MEDIA="$work/media" DS_OUTSIDE="$work/outside.png" \
    DS_HTTP="http://127.0.0.1:$http_port" timeout 600 node images.mjs 2>&1)"

# a bad --allowed-local-media-path stops the start (exit 2), naming it
"$DS_BIN" serve -m "$model" --port 0 --allowed-local-media-path "$work/no-such-dir" >"$work/badpath.log" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q "allowed-local-media-path" "$work/badpath.log"; then ok "a missing media folder stops the start"
else bad "a missing media folder stops the start" "exit $rc: $(cat "$work/badpath.log")"; fi

stop_server "server with the tower" "$pid" "$log"
stop_server "server without the tower" "$pid_text" "$log_text"
finish
