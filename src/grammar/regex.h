/* regex.h - a regular expression to GBNF: the rule `name` matches exactly the
 * strings the pattern fully matches (Python's re.fullmatch).
 *
 * ECMAScript / Python syntax: literals and escapes, ., [classes] with ranges
 * and negation, \d \w \s \D \W \S, groups ( ), (?: ), alternation, * + ? {m}
 * {m,} {m,n} (lazy forms match the same strings), ^ and $ at the ends.
 * Backreferences, lookaround, flags, possessive repeats and anchors inside
 * are refused, naming the byte offset.
 *
 * Where engines differ the grammar takes what all of them match: \d \w \s
 * are ASCII ([0-9], [A-Za-z0-9_], [\t\n\v\f\r ]), and \D \W \S (and
 * classes like [^\d]) match only ASCII characters, since Python counts
 * other digits, letters and spaces in \d \w \s and ECMAScript does not;
 * . is any code point but \n, as in Python (JSON Schema's checkers). With json_string set, the rule matches the JSON-encoded form
 * of those strings (what stands between the quotes of a JSON string: " \ and
 * control characters escaped), for JSON Schema's `pattern`. */
#ifndef DS_REGEX_H
#define DS_REGEX_H

#include <stddef.h>

#include "common/status.h"

ds_status ds_regex_to_gbnf(const char *pattern, size_t len, const char *name, int json_string, char **gbnf,
                           ds_err *e);

#endif
