"""help_readme.py - the options of every command's --help against README.md.

For each command of `deltaserve --help`, the options its `deltaserve CMD --help`
names must all stand in README.md's synopsis of that command (the lines of a
```sh block from `deltaserve CMD` to the next command), and every option that
synopsis names must be one --help names: the README and the --help list the
same options.

usage: help_readme.py DELTASERVE README  -> one "ok CMD" / "FAIL CMD: ..." line
per command; exit 1 when any fails. Standard library only."""
import re
import subprocess
import sys

OPTION = re.compile(r"(?<![\w\-$/.])(--?[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*)")


def commands(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
    return [m.group(1) for m in re.finditer(r"^  ([a-z][a-z-]*)\s", out, re.M)]


def help_options(binary, cmd):
    """The options `deltaserve CMD --help` defines: those of its usage lines (the
    "usage:" line and the indented lines right after it), and the leading column
    of each option line (indented at most 6 spaces, starting with an option or
    "PATH, -m, ..."). Options named in the prose of a description (how another
    tool spells something) are not its own."""
    r = subprocess.run([binary, cmd, "--help"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"`deltaserve {cmd} --help` exited {r.returncode}")
    found = set()
    in_usage = False
    for line in r.stdout.split("\n"):
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if body.startswith("usage:"):
            in_usage = True
        elif in_usage and not (indent > 6 and body):
            in_usage = False
        if in_usage:
            found |= set(OPTION.findall(body))
            continue
        first = re.split(r"\s{2,}", body)[0]
        if indent <= 6 and re.match(r"(?:[A-Z]+, )?-", first):
            found |= set(OPTION.findall(first))
    return found - {"--help", "-h"}


def readme_synopses(text, names):
    """{command: option set} from the ```sh blocks: each `deltaserve CMD` starts a
    synopsis that runs until the next one, the block's end, or a line that is not
    indented (a continuation line starts with spaces)."""
    syn = {}
    start = re.compile(r"(?:^|\s)deltaserve (" + "|".join(map(re.escape, names)) + r")(?=\s|$)")
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S):
        cur = None
        for line in block.split("\n"):
            if not line.startswith(" "):
                cur = None
            code = line.split(" #")[0] if not line.lstrip().startswith("#") else ""
            pos = 0
            for m in start.finditer(code):
                if cur:
                    syn[cur] |= set(OPTION.findall(code[pos:m.start()]))
                cur = m.group(1)
                syn.setdefault(cur, set())
                pos = m.end()
            if cur:
                syn[cur] |= set(OPTION.findall(code[pos:]))
    return syn


def main():
    binary, readme = sys.argv[1], sys.argv[2]
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    names = commands(binary)
    syn = readme_synopses(text, names)
    bad = 0
    for cmd in names:
        try:
            h = help_options(binary, cmd)
        except RuntimeError as e:
            print(f"FAIL {cmd}: {e}")
            bad += 1
            continue
        if cmd not in syn:
            print(f"FAIL {cmd}: README.md has no synopsis `deltaserve {cmd} ...` in a sh block")
            bad += 1
            continue
        r = syn[cmd]
        missing, extra = sorted(h - r), sorted(r - h)
        if missing or extra:
            why = []
            if missing:
                why.append("in --help, not in README.md: " + " ".join(missing))
            if extra:
                why.append("in README.md, not in --help: " + " ".join(extra))
            print(f"FAIL {cmd}: " + "; ".join(why))
            bad += 1
        else:
            print(f"ok {cmd}: {len(h)} options")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
