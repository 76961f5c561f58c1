/* strbuf.c - see strbuf.h. */
#include "common/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int grow(ds_sb *b, size_t need) {
    if (b->oom) return -1;
    if (b->n + need + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + need + 1) cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) { b->oom = 1; return -1; }
    b->s = p;
    b->cap = cap;
    return 0;
}

void ds_sb_append(ds_sb *b, const char *s, size_t n) {
    if (grow(b, n)) return;
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void ds_sb_puts(ds_sb *b, const char *s) { ds_sb_append(b, s, strlen(s)); }

void ds_sb_printf(ds_sb *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0 || grow(b, (size_t)k)) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

void ds_sb_consume(ds_sb *b, size_t n) {
    if (n >= b->n) { ds_sb_clear(b); return; }
    memmove(b->s, b->s + n, b->n - n);
    b->n -= n;
    b->s[b->n] = 0;
}

void ds_sb_clear(ds_sb *b) {
    b->n = 0;
    if (b->s) b->s[0] = 0;
}

void ds_sb_free(ds_sb *b) {
    free(b->s);
    *b = (ds_sb){0};
}
