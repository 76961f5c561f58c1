/* pretokenize.c - see pretokenize.h. */
#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

struct ds_pretok {
    pcre2_code *re;
};

/* \s -> \p{White_Space}, \S -> \P{White_Space}; every other escape is kept. */
static char *translate(const char *pattern) {
    size_t n = strlen(pattern), extra = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (pattern[i] == '\\') {
            if (pattern[i + 1] == 's' || pattern[i + 1] == 'S') extra += 13;
            i++;
        }
    char *out = malloc(n + extra + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (pattern[i] == '\\' && i + 1 < n) {
            char c = pattern[++i];
            if (c == 's' || c == 'S') {
                memcpy(o, c == 's' ? "\\p{White_Space}" : "\\P{White_Space}", 15);
                o += 15;
            } else {
                *o++ = '\\';
                *o++ = c;
            }
        } else {
            *o++ = pattern[i];
        }
    }
    *o = '\0';
    return out;
}

ds_status ds_pretok_new(const char *pattern, ds_pretok **out, ds_err *e) {
    *out = NULL;
    ds_pretok *p = calloc(1, sizeof *p);
    char *pat = translate(pattern);
    if (!p || !pat) {
        free(p);
        free(pat);
        return ds_fail(e, DS_ENOMEM, "out of memory compiling the pre-tokenizer pattern");
    }
    int code;
    PCRE2_SIZE at;
    p->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
    free(pat);
    if (!p->re) {
        PCRE2_UCHAR msg[200];
        pcre2_get_error_message(code, msg, sizeof msg);
        free(p);
        return ds_fail(e, DS_EUNSUPPORTED, "pre-tokenizer pattern '%.80s': PCRE2 error at offset %zu: %s", pattern,
                       (size_t)at, (const char *)msg);
    }
    /* without JIT (a build or platform without it) the interpreter gives the same matches, slower */
    (void)pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE);
    *out = p;
    return DS_OK;
}

void ds_pretok_free(ds_pretok *p) {
    if (!p) return;
    pcre2_code_free(p->re);
    free(p);
}

/* Start of the UTF-8 character after position i (text is well-formed). */
static size_t next_char(const char *text, size_t len, size_t i) {
    i++;
    while (i < len && ((unsigned char)text[i] & 0xC0) == 0x80) i++;
    return i;
}

ds_status ds_pretok_split(const ds_pretok *p, const char *text, size_t len, ds_pretok_fn fn, void *ctx, ds_err *e) {
    if (len == 0) return DS_OK;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) return ds_fail(e, DS_ENOMEM, "out of memory splitting %zu bytes of text", len);
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    ds_status s = DS_OK;
    size_t piece = 0, from = 0; /* start of the pending gap; where the next search begins */
    while (from < len && !s) {
        int rc = pcre2_match(p->re, (PCRE2_SPTR)text, len, from, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            /* the interpreter keeps its backtracking state on the heap */
            rc = pcre2_match(p->re, (PCRE2_SPTR)text, len, from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[200];
            pcre2_get_error_message(rc, msg, sizeof msg);
            s = ds_fail(e, DS_ENOMEM, "pre-tokenizer regex failed at byte %zu of %zu: %s", (size_t)from, len,
                        (const char *)msg);
            break;
        }
        size_t a = ov[0], b = ov[1];
        if (a == b) { /* an empty match splits nothing (Hugging Face drops them) */
            from = next_char(text, len, a);
            continue;
        }
        if (a > piece) s = fn(ctx, text + piece, a - piece, e);
        if (!s) s = fn(ctx, text + a, b - a, e);
        piece = from = b;
    }
    if (!s && piece < len) s = fn(ctx, text + piece, len - piece, e);
    pcre2_match_data_free(md);
    return s;
}
