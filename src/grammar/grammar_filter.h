/* grammar_filter.h - an answer constrained by a grammar: the engine's token filter.
 *
 * Before the grammar applies there may be free text: a reasoning part the
 * prompt opened (free until its </think>), and, with a trigger, everything
 * before the trigger's first byte (tool_choice auto with strict tools: the
 * grammar takes over where the answer opens a call). The model's end tokens
 * are allowed only where the grammar may end (never inside the reasoning,
 * never before the constrained part is complete); once the grammar must end,
 * only they are. The filter follows the answer as the engine reports it,
 * taking back the tokens of drafts the model refused (engine.h). */
#ifndef DS_GRAMMAR_FILTER_H
#define DS_GRAMMAR_FILTER_H

#include <stdint.h>

#include "common/status.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "grammar/vocab_index.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    ds_grammar *grammar;          /* referenced for the filter's life */
    const ds_vocab_index *vocab;  /* borrowed: outlives the filter */
    const ds_tokenizer *tok;      /* borrowed */
    const int32_t *end_ids;       /* the model's end tokens (borrowed) */
    int n_end;
    int in_reasoning;             /* the prompt opened a reasoning part: free until </think> */
    const char *trigger;          /* NULL: the grammar applies from the start (after the reasoning);
                                   * else free text until these bytes appear, the grammar matching
                                   * from their first byte on (copied) */
} ds_grammar_filter_params;

typedef struct ds_grammar_filter ds_grammar_filter;

ds_status ds_grammar_filter_new(const ds_grammar_filter_params *p, ds_grammar_filter **out, ds_err *e);
void ds_grammar_filter_free(ds_grammar_filter *f);

/* The engine's token filter (ds_token_filter_fn); user is the ds_grammar_filter. */
ds_filter_result ds_grammar_filter_fn(void *user, const int32_t *generated, int n_generated, uint32_t *allowed,
                                      int n_vocab);

/* Whether the answer so far completed the grammar (0 while free or inside it). */
int ds_grammar_filter_complete(const ds_grammar_filter *f);

#endif
