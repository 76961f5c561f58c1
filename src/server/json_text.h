/* json_text.h - JSON text in and out of the server (jansson), with lengths:
 * every string keeps every code point, U+0000 included.
 *
 * Reading: a request body is first made acceptable to the parser the way
 * Python's and JavaScript's JSON take it. Inside strings, ill-formed UTF-8
 * and escapes of lone surrogates (\uD83D without its pair) become U+FFFD, the
 * repair rule of tokenizer/utf8.h; nesting is limited to DS_JSON_TEXT_MAX_DEPTH
 * and a body past it is refused with a message that says the limit. A parse
 * failure names the line, column and byte offset (of the last byte of the
 * token it stopped at) in the body as sent.
 *
 * Writing: compact, keys in insertion order, '/' not escaped, U+0000 as
 * \u0000; a real is written with 15 significant digits when every real of
 * the value reads back the same from 15, else 17 (always exact). */
#ifndef DS_JSON_TEXT_H
#define DS_JSON_TEXT_H

#include <jansson.h>
#include <stddef.h>

/* deeper bodies are refused: the template engine and tojson stop at 1000 levels too */
#define DS_JSON_TEXT_MAX_DEPTH 1000

/* Parses text[0..len) (need not end with a NUL) into a new value, or returns
 * NULL with msg (cap bytes) saying what is wrong and where, worded to follow
 * "the request body is ": "not valid JSON: ..." or "nested more than ...".
 * Integers stay integers unless one does not fit 64 bits: then every number
 * is read as a real, so a number of any size is a number. */
json_t *ds_json_parse(const char *text, size_t len, char *msg, size_t cap);

/* Compact JSON text of v (any value), caller frees; NULL when out of memory. */
char *ds_json_dump(const json_t *v);

/* A JSON string of s[0..n), made well-formed UTF-8 by the repair rule. */
json_t *ds_json_textn(const char *s, size_t n);

/* The same for a C string (NULL gives ""). */
json_t *ds_json_text(const char *s);

/* v is a string equal to lit (all of it: "user\u0000x" is not "user"). */
int ds_json_str_is(const json_t *v, const char *lit);

/* v's string value with its length (NULL when v is not a string). */
const char *ds_json_str(const json_t *v, size_t *len);

#endif
