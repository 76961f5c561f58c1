/* canary_responses.c - the canary's OpenAI Responses part (POST /v1/responses).
 * Four requests, reasoning.effort "medium" and "none", each streamed and not.
 * Each answer: HTTP 200; "object" "response" and no "error"; status
 * "completed", or "incomplete" with incomplete_details.reason
 * "max_output_tokens" ("failed" inside a 200 is the incident this exists
 * for); visible output (output_text, or reasoning text when thinking is on and
 * the limit cut it); usage with input_tokens > 0, output_tokens > 0,
 * total = input + output, output <= max_output_tokens, and the cached and
 * reasoning token details. A stream must also keep the event order:
 * response.created, response.in_progress, then per output item
 * output_item.added → (content_part.added → deltas → output_text.done →
 * content_part.done) → output_item.done, each delta's text adding up to its
 * .done text, and exactly one terminal event (response.completed or
 * response.incomplete), last; no error event, no response.failed; the
 * terminal response's usage agreeing with the non-streamed input count. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/canary_check.h"
#include "common/strbuf.h"
#include "server/json_text.h"

static char *request_body(const ds_canary_opts *o, int thinking, int stream) {
    json_t *r = json_object();
    if (o->model) json_object_set_new(r, "model", ds_json_text(o->model));
    json_object_set_new(r, "input", ds_json_text(o->prompt));
    json_object_set_new(r, "max_output_tokens", json_integer(o->max_tokens));
    if (o->temperature >= 0) json_object_set_new(r, "temperature", json_real(o->temperature));
    json_object_set_new(r, "stream", json_boolean(stream));
    json_object_set_new(r, "store", json_false());
    json_object_set_new(r, "reasoning", json_pack("{s:s}", "effort", thinking ? "medium" : "none"));
    char *s = ds_json_dump(r);
    json_decref(r);
    return s;
}

/* status completed, or incomplete because of max_output_tokens. Sets *cut for the latter. */
static int status_ok(const json_t *resp, int *cut, char *why, size_t n) {
    const json_t *st = json_object_get(resp, "status");
    const json_t *reason = json_object_get(json_object_get(resp, "incomplete_details"), "reason");
    *cut = 0;
    if (ds_json_str_is(st, "completed")) {
        snprintf(why, n, "completed");
        return 1;
    }
    if (ds_json_str_is(st, "incomplete") && ds_json_str_is(reason, "max_output_tokens")) {
        *cut = 1;
        snprintf(why, n, "incomplete (max_output_tokens)");
        return 1;
    }
    char *e = ds_json_dump(json_object_get(resp, "error"));
    snprintf(why, n, "status %s%s%s%s%s (want completed, or incomplete with reason max_output_tokens)",
             json_is_string(st) ? json_string_value(st) : "missing",
             json_is_string(reason) ? ", reason " : "", json_is_string(reason) ? json_string_value(reason) : "",
             e && strcmp(e, "null") ? ", error " : "", e && strcmp(e, "null") ? e : "");
    free(e);
    return 0;
}

static int usage_ok(const json_t *u, long max_tokens, char *why, size_t n, long *input) {
    *input = -1;
    if (!json_is_object(u)) {
        snprintf(why, n, "usage is %s", u && !json_is_null(u) ? "not an object" : "missing");
        return 0;
    }
    long in = ds_canary_count(json_object_get(u, "input_tokens"));
    long out = ds_canary_count(json_object_get(u, "output_tokens"));
    long tot = ds_canary_count(json_object_get(u, "total_tokens"));
    long cached = ds_canary_count(json_object_get(json_object_get(u, "input_tokens_details"), "cached_tokens"));
    long reas = ds_canary_count(json_object_get(json_object_get(u, "output_tokens_details"), "reasoning_tokens"));
    if (in < 0 || out < 0 || tot < 0) {
        snprintf(why, n, "usage.%s is not a count", in < 0 ? "input_tokens" : out < 0 ? "output_tokens" : "total_tokens");
        return 0;
    }
    *input = in;
    if (in == 0 || out == 0) {
        snprintf(why, n, "zero token counts: input_tokens=%ld output_tokens=%ld total_tokens=%ld", in, out, tot);
        return 0;
    }
    if (tot != in + out) {
        snprintf(why, n, "total_tokens=%ld but input_tokens + output_tokens = %ld + %ld", tot, in, out);
        return 0;
    }
    if (out > max_tokens) {
        snprintf(why, n, "output_tokens=%ld exceeds max_output_tokens=%ld", out, max_tokens);
        return 0;
    }
    if (cached < 0 || cached > in || reas < 0 || reas > out) {
        snprintf(why, n, "input_tokens_details.cached_tokens=%ld, output_tokens_details.reasoning_tokens=%ld: missing or "
                         "more than the tokens they are part of", cached, reas);
        return 0;
    }
    snprintf(why, n, "input=%ld output=%ld total=%ld cached=%ld reasoning=%ld", in, out, tot, cached, reas);
    return 1;
}

static int visible_ok(int thinking, int cut, size_t text, size_t reasoning, char *why, size_t n) {
    if (text > 0) return snprintf(why, n, "%zu bytes of output_text", text), 1;
    if (thinking && cut && reasoning > 0)
        return snprintf(why, n, "no output_text, %zu bytes of reasoning cut by max_output_tokens", reasoning), 1;
    snprintf(why, n, "no output_text%s", reasoning ? (thinking ? " (only reasoning, and the answer was not cut)" : " (only reasoning, with thinking off)") : "");
    return 0;
}

/* ------------------------------------------------------------------------ */

static long run_plain(const ds_canary_opts *o, int thinking, ds_canary *c) {
    char *body = request_body(o, thinking, 0);
    ds_http_req *r = ds_canary_send(o, DS_CLIENT_RESPONSES, body, 0, NULL, NULL, c);
    free(body);
    if (!r) return -1;
    char why[512];
    json_t *j = r->body_truncated ? NULL : ds_json_parse(r->body, r->body_len, NULL, 0);
    const json_t *err = json_object_get(j, "error");
    const json_t *output = json_object_get(j, "output");
    if (!json_is_object(j) || !ds_json_str_is(json_object_get(j, "object"), "response") || !json_is_array(output)) {
        ds_canary_check(c, 0, "json", "%s: %.200s",
                        !j ? "body is not JSON" : !json_is_array(output) ? "no output array" : "object is not \"response\"",
                        r->body);
        json_decref(j);
        ds_http_req_free(r);
        return -1;
    }
    ds_canary_check(c, !err || json_is_null(err), "json", "%s", !err || json_is_null(err) ? "response" : "body has \"error\"");
    int cut;
    int sok = status_ok(j, &cut, why, sizeof why);
    ds_canary_check(c, sok, "status", "%s", why);
    size_t text = 0, reasoning = 0, i, k;
    const json_t *item, *part;
    json_array_foreach(output, i, item) {
        const json_t *type = json_object_get(item, "type");
        const json_t *parts = json_object_get(item, "content");
        if (ds_json_str_is(type, "reasoning") && !json_array_size(parts)) parts = json_object_get(item, "summary");
        json_array_foreach(parts, k, part) {
            const json_t *t = json_object_get(part, "text");
            if (ds_json_str_is(type, "message") && ds_json_str_is(json_object_get(part, "type"), "output_text"))
                text += json_string_length(t);
            else if (ds_json_str_is(type, "reasoning")) reasoning += json_string_length(t);
        }
    }
    int vis = visible_ok(thinking, cut, text, reasoning, why, sizeof why);
    ds_canary_check(c, vis, "content", "%s", why);
    long input;
    int uok = usage_ok(json_object_get(j, "usage"), o->max_tokens, why, sizeof why, &input);
    ds_canary_check(c, uok, "usage", "%s", why);
    json_decref(j);
    ds_http_req_free(r);
    return uok ? input : -1;
}

/* ------------------------------------------------------------------------ */
/* The stream                                                                */

#define MAX_ITEMS 16
#define MAX_PARTS 8

enum { ABSENT, OPEN, TEXT_DONE, CLOSED };

typedef struct {
    ds_canary_sse sse;
    int after_terminal, terminal, failed_events, created, in_progress;
    char first_error[200], terminal_type[48];
    int item[MAX_ITEMS];              /* ABSENT, OPEN, CLOSED */
    int part[MAX_ITEMS][MAX_PARTS];   /* ABSENT, OPEN, TEXT_DONE, CLOSED */
    ds_sb text[MAX_ITEMS][MAX_PARTS]; /* output_text deltas so far */
    size_t text_bytes, reasoning_bytes;
    int text_events;
    json_t *final; /* the terminal event's response */
} rstream;

static void on_event(void *ud, const char *event, const char *data, size_t len, double t) {
    (void)t;
    rstream *s = ud;
    if (s->terminal) s->after_terminal++;
    const char *ty;
    json_t *j = ds_canary_sse_event(&s->sse, event, data, len, &ty);
    if (!j) return;
    if (!strcmp(ty, "error") || !strcmp(event, "error")) {
        if (s->sse.error_events++ == 0) snprintf(s->first_error, sizeof s->first_error, "%.180s", data);
        json_decref(j);
        return;
    }
    long oi = ds_canary_count(json_object_get(j, "output_index"));
    long ci = ds_canary_count(json_object_get(j, "content_index"));
    if (!strcmp(ty, "response.created")) {
        if (s->sse.events != 1) ds_canary_order_fail(&s->sse, ty, "not the first event");
        s->created++;
    } else if (!strcmp(ty, "response.in_progress")) {
        if (s->sse.events != 2 || !s->created) ds_canary_order_fail(&s->sse, ty, "not right after response.created");
        s->in_progress++;
    } else if (!strcmp(ty, "response.completed") || !strcmp(ty, "response.incomplete") ||
               !strcmp(ty, "response.failed")) {
        if (s->terminal++ == 0) {
            snprintf(s->terminal_type, sizeof s->terminal_type, "%s", ty);
            s->final = json_incref(json_object_get(j, "response"));
        }
        if (!strcmp(ty, "response.failed")) s->failed_events++;
        for (int i = 0; i < MAX_ITEMS; i++)
            if (s->item[i] == OPEN) ds_canary_order_fail(&s->sse, ty, "output item %d was never done", i);
    } else if (!strncmp(ty, "response.", 9) && (!s->created || !s->in_progress)) {
        ds_canary_order_fail(&s->sse, ty, "before response.created and response.in_progress");
    }
    if (!strncmp(ty, "response.output_item.", 21) || !strncmp(ty, "response.content_part.", 22) ||
        strstr(ty, ".delta") || (strstr(ty, ".done") && strcmp(ty, "response.output_item.done"))) {
        if (oi < 0 || oi >= MAX_ITEMS) {
            ds_canary_order_fail(&s->sse, ty, "output_index missing or past %d", MAX_ITEMS);
            json_decref(j);
            return;
        }
    }
    int part_event = !strncmp(ty, "response.content_part.", 22) || !strncmp(ty, "response.output_text.", 21);
    if (part_event && (ci < 0 || ci >= MAX_PARTS)) {
        ds_canary_order_fail(&s->sse, ty, "content_index missing or past %d", MAX_PARTS);
        json_decref(j);
        return;
    }
    if (!strcmp(ty, "response.output_item.added")) {
        if (s->item[oi] != ABSENT) ds_canary_order_fail(&s->sse, ty, "output item %ld added twice", oi);
        for (long i = 0; i < oi; i++)
            if (s->item[i] == ABSENT) ds_canary_order_fail(&s->sse, ty, "output item %ld before item %ld", oi, i);
        s->item[oi] = OPEN;
    } else if (!strcmp(ty, "response.output_item.done")) {
        if (s->item[oi] != OPEN) ds_canary_order_fail(&s->sse, ty, "output item %ld not open", oi);
        for (int k = 0; k < MAX_PARTS; k++)
            if (s->part[oi][k] == OPEN || s->part[oi][k] == TEXT_DONE)
                ds_canary_order_fail(&s->sse, ty, "content part %d of item %ld never done", k, oi);
        s->item[oi] = CLOSED;
    } else if (!strcmp(ty, "response.content_part.added")) {
        if (s->item[oi] != OPEN || s->part[oi][ci] != ABSENT) ds_canary_order_fail(&s->sse, ty, "item %ld not open or part %ld added twice", oi, ci);
        s->part[oi][ci] = OPEN;
    } else if (!strcmp(ty, "response.output_text.delta")) {
        const json_t *d = json_object_get(j, "delta");
        if (s->item[oi] != OPEN || s->part[oi][ci] != OPEN) ds_canary_order_fail(&s->sse, ty, "item %ld part %ld not open", oi, ci);
        ds_sb_append(&s->text[oi][ci], json_string_value(d) ? json_string_value(d) : "", json_string_length(d));
        s->text_bytes += json_string_length(d);
        s->text_events += json_string_length(d) > 0;
    } else if (!strcmp(ty, "response.output_text.done")) {
        const json_t *x = json_object_get(j, "text");
        const ds_sb *b = &s->text[oi][ci];
        if (s->item[oi] != OPEN || s->part[oi][ci] != OPEN) ds_canary_order_fail(&s->sse, ty, "item %ld part %ld not open", oi, ci);
        else if (!json_is_string(x) || json_string_length(x) != b->n || (b->n && memcmp(json_string_value(x), b->s, b->n)))
            ds_canary_order_fail(&s->sse, ty, "its text is not the %zu bytes its deltas gave", b->n);
        s->part[oi][ci] = TEXT_DONE;
    } else if (!strcmp(ty, "response.content_part.done")) {
        if (s->item[oi] != OPEN || (s->part[oi][ci] != TEXT_DONE && s->part[oi][ci] != OPEN))
            ds_canary_order_fail(&s->sse, ty, "item %ld part %ld not open", oi, ci);
        s->part[oi][ci] = CLOSED;
    } else if (!strcmp(ty, "response.reasoning_text.delta") || !strcmp(ty, "response.reasoning_summary_text.delta")) {
        const json_t *d = json_object_get(j, "delta");
        if (s->item[oi] != OPEN) ds_canary_order_fail(&s->sse, ty, "output item %ld not open", oi);
        s->reasoning_bytes += json_string_length(d);
        s->text_events += json_string_length(d) > 0;
    } else if (!strcmp(ty, "response.function_call_arguments.delta") ||
               !strcmp(ty, "response.function_call_arguments.done") || !strcmp(ty, "response.reasoning_text.done")) {
        if (s->item[oi] != OPEN) ds_canary_order_fail(&s->sse, ty, "output item %ld not open", oi);
    }
    json_decref(j);
}

static void run_stream(const ds_canary_opts *o, int thinking, long plain_input, ds_canary *c) {
    rstream *s = calloc(1, sizeof *s);
    if (!s) {
        ds_canary_check(c, 0, "request", "out of memory");
        return;
    }
    char *body = request_body(o, thinking, 1);
    ds_http_req *r = ds_canary_send(o, DS_CLIENT_RESPONSES, body, 1, on_event, s, c);
    free(body);
    if (!r) goto out;
    char why[512];
    int sse_good = !r->sse_problems && !s->sse.non_json && !r->oom;
    if (r->sse_problems) snprintf(why, sizeof why, "%d malformed: %s", r->sse_problems, r->sse_problem);
    else if (s->sse.non_json) snprintf(why, sizeof why, "%d data payloads are not JSON objects with a type: '%s'", s->sse.non_json, s->sse.first_non_json);
    else snprintf(why, sizeof why, "%d well-formed events", s->sse.events);
    ds_canary_check(c, sse_good && s->sse.events > 0, "sse", "%s", s->sse.events ? why : "no events");
    ds_canary_check(c, s->sse.error_events == 0, "no-error-event", "%s", s->sse.error_events ? s->first_error : "none");
    ds_canary_check(c, !s->sse.order_bad && s->created == 1 && s->in_progress == 1, "order", "%s",
                    s->sse.order_bad ? s->sse.first_order
                    : s->created != 1 || s->in_progress != 1 ? "want one response.created and one response.in_progress first"
                                                              : "events in the documented order");
    if (s->terminal != 1 || s->after_terminal)
        ds_canary_check(c, 0, "terminal", "%s",
                        !s->terminal ? "no response.completed or response.incomplete"
                        : s->terminal > 1 ? "more than one terminal event" : "events after the terminal event");
    else
        ds_canary_check(c, !s->failed_events, "terminal", "%s last", s->terminal_type);
    int cut = 0;
    if (!json_is_object(s->final)) ds_canary_check(c, 0, "status", "the terminal event has no response object");
    else {
        int ok = status_ok(s->final, &cut, why, sizeof why);
        if (ok && ((cut && strcmp(s->terminal_type, "response.incomplete")) || (!cut && strcmp(s->terminal_type, "response.completed"))))
            ok = 0, snprintf(why, sizeof why, "status %s in a %s event", cut ? "incomplete" : "completed", s->terminal_type);
        ds_canary_check(c, ok, "status", "%s", why);
    }
    int vis = visible_ok(thinking, cut, s->text_bytes, s->reasoning_bytes, why, sizeof why);
    ds_canary_check(c, vis, "content", "%s in %d deltas", why, s->text_events);
    long input;
    int uok = usage_ok(json_object_get(s->final, "usage"), o->max_tokens, why, sizeof why, &input);
    if (uok && plain_input > 0 && input != plain_input)
        uok = 0, snprintf(why, sizeof why, "input_tokens=%ld but the same request not streamed gave %ld", input, plain_input);
    ds_canary_check(c, uok, "usage", "%s", why);
out:
    ds_http_req_free(r);
    json_decref(s->final);
    for (int i = 0; i < MAX_ITEMS; i++)
        for (int k = 0; k < MAX_PARTS; k++) ds_sb_free(&s->text[i][k]);
    free(s);
}

void ds_canary_responses(const ds_canary_opts *o, ds_canary *c) {
    static const char *labels[2][2] = {{"responses effort=none plain", "responses effort=none stream"},
                                       {"responses effort=medium plain", "responses effort=medium stream"}};
    for (int thinking = 1; thinking >= 0; thinking--) {
        c->label = labels[thinking][0];
        long input = run_plain(o, thinking, c);
        c->label = labels[thinking][1];
        run_stream(o, thinking, input, c);
    }
}
