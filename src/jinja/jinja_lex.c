/* jinja_lex.c - template text to tokens, as @huggingface/jinja's lexer.ts does.
 *
 * Before tokenizing, the text goes through HF's preprocess() (which is where
 * its trim_blocks / lstrip_blocks live, as regular expressions over the whole
 * text, string literals included):
 *   1. one trailing "\n" is dropped;
 *   2. lstrip_blocks: spaces and tabs from a line start up to "{#", "{%" or "{-" go;
 *   3. trim_blocks: the "\n" right after "#}", "%}" or "-}" goes;
 *   4. transformers' {% generation %} / {% endgeneration %} tags go, with the
 *      whitespace around them unless the tag has a "-" on that side.
 * Each step keeps, per byte, its offset in the original text, so that errors
 * name the line and column the author sees. */
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_int.h"

typedef struct {
    char *s;
    uint32_t *orig;   /* orig[i]: offset in the original text; orig[n] = its length */
    size_t n;
} ptext;

static int ptext_alloc(jarena *a, ptext *t, size_t cap) {
    t->s = ds_jinja_arena_alloc(a, cap + 1);
    t->orig = ds_jinja_arena_alloc(a, (cap + 1) * sizeof *t->orig);
    t->n = 0;
    return t->s && t->orig ? 0 : -1;
}

static void ptext_push(ptext *t, const ptext *from, size_t i) {
    t->s[t->n] = from->s[i];
    t->orig[t->n++] = from->orig[i];
}

static void ptext_end(ptext *t, const ptext *from) {
    t->s[t->n] = '\0';
    t->orig[t->n] = from->orig[from->n];
}

/* JavaScript's multiline ^ matches after \n, \r, U+2028 and U+2029. */
static int line_start(const ptext *t, size_t i) {
    if (i == 0) return 1;
    char c = t->s[i - 1];
    if (c == '\n' || c == '\r') return 1;
    return i >= 3 && (uint8_t)t->s[i - 3] == 0xE2 && (uint8_t)t->s[i - 2] == 0x80 &&
           ((uint8_t)t->s[i - 1] == 0xA8 || (uint8_t)t->s[i - 1] == 0xA9);
}

/* template.replace(/^[ \t]*({[#%-])/gm, "$1") */
static void lstrip_blocks(const ptext *in, ptext *out) {
    for (size_t i = 0; i < in->n;) {
        if (line_start(in, i)) {
            size_t j = i;
            while (j < in->n && (in->s[j] == ' ' || in->s[j] == '\t')) j++;
            if (j + 1 < in->n && in->s[j] == '{' && in->s[j + 1] && strchr("#%-", in->s[j + 1])) {
                ptext_push(out, in, j);
                ptext_push(out, in, j + 1);
                i = j + 2;
                continue;
            }
        }
        ptext_push(out, in, i++);
    }
    ptext_end(out, in);
}

/* template.replace(/([#%-]})\n/g, "$1") */
static void trim_blocks(const ptext *in, ptext *out) {
    for (size_t i = 0; i < in->n;) {
        if (i + 2 < in->n && (in->s[i] == '#' || in->s[i] == '%' || in->s[i] == '-') && in->s[i + 1] == '}' &&
            in->s[i + 2] == '\n') {
            ptext_push(out, in, i);
            ptext_push(out, in, i + 1);
            i += 3;
            continue;
        }
        ptext_push(out, in, i++);
    }
    ptext_end(out, in);
}

/* At i, "{%-? *(end)?generation *-?%}" (with JavaScript's \s for the spaces):
 * the tag's end, and whether it strips on the left and on the right. */
static size_t generation_tag(const ptext *t, size_t i, int *lstrip, int *rstrip) {
    const char *p = t->s + i, *end = t->s + t->n;
    if (end - p < 2 || p[0] != '{' || p[1] != '%') return 0;
    p += 2;
    *lstrip = p < end && *p == '-';
    if (*lstrip) p++;
    for (size_t w; (w = ds_jinja_str_ws_at(p, end)) > 0;) p += w;
    if (end - p >= 3 && !memcmp(p, "end", 3)) p += 3;
    if (end - p < 10 || memcmp(p, "generation", 10) != 0) return 0;
    p += 10;
    for (size_t w; (w = ds_jinja_str_ws_at(p, end)) > 0;) p += w;
    *rstrip = p < end && *p == '-';
    if (*rstrip) p++;
    if (end - p < 2 || p[0] != '%' || p[1] != '}') return 0;
    return (size_t)(p + 2 - t->s);
}

/* template.replace(/(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs, ...) */
static void drop_generation_tags(const ptext *in, ptext *out) {
    size_t ws_from = 0;   /* where the whitespace run just copied to out began (in out) */
    int in_ws_run = 0;
    for (size_t i = 0; i < in->n;) {
        int ls, rs;
        size_t end = in->s[i] == '{' ? generation_tag(in, i, &ls, &rs) : 0;
        if (end) {
            if (ls && in_ws_run) out->n = ws_from;
            i = end;
            size_t after = i;
            for (size_t w; (w = ds_jinja_str_ws_at(in->s + after, in->s + in->n)) > 0;) after += w;
            if (!rs)
                while (i < after) ptext_push(out, in, i++);
            i = after;
            in_ws_run = 0;   /* the match ate the run; the next one starts fresh */
            continue;
        }
        size_t w = ds_jinja_str_ws_at(in->s + i, in->s + in->n);
        if (w) {
            if (!in_ws_run) ws_from = out->n;
            in_ws_run = 1;
            while (w--) ptext_push(out, in, i++);
        } else {
            in_ws_run = 0;
            ptext_push(out, in, i++);
        }
    }
    ptext_end(out, in);
}

static ds_status preprocess(jarena *a, const char *src, size_t n, ptext *out, ds_err *e) {
    ptext t0, t1;
    if (ptext_alloc(a, &t0, n)) return ds_fail(e, DS_ENOMEM, "template: out of memory");
    memcpy(t0.s, src, n);
    for (size_t i = 0; i <= n; i++) t0.orig[i] = (uint32_t)i;
    t0.n = n;
    if (t0.n && t0.s[t0.n - 1] == '\n') t0.n--;
    t0.orig[t0.n] = (uint32_t)t0.n;
    t0.s[t0.n] = '\0';
    if (ptext_alloc(a, &t1, t0.n)) return ds_fail(e, DS_ENOMEM, "template: out of memory");
    lstrip_blocks(&t0, &t1);
    if (ptext_alloc(a, &t0, t1.n)) return ds_fail(e, DS_ENOMEM, "template: out of memory");
    trim_blocks(&t1, &t0);
    if (ptext_alloc(a, &t1, t0.n)) return ds_fail(e, DS_ENOMEM, "template: out of memory");
    drop_generation_tags(&t0, &t1);
    *out = t1;
    return DS_OK;
}

/* --- tokenizer --- */

typedef struct {
    jarena *a;
    const char *orig_src;
    size_t orig_n;
    ptext t;
    size_t pos;
    jtok *toks;
    size_t n, cap;
    ds_err *e;
} lexer;

static ds_status lex_fail(lexer *L, size_t at, const char *what) {
    int line, col;
    ds_jinja_line_col(L->orig_src, L->orig_n, L->t.orig[at < L->t.n ? at : L->t.n], &line, &col);
    return ds_fail(L->e, DS_ECORRUPT, "template:%d:%d: %s", line, col, what);
}

static ds_status push(lexer *L, int type, size_t at, const char *p, size_t n) {
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jtok *t = ds_jinja_arena_grow(L->a, L->toks, L->cap * sizeof *t, cap * sizeof *t);
        if (!t) return ds_fail(L->e, DS_ENOMEM, "template: out of memory");
        L->toks = t;
        L->cap = cap;
    }
    jtok *t = &L->toks[L->n++];
    t->type = (uint8_t)type;
    t->pos = L->t.orig[at < L->t.n ? at : L->t.n];
    t->v.p = p;
    t->v.n = n;
    return DS_OK;
}

static int last_type(const lexer *L) { return L->n ? L->toks[L->n - 1].type : -1; }

static void strip_trailing_ws(lexer *L) {
    if (!L->n || L->toks[L->n - 1].type != T_TEXT) return;
    jtok *t = &L->toks[L->n - 1];
    t->v = ds_jinja_str_trim(t->v, 0, 1);
    if (t->v.n == 0) L->n--;
}

static void skip_ws(lexer *L) {
    for (size_t w; (w = ds_jinja_str_ws_at(L->t.s + L->pos, L->t.s + L->t.n)) > 0;) L->pos += w;
}

static int starts(const lexer *L, const char *z) {
    size_t k = strlen(z);
    return L->pos + k <= L->t.n && !memcmp(L->t.s + L->pos, z, k);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A quoted string; escapes as lexer.ts's ESCAPE_CHARACTERS, \xHH and \uHHHH
 * (a UTF-16 code unit: a \u pair of surrogates makes one character). */
static ds_status lex_string(lexer *L) {
    size_t start = L->pos;
    char q = L->t.s[L->pos++];
    char *out = ds_jinja_arena_alloc(L->a, L->t.n - L->pos + 1);   /* decoding never grows the text */
    if (!out) return ds_fail(L->e, DS_ENOMEM, "template: out of memory");
    size_t n = 0;
    uint32_t pending_hi = 0;   /* a \u high surrogate waiting for its low half */
    for (;;) {
        if (L->pos >= L->t.n) return lex_fail(L, start, "unterminated string literal");
        char c = L->t.s[L->pos];
        if (c == q) break;
        uint32_t unit = 0;
        int is_unit = 0;
        if (c == '\\') {
            if (++L->pos >= L->t.n) return lex_fail(L, start, "unterminated string literal");
            char x = L->t.s[L->pos++];
            if (x == 'x' || x == 'u') {
                int len = x == 'x' ? 2 : 4;
                if (L->pos + (size_t)len > L->t.n) return lex_fail(L, L->pos - 2, "bad hexadecimal escape");
                for (int k = 0; k < len; k++) {
                    int h = hexval(L->t.s[L->pos + (size_t)k]);
                    if (h < 0) return lex_fail(L, L->pos - 2, "bad hexadecimal escape");
                    unit = unit * 16 + (uint32_t)h;
                }
                L->pos += (size_t)len;
                is_unit = 1;
            } else {
                const char *from = "ntrbfv'\"\\", *to = "\n\t\r\b\f\v'\"\\";
                const char *hit = strchr(from, x);
                if (!hit || !x) return lex_fail(L, L->pos - 2, "unknown escape in string literal");
                unit = (uint8_t)to[hit - from];
                is_unit = 1;
            }
        }
        if (pending_hi) {
            if (is_unit && unit >= 0xDC00 && unit <= 0xDFFF) {
                n -= 3;   /* replace the lone high half written before */
                n += ds_jinja_wtf8_encode(0x10000 + ((pending_hi - 0xD800) << 10) + (unit - 0xDC00), out + n);
                pending_hi = 0;
                continue;
            }
            pending_hi = 0;
        }
        if (is_unit) {
            n += ds_jinja_wtf8_encode(unit, out + n);
            if (unit >= 0xD800 && unit <= 0xDBFF) pending_hi = unit;
        } else {
            out[n++] = c;
            L->pos++;
        }
    }
    L->pos++;   /* the closing quote */
    out[n] = '\0';
    return push(L, T_STR, start, out, n);
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_word(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

static const struct {
    const char *seq;
    int type;
} TABLE[] = {
    {"{%", T_OPEN_STMT}, {"%}", T_CLOSE_STMT}, {"{{", T_OPEN_EXPR}, {"}}", T_CLOSE_EXPR},
    {"(", T_LPAREN},     {")", T_RPAREN},      {"{", T_LBRACE},     {"}", T_RBRACE},
    {"[", T_LBRACKET},   {"]", T_RBRACKET},    {",", T_COMMA},      {".", T_DOT},
    {":", T_COLON},      {"|", T_PIPE},        {"<=", T_CMP},       {">=", T_CMP},
    {"==", T_CMP},       {"!=", T_CMP},        {"<", T_CMP},        {">", T_CMP},
    {"+", T_ADD},        {"-", T_ADD},         {"~", T_ADD},        {"**", T_POW},
    {"*", T_MUL},        {"//", T_MUL},        {"/", T_MUL},        {"%", T_MUL},
    {"=", T_EQUALS},
};

static ds_status lex_comment(lexer *L) {
    size_t start = L->pos;
    L->pos += 2;
    int strip_before = L->pos < L->t.n && L->t.s[L->pos] == '-';
    if (strip_before) L->pos++;
    size_t from = L->pos;
    while (!(L->pos + 1 < L->t.n && L->t.s[L->pos] == '#' && L->t.s[L->pos + 1] == '}')) {
        if (L->pos + 2 >= L->t.n) return lex_fail(L, start, "unterminated comment");
        L->pos++;
    }
    size_t len = L->pos - from;
    int strip_after = len > 0 && L->t.s[L->pos - 1] == '-';
    if (strip_after) len--;
    if (strip_before) strip_trailing_ws(L);
    ds_status s = push(L, T_COMMENT, start, L->t.s + from, len);
    if (s) return s;
    L->pos += 2;
    if (strip_after) skip_ws(L);
    return DS_OK;
}

static ds_status lex_all(lexer *L) {
    int curly = 0;
    ds_status s;
    while (L->pos < L->t.n) {
        int last = last_type(L);
        if (last == -1 || last == T_CLOSE_STMT || last == T_CLOSE_EXPR || last == T_COMMENT) {
            size_t from = L->pos;
            while (L->pos < L->t.n &&
                   !(L->t.s[L->pos] == '{' && L->pos + 1 < L->t.n &&
                     (L->t.s[L->pos + 1] == '%' || L->t.s[L->pos + 1] == '{' || L->t.s[L->pos + 1] == '#')))
                L->pos++;
            if (L->pos > from) {
                if ((s = push(L, T_TEXT, from, L->t.s + from, L->pos - from))) return s;
                continue;
            }
        }
        if (starts(L, "{#")) {
            if ((s = lex_comment(L))) return s;
            continue;
        }
        if (starts(L, "{%-") || starts(L, "{{-")) {
            int stmt = L->t.s[L->pos + 1] == '%';
            strip_trailing_ws(L);
            if ((s = push(L, stmt ? T_OPEN_STMT : T_OPEN_EXPR, L->pos, L->t.s + L->pos, 2))) return s;
            if (!stmt) curly = 0;
            L->pos += 3;
            continue;
        }
        skip_ws(L);
        if (L->pos >= L->t.n) return lex_fail(L, L->pos, "unexpected end of template inside a tag");
        if (starts(L, "-%}") || starts(L, "-}}")) {
            int stmt = L->t.s[L->pos + 1] == '%';
            if ((s = push(L, stmt ? T_CLOSE_STMT : T_CLOSE_EXPR, L->pos, L->t.s + L->pos + 1, 2))) return s;
            L->pos += 3;
            skip_ws(L);
            continue;
        }
        char c = L->t.s[L->pos];
        if (c == '-' || c == '+') {
            last = last_type(L);
            if (last == -1 || last == T_TEXT) return lex_fail(L, L->pos, "unexpected sign");
            if (!(last == T_IDENT || last == T_NUM || last == T_STR || last == T_RPAREN || last == T_RBRACKET)) {
                /* a sign, taken into the number it precedes: -1 is one literal */
                size_t from = L->pos++;
                while (L->pos < L->t.n && is_digit(L->t.s[L->pos])) L->pos++;
                int has_digits = L->pos > from + 1;
                if (has_digits && L->pos + 1 < L->t.n && L->t.s[L->pos] == '.' && is_digit(L->t.s[L->pos + 1])) {
                    L->pos++;
                    while (L->pos < L->t.n && is_digit(L->t.s[L->pos])) L->pos++;
                }
                if ((s = push(L, has_digits ? T_NUM : T_UNARY, from, L->t.s + from, L->pos - from))) return s;
                continue;
            }
        }
        int matched = 0;
        for (size_t k = 0; k < sizeof TABLE / sizeof TABLE[0]; k++) {
            if (TABLE[k].type == T_CLOSE_EXPR && curly > 0) continue;
            if (!starts(L, TABLE[k].seq)) continue;
            size_t len = strlen(TABLE[k].seq);
            if ((s = push(L, TABLE[k].type, L->pos, L->t.s + L->pos, len))) return s;
            if (TABLE[k].type == T_OPEN_EXPR) curly = 0;
            else if (TABLE[k].type == T_LBRACE) curly++;
            else if (TABLE[k].type == T_RBRACE) curly--;
            L->pos += len;
            matched = 1;
            break;
        }
        if (matched) continue;
        if (c == '\'' || c == '"') {
            if ((s = lex_string(L))) return s;
            continue;
        }
        if (is_digit(c)) {
            size_t from = L->pos;
            while (L->pos < L->t.n && is_digit(L->t.s[L->pos])) L->pos++;
            if (last_type(L) != T_DOT && L->pos + 1 < L->t.n && L->t.s[L->pos] == '.' &&
                is_digit(L->t.s[L->pos + 1])) {
                L->pos++;
                while (L->pos < L->t.n && is_digit(L->t.s[L->pos])) L->pos++;
            }
            if ((s = push(L, T_NUM, from, L->t.s + from, L->pos - from))) return s;
            continue;
        }
        if (is_word(c)) {
            size_t from = L->pos;
            while (L->pos < L->t.n && is_word(L->t.s[L->pos])) L->pos++;
            if ((s = push(L, T_IDENT, from, L->t.s + from, L->pos - from))) return s;
            continue;
        }
        return lex_fail(L, L->pos, "unexpected character");
    }
    return push(L, T_EOF, L->t.n, L->t.s + L->t.n, 0);
}

ds_status ds_jinja_lex(jarena *a, const char *src, size_t n, jtok **out, size_t *n_out, ds_err *e) {
    lexer L = {.a = a, .orig_src = src, .orig_n = n, .e = e};
    ds_status s = preprocess(a, src, n, &L.t, e);
    if (s) return s;
    if ((s = lex_all(&L))) return s;
    *out = L.toks;
    *n_out = L.n;
    return DS_OK;
}
