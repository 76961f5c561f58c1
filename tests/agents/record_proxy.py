#!/usr/bin/python3
"""record_proxy.py - a recording HTTP proxy in front of `deltaserve serve`, so
that a test can say exactly what a client sent and what it got back.

    record_proxy.py --port P --upstream http://127.0.0.1:Q --log FILE

Forwards every request unchanged and passes the answer back as its bytes
arrive (a streamed answer stays streamed). Appends one JSON line per request
to FILE: method, path, the request headers' names, the request body's
top-level fields (and of `stream_options`, the tool names and types,
`tool_choice`), with --bodies the body itself, the answer's status and content type, and how many separate
reads the answer body took (more than one: it arrived in parts).
"""
import argparse
import http.client
import json
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection", "host",
       "content-length"}


def summarise(body):
    try:
        req = json.loads(body)
    except ValueError:
        return {"json": False}
    if not isinstance(req, dict):
        return {"json": False}
    s = {"json": True, "fields": sorted(req)}
    if isinstance(req.get("stream_options"), dict):
        s["stream_options"] = req["stream_options"]
    if "stream" in req:
        s["stream"] = req["stream"]
    if isinstance(req.get("tools"), list):
        s["tools"] = [(t.get("type"), (t.get("function") or {}).get("name", t.get("name")))
                      for t in req["tools"] if isinstance(t, dict)]
    if "tool_choice" in req:
        s["tool_choice"] = req["tool_choice"]
    for k in ("max_tokens", "max_completion_tokens", "temperature", "top_p"):
        if k in req:
            s[k] = req[k]
    if isinstance(req.get("messages"), list):
        s["roles"] = [m.get("role") for m in req["messages"] if isinstance(m, dict)]
    return s


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def forward(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        up = self.server.upstream
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=300)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        rec = {"method": self.command, "path": self.path, "headers": sorted(k.lower() for k in self.headers)}
        if body:
            rec["body"] = summarise(body)
            rec["body_bytes"] = len(body)
            if self.server.bodies:
                with self.server.lock:
                    self.server.n += 1
                    rec["body_file"] = "%s/%03d.json" % (self.server.bodies, self.server.n)
                with open(rec["body_file"], "wb") as f:
                    f.write(body)
        reads = 0
        try:
            conn.request(self.command, self.path, body=body if body else None, headers=headers)
            resp = conn.getresponse()
            rec["status"] = resp.status
            rec["content_type"] = resp.getheader("Content-Type", "")
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in HOP:
                    self.send_header(k, v)
            head = self.command == "HEAD"
            if not head:
                self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            while not head:
                part = resp.read1(65536)
                if not part:
                    break
                reads += 1
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
            if not head:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (OSError, http.client.HTTPException) as e:
            rec["error"] = str(e)
        finally:
            conn.close()
            self.close_connection = True
        rec["reads"] = reads
        with self.server.lock, open(self.server.log, "a") as f:
            f.write(json.dumps(rec) + "\n")

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_OPTIONS = forward


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--bodies", help="also keep each request body, as DIR/NNN.json")
    opts = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", opts.port), Handler)
    srv.daemon_threads = True
    srv.upstream = urllib.parse.urlparse(opts.upstream)
    srv.log = opts.log
    srv.lock = threading.Lock()
    srv.bodies = opts.bodies
    srv.n = 0
    print("record proxy on port %d" % srv.server_address[1], file=sys.stderr, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
