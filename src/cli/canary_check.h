/* canary_check.h - what the `canary` command's per-API parts share: the
 * options, the "ok ..." / "FAIL ..." lines and their count, and the requests'
 * set-up. Each API's part (chat in cmd_canary.c, canary_responses.c,
 * canary_messages.c) sends four requests, thinking on and off, each streamed
 * and not, and checks every answer by that API's own rules. */
#ifndef DS_CANARY_CHECK_H
#define DS_CANARY_CHECK_H

#include <jansson.h>
#include <stdio.h>

#include "cli/client_api.h"

#define DS_CANARY_MAX_BODY (8u << 20)

typedef struct {
    int passed, failed;
    const char *label; /* the request being checked, e.g. "thinking=on stream" */
} ds_canary;

typedef struct {
    const char *url; /* the API's endpoint */
    const char *api_key, *model, *prompt;
    long max_tokens;
    double timeout, temperature; /* temperature < 0: not sent */
} ds_canary_opts;

/* Prints one "ok LABEL: NAME: detail" or "FAIL LABEL: NAME: detail" line and counts it. */
void ds_canary_check(ds_canary *c, int cond, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Sends body to o->url as `api` (streamed or not); on a transport error, a
 * status other than 200 or no memory, fails the "http" check and returns NULL;
 * else passes it and returns the finished request (ds_http_req_free it). */
ds_http_req *ds_canary_send(const ds_canary_opts *o, ds_client_api api, const char *body, int stream,
                            ds_sse_cb on_event, void *ud, ds_canary *c);

/* The value of a JSON count, or -1 when v is not a non-negative integer. */
long ds_canary_count(const json_t *v);

/* What the Responses and Messages streams (named events whose data has a "type") count alike. */
typedef struct {
    int events, non_json, error_events, order_bad;
    char first_non_json[120], first_order[200];
} ds_canary_sse;

/* Counts one event; returns its data as a JSON object with a string "type" (*type, borrowed from
 * it; caller decrefs), or NULL when the data is not that (counted as non-JSON, and as an error
 * event when the event is named "error"). An event name other than its type is an order failure. */
json_t *ds_canary_sse_event(ds_canary_sse *s, const char *event, const char *data, size_t len, const char **type);
/* Counts an order failure at the current event; the first one's description is kept. */
void ds_canary_order_fail(ds_canary_sse *s, const char *type, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The four requests of the Responses and Messages APIs. */
void ds_canary_responses(const ds_canary_opts *o, ds_canary *c);
void ds_canary_messages(const ds_canary_opts *o, ds_canary *c);

#endif
