/* pretokenize.h - the pre-tokenizer split: a tokenizer.json "Split" regex
 * with behaviour "Isolated" (every match is a piece, and so is every gap
 * between matches), run with PCRE2 in UTF + Unicode-property mode.
 *
 * Patterns are written for Hugging Face tokenizers, whose regex engine
 * (Oniguruma) reads \s as the Unicode White_Space property; PCRE2 also counts
 * U+180E, so \s and \S are rewritten to \p{White_Space} and \P{White_Space}.
 * A compiled splitter is read-only: threads may share one. */
#ifndef DS_PRETOKENIZE_H
#define DS_PRETOKENIZE_H

#include <stddef.h>

#include "common/status.h"

typedef struct ds_pretok ds_pretok;

ds_status ds_pretok_new(const char *pattern, ds_pretok **out, ds_err *e);
void ds_pretok_free(ds_pretok *p);

/* Called once per piece, in text order; a non-OK status stops the split. */
typedef ds_status (*ds_pretok_fn)(void *ctx, const char *piece, size_t len, ds_err *e);

/* Splits text[0..len), which must be well-formed UTF-8 (NUL bytes are
 * ordinary characters); the pieces cover the text exactly. */
ds_status ds_pretok_split(const ds_pretok *p, const char *text, size_t len, ds_pretok_fn fn, void *ctx, ds_err *e);

#endif
