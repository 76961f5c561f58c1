"""predict_cached.py - plays llm-d's precise prefix routing against a real server.

Starts `deltaserve serve` with KV events, a replay socket, a small checkpoint
interval and small memory budgets (so that pages and checkpoints get
evicted), subscribes to its events with llmd_index (llm-d's key scheme and
sequence rules) and sends requests one at a time: shared system prompts
with users' tails, branches cut at and off block boundaries, chat
conversations that grow turn by turn, prompts exactly a whole number of
blocks long, old prompts sent again after they were evicted, and a restart
of the server in the middle (with the older positional event form after
it). For each request it asks the server for the token ids as llm-d does
(/v1/completions/render, /v1/chat/completions/render), waits until every
event the server has sent so far is in the index (the sequence number in
/metrics), predicts the cached tokens from the index (the longest chain of
indexed blocks, capped so that one prompt token is left to compute), sends
the request and compares with usage.prompt_tokens_details.cached_tokens.
Some live event batches are thrown away on purpose so that the gap is
found (by the next batch, or by /metrics when no batch follows) and filled
from the replay socket.

Then an image part on the tiny model with a vision tower: chats with
pictures (the same picture again, another picture with the same text, text
after a picture), each predicted as llm-d predicts it, the blocks holding an
image's tokens keyed with the ids that the render answer's "features" give
(mm_hashes, mm_placeholders), which must match the image ids in the events'
extra_keys.

Prints ok/FAIL lines and "RESULT passed=N failed=M".
Env: DS_BIN, DS_TMP (tests/run.sh); DS_SCALE_REQUESTS (default 300; 120
under the sanitizers, DS_SANITIZE, where every engine step also checks its
invariants); DS_SCALE_KV_MB, DS_SCALE_CKPT_MB (the server's --kv-mb 2 and
--cache-state-mb 0.75)."""
import os
import random
import sys
import time

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llmd_index import Index, Subscriber, TokenProcessor, block_extra  # noqa: E402
from replica import Replica, kv_event_state  # noqa: E402

BLOCK = 64
passed = failed = 0


def ok(name):
    global passed
    passed += 1
    print("ok " + name, flush=True)


def bad(name, why):
    global failed
    failed += 1
    print("FAIL %s: %s" % (name, why), flush=True)


def finish():
    print("RESULT passed=%d failed=%d" % (passed, failed), flush=True)
    sys.exit(1 if failed else 0)


class Traffic:
    """Seeded requests: completions as token-id prompts, chats as messages."""

    def __init__(self, rng):
        self.rng = rng
        self.sent = []            # earlier completion prompts (token lists)
        self.systems = [self.toks(n) for n in (150, 192, 273, 320)]
        self.chats = [[{"role": "system", "content": "You are helper %d. " % i + "Be brief and exact. " * 4}]
                      for i in range(4)]
        self.convs = []           # growing token-prompt conversations

    def toks(self, n):
        return [self.rng.randrange(32, 1000) for _ in range(n)]

    def next(self, i):
        r = self.rng.random()
        if i < 4:
            kind = "system"
        elif r < 0.25:
            kind = "system"
        elif r < 0.40:
            kind = "boundary"
        elif r < 0.55:
            kind = "chat"
        elif r < 0.70:
            kind = "conversation"
        elif r < 0.80:
            kind = "whole-blocks"
        else:
            kind = "repeat"
        if kind == "system":
            p = self.rng.choice(self.systems) + self.toks(self.rng.randrange(1, 180))
        elif kind == "boundary":
            src = self.rng.choice(self.sent[-40:])
            cut = BLOCK * self.rng.randrange(1, max(2, len(src) // BLOCK + 1))
            cut = min(cut, len(src)) + self.rng.choice((0, 0, -1, 1))
            p = src[:max(1, cut)] + self.toks(self.rng.randrange(1, 100))
        elif kind == "whole-blocks":
            src = self.rng.choice(self.sent[-40:])
            n = BLOCK * max(1, len(src) // BLOCK)
            p = (src + self.toks(BLOCK))[:n]
        elif kind == "repeat":
            p = list(self.rng.choice(self.sent[:max(1, len(self.sent) // 2)]))
        elif kind == "conversation":
            if not self.convs or (len(self.convs) < 5 and self.rng.random() < 0.3):
                self.convs.append(self.rng.choice(self.systems)[:self.rng.randrange(60, 150)])
            c = self.rng.randrange(len(self.convs))
            p = self.convs[c] + self.toks(self.rng.randrange(10, 90))
            if len(p) > 700:
                p = p[:64]
            self.convs[c] = p
        else:
            msgs = self.rng.choice(self.chats)
            msgs.append({"role": "user", "content": "question %d: %s" % (i, "why " * self.rng.randrange(2, 30))})
            if sum(len(m["content"]) for m in msgs) > 600:
                del msgs[1:-1]
            return kind, {"messages": msgs, "max_tokens": self.rng.choice((1, 4)), "temperature": 0}
        p = p[:800]
        self.sent.append(p)
        return kind, {"prompt": p, "max_tokens": 1, "temperature": 0}

    def answered(self, kind, body, resp):
        if kind == "chat":
            body["messages"].append({"role": "assistant", "content": resp["choices"][0]["message"]["content"] or "ok"})


def settle(rep, sub, what):
    """Waits until every event the server pushed has been sent and applied."""
    end = time.monotonic() + 10
    while True:
        last, inflight = kv_event_state(rep.metrics())
        if inflight in (None, 0) or time.monotonic() > end:
            break
        time.sleep(0.01)
    if inflight not in (None, 0):
        raise RuntimeError("%s: %s events still queued in the server after 10 s" % (what, inflight))
    sub.sync(last)
    return last


def png_data_url(seed, w, h):
    """A PNG of a seeded gradient as a data: URL (zlib and struct only)."""
    import base64
    import struct
    import zlib
    rng = random.Random(seed)
    a, b, c = rng.randrange(256), rng.randrange(256), rng.randrange(256)
    raw = b"".join(b"\0" + bytes(v for x in range(w) for v in ((x + a) % 256, (y + b) % 256, (x * y + c) % 256))
                   for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + \
        chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


def image_part(binary, work, ctx):
    """Chats with images, predicted from the events with the render features as llm-d keys them."""
    model, mmproj = os.path.join(work, "vtiny.gguf"), os.path.join(work, "mmproj-vtiny.gguf")
    if not os.path.exists(mmproj):
        rc = os.system("'%s' make-model --shape tiny --out '%s' --mmproj '%s' --vision-layers 1 >'%s/make-v.log' 2>&1"
                       % (binary, model, mmproj, work))
        if rc:
            bad("make-model --mmproj", "exit %d" % rc)
            return
    rep = Replica(binary, model, "vision", work, extra_args=[
        "--mmproj", mmproj, "--threads", "2", "--state-checkpoint-interval", str(BLOCK), "--ctx", "1024"])
    try:
        rep.start()
    except RuntimeError as e:
        bad("server with a vision tower starts with KV events", str(e))
        return
    index = Index(TokenProcessor(BLOCK))
    sub = Subscriber(ctx, index, rep.events_endpoint, rep.replay_endpoint)
    pic_a, pic_b = png_data_url(1, 256, 256), png_data_url(2, 320, 256)
    system = {"role": "system", "content": "You look at pictures. " * 12}

    def user(text, *pics):
        return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": u}} for u in pics] +
                [{"type": "text", "text": text}]}
    first = [system, user("What is in this picture?", pic_a)]
    chats = [
        ("picture A", first),
        ("picture A again", first),
        ("picture B, the same text", [system, user("What is in this picture?", pic_b)]),
        ("text after picture A", first + [{"role": "assistant", "content": "Colours."},
                                          {"role": "user", "content": "And what else? " * 6}]),
        ("two pictures, A then B", [system, user("Compare them.", pic_a, pic_b)]),
        ("two pictures again", [system, user("Compare them.", pic_a, pic_b)]),
    ]
    wrong, hits, featured = [], 0, 0
    try:
        settle(rep, sub, "vision start")
        for name, msgs in chats:
            body = {"model": rep.model_name, "messages": msgs, "max_tokens": 1, "temperature": 0}
            r = rep.render_full(body)
            tokens, features = r["token_ids"], r.get("features")
            featured += bool(features)
            settle(rep, sub, name)
            keys = index.tp.keys(None, tokens, rep.model_name, block_extra(features, BLOCK, len(tokens)))
            chain = index.chain(keys, sub.pod) if sub.pod else 0
            predicted = min(chain, (len(tokens) - 1) // BLOCK) * BLOCK
            resp = rep.post("/v1/chat/completions", body)
            reported = (resp["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            hits += predicted > 0
            line = "%-24s prompt %4d tokens, features %s: predicted %4d, reported %4d" % (
                name, len(tokens), "yes" if features else "no", predicted, reported)
            print("  image " + line)
            if predicted != reported or resp["usage"]["prompt_tokens"] != len(tokens):
                wrong.append(line)
        settle(rep, sub, "vision end")
    except (RuntimeError, ValueError, OSError, KeyError) as e:
        bad("image requests run", "%s: %s" % (type(e).__name__, e))
        wrong.append("not run")
    finally:
        rc = rep.stop()
        sub.close()
    if featured == len(chats):
        ok("every image prompt's render answer has features")
    else:
        bad("every image prompt's render answer has features", "%d of %d" % (featured, len(chats)))
    if not wrong and hits >= 3 and index.counts["images"] > 0:
        ok("images: predicted cached_tokens == reported for all %d chats (%d hits, image blocks in the events)"
           % (len(chats), hits))
    else:
        bad("images: predicted cached_tokens == reported", "; ".join(wrong) or "%d hits, %d image blocks" % (
            hits, index.counts["images"]))
    ok("the vision server exits 0 on SIGTERM") if rc == 0 else bad("the vision server exits 0 on SIGTERM", "rc %d" % rc)


def main():
    binary, tmp = os.environ.get("DS_BIN"), os.environ.get("DS_TMP")
    if not binary or not tmp:
        print("DS_BIN and DS_TMP must be set (tests/run.sh)")
        finish()
    n_requests = int(os.environ.get("DS_SCALE_REQUESTS", "120" if os.environ.get("DS_SANITIZE") else "300"))
    work = os.path.join(tmp, "kv-routing")
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "tiny.gguf")
    if not os.path.exists(model):
        rc = os.system("'%s' make-model --shape tiny --out '%s' >'%s/make.log' 2>&1" % (binary, model, work))
        if rc:
            bad("make-model", "exit %d" % rc)
            finish()
    rep = Replica(binary, model, "kv", work, extra_args=[
        "--threads", "2", "--state-checkpoint-interval", str(BLOCK), "--ctx", "1024",
        "--kv-mb", os.environ.get("DS_SCALE_KV_MB", "2"),
        "--cache-state-mb", os.environ.get("DS_SCALE_CKPT_MB", "0.75")])
    ctx = zmq.Context()
    try:
        rep.start()
    except RuntimeError as e:
        bad("server starts with --kv-events-endpoint", str(e))
        finish()
    ok("server starts with --kv-events-endpoint and a replay endpoint")
    index = Index(TokenProcessor(BLOCK))
    # every 29th live batch is lost on purpose: the next one shows the gap
    sub = Subscriber(ctx, index, rep.events_endpoint, rep.replay_endpoint, drop_seqs=range(7, 100000, 29))
    rng = random.Random(17)
    traffic = Traffic(rng)
    counts = {"hits": 0, "misses": 0, "mismatches": 0, "capped": 0, "repeats_evicted": 0, "cached_tokens": 0,
              "prompt_tokens": 0}
    kinds = {}
    examples, mismatches = [], []
    t0 = time.monotonic()
    restart_at = n_requests // 2
    try:
        settle(rep, sub, "start")
        for i in range(n_requests):
            if i == restart_at:
                before = index.held_blocks(sub.pod) if sub.pod else 0
                rep.extra += ["--kv-events-format", "array"]
                rep.restart()
                settle(rep, sub, "restart")
                after = index.held_blocks(sub.pod) if sub.pod else 0
                if before > 0 and after == 0:
                    ok("restart: the index forgot the replica's %d blocks (AllBlocksCleared, replay)" % before)
                else:
                    bad("restart: the index forgot the replica's blocks", "%d blocks before, %d after" % (before, after))
            kind, body = traffic.next(i)
            body["model"] = rep.model_name
            tokens = rep.render(body)
            settle(rep, sub, "request %d" % i)
            keys = index.tp.keys(None, tokens, rep.model_name)
            chain = index.chain(keys, sub.pod) if sub.pod else 0
            cap = (len(tokens) - 1) // BLOCK
            predicted = min(chain, cap) * BLOCK
            path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
            resp = rep.post(path, body)
            traffic.answered(kind, body, resp)
            usage = resp["usage"]
            reported = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            kinds[kind] = kinds.get(kind, 0) + 1
            counts["prompt_tokens"] += usage["prompt_tokens"]
            counts["cached_tokens"] += reported
            counts["hits" if predicted else "misses"] += 1
            counts["capped"] += chain > cap
            # a prompt sent before had all its whole blocks announced once: a shorter chain now is an eviction
            counts["repeats_evicted"] += kind == "repeat" and chain < len(keys)
            line = "#%d %-12s prompt %4d tokens: %2d/%2d blocks indexed, predicted %4d, reported %4d" % (
                i, kind, len(tokens), chain, len(keys), predicted, reported)
            if usage["prompt_tokens"] != len(tokens):
                mismatches.append(line + " (render gave %d tokens, usage %d)" % (len(tokens), usage["prompt_tokens"]))
            if predicted != reported:
                counts["mismatches"] += 1
                mismatches.append(line)
            elif len(examples) < 8 and (predicted or kind in ("repeat", "whole-blocks")) and \
                    kind not in [e[0] for e in examples]:
                examples.append((kind, line))
        settle(rep, sub, "end")
    except (RuntimeError, ValueError, OSError, KeyError) as e:
        bad("requests run", "%s: %s" % (type(e).__name__, e))
    finally:
        rc = rep.stop()
        sub.close()
        ctx.term()
    elapsed = time.monotonic() - t0
    n = counts["hits"] + counts["misses"]
    st, ic = sub.stats, index.counts
    print("requests %d in %.1f s (%s)" % (n, elapsed, ", ".join("%s %d" % kv for kv in sorted(kinds.items()))))
    print("predictions: hits %d, misses %d, capped at prompt end %d, repeats after an eviction %d, wrong %d; "
          "cached %d of %d prompt tokens" % (
              counts["hits"], counts["misses"], counts["capped"], counts["repeats_evicted"], counts["mismatches"],
              counts["cached_tokens"], counts["prompt_tokens"]))
    print("events: %d batches, %d events; blocks stored %d, removed %d (evictions), cleared %d times; "
          "orphans dropped %d, removals of unknown blocks %d, skipped %d" % (
              st["batches"], st["events"], ic["stored"], ic["removed"], ic["cleared"], ic["orphans"],
              ic["remove_unknown"], ic["skipped"]))
    print("stream: %d batches lost on purpose, %d gaps found, %d times behind /metrics, %d replays (%d batches "
          "replayed), %d resets; block sizes %s; dp ranks %s" % (
              st["dropped_on_purpose"], st["gaps"], st["behind"], st["replays"], st["replayed"], st["resets"],
              sorted(index.block_sizes), sorted(map(str, st["dp_ranks"]))))
    for _, line in examples:
        print("  example " + line)
    for line in mismatches[:15]:
        print("  WRONG " + line)
    if n == n_requests and not mismatches:
        ok("predicted cached_tokens == reported for all %d requests" % n)
    else:
        bad("predicted cached_tokens == reported", "%d of %d requests wrong or not run" % (
            len(mismatches) + n_requests - n, n_requests))
    checks = [
        ("some predictions are hits and some misses", counts["hits"] > n // 5 and counts["misses"] > 0),
        ("pages or checkpoints were evicted (BlockRemoved seen)", ic["removed"] > 0),
        ("some prompts came again after their blocks were evicted", counts["repeats_evicted"] > 0),
        ("some prompts were whole blocks, all indexed (the cap)", counts["capped"] > 0),
        ("AllBlocksCleared seen at each start", ic["cleared"] >= 2),
        ("no block announced before its parent", ic["orphans"] == 0),
        ("every BlockStored has block_size %d" % BLOCK, index.block_sizes == {BLOCK}),
        ("lost batches found as gaps and filled from the replay socket",
         st["dropped_on_purpose"] > 0 and st["replayed"] > 0),
        ("topic kv@<host>:<port>@<model>, data_parallel_rank nil",
         st["topics"] == {"kv@127.0.0.1:%d@%s" % (rep.port, rep.model_name)} and st["dp_ranks"] == {None}),
        ("the server exits 0 on SIGTERM", rc == 0),
    ]
    for name, cond in checks:
        ok(name) if cond else bad(name, "no")
    ctx = zmq.Context()
    image_part(binary, work, ctx)
    ctx.term()
    finish()


if __name__ == "__main__":
    main()
