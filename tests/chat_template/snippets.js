// snippets.js - small templates, one construct each, that compare.js renders
// with both engines. { name, template, ctx?, error? }: with error set, both
// must refuse, and deltaserve's message must contain that text (a line:column).
'use strict';

const CTX = {
    s: '  Hello, World!  ',
    u: 'Grüße, ÉCOLE, straße, ǅ, İstanbul, ΣΊΣΥΦΟΣ, emoji 🙂',
    n: 7,
    f: 2.5,
    neg: -3,
    t: true,
    z: null,
    list: [3, 1, 2, 'b', 'A', 'a'],
    words: ['pear', 'Apple', 'banana', 'apple'],
    nums: [3, 1.5, -2, 10, 0],
    d: {b: 2, a: 1, c: {x: [1, 2, {y: 'z'}]}, '10': 'ten', '2': 'two'},
    people: [
        {name: 'Ann', age: 31, tags: ['a'], role: 'admin', info: {city: 'Oslo'}},
        {name: 'bob', age: 25, role: 'user', info: {city: 'Rome'}},
        {name: 'Cid', age: 40, tags: [], role: 'user', info: {}},
    ],
    text: 'line one\nline two\n\nline four',
    emoji: 'a🙂b',
    messages: [{role: 'user', content: 'hi'}],
};

function snippets() {
    const out = [];
    const add = (name, template, ctx = CTX, error) => out.push({name, template, ctx, error});

    // --- whitespace: trim_blocks, lstrip_blocks and "-" in every position
    const opens = ['{%', '{%-'], closes = ['%}', '-%}'], eopens = ['{{', '{{-'], ecloses = ['}}', '-}}'];
    let k = 0;
    for (const o of opens)
        for (const c of closes)
            for (const eo of eopens)
                for (const ec of ecloses)
                    add(`ws-${k++}`, `a  \n  ${o} if t ${c}  \n  b ${eo} n ${ec}  \n\t  ${o} endif ${c}\n  c\n  ${o} for x in [1,2] ${c}\n    [${eo} x ${ec}]\n  ${o} endfor ${c}  d  \n`);
    add('ws-comment', 'a  {# c #}  b\n  {#- c -#}  \n  c {# x #}\nd\n{# e #}\n  f');
    add('ws-lstrip-only-at-line-start', 'x {% if t %}y{% endif %}\n\t {% if t %}z{% endif %}');
    add('ws-trailing-newline-dropped', 'text\n');
    add('ws-two-trailing-newlines', 'text\n\n');
    add('ws-crlf', 'a\r\n  {% if t %}\r\n  b\r\n  {% endif %}\r\nc');
    add('ws-expression-no-trim', '{{ n }}\n{{ n }}\n');
    add('ws-generation-tags', 'a {% generation %} b  {%- endgeneration -%}  c\n  {%- generation %}d{% endgeneration %}');
    add('ws-dash-in-text', 'a -%} b -}} c #}\nd');
    add('ws-unicode-space', 'a\u00a0\u3000 {%- if t -%} \u2028 b {{- "c" -}} \ufeff d {%- endif -%} \u205f e');

    // --- literals, printing, numbers
    add('print-values', '{{ 1 }}|{{ 1.0 }}|{{ -0.0 }}|{{ 2.50 }}|{{ 100000000000000000000 }}|{{ true }}|{{ none }}|{{ undefined_thing }}|{{ [1, "a", none, true, [2.0]] }}|{{ {"k": 1.5, "n": none} }}|{{ ("t", 1) | length }}');
    add('print-float-math', '{{ 0.1 + 0.2 }}|{{ 1 / 3 }}|{{ 10 / 2 }}|{{ 2 ** 0.5 }}|{{ 2 ** -1 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7.5 // 2 }}|{{ -7 % 3 }}|{{ 7 % -3 }}|{{ 5.5 % 2 }}|{{ 10 ** 21 }}|{{ 10 ** 22 }}|{{ 123456789 * 1000000000000 }}');
    add('print-small-floats', '{{ 0.000001 }}|{{ 0.0000001 }}|{{ 1.5 * 0.00001 }}|{{ 1 / 7 }}|{{ 100 * 1.1 }}');
    add('string-escapes', '{{ "a\\tb\\nc\\\\d\\"e\'f" }}|{{ \'\\x41\\u00e9\\u4e2d\\ud83d\\ude00\' }}|{{ "adjacent" \'strings\' }}');
    add('unary', '{{ -n }}|{{ +n }}|{{ -f }}|{{ - -n }}|{{ -t }}|{{ not n }}|{{ not not n }}|{{ (-1) | abs }}|{{ -1 | abs }}');
    add('integer-dot-float', '{{ [10, 20, 30].1 }}|{{ d.c.x.2.y }}');

    // --- operators
    add('compare-loose', '{{ 1 == 1.0 }}|{{ 1 == "1" }}|{{ "" == 0 }}|{{ none == undefined_thing }}|{{ true == 1 }}|{{ "1" != 1 }}|{{ [1] == [1] }}|{{ list == list }}|{{ "a" == "a" }}|{{ d == d }}|{{ [1,2] == "1,2" }}|{{ " 12 " == 12 }}|{{ "0x1f" == 31 }}|{{ "abc" == 0 }}');
    add('compare-order', '{{ 1 < 2 }}|{{ 2.5 >= 2.5 }}|{{ n > f }}|{{ -1 <= -2 }}');
    add('compare-strings-error', '{{ "a" < "b" }}', CTX, '');
    add('in-operator', '{{ "ell" in s }}|{{ "x" not in s }}|{{ 1 in list }}|{{ "1" in list }}|{{ "a" in d }}|{{ "zz" in d }}|{{ "a" in undefined_thing }}|{{ "a" not in undefined_thing }}|{{ "" in s }}');
    add('and-or-values', '{{ 0 or "x" }}|{{ "" or [] or "last" }}|{{ 1 and 2 }}|{{ [] and 1 }}|{{ none or 0 }}|{{ (n > 1 and "big") or "small" }}');
    add('concat', '{{ "a" ~ 1 ~ 1.0 ~ 2.5 ~ true ~ [1, "b"] ~ d }}|{{ "a" + 1 + 1.0 }}|{{ 1 + "a" }}|{{ [1] + [2, 3] }}|{{ "x" + [1,[2,3]] }}');
    add('concat-none-error', '{{ "a" ~ none }}', CTX, '');
    add('plus-undefined-error', '{{ "a" + nothing }}', CTX, '');
    add('ternary', '{{ "y" if t else "n" }}|{{ "y" if z else "n" }}|{{ "a" if false else "b" if true else "c" }}|{{ "only" if false }}|[{{ ("x" if false) is defined }}]');
    add('precedence', '{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 2 ** 3 ** 2 }}|{{ not 1 == 2 }}|{{ 1 + 1 is number }}|{{ "a" ~ "b" | upper }}|{{ n - 1 | abs }}');

    // --- attribute access, subscripts, slices
    add('member-access', '{{ d.a }}|{{ d["b"] }}|{{ d.c.x[2].y }}|{{ d.missing }}|{{ d.missing.deeper }}|{{ z.attr }}|{{ n.attr }}|{{ people[0].name }}|{{ people[-1]["name"] }}|{{ list[10] }}|{{ d["10"] }}');
    add('subscript-undefined-error', '{{ nothing[0] }}', CTX, '');
    add('string-index', '{{ s[2] }}|{{ s[-3] }}|{{ emoji[1] }}{{ emoji[2] }}|{{ emoji.length }}|{{ emoji | length }}|{{ s[100] }}|{{ u[-1] }}');
    add('slices', '{{ list[1:3] }}|{{ list[::-1] }}|{{ list[::2] }}|{{ list[-2:] }}|{{ list[:-4] }}|{{ list[5:1:-2] }}|{{ list[100:] }}|{{ list[:] }}|{{ list[0:0] }}');
    add('string-slices', '{{ s[2:7] }}|{{ s[::-1] }}|{{ emoji[::-1] }}|{{ u[-8:] }}|{{ s[1::3] }}|{{ "abc"[-100:100] }}');
    add('slice-float-error', '{{ list[1.5:] }}', CTX, '');
    add('dict-builtins-shadowed', '{% set m = {"items": "mine", "x": 1} %}{{ m.items }}|{{ m.keys() }}|{{ d.items() }}|{{ d.values() | length }}');

    // --- string methods (HF: strip/lstrip/rstrip ignore their argument)
    add('str-strip', '[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ "xxhixx".strip("x") }}][{{ "\\n\\n a\\n".lstrip("\\n") }}][{{ "\u00a0\ufeffz\u2003".strip() }}]');
    add('str-case', '{{ u.upper() }}|{{ u.lower() }}|{{ "hello wORLD foo_bar 3d x-y".title() }}|{{ "éa".capitalize() }}|{{ "ßx" | capitalize }}|{{ s | upper }}|{{ u | lower }}|{{ "ǆ ǅ".upper() }}');
    add('str-split', '{{ "a,b,,c".split(",") }}|{{ "  a  b \\n c  ".split() }}|{{ "a b c d".split(" ", 1) }}|{{ "a b c d".split(none, 2) }}|{{ "a,b,c".split(",", -1) }}|{{ "".split(",") }}|{{ "".split() }}|{{ "x".split("x") }}');
    add('str-split-empty-error', '{{ "abc".split("") }}', CTX, '');
    add('str-startswith', '{{ s.startswith("  He") }}|{{ s.endswith("!  ") }}|{{ s.startswith(("x", "  H")) }}|{{ "abc".endswith(["z", "bc"]) }}|{{ "".startswith("") }}');
    add('str-replace', '{{ "aaa".replace("a", "b") }}|{{ "aaa".replace("a", "b", 2) }}|{{ "abc".replace("", "-") }}|{{ "a🙂".replace("", ".") }}|{{ "aXbX".replace("X", "yy", count=1) }}|{{ "aaa" | replace("a", "c") }}|{{ "aaa" | replace("a", "c", 1) }}');
    add('str-methods-missing', '[{{ s.nonexistent }}]');

    // --- filters
    add('filter-length', '{{ s | length }}|{{ list | length }}|{{ d | length }}|{{ u | length }}');
    add('filter-trim', '[{{ s | trim }}][{{ "\\n\\t x \\r\\n" | trim }}]');
    add('filter-default', '{{ nothing | default("dflt") }}|{{ "" | default("e") }}|{{ "" | default("e", true) }}|{{ z | default("z") }}|{{ 0 | default(5, boolean=true) }}|{{ nothing | default }}', CTX, '');
    add('filter-default-ok', '{{ nothing | default("dflt") }}|{{ "" | default("e") }}|{{ "" | default("e", true) }}|{{ z | default("z") }}|{{ 0 | default(5, boolean=true) }}|{{ nothing | default(none) }}|{{ d | default({}) | length }}');
    add('filter-first-last', '{{ list | first }}|{{ list | last }}|{{ people | first | tojson }}|{{ words | last }}');
    add('filter-join', '{{ list | join }}|{{ list | join(", ") }}|{{ [1, none, nothing, true, [2, 3], {"a": 1}] | join("|") }}|{{ "abc" | join("-") }}|{{ "a🙂" | join(".") }}|{{ words | join(separator="+") }}');
    add('filter-reverse-sort', '{{ list | reverse }}|{{ words | sort }}|{{ nums | sort }}|{{ words | sort(reverse=true) }}|{{ words | sort(case_sensitive=true) }}|{{ people | sort(attribute="age") | map(attribute="name") | join(",") }}|{{ people | sort(attribute="info.city") | map(attribute="name") | join(",") }}');
    add('filter-sort-mixed-error', '{{ list | sort }}', CTX, '');
    add('filter-unique', '{{ [1, 1, "1", 2, 2.0, "a", "A", none, none] | unique }}|{{ words | unique | length }}');
    add('filter-items-dictsort', '{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}|{% for k, v in d | dictsort %}{{ k }};{% endfor %}|{{ {"b": 1, "A": 2, "a": 3} | dictsort }}|{{ {"b": 1, "a": 3} | dictsort(by="value", reverse=true) }}');
    add('filter-tojson', '{{ d | tojson }}|{{ people | tojson }}|{{ "q\\"\\\\\\n\\u0001é🙂" | tojson }}|{{ nums | tojson }}|{{ [nothing, none] | tojson }}|{{ 1.0 | tojson }}|{{ {} | tojson(indent=2) }}|{{ [] | tojson(indent=2) }}');
    add('filter-tojson-options', '{{ d | tojson(indent=2) }}|{{ d | tojson(indent=4, sort_keys=true) }}|{{ u | tojson(ensure_ascii=true) }}|{{ d | tojson(separators=(",", ":")) }}|{{ people | tojson(indent=1, separators=(",", ": ")) }}|{{ "\\u007f" | tojson(ensure_ascii=true) }}');
    add('filter-tojson-tuple-error', '{{ (1, 2) | tojson }}', CTX, '');
    add('filter-string', '{{ 1 | string }}|{{ 1.0 | string }}|{{ true | string }}|{{ list | string }}|{{ "s" | string }}|{{ (nums | string)[:5] }}');
    add('filter-int-float', '{{ "42" | int }}|{{ " -17abc" | int }}|{{ "x" | int }}|{{ "x" | int(9) }}|{{ 3.99 | int }}|{{ -3.5 | int }}|{{ "3.5e2xyz" | float }}|{{ ".5" | float }}|{{ "abc" | float }}|{{ 4 | float }}|{{ true | int }}|{{ 2.7 | int(0) }}|{{ "12" | float(1) }}');
    add('filter-abs', '{{ -5 | abs }}|{{ -2.5 | abs }}|{{ neg | abs }}|{{ f | abs }}');
    add('filter-upper-title', '{{ "hello world" | title }}|{{ "hello" | upper }}|{{ "HeLLo" | lower }}|{{ "hello world" | capitalize }}');
    add('filter-indent', '{{ text | indent }}|{{ text | indent(2) }}|{{ text | indent(2, true) }}|{{ text | indent(width=3, first=true, blank=true) }}|{{ "" | indent(first=true) }}');
    add('filter-list', '{{ list | list }}|{{ (d | items | list)[0] }}');
    add('filter-map-select', '{{ people | map(attribute="name") | join(",") }}|{{ people | map(attribute="info.city", default="?") | join(",") }}|{{ people | selectattr("tags") | map(attribute="name") | list }}|{{ people | selectattr("role", "equalto", "user") | map(attribute="name") | list }}|{{ people | rejectattr("role", "eq", "user") | map(attribute="name") | list }}|{{ people | selectattr("tags", "defined") | list | length }}');
    add('filter-safe', '{{ "<b>&</b>" | safe }}|{{ d | safe }}');
    add('filter-chain', '{{ words | map(attribute="x", default="") | list | length if false else words | reverse | join(" ") | upper | replace("A", "4") | trim | length }}');
    add('filter-unknown', '{{ s | frobnicate }}', CTX, '');
    add('filter-block', '{% filter upper %}abc {{ s }}{% endfilter %}|{% filter indent(2, true) %}x\ny{% endfilter %}|{% filter replace("a", "b") %}banana{% endfilter %}');

    // --- tests
    add('tests-types', '{% for v in [1, 1.5, "s", true, none, [1], {"a": 1}, (1, 2), nothing] %}{{ v is number }}{{ v is integer }}{{ v is string }}{{ v is boolean }}{{ v is none }}{{ v is iterable }}{{ v is sequence }}{{ v is mapping }}{{ v is defined }}{{ v is undefined }};{% endfor %}');
    add('tests-values', '{{ 3 is odd }}|{{ 4 is even }}|{{ true is true }}|{{ 1 is true }}|{{ false is false }}|{{ 0 is false }}|{{ "abc" is lower }}|{{ "ABC" is upper }}|{{ "aBc" is lower }}|{{ s is not string }}|{{ nothing is not defined }}|{{ namespace is callable }}|{{ d.get is callable }}');
    add('tests-odd-error', '{{ 1.5 is odd }}', CTX, '');
    add('tests-unknown', '{{ 1 is frobbed }}', CTX, '');
    add('tests-chained', '{{ 1 is number is true }}|{{ d.a is defined and d.a is not none }}');

    // --- dict methods
    add('dict-get', '{{ d.get("a") }}|{{ d.get("zz") }}|{{ d.get("zz", "dflt") }}|{{ d.get("c").x }}|{{ people[0].get("info").city }}');
    add('dict-keys-values', '{{ d.keys() }}|{{ d.values() | length }}|{% for k in d %}{{ k }},{% endfor %}|{% for k in d.keys() %}{{ k }}{% endfor %}');
    add('dict-literal-order', '{% set m = {"b": 1, "a": 2, "1": 3, "0": 4} %}{{ m }}|{% for k in m %}{{ k }}{% endfor %}|{{ m | tojson }}');

    // --- loops
    add('loop-vars', '{% for x in ["a", "b", "c"] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}];{% endfor %}');
    add('loop-else', '{% for x in [] %}never{% else %}empty{% endfor %}|{% for x in [1] %}one{% else %}no{% endfor %}');
    add('loop-filter', '{% for x in nums if x > 0 %}{{ x }}:{{ loop.index }}/{{ loop.length }},{% endfor %}|{% for p in people if p.role == "user" %}{{ p.name }}{% else %}none{% endfor %}');
    add('loop-unpack', '{% for k, v in [["a", 1], ["b", 2]] %}{{ k }}{{ v }}{% endfor %}|{% for a, b in d.items() %}{{ a }}{% endfor %}');
    add('loop-unpack-tuple-error', '{% for a, b in [(1, 2)] %}{{ a }}{% endfor %}', CTX, '');
    add('loop-unpack-count-error', '{% for a, b in [[1, 2, 3]] %}{{ a }}{% endfor %}', CTX, '');
    add('loop-dict', '{% for k in {"z": 1, "y": 2} %}{{ k }}{% endfor %}');
    add('loop-string-error', '{% for c in "abc" %}{{ c }}{% endfor %}', CTX, '');
    add('loop-break-continue', '{% for x in range(6) %}<{{ x }}>{% if x == 1 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}[{{ x }}]{% endfor %}');
    add('loop-all-continue-else', '{% for x in [1, 2] %}{{ x }}{% continue %}{% else %}else-ran{% endfor %}');
    add('loop-nested', '{% for a in [1, 2] %}{% for b in ["x", "y"] %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}');
    add('loop-scope', '{% set v = "outer" %}{% for x in [1] %}{% set v = "inner" %}{{ v }}{% endfor %}|{{ v }}|{{ x }}|{% if true %}{% set w = "if-sets" %}{% endif %}{{ w }}');
    add('loop-var-after', '{% for x in [1, 2] %}{% endfor %}[{{ x }}][{{ loop }}]');
    add('range', '{{ range(5) | list }}|{{ range(2, 5) | join(",") }}|{{ range(10, 0, -3) | join(",") }}|{{ range(0) | length }}|{{ range(1, 2, 0.5) | join(",") }}');
    add('range-zero-step-error', '{{ range(1, 5, 0) }}', CTX, '');

    // --- set and namespace
    add('set-forms', '{% set a = 1 %}{% set b, c = [2, 3] %}{% set e = 4, 5 %}{{ a }}{{ b }}{{ c }}{{ e }}|{% set blk %}block {{ a }}{% endset %}[{{ blk }}]');
    add('namespace', '{% set ns = namespace(a=1, b="x") %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}{{ ns.missing }}|{{ ns }}|{% set ns2 = namespace({"k": "v"}, extra=1) %}{{ ns2.k }}{{ ns2.extra }}|{% set ns3 = namespace([["p", 1], "qr"]) %}{{ ns3.p }}{{ ns3.q }}');
    add('namespace-assign-error', '{% set d.a = 5 %}', CTX, '');
    add('namespace-truthy', '{% set ns = namespace() %}{{ "yes" if ns else "no" }}|{{ ns | tojson }}');
    add('builtin-names', '{{ True }}{{ False }}{{ None }}|{% set true = 5 %}{{ true }}');

    // --- macros and call blocks
    add('macro-basic', '{% macro greet(name, greeting="Hello", punct="!") %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet("Ann") }}|{{ greet("Bob", "Hi") }}|{{ greet("Cid", punct="?") }}|{{ greet(name="Dee", greeting="Yo") }}');
    add('macro-default-sees-params', '{% macro m(a, b=a ~ "!") %}{{ a }}{{ b }}{% endmacro %}{{ m("x") }}|{{ m("x", "y") }}');
    add('macro-varargs-kwargs', '{% macro v(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, 3, k="w") }}|{{ v(1) }}');
    add('macro-too-many-error', '{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}', CTX, '');
    add('macro-bad-kwarg-error', '{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, b=2) }}', CTX, '');
    add('macro-dynamic-scope', '{% macro show() %}[{{ who }}]{% endmacro %}{% set who = "global" %}{{ show() }}{% for who in ["loop"] %}{{ show() }}{% endfor %}');
    add('macro-recursion', '{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n }}*{{ fact(n - 1) }}{% endif %}{% endmacro %}{{ fact(6) }}');
    add('macro-render-schema', '{% macro render(v, depth=0) %}{% if v is mapping %}{% for k, x in v | items %}\n{{ "  " * 0 }}{{ k }}:{{ render(x, depth + 1) }}{% endfor %}{% elif v is iterable and v is not string %}[{% for x in v %}{{ render(x, depth + 1) }}{% if not loop.last %},{% endif %}{% endfor %}]{% else %} {{ v }}{% endif %}{% endmacro %}{{ render(d) }}', CTX, '');
    add('macro-render-tree', '{% macro render(v, depth=0) %}{% if v is mapping %}{% for k, x in v | items %}\n{{ depth }}{{ k }}:{{ render(x, depth + 1) }}{% endfor %}{% elif v is iterable and v is not string %}[{% for x in v %}{{ render(x, depth + 1) }}{% if not loop.last %},{% endif %}{% endfor %}]{% else %} {{ v }}{% endif %}{% endmacro %}{{ render(d) }}');
    add('call-block', '{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap("b") %}inner {{ n }}{% endcall %}|{% macro each(items) %}{% for i in items %}{{ caller(i, loop.index) }}{% endfor %}{% endmacro %}{% call(item, idx) each(["x", "y"]) %}{{ idx }}={{ item }};{% endcall %}');
    add('macro-output-is-string', '{% macro m() %}  spaced  {% endmacro %}[{{ m() | trim }}]|{{ m() | length }}|{{ m() is string }}');

    // --- globals and errors
    add('raise-exception', '{{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}', CTX, 'raise_exception');
    add('raise-in-branch', '{% if messages[0].role != "system" %}{{ raise_exception("System message is required at 1:1 of " ~ messages | length) }}{% endif %}', CTX, 'template:1:');
    add('call-non-function', '{{ s() }}', CTX, '');
    add('undefined-call', '{{ nothing() }}', CTX, '');
    add('syntax-unclosed-if', 'a\n{% if t %}\nb', CTX, 'opened at 2:4');
    add('syntax-bad-expr', '{{ 1 + }}', CTX, 'template:1:');
    add('syntax-unknown-tag', 'ok\n  {% include "x" %}', CTX, 'template:2:');
    add('syntax-unterminated-string', '{{ "abc }}', CTX, 'template:1:');
    add('syntax-unterminated-comment', 'x {# no end', CTX, 'template:1:');
    add('syntax-bad-char', '{{ a $ b }}', CTX, 'template:1:6');
    add('syntax-endfor-alone', '{% endfor %}', CTX, 'template:1:');
    add('context-not-a-function', '{{ messages.append }}|{{ messages.length }}');

    // --- realistic fragments
    add('chatml-minimal', "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}", {messages: [{role: 'system', content: 'S'}, {role: 'user', content: 'U'}], add_generation_prompt: true});
    add('mistral-style', "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}", {bos_token: '<s>', eos_token: '</s>', messages: [{role: 'user', content: 'a'}, {role: 'assistant', content: 'b'}, {role: 'user', content: 'c'}]});
    add('mistral-style-bad-order', "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}{% endfor %}", {messages: [{role: 'assistant', content: 'b'}]}, 'alternate');
    add('gemma-style', "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}", {bos_token: '<bos>', messages: [{role: 'user', content: '  hi  '}, {role: 'assistant', content: 'yo\n'}], add_generation_prompt: true});

    return out;
}

module.exports = {snippets};
