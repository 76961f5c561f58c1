/* reasoning_gate.h - where the reasoning part of an answer ends.
 *
 * Constraints on an answer (a required tool call, JSON output) apply to what
 * comes after the reasoning the prompt opened: the gate takes the answer's
 * bytes as they are generated and tells where its </think> ended, also when
 * that tag is split over several tokens. */
#ifndef DS_REASONING_GATE_H
#define DS_REASONING_GATE_H

#include <stddef.h>

typedef struct {
    int open;       /* still inside the reasoning */
    char tail[8];   /* the last bytes seen while open */
    int n_tail;
} ds_reasoning_gate;

void ds_reasoning_gate_init(ds_reasoning_gate *g, int open);
/* Feeds len bytes; returns how many of them belong to the reasoning (all of
 * them while it stays open; none once closed). */
size_t ds_reasoning_gate_feed(ds_reasoning_gate *g, const char *bytes, size_t len);

#endif
