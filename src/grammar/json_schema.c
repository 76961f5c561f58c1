/* json_schema.c - see json_schema.h. */
#include "grammar/json_schema.h"

#include <stddef.h>

ds_status ds_json_schema_to_gbnf(const json_t *schema, const char *name, const ds_schema_options *o, char **gbnf,
                                 ds_err *e) {
    (void)schema, (void)name, (void)o;
    *gbnf = NULL;
    return ds_fail(e, DS_EUNSUPPORTED, "json schema: not built yet");
}
