/* fuzz_server_stream.c - the server's streaming text filters, fed in chunks:
 * the stop-string filter (server/stop_filter.h) and the reasoning / tool-call
 * splitter (server/chat_parser.h). Input: one byte of settings (bits 0-1:
 * stop strings, 0..3; bits 2-4: chunk length - 1; bit 5: start in
 * reasoning; bit 6: parse tools), the stop strings each ended by a NUL,
 * then the generated text.
 * Invariant: the stop filter passes a prefix of the text without stop
 * strings that ends where one begins (all of it when there is none). */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "server/chat_parser.h"
#include "server/json_text.h"
#include "server/stop_filter.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    char *buf;
    size_t n, cap;
} ss_acc;

static void ss_text(void *user, const char *s, size_t n) {
    ss_acc *a = user;
    FUZZ_CHECK(n > 0 || s != NULL, "null text");
    if (a->n + n > a->cap) {
        size_t cap = (a->n + n) * 2 + 16;
        char *b = realloc(a->buf, cap);
        if (!b) FUZZ_FAIL("out of memory");
        a->buf = b;
        a->cap = cap;
    }
    if (n) memcpy(a->buf + a->n, s, n);
    a->n += n;
}

static void ss_part(void *user, ds_part_kind kind, const char *text, size_t n, const json_t *call) {
    size_t *total = user;
    if (kind == DS_PART_TOOL_CALL) {
        FUZZ_CHECK(call != NULL, "tool call part without a call");
        char *j = ds_json_dump(call);
        free(j);
    } else {
        if (n) {
            fuzz_touch((const uint8_t *)text);
            fuzz_touch((const uint8_t *)text + n - 1);
        }
        *total += n;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t cfg = data[0];
    int n_stops = cfg & 3;
    size_t chunk = 1 + ((cfg >> 2) & 7);
    size_t pos = 1;
    char *stops[3] = {0};
    int k = 0;
    for (; k < n_stops && pos <= size; k++) {
        const uint8_t *z = pos < size ? memchr(data + pos, 0, size - pos) : NULL;
        size_t end = z ? (size_t)(z - data) : size;
        stops[k] = strndup((const char *)data + pos, end - pos);
        if (!stops[k]) FUZZ_FAIL("out of memory");
        pos = end + 1;
    }
    n_stops = k;
    const char *text = pos < size ? (const char *)data + pos : "";
    size_t n = pos < size ? size - pos : 0;

    /* the stop filter, fed chunk by chunk */
    ds_stop_filter f;
    ds_stop_filter_init(&f, stops, NULL, n_stops);
    ss_acc out = {0};
    int hit = 0;
    for (size_t i = 0; i < n && !hit; i += chunk) hit = ds_stop_filter_feed(&f, text + i, n - i < chunk ? n - i : chunk, ss_text, &out);
    ds_stop_filter_finish(&f, ss_text, &out);
    ds_stop_filter_free(&f);
    /* The text before the earliest stop string would be the ideal answer, but
     * the filter commits to the first stop string that is complete in what it
     * holds, even when a longer one that started earlier may still complete
     * (stop strings that contain one another; see the report of this target).
     * So: a prefix of the text, free of stop strings, that ends where one
     * begins, or all of the text when none occurs in it. */
    size_t first = n; /* start of the earliest stop string in the text */
    for (int i = 0; i < n_stops; i++) {
        size_t sl = strlen(stops[i]);
        if (!sl) continue; /* an empty stop string matches nothing */
        const char *p = memmem(text, n, stops[i], sl);
        if (p && (size_t)(p - text) < first) first = (size_t)(p - text);
    }
    FUZZ_CHECK(out.n <= n && (!out.n || !memcmp(out.buf, text, out.n)), "stop filter: output is not a prefix");
    int at_stop = 0;
    for (int i = 0; i < n_stops; i++) {
        size_t sl = strlen(stops[i]);
        if (!sl) continue;
        FUZZ_CHECK(!memmem(out.buf ? out.buf : "", out.n, stops[i], sl), "stop filter let stop string %d through", i);
        if (out.n + sl <= n && !memcmp(text + out.n, stops[i], sl)) at_stop = 1;
    }
    FUZZ_CHECK(first == n ? (out.n == n && !hit) : (at_stop && hit),
               "stop filter passed %zu bytes, the first stop string is at %zu of %zu (hit %d)", out.n, first, n, hit);

    /* the chat parser on the same chunks */
    ds_chat_parser p;
    ds_chat_parser_init(&p, (cfg >> 5) & 1, (cfg >> 6) & 1);
    size_t total = 0;
    for (size_t i = 0; i < n; i += chunk) ds_chat_parser_feed(&p, text + i, n - i < chunk ? n - i : chunk, ss_part, &total);
    ds_chat_parser_finish(&p, ss_part, &total);
    ds_chat_parser_free(&p);
    FUZZ_CHECK(total <= n, "the parser produced %zu bytes of text from %zu", total, n);

    free(out.buf);
    for (int i = 0; i < n_stops; i++) free(stops[i]);
    return 0;
}
