/* cli_constraint.h - the output constraint a command line names (a JSON
 * Schema file, a GBNF file, or a regular expression), as GBNF text, for
 * `generate` and `grammar`. */
#ifndef DS_CLI_CONSTRAINT_H
#define DS_CLI_CONSTRAINT_H

#include "grammar/json_schema.h"

/* Sets *gbnf (malloc'd; NULL when none of the three is given) and returns 0;
 * on bad input prints "deltaserve CMD: ..." naming the file or option and
 * returns fail_rc. At most one of the three may be given. */
int ds_cli_constraint_gbnf(const char *cmd, const char *schema_path, const char *gbnf_path, const char *pattern,
                           const ds_schema_options *so, int fail_rc, char **gbnf);

#endif
