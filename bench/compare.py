#!/usr/bin/python3
"""compare.py - deltaserve bench against llama.cpp's llama-bench on the same
GGUF files, same thread count, interleaved and repeated (the machine is
shared: a slow moment hits both programs alike when runs alternate).

  /usr/bin/python3 bench/compare.py --llama LLAMA_BUILD/bin -t 2 -r 5 \\
      08b-bf16.gguf 08b-q8.gguf 08b-q4km.gguf 35b-a3b-l4-q4km.gguf

Per file and round: `deltaserve bench -p 512 -n 128 -b 16 -r 1 --json`, then
`llama-bench -p 512 -n 128 -r 1 -o json`. Prints, per file, the median of
each program's pp512 and tg128 tokens/s over the rounds and their ratios,
our b16 throughput against our tg128, the decode bandwidth against the
built-in probe, and peak RSS against weights + caches; then a Markdown table
for the README. --json FILE writes every raw measurement.

Further cases, each chosen by its flag (with any of them only those run; add
--base for the table above too), each printing Markdown rows with ratios:
  --batched  our `bench -p 0 -n NTG --depth NPP -b NPL` (every sequence
             decodes after a prompt of NPP tokens) against `llama-batched-bench
             -npp NPP -ntg NTG -npl NPL` (its S_TG), per parallel count;
  --long     prefill of LONG tokens (`bench -p LONG -n 0` / `llama-bench -p
             LONG -n 0`) and decode of LONG_N tokens at depth LONG (`bench -p 0
             -n LONG_N --depth LONG` / `llama-bench -p 0 -n LONG_N -d LONG`);
  --spec     ours alone: decode with MTP speculation and without (`bench
             --spec-tokens K --spec-batch 1`), on files with an MTP head;
  --serve    `bench-serve` at SERVE_CONC concurrent on the shared-prefix
             workload against a llama-server and our server started here (each
             waited for on /health, stopped after its run).
--ours-only runs our side of every case without a llama.cpp build (the peer
columns then read "-")."""
import argparse
import json
import os
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def busy(seconds=2.0):
    """Fraction of all CPU time not idle over the next `seconds` (from /proc/stat)."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    t0, i0 = snap()
    time.sleep(seconds)
    t1, i1 = snap()
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def wait_quiet(limit, max_wait):
    """Waits (up to max_wait seconds) until other programs use less than `limit` of the CPUs."""
    t0 = time.time()
    while busy() > limit and time.time() - t0 < max_wait:
        time.sleep(3)


def cpu_times():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    return sum(v) / hz, (sum(v) - v[3] - v[4]) / hz  # total and busy CPU seconds, all cores


def others_share(fn, tries, limit):
    """Runs fn() until the CPU time other programs used during it is below
    `limit` of the machine's capacity (at most `tries` times); returns the
    result of the last try and that share."""
    for k in range(tries):
        t0, b0 = cpu_times()
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        res = fn()
        t1, b1 = cpu_times()
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        own = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
        share = max(0.0, (b1 - b0) - own) / max(1e-9, t1 - t0)
        if share <= limit or k == tries - 1:
            return res, share
        print(f"  (others used {100 * share:.0f}% of the CPUs: again)", file=sys.stderr, flush=True)
        time.sleep(10)


def run_ours(bin_, path, t, p, n, b):
    out = subprocess.run([bin_, "bench", "-m", path, "-t", str(t), "-p", str(p), "-n", str(n), "-b", str(b), "-r", "1",
                          "--json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def run_llama(dir_, path, t, p, n):
    env = dict(os.environ, LD_LIBRARY_PATH=dir_)
    out = subprocess.run([os.path.join(dir_, "llama-bench"), "-m", path, "-t", str(t), "-p", str(p), "-n", str(n), "-r",
                          "1", "-o", "json"], capture_output=True, text=True, check=True, env=env).stdout
    res = {}
    for r in json.loads(out):
        key = "pp" if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0 else "tg"
        res[key] = r["avg_ts"]
    return res


def run_json(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    return json.loads(out)


def llama_env(dir_):
    return dict(os.environ, LD_LIBRARY_PATH=dir_)


def llama_bench(dir_, path, t, args):
    """llama-bench with args; the avg_ts of each of its tests, in order."""
    out = run_json([os.path.join(dir_, "llama-bench"), "-m", path, "-t", str(t), "-r", "1", "-o", "json"] + args,
                   env=llama_env(dir_))
    return [r["avg_ts"] for r in out]


def parse_batched_bench(text):
    """{B: S_TG} from llama-batched-bench's output: JSON lines when it wrote them, else its table."""
    res = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if "pl" in j and "speed_tg" in j:
                res[int(j["pl"])] = float(j["speed_tg"])
    if res:
        return res
    for line in text.splitlines():  # | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and all(re.fullmatch(r"[0-9.]+", c) for c in cells[:8]):
            res[int(cells[2])] = float(cells[7])
    return res


def case_batched(a, f, peer):
    npl = a.npl
    ours = run_json([a.bin, "bench", "-m", f, "-t", str(a.t), "-p", "0", "-n", str(a.ntg), "--depth", str(a.npp),
                     "-b", npl, "-r", "1", "--json"])
    o = {"tok_s": {str(b["b"]): b["tok_s"] for b in ours["batched"]},
         "roofline": {str(s["b"]): {k: s[k] for k in ("bw_frac", "compute_frac", "bound", "gb_s", "gop_s")}
                      for s in ours.get("roofline", {}).get("steps", []) if s["test"].startswith("b")}}
    l = None
    if peer:
        nmax = max(int(x) for x in npl.split(","))
        r = subprocess.run([os.path.join(a.llama, "llama-batched-bench"), "-m", f, "-c",
                            str(max(8192, nmax * (a.npp + a.ntg))), "-b", "2048", "-ub", "512", "-npp", str(a.npp),
                            "-ntg", str(a.ntg), "-npl", npl, "-t", str(a.t), "--output-format", "jsonl"],
                           capture_output=True, text=True, check=True, env=llama_env(a.llama))
        l = {str(k): v for k, v in parse_batched_bench(r.stdout + "\n" + r.stderr).items()}  # its log may go to either
    return o, l


def case_long(a, f, peer):
    pp = run_json([a.bin, "bench", "-m", f, "-t", str(a.t), "-p", str(a.long), "-n", "0", "-r", "1", "--json"])
    tg = run_json([a.bin, "bench", "-m", f, "-t", str(a.t), "-p", "0", "-n", str(a.long_n), "-b", "0", "--depth",
                   str(a.long), "-r", "1", "--json"])
    o = {"pp": pp["pp_tok_s"], "tg_at_depth": tg["tg_tok_s"]}
    l = None
    if peer:
        lpp = llama_bench(a.llama, f, a.t, ["-p", str(a.long), "-n", "0"])
        ltg = llama_bench(a.llama, f, a.t, ["-p", "0", "-n", str(a.long_n), "-d", str(a.long)])
        l = {"pp": lpp[0], "tg_at_depth": ltg[0]}
    return o, l


def case_spec(a, f, peer):
    o = run_json([a.bin, "bench", "-m", f, "-t", str(a.t), "--spec-tokens", str(a.spec_tokens), "--spec-batch", "1",
                  "-n", str(a.spec_n), "--json"])
    return o, None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(port, proc, limit):
    t0 = time.time()
    while time.time() - t0 < limit:
        if proc.poll() is not None:
            raise RuntimeError(f"the server on port {port} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the server on port {port} was not healthy within {limit} s")


def serve_run(a, cmd, port, env=None):
    """Starts a server, waits for /health, runs bench-serve against it, stops it."""
    log = open(os.path.join(a.scratch, f"server-{port}.log"), "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_health(port, proc, a.serve_wait)
        return run_json([a.bin, "bench-serve", f"http://127.0.0.1:{port}", "--workload",
                         "shared-prefix", "--num-prompts", str(a.serve_prompts), "--concurrency", str(a.serve_conc),
                         "--prefix-len", "256", "--input-len", "64", "--output-len", str(a.serve_out), "--endpoint",
                         "completions", "--json"])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def case_serve(a, f, peer):
    port = free_port()
    o = serve_run(a, [a.bin, "serve", "-m", f, "--port", str(port), "--threads", str(a.t)] + a.serve_ours.split(),
                  port)
    l = None
    if peer:
        port = free_port()
        l = serve_run(a, [os.path.join(a.llama, "llama-server"), "-m", f, "-np", str(a.serve_conc), "-c",
                          str(a.serve_ctx), "-t", str(a.t), "--port", str(port)], port, env=llama_env(a.llama))
    return o, l


CASES = {"batched": case_batched, "long": case_long, "spec": case_spec, "serve": case_serve}


def ratio(x, y):
    return f"{x / y:.2f}x" if x and y else "-"


def num(x, fmt=".1f"):
    return "-" if x is None else format(x, fmt)


def print_case(name, a, files, data):
    """The Markdown rows of one case: the median over rounds of each figure."""
    med = statistics.median

    def pick(f, side, fn):
        v = [fn(x) for x in data[f][side] if x is not None]
        v = [x for x in v if x is not None]
        return med(v) if v else None

    if name == "batched":
        print(f"\n| file | B | ours tok/s | llama.cpp S_TG | ratio | ours B / ours 1 | bound | % read | % compute |")
        print("|---|---:|---:|---:|---:|---:|---|---:|---:|")
        for f in files:
            one = pick(f, "ours", lambda x: x["tok_s"].get("1"))
            bs = sorted({k for x in data[f]["ours"] for k in x["tok_s"]}, key=int)  # as measured (also --from-json)
            for b in bs:
                ob = pick(f, "ours", lambda x: x["tok_s"].get(b))
                lb = pick(f, "llama", lambda x: x.get(b))
                rl = [x["roofline"].get(b) for x in data[f]["ours"] if x["roofline"].get(b)]
                bound = rl[-1]["bound"] if rl else "-"
                bw = med(r["bw_frac"] for r in rl) if rl else None
                cf = med(r["compute_frac"] for r in rl) if rl else None
                print(f"| {os.path.basename(f)} | {b} | {num(ob)} | {num(lb)} | {ratio(ob, lb)} | {ratio(ob, one)} | "
                      f"{bound} | {num(bw and 100 * bw, '.0f')}% | {num(cf and 100 * cf, '.0f')}% |")
    elif name == "long":
        print(f"\n| file | pp{a.long} ours | pp{a.long} llama.cpp | ratio | tg{a.long_n} @ d{a.long} ours | "
              f"tg{a.long_n} @ d{a.long} llama.cpp | ratio |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for f in files:
            pp, lpp = pick(f, "ours", lambda x: x["pp"]), pick(f, "llama", lambda x: x["pp"])
            tg, ltg = pick(f, "ours", lambda x: x["tg_at_depth"]), pick(f, "llama", lambda x: x["tg_at_depth"])
            print(f"| {os.path.basename(f)} | {num(pp)} | {num(lpp)} | {ratio(pp, lpp)} | {num(tg, '.2f')} | "
                  f"{num(ltg, '.2f')} | {ratio(tg, ltg)} |")
    elif name == "spec":
        print(f"\n| file | tok/s, no drafts | tok/s, {a.spec_tokens} drafts | speed-up | drafts accepted | "
              f"verify / decode cost |")
        print("|---|---:|---:|---:|---:|---:|")
        for f in files:
            t0, t1 = pick(f, "ours", lambda x: x["tg_tok_s"]), pick(f, "ours", lambda x: x["tg_tok_s_spec"])
            acc = pick(f, "ours", lambda x: x["draft_acceptance"])
            vc = pick(f, "ours", lambda x: x["verify_cost_ratio"])
            print(f"| {os.path.basename(f)} | {num(t0, '.2f')} | {num(t1, '.2f')} | {ratio(t1, t0)} | "
                  f"{num(acc and 100 * acc, '.0f')}% | {num(vc, '.2f')}x |")
    elif name == "serve":
        print(f"\n| file | ours output tok/s | llama-server output tok/s | ratio | ours TTFT p50 ms | "
              f"llama-server TTFT p50 ms |")
        print("|---|---:|---:|---:|---:|---:|")
        for f in files:
            o, l = pick(f, "ours", serve_tput), pick(f, "llama", serve_tput)
            ot, lt = pick(f, "ours", serve_ttft), pick(f, "llama", serve_ttft)
            print(f"| {os.path.basename(f)} | {num(o, '.2f')} | {num(l, '.2f')} | {ratio(o, l)} | {num(ot, '.0f')} | "
                  f"{num(lt, '.0f')} |")


def serve_tput(j):
    return j.get("output_tok_s")


def serve_ttft(j):
    return j.get("ttft_ms_p50")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--llama", default=os.environ.get("LLAMA_BIN"),
                    help="the bin/ folder of a llama.cpp build (default: $LLAMA_BIN)")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "deltaserve"))
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-b", type=int, default=16)
    ap.add_argument("--json")
    ap.add_argument("--quiet", type=float, default=0.0,
                    help="wait (up to 10 min) before each run until the CPUs are busy less than this fraction, and "
                         "repeat a run in which other programs used more than this fraction of them")
    ap.add_argument("--tries", type=int, default=4)
    ap.add_argument("--from-json", help="print the table of a run saved with --json instead of running")
    ap.add_argument("--base", action="store_true", help="the pp/tg table too when a case below is chosen")
    ap.add_argument("--batched", action="store_true", help="batched decode against llama-batched-bench")
    ap.add_argument("--npl", default="1,16,64", help="--batched: parallel sequences (default 1,16,64)")
    ap.add_argument("--npp", type=int, default=16, help="--batched: prompt tokens of each sequence (default 16)")
    ap.add_argument("--ntg", type=int, default=32, help="--batched: decoded tokens of each sequence (default 32)")
    ap.add_argument("--long", type=int, nargs="?", const=32768, default=0,
                    help="prefill of LONG tokens and decode at depth LONG (default 32768)")
    ap.add_argument("--long-n", type=int, default=32, help="--long: decoded tokens at depth (default 32)")
    ap.add_argument("--spec", action="store_true", help="our decode with MTP speculation and without")
    ap.add_argument("--spec-tokens", type=int, default=3)
    ap.add_argument("--spec-n", type=int, default=128, help="--spec: decoded tokens (default 128)")
    ap.add_argument("--serve", action="store_true", help="bench-serve against llama-server and ours")
    ap.add_argument("--serve-conc", type=int, default=64)
    ap.add_argument("--serve-prompts", type=int, default=128)
    ap.add_argument("--serve-out", type=int, default=64, help="--serve: generated tokens per request (default 64)")
    ap.add_argument("--serve-ctx", type=int, default=131072, help="--serve: llama-server's -c (all its slots together)")
    ap.add_argument("--serve-ours", default="--kv-mb 1024", help="--serve: more options of our server")
    ap.add_argument("--serve-wait", type=float, default=300, help="--serve: seconds allowed for a server to start")
    ap.add_argument("--scratch", help="--serve: where the servers' logs go (default: a new temporary folder)")
    ap.add_argument("--ours-only", action="store_true", help="run our side only (no llama.cpp build needed)")
    a = ap.parse_args()
    chosen = [c for c in CASES if getattr(a, c)]
    if a.serve and not a.scratch and not a.from_json:
        a.scratch = tempfile.mkdtemp(prefix="compare-serve-")
    base = a.base or not chosen
    peer = not a.ours_only
    if not a.from_json and peer and not a.llama:
        ap.error("--llama (or $LLAMA_BIN): the bin/ folder of a llama.cpp build is needed (or --ours-only)")
    if base and a.ours_only:
        ap.error("--ours-only goes with --batched, --long, --spec or --serve (the base table needs llama-bench)")
    raw = {f: {"ours": [], "llama": [], "load": []} for f in a.files}
    cases = {c: {f: {"ours": [], "llama": []} for f in a.files} for c in chosen}
    if a.from_json:
        with open(a.from_json) as fh:
            saved = json.load(fh)
        raw = {f: saved[f] for f in a.files if f in saved}
        base = base and len(raw) == len(a.files)
        cases = {c: {f: saved["cases"][c][f] for f in a.files} for c in saved.get("cases", {})}
        chosen = list(cases)
    for rnd in range(0 if a.from_json else a.r):
        for c in chosen:
            for f in a.files:
                if a.quiet:
                    wait_quiet(a.quiet, 600)
                (o, l), share = others_share(lambda: CASES[c](a, f, peer), a.tries, a.quiet or 1.0)
                cases[c][f]["ours"].append(o)
                cases[c][f]["llama"].append(l)
                print(f"round {rnd + 1} {c} {os.path.basename(f)}: done | others used {100 * share:.0f}% of the CPUs",
                      file=sys.stderr, flush=True)
        if not base:
            continue
        for f in a.files:
            if a.quiet:
                wait_quiet(a.quiet, 600)
            o, so = others_share(lambda: run_ours(a.bin, f, a.t, a.p, a.n, a.b), a.tries, a.quiet or 1.0)
            if a.quiet:
                wait_quiet(a.quiet, 600)
            l, sl = others_share(lambda: run_llama(a.llama, f, a.t, a.p, a.n), a.tries, a.quiet or 1.0)
            raw[f]["ours"].append(o)
            raw[f]["llama"].append(l)
            raw[f]["load"].append(max(so, sl))
            o, l = raw[f]["ours"][-1], raw[f]["llama"][-1]
            print(f"round {rnd + 1} {os.path.basename(f)}: ours pp {o['pp_tok_s']:.1f} tg {o['tg_tok_s']:.1f} "
                  f"b{a.b} {o['batched'][0]['tok_s']:.1f} | llama pp {l.get('pp', 0):.1f} tg {l.get('tg', 0):.1f} "
                  f"| others used {100 * raw[f]['load'][-1]:.0f}% of the CPUs", file=sys.stderr, flush=True)
    if a.json and not a.from_json:
        with open(a.json, "w") as fh:
            json.dump(dict(raw if base else {}, cases=cases), fh, indent=1)
    for c in chosen:
        print_case(c, a, a.files, cases[c])
    if not base:
        return
    med = statistics.median
    rows = []
    for f in a.files:
        o, l = raw[f]["ours"], raw[f]["llama"]
        pp, tg = med(x["pp_tok_s"] for x in o), med(x["tg_tok_s"] for x in o)
        bb = med(x["batched"][0]["tok_s"] for x in o)
        lpp, ltg = med(x.get("pp", 0) for x in l), med(x.get("tg", 0) for x in l)
        bw = med(x["decode_bw_frac"] for x in o)
        probe = med(x["probe_gb_s"] for x in o)
        rss = max(x["peak_rss_bytes"] for x in o) / max(x["weights_plus_caches_bytes"] for x in o) - 1
        rows.append((os.path.basename(f), pp, lpp, tg, ltg, bb, bw, probe, rss))
    print(f"| file | pp{a.p} ours | pp{a.p} llama.cpp | ratio | tg{a.n} ours | tg{a.n} llama.cpp | ratio | "
          f"b{a.b} ours | b{a.b} / tg | decode / probe | probe GB/s | peak RSS vs weights+caches |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, pp, lpp, tg, ltg, bb, bw, probe, rss in rows:
        print(f"| {name} | {pp:.1f} | {lpp:.1f} | {pp / lpp:.2f}x | {tg:.1f} | {ltg:.1f} | {tg / ltg:.2f}x | {bb:.1f} | "
              f"{bb / tg:.1f}x | {100 * bw:.0f}% | {probe:.1f} | {100 * rss:+.1f}% |")


if __name__ == "__main__":
    main()
