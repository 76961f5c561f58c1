#!/usr/bin/python3
"""stub_openai_server.py - a tiny OpenAI chat-completions server for testing
`deltaserve canary` and `deltaserve bench-serve` without a model.

    stub_openai_server.py --port P [--fault | --fault-every N] [--token-delay S]

Answers GET /health, GET /v1/models and POST /v1/chat/completions (streaming
with SSE and stream_options.include_usage, or not). With --fault every chat
request is answered like the incident it stands for: HTTP 200 with
finish_reason "error", content null and zero token counts; with
--fault-every N only every Nth chat request (counted from 1) is.
"""
import argparse
import json
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "stub-openai/1"

    def log_message(self, fmt, *args):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self.send_json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})
        else:
            self.send_json(404, {"error": {"message": "not found"}})

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        try:
            req = json.loads(self.rfile.read(n))
        except ValueError:
            self.send_json(400, {"error": {"message": "bad json"}})
            return
        if self.path != "/v1/chat/completions":
            self.send_json(404, {"error": {"message": "not found"}})
            return
        opts = self.server.opts
        max_tokens = int(req.get("max_tokens") or 16)
        prompt = " ".join(str(m.get("content", "")) for m in req.get("messages", []))
        prompt_tokens = max(1, len(prompt.split()))
        thinking = (req.get("chat_template_kwargs") or {}).get("enable_thinking", True)
        rnd = random.Random(prompt_tokens)
        n_out = max_tokens if req.get("ignore_eos") else max(1, min(max_tokens, rnd.randint(1, max_tokens)))
        finish = "length" if n_out == max_tokens else "stop"
        toks = [rnd.choice(WORDS) + " " for _ in range(n_out)]
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n_out, "total_tokens": prompt_tokens + n_out}
        with self.server.lock:
            self.server.n_chat += 1
            nth = self.server.n_chat
        if opts.fault or (opts.fault_every > 0 and nth % opts.fault_every == 0):
            finish, toks = "error", []
            usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        base = {"id": "chatcmpl-stub", "created": int(time.time()), "model": req.get("model", "stub")}
        if not req.get("stream"):
            msg = {"role": "assistant", "content": "".join(toks) if toks else None}
            self.send_json(200, dict(base, object="chat.completion", usage=usage,
                                     choices=[{"index": 0, "message": msg, "finish_reason": finish}]))
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()

        def chunk(delta, fin=None, **extra):
            obj = dict(base, object="chat.completion.chunk",
                       choices=[{"index": 0, "delta": delta, "finish_reason": fin}], **extra)
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()

        chunk({"role": "assistant", "content": ""})
        for i, t in enumerate(toks):
            time.sleep(opts.token_delay)
            key = "reasoning_content" if thinking and i < len(toks) // 2 else "content"
            chunk({key: t})
        chunk({}, finish)
        if (req.get("stream_options") or {}).get("include_usage"):
            obj = dict(base, object="chat.completion.chunk", choices=[], usage=usage)
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--fault", action="store_true")
    ap.add_argument("--fault-every", type=int, default=0)
    ap.add_argument("--token-delay", type=float, default=0.002)
    opts = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", opts.port), Handler)
    srv.daemon_threads = True
    srv.opts = opts
    srv.lock = threading.Lock()
    srv.n_chat = 0
    print("stub server on port %d" % opts.port, file=sys.stderr, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
