/* http_client.h - the client side of the OpenAI-compatible API, for the
 * `canary` and `bench-serve` commands: one HTTP request (libcurl easy handle)
 * whose response body is kept (up to a cap) and, for a streamed response,
 * split into Server-Sent Events as the bytes arrive, each event handed to a
 * callback with the time it completed. Requests run one at a time
 * (ds_http_perform) or many at once on a curl multi handle (the caller adds
 * r->easy to it). Only http:// and https:// URLs, no redirects, no proxy for
 * loopback addresses. */
#ifndef DS_HTTP_CLIENT_H
#define DS_HTTP_CLIENT_H

#include <curl/curl.h>
#include <stddef.h>

/* One complete SSE event: its `event:` name ("" when none) and its data
 * lines joined by '\n'. t is the monotonic time (ds_http_now) it completed. */
typedef void (*ds_sse_cb)(void *ud, const char *event, const char *data, size_t len, double t);

typedef struct {
    CURL *easy;
    struct curl_slist *headers;
    char *req_body;
    int stream;           /* parse the body as SSE (when the status is 200) */
    ds_sse_cb on_event;
    void *ud;
    size_t max_body;      /* bytes of the body kept in `body` */

    /* results */
    double t_start, t_first_byte, t_end;
    long status;          /* HTTP status, 0 when none arrived */
    CURLcode rc;
    char errbuf[CURL_ERROR_SIZE];
    char *body;           /* NUL-terminated, at most max_body bytes */
    size_t body_len;
    int body_truncated;
    size_t bytes;         /* all body bytes received */

    /* SSE state */
    char *line;           /* the current, unterminated line */
    size_t line_len, line_cap;
    char *data;           /* data of the event being built */
    size_t data_len, data_cap;
    int has_data;
    char event[64];
    int n_events;
    int sse_problems;     /* lines that are not `field: value` or comments, unknown fields */
    char sse_problem[160];/* the first of them */
    int sse_unterminated; /* the stream ended inside an event or a line */
    int oom;
} ds_http_req;

double ds_http_now(void);

/* Global libcurl set-up, once per process (returns 0 on success). */
int ds_http_global_init(void);
void ds_http_global_cleanup(void);

/* The chat completions endpoint for a base URL: "http://h:p" and "http://h:p/"
 * become "http://h:p/v1/chat/completions", ".../v1" gets "/chat/completions",
 * a URL that already ends in "/chat/completions" is kept. Same for "models".
 * Returns a malloc'd string. */
char *ds_http_endpoint(const char *base, const char *path);

/* Sets up a request: POST body (JSON) when body is non-NULL, else GET.
 * timeout_s bounds the whole transfer. Returns NULL when out of memory. */
ds_http_req *ds_http_req_new(const char *url, const char *api_key, const char *body, int stream,
                             ds_sse_cb on_event, void *ud, size_t max_body, double timeout_s);
/* Adds a request header "Name: value" (before the transfer starts). Returns 0, or -1 when out of memory. */
int ds_http_req_header(ds_http_req *r, const char *name, const char *value);
/* After the transfer is done (ds_http_perform, or the multi handle reported
 * it with result rc): records the status and end time, flushes the SSE parser. */
void ds_http_req_finish(ds_http_req *r, CURLcode rc);
/* Runs the request to the end (blocking). Returns r->rc. */
CURLcode ds_http_perform(ds_http_req *r);
void ds_http_req_free(ds_http_req *r);

/* One line describing why a request did not give a usable answer: a
 * transport error, or "HTTP 500: <start of body>". */
void ds_http_describe_error(const ds_http_req *r, char *buf, size_t n);

#endif
