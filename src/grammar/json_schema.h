/* json_schema.h - JSON Schema to GBNF: a grammar whose sentences are the JSON
 * texts that validate against a schema.
 *
 * Supported (draft 2020-12 and draft-07 spellings): type (one or a list,
 * "null" among them), properties / required / additionalProperties,
 * enum / const, items / prefixItems / minItems / maxItems, anyOf / oneOf /
 * allOf, $ref / $defs / definitions (recursive references included),
 * string pattern / format (date, time, date-time, uuid, email) / minLength /
 * maxLength, integer and number minimum / maximum / exclusiveMinimum /
 * exclusiveMaximum; annotations (title, description, default, examples,
 * $schema, $id, $comment) are ignored. Any other keyword is refused with an
 * error that names it and where it stands (a JSON pointer into the schema),
 * never ignored: a constraint the grammar cannot hold would be silently broken. */
#ifndef DS_JSON_SCHEMA_H
#define DS_JSON_SCHEMA_H

#include <jansson.h>

#include "common/status.h"

typedef struct {
    /* an object schema without additionalProperties allows no other properties
     * (OpenAI's strict mode, XGrammar's default); 0: JSON Schema's own default (any) */
    int strict;
    /* whitespace between tokens: 0 none (compact JSON), else at most this many
     * bytes of " \n\t" in a row, so that a model that indents may */
    int max_space;
} ds_schema_options;

/* Writes GBNF rules (malloc'd, NUL-terminated, into *gbnf) that define the
 * rule `name` as the JSON values valid under schema; helper rules are named
 * `name-...` so that several schemas share one grammar. With name "root" the
 * text is a whole grammar. */
ds_status ds_json_schema_to_gbnf(const json_t *schema, const char *name, const ds_schema_options *o, char **gbnf,
                                 ds_err *e);

#endif
