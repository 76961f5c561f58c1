"""llmd_index.py - a KV-event subscriber and block index that behave as llm-d's.

llm-d's endpoint picker routes a request to the replica holding the longest
prefix of it. It learns what each replica holds from the replica's KV events
(ZeroMQ, vLLM's format) and never trusts the engine's block hashes for
matching: it recomputes its own keys from the token ids in each BlockStored
and keeps the engine's hashes only to find a block's parent and to apply
removals. This module does the same, written from llm-d's description of its
indexer (kvblock token processor, kvevents pool and ZeroMQ subscriber), so
that the tests can check that what deltaserve announces lets such a router
predict every request's cached tokens.

The key scheme (llm-d's default "cbor-fnv"):
  seed      = FNV-64a(hash seed bytes)             (the seed is "" unless set)
  root      = FNV-64a(CBOR([seed, null, model]))   (one chain per model name)
  key(i)    = FNV-64a(CBOR([key(i-1), tokens of block i, extra]))
where CBOR is the canonical encoding, tokens is an array of unsigned ints and
extra is null for a text block or [{"Hash": id}, ...] for the multimodal
items with tokens in the block. Only whole blocks get keys.

Event handling:
  BlockStored      keys are computed from token_ids, continuing the chain of
                   the parent's key; a block whose parent hash is not in the
                   index is dropped (counted). Engine hash -> keys is kept.
  BlockRemoved     each engine hash's keys lose this pod.
  AllBlocksCleared every key loses this pod.
Events with a group_idx must name an attention kind ("full_attention"...)
or they are skipped, and a removal for a group never stored is skipped.

The subscriber follows llm-d's sequence rules. Without a replay socket it
applies every batch as it comes. With one: on connect it asks for
everything from 0; a gap (seq > last + 1) asks the replay
socket for the missing batches; a sequence that goes backwards (a restarted
server) clears the pod and replays from 0; duplicates are ignored.

Scoring (llm-d's LongestPrefix scorer): a pod's score is the number of the
prompt's keys, from the first, that the pod holds without a break.
"""
import struct
import time

import cbor2
import msgpack
import zmq

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK64 = (1 << 64) - 1

ATTENTION_KINDS = ("full_attention", "mla_attention", "sink_full_attention")


def fnv64a(data):
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK64
    return h


class TokenProcessor:
    """Block keys from token ids, as llm-d's chunked token database."""

    def __init__(self, block_size, hash_seed=""):
        if block_size <= 0:
            raise ValueError("block_size must be > 0, got %d" % block_size)
        self.block_size = block_size
        self.seed = fnv64a(hash_seed.encode())
        self._roots = {}

    @staticmethod
    def _hash(parent, tokens, extra):
        return fnv64a(cbor2.dumps([parent, tokens, extra], canonical=True))

    def root(self, model):
        if model not in self._roots:
            self._roots[model] = self._hash(self.seed, None, model)
        return self._roots[model]

    def keys(self, parent, tokens, model, extra=None):
        """Keys of tokens' whole blocks, chained from parent (None: the model's root).
        extra: None, or one entry per block: None or a list of item ids."""
        n = len(tokens) // self.block_size
        if extra is not None and len(extra) != n:
            raise ValueError("extra has %d entries for %d blocks" % (len(extra), n))
        prev = self.root(model) if parent is None else parent
        out = []
        for i in range(n):
            block = [int(t) for t in tokens[i * self.block_size:(i + 1) * self.block_size]]
            ids = extra[i] if extra is not None else None
            prev = self._hash(prev, block, [{"Hash": h} for h in ids] if ids else None)
            out.append(prev)
        return out


def block_extra(features, block_size, n_tokens):
    """Per-block item ids from a render answer's features, as llm-d's
    ComputeBlockExtraFeatures: for each whole block, in order of the items'
    offsets, the id of every item whose placeholder range
    [offset, offset + length) overlaps the block; None for a block with
    none, and None in all for no features (a text prompt)."""
    if not features or not features.get("mm_hashes"):
        return None
    items = []
    for modality, ids in features["mm_hashes"].items():
        ranges = (features.get("mm_placeholders") or {}).get(modality)
        if ranges is None:
            continue
        for h, r in zip(ids, ranges):
            items.append((r["offset"], r["offset"] + r["length"], h))
    if not items:
        return None
    items.sort(key=lambda it: it[0])
    out = []
    for b in range(n_tokens // block_size):
        lo, hi = b * block_size, (b + 1) * block_size
        ids = [h for start, end, h in items if end > lo and start < hi]
        out.append(ids or None)
    return out


def engine_hash(raw):
    """An engine block hash as a 64-bit int (bytes: their last 8, big-endian)."""
    if isinstance(raw, int):
        return raw & MASK64
    if isinstance(raw, (bytes, bytearray)):
        if not raw:
            raise ValueError("empty block hash")
        return int.from_bytes(bytes(raw[-8:]).rjust(8, b"\0"), "big")
    raise ValueError("block hash of type %s" % type(raw).__name__)


STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
                 "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window")
REMOVED_FIELDS = ("block_hashes", "medium", "group_idx")


def decode_event(ev):
    """A map event ("type") or a tagged positional array -> (tag, {field: value})."""
    if isinstance(ev, dict):
        tag = ev.get("type")
        if not isinstance(tag, str):
            raise ValueError("map event without a string 'type': %r" % (ev,))
        order = {"BlockStored": STORED_FIELDS, "BlockRemoved": REMOVED_FIELDS}.get(tag, ())
        return tag, {k: ev.get(k) for k in order}
    if isinstance(ev, (list, tuple)) and ev and isinstance(ev[0], str):
        tag = ev[0]
        order = {"BlockStored": STORED_FIELDS, "BlockRemoved": REMOVED_FIELDS}.get(tag, ())
        return tag, {k: (ev[i + 1] if i + 1 < len(ev) else None) for i, k in enumerate(order)}
    raise ValueError("event is neither a map nor a tagged array: %r" % (ev,))


class Index:
    """Request keys -> pods, engine hashes -> request keys (shared by all pods, as llm-d's)."""

    def __init__(self, processor):
        self.tp = processor
        self.pods_of = {}         # request key -> set of pods
        self.keys_of = {}         # engine hash -> [request keys]
        self.groups = {}          # (pod, group) -> kind
        self.counts = {"stored": 0, "removed": 0, "cleared": 0, "orphans": 0, "skipped": 0,
                       "remove_unknown": 0, "images": 0}
        self.block_sizes = set()

    def clear_pod(self, pod):
        for pods in self.pods_of.values():
            pods.discard(pod)

    def _evict(self, engine, pod):
        rks = self.keys_of.get(engine)
        if rks is None:
            self.counts["remove_unknown"] += 1
            return
        for rk in rks:
            self.pods_of.get(rk, set()).discard(pod)
        if all(not self.pods_of.get(rk) for rk in rks):
            del self.keys_of[engine]

    def apply(self, pod, model, events):
        for raw in events:
            tag, f = decode_event(raw)
            if tag == "BlockStored":
                self._stored(pod, model, f)
            elif tag == "BlockRemoved":
                g = f["group_idx"]
                if g is not None and self.groups.get((pod, g)) not in ATTENTION_KINDS:
                    self.counts["skipped"] += 1
                    continue
                for h in f["block_hashes"]:
                    self.counts["removed"] += 1
                    self._evict(engine_hash(h), pod)
            elif tag == "AllBlocksCleared":
                self.counts["cleared"] += 1
                self.clear_pod(pod)
            else:
                raise ValueError("unknown event type %r" % tag)

    def _stored(self, pod, model, f):
        tokens, hashes, bs = f["token_ids"], f["block_hashes"], f["block_size"]
        g = f["group_idx"]
        if g is not None:
            if f["kv_cache_spec_kind"] is not None:
                self.groups[(pod, g)] = f["kv_cache_spec_kind"]
            if self.groups.get((pod, g)) not in ATTENTION_KINDS or (
                    tokens and (not bs or len(tokens) % bs or len(tokens) // bs != len(hashes))):
                self.counts["skipped"] += 1
                return
        self.block_sizes.add(bs)
        if f["lora_name"]:
            model = f["lora_name"]
        parent = None
        if f["parent_block_hash"] is not None and engine_hash(f["parent_block_hash"]) != 0:
            rks = self.keys_of.get(engine_hash(f["parent_block_hash"]))
            if not rks:
                self.counts["orphans"] += 1   # llm-d drops a block whose parent it does not know
                return
            parent = rks[-1]
        extra = None
        if f["extra_keys"] is not None:
            per_block = []
            for keys in f["extra_keys"]:
                ids = None
                if keys is not None:
                    ids = [k if isinstance(k, str) else k[0] for k in keys
                           if isinstance(k, str) or (isinstance(k, (list, tuple)) and k and isinstance(k[0], str))]
                    self.counts["images"] += bool(ids)
                per_block.append(ids or None)
            extra = realign(per_block, len(tokens) // self.tp.block_size)
        rks = self.tp.keys(parent, tokens, model, extra)
        if not rks:
            return
        engines = [engine_hash(h) for h in hashes]
        for ek, mapped in engine_to_request(engines, rks).items():
            self.keys_of[ek] = mapped
        for rk in rks:
            self.pods_of.setdefault(rk, set()).add(pod)
        self.counts["stored"] += len(engines)

    def chain(self, keys, pod):
        """Consecutive keys from the first that pod holds (llm-d's LongestPrefix score)."""
        n = 0
        for k in keys:
            if pod not in self.pods_of.get(k, ()):
                break
            n += 1
        return n

    def held_blocks(self, pod):
        return sum(1 for pods in self.pods_of.values() if pod in pods)


def realign(per_block, n):
    """Engine-block extra keys onto n index blocks (llm-d replicates or merges them)."""
    m = len(per_block)
    if n == 0:
        return None
    if m == 0 or m == n:
        return per_block
    out = [None] * n
    if m < n:
        for i in range(n):
            out[i] = per_block[i * m // n]
    else:
        for i, ids in enumerate(per_block):
            if ids:
                j = i * n // m
                out[j] = (out[j] or []) + list(ids)
    return out


def engine_to_request(engines, rks):
    if len(engines) == len(rks):
        return {e: [r] for e, r in zip(engines, rks)}
    if len(engines) > len(rks):     # many engine blocks to one key
        per = len(engines) // len(rks)
        return {e: [rks[min(i // per, len(rks) - 1)]] for i, e in enumerate(engines)}
    per = len(rks) // len(engines)  # one engine block to many keys
    return {e: rks[i * per:(i + 1) * per] for i, e in enumerate(engines)}


def parse_topic(topic):
    """'kv@<host>:<port>@<model>' -> (pod, model)."""
    parts = topic.split("@")
    if len(parts) == 3:
        return parts[1], parts[2]
    return topic, ""


class Subscriber:
    """One replica's event stream into an Index, with llm-d's sequence rules.

    pump() reads what has arrived; drop_seqs are live sequence numbers thrown
    away on purpose, to exercise gap detection and the replay socket."""

    def __init__(self, ctx, index, endpoint, replay_endpoint=None, topic_filter="kv@", drop_seqs=()):
        self.index = index
        self.ctx = ctx
        self.replay_endpoint = replay_endpoint
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.RCVHWM, 0)
        self.sub.setsockopt_string(zmq.SUBSCRIBE, topic_filter)
        self.sub.connect(endpoint)
        self.last_seq = None        # last sequence applied to the index
        self.last_live = None       # last sequence seen on the live socket
        self.drop_seqs = set(drop_seqs)
        self.pod = None
        self.stats = {"batches": 0, "events": 0, "gaps": 0, "replays": 0, "replayed": 0, "resets": 0,
                      "dropped_on_purpose": 0, "behind": 0, "dp_ranks": set(), "topics": set()}
        if replay_endpoint:
            self.replay(0)

    def close(self):
        self.sub.close(0)

    def _apply(self, topic, seq, payload):
        pod, model = parse_topic(topic)
        self.pod = pod
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        if not isinstance(batch, (list, tuple)) or len(batch) < 2 or not isinstance(batch[1], (list, tuple)):
            raise ValueError("seq %d: payload is not [ts, [events], dp_rank]: %r" % (seq, batch))
        self.stats["dp_ranks"].add(batch[2] if len(batch) > 2 else None)
        self.stats["topics"].add(topic)
        self.index.apply(pod, model, batch[1])
        self.stats["batches"] += 1
        self.stats["events"] += len(batch[1])
        self.last_seq = seq

    def replay(self, start):
        """Asks the replay socket for the batches from start on and applies them in order."""
        if not self.replay_endpoint:
            return False
        self.stats["replays"] += 1
        d = self.ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        d.connect(self.replay_endpoint)
        try:
            d.send_multipart([b"", struct.pack(">Q", start)])
            expect = start
            while True:
                if not d.poll(5000):
                    raise RuntimeError("replay from %d: no answer from %s" % (start, self.replay_endpoint))
                frames = d.recv_multipart()
                if frames and not frames[0]:
                    frames = frames[1:]
                # vLLM's answer (llm-d reads only this form): [topic, seq, payload],
                # then [b"", END_SEQ, b""]
                if len(frames) != 3 or len(frames[1]) != 8:
                    raise RuntimeError("replay from %d: malformed frame of %d parts %r"
                                       % (start, len(frames), [f[:16] for f in frames]))
                if not frames[2]:
                    return True
                seq = struct.unpack(">Q", frames[1])[0]
                if seq != expect:
                    raise RuntimeError("replay from %d: expected seq %d, got %d" % (start, expect, seq))
                self._apply(frames[0].decode(), seq, frames[2])
                self.stats["replayed"] += 1
                expect += 1
        finally:
            d.close(0)

    def _live(self, topic, seq, payload):
        if not self.replay_endpoint:
            # llm-d without a replay socket applies every batch as it comes
            self.last_live = seq
            self._apply(topic, seq, payload)
            return
        if self.last_live is not None and seq < self.last_live:
            # the stream went backwards: a restarted server
            self.stats["resets"] += 1
            self.reset(topic)
        if self.last_live is not None and seq == self.last_live:
            return
        self.last_live = seq
        if self.last_seq is not None and seq <= self.last_seq:
            return
        if self.last_seq is not None and seq > self.last_seq + 1:
            self.stats["gaps"] += 1
            if not self.replay(self.last_seq + 1):
                return
        elif self.last_seq is None and seq > 0:
            if not self.replay(0):
                return
        if self.last_seq is not None and seq != self.last_seq + 1:
            return
        self._apply(topic, seq, payload)

    def reset(self, topic=None):
        pod = parse_topic(topic)[0] if topic else self.pod
        if pod is not None:
            self.index.clear_pod(pod)
        self.last_seq = None
        self.last_live = None
        self.replay(0)

    def pump(self, timeout_ms=0):
        """Applies every frame that has arrived (waiting up to timeout_ms for the first)."""
        n = 0
        while self.sub.poll(timeout_ms if n == 0 else 0):
            frames = self.sub.recv_multipart()
            if len(frames) != 3 or len(frames[1]) != 8:
                raise ValueError("malformed event frame: %d parts" % len(frames))
            topic = frames[0].decode()
            seq = struct.unpack(">Q", frames[1])[0]
            n += 1
            if seq in self.drop_seqs:
                self.drop_seqs.discard(seq)
                self.stats["dropped_on_purpose"] += 1
                continue
            self._live(topic, seq, frames[2])
        return n

    def sync(self, server_last_seq, timeout_s=10.0):
        """Waits until the batch server_last_seq (from /metrics) has been applied.
        A server whose sequence is behind ours was restarted: rebuild from its replay."""
        if server_last_seq is None:
            self.pump(0)
            return
        if self.last_seq is not None and server_last_seq < self.last_seq:
            self.stats["resets"] += 1
            self.reset()
        end = time.monotonic() + timeout_s
        quiet = 0
        while self.last_seq is None or self.last_seq < server_last_seq:
            if time.monotonic() > end:
                raise RuntimeError("events up to seq %d never arrived (last applied %s)"
                                   % (server_last_seq, self.last_seq))
            quiet = 0 if self.pump(50) else quiet + 1
            if quiet >= 4 and self.replay_endpoint:
                # the server's metrics say a batch went out that never came (lost
                # with no later batch to show the gap): the replay socket has it
                self.stats["behind"] += 1
                self.replay(0 if self.last_seq is None else self.last_seq + 1)
                quiet = 0
