/* reasoning_gate.c - see reasoning_gate.h. */
#include "server/reasoning_gate.h"

#include <string.h>

static const char THINK_END[] = "</think>";

void ds_reasoning_gate_init(ds_reasoning_gate *g, int open) {
    memset(g, 0, sizeof *g);
    g->open = open;
}

size_t ds_reasoning_gate_feed(ds_reasoning_gate *g, const char *bytes, size_t len) {
    size_t i = 0, n = sizeof THINK_END - 1;
    for (; i < len && g->open; i++) {
        if (g->n_tail == (int)sizeof g->tail) {
            memmove(g->tail, g->tail + 1, sizeof g->tail - 1);
            g->n_tail--;
        }
        g->tail[g->n_tail++] = bytes[i];
        g->open = !((size_t)g->n_tail >= n && !memcmp(g->tail + g->n_tail - n, THINK_END, n));
    }
    return i;
}
