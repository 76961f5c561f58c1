/* test_output_request.c - the output constraints of a request body: every
 * spelling (OpenAI's response_format, vLLM's structured_outputs and guided_*,
 * llama-server's grammar and json_schema) gives one ds_oai_output naming its
 * field; two at once, a forced or strict tool call with one, and malformed
 * values are 400s naming the field; the GBNF text of json_object and choice,
 * and the cache keys. */
#include <stdlib.h>
#include <string.h>

#include "server/json_text.h"
#include "server/openai_request.h"
#include "server/output_grammar.h"
#include "server/tool_grammar.h"
#include "testing.h"

/* parses a chat body with extra fields (a JSON object's members, without braces) */
static int chat(const char *extra, ds_oai_request *r, ds_oai_error *err) {
    char body[4096];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]%s%s}", *extra ? "," : "", extra);
    return ds_oai_request_parse(body, strlen(body), DS_OAI_CHAT, r, err);
}

static int cmpl(const char *extra, ds_oai_request *r, ds_oai_error *err) {
    char body[4096];
    snprintf(body, sizeof body, "{\"prompt\":\"hi\"%s%s}", *extra ? "," : "", extra);
    return ds_oai_request_parse(body, strlen(body), DS_OAI_COMPLETION, r, err);
}

typedef struct {
    const char *extra;
    ds_out_kind kind;
    const char *field;
    int strict;
} accepted;

static void test_every_spelling(void) {
    static const accepted A[] = {
        {"\"response_format\":{\"type\":\"text\"}", DS_OUT_NONE, "", 0},
        {"\"response_format\":{\"type\":\"json_object\"}", DS_OUT_JSON_OBJECT, "response_format", 0},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"object\"},"
         "\"strict\":true}}", DS_OUT_SCHEMA, "response_format", 1},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"object\"}}}",
         DS_OUT_SCHEMA, "response_format", 0},
        {"\"response_format\":{\"type\":\"json_object\",\"schema\":{\"type\":\"integer\"}}", DS_OUT_SCHEMA, "response_format", 1},
        {"\"structured_outputs\":{\"json\":{\"type\":\"string\"}}", DS_OUT_SCHEMA, "structured_outputs.json", 1},
        {"\"structured_outputs\":{\"json\":\"{\\\"type\\\":\\\"string\\\"}\"}", DS_OUT_SCHEMA, "structured_outputs.json", 1},
        {"\"structured_outputs\":{\"regex\":\"[a-z]+\"}", DS_OUT_REGEX, "structured_outputs.regex", 0},
        {"\"structured_outputs\":{\"choice\":[\"yes\",\"no\"]}", DS_OUT_CHOICE, "structured_outputs.choice", 0},
        {"\"structured_outputs\":{\"grammar\":\"root ::= \\\"a\\\"\"}", DS_OUT_GRAMMAR, "structured_outputs.grammar", 0},
        {"\"structured_outputs\":{\"json_object\":true}", DS_OUT_JSON_OBJECT, "structured_outputs.json_object", 0},
        {"\"structured_outputs\":{\"json_object\":false}", DS_OUT_NONE, "", 0},
        {"\"structured_outputs\":{\"regex\":\"a\",\"disable_fallback\":true,\"disable_any_whitespace\":true}",
         DS_OUT_REGEX, "structured_outputs.regex", 0},
        {"\"guided_json\":{\"type\":\"object\"}", DS_OUT_SCHEMA, "guided_json", 1},
        {"\"guided_json\":\"{\\\"enum\\\":[1,2]}\"", DS_OUT_SCHEMA, "guided_json", 1},
        {"\"guided_regex\":\"\\\\d+\"", DS_OUT_REGEX, "guided_regex", 0},
        {"\"guided_choice\":[\"a\",\"b\\\"c\"]", DS_OUT_CHOICE, "guided_choice", 0},
        {"\"guided_grammar\":\"root ::= [a-z]+\"", DS_OUT_GRAMMAR, "guided_grammar", 0},
        {"\"guided_regex\":\"x\",\"guided_decoding_backend\":\"xgrammar\"", DS_OUT_REGEX, "guided_regex", 0},
        {"\"guided_whitespace_pattern\":\"\"", DS_OUT_NONE, "", 0},
        {"\"grammar\":\"root ::= \\\"yes\\\" | \\\"no\\\"\"", DS_OUT_GRAMMAR, "grammar", 0},
        {"\"json_schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", DS_OUT_SCHEMA, "json_schema", 1},
        {"\"response_format\":null,\"guided_json\":null,\"grammar\":null", DS_OUT_NONE, "", 0},
    };
    for (size_t i = 0; i < sizeof A / sizeof *A; i++) {
        for (int kind = 0; kind < 2; kind++) {
            ds_oai_request r;
            ds_oai_error err;
            int rc = kind ? cmpl(A[i].extra, &r, &err) : chat(A[i].extra, &r, &err);
            CHECK(rc == 0, "%s (%s): %s: %s", A[i].extra, kind ? "completions" : "chat", err.param, err.message);
            if (rc) continue;
            CHECK(r.output.kind == A[i].kind && !strcmp(r.output.field, A[i].field) &&
                  (A[i].kind != DS_OUT_SCHEMA || r.output.strict == A[i].strict),
                  "%s: kind %d field '%s' strict %d", A[i].extra, (int)r.output.kind, r.output.field, r.output.strict);
            if (A[i].kind == DS_OUT_SCHEMA) CHECK(json_is_object(r.output.value), "%s: the schema", A[i].extra);
            if (strstr(A[i].extra, "disable_any_whitespace")) CHECK(r.output.max_space == 0, "%d", r.output.max_space);
            else if (A[i].kind != DS_OUT_NONE) CHECK(r.output.max_space > 0, "%d", r.output.max_space);
            ds_oai_request_free(&r);
        }
    }
}

typedef struct {
    const char *extra;
    const char *param;
    const char *says;   /* a piece of the message */
} refused;

static void test_refusals(void) {
    static const refused R[] = {
        /* two constraints: the message names both */
        {"\"response_format\":{\"type\":\"json_object\"},\"guided_regex\":\"a\"", "guided_regex", "'response_format' and 'guided_regex'"},
        {"\"grammar\":\"root ::= \\\"a\\\"\",\"json_schema\":{}", "json_schema", "'grammar' and 'json_schema'"},
        {"\"structured_outputs\":{\"regex\":\"a\",\"choice\":[\"a\"]}", "structured_outputs.choice",
         "'structured_outputs.regex' and 'structured_outputs.choice'"},
        {"\"guided_choice\":[\"a\"],\"guided_grammar\":\"root ::= \\\"a\\\"\"", "guided_grammar", "'guided_choice' and"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}],\"tool_choice\":\"required\","
         "\"response_format\":{\"type\":\"json_object\"}", "response_format", "'tool_choice'"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"strict\":true}}],\"guided_regex\":\"a\"",
         "guided_regex", "strict"},
        /* malformed */
        {"\"response_format\":{\"type\":\"json_schema\"}", "response_format", "json_schema"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}", "response_format", "schema' is required"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":[]}}", "response_format", "JSON Schema"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{},\"strict\":1}}", "response_format", "boolean"},
        {"\"response_format\":{\"type\":\"structural_tag\"}", "response_format", "structural_tag"},
        {"\"response_format\":\"json\"", "response_format", "object"},
        {"\"structured_outputs\":[]", "structured_outputs", "object"},
        {"\"structured_outputs\":{\"structural_tag\":\"x\"}", "structured_outputs.structural_tag", "not supported"},
        {"\"structured_outputs\":{\"whitespace_pattern\":\"\\\\s*\"}", "structured_outputs.whitespace_pattern", "not supported"},
        {"\"structured_outputs\":{\"json\":\"{bad\"}", "structured_outputs.json", "not JSON"},
        {"\"structured_outputs\":{\"json_object\":1}", "structured_outputs.json_object", "boolean"},
        {"\"guided_json\":3", "guided_json", "JSON Schema"},
        {"\"guided_json\":\"[1]\"", "guided_json", "JSON Schema"},
        {"\"guided_regex\":[]", "guided_regex", "string"},
        {"\"guided_choice\":[]", "guided_choice", "non-empty"},
        {"\"guided_choice\":\"a\"", "guided_choice", "non-empty"},
        {"\"guided_choice\":[\"a\",1]", "guided_choice", "guided_choice[1]"},
        {"\"guided_grammar\":\"\"", "guided_grammar", "empty"},
        {"\"guided_decoding_backend\":1", "guided_decoding_backend", "string"},
        {"\"guided_whitespace_pattern\":\"[ ]*\"", "guided_whitespace_pattern", "not supported"},
        {"\"grammar\":{}", "grammar", "string"},
        {"\"json_schema\":\"{}\"", "json_schema", "JSON Schema"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":[]}}]", "tools[0].function.parameters", "object"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"strict\":\"yes\"}}]", "tools[0].function.strict", "boolean"},
    };
    for (size_t i = 0; i < sizeof R / sizeof *R; i++) {
        ds_oai_request r;
        ds_oai_error err;
        int rc = chat(R[i].extra, &r, &err);
        CHECK(rc == -1 && !strcmp(err.param, R[i].param) && strstr(err.message, R[i].says), "%s: rc %d param '%s': %s",
              R[i].extra, rc, err.param, err.message);
        if (!rc) ds_oai_request_free(&r);
    }
    /* a strict function with tool_choice auto alone is fine, and so is a constraint with non-strict tools */
    ds_oai_request r;
    ds_oai_error err;
    CHECK(chat("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"strict\":true}}]", &r, &err) == 0 &&
          r.strict_tools == 1, "%s", err.message);
    ds_oai_request_free(&r);
    CHECK(chat("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}],\"guided_regex\":\"a\"", &r, &err) == 0 &&
          r.strict_tools == 0 && r.output.kind == DS_OUT_REGEX, "%s", err.message);
    ds_oai_request_free(&r);
}

static void test_gbnf_text(void) {
    ds_oai_request r;
    ds_oai_error err;
    REQUIRE(chat("\"guided_choice\":[\"yes\",\"a \\\"q\\\" \\\\ b\\n\",\"\u00e9\"]", &r, &err) == 0, "%s", err.message);
    char *g = NULL;
    size_t n = 0;
    ds_err e = {0};
    REQUIRE(ds_output_gbnf(&r.output, &g, &n, &e) == DS_OK, "%s", e.msg);
    CHECK(!strcmp(g, "root ::= \"yes\" | \"a \\\"q\\\" \\\\ b\\n\" | \"\xC3\xA9\"\n"), "%s", g);
    CHECK(n == strlen(g), "%zu", n);
    free(g);
    size_t k1, k2;
    char *a = ds_output_cache_key(&r.output, &k1);
    ds_oai_request_free(&r);
    REQUIRE(chat("\"structured_outputs\":{\"choice\":[\"yes\",\"a \\\"q\\\" \\\\ b\\n\",\"\u00e9\"]}", &r, &err) == 0, "%s", err.message);
    char *b = ds_output_cache_key(&r.output, &k2);
    CHECK(a && b && k1 == k2 && !memcmp(a, b, k1), "the same choice, the same key: %s / %s", a, b);
    free(b);
    r.output.max_space = 0;
    b = ds_output_cache_key(&r.output, &k2);
    CHECK(b && (k1 != k2 || memcmp(a, b, k1)), "other options, another key");
    free(a);
    free(b);
    ds_oai_request_free(&r);
    /* json_object: the object, after whitespace, with the whitespace allowance in the text */
    REQUIRE(chat("\"response_format\":{\"type\":\"json_object\"}", &r, &err) == 0, "%s", err.message);
    REQUIRE(ds_output_gbnf(&r.output, &g, &n, &e) == DS_OK, "%s", e.msg);
    CHECK(!strncmp(g, "root ::= json-ws json-object\n", 29) && strstr(g, "json-ws ::= [ \\t\\n\\r]{0,4}\n"), "%s", g);
    free(g);
    ds_oai_request_free(&r);
    /* a grammar is passed on as it came */
    REQUIRE(chat("\"grammar\":\"root ::= [0-9]+ # digits\"", &r, &err) == 0, "%s", err.message);
    REQUIRE(ds_output_gbnf(&r.output, &g, &n, &e) == DS_OK, "%s", e.msg);
    CHECK(!strcmp(g, "root ::= [0-9]+ # digits"), "%s", g);
    free(g);
    ds_oai_request_free(&r);
}

int main(void) {
    RUN(test_every_spelling);
    RUN(test_refusals);
    RUN(test_gbnf_text);
    return ds_test_finish();
}
