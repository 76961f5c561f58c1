/* utf8.c - see utf8.h. The byte ranges are those of Unicode's table 3-7
 * ("well-formed UTF-8 byte sequences"), which is what makes surrogates,
 * overlong forms and code points above U+10FFFF ill-formed. */
#include "tokenizer/utf8.h"

#include <string.h>

size_t ds_utf8_next(const uint8_t *s, size_t n, ds_utf8_kind *kind) {
    uint8_t b = s[0];
    if (b < 0x80) {
        *kind = DS_UTF8_VALID;
        return 1;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the next continuation byte */
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        if (b == 0xE0) lo = 0xA0;      /* overlong */
        else if (b == 0xED) hi = 0x9F; /* surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        if (b == 0xF0) lo = 0x90;      /* overlong */
        else if (b == 0xF4) hi = 0x8F; /* above U+10FFFF */
    } else {
        *kind = DS_UTF8_INVALID; /* a continuation byte, C0, C1 or F5..FF */
        return 1;
    }
    for (size_t i = 1; i <= need; i++) {
        if (i >= n) {
            *kind = DS_UTF8_TRUNCATED;
            return i;
        }
        if (s[i] < lo || s[i] > hi) {
            /* the offending byte is not part of the subpart: it starts the next one */
            *kind = DS_UTF8_INVALID;
            return i;
        }
        lo = 0x80;
        hi = 0xBF;
    }
    *kind = DS_UTF8_VALID;
    return need + 1;
}

size_t ds_utf8_valid_prefix(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        /* ASCII runs dominate real text: skip them eight bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        ds_utf8_kind k;
        size_t len = ds_utf8_next(s + i, n - i, &k);
        if (k != DS_UTF8_VALID) break;
        i += len;
    }
    return i;
}

size_t ds_utf8_repaired_len(const uint8_t *s, size_t n) {
    size_t out = 0;
    for (size_t i = 0; i < n;) {
        ds_utf8_kind k;
        size_t len = ds_utf8_next(s + i, n - i, &k);
        out += k == DS_UTF8_VALID ? len : 3;
        i += len;
    }
    return out;
}

size_t ds_utf8_repair(const uint8_t *s, size_t n, uint8_t *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        ds_utf8_kind k;
        size_t len = ds_utf8_next(s + i, n - i, &k);
        if (k == DS_UTF8_VALID) {
            memcpy(out + o, s + i, len);
            o += len;
        } else {
            memcpy(out + o, DS_UTF8_REPLACEMENT, 3);
            o += 3;
        }
        i += len;
    }
    return o;
}
