#!/usr/bin/python3
"""A stand-in for the Hugging Face hub's HTTP API, for tests/cli/test_hub.sh.

usage: hub_standin.py CONFIG.json PORTFILE LOGFILE

Listens on 127.0.0.1 (a free port, written to PORTFILE once it listens) and
answers what `deltaserve pull` asks, in the shapes the hub uses:
  GET /api/models/ORG/NAME/revision/REV?blobs=true   model info: "sha" (the commit) and
      "siblings" (rfilename, size, blobId; for LFS files lfs.sha256 and lfs.size)
  GET /ORG/NAME/resolve/REV/PATH   LFS files: 302 to /cdn/SHA256 with X-Linked-Etag,
      X-Linked-Size and X-Repo-Commit, as the hub redirects to its CDN; others: the bytes
  GET /cdn/SHA256                  the bytes, with Range requests (206) and an ETag
Each request is logged to LOGFILE as one line: METHOD PATH range=RANGE auth=AUTHORIZATION.

CONFIG: {"repos": {"ORG/NAME": {"commit": HEX40, "files": {PATH: LOCAL_FILE},
         "lfs": [PATH...], "token": TOKEN or null, "cut_once": [PATH...], "wrong_sha": [PATH...]}}}
  token      downloads without "Authorization: Bearer TOKEN" get 401, as a gated repository's do
  private    with token: the listing too, as a private repository's
  cut_once   the first download of the file sends half of it and closes the connection
  wrong_sha  the listing advertises a checksum the bytes do not have
"""
import hashlib
import http.server
import json
import os
import sys
import threading
import urllib.parse

config_path, port_file, log_path = sys.argv[1:4]
with open(config_path) as f:
    CONFIG = json.load(f)
LOCK = threading.Lock()
LOG = open(log_path, "a", buffering=1)
CUT_DONE = set()

# every file's bytes, checksum and git blob id, and the CDN's keys
FILES = {}   # (repo, path) -> dict
CDN = {}     # advertised sha256 -> local file
for repo, r in CONFIG["repos"].items():
    for path, local in r["files"].items():
        data = open(local, "rb").read()
        sha = hashlib.sha256(data).hexdigest()
        advertised = hashlib.sha256(b"not these bytes" + data).hexdigest() if path in r.get("wrong_sha", []) else sha
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        FILES[(repo, path)] = {"local": local, "size": len(data), "sha": advertised, "blob": blob,
                               "lfs": path in r.get("lfs", []), "cut": path in r.get("cut_once", [])}
        CDN[advertised] = (repo, path)


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        pass

    def send_json(self, status, obj, extra=()):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def authorized(self, repo):
        token = CONFIG["repos"][repo].get("token")
        if not token or self.headers.get("Authorization") == "Bearer " + token:
            return True
        msg = "Access to model %s is restricted. You must have access to it and be authenticated to access it." % repo
        self.send_json(401, {"error": msg}, [("X-Error-Code", "GatedRepo"), ("X-Error-Message", msg)])
        return False

    def send_bytes(self, repo, path, etag):
        f = FILES[(repo, path)]
        data = open(f["local"], "rb").read()
        start, status = 0, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % len(data))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(len(data) - start))
        self.send_header("ETag", '"%s"' % etag)
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
        self.end_headers()
        with LOCK:
            cut = f["cut"] and (repo, path) not in CUT_DONE and start == 0
            if cut:
                CUT_DONE.add((repo, path))
        if cut:  # half, then the connection drops
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(data[start:])

    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in u.path.split("/")[1:]]
        LOG.write("GET %s range=%s auth=%s\n" % (u.path, self.headers.get("Range", "-"),
                                                 self.headers.get("Authorization", "-")))
        if len(parts) >= 5 and parts[0] == "api" and parts[1] == "models" and parts[4] == "revision":
            repo = parts[2] + "/" + parts[3]
            r = CONFIG["repos"].get(repo)
            if r is None:
                return self.send_json(404, {"error": "Repository not found"})
            if r.get("private") and not self.authorized(repo):
                return
            if len(parts) != 6 or parts[5] not in ("main", r["commit"]):
                return self.send_json(404, {"error": "Invalid rev id: %s" % "/".join(parts[5:])})
            sib = []
            for path in r["files"]:
                f = FILES[(repo, path)]
                s = {"rfilename": path, "size": f["size"], "blobId": f["blob"]}
                if f["lfs"]:
                    s["lfs"] = {"sha256": f["sha"], "size": f["size"], "pointerSize": 134}
                sib.append(s)
            return self.send_json(200, {"_id": "0" * 24, "id": repo, "modelId": repo, "sha": r["commit"],
                                        "private": bool(r.get("private")), "gated": "manual" if r.get("token") else False, "tags": ["gguf"], "siblings": sib})
        if len(parts) >= 5 and parts[2] == "resolve":
            repo = parts[0] + "/" + parts[1]
            path = "/".join(parts[4:])
            r = CONFIG["repos"].get(repo)
            if r is None or (repo, path) not in FILES:
                return self.send_json(404, {"error": "Entry not found"}, [("X-Error-Code", "EntryNotFound")])
            if not self.authorized(repo):
                return
            f = FILES[(repo, path)]
            if not f["lfs"]:
                return self.send_bytes(repo, path, f["blob"])
            self.send_response(302)
            self.send_header("Location", "/cdn/%s?name=%s" % (f["sha"], urllib.parse.quote(path)))
            self.send_header("X-Linked-Etag", '"%s"' % f["sha"])
            self.send_header("X-Linked-Size", str(f["size"]))
            self.send_header("X-Repo-Commit", r["commit"])
            self.send_header("ETag", '"%s"' % f["blob"])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if len(parts) == 2 and parts[0] == "cdn" and parts[1] in CDN:
            repo, path = CDN[parts[1]]
            return self.send_bytes(repo, path, parts[1])
        self.send_json(404, {"error": "not found"})


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
