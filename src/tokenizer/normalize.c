/* normalize.c - see normalize.h. The steps are utf8proc_map's for NFC
 * (decompose each character, order marks, compose, encode), with utf8proc's
 * own functions for every step but the ordering. */
#include "tokenizer/normalize.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define NFC_OPTIONS (UTF8PROC_STABLE | UTF8PROC_COMPOSE) /* what utf8proc_NFC uses */

static int ccc(utf8proc_int32_t cp) { return utf8proc_get_property(cp)->combining_class; }

/* Stable sort of a[0..n) by combining class; tmp holds n entries. */
static void sort_marks(utf8proc_int32_t *a, size_t n, utf8proc_int32_t *tmp) {
    if (n < 16) { /* insertion sort: marks come in twos and threes */
        for (size_t i = 1; i < n; i++) {
            utf8proc_int32_t x = a[i];
            int cx = ccc(x);
            size_t j = i;
            for (; j > 0 && ccc(a[j - 1]) > cx; j--) a[j] = a[j - 1];
            a[j] = x;
        }
        return;
    }
    size_t h = n / 2;
    sort_marks(a, h, tmp);
    sort_marks(a + h, n - h, tmp);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = ccc(a[j]) < ccc(a[i]) ? a[j++] : a[i++];
    while (i < h) tmp[k++] = a[i++];
    while (j < n) tmp[k++] = a[j++];
    memcpy(a, tmp, n * sizeof *a);
}

/* The canonical ordering algorithm: within each run of non-starters, marks
 * are ordered by combining class, equal classes keeping their order. */
static int order_marks(utf8proc_int32_t *buf, size_t n) {
    utf8proc_int32_t *tmp = NULL;
    for (size_t i = 0; i < n;) {
        if (ccc(buf[i]) == 0) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && ccc(buf[j]) != 0) j++;
        if (j - i >= 16 && !tmp && !(tmp = malloc(n * sizeof *tmp))) return -1;
        sort_marks(buf + i, j - i, tmp);
        i = j;
    }
    free(tmp);
    return 0;
}

ds_status ds_nfc(const char *s, size_t n, const char **res, size_t *res_len, char **owned, ds_err *e) {
    *owned = NULL;
    *res = s;
    *res_len = n;
    /* bytes below 0xCC only begin code points below U+0300: no marks, no
     * Hangul, nothing with a canonical decomposition that NFC would change */
    size_t i = 0;
    while (i < n && (uint8_t)s[i] < 0xCC) i++;
    if (i == n) return DS_OK;
    if (n > (size_t)(SSIZE_MAX / 16)) return ds_fail(e, DS_ENOMEM, "NFC of %zu bytes of text: too long", n);
    const utf8proc_uint8_t *u = (const utf8proc_uint8_t *)s;
    /* first pass: how many code points the decomposition has */
    size_t total = 0;
    int bc = 0;
    for (size_t r = 0; r < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t len = utf8proc_iterate(u + r, (utf8proc_ssize_t)(n - r), &cp);
        if (len <= 0) return ds_fail(e, DS_ECORRUPT, "NFC: byte %zu of %zu is not well-formed UTF-8", r, n);
        total += (size_t)utf8proc_decompose_char(cp, NULL, 0, NFC_OPTIONS, &bc);
        r += (size_t)len;
    }
    /* utf8proc_reencode writes UTF-8 over the code points and a NUL after them */
    utf8proc_int32_t *buf = malloc((total + 1) * sizeof *buf);
    if (!buf) return ds_fail(e, DS_ENOMEM, "out of memory for NFC of %zu bytes", n);
    size_t w = 0;
    bc = 0;
    for (size_t r = 0; r < n;) {
        utf8proc_int32_t cp;
        r += (size_t)utf8proc_iterate(u + r, (utf8proc_ssize_t)(n - r), &cp);
        w += (size_t)utf8proc_decompose_char(cp, buf + w, (utf8proc_ssize_t)(total - w), NFC_OPTIONS, &bc);
    }
    if (order_marks(buf, w)) {
        free(buf);
        return ds_fail(e, DS_ENOMEM, "out of memory for NFC of %zu bytes", n);
    }
    utf8proc_ssize_t len = utf8proc_reencode(buf, (utf8proc_ssize_t)w, NFC_OPTIONS);
    if (len < 0) {
        free(buf);
        return ds_fail(e, DS_ECORRUPT, "NFC of %zu bytes of text: %s", n, utf8proc_errmsg(len));
    }
    *owned = (char *)buf;
    *res = *owned;
    *res_len = (size_t)len;
    return DS_OK;
}
