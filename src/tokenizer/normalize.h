/* normalize.h - Unicode NFC, as Hugging Face's "NFC" normalizer applies it.
 *
 * utf8proc does the Unicode work (canonical decomposition, combining
 * classes, composition); only the canonical reordering of combining marks is
 * done here, with a stable merge sort, because utf8proc's in-place exchange
 * sort takes time quadratic in the length of a run of marks, and a request
 * of a few hundred kilobytes of alternating marks would take minutes. */
#ifndef DS_NORMALIZE_H
#define DS_NORMALIZE_H

#include <stddef.h>

#include "common/status.h"

/* NFC of s[0..n), which must be well-formed UTF-8. *res and *res_len get the
 * result: s itself when NFC leaves it unchanged in an obvious way (every
 * code point below U+0300), otherwise a new buffer that is also put in
 * *owned for the caller to free (*owned is NULL otherwise). */
ds_status ds_nfc(const char *s, size_t n, const char **res, size_t *res_len, char **owned, ds_err *e);

#endif
