/* canary_check.c - see canary_check.h. */
#include "cli/canary_check.h"

#include <stdarg.h>
#include <string.h>

#include "server/json_text.h"

void ds_canary_check(ds_canary *c, int cond, const char *name, const char *fmt, ...) {
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

ds_http_req *ds_canary_send(const ds_canary_opts *o, ds_client_api api, const char *body, int stream,
                            ds_sse_cb on_event, void *ud, ds_canary *c) {
    ds_http_req *r = body ? ds_client_api_req(api, o->url, o->api_key, body, stream, on_event, ud,
                                              stream ? 64u << 10 : DS_CANARY_MAX_BODY, o->timeout)
                          : NULL;
    if (!r) {
        ds_canary_check(c, 0, "request", "out of memory");
        return NULL;
    }
    ds_http_perform(r);
    char why[512];
    if (r->rc != CURLE_OK || r->status != 200 || r->oom) {
        ds_http_describe_error(r, why, sizeof why);
        ds_canary_check(c, 0, "http", "%s", why);
        ds_http_req_free(r);
        return NULL;
    }
    if (stream) ds_canary_check(c, 1, "http", "200 in %.0f ms, %d events", 1e3 * (r->t_end - r->t_start), r->n_events);
    else ds_canary_check(c, 1, "http", "200 in %.0f ms", 1e3 * (r->t_end - r->t_start));
    if (stream) {
        char *ctype = NULL;
        curl_easy_getinfo(r->easy, CURLINFO_CONTENT_TYPE, &ctype);
        ds_canary_check(c, ctype && !strncmp(ctype, "text/event-stream", 17), "content-type", "%s",
                        ctype ? ctype : "missing");
    }
    return r;
}

long ds_canary_count(const json_t *v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    return (long)json_integer_value(v);
}

void ds_canary_order_fail(ds_canary_sse *s, const char *type, const char *fmt, ...) {
    if (s->order_bad++) return;
    char m[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(s->first_order, sizeof s->first_order, "event %d (%s): %s", s->events, type, m);
}

json_t *ds_canary_sse_event(ds_canary_sse *s, const char *event, const char *data, size_t len, const char **type) {
    s->events++;
    json_t *j = ds_json_parse(data, len, NULL, 0);
    const json_t *t = json_object_get(j, "type");
    if (!json_is_object(j) || !json_is_string(t)) {
        if (!strcmp(event, "error")) s->error_events++;
        if (s->non_json++ == 0) snprintf(s->first_non_json, sizeof s->first_non_json, "%.100s", data);
        json_decref(j);
        return NULL;
    }
    *type = json_string_value(t);
    if (event[0] && strcmp(event, *type)) ds_canary_order_fail(s, *type, "the SSE event name is '%s'", event);
    return j;
}
