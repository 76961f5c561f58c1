/* test_tool_constraint.c - tool_choice "required" / a named function: the
 * token filter that makes the answer open a call.
 *
 * Random walks through the filter on the generated vocabulary and on the
 * real Qwen3 tokenizer.json: at every narrowed step the allowed set is
 * compared, token by token over the whole vocabulary, with an independent
 * string check (the bytes so far plus the token's are whitespace within the
 * allowance, then a prefix of an allowed opening or an opening followed by
 * anything); the walk picks allowed tokens (the longest or a random one)
 * until the filter lets go, and the text must then open a call to an allowed
 * function (the named one when there is one). Reasoning parts stay free until
 * their </think>, written as the added token or byte by byte, but for the end
 * token: the answer cannot end inside its reasoning, before its call. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/json_text.h"
#include "server/tool_constraint.h"
#include "testing.h"
#include "test_tokenizers.h"

static uint32_t rng = 12345;
static uint32_t rnd(void) { return rng = rng * 1664525u + 1013904223u, rng >> 8; }

static const char *NAMES[] = {"get", "get_time", "get_weather", "search-web", "lookup_2", "x"};
#define N_NAMES 6

typedef struct {
    json_t *tools;
    const char *only;
    int form, in_reasoning;
    char openings[N_NAMES][64];
    int n_openings;
} scenario;

static void scenario_make(scenario *s) {
    memset(s, 0, sizeof *s);
    s->tools = json_array();
    int n = 1 + (int)(rnd() % N_NAMES), first = (int)(rnd() % N_NAMES);
    s->form = (int)(rnd() % 2);
    s->in_reasoning = rnd() % 3 == 0;
    int named = rnd() % 2;
    for (int i = 0; i < n; i++) {
        const char *nm = NAMES[(first + i) % N_NAMES];
        json_t *t = json_object(), *f = json_object();
        json_object_set_new(t, "function", f);
        json_object_set_new(t, "type", json_string("function"));
        json_object_set_new(f, "name", ds_json_text(nm));
        json_array_append_new(s->tools, t);
        if (named && i == n - 1) s->only = nm; /* the last one is the named one */
        if (!named || i == n - 1)
            snprintf(s->openings[s->n_openings++], 64,
                     s->form == DS_CALL_XML ? "<tool_call>\n<function=%s>" : "<tool_call>\n{\"name\": \"%s\"", nm);
    }
}

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* The independent check: may text (what the answer wrote after its reasoning) go on? */
static int text_fits(const scenario *s, const char *text, size_t n) {
    size_t k = 0;
    while (k < n && is_space(text[k])) k++;
    if (k > (s->in_reasoning ? 4u : 0u)) return 0;
    if (k == n) return 1;
    for (int i = 0; i < s->n_openings; i++) {
        size_t ol = strlen(s->openings[i]), m = n - k < ol ? n - k : ol;
        if (!memcmp(text + k, s->openings[i], m)) return 1;
    }
    return 0;
}

/* Whether text opens a call: whitespace, then a whole allowed opening. */
static int text_opens(const scenario *s, const char *text, size_t n) {
    size_t k = 0;
    while (k < n && is_space(text[k])) k++;
    for (int i = 0; i < s->n_openings; i++) {
        size_t ol = strlen(s->openings[i]);
        if (n - k >= ol && !memcmp(text + k, s->openings[i], ol)) return 1;
    }
    return 0;
}

#define MAX_WALK 400

static void walk(const ds_tokenizer *tok, int n_vocab, int check_every_token, int *n_masks, int *n_compared) {
    scenario s;
    scenario_make(&s);
    ds_tool_constraint c;
    ds_err e = {0};
    int32_t end_ids[1] = {ds_tokenizer_find(tok, "<|endoftext|>")};
    REQUIRE(end_ids[0] >= 0, "no <|endoftext|> token");
    REQUIRE(ds_tool_constraint_init(&c, tok, (ds_call_form)s.form, s.tools, s.only, end_ids, 1, s.in_reasoning, &e) == DS_OK,
            "init: %s", e.msg);
    uint32_t *allowed = malloc(DS_MASK_WORDS(n_vocab) * sizeof *allowed);
    int32_t gen[MAX_WALK], *cand = malloc((size_t)n_vocab * sizeof *cand);
    char text[4096];
    size_t tn = 0;
    int n = 0, reasoning = s.in_reasoning, think_steps = (int)(rnd() % 6);
    ds_tokens close = {0};
    int32_t think_end = ds_tokenizer_find(tok, "</think>");
    if (reasoning && rnd() % 2) ds_tokenizer_encode(tok, "</think>", 8, 0, &close, &e); /* byte-level pieces */
    size_t close_next = 0;
    ds_filter_result fr = DS_FILTER_FREE;
    while (n < MAX_WALK) {
        memset(allowed, 0, DS_MASK_WORDS(n_vocab) * sizeof *allowed);
        fr = ds_tool_constraint_filter(&c, gen, n, allowed, n_vocab);
        if (fr == DS_FILTER_DONE) break;
        int32_t t;
        if (reasoning) { /* anything but the end token, which would end the answer with no call */
            CHECK(fr == DS_FILTER_MASK && !DS_MASK_HAS(allowed, end_ids[0]) && DS_MASK_HAS(allowed, think_end) && DS_MASK_HAS(allowed, 65),
                  "inside the reasoning (%d tokens in): filter %d, end token allowed %d", n, (int)fr, DS_MASK_HAS(allowed, end_ids[0]));
            if (ds_t_case_failed) goto out;
            /* reasoning: a few ordinary tokens, then </think> (whole or in pieces) */
            if (think_steps > 0) { think_steps--; t = 65 + (int32_t)(rnd() % 20); }
            else if (close.n) t = close.ids[close_next++];
            else t = think_end;
            if ((close.n && close_next == close.n) || (!close.n && think_steps == 0 && t == think_end)) reasoning = 0;
            gen[n++] = t;
            continue;
        }
        CHECK(fr == DS_FILTER_MASK, "free outside the reasoning, after %d tokens", n);
        (*n_masks)++;
        int n_cand = 0;
        for (int32_t v = 0; v < n_vocab; v++) {
            size_t len = 0;
            const char *b = ds_tokenizer_token_bytes(tok, v, &len);
            if (DS_MASK_HAS(allowed, v)) cand[n_cand++] = v;
            if (!check_every_token && !DS_MASK_HAS(allowed, v) && rnd() % 64) continue;
            int want = 0;
            if (b && len > 0 && tn + len < sizeof text) {
                memcpy(text + tn, b, len);
                want = text_fits(&s, text, tn + len);
            }
            (*n_compared)++;
            if (want != DS_MASK_HAS(allowed, v)) {
                CHECK(0, "token %d (%zu bytes) after %zu bytes: filter says %d, the check %d", v, len, tn, DS_MASK_HAS(allowed, v), want);
                goto out;
            }
        }
        REQUIRE(n_cand > 0, "nothing allowed");
        t = cand[rnd() % (uint32_t)n_cand];
        if (rnd() % 2) { /* or the longest allowed token, which finishes openings in one go */
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
    CHECK(fr == DS_FILTER_DONE, "the filter never let go (%d tokens)", n);
    CHECK(text_opens(&s, text, tn), "the answer does not open an allowed call: '%.*s'", (int)tn, text);
    /* once open, it stays out of the way */
    memset(allowed, 0, DS_MASK_WORDS(n_vocab) * sizeof *allowed);
    gen[n] = 0;
    CHECK(ds_tool_constraint_filter(&c, gen, n + 1, allowed, n_vocab) == DS_FILTER_DONE, "after the opening");
out:
    free(close.ids);
    free(allowed);
    free(cand);
    ds_tool_constraint_free(&c);
    json_decref(s.tools);
}

static void test_walks_generated_vocab(void) {
    ds_tokenizer *t = test_generated_tokenizer();
    REQUIRE(t, "tokenizer");
    int masks = 0, compared = 0, walks = ds_test_scaled(400);
    for (int i = 0; i < walks && !ds_t_case_failed; i++) walk(t, ds_tokenizer_n_tokens(t) + 7, 1, &masks, &compared);
    printf("# %d walks, %d narrowed steps, %d token decisions compared\n", walks, masks, compared);
    ds_tokenizer_free(t);
}

static void test_walks_qwen3_vocab(void) {
    ds_tokenizer *t = test_qwen3_tokenizer();
    REQUIRE(t, "the Qwen3 tokenizer.json (npm ci in tests/tokenizer)");
    int masks = 0, compared = 0, walks = ds_test_scaled(40);
    /* every allowed token and one in 64 of the rest are checked (151k tokens per step) */
    for (int i = 0; i < walks && !ds_t_case_failed; i++) walk(t, ds_tokenizer_n_tokens(t), 0, &masks, &compared);
    printf("# %d walks, %d narrowed steps, %d token decisions compared\n", walks, masks, compared);
    /* what one narrowed step costs (printed for the record; tests do not judge timings) */
    static const char TOOLS[] = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
                                "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]";
    json_t *tools = ds_json_parse(TOOLS, sizeof TOOLS - 1, NULL, 0);
    ds_tool_constraint c;
    ds_err e = {0};
    int V = ds_tokenizer_n_tokens(t);
    uint32_t *allowed = malloc(DS_MASK_WORDS(V) * sizeof *allowed);
    if (tools && allowed && ds_tool_constraint_init(&c, t, DS_CALL_XML, tools, NULL, NULL, 0, 0, &e) == DS_OK) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (int i = 0; i < 20; i++) ds_tool_constraint_filter(&c, NULL, 0, allowed, V);
        clock_gettime(CLOCK_MONOTONIC, &b);
        printf("# one narrowed step over %d tokens: %.2f ms\n", V,
               ((double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) * 1e-6) / 20);
        ds_tool_constraint_free(&c);
    }
    free(allowed);
    json_decref(tools);
    ds_tokenizer_free(t);
}

static void test_forms_and_errors(void) {
    CHECK(ds_call_form_of_template("... <tool_call>\n<function=NAME> ...") == DS_CALL_XML, "xml");
    CHECK(ds_call_form_of_template("... <tool_call>\n{\"name\": <function-name>, ...") == DS_CALL_JSON, "json");
    CHECK(ds_call_form_of_template("{{ messages }}") == DS_CALL_XML, "no tool format: the Qwen3.5 one");
    CHECK(ds_call_form_of_template(NULL) == DS_CALL_XML, "no template");
    ds_tokenizer *t = test_generated_tokenizer();
    REQUIRE(t, "tokenizer");
    json_t *tools = ds_json_parse("[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}]", sizeof "[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}]" - 1, NULL, 0);
    ds_tool_constraint c;
    ds_err e = {0};
    CHECK(ds_tool_constraint_init(&c, t, DS_CALL_XML, tools, "b", NULL, 0, 0, &e) == DS_EINVAL && strstr(e.msg, "b"),
          "a name not in tools: %s", e.msg);
    CHECK(ds_tool_constraint_init(&c, t, DS_CALL_XML, NULL, NULL, NULL, 0, 0, &e) == DS_EINVAL, "no tools");
    /* the first step allows exactly what starts "<tool_call>" */
    REQUIRE(ds_tool_constraint_init(&c, t, DS_CALL_XML, tools, NULL, NULL, 0, 0, &e) == DS_OK, "%s", e.msg);
    int V = ds_tokenizer_n_tokens(t);
    uint32_t *allowed = calloc(DS_MASK_WORDS(V), sizeof *allowed);
    CHECK(ds_tool_constraint_filter(&c, NULL, 0, allowed, V) == DS_FILTER_MASK, "narrowed from the start");
    int32_t tc = ds_tokenizer_find(t, "<tool_call>"), lt = ds_tokenizer_find(t, "<");
    CHECK(tc >= 0 && DS_MASK_HAS(allowed, tc) && lt >= 0 && DS_MASK_HAS(allowed, lt), "<tool_call> and < allowed");
    int32_t nl = ds_tokenizer_find(t, "\xC4\x8A"); /* "\n" in the byte-level alphabet */
    CHECK(nl >= 0 && !DS_MASK_HAS(allowed, nl), "no leading whitespace without reasoning");
    free(allowed);
    ds_tool_constraint_free(&c);
    json_decref(tools);
    ds_tokenizer_free(t);
}

int main(void) {
    RUN(test_forms_and_errors);
    RUN(test_walks_generated_vocab);
    RUN(test_walks_qwen3_vocab);
    return ds_test_finish();
}
