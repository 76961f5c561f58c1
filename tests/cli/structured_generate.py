"""deltaserve generate under a constraint, end to end, on random-weight models.

The schema corpus (tests/reference/schema_corpus.py) through `generate
--json-schema`, the regex corpus through `--regex`, and a few GBNF grammars
through `--grammar`, greedy and with seeded sampling, short and long: every
answer that ended ('grammar: complete') must validate (python3-jsonschema,
re.fullmatch, the independent recognizer gbnf.py); every answer cut by the
token limit must be a prefix that some text completes (gbnf.py).
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.environ.get("DS_ROOT", os.getcwd())
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import jsonschema  # noqa: E402

import gbnf  # noqa: E402
import regex_corpus  # noqa: E402
import schema_corpus  # noqa: E402

BIN = os.environ.get("DS_BIN", os.path.join(ROOT, "build", "deltaserve"))
TMP = os.environ["DS_TMP"]
PROMPT = "The answer is "
passed = failed = 0

GRAMMARS = {
    "arith": 'root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= num | "(" expr ")"\nnum ::= [0-9]+\n',
    "yesno": 'root ::= ("yes" | "no") "."\n',
    "list": 'root ::= "[" (item ("," item)*)? "]"\nitem ::= [a-z]{1,4}\n',
    "kv": 'root ::= (key "=" val "\\n"){1,3}\nkey ::= [a-z]+\nval ::= "\\"" [^"\\n]* "\\""\n',
}


class Cut(str):
    """An answer cut inside a character: what is left of it."""


def cut_check(g, text, problems):
    """A cut answer is a viable prefix, and not a whole sentence (generate would have said complete)."""
    if not g.viable(text):
        problems.append("cut answer %r is no prefix of a valid text (fails at %s)" % (text, g.fail_at(text)))
    elif not isinstance(text, Cut) and g.match(text):
        problems.append("answer %r is whole but generate said 'grammar: incomplete'" % text)


def report(name, problems):
    global passed, failed
    if problems:
        failed += 1
        print("FAIL %s: %s" % (name, problems[0]))
        for p in problems[1:4]:
            print("     %s: %s" % (name, p))
    else:
        passed += 1
        print("ok %s" % name)


def model_paths():
    paths = []
    default = os.path.join(os.environ.get("DS_BUILD", os.path.join(ROOT, "build")), "models", "default.gguf")
    for shape in ("tiny", "tiny-moe"):
        out = os.path.join(TMP, "structured-%s.gguf" % shape)
        if shape == "tiny" and os.path.exists(default):
            paths.append(default)
            continue
        subprocess.run([BIN, "make-model", "--shape", shape, "--seed", "3", "--out", out], check=True,
                       capture_output=True)
        paths.append(out)
    return paths


def generate(model, flag, value, mode):
    n, temp, seed = mode
    args = [BIN, "generate", "-m", model, "-p", PROMPT, "-n", str(n), "--temp", str(temp), "--seed", str(seed),
            flag, value]
    p = subprocess.run(args, capture_output=True)
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        return None, None, "exit %d: %s" % (p.returncode, err.strip()[-300:])
    out = p.stdout
    if not out.startswith(PROMPT.encode()) or not out.endswith(b"\n"):
        return None, None, "output %r does not hold the prompt and a last newline" % out[:200]
    body = out[len(PROMPT):-1]
    complete = "grammar: complete" in err
    if not complete and "grammar: incomplete" not in err:
        return None, None, "no 'grammar:' line: %s" % err.strip()[-300:]
    if not complete:  # a cut answer may end inside a UTF-8 sequence (or its replacement)
        for k in range(0, 4):
            try:
                text = body[:len(body) - k].decode("utf-8")
                return (text if k == 0 and not text.endswith("\ufffd") else Cut(text.rstrip("\ufffd"))), complete, None
            except UnicodeDecodeError:
                pass
    try:
        return body.decode("utf-8"), complete, None
    except UnicodeDecodeError:
        return None, None, "answer %r is not UTF-8" % body


STRIDE = 8 if os.environ.get("DS_SANITIZE") else 2  # under the sanitizers: fewer of the same checks
MODES = [(160, 0, 0), (160, 1.0, 1), (12, 1.0, 2), (40, 0.7, 3)]


def main():
    models = model_paths()
    k = 0
    stats = {True: 0, False: 0}
    # every other schema and pattern (all their families), to keep the run short
    for c in schema_corpus.cases()[::STRIDE]:
        path = os.path.join(TMP, "gen-schema-%s.json" % c["name"])
        with open(path, "w") as f:
            json.dump(c["schema"], f)
        g = gbnf.Grammar(subprocess.run([BIN, "grammar", "--json-schema", path], capture_output=True, check=True).stdout.decode())
        val = jsonschema.validators.validator_for(c["schema"], default=jsonschema.Draft202012Validator)(c["schema"]) \
            if isinstance(c["schema"], dict) else jsonschema.Draft202012Validator(c["schema"])
        problems = []
        model, mode = models[k % len(models)], MODES[k % len(MODES)]
        k += 1
        text, complete, err = generate(model, "--json-schema", path, mode)
        if not err:
            stats[complete] += 1
        if err:
            problems.append(err)
        elif complete:
            try:
                v = json.loads(text)
                if not val.is_valid(v):
                    problems.append("answer %r does not validate" % text)
            except ValueError as e:
                problems.append("answer %r is not JSON: %s" % (text, e))
        else:
            cut_check(g, text, problems)
        report("schema %s %s %s" % (c["name"], os.path.basename(model), mode), problems)
    for i, (pat, pos, neg) in list(enumerate(regex_corpus.patterns()))[1::STRIDE]:
        model, mode = models[k % len(models)], MODES[k % len(MODES)]
        k += 1
        text, complete, err = generate(model, "--regex", pat, (min(mode[0], 24),) + mode[1:])
        problems = [err] if err else []
        if not err:
            stats[complete] += 1
            g = gbnf.Grammar(subprocess.run([BIN, "grammar", "--regex", pat], capture_output=True, check=True).stdout.decode())
            if complete and not (re.fullmatch(pat, text) and re.fullmatch(pat, text, re.ASCII)):
                problems.append("answer %r does not match" % text)
            if not complete:
                cut_check(g, text, problems)
        report("regex %d %r %s" % (i, pat, mode), problems)
    for name, text_g in GRAMMARS.items():
        path = os.path.join(TMP, "gen-%s.gbnf" % name)
        with open(path, "w") as f:
            f.write(text_g)
        g = gbnf.Grammar(text_g)
        for mode in MODES:
            text, complete, err = generate(models[0], "--grammar", path, mode)
            problems = [err] if err else []
            if not err and complete and not g.match(text):
                problems.append("answer %r is no sentence" % text)
            if not err and not complete:
                cut_check(g, text, problems)
            report("gbnf %s %s" % (name, mode), problems)
    # bad constraints: exit 2 with the compiler's message, before loading anything
    for flag, value, word in [("--regex", "a(?=b)", "lookaround"), ("--json-schema", "/nonexistent.json", "nonexistent"),
                              ("--grammar", "/nonexistent.gbnf", "nonexistent")]:
        p = subprocess.run([BIN, "generate", "-m", models[0], "-p", "x", flag, value], capture_output=True)
        err = p.stderr.decode()
        report("bad %s" % flag, [] if p.returncode == 2 and word in err else ["exit %d: %s" % (p.returncode, err)])
    print("# answers that ended: %d, cut by -n: %d" % (stats[True], stats[False]))
    print("RESULT passed=%d failed=%d" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
