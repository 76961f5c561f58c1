/* test_tool_grammar.c - tool_choice "required" / a named function / strict
 * functions: the grammar of the call (server/tool_grammar.h) and the engine
 * filter that follows it (grammar/grammar_filter.h).
 *
 * The text of the grammar for known tools, byte for byte where it matters
 * (the opening, a parameter, the end); the errors that name the field; then
 * random walks through the filter on the generated vocabulary and on the
 * real Qwen3 tokenizer.json. Until the call is open, the allowed set is
 * compared, token by token, with an independent string check (the bytes so
 * far plus the token's are whitespace within the allowance, then a prefix of
 * an allowed opening); after it, the walk picks allowed tokens (leaning
 * towards closing ones as it goes) until the end token is allowed, and the
 * text must then be calls that server/chat_parser.h reads back, to allowed
 * functions, with their required arguments, of their types: one call with
 * parallel_tool_calls false, after which only the end token may come.
 * Reasoning parts stay free until their </think>, written as the added token
 * or byte by byte, but for the end token: the answer cannot end inside its
 * reasoning, before its call. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/grammar_filter.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/vocab_index.h"
#include "server/chat_parser.h"
#include "server/json_text.h"
#include "server/tool_grammar.h"
#include "testing.h"
#include "test_tokenizers.h"

static uint32_t rng = 12345;
static uint32_t rnd(void) { return rng = rng * 1664525u + 1013904223u, rng >> 8; }

/* the functions scenarios pick from: name and parameters (NULL: none) */
static const char *const FUNCS[][2] = {
    {"get", NULL},
    {"get_time", "{\"type\":\"object\",\"properties\":{\"tz\":{\"type\":\"string\",\"description\":\"zone\"}},"
                 "\"required\":[\"tz\"]}"},
    {"get_weather", "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"type\":\"string\","
                    "\"enum\":[\"celsius\",\"fahrenheit\"]}},\"required\":[\"city\",\"unit\"],\"additionalProperties\":false}"},
    {"search-web", "{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\",\"maxLength\":12}}}"},
    {"lookup_2", "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"exact\":{\"type\":\"boolean\"}},"
                 "\"required\":[\"id\"]}"},
    {"x", "{\"type\":\"object\",\"properties\":{}}"},
};
#define N_FUNCS 6
#define TYPED 4   /* FUNCS[TYPED] needs the JSON Schema compiler */

static int schema_compiler_works(void) {
    json_t *s = json_pack("{s:s}", "type", "integer");
    char *g = NULL;
    ds_err e = {0};
    ds_schema_options o = {.strict = 1};
    int ok = s && ds_json_schema_to_gbnf(s, "v", &o, &g, &e) == DS_OK;
    free(g);
    json_decref(s);
    return ok;
}

static json_t *tool(int f, int strict) {
    json_t *t = json_object(), *fn = json_object();
    json_object_set_new(t, "type", json_string("function"));
    json_object_set_new(t, "function", fn);
    json_object_set_new(fn, "name", json_string(FUNCS[f][0]));
    if (FUNCS[f][1]) json_object_set_new(fn, "parameters", ds_json_parse(FUNCS[f][1], strlen(FUNCS[f][1]), NULL, 0));
    if (strict) json_object_set_new(fn, "strict", json_true());
    return t;
}

typedef struct {
    json_t *tools;
    int constrained;          /* the arguments follow their schemas (else they are free) */
    int funcs[N_FUNCS];       /* allowed: FUNCS index per allowed function */
    int n_allowed;
    const char *only;
    int form, in_reasoning, parallel;
    char openings[N_FUNCS][64];
} scenario;

static void scenario_make(scenario *s, int typed_ok) {
    memset(s, 0, sizeof *s);
    s->tools = json_array();
    int n = 1 + (int)(rnd() % N_FUNCS), first = (int)(rnd() % N_FUNCS);
    s->form = (int)(rnd() % 2);
    s->in_reasoning = rnd() % 3 == 0;
    s->parallel = (int)(rnd() % 2);
    int named = rnd() % 2, picked[N_FUNCS], n_picked = 0;
    s->constrained = typed_ok || s->form == DS_CALL_XML;
    for (int i = 0; i < n; i++) {
        int f = (first + i) % N_FUNCS;
        if (f != TYPED || typed_ok) picked[n_picked++] = f;
    }
    if (!n_picked) picked[n_picked++] = 0;
    for (int i = 0; i < n_picked; i++) {
        int f = picked[i];
        /* without the JSON Schema compiler, only the XML form constrains arguments (strings) */
        int strict = (int)(rnd() % 2) && s->constrained;
        json_array_append_new(s->tools, tool(f, strict));
        if (named && i < n_picked - 1) continue;   /* the last one is the named one */
        if (named) s->only = FUNCS[f][0];
        s->funcs[s->n_allowed] = f;
        snprintf(s->openings[s->n_allowed++], 64,
                 s->form == DS_CALL_XML ? "<tool_call>\n<function=%s>" : "<tool_call>\n{\"name\": \"%s\"", FUNCS[f][0]);
    }
}

#define LEAD_SPACE 4   /* blank bytes the grammar filter allows between </think> and the call */

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* The independent check until the call is open: 1 may go on, 0 may not, -1 past the opening (not judged) */
static int text_fits(const scenario *s, const char *text, size_t n) {
    size_t k = 0;
    while (k < n && is_space(text[k])) k++;
    if (k > (s->in_reasoning ? (size_t)LEAD_SPACE : 0u)) return 0;
    if (k == n) return 1;
    for (int i = 0; i < s->n_allowed; i++) {
        size_t ol = strlen(s->openings[i]);
        if (n - k <= ol && !memcmp(text + k, s->openings[i], n - k)) return 1;
        if (n - k > ol && !memcmp(text + k, s->openings[i], ol)) return -1;
    }
    return 0;
}

static int text_opens(const scenario *s, const char *text, size_t n) { return text_fits(s, text, n) == -1; }

static int is_blank(const char *text, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!is_space(text[i])) return 0;
    return 1;
}

static int n_blank_left_out;

static int has_closer(const char *b, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (strchr("\n<>/\"}]", b[i])) return 1;
    return 0;
}

typedef struct {
    json_t *calls;
    ds_sb content;
} parsed;

static void on_part(void *user, ds_part_kind kind, const char *text, size_t n, const json_t *call) {
    parsed *p = user;
    if (kind == DS_PART_TOOL_CALL) json_array_append(p->calls, (json_t *)call);
    else ds_sb_append(&p->content, text, n);
}

/* the calls of a finished text, read back by the server's chat parser: nothing but calls, each to
 * an allowed function, with its arguments */
static int calls_valid(const scenario *s, const char *text, size_t n, int *n_calls) {
    parsed pr = {.calls = json_array()};
    ds_chat_parser cp;
    ds_chat_parser_init(&cp, 0, 1);
    ds_chat_parser_feed(&cp, text, n, on_part, &pr);
    ds_chat_parser_finish(&cp, on_part, &pr);
    ds_chat_parser_free(&cp);
    int ok = json_array_size(pr.calls) > 0;
    for (size_t i = 0; i < pr.content.n && ok; i++) ok = is_space(pr.content.s[i]);
    if (!ok) printf("# not only calls: content '%.*s'\n", (int)pr.content.n, pr.content.s ? pr.content.s : "");
    *n_calls = (int)json_array_size(pr.calls);
    size_t k;
    const json_t *call;
    json_array_foreach(pr.calls, k, call) {
        const char *name = json_string_value(json_object_get(call, "name"));
        const char *at = json_string_value(json_object_get(call, "arguments"));
        json_t *args = at ? ds_json_parse(at, strlen(at), NULL, 0) : NULL;
        int fits = 0;
        for (int i = 0; i < s->n_allowed && !fits; i++) {
            int f = s->funcs[i];
            if (strcmp(name, FUNCS[f][0])) continue;
            fits = json_is_object(args);
            if (!s->constrained) continue;
            if (f == 1) fits = fits && json_is_string(json_object_get(args, "tz"));
            if (f == 2) {
                const char *u = json_string_value(json_object_get(args, "unit"));
                fits = fits && json_object_get(args, "city") && u && (!strcmp(u, "celsius") || !strcmp(u, "fahrenheit"));
            }
            if (f == 4) fits = fits && json_is_integer(json_object_get(args, "id"));
            if (f == 0) fits = fits && json_object_size(args) == 0;   /* no parameters: none */
        }
        if (!fits) printf("# wrong call: %s %s\n", name, at ? at : "?");
        json_decref(args);
        ok = ok && fits;
    }
    json_decref(pr.calls);
    ds_sb_free(&pr.content);
    return ok;
}

#define MAX_WALK 1500

/* One walk; returns 1 when it ended with valid calls. */
static int walk(const ds_tokenizer *tok, const ds_vocab_index *vi, int check_every_token, int typed_ok,
                int *n_compared) {
    scenario s;
    scenario_make(&s, typed_ok);
    int n_vocab = ds_tokenizer_n_tokens(tok), ok = 0;
    int32_t end_ids[1] = {ds_tokenizer_find(tok, "<|endoftext|>")}, think_end = ds_tokenizer_find(tok, "</think>");
    ds_tool_grammar_params tp = {.form = (ds_call_form)s.form, .tools = s.tools, .only = s.only, .parallel = s.parallel,
                                 .max_space = 2};
    char *gbnf = NULL;
    size_t gl = 0;
    ds_err e = {0};
    ds_grammar *g = NULL;
    ds_grammar_filter *gf = NULL;
    uint32_t *allowed = malloc(DS_MASK_WORDS(n_vocab) * sizeof *allowed);
    int32_t *gen = malloc(MAX_WALK * sizeof *gen), *cand = malloc((size_t)n_vocab * sizeof *cand),
            *close = malloc((size_t)n_vocab * sizeof *close);
    char *text = malloc(MAX_WALK * 64);
    ds_tokens closing = {0};
    CHECK(ds_tool_grammar(&tp, &gbnf, &gl, &e) == DS_OK, "tool grammar: %s", e.msg);
    CHECK(!ds_t_case_failed && ds_grammar_parse(gbnf, gl, &g, &e) == DS_OK, "parse: %s\n%s", e.msg, gbnf);
    ds_grammar_filter_params fp = {.grammar = g, .vocab = vi, .tok = tok, .end_ids = end_ids, .n_end = 1,
                                   .in_reasoning = s.in_reasoning};
    CHECK(!ds_t_case_failed && ds_grammar_filter_new(&fp, &gf, &e) == DS_OK, "filter: %s", e.msg);
    if (ds_t_case_failed) goto out;
    size_t tn = 0;
    int n = 0, reasoning = s.in_reasoning, think_steps = (int)(rnd() % 6), ended = 0;
    if (reasoning && rnd() % 2) ds_tokenizer_encode(tok, "</think>", 8, 0, &closing, &e);   /* byte-level pieces */
    size_t close_next = 0;
    while (n < MAX_WALK - 1) {
        memset(allowed, 0, DS_MASK_WORDS(n_vocab) * sizeof *allowed);
        ds_filter_result fr = ds_grammar_filter_fn(gf, gen, n, allowed, n_vocab);
        int32_t t;
        if (reasoning) {
            CHECK(fr == DS_FILTER_MASK && !DS_MASK_HAS(allowed, end_ids[0]) && DS_MASK_HAS(allowed, think_end) &&
                  DS_MASK_HAS(allowed, 65), "inside the reasoning (%d tokens in): filter %d, end token allowed %d", n,
                  (int)fr, fr == DS_FILTER_MASK && DS_MASK_HAS(allowed, end_ids[0]));
            if (ds_t_case_failed) goto out;
            if (think_steps > 0) think_steps--, t = 65 + (int32_t)(rnd() % 20);
            else if (closing.n) t = closing.ids[close_next++];
            else t = think_end;
            if ((closing.n && close_next == closing.n) || (!closing.n && t == think_end)) reasoning = 0;
            gen[n++] = t;
            continue;
        }
        CHECK(fr == DS_FILTER_MASK, "the filter let go after %d tokens: '%.*s'", n, (int)tn, text);
        if (ds_t_case_failed) goto out;
        int n_cand = 0, n_close = 0, opened = text_opens(&s, text, tn), end_ok = DS_MASK_HAS(allowed, end_ids[0]);
        for (int32_t v = 0; v < n_vocab; v++) {
            int has = DS_MASK_HAS(allowed, v);
            if (has && v != end_ids[0]) {
                CHECK(!ds_tokenizer_is_special(tok, v) || v == think_end || ds_tokenizer_find(tok, "<tool_call>") == v ||
                      ds_tokenizer_find(tok, "</tool_call>") == v, "control token %d allowed", v);
                size_t len = 0;
                const char *b = ds_tokenizer_token_bytes(tok, v, &len);
                cand[n_cand++] = v;
                if (b && has_closer(b, len)) close[n_close++] = v;
            }
            if (opened || (!check_every_token && !has && rnd() % 64) || v == end_ids[0]) continue;
            size_t len = 0;
            const char *b = ds_tokenizer_token_bytes(tok, v, &len);
            if (!b || !len || tn + len > 4096) continue;
            memcpy(text + tn, b, len);
            int want = text_fits(&s, text, tn + len);
            if (want < 0) continue;   /* past the opening: the arguments' grammar decides */
            (*n_compared)++;
            /* the filter offers at most 64 blank tokens after </think> (vocab_index.c): a subset, not a fault */
            if (want && !has && s.in_reasoning && text_fits(&s, text, tn + len) && is_blank(text, tn + len)) {
                n_blank_left_out++;
                continue;
            }
            if (want != has) {
                CHECK(0, "token %d '%.*s' after '%.*s': filter says %d, the check %d", v, (int)len, b, (int)tn, text, has,
                      want);
                goto out;
            }
        }
        CHECK(!end_ok || opened, "the end token is allowed before the call opened: '%.*s'", (int)tn, text);
        if (end_ok && (n_cand == 0 || rnd() % 2)) {   /* the grammar may end: end here */
            ended = 1;
            break;
        }
        CHECK(n_cand > 0, "nothing allowed after '%.*s'", (int)tn, text);
        if (!n_cand) goto out;
        t = n_close && (int)(rnd() % 100) < 10 + n / 4 ? close[rnd() % (uint32_t)n_close] : cand[rnd() % (uint32_t)n_cand];
        if (!opened && rnd() % 2) {   /* or the longest allowed token, which finishes openings in one go */
            size_t best = 0;
            for (int i = 0; i < n_cand; i++) {
                size_t len = 0;
                ds_tokenizer_token_bytes(tok, cand[i], &len);
                if (len > best) best = len, t = cand[i];
            }
        }
        size_t len = 0;
        const char *b = ds_tokenizer_token_bytes(tok, t, &len);
        memcpy(text + tn, b, len);
        tn += len;
        gen[n++] = t;
    }
    if (ended) {
        int n_calls = 0;
        ok = calls_valid(&s, text, tn, &n_calls);
        CHECK(ok, "not valid calls (%s, %s): '%.*s'", s.form ? "json" : "xml", s.parallel ? "parallel" : "one", (int)tn,
              text);
        if (!ok) {
            ds_matcher *m = NULL;
            ds_matcher_new(g, &m, &e);
            size_t k = 0;
            while (k < tn && ds_matcher_accept(m, text + k, 1)) k++;
            printf("# the grammar takes %zu of its %zu bytes; the tokens:", k, tn);
            for (int i = 0; i < n; i++) {
                size_t l = 0;
                const char *bb = ds_tokenizer_token_bytes(tok, gen[i], &l);
                printf(" %d[%.*s]", gen[i], (int)l, bb);
            }
            printf("\n");
            ds_matcher_free(m);
        }
        CHECK(s.parallel || n_calls == 1, "%d calls with parallel_tool_calls false", n_calls);
        CHECK(ds_grammar_filter_complete(gf), "the filter does not call the answer complete");
        if (!s.parallel) {   /* one call: nothing but the end may follow */
            int others = 0;
            for (int32_t v = 0; v < n_vocab; v++) others += DS_MASK_HAS(allowed, v) && v != end_ids[0];
            CHECK(others == 0, "%d other tokens allowed after the one call", others);
        }
    }
out:
    free(closing.ids);
    free(allowed);
    free(gen);
    free(cand);
    free(close);
    free(text);
    free(gbnf);
    ds_grammar_filter_free(gf);
    ds_grammar_unref(g);
    json_decref(s.tools);
    return ok;
}

static void walks(ds_tokenizer *t, int n_walks, int check_every_token) {
    REQUIRE(t, "tokenizer");
    ds_vocab_index *vi = NULL;
    ds_err e = {0};
    REQUIRE(ds_vocab_index_new(t, &vi, &e) == DS_OK, "vocab index: %s", e.msg);
    int typed = schema_compiler_works(), done = 0, compared = 0;
    if (!typed) printf("# the JSON Schema compiler is not there yet: no typed parameters\n");
    for (int i = 0; i < n_walks && !ds_t_case_failed; i++) done += walk(t, vi, check_every_token, typed, &compared);
    printf("# %d of %d walks ended with valid calls, %d token decisions compared (%d blank tokens after </think> "
           "the filter left out)\n", done, n_walks, compared, n_blank_left_out);
    CHECK(ds_t_case_failed || done >= n_walks * 3 / 4, "only %d of %d walks ended", done, n_walks);
    ds_vocab_index_free(vi);
    ds_tokenizer_free(t);
}

static void test_walks_generated_vocab(void) { walks(test_generated_tokenizer(), ds_test_scaled(200), 1); }

static void test_walks_qwen3_vocab(void) {
    ds_tokenizer *t = test_qwen3_tokenizer();
    REQUIRE(t, "the Qwen3 tokenizer.json (npm ci in tests/tokenizer)");
    /* every allowed token and one in 64 of the rest are checked (151k tokens per step) */
    walks(t, ds_test_scaled(20), 0);
}

static char *grammar_of(const char *tools_json, ds_call_form form, const char *only, int parallel, int lead, ds_err *e) {
    json_t *tools = ds_json_parse(tools_json, strlen(tools_json), NULL, 0);
    ds_tool_grammar_params p = {.form = form, .tools = tools, .only = only, .parallel = parallel, .lead_space = lead,
                                .max_space = 2};
    char *g = NULL;
    size_t n = 0;
    if (ds_tool_grammar(&p, &g, &n, e) != DS_OK) g = NULL;
    json_decref(tools);
    return g;
}

static void test_grammar_text(void) {
    CHECK(ds_call_form_of_template("... <tool_call>\n<function=NAME> ...") == DS_CALL_XML, "xml");
    CHECK(ds_call_form_of_template("... <tool_call>\n{\"name\": <function-name>, ...") == DS_CALL_JSON, "json");
    CHECK(ds_call_form_of_template("{{ messages }}") == DS_CALL_XML, "no tool format: the Qwen3.5 one");
    CHECK(ds_call_form_of_template(NULL) == DS_CALL_XML, "no template");
    static const char W[] = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"strict\":true,\"parameters\":"
                            "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"description\":\"d\"},"
                            "\"unit\":{\"enum\":[\"c\",\"f\"]},\"q\":{\"type\":\"string\",\"maxLength\":3}},"
                            "\"required\":[\"city\"],\"additionalProperties\":false}}},"
                            "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]";
    ds_err e = {0};
    char *g = grammar_of(W, DS_CALL_XML, NULL, 0, 0, &e);
    REQUIRE(g, "%s", e.msg);
    CHECK(strstr(g, "root ::= call\n"), "%s", g);
    CHECK(strstr(g, "call ::= \"<tool_call>\\n\" ( t0 | t1 ) \"\\n</tool_call>\"\n"), "%s", g);
    CHECK(strstr(g, "t0 ::= \"<function=get_weather>\\n\" t0-args \"</function>\"\n"), "%s", g);
    CHECK(strstr(g, "t0-args ::= t0-p0 t0-p1? t0-p2?\n"), "required first, the others optional, in order: %s", g);
    CHECK(strstr(g, "t0-p0 ::= \"<parameter=city>\\n\" t0-p0-v \"\\n</parameter>\\n\"\n"), "%s", g);
    CHECK(strstr(g, "t0-p0-v ::= xml-text\n"), "a plain string is raw text: %s", g);
    CHECK(strstr(g, "t0-p1-v ::= \"c\" | \"f\"\n"), "an enum of strings: %s", g);
    CHECK(strstr(g, "t0-p2-v ::= [^<]{0,3}\n"), "maxLength: %s", g);
    CHECK(strstr(g, "t1 ::= \"<function=now>\\n\" \"</function>\"\n"), "no parameters: %s", g);
    free(g);
    g = grammar_of(W, DS_CALL_XML, "now", 1, 4, &e);
    REQUIRE(g, "%s", e.msg);
    CHECK(strstr(g, "root ::= [ \\t\\n\\r]{0,4} call ( \"\\n\" call )*\n") && strstr(g, "( t1 )") && !strstr(g, "t0 ::="),
          "named, parallel, after a reasoning part: %s", g);
    free(g);
    g = grammar_of(W, DS_CALL_JSON, "now", 0, 0, &e);
    REQUIRE(g, "%s", e.msg);
    CHECK(strstr(g, "t1 ::= \"{\\\"name\\\": \\\"now\\\", \\\"arguments\\\": \" t1-args \"}\"\n") &&
          strstr(g, "t1-args ::= \"{}\"\n"), "the JSON form: %s", g);
    free(g);
    /* a strict function whose schema cannot be written is refused, naming it; a loose one gets free arguments */
    static const char BAD[] = "[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"strict\":true,\"parameters\":"
                              "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":2,\"pattern\":\"x+\"}}}}}]";
    g = grammar_of(BAD, DS_CALL_XML, NULL, 0, 0, &e);
    CHECK(!g && strstr(e.msg, "tools[0].function.parameters.properties.s") && strstr(e.msg, "not several"), "%s", e.msg);
    free(g);
    static const char LOOSE[] = "[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":"
                                "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":2,\"pattern\":\"x+\"}}}}}]";
    g = grammar_of(LOOSE, DS_CALL_XML, NULL, 0, 0, &e);
    CHECK(g && strstr(g, "t0-args ::= ( \"<parameter=\" [^<>\\n]+ \">\\n\" xml-text \"\\n</parameter>\\n\" )*\n"), "%s",
          g ? g : e.msg);
    free(g);
    g = grammar_of(LOOSE, DS_CALL_JSON, NULL, 0, 0, &e);
    CHECK(g && (strstr(g, "t0-args ::= json-object\n") || !strstr(g, "json-object")), "%s", g ? g : e.msg);
    free(g);
    g = grammar_of(W, DS_CALL_XML, "nope", 0, 0, &e);
    CHECK(!g && strstr(e.msg, "nope"), "a name not in tools: %s", e.msg);
    g = grammar_of("[]", DS_CALL_XML, NULL, 0, 0, &e);
    CHECK(!g && strstr(e.msg, "no function"), "no tools: %s", e.msg);
    /* the cache key tells the options apart */
    json_t *tools = ds_json_parse(W, sizeof W - 1, NULL, 0);
    ds_tool_grammar_params p = {.form = DS_CALL_XML, .tools = tools};
    size_t k1, k2;
    char *a = ds_tool_grammar_key(&p, &k1);
    p.parallel = 1;
    char *b = ds_tool_grammar_key(&p, &k2);
    CHECK(a && b && (k1 != k2 || memcmp(a, b, k1)), "parallel changes the key");
    free(b);
    p.parallel = 0;
    b = ds_tool_grammar_key(&p, &k2);
    CHECK(a && b && k1 == k2 && !memcmp(a, b, k1), "the same request, the same key");
    free(a);
    free(b);
    json_decref(tools);
}

/* tool_choice auto with a strict function: free text (the end token allowed) until the answer
 * writes <tool_call>, then the call's grammar, then (one call) only the end token */
static void test_trigger(void) {
    ds_tokenizer *tok = test_generated_tokenizer();
    REQUIRE(tok, "tokenizer");
    static const char TOOLS[] = "[{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"strict\":true,\"parameters\":"
                                "{\"type\":\"object\",\"properties\":{\"tz\":{\"enum\":[\"UTC\",\"CET\"]}},\"required\":[\"tz\"]}}}]";
    char *gbnf = NULL;
    ds_err e = {0};
    json_t *tools = ds_json_parse(TOOLS, sizeof TOOLS - 1, NULL, 0);
    ds_tool_grammar_params tp = {.form = DS_CALL_XML, .tools = tools};
    size_t gl = 0;
    ds_grammar *g = NULL;
    ds_vocab_index *vi = NULL;
    ds_grammar_filter *gf = NULL;
    int32_t end_ids[1] = {ds_tokenizer_find(tok, "<|endoftext|>")};
    int V = ds_tokenizer_n_tokens(tok);
    uint32_t *allowed = calloc(DS_MASK_WORDS(V), sizeof *allowed);
    ds_tokens a = {0}, b = {0};
    static const char CALL[] = "<tool_call>\n<function=get_time>\n<parameter=tz>\nCET\n</parameter>\n</function>\n</tool_call>";
    CHECK(ds_tool_grammar(&tp, &gbnf, &gl, &e) == DS_OK && ds_grammar_parse(gbnf, gl, &g, &e) == DS_OK &&
          ds_vocab_index_new(tok, &vi, &e) == DS_OK, "%s", e.msg);
    ds_grammar_filter_params fp = {.grammar = g, .vocab = vi, .tok = tok, .end_ids = end_ids, .n_end = 1,
                                   .trigger = "<tool_call>"};
    CHECK(!ds_t_case_failed && ds_grammar_filter_new(&fp, &gf, &e) == DS_OK, "%s", e.msg);
    CHECK(!ds_t_case_failed && ds_tokenizer_encode(tok, "Let me see. <tool_call>", 23, 1, &a, &e) == DS_OK &&
          ds_tokenizer_encode(tok, CALL, strlen(CALL), 1, &b, &e) == DS_OK, "%s", e.msg);
    if (ds_t_case_failed) goto out;
    CHECK(ds_grammar_filter_fn(gf, a.ids, (int)a.n - 1, allowed, V) == DS_FILTER_FREE, "free before the trigger");
    memset(allowed, 0, DS_MASK_WORDS(V) * sizeof *allowed);
    CHECK(ds_grammar_filter_fn(gf, a.ids, (int)a.n, allowed, V) == DS_FILTER_MASK && !DS_MASK_HAS(allowed, end_ids[0]) &&
          DS_MASK_HAS(allowed, ds_tokenizer_find(tok, "\xC4\x8A")) && !DS_MASK_HAS(allowed, 65), "the call's grammar after it");
    /* the whole call: then nothing but the end */
    int32_t gen[256];
    int n = 0;
    for (size_t i = 0; i + 1 < a.n; i++) gen[n++] = a.ids[i];
    for (size_t i = 0; i < b.n && n < 256; i++) gen[n++] = b.ids[i];
    memset(allowed, 0, DS_MASK_WORDS(V) * sizeof *allowed);
    CHECK(ds_grammar_filter_fn(gf, gen, n, allowed, V) == DS_FILTER_MASK && DS_MASK_HAS(allowed, end_ids[0]) &&
          ds_grammar_filter_complete(gf), "complete after the call");
    int others = 0;
    for (int32_t v = 0; v < V; v++) others += DS_MASK_HAS(allowed, v) && v != end_ids[0];
    CHECK(others == 0, "%d other tokens after the one call", others);
    /* a value outside the enum is refused: "CET" -> "CEX" never gets the mask's consent */
    memset(allowed, 0, DS_MASK_WORDS(V) * sizeof *allowed);
    int upto = n - (int)b.n;
    for (size_t i = 0; i < b.n; i++) {
        size_t len = 0;
        const char *t = ds_tokenizer_token_bytes(tok, b.ids[i], &len);
        gen[upto++] = b.ids[i];
        if (len && memchr(t, 'E', len)) break;
    }
    ds_grammar_filter_fn(gf, gen, upto, allowed, V);
    int32_t x = ds_tokenizer_find(tok, "X");
    CHECK(x >= 0 && !DS_MASK_HAS(allowed, x), "'X' after 'CE'");
out:
    free(a.ids);
    free(b.ids);
    free(allowed);
    free(gbnf);
    ds_grammar_filter_free(gf);
    ds_grammar_unref(g);
    ds_vocab_index_free(vi);
    json_decref(tools);
    ds_tokenizer_free(tok);
}

int main(void) {
    RUN(test_grammar_text);
    RUN(test_trigger);
    RUN(test_walks_generated_vocab);
    RUN(test_walks_qwen3_vocab);
    return ds_test_finish();
}
