/* json_constraint.h - response_format {"type": "json_object"}: the answer is
 * one JSON object.
 *
 * An engine token filter that allows, at every step, the tokens whose bytes
 * keep the answer a prefix of a JSON object (RFC 8259: strings with their
 * escapes, numbers, true / false / null, nesting up to DS_JSON_MAX_DEPTH,
 * at most DS_JSON_MAX_SPACE whitespace bytes in a row), and, once the object
 * is closed, only the model's end tokens. A reasoning part the prompt opened
 * is left free until its </think>, except for the end tokens: an answer never
 * ends inside its reasoning. An answer cut by max_tokens is a prefix. */
#ifndef DS_JSON_CONSTRAINT_H
#define DS_JSON_CONSTRAINT_H

#include <stdint.h>

#include "common/status.h"
#include "engine/engine.h"
#include "server/reasoning_gate.h"
#include "tokenizer/tokenizer.h"

#define DS_JSON_MAX_DEPTH 32
#define DS_JSON_MAX_SPACE 32

/* Where the answer is in the grammar; small, so that trying a token copies it. */
typedef struct {
    uint32_t objects;   /* bit d: the container at depth d+1 is an object (else an array) */
    uint8_t depth;
    uint8_t mode;       /* what may come next (json_constraint.c) */
    uint8_t sub;        /* within a string, number or literal */
    uint8_t key;        /* the string being read is an object's key */
    uint8_t space;      /* whitespace bytes in a row */
} ds_json_state;

typedef struct {
    const ds_tokenizer *tok;
    const uint8_t *plain;     /* per token: 1 when its bytes may stand anywhere inside a string */
    const int32_t *end_ids;   /* the model's end tokens, the only ones allowed once the object closed */
    int n_end;
    ds_reasoning_gate reasoning;
    ds_json_state st;
    int n_seen;               /* generated tokens taken into account */
    int broken;               /* a token the filter did not allow came anyway: stop narrowing */
} ds_json_constraint;

/* Per token of tok, whether its bytes may stand anywhere inside a JSON string
 * (not a control token, not empty, no quote, backslash or control byte):
 * malloc'd, n_tokens entries. */
uint8_t *ds_json_plain_tokens(const ds_tokenizer *tok);

void ds_json_constraint_init(ds_json_constraint *c, const ds_tokenizer *tok, const uint8_t *plain,
                             const int32_t *end_ids, int n_end, int in_reasoning);

/* The engine's token filter (ds_token_filter_fn); user is the ds_json_constraint. */
ds_filter_result ds_json_constraint_filter(void *user, const int32_t *generated, int n_generated, uint32_t *allowed,
                                           int n_vocab);

/* Feeds bytes to a state; 0 when they cannot continue a JSON object. (For tests.) */
int ds_json_feed(ds_json_state *s, const char *bytes, size_t len);
/* Whether the state is after a whole JSON object. */
int ds_json_complete(const ds_json_state *s);

#endif
