/* cmd_canary.c - `deltaserve canary URL [--api chat|responses|messages]`: a
 * quick end-to-end check of a server's API (Responses: canary_responses.c,
 * Messages: canary_messages.c). For chat completions it sends four requests (thinking
 * on and off, each streamed and not) and checks each answer: HTTP 200;
 * visible content (non-empty content, or reasoning_content when thinking is
 * on and the token limit cut the answer); finish_reason "stop" or "length";
 * usage present, non-zero and consistent (total = prompt + completion,
 * completion <= max_tokens). Streamed answers must also be well-formed SSE
 * with a role chunk, exactly one finish_reason, exactly one usage chunk
 * (stream_options.include_usage) that agrees with the non-streamed prompt
 * count, no error event, and [DONE] last. One "ok ..." / "FAIL ..." line per
 * check; the exit code is 1 when any check fails (2 for bad options).
 *
 * It exists because a server once answered HTTP 200 with finish_reason
 * "error", content null and zero token counts, and nothing noticed. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/canary_check.h"
#include "cli/commands.h"
#include "cli/http_client.h"
#include "server/json_text.h"

#define MAX_BODY DS_CANARY_MAX_BODY

static void usage(FILE *f) {
    fprintf(f, "usage: deltaserve canary URL [--api chat|responses|messages] [--api-key KEY] [--model NAME] [--max-tokens N]\n"
               "                  [--prompt TEXT] [--temperature T] [--timeout S]\n"
               "  URL              the server, e.g. http://127.0.0.1:8080 (or .../v1)\n"
               "  --api A          chat (default: /v1/chat/completions), responses (/v1/responses)\n"
               "                   or messages (Anthropic's /v1/messages)\n"
               "  --api-key KEY    sent as 'Authorization: Bearer KEY' (messages: 'x-api-key: KEY')\n"
               "  --model NAME     model name (default: the first of GET /v1/models)\n"
               "  --max-tokens N   max_tokens of each request (max_output_tokens for responses; default 32)\n"
               "  --prompt TEXT    the user message (default: a short question)\n"
               "  --temperature T  sampling temperature (default 0: greedy, so runs repeat; -1: not sent)\n"
               "  --timeout S      seconds allowed per request (default 120)\n"
               "Sends four requests with thinking on and off, streamed and not, checks each by the\n"
               "API's own rules (status, stop reason, usage, the order of the streamed events), prints\n"
               "one 'ok ...' or 'FAIL ...' line per check and exits 1 when any check fails.\n");
}

/* Checks a usage object; on failure writes why. Sets *prompt to prompt_tokens. */
static int usage_ok(const json_t *u, long max_tokens, char *why, size_t n, long *prompt) {
    *prompt = -1;
    if (!json_is_object(u)) {
        snprintf(why, n, "usage is %s", u ? "not an object" : "missing");
        return 0;
    }
    const char *names[3] = {"prompt_tokens", "completion_tokens", "total_tokens"};
    double v[3];
    for (int i = 0; i < 3; i++) {
        const json_t *x = json_object_get(u, names[i]);
        if (!json_is_number(x) || json_number_value(x) != (double)(long)json_number_value(x)) {
            snprintf(why, n, "usage.%s is %s", names[i], x ? "not an integer" : "missing");
            return 0;
        }
        v[i] = json_number_value(x);
    }
    *prompt = (long)v[0];
    if (v[0] <= 0 || v[1] <= 0) {
        snprintf(why, n, "zero token counts: prompt_tokens=%.0f completion_tokens=%.0f total_tokens=%.0f", v[0], v[1],
                 v[2]);
        return 0;
    }
    if (v[2] != v[0] + v[1]) {
        snprintf(why, n, "total_tokens=%.0f but prompt_tokens + completion_tokens = %.0f + %.0f", v[2], v[0], v[1]);
        return 0;
    }
    if (v[1] > (double)max_tokens) {
        snprintf(why, n, "completion_tokens=%.0f exceeds max_tokens=%ld", v[1], max_tokens);
        return 0;
    }
    snprintf(why, n, "prompt=%.0f completion=%.0f total=%.0f", v[0], v[1], v[2]);
    return 1;
}

static int finish_ok(const char *f) { return f && (!strcmp(f, "stop") || !strcmp(f, "length")); }

/* Text to print for a finish_reason JSON value. */
static void describe_finish(const json_t *fr, char *buf, size_t n) {
    if (!fr) snprintf(buf, n, "missing");
    else if (json_is_null(fr)) snprintf(buf, n, "null");
    else if (json_is_string(fr)) snprintf(buf, n, "\"%.60s\"", json_string_value(fr));
    else snprintf(buf, n, "not a string");
}

/* ------------------------------------------------------------------------ */
/* Streaming: what the events said                                           */

typedef struct {
    char *s;
    size_t len, cap;
} strbuf;

static void sb_add(strbuf *b, const char *s) {
    size_t n = strlen(s);
    if (b->len + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 256;
        while (c < b->len + n + 1) c *= 2;
        char *p = realloc(b->s, c);
        if (!p) return;
        b->s = p;
        b->cap = c;
    }
    memcpy(b->s + b->len, s, n + 1);
    b->len += n;
}

typedef struct {
    int events, done, after_done, non_json, error_events, bad_shape;
    char first_non_json[120], first_error[200], first_bad_shape[120];
    int role_chunks, role_first;          /* role chunks; 1 when one came before any text */
    int text_chunks;                      /* chunks carrying content or reasoning text */
    int finish_count;
    char finish[64];                      /* the first non-null finish_reason, as text */
    int finish_is_string;
    int usage_count, usage_before_finish;
    json_t *usage;
    strbuf content, reasoning;
} stream_state;

static void on_event(void *ud, const char *event, const char *data, size_t len, double t) {
    (void)t;
    stream_state *s = ud;
    s->events++;
    if (s->done) s->after_done++;
    if (!strcmp(event, "error")) {
        if (s->error_events++ == 0) snprintf(s->first_error, sizeof s->first_error, "event: error, data %.150s", data);
        return;
    }
    if (len == 6 && !strcmp(data, "[DONE]")) {
        s->done++;
        return;
    }
    json_t *j = ds_json_parse(data, len, NULL, 0);
    if (!json_is_object(j)) {
        if (s->non_json++ == 0) snprintf(s->first_non_json, sizeof s->first_non_json, "%.100s", data);
        json_decref(j);
        return;
    }
    const json_t *err = json_object_get(j, "error");
    if (err && !json_is_null(err)) {
        if (s->error_events++ == 0) {
            char *e = ds_json_dump(err);
            snprintf(s->first_error, sizeof s->first_error, "chunk with \"error\": %.150s", e ? e : "?");
            free(e);
        }
    }
    const json_t *choices = json_object_get(j, "choices");
    const json_t *obj = json_object_get(j, "object");
    if (!json_is_array(choices) || (obj && !ds_json_str_is(obj, "chat.completion.chunk"))) {
        if (s->bad_shape++ == 0) snprintf(s->first_bad_shape, sizeof s->first_bad_shape, "%.100s", data);
    }
    size_t i;
    const json_t *ch;
    json_array_foreach(choices, i, ch) {
        const json_t *delta = json_object_get(ch, "delta");
        const json_t *role = json_object_get(delta, "role");
        const json_t *content = json_object_get(delta, "content");
        const json_t *reasoning = json_object_get(delta, "reasoning_content");
        if (!reasoning) reasoning = json_object_get(delta, "reasoning");
        if (ds_json_str_is(role, "assistant")) {
            if (s->text_chunks == 0 && s->role_chunks == 0) s->role_first = 1;
            s->role_chunks++;
        }
        int text = 0;
        if (json_string_length(content)) sb_add(&s->content, json_string_value(content)), text = 1;
        if (json_string_length(reasoning))
            sb_add(&s->reasoning, json_string_value(reasoning)), text = 1;
        s->text_chunks += text;
        const json_t *fr = json_object_get(ch, "finish_reason");
        if (fr && !json_is_null(fr)) {
            if (s->finish_count++ == 0) {
                s->finish_is_string = json_is_string(fr);
                describe_finish(fr, s->finish, sizeof s->finish);
            }
        }
    }
    const json_t *u = json_object_get(j, "usage");
    if (u && !json_is_null(u)) {
        if (s->usage_count++ == 0) {
            s->usage = json_deep_copy(u);
            s->usage_before_finish = s->finish_count == 0;
        }
    }
    json_decref(j);
}

/* ------------------------------------------------------------------------ */

typedef ds_canary_opts canary_opts;

static char *request_body(const canary_opts *o, int thinking, int stream) {
    json_t *r = json_object();
    if (o->model) json_object_set_new(r, "model", ds_json_text(o->model));
    json_t *msgs = json_array(), *so = json_object(), *kw = json_object();
    json_object_set_new(r, "messages", msgs);
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("user"));
    json_object_set_new(m, "content", ds_json_text(o->prompt));
    json_array_append_new(msgs, m);
    json_object_set_new(r, "max_tokens", json_integer(o->max_tokens));
    if (o->temperature >= 0) json_object_set_new(r, "temperature", json_real(o->temperature));
    json_object_set_new(r, "stream", json_boolean(stream));
    json_object_set_new(so, "include_usage", json_true());
    if (stream) json_object_set(r, "stream_options", so);
    json_decref(so);
    json_object_set_new(kw, "enable_thinking", json_boolean(thinking));
    json_object_set_new(r, "chat_template_kwargs", kw);
    char *s = ds_json_dump(r);
    json_decref(r);
    return s;
}

static int visible_ok(int thinking, const char *finish, const char *content, const char *reasoning, char *why,
                      size_t n) {
    size_t cl = content ? strlen(content) : 0, rl = reasoning ? strlen(reasoning) : 0;
    if (cl > 0) {
        snprintf(why, n, "%zu bytes of content", cl);
        return 1;
    }
    if (thinking && rl > 0 && finish && !strcmp(finish, "length")) {
        snprintf(why, n, "no content, %zu bytes of reasoning_content cut by the token limit", rl);
        return 1;
    }
    snprintf(why, n, "content is %s%s", content ? "empty" : "null or missing",
             rl ? (thinking ? " (only reasoning_content, and the answer was not cut by max_tokens)"
                            : " (only reasoning_content, with thinking off)")
                : "");
    return 0;
}

/* One non-streamed request. Returns prompt_tokens from usage, or -1. */
static long run_plain(const canary_opts *o, int thinking, ds_canary *c) {
    char *body = request_body(o, thinking, 0);
    ds_http_req *r = body ? ds_http_req_new(o->url, o->api_key, body, 0, NULL, NULL, MAX_BODY, o->timeout) : NULL;
    free(body);
    if (!r) {
        ds_canary_check(c, 0, "request", "out of memory");
        return -1;
    }
    ds_http_perform(r);
    char why[512];
    long prompt = -1;
    if (r->rc != CURLE_OK || r->status != 200) {
        ds_http_describe_error(r, why, sizeof why);
        ds_canary_check(c, 0, "http", "%s", why);
        ds_http_req_free(r);
        return -1;
    }
    ds_canary_check(c, 1, "http", "200 in %.0f ms", 1e3 * (r->t_end - r->t_start));
    json_t *j = r->body_truncated ? NULL : ds_json_parse(r->body, r->body_len, NULL, 0);
    const json_t *choices = json_object_get(j, "choices");
    const json_t *c0 = json_array_get(choices, 0);
    const json_t *err = json_object_get(j, "error");
    if (!json_is_object(j) || !json_is_object(c0) || (err && !json_is_null(err))) {
        ds_canary_check(c, 0, "json", "%s: %.200s", !j ? "body is not JSON" : err && !json_is_null(err) ? "body has \"error\"" : "no choices[0]",
              r->body);
        json_decref(j);
        ds_http_req_free(r);
        return -1;
    }
    const json_t *obj = json_object_get(j, "object");
    ds_canary_check(c, !obj || ds_json_str_is(obj, "chat.completion"), "json",
          "%s", !obj ? "chat completion (no \"object\" field)" : json_is_string(obj) ? json_string_value(obj) : "object is not a string");
    const json_t *fr = json_object_get(c0, "finish_reason");
    char fdesc[80];
    describe_finish(fr, fdesc, sizeof fdesc);
    const char *finish = json_is_string(fr) ? json_string_value(fr) : NULL;
    ds_canary_check(c, finish_ok(finish), "finish_reason", "%s%s", fdesc, finish_ok(finish) ? "" : " (want \"stop\" or \"length\")");
    const json_t *msg = json_object_get(c0, "message");
    const json_t *role = json_object_get(msg, "role");
    ds_canary_check(c, ds_json_str_is(role, "assistant"), "role", "%s",
          json_is_string(role) ? json_string_value(role) : "message.role missing");
    const json_t *content = json_object_get(msg, "content");
    const json_t *reasoning = json_object_get(msg, "reasoning_content");
    if (!reasoning) reasoning = json_object_get(msg, "reasoning");
    int vis = visible_ok(thinking, finish, json_is_string(content) ? json_string_value(content) : NULL,
                         json_is_string(reasoning) ? json_string_value(reasoning) : NULL, why, sizeof why);
    ds_canary_check(c, vis, "content", "%s", why);
    int uok = usage_ok(json_object_get(j, "usage"), o->max_tokens, why, sizeof why, &prompt);
    ds_canary_check(c, uok, "usage", "%s", why);
    json_decref(j);
    ds_http_req_free(r);
    return uok ? prompt : -1;
}

static void run_stream(const canary_opts *o, int thinking, long plain_prompt, ds_canary *c) {
    stream_state s = {0};
    char *body = request_body(o, thinking, 1);
    ds_http_req *r = body ? ds_http_req_new(o->url, o->api_key, body, 1, on_event, &s, 64 << 10, o->timeout) : NULL;
    free(body);
    if (!r) {
        ds_canary_check(c, 0, "request", "out of memory");
        return;
    }
    ds_http_perform(r);
    char why[512];
    if (r->rc != CURLE_OK || r->status != 200) {
        ds_http_describe_error(r, why, sizeof why);
        ds_canary_check(c, 0, "http", "%s", why);
        goto out;
    }
    ds_canary_check(c, 1, "http", "200 in %.0f ms, %d events", 1e3 * (r->t_end - r->t_start), s.events);
    char *ctype = NULL;
    curl_easy_getinfo(r->easy, CURLINFO_CONTENT_TYPE, &ctype);
    ds_canary_check(c, ctype && !strncmp(ctype, "text/event-stream", 17), "content-type", "%s", ctype ? ctype : "missing");
    int sse_good = !r->sse_problems && !s.non_json && !s.bad_shape && !r->oom;
    if (r->sse_problems) snprintf(why, sizeof why, "%d malformed: %s", r->sse_problems, r->sse_problem);
    else if (s.non_json) snprintf(why, sizeof why, "%d data payloads are not JSON objects: '%s'", s.non_json, s.first_non_json);
    else if (s.bad_shape) snprintf(why, sizeof why, "%d chunks without a choices array or not chat.completion.chunk: '%s'", s.bad_shape, s.first_bad_shape);
    else if (r->oom) snprintf(why, sizeof why, "out of memory");
    else snprintf(why, sizeof why, "%d well-formed events", s.events);
    ds_canary_check(c, sse_good && s.events > 0, "sse", "%s", s.events ? why : "no events");
    ds_canary_check(c, s.error_events == 0, "no-error-event", "%s", s.error_events ? s.first_error : "none");
    ds_canary_check(c, s.role_chunks >= 1 && s.role_first, "role", "%s",
          s.role_chunks == 0 ? "no chunk with delta.role \"assistant\""
          : s.role_first     ? "delta.role \"assistant\" first"
                             : "delta.role came after text");
    ds_canary_check(c, s.done == 1 && s.after_done == 0, "done", "%s",
          s.done == 0 ? "no data: [DONE]" : s.done > 1 ? "[DONE] more than once" : s.after_done ? "events after [DONE]" : "[DONE] last");
    const char *finish = NULL;
    char fbuf[64];
    if (s.finish_count > 0 && s.finish_is_string) {
        snprintf(fbuf, sizeof fbuf, "%.*s", (int)strlen(s.finish) - 2, s.finish + 1);
        finish = fbuf;
    }
    if (s.finish_count == 0) ds_canary_check(c, 0, "finish_reason", "missing (no chunk with a non-null finish_reason)");
    else if (s.finish_count > 1) ds_canary_check(c, 0, "finish_reason", "%d chunks with a finish_reason, want 1", s.finish_count);
    else ds_canary_check(c, finish_ok(finish), "finish_reason", "%s%s", s.finish, finish_ok(finish) ? "" : " (want \"stop\" or \"length\")");
    int vis = visible_ok(thinking, finish, s.content.s, s.reasoning.s, why, sizeof why);
    ds_canary_check(c, vis, "content", "%s in %d chunks", why, s.text_chunks);
    long prompt = -1;
    if (s.usage_count != 1) {
        ds_canary_check(c, 0, "usage", "%d usage chunks with stream_options.include_usage, want exactly 1", s.usage_count);
    } else {
        int uok = usage_ok(s.usage, o->max_tokens, why, sizeof why, &prompt);
        if (uok && s.usage_before_finish) uok = 0, snprintf(why, sizeof why, "usage chunk came before the finish_reason");
        if (uok) {
            const json_t *ct = json_object_get(s.usage, "completion_tokens");
            if (json_number_value(ct) < s.text_chunks) {
                uok = 0;
                snprintf(why, sizeof why, "completion_tokens=%.0f but %d chunks carried text", json_number_value(ct), s.text_chunks);
            } else if (plain_prompt > 0 && prompt != plain_prompt) {
                uok = 0;
                snprintf(why, sizeof why, "prompt_tokens=%ld but the same request not streamed gave %ld", prompt, plain_prompt);
            }
        }
        ds_canary_check(c, uok, "usage", "%s", why);
    }
out:
    json_decref(s.usage);
    free(s.content.s);
    free(s.reasoning.s);
    ds_http_req_free(r);
}

/* The first model id of GET /v1/models, or NULL. */
static char *first_model(const canary_opts *o, char *why, size_t n) {
    char *url = ds_http_endpoint(o->url, "models");
    ds_http_req *r = url ? ds_http_req_new(url, o->api_key, NULL, 0, NULL, NULL, 1 << 20, o->timeout) : NULL;
    free(url);
    char *id = NULL;
    if (!r) return NULL;
    ds_http_perform(r);
    if (r->rc != CURLE_OK || r->status != 200) {
        ds_http_describe_error(r, why, n);
    } else {
        json_t *j = ds_json_parse(r->body, r->body_len, NULL, 0);
        const json_t *m = json_array_get(json_object_get(j, "data"), 0);
        const json_t *v = json_object_get(m, "id");
        if (json_is_string(v)) id = strdup(json_string_value(v));
        else snprintf(why, n, "no data[0].id in the answer");
        json_decref(j);
    }
    ds_http_req_free(r);
    return id;
}

int ds_cmd_canary(int argc, char **argv) {
    canary_opts o = {.max_tokens = 32, .timeout = 120, .temperature = 0,
                     .prompt = "In one short sentence: why is the sky blue?"};
    const char *base = NULL;
    ds_client_api api = DS_CLIENT_CHAT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--api")) {
            if (!(v = ds_arg_value(argc, argv, &i))) return 2;
            if (ds_client_api_parse(v, &api)) {
                fprintf(stderr, "deltaserve canary: --api '%s' is not chat, responses or messages\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--api-key")) {
            if (!(o.api_key = ds_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--model")) {
            if (!(o.model = ds_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--prompt")) {
            if (!(o.prompt = ds_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--max-tokens")) {
            if (!(v = ds_arg_value(argc, argv, &i)) || ds_arg_int(a, v, 1, 1 << 20, &n)) return 2;
            o.max_tokens = n;
        } else if (!strcmp(a, "--temperature")) {
            if (!(v = ds_arg_value(argc, argv, &i)) || ds_arg_float(a, v, -1, 2, &o.temperature)) return 2;
        } else if (!strcmp(a, "--timeout")) {
            if (!(v = ds_arg_value(argc, argv, &i)) || ds_arg_float(a, v, 0.1, 86400, &o.timeout)) return 2;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "deltaserve canary: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (!base) {
            base = a;
        } else {
            fprintf(stderr, "deltaserve canary: more than one URL ('%s', '%s')\n", base, a);
            return 2;
        }
    }
    if (!base) {
        usage(stderr);
        return 2;
    }
    if (strncmp(base, "http://", 7) && strncmp(base, "https://", 8)) {
        fprintf(stderr, "deltaserve canary: URL '%s' must start with http:// or https://\n", base);
        return 2;
    }
    if (ds_http_global_init()) {
        fprintf(stderr, "deltaserve canary: libcurl initialisation failed\n");
        return 1;
    }
    char *chat = ds_client_api_endpoint(api, base);
    char *model = NULL;
    if (!chat) return 1;
    o.url = base;
    ds_canary c = {0, 0, "setup"};
    if (!o.model) {
        char why[512] = "";
        model = first_model(&o, why, sizeof why);
        ds_canary_check(&c, model != NULL, "models", "%s", model ? model : why);
        o.model = model;
    }
    o.url = chat;
    static const char *labels[2][2] = {{"thinking=off plain", "thinking=off stream"},
                                       {"thinking=on plain", "thinking=on stream"}};
    if (api == DS_CLIENT_RESPONSES) ds_canary_responses(&o, &c);
    else if (api == DS_CLIENT_MESSAGES) ds_canary_messages(&o, &c);
    for (int thinking = 1; api == DS_CLIENT_CHAT && thinking >= 0; thinking--) {
        c.label = labels[thinking][0];
        long prompt = run_plain(&o, thinking, &c);
        c.label = labels[thinking][1];
        run_stream(&o, thinking, prompt, &c);
    }
    printf("canary %s (%s): %d ok, %d failed\n", base, ds_client_api_name(api), c.passed, c.failed);
    free(chat);
    free(model);
    ds_http_global_cleanup();
    return c.failed ? 1 : 0;
}
