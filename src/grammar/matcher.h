/* matcher.h - where an answer is in a grammar, byte by byte, and which tokens may come next.
 *
 * A matcher holds the set of parse stacks the bytes so far allow (a
 * pushdown automaton run on all its branches at once), with a history of
 * steps so that speculative decoding can take back the drafts the model
 * refused. Computing the tokens allowed next uses the grammar's caches:
 * per grammar position, the tokens decided without looking below the top
 * of the stack (as XGrammar does), and per whole state, the finished mask. */
#ifndef DS_MATCHER_H
#define DS_MATCHER_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "grammar/grammar.h"
#include "grammar/vocab_index.h"

typedef struct ds_matcher ds_matcher;

/* The matcher takes a reference on g. */
ds_status ds_matcher_new(ds_grammar *g, ds_matcher **out, ds_err *e);
void ds_matcher_free(ds_matcher *m);

/* Feeds len bytes as one step: 1 when the grammar allows them (the state
 * advances), 0 when it does not (the state is unchanged). */
int ds_matcher_accept(ds_matcher *m, const char *bytes, size_t len);
/* Steps taken so far, and taking back the last n of them. */
int ds_matcher_steps(const ds_matcher *m);
void ds_matcher_rollback(ds_matcher *m, int n_steps);

/* The matcher ran out of its byte budget (or of memory): it refuses every
 * byte from then on, and its owner must fail the answer rather than let it
 * go on unconstrained. */
int ds_matcher_failed(const ds_matcher *m);

/* The bytes so far are a whole sentence of the grammar (it may end here). */
int ds_matcher_can_end(const ds_matcher *m);
/* ... and no byte may follow. */
int ds_matcher_must_end(const ds_matcher *m);

/* Sets bit t of bits (words of 32, (n_tokens + 31) / 32 of them, arriving
 * zeroed) for every token of the index whose bytes the grammar allows next.
 * Returns how many were set. Runs on the thread that owns the matcher; the
 * grammar's caches are filled on that thread too (the engine thread). */
int ds_matcher_fill_mask(ds_matcher *m, const ds_vocab_index *v, uint32_t *bits);

#endif
