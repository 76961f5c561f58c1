/* cmd_grammar.c - `deltaserve grammar`: the GBNF a JSON Schema or a regular
 * expression compiles to, and whether a text matches a grammar (for checking
 * the compilers and the matcher against an independent recognizer). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli_constraint.h"
#include "cli/commands.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

static void usage(FILE *f) {
    fprintf(f, "usage: deltaserve grammar (--json-schema FILE [--strict] [--max-space N] | --regex PATTERN | --gbnf FILE)\n"
               "                         [--check TEXT | --check-file FILE]\n"
               "  --json-schema FILE  print the GBNF grammar of the JSON texts valid under the schema\n"
               "  --strict            an object schema without additionalProperties allows no other keys\n"
               "  --max-space N       at most N bytes of whitespace between JSON tokens (default 0)\n"
               "  --regex PATTERN     print the GBNF grammar of the strings the pattern fully matches\n"
               "  --gbnf FILE         a GBNF grammar as it is\n"
               "  --check TEXT        instead of printing, match TEXT: prints 'match', 'prefix' (may go on\n"
               "                      to match) or 'no match at byte N' (exit 1)\n"
               "  --check-file FILE   the same with the bytes of FILE\n"
               "  --check-each FILE   the same for many texts: FILE has one JSON string a line, and a\n"
               "                      verdict is printed for each (exit 1 when any has no match)\n");
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap + 1);
    for (size_t got; b && (got = fread(b + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb) { free(b); b = NULL; break; }
            b = nb, cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!b || bad) { free(b); return NULL; }
    b[n] = 0;
    *len = n;
    return b;
}

/* Matches text byte by byte from the matcher's start; prints the verdict, returns 1 for no match. */
static int verdict(ds_matcher *m, const char *text, size_t n) {
    ds_matcher_rollback(m, ds_matcher_steps(m));
    size_t i = 0;
    while (i < n && ds_matcher_accept(m, text + i, 1)) i++;
    if (i < n) { printf("no match at byte %zu\n", i); return 1; }
    printf("%s\n", ds_matcher_can_end(m) ? "match" : "prefix");
    return 0;
}

/* Checks one text, or (each) every JSON string line of it; returns the exit code. */
static int check(const char *gbnf, const char *text, size_t n, int each, const char *path) {
    ds_err e = {0};
    ds_grammar *g = NULL;
    ds_matcher *m = NULL;
    if (ds_grammar_parse(gbnf, strlen(gbnf), &g, &e) != DS_OK || ds_matcher_new(g, &m, &e) != DS_OK) {
        fprintf(stderr, "deltaserve grammar: %s\n", e.msg);
        ds_grammar_unref(g);
        return 1;
    }
    ds_grammar_unref(g);
    int rc = 0, line = 0;
    if (!each) rc = verdict(m, text, n);
    for (const char *p = text, *end = text + n; each && p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        json_error_t je;
        json_t *s = json_loadb(p, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!json_is_string(s)) {
            fprintf(stderr, "deltaserve grammar: %s: line %d is not a JSON string\n", path, line + 1);
            json_decref(s);
            rc = 1;
            break;
        }
        rc |= verdict(m, json_string_value(s), json_string_length(s));
        json_decref(s);
        p += len + 1;
    }
    ds_matcher_free(m);
    return rc;
}

int ds_cmd_grammar(int argc, char **argv) {
    const char *schema_path = NULL, *pattern = NULL, *gbnf_path = NULL, *check_text = NULL, *check_path = NULL;
    int each = 0;
    ds_schema_options so = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!strcmp(a, "--strict")) { so.strict = 1; continue; }
        if (!(v = ds_arg_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "--json-schema")) schema_path = v;
        else if (!strcmp(a, "--regex")) pattern = v;
        else if (!strcmp(a, "--gbnf")) gbnf_path = v;
        else if (!strcmp(a, "--check")) check_text = v;
        else if (!strcmp(a, "--check-file")) check_path = v, each = 0;
        else if (!strcmp(a, "--check-each")) check_path = v, each = 1;
        else if (!strcmp(a, "--max-space")) { if (ds_arg_int(a, v, 0, 64, &n)) return 2; so.max_space = (int)n; }
        else { fprintf(stderr, "deltaserve grammar: unknown option '%s'\n", a); usage(stderr); return 2; }
    }
    if (!!schema_path + !!pattern + !!gbnf_path != 1 || (check_text && check_path)) {
        fprintf(stderr, "deltaserve grammar: give one of --json-schema, --regex, --gbnf (and at most one of --check, --check-file, --check-each)\n");
        usage(stderr);
        return 2;
    }
    char *gbnf = NULL;
    size_t len;
    if (ds_cli_constraint_gbnf("grammar", schema_path, gbnf_path, pattern, &so, 1, &gbnf)) return 1;
    int rc = 0;
    if (check_text) rc = check(gbnf, check_text, strlen(check_text), 0, NULL);
    else if (check_path) {
        char *text = read_file(check_path, &len);
        if (!text) { fprintf(stderr, "deltaserve grammar: %s: cannot read\n", check_path); rc = 1; }
        else rc = check(gbnf, text, len, each, check_path);
        free(text);
    } else fputs(gbnf, stdout);
    free(gbnf);
    return rc;
}
