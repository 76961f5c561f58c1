/* output_grammar.h - a request's output constraint as GBNF text (grammar/grammar.h).
 *
 *   json_object   one JSON object (RFC 8259), after at most max_space
 *                 whitespace bytes, with at most max_space in a row inside
 *   schema        grammar/json_schema.h (strict and max_space as the request says)
 *   regex         grammar/regex.h: the answer fully matches the pattern
 *   choice        exactly one of the strings
 *   grammar       the client's GBNF text as it came
 * Errors come from the compilers, which name the keyword or byte offset; the
 * caller adds the request field. Also the pieces tool_grammar.h shares: GBNF
 * literals and the rules of any JSON value. */
#ifndef DS_OUTPUT_GRAMMAR_H
#define DS_OUTPUT_GRAMMAR_H

#include <stddef.h>

#include "common/status.h"
#include "server/openai_request.h"
#include "common/strbuf.h"

/* GBNF text for o (malloc'd, NUL-terminated, in *gbnf, its length in *len). */
ds_status ds_output_gbnf(const ds_oai_output *o, char **gbnf, size_t *len, ds_err *e);

/* The text that identifies o's grammar in the server's grammar cache (malloc'd):
 * equal keys give equal grammars, without compiling anything. */
char *ds_output_cache_key(const ds_oai_output *o, size_t *len);

/* Appends bytes s[0..n) as a GBNF string literal, quotes included. */
void ds_gbnf_literal(ds_sb *b, const char *s, size_t n);

/* Appends the rules of any JSON value, named PREFIX-value, PREFIX-object,
 * PREFIX-array, PREFIX-string, PREFIX-esc, PREFIX-number and PREFIX-ws
 * (0..max_space whitespace bytes); no_close_tag: strings hold no raw "</"
 * (inside a tag that a closing tag ends). */
void ds_gbnf_json_rules(ds_sb *b, const char *prefix, int max_space, int no_close_tag);

#endif
