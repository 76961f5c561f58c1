/* gbnf.c - GBNF text to the compiled form (grammar_int.h).
 *
 * A recursive-descent parser that builds the rules as it reads: groups,
 * repetitions and character classes that need several alternatives become
 * rules of their own (x* is R ::= x R | "", with the reference in tail
 * position so that the matcher's stack does not grow per repetition). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf_text.h"
#include "grammar/grammar_int.h"

typedef struct {
    gr_elem *e;
    int n, cap;
} seq;

typedef struct {
    seq *alts;
    int n, cap;
    char *name;
    int defined, line, col; /* where it was first named, for "not defined" */
} brule;

typedef struct {
    const char *src, *p, *end;
    brule *rules;
    int n_rules, cap_rules;
    gr_byteset *sets;
    int n_sets, cap_sets;
    int single[256]; /* the set holding only byte b, or -1 */
    ds_err *e;
    int failed;
} parser;

#define MAX_REPEAT 10000

static int where_line(const parser *ps, const char *at, int *col) {
    int line = 1;
    const char *ls = ps->src;
    for (const char *q = ps->src; q < at && q < ps->end; q++)
        if (*q == '\n') line++, ls = q + 1;
    *col = (int)(at - ls) + 1;
    return line;
}

static int fail_at(parser *ps, const char *at, const char *fmt, const char *detail) {
    if (ps->failed) return 0;
    int col, line = where_line(ps, at, &col);
    char msg[400];
    snprintf(msg, sizeof msg, fmt, detail ? detail : "");
    ds_fail(ps->e, DS_EINVAL, "grammar: line %d, column %d: %s", line, col, msg);
    ps->failed = 1;
    return 0;
}

static int oom(parser *ps) {
    if (!ps->failed) ds_fail(ps->e, DS_ENOMEM, "grammar: out of memory");
    ps->failed = 1;
    return 0;
}

static int grow(void **p, int *cap, int need, size_t size) {
    if (need <= *cap) return 1;
    int c = *cap ? *cap * 2 : 8;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

static int push(parser *ps, seq *s, int kind, int arg) {
    if (!grow((void **)&s->e, &s->cap, s->n + 1, sizeof *s->e)) return oom(ps);
    s->e[s->n++] = (gr_elem){.kind = (uint32_t)kind, .arg = (uint32_t)arg};
    return 1;
}

static int set_id(parser *ps, const gr_byteset *set) {
    for (int i = 0; i < ps->n_sets; i++)
        if (!memcmp(&ps->sets[i], set, sizeof *set)) return i;
    if (!grow((void **)&ps->sets, &ps->cap_sets, ps->n_sets + 1, sizeof *ps->sets)) return oom(ps) - 1;
    ps->sets[ps->n_sets] = *set;
    return ps->n_sets++;
}

static int byte_set(parser *ps, unsigned char b) {
    if (ps->single[b] >= 0) return ps->single[b];
    gr_byteset s = {{0}};
    s.w[b >> 5] |= 1u << (b & 31);
    return ps->single[b] = set_id(ps, &s);
}

static int range_set(parser *ps, unsigned lo, unsigned hi) {
    gr_byteset s = {{0}};
    for (unsigned b = lo; b <= hi; b++) s.w[b >> 5] |= 1u << (b & 31);
    return set_id(ps, &s);
}

/* A new rule (name given, or generated from its parent's); returns its id or -1. */
static int new_rule(parser *ps, const char *name, size_t len) {
    if (!grow((void **)&ps->rules, &ps->cap_rules, ps->n_rules + 1, sizeof *ps->rules)) return oom(ps) - 1;
    brule *r = &ps->rules[ps->n_rules];
    memset(r, 0, sizeof *r);
    if (!(r->name = malloc(len + 1))) return oom(ps) - 1;
    memcpy(r->name, name, len);
    r->name[len] = '\0';
    return ps->n_rules++;
}

static int gen_rule(parser *ps, int parent) {
    char nm[160];
    int n = snprintf(nm, sizeof nm, "%.100s_%d", parent >= 0 ? ps->rules[parent].name : "g", ps->n_rules);
    int r = new_rule(ps, nm, (size_t)n);
    if (r >= 0) ps->rules[r].defined = 1;
    return r;
}

static int find_rule(parser *ps, const char *name, size_t len, const char *at) {
    for (int i = 0; i < ps->n_rules; i++)
        if (strlen(ps->rules[i].name) == len && !memcmp(ps->rules[i].name, name, len)) return i;
    int r = new_rule(ps, name, len);
    if (r >= 0) ps->rules[r].line = where_line(ps, at, &ps->rules[r].col);
    return r;
}

static seq *new_alt(parser *ps, int rule) {
    brule *r = &ps->rules[rule];
    if (!grow((void **)&r->alts, &r->cap, r->n + 1, sizeof *r->alts)) return oom(ps), NULL;
    memset(&r->alts[r->n], 0, sizeof *r->alts);
    return &r->alts[r->n++];
}

static int is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks and comments; newlines too when nested (inside parentheses) or
 * when the next line goes on with '|'. */
static void skip_space(parser *ps, int newlines) {
    for (;;) {
        while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\r' || (newlines && *ps->p == '\n')))
            ps->p++;
        if (ps->p < ps->end && *ps->p == '#') {
            while (ps->p < ps->end && *ps->p != '\n') ps->p++;
            continue;
        }
        return;
    }
}

static int hex_value(parser *ps, int digits, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < digits; i++) {
        if (ps->p >= ps->end) return fail_at(ps, ps->p, "the escape ends early%s", NULL);
        char c = *ps->p++;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return fail_at(ps, ps->p - 1, "'%s' is not a hexadecimal digit", (char[]){c, 0});
        v = v * 16 + (unsigned)d;
    }
    *out = v;
    return 1;
}

/* One character of a literal or class (an escape, or one UTF-8 code point): its code point,
 * or, for \xHH, a raw byte (*raw = 1). */
static int read_char(parser *ps, unsigned *cp, int *raw) {
    *raw = 0;
    if (ps->p >= ps->end) return fail_at(ps, ps->p, "unexpected end of the grammar%s", NULL);
    unsigned char c = (unsigned char)*ps->p;
    if (c == '\\') {
        ps->p++;
        if (ps->p >= ps->end) return fail_at(ps, ps->p, "the escape ends early%s", NULL);
        char x = *ps->p++;
        switch (x) {
        case 'x': *raw = 1; return hex_value(ps, 2, cp);
        case 'u': return hex_value(ps, 4, cp);
        case 'U': return hex_value(ps, 8, cp);
        case 'n': *cp = '\n'; return 1;
        case 'r': *cp = '\r'; return 1;
        case 't': *cp = '\t'; return 1;
        case '0': *cp = 0; return 1;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'': case '.':
            *cp = (unsigned char)x;
            return 1;
        default: return fail_at(ps, ps->p - 2, "unknown escape '\\%s'", (char[]){x, 0});
        }
    }
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!n || ps->p + n > ps->end) return fail_at(ps, ps->p, "the grammar text is not UTF-8 here%s", NULL);
    unsigned v = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (int i = 1; i < n; i++) {
        unsigned char d = (unsigned char)ps->p[i];
        if ((d & 0xc0) != 0x80) return fail_at(ps, ps->p, "the grammar text is not UTF-8 here%s", NULL);
        v = v << 6 | (d & 0x3f);
    }
    ps->p += n;
    *cp = v;
    return 1;
}

/* --- character classes: code point ranges to UTF-8 byte sequences --- */

typedef struct {
    unsigned lo, hi;
} cprange;

typedef struct {
    unsigned char lo[4], hi[4];
    int n;
} byteseq;

typedef struct {
    byteseq *s;
    int n, cap;
    parser *ps;
} seqlist;

static void emit_seq(seqlist *l, const unsigned char *lo, const unsigned char *hi, int n) {
    if (!grow((void **)&l->s, &l->cap, l->n + 1, sizeof *l->s)) { oom(l->ps); return; }
    byteseq *b = &l->s[l->n++];
    memcpy(b->lo, lo, (size_t)n);
    memcpy(b->hi, hi, (size_t)n);
    b->n = n;
}

/* The byte sequences of n-byte encodings from lo to hi (both n bytes long), from byte i on;
 * prefix bytes before i are fixed. */
static void split_same_length(seqlist *l, unsigned char *lo, unsigned char *hi, int n, int i) {
    if (i == n - 1) { emit_seq(l, lo, hi, n); return; }
    if (lo[i] == hi[i]) { split_same_length(l, lo, hi, n, i + 1); return; }
    int lo_full = 1, hi_full = 1;
    for (int k = i + 1; k < n; k++) lo_full &= lo[k] == 0x80, hi_full &= hi[k] == 0xbf;
    unsigned start = lo[i], end = hi[i];
    if (!lo_full) {
        unsigned char a[4], b[4];
        memcpy(a, lo, 4), memcpy(b, lo, 4);
        for (int k = i + 1; k < n; k++) b[k] = 0xbf;
        split_same_length(l, a, b, n, i + 1);
        start++;
    }
    if (!hi_full) end--;
    if (start <= end) {
        unsigned char a[4], b[4];
        memcpy(a, lo, 4), memcpy(b, hi, 4);
        a[i] = (unsigned char)start, b[i] = (unsigned char)end;
        for (int k = i + 1; k < n; k++) a[k] = 0x80, b[k] = 0xbf;
        emit_seq(l, a, b, n);
    }
    if (!hi_full) {
        unsigned char a[4], b[4];
        memcpy(a, hi, 4), memcpy(b, hi, 4);
        for (int k = i + 1; k < n; k++) a[k] = 0x80;
        split_same_length(l, a, b, n, i + 1);
    }
}

static void split_range(seqlist *l, unsigned lo, unsigned hi) {
    static const unsigned bounds[] = {0x7f, 0x7ff, 0xffff, 0x10ffff};
    for (int k = 0; k < 4 && lo <= hi; k++) {
        if (lo > bounds[k]) continue;
        unsigned top = hi < bounds[k] ? hi : bounds[k];
        unsigned char a[4] = {0}, b[4] = {0};
        int n = ds_utf8_encode(lo, (char *)a);
        ds_utf8_encode(top, (char *)b);
        split_same_length(l, a, b, n, 0);
        lo = top + 1;
    }
}

static int cmp_range(const void *a, const void *b) {
    const cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The class's ranges (sorted, merged, surrogates out, negated if asked) as elements: one
 * terminal when every code point is one byte, else a rule of byte-sequence alternatives. */
static int class_elements(parser *ps, cprange *r, int n, int negate, int raw_bytes, int parent, seq *out) {
    qsort(r, (size_t)n, sizeof *r, cmp_range);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi + 1) { if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi; }
        else r[m++] = r[i];
    }
    cprange fin[260];
    int nf = 0;
    if (raw_bytes) { /* \xHH ranges in a class stand for bytes, not code points */
        gr_byteset s = {{0}};
        for (int i = 0; i < m; i++)
            for (unsigned b = r[i].lo; b <= r[i].hi && b < 256; b++) s.w[b >> 5] |= 1u << (b & 31);
        if (negate)
            for (int w = 0; w < 8; w++) s.w[w] = ~s.w[w];
        int id = set_id(ps, &s);
        return id >= 0 && push(ps, out, E_BYTES, id);
    }
    cprange *cur = r;
    int nc = m;
    cprange neg[260];
    if (negate) {
        unsigned next = 0;
        int nn = 0;
        for (int i = 0; i < m && nn < 258; i++) {
            if (r[i].lo > next) neg[nn++] = (cprange){next, r[i].lo - 1};
            next = r[i].hi + 1;
        }
        if (next <= 0x10ffff) neg[nn++] = (cprange){next, 0x10ffff};
        cur = neg, nc = nn;
    }
    for (int i = 0; i < nc && nf < 258; i++) { /* no surrogates: they are not UTF-8 */
        cprange x = cur[i];
        if (x.hi > 0x10ffff) x.hi = 0x10ffff;
        if (x.lo > x.hi) continue;
        if (x.lo < 0xd800 && x.hi > 0xdfff) {
            fin[nf++] = (cprange){x.lo, 0xd7ff};
            fin[nf++] = (cprange){0xe000, x.hi};
        } else if (x.lo >= 0xd800 && x.hi <= 0xdfff) {
            continue;
        } else if (x.lo >= 0xd800 && x.lo <= 0xdfff) {
            fin[nf++] = (cprange){0xe000, x.hi};
        } else if (x.hi >= 0xd800 && x.hi <= 0xdfff) {
            fin[nf++] = (cprange){x.lo, 0xd7ff};
        } else {
            fin[nf++] = x;
        }
    }
    seqlist l = {.ps = ps};
    gr_byteset ascii = {{0}};
    int any_ascii = 0;
    for (int i = 0; i < nf; i++) {
        if (fin[i].lo < 0x80) {
            unsigned top = fin[i].hi < 0x80 ? fin[i].hi : 0x7f;
            for (unsigned b = fin[i].lo; b <= top; b++) ascii.w[b >> 5] |= 1u << (b & 31);
            any_ascii = 1;
            if (fin[i].hi < 0x80) continue;
            split_range(&l, 0x80, fin[i].hi);
        } else {
            split_range(&l, fin[i].lo, fin[i].hi);
        }
    }
    if (ps->failed) { free(l.s); return 0; }
    if (l.n == 0 && any_ascii) {
        int id = set_id(ps, &ascii);
        return id >= 0 && push(ps, out, E_BYTES, id);
    }
    if (l.n == 0) { free(l.s); return fail_at(ps, ps->p, "the character class matches nothing%s", NULL); }
    int rule = gen_rule(ps, parent);
    if (rule < 0) { free(l.s); return 0; }
    if (any_ascii) {
        seq *a = new_alt(ps, rule);
        int id = set_id(ps, &ascii);
        if (!a || id < 0 || !push(ps, a, E_BYTES, id) || !push(ps, a, E_END, 0)) { free(l.s); return 0; }
    }
    for (int i = 0; i < l.n; i++) {
        seq *a = new_alt(ps, rule);
        if (!a) { free(l.s); return 0; }
        for (int k = 0; k < l.s[i].n; k++) {
            int id = range_set(ps, l.s[i].lo[k], l.s[i].hi[k]);
            if (id < 0 || !push(ps, a, E_BYTES, id)) { free(l.s); return 0; }
        }
        if (!push(ps, a, E_END, 0)) { free(l.s); return 0; }
    }
    free(l.s);
    return push(ps, out, E_REF, rule);
}

static int parse_class(parser *ps, int parent, seq *out) {
    const char *start = ps->p++; /* '[' */
    int negate = 0, raw = -1;
    if (ps->p < ps->end && *ps->p == '^') negate = 1, ps->p++;
    cprange r[256];
    int n = 0;
    while (ps->p < ps->end && *ps->p != ']') {
        unsigned lo, hi;
        int rl, rh;
        if (!read_char(ps, &lo, &rl)) return 0;
        hi = lo, rh = rl;
        if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
            ps->p++;
            if (!read_char(ps, &hi, &rh)) return 0;
            if (hi < lo) return fail_at(ps, start, "a range in the character class runs backwards%s", NULL);
        }
        /* \xHH means a byte only in a class made of bytes; mixed with code points it is a code point */
        int is_raw = rl && rh && hi >= 0x80;
        if (raw < 0) raw = is_raw;
        else if (raw != is_raw) raw = 0;
        if (n == 256) return fail_at(ps, start, "the character class has more than 256 ranges%s", NULL);
        r[n++] = (cprange){lo, hi};
    }
    if (ps->p >= ps->end) return fail_at(ps, start, "the character class is not closed with ']'%s", NULL);
    ps->p++;
    if (n == 0 && !negate) return fail_at(ps, start, "the character class is empty%s", NULL);
    return class_elements(ps, r, n, negate, raw > 0, parent, out);
}

static int parse_literal(parser *ps, seq *out) {
    const char *start = ps->p++;
    while (ps->p < ps->end && *ps->p != '"') {
        unsigned cp;
        int raw;
        if (!read_char(ps, &cp, &raw)) return 0;
        unsigned char b[4];
        int n = raw ? (b[0] = (unsigned char)cp, 1) : ds_utf8_encode(cp, (char *)b);
        for (int i = 0; i < n; i++) {
            int id = byte_set(ps, b[i]);
            if (id < 0 || !push(ps, out, E_BYTES, id)) return 0;
        }
    }
    if (ps->p >= ps->end) return fail_at(ps, start, "the string literal is not closed%s", NULL);
    ps->p++;
    return 1;
}

static int parse_alternates(parser *ps, int rule, int nested);

/* Wraps elements [from, s->n) of s into a rule of their own (for a repetition), unless they
 * are one element already; returns that element. */
static int atom_of(parser *ps, seq *s, int from, int parent, gr_elem *atom) {
    if (s->n - from == 1) { *atom = s->e[from]; s->n = from; return 1; }
    int r = gen_rule(ps, parent);
    seq *a = r >= 0 ? new_alt(ps, r) : NULL;
    if (!a) return 0;
    for (int i = from; i < s->n; i++)
        if (!push(ps, a, s->e[i].kind, (int)s->e[i].arg)) return 0;
    if (!push(ps, a, E_END, 0)) return 0;
    s->n = from;
    *atom = (gr_elem){.kind = E_REF, .arg = (uint32_t)r};
    return 1;
}

/* R ::= atom R | "" (min 0, unbounded) or the chain R_k ::= atom R_(k-1) | "" for up to k more. */
static int repeat_rule(parser *ps, gr_elem atom, int more, int parent) {
    if (more < 0) {
        int r = gen_rule(ps, parent);
        seq *a = r >= 0 ? new_alt(ps, r) : NULL;
        if (!a || !push(ps, a, (int)atom.kind, (int)atom.arg) || !push(ps, a, E_REF, r) || !push(ps, a, E_END, 0)) return -1;
        seq *b = new_alt(ps, r);
        if (!b || !push(ps, b, E_END, 0)) return -1;
        return r;
    }
    int prev = -1;
    for (int k = 0; k < more; k++) {
        int r = gen_rule(ps, parent);
        seq *a = r >= 0 ? new_alt(ps, r) : NULL;
        if (!a || !push(ps, a, (int)atom.kind, (int)atom.arg)) return -1;
        if (prev >= 0 && !push(ps, a, E_REF, prev)) return -1;
        if (!push(ps, a, E_END, 0)) return -1;
        seq *b = new_alt(ps, r);
        if (!b || !push(ps, b, E_END, 0)) return -1;
        prev = r;
    }
    return prev;
}

static int parse_int(parser *ps, int *out) {
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return 0;
    long v = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        v = v * 10 + (*ps->p++ - '0');
        if (v > MAX_REPEAT) v = MAX_REPEAT + 1;
    }
    *out = (int)v;
    return 1;
}

static int apply_quantifier(parser *ps, seq *s, int from, int parent) {
    if (ps->p >= ps->end) return 1;
    char q = *ps->p;
    int lo, hi; /* hi -1: unbounded */
    const char *at = ps->p;
    if (q == '*') lo = 0, hi = -1, ps->p++;
    else if (q == '+') lo = 1, hi = -1, ps->p++;
    else if (q == '?') lo = 0, hi = 1, ps->p++;
    else if (q == '{') {
        ps->p++;
        skip_space(ps, 1);
        if (!parse_int(ps, &lo)) return fail_at(ps, at, "a repetition needs a count: {m}, {m,} or {m,n}%s", NULL);
        skip_space(ps, 1);
        hi = lo;
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            skip_space(ps, 1);
            if (!parse_int(ps, &hi)) hi = -1;
            skip_space(ps, 1);
        }
        if (ps->p >= ps->end || *ps->p != '}') return fail_at(ps, at, "the repetition is not closed with '}'%s", NULL);
        ps->p++;
        if (lo > MAX_REPEAT || hi > MAX_REPEAT)
            return fail_at(ps, at, "a repetition count is above %s", "10000");
        if (hi >= 0 && hi < lo) return fail_at(ps, at, "the repetition's maximum is below its minimum%s", NULL);
    } else {
        return 1;
    }
    if (s->n == from) return fail_at(ps, at, "a repetition needs something before it%s", NULL);
    gr_elem atom;
    if (!atom_of(ps, s, from, parent, &atom)) return 0;
    for (int i = 0; i < lo; i++)
        if (!push(ps, s, (int)atom.kind, (int)atom.arg)) return 0;
    int more = hi < 0 ? -1 : hi - lo;
    if (more == 0) return 1;
    int r = repeat_rule(ps, atom, more, parent);
    return r >= 0 && push(ps, s, E_REF, r);
}

/* A sequence of items, up to '|', ')' or (at the top level) the end of the line. */
static int parse_sequence(parser *ps, int rule, int nested, seq *s) {
    for (;;) {
        skip_space(ps, nested);
        if (ps->p >= ps->end) return 1;
        char c = *ps->p;
        if (c == '|' || c == ')' || c == '\n') return 1;
        int from = s->n;
        if (c == '"') {
            if (!parse_literal(ps, s)) return 0;
        } else if (c == '[') {
            if (!parse_class(ps, rule, s)) return 0;
        } else if (c == '.') {
            ps->p++;
            cprange all = {0, 0x10ffff};
            if (!class_elements(ps, &all, 1, 0, 0, rule, s)) return 0;
        } else if (c == '(') {
            const char *at = ps->p++;
            int g = gen_rule(ps, rule);
            if (g < 0 || !parse_alternates(ps, g, 1)) return 0;
            skip_space(ps, 1);
            if (ps->p >= ps->end || *ps->p != ')') return fail_at(ps, at, "the group is not closed with ')'%s", NULL);
            ps->p++;
            if (!push(ps, s, E_REF, g)) return 0;
        } else if (is_name_char(c)) {
            const char *n0 = ps->p;
            while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
            const char *save = ps->p;
            skip_space(ps, 0);
            if (ps->p + 2 < ps->end && !memcmp(ps->p, "::=", 3)) { /* the next rule's head: this rule ended */
                ps->p = n0;
                return 1;
            }
            ps->p = save;
            int r = find_rule(ps, n0, (size_t)(save - n0), n0);
            if (r < 0 || !push(ps, s, E_REF, r)) return 0;
        } else if (c == '<') {
            return fail_at(ps, ps->p, "token references (<...>) are not supported: write the token's text as a literal%s", NULL);
        } else {
            return fail_at(ps, ps->p, "unexpected '%s'", (char[]){c, 0});
        }
        if (!apply_quantifier(ps, s, from, rule)) return 0;
    }
}

static int parse_alternates(parser *ps, int rule, int nested) {
    for (;;) {
        seq s = {0};
        if (!parse_sequence(ps, rule, nested, &s) || !push(ps, &s, E_END, 0)) { free(s.e); return 0; }
        seq *a = new_alt(ps, rule);
        if (!a) { free(s.e); return 0; }
        *a = s;
        const char *save = ps->p;
        skip_space(ps, 1); /* a line that begins with '|' goes on with the rule */
        if (ps->p < ps->end && *ps->p == '|') {
            ps->p++;
            continue;
        }
        if (!nested) ps->p = save;
        return 1;
    }
}

static int parse_rules(parser *ps) {
    for (;;) {
        skip_space(ps, 1);
        if (ps->p >= ps->end) return 1;
        const char *n0 = ps->p;
        while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
        if (ps->p == n0) return fail_at(ps, n0, "expected a rule name%s", NULL);
        size_t len = (size_t)(ps->p - n0);
        skip_space(ps, 0);
        if (ps->p + 2 >= ps->end || memcmp(ps->p, "::=", 3)) return fail_at(ps, ps->p, "expected '::=' after the rule name%s", NULL);
        ps->p += 3;
        int r = find_rule(ps, n0, len, n0);
        if (r < 0) return 0;
        if (ps->rules[r].defined) {
            char nm[128];
            snprintf(nm, sizeof nm, "%.*s", (int)(len < 100 ? len : 100), n0);
            return fail_at(ps, n0, "rule '%s' is defined twice", nm);
        }
        ps->rules[r].defined = 1;
        if (!parse_alternates(ps, r, 0)) return 0;
        skip_space(ps, 0);
        if (ps->p < ps->end && *ps->p != '\n') {
            if (*ps->p == ')') return fail_at(ps, ps->p, "')' without '('%s", NULL);
        }
    }
}

/* Lays the rules out into g (grammar_int.h). */
static ds_status flatten(parser *ps, ds_grammar *g, ds_err *e) {
    int n_el = 0, n_alts = 0;
    for (int r = 0; r < ps->n_rules; r++) {
        n_alts += ps->rules[r].n;
        for (int a = 0; a < ps->rules[r].n; a++) n_el += ps->rules[r].alts[a].n;
    }
    g->el = malloc((size_t)(n_el + 1) * sizeof *g->el);
    g->alt_pos = malloc((size_t)(n_alts + 1) * sizeof *g->alt_pos);
    g->rule_alt0 = malloc((size_t)(ps->n_rules + 1) * sizeof *g->rule_alt0);
    g->rule_n_alts = malloc((size_t)(ps->n_rules + 1) * sizeof *g->rule_n_alts);
    g->rule_names = calloc((size_t)ps->n_rules + 1, sizeof *g->rule_names);
    if (!g->el || !g->alt_pos || !g->rule_alt0 || !g->rule_n_alts || !g->rule_names)
        return ds_fail(e, DS_ENOMEM, "grammar: out of memory");
    int pos = 0, alt = 0;
    for (int r = 0; r < ps->n_rules; r++) {
        g->rule_alt0[r] = alt;
        g->rule_n_alts[r] = ps->rules[r].n;
        g->rule_names[r] = ps->rules[r].name;
        ps->rules[r].name = NULL;
        for (int a = 0; a < ps->rules[r].n; a++) {
            g->alt_pos[alt++] = pos;
            memcpy(g->el + pos, ps->rules[r].alts[a].e, (size_t)ps->rules[r].alts[a].n * sizeof *g->el);
            pos += ps->rules[r].alts[a].n;
        }
    }
    g->n_el = n_el;
    g->n_alts = n_alts;
    g->n_rules = ps->n_rules;
    g->sets = ps->sets;
    g->n_sets = ps->n_sets;
    ps->sets = NULL;
    g->bytes = sizeof *g + (size_t)n_el * sizeof *g->el + (size_t)n_alts * sizeof(int) +
               (size_t)ps->n_rules * (2 * sizeof(int) + sizeof(char *) + 16) + (size_t)g->n_sets * sizeof *g->sets;
    return DS_OK;
}

ds_status ds_gr_parse_gbnf(const char *text, size_t len, ds_grammar *g, ds_err *e);
ds_status ds_gr_parse_gbnf(const char *text, size_t len, ds_grammar *g, ds_err *e) {
    parser ps = {.src = text, .p = text, .end = text + len, .e = e};
    memset(ps.single, -1, sizeof ps.single);
    ds_status st = DS_OK;
    if (memchr(text, '\0', len)) {
        st = ds_fail(e, DS_EINVAL, "grammar: the text holds a NUL byte at offset %zu", (size_t)((const char *)memchr(text, '\0', len) - text));
        goto out;
    }
    if (!parse_rules(&ps)) { st = e ? e->code : DS_EINVAL; goto out; }
    g->root = -1;
    for (int r = 0; r < ps.n_rules; r++) {
        if (!ps.rules[r].defined) {
            st = ds_fail(e, DS_EINVAL, "grammar: line %d, column %d: rule '%s' is used but not defined", ps.rules[r].line,
                         ps.rules[r].col, ps.rules[r].name);
            goto out;
        }
        if (!strcmp(ps.rules[r].name, "root")) g->root = r;
    }
    if (g->root < 0) {
        st = ds_fail(e, DS_EINVAL, "grammar: there is no rule named 'root' (the grammar starts there)");
        goto out;
    }
    st = flatten(&ps, g, e);
out:
    for (int r = 0; r < ps.n_rules; r++) {
        for (int a = 0; a < ps.rules[r].n; a++) free(ps.rules[r].alts[a].e);
        free(ps.rules[r].alts);
        free(ps.rules[r].name);
    }
    free(ps.rules);
    free(ps.sets);
    return st;
}
