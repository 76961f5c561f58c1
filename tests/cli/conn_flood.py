"""Idle and slow clients must not starve the probes (run by test_server.sh).

usage: conn_flood.py PORT KEY IDLE_TIMEOUT HEADER_TIMEOUT

Against a server on 127.0.0.1:PORT started with --idle-timeout IDLE_TIMEOUT
--header-timeout HEADER_TIMEOUT (and the default --max-connections 256):
opens 300 connections that send nothing and 20 that send a request's headers
one byte a second (slowloris), then checks that /health, /metrics and a chat
request are answered, that the server closes the idle connections within
IDLE_TIMEOUT (plus slack) and the slow ones within HEADER_TIMEOUT of their
first byte (plus slack) although they never stop sending. Every wait is
bounded. Prints ok/FAIL lines and "RESULT passed=N failed=M".
"""
import json
import select
import socket
import sys
import threading
import time

PORT, KEY = int(sys.argv[1]), sys.argv[2]
IDLE, HEADER = float(sys.argv[3]), float(sys.argv[4])
N_IDLE, N_SLOW = 300, 20
SLACK = 5.0
passed = failed = 0


def report(ok, name, why=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok " + name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, why))


def request(method, path, body=None, timeout=30.0):
    """One request on a fresh connection: (status, body) or (None, why)."""
    head = "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: Bearer %s\r\n" % (method, path, KEY)
    data = b""
    if body is not None:
        data = json.dumps(body).encode()
        head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data)
    try:
        s = socket.create_connection(("127.0.0.1", PORT), timeout=timeout)
        s.settimeout(timeout)
        s.sendall(head.encode() + b"\r\n" + data)
        got = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
        s.close()
    except OSError as e:
        return None, repr(e)
    if not got.startswith(b"HTTP/1.1 "):
        return None, "no answer: %r" % got[:80]
    return int(got[9:12]), got.split(b"\r\n\r\n", 1)[-1]


def closed_by_server(s):
    """The peer closed (EOF or reset): readable and recv gives nothing."""
    try:
        return s.recv(4096) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except BlockingIOError:
        return False


t_start = time.monotonic()
idle = []
for _ in range(N_IDLE):
    try:
        idle.append(socket.create_connection(("127.0.0.1", PORT), timeout=5))
    except OSError as e:
        report(False, "300 idle connections are accepted", repr(e))
        break
slow_text = b"GET /health HTTP/1.1\r\nHost: t\r\n" + b"X-Slow: " + b"a" * 200
open_slow = {}
for _ in range(N_SLOW):
    s = socket.create_connection(("127.0.0.1", PORT), timeout=5)
    s.sendall(slow_text[:1])
    s.setblocking(False)
    open_slow[s] = 1
t_slow = time.monotonic()

# the probes and a request, while every one of those is held open (on a thread: the slow
# clients go on sending meanwhile)
probes = {}


def run_probes():
    probes["health"] = request("GET", "/health", timeout=10)
    probes["metrics"] = request("GET", "/metrics", timeout=10)
    probes["chat"] = request("POST", "/v1/chat/completions",
                             {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, timeout=60)


th = threading.Thread(target=run_probes)
th.start()

# the slow ones send a byte a second until the server closes them (bounded)
slow_closed_at = []
while open_slow and time.monotonic() - t_slow < HEADER + SLACK + 2:
    time.sleep(1.0)
    for s in list(open_slow):
        i = open_slow[s]
        r, _, _ = select.select([s], [], [], 0)
        gone = bool(r) and closed_by_server(s)
        if not gone and i < len(slow_text):
            try:
                s.send(slow_text[i:i + 1])
                open_slow[s] = i + 1
            except OSError:
                gone = True
        if gone:
            slow_closed_at.append(time.monotonic() - t_slow)
            del open_slow[s]
            s.close()
th.join(90)
for name, what in (("health", "/health"), ("metrics", "/metrics"), ("chat", "a chat request")):
    st, body = probes.get(name, (None, "no answer in 90 s"))
    report(st == 200, "%s is answered with %d connections held" % (what, N_IDLE + N_SLOW),
           "%s %r" % (st, body[:120] if body else body))
if slow_closed_at:
    print("# slow connections closed %.1f to %.1f s after their first byte" % (min(slow_closed_at), max(slow_closed_at)))
# kept until their deadline (not refused at once), then closed although they never stopped sending
report(not open_slow and slow_closed_at and min(slow_closed_at) >= HEADER * 0.9,
       "slow headers (a byte a second) are kept, then closed at --header-timeout",
       "%d of %d still open after %.0f s; closed after %s s" % (len(open_slow), N_SLOW, time.monotonic() - t_slow,
                                                               sorted(round(x, 1) for x in slow_closed_at)[:5]))
for s in open_slow:
    s.close()

# the idle ones: closed by the server within the idle timeout (bounded wait)
pending = list(idle)
while pending and time.monotonic() - t_start < IDLE + SLACK + HEADER + 10:
    r, _, _ = select.select(pending, [], [], 0.5)
    for s in r:
        s.setblocking(False)
        if closed_by_server(s):
            pending.remove(s)
            s.close()
print("# idle connections closed by %.1f s" % (time.monotonic() - t_start))
report(not pending, "idle connections are closed within --idle-timeout",
       "%d of %d still open after %.0f s" % (len(pending), len(idle), time.monotonic() - t_start))
for s in pending:
    s.close()
st, _ = request("GET", "/health", timeout=10)
report(st == 200, "/health answers afterwards", str(st))
print("RESULT passed=%d failed=%d" % (passed, failed))
sys.exit(1 if failed else 0)
