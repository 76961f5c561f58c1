/* regex.c - see regex.h. */
#include "grammar/regex.h"

ds_status ds_regex_to_gbnf(const char *pattern, size_t len, const char *name, int json_string, char **gbnf,
                           ds_err *e) {
    (void)pattern, (void)len, (void)name, (void)json_string;
    *gbnf = NULL;
    return ds_fail(e, DS_EUNSUPPORTED, "regex: not built yet");
}
