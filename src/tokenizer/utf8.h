/* utf8.h - UTF-8 well-formedness and the one repair rule deltaserve applies
 * to bytes it did not make (request text, token byte sequences).
 *
 * The rule is the WHATWG / Unicode "maximal subpart" practice: each maximal
 * subpart of an ill-formed sequence becomes one U+FFFD, and a sequence cut off
 * by the end of the input becomes one U+FFFD. It is what Python's
 * bytes.decode("utf-8", "replace"), Node's Buffer.toString() and browsers
 * do, so a client that decodes the same bytes gets the same text we do. */
#ifndef DS_UTF8_H
#define DS_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef enum {
    DS_UTF8_VALID,     /* a whole character */
    DS_UTF8_INVALID,   /* an ill-formed maximal subpart: one U+FFFD */
    DS_UTF8_TRUNCATED, /* the start of a valid character that runs into the end of the input */
} ds_utf8_kind;

#define DS_UTF8_REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */

/* Classifies the bytes at s[0..n) (n >= 1) and returns how many of them the
 * first character, subpart or truncated start takes (1..4). */
size_t ds_utf8_next(const uint8_t *s, size_t n, ds_utf8_kind *kind);

/* Length of the longest well-formed prefix of s. */
size_t ds_utf8_valid_prefix(const uint8_t *s, size_t n);

/* Bytes ds_utf8_repair writes for s (at most 3 * n). */
size_t ds_utf8_repaired_len(const uint8_t *s, size_t n);

/* Writes s with the repair rule applied to out (which must hold
 * ds_utf8_repaired_len(s, n) bytes) and returns the length written. */
size_t ds_utf8_repair(const uint8_t *s, size_t n, uint8_t *out);

#endif
