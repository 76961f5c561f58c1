/* stop_filter.h - OpenAI `stop` strings on streamed text.
 *
 * Text goes in piece by piece; what comes out is the text up to (not
 * including) the first stop string. Text that could still be the start of a
 * stop string is held back until it cannot, so a partial match never leaks.
 * Used on the HTTP thread of one request; owns copies of nothing but its
 * hold buffer (the stop strings are borrowed). */
#ifndef DS_STOP_FILTER_H
#define DS_STOP_FILTER_H

#include <stddef.h>

#include "common/strbuf.h"

typedef void (*ds_text_fn)(void *user, const char *s, size_t n);

typedef struct {
    char *const *stops;   /* borrowed */
    const size_t *lens;   /* borrowed: their lengths (a stop string may hold U+0000), or NULL: C strings */
    int n_stops;
    ds_sb hold;
    int hit;              /* a stop string was found: nothing more comes out */
    int which;            /* ... and which one (the earliest in the text): its index, -1 before */
} ds_stop_filter;

void ds_stop_filter_init(ds_stop_filter *f, char *const *stops, const size_t *lens, int n_stops);
/* Passes the safe part of the text so far to fn; returns 1 when a stop string matched. */
int ds_stop_filter_feed(ds_stop_filter *f, const char *s, size_t n, ds_text_fn fn, void *user);
/* End of text: the held-back rest is safe now. */
void ds_stop_filter_finish(ds_stop_filter *f, ds_text_fn fn, void *user);
void ds_stop_filter_free(ds_stop_filter *f);

#endif
