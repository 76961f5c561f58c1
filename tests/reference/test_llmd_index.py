"""Checks tests/scale/llmd_index.py (the llm-d style indexer the scale tests
trust) against a publisher written here in vLLM's wire format: the key
scheme, BlockStored with and without a known parent, BlockRemoved,
AllBlocksCleared, both event forms, a lost batch refilled from the replay
socket, a restarted stream and joining mid-stream. Prints ok/FAIL lines and
"RESULT passed=N failed=M"."""
import os
import struct
import sys
import threading
import time

import cbor2
import msgpack
import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scale"))
from llmd_index import Index, Subscriber, TokenProcessor, fnv64a  # noqa: E402

passed = failed = 0


def check(name, cond, why=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok " + name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, why or "no"))


class FakePublisher:
    """vLLM's ZeroMQ publisher: PUB [topic, seq, payload], ROUTER replay
    answering [topic, seq, payload]... then ["", END_SEQ, ""]."""

    def __init__(self, ctx, topic):
        self.topic = topic.encode()
        self.pub = ctx.socket(zmq.PUB)
        self.port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.router = ctx.socket(zmq.ROUTER)
        self.rport = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.kept, self.seq = [], 0
        self.stop = False
        self.t = threading.Thread(target=self.serve, daemon=True)
        self.t.start()

    def serve(self):
        while not self.stop:
            if self.router.poll(20):
                ident, _, start = self.router.recv_multipart()
                s = struct.unpack(">Q", start)[0]
                for seq, payload in list(self.kept):
                    if seq >= s:
                        self.router.send_multipart([ident, b"", self.topic, struct.pack(">Q", seq), payload])
                self.router.send_multipart([ident, b"", b"", struct.pack(">q", -1), b""])

    def send(self, events, live=True):
        payload = msgpack.packb([time.time(), events, None])
        self.kept.append((self.seq, payload))
        if live:
            self.pub.send_multipart([self.topic, struct.pack(">Q", self.seq), payload])
        self.seq += 1
        return self.seq - 1

    def close(self):
        self.stop = True
        self.t.join()
        self.pub.close(0)
        self.router.close(0)


def stored(hashes, parent, tokens, bs, extra=None):
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
            "block_size": bs, "lora_id": None, "medium": None, "lora_name": None, "extra_keys": extra,
            "group_idx": 0, "kv_cache_spec_kind": "full_attention", "kv_cache_spec_sliding_window": None}


def main():
    # the key scheme: FNV-64a over canonical CBOR of [parent, tokens, extra]
    tp = TokenProcessor(4)
    check("fnv64a of the empty string is the offset basis", fnv64a(b"") == 0xCBF29CE484222325)
    check("fnv64a('a')", fnv64a(b"a") == 0xAF63DC4C8601EC8C)
    root = fnv64a(cbor2.dumps([fnv64a(b""), None, "m"], canonical=True))
    check("root key = H([seed, null, model])", tp.root("m") == root)
    k = tp.keys(None, [1, 2, 3, 4, 5, 6, 7, 8, 9], "m")
    check("whole blocks only", len(k) == 2)
    check("block key = H([parent, tokens, null])",
          k[0] == fnv64a(bytes([0x83]) + cbor2.dumps(root) + bytes([0x84, 1, 2, 3, 4, 0xF6])))
    check("chained", k[1] == fnv64a(cbor2.dumps([k[0], [5, 6, 7, 8], None], canonical=True)))
    img = tp.keys(None, [1, 2, 3, 4], "m", [["abc"]])
    check("an image's id changes the key: H([parent, tokens, [{Hash: id}]])",
          img[0] == fnv64a(cbor2.dumps([root, [1, 2, 3, 4], [{"Hash": "abc"}]], canonical=True)) and img[0] != k[0])
    check("another model, another chain", tp.keys(None, [1, 2, 3, 4], "n")[0] != k[0])

    ctx = zmq.Context()
    pub = FakePublisher(ctx, "kv@10.0.0.1:8000@m")
    idx = Index(TokenProcessor(4))
    sub = Subscriber(ctx, idx, "tcp://127.0.0.1:%d" % pub.port, "tcp://127.0.0.1:%d" % pub.rport)
    time.sleep(0.3)   # the SUB connects (a PUB drops what no one hears yet)
    pod = "10.0.0.1:8000"
    toks = list(range(100, 116))
    keys = TokenProcessor(4).keys(None, toks, "m")
    s = pub.send([{"type": "AllBlocksCleared"}, stored([11, 12], None, toks[:8], 4)])
    sub.sync(s)
    check("two stored blocks index two keys", idx.chain(keys, pod) == 2, str(idx.chain(keys, pod)))
    s = pub.send([["BlockStored", [13, 14], 12, toks[8:16], 4, None, None, None, None, 0, "full_attention", None]])
    sub.sync(s)
    check("the positional form, chained on the parent's key", idx.chain(keys, pod) == 4)
    s = pub.send([stored([99], 98, [1, 2, 3, 4], 4)])
    sub.sync(s)
    check("a block whose parent is unknown is dropped", idx.counts["orphans"] == 1)
    s = pub.send([{"type": "BlockRemoved", "block_hashes": [13], "medium": None, "group_idx": 0}])
    sub.sync(s)
    check("a removed block cuts the chain", idx.chain(keys, pod) == 2)
    lost = pub.send([stored([13], 12, toks[8:12], 4)], live=False)
    s = pub.send([stored([14], 13, toks[12:16], 4)])
    sub.sync(s)
    check("a lost batch is found as a gap and replayed", idx.chain(keys, pod) == 4 and sub.stats["gaps"] == 1,
          "chain %d gaps %d (lost seq %d)" % (idx.chain(keys, pod), sub.stats["gaps"], lost))
    # a restarted server: sequence numbers start again from 0
    pub.kept, pub.seq = [], 0
    s = pub.send([{"type": "AllBlocksCleared"}, stored([21], None, toks[:4], 4)])
    sub.sync(s)
    check("a stream that goes back to 0 resets the pod and replays",
          idx.chain(keys, pod) == 1 and sub.stats["resets"] == 1,
          "chain %d resets %d" % (idx.chain(keys, pod), sub.stats["resets"]))
    # a second subscriber joining now gets everything from the replay socket
    idx2 = Index(TokenProcessor(4))
    sub2 = Subscriber(ctx, idx2, "tcp://127.0.0.1:%d" % pub.port, "tcp://127.0.0.1:%d" % pub.rport)
    check("joining mid-stream replays from 0", idx2.chain(keys, pod) == 1 and sub2.last_seq == s)
    # an engine block of 8 tokens indexed at 4: one engine hash, two keys
    idx3 = Index(TokenProcessor(4))
    idx3.apply(pod, "m", [stored([31], None, toks[:8], 8)])
    check("an engine block of two index blocks maps to both keys", idx3.chain(keys, pod) == 2)
    idx3.apply(pod, "m", [{"type": "BlockRemoved", "block_hashes": [31], "medium": None, "group_idx": 0}])
    check("and its removal drops both", idx3.chain(keys, pod) == 0)
    idx3.apply(pod, "m", [{"type": "BlockRemoved", "block_hashes": [31], "medium": None, "group_idx": 5}])
    check("a removal for a group never stored is skipped", idx3.counts["skipped"] == 1)
    sub.close()
    sub2.close()
    pub.close()
    ctx.term()
    print("RESULT passed=%d failed=%d" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
