#!/usr/bin/env python3
"""bench_replicas.py - two deltaserve replicas behind a prefix-aware picker
that reads their KV events, against the same traffic sent round-robin.

  make bench-replicas                     (the default model, build/models/default.gguf)
  python3 scripts/bench_replicas.py --model M.gguf [--users 24 --turns 4 --concurrency 4 ...]

The traffic: many users, each sharing one of a few long system prompts,
each holding a multi-turn chat (the assistant's answers in the history are
fixed texts, so both policies see the same prompts), several users in flight
at once. Each policy gets two fresh replicas (empty caches).

The picker ("prefix"): llm-d's default precise-prefix profile, roughly. It
asks replica 0 for the prompt's token ids (/v1/chat/completions/render),
makes llm-d's block keys (tests/scale/llmd_index.py) and scores each replica
  2 x (blocks of the prompt indexed on the replica without a break, from the
       first) / (blocks of the prompt)                    prefix-cache-scorer
  + 1 x (1 - vllm:kv_cache_usage_perc)                     kv-cache-utilization-scorer
  + 1 x (fewest waiting: 1 ... most: 0, min-max)           queue-scorer
and takes the highest, ties to the replica with fewer requests running,
then to the lower index (llm-d breaks ties at random). Waiting and running
are the picker's own counts of what it sent (waiting: past the replica's
--max-running), where llm-d reads vllm:num_requests_waiting every 50 ms;
the KV usage is read from /metrics every 100 ms. "round-robin" alternates.
TTFT is measured from sending the request to the replica (routing time is
not in it) to the first streamed token. Prints one table."""
import argparse
import json
import os
import queue
import random
import statistics
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "scale"))
import zmq  # noqa: E402

from llmd_index import Index, Subscriber, TokenProcessor  # noqa: E402
from replica import Replica  # noqa: E402

WORDS = ("cache route token block model replica prefix query answer system user policy queue memory "
         "state layer state checkpoint window event index server request stream latency budget").split()


def words(rng, n_chars):
    out = []
    while sum(len(w) + 1 for w in out) < n_chars:
        out.append(rng.choice(WORDS))
    return " ".join(out)


def make_traffic(args):
    """Per user: the list of message lists, one per turn."""
    rng = random.Random(args.seed)
    systems = ["You are agent %d. %s" % (i, words(rng, args.system_chars)) for i in range(args.systems)]
    users = []
    for u in range(args.users):
        msgs = [{"role": "system", "content": systems[u % args.systems]}]
        turns = []
        for t in range(args.turns):
            msgs = msgs + [{"role": "user", "content": "user %d turn %d: %s" % (u, t, words(rng, args.user_chars))}]
            turns.append(msgs)
            msgs = msgs + [{"role": "assistant", "content": "Answer %d.%d: %s" % (u, t, words(rng, args.answer_chars))}]
        users.append(turns)
    return users


def stream_chat(url, body):
    """(ttft seconds, usage) of a streamed chat completion."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    ttft, usage = None, None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for c in chunk.get("choices") or []:
                d = c.get("delta") or {}
                if ttft is None and (d.get("content") or d.get("reasoning_content") or c.get("finish_reason")):
                    ttft = time.monotonic() - t0
    return ttft, usage


class Picker:
    def __init__(self, reps, index, subs, block, max_running):
        self.reps, self.index, self.subs = reps, index, subs
        self.max_running = max_running
        self.tp = TokenProcessor(block)
        self.lock = threading.Lock()
        self.inflight = [0] * len(reps)
        self.kv_usage = [0.0] * len(reps)
        self.stop = False
        self.thread = threading.Thread(target=self.follow, daemon=True)
        self.thread.start()

    def follow(self):
        last_scrape = 0
        while not self.stop:
            for s in self.subs:
                with self.lock:
                    s.pump(0)
            if time.monotonic() - last_scrape > 0.1:
                last_scrape = time.monotonic()
                for i, r in enumerate(self.reps):
                    try:
                        m = r.metrics()
                        self.kv_usage[i] = next((v for k, v in m.items() if "kv_cache_usage_perc" in k), 0.0)
                    except OSError:
                        pass
            time.sleep(0.005)

    def pick(self, body):
        tokens = self.reps[0].render(body)
        keys = self.tp.keys(None, tokens, self.reps[0].model_name)
        with self.lock:
            chains = [self.index.chain(keys, s.pod) if s.pod else 0 for s in self.subs]
            # the queue scorer reads requests waiting for a slot: those past --max-running
            waiting = [max(0, n - self.max_running) for n in self.inflight]
            lo, hi = min(waiting), max(waiting)
            scores = []
            for i in range(len(self.reps)):
                prefix = chains[i] / len(keys) if keys else 0.0
                q = 1.0 if hi == lo else (hi - waiting[i]) / (hi - lo)
                scores.append(2 * prefix + (1 - self.kv_usage[i]) + q)
            best = max(range(len(self.reps)), key=lambda i: (round(scores[i], 6), -self.inflight[i], -i))
            self.inflight[best] += 1
        return best, chains[best]

    def done(self, i):
        with self.lock:
            self.inflight[i] -= 1

    def close(self):
        self.stop = True
        self.thread.join()


def run_policy(policy, args, users, work):
    ctx = zmq.Context()
    extra = ["--threads", str(args.threads), "--state-checkpoint-interval", str(args.block),
             "--kv-mb", str(args.kv_mb), "--cache-state-mb", str(args.cache_state_mb),
             "--max-running", str(args.max_running)]
    reps = [Replica(args.bin, args.model, "%s-%d" % (policy, i), work, model_name="bench", extra_args=extra,
                    replay=False) for i in range(2)]
    for r in reps:
        r.start()
    index = Index(TokenProcessor(args.block))
    subs = [Subscriber(ctx, index, r.events_endpoint) for r in reps]
    time.sleep(0.3)  # the subscribers connect
    picker = Picker(reps, index, subs, args.block, args.max_running) if policy == "prefix" else None
    rr = [0]
    results, errors = [], []
    todo = queue.Queue()
    for u in range(len(users)):
        todo.put((u, 0))
    lock = threading.Lock()
    remaining = [sum(len(t) for t in users)]

    def worker():
        while True:
            with lock:
                if remaining[0] == 0:
                    return
            try:
                u, t = todo.get(timeout=0.1)
            except queue.Empty:
                continue
            body = {"model": "bench", "messages": users[u][t], "max_tokens": args.max_tokens, "temperature": 0}
            try:
                if picker:
                    i, chain = picker.pick(body)
                else:
                    with lock:
                        i = rr[0] % 2
                        rr[0] += 1
                ttft, usage = stream_chat(reps[i].url, body)
                if picker:
                    picker.done(i)
                with lock:
                    results.append((i, ttft, usage["prompt_tokens"],
                                    (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)))
            except Exception as e:  # noqa: BLE001 - a benchmark reports and goes on
                with lock:
                    errors.append("%s user %d turn %d: %s" % (policy, u, t, e))
            with lock:
                remaining[0] -= 1
            if t + 1 < len(users[u]):
                todo.put((u, t + 1))

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.monotonic() - t0
    if picker:
        picker.close()
    for s in subs:
        s.close()
    for r in reps:
        r.stop()
    ctx.term()
    return results, errors, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "deltaserve"))
    ap.add_argument("--model", default=os.path.join(ROOT, "build", "models", "default.gguf"))
    ap.add_argument("--users", type=int, default=24)
    ap.add_argument("--systems", type=int, default=3)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--system-chars", type=int, default=360)
    ap.add_argument("--user-chars", type=int, default=60)
    ap.add_argument("--answer-chars", type=int, default=60)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--block", type=int, default=64, help="--state-checkpoint-interval of the replicas")
    ap.add_argument("--kv-mb", type=float, default=16)
    ap.add_argument("--cache-state-mb", type=float, default=16)
    ap.add_argument("--max-running", type=int, default=4, help="--max-running of the replicas")
    ap.add_argument("--threads", type=int, default=1, help="compute threads per replica")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--policies", default="round-robin,prefix")
    ap.add_argument("--work", default=None, help="folder for the server logs (default: a temporary one)")
    args = ap.parse_args()
    import tempfile
    work = args.work or tempfile.mkdtemp(prefix="bench-replicas.")
    os.makedirs(work, exist_ok=True)
    users = make_traffic(args)
    print("model %s; %d users x %d turns over %d system prompts (~%d chars), concurrency %d, block %d, "
          "max_tokens %d, %d thread(s) per replica; logs in %s" % (
              os.path.basename(args.model), args.users, args.turns, args.systems, args.system_chars,
              args.concurrency, args.block, args.max_tokens, args.threads, work))
    rows = []
    for policy in args.policies.split(","):
        results, errors, wall = run_policy(policy, args, users, work)
        for e in errors[:5]:
            print("error: " + e)
        ttfts = sorted(r[1] for r in results if r[1] is not None)
        prompt = sum(r[2] for r in results)
        cached = sum(r[3] for r in results)
        per = [sum(1 for r in results if r[0] == i) for i in range(2)]

        def pct(p):
            return ttfts[min(len(ttfts) - 1, int(p * len(ttfts)))] * 1000 if ttfts else float("nan")
        rows.append((policy, len(results), prompt, cached, 100.0 * cached / max(1, prompt),
                     statistics.mean(ttfts) * 1000 if ttfts else float("nan"), pct(0.5), pct(0.9),
                     "%d/%d" % tuple(per), wall, len(errors)))
    print()
    print("| policy | requests | prompt tokens | cached tokens | hit rate | mean TTFT | p50 TTFT | p90 TTFT "
          "| per replica | wall | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| %s | %d | %d | %d | %.1f%% | %.0f ms | %.0f ms | %.0f ms | %s | %.1f s | %d |" % r)


if __name__ == "__main__":
    main()
