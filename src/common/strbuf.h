/* strbuf.h - a growable byte string (NUL-terminated, may hold NULs).
 * Owned by whoever embeds it; ds_sb_free releases it. Appends never fail
 * silently: on allocation failure the buffer is marked broken (oom = 1). */
#ifndef DS_STRBUF_H
#define DS_STRBUF_H

#include <stddef.h>

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} ds_sb;

void ds_sb_append(ds_sb *b, const char *s, size_t n);
void ds_sb_puts(ds_sb *b, const char *s);
void ds_sb_printf(ds_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Removes the first n bytes. */
void ds_sb_consume(ds_sb *b, size_t n);
void ds_sb_clear(ds_sb *b);
void ds_sb_free(ds_sb *b);

#endif
