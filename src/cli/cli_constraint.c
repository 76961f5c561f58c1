/* cli_constraint.c - see cli_constraint.h. */
#include "cli/cli_constraint.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/regex.h"

/* The whole file, NUL-terminated; NULL when it cannot be read or holds a NUL byte. */
static char *read_grammar(const char *cmd, const char *path) {
    FILE *f = fopen(path, "rb");
    long n = -1;
    char *text = NULL;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = malloc((size_t)n + 1)) && fread(text, 1, (size_t)n, f) == (size_t)n) {
        text[n] = 0;
    } else {
        free(text), text = NULL;
    }
    if (f) fclose(f);
    if (!text) fprintf(stderr, "deltaserve %s: %s: cannot read\n", cmd, path);
    else if ((long)strlen(text) != n) {
        fprintf(stderr, "deltaserve %s: %s: a NUL byte in the grammar at offset %zu\n", cmd, path, strlen(text));
        free(text), text = NULL;
    }
    return text;
}

int ds_cli_constraint_gbnf(const char *cmd, const char *schema_path, const char *gbnf_path, const char *pattern,
                           const ds_schema_options *so, int fail_rc, char **gbnf) {
    ds_err e = {0};
    *gbnf = NULL;
    if (schema_path) {
        json_error_t je;
        json_t *schema = json_load_file(schema_path, JSON_DECODE_ANY, &je);
        if (!schema) {
            fprintf(stderr, "deltaserve %s: %s: %s (line %d, column %d)\n", cmd, schema_path, je.text, je.line, je.column);
            return fail_rc;
        }
        ds_status st = ds_json_schema_to_gbnf(schema, "root", so, gbnf, &e);
        json_decref(schema);
        if (st != DS_OK) {
            fprintf(stderr, "deltaserve %s: %s: %s\n", cmd, schema_path, e.msg);
            return fail_rc;
        }
    } else if (pattern) {
        if (ds_regex_to_gbnf(pattern, strlen(pattern), "root", 0, gbnf, &e) != DS_OK) {
            fprintf(stderr, "deltaserve %s: --regex: %s\n", cmd, e.msg);
            return fail_rc;
        }
    } else if (gbnf_path && !(*gbnf = read_grammar(cmd, gbnf_path))) {
        return fail_rc;
    }
    return 0;
}
