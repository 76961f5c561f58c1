"""JSON Schema and regex compilers against independent checkers.

For every schema of the corpus (schema_corpus.py): `deltaserve grammar
--json-schema` gives GBNF; gbnf.py (an independent Earley recognizer) must
accept every valid instance (compact, and indented under --max-space) and
refuse every invalid one (python3-jsonschema confirms which is which), and
random sentences of the grammar must validate. Refused keywords give a
non-zero exit naming them. The regex corpus is checked the same way with
re.fullmatch as the oracle. The matcher (`deltaserve grammar --check-each`)
must agree with gbnf.py on all of these texts and prefixes of them.
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jsonschema  # noqa: E402

import gbnf  # noqa: E402
import schema_corpus  # noqa: E402
import regex_corpus  # noqa: E402

BIN = os.environ.get("DS_BIN", "build/deltaserve")
TMP = os.environ.get("DS_TMP") or tempfile.mkdtemp()
passed = failed = 0


def report(name, problems):
    global passed, failed
    if problems:
        failed += 1
        print("FAIL %s: %s" % (name, problems[0]))
        for p in problems[1:6]:
            print("     %s: %s" % (name, p))
    else:
        passed += 1
        print("ok %s" % name)


def run(args, stdin=None):
    p = subprocess.run([BIN, "grammar"] + args, capture_output=True, input=stdin)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def validator(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator) if isinstance(schema, dict) \
        else jsonschema.Draft202012Validator
    return cls(schema)


def strict_form(s):
    """The schema with additionalProperties: false wherever an object schema leaves it out (--strict)."""
    if isinstance(s, list):
        return [strict_form(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: (strict_form(v) if k not in ("enum", "const", "default", "examples") else v) for k, v in s.items()}
    if k_props(s) and "additionalProperties" not in s:
        out["additionalProperties"] = False
    return out


def k_props(s):
    t = s.get("type")
    return "properties" in s or "required" in s or t == "object" or (isinstance(t, list) and "object" in t)


def compact(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def matcher_built():
    rc, out, err = run(["--regex", "a", "--check", "a"])
    return rc == 0 and out.strip() == "match"


CHECK = matcher_built()


def check_agrees(gbnf_path, g, texts, problems):
    """deltaserve grammar --check-each gives what gbnf.py says on every text."""
    if not CHECK:
        problems.append("deltaserve grammar --check does not work (the matcher): %s" % (run(["--regex", "a", "--check", "a"]),))
        return
    lines = os.path.join(TMP, "check-lines.txt")
    with open(lines, "w") as f:
        for t in texts:
            f.write(json.dumps(t) + "\n")
    rc, out, err = run(["--gbnf", gbnf_path, "--check-each", lines])
    got = out.splitlines()
    if len(got) != len(texts):
        problems.append("--check-each gave %d verdicts for %d texts: %s" % (len(got), len(texts), err.strip()))
        return
    for t, v in zip(texts, got):
        want = g.judge(t)
        if not isinstance(want, str):
            # the matcher names the byte: any byte of the code point gbnf.py stops at
            at = len(t[:want].encode())
            m = re.fullmatch(r"no match at byte (\d+)", v)
            if m and at <= int(m.group(1)) < at + len(t[want].encode()):
                continue
            want = "no match at byte %d" % at
        if v != want:
            problems.append("--check %r: %r, gbnf.py %r" % (t, v, want))


def test_schemas():
    rng = random.Random(7)
    cases = schema_corpus.cases()
    if os.environ.get("DS_SANITIZE"):  # many times slower: every fourth schema
        cases = cases[::4]
    for c in cases:
        problems = []
        path = os.path.join(TMP, "schema-%s.json" % c["name"])
        with open(path, "w") as f:
            json.dump(c["schema"], f)
        val = validator(strict_form(c["schema"]) if c["strict"] else c["schema"])
        for v in c["valid"]:
            if not val.is_valid(v):
                problems.append("corpus: %s is not valid" % compact(v))
        for v in c["invalid"]:
            if val.is_valid(v):
                problems.append("corpus: %s is valid" % compact(v))
        flags = ["--strict"] if c["strict"] else []
        texts = []
        for space in (0, 8):
            rc, text, err = run(["--json-schema", path, "--max-space", str(space)] + flags)
            if rc != 0:
                problems.append("max-space %d: exit %d: %s" % (space, rc, err.strip()))
                continue
            gpath = os.path.join(TMP, "schema-%s-%d.gbnf" % (c["name"], space))
            with open(gpath, "w") as f:
                f.write(text)
            try:
                g = gbnf.Grammar(text)
            except gbnf.GrammarError as e:
                problems.append("gbnf.py cannot read the grammar: %s" % e)
                continue
            for v in c["valid"]:
                forms = [compact(v)] if space == 0 else [json.dumps(v, indent=1, ensure_ascii=False),
                                                         json.dumps(v, ensure_ascii=False)]
                for t in forms:
                    texts.append(t)
                    if not g.match(t):
                        problems.append("max-space %d refuses valid %r (fails at %s)" % (space, t, g.fail_at(t)))
            for v in c["invalid"]:
                t = compact(v)
                texts.append(t)
                if g.match(t):
                    problems.append("max-space %d accepts invalid %r" % (space, t))
            for _ in range(8):
                t = g.sample(rng)
                if t is None:
                    continue
                texts.append(t)
                try:
                    v = json.loads(t)
                except ValueError as e:
                    problems.append("max-space %d: sentence %r is not JSON: %s" % (space, t, e))
                    continue
                if not val.is_valid(v):
                    problems.append("max-space %d: sentence %r does not validate" % (space, t))
            # prefixes: every prefix of a valid text is viable
            if c["valid"]:
                t = texts[-1] if texts else ""
                for k in range(0, len(t), max(1, len(t) // 7)):
                    if g.match(t) and not g.viable(t[:k]):
                        problems.append("prefix %r of a sentence is not viable" % t[:k])
            check_agrees(gpath, g, texts + [t[:k] for t in texts[-3:] for k in range(0, len(t), max(1, len(t) // 5))], problems)
        report("schema %s" % c["name"], problems)
    return len(cases)


def test_refused():
    items = schema_corpus.refused()
    for name, schema, word in items:
        path = os.path.join(TMP, "refused-%s.json" % name)
        with open(path, "w") as f:
            json.dump(schema, f)
        rc, out, err = run(["--json-schema", path])
        problems = []
        if rc == 0:
            problems.append("compiled, exit 0: %s" % out[:200])
        elif word not in err:
            problems.append("the message does not name %r: %s" % (word, err.strip()))
        elif "json_schema:" not in err:
            problems.append("the message does not say where: %s" % err.strip())
        report("refused %s" % name, problems)
    return len(items)


def test_regexes():
    rng = random.Random(11)
    items = regex_corpus.patterns()
    if os.environ.get("DS_SANITIZE"):
        items = items[::4]
    for i, (pat, pos, neg) in enumerate(items):
        problems = []
        ra, ru = re.compile(pat, re.ASCII), re.compile(pat)

        def oracle(s):  # what every engine matches (regex.h)
            return bool(ra.fullmatch(s)) and bool(ru.fullmatch(s))
        for s in pos:
            if not oracle(s):
                problems.append("corpus: %r does not match" % s)
        for s in neg:
            if ra.fullmatch(s) or ru.fullmatch(s):
                problems.append("corpus: %r matches" % s)
        rc, text, err = run(["--regex", pat])
        if rc != 0:
            report("regex %d %r" % (i, pat), ["exit %d: %s" % (rc, err.strip())])
            continue
        gpath = os.path.join(TMP, "regex-%d.gbnf" % i)
        with open(gpath, "w") as f:
            f.write(text)
        g = gbnf.Grammar(text)
        alphabet = sorted(set(c for c in pat if c.isprintable()) | set("aZ09 _-\n\u00e9"))
        randoms = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) for _ in range(40)]
        samples = [s for s in (g.sample(rng) for _ in range(15)) if s is not None]
        for s in pos + neg + randoms:
            want, got = oracle(s), g.match(s)
            # the grammar may leave out only non-ASCII text where engines differ
            if got and not want or (want and not got and (s in pos or all(ord(c) < 0x7F for c in s))):
                problems.append("%r: re.fullmatch %s, grammar %s" % (s, want, got))
        for s in samples:
            if not oracle(s):
                problems.append("sentence %r does not match" % s)
        check_agrees(gpath, g, pos + neg + randoms + samples, problems)
        report("regex %d %r" % (i, pat), problems)
    for pat, word in regex_corpus.refused():
        rc, out, err = run(["--regex", pat])
        report("regex refused %r" % pat, [] if rc != 0 and word in err else ["exit %d: %s%s" % (rc, out, err)])
    return len(items)


def main():
    n = test_schemas()
    n_ref = test_refused()
    n_rx = test_regexes()
    print("# %d schemas, %d refused schemas, %d patterns; matcher compared" % (n, n_ref, n_rx))
    print("RESULT passed=%d failed=%d" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
