/* test_output_grammar.c - the grammars of output constraints
 * (server/output_grammar.h) as the matcher and the engine filter follow
 * them, and the server's grammar cache (server/grammar_cache.h).
 *
 * json_object: 2,000 random objects printed by jansson, formatted and not,
 * are accepted byte by byte and may end only at their last byte; hand-made
 * invalid texts are refused, and Python's json module (a strict, independent
 * parser, Debian's python3) refuses them too. Random walks through the
 * filter on the generated vocabulary and the real Qwen3 tokenizer.json pick
 * allowed tokens (leaning towards closing ones as they go) until only the
 * end token is left: Python's json.loads must then give an object for every
 * text. Reasoning stays free until </think>, but for the end token, which
 * never comes before the object is complete; control tokens never pass.
 * choice: exactly one of the strings. The cache: hits, misses, eviction in
 * least-recently-used order within its byte budget, and a grammar evicted
 * while in use stays usable. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "grammar/grammar.h"
#include "grammar/grammar_filter.h"
#include "grammar/matcher.h"
#include "grammar/vocab_index.h"
#include "server/grammar_cache.h"
#include "server/json_text.h"
#include "server/output_grammar.h"
#include "testing.h"
#include "test_tokenizers.h"

#define SPACE 4

static uint32_t rng = 777;
static uint32_t rnd(void) { return rng = rng * 1664525u + 1013904223u, rng >> 8; }

static ds_grammar *output_grammar(ds_out_kind kind, json_t *value) {
    ds_oai_output o = {.kind = kind, .value = value, .max_space = SPACE};
    char *g = NULL;
    size_t n = 0;
    ds_err e = {0};
    ds_grammar *gr = NULL;
    if (ds_output_gbnf(&o, &g, &n, &e) != DS_OK || ds_grammar_parse(g, n, &gr, &e) != DS_OK)
        printf("# %s\n%s\n", e.msg, g ? g : "");
    free(g);
    return gr;
}

/* 1 when every byte is accepted, the text may end only after the last one */
static int accepts_whole(ds_grammar *g, const char *text, size_t len, size_t *at) {
    ds_matcher *m = NULL;
    ds_err e = {0};
    if (ds_matcher_new(g, &m, &e) != DS_OK) return 0;
    int ok = 1;
    for (*at = 0; *at < len && ok; (*at)++) {
        if (!ds_matcher_accept(m, text + *at, 1)) ok = 0;
        else if (*at + 1 < len && ds_matcher_can_end(m)) ok = 0;
    }
    ok = ok && ds_matcher_can_end(m);
    ds_matcher_free(m);
    return ok;
}

static json_t *random_value(int depth);

static char *random_string(void) {
    static const char *const pieces[] = {"a", "Z", " ", "\"", "\\", "/", "\n", "\t", "\x01", "\xc3\xa9", "\xe4\xbd\xa0",
                                         "\xf0\x9f\x98\x80", "{", "}", "[", "]", ":", ",", "0", "true", "\\u"};
    int n = (int)(rnd() % 8);
    char *s = calloc(64, 1);
    for (int i = 0; i < n; i++) strcat(s, pieces[rnd() % (sizeof pieces / sizeof pieces[0])]);
    return s;
}

static json_t *random_object(int depth) {
    json_t *o = json_object();
    int n = depth > 4 ? 0 : (int)(rnd() % 4);
    for (int i = 0; i < n; i++) {
        char *k = random_string();
        json_object_set_new(o, k, random_value(depth + 1));
        free(k);
    }
    return o;
}

static json_t *random_value(int depth) {
    switch (rnd() % (depth > 4 ? 5 : 7)) {
    case 0: { char *s = random_string(); json_t *v = json_string(s); free(s); return v; }
    case 1: return json_real((double)((int)(rnd() % 2000001) - 1000000) / (rnd() % 2 ? 1.0 : 1000.0));
    case 2: return json_real(ldexp((double)(rnd() % 1000), (int)(rnd() % 200) - 100));
    case 3: return json_boolean(rnd() % 2);
    case 4: return json_null();
    case 5: return random_object(depth);
    default: {
        json_t *a = json_array();
        int n = (int)(rnd() % 4);
        for (int i = 0; i < n; i++) json_array_append_new(a, random_value(depth + 1));
        return a;
    }
    }
}

static void test_objects_from_jansson_are_accepted(void) {
    ds_grammar *g = output_grammar(DS_OUT_JSON_OBJECT, NULL);
    REQUIRE(g, "the json_object grammar");
    int n = ds_test_scaled(2000), bad = 0;
    for (int i = 0; i < n && bad < 3; i++) {
        json_t *o = random_object(0);
        /* JSON_INDENT(2) nests up to 4 + 2 * depth spaces: compact or indented by one */
        char *text = i % 2 ? json_dumps(o, JSON_INDENT(0) | JSON_PRESERVE_ORDER) : ds_json_dump(o);
        size_t at = 0;
        if (!accepts_whole(g, text, strlen(text), &at)) {
            CHECK(0, "refused or complete too early at byte %zu of: %s", at, text);
            bad++;
        }
        free(text);
        json_decref(o);
    }
    ds_grammar_unref(g);
}

/* Texts for Python's json module: records separated by 0x1e, a byte no JSON text holds unescaped. */
static char records_path[256];
static FILE *records;

static void records_open(void) {
    const char *tmp = getenv("DS_TMP");
    snprintf(records_path, sizeof records_path, "%s/json-records-%d", tmp ? tmp : "/tmp", (int)getpid());
    records = fopen(records_path, "wb");
}

static void record(const char *text, size_t len) {
    if (records) fwrite(text, 1, len, records), fputc(0x1e, records);
}

/* How many records json.loads does not give as an object (want_objects) or does (!want_objects); -1 on failure. */
static int python_disagrees(int want_objects) {
    if (!records) return -1;
    fclose(records);
    records = NULL;
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import json,sys\n"
             "bad=0\n"
             "for r in open(sys.argv[1],'rb').read().split(b'\\x1e')[:-1]:\n"
             "  try: ok=isinstance(json.loads(r.decode('utf-8','replace')),dict)\n"
             "  except ValueError: ok=False\n"
             "  if ok!=%s: bad+=1; print('#', r[:200])\n"
             "sys.exit(min(bad,100))\" '%s'",
             want_objects ? "True" : "False", records_path);
    int rc = system(cmd);
    remove(records_path);
    return rc < 0 || !WIFEXITED(rc) ? -1 : WEXITSTATUS(rc);
}

static void test_invalid_texts_are_refused(void) {
    static const char *const BAD[] = {
        "[1]", "\"x\"", "1", "{\"a\":01}", "{\"a\":1,}", "{\"a\" 1}", "{\"a\":tru}", "{\"a\":\"\x01\"}",
        "{\"a\":\"\\q\"}", "{\"a\":\"\\u12G4\"}", "{\"a\":-}", "{\"a\":1.}", "{\"a\":1e}", "{}}", "{} x", "{a:1}",
        "{\"a\":[1,]}", "{\"a\":[1 2]}", "{\"a\":nul}", "{,}", "{\"a\":}", "{\"a\":+1}", "{\"a\":.5}", "{\"a\":[}",
        "{\"a\":]", "{'a':1}", "{\"a\":1}{", "{\"a\":\"x\"]", "{\"a\":\"\n\"}", "{\"a\n\":1}", "{}\n"};
    ds_grammar *g = output_grammar(DS_OUT_JSON_OBJECT, NULL);
    REQUIRE(g, "the json_object grammar");
    records_open();
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        size_t at;
        CHECK(!accepts_whole(g, BAD[i], strlen(BAD[i]), &at), "accepted: %s", BAD[i]);
        if (i + 1 < sizeof BAD / sizeof BAD[0]) record(BAD[i], strlen(BAD[i]));   /* Python takes a trailing newline */
    }
    int d = python_disagrees(0);
    CHECK(d == 0, "Python's json takes %d of the invalid cases as objects (or failed: %d)", d, d);
    /* whitespace runs are bounded, before and inside */
    char spaces[SPACE + 4] = "{";
    memset(spaces + 1, ' ', SPACE + 1);
    strcpy(spaces + SPACE + 2, "}");
    size_t at;
    CHECK(!accepts_whole(g, spaces, strlen(spaces), &at), "a run of %d spaces accepted", SPACE + 1);
    spaces[SPACE + 1] = '}';
    spaces[SPACE + 2] = '\0';
    CHECK(accepts_whole(g, spaces, strlen(spaces), &at), "a run of %d spaces refused", SPACE);
    CHECK(accepts_whole(g, "\n\n{}", 4, &at) && !accepts_whole(g, "\n\n\n\n\n{}", 7, &at), "leading whitespace");
    ds_grammar_unref(g);
}

static int has_closer(const char *b, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (b[i] == '}' || b[i] == ']' || b[i] == '"') return 1;
    return 0;
}

#define MAX_WALK 3000

/* One walk; returns 1 when it reached the end token with a text a JSON parser takes as an object. */
static int walk(const ds_tokenizer *tok, const ds_vocab_index *vi, ds_grammar *g, int in_reasoning, int *steps) {
    int n_vocab = ds_tokenizer_n_tokens(tok);
    int32_t end_ids[1] = {ds_tokenizer_find(tok, "<|endoftext|>")};
    ds_grammar_filter_params fp = {.grammar = g, .vocab = vi, .tok = tok, .end_ids = end_ids, .n_end = 1,
                                   .in_reasoning = in_reasoning};
    ds_grammar_filter *gf = NULL;
    ds_err e = {0};
    if (ds_grammar_filter_new(&fp, &gf, &e) != DS_OK) {
        CHECK(0, "filter: %s", e.msg);
        return 0;
    }
    uint32_t *allowed = malloc(DS_MASK_WORDS(n_vocab) * sizeof *allowed);
    int32_t *gen = malloc(MAX_WALK * sizeof *gen), *cand = malloc((size_t)n_vocab * sizeof *cand),
            *close = malloc((size_t)n_vocab * sizeof *close);
    char *text = malloc(MAX_WALK * 64);
    size_t tn = 0;
    int n = 0, ok = 0, think = in_reasoning ? 3 : -1;
    int32_t think_end = ds_tokenizer_find(tok, "</think>");
    while (n < MAX_WALK - 1) {
        memset(allowed, 0, DS_MASK_WORDS(n_vocab) * sizeof *allowed);
        ds_filter_result f = ds_grammar_filter_fn(gf, gen, n, allowed, n_vocab);
        if (think >= 0) { /* inside the reasoning: anything but the end token, which would end it with no JSON */
            CHECK(f == DS_FILTER_MASK && !DS_MASK_HAS(allowed, end_ids[0]) && DS_MASK_HAS(allowed, think_end) &&
                  DS_MASK_HAS(allowed, 70), "inside the reasoning (%d tokens in): filter %d, end token allowed %d", n,
                  (int)f, f == DS_FILTER_MASK && DS_MASK_HAS(allowed, end_ids[0]));
            gen[n++] = think-- > 0 ? 70 + (int32_t)(rnd() % 10) : think_end;
            continue;
        }
        if (f != DS_FILTER_MASK) { CHECK(0, "the filter let go after %d tokens", n); break; }
        int n_cand = 0, n_close = 0;
        for (int32_t t = 0; t < n_vocab; t++) {
            if (!DS_MASK_HAS(allowed, t)) continue;
            CHECK(t == end_ids[0] || !ds_tokenizer_is_special(tok, t), "control token %d allowed", t);
            cand[n_cand++] = t;
            size_t len = 0;
            const char *b = ds_tokenizer_token_bytes(tok, t, &len);
            if (b && has_closer(b, len)) close[n_close++] = t;
        }
        if (DS_MASK_HAS(allowed, end_ids[0])) {   /* the end token only once the object is whole */
            CHECK(n_cand == 1, "the end token and %d others allowed after '%.*s'", n_cand - 1, (int)tn, text);
            CHECK(ds_grammar_filter_complete(gf), "the end token allowed, the answer not complete");
            record(text, tn);
            ok = 1;
            break;
        }
        CHECK(n_cand > 0, "nothing allowed after %d tokens", n);
        if (n_cand == 0 || ds_t_case_failed) break;
        /* lean towards closing as the walk gets long, or it may never end */
        int32_t t = n_close && (int)(rnd() % 100) < 10 + n / 4 ? close[rnd() % (uint32_t)n_close]
                                                               : cand[rnd() % (uint32_t)n_cand];
        size_t len = 0;
        const char *b = ds_tokenizer_token_bytes(tok, t, &len);
        memcpy(text + tn, b, len);
        tn += len;
        gen[n++] = t;
    }
    *steps += n;
    ds_grammar_filter_free(gf);
    free(allowed);
    free(gen);
    free(cand);
    free(close);
    free(text);
    return ok;
}

static void walks(ds_tokenizer *t, int n_walks) {
    REQUIRE(t, "tokenizer");
    ds_vocab_index *vi = NULL;
    ds_err e = {0};
    ds_grammar *g = output_grammar(DS_OUT_JSON_OBJECT, NULL);
    if (!g || ds_vocab_index_new(t, &vi, &e) != DS_OK) {
        CHECK(0, "grammar %p, vocab index: %s", (void *)g, e.msg);
        ds_grammar_unref(g);
        ds_tokenizer_free(t);
        return;
    }
    int done = 0, steps = 0;
    records_open();
    for (int i = 0; i < n_walks && !ds_t_case_failed; i++) done += walk(t, vi, g, i % 3 == 0, &steps);
    printf("# %d of %d walks closed their object (%d tokens in all)\n", done, n_walks, steps);
    CHECK(done >= n_walks * 9 / 10, "only %d of %d walks ended", done, n_walks);
    int d = python_disagrees(1);
    CHECK(d == 0, "Python's json.loads does not give an object for %d of the %d texts (or failed: %d)", d, done, d);
    ds_grammar_unref(g);
    ds_vocab_index_free(vi);
    ds_tokenizer_free(t);
}

static void test_walks_generated_vocab(void) { walks(test_generated_tokenizer(), ds_test_scaled(300)); }

static void test_walks_qwen3_vocab(void) {
    ds_tokenizer *t = test_qwen3_tokenizer();
    REQUIRE(t, "the Qwen3 tokenizer.json (npm ci in tests/tokenizer)");
    walks(t, ds_test_scaled(25));
}

static void test_choice(void) {
    json_t *choices = json_pack("[sss]", "yes", "no", "a \"q\" \\\n");
    ds_grammar *g = output_grammar(DS_OUT_CHOICE, choices);
    REQUIRE(g, "the choice grammar");
    size_t at;
    CHECK(accepts_whole(g, "yes", 3, &at) && accepts_whole(g, "no", 2, &at), "the choices");
    CHECK(accepts_whole(g, "a \"q\" \\\n", 8, &at), "escapes");
    CHECK(!accepts_whole(g, "yesno", 5, &at) && !accepts_whole(g, "ye", 2, &at) && !accepts_whole(g, " yes", 4, &at),
          "exactly one of them");
    ds_grammar_unref(g);
    json_decref(choices);
}

static ds_grammar *parse(const char *gbnf) {
    ds_grammar *g = NULL;
    ds_err e = {0};
    if (ds_grammar_parse(gbnf, strlen(gbnf), &g, &e) != DS_OK) printf("# %s\n", e.msg);
    return g;
}

static void test_cache(void) {
    ds_grammar *a = parse("root ::= \"a\"\n"), *b = parse("root ::= \"b\"+\n"), *c = parse("root ::= [c-z]{2,9}\n");
    REQUIRE(a && b && c, "grammars");
    size_t one = ds_grammar_bytes(a) + ds_grammar_bytes(b) + ds_grammar_bytes(c);
    ds_grammar_cache *gc = NULL;
    ds_err e = {0};
    /* room for two of the three (each entry also counts its key and bookkeeping) */
    REQUIRE(ds_grammar_cache_new(one - ds_grammar_bytes(a) / 2 + 200, &gc, &e) == DS_OK, "%s", e.msg);
    CHECK(!ds_grammar_cache_get(gc, "a", 1), "empty");
    ds_grammar_cache_put(gc, "a", 1, a);
    ds_grammar_cache_put(gc, "b", 1, b);
    ds_grammar *got = ds_grammar_cache_get(gc, "a", 1);   /* a is now the most recent */
    CHECK(got == a, "a hit");
    ds_grammar_unref(got);
    ds_grammar_unref(a);   /* the cache's reference keeps it */
    ds_grammar_cache_put(gc, "c", 1, c);   /* b, the least recently used, goes */
    got = ds_grammar_cache_get(gc, "b", 1);
    CHECK(!got, "b evicted");
    ds_grammar_unref(got);
    got = ds_grammar_cache_get(gc, "a", 1);
    CHECK(got == a, "a kept");
    ds_grammar_cache_stats st;
    ds_grammar_cache_stats_get(gc, &st);
    CHECK(st.hits == 2 && st.misses == 2 && st.entries == 2, "hits %llu misses %llu entries %zu",
          (unsigned long long)st.hits, (unsigned long long)st.misses, st.entries);
    ds_grammar_cache_free(gc);
    /* a grammar the cache dropped lives on with its user's reference */
    ds_matcher *m = NULL;
    CHECK(got && ds_matcher_new(got, &m, &e) == DS_OK && ds_matcher_accept(m, "a", 1) && ds_matcher_can_end(m),
          "a still usable: %s", e.msg);
    ds_matcher_free(m);
    ds_grammar_unref(got);
    ds_grammar_unref(b);
    ds_grammar_unref(c);
    /* a grammar larger than the budget is not kept */
    REQUIRE(ds_grammar_cache_new(8, &gc, &e) == DS_OK, "%s", e.msg);
    a = parse("root ::= \"a\"\n");
    ds_grammar_cache_put(gc, "a", 1, a);
    got = ds_grammar_cache_get(gc, "a", 1);
    CHECK(!got, "kept past its budget");
    ds_grammar_unref(got);
    ds_grammar_unref(a);
    ds_grammar_cache_free(gc);
}

int main(void) {
    RUN(test_objects_from_jansson_are_accepted);
    RUN(test_invalid_texts_are_refused);
    RUN(test_choice);
    RUN(test_cache);
    RUN(test_walks_generated_vocab);
    RUN(test_walks_qwen3_vocab);
    return ds_test_finish();
}
