/* stop_filter.c - see stop_filter.h. */
#include "server/stop_filter.h"

#include <string.h>

void ds_stop_filter_init(ds_stop_filter *f, char *const *stops, const size_t *lens, int n_stops) {
    *f = (ds_stop_filter){.stops = stops, .lens = lens, .n_stops = n_stops, .which = -1};
}

static const char *find(const char *h, size_t hn, const char *nd, size_t nn) {
    if (!nn || nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == nd[0] && !memcmp(h + i, nd, nn)) return h + i;
    return NULL;
}

static size_t stop_len(const ds_stop_filter *f, int i) { return f->lens ? f->lens[i] : strlen(f->stops[i]); }

int ds_stop_filter_feed(ds_stop_filter *f, const char *s, size_t n, ds_text_fn fn, void *user) {
    if (f->hit) return 1;
    if (!f->n_stops) {
        if (n) fn(user, s, n);
        return 0;
    }
    ds_sb_append(&f->hold, s, n);
    const char *h = f->hold.s ? f->hold.s : "";
    size_t hn = f->hold.n;
    size_t best = (size_t)-1;
    int which = -1;
    for (int i = 0; i < f->n_stops; i++) {
        const char *p = find(h, hn, f->stops[i], stop_len(f, i));
        if (p && (size_t)(p - h) < best) best = (size_t)(p - h), which = i;
    }
    if (best != (size_t)-1) {
        if (best) fn(user, h, best);
        ds_sb_clear(&f->hold);
        f->hit = 1;
        f->which = which;
        return 1;
    }
    /* hold back the longest suffix that is a proper prefix of a stop string */
    size_t keep = 0;
    for (int i = 0; i < f->n_stops; i++) {
        size_t sl = stop_len(f, i);
        if (!sl) continue; /* an empty stop string matches nothing (and sl - 1 would wrap) */
        for (size_t k = sl - 1 < hn ? sl - 1 : hn; k > keep; k--)
            if (!memcmp(h + hn - k, f->stops[i], k)) { keep = k; break; }
    }
    if (hn - keep) fn(user, h, hn - keep);
    ds_sb_consume(&f->hold, hn - keep);
    return 0;
}

void ds_stop_filter_finish(ds_stop_filter *f, ds_text_fn fn, void *user) {
    if (!f->hit && f->hold.n) fn(user, f->hold.s, f->hold.n);
    ds_sb_clear(&f->hold);
}

void ds_stop_filter_free(ds_stop_filter *f) { ds_sb_free(&f->hold); }
