"""The schema corpus: JSON Schemas covering every keyword deltaserve compiles,
each with instances that validate and instances that do not, and the
schemas it must refuse (with the keyword the message names).

cases() -> list of dicts: name, schema, valid, invalid, strict (bool).
Valid instances are written the way the grammar writes JSON (properties in
the order the schema lists them, no exponent beside bounds), so that the
grammar must accept each of them; invalid ones must be refused.
refused() -> list of (name, schema, word the error names).
"""
import random


def _case(out, name, schema, valid, invalid, strict=False):
    out.append({"name": name, "schema": schema, "valid": list(valid), "invalid": list(invalid), "strict": strict})


def _types(out):
    _case(out, "null", {"type": "null"}, [None], [0, False, "", [], {}])
    _case(out, "boolean", {"type": "boolean"}, [True, False], [0, None, "true", []])
    _case(out, "integer", {"type": "integer"}, [0, -1, 7, 1234567890123, -99], [1.5, "1", None, True, [1]])
    _case(out, "number", {"type": "number"}, [0, -1, 1.5, -0.25, 1e20, 3.0e-5, 12345.678], ["1", None, False, {}])
    _case(out, "string", {"type": "string"}, ["", "a", "h\u00e9llo", "quote\"back\\slash", "line\nbreak\ttab", "\u2603\U0001F600", "\x01\x1f"],
          [1, None, ["a"], {"a": 1}])
    _case(out, "array", {"type": "array"}, [[], [1, "a", None], [[[]]], [{"a": [1, 2]}]], [{}, "[]", 1])
    _case(out, "object", {"type": "object"}, [{}, {"a": 1}, {"a": {"b": [1, {"c": None}]}}, {"": "", "x y": True}], [[], "{}", 0])
    _case(out, "string-or-null", {"type": ["string", "null"]}, ["a", None, ""], [1, False, []])
    _case(out, "integer-or-boolean", {"type": ["integer", "boolean"]}, [1, True, False, -5], [1.5, None, "1"])
    _case(out, "number-integer-list", {"type": ["number", "integer"]}, [1, 2.5], ["x", None])
    _case(out, "empty-schema", {}, [None, 1, "a", [1, {"b": 2}], {"x": [True]}], [])
    _case(out, "true-schema", True, [None, 1.5, "a", [], {}], [])
    _case(out, "annotations", {"type": "integer", "title": "t", "description": "d", "default": 3, "examples": [1],
                               "$comment": "c", "$schema": "https://json-schema.org/draft/2020-12/schema"}, [3], ["3"])
    _case(out, "nested-any", {"type": "object", "properties": {"a": {}}, "required": ["a"]},
          [{"a": None}, {"a": {"b": [1, 2.5, "s"]}}], [{}, {"b": 1}])


def _int_ranges(out):
    rng = random.Random(15)
    bounds = [(0, None), (1, None), (None, 0), (None, -1), (0, 9), (0, 10), (1, 100), (5, 5), (-10, 10), (-1000, -37),
              (-37, 1000), (17, 250), (99, 1001), (0, 150), (123, 45678), (-5, None), (None, 300), (1000000, None),
              (None, -123456), (-9, 99)]
    for lo, hi in bounds:
        s = {"type": "integer"}
        if lo is not None:
            s["minimum"] = lo
        if hi is not None:
            s["maximum"] = hi
        a = lo if lo is not None else (hi - 500 if hi is not None else -500)
        b = hi if hi is not None else a + 5000
        valid = sorted(set([a, b] + [rng.randint(a, b) for _ in range(6)]))
        invalid = []
        if lo is not None:
            invalid += [lo - 1, lo - 10, lo - 1000]
        if hi is not None:
            invalid += [hi + 1, hi + 10, hi * 10 + 10 if hi >= 0 else hi + 100000]
        invalid = [x for x in invalid if not ((lo is None or x >= lo) and (hi is None or x <= hi))]
        _case(out, "int-range-%s-%s" % (lo, hi), s, valid, invalid + [1.5, "1"])
    # exclusive bounds, 2020-12 numbers and draft-04 booleans
    _case(out, "int-exclusive", {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
          [1, 5, 9], [0, 10, -1, 11])
    _case(out, "int-exclusive-neg", {"type": "integer", "exclusiveMinimum": -20, "exclusiveMaximum": -3},
          [-19, -4, -10], [-20, -3, 0, -21])
    _case(out, "int-fraction-bounds", {"type": "integer", "minimum": 1.5, "maximum": 7.5}, [2, 7], [1, 8, 0])
    _case(out, "int-both-min", {"type": "integer", "minimum": 3, "exclusiveMinimum": 5}, [6, 100], [5, 3, 4])


def _random_ranges(out):
    """Bounds drawn at random: integer ranges are exact, digit by digit."""
    rng = random.Random(1515)
    for i in range(24):
        lo = rng.choice([None, rng.randint(-10 ** rng.randint(1, 7), 10 ** rng.randint(1, 7))])
        hi = rng.choice([None, (lo if lo is not None else 0) + rng.randint(0, 10 ** rng.randint(0, 8))])
        s = {"type": "integer" if i % 3 else "number"}
        if lo is not None:
            s["exclusiveMinimum" if i % 4 == 1 else "minimum"] = lo
        if hi is not None:
            s["exclusiveMaximum" if i % 4 == 2 and (lo is None or hi > lo + 1) else "maximum"] = hi
        a = lo + 1 if lo is not None else (hi - 10 ** 6 if hi is not None else -10 ** 6)
        b = hi - 1 if hi is not None else a + 10 ** 6
        if a > b:
            a = b = lo if "minimum" in s else hi
        valid = sorted(set([a, b] + [rng.randint(a, b) for _ in range(5)]))
        invalid = ([lo - 1, lo - 7 * 10 ** rng.randint(0, 5)] if lo is not None else []) + \
                  ([hi + 1, hi + 3 * 10 ** rng.randint(0, 5)] if hi is not None else [])
        _case(out, "random-range-%d" % i, s, valid, invalid + ["1"])


def _number_ranges(out):
    _case(out, "num-min0", {"type": "number", "minimum": 0}, [0, 1, 0.5, 123.25, 99999], [-1, -0.5, -100])
    _case(out, "num-0-1", {"type": "number", "minimum": 0, "maximum": 1}, [0, 1, 0.5, 0.999, 0.001], [1.5, -0.1, 2, 1.001])
    _case(out, "num-excl-0", {"type": "number", "exclusiveMinimum": 0}, [0.001, 1, 5.5], [0, -0.5, -3])
    _case(out, "num-excl-both", {"type": "number", "exclusiveMinimum": -1, "exclusiveMaximum": 1},
          [0, -0.5, 0.75, 0.999], [-1, 1, 1.5, -2])
    _case(out, "num-neg", {"type": "number", "minimum": -100, "maximum": -10}, [-100, -10, -50.5, -99.9, -10.0],
          [-9.5, -101, 0, -100.5])
    _case(out, "num-frac-bounds", {"type": "number", "minimum": 0.5, "maximum": 2.5}, [1, 2, 1.25, 1.999], [0.25, 3, 2.75, -1])
    _case(out, "num-max", {"type": "number", "maximum": 37}, [37, -5, 36.99, -1000.5], [37.5, 38, 1000])
    _case(out, "num-wide", {"type": "number", "minimum": -1000000, "maximum": 1000000}, [0, 999999.5, -1000000, 123],
          [1000000.5, -1000001, 2e6])


def _strings(out):
    for lo, hi in [(0, 0), (1, None), (0, 3), (2, 2), (3, 10), (5, None), (None, 1)]:
        s = {"type": "string"}
        if lo is not None:
            s["minLength"] = lo
        if hi is not None:
            s["maxLength"] = hi
        a = lo or 0
        b = hi if hi is not None else a + 6
        valid = ["x" * a, "\u00e9" * b, ("\"\\\n" * 4)[:b], "\U0001F600" * a, ("ab\tc" * 3)[:max(a, min(b, 4))]]
        invalid = []
        if a > 0:
            invalid += ["y" * (a - 1), "\u00e9" * (a - 1)]
        if hi is not None:
            invalid += ["z" * (hi + 1), "\n" * (hi + 1)]
        _case(out, "strlen-%s-%s" % (lo, hi), s, valid, invalid + [5])
    patterns = [
        ("^[a-z]+$", ["abc", "z"], ["", "Abc", "ab1"]),
        ("^\\d{3}-\\d{4}$", ["555-1234"], ["5551234", "55-1234", "555-12345"]),
        ("^[A-Z]{2}[0-9]{2,4}$", ["AB12", "XY1234"], ["AB1", "ab12", "AB12345"]),
        ("abc", ["abc", "xxabcyy", "abc\n"], ["ab", "acb", ""]),
        ("^(foo|bar)baz$", ["foobaz", "barbaz"], ["baz", "foobar", "foobazz"]),
        ("^a*b?c+$", ["c", "aacc", "abc"], ["ab", "bc b", ""]),
        ("^[^\"\\\\]*$", ["plain text", ""], ["has \"quote", "back\\slash"]),
        ("^\"quoted\"$", ["\"quoted\""], ["quoted"]),
        ("^\\w+@\\w+\\.com$", ["a@b.com", "x_1@y2.com"], ["a@b.org", "@b.com"]),
        ("^.{2,3}$", ["ab", "\u00e9\u00e9\u00e9", "a\tb"], ["a", "abcd", "a\n"]),
        ("^[\\s\\S]{0,2}$", ["", "\n\n", "a"], ["abc"]),
        ("^(\\d+(\\.\\d+)?)$", ["1", "1.25"], ["1.", ".5", "a"]),
        ("^(?:yes|no)$", ["yes", "no"], ["maybe", "yesno"]),
        ("^[\\u0041-\\u0043]+$", ["ABC", "CA"], ["D", "abc"]),
        ("^\\x41\\t\\n$", ["A\t\n"], ["A\t", "A \n"]),
        ("^[a-c]|x$", ["a", "b123", "zzx"], ["d", "xz"]),
        ("^(ab)*$", ["", "abab"], ["aba", "ba"]),
        ("^\\S+\\s\\S+$", ["hello world"], ["hello  world", "hello"]),
        ("^[^a-z]{2}$", ["AB", "1\n"], ["aB", "ABC"]),
        ("^(a|b|)c$", ["ac", "c"], ["abc", "cc"]),
        ("^\\$\\d+\\.\\d\\d$", ["$10.00"], ["10.00", "$10.0"]),
        ("^[\\u00e0-\\u00ff]+\\u2603$", ["\u00e9\u2603"], ["e\u2603", "\u00e9"]),
        ("[0-9]$", ["abc1", "9"], ["abc", "1a"]),
        ("^(?P<word>[a-z]+)-\\d$", ["ab-1"], ["ab-", "1-ab"]),
        ("^a{3}$", ["aaa"], ["aa", "aaaa"]),
        ("^a{2,}$", ["aa", "aaaaa"], ["a"]),
        ("^a{,2}$", ["", "a", "aa"], ["aaa"]),
        ("^x{2}?y+?$", ["xxy", "xxyy"], ["xy"]),
        ("^[-+]?[0-9]+$", ["-1", "+22", "3"], ["--1", "+"]),
        ("^[\\]\\[]+$", ["[]", "]]"], ["{}"]),
    ]
    for i, (p, v, inv) in enumerate(patterns):
        _case(out, "pattern-%d" % i, {"type": "string", "pattern": p}, v, inv + [1])
    _case(out, "format-date", {"type": "string", "format": "date"}, ["2024-01-31", "1999-12-01", "2023-02-28", "2024-04-30"],
          [1, None])
    _case(out, "format-time", {"type": "string", "format": "time"}, ["12:34:56Z", "23:59:59.123+02:00", "00:00:00-05:30"], [1])
    _case(out, "format-date-time", {"type": "string", "format": "date-time"},
          ["2024-01-31T12:34:56Z", "2000-06-15T00:00:00.5+01:00"], [None])
    _case(out, "format-uuid", {"type": "string", "format": "uuid"}, ["123e4567-e89b-12d3-a456-426614174000",
                                                                     "ABCDEF01-2345-6789-abcd-ef0123456789"], [5])
    _case(out, "format-email", {"type": "string", "format": "email"}, ["a@b.co", "first.last+tag@example.org"], [[]])
    _case(out, "format-date-in-object", {"type": "object", "properties": {"d": {"type": "string", "format": "date"}},
                                         "required": ["d"]}, [{"d": "2020-02-29"}], [{"d": 1}, {}])


def _enums(out):
    _case(out, "enum-strings", {"enum": ["red", "green", "blue"]}, ["red", "blue"], ["Red", "", "yellow", 1])
    _case(out, "enum-mixed", {"enum": [1, "1", None, True, 2.5, [1, 2], {"a": 1}]},
          [1, "1", None, True, 2.5, [1, 2], {"a": 1}], [2, "2", False, [2, 1], {"a": 2}, {}])
    _case(out, "enum-escapes", {"enum": ["a\"b", "c\\d", "e\nf", "\u00e9\u2603", "\x07"]},
          ["a\"b", "c\\d", "e\nf", "\u00e9\u2603", "\x07"], ["ab", "e f"])
    _case(out, "const-string", {"const": "fixed"}, ["fixed"], ["Fixed", "fixed "])
    _case(out, "const-object", {"const": {"k": [1, {"z": None}], "s": "v"}}, [{"k": [1, {"z": None}], "s": "v"}],
          [{"k": [1], "s": "v"}, {}])
    _case(out, "const-null", {"const": None}, [None], [0, "null"])
    _case(out, "const-number", {"const": 3.5}, [3.5], [3, 4])
    _case(out, "const-whole-real", {"const": 3.0}, [3, 3.0], [4, 3.5])
    _case(out, "enum-typed", {"type": "string", "enum": ["a", 1, "b"]}, ["a", "b"], [1, "c"])
    _case(out, "enum-integer-typed", {"type": "integer", "enum": [1, 2.5, 3]}, [1, 3], [2.5, 2])
    _case(out, "enum-in-array", {"type": "array", "items": {"enum": ["x", "y"]}}, [[], ["x", "y", "x"]], [["z"], ["x", 1]])
    _case(out, "enum-empty-containers", {"enum": [[], {}]}, [[], {}], [[1], {"a": 1}])


def _random_enums(out):
    rng = random.Random(99)
    alphabet = "ab\"\\\n \u00e9\u2603z{}[],:"
    for i in range(14):
        words = sorted(set("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(1, 6))))
        vals = words + [rng.randint(-50, 50) for _ in range(i % 3)]
        others = ["".join(rng.choice(alphabet) for _ in range(3)) + "!", 51 + i, None]
        s = {"enum": vals} if i % 2 else {"type": "object", "properties": {"v": {"enum": vals}}, "required": ["v"]}
        wrap = (lambda x: x) if i % 2 else (lambda x: {"v": x})
        _case(out, "random-enum-%d" % i, s, [wrap(v) for v in vals], [wrap(v) for v in others if v not in vals])


def _objects(out):
    person = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
                                                "email": {"type": "string", "format": "email"}},
              "required": ["name"]}
    _case(out, "obj-person", person, [{"name": "A"}, {"name": "A", "age": 3}, {"name": "A", "email": "a@b.cd"},
                                      {"name": "A", "age": 3, "email": "a@b.cd", "extra": [1]}],
          [{}, {"age": 3}, {"name": 1}, {"name": "A", "age": -1}])
    _case(out, "obj-person-strict", person, [{"name": "A"}, {"name": "A", "age": 3, "email": "a@b.cd"}],
          [{"name": "A", "extra": 1}, {}], strict=True)
    closed = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}}, "additionalProperties": False}
    _case(out, "obj-closed-optional", closed, [{}, {"a": 1}, {"b": True}, {"a": 1, "b": False}], [{"c": 1}, {"a": "x"}, {"a": 1, "c": 2}])
    _case(out, "obj-all-required", dict(closed, required=["a", "b"]), [{"a": 1, "b": True}], [{"a": 1}, {"b": True}, {}])
    _case(out, "obj-middle-required", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                                                                       "c": {"type": "null"}},
                                       "required": ["b"], "additionalProperties": False},
          [{"b": ""}, {"a": 1, "b": "x"}, {"b": "x", "c": None}, {"a": 2, "b": "y", "c": None}], [{"a": 1}, {"c": None}, {}])
    _case(out, "obj-additional-schema", {"type": "object", "properties": {"id": {"type": "integer"}},
                                         "additionalProperties": {"type": "string"}},
          [{}, {"id": 1}, {"id": 1, "x": "y"}, {"x": "y", "z": "w"}, {"idx": "q"}, {"i": "q"}],
          [{"x": 1}, {"id": "1"}, {"id": 1, "x": None}])
    _case(out, "obj-additional-only", {"type": "object", "additionalProperties": {"type": "integer"}},
          [{}, {"a": 1, "b": 2}], [{"a": "1"}])
    _case(out, "obj-required-not-declared", {"type": "object", "required": ["x"]}, [{"x": 1}, {"x": [None]}], [{}, {"y": 1}])
    _case(out, "obj-required-addl-schema", {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["z"],
                                            "additionalProperties": {"type": "boolean"}},
          [{"z": True}, {"a": 1, "z": False}], [{"a": 1}, {"z": 1}])
    _case(out, "obj-nested", {"type": "object", "properties": {"p": {"type": "object", "properties": {
        "q": {"type": "array", "items": {"type": "object", "properties": {"r": {"type": "number"}}, "required": ["r"],
                                         "additionalProperties": False}}}, "required": ["q"]}}, "required": ["p"]},
          [{"p": {"q": []}}, {"p": {"q": [{"r": 1}, {"r": 2.5}]}}], [{"p": {}}, {"p": {"q": [{}]}}, {"p": {"q": [{"r": "1"}]}}])
    _case(out, "obj-keys-escaped", {"type": "object", "properties": {"a\"b": {"type": "integer"}, "c\\d": {"type": "integer"},
                                                                    "\u00e9\u2603": {"type": "integer"}, "sp ace": {"type": "null"}},
                                    "required": ["a\"b", "\u00e9\u2603"], "additionalProperties": False},
          [{"a\"b": 1, "\u00e9\u2603": 2}, {"a\"b": 1, "c\\d": 3, "\u00e9\u2603": 2, "sp ace": None}], [{"a\"b": 1}, {"ab": 1, "\u00e9\u2603": 2}])
    _case(out, "obj-prop-false", {"type": "object", "properties": {"a": False, "b": {"type": "integer"}}},
          [{}, {"b": 1}, {"c": 1}], [{"a": 1}, {"b": 1, "a": 2}])
    _case(out, "obj-prop-true", {"type": "object", "properties": {"a": True}, "required": ["a"], "additionalProperties": False},
          [{"a": 1}, {"a": {"x": []}}], [{}, {"b": 1}])
    _case(out, "obj-untyped-properties", {"properties": {"a": {"type": "integer"}}, "required": ["a"]}, [{"a": 1}], [{"a": "x"}, {}])
    _case(out, "obj-nullable", {"type": ["object", "null"], "properties": {"a": {"type": "string"}}, "required": ["a"]},
          [None, {"a": "x"}], [{}, "a"])
    many = {"type": "object", "properties": {}, "required": []}
    for i in range(12):
        many["properties"]["p%d" % i] = [{"type": "integer"}, {"type": "string"}, {"type": "boolean"}][i % 3]
        if i % 4 == 0:
            many["required"].append("p%d" % i)
    _case(out, "obj-many", many, [{"p0": 1, "p4": "a", "p8": True}, {"p0": 1, "p1": "a", "p4": "b", "p5": True, "p8": False, "p11": True}],
          [{"p0": 1, "p4": "a"}, {"p0": "1", "p4": "a", "p8": True}, {"p0": 1, "p4": "a", "p8": True, "q": 1}], strict=True)
    for i in range(6):  # objects whose optional properties are some of n
        props = {"k%d" % j: {"type": "integer", "minimum": j} for j in range(i + 1)}
        req = ["k%d" % j for j in range(i + 1) if (j + i) % 3 == 0]
        s = {"type": "object", "properties": props, "required": req, "additionalProperties": False}
        valid = [{k: props[k]["minimum"] for k in props}, {k: props[k]["minimum"] + 5 for k in req}]
        invalid = [{"other": 1}] + ([{k: -1 for k in props}] if i else [{"k0": "x"}])
        _case(out, "obj-optional-%d" % i, s, valid, invalid)


def _arrays(out):
    _case(out, "arr-items", {"type": "array", "items": {"type": "integer"}}, [[], [1], [1, 2, 3]], [[1.5], ["a"], {}])
    _case(out, "arr-min-max", {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 3},
          [["a", "b"], ["a", "b", "c"]], [[], ["a"], ["a", "b", "c", "d"], ["a", 1]])
    _case(out, "arr-exact", {"type": "array", "minItems": 2, "maxItems": 2}, [[1, "x"], [None, []]], [[1], [1, 2, 3]])
    _case(out, "arr-max0", {"type": "array", "maxItems": 0}, [[]], [[1]])
    _case(out, "arr-min1", {"type": "array", "items": {"type": "boolean"}, "minItems": 1}, [[True], [True, False]], [[], [1]])
    _case(out, "arr-prefix", {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]},
          [[], [1], [1, "a"], [1, "a", None, 5]], [["a"], [1, 2]])
    _case(out, "arr-prefix-closed", {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
          [[], [1], [1, "a"]], [[1, "a", 3], ["a"]])
    _case(out, "arr-prefix-min", {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                                  "items": {"type": "boolean"}, "minItems": 2, "maxItems": 4},
          [[1, "a"], [1, "a", True], [1, "a", True, False]], [[1], [1, "a", 2], [1, "a", True, True, True]])
    _case(out, "arr-prefix-min3", {"type": "array", "prefixItems": [{"const": 1}], "items": {"type": "null"}, "minItems": 3},
          [[1, None, None], [1, None, None, None]], [[1, None], [None, None, None]])
    _case(out, "arr-nested", {"type": "array", "items": {"type": "array", "items": {"type": "number"}, "maxItems": 2}},
          [[], [[]], [[1, 2], [3.5]]], [[[1, 2, 3]], [1]])
    _case(out, "arr-untyped-items", {"items": {"type": "integer"}, "minItems": 1}, [[1]], [[], ["a"]])
    _case(out, "arr-draft7-items", {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
                                    "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": False},
          [[], ["a"], ["a", 1]], [["a", 1, 2], [1]])
    _case(out, "arr-draft7-additional", {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
                                         "items": [{"type": "string"}], "additionalItems": {"type": "integer"}},
          [["a"], ["a", 1, 2]], [["a", "b"]])
    for n in range(1, 9):  # ranges of lengths
        s = {"type": "array", "items": {"type": "integer"}, "minItems": n // 2, "maxItems": n}
        _case(out, "arr-len-%d" % n, s, [list(range(n // 2)), list(range(n))], [list(range(n + 1))] + ([list(range(n // 2 - 1))] if n // 2 else []))


def _combinators(out):
    _case(out, "anyOf-types", {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "integer", "minimum": 10}]},
          ["ab", 10, 999], ["abc", 9, None])
    _case(out, "oneOf-disjoint", {"oneOf": [{"type": "boolean"}, {"type": "null"}, {"type": "array", "items": {"type": "integer"}}]},
          [True, None, [1, 2]], [1, "x", ["a"]])
    _case(out, "anyOf-objects", {"anyOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind", "x"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind", "y"], "additionalProperties": False}]},
          [{"kind": "a", "x": 1}, {"kind": "b", "y": "s"}], [{"kind": "a", "y": "s"}, {"kind": "c"}, {}])
    _case(out, "anyOf-with-siblings", {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                                       "anyOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]},
                                                 {"properties": {"b": {"type": "boolean"}}, "required": ["b"]}]},
          [{"id": 1, "a": "x"}, {"id": 2, "b": True}], [{"id": 1}, {"a": "x"}, {"id": 1, "a": 5}])
    _case(out, "allOf-merge", {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                         {"properties": {"b": {"type": "string"}}, "required": ["b"]}]},
          [{"a": 1, "b": "x"}, {"a": 1, "b": "x", "c": None}], [{"a": 1}, {"b": "x"}, {"a": "1", "b": "x"}])
    _case(out, "allOf-ranges", {"allOf": [{"type": "integer", "minimum": 0}, {"maximum": 10}, {"minimum": 3}]},
          [3, 10, 7], [2, 11, -1])
    _case(out, "allOf-closed", {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
                                          {"type": "object", "properties": {"a": {"minimum": 5}}}]},
          [{}, {"a": 5}], [{"a": 4}, {"b": 1}])
    _case(out, "allOf-closed-other", {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
                                                {"type": "object", "properties": {"b": {"type": "integer"}}}]},
          [{}, {"a": 1}], [{"b": 1}, {"a": 1, "b": 2}])
    _case(out, "allOf-strings", {"allOf": [{"type": "string"}, {"minLength": 2}, {"maxLength": 4}]}, ["ab", "abcd"], ["a", "abcde", 3])
    _case(out, "allOf-types", {"allOf": [{"type": ["string", "integer", "null"]}, {"type": ["integer", "number", "null"]}]},
          [1, None], ["a", 1.5])
    _case(out, "allOf-anyOf", {"allOf": [{"type": "object", "properties": {"t": {"type": "integer"}}, "required": ["t"]},
                                         {"anyOf": [{"required": ["u"]}, {"required": ["v"]}]}]},
          [{"t": 1, "u": 2}, {"t": 1, "v": None}], [{"t": 1}, {"u": 1}])
    _case(out, "nullable-anyOf", {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]}, ["2024-05-06", None], [1, []])


def _refs(out):
    _case(out, "ref-defs", {"$defs": {"pos": {"type": "integer", "minimum": 1}}, "type": "array", "items": {"$ref": "#/$defs/pos"}},
          [[], [1, 2]], [[0], ["a"]])
    _case(out, "ref-definitions", {"definitions": {"s": {"type": "string", "maxLength": 1}},
                                   "type": "object", "properties": {"a": {"$ref": "#/definitions/s"}, "b": {"$ref": "#/definitions/s"}}},
          [{}, {"a": "x", "b": ""}], [{"a": "xy"}, {"b": 1}])
    tree = {"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
                                                                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                               "required": ["value"], "additionalProperties": False}},
            "$ref": "#/$defs/node"}
    _case(out, "ref-tree", tree, [{"value": 1}, {"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}, {"value": 4}]}],
          [{}, {"value": 1, "children": [{}]}, {"value": 1, "children": [{"value": "x"}]}])
    _case(out, "ref-root", {"type": "object", "properties": {"name": {"type": "string"}, "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
                            "required": ["name", "next"], "additionalProperties": False},
          [{"name": "a", "next": None}, {"name": "a", "next": {"name": "b", "next": None}}],
          [{"name": "a"}, {"name": "a", "next": {"name": "b"}}])
    _case(out, "ref-linked-list", {"$defs": {"list": {"anyOf": [{"type": "null"}, {"type": "array", "prefixItems": [{"type": "integer"}, {"$ref": "#/$defs/list"}],
                                                                                    "items": False, "minItems": 2}]}},
                                   "$ref": "#/$defs/list"},
          [None, [1, None], [1, [2, None]]], [[1], [1, [2]], ["a", None]])
    _case(out, "ref-with-siblings", {"$defs": {"base": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}},
                                     "$ref": "#/$defs/base", "properties": {"b": {"type": "string"}}, "required": ["b"]},
          [{"a": 1, "b": "x"}], [{"a": 1}, {"b": "x"}])
    _case(out, "ref-chain", {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/c"}, "c": {"enum": [1, 2]}},
                             "$ref": "#/$defs/a"}, [1, 2], [3, "1"])
    _case(out, "ref-in-allOf", {"$defs": {"named": {"properties": {"name": {"type": "string"}}, "required": ["name"]}},
                                "allOf": [{"$ref": "#/$defs/named"}, {"type": "object", "properties": {"n": {"type": "integer"}}}]},
          [{"name": "x"}, {"name": "x", "n": 1}], [{"n": 1}, {"name": 1}])
    _case(out, "ref-mutual", {"$defs": {"a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}}, "additionalProperties": False},
                                        "b": {"type": "array", "items": {"$ref": "#/$defs/a"}, "maxItems": 2}},
                              "$ref": "#/$defs/a"},
          [{}, {"b": []}, {"b": [{}, {"b": [{}]}]}], [{"b": {}}, {"b": [1]}, {"c": 1}])


def _realistic(out):
    _case(out, "tool-weather", {"type": "object", "properties": {
        "location": {"type": "string", "description": "City"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14}},
        "required": ["location", "unit"], "additionalProperties": False},
          [{"location": "Paris", "unit": "celsius"}, {"location": "Oslo", "unit": "fahrenheit", "days": 14}],
          [{"location": "Paris"}, {"location": "Paris", "unit": "kelvin"}, {"location": "P", "unit": "celsius", "days": 15}])
    _case(out, "pydantic-like", {"title": "Model", "type": "object", "$defs": {
        "Item": {"title": "Item", "type": "object", "properties": {"sku": {"title": "Sku", "type": "string", "pattern": "^[A-Z]{3}-\\d{3}$"},
                                                                   "qty": {"title": "Qty", "type": "integer", "exclusiveMinimum": 0}},
                 "required": ["sku", "qty"], "additionalProperties": False}},
        "properties": {"id": {"title": "Id", "type": "string", "format": "uuid"},
                       "items": {"title": "Items", "type": "array", "items": {"$ref": "#/$defs/Item"}, "minItems": 1},
                       "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}},
        "required": ["id", "items"], "additionalProperties": False},
          [{"id": "123e4567-e89b-12d3-a456-426614174000", "items": [{"sku": "ABC-123", "qty": 2}]},
           {"id": "123e4567-e89b-12d3-a456-426614174000", "items": [{"sku": "ABC-123", "qty": 2}, {"sku": "XYZ-999", "qty": 1}], "note": None}],
          [{"id": "123e4567-e89b-12d3-a456-426614174000", "items": []},
           {"id": "123e4567-e89b-12d3-a456-426614174000", "items": [{"sku": "abc-123", "qty": 2}]},
           {"id": "123e4567-e89b-12d3-a456-426614174000", "items": [{"sku": "ABC-123", "qty": 0}]}])
    _case(out, "extraction", {"type": "object", "properties": {
        "people": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string", "minLength": 1},
                                                                               "born": {"type": ["integer", "null"], "minimum": 1000, "maximum": 2100}},
                                               "required": ["name", "born"], "additionalProperties": False}, "maxItems": 5},
        "topic": {"type": "string", "maxLength": 40}}, "required": ["people", "topic"], "additionalProperties": False},
          [{"people": [], "topic": ""}, {"people": [{"name": "Ada", "born": 1815}, {"name": "X", "born": None}], "topic": "math"}],
          [{"people": [{"name": "", "born": 1815}], "topic": ""}, {"people": [{"name": "A", "born": 999}], "topic": ""}])


def cases():
    out = []
    for f in (_types, _int_ranges, _random_ranges, _number_ranges, _strings, _enums, _random_enums, _objects, _arrays, _combinators, _refs, _realistic):
        f(out)
    return out


def refused():
    """Schemas the compiler must refuse, and a word its message must hold."""
    r = []
    for kw, val in [("not", {}), ("patternProperties", {"^a": {}}), ("propertyNames", {"maxLength": 3}),
                    ("if", {}), ("dependentRequired", {"a": ["b"]}), ("uniqueItems", True), ("contains", {}),
                    ("multipleOf", 2), ("minProperties", 1), ("maxProperties", 3), ("dependencies", {}),
                    ("unevaluatedProperties", False), ("dependentSchemas", {}), ("minContains", 1), ("$dynamicRef", "#x")]:
        r.append(("kw-" + kw, {"type": "object", kw: val}, kw))
        r.append(("kw-nested-" + kw, {"type": "object", "properties": {"a": {kw: val}}}, "/properties/a"))
    r.append(("remote-ref", {"$ref": "https://example.com/schema.json"}, "remote $ref"))
    r.append(("missing-ref", {"$ref": "#/$defs/nope"}, "#/$defs/nope"))
    r.append(("false-schema", False, "false"))
    r.append(("format-ipv4", {"type": "string", "format": "ipv4"}, "ipv4"))
    r.append(("pattern-backref", {"type": "string", "pattern": "(a)\\1"}, "backreference"))
    r.append(("pattern-lookahead", {"type": "string", "pattern": "a(?=b)"}, "lookaround"))
    r.append(("pattern-and-length", {"type": "string", "pattern": "a", "maxLength": 3}, "maxLength"))
    r.append(("allOf-two-patterns", {"allOf": [{"type": "string", "pattern": "a"}, {"pattern": "b"}]}, "pattern"))
    r.append(("allOf-no-type", {"allOf": [{"type": "string"}, {"type": "integer"}]}, "type"))
    r.append(("required-but-closed", {"type": "object", "required": ["x"], "additionalProperties": False}, "'x'"))
    r.append(("int-empty-range", {"type": "integer", "minimum": 5, "maximum": 4}, "bounds"))
    r.append(("min-items-impossible", {"type": "array", "prefixItems": [{}], "items": False, "minItems": 2}, "minItems"))
    r.append(("deep-keyword", {"$defs": {"x": {"type": "array", "items": {"not": {}}}}, "$ref": "#/$defs/x"}, "/$defs/x/items"))
    return r
