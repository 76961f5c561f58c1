"""replica.py - one `deltaserve serve` process with KV events, for the scale tests.

Starts the server on 127.0.0.1 with its event sockets on free ports, waits
for "ready:", and offers the calls a router makes: render, completions,
/metrics. restart() starts it again on the same ports (a container restarted
in place keeps its address)."""
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    def __init__(self, binary, model, name, log_dir, model_name="tiny", extra_args=(), replay=True):
        self.binary, self.model, self.name = binary, model, name
        self.model_name = model_name
        self.log_path = os.path.join(log_dir, "server-%s.log" % name)
        self.extra = list(extra_args)
        self.port = 0
        self.ev_port = free_port()
        self.replay_port = free_port() if replay else None
        self.proc = None
        self.starts = 0

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    @property
    def events_endpoint(self):
        return "tcp://127.0.0.1:%d" % self.ev_port

    @property
    def replay_endpoint(self):
        return "tcp://127.0.0.1:%d" % self.replay_port if self.replay_port else None

    def start(self, timeout_s=60):
        args = [self.binary, "serve", "-m", self.model, "--port", str(self.port),
                "--served-model-name", self.model_name,
                "--kv-events-endpoint", "tcp://127.0.0.1:%d" % self.ev_port]
        if self.replay_port:
            args += ["--kv-events-replay-endpoint", "tcp://127.0.0.1:%d" % self.replay_port]
        args += self.extra
        self.starts += 1
        log = open(self.log_path, "a")
        log.write("=== start %d: %s\n" % (self.starts, " ".join(args)))
        log.flush()
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            text = open(self.log_path).read().split("=== start %d:" % self.starts)[-1]
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
            if m and "ready:" in text:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited %d at start: %s" % (self.name, self.proc.returncode, text[-800:]))
            time.sleep(0.05)
        raise RuntimeError("%s not ready after %d s" % (self.name, timeout_s))

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode if self.proc else 0
        self.proc = None
        return rc

    def restart(self):
        self.stop()
        self.start()

    def post(self, path, body, timeout=120):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise RuntimeError("%s %s: HTTP %d %s" % (self.name, path, e.code, e.read()[:300]))

    def render(self, body):
        """Token ids of a completion or chat request, as llm-d asks for them."""
        return self.render_full(body)["token_ids"]

    def render_full(self, body):
        """The whole render answer (the first prompt's): token_ids, features..."""
        if "messages" in body:
            return self.post("/v1/chat/completions/render", body)
        out = self.post("/v1/completions/render", body)
        return out[0] if isinstance(out, list) else out

    def metrics(self):
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
        return out


def kv_event_state(metrics):
    """(last sequence number sent or None, events in flight or None) from /metrics."""
    last = None
    pushed = sent = None
    for name, v in metrics.items():
        base = name.split("{")[0]
        if "kv_event" not in base:
            continue
        if "seq" in base:
            last = None if v < 0 else int(v)
        elif base.endswith("pushed_total") or base.endswith("queued_total"):
            pushed = v
        elif base.endswith("events_sent_total") or base.endswith("events_published_total"):
            sent = v
    # queued counts the pushes that entered the ring (a dropped one never did)
    inflight = None
    if pushed is not None and sent is not None:
        inflight = pushed - sent
    return last, inflight
