/* test_regex.c - regular expressions to GBNF: a few exact outputs (the JSON
 * string form, negated classes, repeats), and errors that name the byte
 * offset and what is refused. The broad check against re.fullmatch is
 * tests/reference/test_schema_grammar.py. */
#include <stdlib.h>
#include <string.h>

#include "grammar/regex.h"
#include "testing.h"

static char *compile(const char *pat, int json, ds_status *st, ds_err *e) {
    char *g = NULL;
    *st = ds_regex_to_gbnf(pat, strlen(pat), "r", json, &g, e);
    return g;
}

static void expect(const char *pat, int json, const char *want) {
    ds_err e = {0};
    ds_status st;
    char *g = compile(pat, json, &st, &e);
    CHECK(st == DS_OK && g && !strcmp(g, want), "%s: got %s (%s), want %s", pat, g ? g : "NULL", e.msg, want);
    free(g);
}

static void expect_error(const char *pat, ds_status code, const char *msg) {
    ds_err e = {0};
    ds_status st;
    char *g = compile(pat, 0, &st, &e);
    CHECK(st == code && !g && strstr(e.msg, msg), "%s: status %d, message '%s', want '%s'", pat, st, e.msg, msg);
    free(g);
}

static void exact_outputs(void) {
    expect("abc", 0, "r ::= \"abc\"\n");
    expect("a|b|", 0, "r ::= (\"a\" | \"b\")?\n");
    expect("^(ab|cd){2,3}?$", 0, "r ::= ((\"ab\" | \"cd\")){2,3}\n");
    expect("[^a-c]", 0, "r ::= [\\x00-\\x60d-\\uD7FF\\uE000-\\U0010FFFF]\n");
    expect("\\d+\\.\\w", 0, "r ::= [0-9]+ \".\" [0-9A-Z\\x5Fa-z]\n");
    expect("(a|)*", 0, "r ::= ((\"a\"))*\n"); /* written without its empty string */
    expect("a{,2}b{3}c{2,}", 0, "r ::= \"a\"{0,2} \"b\"{3} \"c\"{2,}\n");
    expect("\\D", 0, "r ::= [\\x00-\\x2F\\x3A-\\x7F]\n");
}

static void json_string_form(void) {
    /* " and \ are written escaped; a newline either way JSON allows */
    expect("a\"b\\\\", 1, "r ::= \"a\\\\\\\"b\\\\\\\\\"\n");
    expect("\\n", 1, "r ::= (\"\\\\n\" | \"\\\\u000\" [aA])\n");
    expect("[\"x]", 1, "r ::= (\"x\" | \"\\\\\\\"\")\n");
    expect("[^a]", 1, "r ::= ([\\x20-\\x21\\x23-\\x5B\\x5D-\\x60b-\\uD7FF\\uE000-\\U0010FFFF] | \"\\\\\\\"\" | \"\\\\\\\\\" | "
                      "\"\\\\\" ([bfnrt] | \"u00\" [01] [0-9a-fA-F]))\n");
}

static void errors_name_the_offset(void) {
    expect_error("ab(?=c)", DS_EUNSUPPORTED, "regex: lookaround (not supported) at byte 2");
    expect_error("(x)\\1", DS_EUNSUPPORTED, "regex: backreference (not supported) at byte 3");
    expect_error("a^b", DS_EUNSUPPORTED, "anchor inside the pattern (only ^ at the start and $ at the end) at byte 1");
    expect_error("ab[z-a]", DS_EINVAL, "regex: character range out of order at byte 4");
    expect_error("a**", DS_EINVAL, "regex: multiple repeat at byte 2");
    expect_error("(ab", DS_EINVAL, "regex: unbalanced parenthesis at byte 0");
    expect_error("[ab", DS_EINVAL, "regex: unterminated character class at byte 0");
    expect_error("+", DS_EINVAL, "regex: nothing to repeat at byte 0");
    expect_error("a{2000}", DS_EUNSUPPORTED, "regex: repeat count above 1000 at byte 1");
    expect_error("(?i)a", DS_EUNSUPPORTED, "group flags or extension (not supported) at byte 0");
    expect_error("x\\p{L}", DS_EUNSUPPORTED, "unsupported escape at byte 1");
    expect_error("\xff", DS_EINVAL, "not UTF-8 at byte 0");
    ds_err e = {0};
    char *g = NULL;
    CHECK(ds_regex_to_gbnf("a", 1, "bad name", 0, &g, &e) == DS_EINVAL && !g && strstr(e.msg, "bad name"), "%s", e.msg);
    CHECK(ds_regex_to_gbnf("a\0b", 3, "r", 0, &g, &e) == DS_EINVAL && !g && strstr(e.msg, "NUL byte at byte 1"), "%s", e.msg);
}

int main(void) {
    RUN(exact_outputs);
    RUN(json_string_form);
    RUN(errors_name_the_offset);
    return ds_test_finish();
}
