/* test_messages_api.c - Anthropic's Messages API: a request becomes the right chat request
 * (every block kind, the errors naming the Messages field, the billing header dropped, system
 * text placed so that a Qwen3.5-style template renders it), and the format writes the
 * message object and the event stream in Anthropic's order. */
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja.h"
#include "server/json_text.h"
#include "server/messages_api.h"
#include "testing.h"

static json_t *J(const char *text) {
    char msg[200];
    json_t *v = ds_json_parse(text, strlen(text), msg, sizeof msg);
    if (!v) fprintf(stderr, "bad test JSON: %s: %s\n", msg, text);
    return v;
}

/* parses body text; returns 0 or -1 as ds_messages_parse */
static int parse(const char *text, int for_count, ds_oai_request *r, ds_oai_error *e) {
    json_t *b = J(text);
    int rc = ds_messages_parse(b, for_count, r, e);
    json_decref(b);
    return rc;
}

static const char *msg_field(const ds_oai_request *r, size_t i, const char *k) {
    return json_string_value(json_object_get(json_array_get(r->messages, i), k));
}

static void parse_basic(void) {
    ds_oai_request r;
    ds_oai_error e;
    REQUIRE(!parse("{\"model\":\"m\",\"max_tokens\":32000,\"system\":\"be brief\",\"stream\":true,"
                   "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"metadata\":{\"user_id\":\"u\"},"
                   "\"service_tier\":\"auto\",\"output_config\":{\"effort\":\"high\"},\"context_management\":{}}",
                   0, &r, &e), "%s: %s", e.param, e.message);
    CHECK(json_array_size(r.messages) == 2, "%zu messages", json_array_size(r.messages));
    CHECK(!strcmp(msg_field(&r, 0, "role"), "system") && !strcmp(msg_field(&r, 0, "content"), "be brief"), "system");
    CHECK(!strcmp(msg_field(&r, 1, "role"), "user") && !strcmp(msg_field(&r, 1, "content"), "hi"), "user");
    CHECK(r.max_tokens == 32000 && r.clamp_max_tokens, "max_tokens %d clamp %d", r.max_tokens, r.clamp_max_tokens);
    CHECK(r.stream == 1 && !strcmp(r.model, "m") && r.thinking == -1, "stream %d thinking %d", r.stream, r.thinking);
    ds_oai_request_free(&r);
    /* count_tokens needs no max_tokens */
    REQUIRE(!parse("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 1, &r, &e), "%s", e.message);
    ds_oai_request_free(&r);
}

static void parse_blocks(void) {
    ds_oai_request r;
    ds_oai_error e;
    REQUIRE(!parse("{\"model\":\"m\",\"max_tokens\":5,\"messages\":["
                   "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\","
                   "\"cache_control\":{\"type\":\"ephemeral\"}}]},"
                   "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":\"x\"},"
                   "{\"type\":\"redacted_thinking\",\"data\":\"zz\"},{\"type\":\"text\",\"text\":\"ok\"},"
                   "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"f\",\"input\":{\"x\":1}},"
                   "{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"g\",\"input\":{}}]},"
                   "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"42\"},"
                   "{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_2\",\"is_error\":true,"
                   "\"content\":[{\"type\":\"text\",\"text\":\"no such\"}]},{\"type\":\"text\",\"text\":\"go on\"}]}]}",
                   0, &r, &e), "%s: %s", e.param, e.message);
    REQUIRE(json_array_size(r.messages) == 5, "%zu messages", json_array_size(r.messages));
    CHECK(!strcmp(msg_field(&r, 0, "content"), "ab"), "text blocks joined: %s", msg_field(&r, 0, "content"));
    CHECK(!strcmp(msg_field(&r, 1, "role"), "assistant") && !strcmp(msg_field(&r, 1, "content"), "ok"), "assistant");
    CHECK(!strcmp(msg_field(&r, 1, "reasoning_content"), "hmm"), "reasoning");
    json_t *calls = json_object_get(json_array_get(r.messages, 1), "tool_calls");
    REQUIRE(json_array_size(calls) == 2, "calls");
    json_t *f = json_object_get(json_array_get(calls, 0), "function");
    CHECK(!strcmp(json_string_value(json_object_get(f, "name")), "f") &&
          json_integer_value(json_object_get(json_object_get(f, "arguments"), "x")) == 1, "first call");
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(calls, 1), "id")), "toolu_2"), "call id");
    CHECK(!strcmp(msg_field(&r, 2, "role"), "tool") && !strcmp(msg_field(&r, 2, "content"), "42") &&
          !strcmp(msg_field(&r, 2, "tool_call_id"), "toolu_1"), "first result");
    CHECK(!strcmp(msg_field(&r, 3, "content"), "Error: no such"), "error result: %s", msg_field(&r, 3, "content"));
    CHECK(!strcmp(msg_field(&r, 4, "role"), "user") && !strcmp(msg_field(&r, 4, "content"), "go on"), "text after");
    ds_oai_request_free(&r);
}

static void parse_tools(void) {
    ds_oai_request r;
    ds_oai_error e;
    const char *tools = "\"tools\":[{\"name\":\"f\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}},"
                        "{\"type\":\"web_search_20250305\",\"name\":\"web_search\"},{\"type\":\"bash_20250124\",\"name\":\"bash\"},"
                        "{\"type\":\"text_editor_20250728\",\"name\":\"str_replace_based_edit_tool\"},"
                        "{\"type\":\"custom\",\"name\":\"g\",\"input_schema\":{\"type\":\"object\",\"properties\":{}}}]";
    struct { const char *choice; ds_tool_choice want; const char *name; int parallel; } cases[] = {
        {"", DS_TOOLS_AUTO, NULL, 1},
        {",\"tool_choice\":{\"type\":\"auto\"}", DS_TOOLS_AUTO, NULL, 1},
        {",\"tool_choice\":{\"type\":\"any\"}", DS_TOOLS_REQUIRED, NULL, 1},
        {",\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\",\"disable_parallel_tool_use\":true}", DS_TOOLS_NAMED, "g", 0},
        {",\"tool_choice\":{\"type\":\"none\"}", DS_TOOLS_NONE, NULL, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[1024];
        snprintf(body, sizeof body, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s%s}",
                 tools, cases[i].choice);
        if (parse(body, 0, &r, &e)) {
            CHECK(0, "case %zu: %s: %s", i, e.param, e.message);
            continue;
        }
        CHECK(json_array_size(r.tools) == 2, "case %zu: %zu tools (server tools skipped)", i, json_array_size(r.tools));
        json_t *f = json_object_get(json_array_get(r.tools, 0), "function");
        CHECK(!strcmp(json_string_value(json_object_get(f, "description")), "d") && json_is_object(json_object_get(f, "parameters")),
              "case %zu: function", i);
        CHECK(r.tool_choice == cases[i].want, "case %zu: tool_choice %d", i, r.tool_choice);
        CHECK(!cases[i].name || (r.tool_name && !strcmp(r.tool_name, cases[i].name)), "case %zu: name", i);
        CHECK(r.parallel_tool_calls == cases[i].parallel, "case %zu: parallel %d", i, r.parallel_tool_calls);
        ds_oai_request_free(&r);
    }
}

static void parse_sampling_thinking(void) {
    ds_oai_request r;
    ds_oai_error e;
    REQUIRE(!parse("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                   "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":20,\"stop_sequences\":[\"END\",\"###\"],"
                   "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":2048}}", 0, &r, &e), "%s", e.message);
    CHECK(r.sampling.temperature > 0.49f && r.sampling.temperature < 0.51f, "temperature");
    CHECK(r.sampling.top_p > 0.89f && r.sampling.top_p < 0.91f && r.sampling.top_k == 20, "top_p/top_k");
    CHECK(r.n_stop == 2 && !strcmp(r.stop[0], "END") && !strcmp(r.stop[1], "###"), "stop %d", r.n_stop);
    CHECK(r.thinking == 1, "enabled: %d", r.thinking);
    ds_oai_request_free(&r);
    const char *types[] = {"disabled", "adaptive"};
    for (int i = 0; i < 2; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                 "\"thinking\":{\"type\":\"%s\"}}", types[i]);
        REQUIRE(!parse(body, 0, &r, &e), "%s", e.message);
        CHECK(r.thinking == i, "%s: %d", types[i], r.thinking);
        ds_oai_request_free(&r);
    }
}

static void parse_errors(void) {
    struct { const char *body; int for_count; const char *param, *says; } cases[] = {
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 0, "max_tokens", "required"},
        {"{\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 0, "model", "required"},
        {"{\"model\":\"m\",\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 0, "max_tokens", "positive"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"messages\":[]}", 0, "messages", "empty"},
        {"{\"model\":\"m\",\"max_tokens\":3}", 1, "messages", "required"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", 0, "messages[0].role", "tool"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\"}]}", 0, "messages[0].content", "required"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}",
         0, "messages[0].content[0]", "needs a 'source' object"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":{}}]}]}",
         0, "messages[0].content[0]", "text and images"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"content\":\"x\"}]}]}",
         0, "messages[0].content[0]", "tool_use_id"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t\","
         "\"content\":[{\"type\":\"image\"}]}]}]}", 0, "messages[0].content[0].content", "user messages only"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\","
         "\"name\":\"f\",\"input\":\"{}\"}]}]}", 0, "messages[0].content[0]", "input"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"x\"}]}]}",
         0, "messages[0].content[0]", "thinking"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"system\":[{\"type\":\"image\"}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         0, "system", "user messages only"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"system\":7,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 0, "system", "string"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"temperature\":1.5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 0,
         "temperature", "0 to 1"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"stop_sequences\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 0,
         "stop_sequences", "array"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"tool_choice\":{\"type\":\"any\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         0, "tool_choice", "needs 'tools'"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"some\"},"
         "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 0, "tool_choice.type", "auto, any, tool or none"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"tool\"},"
         "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 0, "tool_choice.name", "name"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"tools\":[{\"name\":\"f\"}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 0,
         "tools[0].input_schema", "JSON Schema"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"thinking\":{\"type\":\"sometimes\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         0, "thinking.type", "enabled, disabled or adaptive"},
        {"{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"system\",\"content\":\"only system\"}]}", 0, "messages",
         "no user or assistant"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ds_oai_request r;
        ds_oai_error e;
        int rc = parse(cases[i].body, cases[i].for_count, &r, &e);
        if (!rc) {
            ds_oai_request_free(&r);
            CHECK(0, "case %zu accepted: %s", i, cases[i].body);
            continue;
        }
        CHECK(!strcmp(e.param, cases[i].param), "case %zu: param '%s', want '%s'", i, e.param, cases[i].param);
        CHECK(strstr(e.message, cases[i].says) != NULL, "case %zu: message '%s' lacks '%s'", i, e.message, cases[i].says);
        CHECK(!r.messages, "case %zu: the request is left empty", i);
    }
}

/* the system text of a request with this system prompt */
static char *system_of(const char *system_json, const char *extra_messages) {
    char body[2048];
    snprintf(body, sizeof body, "{\"model\":\"m\",\"max_tokens\":5,\"system\":%s,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}%s]}",
             system_json, extra_messages);
    ds_oai_request r;
    ds_oai_error e;
    if (parse(body, 0, &r, &e)) return strdup(e.message);
    const char *s = !strcmp(msg_field(&r, 0, "role"), "system") ? msg_field(&r, 0, "content") : "(no system message)";
    char *out = strdup(s);
    ds_oai_request_free(&r);
    return out;
}

static void billing_header(void) {
    const char *a = "[{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: cc_version=2.1.12.a3f; cc_entrypoint=cli; cch=a5145;\"},"
                    "{\"type\":\"text\",\"text\":\"You are Claude Code.\",\"cache_control\":{\"type\":\"ephemeral\"}}]";
    const char *b = "[{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: cc_version=2.1.12.77c; cc_entrypoint=cli; cch=0f3e9;\"},"
                    "{\"type\":\"text\",\"text\":\"You are Claude Code.\",\"cache_control\":{\"type\":\"ephemeral\"}}]";
    char *sa = system_of(a, ""), *sb = system_of(b, "");
    CHECK(!strcmp(sa, "You are Claude Code."), "the header block is dropped: '%s'", sa);
    CHECK(!strcmp(sa, sb), "two hashes, one system text: '%s' / '%s'", sa, sb);
    free(sa);
    free(sb);
    /* the header as the start of a string system prompt: the text after it stays */
    sa = system_of("\"x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=a5145;You are Claude Code.\"", "");
    CHECK(!strcmp(sa, "You are Claude Code."), "string: '%s'", sa);
    free(sa);
    /* any other text is left alone, the header mentioned later too */
    sa = system_of("\"Quote: x-anthropic-billing-header: cch=1;\"", "");
    CHECK(!strcmp(sa, "Quote: x-anthropic-billing-header: cch=1;"), "other text: '%s'", sa);
    free(sa);
    sa = system_of("\"x-anthropic-billing-header: no fields\"", "");
    CHECK(!strcmp(sa, "x-anthropic-billing-header: no fields"), "no field: '%s'", sa);
    free(sa);
    sa = system_of("\"x-anthropic-billing-header is a header\"", "");
    CHECK(!strcmp(sa, "x-anthropic-billing-header is a header"), "not a header: '%s'", sa);
    free(sa);
}

/* system text: the system messages that open `messages` join `system`; a later one stays in its
 * place as a user turn (a template takes system text only first) */
static void system_messages(void) {
    char *s = system_of("[{\"type\":\"text\",\"text\":\"one\"},{\"type\":\"text\",\"text\":\"two\"}]", "");
    CHECK(!strcmp(s, "one\n\ntwo"), "'%s'", s);
    free(s);
    ds_oai_request r;
    ds_oai_error e;
    REQUIRE(!parse("{\"model\":\"m\",\"max_tokens\":5,\"system\":\"one\",\"messages\":[{\"role\":\"system\",\"content\":"
                   "[{\"type\":\"text\",\"text\":\"two\"}]},{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\","
                   "\"content\":\"y\"},{\"role\":\"system\",\"content\":\"late\"},{\"role\":\"user\",\"content\":\"z\"}]}",
                   0, &r, &e), "%s", e.message);
    REQUIRE(json_array_size(r.messages) == 5, "%zu messages", json_array_size(r.messages));
    CHECK(!strcmp(msg_field(&r, 0, "role"), "system") && !strcmp(msg_field(&r, 0, "content"), "one\n\ntwo"), "first");
    CHECK(!strcmp(msg_field(&r, 3, "role"), "user") && !strcmp(msg_field(&r, 3, "content"), "late"), "late: %s %s",
          msg_field(&r, 3, "role"), msg_field(&r, 3, "content"));
    CHECK(!strcmp(msg_field(&r, 4, "content"), "z"), "after");
    ds_oai_request_free(&r);
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = s ? fread(s, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!s) return NULL;
    s[got] = 0;
    return s;
}

static char *root_file(const char *rel) {
    const char *root = getenv("DS_ROOT");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root ? root : ".", rel);
    return read_all(path);
}

/* the recorded Claude Code request (a system message inside messages, the billing header,
 * draft 2020-12 tools) renders with a Qwen3.5-style template, which refuses system text that is
 * not first */
static void claude_code_request_renders(void) {
    char *req_text = root_file("tests/server/claude_code_request.json");
    char *tpl_text = root_file("tests/chat_template/templates/qwen35_xml_tools.jinja");
    REQUIRE(req_text && tpl_text, "fixtures missing (run from the repository root or set DS_ROOT)");
    json_t *body = J(req_text);
    ds_oai_request r;
    ds_oai_error e;
    int rc = ds_messages_parse(body, 0, &r, &e);
    json_decref(body);
    free(req_text);
    if (rc) free(tpl_text);
    REQUIRE(!rc, "%s: %s", e.param, e.message);
    CHECK(r.max_tokens == 32000 && r.clamp_max_tokens && r.stream && r.thinking == 1, "fields");
    CHECK(json_array_size(r.tools) == 4, "%zu tools", json_array_size(r.tools));
    ds_err de = {0};
    json_t *ctx = ds_oai_template_context(&r, "<|im_end|>", &de);
    ds_jinja *t = NULL;
    char *out = NULL;
    size_t n = 0;
    ds_status st = ds_jinja_compile(tpl_text, &t, &de);
    free(tpl_text);
    if (st == DS_OK) st = ds_jinja_render(t, ctx, &out, &n, &de);
    CHECK(st == DS_OK, "render: %s", de.msg);
    if (out) {
        const char *late = strstr(out, "non-interactive mode"), *user = strstr(out, "<|im_start|>user");
        const char *sys = strstr(out, "You are Claude Code");
        CHECK(sys && user && sys < user, "the system blocks are in the system turn");
        CHECK(late && user && late > user, "the system message after the user's stays after it");
        CHECK(!strstr(out, "cch=") && !strstr(out, "billing"), "no billing header in the prompt");
        CHECK(strstr(out, "<|im_start|>system\n") == out, "the prompt opens with the system turn");
    }
    /* the template does refuse a system message after the first (what the translation avoids) */
    json_t *late = json_deep_copy(ctx);
    json_t *ms = json_object_get(late, "messages");
    json_array_append_new(ms, json_pack("{s:s,s:s}", "role", "system", "content", "late"));
    char *out2 = NULL;
    ds_err de2 = {0};
    CHECK(t && ds_jinja_render(t, late, &out2, &n, &de2) != DS_OK && strstr(de2.msg, "System message must be at the beginning"),
          "the template refuses a late system message: %s", de2.msg);
    free(out2);
    json_decref(late);
    free(out);
    ds_jinja_free(t);
    json_decref(ctx);
    ds_oai_request_free(&r);
}

/* --- the format --- */

static json_t *body_of(ds_answer_ctx *a, const ds_answer_result *res) {
    char *s = ds_messages_format.body(a, res);
    json_t *v = s ? J(s) : NULL;
    free(s);
    return v;
}

static void format_body(void) {
    char id[64];
    ds_messages_format.make_id(id, sizeof id);
    CHECK(!strncmp(id, "msg_", 4) && strlen(id) > 12, "id %s", id);
    char id2[64];
    ds_messages_format.make_id(id2, sizeof id2);
    CHECK(strcmp(id, id2), "ids differ");
    ds_answer_ctx a = {.id = id, .model = "tiny", .prompt_tokens = 30, .cached_tokens = 12};
    json_t *calls = J("[{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": [1, 2]}\"},{\"name\":\"g\",\"arguments\":\"{}\"}]");
    ds_answer_result res = {.content = "hello", .n_content = 5, .reasoning = "think", .n_reasoning = 5, .tool_calls = calls,
                            .end = {.kind = DS_END_TOOL_CALLS}, .usage = {.prompt_tokens = 30, .completion_tokens = 9, .cached_tokens = 12}};
    json_t *m = body_of(&a, &res);
    REQUIRE(m, "body");
    CHECK(!strcmp(json_string_value(json_object_get(m, "id")), id) && ds_json_str_is(json_object_get(m, "type"), "message") &&
          ds_json_str_is(json_object_get(m, "role"), "assistant") && ds_json_str_is(json_object_get(m, "model"), "tiny"), "shell");
    json_t *c = json_object_get(m, "content");
    REQUIRE(json_array_size(c) == 4, "%zu blocks", json_array_size(c));
    json_t *b0 = json_array_get(c, 0), *b1 = json_array_get(c, 1), *b2 = json_array_get(c, 2), *b3 = json_array_get(c, 3);
    CHECK(ds_json_str_is(json_object_get(b0, "type"), "thinking") && ds_json_str_is(json_object_get(b0, "thinking"), "think") &&
          ds_json_str_is(json_object_get(b0, "signature"), ""), "thinking first");
    CHECK(ds_json_str_is(json_object_get(b1, "type"), "text") && ds_json_str_is(json_object_get(b1, "text"), "hello"), "text");
    CHECK(ds_json_str_is(json_object_get(b2, "type"), "tool_use") && ds_json_str_is(json_object_get(b2, "name"), "f") &&
          !strncmp(json_string_value(json_object_get(b2, "id")), "toolu_", 6) &&
          json_array_size(json_object_get(json_object_get(b2, "input"), "x")) == 2, "tool_use input is an object");
    CHECK(json_is_object(json_object_get(b3, "input")) && strcmp(json_string_value(json_object_get(b2, "id")),
                                                                  json_string_value(json_object_get(b3, "id"))), "second call");
    CHECK(ds_json_str_is(json_object_get(m, "stop_reason"), "tool_use") && json_is_null(json_object_get(m, "stop_sequence")),
          "stop_reason");
    json_t *u = json_object_get(m, "usage");
    CHECK(json_integer_value(json_object_get(u, "input_tokens")) == 18 &&
          json_integer_value(json_object_get(u, "cache_read_input_tokens")) == 12 &&
          json_integer_value(json_object_get(u, "cache_creation_input_tokens")) == 0 &&
          json_integer_value(json_object_get(u, "output_tokens")) == 9, "usage");
    json_decref(m);
    json_decref(calls);
    struct { ds_answer_end end; const char *reason, *seq; } ends[] = {
        {{.kind = DS_END_STOP}, "end_turn", NULL},
        {{.kind = DS_END_LENGTH}, "max_tokens", NULL},
        {{.kind = DS_END_STOP_STRING, .stop_string = "##", .stop_len = 2}, "stop_sequence", "##"},
    };
    for (size_t i = 0; i < 3; i++) {
        ds_answer_result r2 = {.content = "", .reasoning = "", .end = ends[i].end};
        m = body_of(&a, &r2);
        REQUIRE(m, "body");
        CHECK(ds_json_str_is(json_object_get(m, "stop_reason"), ends[i].reason), "%s", ends[i].reason);
        json_t *sq = json_object_get(m, "stop_sequence");
        CHECK(ends[i].seq ? ds_json_str_is(sq, ends[i].seq) : json_is_null(sq), "%s: stop_sequence", ends[i].reason);
        c = json_object_get(m, "content");
        CHECK(json_array_size(c) == 1 && ds_json_str_is(json_object_get(json_array_get(c, 0), "text"), ""),
              "an empty answer is one empty text block");
        json_decref(m);
    }
    char *eb = ds_messages_format.error_body(404, "invalid_request_error", "model_not_found", "model", "no such model 'x'");
    m = eb ? J(eb) : NULL;
    free(eb);
    CHECK(m && ds_json_str_is(json_object_get(m, "type"), "error") &&
          ds_json_str_is(json_object_get(json_object_get(m, "error"), "type"), "not_found_error"), "error body");
    json_decref(m);
}

/* the events of an SSE text: [{"event": name, "data": {...}}] */
static json_t *events_of(const char *s) {
    json_t *out = json_array();
    while (s && *s) {
        const char *end = strstr(s, "\n\n");
        if (!end) break;
        const char *nl = strchr(s, '\n');
        json_t *e = json_object();
        if (!strncmp(s, "event: ", 7) && nl < end) {
            json_object_set_new(e, "event", json_stringn(s + 7, (size_t)(nl - s - 7)));
            s = nl + 1;
        }
        if (!strncmp(s, "data: ", 6)) {
            char msg[100];
            json_object_set_new(e, "data", ds_json_parse(s + 6, (size_t)(end - s - 6), msg, sizeof msg));
        }
        json_array_append_new(out, e);
        s = end + 2;
    }
    return out;
}

static const char *ev_name(const json_t *evs, size_t i) {
    return json_string_value(json_object_get(json_array_get(evs, i), "event"));
}

static json_t *ev_data(const json_t *evs, size_t i) { return json_object_get(json_array_get(evs, i), "data"); }

static void format_stream(void) {
    char id[64];
    ds_messages_format.make_id(id, sizeof id);
    ds_answer_ctx a = {.id = id, .model = "tiny", .prompt_tokens = 40, .cached_tokens = 8};
    REQUIRE(ds_messages_format.init(&a) == 0, "init");
    ds_sb out = {0};
    ds_messages_format.stream_begin(&a, &out);
    ds_messages_format.stream_part(&a, &out, DS_PART_REASONING, "th", 2, NULL);
    ds_messages_format.stream_part(&a, &out, DS_PART_REASONING, "ink", 3, NULL);
    ds_messages_format.stream_part(&a, &out, DS_PART_CONTENT, "he", 2, NULL);
    ds_messages_format.stream_part(&a, &out, DS_PART_CONTENT, "llo", 3, NULL);
    json_t *call = J("{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": 1}\"}");
    ds_messages_format.stream_part(&a, &out, DS_PART_TOOL_CALL, NULL, 0, call);
    json_decref(call);
    ds_answer_end end = {.kind = DS_END_TOOL_CALLS};
    ds_oai_usage u = {.prompt_tokens = 40, .completion_tokens = 7, .cached_tokens = 8};
    ds_messages_format.stream_end(&a, &out, &end, &u);
    ds_messages_format.release(&a);
    json_t *evs = events_of(out.s);
    ds_sb_free(&out);
    const char *want[] = {"message_start", "ping",
                          "content_block_start", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_stop",
                          "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
                          "content_block_start", "content_block_delta", "content_block_stop",
                          "message_delta", "message_stop"};
    size_t nw = sizeof want / sizeof want[0];
    REQUIRE(json_array_size(evs) == nw, "%zu events", json_array_size(evs));
    for (size_t i = 0; i < nw; i++) {
        CHECK(ev_name(evs, i) && !strcmp(ev_name(evs, i), want[i]), "event %zu: %s, want %s", i, ev_name(evs, i), want[i]);
        CHECK(ds_json_str_is(json_object_get(ev_data(evs, i), "type"), want[i]), "event %zu: data type", i);
    }
    json_t *m = json_object_get(ev_data(evs, 0), "message");
    CHECK(ds_json_str_is(json_object_get(m, "id"), id) && json_array_size(json_object_get(m, "content")) == 0 &&
          json_is_null(json_object_get(m, "stop_reason")), "message_start's message");
    json_t *mu = json_object_get(m, "usage");
    CHECK(json_integer_value(json_object_get(mu, "input_tokens")) == 32 &&
          json_integer_value(json_object_get(mu, "cache_read_input_tokens")) == 8, "message_start usage: the real input_tokens");
    json_t *d;
    d = ev_data(evs, 2);
    CHECK(json_integer_value(json_object_get(d, "index")) == 0 &&
          ds_json_str_is(json_object_get(json_object_get(d, "content_block"), "type"), "thinking"), "thinking block 0");
    d = json_object_get(ev_data(evs, 3), "delta");
    CHECK(ds_json_str_is(json_object_get(d, "type"), "thinking_delta") && ds_json_str_is(json_object_get(d, "thinking"), "th"), "thinking_delta");
    d = json_object_get(ev_data(evs, 5), "delta");
    CHECK(ds_json_str_is(json_object_get(d, "type"), "signature_delta"), "signature_delta before the thinking block stops");
    d = ev_data(evs, 7);
    CHECK(json_integer_value(json_object_get(d, "index")) == 1 &&
          ds_json_str_is(json_object_get(json_object_get(d, "content_block"), "type"), "text"), "text block 1");
    d = json_object_get(ev_data(evs, 9), "delta");
    CHECK(ds_json_str_is(json_object_get(d, "type"), "text_delta") && ds_json_str_is(json_object_get(d, "text"), "llo"), "text_delta");
    d = json_object_get(ev_data(evs, 11), "content_block");
    CHECK(json_integer_value(json_object_get(ev_data(evs, 11), "index")) == 2 && ds_json_str_is(json_object_get(d, "type"), "tool_use") &&
          ds_json_str_is(json_object_get(d, "name"), "f") && json_object_size(json_object_get(d, "input")) == 0, "tool_use block 2");
    d = json_object_get(ev_data(evs, 12), "delta");
    CHECK(ds_json_str_is(json_object_get(d, "type"), "input_json_delta") &&
          ds_json_str_is(json_object_get(d, "partial_json"), "{\"x\":1}"), "input_json_delta");
    CHECK(json_integer_value(json_object_get(ev_data(evs, 13), "index")) == 2, "stop index");
    d = ev_data(evs, 14);
    CHECK(ds_json_str_is(json_object_get(json_object_get(d, "delta"), "stop_reason"), "tool_use") &&
          json_is_null(json_object_get(json_object_get(d, "delta"), "stop_sequence")), "message_delta");
    CHECK(json_integer_value(json_object_get(json_object_get(d, "usage"), "output_tokens")) == 7 &&
          json_integer_value(json_object_get(json_object_get(d, "usage"), "cache_read_input_tokens")) == 8, "message_delta usage");
    json_decref(evs);

    /* nothing said, a stop sequence: one empty text block; then a failure: an error event */
    REQUIRE(ds_messages_format.init(&a) == 0, "init");
    ds_messages_format.stream_begin(&a, &out);
    end = (ds_answer_end){.kind = DS_END_STOP_STRING, .stop_string = "END", .stop_len = 3};
    ds_messages_format.stream_end(&a, &out, &end, &u);
    ds_messages_format.release(&a);
    evs = events_of(out.s);
    ds_sb_free(&out);
    const char *want2[] = {"message_start", "ping", "content_block_start", "content_block_stop", "message_delta", "message_stop"};
    REQUIRE(json_array_size(evs) == 6, "%zu events", json_array_size(evs));
    for (size_t i = 0; i < 6; i++) CHECK(!strcmp(ev_name(evs, i), want2[i]), "event %zu: %s", i, ev_name(evs, i));
    d = json_object_get(ev_data(evs, 4), "delta");
    CHECK(ds_json_str_is(json_object_get(d, "stop_reason"), "stop_sequence") && ds_json_str_is(json_object_get(d, "stop_sequence"), "END"),
          "stop_sequence");
    json_decref(evs);

    REQUIRE(ds_messages_format.init(&a) == 0, "init");
    ds_messages_format.stream_begin(&a, &out);
    ds_messages_format.stream_part(&a, &out, DS_PART_CONTENT, "x", 1, NULL);
    ds_messages_format.stream_fail(&a, &out, "the model failed: boom");
    ds_messages_format.release(&a);
    evs = events_of(out.s);
    ds_sb_free(&out);
    size_t last = json_array_size(evs) - 1;
    CHECK(!strcmp(ev_name(evs, last), "error"), "ends with an error event: %s", ev_name(evs, last));
    d = ev_data(evs, last);
    CHECK(ds_json_str_is(json_object_get(d, "type"), "error") &&
          ds_json_str_is(json_object_get(json_object_get(d, "error"), "type"), "api_error") &&
          ds_json_str_is(json_object_get(json_object_get(d, "error"), "message"), "the model failed: boom"), "error shape");
    json_decref(evs);
}

int main(void) {
    RUN(parse_basic);
    RUN(parse_blocks);
    RUN(parse_tools);
    RUN(parse_sampling_thinking);
    RUN(parse_errors);
    RUN(billing_header);
    RUN(system_messages);
    RUN(claude_code_request_renders);
    RUN(format_body);
    RUN(format_stream);
    return ds_test_finish();
}
