/* test_grammar.c - GBNF parsing, the byte-level matcher and its token masks.
 *
 * Sentences are checked against hand-written expectations (what GBNF's
 * description says each construct matches); parse errors must name the line
 * and column or the rule; masks over the real Qwen3 vocabulary are checked
 * token by token against feeding each token's bytes to the matcher and
 * taking them back, along walks through several grammars, with the caches
 * cold and warm. */
#include <stdint.h>

#include "engine/engine.h"
#include "grammar/grammar.h"
#include "grammar/grammar_filter.h"
#include "grammar/matcher.h"
#include "grammar/vocab_index.h"
#include "test_tokenizers.h"
#include "testing.h"

static ds_grammar *parse(const char *text, ds_err *e) {
    ds_grammar *g = NULL;
    if (ds_grammar_parse(text, strlen(text), &g, e) != DS_OK) return NULL;
    return g;
}

/* 2: a whole sentence; 1: a prefix of one; 0: neither. */
static int judge(ds_grammar *g, const char *s, size_t n) {
    ds_matcher *m = NULL;
    ds_err e = {0};
    if (ds_matcher_new(g, &m, &e)) return -1;
    int r = ds_matcher_accept(m, s, n) ? (ds_matcher_can_end(m) ? 2 : 1) : 0;
    ds_matcher_free(m);
    return r;
}

typedef struct {
    const char *grammar;
    const char *text;
    int want; /* 2 whole, 1 prefix, 0 no */
} match_case;

static const match_case CASES[] = {
    {"root ::= \"abc\"", "abc", 2},
    {"root ::= \"abc\"", "ab", 1},
    {"root ::= \"abc\"", "abd", 0},
    {"root ::= \"abc\"", "abcd", 0},
    {"root ::= \"a\" | \"b\"", "b", 2},
    {"root ::= [a-c]+", "abcab", 2},
    {"root ::= [a-c]+", "", 1},
    {"root ::= [a-c]*", "", 2},
    {"root ::= [^a-c]", "d", 2},
    {"root ::= [^a-c]", "b", 0},
    {"root ::= [^\"\\\\]*", "x\\", 0},
    {"root ::= \"x\"? \"y\"", "y", 2},
    {"root ::= \"x\"? \"y\"", "xy", 2},
    {"root ::= [0-9]{2,3}", "1", 1},
    {"root ::= [0-9]{2,3}", "12", 2},
    {"root ::= [0-9]{2,3}", "123", 2},
    {"root ::= [0-9]{2,3}", "1234", 0},
    {"root ::= [0-9]{2}", "12", 2},
    {"root ::= [0-9]{2,}", "12345", 2},
    {"root ::= \"é\"", "\xc3\xa9", 2},
    {"root ::= \"é\"", "\xc3", 1},
    {"root ::= [à-ÿ]", "\xc3\xa9", 2},
    {"root ::= [^a]", "\xe4\xb8\xad", 2},            /* 中: three bytes, one code point */
    {"root ::= [^a]", "\xe4\xb8", 1},
    {"root ::= [^a]", "\xed\xa0\x80", 0},            /* a surrogate is not UTF-8 */
    {"root ::= .", "\xf0\x9f\x98\x80", 2},           /* 😀 */
    {"root ::= \"\\u4e2d\"", "\xe4\xb8\xad", 2},
    {"root ::= \"\\x41\\n\"", "A\n", 2},
    {"root ::= [\\x00-\\x7f]+", "abc", 2},
    {"root ::= a b\na ::= \"x\"\nb ::= \"y\"", "xy", 2},
    {"root ::= item (\",\" item)*\nitem ::= [0-9]+", "1,22,333", 2},
    {"root ::= item (\",\" item)*\nitem ::= [0-9]+", "1,,2", 0},
    {"root ::= \"(\" root \")\" | \"\"", "((()))", 2},   /* recursion in the middle */
    {"root ::= \"(\" root \")\" | \"\"", "(()", 1},
    {"root ::= \"(\" root \")\" | \"\"", "())", 0},
    {"# a comment\nroot ::= x # trailing\nx ::= \"q\"", "q", 2},
    {"root ::= (\n  \"a\"\n  | \"b\"\n)", "b", 2},      /* newlines inside a group */
    {"root ::= \"a\"\n     | \"b\"", "b", 2},            /* a rule going on with '|' */
    {"root ::= \"ab\"* \"a\"", "aba", 2},                /* ambiguity: both branches kept */
    {"root ::= \"ab\"* \"a\"", "abab", 1},
    {"root ::= x x\nx ::= \"a\"*", "aaa", 2},             /* nullable rules */
    {"root ::= (\"a\" | \"ab\") \"c\"", "abc", 2},
    {"root ::= (\"a\" | \"ab\") \"c\"", "ac", 2},
    {"root ::= [a-z]{0,3} \"!\"", "abc!", 2},
    {"root ::= [a-z]{0,3} \"!\"", "abcd", 0},
};

static void test_sentences(void) {
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        ds_err e = {0};
        ds_grammar *g = parse(CASES[i].grammar, &e);
        CHECK(g, "case %zu: %s", i, e.msg);
        if (!g) continue;
        int got = judge(g, CASES[i].text, strlen(CASES[i].text));
        CHECK(got == CASES[i].want, "case %zu: grammar %s, text '%s': got %d, want %d", i, CASES[i].grammar,
              CASES[i].text, got, CASES[i].want);
        ds_grammar_unref(g);
    }
}

typedef struct {
    const char *grammar;
    const char *needle; /* in the message */
} error_case;

static const error_case ERRORS[] = {
    {"root ::= x", "rule 'x' is used but not defined"},
    {"start ::= \"a\"", "no rule named 'root'"},
    {"root ::= root \"a\"", "left-recursive (root -> root)"},
    {"root ::= a\na ::= b? a \"x\"\nb ::= \"y\"", "left-recursive"},
    {"root ::= \"abc", "line 1, column 10: the string literal is not closed"},
    {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"},
    {"root ::= [a-", "line 1, column 10"},
    {"root ::= (\"a\"", "the group is not closed"},
    {"root ::= \"a\"{3,1}", "maximum is below its minimum"},
    {"root ::= \"a\"{99999}", "above 10000"},
    {"root ::= <think>", "token references"},
    {"root ::= \"\\q\"", "unknown escape"},
    {"root ::= [z-a]", "runs backwards"},
    {"root ::= *", "unexpected '*'"},
    {"root \"a\"", "expected '::='"},
    {"root ::= \"a\" )", "')'"},
};

static void test_errors(void) {
    for (size_t i = 0; i < sizeof ERRORS / sizeof *ERRORS; i++) {
        ds_err e = {0};
        ds_grammar *g = parse(ERRORS[i].grammar, &e);
        CHECK(!g && strstr(e.msg, ERRORS[i].needle), "case %zu: %s -> '%s' (want '%s')", i, ERRORS[i].grammar,
              g ? "parsed" : e.msg, ERRORS[i].needle);
        ds_grammar_unref(g);
    }
    ds_err e = {0};
    ds_grammar *g = NULL;
    CHECK(ds_grammar_parse("root ::= \"a\"\0", 13, &g, &e) != DS_OK && strstr(e.msg, "NUL byte at offset 12"), "%s", e.msg);
}

static void test_rollback_and_end(void) {
    ds_err e = {0};
    ds_grammar *g = parse("root ::= \"ab\" [0-9]* \"!\"", &e);
    REQUIRE(g, "%s", e.msg);
    ds_matcher *m = NULL;
    REQUIRE(ds_matcher_new(g, &m, &e) == DS_OK, "%s", e.msg);
    CHECK(ds_matcher_accept(m, "a", 1) && ds_matcher_accept(m, "b1", 2) && ds_matcher_steps(m) == 2, "steps");
    CHECK(!ds_matcher_accept(m, "x", 1) && ds_matcher_steps(m) == 2, "a refused step changes nothing");
    CHECK(ds_matcher_accept(m, "2!", 2) && ds_matcher_must_end(m) && ds_matcher_can_end(m), "complete");
    ds_matcher_rollback(m, 2);
    CHECK(ds_matcher_steps(m) == 1 && !ds_matcher_can_end(m), "rolled back to after 'a'");
    CHECK(!ds_matcher_accept(m, "1", 1) && ds_matcher_accept(m, "b!", 2) && ds_matcher_must_end(m), "again");
    ds_matcher_rollback(m, 99);
    CHECK(ds_matcher_steps(m) == 0, "rollback stops at the start");
    ds_matcher_free(m);
    ds_grammar_unref(g); /* the matcher held its own reference until freed */
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static const char *const WALK_GRAMMARS[] = {
    /* JSON-like: an object of strings, numbers and nested arrays */
    "root ::= \"{\" ws (pair (\",\" ws pair)*)? \"}\"\n"
    "pair ::= string \":\" ws value ws\n"
    "value ::= string | number | \"[\" ws (value (\",\" ws value)*)? \"]\" | \"true\" | \"false\" | \"null\"\n"
    "string ::= \"\\\"\" ([^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\/bfnrt])* \"\\\"\"\n"
    "number ::= \"-\"? ([0-9] | [1-9] [0-9]*) (\".\" [0-9]+)?\n"
    "ws ::= [ \\n]{0,2}\n",
    /* literals with shared prefixes */
    "root ::= (\"name\" | \"names\" | \"namespace\" | \"nation\") (\", \" root)?\n",
    /* free text up to a closing tag, then a fixed tail */
    "root ::= \"<a>\" [^<]* \"</a>\" \"\\n\"?\n",
    /* non-ASCII classes and bounded repetition */
    "root ::= [一-龥]{1,4} \"：\" [a-zA-Zé]{2,5} \"。\"\n",
    /* recursion */
    "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\nterm ::= [0-9]+ | \"(\" expr \")\"\n",
};

/* The allowed set by brute force: every token's bytes fed and taken back. */
static int check_mask(ds_matcher *m, const ds_tokenizer *tok, const uint32_t *bits, int n, int sample, int *n_allowed) {
    int bad = 0;
    *n_allowed = 0;
    for (int t = 0; t < n; t++) {
        size_t len = 0;
        const char *b = ds_tokenizer_token_bytes(tok, t, &len);
        int want = 0;
        if (sample > 1 && (rnd() % (uint32_t)sample) && !DS_MASK_HAS(bits, t)) continue;
        if (b && len && !ds_tokenizer_is_special(tok, t) && ds_matcher_accept(m, b, len)) {
            want = 1;
            ds_matcher_rollback(m, 1);
        }
        if (want != DS_MASK_HAS(bits, t)) {
            if (bad++ < 3) printf("#   token %d (%.*s): mask %d, matcher %d\n", t, (int)len, b ? b : "", DS_MASK_HAS(bits, t), want);
        }
        *n_allowed += want;
    }
    return bad;
}

static void test_masks_qwen3(void) {
    ds_tokenizer *tok = test_qwen3_tokenizer();
    REQUIRE(tok, "the Qwen3 tokenizer.json (npm ci in tests/tokenizer)");
    ds_err e = {0};
    ds_vocab_index *vi = NULL;
    REQUIRE(ds_vocab_index_new(tok, &vi, &e) == DS_OK, "%s", e.msg);
    int n = ds_tokenizer_n_tokens(tok);
    uint32_t *bits = malloc(DS_MASK_WORDS(n) * sizeof *bits);
    REQUIRE(bits, "oom");
    int walks = ds_test_scaled(10) > 2 ? ds_test_scaled(10) : 2;
    for (size_t gi = 0; gi < sizeof WALK_GRAMMARS / sizeof *WALK_GRAMMARS; gi++) {
        ds_grammar *g = parse(WALK_GRAMMARS[gi], &e);
        CHECK(g, "grammar %zu: %s", gi, e.msg);
        if (!g) continue;
        int steps = 0, full_checks = 0, bad = 0;
        for (int w = 0; w < walks && !bad; w++) { /* the first walk fills the caches, the others hit them */
            ds_matcher *m = NULL;
            REQUIRE(ds_matcher_new(g, &m, &e) == DS_OK, "%s", e.msg);
            for (int step = 0; step < 40 && !bad; step++) {
                memset(bits, 0, DS_MASK_WORDS(n) * sizeof *bits);
                int count = ds_matcher_fill_mask(m, vi, bits), n_allowed = 0;
                int sample = w == 0 || step % 8 == 0 ? 1 : 16;
                full_checks += sample == 1;
                bad += check_mask(m, tok, bits, n, sample, &n_allowed);
                if (sample == 1) CHECK(count == n_allowed, "grammar %zu step %d: count %d, allowed %d", gi, step, count, n_allowed);
                if (count == 0) break; /* complete */
                /* a random allowed token; now and then the shortest, to close structures */
                int32_t pick = -1, seen = 0;
                size_t best = 1000;
                int shortest = rnd() % 3 == 0;
                for (int t = 0; t < n; t++) {
                    if (!DS_MASK_HAS(bits, t)) continue;
                    size_t len = 0;
                    ds_tokenizer_token_bytes(tok, t, &len);
                    if (shortest ? len < best : rnd() % (uint32_t)(++seen) == 0) pick = t, best = len;
                }
                size_t len = 0;
                const char *b = ds_tokenizer_token_bytes(tok, pick, &len);
                CHECK(ds_matcher_accept(m, b, len), "grammar %zu: the picked token %d is refused", gi, pick);
                steps++;
                if (ds_matcher_must_end(m)) break;
            }
            ds_matcher_free(m);
        }
        CHECK(!bad, "grammar %zu: %d tokens where the mask and the matcher disagree", gi, bad);
        printf("# grammar %zu: %d steps, %d checked against the whole vocabulary, %zu cache bytes\n", gi, steps,
               full_checks, ds_grammar_bytes(g));
        ds_grammar_unref(g);
    }
    free(bits);
    ds_vocab_index_free(vi);
    ds_tokenizer_free(tok);
}

/* The filter: reasoning free until </think> (end tokens refused there), blanks, then the
 * grammar; end tokens only where it may end; drafts taken back. */
static void test_filter(void) {
    ds_tokenizer *tok = test_qwen3_tokenizer();
    REQUIRE(tok, "the Qwen3 tokenizer.json");
    ds_err e = {0};
    ds_vocab_index *vi = NULL;
    REQUIRE(ds_vocab_index_new(tok, &vi, &e) == DS_OK, "%s", e.msg);
    ds_grammar *g = parse("root ::= \"{\\\"a\\\": \" [0-9]+ \"}\"", &e);
    REQUIRE(g, "%s", e.msg);
    int n = ds_tokenizer_n_tokens(tok);
    int32_t end = ds_tokenizer_find(tok, "<|im_end|>"), think_end = ds_tokenizer_find(tok, "</think>");
    ds_grammar_filter_params p = {.grammar = g, .vocab = vi, .tok = tok, .end_ids = &end, .n_end = 1, .in_reasoning = 1};
    ds_grammar_filter *f = NULL;
    REQUIRE(ds_grammar_filter_new(&p, &f, &e) == DS_OK, "%s", e.msg);
    uint32_t *bits = calloc(DS_MASK_WORDS(n), sizeof *bits);
    int32_t ans[32];
    int na = 0;
    ans[na++] = ds_tokenizer_find(tok, "Hello");
    ds_filter_result r = ds_grammar_filter_fn(f, ans, na, bits, n);
    CHECK(r == DS_FILTER_MASK && !DS_MASK_HAS(bits, end) && DS_MASK_HAS(bits, think_end), "in the reasoning");
    ans[na++] = think_end;
    ans[na++] = ds_tokenizer_find(tok, "\xc4\x8a\xc4\x8a"); /* "\n\n" */
    memset(bits, 0, DS_MASK_WORDS(n) * sizeof *bits);
    r = ds_grammar_filter_fn(f, ans, na, bits, n);
    int32_t brace = ds_tokenizer_find(tok, "{");
    CHECK(r == DS_FILTER_MASK && DS_MASK_HAS(bits, brace) && !DS_MASK_HAS(bits, end), "after the reasoning: '{' next");
    const char *pieces[] = {"{\"", "a", "\":", "\xc4\xa0", "4", "2"};
    for (int i = 0; i < 6; i++) {
        ans[na] = ds_tokenizer_find(tok, pieces[i]);
        CHECK(ans[na] >= 0, "piece %s", pieces[i]);
        na++;
    }
    memset(bits, 0, DS_MASK_WORDS(n) * sizeof *bits);
    r = ds_grammar_filter_fn(f, ans, na, bits, n);
    int32_t close = ds_tokenizer_find(tok, "}");
    CHECK(r == DS_FILTER_MASK && DS_MASK_HAS(bits, close) && !DS_MASK_HAS(bits, end) && !DS_MASK_HAS(bits, brace), "digits");
    CHECK(!ds_grammar_filter_complete(f), "not complete");
    /* a draft "}" then the end token, then the model refuses the draft: back to the digits */
    ans[na] = close;
    memset(bits, 0, DS_MASK_WORDS(n) * sizeof *bits);
    r = ds_grammar_filter_fn(f, ans, na + 1, bits, n);
    int only_end = DS_MASK_HAS(bits, end);
    for (int t = 0; t < n; t++) only_end &= t == end || !DS_MASK_HAS(bits, t);
    CHECK(r == DS_FILTER_MASK && only_end && ds_grammar_filter_complete(f), "complete: only the end token");
    ans[na] = ds_tokenizer_find(tok, "7");
    memset(bits, 0, DS_MASK_WORDS(n) * sizeof *bits);
    r = ds_grammar_filter_fn(f, ans, na + 1, bits, n);
    CHECK(r == DS_FILTER_MASK && DS_MASK_HAS(bits, close) && !DS_MASK_HAS(bits, end) && !ds_grammar_filter_complete(f),
          "after the refused draft the filter follows the other answer");
    free(bits);
    ds_grammar_filter_free(f);
    ds_grammar_unref(g);
    ds_vocab_index_free(vi);
    ds_tokenizer_free(tok);
}

int main(void) {
    RUN(test_sentences);
    RUN(test_errors);
    RUN(test_rollback_and_end);
    RUN(test_masks_qwen3);
    RUN(test_filter);
    return ds_test_finish();
}
