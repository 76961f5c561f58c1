"""An independent GBNF reader and Earley recognizer, written from the format's
description (llama.cpp's grammars/README.md; src/grammar/grammar.h), not from
the C code, to check the grammars deltaserve writes and its matcher.

    g = Grammar(text)             # the start rule is "root" (or start=...)
    g.match(s)                    # s (a str) is a whole sentence
    g.viable(s)                   # s is a prefix of some sentence
    g.fail_at(s)                  # None, or the index of the first code point no sentence allows
    g.sample(rng)                 # a random sentence (None if it grows too deep)

Terminals are code points: a literal is a sequence of them, a class a set of
ranges. Repetitions are rewritten into plain rules (x{m,n}: m copies, then a
chain of n-m optional ones).
"""
import re

_NAME = re.compile(r"[A-Za-z0-9_-]+")


class GrammarError(Exception):
    pass


def _escape(text, i):
    """The code point of the escape at text[i] (just after a backslash) and the index after it."""
    c = text[i]
    simple = {"n": 10, "r": 13, "t": 9, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45, "^": 94, "/": 47}
    if c in simple:
        return simple[c], i + 1
    width = {"x": 2, "u": 4, "U": 8}.get(c)
    if width is None:
        raise GrammarError("unknown escape \\%s at %d" % (c, i))
    h = text[i + 1:i + 1 + width]
    if len(h) != width or not all(ch in "0123456789abcdefABCDEF" for ch in h):
        raise GrammarError("bad \\%s escape at %d" % (c, i))
    return int(h, 16), i + 1 + width


class Grammar:
    def __init__(self, text, start="root"):
        self.prods = {}  # name -> list of tuples of symbols (str: rule, tuple: ranges of a terminal)
        self._n_anon = 0
        self.start = start
        self._parse(text)
        for name, alts in self.prods.items():
            for alt in alts:
                for sym in alt:
                    if isinstance(sym, str) and sym not in self.prods:
                        raise GrammarError("rule %s refers to undefined %s" % (name, sym))
        if start not in self.prods:
            raise GrammarError("no rule " + start)
        self._nullable()

    # --- reading ---
    def _anon(self, alts):
        self._n_anon += 1
        name = "@%d" % self._n_anon
        self.prods[name] = alts
        return name

    def _parse(self, text):
        self.text = text
        i = 0
        while True:
            i = self._space(i)
            if i >= len(text):
                break
            m = _NAME.match(text, i)
            if not m:
                raise GrammarError("expected a rule name at %d" % i)
            name = m.group()
            i = self._space(m.end())
            if not text.startswith("::=", i):
                raise GrammarError("expected ::= at %d" % i)
            alts, i = self._alternatives(i + 3, top=True)
            self.prods.setdefault(name, []).extend(alts)

    def _space(self, i):
        t = self.text
        while i < len(t):
            if t[i] in " \t\r\n":
                i += 1
            elif t[i] == "#":
                while i < len(t) and t[i] != "\n":
                    i += 1
            else:
                break
        return i

    def _at_rule_start(self, i):
        m = _NAME.match(self.text, i)
        return m and self.text.startswith("::=", self._space(m.end()))

    def _alternatives(self, i, top):
        alts = []
        seq, i = self._sequence(i, top)
        alts.append(seq)
        while True:
            j = self._space(i)
            if j < len(self.text) and self.text[j] == "|":
                seq, i = self._sequence(j + 1, top)
                alts.append(seq)
            else:
                return alts, i

    def _sequence(self, i, top):
        t = self.text
        seq = []
        while True:
            j = self._space(i)
            if j >= len(t) or t[j] in "|)" or (top and self._at_rule_start(j)):
                return tuple(seq), j
            i = j
            c = t[i]
            if c == '"':
                i += 1
                lit = []
                while True:
                    if i >= len(t):
                        raise GrammarError("unterminated literal")
                    if t[i] == '"':
                        i += 1
                        break
                    if t[i] == "\\":
                        cp, i = _escape(t, i + 1)
                    else:
                        cp, i = ord(t[i]), i + 1
                    lit.append(((cp, cp),))
                atom = [tuple(lit)]
                if len(lit) != 1:
                    atom = [self._anon([tuple(lit)])]
                else:
                    atom = [lit[0]]
            elif c == "[":
                i += 1
                neg = i < len(t) and t[i] == "^"
                if neg:
                    i += 1
                ranges = []
                while True:
                    if i >= len(t):
                        raise GrammarError("unterminated class")
                    if t[i] == "]":
                        i += 1
                        break
                    if t[i] == "\\":
                        lo, i = _escape(t, i + 1)
                    else:
                        lo, i = ord(t[i]), i + 1
                    hi = lo
                    if i + 1 < len(t) and t[i] == "-" and t[i + 1] != "]":
                        if t[i + 1] == "\\":
                            hi, i = _escape(t, i + 2)
                        else:
                            hi, i = ord(t[i + 1]), i + 2
                    ranges.append((lo, hi))
                if neg:
                    ranges = _negate(ranges)
                atom = [tuple(ranges)]
            elif c == ".":
                i += 1
                atom = [((0, 0x10FFFF),)]
            elif c == "(":
                alts, i = self._alternatives(i + 1, top=False)
                i = self._space(i)
                if i >= len(t) or t[i] != ")":
                    raise GrammarError("expected ) at %d" % i)
                i += 1
                atom = [self._anon(alts)]
            else:
                m = _NAME.match(t, i)
                if not m:
                    raise GrammarError("unexpected %r at %d" % (c, i))
                i = m.end()
                atom = [m.group()]
            # postfix operators apply to the atom
            while i < len(t) and t[i] in "*+?{":
                if t[i] == "{":
                    m = re.compile(r"\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}").match(t, i)
                    if not m:
                        raise GrammarError("bad repetition at %d" % i)
                    lo = int(m.group(1))
                    hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                    i = m.end()
                else:
                    lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[t[i]]
                    i += 1
                atom = [self._repeat(atom[0], lo, hi)]
            seq.extend(atom)

    def _repeat(self, sym, lo, hi):
        if hi is None:
            star = self._anon([])
            self.prods[star] = [(sym, star), ()]
            return self._anon([tuple([sym] * lo) + (star,)])
        tail = None  # up to hi - lo optional copies: opt_k ::= sym opt_{k-1} | ""
        for _ in range(hi - lo):
            tail = self._anon([(sym,) + ((tail,) if tail else ()), ()])
        return self._anon([tuple([sym] * lo) + ((tail,) if tail else ())])

    def _nullable(self):
        self.null = set()
        changed = True
        while changed:
            changed = False
            for name, alts in self.prods.items():
                if name not in self.null and any(all(isinstance(s, str) and s in self.null for s in a) for a in alts):
                    self.null.add(name)
                    changed = True

    # --- recognizing (Earley, with Aycock and Horspool's rule for empty rules) ---
    def _sets(self, s):
        """Yields the Earley set after each code point (the first: before any); stops when one is empty."""
        prods = self.prods
        null = self.null

        def closure(items, i, sets):
            agenda = list(items)
            seen = items
            waiting = {}
            completed = set()
            while agenda:
                it = agenda.pop()
                name, alt, dot, org = it
                rhs = prods[name][alt]
                if dot < len(rhs):
                    sym = rhs[dot]
                    if isinstance(sym, str):
                        waiting.setdefault(sym, []).append(it)
                        for k in range(len(prods[sym])):
                            new = (sym, k, 0, i)
                            if new not in seen:
                                seen.add(new)
                                agenda.append(new)
                        if sym in null or sym in completed:
                            new = (name, alt, dot + 1, org)
                            if new not in seen:
                                seen.add(new)
                                agenda.append(new)
                else:
                    if org == i:
                        completed.add(name)
                    src = waiting.get(name, []) if org == i else sets[org][1].get(name, [])
                    for w in list(src):
                        new = (w[0], w[1], w[2] + 1, w[3])
                        if new not in seen:
                            seen.add(new)
                            agenda.append(new)
            return seen, waiting

        sets = []
        start = set((self.start, k, 0, 0) for k in range(len(prods[self.start])))
        cur = closure(start, 0, sets)
        sets.append(cur)
        yield cur[0]
        for i, ch in enumerate(s):
            cp = ord(ch)
            nxt = set()
            for (name, alt, dot, org) in cur[0]:
                rhs = prods[name][alt]
                if dot < len(rhs) and not isinstance(rhs[dot], str):
                    if any(lo <= cp <= hi for lo, hi in rhs[dot]):
                        nxt.add((name, alt, dot + 1, org))
            if not nxt:
                return
            cur = closure(nxt, i + 1, sets)
            sets.append(cur)
            yield cur[0]

    def _last(self, s):
        n, last = -1, None
        for n, last in enumerate(self._sets(s)):
            pass
        return n, last

    def judge(self, s):
        """'match', 'prefix', or the index of the first code point no sentence allows (one pass)."""
        n, last = self._last(s)
        if n != len(s):
            return n
        whole = any(name == self.start and dot == len(self.prods[name][alt]) and org == 0
                    for (name, alt, dot, org) in last)
        return "match" if whole else "prefix"

    def match(self, s):
        n, last = self._last(s)
        if n != len(s):
            return False
        return any(name == self.start and dot == len(self.prods[name][alt]) and org == 0
                   for (name, alt, dot, org) in last)

    def viable(self, s):
        return self._last(s)[0] == len(s)

    def fail_at(self, s):
        n, _ = self._last(s)
        return None if n == len(s) else n

    # --- random sentences ---
    def sample(self, rng, max_depth=40, max_len=4000):
        out = []

        def gen(sym, depth):
            if len(out) > max_len:
                raise RecursionError
            if not isinstance(sym, str):
                lo, hi = rng.choice(sym)
                if hi > 0x7F and rng.random() < 0.8:  # mostly readable code points
                    hi = max(lo, min(hi, 0x7F if lo <= 0x7F else lo + 200))
                cp = rng.randint(lo, hi)
                if 0xD800 <= cp < 0xE000:
                    cp = 0x41 if lo <= 0x41 <= hi else lo
                out.append(chr(cp))
                return
            alts = self.prods[sym]
            if depth > max_depth:
                # deep: prefer an alternative without rules that are not nullable
                short = [a for a in alts if all(not isinstance(x, str) or x in self.null for x in a)]
                if short:
                    alts = short
                elif depth > max_depth * 3:
                    raise RecursionError
            for x in rng.choice(alts):
                gen(x, depth + 1)

        try:
            gen(self.start, 0)
        except RecursionError:
            return None
        return "".join(out)


def _negate(ranges):
    out, nxt = [], 0
    for lo, hi in sorted(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = max(nxt, hi + 1)
    if nxt <= 0x10FFFF:
        out.append((nxt, 0x10FFFF))
    return out
