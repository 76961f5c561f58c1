/* canary_check.c - see canary_check.h. */
#include "cli/canary_check.h"

#include <stdarg.h>
#include <string.h>

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
