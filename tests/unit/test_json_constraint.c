/* test_json_constraint.c - response_format json_object: the token filter that
 * keeps an answer a JSON object.
 *
 * The byte automaton: 2,000 random objects printed by jansson, formatted and
 * not, are accepted byte by byte and complete only at their last byte;
 * hand-made invalid texts are refused, and Python's json module (a strict,
 * independent parser, Debian's python3) refuses them too. Random walks
 * through the filter on the generated vocabulary and the real Qwen3
 * tokenizer.json pick allowed tokens (leaning towards closing ones as they
 * go) until only the end tokens are left: Python's json.loads must then give
 * an object for every text. Reasoning stays free until </think>, but for the end token; control
 * tokens never pass. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server/json_constraint.h"
#include "server/json_text.h"
#include "testing.h"
#include "test_tokenizers.h"

static uint32_t rng = 777;
static uint32_t rnd(void) { return rng = rng * 1664525u + 1013904223u, rng >> 8; }

static ds_json_state fresh(void) {
    ds_json_constraint c;
    ds_json_constraint_init(&c, NULL, NULL, NULL, 0, 0);
    return c.st;
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
    int n = ds_test_scaled(2000), bad = 0;
    for (int i = 0; i < n && bad < 3; i++) {
        json_t *o = random_object(0);
        char *text = i % 2 ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : ds_json_dump(o);
        ds_json_state s = fresh();
        size_t len = strlen(text), at = 0;
        for (; at < len; at++) {
            if (!ds_json_feed(&s, text + at, 1)) break;
            if (at + 1 < len && ds_json_complete(&s)) break;
        }
        if (at != len || !ds_json_complete(&s)) {
            CHECK(0, "refused or complete too early at byte %zu of: %s", at, text);
            bad++;
        }
        free(text);
        json_decref(o);
    }
}

/* Texts for Python's json module: records separated by 0x1e, a byte no JSON
 * text holds unescaped. */
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
        "{\"a\":]", "{'a':1}", "{\"a\":1}{", "{\"a\":\"x\"]"};
    records_open();
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        ds_json_state s = fresh();
        int ok = ds_json_feed(&s, BAD[i], strlen(BAD[i])) && ds_json_complete(&s);
        CHECK(!ok, "accepted: %s", BAD[i]);
        record(BAD[i], strlen(BAD[i]));
    }
    int d = python_disagrees(0);
    CHECK(d == 0, "Python's json takes %d of the invalid cases as objects (or failed: %d)", d, d);
    /* nesting is bounded; whitespace runs are bounded */
    char deep[80] = "{\"a\":";
    for (int i = 0; i < DS_JSON_MAX_DEPTH; i++) strcat(deep, "[");
    ds_json_state s = fresh();
    CHECK(!ds_json_feed(&s, deep, strlen(deep)), "nesting past %d accepted", DS_JSON_MAX_DEPTH);
    char spaces[DS_JSON_MAX_SPACE + 3] = "{";
    memset(spaces + 1, ' ', DS_JSON_MAX_SPACE + 1);
    spaces[DS_JSON_MAX_SPACE + 2] = '\0';
    s = fresh();
    CHECK(!ds_json_feed(&s, spaces, strlen(spaces)), "a run of %d spaces accepted", DS_JSON_MAX_SPACE + 1);
}

static int has_closer(const char *b, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (b[i] == '}' || b[i] == ']' || b[i] == '"') return 1;
    return 0;
}

#define MAX_WALK 3000

/* One walk; returns 1 when it reached the end tokens with a text a JSON parser takes as an object. */
static int walk(const ds_tokenizer *tok, const uint8_t *plain, int n_vocab, int in_reasoning, int *steps) {
    int32_t end_ids[1] = {ds_tokenizer_find(tok, "<|endoftext|>")};
    ds_json_constraint c;
    ds_json_constraint_init(&c, tok, plain, end_ids, 1, in_reasoning);
    uint32_t *allowed = malloc(DS_MASK_WORDS(n_vocab) * sizeof *allowed);
    int32_t *gen = malloc(MAX_WALK * sizeof *gen), *cand = malloc((size_t)n_vocab * sizeof *cand),
            *close = malloc((size_t)n_vocab * sizeof *close);
    char *text = malloc(MAX_WALK * 64);
    size_t tn = 0;
    int n = 0, ok = 0, think = in_reasoning ? 3 : -1;
    int32_t think_end = ds_tokenizer_find(tok, "</think>");
    while (n < MAX_WALK - 1) {
        memset(allowed, 0, DS_MASK_WORDS(n_vocab) * sizeof *allowed);
        ds_filter_result f = ds_json_constraint_filter(&c, gen, n, allowed, n_vocab);
        if (think >= 0) { /* inside the reasoning: anything but the end token, which would end it with no JSON */
            CHECK(f == DS_FILTER_MASK && !DS_MASK_HAS(allowed, end_ids[0]) && DS_MASK_HAS(allowed, think_end) && DS_MASK_HAS(allowed, 70),
                  "inside the reasoning (%d tokens in): filter %d, end token allowed %d", n, (int)f, DS_MASK_HAS(allowed, end_ids[0]));
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
        if (n_cand == 1 && cand[0] == end_ids[0]) { /* complete: only the end token is left */
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
    free(allowed);
    free(gen);
    free(cand);
    free(close);
    free(text);
    return ok;
}

static void walks(ds_tokenizer *t, int n_walks) {
    REQUIRE(t, "tokenizer");
    uint8_t *plain = ds_json_plain_tokens(t);
    REQUIRE(plain, "plain table");
    int done = 0, steps = 0;
    records_open();
    for (int i = 0; i < n_walks && !ds_t_case_failed; i++) done += walk(t, plain, ds_tokenizer_n_tokens(t), i % 3 == 0, &steps);
    printf("# %d of %d walks closed their object (%d tokens in all)\n", done, n_walks, steps);
    CHECK(done >= n_walks * 9 / 10, "only %d of %d walks ended", done, n_walks);
    int d = python_disagrees(1);
    CHECK(d == 0, "Python's json.loads does not give an object for %d of the %d texts (or failed: %d)", d, done, d);
    free(plain);
    ds_tokenizer_free(t);
}

static void test_walks_generated_vocab(void) { walks(test_generated_tokenizer(), ds_test_scaled(300)); }

static double ms_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void test_walks_qwen3_vocab(void) {
    ds_tokenizer *t = test_qwen3_tokenizer();
    REQUIRE(t, "the Qwen3 tokenizer.json (npm ci in tests/tokenizer)");
    /* what one narrowed step costs inside a string and before a value (printed, not judged) */
    uint8_t *plain = ds_json_plain_tokens(t);
    int V = ds_tokenizer_n_tokens(t);
    uint32_t *allowed = calloc(DS_MASK_WORDS(V), sizeof *allowed);
    static const char *const at[2] = {"{\"key\": \"text", "{\"key\": "};
    for (int i = 0; plain && allowed && i < 2; i++) {
        ds_json_constraint c;
        ds_json_constraint_init(&c, t, plain, NULL, 0, 0);
        ds_json_feed(&c.st, at[i], strlen(at[i]));
        double t0 = ms_now();
        for (int r = 0; r < 20; r++) ds_json_constraint_filter(&c, NULL, 0, allowed, V);
        printf("# one narrowed step over %d tokens %s: %.2f ms\n", V, i ? "before a value" : "inside a string",
               (ms_now() - t0) / 20);
    }
    free(allowed);
    free(plain);
    walks(t, ds_test_scaled(25));
}

int main(void) {
    RUN(test_objects_from_jansson_are_accepted);
    RUN(test_invalid_texts_are_refused);
    RUN(test_walks_generated_vocab);
    RUN(test_walks_qwen3_vocab);
    return ds_test_finish();
}
