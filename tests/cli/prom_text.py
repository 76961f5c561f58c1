"""prom_text.py - checks a Prometheus text exposition (format 0.0.4) and reads samples from it.

usage: prom_text.py check FILE          -> "ok" or one "bad: ..." line per problem (exit 1)
       prom_text.py get FILE NAME LABEL=VALUE...
                                        -> the value of the one sample of NAME whose labels
                                           include those (exit 1 when none or several)
       prom_text.py labels FILE NAME    -> the labels of NAME's samples, one JSON object a line

check: every family has one # HELP and one # TYPE line, both before its samples, and its
samples stand together; every sample line parses (name, labels with escaped values, a number);
no two samples have the same name and labels. Standard library only."""
import json
import re
import sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SAMPLE = re.compile(r"^(" + NAME + r")(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"\s*(,|$)')
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


def parse_labels(text):
    out, pos = {}, 0
    while pos < len(text):
        m = LABEL.match(text, pos)
        if not m:
            raise ValueError(f"bad labels at {text[pos:pos + 40]!r}")
        if m.group(1) in out:
            raise ValueError(f"label {m.group(1)} twice")
        out[m.group(1)] = m.group(2)
        pos = m.end()
    return out


def samples(text):
    for line in text.split("\n"):
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise ValueError(f"not a sample line: {line!r}")
        float(m.group(3))
        yield m.group(1), parse_labels(m.group(2) or ""), float(m.group(3))


def check(text):
    problems, helps, types, done, seen = [], set(), {}, set(), set()
    current = None
    for line in text.split("\n"):
        if not line:
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            kind, name = line[2:6], line.split(" ")[2]
            table = helps if kind == "HELP" else types
            if name in table:
                problems.append(f"{kind} of {name} twice")
            if name in done:
                problems.append(f"{kind} of {name} after its samples")
            if kind == "HELP":
                helps.add(name)
            else:
                types[name] = line.split(" ")[3]
            continue
        if line.startswith("#"):
            continue
        try:
            name, labels, _ = next(samples(line))
        except (ValueError, StopIteration) as e:
            problems.append(str(e))
            continue
        family = name
        for fam, kind in types.items():
            if name != fam and any(name == fam + s for s in SUFFIXES.get(kind, ())):
                family = fam
        if family not in types or family not in helps:
            problems.append(f"{name}: no HELP and TYPE before it")
        if family != current:
            if family in done:
                problems.append(f"the samples of {family} do not stand together")
            if current:
                done.add(current)
            current = family
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            problems.append(f"{name}{labels} twice")
        seen.add(key)
    return problems


def main():
    cmd, path = sys.argv[1], sys.argv[2]
    text = open(path, encoding="utf-8").read()
    if cmd == "check":
        problems = check(text)
        for p in problems:
            print("bad:", p)
        if not problems:
            print("ok")
        return 1 if problems else 0
    if cmd == "labels":
        for name, labels, _ in samples(text):
            if name == sys.argv[3]:
                print(json.dumps(labels, sort_keys=True))
        return 0
    want = dict(a.split("=", 1) for a in sys.argv[4:])
    found = [v for name, labels, v in samples(text)
             if name == sys.argv[3] and all(labels.get(k) == x for k, x in want.items())]
    if len(found) != 1:
        print(f"{len(found)} samples of {sys.argv[3]} with {want}", file=sys.stderr)
        return 1
    print(f"{found[0]:.17g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
