/* test_grammar_mask.c - the token masks of the grammar matcher against an
 * independent path, over real-sized vocabularies.
 *
 * Random walks through GBNF grammars (JSON-like, literals, UTF-8 character
 * classes, repetition bounds, alternations with shared prefixes, recursion)
 * on the real Qwen3 tokenizer.json (151,669 tokens) and a generated
 * 248,320-token Qwen3.5-style vocabulary. At each step the bits
 * ds_matcher_fill_mask sets are compared with a per-token check that feeds
 * the token's bytes to the matcher (ds_matcher_accept) and takes them back
 * (ds_matcher_rollback): every token at some steps, a large random sample of
 * tokens and of the allowed ones at the others. must_end holds exactly when
 * no byte may follow, and then no token is allowed; a walk that may not go
 * on may end. Rollback: accepting a few tokens and taking them back gives
 * the mask, can_end and must_end of before, bit for bit. The walk draws
 * seeded random allowed tokens, leaning to ones that let the text end. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h" /* DS_MASK_WORDS, DS_MASK_HAS: the masks are the engine filter's */
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/vocab_index.h"
#include "testing.h"
#include "test_tokenizers.h"
#include "tokenizer/vocab.h"

static uint32_t rng = 2024;
static uint32_t rnd(void) { return rng = rng * 1664525u + 1013904223u, rng >> 8; }

typedef struct {
    const char *name;
    const char *gbnf;
} grammar_case;

static const grammar_case GRAMMARS[] = {
    {"json",
     "root   ::= object\n"
     "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
     "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
     "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
     "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
     "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [0-9]{0,3})? ws\n"
     "ws     ::= | \" \" | \"\\n\" [ \\t]{0,8}\n"},
    {"literals",
     "# whole words and a tool-call opening\n"
     "root ::= \"yes\" | \"no\" | \"maybe so\" | \"<tool_call>\\n{\\\"name\\\": \\\"\" (\"get_time\" | \"get_weather\") \"\\\"}\"\n"},
    {"utf8-classes",
     "root ::= [α-ωА-я一-龥]{1,5} \" \" [^a-z\\u00e9\\n]{2,4} \"é\" [\\U0001F600-\\U0001F64F]? tail\n"
     "tail ::= [\\u0080-\\u07FF]* \".\"\n"},
    {"repetition",
     "root ::= \"a\"{2,5} (\"bc\"){0,3} [0-9]{3} \"x\"{4} (\"-\" [a-z]{1,2}){1,} \";\" [A-Z]{0,}\n"},
    {"shared-prefixes",
     "root ::= (\"foo\" | \"foobar\" | \"foobaz\" | \"fo\" [a-z]) (\".\" | \"..\" | \"...\")? key \":\" key (\" \" root)?\n"
     "key  ::= \"abc\" | \"abd\" | \"ab\" | \"a\" | \"abcdef\"\n"},
    {"any-char",
     "root ::= \"<\" .{0,6} \">\" (\"'\" [^'\\u4e00-\\u9fff]* \"'\")?\n"},
    {"recursion",
     "root   ::= expr (\"\\n\" expr)?\n"
     "expr   ::= term ((\"+\" | \"-\") term)*\n"
     "term   ::= factor ((\"*\" | \"/\") factor)*\n"
     "factor ::= [0-9]+ | \"(\" ws expr ws \")\" | \"-\" factor | list\n"
     "list   ::= \"[\" item\n"
     "item   ::= \"x\" \",\" item | \"y]\"\n"
     "ws     ::= \" \"?\n"},
};
#define N_GRAMMARS (int)(sizeof GRAMMARS / sizeof GRAMMARS[0])

typedef struct {
    const char *name;
    ds_tokenizer *tok;
    ds_vocab_index *vi;
    int n;
    int sample;        /* tokens checked at a sampled step (the whole vocabulary at full steps) */
    int full_every;    /* every this many steps of the first full_walks walks, every token is checked */
    int full_walks;
} vocab_case;

static void escape(const char *b, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)b[i];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') out[o++] = (char)c;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02X", c);
    }
    out[o] = '\0';
}

/* The independent answer: whether the matcher takes t's bytes as one step (taken back at once). */
static int token_fits(ds_matcher *m, const ds_tokenizer *tok, int32_t t, int *bad_steps) {
    size_t len = 0;
    const char *b = ds_tokenizer_token_bytes(tok, t, &len);
    if (!b || len == 0 || ds_tokenizer_is_special(tok, t)) return 0; /* control tokens are not text */
    int before = ds_matcher_steps(m);
    int ok = ds_matcher_accept(m, b, len);
    if (ds_matcher_steps(m) != before + ok) ++*bad_steps;
    if (ok) ds_matcher_rollback(m, 1);
    if (ds_matcher_steps(m) != before) ++*bad_steps;
    return ok;
}

typedef struct {
    int mismatches, reported, bad_steps, bad_count, bad_end, bad_rollback, walks_ended, steps, full_steps;
    long long checked;
} tally;

static char text[8192];
static size_t text_len;

static void report(const vocab_case *vc, const grammar_case *gc, const ds_tokenizer *tok, int32_t t, int in_mask,
                   tally *ty) {
    ty->mismatches++;
    if (ty->reported++ >= 4) return;
    char pre[600], tb[200];
    size_t len = 0;
    const char *b = ds_tokenizer_token_bytes(tok, t, &len);
    escape(text, text_len, pre, sizeof pre);
    escape(b ? b : "", b ? len : 0, tb, sizeof tb);
    printf("# mismatch %s / %s: after \"%s\" token %d \"%s\": mask %d, accept %d\n", gc->name, vc->name, pre, t, tb,
           in_mask, !in_mask);
}

static int popcount_bits(const uint32_t *bits, int n) {
    int c = 0;
    for (size_t w = 0; w < DS_MASK_WORDS(n); w++) c += __builtin_popcount(bits[w]);
    return c;
}

/* Checks the matcher's mask at this step; returns how many tokens it allows. */
static int check_step(ds_matcher *m, const vocab_case *vc, const grammar_case *gc, uint32_t *bits, uint32_t *again,
                      int32_t *allowed, int full, tally *ty) {
    size_t words = DS_MASK_WORDS(vc->n);
    memset(bits, 0, words * sizeof *bits);
    int cnt = ds_matcher_fill_mask(m, vc->vi, bits);
    if (cnt != popcount_bits(bits, vc->n)) ty->bad_count++;
    int n_allowed = 0;
    for (int32_t t = 0; t < vc->n; t++)
        if (DS_MASK_HAS(bits, t)) allowed[n_allowed++] = t;
    if (full) {
        ty->full_steps++;
        for (int32_t t = 0; t < vc->n; t++) {
            int want = token_fits(m, vc->tok, t, &ty->bad_steps);
            if (want != DS_MASK_HAS(bits, t)) report(vc, gc, vc->tok, t, DS_MASK_HAS(bits, t), ty);
        }
        ty->checked += vc->n;
    } else {
        for (int i = 0; i < vc->sample; i++) { /* any tokens, then allowed ones */
            int32_t t = i % 2 || n_allowed == 0 ? (int32_t)(rnd() % (uint32_t)vc->n)
                                                : allowed[rnd() % (uint32_t)n_allowed];
            int want = token_fits(m, vc->tok, t, &ty->bad_steps);
            if (want != DS_MASK_HAS(bits, t)) report(vc, gc, vc->tok, t, DS_MASK_HAS(bits, t), ty);
        }
        ty->checked += vc->sample;
    }
    /* no byte may follow exactly when the matcher must end: then nothing is allowed, and it may end */
    int any_byte = 0;
    for (int c = 0; c < 256 && !any_byte; c++) {
        char byte = (char)c;
        if (ds_matcher_accept(m, &byte, 1)) any_byte = 1, ds_matcher_rollback(m, 1);
    }
    int must = ds_matcher_must_end(m), can = ds_matcher_can_end(m);
    if (must != !any_byte || (must && (cnt != 0 || !can)) || (!any_byte && cnt != 0)) {
        ty->bad_end++;
        if (ty->reported++ < 4) {
            char pre[600];
            escape(text, text_len, pre, sizeof pre);
            printf("# end flags %s / %s: after \"%s\": must_end %d can_end %d, a byte may follow %d, %d tokens\n",
                   gc->name, vc->name, pre, must, can, any_byte, cnt);
        }
    }
    /* the per-token checks took everything back: the mask is what it was */
    memset(again, 0, words * sizeof *again);
    ds_matcher_fill_mask(m, vc->vi, again);
    if (memcmp(bits, again, words * sizeof *bits)) ty->bad_rollback++;
    return n_allowed;
}

/* A token to walk on: random among the allowed, or, more often as the text grows, one after
 * which the text may end (from a few candidates), else the shortest of them. */
static int32_t pick(ds_matcher *m, const vocab_case *vc, const int32_t *allowed, int n_allowed, int step) {
    if ((int)(rnd() % 24) >= step) return allowed[rnd() % (uint32_t)n_allowed];
    int32_t best = -1;
    size_t best_len = (size_t)-1;
    for (int c = 0; c < 24; c++) {
        int32_t t = allowed[rnd() % (uint32_t)n_allowed];
        size_t len = 0;
        const char *b = ds_tokenizer_token_bytes(vc->tok, t, &len);
        if (!b || !ds_matcher_accept(m, b, len)) continue;
        int ends = ds_matcher_can_end(m);
        ds_matcher_rollback(m, 1);
        if (ends) return t;
        if (len < best_len) best = t, best_len = len;
    }
    return best >= 0 ? best : allowed[0];
}

static int accept_token(ds_matcher *m, const ds_tokenizer *tok, int32_t t) {
    size_t len = 0;
    const char *b = ds_tokenizer_token_bytes(tok, t, &len);
    if (!b || !ds_matcher_accept(m, b, len)) return 0;
    if (text_len + len < sizeof text) memcpy(text + text_len, b, len), text_len += len;
    return 1;
}

static void walk_vocab(vocab_case *vc, int n_walks, int max_steps) {
    size_t words = DS_MASK_WORDS(vc->n);
    uint32_t *bits = malloc(words * sizeof *bits), *again = malloc(words * sizeof *again);
    uint32_t *before = malloc(words * sizeof *before);
    int32_t *allowed = malloc((size_t)vc->n * sizeof *allowed);
    REQUIRE(bits && again && before && allowed, "out of memory");
    for (int gi = 0; gi < N_GRAMMARS; gi++) {
        const grammar_case *gc = &GRAMMARS[gi];
        ds_grammar *g = NULL;
        ds_err e = {0};
        if (ds_grammar_parse(gc->gbnf, strlen(gc->gbnf), &g, &e)) {
            CHECK(0, "%s: %s", gc->name, e.msg);
            continue;
        }
        tally ty = {0};
        int not_taken = 0, stuck = 0;
        for (int w = 0; w < n_walks; w++) { /* the later walks find the grammar's caches filled */
            ds_matcher *m = NULL;
            if (ds_matcher_new(g, &m, &e)) {
                CHECK(0, "%s: %s", gc->name, e.msg);
                break;
            }
            text_len = 0;
            int step = 0, ended = 0;
            for (; step < max_steps; step++) {
                ty.steps++;
                int full = step % vc->full_every == 0 && w < vc->full_walks;
                int n_allowed = check_step(m, vc, gc, bits, again, allowed, full, &ty);
                if (n_allowed == 0) { ended = ds_matcher_can_end(m); stuck += !ended; break; }
                if (ds_matcher_can_end(m) && rnd() % 4 == 0) { ended = 1; break; }
                if (rnd() % 4 == 0) { /* rollback: a few tokens on, then back */
                    memcpy(before, bits, words * sizeof *bits);
                    int can = ds_matcher_can_end(m), must = ds_matcher_must_end(m), steps = ds_matcher_steps(m);
                    int k = 1 + (int)(rnd() % 4), took = 0;
                    size_t saved_len = text_len;
                    for (int i = 0; i < k; i++) {
                        memset(again, 0, words * sizeof *again);
                        if (ds_matcher_fill_mask(m, vc->vi, again) == 0) break;
                        int n_a = 0;
                        for (int32_t t = 0; t < vc->n && n_a < 4096; t++)
                            if (DS_MASK_HAS(again, t)) allowed[n_a++] = t;
                        if (!accept_token(m, vc->tok, allowed[rnd() % (uint32_t)n_a])) { not_taken++; break; }
                        took++;
                    }
                    ds_matcher_rollback(m, took);
                    text_len = saved_len;
                    memset(again, 0, words * sizeof *again);
                    ds_matcher_fill_mask(m, vc->vi, again);
                    if (memcmp(before, again, words * sizeof *again) || can != ds_matcher_can_end(m) ||
                        must != ds_matcher_must_end(m) || steps != ds_matcher_steps(m))
                        ty.bad_rollback++;
                    /* the allowed list was overwritten: refill it */
                    n_allowed = 0;
                    for (int32_t t = 0; t < vc->n; t++)
                        if (DS_MASK_HAS(bits, t)) allowed[n_allowed++] = t;
                }
                int32_t t = pick(m, vc, allowed, n_allowed, step);
                if (!accept_token(m, vc->tok, t)) { not_taken++; break; }
            }
            ty.walks_ended += ended;
            ds_matcher_free(m);
        }
        printf("     %s / %s: %d walks (%d ended), %d steps (%d over every token), %lld tokens checked; "
               "%d mismatches\n", gc->name, vc->name, n_walks, ty.walks_ended, ty.steps, ty.full_steps, ty.checked,
               ty.mismatches);
        CHECK(ty.mismatches == 0, "%s / %s: %d tokens where the mask and accepting the token disagree", gc->name,
              vc->name, ty.mismatches);
        CHECK(ty.bad_count == 0, "%s / %s: fill_mask's count differs from its bits %d times", gc->name, vc->name,
              ty.bad_count);
        CHECK(ty.bad_steps == 0, "%s / %s: accept / rollback counted steps wrong %d times", gc->name, vc->name,
              ty.bad_steps);
        CHECK(ty.bad_end == 0, "%s / %s: must_end / can_end inconsistent %d times", gc->name, vc->name, ty.bad_end);
        CHECK(ty.bad_rollback == 0, "%s / %s: %d rollbacks did not restore the mask and end flags", gc->name,
              vc->name, ty.bad_rollback);
        CHECK(not_taken == 0, "%s / %s: %d allowed tokens were refused by accept", gc->name, vc->name, not_taken);
        CHECK(stuck == 0, "%s / %s: %d walks reached a state with no token allowed that may not end", gc->name,
              vc->name, stuck);
        CHECK(ty.walks_ended > 0, "%s / %s: no walk ended: the walks test little of the grammar", gc->name, vc->name);
        ds_grammar_unref(g);
    }
    free(bits);
    free(again);
    free(before);
    free(allowed);
}

static int open_index(vocab_case *vc) {
    ds_err e = {0};
    if (!vc->tok) return -1;
    if (ds_vocab_index_new(vc->tok, &vc->vi, &e)) { printf("# %s: %s\n", vc->name, e.msg); return -1; }
    vc->n = ds_vocab_index_n_tokens(vc->vi);
    return 0;
}

static void test_walks_qwen3(void) {
    vocab_case vc = {.name = "qwen3", .tok = test_qwen3_tokenizer(), .sample = 4000, .full_every = 6, .full_walks = 3};
    REQUIRE(vc.tok, "the Qwen3 tokenizer.json is not installed (make test installs it)");
    if (open_index(&vc)) { ds_tokenizer_free(vc.tok); REQUIRE(0, "vocab index"); }
    CHECK(vc.n == ds_tokenizer_n_tokens(vc.tok), "the index has %d tokens, the tokenizer %d", vc.n,
          ds_tokenizer_n_tokens(vc.tok));
    walk_vocab(&vc, ds_test_scaled(12) < 3 ? 3 : ds_test_scaled(12), 60);
    ds_vocab_index_free(vc.vi);
    ds_tokenizer_free(vc.tok);
}

/* the Qwen3.5 vocabulary's size: 248,044 regular tokens padded with added ones to 248,320 */
static void test_walks_generated_248k(void) {
    ds_vocab v;
    ds_err e = {0};
    vocab_case vc = {.name = "generated-248k", .sample = 4000, .full_every = 12, .full_walks = 2};
    REQUIRE(ds_vocab_generate(&v, 248044, &e) == DS_OK, "%s", e.msg);
    if (ds_vocab_pad(&v, 248320, &e)) {
        ds_vocab_free(&v);
        REQUIRE(0, "%s", e.msg);
    }
    REQUIRE(ds_tokenizer_from_vocab(&v, &vc.tok, &e) == DS_OK, "%s", e.msg);
    if (open_index(&vc)) { ds_tokenizer_free(vc.tok); REQUIRE(0, "vocab index"); }
    CHECK(vc.n == 248320, "the index has %d tokens", vc.n);
    walk_vocab(&vc, ds_test_scaled(12) < 3 ? 3 : ds_test_scaled(12), 60);
    ds_vocab_index_free(vc.vi);
    ds_tokenizer_free(vc.tok);
}

int main(void) {
    RUN(test_walks_qwen3);
    RUN(test_walks_generated_248k);
    return ds_test_finish();
}
