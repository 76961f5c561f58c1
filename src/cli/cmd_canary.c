/* cmd_canary.c - `deltaserve canary URL`: a quick end-to-end check of an
 * OpenAI-compatible chat-completions server. It sends four requests (thinking
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
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/http_client.h"

#define MAX_BODY (8u << 20)

static void usage(FILE *f) {
    fprintf(f, "usage: deltaserve canary URL [--api-key KEY] [--model NAME] [--max-tokens N] [--temperature T] [--timeout S]\n"
               "  URL              the server, e.g. http://127.0.0.1:8080 (or .../v1)\n"
               "  --api-key KEY    sent as 'Authorization: Bearer KEY'\n"
               "  --model NAME     model name (default: the first of GET /v1/models)\n"
               "  --max-tokens N   max_tokens of each request (default 32)\n"
               "  --prompt TEXT    the user message (default: a short question)\n"
               "  --temperature T  sampling temperature (default 0: greedy, so runs repeat; -1: not sent)\n"
               "  --timeout S      seconds allowed per request (default 120)\n"
               "Sends chat requests with thinking on and off, streamed and not, prints one\n"
               "'ok ...' or 'FAIL ...' line per check and exits 1 when any check fails.\n");
}

typedef struct {
    int passed, failed;
    const char *label;
} checker;

static void __attribute__((format(printf, 4, 5)))
check(checker *c, int cond, const char *name, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    if (cond) {
        c->passed++;
        printf("ok %s: %s%s%s\n", c->label, name, detail[0] ? ": " : "", detail);
    } else {
        c->failed++;
        printf("FAIL %s: %s: %s\n", c->label, name, detail);
    }
    fflush(stdout);
}

/* Checks a usage object; on failure writes why. Sets *prompt to prompt_tokens. */
static int usage_ok(const cJSON *u, long max_tokens, char *why, size_t n, long *prompt) {
    *prompt = -1;
    if (!cJSON_IsObject(u)) {
        snprintf(why, n, "usage is %s", u ? "not an object" : "missing");
        return 0;
    }
    const char *names[3] = {"prompt_tokens", "completion_tokens", "total_tokens"};
    double v[3];
    for (int i = 0; i < 3; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(u, names[i]);
        if (!cJSON_IsNumber(x) || x->valuedouble != (double)(long)x->valuedouble) {
            snprintf(why, n, "usage.%s is %s", names[i], x ? "not an integer" : "missing");
            return 0;
        }
        v[i] = x->valuedouble;
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
static void describe_finish(const cJSON *fr, char *buf, size_t n) {
    if (!fr) snprintf(buf, n, "missing");
    else if (cJSON_IsNull(fr)) snprintf(buf, n, "null");
    else if (cJSON_IsString(fr)) snprintf(buf, n, "\"%.60s\"", fr->valuestring);
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
    cJSON *usage;
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
    cJSON *j = cJSON_ParseWithLength(data, len);
    if (!cJSON_IsObject(j)) {
        if (s->non_json++ == 0) snprintf(s->first_non_json, sizeof s->first_non_json, "%.100s", data);
        cJSON_Delete(j);
        return;
    }
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (err && !cJSON_IsNull(err)) {
        if (s->error_events++ == 0) {
            char *e = cJSON_PrintUnformatted(err);
            snprintf(s->first_error, sizeof s->first_error, "chunk with \"error\": %.150s", e ? e : "?");
            free(e);
        }
    }
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
    const cJSON *obj = cJSON_GetObjectItemCaseSensitive(j, "object");
    if (!cJSON_IsArray(choices) || (obj && (!cJSON_IsString(obj) || strcmp(obj->valuestring, "chat.completion.chunk")))) {
        if (s->bad_shape++ == 0) snprintf(s->first_bad_shape, sizeof s->first_bad_shape, "%.100s", data);
    }
    const cJSON *ch;
    cJSON_ArrayForEach(ch, choices) {
        const cJSON *delta = cJSON_GetObjectItemCaseSensitive(ch, "delta");
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(delta, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(delta, "content");
        const cJSON *reasoning = cJSON_GetObjectItemCaseSensitive(delta, "reasoning_content");
        if (!reasoning) reasoning = cJSON_GetObjectItemCaseSensitive(delta, "reasoning");
        if (cJSON_IsString(role) && !strcmp(role->valuestring, "assistant")) {
            if (s->text_chunks == 0 && s->role_chunks == 0) s->role_first = 1;
            s->role_chunks++;
        }
        int text = 0;
        if (cJSON_IsString(content) && content->valuestring[0]) sb_add(&s->content, content->valuestring), text = 1;
        if (cJSON_IsString(reasoning) && reasoning->valuestring[0])
            sb_add(&s->reasoning, reasoning->valuestring), text = 1;
        s->text_chunks += text;
        const cJSON *fr = cJSON_GetObjectItemCaseSensitive(ch, "finish_reason");
        if (fr && !cJSON_IsNull(fr)) {
            if (s->finish_count++ == 0) {
                s->finish_is_string = cJSON_IsString(fr);
                describe_finish(fr, s->finish, sizeof s->finish);
            }
        }
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
    if (u && !cJSON_IsNull(u)) {
        if (s->usage_count++ == 0) {
            s->usage = cJSON_Duplicate(u, 1);
            s->usage_before_finish = s->finish_count == 0;
        }
    }
    cJSON_Delete(j);
}

/* ------------------------------------------------------------------------ */

typedef struct {
    const char *url, *api_key, *model, *prompt;
    long max_tokens;
    double timeout, temperature;
} canary_opts;

static char *request_body(const canary_opts *o, int thinking, int stream) {
    cJSON *r = cJSON_CreateObject();
    if (o->model) cJSON_AddStringToObject(r, "model", o->model);
    cJSON *msgs = cJSON_AddArrayToObject(r, "messages");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", o->prompt);
    cJSON_AddItemToArray(msgs, m);
    cJSON_AddNumberToObject(r, "max_tokens", (double)o->max_tokens);
    if (o->temperature >= 0) cJSON_AddNumberToObject(r, "temperature", o->temperature);
    cJSON_AddBoolToObject(r, "stream", stream);
    if (stream) cJSON_AddBoolToObject(cJSON_AddObjectToObject(r, "stream_options"), "include_usage", 1);
    cJSON_AddBoolToObject(cJSON_AddObjectToObject(r, "chat_template_kwargs"), "enable_thinking", thinking);
    char *s = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
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
static long run_plain(const canary_opts *o, int thinking, checker *c) {
    char *body = request_body(o, thinking, 0);
    ds_http_req *r = body ? ds_http_req_new(o->url, o->api_key, body, 0, NULL, NULL, MAX_BODY, o->timeout) : NULL;
    free(body);
    if (!r) {
        check(c, 0, "request", "out of memory");
        return -1;
    }
    ds_http_perform(r);
    char why[512];
    long prompt = -1;
    if (r->rc != CURLE_OK || r->status != 200) {
        ds_http_describe_error(r, why, sizeof why);
        check(c, 0, "http", "%s", why);
        ds_http_req_free(r);
        return -1;
    }
    check(c, 1, "http", "200 in %.0f ms", 1e3 * (r->t_end - r->t_start));
    cJSON *j = r->body_truncated ? NULL : cJSON_ParseWithLength(r->body, r->body_len);
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
    const cJSON *c0 = cJSON_GetArrayItem(choices, 0);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (!cJSON_IsObject(j) || !cJSON_IsObject(c0) || (err && !cJSON_IsNull(err))) {
        check(c, 0, "json", "%s: %.200s", !j ? "body is not JSON" : err && !cJSON_IsNull(err) ? "body has \"error\"" : "no choices[0]",
              r->body);
        cJSON_Delete(j);
        ds_http_req_free(r);
        return -1;
    }
    const cJSON *obj = cJSON_GetObjectItemCaseSensitive(j, "object");
    check(c, !obj || (cJSON_IsString(obj) && !strcmp(obj->valuestring, "chat.completion")), "json",
          "%s", !obj ? "chat completion (no \"object\" field)" : cJSON_IsString(obj) ? obj->valuestring : "object is not a string");
    const cJSON *fr = cJSON_GetObjectItemCaseSensitive(c0, "finish_reason");
    char fdesc[80];
    describe_finish(fr, fdesc, sizeof fdesc);
    const char *finish = cJSON_IsString(fr) ? fr->valuestring : NULL;
    check(c, finish_ok(finish), "finish_reason", "%s%s", fdesc, finish_ok(finish) ? "" : " (want \"stop\" or \"length\")");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(c0, "message");
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
    check(c, cJSON_IsString(role) && !strcmp(role->valuestring, "assistant"), "role", "%s",
          cJSON_IsString(role) ? role->valuestring : "message.role missing");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
    const cJSON *reasoning = cJSON_GetObjectItemCaseSensitive(msg, "reasoning_content");
    if (!reasoning) reasoning = cJSON_GetObjectItemCaseSensitive(msg, "reasoning");
    int vis = visible_ok(thinking, finish, cJSON_IsString(content) ? content->valuestring : NULL,
                         cJSON_IsString(reasoning) ? reasoning->valuestring : NULL, why, sizeof why);
    check(c, vis, "content", "%s", why);
    int uok = usage_ok(cJSON_GetObjectItemCaseSensitive(j, "usage"), o->max_tokens, why, sizeof why, &prompt);
    check(c, uok, "usage", "%s", why);
    cJSON_Delete(j);
    ds_http_req_free(r);
    return uok ? prompt : -1;
}

static void run_stream(const canary_opts *o, int thinking, long plain_prompt, checker *c) {
    stream_state s = {0};
    char *body = request_body(o, thinking, 1);
    ds_http_req *r = body ? ds_http_req_new(o->url, o->api_key, body, 1, on_event, &s, 64 << 10, o->timeout) : NULL;
    free(body);
    if (!r) {
        check(c, 0, "request", "out of memory");
        return;
    }
    ds_http_perform(r);
    char why[512];
    if (r->rc != CURLE_OK || r->status != 200) {
        ds_http_describe_error(r, why, sizeof why);
        check(c, 0, "http", "%s", why);
        goto out;
    }
    check(c, 1, "http", "200 in %.0f ms, %d events", 1e3 * (r->t_end - r->t_start), s.events);
    char *ctype = NULL;
    curl_easy_getinfo(r->easy, CURLINFO_CONTENT_TYPE, &ctype);
    check(c, ctype && !strncmp(ctype, "text/event-stream", 17), "content-type", "%s", ctype ? ctype : "missing");
    int sse_good = !r->sse_problems && !s.non_json && !s.bad_shape && !r->oom;
    if (r->sse_problems) snprintf(why, sizeof why, "%d malformed: %s", r->sse_problems, r->sse_problem);
    else if (s.non_json) snprintf(why, sizeof why, "%d data payloads are not JSON objects: '%s'", s.non_json, s.first_non_json);
    else if (s.bad_shape) snprintf(why, sizeof why, "%d chunks without a choices array or not chat.completion.chunk: '%s'", s.bad_shape, s.first_bad_shape);
    else if (r->oom) snprintf(why, sizeof why, "out of memory");
    else snprintf(why, sizeof why, "%d well-formed events", s.events);
    check(c, sse_good && s.events > 0, "sse", "%s", s.events ? why : "no events");
    check(c, s.error_events == 0, "no-error-event", "%s", s.error_events ? s.first_error : "none");
    check(c, s.role_chunks >= 1 && s.role_first, "role", "%s",
          s.role_chunks == 0 ? "no chunk with delta.role \"assistant\""
          : s.role_first     ? "delta.role \"assistant\" first"
                             : "delta.role came after text");
    check(c, s.done == 1 && s.after_done == 0, "done", "%s",
          s.done == 0 ? "no data: [DONE]" : s.done > 1 ? "[DONE] more than once" : s.after_done ? "events after [DONE]" : "[DONE] last");
    const char *finish = NULL;
    char fbuf[64];
    if (s.finish_count > 0 && s.finish_is_string) {
        snprintf(fbuf, sizeof fbuf, "%.*s", (int)strlen(s.finish) - 2, s.finish + 1);
        finish = fbuf;
    }
    if (s.finish_count == 0) check(c, 0, "finish_reason", "missing (no chunk with a non-null finish_reason)");
    else if (s.finish_count > 1) check(c, 0, "finish_reason", "%d chunks with a finish_reason, want 1", s.finish_count);
    else check(c, finish_ok(finish), "finish_reason", "%s%s", s.finish, finish_ok(finish) ? "" : " (want \"stop\" or \"length\")");
    int vis = visible_ok(thinking, finish, s.content.s, s.reasoning.s, why, sizeof why);
    check(c, vis, "content", "%s in %d chunks", why, s.text_chunks);
    long prompt = -1;
    if (s.usage_count != 1) {
        check(c, 0, "usage", "%d usage chunks with stream_options.include_usage, want exactly 1", s.usage_count);
    } else {
        int uok = usage_ok(s.usage, o->max_tokens, why, sizeof why, &prompt);
        if (uok && s.usage_before_finish) uok = 0, snprintf(why, sizeof why, "usage chunk came before the finish_reason");
        if (uok) {
            const cJSON *ct = cJSON_GetObjectItemCaseSensitive(s.usage, "completion_tokens");
            if (ct->valuedouble < s.text_chunks) {
                uok = 0;
                snprintf(why, sizeof why, "completion_tokens=%.0f but %d chunks carried text", ct->valuedouble, s.text_chunks);
            } else if (plain_prompt > 0 && prompt != plain_prompt) {
                uok = 0;
                snprintf(why, sizeof why, "prompt_tokens=%ld but the same request not streamed gave %ld", prompt, plain_prompt);
            }
        }
        check(c, uok, "usage", "%s", why);
    }
out:
    cJSON_Delete(s.usage);
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
        cJSON *j = cJSON_ParseWithLength(r->body, r->body_len);
        const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "data"), 0);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "id");
        if (cJSON_IsString(v)) id = strdup(v->valuestring);
        else snprintf(why, n, "no data[0].id in the answer");
        cJSON_Delete(j);
    }
    ds_http_req_free(r);
    return id;
}

int ds_cmd_canary(int argc, char **argv) {
    canary_opts o = {.max_tokens = 32, .timeout = 120, .temperature = 0,
                     .prompt = "In one short sentence: why is the sky blue?"};
    const char *base = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
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
    char *chat = ds_http_endpoint(base, "chat/completions");
    char *model = NULL;
    if (!chat) return 1;
    o.url = base;
    checker c = {0, 0, "setup"};
    if (!o.model) {
        char why[512] = "";
        model = first_model(&o, why, sizeof why);
        check(&c, model != NULL, "models", "%s", model ? model : why);
        o.model = model;
    }
    o.url = chat;
    static const char *labels[2][2] = {{"thinking=off plain", "thinking=off stream"},
                                       {"thinking=on plain", "thinking=on stream"}};
    for (int thinking = 1; thinking >= 0; thinking--) {
        c.label = labels[thinking][0];
        long prompt = run_plain(&o, thinking, &c);
        c.label = labels[thinking][1];
        run_stream(&o, thinking, prompt, &c);
    }
    printf("canary %s: %d ok, %d failed\n", base, c.passed, c.failed);
    free(chat);
    free(model);
    ds_http_global_cleanup();
    return c.failed ? 1 : 0;
}
