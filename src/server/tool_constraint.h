/* tool_constraint.h - makes the model open a tool call when the client requires one.
 *
 * With tool_choice "required" or a named function the answer must be a call.
 * The constraint narrows sampling (an engine token filter) until the answer
 * has opened a call to an allowed function, in the form the model's template
 * teaches it:
 *   Qwen3.5 (XML)  <tool_call>\n<function=NAME>
 *   Qwen3 (JSON)   <tool_call>\n{"name": "NAME"
 * (after a few whitespace bytes when a reasoning part ended just before).
 * The arguments are then the model's.
 * A reasoning part the prompt opened is left free until its </think>, except
 * for the end tokens: an answer never ends inside its reasoning, before its call. */
#ifndef DS_TOOL_CONSTRAINT_H
#define DS_TOOL_CONSTRAINT_H

#include <jansson.h>
#include <stddef.h>

#include "common/status.h"
#include "engine/engine.h"
#include "server/reasoning_gate.h"
#include "tokenizer/tokenizer.h"

typedef enum { DS_CALL_XML = 0, DS_CALL_JSON } ds_call_form;

/* The form a chat template writes tool calls in (XML unless it shows the JSON form). */
ds_call_form ds_call_form_of_template(const char *template_source);

typedef struct {
    const ds_tokenizer *tok;
    char **openings;        /* what the answer may open with, one per allowed function */
    int n_openings;
    ds_reasoning_gate reasoning; /* free until its </think>, but for the end tokens */
    const int32_t *end_ids;  /* the model's end tokens, never allowed before the opening */
    int n_end;
    int n_seen;             /* generated tokens taken into account */
    int n_space;            /* whitespace bytes before the opening */
    int max_space;          /* how many may come (only after a </think>) */
    int ref;                /* an opening the bytes written so far begin (all such share them) */
    size_t n_matched;       /* bytes of the opening written so far */
    int done;               /* opened, or given up on (an unexpected token) */
} ds_tool_constraint;

/* tools: the request's tools array; only: the one function allowed, or NULL for any of them;
 * end_ids: the model's end tokens (borrowed, they must outlive the constraint). */
ds_status ds_tool_constraint_init(ds_tool_constraint *c, const ds_tokenizer *tok, ds_call_form form,
                                  const json_t *tools, const char *only, const int32_t *end_ids, int n_end,
                                  int in_reasoning, ds_err *e);
void ds_tool_constraint_free(ds_tool_constraint *c);

/* The engine's token filter (ds_token_filter_fn); user is the ds_tool_constraint. */
ds_filter_result ds_tool_constraint_filter(void *user, const int32_t *generated, int n_generated, uint32_t *allowed,
                                           int n_vocab);

#endif
