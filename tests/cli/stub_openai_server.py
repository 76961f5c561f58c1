#!/usr/bin/python3
"""stub_openai_server.py - a tiny OpenAI chat-completions, OpenAI Responses and
Anthropic Messages server for testing `deltaserve canary` and
`deltaserve bench-serve` without a model.

    stub_openai_server.py --port P [--fault | --fault-every N] [--misbehave M] [--token-delay S]

Answers GET /health, GET /v1/models and POST /v1/chat/completions (streaming
with SSE and stream_options.include_usage, or not). With --fault every chat
request is answered like the incident it stands for: HTTP 200 with
finish_reason "error", content null and zero token counts; with
--fault-every N only every Nth chat request (counted from 1) is.

POST /v1/responses and POST /v1/messages (x-api-key, anthropic-version)
answer by their APIs' rules, streamed or not. --misbehave M makes both answer
HTTP 200 with a fault inside, one kind per M:
  failed        responses: status "failed" (stream: response.failed last);
                messages: stop_reason "error"
  no-stop       streams end without their terminal event (response.completed,
                message_stop)
  zero-input    input_tokens 0 (responses: usage; messages: usage and message_start)
  out-of-order  responses: response.output_text.delta before its
                output_item.added; messages: content_block_delta before its
                content_block_start
  error-event   an `error` event in the middle of each stream
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
        if self.path == "/v1/responses":
            self.answer_responses(req)
            return
        if self.path == "/v1/messages":
            self.answer_messages(req)
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

    # --- Responses and Messages ------------------------------------------

    def answer(self, req, max_key):
        """(thinking, prompt_tokens, reasoning words, text words, cut)"""
        max_tokens = int(req.get(max_key) or 16)
        if "messages" in req:
            prompt = " ".join(str(m.get("content", "")) for m in req["messages"])
            thinking = (req.get("thinking") or {}).get("type") in ("enabled", "adaptive")
        else:
            prompt = str(req.get("input", ""))
            thinking = (req.get("reasoning") or {}).get("effort", "medium") not in ("none", "minimal")
        prompt_tokens = max(1, len(prompt.split()))
        rnd = random.Random(prompt_tokens)
        n_out = max_tokens if req.get("ignore_eos") else max(2, min(max_tokens, rnd.randint(1, max_tokens)))
        n_out = min(n_out, max_tokens)
        toks = [rnd.choice(WORDS) + " " for _ in range(n_out)]
        n_think = len(toks) // 2 if thinking else 0
        return thinking, prompt_tokens, toks[:n_think], toks[n_think:], n_out == max_tokens

    def start_sse(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def event(self, name, obj):
        time.sleep(self.server.opts.token_delay if name.endswith("delta") else 0)
        self.wfile.write(b"event: " + name.encode() + b"\ndata: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()

    def answer_responses(self, req):
        bad = self.server.opts.misbehave
        thinking, n_in, think, text, cut = self.answer(req, "max_output_tokens")
        n_out = len(think) + len(text)
        usage = {"input_tokens": 0 if bad == "zero-input" else n_in, "output_tokens": n_out,
                 "total_tokens": (0 if bad == "zero-input" else n_in) + n_out,
                 "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens_details": {"reasoning_tokens": len(think)}}
        status = "failed" if bad == "failed" else "incomplete" if cut else "completed"
        items = []
        if think:
            items.append({"type": "reasoning", "id": "rs_1", "summary": [],
                          "content": [{"type": "reasoning_text", "text": "".join(think)}]})
        items.append({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": "".join(text), "annotations": []}]})
        resp = {"id": "resp_stub", "object": "response", "created_at": int(time.time()), "model": req.get("model", "stub"),
                "status": status, "output": items, "usage": usage, "error": None,
                "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None}
        if status == "failed":
            resp["error"] = {"code": "server_error", "message": "the model failed"}
        if not req.get("stream"):
            self.send_json(200, resp)
            return
        self.start_sse()
        seq = [0]

        def ev(name, **kw):
            kw = dict({"type": name, "sequence_number": seq[0]}, **kw)
            seq[0] += 1
            self.event(name, kw)

        early = dict(resp, status="in_progress", output=[], usage=None, incomplete_details=None, error=None)
        ev("response.created", response=early)
        ev("response.in_progress", response=early)
        for oi, item in enumerate(items):
            if bad == "out-of-order" and item["type"] == "message":
                ev("response.output_text.delta", output_index=oi, content_index=0, item_id=item["id"], delta="x")
            ev("response.output_item.added", output_index=oi, item=dict(item, content=[]))
            if item["type"] == "reasoning":
                for t in think:
                    ev("response.reasoning_text.delta", output_index=oi, content_index=0, item_id=item["id"], delta=t)
                ev("response.reasoning_text.done", output_index=oi, content_index=0, item_id=item["id"], text="".join(think))
            else:
                part = {"type": "output_text", "text": "", "annotations": []}
                ev("response.content_part.added", output_index=oi, content_index=0, item_id=item["id"], part=part)
                for i, t in enumerate(text):
                    if bad == "error-event" and i == len(text) // 2:
                        ev("error", code="server_error", message="the model failed mid-stream")
                    ev("response.output_text.delta", output_index=oi, content_index=0, item_id=item["id"], delta=t)
                done = ("x" if bad == "out-of-order" else "") + "".join(text)
                ev("response.output_text.done", output_index=oi, content_index=0, item_id=item["id"], text=done)
                ev("response.content_part.done", output_index=oi, content_index=0, item_id=item["id"],
                   part=dict(part, text=done))
            ev("response.output_item.done", output_index=oi, item=item)
        if bad != "no-stop":
            ev("response.failed" if status == "failed" else "response.incomplete" if cut else "response.completed",
               response=resp)

    def answer_messages(self, req):
        if not self.headers.get("anthropic-version"):
            self.send_json(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                            "message": "anthropic-version header is required"}})
            return
        bad = self.server.opts.misbehave
        thinking, n_in, think, text, cut = self.answer(req, "max_tokens")
        n_in = 0 if bad == "zero-input" else n_in
        stop = "error" if bad == "failed" else "max_tokens" if cut else "end_turn"
        blocks = []
        if think:
            blocks.append({"type": "thinking", "thinking": "".join(think), "signature": ""})
        blocks.append({"type": "text", "text": "".join(text)})
        msg = {"id": "msg_stub", "type": "message", "role": "assistant", "model": req.get("model", "stub"),
               "content": blocks, "stop_reason": stop, "stop_sequence": None,
               "usage": {"input_tokens": n_in, "output_tokens": len(think) + len(text)}}
        if not req.get("stream"):
            self.send_json(200, msg)
            return
        self.start_sse()
        self.event("message_start", {"type": "message_start", "message": dict(
            msg, content=[], stop_reason=None, usage={"input_tokens": n_in, "output_tokens": 1})})
        self.event("ping", {"type": "ping"})
        for i, b in enumerate(blocks):
            words = think if b["type"] == "thinking" else text
            kind, key = ("thinking_delta", "thinking") if b["type"] == "thinking" else ("text_delta", "text")
            if bad == "out-of-order" and b["type"] == "text":
                self.event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                   "delta": {"type": kind, key: "x"}})
            self.event("content_block_start", {"type": "content_block_start", "index": i,
                                               "content_block": dict(b, **{key: ""})})
            for k, t in enumerate(words):
                if bad == "error-event" and b["type"] == "text" and k == len(words) // 2:
                    self.event("error", {"type": "error", "error": {"type": "api_error", "message": "mid-stream"}})
                self.event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                   "delta": {"type": kind, key: t}})
            self.event("content_block_stop", {"type": "content_block_stop", "index": i})
        self.event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": len(think) + len(text)}})
        if bad != "no-stop":
            self.event("message_stop", {"type": "message_stop"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--fault", action="store_true")
    ap.add_argument("--fault-every", type=int, default=0)
    ap.add_argument("--token-delay", type=float, default=0.002)
    ap.add_argument("--misbehave", choices=["failed", "no-stop", "zero-input", "out-of-order", "error-event"])
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
