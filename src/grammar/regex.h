/* regex.h - a regular expression to GBNF: the rule `name` matches exactly the
 * strings the pattern fully matches (Python's re.fullmatch).
 *
 * ECMAScript / Python syntax: literals and escapes, ., [classes] with ranges
 * and negation, \d \w \s \D \W \S, groups ( ), (?: ), alternation, * + ? {m}
 * {m,} {m,n} (lazy forms match the same strings), ^ and $ at the ends.
 * Backreferences, lookaround and anchors inside are refused, naming the
 * byte offset. With json_string set, the rule matches the JSON-encoded form
 * of those strings (what stands between the quotes of a JSON string: " \ and
 * control characters escaped), for JSON Schema's `pattern`. */
#ifndef DS_REGEX_H
#define DS_REGEX_H

#include <stddef.h>

#include "common/status.h"

ds_status ds_regex_to_gbnf(const char *pattern, size_t len, const char *name, int json_string, char **gbnf,
                           ds_err *e);

#endif
