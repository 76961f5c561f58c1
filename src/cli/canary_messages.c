/* canary_messages.c - the canary's Anthropic Messages part (POST /v1/messages,
 * with x-api-key and anthropic-version). Four requests, thinking enabled and
 * disabled, each streamed and not. Each answer: HTTP 200; "type" "message"
 * (not "error"), role assistant; stop_reason end_turn, max_tokens or
 * stop_sequence; visible output (a text block, or thinking when it is on and
 * max_tokens cut it); usage with input_tokens > 0 and
 * 0 < output_tokens <= max_tokens. A stream must also keep the event order:
 * message_start first (its usage carrying the real input_tokens, equal to the
 * non-streamed count), then content blocks from index 0 up, each
 * content_block_start → deltas of its kind → content_block_stop, one block at
 * a time, then one message_delta (stop_reason, output usage), then exactly
 * one message_stop, last; ping anywhere after message_start; no error event. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/canary_check.h"
#include "server/json_text.h"

static char *request_body(const ds_canary_opts *o, int thinking, int stream) {
    json_t *r = json_object();
    if (o->model) json_object_set_new(r, "model", ds_json_text(o->model));
    json_t *m = json_pack("{s:s,s:o}", "role", "user", "content", ds_json_text(o->prompt));
    json_object_set_new(r, "messages", json_pack("[o]", m));
    json_object_set_new(r, "max_tokens", json_integer(o->max_tokens));
    if (o->temperature >= 0) json_object_set_new(r, "temperature", json_real(o->temperature));
    json_object_set_new(r, "stream", json_boolean(stream));
    if (thinking)
        json_object_set_new(r, "thinking", json_pack("{s:s,s:I}", "type", "enabled", "budget_tokens",
                                                     (json_int_t)(o->max_tokens > 1 ? o->max_tokens - 1 : 1)));
    else json_object_set_new(r, "thinking", json_pack("{s:s}", "type", "disabled"));
    char *s = ds_json_dump(r);
    json_decref(r);
    return s;
}

static int stop_ok(const json_t *sr, int *cut, char *why, size_t n) {
    static const char *ok[] = {"end_turn", "max_tokens", "stop_sequence"};
    *cut = ds_json_str_is(sr, "max_tokens");
    for (int i = 0; i < 3; i++)
        if (ds_json_str_is(sr, ok[i])) return snprintf(why, n, "%s", ok[i]), 1;
    snprintf(why, n, "%s%s%s (want end_turn, max_tokens or stop_sequence)", json_is_string(sr) ? "\"" : "",
             json_is_string(sr) ? json_string_value(sr) : sr && json_is_null(sr) ? "null" : "missing",
             json_is_string(sr) ? "\"" : "");
    return 0;
}

static int visible_ok(int thinking, int cut, size_t text, size_t reasoning, char *why, size_t n) {
    if (text > 0) return snprintf(why, n, "%zu bytes of text", text), 1;
    if (thinking && cut && reasoning > 0)
        return snprintf(why, n, "no text, %zu bytes of thinking cut by max_tokens", reasoning), 1;
    snprintf(why, n, "no text%s", reasoning ? (thinking ? " (only thinking, and the answer was not cut)" : " (only thinking, with thinking disabled)") : "");
    return 0;
}

/* ------------------------------------------------------------------------ */

static long run_plain(const ds_canary_opts *o, int thinking, ds_canary *c) {
    char *body = request_body(o, thinking, 0);
    ds_http_req *r = ds_canary_send(o, DS_CLIENT_MESSAGES, body, 0, NULL, NULL, c);
    free(body);
    if (!r) return -1;
    char why[512];
    json_t *j = r->body_truncated ? NULL : ds_json_parse(r->body, r->body_len, NULL, 0);
    const json_t *content = json_object_get(j, "content");
    if (!json_is_object(j) || !ds_json_str_is(json_object_get(j, "type"), "message") || !json_is_array(content)) {
        ds_canary_check(c, 0, "json", "%s: %.200s",
                        !j ? "body is not JSON"
                        : ds_json_str_is(json_object_get(j, "type"), "error") ? "an error inside a 200"
                        : !json_is_array(content) ? "no content array" : "type is not \"message\"",
                        r->body);
        json_decref(j);
        ds_http_req_free(r);
        return -1;
    }
    ds_canary_check(c, 1, "json", "message");
    const json_t *role = json_object_get(j, "role");
    ds_canary_check(c, ds_json_str_is(role, "assistant"), "role", "%s", json_is_string(role) ? json_string_value(role) : "missing");
    int cut;
    ds_canary_check(c, stop_ok(json_object_get(j, "stop_reason"), &cut, why, sizeof why), "stop_reason", "%s", why);
    size_t text = 0, reasoning = 0, i;
    const json_t *b;
    json_array_foreach(content, i, b) {
        const json_t *t = json_object_get(b, "type");
        if (ds_json_str_is(t, "text")) text += json_string_length(json_object_get(b, "text"));
        else if (ds_json_str_is(t, "thinking")) reasoning += json_string_length(json_object_get(b, "thinking"));
    }
    ds_canary_check(c, visible_ok(thinking, cut, text, reasoning, why, sizeof why), "content", "%s", why);
    const json_t *u = json_object_get(j, "usage");
    long in = ds_canary_count(json_object_get(u, "input_tokens")), out = ds_canary_count(json_object_get(u, "output_tokens"));
    int uok = in > 0 && out > 0 && out <= o->max_tokens;
    if (!json_is_object(u)) snprintf(why, sizeof why, "usage missing");
    else if (in <= 0 || out <= 0) snprintf(why, sizeof why, "zero or missing token counts: input_tokens=%ld output_tokens=%ld", in, out);
    else if (out > o->max_tokens) snprintf(why, sizeof why, "output_tokens=%ld exceeds max_tokens=%ld", out, o->max_tokens);
    else snprintf(why, sizeof why, "input=%ld output=%ld", in, out);
    ds_canary_check(c, uok, "usage", "%s", why);
    json_decref(j);
    ds_http_req_free(r);
    return uok ? in : -1;
}

/* ------------------------------------------------------------------------ */

typedef struct {
    ds_canary_sse sse;
    int starts, deltas_msg, stops, after_stop;
    char first_error[200];
    long next_index, open_index; /* the next block's index; the open block (-1: none) */
    char open_type[24];
    long input_tokens, output_tokens;
    json_t *stop_reason;
    size_t text_bytes, reasoning_bytes;
    int text_events;
} mstream;

static void on_event(void *ud, const char *event, const char *data, size_t len, double t) {
    (void)t;
    mstream *s = ud;
    if (s->stops) s->after_stop++;
    const char *ty;
    json_t *j = ds_canary_sse_event(&s->sse, event, data, len, &ty);
    if (!j) return;
    long idx = ds_canary_count(json_object_get(j, "index"));
    if (!strcmp(ty, "error") || !strcmp(event, "error")) {
        if (s->sse.error_events++ == 0) snprintf(s->first_error, sizeof s->first_error, "%.180s", data);
    } else if (!strcmp(ty, "message_start")) {
        if (s->sse.events != 1 || s->starts) ds_canary_order_fail(&s->sse, ty, "not the first event");
        s->starts++;
        s->input_tokens = ds_canary_count(json_object_get(json_object_get(json_object_get(j, "message"), "usage"), "input_tokens"));
    } else if (!s->starts) {
        ds_canary_order_fail(&s->sse, ty, "before message_start");
    } else if (!strcmp(ty, "ping")) {
        /* allowed anywhere */
    } else if (!strcmp(ty, "content_block_start")) {
        const json_t *bt = json_object_get(json_object_get(j, "content_block"), "type");
        if (s->open_index >= 0) ds_canary_order_fail(&s->sse, ty, "block %ld starts while block %ld is open", idx, s->open_index);
        else if (idx != s->next_index) ds_canary_order_fail(&s->sse, ty, "index %ld, want %ld", idx, s->next_index);
        else if (s->deltas_msg) ds_canary_order_fail(&s->sse, ty, "after message_delta");
        s->open_index = idx;
        s->next_index = idx + 1;
        snprintf(s->open_type, sizeof s->open_type, "%s", json_is_string(bt) ? json_string_value(bt) : "?");
    } else if (!strcmp(ty, "content_block_delta")) {
        const json_t *d = json_object_get(j, "delta");
        const json_t *dt = json_object_get(d, "type");
        const char *want = !strcmp(s->open_type, "text") ? "text_delta"
                           : !strcmp(s->open_type, "thinking") ? "thinking_delta"
                           : !strcmp(s->open_type, "tool_use") ? "input_json_delta" : NULL;
        if (s->open_index < 0 || idx != s->open_index) ds_canary_order_fail(&s->sse, ty, "index %ld is not the open block", idx);
        else if (!(want && ds_json_str_is(dt, want)) && !(ds_json_str_is(dt, "signature_delta") && !strcmp(s->open_type, "thinking")))
            ds_canary_order_fail(&s->sse, ty, "a %s in a %s block", json_is_string(dt) ? json_string_value(dt) : "delta without a type", s->open_type);
        size_t tl = json_string_length(json_object_get(d, "text")), th = json_string_length(json_object_get(d, "thinking"));
        s->text_bytes += tl;
        s->reasoning_bytes += th;
        s->text_events += tl + th > 0;
    } else if (!strcmp(ty, "content_block_stop")) {
        if (s->open_index < 0 || idx != s->open_index) ds_canary_order_fail(&s->sse, ty, "index %ld is not the open block", idx);
        s->open_index = -1;
    } else if (!strcmp(ty, "message_delta")) {
        if (s->open_index >= 0) ds_canary_order_fail(&s->sse, ty, "block %ld is still open", s->open_index);
        if (s->deltas_msg++) ds_canary_order_fail(&s->sse, ty, "more than one message_delta");
        else {
            s->stop_reason = json_incref(json_object_get(json_object_get(j, "delta"), "stop_reason"));
            s->output_tokens = ds_canary_count(json_object_get(json_object_get(j, "usage"), "output_tokens"));
        }
    } else if (!strcmp(ty, "message_stop")) {
        if (!s->deltas_msg) ds_canary_order_fail(&s->sse, ty, "no message_delta before it");
        s->stops++;
    }
    json_decref(j);
}

static void run_stream(const ds_canary_opts *o, int thinking, long plain_input, ds_canary *c) {
    mstream s = {.open_index = -1, .input_tokens = -1, .output_tokens = -1};
    char *body = request_body(o, thinking, 1);
    ds_http_req *r = ds_canary_send(o, DS_CLIENT_MESSAGES, body, 1, on_event, &s, c);
    free(body);
    if (!r) goto out;
    char why[512];
    int sse_good = !r->sse_problems && !s.sse.non_json && !r->oom;
    if (r->sse_problems) snprintf(why, sizeof why, "%d malformed: %s", r->sse_problems, r->sse_problem);
    else if (s.sse.non_json) snprintf(why, sizeof why, "%d data payloads are not JSON objects with a type: '%s'", s.sse.non_json, s.sse.first_non_json);
    else snprintf(why, sizeof why, "%d well-formed events", s.sse.events);
    ds_canary_check(c, sse_good && s.sse.events > 0, "sse", "%s", s.sse.events ? why : "no events");
    ds_canary_check(c, s.sse.error_events == 0, "no-error-event", "%s", s.sse.error_events ? s.first_error : "none");
    ds_canary_check(c, !s.sse.order_bad && s.starts == 1, "order", "%s",
                    s.sse.order_bad ? s.sse.first_order : s.starts != 1 ? "no message_start" : "events in the documented order");
    ds_canary_check(c, s.stops == 1 && !s.after_stop, "message_stop", "%s",
                    !s.stops ? "missing" : s.stops > 1 ? "more than once" : s.after_stop ? "events after it" : "last");
    int cut = 0;
    int sok = stop_ok(s.stop_reason, &cut, why, sizeof why);
    ds_canary_check(c, s.deltas_msg == 1 && sok, "stop_reason", "%s", s.deltas_msg ? why : "no message_delta");
    ds_canary_check(c, visible_ok(thinking, cut, s.text_bytes, s.reasoning_bytes, why, sizeof why), "content",
                    "%s in %d deltas", why, s.text_events);
    int uok = s.input_tokens > 0 && s.output_tokens > 0 && s.output_tokens <= o->max_tokens &&
              (plain_input <= 0 || s.input_tokens == plain_input);
    if (s.input_tokens <= 0) snprintf(why, sizeof why, "message_start usage.input_tokens=%ld", s.input_tokens);
    else if (s.output_tokens <= 0 || s.output_tokens > o->max_tokens)
        snprintf(why, sizeof why, "message_delta usage.output_tokens=%ld (max_tokens %ld)", s.output_tokens, o->max_tokens);
    else if (!uok) snprintf(why, sizeof why, "input_tokens=%ld but the same request not streamed gave %ld", s.input_tokens, plain_input);
    else snprintf(why, sizeof why, "input=%ld output=%ld", s.input_tokens, s.output_tokens);
    ds_canary_check(c, uok, "usage", "%s", why);
out:
    json_decref(s.stop_reason);
    ds_http_req_free(r);
}

void ds_canary_messages(const ds_canary_opts *o, ds_canary *c) {
    static const char *labels[2][2] = {{"messages thinking=disabled plain", "messages thinking=disabled stream"},
                                       {"messages thinking=enabled plain", "messages thinking=enabled stream"}};
    for (int thinking = 1; thinking >= 0; thinking--) {
        c->label = labels[thinking][0];
        long input = run_plain(o, thinking, c);
        c->label = labels[thinking][1];
        run_stream(o, thinking, input, c);
    }
}
