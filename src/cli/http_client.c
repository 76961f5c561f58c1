/* http_client.c - see http_client.h. */
#include "cli/http_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double ds_http_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ds_http_global_init(void) { return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1; }

void ds_http_global_cleanup(void) { curl_global_cleanup(); }

static int ends_with(const char *s, size_t n, const char *suffix) {
    size_t k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k);
}

char *ds_http_endpoint(const char *base, const char *path) {
    size_t n = strlen(base);
    while (n > 0 && base[n - 1] == '/') n--;
    char tail[64];
    snprintf(tail, sizeof tail, "/%s", path);
    const char *add = "";
    if (ends_with(base, n, tail)) add = "";
    else if (ends_with(base, n, "/v1")) add = tail;
    else add = NULL;
    size_t cap = n + strlen(tail) + 8;
    char *u = malloc(cap);
    if (!u) return NULL;
    if (add) snprintf(u, cap, "%.*s%s", (int)n, base, add);
    else snprintf(u, cap, "%.*s/v1%s", (int)n, base, tail);
    return u;
}

static int grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    char *b = realloc(*buf, c);
    if (!b) return -1;
    *buf = b;
    *cap = c;
    return 0;
}

static void sse_problem(ds_http_req *r, const char *what, const char *line, size_t n) {
    if (r->sse_problems++ == 0)
        snprintf(r->sse_problem, sizeof r->sse_problem, "%s: '%.*s'", what, (int)(n > 80 ? 80 : n), line);
}

static void sse_line(ds_http_req *r, char *line, size_t n) {
    if (n > 0 && line[n - 1] == '\r') n--;
    if (n == 0) { /* blank line: dispatch */
        if (r->has_data) {
            size_t len = r->data_len;
            if (len > 0 && r->data[len - 1] == '\n') len--;
            r->data[len] = '\0';
            r->n_events++;
            if (r->on_event) r->on_event(r->ud, r->event, r->data, len, ds_http_now());
        }
        r->has_data = 0;
        r->data_len = 0;
        r->event[0] = '\0';
        return;
    }
    if (line[0] == ':') return; /* comment */
    char *colon = memchr(line, ':', n);
    size_t flen = colon ? (size_t)(colon - line) : n;
    const char *val = colon ? colon + 1 : line + n;
    size_t vlen = colon ? n - flen - 1 : 0;
    if (vlen > 0 && *val == ' ') val++, vlen--;
    if (flen == 4 && !memcmp(line, "data", 4)) {
        if (grow(&r->data, &r->data_cap, r->data_len + vlen + 2)) {
            r->oom = 1;
            return;
        }
        memcpy(r->data + r->data_len, val, vlen);
        r->data_len += vlen;
        r->data[r->data_len++] = '\n';
        r->has_data = 1;
    } else if (flen == 5 && !memcmp(line, "event", 5)) {
        snprintf(r->event, sizeof r->event, "%.*s", (int)vlen, val);
    } else if ((flen == 2 && !memcmp(line, "id", 2)) || (flen == 5 && !memcmp(line, "retry", 5))) {
        /* allowed, not used */
    } else {
        sse_problem(r, colon ? "unknown SSE field" : "line without a field", line, n);
    }
}

static void sse_feed(ds_http_req *r, const char *p, size_t n) {
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t take = nl ? (size_t)(nl - p) : n;
        if (grow(&r->line, &r->line_cap, r->line_len + take + 1)) {
            r->oom = 1;
            return;
        }
        memcpy(r->line + r->line_len, p, take);
        r->line_len += take;
        if (!nl) return;
        r->line[r->line_len] = '\0';
        sse_line(r, r->line, r->line_len);
        r->line_len = 0;
        p += take + 1;
        n -= take + 1;
    }
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *ud) {
    ds_http_req *r = ud;
    size_t n = size * nmemb;
    if (r->bytes == 0) {
        r->t_first_byte = ds_http_now();
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->status);
    }
    r->bytes += n;
    if (r->body_len < r->max_body) {
        size_t keep = r->max_body - r->body_len < n ? r->max_body - r->body_len : n;
        memcpy(r->body + r->body_len, p, keep);
        r->body_len += keep;
        r->body[r->body_len] = '\0';
        if (keep < n) r->body_truncated = 1;
    } else if (n) {
        r->body_truncated = 1;
    }
    if (r->stream && r->status == 200) sse_feed(r, p, n);
    return r->oom ? 0 : n;
}

ds_http_req *ds_http_req_new(const char *url, const char *api_key, const char *body, int stream,
                             ds_sse_cb on_event, void *ud, size_t max_body, double timeout_s) {
    ds_http_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->stream = stream;
    r->on_event = on_event;
    r->ud = ud;
    r->max_body = max_body;
    r->body = malloc(max_body + 1);
    r->easy = curl_easy_init();
    if (body) r->req_body = strdup(body);
    if (!r->body || !r->easy || (body && !r->req_body)) goto fail;
    r->body[0] = '\0';
    struct curl_slist *h = NULL;
    h = curl_slist_append(h, "Content-Type: application/json");
    if (h && stream) h = curl_slist_append(h, "Accept: text/event-stream");
    if (h && api_key) {
        size_t n = strlen(api_key) + 32;
        char *a = malloc(n);
        if (!a) {
            curl_slist_free_all(h);
            goto fail;
        }
        snprintf(a, n, "Authorization: Bearer %s", api_key);
        struct curl_slist *h2 = curl_slist_append(h, a);
        free(a);
        if (!h2) {
            curl_slist_free_all(h);
            goto fail;
        }
        h = h2;
    }
    if (!h) goto fail;
    r->headers = h;
    CURL *e = r->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_NOPROXY, "localhost,127.0.0.1,::1");
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000.0));
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    if (r->req_body) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->req_body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(r->req_body));
    }
    r->t_start = ds_http_now();
    return r;
fail:
    ds_http_req_free(r);
    return NULL;
}

int ds_http_req_header(ds_http_req *r, const char *name, const char *value) {
    size_t n = strlen(name) + strlen(value) + 3;
    char *line = malloc(n);
    if (!line) return -1;
    snprintf(line, n, "%s: %s", name, value);
    struct curl_slist *h = curl_slist_append(r->headers, line);
    free(line);
    if (!h) return -1;
    r->headers = h;
    curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, r->headers);
    return 0;
}

void ds_http_req_finish(ds_http_req *r, CURLcode rc) {
    r->rc = rc;
    r->t_end = ds_http_now();
    long st = 0;
    if (curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &st) == CURLE_OK && st) r->status = st;
    if (r->stream && r->status == 200 && (r->line_len > 0 || r->has_data)) {
        r->sse_unterminated = 1;
        if (r->line_len > 0) {
            r->line[r->line_len] = '\0';
            sse_problem(r, "stream ends inside a line", r->line, r->line_len);
        } else {
            size_t n = r->data_len > 0 && r->data[r->data_len - 1] == '\n' ? r->data_len - 1 : r->data_len;
            sse_problem(r, "stream ends inside an event (no blank line after it)", r->data, n);
        }
    }
}

CURLcode ds_http_perform(ds_http_req *r) {
    r->t_start = ds_http_now();
    CURLcode rc = curl_easy_perform(r->easy);
    ds_http_req_finish(r, rc);
    return rc;
}

void ds_http_req_free(ds_http_req *r) {
    if (!r) return;
    if (r->easy) curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->headers);
    free(r->req_body);
    free(r->body);
    free(r->line);
    free(r->data);
    free(r);
}

void ds_http_describe_error(const ds_http_req *r, char *buf, size_t n) {
    if (r->oom) {
        snprintf(buf, n, "out of memory reading the response");
    } else if (r->rc != CURLE_OK) {
        snprintf(buf, n, "%s", r->errbuf[0] ? r->errbuf : curl_easy_strerror(r->rc));
    } else if (r->status != 200) {
        char snip[200];
        size_t k = 0;
        for (size_t i = 0; i < r->body_len && k + 1 < sizeof snip; i++)
            snip[k++] = (r->body[i] == '\n' || r->body[i] == '\r') ? ' ' : r->body[i];
        snip[k] = '\0';
        snprintf(buf, n, "HTTP %ld: %s", r->status, snip);
    } else {
        snprintf(buf, n, "no error");
    }
}
