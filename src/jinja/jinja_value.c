/* jinja_value.c - the values of a render, as @huggingface/jinja's runtime
 * sees them.
 *
 * Strings. HF's strings are JavaScript strings: UTF-16, where lengths,
 * indices and comparisons count code units, and where a string may hold half
 * of a surrogate pair (s[0] of an emoji). Ours are WTF-8 (UTF-8 that may also
 * encode lone surrogates as 3 bytes), which keeps every JavaScript string
 * representable; the rendered text is turned into UTF-8 at the end, joining
 * halves that met again and writing U+FFFD for the rest, which is what
 * Node's Buffer.from(text) does.
 *
 * Numbers. JavaScript has only doubles: an "integer" is a double that HF
 * tagged IntegerValue. They print as Number.prototype.toString does
 * (js_number_format), floats with a ".0" when whole ("1.0"), except inside
 * JSON, `+` and `~`, which use the bare number ("1").
 *
 * Text forms. HF turns a value into text in three ways, which differ:
 *   ds_jinja_value_render      RuntimeValue.toString(): what {{ x }} prints; lists and
 *                  dicts as JSON, undefined inside them as "undefined";
 *   ds_jinja_value_raw_string  x.value.toString(): what `+` and `~` concatenate; a list
 *                  is its items' toString() joined by ",", a dict "[object Map]";
 *   ds_jinja_value_join_item   what Array.prototype.join makes of x.value (the join
 *                  filter): raw strings, but none and undefined become "". */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "jinja/jinja_int.h"

/* --- arena --- */

struct ja_chunk {
    ja_chunk *next;
    size_t cap, used;
};
#define JA_HDR ((sizeof(ja_chunk) + 15) & ~(size_t)15)
#define JA_CHUNK ((size_t)64 << 10)

static unsigned char *chunk_data(ja_chunk *c) { return (unsigned char *)c + JA_HDR; }
static size_t round16(size_t n) { return n ? (n + 15) & ~(size_t)15 : 16; }

void *ds_jinja_arena_alloc(jarena *a, size_t n) {
    if (n > ((size_t)1 << 40)) return NULL;
    n = round16(n);
    ja_chunk *h = a->head;
    if (h && h->cap - h->used >= n) {
        void *p = chunk_data(h) + h->used;
        h->used += n;
        return p;
    }
    size_t cap = n > JA_CHUNK ? n : JA_CHUNK;
    if (a->limit && (cap + JA_HDR > a->limit || a->total > a->limit - cap - JA_HDR)) return NULL;
    ja_chunk *c = malloc(JA_HDR + cap);
    if (!c) return NULL;
    a->total += JA_HDR + cap;
    c->cap = cap;
    c->used = n;
    if (h && cap == n && h->cap - h->used >= 1024) {
        /* a big block of its own: keep allocating from the current chunk */
        c->next = h->next;
        h->next = c;
    } else {
        c->next = h;
        a->head = c;
    }
    return chunk_data(c);
}

void *ds_jinja_arena_zalloc(jarena *a, size_t n) {
    void *p = ds_jinja_arena_alloc(a, n);
    if (p) memset(p, 0, n);
    return p;
}

void *ds_jinja_arena_grow(jarena *a, void *p, size_t old_n, size_t new_n) {
    if (!p) return ds_jinja_arena_alloc(a, new_n);
    ja_chunk *h = a->head;
    size_t ro = round16(old_n), rn = round16(new_n);
    if (h && (unsigned char *)p + ro == chunk_data(h) + h->used && h->used - ro + rn <= h->cap) {
        h->used = h->used - ro + rn;
        return p;
    }
    void *q = ds_jinja_arena_alloc(a, new_n);
    if (q) memcpy(q, p, old_n < new_n ? old_n : new_n);
    return q;
}

void ds_jinja_arena_release(jarena *a) {
    for (ja_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->total = 0;
}

/* --- buffers --- */

int ds_jinja_buf_put(jr *r, uint32_t pos, jbuf *b, const char *p, size_t n) {
    if (n > r->lim.max_output || b->n > r->lim.max_output - n)
        return ds_jinja_fail(r, pos, DS_ENOMEM, "output larger than the limit of %zu bytes", r->lim.max_output);
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) {
            if (cap > SIZE_MAX / 4) return ds_jinja_fail_oom(r, pos);
            cap *= 2;
        }
        char *q = ds_jinja_arena_grow(&r->arena, b->p, b->cap, cap);
        if (!q) return ds_jinja_fail_oom(r, pos);
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    return J_OK;
}

int ds_jinja_buf_putc(jr *r, uint32_t pos, jbuf *b, char c) { return ds_jinja_buf_put(r, pos, b, &c, 1); }

static int jbuf_puts(jr *r, uint32_t pos, jbuf *b, const char *z) { return ds_jinja_buf_put(r, pos, b, z, strlen(z)); }

int ds_jinja_value_buf_to_str(jr *r, uint32_t pos, jbuf *b, jv *out) {
    *out = jv_str(b->p ? b->p : "", b->n);
    return J_OK;
}

/* --- WTF-8 and JavaScript string rules --- */

static int cont(unsigned char c) { return (c & 0xC0) == 0x80; }

uint32_t ds_jinja_wtf8_decode(const char *s, size_t n, size_t *len) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned c = p[0];
    if (c < 0x80) {
        *len = 1;
        return c;
    }
    if (c >= 0xC2 && c <= 0xDF && n >= 2 && cont(p[1])) {
        *len = 2;
        return ((c & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    }
    if (c >= 0xE0 && c <= 0xEF && n >= 3 && cont(p[1]) && cont(p[2])) {
        uint32_t cp = ((c & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
        if (cp >= 0x800) {   /* surrogates are allowed: that is the W in WTF-8 */
            *len = 3;
            return cp;
        }
    }
    if (c >= 0xF0 && c <= 0xF4 && n >= 4 && cont(p[1]) && cont(p[2]) && cont(p[3])) {
        uint32_t cp = ((c & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
        if (cp >= 0x10000 && cp <= 0x10FFFF) {
            *len = 4;
            return cp;
        }
    }
    *len = 1;
    return 0xFFFD;
}

size_t ds_jinja_wtf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t ds_jinja_str_utf16_len(jstr s) {
    size_t units = 0;
    for (size_t i = 0, k; i < s.n; i += k) units += ds_jinja_wtf8_decode(s.p + i, s.n - i, &k) >= 0x10000 ? 2 : 1;
    return units;
}

/* JavaScript's \s and String.prototype.trim: WhiteSpace and LineTerminator. */
static int js_space_cp(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

size_t ds_jinja_str_ws_at(const char *p, const char *end) {
    if (p >= end) return 0;
    if ((unsigned char)*p < 0x80) return js_space_cp((unsigned char)*p) ? 1 : 0;
    size_t k;
    uint32_t cp = ds_jinja_wtf8_decode(p, (size_t)(end - p), &k);
    return js_space_cp(cp) && cp != 0xFFFD ? k : 0;
}

/* bytes of a JS whitespace char ending at p, or 0 */
static size_t js_ws_before(const char *start, const char *p) {
    for (size_t k = 1; k <= 3 && (size_t)(p - start) >= k; k++)
        if (ds_jinja_str_ws_at(p - k, p) == k) return k;
    return 0;
}

jstr ds_jinja_str_trim(jstr s, int left, int right) {
    const char *a = s.p, *b = s.p + s.n;
    if (left)
        for (size_t w; (w = ds_jinja_str_ws_at(a, b)) > 0;) a += w;
    if (right)
        for (size_t w; b > a && (w = js_ws_before(a, b)) > 0;) b -= w;
    jstr r = {a, (size_t)(b - a)};
    return r;
}

/* Full case mappings JavaScript applies beyond the one-to-one ones
 * (SpecialCasing.txt, unconditional part); most-used entries only. */
static const struct {
    uint32_t cp;
    uint32_t to[3];
} UPPER_SPECIAL[] = {
    {0x00DF, {0x53, 0x53}},          {0x0149, {0x2BC, 0x4E}},        {0x01F0, {0x4A, 0x30C}},
    {0x0390, {0x399, 0x308, 0x301}}, {0x03B0, {0x3A5, 0x308, 0x301}}, {0x0587, {0x535, 0x552}},
    {0x1E96, {0x48, 0x331}},         {0x1E97, {0x54, 0x308}},         {0x1E98, {0x57, 0x30A}},
    {0x1E99, {0x59, 0x30A}},         {0x1E9A, {0x41, 0x2BE}},         {0xFB00, {0x46, 0x46}},
    {0xFB01, {0x46, 0x49}},          {0xFB02, {0x46, 0x4C}},          {0xFB03, {0x46, 0x46, 0x49}},
    {0xFB04, {0x46, 0x46, 0x4C}},    {0xFB05, {0x53, 0x54}},          {0xFB06, {0x53, 0x54}},
    {0xFB13, {0x544, 0x546}},        {0xFB14, {0x544, 0x535}},        {0xFB15, {0x544, 0x53B}},
    {0xFB16, {0x54E, 0x546}},        {0xFB17, {0x544, 0x53D}},
};

static int is_letter(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

int ds_jinja_str_case_map(jr *r, uint32_t pos, jstr s, int upper, jv *out) {
    jbuf b = {0};
    char enc[4];
    uint32_t prev = 0;
    for (size_t i = 0, k; i < s.n; i += k) {
        uint32_t cp = ds_jinja_wtf8_decode(s.p + i, s.n - i, &k);
        if (k == 1 && cp == 0xFFFD) {   /* a byte that is not UTF-8: kept as it is */
            JTRY(ds_jinja_buf_put(r, pos, &b, s.p + i, 1));
            continue;
        }
        const uint32_t *many = NULL;
        uint32_t one = cp;
        if (upper) {
            for (size_t t = 0; t < sizeof UPPER_SPECIAL / sizeof UPPER_SPECIAL[0]; t++)
                if (UPPER_SPECIAL[t].cp == cp) many = UPPER_SPECIAL[t].to;
            if (!many && (cp < 0xD800 || cp > 0xDFFF)) one = (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp);
        } else if (cp == 0x130) {   /* I with dot above: i + combining dot */
            static const uint32_t idot[3] = {0x69, 0x307, 0};
            many = idot;
        } else if (cp == 0x3A3) {   /* final sigma: after a letter, not before one */
            size_t k2;
            int next_letter = i + k < s.n && is_letter(ds_jinja_wtf8_decode(s.p + i + k, s.n - i - k, &k2));
            one = is_letter(prev) && !next_letter ? 0x3C2 : 0x3C3;
        } else if (cp < 0xD800 || cp > 0xDFFF) {
            one = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
        }
        if (many) {
            for (int t = 0; t < 3 && many[t]; t++) JTRY(ds_jinja_buf_put(r, pos, &b, enc, ds_jinja_wtf8_encode(many[t], enc)));
        } else {
            JTRY(ds_jinja_buf_put(r, pos, &b, enc, ds_jinja_wtf8_encode(one, enc)));
        }
        prev = cp;
    }
    return ds_jinja_value_buf_to_str(r, pos, &b, out);
}

/* The i-th UTF-16 unit of a code point (i = 0 or 1). */
static uint32_t unit_of(uint32_t cp, int i) {
    if (cp < 0x10000) return cp;
    return i == 0 ? 0xD800 + ((cp - 0x10000) >> 10) : 0xDC00 + ((cp - 0x10000) & 0x3FF);
}

int ds_jinja_str_compare(jstr a, jstr b) {
    size_t i = 0, j = 0, ka = 0, kb = 0;
    int ua = 0, ub = 0;   /* which unit of the current code point */
    uint32_t ca = 0, cb = 0;
    for (;;) {
        if (ua == 0 && i >= a.n) return j >= b.n && ub == 0 ? 0 : -1;
        if (ub == 0 && j >= b.n) return 1;
        if (ua == 0) ca = ds_jinja_wtf8_decode(a.p + i, a.n - i, &ka);
        if (ub == 0) cb = ds_jinja_wtf8_decode(b.p + j, b.n - j, &kb);
        uint32_t x = unit_of(ca, ua), y = unit_of(cb, ub);
        if (x != y) return x < y ? -1 : 1;
        if (ca >= 0x10000 && ua == 0) ua = 1;
        else {
            ua = 0;
            i += ka;
        }
        if (cb >= 0x10000 && ub == 0) ub = 1;
        else {
            ub = 0;
            j += kb;
        }
    }
}

char *ds_jinja_wtf8_to_utf8(const char *p, size_t n, size_t *out_n) {
    size_t need = 0;
    for (size_t i = 0, k; i < n; i += k) {
        uint32_t cp = ds_jinja_wtf8_decode(p + i, n - i, &k);
        need += cp == 0xFFFD && k == 1 ? 3 : k;
    }
    char *out = malloc(need + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0, k; i < n; i += k) {
        uint32_t cp = ds_jinja_wtf8_decode(p + i, n - i, &k);
        if (cp >= 0xD800 && cp <= 0xDBFF && i + k < n) {
            size_t k2;
            uint32_t lo = ds_jinja_wtf8_decode(p + i + k, n - i - k, &k2);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                o += ds_jinja_wtf8_encode(0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00), out + o);
                k += k2;
                continue;
            }
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
        o += ds_jinja_wtf8_encode(cp, out + o);
    }
    out[o] = '\0';
    *out_n = o;
    return out;
}

/* --- numbers --- */

/* Number.prototype.toString(); buf >= 32 bytes */
static size_t js_number_format(double x, char *buf) {
    if (isnan(x)) return (size_t)sprintf(buf, "NaN");
    if (isinf(x)) return (size_t)sprintf(buf, x < 0 ? "-Infinity" : "Infinity");
    if (x == 0) return (size_t)sprintf(buf, "0");
    char tmp[48], digits[24];
    int p;
    for (p = 1; p <= 17; p++) {   /* the shortest digits that read back as x */
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, fabs(x));
        if (strtod(tmp, NULL) == fabs(x)) break;
    }
    int k = 0, e10 = 0;
    const char *q = tmp;
    for (; *q && *q != 'e'; q++)
        if (isdigit((unsigned char)*q)) digits[k++] = *q;
    if (*q == 'e') e10 = atoi(q + 1);
    while (k > 1 && digits[k - 1] == '0') k--;
    digits[k] = '\0';
    int n = e10 + 1;
    char *o = buf;
    if (x < 0) *o++ = '-';
    if (k <= n && n <= 21) {
        o += sprintf(o, "%s", digits);
        for (int z = 0; z < n - k; z++) *o++ = '0';
    } else if (0 < n && n <= 21) {
        memcpy(o, digits, (size_t)n);
        o += n;
        *o++ = '.';
        o += sprintf(o, "%s", digits + n);
    } else if (-6 < n && n <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int z = 0; z < -n; z++) *o++ = '0';
        o += sprintf(o, "%s", digits);
    } else {
        *o++ = digits[0];
        if (k > 1) {
            *o++ = '.';
            o += sprintf(o, "%s", digits + 1);
        }
        o += sprintf(o, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
    }
    *o = '\0';
    return (size_t)(o - buf);
}

/* FloatValue.toString(): whole numbers keep a ".0". */
static size_t float_format(double x, char *buf) {
    if (x == 0 && signbit(x)) return (size_t)sprintf(buf, "-0.0");
    if (isfinite(x) && fmod(x, 1.0) == 0 && fabs(x) < 1e21) return (size_t)sprintf(buf, "%.1f", x);
    return js_number_format(x, buf);
}

/* JavaScript's StringToNumber (what "1" == 1 converts with). */
static double js_string_to_number(jstr s) {
    s = ds_jinja_str_trim(s, 1, 1);
    if (s.n == 0) return 0;
    char buf[128];
    if (s.n >= sizeof buf) return NAN;
    memcpy(buf, s.p, s.n);
    buf[s.n] = '\0';
    const char *p = buf;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X' || p[1] == 'o' || p[1] == 'O' || p[1] == 'b' || p[1] == 'B')) {
        int base = (p[1] == 'x' || p[1] == 'X') ? 16 : (p[1] == 'o' || p[1] == 'O') ? 8 : 2;
        double v = 0;
        if (!p[2]) return NAN;
        for (p += 2; *p; p++) {
            int d = isdigit((unsigned char)*p) ? *p - '0' : isalpha((unsigned char)*p) ? tolower(*p) - 'a' + 10 : 99;
            if (d >= base) return NAN;
            v = v * base + d;
        }
        return v;
    }
    const char *q = p;
    if (*q == '+' || *q == '-') q++;
    if (!strcmp(q, "Infinity")) return *p == '-' ? -INFINITY : INFINITY;
    int digits = 0;
    while (isdigit((unsigned char)*q)) q++, digits++;
    if (*q == '.') {
        q++;
        while (isdigit((unsigned char)*q)) q++, digits++;
    }
    if (!digits) return NAN;
    if (*q == 'e' || *q == 'E') {
        q++;
        if (*q == '+' || *q == '-') q++;
        if (!isdigit((unsigned char)*q)) return NAN;
        while (isdigit((unsigned char)*q)) q++;
    }
    if (*q) return NAN;
    return strtod(p, NULL);
}

/* --- values --- */

const char *ds_jinja_value_type_name(jv v) {
    switch (v.k) {
    case JV_UNDEF: return "UndefinedValue";
    case JV_NULL: return "NullValue";
    case JV_BOOL: return "BooleanValue";
    case JV_INT: return "IntegerValue";
    case JV_FLOAT: return "FloatValue";
    case JV_STR: return "StringValue";
    case JV_ARRAY: return v.u.a->tuple ? "TupleValue" : "ArrayValue";
    case JV_OBJECT: return v.u.o->kwargs ? "KeywordArgumentsValue" : "ObjectValue";
    case JV_NS: return "NamespaceValue";
    default: return "FunctionValue";
    }
}

int ds_jinja_value_truthy(jv v) {
    switch (v.k) {
    case JV_BOOL: return v.u.b;
    case JV_INT:
    case JV_FLOAT: return v.u.n != 0 && !isnan(v.u.n);
    case JV_STR: return v.u.s.n > 0;
    case JV_ARRAY: return v.u.a->n > 0;
    case JV_OBJECT: return v.u.o->n > 0;
    case JV_NS:
    case JV_FUNC: return 1;   /* a JavaScript Map or function is always true */
    default: return 0;
    }
}

int ds_jinja_value_new_array(jr *r, uint32_t pos, size_t n, jv *out) {
    jarr *a = ds_jinja_arena_zalloc(&r->arena, sizeof *a);
    if (!a || n > ((size_t)1 << 40) / sizeof(jv)) return ds_jinja_fail_oom(r, pos);
    a->n = n;
    if (n && !(a->items = ds_jinja_arena_zalloc(&r->arena, n * sizeof(jv)))) return ds_jinja_fail_oom(r, pos);
    out->k = JV_ARRAY;
    out->u.a = a;
    return J_OK;
}

int ds_jinja_value_new_object(jr *r, uint32_t pos, size_t cap, int kind, jv *out) {
    jobj *o = ds_jinja_arena_zalloc(&r->arena, sizeof *o);
    if (!o) return ds_jinja_fail_oom(r, pos);
    if (cap) {
        o->keys = ds_jinja_arena_alloc(&r->arena, cap * sizeof *o->keys);
        o->vals = ds_jinja_arena_alloc(&r->arena, cap * sizeof *o->vals);
        if (!o->keys || !o->vals) return ds_jinja_fail_oom(r, pos);
        o->cap = cap;
    }
    out->k = (uint8_t)kind;
    out->u.o = o;
    return J_OK;
}

static uint64_t hash_key(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

#define JOBJ_LINEAR 8

static long jobj_find(const jobj *o, const char *k, size_t kn) {
    if (!o->index) {
        for (size_t i = 0; i < o->n; i++)
            if (o->keys[i].n == kn && (kn == 0 || !memcmp(o->keys[i].p, k, kn))) return (long)i;
        return -1;
    }
    size_t mask = o->index_cap - 1;
    for (size_t h = (size_t)hash_key(k, kn) & mask;; h = (h + 1) & mask) {
        uint32_t slot = o->index[h];
        if (!slot) return -1;
        const jstr *key = &o->keys[slot - 1];
        if (key->n == kn && (kn == 0 || !memcmp(key->p, k, kn))) return (long)slot - 1;
    }
}

const jv *ds_jinja_obj_get(const jobj *o, const char *k, size_t kn) {
    long i = jobj_find(o, k, kn);
    return i < 0 ? NULL : &o->vals[i];
}

static int jobj_reindex(jr *r, uint32_t pos, jobj *o, size_t cap) {
    uint32_t *idx = ds_jinja_arena_zalloc(&r->arena, cap * sizeof *idx);
    if (!idx) return ds_jinja_fail_oom(r, pos);
    for (size_t i = 0; i < o->n; i++) {
        size_t h = (size_t)hash_key(o->keys[i].p, o->keys[i].n) & (cap - 1);
        while (idx[h]) h = (h + 1) & (cap - 1);
        idx[h] = (uint32_t)(i + 1);
    }
    o->index = idx;
    o->index_cap = cap;
    return J_OK;
}

int ds_jinja_obj_set(jr *r, uint32_t pos, jobj *o, jstr key, jv val) {
    long i = jobj_find(o, key.p, key.n);
    if (i >= 0) {   /* a Map keeps the first position of a key */
        o->vals[i] = val;
        return J_OK;
    }
    if (o->n >= 0x7fffffff) return ds_jinja_fail_oom(r, pos);
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 4;
        jstr *k = ds_jinja_arena_grow(&r->arena, o->keys, o->cap * sizeof *k, cap * sizeof *k);
        if (!k) return ds_jinja_fail_oom(r, pos);
        o->keys = k;
        jv *v = ds_jinja_arena_grow(&r->arena, o->vals, o->cap * sizeof *v, cap * sizeof *v);
        if (!v) return ds_jinja_fail_oom(r, pos);
        o->vals = v;
        o->cap = cap;
    }
    o->keys[o->n] = key;
    o->vals[o->n] = val;
    o->n++;
    if (o->n > JOBJ_LINEAR && o->n * 2 > o->index_cap) {
        size_t cap = 32;
        while (cap < o->n * 4) cap *= 2;
        return jobj_reindex(r, pos, o, cap);
    }
    if (o->index) {
        size_t mask = o->index_cap - 1, h = (size_t)hash_key(key.p, key.n) & mask;
        while (o->index[h]) h = (h + 1) & mask;
        o->index[h] = (uint32_t)o->n;
    }
    return J_OK;
}

int ds_jinja_value_new_func(jr *r, uint32_t pos, int kind, int id, jv self, const jnode *node, jscope *scope, jv *out) {
    jfunc *f = ds_jinja_arena_zalloc(&r->arena, sizeof *f);
    if (!f) return ds_jinja_fail_oom(r, pos);
    f->kind = kind;
    f->id = id;
    f->self = self;
    f->node = node;
    f->scope = scope;
    out->k = JV_FUNC;
    out->u.f = f;
    return J_OK;
}

int ds_jinja_value_concat(jr *r, uint32_t pos, jstr a, jstr b, jv *out) {
    if (a.n > r->lim.max_output || b.n > r->lim.max_output - a.n)
        return ds_jinja_fail(r, pos, DS_ENOMEM, "string longer than the limit of %zu bytes", r->lim.max_output);
    char *p = ds_jinja_arena_alloc(&r->arena, a.n + b.n + 1);
    if (!p) return ds_jinja_fail_oom(r, pos);
    if (a.n) memcpy(p, a.p, a.n);
    if (b.n) memcpy(p + a.n, b.p, b.n);
    p[a.n + b.n] = '\0';
    *out = jv_str(p, a.n + b.n);
    return J_OK;
}

/* A key JavaScript treats as an array index ("0", "17", not "01"): such
 * keys come first, in numeric order, in Object.entries of a parsed object. */
static int index_key_n(const char *k, size_t n, double *v) {
    if (n == 0 || n > 10 || (n > 1 && k[0] == '0')) return 0;
    double x = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)k[i])) return 0;
        x = x * 10 + (k[i] - '0');
    }
    *v = x;
    return x <= 4294967294.0;
}

typedef struct {
    const char *k;
    size_t kn;
    const json_t *v;
} jmember;

int ds_jinja_value_from_json(jr *r, const json_t *j, jv *out, int depth) {
    if (depth > 1000) return ds_jinja_fail(r, 0, DS_EINVAL, "context nested more than 1000 deep");
    if (json_is_null(j)) *out = jv_null();
    else if (json_is_boolean(j)) *out = jv_bool(json_is_true(j));
    else if (json_is_number(j)) {
        double x = json_number_value(j);
        *out = isfinite(x) && floor(x) == x ? jv_int(x) : jv_float(x);
    } else if (json_is_string(j)) *out = jv_str(json_string_value(j), json_string_length(j));
    else if (json_is_array(j)) {
        size_t n = json_array_size(j);
        JTRY(ds_jinja_value_new_array(r, 0, n, out));
        for (size_t i = 0; i < n; i++) JTRY(ds_jinja_value_from_json(r, json_array_get(j, i), &out->u.a->items[i], depth + 1));
    } else if (json_is_object(j)) {
        size_t n = json_object_size(j), m = 0;
        JTRY(ds_jinja_value_new_object(r, 0, n, JV_OBJECT, out));
        if (!n) return J_OK;
        jmember *mem = ds_jinja_arena_alloc(&r->arena, n * sizeof *mem);
        if (!mem) return ds_jinja_fail_oom(r, 0);
        const char *k;
        size_t kn;
        json_t *v;
        /* as a JavaScript object: integer-like keys first, ascending, then the rest in insertion order */
        json_object_keylen_foreach((json_t *)j, k, kn, v) {
            double x, w;
            if (m == n) break;
            if (!index_key_n(k, kn, &x)) continue;
            size_t at = m++;   /* insertion sort keeps equal keys in order */
            while (at > 0 && (index_key_n(mem[at - 1].k, mem[at - 1].kn, &w), w > x)) {
                mem[at] = mem[at - 1];
                at--;
            }
            mem[at] = (jmember){k, kn, v};
        }
        json_object_keylen_foreach((json_t *)j, k, kn, v) {
            double x;
            if (m == n) break;
            if (!index_key_n(k, kn, &x)) mem[m++] = (jmember){k, kn, v};
        }
        for (size_t i = 0; i < m; i++) {
            jv val;
            JTRY(ds_jinja_value_from_json(r, mem[i].v, &val, depth + 1));
            JTRY(ds_jinja_obj_set(r, 0, out->u.o, (jstr){mem[i].k, mem[i].kn}, val));
        }
    } else {
        return ds_jinja_fail(r, 0, DS_EINVAL, "context holds a JSON value of an unknown type");
    }
    return J_OK;
}

/* --- text forms --- */

static int put_number(jr *r, uint32_t pos, jbuf *b, double x) {
    char num[40];
    return ds_jinja_buf_put(r, pos, b, num, js_number_format(x, num));
}

int ds_jinja_value_render(jr *r, uint32_t pos, jv v, jbuf *b) {
    char num[40];
    switch (v.k) {
    case JV_UNDEF: return jbuf_puts(r, pos, b, "undefined");
    case JV_NULL: return jbuf_puts(r, pos, b, "null");
    case JV_BOOL: return jbuf_puts(r, pos, b, v.u.b ? "true" : "false");
    case JV_INT: return put_number(r, pos, b, v.u.n);
    case JV_FLOAT: return ds_jinja_buf_put(r, pos, b, num, float_format(v.u.n, num));
    case JV_STR: return ds_jinja_buf_put(r, pos, b, v.u.s.p, v.u.s.n);
    case JV_ARRAY:
    case JV_OBJECT:
    case JV_NS: {
        jjson_opts o = {0};
        return ds_jinja_value_tojson(r, pos, v, &o, 0, b);
    }
    default: return ds_jinja_fail(r, pos, DS_EINVAL, "cannot print a function (a macro or method, not its result)");
    }
}

int ds_jinja_value_to_rendered_str(jr *r, uint32_t pos, jv v, jv *out) {
    if (v.k == JV_STR) {
        *out = v;
        return J_OK;
    }
    jbuf b = {0};
    JTRY(ds_jinja_value_render(r, pos, v, &b));
    return ds_jinja_value_buf_to_str(r, pos, &b, out);
}

int ds_jinja_value_raw_string(jr *r, uint32_t pos, jv v, jbuf *b) {
    switch (v.k) {
    case JV_INT:
    case JV_FLOAT: return put_number(r, pos, b, v.u.n);
    case JV_ARRAY:
        for (size_t i = 0; i < v.u.a->n; i++) {
            if (i) JTRY(ds_jinja_buf_putc(r, pos, b, ','));
            JTRY(ds_jinja_value_render(r, pos, v.u.a->items[i], b));
        }
        return J_OK;
    case JV_OBJECT:
    case JV_NS: return jbuf_puts(r, pos, b, "[object Map]");
    default: return ds_jinja_value_render(r, pos, v, b);
    }
}

int ds_jinja_value_join_item(jr *r, uint32_t pos, jv v, jbuf *b) {
    if (v.k == JV_UNDEF || v.k == JV_NULL) return J_OK;
    return ds_jinja_value_raw_string(r, pos, v, b);
}

/* JSON.stringify of a string, then ensure_ascii's \uXXXX for code units >= 0x7f. */
static int json_quote(jr *r, uint32_t pos, jstr s, int ascii, jbuf *b) {
    static const char hex[] = "0123456789abcdef";
    JTRY(ds_jinja_buf_putc(r, pos, b, '"'));
    size_t run = 0;   /* bytes copied as they are, written in one go */
    for (size_t i = 0, k; i < s.n; i += k) {
        uint32_t cp = ds_jinja_wtf8_decode(s.p + i, s.n - i, &k);
        char esc[16];
        size_t en = 0;
        if (cp == '"' || cp == '\\') {
            esc[0] = '\\';
            esc[1] = (char)cp;
            en = 2;
        } else if (cp < 0x20) {
            const char *named = cp == '\b' ? "\\b" : cp == '\f' ? "\\f" : cp == '\n' ? "\\n" : cp == '\r' ? "\\r"
                              : cp == '\t' ? "\\t" : NULL;
            if (named) {
                memcpy(esc, named, 2);
                en = 2;
            } else {
                en = (size_t)sprintf(esc, "\\u%04x", cp);
            }
        } else if ((cp >= 0xD800 && cp <= 0xDFFF) || (ascii && cp >= 0x7F && !(k == 1 && cp == 0xFFFD))) {
            for (int u = 0; u < (cp >= 0x10000 ? 2 : 1); u++) {
                uint32_t unit = unit_of(cp, u);
                esc[en++] = '\\';
                esc[en++] = 'u';
                for (int sh = 12; sh >= 0; sh -= 4) esc[en++] = hex[(unit >> sh) & 15];
            }
        }
        if (en) {
            JTRY(ds_jinja_buf_put(r, pos, b, s.p + i - run, run));
            run = 0;
            JTRY(ds_jinja_buf_put(r, pos, b, esc, en));
        } else {
            run += k;
        }
    }
    JTRY(ds_jinja_buf_put(r, pos, b, s.p + s.n - run, run));
    return ds_jinja_buf_putc(r, pos, b, '"');
}

static int pad(jr *r, uint32_t pos, jbuf *b, int indent, int depth) {
    JTRY(ds_jinja_buf_putc(r, pos, b, '\n'));
    size_t n = (size_t)indent * (size_t)depth;
    while (n--) JTRY(ds_jinja_buf_putc(r, pos, b, ' '));
    return J_OK;
}

/* localeCompare stand-in for sort_keys: letters compare without case first,
 * then lower case before upper, as ICU's root collation does for ASCII. */
static int key_compare(jstr a, jstr b) {
    size_t n = a.n < b.n ? a.n : b.n;
    for (size_t i = 0; i < n; i++) {
        int x = tolower((unsigned char)a.p[i]), y = tolower((unsigned char)b.p[i]);
        if (x != y) return x < y ? -1 : 1;
    }
    if (a.n != b.n) return a.n < b.n ? -1 : 1;
    for (size_t i = 0; i < n; i++)
        if (a.p[i] != b.p[i]) return islower((unsigned char)a.p[i]) ? -1 : 1;
    return 0;
}

int ds_jinja_value_tojson(jr *r, uint32_t pos, jv v, const jjson_opts *o, int depth, jbuf *b) {
    if (depth > 1000) return ds_jinja_fail(r, pos, DS_EINVAL, "value nested too deep (or holding itself) for JSON");
    if (++r->steps > r->lim.max_steps)
        return ds_jinja_fail(r, pos, DS_ENOMEM, "more than %llu evaluation steps", (unsigned long long)r->lim.max_steps);
    jstr item_sep = o->item_sep, key_sep = o->key_sep;
    if (!item_sep.p) {
        item_sep.p = o->indent ? "," : ", ";
        item_sep.n = strlen(item_sep.p);
        key_sep.p = ": ";
        key_sep.n = 2;
    }
    switch (v.k) {
    case JV_NULL: return jbuf_puts(r, pos, b, "null");
    case JV_UNDEF: return jbuf_puts(r, pos, b, o->undefined_as_null ? "null" : "undefined");
    case JV_BOOL: return jbuf_puts(r, pos, b, v.u.b ? "true" : "false");
    case JV_INT:
    case JV_FLOAT: return isfinite(v.u.n) ? put_number(r, pos, b, v.u.n) : jbuf_puts(r, pos, b, "null");
    case JV_STR: return json_quote(r, pos, v.u.s, o->ensure_ascii, b);
    case JV_ARRAY:
        if (v.u.a->tuple) break;
        JTRY(ds_jinja_buf_putc(r, pos, b, '['));
        for (size_t i = 0; i < v.u.a->n; i++) {
            if (i) JTRY(ds_jinja_buf_put(r, pos, b, item_sep.p, item_sep.n));
            if (o->indent) JTRY(pad(r, pos, b, o->indent, depth + 1));
            JTRY(ds_jinja_value_tojson(r, pos, v.u.a->items[i], o, depth + 1, b));
        }
        if (o->indent && v.u.a->n) JTRY(pad(r, pos, b, o->indent, depth));
        return ds_jinja_buf_putc(r, pos, b, ']');
    case JV_OBJECT:
    case JV_NS: {
        const jobj *ob = v.u.o;
        if (ob->kwargs) break;
        size_t *order = NULL;
        if (o->sort_keys && ob->n > 1) {
            if (!(order = ds_jinja_arena_alloc(&r->arena, ob->n * sizeof *order))) return ds_jinja_fail_oom(r, pos);
            for (size_t i = 0; i < ob->n; i++) {   /* insertion sort: stable, and objects are small */
                size_t at = i;
                while (at > 0 && key_compare(ob->keys[order[at - 1]], ob->keys[i]) > 0) {
                    order[at] = order[at - 1];
                    at--;
                }
                order[at] = i;
            }
        }
        JTRY(ds_jinja_buf_putc(r, pos, b, '{'));
        for (size_t i = 0; i < ob->n; i++) {
            size_t e = order ? order[i] : i;
            if (i) JTRY(ds_jinja_buf_put(r, pos, b, item_sep.p, item_sep.n));
            if (o->indent) JTRY(pad(r, pos, b, o->indent, depth + 1));
            JTRY(json_quote(r, pos, ob->keys[e], o->ensure_ascii, b));
            JTRY(ds_jinja_buf_put(r, pos, b, key_sep.p, key_sep.n));
            JTRY(ds_jinja_value_tojson(r, pos, ob->vals[e], o, depth + 1, b));
        }
        if (o->indent && ob->n) JTRY(pad(r, pos, b, o->indent, depth));
        return ds_jinja_buf_putc(r, pos, b, '}');
    }
    default: break;
    }
    return ds_jinja_fail(r, pos, DS_EINVAL, "cannot convert %s to JSON", ds_jinja_value_type_name(v));
}

/* --- equality --- */

static int js_object(jv v) { return v.k == JV_ARRAY || v.k == JV_OBJECT || v.k == JV_NS || v.k == JV_FUNC; }
static const void *ref_of(jv v) {
    return v.k == JV_ARRAY ? (const void *)v.u.a : v.k == JV_FUNC ? (const void *)v.u.f : (const void *)v.u.o;
}
static int is_num(jv v) { return v.k == JV_INT || v.k == JV_FLOAT; }

int ds_jinja_value_strict_eq(jv a, jv b) {
    if (is_num(a) && is_num(b)) return a.u.n == b.u.n;
    if (a.k != b.k) return 0;
    switch (a.k) {
    case JV_UNDEF:
    case JV_NULL: return 1;
    case JV_BOOL: return a.u.b == b.u.b;
    case JV_STR: return jstr_same(a.u.s, b.u.s);
    default: return ref_of(a) == ref_of(b);
    }
}

int ds_jinja_value_same_value_zero(jv a, jv b) {
    if (is_num(a) && is_num(b) && isnan(a.u.n) && isnan(b.u.n)) return 1;
    return ds_jinja_value_strict_eq(a, b);
}

/* IsLooselyEqual of the ECMAScript spec, on the values' JavaScript forms. */
int ds_jinja_value_loose_eq(jr *r, uint32_t pos, jv a, jv b, int *eq) {
    for (int round = 0; round < 4; round++) {
        int same_type = (is_num(a) && is_num(b)) || (js_object(a) && js_object(b)) || a.k == b.k;
        if (same_type) {
            *eq = ds_jinja_value_strict_eq(a, b);
            return J_OK;
        }
        int a_nullish = a.k == JV_NULL || a.k == JV_UNDEF, b_nullish = b.k == JV_NULL || b.k == JV_UNDEF;
        if (a_nullish || b_nullish) {
            *eq = a_nullish && b_nullish;
            return J_OK;
        }
        if (is_num(a) && b.k == JV_STR) {
            *eq = a.u.n == js_string_to_number(b.u.s);
            return J_OK;
        }
        if (a.k == JV_STR && is_num(b)) {
            *eq = js_string_to_number(a.u.s) == b.u.n;
            return J_OK;
        }
        if (a.k == JV_BOOL) a = jv_int(a.u.b);
        else if (b.k == JV_BOOL) b = jv_int(b.u.b);
        else if (js_object(a) || js_object(b)) {
            jv *obj = js_object(a) ? &a : &b;
            if (obj->k == JV_FUNC) {   /* a function's source text never equals a template value */
                *eq = 0;
                return J_OK;
            }
            jbuf buf = {0};
            JTRY(ds_jinja_value_raw_string(r, pos, *obj, &buf));
            JTRY(ds_jinja_value_buf_to_str(r, pos, &buf, obj));
        }
    }
    *eq = 0;
    return J_OK;
}
