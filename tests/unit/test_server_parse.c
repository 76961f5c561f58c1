/* test_server_parse.c - the server's text-level pieces: stop strings held
 * back, reasoning / tool call splitting, tool call bodies, request parsing. */
#include <stdlib.h>
#include <string.h>

#include "server/chat_parser.h"
#include "server/metrics.h"
#include "server/json_text.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/stop_filter.h"
#include "testing.h"

typedef struct {
    ds_sb content, reasoning, pieces;
    json_t *calls;
} sink;

static void on_text(void *u, const char *s, size_t n) {
    sink *k = u;
    ds_sb_append(&k->content, s, n);
    ds_sb_append(&k->pieces, "|", 1);
    ds_sb_append(&k->pieces, s, n);
}

static void on_part(void *u, ds_part_kind kind, const char *s, size_t n, const json_t *call) {
    sink *k = u;
    if (kind == DS_PART_TOOL_CALL) {
        if (!k->calls) k->calls = json_array();
        json_array_append_new(k->calls, json_deep_copy(call));
    } else {
        ds_sb_append(kind == DS_PART_REASONING ? &k->reasoning : &k->content, s, n);
    }
}

static void sink_free(sink *k) {
    ds_sb_free(&k->content);
    ds_sb_free(&k->reasoning);
    ds_sb_free(&k->pieces);
    json_decref(k->calls);
    memset(k, 0, sizeof *k);
}

static const char *S(const ds_sb *b) { return b->s ? b->s : ""; }

static void test_stop_filter(void) {
    char *stops[] = {"STOP", "xy"};
    ds_stop_filter f;
    sink k = {0};
    ds_stop_filter_init(&f, stops, NULL, 2);
    const char *parts[] = {"hello S", "T", "O", "x", " world ST", "OP tail"};
    int hit = 0;
    for (int i = 0; i < 6 && !hit; i++) {
        hit = ds_stop_filter_feed(&f, parts[i], strlen(parts[i]), on_text, &k);
        CHECK(!strstr(S(&k.content), "ST") || strstr(S(&k.content), "STO"), "partial leaked: %s", S(&k.content));
    }
    CHECK(hit == 1, "%s", "");
    CHECK(!strcmp(S(&k.content), "hello STOx world "), "got '%s'", S(&k.content));
    ds_stop_filter_free(&f);
    sink_free(&k);
    /* held text comes out at the end */
    ds_stop_filter_init(&f, stops, NULL, 2);
    ds_stop_filter_feed(&f, "abcST", 5, on_text, &k);
    CHECK(!strcmp(S(&k.content), "abc"), "%s", "");
    ds_stop_filter_finish(&f, on_text, &k);
    CHECK(!strcmp(S(&k.content), "abcST"), "%s", "");
    ds_stop_filter_free(&f);
    sink_free(&k);
}

/* feeds text one byte at a time (the hardest split) */
static void parse_bytes(const char *text, int reasoning, int tools, sink *k) {
    ds_chat_parser p;
    ds_chat_parser_init(&p, reasoning, tools);
    for (size_t i = 0; text[i]; i++) ds_chat_parser_feed(&p, text + i, 1, on_part, k);
    ds_chat_parser_finish(&p, on_part, k);
    ds_chat_parser_free(&p);
}

/* parallel_tool_calls: false - the answer ends with its first call: text and calls after it are dropped */
static void test_tool_call_limit(void) {
    sink k = {0};
    const char *text = "Calling.\n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\nmore\n"
                       "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>";
    ds_chat_parser p;
    ds_chat_parser_init(&p, 0, 1);
    ds_chat_parser_limit_calls(&p, 1);
    int ended_at = -1;
    for (size_t i = 0; text[i]; i++) {
        ds_chat_parser_feed(&p, text + i, 1, on_part, &k);
        if (ended_at < 0 && ds_chat_parser_ended(&p)) ended_at = (int)i;
    }
    ds_chat_parser_finish(&p, on_part, &k);
    ds_chat_parser_free(&p);
    CHECK(k.calls && json_array_size(k.calls) == 1, "%zu calls", json_array_size(k.calls));
    CHECK(ds_json_str_is(json_object_get(json_array_get(k.calls, 0), "name"), "a"), "%s", "");
    CHECK(!strcmp(S(&k.content), "Calling."), "content '%s'", S(&k.content));
    CHECK(ended_at >= 0 && text[ended_at] == '>' && !strncmp(text + ended_at - 11, "</tool_call>", 12),
          "ended at %d", ended_at);
    sink_free(&k);
    parse_bytes(text, 0, 1, &k);   /* no limit: both */
    CHECK(k.calls && json_array_size(k.calls) == 2, "%s", "");
    sink_free(&k);
}

static void test_reasoning(void) {
    sink k = {0};
    parse_bytes("let me think</think>\n\nThe answer.", 1, 0, &k);
    CHECK(!strcmp(S(&k.reasoning), "let me think"), "%s", S(&k.reasoning));
    CHECK(!strcmp(S(&k.content), "The answer."), "%s", S(&k.content));
    sink_free(&k);
    parse_bytes("<think>\nhmm</think>ok", 0, 0, &k);   /* Qwen3: the model opens <think> */
    CHECK(!strcmp(S(&k.reasoning), "\nhmm"), "%s", S(&k.reasoning));
    CHECK(!strcmp(S(&k.content), "ok"), "%s", "");
    sink_free(&k);
    parse_bytes("never closed </thin", 1, 0, &k);
    CHECK(!strcmp(S(&k.reasoning), "never closed </thin"), "%s", S(&k.reasoning));
    CHECK(k.content.n == 0, "%s", "");
    sink_free(&k);
}

static void test_tool_calls(void) {
    sink k = {0};
    parse_bytes("</think>\n\nLet me look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1]}}</tool_call>",
                1, 1, &k);
    CHECK(!strcmp(S(&k.content), "Let me look."), "%s", S(&k.content));  /* whitespace before a call is dropped */
    REQUIRE(k.calls && json_array_size(k.calls) == 2, "%s", "");
    json_t *c0 = json_array_get(k.calls, 0), *c1 = json_array_get(k.calls, 1);
    CHECK(!strcmp(json_string_value(json_object_get(c0, "name")), "get_weather"), "%s", "");
    CHECK(!strcmp(json_string_value(json_object_get(c0, "arguments")), "{\"city\":\"Paris\",\"days\":3}"), "%s",
          json_string_value(json_object_get(c0, "arguments")));
    CHECK(!strcmp(json_string_value(json_object_get(c1, "name")), "f"), "%s", "");
    CHECK(!strcmp(json_string_value(json_object_get(c1, "arguments")), "{\"a\":[1]}"), "%s", "");
    sink_free(&k);
    /* malformed and unclosed calls come back as content */
    parse_bytes("a<tool_call>\n<function=x\n</tool_call>b<tool_call>{\"name\": 1}", 0, 1, &k);
    CHECK(!k.calls, "%s", "");
    CHECK(!strcmp(S(&k.content), "a<tool_call>\n<function=x\n</tool_call>b<tool_call>{\"name\": 1}"), "%s", S(&k.content));
    sink_free(&k);
    /* a JSON call's string may hold "</tool_call>" (a grammar-constrained argument can): the call
     * ends at the first one after which it parses; a malformed one still comes back as content */
    parse_bytes("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"x</tool_call>y\"}}\n</tool_call>z", 0, 1, &k);
    REQUIRE(k.calls && json_array_size(k.calls) == 1, "content '%s'", S(&k.content));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(k.calls, 0), "arguments")), "{\"a\":\"x</tool_call>y\"}"),
          "%s", json_string_value(json_object_get(json_array_get(k.calls, 0), "arguments")));
    CHECK(!strcmp(S(&k.content), "z"), "%s", S(&k.content));
    sink_free(&k);
    parse_bytes("<tool_call>{\"name\": \"f\"</tool_call>a</tool_call>", 0, 1, &k);
    CHECK(!k.calls && !strcmp(S(&k.content), "<tool_call>{\"name\": \"f\"</tool_call>a</tool_call>"), "%s", S(&k.content));
    sink_free(&k);
    /* after </think>, a constrained answer's leading blanks (the grammar filter's allowance) are dropped */
    ds_chat_parser p;
    ds_chat_parser_init(&p, 1, 0);
    ds_chat_parser_strip_blanks(&p);
    const char *pieces[] = {"why", "</think>", "\t ", "\n", "yes-1 ", "\t"};
    for (int i = 0; i < 6; i++) ds_chat_parser_feed(&p, pieces[i], strlen(pieces[i]), on_part, &k);
    ds_chat_parser_finish(&p, on_part, &k);
    ds_chat_parser_free(&p);
    CHECK(!strcmp(S(&k.content), "yes-1 \t") && !strcmp(S(&k.reasoning), "why"), "'%s' '%s'", S(&k.content), S(&k.reasoning));
    sink_free(&k);
    /* without tools the tags are text */
    parse_bytes("<tool_call>{\"name\":\"f\"}</tool_call>", 0, 0, &k);
    CHECK(!k.calls && !strcmp(S(&k.content), "<tool_call>{\"name\":\"f\"}</tool_call>"), "%s", "");
    sink_free(&k);
}

/* Streaming sends what is decided at once (issue 12): only text that could still begin a tool
 * call, a stop string or a reasoning tag waits. Whitespace-only pieces of an answer without tools
 * came out with the next non-space text, or with the finish chunk when there was none. */
static void test_nothing_held_without_reason(void) {
    static const char *const pieces[] = {" ", "\n", "  ", "\t\n", "x", " ", "\n\n"};
    sink k = {0};
    ds_chat_parser p;
    ds_chat_parser_init(&p, 0, 0);
    size_t want = 0;
    for (int i = 0; i < 7; i++) {
        ds_chat_parser_feed(&p, pieces[i], strlen(pieces[i]), on_part, &k);
        want += strlen(pieces[i]);
        CHECK(k.content.n == want, "no tools: after piece %d, %zu of %zu bytes out", i, k.content.n, want);
    }
    ds_chat_parser_finish(&p, on_part, &k);
    CHECK(!strcmp(S(&k.content), " \n  \t\nx \n\n"), "'%s'", S(&k.content));
    ds_chat_parser_free(&p);
    sink_free(&k);
    /* after the reasoning: the newlines right after </think> are dropped, then spaces pass */
    ds_chat_parser_init(&p, 1, 0);
    ds_chat_parser_feed(&p, "r</thi", 6, on_part, &k);
    CHECK(!strcmp(S(&k.reasoning), "r"), "a partial </think> waits: '%s'", S(&k.reasoning));
    ds_chat_parser_feed(&p, "nk>\n\n", 5, on_part, &k);
    ds_chat_parser_feed(&p, " ", 1, on_part, &k);
    CHECK(!strcmp(S(&k.reasoning), "r") && !strcmp(S(&k.content), " "), "'%s' '%s'", S(&k.reasoning), S(&k.content));
    ds_chat_parser_free(&p);
    sink_free(&k);
    /* with tools whitespace may precede a call (and is dropped before one): it waits */
    ds_chat_parser_init(&p, 0, 1);
    ds_chat_parser_feed(&p, "  ", 2, on_part, &k);
    CHECK(k.content.n == 0, "with tools, whitespace waits: '%s'", S(&k.content));
    ds_chat_parser_feed(&p, "a <tool", 7, on_part, &k);
    CHECK(!strcmp(S(&k.content), "  a "), "'%s'", S(&k.content));
    ds_chat_parser_finish(&p, on_part, &k);
    ds_chat_parser_free(&p);
    sink_free(&k);
    /* stop strings: only what could begin one waits */
    char *stops[] = {"END"};
    ds_stop_filter f;
    ds_stop_filter_init(&f, stops, NULL, 1);
    ds_stop_filter_feed(&f, "  \n", 3, on_text, &k);
    CHECK(!strcmp(S(&k.content), "  \n"), "'%s'", S(&k.content));
    ds_stop_filter_feed(&f, " E", 2, on_text, &k);
    CHECK(!strcmp(S(&k.content), "  \n "), "'%s'", S(&k.content));
    ds_stop_filter_free(&f);
    sink_free(&k);
}

static int parse(const char *body, ds_oai_kind kind, ds_oai_request *r, ds_oai_error *err) {
    return ds_oai_request_parse(body, strlen(body), kind, r, err);
}

static void test_request(void) {
    ds_oai_request r;
    ds_oai_error err;
    REQUIRE(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                  "{\"type\":\"text\",\"text\":\"b\"}]}],\"temperature\":0.5,\"stop\":\"x\",\"max_completion_tokens\":9,"
                  "\"n\":2,\"seed\":4,\"logprobs\":true,\"top_logprobs\":3}",
                  DS_OAI_CHAT, &r, &err) == 0, "%s", err.message);
    CHECK(r.max_tokens == 9 && r.n == 2 && r.seed_given && r.sampling.seed == 4 && r.n_stop == 1 && r.top_logprobs == 3, "%s", "");
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(r.messages, 0), "content")), "ab"), "%s", "");
    ds_oai_request_free(&r);
    struct { const char *body; const char *param; } bad[] = {
        {"{\"messages\":[]}", "messages"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":\"1\"}", "top_p"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"seed\":1.5}", "seed"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream_options\":{}}", "stream_options"},
        {"{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]} trailing", ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(parse(bad[i].body, DS_OAI_CHAT, &r, &err) == -1, "%s", bad[i].body);
        CHECK(!strcmp(err.param, bad[i].param), "%s: param '%s'", bad[i].body, err.param);
        ds_oai_request_free(&r);
    }
    REQUIRE(parse("{\"prompt\":[1,2,3],\"logprobs\":2}", DS_OAI_COMPLETION, &r, &err) == 0, "%s", err.message);
    CHECK(r.n_prompts == 1 && r.prompts[0].n_ids == 3 && r.logprobs && r.top_logprobs == 2, "%s", "");
    ds_oai_request_free(&r);
}

/* Parameters OpenAI defines that change nothing in the answer are still checked as OpenAI
 * checks them; reasoning_effort and parallel_tool_calls take effect (issue 12). */
static void test_request_openai_params(void) {
    ds_oai_request r;
    ds_oai_error err;
#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
    char many[600], long_key[200], long_value[800];
    int at = snprintf(many, sizeof many, "{" MSGS ",\"metadata\":{");
    for (int i = 0; i < 17; i++) at += snprintf(many + at, sizeof many - (size_t)at, "%s\"k%d\":\"v\"", i ? "," : "", i);
    snprintf(many + at, sizeof many - (size_t)at, "}}");
    snprintf(long_key, sizeof long_key, "{" MSGS ",\"metadata\":{\"%065d\":\"v\"}}", 0);
    snprintf(long_value, sizeof long_value, "{" MSGS ",\"metadata\":{\"k\":\"%0513d\"}}", 0);
    struct { const char *body; const char *param; } bad[] = {
        {many, "metadata"},
        {long_key, "metadata"},
        {long_value, "metadata"},
        {"{" MSGS ",\"metadata\":{\"k\":1}}", "metadata"},
        {"{" MSGS ",\"metadata\":[]}", "metadata"},
        {"{" MSGS ",\"store\":true}", "store"},
        {"{" MSGS ",\"store\":\"no\"}", "store"},
        {"{" MSGS ",\"reasoning_effort\":\"extreme\"}", "reasoning_effort"},
        {"{" MSGS ",\"reasoning_effort\":1}", "reasoning_effort"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(parse(bad[i].body, DS_OAI_CHAT, &r, &err) == -1, "accepted: %.120s", bad[i].body);
        CHECK(!strcmp(err.param, bad[i].param), "%.120s: param '%s'", bad[i].body, err.param);
        ds_oai_request_free(&r);
    }
    /* 16 keys of 64 characters (é is one character, two bytes) with values of 512 are fine */
    char ok16[12000];
    at = snprintf(ok16, sizeof ok16, "{" MSGS ",\"store\":false,\"metadata\":{");
    for (int i = 0; i < 16; i++)
        at += snprintf(ok16 + at, sizeof ok16 - (size_t)at, "%s\"\xc3\xa9%063d\":\"%0512d\"", i ? "," : "", i, i);
    snprintf(ok16 + at, sizeof ok16 - (size_t)at, "}}");
    CHECK(parse(ok16, DS_OAI_CHAT, &r, &err) == 0, "%s", err.message);
    ds_oai_request_free(&r);

    /* reasoning_effort switches thinking through the template's enable_thinking; an explicit
     * chat_template_kwargs.enable_thinking wins */
    struct { const char *extra; int want; } effort[] = {
        {"\"reasoning_effort\":\"none\"", 0},
        {"\"reasoning_effort\":\"high\"", 1},
        {"\"reasoning_effort\":\"low\"", 1},
        {"\"reasoning_effort\":\"none\",\"chat_template_kwargs\":{\"enable_thinking\":true}", 1},
        {"\"reasoning_effort\":null", -1},
    };
    for (size_t i = 0; i < sizeof effort / sizeof effort[0]; i++) {
        char body[300];
        snprintf(body, sizeof body, "{" MSGS ",%s}", effort[i].extra);
        REQUIRE(parse(body, DS_OAI_CHAT, &r, &err) == 0, "%s: %s", body, err.message);
        ds_err e = {0};
        json_t *ctx = ds_oai_template_context(&r, "<eos>", &e);
        REQUIRE(ctx, "%s", e.msg);
        const json_t *et = json_object_get(ctx, "enable_thinking");
        int got = et ? json_is_true(et) : -1;
        CHECK(got == effort[i].want, "%s: enable_thinking %d, want %d", body, got, effort[i].want);
        json_decref(ctx);
        ds_oai_request_free(&r);
    }
    REQUIRE(parse("{" MSGS ",\"parallel_tool_calls\":false}", DS_OAI_CHAT, &r, &err) == 0, "%s", err.message);
    CHECK(r.parallel_tool_calls == 0, "%s", "");
    ds_oai_request_free(&r);
    REQUIRE(parse("{" MSGS "}", DS_OAI_CHAT, &r, &err) == 0, "%s", err.message);
    CHECK(r.parallel_tool_calls == 1, "%s", "");
    ds_oai_request_free(&r);
#undef MSGS
}

/* OpenAI's error body: code is a string such as "model_not_found", or null; never the status */
static void test_error_body(void) {
    char *s = ds_oai_error_json("invalid_request_error", "model_not_found", "model", "no such model");
    json_t *j = ds_json_parse(s, strlen(s), NULL, 0);
    const json_t *e = json_object_get(j, "error");
    CHECK(ds_json_str_is(json_object_get(e, "code"), "model_not_found"), "%s", s);
    CHECK(ds_json_str_is(json_object_get(e, "type"), "invalid_request_error"), "%s", s);
    CHECK(ds_json_str_is(json_object_get(e, "param"), "model"), "%s", s);
    json_decref(j);
    free(s);
    s = ds_oai_error_json("server_error", NULL, NULL, "x");
    j = ds_json_parse(s, strlen(s), NULL, 0);
    e = json_object_get(j, "error");
    CHECK(json_is_null(json_object_get(e, "code")) && json_is_null(json_object_get(e, "param")), "%s", s);
    json_decref(j);
    free(s);
}

/* The completions fields of issue 16: several prompts, echo, suffix, best_of, logit_bias (both kinds). */
static void test_request_completions_fields(void) {
    ds_oai_request r;
    ds_oai_error err;
    REQUIRE(parse("{\"prompt\":[\"ab\",\"c\",\"\"],\"n\":2,\"best_of\":3,\"echo\":true,\"suffix\":\"zz\","
                  "\"logit_bias\":{\"5\":-100,\"17\":100,\"0\":0.5}}", DS_OAI_COMPLETION, &r, &err) == 0, "%s", err.message);
    CHECK(r.n_prompts == 3 && r.prompts[0].len == 2 && !strcmp(r.prompts[1].text, "c") && r.prompts[2].len == 0,
          "%d prompts", r.n_prompts);
    CHECK(r.n == 2 && r.best_of == 3 && r.echo && r.suffix && r.suffix_len == 2, "n %d best_of %d", r.n, r.best_of);
    CHECK(r.sampling.n_bias == 3 && r.sampling.bias[0].token == 5 && r.sampling.bias[0].bias == -100 &&
          r.sampling.bias[1].token == 17 && r.sampling.bias[1].bias == 100 && r.sampling.bias[2].bias == 0.5f,
          "%d biases", r.sampling.n_bias);
    ds_oai_request_free(&r);
    REQUIRE(parse("{\"prompt\":[[1,2],[3]],\"suffix\":\"\"}", DS_OAI_COMPLETION, &r, &err) == 0, "%s", err.message);
    CHECK(r.n_prompts == 2 && r.prompts[0].n_ids == 2 && r.prompts[1].ids[0] == 3 && !r.suffix && r.best_of == 1, "%s", "");
    ds_oai_request_free(&r);
    REQUIRE(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"7\":-3}}", DS_OAI_CHAT, &r,
                  &err) == 0, "%s", err.message);
    CHECK(r.sampling.n_bias == 1 && r.sampling.bias[0].token == 7 && r.sampling.bias[0].bias == -3, "%s", "");
    ds_oai_request_free(&r);
    char many[8000];
    int at = snprintf(many, sizeof many, "{\"prompt\":\"x\",\"logit_bias\":{");
    for (int i = 0; i < 301; i++) at += snprintf(many + at, sizeof many - (size_t)at, "%s\"%d\":1", i ? "," : "", i);
    snprintf(many + at, sizeof many - (size_t)at, "}}");
    struct { const char *body; const char *param, *says; } bad[] = {
        {"{\"prompt\":[\"a\",[1]]}", "prompt", "array"},
        {"{\"prompt\":[[1],[]]}", "prompt", "array"},
        {"{\"prompt\":\"x\",\"echo\":true,\"logprobs\":1}", "echo", "not supported"},
        {"{\"prompt\":\"x\",\"suffix\":3}", "suffix", "string"},
        {"{\"prompt\":\"x\",\"best_of\":1,\"n\":2}", "best_of", "at least"},
        {"{\"prompt\":\"x\",\"best_of\":2,\"stream\":true}", "best_of", "stream"},
        {"{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\"],\"best_of\":16}", "best_of", "choices"},
        {"{\"prompt\":\"x\",\"logit_bias\":{\"abc\":1}}", "logit_bias", "'abc'"},
        {"{\"prompt\":\"x\",\"logit_bias\":{\"-1\":1}}", "logit_bias", "'-1'"},
        {"{\"prompt\":\"x\",\"logit_bias\":{\"12\":100.5}}", "logit_bias", "logit_bias.12"},
        {"{\"prompt\":\"x\",\"logit_bias\":{\"12\":\"1\"}}", "logit_bias", "logit_bias.12"},
        {"{\"prompt\":\"x\",\"logit_bias\":[1]}", "logit_bias", "object"},
        {many, "logit_bias", "at most 300"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(parse(bad[i].body, DS_OAI_COMPLETION, &r, &err) == -1, "%.80s", bad[i].body);
        CHECK(!strcmp(err.param, bad[i].param) && strstr(err.message, bad[i].says), "%.80s: param '%s': %s", bad[i].body,
              err.param, err.message);
        ds_oai_request_free(&r);
    }
}

/* U+0000 is a character like any other (issue 12): it stays in the prompt, the
 * messages, tool arguments and stop strings with everything after it. */
static void test_request_nul(void) {
    ds_oai_request r;
    ds_oai_error err;
    REQUIRE(parse("{\"prompt\":\"abc\\u0000def ghi jkl\",\"stop\":[\"x\\u0000y\"]}", DS_OAI_COMPLETION, &r, &err) == 0, "%s",
            err.message);
    CHECK(r.prompts[0].len == 15 && !memcmp(r.prompts[0].text, "abc\0def ghi jkl", 16), "prompt of %zu bytes", r.prompts[0].len);
    CHECK(r.n_stop == 1 && r.stop_len[0] == 3 && !memcmp(r.stop[0], "x\0y", 3), "stop of %zu bytes", r.stop_len[0]);
    ds_oai_request_free(&r);
    REQUIRE(parse("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\\u0000b\"},"
                  "{\"type\":\"text\",\"text\":\"c\"}]},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"type\":"
                  "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"q\\\":\\\"x\\\\u0000y\\\"}\"}}]}]}",
                  DS_OAI_CHAT, &r, &err) == 0, "%s", err.message);
    const json_t *c = json_object_get(json_array_get(r.messages, 0), "content");
    CHECK(json_string_length(c) == 4 && !memcmp(json_string_value(c), "a\0bc", 4), "content of %zu bytes",
          json_string_length(c));
    const json_t *q = json_object_get(json_object_get(json_object_get(json_array_get(json_object_get(
        json_array_get(r.messages, 1), "tool_calls"), 0), "function"), "arguments"), "q");
    CHECK(json_string_length(q) == 3 && !memcmp(json_string_value(q), "x\0y", 3), "argument of %zu bytes",
          json_string_length(q));
    ds_oai_request_free(&r);
    /* a role is all of its string: "user\u0000x" is not "user" */
    CHECK(parse("{\"messages\":[{\"role\":\"user\\u0000x\",\"content\":\"x\"}]}", DS_OAI_CHAT, &r, &err) == -1 &&
          !strcmp(err.param, "messages[0].role"), "%s", err.message);
    ds_oai_request_free(&r);
}

/* What Python's and JavaScript's JSON take is taken: a lone surrogate escape is
 * U+FFFD; an escaped backslash before "u" is not an escape; nesting past the
 * limit and broken JSON say what and where. */
static void test_request_json_text(void) {
    ds_oai_request r;
    ds_oai_error err;
    REQUIRE(parse("{\"prompt\":\"broken \\ud83d surrogate \\udc00\\ud83d\\ude00 \\\\ud83d\"}", DS_OAI_COMPLETION, &r, &err) == 0,
            "%s", err.message);
    const char want[] = "broken \xEF\xBF\xBD surrogate \xEF\xBF\xBD\xF0\x9F\x98\x80 \\ud83d";
    CHECK(r.prompts[0].len == sizeof want - 1 && !memcmp(r.prompts[0].text, want, sizeof want), "got '%s'", r.prompts[0].text);
    ds_oai_request_free(&r);
    char deep[2200 + 64];
    for (int depth = 1001; depth <= 1100; depth += 99) {
        size_t n = (size_t)snprintf(deep, sizeof deep, "{\"prompt\":\"x\",\"a\":");
        for (int i = 0; i < depth; i++) deep[n++] = '[';
        for (int i = 0; i < depth; i++) deep[n++] = ']';
        deep[n++] = '}';
        deep[n] = 0;
        CHECK(parse(deep, DS_OAI_COMPLETION, &r, &err) == -1 && strstr(err.message, "nested more than 1000 levels") &&
              strstr(err.message, "1000 is the limit"), "%d deep: %s", depth, err.message);
        ds_oai_request_free(&r);
    }
    CHECK(parse("{\"prompt\":\n \"x\", tru}", DS_OAI_COMPLETION, &r, &err) == -1 && strstr(err.message, "not valid JSON") &&
          strstr(err.message, "line 2") && strstr(err.message, "byte 19"), "%s", err.message);
    ds_oai_request_free(&r);
    /* the offset is that of the token's last byte in the body as sent, also after a repaired character */
    CHECK(parse("{\"prompt\":\"\xff\xff\", tru}", DS_OAI_COMPLETION, &r, &err) == -1 && strstr(err.message, "byte 18"),
          "%s", err.message);
    ds_oai_request_free(&r);
}

/* The model's text goes out whole: U+0000 as \u0000, in content, reasoning and tool arguments. */
static void test_response_nul(void) {
    json_t *m = ds_oai_chat_message("ab\0cd", 5, "r\0s", 3, 1, NULL);
    char *s = ds_json_dump(m);
    CHECK(s && !strcmp(s, "{\"role\":\"assistant\",\"content\":\"ab\\u0000cd\",\"reasoning_content\":\"r\\u0000s\"}"), "%s", s);
    free(s);
    json_decref(m);
    static const char body[] = "<function=f>\n<parameter=q>\na\0b\n</parameter>\n</function>";
    json_t *call = ds_tool_call_parse(body, sizeof body - 1);
    s = call ? ds_json_dump(call) : NULL;
    CHECK(s && !strcmp(s, "{\"name\":\"f\",\"arguments\":\"{\\\"q\\\":\\\"a\\\\u0000b\\\"}\"}"), "%s", s ? s : "no call");
    free(s);
    json_decref(call);
    json_t *tok = ds_oai_token_string("\0", 1, NULL);
    CHECK(json_string_length(tok) == 1 && json_string_value(tok)[0] == 0, "a token of byte 0");
    json_decref(tok);
}

/* A served model name with a quote, a backslash and a newline stays inside its
 * label: every sample line still ends in a number. */
static void test_metrics_label(void) {
    ds_metrics m;
    ds_metrics_init(&m);
    ds_sb o = {0};
    ds_metrics_render(&m, NULL, "we\"ird\\name\nx", &o);
    REQUIRE(o.s != NULL, "rendered");
    CHECK(strstr(o.s, "model_name=\"we\\\"ird\\\\name\\nx\"") != NULL, "escaped label");
    int bad = 0;
    for (char *line = o.s, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (line[0] == '#') continue;
        char *end = nl ? nl : line + strlen(line), *sp = end;
        while (sp > line && sp[-1] != ' ') sp--;
        char *num_end;
        strtod(sp, &num_end);
        bad += sp == line || num_end != end;
    }
    CHECK(bad == 0, "%d sample lines do not end in a value", bad);
    ds_sb_free(&o);
    ds_metrics_free(&m);
}

int main(void) {
    RUN(test_request_completions_fields);
    RUN(test_stop_filter);
    RUN(test_reasoning);
    RUN(test_tool_calls);
    RUN(test_nothing_held_without_reason);
    RUN(test_request);
    RUN(test_tool_call_limit);
    RUN(test_request_openai_params);
    RUN(test_error_body);
    RUN(test_request_nul);
    RUN(test_request_json_text);
    RUN(test_response_nul);
    RUN(test_metrics_label);
    return ds_test_finish();
}
