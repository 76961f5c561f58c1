/* test_responses_api.c - the Responses API (server/responses_api.h): requests
 * become chat requests (every input form, every refusal naming its field), the
 * Codex CLI's request renders with Qwen3.5's template, and the format writes
 * the response object and its event stream in OpenAI's order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja.h"
#include "server/json_text.h"
#include "server/responses_api.h"
#include "testing.h"

static json_t *J(const char *text) {
    char msg[256];
    json_t *v = ds_json_parse(text, strlen(text), msg, sizeof msg);
    if (!v) printf("bad test JSON: %s\n", msg);
    return v;
}

/* parses body text; returns 0 and fills r, or -1 with err */
static int parse(const char *body, ds_oai_request *r, ds_oai_error *err) {
    json_t *b = J(body);
    int rc = ds_responses_parse(b, r, err);
    json_decref(b);
    return rc;
}

static const char *role(const ds_oai_request *r, size_t i) {
    return json_string_value(json_object_get(json_array_get(r->messages, i), "role"));
}
static const char *content(const ds_oai_request *r, size_t i) {
    return json_string_value(json_object_get(json_array_get(r->messages, i), "content"));
}

static void test_input_string_and_settings(void) {
    ds_oai_request r;
    ds_oai_error e;
    REQUIRE(parse("{\"model\":\"m\",\"input\":\"hi\",\"instructions\":\"be brief\",\"max_output_tokens\":7,"
                  "\"temperature\":0.5,\"top_p\":0.9,\"stream\":true,\"store\":true,\"user\":\"u\",\"metadata\":{\"a\":\"b\"},"
                  "\"include\":[\"reasoning.encrypted_content\"],\"prompt_cache_key\":\"k\",\"client_metadata\":{},"
                  "\"truncation\":\"disabled\",\"service_tier\":\"auto\",\"top_logprobs\":0,\"parallel_tool_calls\":false}",
                  &r, &e) == 0, "%s: %s", e.param, e.message);
    CHECK(json_array_size(r.messages) == 2 && !strcmp(role(&r, 0), "system") && !strcmp(content(&r, 0), "be brief") &&
          !strcmp(role(&r, 1), "user") && !strcmp(content(&r, 1), "hi"), "messages");
    CHECK(r.max_tokens == 7 && r.stream == 1 && r.parallel_tool_calls == 0 && !strcmp(r.model, "m"), "settings");
    CHECK(r.sampling.temperature > 0.49f && r.sampling.temperature < 0.51f, "temperature %g", r.sampling.temperature);
    CHECK(r.thinking == -1 && r.output.kind == DS_OUT_NONE && !r.tools, "defaults");
    ds_oai_request_free(&r);
}

static void test_input_items(void) {
    ds_oai_request r;
    ds_oai_error e;
    /* every item form: developer messages with ids, parts, an assistant turn with reasoning, a message
     * and two calls, their outputs (a string and parts), a later developer message */
    REQUIRE(parse("{\"input\":["
                  "{\"type\":\"message\",\"id\":\"m1\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"D1\"}]},"
                  "{\"role\":\"system\",\"content\":\"S2\"},"
                  "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},{\"type\":\"input_text\",\"text\":\"b\"}]},"
                  "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"sum\"}],"
                  "\"content\":[{\"type\":\"reasoning_text\",\"text\":\"think\"}],\"encrypted_content\":\"xx\"},"
                  "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"ok\"},"
                  "{\"type\":\"refusal\",\"refusal\":\"!\"}]},"
                  "{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"},"
                  "{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":\"g\",\"arguments\":\"{}\"},"
                  "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"r1\"},"
                  "{\"type\":\"function_call_output\",\"call_id\":\"c2\",\"output\":[{\"type\":\"input_text\",\"text\":\"r2\"}]},"
                  "{\"role\":\"developer\",\"content\":\"late\"}]}",
                  &r, &e) == 0, "%s: %s", e.param, e.message);
    REQUIRE(json_array_size(r.messages) == 6, "%zu messages", json_array_size(r.messages));
    CHECK(!strcmp(role(&r, 0), "system") && !strcmp(content(&r, 0), "D1\n\nS2"), "one system message: %s", content(&r, 0));
    CHECK(!strcmp(role(&r, 1), "user") && !strcmp(content(&r, 1), "ab"), "parts joined");
    const json_t *a = json_array_get(r.messages, 2);
    CHECK(!strcmp(role(&r, 2), "assistant") && !strcmp(content(&r, 2), "ok!"), "assistant text");
    CHECK(ds_json_str_is(json_object_get(a, "reasoning_content"), "think"), "reasoning content (not the summary)");
    const json_t *calls = json_object_get(a, "tool_calls");
    REQUIRE(json_array_size(calls) == 2, "both calls in the assistant turn");
    const json_t *f0 = json_object_get(json_array_get(calls, 0), "function");
    CHECK(ds_json_str_is(json_object_get(json_array_get(calls, 0), "id"), "c1") &&
          ds_json_str_is(json_object_get(f0, "name"), "f") &&
          json_integer_value(json_object_get(json_object_get(f0, "arguments"), "x")) == 1, "call 1");
    CHECK(!strcmp(role(&r, 3), "tool") && !strcmp(content(&r, 3), "r1") &&
          ds_json_str_is(json_object_get(json_array_get(r.messages, 3), "tool_call_id"), "c1"), "output 1");
    CHECK(!strcmp(role(&r, 4), "tool") && !strcmp(content(&r, 4), "r2"), "output 2 from parts");
    CHECK(!strcmp(role(&r, 5), "user") && !strcmp(content(&r, 5), "late"), "a late developer message: user");
    ds_oai_request_free(&r);

    /* a call with no assistant message before it; a summary when there is no content */
    REQUIRE(parse("{\"input\":[{\"role\":\"user\",\"content\":\"q\"},"
                  "{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"sum\"}]},"
                  "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"}]}",
                  &r, &e) == 0, "%s: %s", e.param, e.message);
    REQUIRE(json_array_size(r.messages) == 2, "%zu", json_array_size(r.messages));
    a = json_array_get(r.messages, 1);
    CHECK(!strcmp(content(&r, 1), "") && json_array_size(json_object_get(a, "tool_calls")) == 1 &&
          ds_json_str_is(json_object_get(a, "reasoning_content"), "sum"), "call turn");
    ds_oai_request_free(&r);

    /* Codex's reasoning items: an empty content, the text in the summary */
    REQUIRE(parse("{\"input\":[{\"role\":\"user\",\"content\":\"q\"},"
                  "{\"type\":\"reasoning\",\"content\":[],\"summary\":[{\"type\":\"summary_text\",\"text\":\"S\"}],"
                  "\"encrypted_content\":\"e\"},{\"role\":\"assistant\",\"content\":\"A\"}]}", &r, &e) == 0, "%s", e.message);
    CHECK(ds_json_str_is(json_object_get(json_array_get(r.messages, 1), "reasoning_content"), "S"), "summary used");
    ds_oai_request_free(&r);
}

static void test_tools_and_options(void) {
    ds_oai_request r;
    ds_oai_error e;
    REQUIRE(parse("{\"input\":\"x\",\"tools\":["
                  "{\"type\":\"function\",\"name\":\"f\",\"description\":\"d\",\"strict\":true,"
                  "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}},"
                  "{\"type\":\"namespace\",\"name\":\"mcp\",\"tools\":[{\"type\":\"function\",\"name\":\"n\"}]},"
                  "{\"type\":\"web_search\",\"external_web_access\":false},{\"type\":\"file_search\"},"
                  "{\"type\":\"computer_use_preview\"},{\"type\":\"custom\",\"name\":\"c\"},{\"type\":\"local_shell\"},"
                  "{\"type\":\"mcp\",\"server_label\":\"s\"}],"
                  "\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},\"reasoning\":{\"effort\":\"high\",\"summary\":\"auto\"}}",
                  &r, &e) == 0, "%s: %s", e.param, e.message);
    REQUIRE(json_array_size(r.tools) == 1, "only the function tool: %zu", json_array_size(r.tools));
    const json_t *f = json_object_get(json_array_get(r.tools, 0), "function");
    CHECK(ds_json_str_is(json_object_get(f, "name"), "f") && ds_json_str_is(json_object_get(f, "description"), "d") &&
          json_is_object(json_object_get(f, "parameters")) && r.strict_tools, "chat tool");
    CHECK(r.tool_choice == DS_TOOLS_NAMED && !strcmp(r.tool_name, "f") && r.thinking == 1, "choice, thinking");
    ds_oai_request_free(&r);

    static const char *const effort[][2] = {{"none", "0"}, {"minimal", "0"}, {"low", "1"}, {"medium", "1"}, {"high", "1"}};
    for (size_t i = 0; i < 5; i++) {
        char b[160];
        snprintf(b, sizeof b, "{\"input\":\"x\",\"reasoning\":{\"effort\":\"%s\"}}", effort[i][0]);
        REQUIRE(parse(b, &r, &e) == 0, "%s", e.message);
        CHECK(r.thinking == atoi(effort[i][1]), "%s: thinking %d", effort[i][0], r.thinking);
        ds_oai_request_free(&r);
    }
    static const char *const choice[][2] = {{"\"auto\"", "1"}, {"\"none\"", "0"}, {"\"required\"", "2"}};
    for (size_t i = 0; i < 3; i++) {
        char b[200];
        snprintf(b, sizeof b, "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"tool_choice\":%s}",
                 choice[i][0]);
        REQUIRE(parse(b, &r, &e) == 0, "%s", e.message);
        CHECK((int)r.tool_choice == atoi(choice[i][1]), "%s: %d", choice[i][0], r.tool_choice);
        ds_oai_request_free(&r);
    }
    /* text.format: the structured-output constraint */
    REQUIRE(parse("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"p\",\"strict\":true,"
                  "\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}}", &r, &e) == 0,
            "%s", e.message);
    CHECK(r.output.kind == DS_OUT_SCHEMA && r.output.strict && json_is_object(r.output.value), "json_schema");
    ds_oai_request_free(&r);
    REQUIRE(parse("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_object\"}}}", &r, &e) == 0, "%s", e.message);
    CHECK(r.output.kind == DS_OUT_JSON_OBJECT, "json_object");
    ds_oai_request_free(&r);
    REQUIRE(parse("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"text\"},\"verbosity\":\"low\"}}", &r, &e) == 0,
            "%s", e.message);
    CHECK(r.output.kind == DS_OUT_NONE, "text");
    ds_oai_request_free(&r);
    /* only hosted tools: no chat tools, auto stays accepted */
    REQUIRE(parse("{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}],\"tool_choice\":\"auto\"}", &r, &e) == 0,
            "%s", e.message);
    CHECK(!r.tools && r.tool_choice == DS_TOOLS_NONE, "no tools");
    ds_oai_request_free(&r);
}

static void test_refusals(void) {
    static const char *const cases[][3] = {
        {"{\"input\":\"x\",\"previous_response_id\":\"resp_1\"}", "previous_response_id", "keeps no responses"},
        {"{\"input\":\"x\",\"conversation\":\"c\"}", "conversation", "keeps no conversations"},
        {"{\"input\":\"x\",\"background\":true}", "background", "not supported"},
        {"{}", "input", "required"},
        {"{\"input\":5}", "input", "a string or an array"},
        {"{\"input\":[]}", "input", "empty"},
        {"{\"input\":[3]}", "input[0]", "an object"},
        {"{\"input\":[{\"role\":\"system\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"u\"}]}]}",
         "input[0].content[0]", "user messages only"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"file_id\":\"f\"}]}]}",
         "input[0].content[0]", "stores no files"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":5}]}]}",
         "input[0].content[0]", "must be a string"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\"}]}]}", "input[0].content[0]", "only text"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\"}]}]}", "input[0].content[0]", "'text' string"},
        {"{\"input\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "input[0].role", "must be user, assistant"},
        {"{\"input\":[{\"role\":\"user\"}]}", "input[0].content", "required"},
        {"{\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_1\"}]}", "input[0]", "item_reference"},
        {"{\"input\":[{\"type\":\"web_search_call\"}]}", "input[0]", "not supported"},
        {"{\"input\":[{\"role\":\"user\",\"content\":\"q\"},{\"type\":\"function_call\",\"name\":\"f\",\"arguments\":\"{}\"}]}",
         "input[1].call_id", "must be a string"},
        {"{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"arguments\":\"{}\"}]}", "input[0].name", "string"},
        {"{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{oops\"}]}",
         "input[0].arguments", "JSON text of an object"},
        {"{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\"}]}", "input[0].output", "required"},
        {"{\"input\":[{\"type\":\"reasoning\",\"content\":\"x\"}]}", "input[0].content", "an array"},
        {"{\"input\":\"x\",\"instructions\":3}", "instructions", "a string"},
        {"{\"input\":\"x\",\"tools\":[{\"name\":\"f\"}]}", "tools[0]", "'type'"},
        {"{\"input\":\"x\",\"tools\":[{\"type\":\"function\"}]}", "tools[0]", "'name'"},
        {"{\"input\":\"x\",\"tool_choice\":{\"type\":\"web_search\"}}", "tool_choice", "must be none, auto"},
        {"{\"input\":\"x\",\"tool_choice\":\"required\"}", "tool_choice", "requires 'tools'"},
        {"{\"input\":\"x\",\"reasoning\":{\"effort\":\"max\"}}", "reasoning.effort", "none, minimal"},
        {"{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"grammar\"}}}", "text.format.type", "json_schema"},
        {"{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\"}}}", "text.format.schema",
         "required"},
        {"{\"input\":\"x\",\"max_output_tokens\":-1}", "max_output_tokens", "max_output_tokens"},
        {"{\"input\":\"x\",\"temperature\":\"hot\"}", "temperature", "temperature"},
        {"{\"input\":\"x\",\"stream\":1}", "stream", "boolean"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ds_oai_request r;
        ds_oai_error e;
        int rc = parse(cases[i][0], &r, &e);
        CHECK(rc == -1 && !strcmp(e.param, cases[i][1]) && strstr(e.message, cases[i][2]), "%s: rc %d param '%s' '%s'",
              cases[i][0], rc, e.param, e.message);
        if (!rc) ds_oai_request_free(&r);
    }
}

/* The request Codex CLI sends renders with Qwen3.5's own template, which takes one system
 * message, first (several raise "System message must be at the beginning"). */
static void test_codex_request_renders(void) {
    const char *root = getenv("DS_ROOT");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/chat_template/templates/qwen35_xml_tools.jinja", root && *root ? root : ".");
    FILE *fp = fopen(path, "rb");
    REQUIRE(fp, "cannot open %s", path);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = 0;
    ds_jinja *t = NULL;
    ds_err err = {0};
    REQUIRE(ds_jinja_compile(text, &t, &err) == DS_OK, "%s", err.msg);
    ds_oai_request r;
    ds_oai_error e;
    const char *body =
        "{\"model\":\"m\",\"stream\":true,\"input\":["
        "{\"type\":\"message\",\"id\":\"a\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"BASE\"}]},"
        "{\"type\":\"message\",\"id\":\"b\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"PERM\"}]},"
        "{\"type\":\"message\",\"id\":\"c\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"ENV\"}]},"
        "{\"type\":\"message\",\"id\":\"e\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"LATE\"}]},"
        "{\"type\":\"message\",\"id\":\"d\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"ASK\"}]},"
        "{\"type\":\"reasoning\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"THINK\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"shell\",\"arguments\":\"{\\\"command\\\":[\\\"ls\\\"]}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"OUT\"}],"
        "\"tools\":[{\"type\":\"function\",\"name\":\"shell\",\"strict\":false,\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"command\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}}}},"
        "{\"type\":\"namespace\",\"name\":\"mcp\",\"tools\":[]},{\"type\":\"web_search\",\"external_web_access\":false}],"
        "\"tool_choice\":\"auto\",\"parallel_tool_calls\":true,\"reasoning\":{\"summary\":\"auto\"},\"store\":false,"
        "\"include\":[\"reasoning.encrypted_content\"],\"prompt_cache_key\":\"k\",\"client_metadata\":{\"x\":\"y\"}}";
    if (parse(body, &r, &e)) {
        CHECK(0, "%s: %s", e.param, e.message);
        ds_jinja_free(t);
        return;
    }
    json_t *ctx = ds_oai_template_context(&r, "<|im_end|>", &err);
    char *out = NULL;
    size_t len = 0;
    ds_status st = ctx ? ds_jinja_render(t, ctx, &out, &len, &err) : DS_EINVAL;
    CHECK(st == DS_OK, "render: %s", err.msg);
    if (st == DS_OK) {
        CHECK(!strncmp(out, "<|im_start|>system\n", 19) && strstr(out, "BASE\n\nPERM"), "one system message first");
        CHECK(strstr(out, "<function=shell>") && strstr(out, "THINK") && strstr(out, "OUT") && strstr(out, "LATE"),
              "the call, its reasoning, its output, the late text: %s", out + (len > 700 ? len - 700 : 0));
        const char *sys2 = strstr(out + 1, "<|im_start|>system");
        CHECK(!sys2, "a second system message");
    }
    free(out);
    json_decref(ctx);
    ds_oai_request_free(&r);
    ds_jinja_free(t);
}

/* --- the format --- */

static ds_answer_ctx ctx_for(const char *request, json_t **req) {
    static char id[64];
    ds_responses_format.make_id(id, sizeof id);
    *req = J(request);
    ds_answer_ctx a = {.id = id, .created = 1700000000, .model = "tiny", .prompt_tokens = 5, .request = *req};
    return a;
}

static void test_ids(void) {
    char a[64], b[64];
    ds_responses_format.make_id(a, sizeof a);
    ds_responses_format.make_id(b, sizeof b);
    CHECK(!strncmp(a, "resp_", 5) && strlen(a) >= 21 && strcmp(a, b), "%s %s", a, b);
}

static void test_body(void) {
    json_t *req;
    ds_answer_ctx a = ctx_for("{\"input\":\"x\",\"instructions\":\"I\",\"temperature\":0.5,\"max_output_tokens\":9,"
                              "\"tools\":[{\"type\":\"web_search\"}],\"metadata\":{\"k\":\"v\"},\"reasoning\":{\"effort\":\"low\"}}",
                              &req);
    json_t *calls = J("[{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}]");
    ds_answer_result res = {.content = "hello", .n_content = 5, .reasoning = "hmm", .n_reasoning = 3, .tool_calls = calls,
                            .end = {.kind = DS_END_TOOL_CALLS},
                            .usage = {.prompt_tokens = 5, .completion_tokens = 7, .cached_tokens = 2, .reasoning_tokens = 3}};
    char *s = ds_responses_format.body(&a, &res);
    REQUIRE(s, "body");
    json_t *r = J(s);
    free(s);
    REQUIRE(r, "JSON");
    CHECK(ds_json_str_is(json_object_get(r, "object"), "response") && ds_json_str_is(json_object_get(r, "id"), a.id) &&
          ds_json_str_is(json_object_get(r, "status"), "completed") &&
          json_integer_value(json_object_get(r, "created_at")) == 1700000000, "envelope");
    CHECK(ds_json_str_is(json_object_get(r, "instructions"), "I") &&
          json_real_value(json_object_get(r, "temperature")) == 0.5 &&
          json_integer_value(json_object_get(r, "max_output_tokens")) == 9 &&
          json_array_size(json_object_get(r, "tools")) == 1 && json_is_false(json_object_get(r, "store")) &&
          json_is_null(json_object_get(r, "previous_response_id")) &&
          ds_json_str_is(json_object_get(json_object_get(r, "reasoning"), "effort"), "low") &&
          ds_json_str_is(json_object_get(json_object_get(r, "metadata"), "k"), "v") &&
          ds_json_str_is(json_object_get(r, "tool_choice"), "auto") &&
          json_is_true(json_object_get(r, "parallel_tool_calls")), "echoes");
    json_t *out = json_object_get(r, "output");
    REQUIRE(json_array_size(out) == 3, "items: %zu", json_array_size(out));
    json_t *rs = json_array_get(out, 0), *msg = json_array_get(out, 1), *fc = json_array_get(out, 2);
    CHECK(ds_json_str_is(json_object_get(rs, "type"), "reasoning") &&
          !strncmp(json_string_value(json_object_get(rs, "id")), "rs_", 3) &&
          json_array_size(json_object_get(rs, "summary")) == 0 &&
          ds_json_str_is(json_object_get(json_array_get(json_object_get(rs, "content"), 0), "type"), "reasoning_text") &&
          ds_json_str_is(json_object_get(json_array_get(json_object_get(rs, "content"), 0), "text"), "hmm"), "reasoning");
    json_t *part = json_array_get(json_object_get(msg, "content"), 0);
    CHECK(ds_json_str_is(json_object_get(msg, "type"), "message") && ds_json_str_is(json_object_get(msg, "role"), "assistant") &&
          !strncmp(json_string_value(json_object_get(msg, "id")), "msg_", 4) &&
          ds_json_str_is(json_object_get(msg, "status"), "completed") &&
          ds_json_str_is(json_object_get(part, "type"), "output_text") && ds_json_str_is(json_object_get(part, "text"), "hello") &&
          json_is_array(json_object_get(part, "annotations")) && json_is_array(json_object_get(part, "logprobs")), "message");
    CHECK(ds_json_str_is(json_object_get(fc, "type"), "function_call") &&
          !strncmp(json_string_value(json_object_get(fc, "id")), "fc_", 3) &&
          !strncmp(json_string_value(json_object_get(fc, "call_id")), "call_", 5) &&
          ds_json_str_is(json_object_get(fc, "name"), "f") && ds_json_str_is(json_object_get(fc, "arguments"), "{\"a\":1}") &&
          ds_json_str_is(json_object_get(fc, "status"), "completed"), "function_call");
    json_t *u = json_object_get(r, "usage");
    CHECK(json_integer_value(json_object_get(u, "input_tokens")) == 5 &&
          json_integer_value(json_object_get(u, "output_tokens")) == 7 &&
          json_integer_value(json_object_get(u, "total_tokens")) == 12 &&
          json_integer_value(json_object_get(json_object_get(u, "input_tokens_details"), "cached_tokens")) == 2 &&
          json_integer_value(json_object_get(json_object_get(u, "output_tokens_details"), "reasoning_tokens")) == 3, "usage");
    json_decref(r);
    json_decref(calls);

    /* cut by max_output_tokens: incomplete, the message too; an empty answer is an empty message */
    ds_answer_result cut = {.content = "", .reasoning = "", .end = {.kind = DS_END_LENGTH}};
    s = ds_responses_format.body(&a, &cut);
    r = J(s);
    free(s);
    CHECK(ds_json_str_is(json_object_get(r, "status"), "incomplete") &&
          ds_json_str_is(json_object_get(json_object_get(r, "incomplete_details"), "reason"), "max_output_tokens") &&
          json_array_size(json_object_get(r, "output")) == 1 &&
          ds_json_str_is(json_object_get(json_array_get(json_object_get(r, "output"), 0), "status"), "incomplete"), "cut");
    json_decref(r);
    json_decref(req);
    s = ds_responses_format.error_body(400, "invalid_request_error", NULL, "input[2].call_id", "bad");
    r = J(s);
    free(s);
    json_t *err = json_object_get(r, "error");
    CHECK(ds_json_str_is(json_object_get(err, "type"), "invalid_request_error") &&
          ds_json_str_is(json_object_get(err, "param"), "input[2].call_id") &&
          ds_json_str_is(json_object_get(err, "message"), "bad") && json_is_null(json_object_get(err, "code")), "error body");
    json_decref(r);
    /* the context checks after parsing name chat fields: the body names the Responses ones */
    s = ds_responses_format.error_body(400, "invalid_request_error", "context_length_exceeded", "max_tokens",
                                       "the prompt (5 tokens) + max_tokens (9) exceeds the context of 8 tokens");
    r = J(s);
    free(s);
    err = json_object_get(r, "error");
    CHECK(ds_json_str_is(json_object_get(err, "param"), "max_output_tokens") &&
          ds_json_str_is(json_object_get(err, "message"), "the prompt (5 tokens) + max_output_tokens (9) exceeds the context of 8 tokens") &&
          ds_json_str_is(json_object_get(err, "code"), "context_length_exceeded"), "renamed: %s", json_string_value(json_object_get(err, "message")));
    json_decref(r);
    s = ds_responses_format.error_body(400, "invalid_request_error", NULL, "messages", "the prompt has 9 tokens");
    r = J(s);
    free(s);
    CHECK(ds_json_str_is(json_object_get(json_object_get(r, "error"), "param"), "input"), "messages -> input");
    json_decref(r);
    /* text echoed with its format even when the request gave only a verbosity */
    ds_answer_ctx b = ctx_for("{\"input\":\"x\",\"text\":{\"verbosity\":\"low\"}}", &req);
    ds_answer_result plain = {.content = "a", .n_content = 1, .reasoning = ""};
    s = ds_responses_format.body(&b, &plain);
    r = J(s);
    free(s);
    json_t *tx = json_object_get(r, "text");
    CHECK(ds_json_str_is(json_object_get(tx, "verbosity"), "low") &&
          ds_json_str_is(json_object_get(json_object_get(tx, "format"), "type"), "text"), "text echo");
    json_decref(r);
    json_decref(req);
}

/* the events of an SSE text, as a JSON array (each checked: event name = type, numbered in order) */
static json_t *events_of(const ds_sb *sse, int *ok) {
    json_t *arr = json_array();
    *ok = 1;
    const char *p = sse->s, *end = sse->s + sse->n;
    while (p < end) {
        const char *blk = strstr(p, "\n\n");
        if (!blk || strncmp(p, "event: ", 7)) { *ok = 0; break; }
        const char *nl = memchr(p, '\n', (size_t)(blk - p));
        const char *data = nl + 1;
        if (strncmp(data, "data: ", 6)) { *ok = 0; break; }
        char msg[128];
        json_t *e = ds_json_parse(data + 6, (size_t)(blk - data - 6), msg, sizeof msg);
        const char *type = json_string_value(json_object_get(e, "type"));
        if (!type || strlen(type) != (size_t)(nl - p - 7) || strncmp(type, p + 7, strlen(type)) ||
            json_integer_value(json_object_get(e, "sequence_number")) != (json_int_t)json_array_size(arr))
            *ok = 0;
        json_array_append_new(arr, e ? e : json_null());
        p = blk + 2;
    }
    return arr;
}

/* "type|type|..." of the events, dropping the "response." prefix */
static void types_of(const json_t *events, char *buf, size_t cap) {
    buf[0] = 0;
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        const char *t = json_string_value(json_object_get(e, "type"));
        if (t && !strncmp(t, "response.", 9)) t += 9;
        size_t l = strlen(buf);
        snprintf(buf + l, cap - l, "%s%s", i ? "|" : "", t ? t : "?");
    }
}

static void test_stream_order(void) {
    json_t *req;
    ds_answer_ctx a = ctx_for("{\"input\":\"x\",\"stream\":true}", &req);
    REQUIRE(ds_responses_format.init(&a) == 0, "init");
    ds_sb out = {0};
    /* a part can come before stream_begin (completion.c puts stream_begin's events first) */
    ds_responses_format.stream_part(&a, &out, DS_PART_REASONING, "th", 2, NULL);
    ds_sb begin = {0};
    ds_responses_format.stream_begin(&a, &begin);
    ds_sb_append(&begin, out.s, out.n);
    ds_sb_free(&out);
    out = begin;
    ds_responses_format.stream_part(&a, &out, DS_PART_REASONING, "ink", 3, NULL);
    ds_responses_format.stream_part(&a, &out, DS_PART_CONTENT, "he", 2, NULL);
    ds_responses_format.stream_part(&a, &out, DS_PART_CONTENT, "llo", 3, NULL);
    json_t *call = J("{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}");
    ds_responses_format.stream_part(&a, &out, DS_PART_TOOL_CALL, NULL, 0, call);
    json_decref(call);
    ds_answer_end end = {.kind = DS_END_TOOL_CALLS};
    ds_oai_usage u = {.prompt_tokens = 5, .completion_tokens = 9, .reasoning_tokens = 2};
    ds_responses_format.stream_end(&a, &out, &end, &u);
    ds_responses_format.release(&a);
    int ok;
    json_t *ev = events_of(&out, &ok);
    ds_sb_free(&out);
    CHECK(ok, "SSE framing, names and sequence numbers");
    char types[2048];
    types_of(ev, types, sizeof types);
    CHECK(!strcmp(types, "created|in_progress|"
                         "output_item.added|content_part.added|reasoning_text.delta|reasoning_text.delta|"
                         "reasoning_text.done|content_part.done|output_item.done|"
                         "output_item.added|content_part.added|output_text.delta|output_text.delta|"
                         "output_text.done|content_part.done|output_item.done|"
                         "output_item.added|function_call_arguments.delta|function_call_arguments.done|output_item.done|"
                         "completed"), "%s", types);
    REQUIRE(json_array_size(ev) == 21, "%zu", json_array_size(ev));
    json_t *created = json_object_get(json_array_get(ev, 0), "response");
    CHECK(ds_json_str_is(json_object_get(created, "status"), "in_progress") &&
          json_array_size(json_object_get(created, "output")) == 0 && json_is_null(json_object_get(created, "usage")),
          "created");
    json_t *rdone = json_array_get(ev, 6), *tdone = json_array_get(ev, 13), *fadd = json_array_get(ev, 16);
    CHECK(ds_json_str_is(json_object_get(rdone, "text"), "think") && json_integer_value(json_object_get(rdone, "output_index")) == 0,
          "reasoning done");
    CHECK(ds_json_str_is(json_object_get(tdone, "text"), "hello") && json_integer_value(json_object_get(tdone, "output_index")) == 1 &&
          json_integer_value(json_object_get(tdone, "content_index")) == 0, "text done");
    json_t *fitem = json_object_get(fadd, "item");
    CHECK(ds_json_str_is(json_object_get(fitem, "arguments"), "") && ds_json_str_is(json_object_get(fitem, "status"), "in_progress") &&
          json_integer_value(json_object_get(fadd, "output_index")) == 2, "call added");
    CHECK(ds_json_str_is(json_object_get(json_array_get(ev, 18), "arguments"), "{\"a\":1}") &&
          ds_json_str_is(json_object_get(json_array_get(ev, 18), "name"), "f") &&
          ds_json_str_is(json_object_get(json_array_get(ev, 18), "item_id"), json_string_value(json_object_get(fitem, "id"))),
          "arguments done");
    json_t *fin = json_object_get(json_array_get(ev, 20), "response");
    CHECK(ds_json_str_is(json_object_get(fin, "status"), "completed") && json_array_size(json_object_get(fin, "output")) == 3 &&
          json_integer_value(json_object_get(json_object_get(fin, "usage"), "total_tokens")) == 14, "completed");
    /* every event of the message names its item */
    const char *mid = json_string_value(json_object_get(json_object_get(json_array_get(ev, 9), "item"), "id"));
    for (size_t i = 10; i <= 14; i++)
        CHECK(ds_json_str_is(json_object_get(json_array_get(ev, i), "item_id"), mid), "event %zu item_id", i);
    json_decref(ev);
    json_decref(req);
}

static void test_stream_cut_and_fail(void) {
    json_t *req;
    ds_answer_ctx a = ctx_for("{\"input\":\"x\"}", &req);
    REQUIRE(ds_responses_format.init(&a) == 0, "init");
    ds_sb out = {0};
    ds_responses_format.stream_begin(&a, &out);
    ds_responses_format.stream_part(&a, &out, DS_PART_CONTENT, "ab", 2, NULL);
    ds_answer_end end = {.kind = DS_END_LENGTH};
    ds_oai_usage u = {.prompt_tokens = 5, .completion_tokens = 2};
    ds_responses_format.stream_end(&a, &out, &end, &u);
    ds_responses_format.release(&a);
    int ok;
    json_t *ev = events_of(&out, &ok);
    ds_sb_free(&out);
    char types[1024];
    types_of(ev, types, sizeof types);
    CHECK(ok && !strcmp(types, "created|in_progress|output_item.added|content_part.added|output_text.delta|"
                               "output_text.done|content_part.done|output_item.done|incomplete"), "%s", types);
    json_t *fin = json_object_get(json_array_get(ev, 8), "response");
    CHECK(ds_json_str_is(json_object_get(fin, "status"), "incomplete") &&
          ds_json_str_is(json_object_get(json_object_get(fin, "incomplete_details"), "reason"), "max_output_tokens") &&
          ds_json_str_is(json_object_get(json_object_get(json_array_get(ev, 7), "item"), "status"), "incomplete"), "incomplete");
    json_decref(ev);

    /* nothing generated: an empty message, as the body has */
    REQUIRE(ds_responses_format.init(&a) == 0, "init");
    out = (ds_sb){0};
    ds_responses_format.stream_begin(&a, &out);
    end.kind = DS_END_STOP;
    ds_responses_format.stream_end(&a, &out, &end, &u);
    ds_responses_format.release(&a);
    ev = events_of(&out, &ok);
    ds_sb_free(&out);
    types_of(ev, types, sizeof types);
    CHECK(ok && !strcmp(types, "created|in_progress|output_item.added|content_part.added|output_text.done|"
                               "content_part.done|output_item.done|completed"), "%s", types);
    json_decref(ev);

    /* the model failed after the headers */
    REQUIRE(ds_responses_format.init(&a) == 0, "init");
    out = (ds_sb){0};
    ds_responses_format.stream_begin(&a, &out);
    ds_responses_format.stream_part(&a, &out, DS_PART_REASONING, "r", 1, NULL);
    ds_responses_format.stream_fail(&a, &out, "the model failed: boom");
    ds_responses_format.release(&a);
    ev = events_of(&out, &ok);
    ds_sb_free(&out);
    types_of(ev, types, sizeof types);
    CHECK(ok && !strcmp(types, "created|in_progress|output_item.added|content_part.added|reasoning_text.delta|"
                               "reasoning_text.done|content_part.done|output_item.done|failed"), "%s", types);
    fin = json_object_get(json_array_get(ev, 8), "response");
    json_t *err = json_object_get(fin, "error");
    CHECK(ds_json_str_is(json_object_get(fin, "status"), "failed") && ds_json_str_is(json_object_get(err, "code"), "server_error") &&
          ds_json_str_is(json_object_get(err, "message"), "the model failed: boom"), "failed");
    json_decref(ev);
    json_decref(req);
}

int main(void) {
    RUN(test_input_string_and_settings);
    RUN(test_input_items);
    RUN(test_tools_and_options);
    RUN(test_refusals);
    RUN(test_codex_request_renders);
    RUN(test_ids);
    RUN(test_body);
    RUN(test_stream_order);
    RUN(test_stream_cut_and_fail);
    return ds_test_finish();
}
