/* test_jinja.c - the chat template engine (jinja/jinja.h): each construct,
 * whitespace control, errors with their line:column, and the limits that keep
 * a hostile template or request from hanging or exhausting the server.
 * Expected texts are what @huggingface/jinja renders for the same input
 * (tests/chat_template compares the two engines at scale). */
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja.h"
#include "server/json_text.h"
#include "testing.h"

static const char *CTX = "{\"n\": 3, \"s\": \" Hi \", \"xs\": [1, 2, 3], \"d\": {\"a\": 1, \"b\": [true, null]},"
                         " \"m\": [{\"role\": \"user\", \"content\": \"x\"}]}";

/* Renders tmpl with the JSON context (NULL: none) under lim (NULL: defaults).
 * Returns the text (caller frees) or NULL with the error in *e. */
static char *render_lim(const char *tmpl, const char *ctx_json, const ds_jinja_limits *lim, ds_err *e) {
    ds_jinja *t = NULL;
    if (ds_jinja_compile(tmpl, &t, e) != DS_OK) return NULL;
    json_t *ctx = ctx_json ? ds_json_parse(ctx_json, strlen(ctx_json), NULL, 0) : NULL;
    char *out = NULL;
    size_t len = 0;
    ds_jinja_limits dflt = ds_jinja_default_limits();
    ds_status s = ds_jinja_render_limited(t, ctx, lim ? lim : &dflt, &out, &len, e);
    json_decref(ctx);
    ds_jinja_free(t);
    if (s != DS_OK) return NULL;
    if (strlen(out) != len) e->code = DS_ECORRUPT;
    return out;
}

static char *render(const char *tmpl, const char *ctx_json, ds_err *e) { return render_lim(tmpl, ctx_json, NULL, e); }

#define EXPECT(tmpl, ctx, want)                                                               \
    do {                                                                                      \
        ds_err e_ = {0};                                                                      \
        char *got_ = render(tmpl, ctx, &e_);                                                  \
        CHECK(got_ && !strcmp(got_, want), "%s\n       want [%s]\n       got  [%s] (%s)", tmpl, want, \
              got_ ? got_ : "(null)", e_.msg);                                                \
        free(got_);                                                                           \
    } while (0)

/* The render (or compile) fails and the message contains `part`. */
#define EXPECT_ERROR(tmpl, ctx, part)                                                        \
    do {                                                                                     \
        ds_err e_ = {0};                                                                     \
        char *got_ = render(tmpl, ctx, &e_);                                                 \
        CHECK(!got_ && strstr(e_.msg, part), "%s: want an error with [%s], got [%s] / [%s]", tmpl, part, \
              got_ ? got_ : "(null)", e_.msg);                                               \
        free(got_);                                                                          \
    } while (0)

static void test_expressions(void) {
    EXPECT("{{ 'a' ~ 'b' }}", CTX, "ab");
    EXPECT("{{ n + 1 }}|{{ n / 2 }}|{{ n // 2 }}|{{ n % 2 }}|{{ n ** 2 }}|{{ n * 1.5 }}|{{ -n }}", CTX, "4|1.5|1|1|9|4.5|-3");
    EXPECT("{{ 'x' if n else 'y' }}|{{ [1, 2] + [3] }}|{{ {'k': 'v'}.k }}", CTX, "x|[1, 2, 3]|v");
    EXPECT("{{ m[0].role }}|{{ m[0]['content'] }}|{{ d.get('zz', 5) }}|{{ 'b' in d }}|{{ 2 in xs }}", CTX,
           "user|x|5|true|true");
    EXPECT("{{ undefined_x }}|{{ undefined_x is defined }}|{{ undefined_x.y }}|{{ none }}|{{ true }}|{{ 1.0 }}", CTX,
           "|false|||true|1.0");
    EXPECT("{{ \"q\\\"\\n\" }}|{{ '\\u00e9' }}|{{ '\\ud83d\\ude00' }}", CTX, "q\"\n|\xc3\xa9|\xf0\x9f\x98\x80");
    EXPECT("{{ 1 == '1' }}|{{ none == undefined_x }}|{{ [1] == [1] }}|{{ xs == xs }}", CTX, "true|true|false|true");
    EXPECT("{{ 0.1 + 0.2 }}|{{ 10 ** 21 }}|{{ 1 / 3 }}|{{ 2.0 * 3 }}", NULL,
           "0.30000000000000004|1e+21|0.3333333333333333|6.0");
    EXPECT("{{ 0 or 'x' }}|{{ [] and 1 }}|{{ not xs }}|{{ n > 1 and n < 5 }}", CTX, "x|[]|false|true");
}

static void test_statements(void) {
    EXPECT("{% if n > 2 %}big{% elif n > 1 %}mid{% else %}small{% endif %}", CTX, "big");
    EXPECT("{% if n > 5 %}big{% elif n > 1 %}mid{% else %}small{% endif %}", CTX, "mid");
    EXPECT("{% for x in xs %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}", CTX, "11,22,33");
    EXPECT("{% for x in xs %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.length }};{% endfor %}", CTX,
           "03true3;12false3;21false3;");
    EXPECT("{% for x in [] %}a{% else %}empty{% endfor %}", CTX, "empty");
    EXPECT("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", CTX, "a=1;b=[true, null];");
    EXPECT("{% for x in xs if x != 2 %}{{ x }}/{{ loop.length }}{% endfor %}", CTX, "1/23/2");
    EXPECT("{% set ns = namespace(c=0) %}{% for x in xs %}{% set ns.c = ns.c + x %}{% endfor %}{{ ns.c }}", CTX, "6");
    EXPECT("{% set a, b = [1, 2] %}{{ b }}{{ a }}", NULL, "21");
    EXPECT("{% set x %}in{{ n }}{% endset %}[{{ x }}]", CTX, "[in3]");
    EXPECT("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}", CTX, "13");
    /* as in @huggingface/jinja, the text of an iteration that breaks is dropped */
    EXPECT("{% for x in xs %}{{ x }}{% if x == 2 %}{% break %}{% endif %}{% endfor %}", CTX, "1");
    EXPECT("{% filter upper %}abc{% endfilter %}", CTX, "ABC");
    EXPECT("{% set v = 1 %}{% for x in xs %}{% set v = 2 %}{% endfor %}{{ v }}", CTX, "1");
}

static void test_macros(void) {
    EXPECT("{% macro f(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ f(1) }}{{ f(1, b=2) }}", CTX, "1B12");
    EXPECT("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}inner{% endcall %}", CTX, "[inner]");
    EXPECT("{% macro e(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(v) e([1, 2]) %}<{{ v }}>{% endcall %}",
           NULL, "<1><2>");
    EXPECT("{% macro v(a) %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, k=3) }}", NULL, "[2]{\"k\": 3}");
    EXPECT("{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k }}*{{ fact(k - 1) }}{% endif %}{% endmacro %}{{ fact(4) }}", NULL,
           "4*3*2*1");
    EXPECT_ERROR("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", NULL, "at most 1");
    EXPECT_ERROR("{% macro f(a) %}{% endmacro %}{{ f(1, b=2) }}", NULL, "no keyword argument 'b'");
}

static void test_filters_and_methods(void) {
    EXPECT("{{ s.strip() }}|{{ s | trim }}|{{ s.upper() }}|{{ 'a,b'.split(',') }}|{{ 'abc'[::-1] }}|{{ 'abc'[1:] }}|{{ 'abc'[-1] }}",
           CTX, "Hi|Hi| HI |[\"a\", \"b\"]|cba|bc|c");
    EXPECT("{{ d | tojson }}|{{ xs | join('-') }}|{{ xs | length }}|{{ xs | first }}|{{ xs | last }}|{{ xs | reverse | list }}",
           CTX, "{\"a\": 1, \"b\": [true, null]}|1-2-3|3|1|3|[3, 2, 1]");
    EXPECT("{{ xs | tojson(indent=2) }}", CTX, "[\n  1,\n  2,\n  3\n]");
    /* U+0000 from the context is kept, and tojson writes it as Python's json.dumps does */
    EXPECT("{{ s | tojson }}|{{ s | length }}|{{ d | tojson }}", "{\"s\": \"a\\u0000b\", \"d\": {\"k\": \"x\\u0000\"}}",
           "\"a\\u0000b\"|3|{\"k\": \"x\\u0000\"}");
    EXPECT("{{ d | tojson(separators=(',', ':')) }}|{{ '\xc3\xa9' | tojson(ensure_ascii=true) }}", CTX,
           "{\"a\":1,\"b\":[true,null]}|\"\\u00e9\"");
    EXPECT("{{ undefined_x | default('dflt') }}|{{ '' | default('e', true) }}|{{ '42' | int }}|{{ '2.5' | float }}|{{ -2 | abs }}",
           NULL, "dflt|e|42|2.5|2");
    EXPECT("{{ m | map(attribute='role') | join(',') }}|{{ m | selectattr('role', 'equalto', 'user') | list | length }}", CTX,
           "user|1");
    EXPECT("{{ 'a\\nb' | indent(2, true) }}|{{ 'hello world' | title }}|{{ 'x' | upper }}|{{ d | items | list | length }}", CTX,
           "  a\n  b|Hello World|X|2");
    EXPECT("{{ [3, 1, 2] | sort }}|{{ ['b', 'A', 'a'] | sort }}|{{ {'b': 1, 'a': 2} | dictsort }}", NULL,
           "[1, 2, 3]|[\"A\", \"a\", \"b\"]|[[\"a\", 2], [\"b\", 1]]");
    /* HF's strip() ignores its argument: it always trims whitespace */
    EXPECT("[{{ ' xax '.strip('x') }}]|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'abc'.startswith(('x', 'a')) }}", NULL,
           "[xax]|bba|true");
    EXPECT("{{ s is string }}|{{ n is number }}|{{ xs is iterable }}|{{ d is mapping }}|{{ none is none }}|{{ 3 is odd }}", CTX,
           "true|true|true|true|true|true");
    EXPECT_ERROR("{{ xs | frobnicate }}", CTX, "unknown filter 'frobnicate'");
    EXPECT_ERROR("{{ n is frobbed }}", CTX, "unknown test 'frobbed'");
}

static void test_whitespace(void) {
    EXPECT("  {%- if true -%}  \n  x  \n  {%- endif -%}  \n", NULL, "x");
    EXPECT("a\n  {% if true %}\n  b\n  {% endif %}\nc", NULL, "a\n  b\nc");
    EXPECT("{# comment #}x{#- c -#} y", NULL, "xy");
    EXPECT("x {{- ' y ' -}} z", NULL, "x y z");
    EXPECT("line\n", NULL, "line");
    EXPECT("{{ 'a' }}\n{{ 'b' }}\n", NULL, "a\nb");
    EXPECT("a {% generation %}b{% endgeneration %} c", NULL, "a b c");
}

static void test_unicode(void) {
    /* lengths and indices count UTF-16 units, as in JavaScript */
    EXPECT("{{ 'a\xf0\x9f\x99\x82' | length }}|{{ 'a\xf0\x9f\x99\x82'[1] }}{{ 'a\xf0\x9f\x99\x82'[2] }}|{{ '\xc3\xa9t\xc3\xa9'[::-1] }}", NULL,
           "3|\xf0\x9f\x99\x82|\xc3\xa9t\xc3\xa9");
    /* half a pair alone becomes U+FFFD in the UTF-8 output */
    EXPECT("{{ 'a\xf0\x9f\x99\x82'[-1] }}", NULL, "\xef\xbf\xbd");
    EXPECT("{{ 'stra\xc3\x9f' | upper }}|{{ '\xc3\x89' 'COLE' | lower }}", NULL, "STRASS|\xc3\xa9" "cole");
}

static void test_context(void) {
    EXPECT("{{ messages[0].content }}{{ add_generation_prompt }}",
           "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"add_generation_prompt\": true}", "qtrue");
    /* keys that look like array indices come first, as JavaScript orders them */
    EXPECT("{% for k in d %}{{ k }},{% endfor %}", "{\"d\": {\"b\": 1, \"10\": 2, \"a\": 3, \"2\": 4}}", "2,10,b,a,");
    EXPECT_ERROR("{{ 1 }}", "{\"true\": 1}", "built-in name");
    EXPECT("{{ x }}", "{\"x\": 1, \"x\": 2}", "2");
    EXPECT_ERROR("{{ 1 }}", "[1]", "must be a JSON object");

    json_t *ctx = ds_json_parse("{\"messages\": [], \"enable_thinking\": true}", sizeof "{\"messages\": [], \"enable_thinking\": true}" - 1, NULL, 0);
    json_t *kw = ds_json_parse("{\"enable_thinking\": false, \"messages\": [1], \"custom\": \"c\"}", sizeof "{\"enable_thinking\": false, \"messages\": [1], \"custom\": \"c\"}" - 1, NULL, 0);
    ds_err e = {0};
    REQUIRE(ds_jinja_merge_kwargs(ctx, kw, &e) == DS_OK, "%s", e.msg);
    CHECK(json_is_false(json_object_get(ctx, "enable_thinking")), "kwargs replace members");
    CHECK(json_array_size(json_object_get(ctx, "messages")) == 0, "kwargs never replace messages");
    CHECK(json_is_string(json_object_get(ctx, "custom")), "new kwargs are added");
    json_t *bad = ds_json_parse("[1]", sizeof "[1]" - 1, NULL, 0);
    CHECK(ds_jinja_merge_kwargs(ctx, bad, &e) == DS_EINVAL, "kwargs must be an object");
    json_decref(bad);
    json_decref(kw);
    json_decref(ctx);
}

static void test_errors_name_line_and_column(void) {
    EXPECT_ERROR("a\n{% if x %}\nb", NULL, "opened at 2:4");
    EXPECT_ERROR("{{ 1 + }}", NULL, "template:1:8:");
    EXPECT_ERROR("ok\n  {% include 'x' %}", NULL, "template:2:6:");
    EXPECT_ERROR("{{ 'abc }}", NULL, "template:1:4: unterminated string");
    EXPECT_ERROR("x\n\n{# no end", NULL, "template:3:1: unterminated comment");
    EXPECT_ERROR("{{ a $ b }}", NULL, "template:1:6: unexpected character");
    EXPECT_ERROR("\xc3\xa9\xc3\xa9{{ ) }}", NULL, "template:1:6:");   /* columns count characters */
    EXPECT_ERROR("{% endfor %}", NULL, "template:1:4:");
    EXPECT_ERROR("{% for a, b in [(1, 2)] %}{% endfor %}", NULL, "template:1:8: cannot unpack");
    EXPECT_ERROR("\n  {{ 'a' + none }}", NULL, "template:2:10:");
    EXPECT_ERROR("{{ x[0] }}", NULL, "template:1:5:");
    EXPECT_ERROR("{{ raise_exception('Only user and assistant roles are supported!') }}", NULL,
                 "raise_exception: Only user and assistant roles are supported!");
    EXPECT_ERROR("{% break %}", NULL, "outside a loop");
    EXPECT_ERROR("{% macro m() %}{% endmacro %}{{ m }}", NULL, "cannot print a function");
    ds_jinja *t = (ds_jinja *)1;
    ds_err e = {0};
    CHECK(ds_jinja_compile(NULL, &t, &e) == DS_EINVAL && t == NULL, "NULL text");
}

static void test_limits(void) {
    ds_jinja_limits lim = ds_jinja_default_limits();
    ds_err e = {0};

    /* a billion iterations: stopped by the step (or memory) budget, quickly */
    lim.max_steps = 1000000;
    char *out = render_lim("{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}{% endfor %}"
                           "{% endfor %}{% endfor %}",
                           NULL, &lim, &e);
    CHECK(!out && e.code == DS_ENOMEM, "nested loops: %s", e.msg);
    free(out);
    lim.max_steps = 20000;   /* with room for the memory, the steps end it */
    e = (ds_err){0};
    out = render_lim("{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}", NULL, &lim, &e);
    CHECK(!out && e.code == DS_ENOMEM && strstr(e.msg, "steps"), "nested loops: %s", e.msg);
    free(out);

    /* output cap */
    lim = ds_jinja_default_limits();
    lim.max_output = 1000;
    e = (ds_err){0};
    out = render_lim("{% for i in range(2000) %}x{% endfor %}", NULL, &lim, &e);
    CHECK(!out && e.code == DS_ENOMEM && strstr(e.msg, "output"), "output cap: %s", e.msg);
    free(out);
    e = (ds_err){0};
    out = render_lim("{% for i in range(999) %}x{% endfor %}", NULL, &lim, &e);
    CHECK(out && strlen(out) == 999, "just under the output cap: %s", e.msg);
    free(out);

    /* strings doubling in a namespace: stopped by the string or memory limit */
    lim = ds_jinja_default_limits();
    lim.max_memory = 8 << 20;
    e = (ds_err){0};
    out = render_lim("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                     NULL, &lim, &e);
    CHECK(!out && e.code == DS_ENOMEM, "doubling strings: %s", e.msg);
    free(out);

    /* a huge range */
    e = (ds_err){0};
    out = render("{{ range(100000000000) | length }}", NULL, &e);
    CHECK(!out && e.code == DS_ENOMEM, "huge range: %s", e.msg);
    free(out);

    /* endless macro recursion: stopped by the depth limit */
    e = (ds_err){0};
    out = render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, &e);
    CHECK(!out && e.code == DS_ENOMEM && strstr(e.msg, "deep"), "recursion: %s", e.msg);
    free(out);

    /* a namespace holding itself, printed */
    e = (ds_err){0};
    out = render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", NULL, &e);
    CHECK(!out && strstr(e.msg, "deep"), "self-reference: %s", e.msg);
    free(out);

    /* deep nesting in the template text: a compile error, not a stack overflow */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 16);
    REQUIRE(deep, "malloc");
    strcpy(deep, "{{ ");
    memset(deep + 3, '(', depth);
    strcpy(deep + 3 + depth, "1");
    memset(deep + 4 + depth, ')', depth);
    strcpy(deep + 4 + 2 * depth, " }}");
    e = (ds_err){0};
    out = render(deep, NULL, &e);
    CHECK(!out && strstr(e.msg, "nesting too deep"), "deep parentheses: %s", e.msg);
    free(out);
    for (size_t i = 0; i < depth; i++) memcpy(deep + 2 * i, i ? "[[" : "{{", 2);   /* [[[[... unclosed */
    deep[2 * depth] = '\0';
    e = (ds_err){0};
    out = render(deep, NULL, &e);
    CHECK(!out && e.code != DS_OK, "deep brackets: %s", e.msg);
    free(out);

    /* a long chain of + is parsed without recursion; rendering it hits the depth limit */
    size_t terms = 50000;
    char *chain = realloc(deep, 4 * terms + 16);
    REQUIRE(chain, "realloc");
    strcpy(chain, "{{ 1");
    for (size_t i = 0; i < terms; i++) memcpy(chain + 4 + 4 * i, " + 1", 4);
    strcpy(chain + 4 + 4 * terms, " }}");
    e = (ds_err){0};
    out = render(chain, NULL, &e);
    CHECK(!out && e.code == DS_ENOMEM && strstr(e.msg, "deep"), "long chain: %s", e.msg);
    free(out);
    free(chain);

    /* ... also inside a macro body, which compiling scans for kwargs / varargs */
    char *in_macro = malloc(4 * terms + 64);
    REQUIRE(in_macro, "malloc");
    strcpy(in_macro, "{% macro m() %}{{ 1");
    size_t at = strlen(in_macro);
    for (size_t i = 0; i < terms; i++, at += 4) memcpy(in_macro + at, " + 1", 4);
    strcpy(in_macro + at, " }}{% endmacro %}ok");
    e = (ds_err){0};
    out = render(in_macro, NULL, &e);
    CHECK(out && !strcmp(out, "ok"), "long chain in a macro: %s", e.msg);
    free(out);
    free(in_macro);

    /* deeply nested context JSON: refused, not overflowed */
    size_t jd = 900;
    char *js = malloc(jd * 2 + 32);
    REQUIRE(js, "malloc");
    strcpy(js, "{\"x\": ");
    size_t p = strlen(js);
    for (size_t i = 0; i < jd; i++) js[p++] = '[';
    for (size_t i = 0; i < jd; i++) js[p++] = ']';
    strcpy(js + p, "}");
    e = (ds_err){0};
    out = render("{{ x | tojson | length }}", js, &e);
    CHECK(out && !strcmp(out, "1800"), "nested context: %s / %s", out ? out : "(null)", e.msg);
    free(out);
    free(js);
}

static void test_real_template_shape(void) {
    /* a ChatML loop with a generation prompt, as Qwen templates write it */
    const char *tmpl = "{%- for message in messages %}\n"
                       "    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}\n"
                       "{%- endfor %}\n"
                       "{%- if add_generation_prompt %}\n"
                       "    {{- '<|im_start|>assistant\\n' }}\n"
                       "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
                       "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
                       "    {%- endif %}\n"
                       "{%- endif %}\n";
    EXPECT(tmpl,
           "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"U\"}],"
           " \"add_generation_prompt\": true, \"enable_thinking\": false}",
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");

    /* one compiled template, rendered many times with different contexts */
    ds_jinja *t;
    ds_err e = {0};
    REQUIRE(ds_jinja_compile("{{ messages | length }}", &t, &e) == DS_OK, "%s", e.msg);
    for (int i = 0; i < 3; i++) {
        char json[64];
        snprintf(json, sizeof json, "{\"messages\": [%s]}", i == 0 ? "" : i == 1 ? "1" : "1, 2");
        json_t *ctx = ds_json_parse(json, strlen(json), NULL, 0);
        char *out = NULL;
        size_t len;
        CHECK(ds_jinja_render(t, ctx, &out, &len, &e) == DS_OK && out && len == 1 && out[0] == '0' + i, "render %d", i);
        free(out);
        json_decref(ctx);
    }
    ds_jinja_free(t);
}

int main(void) {
    RUN(test_expressions);
    RUN(test_statements);
    RUN(test_macros);
    RUN(test_filters_and_methods);
    RUN(test_whitespace);
    RUN(test_unicode);
    RUN(test_context);
    RUN(test_errors_name_line_and_column);
    RUN(test_limits);
    RUN(test_real_template_shape);
    return ds_test_finish();
}
