/* grammar.h - a context-free grammar over bytes: the one form every output
 * constraint compiles to (JSON Schema, regular expressions, tool calls, and
 * the GBNF grammars clients send).
 *
 * The text form is GBNF, llama.cpp's grammar format, so that a llama-server
 * client's `grammar` field works unchanged:
 *   name ::= alternative | alternative        (the start rule is `root`)
 *   "literal" with \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH escapes
 *   [a-z0-9_] and [^"\\] character classes (code points, matched as UTF-8),
 *   . (any code point), ( grouping ), x* x+ x? x{m} x{m,} x{m,n}, # comments.
 * Every rule must be defined; left recursion (a rule that can reach itself
 * without consuming a byte) is refused, as the matcher could not end it.
 * Errors name the line and column.
 *
 * A grammar is immutable once parsed, except for the token-mask caches the
 * engine thread fills (matcher.h); it is shared by reference count between
 * the server's grammar cache and the requests that use it. */
#ifndef DS_GRAMMAR_H
#define DS_GRAMMAR_H

#include <stddef.h>

#include "common/status.h"

typedef struct ds_grammar ds_grammar;

/* Parses GBNF text (len bytes; NUL bytes are refused). The grammar starts with one reference. */
ds_status ds_grammar_parse(const char *gbnf, size_t len, ds_grammar **out, ds_err *e);
void ds_grammar_ref(ds_grammar *g);
/* Drops a reference; the last one frees the grammar (NULL is ignored). */
void ds_grammar_unref(ds_grammar *g);

/* Bytes the grammar holds, its mask caches included (for the server's cache budget). */
size_t ds_grammar_bytes(const ds_grammar *g);

#endif
