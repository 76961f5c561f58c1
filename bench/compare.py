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
for the README. --json FILE writes every raw measurement."""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


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
    a = ap.parse_args()
    if not a.from_json and not a.llama:
        ap.error("--llama (or $LLAMA_BIN): the bin/ folder of a llama.cpp build is needed")
    raw = {f: {"ours": [], "llama": [], "load": []} for f in a.files}
    if a.from_json:
        with open(a.from_json) as fh:
            saved = json.load(fh)
        raw = {f: saved[f] for f in a.files}
    for rnd in range(0 if a.from_json else a.r):
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
            json.dump(raw, fh, indent=1)
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
