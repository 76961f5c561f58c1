"""kv_events_client.py - a router's view of `deltaserve serve --kv-events-endpoint`:
subscribes with ZeroMQ, decodes every frame with msgpack, sends requests, and
checks the wire format against vLLM's (the topic, consecutive 8-byte big-endian
sequence numbers from 0, payloads [ts, [events], rank], each event's fields in
the map or the older tagged-array form), the blocks against the prompts' own
tokens (from /v1/completions/render), replay from a given sequence and its end
marker, and the counters in /metrics.

usage: kv_events_client.py HTTP_PORT PUB_ENDPOINT REPLAY_ENDPOINT FORMAT BLOCK_SIZE
FORMAT is map or array. Prints "ok NAME" / "FAIL NAME: ..." lines and
"RESULT passed=N failed=M". Debian's python3-zmq and python3-msgpack."""
import json
import struct
import sys
import time
import urllib.request

import msgpack
import zmq

HTTP_PORT, PUB, REPLAY, FORMAT, BLOCK = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
BASE = f"http://127.0.0.1:{HTTP_PORT}"
TOPIC = f"kv@127.0.0.1:{HTTP_PORT}@default".encode()
STORED = ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
          "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"]
REMOVED = ["block_hashes", "medium", "group_idx"]
passed = failed = 0


def check(name, cond, why=""):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {why}")
    return cond


def post(path, body):
    req = urllib.request.Request(BASE + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def metrics():
    with urllib.request.urlopen(BASE + "/metrics", timeout=30) as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line.startswith("deltaserve:kv_events_"):
                name, value = line.split("{")[0], float(line.rsplit(" ", 1)[1])
                out[name[len("deltaserve:kv_events_"):]] = value
        return out


def settled():
    """The last sequence number once every event the engine queued has been sent."""
    for _ in range(600):
        m = metrics()
        if m["queued_total"] == m["published_total"]:
            return int(m["last_sequence"]), m
        time.sleep(0.05)
    raise RuntimeError(f"events still in flight: {m}")


def event_fields(ev):
    """(type, {field: value}) of an event in either form; the form is checked on the way."""
    if FORMAT == "map":
        if not isinstance(ev, dict) or "type" not in ev:
            raise ValueError(f"not a map with a type: {ev!r}")
        t = ev["type"]
        want = {"BlockStored": STORED, "BlockRemoved": REMOVED, "AllBlocksCleared": []}[t]
        if list(ev.keys()) != ["type"] + want:
            raise ValueError(f"{t} keys {list(ev.keys())}")
        return t, ev
    if not isinstance(ev, list) or not ev or not isinstance(ev[0], str):
        raise ValueError(f"not a tagged array: {ev!r}")
    t = ev[0]
    want = {"BlockStored": STORED, "BlockRemoved": REMOVED, "AllBlocksCleared": []}[t]
    if len(ev) != 1 + len(want):
        raise ValueError(f"{t} has {len(ev) - 1} fields, want {len(want)}")
    return t, dict(zip(want, ev[1:]))


ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
sub.connect(PUB)
frames = {}   # seq -> payload, from the PUB socket
bad_frames = []


def receive(until_seq, limit_s):
    """Reads PUB frames until until_seq has come (or limit_s passes without a frame)."""
    while until_seq not in frames:
        if not sub.poll(int(limit_s * 1000)):
            return False
        parts = sub.recv_multipart()
        if len(parts) != 3 or parts[0] != TOPIC or len(parts[1]) != 8:
            bad_frames.append(parts[:2])
            continue
        frames[struct.unpack(">Q", parts[1])[0]] = parts[2]
    return True


def replay(start):
    """[(seq, topic, payload)...] from the replay socket, and whether the end marker closed it."""
    d = ctx.socket(zmq.DEALER)
    d.connect(REPLAY)
    d.send_multipart([b"", struct.pack(">Q", start)])
    got, ended = [], False
    while d.poll(20000):
        parts = d.recv_multipart()
        if len(parts) != 4 or parts[0] != b"":
            break
        seq = struct.unpack(">q", parts[2])[0]
        if seq == -1:
            ended = parts[1] == b"" and parts[3] == b""
            break
        got.append((seq, parts[1], parts[3]))
    d.close(linger=0)
    return got, ended


def prompt(words):
    return " ".join(words)


# Prompts long enough for several blocks, sharing a prefix: the first announces the shared blocks,
# the second only the blocks past them (their parent is the shared chain's last block).
shared = [f"w{i}" for i in range(200)]
prompts = [prompt(shared + ["alpha"] * 120), prompt(shared + ["beta"] * 150), prompt(["other"] * 130)]
tokens = {}
# the subscription reaches the PUB socket some time after the connect: requests are sent until one
# batch has come (those before are read back from replay below)
first_pub = None
for i, p in enumerate(prompts * 3):
    post("/v1/completions", {"prompt": p, "max_tokens": 2, "temperature": 0})
    last, _ = settled()
    if receive(last, 2.0) and first_pub is None:
        first_pub = min(frames)
check("the subscriber receives batches", first_pub is not None, f"no frames; {len(bad_frames)} bad")
for p in prompts:
    tokens[p] = post("/v1/completions/render", {"prompt": p})
    tokens[p] = tokens[p][0]["token_ids"] if isinstance(tokens[p], list) else tokens[p]["token_ids"]
last, m = settled()
receive(last, 10.0)
check("frames: topic kv@127.0.0.1:PORT@default and 8-byte sequence numbers", not bad_frames, str(bad_frames[:3]))
seqs = sorted(frames)
check("PUB sequence numbers are consecutive up to /metrics' last_sequence",
      seqs and seqs == list(range(seqs[0], last + 1)), f"{seqs[:5]}...{seqs[-5:]} last {last}")

# replay from 0: every batch (10000 are kept), the same bytes as published, then the end marker
rep, ended = replay(0)
check("replay from 0 answers every batch in order, then the end marker [\"\", -1, \"\"]",
      [s for s, _, _ in rep] == list(range(0, last + 1)) and ended, f"{[s for s, _, _ in rep][:8]} ended {ended}")
check("replayed batches carry the topic", all(t == TOPIC for _, t, _ in rep))
check("replayed payloads are the published bytes",
      all(frames[s] == pl for s, _, pl in rep if s in frames) and any(s in frames for s, _, _ in rep))
mid = max(1, last // 2)
rep2, ended2 = replay(mid)
check("replay from a given sequence starts there", [s for s, _, _ in rep2] == list(range(mid, last + 1)) and ended2,
      f"{[s for s, _, _ in rep2][:5]}")
rep3, ended3 = replay(last + 100)
check("replay past the end: only the end marker", rep3 == [] and ended3)

batches = {s: pl for s, _, pl in rep}
events, shape_errors = [], []
for s in range(last + 1):
    try:
        b = msgpack.unpackb(batches[s], raw=False, strict_map_key=False)
        if not (isinstance(b, list) and len(b) == 3 and isinstance(b[0], float) and isinstance(b[1], list)
                and b[2] is None and b[0] > 1.6e9):
            raise ValueError(f"payload {b!r:.200}")
        for ev in b[1]:
            events.append(event_fields(ev))
    except Exception as e:   # noqa: BLE001 - every malformed batch is reported
        shape_errors.append(f"seq {s}: {e}")
check(f"every payload is [ts float64, [events], nil] with {FORMAT}-form events", not shape_errors,
      "; ".join(shape_errors[:3]))
check("the first event is AllBlocksCleared", events and events[0][0] == "AllBlocksCleared",
      str(events[:1])[:200])

stored = [f for t, f in events if t == "BlockStored"]
field_errors = []
for f in stored:
    n = len(f["block_hashes"])
    if not (n >= 1 and all(isinstance(h, int) for h in f["block_hashes"])):
        field_errors.append("block_hashes")
    if f["block_size"] != BLOCK or len(f["token_ids"]) != n * BLOCK:
        field_errors.append(f"block_size {f['block_size']} tokens {len(f['token_ids'])} blocks {n}")
    if f["lora_id"] is not None or f["medium"] is not None or f["lora_name"] is not None:
        field_errors.append("lora_id, medium, lora_name not nil")
    if not (isinstance(f["extra_keys"], list) and len(f["extra_keys"]) == n and all(k is None for k in f["extra_keys"])):
        field_errors.append(f"extra_keys {f['extra_keys']!r:.80} (text prompts: nil per block)")
    if f["group_idx"] != 0 or f["kv_cache_spec_kind"] != "full_attention" or f["kv_cache_spec_sliding_window"] is not None:
        field_errors.append("group_idx / kv_cache_spec_kind / kv_cache_spec_sliding_window")
check("BlockStored fields: hashes, block size, tokens per block, nil LoRA and medium, extra_keys, group 0",
      stored and not field_errors, "; ".join(sorted(set(field_errors))[:4]) or "no BlockStored event")

# The chains: each block's parent is announced before it, and a chain's tokens are its prompt's tokens.
known, chain_of, chain_errors = set(), {}, []
for f in stored:
    parent = f["parent_block_hash"]
    if parent is not None and parent not in known:
        chain_errors.append(f"parent {parent} not announced before")
    prev = chain_of.get(parent, []) if parent is not None else []
    for i, h in enumerate(f["block_hashes"]):
        known.add(h)
        prev = prev + f["token_ids"][i * BLOCK:(i + 1) * BLOCK]
        chain_of[h] = prev
check("every block's parent was announced before it", not chain_errors, "; ".join(chain_errors[:3]))
for p in prompts:
    full = len(tokens[p]) // BLOCK * BLOCK
    best = max((len(c) for c in chain_of.values() if c == tokens[p][:len(c)]), default=0)
    check(f"a chain of announced blocks holds the prompt's tokens ({len(tokens[p])} tokens)",
          best >= min(full, len(tokens[p]) - 1) // BLOCK * BLOCK and best > 0, f"longest {best}, blocks of {BLOCK}")

removed = [f for t, f in events if t == "BlockRemoved"]
check("BlockRemoved events name announced blocks",
      all(h in known for f in removed for h in f["block_hashes"]) and
      all(f["medium"] is None and f["group_idx"] == 0 for f in removed))
m = metrics()
check("/metrics: last_sequence, nothing dropped, published == queued",
      int(m["last_sequence"]) == last and m["dropped_total"] == 0 and m["queued_total"] == m["published_total"] >= len(events),
      str(m))
sub.close(linger=0)
ctx.term()
print(f"RESULT passed={passed} failed={failed}")
sys.exit(1 if failed else 0)
