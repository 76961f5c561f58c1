/* json_text.c - see json_text.h. */
#include "server/json_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/utf8.h"

static int hex4(const char *s, size_t n, unsigned *out) {
    if (n < 4) return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        v = v << 4 | (unsigned)d;
    }
    *out = v;
    return 1;
}

typedef struct {
    size_t too_deep_at;   /* byte offset of the bracket past the limit, or SIZE_MAX */
    size_t want;          /* an offset in the cleaned text ... */
    size_t want_orig;     /* ... and where it came from in the original */
} scan_info;

/* One pass over text: writes the cleaned text to out (when not NULL) and
 * returns its length. Lone surrogate escapes keep their length (\uFFFD);
 * an ill-formed UTF-8 subpart of k bytes becomes the 3 of U+FFFD. */
static size_t scan(const char *text, size_t len, char *out, scan_info *si) {
    size_t i = 0, o = 0;
    int in_str = 0;
    size_t depth = 0;
    si->too_deep_at = SIZE_MAX;
    si->want_orig = len;
#define EMIT(p, k)                                                                   \
    do {                                                                             \
        if (si->want >= o && si->want < o + (k) && si->want_orig == len) si->want_orig = i; \
        if (out) memcpy(out + o, (p), (k));                                          \
        o += (k);                                                                    \
    } while (0)
    while (i < len) {
        unsigned char c = (unsigned char)text[i];
        if (!in_str) {
            if (c == '"') in_str = 1;
            else if (c == '[' || c == '{') {
                if (++depth > DS_JSON_TEXT_MAX_DEPTH && si->too_deep_at == SIZE_MAX) si->too_deep_at = i;
            } else if ((c == ']' || c == '}') && depth) depth--;
            EMIT(text + i, 1);
            i++;
        } else if (c == '"') {
            in_str = 0;
            EMIT(text + i, 1);
            i++;
        } else if (c == '\\') {
            unsigned u, u2;
            if (i + 1 < len && text[i + 1] == 'u' && hex4(text + i + 2, len - i - 2, &u) && u >= 0xD800 && u <= 0xDFFF) {
                int paired = u <= 0xDBFF && i + 12 <= len && text[i + 6] == '\\' && text[i + 7] == 'u' &&
                             hex4(text + i + 8, 4, &u2) && u2 >= 0xDC00 && u2 <= 0xDFFF;
                if (paired) {
                    EMIT(text + i, 12);
                    i += 12;
                } else {
                    EMIT("\\uFFFD", 6);
                    i += 6;
                }
            } else {   /* any other escape: its second byte is never a quote that ends the string */
                size_t k = i + 1 < len ? 2 : 1;
                EMIT(text + i, k);
                i += k;
            }
        } else if (c < 0x80) {
            EMIT(text + i, 1);
            i++;
        } else {
            ds_utf8_kind kind;
            size_t k = ds_utf8_next((const uint8_t *)text + i, len - i, &kind);
            if (kind == DS_UTF8_VALID) EMIT(text + i, k);
            else EMIT(DS_UTF8_REPLACEMENT, 3);
            i += k;
        }
    }
#undef EMIT
    return o;
}

json_t *ds_json_parse(const char *text, size_t len, char *msg, size_t cap) {
    scan_info si = {.want = SIZE_MAX};
    size_t n = scan(text, len, NULL, &si);
    if (si.too_deep_at != SIZE_MAX) {
        snprintf(msg, cap, "nested more than %d levels deep (at byte %zu); %d is the limit",
                 DS_JSON_TEXT_MAX_DEPTH, si.too_deep_at, DS_JSON_TEXT_MAX_DEPTH);
        return NULL;
    }
    char *clean = malloc(n ? n : 1);
    if (!clean) {
        snprintf(msg, cap, "out of memory reading the JSON");
        return NULL;
    }
    scan(text, len, clean, &si);
    json_error_t e;
    json_t *v = json_loadb(clean, n, JSON_ALLOW_NUL | JSON_DECODE_ANY, &e);
    /* an integer past 64 bits is still a number, as in JavaScript */
    if (!v && json_error_code(&e) == json_error_numeric_overflow)
        v = json_loadb(clean, n, JSON_ALLOW_NUL | JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &e);
    if (!v) {
        /* the error's place in the text as sent: the cleaned text may be longer */
        size_t at = e.position > 0 ? (size_t)e.position - 1 : 0;
        int line = e.line, col = e.column;
        if (n != len) {
            si.want = at;
            scan(text, len, NULL, &si);
            at = si.want_orig;
        }
        if (json_error_code(&e) == json_error_end_of_input_expected)
            snprintf(msg, cap, "not valid JSON: only whitespace may follow the value (line %d, column %d, byte %zu)",
                     line, col, at);
        else if (json_error_code(&e) == json_error_premature_end_of_input)
            snprintf(msg, cap, "not valid JSON: it ends too early (%s; byte %zu)", e.text, len);
        else
            snprintf(msg, cap, "not valid JSON: %s (line %d, column %d, byte %zu)", e.text, line, col, at);
    }
    free(clean);
    return v;
}

/* every real of v reads back the same from 15 significant digits */
static int reals_short(const json_t *v, int depth) {
    if (depth > DS_JSON_TEXT_MAX_DEPTH + 8) return 0;
    if (json_is_real(v)) {
        double x = json_real_value(v);
        char buf[40];
        snprintf(buf, sizeof buf, "%.15g", x);
        return !isfinite(x) || strtod(buf, NULL) == x;
    }
    if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) if (!reals_short(x, depth + 1)) return 0;
    } else if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) if (!reals_short(x, depth + 1)) return 0;
    }
    return 1;
}

char *ds_json_dump(const json_t *v) {
    size_t flags = JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY;
    flags |= reals_short(v, 0) ? JSON_REAL_PRECISION(15) : JSON_REAL_PRECISION(17);
    return json_dumps(v, flags);
}

json_t *ds_json_textn(const char *s, size_t n) {
    if (!s) s = "", n = 0;
    if (ds_utf8_valid_prefix((const uint8_t *)s, n) == n) return json_stringn(s, n);
    uint8_t *fixed = malloc(ds_utf8_repaired_len((const uint8_t *)s, n) + 1);
    if (!fixed) return NULL;
    size_t m = ds_utf8_repair((const uint8_t *)s, n, fixed);
    json_t *j = json_stringn((const char *)fixed, m);
    free(fixed);
    return j;
}

json_t *ds_json_text(const char *s) { return ds_json_textn(s, s ? strlen(s) : 0); }

int ds_json_str_is(const json_t *v, const char *lit) {
    size_t n = strlen(lit);
    return json_is_string(v) && json_string_length(v) == n && !memcmp(json_string_value(v), lit, n);
}

const char *ds_json_str(const json_t *v, size_t *len) {
    if (!json_is_string(v)) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = json_string_length(v);
    return json_string_value(v);
}
