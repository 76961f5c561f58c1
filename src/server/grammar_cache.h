/* grammar_cache.h - the server's parsed grammars, kept for the next request
 * with the same constraint.
 *
 * Keyed by text that determines the grammar (the constraint's kind, options
 * and source: output_grammar.h, tool_grammar.h), so that a hit skips both the
 * compilation to GBNF and the parse. A byte budget (ds_grammar_bytes, the
 * keys included) bounds it; the least recently used grammars go first. The
 * cache holds one reference per grammar; a request holds its own, so an
 * evicted grammar lives until its last request ends. Any thread may call. */
#ifndef DS_GRAMMAR_CACHE_H
#define DS_GRAMMAR_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "grammar/grammar.h"

typedef struct ds_grammar_cache ds_grammar_cache;

ds_status ds_grammar_cache_new(size_t budget_bytes, ds_grammar_cache **out, ds_err *e);
void ds_grammar_cache_free(ds_grammar_cache *c);

/* The grammar stored under key (a new reference for the caller), or NULL. Counts a hit or a miss. */
ds_grammar *ds_grammar_cache_get(ds_grammar_cache *c, const char *key, size_t key_len);
/* Stores g under key (taking a reference of its own; the caller keeps its
 * one), evicting the least recently used grammars to stay in the budget; a
 * grammar larger than the whole budget is not kept. */
void ds_grammar_cache_put(ds_grammar_cache *c, const char *key, size_t key_len, ds_grammar *g);

typedef struct {
    uint64_t hits, misses;
    size_t entries, bytes;
} ds_grammar_cache_stats;

void ds_grammar_cache_stats_get(ds_grammar_cache *c, ds_grammar_cache_stats *out);

#endif
