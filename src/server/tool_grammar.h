/* tool_grammar.h - a tool call the client requires (or a strict function) as GBNF text.
 *
 * The answer is one call, or several separated by "\n" (parallel), in the
 * form the model's template teaches it, byte for byte as the template writes
 * a call and server/chat_parser.h reads it back:
 *   Qwen3.5 (XML)  <tool_call>\n<function=NAME>\n
 *                  <parameter=P>\nVALUE\n</parameter>\n ... </function>\n</tool_call>
 *   Qwen3 (JSON)   <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
 * ARGS is a JSON object valid under the function's `parameters` schema
 * (grammar/json_schema.h; strict: the properties it lists only). In the XML
 * form the properties come in the schema's order, the required ones always,
 * the others or not; a string-typed VALUE is the raw text (its enum / const /
 * pattern / format / length honoured; never "</", which would end it), any
 * other VALUE is JSON under the property's schema. A function without
 * `parameters` takes none. A function that is not strict and whose schema
 * the compiler refuses gets free arguments (any JSON object, any parameters):
 * its call is still forced, its arguments were never promised; a strict one
 * is an error naming tools[i].function.parameters. */
#ifndef DS_TOOL_GRAMMAR_H
#define DS_TOOL_GRAMMAR_H

#include <jansson.h>
#include <stddef.h>

#include "common/status.h"

typedef enum { DS_CALL_XML = 0, DS_CALL_JSON } ds_call_form;

/* The form a chat template writes tool calls in (XML unless it shows the JSON form). */
ds_call_form ds_call_form_of_template(const char *template_source);

typedef struct {
    ds_call_form form;
    const json_t *tools;    /* the request's tools array */
    const char *only;       /* the one function allowed (tool_choice naming it), or NULL for any */
    int parallel;           /* several calls may follow one another */
    int lead_space;         /* whitespace bytes allowed before the first call (the grammar filter
                             * already allows a few after a reasoning part) */
    int max_space;          /* whitespace bytes in a row inside JSON arguments */
} ds_tool_grammar_params;

/* GBNF text (malloc'd, NUL-terminated; its length in *len). Errors name the
 * function's field (tools[i].function.parameters) and the compiler's reason. */
ds_status ds_tool_grammar(const ds_tool_grammar_params *p, char **gbnf, size_t *len, ds_err *e);

/* The text that identifies the grammar in the server's grammar cache (malloc'd). */
char *ds_tool_grammar_key(const ds_tool_grammar_params *p, size_t *len);

#endif
