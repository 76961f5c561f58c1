/* regex.c - see regex.h.
 *
 * The pattern is parsed into a small tree (alternation, sequence, repetition,
 * sets of code points) and the tree is written out as one GBNF rule. Sets are
 * sorted lists of code point ranges, so that negation, \D inside a class and
 * the JSON split (" \ and control characters take escaped forms) are exact.
 * See regex.h for \d \w \s and their negations. */
#include "grammar/regex.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf_text.h"

#define MAX_REPEAT 1000
#define MAX_DEPTH 200

typedef struct { uint32_t lo, hi; } range;
typedef struct { range *r; int n, cap; } cset;

typedef enum { N_SET, N_SEQ, N_ALT, N_REP } node_kind;
typedef struct node {
    node_kind kind;
    cset set;           /* N_SET */
    struct node **kid;  /* N_SEQ, N_ALT: kids; N_REP: kid[0] */
    int n_kid, cap_kid;
    int min, max;       /* N_REP; max -1: unbounded */
} node;

typedef struct {
    const char *s;
    size_t n, pos;
    int depth, oom;
    ds_err *e;
    ds_status st;
} parser;

static void node_free(node *x) {
    if (!x) return;
    for (int i = 0; i < x->n_kid; i++) node_free(x->kid[i]);
    free(x->kid);
    free(x->set.r);
    free(x);
}

static node *node_new(parser *p, node_kind k) {
    node *x = calloc(1, sizeof *x);
    if (!x) p->oom = 1;
    else x->kind = k;
    return x;
}

static int add_kid(parser *p, node *x, node *k) {
    if (x->n_kid == x->cap_kid) {
        int cap = x->cap_kid ? 2 * x->cap_kid : 4;
        node **kid = realloc(x->kid, (size_t)cap * sizeof *kid);
        if (!kid) { p->oom = 1; node_free(k); return 0; }
        x->kid = kid, x->cap_kid = cap;
    }
    x->kid[x->n_kid++] = k;
    return 1;
}

static int set_add(parser *p, cset *s, uint32_t lo, uint32_t hi) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 4;
        range *r = realloc(s->r, (size_t)cap * sizeof *r);
        if (!r) { p->oom = 1; return 0; }
        s->r = r, s->cap = cap;
    }
    s->r[s->n++] = (range){lo, hi};
    return 1;
}

static int cmp_range(const void *a, const void *b) {
    const range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges overlapping or touching ranges. */
static void set_normalize(cset *s) {
    if (s->n < 2) return;
    qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_range);
    int k = 0;
    for (int i = 1; i < s->n; i++) {
        if (s->r[i].lo <= s->r[k].hi + 1) { if (s->r[i].hi > s->r[k].hi) s->r[k].hi = s->r[i].hi; }
        else s->r[++k] = s->r[i];
    }
    s->n = k + 1;
}

/* The code points (surrogates excluded: they are not text) that s lacks. */
static int set_negate(parser *p, cset *s) {
    set_normalize(s);
    cset o = {0};
    uint32_t next = 0;
    int ok = 1;
    for (int i = 0; i <= s->n && ok; i++) {
        uint32_t lo = i < s->n ? s->r[i].lo : 0x110000;
        if (lo > next) {
            uint32_t hi = lo - 1;
            if (next < 0xD800 && hi >= 0xD800) {
                ok = set_add(p, &o, next, 0xD7FF) && (hi < 0xE000 || set_add(p, &o, 0xE000, hi));
            } else if (!(next >= 0xD800 && hi < 0xE000)) {
                ok = set_add(p, &o, next >= 0xD800 && next < 0xE000 ? 0xE000 : next, hi);
            }
        }
        if (i < s->n) next = s->r[i].hi + 1;
    }
    free(s->r);
    *s = o;
    return ok;
}

static ds_status fail(parser *p, ds_status code, const char *what) {
    if (p->st == DS_OK) p->st = ds_fail(p->e, code, "regex: %s at byte %zu", what, p->pos);
    return p->st;
}

/* \d \w \s: their ASCII members, which every engine agrees on. */
static int add_class_escape(parser *p, cset *s, char c) {
    switch (c) {
    case 'd': case 'D': return set_add(p, s, '0', '9');
    case 'w': case 'W':
        return set_add(p, s, '0', '9') && set_add(p, s, 'A', 'Z') && set_add(p, s, '_', '_') &&
               set_add(p, s, 'a', 'z');
    default: return set_add(p, s, '\t', '\r') && set_add(p, s, ' ', ' '); /* s S */
    }
}

/* The code points that some engine (Python's str patterns, ECMAScript)
 * counts as whitespace beyond ASCII's: a negated \s must leave them out. */
static int add_wide_space(parser *p, cset *s) {
    static const uint32_t R[][2] = {{0x1C, 0x1F}, {0x85, 0x85}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                    {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) if (!set_add(p, s, R[i][0], R[i][1])) return 0;
    return 1;
}

/* Keeps the ASCII part of s. */
static void set_ascii(cset *s) {
    int k = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i].lo > 0x7F) continue;
        s->r[k] = s->r[i];
        if (s->r[k].hi > 0x7F) s->r[k].hi = 0x7F;
        k++;
    }
    s->n = k;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int read_hex(parser *p, int digits, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        if (p->pos >= p->n || hexval(p->s[p->pos]) < 0) { fail(p, DS_EINVAL, "bad hexadecimal escape"); return 0; }
        v = v << 4 | (uint32_t)hexval(p->s[p->pos++]);
    }
    *out = v;
    return 1;
}

/* After a backslash: one code point into *cp (returns 1), a class escape into
 * s (returns 2), or an error (returns 0). in_class: \b is a backspace there. */
static int parse_escape(parser *p, int in_class, uint32_t *cp, cset *s) {
    if (p->pos >= p->n) { fail(p, DS_EINVAL, "pattern ends with a backslash"); return 0; }
    size_t at = p->pos;
    char c = p->s[p->pos++];
    switch (c) {
    case 'd': case 'w': case 's': return add_class_escape(p, s, c) ? 2 : 0;
    case 'D': case 'W': case 'S': { /* the ASCII characters that are not \d \w \s (see regex.h) */
        cset t = {0};
        if (!add_class_escape(p, &t, c) || (c == 'S' && !set_add(p, &t, 0x1C, 0x1F)) || !set_negate(p, &t)) {
            free(t.r);
            return 0;
        }
        set_ascii(&t);
        int ok = 1;
        for (int i = 0; i < t.n && ok; i++) ok = set_add(p, s, t.r[i].lo, t.r[i].hi);
        free(t.r);
        return ok ? 2 : 0;
    }
    case 'n': *cp = '\n'; return 1;
    case 't': *cp = '\t'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'v': *cp = '\v'; return 1;
    case 'a': *cp = 7; return 1;
    case '0':
        if (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '7') break;
        *cp = 0;
        return 1;
    case 'x': return read_hex(p, 2, cp);
    case 'U': if (!read_hex(p, 8, cp)) return 0; goto check;
    case 'u':
        if (p->pos < p->n && p->s[p->pos] == '{') {
            p->pos++;
            uint32_t v = 0;
            int nd = 0;
            while (p->pos < p->n && hexval(p->s[p->pos]) >= 0 && nd < 7) v = v << 4 | (uint32_t)hexval(p->s[p->pos++]), nd++;
            if (!nd || p->pos >= p->n || p->s[p->pos] != '}') { fail(p, DS_EINVAL, "bad \\u{...} escape"); return 0; }
            p->pos++;
            *cp = v;
        } else if (!read_hex(p, 4, cp)) return 0;
    check:
        if (*cp > 0x10FFFF || (*cp >= 0xD800 && *cp < 0xE000)) {
            p->pos = at - 1;
            fail(p, DS_EINVAL, "escape is not a Unicode scalar value");
            return 0;
        }
        return 1;
    case 'b':
        if (in_class) { *cp = 8; return 1; }
        break;
    default:
        if ((unsigned char)c >= 0x80 || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) {
            int used;
            int32_t v = ds_utf8_decode(p->s + at, p->n - at, &used);
            if (v < 0) { p->pos = at; fail(p, DS_EINVAL, "bytes that are not UTF-8"); return 0; }
            p->pos = at + (size_t)used;
            *cp = (uint32_t)v;
            return 1;
        }
    }
    p->pos = at - 1;
    if (c >= '1' && c <= '9') fail(p, DS_EUNSUPPORTED, "backreference (not supported)");
    else if (c == 'b' || c == 'B' || c == 'A' || c == 'Z' || c == 'z' || c == 'G')
        fail(p, DS_EUNSUPPORTED, "anchor escape (not supported)");
    else fail(p, DS_EUNSUPPORTED, "unsupported escape");
    return 0;
}

static node *set_node(parser *p, uint32_t lo, uint32_t hi) {
    node *x = node_new(p, N_SET);
    if (x && !set_add(p, &x->set, lo, hi)) { node_free(x); return NULL; }
    return x;
}

static int next_cp(parser *p, uint32_t *cp) {
    int used;
    int32_t v = ds_utf8_decode(p->s + p->pos, p->n - p->pos, &used);
    if (v < 0) { fail(p, DS_EINVAL, "bytes that are not UTF-8"); return 0; }
    p->pos += (size_t)used;
    *cp = (uint32_t)v;
    return 1;
}

static node *parse_class(parser *p) {
    size_t open = p->pos++;
    node *x = node_new(p, N_SET);
    if (!x) return NULL;
    int neg = p->pos < p->n && p->s[p->pos] == '^';
    if (neg) p->pos++;
    int first = 1, ascii_only = 0;
    for (;;) {
        if (p->pos >= p->n) { p->pos = open; fail(p, DS_EINVAL, "unterminated character class"); goto bad; }
        if (p->s[p->pos] == ']' && !first) { p->pos++; break; }
        first = 0;
        uint32_t lo, hi;
        int k;
        if (p->s[p->pos] == '\\') {
            p->pos++;
            char esc = p->pos < p->n ? p->s[p->pos] : 0;
            if (!(k = parse_escape(p, 1, &lo, &x->set))) goto bad;
            if (k == 2) {
                if ((esc == 's' || esc == 'S') && neg && !add_wide_space(p, &x->set)) goto bad;
                ascii_only |= esc != 's';
                continue;
            }
        } else if (!next_cp(p, &lo)) goto bad;
        hi = lo;
        if (p->pos + 1 < p->n && p->s[p->pos] == '-' && p->s[p->pos + 1] != ']') {
            size_t dash = p->pos++;
            cset dummy = {0};
            if (p->s[p->pos] == '\\') {
                p->pos++;
                k = parse_escape(p, 1, &hi, &dummy);
                free(dummy.r);
                if (!k) goto bad;
                if (k == 2) { p->pos = dash; fail(p, DS_EINVAL, "bad character range"); goto bad; }
            } else if (!next_cp(p, &hi)) goto bad;
            if (hi < lo) { p->pos = dash; fail(p, DS_EINVAL, "character range out of order"); goto bad; }
        }
        if (!set_add(p, &x->set, lo, hi)) goto bad;
    }
    if (neg ? !set_negate(p, &x->set) : (set_normalize(&x->set), 0)) goto bad;
    /* [^\d] and the like: Python counts non-ASCII digits and letters in \d \w, ECMAScript does not */
    if (neg && ascii_only) set_ascii(&x->set);
    if (x->set.n == 0) { p->pos = open; fail(p, DS_EUNSUPPORTED, "character class that matches nothing"); goto bad; }
    return x;
bad:
    node_free(x);
    return NULL;
}

static node *parse_alt(parser *p, int top);

static node *parse_atom(parser *p) {
    char c = p->s[p->pos];
    size_t at = p->pos;
    if (c == '(') {
        p->pos++;
        if (p->pos < p->n && p->s[p->pos] == '?') {
            const char *r = p->s + p->pos + 1;
            size_t left = p->n - p->pos - 1;
            if (left >= 1 && r[0] == ':') p->pos += 2;
            else if (left >= 2 && r[0] == 'P' && r[1] == '<') p->pos += 3;
            else if (left >= 2 && r[0] == '<' && r[1] != '=' && r[1] != '!') p->pos += 2;
            else {
                p->pos = at;
                fail(p, DS_EUNSUPPORTED,
                     (left >= 1 && (r[0] == '=' || r[0] == '!' || r[0] == '<')) ? "lookaround (not supported)"
                                                                                 : "group flags or extension (not supported)");
                return NULL;
            }
            if (p->s[p->pos - 1] == '<') { /* a group name: skip it */
                while (p->pos < p->n && p->s[p->pos] != '>') p->pos++;
                if (p->pos >= p->n) { p->pos = at; fail(p, DS_EINVAL, "unterminated group name"); return NULL; }
                p->pos++;
            }
        }
        if (++p->depth > MAX_DEPTH) { fail(p, DS_EUNSUPPORTED, "groups nested too deeply"); return NULL; }
        node *x = parse_alt(p, 0);
        p->depth--;
        if (!x) return NULL;
        if (p->pos >= p->n || p->s[p->pos] != ')') { p->pos = at; fail(p, DS_EINVAL, "unbalanced parenthesis"); node_free(x); return NULL; }
        p->pos++;
        return x;
    }
    if (c == '[') return parse_class(p);
    if (c == '.') { /* any code point but a newline */
        p->pos++;
        node *x = node_new(p, N_SET);
        if (x && !(set_add(p, &x->set, '\n', '\n') && set_negate(p, &x->set))) { node_free(x); return NULL; }
        return x;
    }
    if (c == '\\') {
        p->pos++;
        node *x = node_new(p, N_SET);
        if (!x) return NULL;
        uint32_t cp;
        int k = parse_escape(p, 0, &cp, &x->set);
        if (k == 1 && !set_add(p, &x->set, cp, cp)) k = 0;
        if (!k) { node_free(x); return NULL; }
        set_normalize(&x->set);
        return x;
    }
    if (c == '^' || c == '$') {
        fail(p, DS_EUNSUPPORTED, "anchor inside the pattern (only ^ at the start and $ at the end)");
        return NULL;
    }
    if (c == '*' || c == '+' || c == '?') { fail(p, DS_EINVAL, "nothing to repeat"); return NULL; }
    if (c == ')') { fail(p, DS_EINVAL, "unbalanced parenthesis"); return NULL; }
    uint32_t cp;
    if (!next_cp(p, &cp)) return NULL;
    return set_node(p, cp, cp);
}

/* A quantifier {m}, {m,}, {m,n}, {,n} at p->pos: 1 (and the bounds), or 0
 * when the brace is a literal (as Python and ECMAScript read it). */
static int parse_braces(parser *p, int *mn, int *mx) {
    size_t i = p->pos + 1;
    long a = -1, b = -1;
    while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') a = (a < 0 ? 0 : a * 10) + (p->s[i++] - '0'), a = a > 1000000 ? 1000000 : a;
    int comma = i < p->n && p->s[i] == ',';
    if (comma) {
        i++;
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') b = (b < 0 ? 0 : b * 10) + (p->s[i++] - '0'), b = b > 1000000 ? 1000000 : b;
    }
    if (i >= p->n || p->s[i] != '}' || (a < 0 && (!comma || b < 0))) return 0;
    p->pos = i + 1;
    *mn = a < 0 ? 0 : (int)a;
    *mx = comma ? (int)b : (int)a;
    return 1;
}

static node *parse_seq(parser *p, int top) {
    node *seq = node_new(p, N_SEQ);
    if (!seq) return NULL;
    int start = 1;
    while (p->pos < p->n && p->s[p->pos] != '|' && p->s[p->pos] != ')') {
        char c = p->s[p->pos];
        if (top && c == '^' && start) { p->pos++; continue; }
        if (top && c == '$' && (p->pos + 1 == p->n || p->s[p->pos + 1] == '|')) { p->pos++; continue; }
        start = 0;
        node *a = parse_atom(p);
        if (!a) { node_free(seq); return NULL; }
        while (p->pos < p->n) {
            size_t qat = p->pos;
            int mn, mx;
            c = p->s[p->pos];
            if (c == '*') mn = 0, mx = -1, p->pos++;
            else if (c == '+') mn = 1, mx = -1, p->pos++;
            else if (c == '?') mn = 0, mx = 1, p->pos++;
            else if (c == '{' && parse_braces(p, &mn, &mx)) {}
            else break;
            if (a->kind == N_REP) { p->pos = qat; fail(p, DS_EINVAL, "multiple repeat"); node_free(a); node_free(seq); return NULL; }
            if (mx >= 0 && mx < mn) { p->pos = qat; fail(p, DS_EINVAL, "repeat with min above max"); node_free(a); node_free(seq); return NULL; }
            if (mn > MAX_REPEAT || mx > MAX_REPEAT) {
                p->pos = qat;
                fail(p, DS_EUNSUPPORTED, "repeat count above 1000");
                node_free(a);
                node_free(seq);
                return NULL;
            }
            if (p->pos < p->n && p->s[p->pos] == '?') p->pos++; /* lazy: the same strings */
            else if (p->pos < p->n && p->s[p->pos] == '+') {
                fail(p, DS_EUNSUPPORTED, "possessive repeat (not supported)");
                node_free(a);
                node_free(seq);
                return NULL;
            }
            node *r = node_new(p, N_REP);
            if (!r || !add_kid(p, r, a)) { node_free(r); node_free(seq); return NULL; }
            r->min = mn, r->max = mx;
            a = r;
        }
        if (!add_kid(p, seq, a)) { node_free(seq); return NULL; }
    }
    return seq;
}

static node *parse_alt(parser *p, int top) {
    node *alt = node_new(p, N_ALT);
    if (!alt) return NULL;
    for (;;) {
        node *s = parse_seq(p, top);
        if (!s || !add_kid(p, alt, s)) { node_free(alt); return NULL; }
        if (p->pos < p->n && p->s[p->pos] == '|') { p->pos++; continue; }
        return alt;
    }
}

/* --- writing GBNF --- */

static int is_empty(const node *x) {
    if (x->kind == N_SET) return 0;
    if (x->kind == N_REP) return x->max == 0 || is_empty(x->kid[0]);
    if (x->kind == N_ALT) {
        for (int i = 0; i < x->n_kid; i++) if (!is_empty(x->kid[i])) return 0;
        return 1;
    }
    for (int i = 0; i < x->n_kid; i++) if (!is_empty(x->kid[i])) return 0;
    return 1;
}

static int single_cp(const node *x) { return x->kind == N_SET && x->set.n == 1 && x->set.r[0].lo == x->set.r[0].hi; }

static void write_class(ds_sb *t, const cset *s) {
    ds_sb_puts(t, "[");
    for (int i = 0; i < s->n; i++) {
        ds_gtext_class_cp(t, s->r[i].lo);
        if (s->r[i].hi != s->r[i].lo) {
            ds_sb_puts(t, "-");
            ds_gtext_class_cp(t, s->r[i].hi);
        }
    }
    ds_sb_puts(t, "]");
}

static int in_set(const cset *s, uint32_t cp) {
    for (int i = 0; i < s->n; i++) if (cp >= s->r[i].lo && cp <= s->r[i].hi) return 1;
    return 0;
}

static void write_set(ds_sb *t, const cset *s, int json) {
    if (!json) {
        if (s->n == 1 && s->r[0].lo == s->r[0].hi) {
            ds_sb_puts(t, "\"");
            ds_gtext_lit_cp(t, s->r[0].lo);
            ds_sb_puts(t, "\"");
        } else write_class(t, s);
        return;
    }
    /* JSON: the code points that stand for themselves, then the escaped ones */
    cset plain = {0};
    parser dummy = {0};
    for (int i = 0; i < s->n; i++) {
        uint32_t lo = s->r[i].lo, hi = s->r[i].hi;
        if (lo < 0x20) lo = 0x20;
        for (uint32_t cut = 0x22; cut != 0; cut = cut == 0x22 ? 0x5C : 0) {
            if (lo > hi) break;
            if (cut >= lo && cut <= hi) {
                if (cut > lo) set_add(&dummy, &plain, lo, cut - 1);
                lo = cut + 1;
            }
        }
        if (lo <= hi) set_add(&dummy, &plain, lo, hi);
    }
    if (dummy.oom) { t->oom = 1; free(plain.r); return; }
    int parts = 0;
    ds_sb body = {0};
    if (plain.n) {
        if (plain.n == 1 && plain.r[0].lo == plain.r[0].hi) ds_gtext_json_cp(&body, plain.r[0].lo);
        else write_class(&body, &plain);
        parts++;
    }
    free(plain.r);
    if (in_set(s, '"')) ds_sb_puts(&body, parts++ ? " | \"\\\\\\\"\"" : "\"\\\\\\\"\"");
    if (in_set(s, '\\')) ds_sb_puts(&body, parts++ ? " | \"\\\\\\\\\"" : "\"\\\\\\\\\"");
    int n_ctl = 0;
    for (uint32_t c = 0; c < 0x20; c++) n_ctl += in_set(s, c);
    if (n_ctl == 32) {
        ds_sb_puts(&body, parts++ ? " | " : "");
        ds_sb_puts(&body, "\"\\\\\" ([bfnrt] | \"u00\" [01] [0-9a-fA-F])");
    } else {
        for (uint32_t c = 0; c < 0x20; c++) {
            if (!in_set(s, c)) continue;
            ds_sb_puts(&body, parts++ ? " | " : "");
            ds_gtext_json_cp(&body, c);
        }
    }
    if (body.oom) t->oom = 1;
    if (parts > 1) ds_sb_puts(t, "(");
    if (body.s) ds_sb_puts(t, body.s);
    if (parts > 1) ds_sb_puts(t, ")");
    ds_sb_free(&body);
}

static void write_node(ds_sb *t, const node *x, int json);
static void write_group(ds_sb *t, const node *x, int json);

static int nullable(const node *x) {
    switch (x->kind) {
    case N_SET: return 0;
    case N_REP: return x->min == 0 || nullable(x->kid[0]);
    case N_ALT:
        for (int i = 0; i < x->n_kid; i++) if (nullable(x->kid[i])) return 1;
        return 0;
    default:
        for (int i = 0; i < x->n_kid; i++) if (!nullable(x->kid[i])) return 0;
        return 1;
    }
}

/* x without the empty string, as alternatives: for a sequence of parts that
 * may all be empty, "the first non-empty part is part i" for each i. */
static void write_nonempty(ds_sb *t, const node *x, int json) {
    if (!nullable(x)) { write_node(t, x, json); return; }
    if (x->kind == N_REP) { /* y{m,n} without the empty string: y'{1,n} */
        if (nullable(x->kid[0])) { ds_sb_puts(t, "("); write_nonempty(t, x->kid[0], json); ds_sb_puts(t, ")"); }
        else write_group(t, x->kid[0], json);
        if (x->max < 0) ds_sb_puts(t, "+");
        else if (x->max > 1) ds_sb_printf(t, "{1,%d}", x->max);
        return;
    }
    int k = 0;
    ds_sb_puts(t, "(");
    for (int i = 0; i < x->n_kid; i++) {
        const node *c = x->kid[i];
        if (is_empty(c)) continue;
        if (k++) ds_sb_puts(t, " | ");
        if (x->kind == N_ALT) { write_nonempty(t, c, json); continue; }
        ds_sb_puts(t, "(");
        write_nonempty(t, c, json);
        ds_sb_puts(t, ")");
        for (int j = i + 1; j < x->n_kid; j++) {
            if (is_empty(x->kid[j])) continue;
            ds_sb_puts(t, " ");
            write_group(t, x->kid[j], json);
        }
    }
    if (!k) ds_sb_puts(t, "\"\"");
    ds_sb_puts(t, ")");
}

/* x as one GBNF element that a quantifier may follow. */
static void write_group(ds_sb *t, const node *x, int json) {
    int simple = x->kind == N_SET || (x->kind == N_SEQ && x->n_kid == 1 && x->kid[0]->kind == N_SET);
    if (x->kind == N_ALT && x->n_kid == 1) { write_group(t, x->kid[0], json); return; }
    if (simple) { write_node(t, x, json); return; }
    ds_sb_puts(t, "(");
    write_node(t, x, json);
    ds_sb_puts(t, ")");
}

static void write_node(ds_sb *t, const node *x, int json) {
    switch (x->kind) {
    case N_SET: write_set(t, &x->set, json); return;
    case N_SEQ: {
        int any = 0;
        for (int i = 0; i < x->n_kid; i++) {
            const node *k = x->kid[i];
            if (is_empty(k)) continue;
            if (any++) ds_sb_puts(t, " ");
            /* runs of single characters become one literal */
            if (single_cp(k) && (!json || ds_json_cp_plain(k->set.r[0].lo))) {
                ds_sb_puts(t, "\"");
                for (; i < x->n_kid && single_cp(x->kid[i]) && (!json || ds_json_cp_plain(x->kid[i]->set.r[0].lo)); i++) {
                    uint32_t cp = x->kid[i]->set.r[0].lo;
                    if (json && (cp == '"' || cp == '\\')) ds_sb_puts(t, "\\\\");
                    ds_gtext_lit_cp(t, cp);
                }
                i--;
                ds_sb_puts(t, "\"");
                continue;
            }
            if (k->kind == N_ALT && k->n_kid > 1) write_group(t, k, json);
            else write_node(t, k, json);
        }
        if (!any) ds_sb_puts(t, "\"\"");
        return;
    }
    case N_ALT: {
        int n_full = 0, has_empty = 0;
        for (int i = 0; i < x->n_kid; i++) is_empty(x->kid[i]) ? (has_empty = 1) : n_full++;
        if (!n_full) { ds_sb_puts(t, "\"\""); return; }
        if (has_empty || n_full > 1) ds_sb_puts(t, "(");
        int k = 0;
        for (int i = 0; i < x->n_kid; i++) {
            if (is_empty(x->kid[i])) continue;
            if (k++) ds_sb_puts(t, " | ");
            write_node(t, x->kid[i], json);
        }
        if (has_empty || n_full > 1) ds_sb_puts(t, has_empty ? ")?" : ")");
        return;
    }
    case N_REP: {
        if (is_empty(x)) { ds_sb_puts(t, "\"\""); return; }
        int mn = x->min;
        if (nullable(x->kid[0])) {
            /* (a?)* is (a)*: a repeated part that can match nothing would be left-recursive */
            mn = 0;
            ds_sb_puts(t, "(");
            write_nonempty(t, x->kid[0], json);
            ds_sb_puts(t, ")");
        } else write_group(t, x->kid[0], json);
        if (mn == 0 && x->max == 1) ds_sb_puts(t, "?");
        else if (mn == 0 && x->max < 0) ds_sb_puts(t, "*");
        else if (mn == 1 && x->max < 0) ds_sb_puts(t, "+");
        else if (x->max < 0) ds_sb_printf(t, "{%d,}", mn);
        else if (mn == x->max) { if (mn != 1) ds_sb_printf(t, "{%d}", mn); }
        else ds_sb_printf(t, "{%d,%d}", mn, x->max);
        return;
    }
    }
}

static int valid_name(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-')) return 0;
    return 1;
}

ds_status ds_regex_to_gbnf(const char *pattern, size_t len, const char *name, int json_string, char **gbnf,
                           ds_err *e) {
    *gbnf = NULL;
    if (!valid_name(name)) return ds_fail(e, DS_EINVAL, "regex: rule name '%s' is not a GBNF name", name);
    if (memchr(pattern, 0, len)) return ds_fail(e, DS_EINVAL, "regex: NUL byte at byte %zu", (size_t)((const char *)memchr(pattern, 0, len) - pattern));
    parser p = {.s = pattern, .n = len, .e = e, .st = DS_OK};
    node *root = parse_alt(&p, 1);
    if (root && p.pos < p.n) { fail(&p, DS_EINVAL, "unbalanced parenthesis"); }
    if (p.oom && p.st == DS_OK) p.st = ds_fail(e, DS_ENOMEM, "regex: out of memory");
    if (p.st != DS_OK || !root) {
        node_free(root);
        return p.st != DS_OK ? p.st : ds_fail(e, DS_ENOMEM, "regex: out of memory");
    }
    ds_sb t = {0};
    ds_sb_printf(&t, "%s ::= ", name);
    write_node(&t, root, json_string);
    ds_sb_puts(&t, "\n");
    node_free(root);
    if (t.oom) { ds_sb_free(&t); return ds_fail(e, DS_ENOMEM, "regex: out of memory"); }
    *gbnf = t.s;
    return DS_OK;
}
