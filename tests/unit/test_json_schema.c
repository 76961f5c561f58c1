/* test_json_schema.c - JSON Schema to GBNF: exact outputs for a few schemas
 * (integer ranges digit by digit, objects with optional properties, arrays,
 * enums, recursion through $ref) and the errors, which name the keyword and
 * its JSON pointer. The broad check (206 schemas against an Earley
 * recognizer and jsonschema) is tests/reference/test_schema_grammar.py. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_schema.h"
#include "testing.h"

static char *compile(const char *schema_text, int strict, int max_space, ds_status *st, ds_err *e) {
    json_error_t je;
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, &je);
    if (!s) { *st = DS_EINVAL; snprintf(e->msg, sizeof e->msg, "bad test json: %s", je.text); return NULL; }
    ds_schema_options o = {.strict = strict, .max_space = max_space};
    char *g = NULL;
    *st = ds_json_schema_to_gbnf(s, "root", &o, &g, e);
    json_decref(s);
    return g;
}

static void expect(const char *schema, int strict, const char *want) {
    ds_err e = {0};
    ds_status st;
    char *g = compile(schema, strict, 0, &st, &e);
    CHECK(st == DS_OK && g && !strcmp(g, want), "%s:\ngot:\n%s(%s)\nwant:\n%s", schema, g ? g : "NULL\n", e.msg, want);
    free(g);
}

static void expect_error(const char *schema, ds_status code, const char *msg) {
    ds_err e = {0};
    ds_status st;
    char *g = compile(schema, 0, 0, &st, &e);
    CHECK(st == code && !g && !strcmp(e.msg, msg), "%s: status %d, message\n  '%s', want\n  '%s'", schema, st, e.msg, msg);
    free(g);
}

static void integer_ranges(void) {
    expect("{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120}", 0,
           "root ::= (\"-\" (([1-5])) | (([0-9]) | ([1-9] [0-9]{1}) | \"1\" ([0-1] [0-9]{1} | \"2\" \"0\")))\n");
    expect("{\"type\":\"integer\",\"exclusiveMinimum\":99,\"exclusiveMaximum\":1001}", 0,
           "root ::= ((([1-9] [0-9]{2}) | \"1\" \"0\" \"0\" \"0\"))\n");
}

static void objects_and_arrays(void) {
    expect("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"}},"
           "\"required\":[\"b\"],\"additionalProperties\":false}", 0,
           "root ::= root-top\n"
           "root-a ::= \"\\\"a\\\"\" \":\" (\"true\" | \"false\")\n"
           "root-b ::= \"\\\"b\\\"\" \":\" \"null\"\n"
           "root-rest ::=  \",\" root-b\n"
           "root-top ::= \"{\" (root-a root-rest | root-b) \"}\"\n");
    /* strict: no additionalProperties means none */
    expect("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"}}}", 1,
           "root ::= root-top\nroot-a ::= \"\\\"a\\\"\" \":\" \"null\"\nroot-top ::= \"{\" ((root-a))? \"}\"\n");
    expect("{\"type\":\"array\",\"items\":{\"type\":\"null\"},\"minItems\":1,\"maxItems\":3}", 0,
           "root ::= \"[\" root-top-item ( \",\" root-top-item){0,2} \"]\"\nroot-top-item ::= \"null\"\n");
    expect("{\"$defs\":{\"t\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/t\"}}},\"$ref\":\"#/$defs/t\"}", 0,
           "root ::= root-t\nroot-t ::= \"[\" (root-t ( \",\" root-t)*)? \"]\"\n");
    expect("{\"enum\":[\"x\\\"\",1,null,2.5,3.0]}", 0,
           "root ::= (\"\\\"x\\\\\\\"\\\"\" | \"1\" | \"null\" | \"2.5\" | (\"3\" | \"3.0\"))\n");
}

static void whitespace(void) {
    expect("{\"type\":\"array\",\"items\":{\"type\":\"null\"},\"maxItems\":1}", 0,
           "root ::= \"[\" (root-top-item)? \"]\"\nroot-top-item ::= \"null\"\n");
    ds_err e = {0};
    ds_status st;
    char *g = compile("{\"type\":\"array\",\"items\":{\"type\":\"null\"},\"maxItems\":1}", 0, 3, &st, &e);
    CHECK(g && strstr(g, "root-ws ::= [ \\t\\n]{0,3}\n") && strstr(g, "root ::= \"[\" root-ws  (root-top-item root-ws )? \"]\"\n"),
          "%s", g ? g : e.msg);
    free(g);
}

static void errors_name_keyword_and_pointer(void) {
    expect_error("{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}}", DS_EUNSUPPORTED,
                 "json_schema: keyword 'not' at /properties/a is not supported");
    expect_error("{\"patternProperties\":{}}", DS_EUNSUPPORTED, "json_schema: keyword 'patternProperties' at (root) is not supported");
    expect_error("{\"items\":[{\"type\":\"string\",\"format\":\"ipv4\"}]}", DS_EUNSUPPORTED,
                 "json_schema: format 'ipv4' at /items/0 is not supported");
    expect_error("{\"properties\":{\"a/b~\":{\"uniqueItems\":true}}}", DS_EUNSUPPORTED,
                 "json_schema: keyword 'uniqueItems' at /properties/a~1b~0 is not supported");
    expect_error("{\"$defs\":{\"x\":{\"if\":{}}},\"items\":{\"$ref\":\"#/$defs/x\"}}", DS_EUNSUPPORTED,
                 "json_schema: keyword 'if' at /$defs/x is not supported");
    expect_error("{\"$ref\":\"other.json#/a\"}", DS_EUNSUPPORTED,
                 "json_schema: remote $ref 'other.json#/a' is not supported at (root)");
    expect_error("{\"$ref\":\"#/$defs/missing\"}", DS_ENOTFOUND, "json_schema: $ref '#/$defs/missing' points at nothing at (root)");
    expect_error("false", DS_EUNSUPPORTED, "json_schema: the schema false admits no value at (root)");
    expect_error("{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", DS_EUNSUPPORTED,
                 "json_schema: 'pattern': regex: lookaround (not supported) at byte 1 at (root)");
    expect_error("{\"type\":\"integer\",\"minimum\":3,\"maximum\":2}", DS_EUNSUPPORTED,
                 "json_schema: the bounds admit no integer at (root)");
    expect_error("{\"allOf\":[{\"type\":\"string\"},{\"type\":\"number\"}]}", DS_EUNSUPPORTED,
                 "json_schema: allOf: no type satisfies every branch at (root)");
    expect_error("{\"type\":\"object\",\"required\":[\"k\"],\"additionalProperties\":false}", DS_EUNSUPPORTED,
                 "json_schema: required property 'k' is not allowed (additionalProperties is false) at (root)");
    expect_error("{\"type\":\"strin\"}", DS_EINVAL, "json_schema: 'type' has an unknown type name at (root)");
    expect_error("{\"minLength\":-1}", DS_EINVAL, "json_schema: 'minLength' must be a whole number 0..1e9 at (root)");
}

int main(void) {
    RUN(integer_ranges);
    RUN(objects_and_arrays);
    RUN(whitespace);
    RUN(errors_name_keyword_and_pointer);
    return ds_test_finish();
}
