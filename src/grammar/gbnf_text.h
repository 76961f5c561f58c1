/* gbnf_text.h - writing GBNF text into a ds_sb (common/strbuf.h): literals
 * and character classes escaped so that any code point (or byte) survives.
 * Shared by the compilers to GBNF (json_schema.c, regex.c). */
#ifndef DS_GBNF_TEXT_H
#define DS_GBNF_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "common/strbuf.h"


/* One code point inside "..." (raw when printable ASCII or above 0x7f, else escaped). */
void ds_gtext_lit_cp(ds_sb *t, uint32_t cp);
/* A whole literal "..." of UTF-8 bytes (bytes that are not UTF-8 as \xHH). */
void ds_gtext_literal(ds_sb *t, const char *s, size_t n);
/* One code point inside [...]: escaped unless a letter or digit. */
void ds_gtext_class_cp(ds_sb *t, uint32_t cp);

/* The JSON-encoded forms of code point cp inside a JSON string, as one GBNF
 * element: itself, or \" \\ , or for a control character its short escape
 * (\n ...) or \u00XX (either case of hex digit). */
void ds_gtext_json_cp(ds_sb *t, uint32_t cp);
/* Whether cp has one JSON form inside a string (it can join a literal). */
int ds_json_cp_plain(uint32_t cp);

/* Decodes one UTF-8 code point at s (n bytes left); *used gets its length.
 * Returns -1 for bytes that are not UTF-8 (*used = 1). */
int32_t ds_utf8_decode(const char *s, size_t n, int *used);
/* Appends cp as UTF-8 to out (4 bytes room); returns the length. */
int ds_utf8_encode(uint32_t cp, char *out);

#endif
