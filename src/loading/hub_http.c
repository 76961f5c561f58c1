/* hub_http.c - the hub's HTTP API through libcurl: the model info listing
 * (GET /api/models/ORG/NAME/revision/REV?blobs=true: the commit and every
 * file with its size, blob id and, for LFS files, sha256) and the file
 * downloads (GET /ORG/NAME/resolve/COMMIT/PATH, which the hub answers for
 * large files with a redirect to its CDN). */
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/progress.h"
#include "loading/hub_int.h"
#include "loading/hub_sha256.h"

enum { MAX_ATTEMPTS = 4, MAX_BODY = 1 << 24 };

typedef struct {
    /* the last response's headers (a redirect's are kept apart: the hub puts
     * the checksum on the redirect, the CDN its own ETag on the answer) */
    char linked_etag[80], etag[80], error_message[256];
    int64_t range_start; /* of a 206's Content-Range; -1 none */
    /* where the body goes */
    FILE *out;          /* the download (200/206 only) */
    char *body;         /* otherwise, up to MAX_BODY bytes: JSON or an error text */
    size_t n_body, cap_body;
    int64_t offset;     /* bytes dest held when the request was sent */
    int restarted;      /* a 200 answered a Range request: dest was emptied */
    int bad_range;      /* a 206 that does not start where asked */
    int write_failed;
    ds_progress *bar;
    CURL *curl;
} xfer;

static void trim_quotes(char *dst, size_t cap, const char *v, size_t n) {
    while (n && isspace((unsigned char)v[n - 1])) n--;
    while (n && isspace((unsigned char)*v)) v++, n--;
    if (n >= 2 && v[0] == 'W' && v[1] == '/') v += 2, n -= 2;
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') v++, n -= 2;
    snprintf(dst, cap, "%.*s", (int)n, v);
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud) {
    xfer *x = ud;
    size_t n = size * nitems;
    if (n >= 5 && !strncmp(buf, "HTTP/", 5)) { /* a new response: forget the previous one's */
        x->etag[0] = x->error_message[0] = 0;
        x->range_start = -1;
        return n;
    }
    const char *colon = memchr(buf, ':', n);
    if (!colon) return n;
    size_t klen = (size_t)(colon - buf);
    const char *v = colon + 1;
    size_t vlen = n - klen - 1;
    if (klen == 13 && !strncasecmp(buf, "x-linked-etag", klen)) trim_quotes(x->linked_etag, sizeof x->linked_etag, v, vlen);
    else if (klen == 4 && !strncasecmp(buf, "etag", klen)) trim_quotes(x->etag, sizeof x->etag, v, vlen);
    else if (klen == 15 && !strncasecmp(buf, "x-error-message", klen))
        trim_quotes(x->error_message, sizeof x->error_message, v, vlen);
    else if (klen == 13 && !strncasecmp(buf, "content-range", klen)) {
        char tmp[96];
        trim_quotes(tmp, sizeof tmp, v, vlen);
        long long a;
        if (sscanf(tmp, "bytes %lld-", &a) == 1) x->range_start = a;
    }
    return n;
}

static size_t on_body(char *buf, size_t size, size_t nmemb, void *ud) {
    xfer *x = ud;
    size_t n = size * nmemb;
    long status = 0;
    curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &status);
    if (x->out && (status == 200 || status == 206)) {
        if (status == 206 && x->range_start != x->offset) {
            x->bad_range = 1;
            return 0;
        }
        if (status == 200 && x->offset > 0 && !x->restarted) {
            /* the server ignored the Range: start the file over */
            if (fflush(x->out) != 0 || ftruncate(fileno(x->out), 0) != 0 || fseek(x->out, 0, SEEK_SET) != 0) {
                x->write_failed = 1;
                return 0;
            }
            x->restarted = 1;
            if (x->bar) x->bar->done = 0;
        }
        if (fwrite(buf, 1, n, x->out) != n) {
            x->write_failed = 1;
            return 0;
        }
        if (x->bar) ds_progress_add(x->bar, n);
        return n;
    }
    if (x->n_body + n + 1 > MAX_BODY) return 0;
    if (x->n_body + n + 1 > x->cap_body) {
        size_t c = x->cap_body ? x->cap_body : 4096;
        while (c < x->n_body + n + 1) c *= 2;
        char *b = realloc(x->body, c);
        if (!b) return 0;
        x->body = b, x->cap_body = c;
    }
    memcpy(x->body + x->n_body, buf, n);
    x->n_body += n;
    x->body[x->n_body] = 0;
    return n;
}

static CURL *new_request(const ds_hub_opts *o, const char *url, xfer *x, struct curl_slist **hdrs, const char *range) {
    CURL *c = curl_easy_init();
    if (!c) return NULL;
    x->curl = c;
    x->range_start = -1;
    char h[1024];
    if (o->token && o->token[0]) {
        snprintf(h, sizeof h, "Authorization: Bearer %s", o->token);
        *hdrs = curl_slist_append(*hdrs, h);
    }
    if (range) {
        snprintf(h, sizeof h, "Range: %s", range);
        *hdrs = curl_slist_append(*hdrs, h);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "deltaserve");
    /* the token goes only to the hub's own host: curl drops a custom
     * Authorization header when a redirect leads to another one */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    /* a stalled transfer (under 1 byte/s for a minute) ends and is retried */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    return c;
}

/* The hub's words for a failed answer: its X-Error-Message header, else the
 * "error" field of a JSON body, else the start of the body. */
static void hub_reason(const xfer *x, char *buf, size_t cap) {
    buf[0] = 0;
    if (x->error_message[0]) { snprintf(buf, cap, "%s", x->error_message); return; }
    if (!x->body) return;
    json_t *j = json_loadb(x->body, x->n_body, 0, NULL);
    const char *m = j ? json_string_value(json_object_get(j, "error")) : NULL;
    if (m) snprintf(buf, cap, "%s", m);
    else snprintf(buf, cap, "%.120s", x->body);
    json_decref(j);
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
}

static ds_status http_error(const ds_hub_opts *o, const char *what, long status, const xfer *x, ds_err *e) {
    char why[260];
    hub_reason(x, why, sizeof why);
    const char *sep = why[0] ? ": " : "";
    if (status == 401 || status == 403) {
        if (o->token && o->token[0])
            return ds_fail(e, DS_EINVAL,
                           "%s: the hub refused HF_TOKEN (HTTP %ld%s%s); the repository may be gated (accept its "
                           "terms on its page) or the token may lack read access",
                           what, status, sep, why);
        return ds_fail(e, DS_EINVAL,
                       "%s: the hub answered HTTP %ld%s%s; for a gated or private repository set HF_TOKEN to an "
                       "access token (or check the repository name)",
                       what, status, sep, why);
    }
    if (status == 404)
        return ds_fail(e, DS_ENOTFOUND, "%s: not found on %s (HTTP 404%s%s)", what, o->endpoint, sep, why);
    return ds_fail(e, DS_EIO, "%s: the hub answered HTTP %ld%s%s", what, status, sep, why);
}

/* Part of a URL path: letters, digits and -._~/ as they are, the rest %XX
 * ('/' kept when keep_slash). */
static void url_escape(char *dst, size_t cap, const char *s, int keep_slash) {
    size_t n = 0;
    for (; *s && n + 4 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (isalnum(ch) || strchr("-._~", ch) || (keep_slash && ch == '/')) dst[n++] = (char)ch;
        else n += (size_t)snprintf(dst + n, cap - n, "%%%02X", ch);
    }
    dst[n] = 0;
}

static int is_hex(const char *s, size_t n) {
    if (strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i])) return 0;
    return 1;
}

static ds_status parse_listing(const char *repo, const char *body, size_t n, ds_hub_listing *l, ds_err *e) {
    json_error_t je;
    json_t *j = json_loadb(body, n, 0, &je);
    if (!j) return ds_fail(e, DS_ECORRUPT, "%s: the hub's model info is not JSON (%s at byte %d)", repo, je.text, je.position);
    ds_status s = DS_OK;
    const char *sha = json_string_value(json_object_get(j, "sha"));
    json_t *sib = json_object_get(j, "siblings");
    if (!sha || !is_hex(sha, 40)) s = ds_fail(e, DS_ECORRUPT, "%s: the hub's model info has no commit hash in \"sha\"", repo);
    else if (!json_is_array(sib)) s = ds_fail(e, DS_ECORRUPT, "%s: the hub's model info has no \"siblings\" list", repo);
    else snprintf(l->commit, sizeof l->commit, "%s", sha);
    for (size_t i = 0; !s && i < json_array_size(sib); i++) {
        json_t *f = json_array_get(sib, i);
        const char *path = json_string_value(json_object_get(f, "rfilename"));
        if (!path || !ds_hub_path_ok(path)) continue; /* nothing we could store safely */
        if ((s = ds_hub_listing_add(l, path, e))) break;
        ds_hub_file *hf = &l->files[l->n - 1];
        json_t *size = json_object_get(f, "size"), *lfs = json_object_get(f, "lfs");
        const char *blob = json_string_value(json_object_get(f, "blobId"));
        if (json_is_integer(size)) hf->size = json_integer_value(size);
        if (blob && is_hex(blob, 40)) snprintf(hf->oid, sizeof hf->oid, "%s", blob);
        if (json_is_object(lfs)) {
            const char *sum = json_string_value(json_object_get(lfs, "sha256"));
            json_t *lsize = json_object_get(lfs, "size");
            if (sum && is_hex(sum, 64)) {
                snprintf(hf->oid, sizeof hf->oid, "%s", sum);
                for (char *p = hf->oid; *p; p++) *p = (char)tolower((unsigned char)*p);
                hf->lfs = 1;
            }
            if (json_is_integer(lsize)) hf->size = json_integer_value(lsize);
        }
    }
    json_decref(j);
    return s;
}

ds_status ds_hub_list_remote(const ds_hub_opts *o, const char *repo, ds_hub_listing *l, int *unreachable, ds_err *e) {
    memset(l, 0, sizeof *l);
    *unreachable = 0;
    char rev[512], url[2048];
    url_escape(rev, sizeof rev, o->revision, 0);
    snprintf(url, sizeof url, "%s/api/models/%s/revision/%s?blobs=true", o->endpoint, repo, rev);
    xfer x = {0};
    struct curl_slist *hdrs = curl_slist_append(NULL, "Accept: application/json");
    CURL *c = new_request(o, url, &x, &hdrs, NULL);
    if (!c) {
        curl_slist_free_all(hdrs);
        return ds_fail(e, DS_ENOMEM, "out of memory");
    }
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    ds_status s = DS_OK;
    char what[600];
    snprintf(what, sizeof what, "%s (revision %s)", repo, o->revision);
    if (rc != CURLE_OK) {
        *unreachable = status == 0;
        s = ds_fail(e, DS_EIO, "%s: cannot list the files at %s: %s", what, o->endpoint, curl_easy_strerror(rc));
    } else if (status != 200) {
        s = http_error(o, what, status, &x, e);
    } else {
        s = parse_listing(repo, x.body ? x.body : "", x.n_body, l, e);
    }
    curl_easy_cleanup(c);
    curl_slist_free_all(hdrs);
    free(x.body);
    if (s) ds_hub_listing_free(l);
    return s;
}

static int retryable(CURLcode rc) {
    return rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR || rc == CURLE_GOT_NOTHING ||
           rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_COULDNT_CONNECT;
}

/* The size dest holds now; 0 when it does not exist. */
static int64_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : 0;
}

/* One GET of f into dest from where dest ends. Returns DS_OK when the whole
 * file arrived; *again when the transfer broke off and another try may go on. */
static ds_status fetch_once(const ds_hub_opts *o, const char *url, const char *what, const ds_hub_file *f,
                            const char *dest, ds_progress *bar, int *again, char linked[80], ds_err *e) {
    *again = 0;
    int64_t have = file_size(dest);
    if (f->size >= 0 && have > f->size) { /* longer than the file: not a part of it */
        if (truncate(dest, 0) != 0) return ds_fail(e, DS_EIO, "%s: cannot truncate: %s", dest, strerror(errno));
        have = 0;
    }
    if (f->size >= 0 && have == f->size && have > 0) return DS_OK; /* already whole (checked by the caller) */
    FILE *out = fopen(dest, "ab");
    if (!out) return ds_fail(e, DS_EIO, "%s: cannot open for writing: %s", dest, strerror(errno));
    xfer x = {.out = out, .offset = have, .bar = bar};
    bar->done = (uint64_t)have;
    char range[64];
    snprintf(range, sizeof range, "bytes=%lld-", (long long)have);
    struct curl_slist *hdrs = NULL;
    CURL *c = new_request(o, url, &x, &hdrs, have > 0 ? range : NULL);
    if (!c) {
        fclose(out);
        curl_slist_free_all(hdrs);
        return ds_fail(e, DS_ENOMEM, "out of memory");
    }
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    int closed_bad = fclose(out) != 0;
    ds_status s = DS_OK;
    if (x.linked_etag[0]) snprintf(linked, 80, "%s", x.linked_etag);
    if (x.write_failed || closed_bad) {
        s = ds_fail(e, DS_EIO, "%s: cannot write: %s", dest, strerror(errno));
    } else if (x.bad_range) {
        /* the answer does not continue our bytes: start over next time */
        s = ds_fail(e, DS_EIO, "%s: the server answered the Range request from %lld with bytes from %lld", what,
                    (long long)have, (long long)x.range_start);
        if (truncate(dest, 0) == 0) *again = 1;
    } else if (rc == CURLE_OK && status == 416 && have > 0) {
        s = ds_fail(e, DS_EIO, "%s: the server refused to resume at byte %lld (HTTP 416)", what, (long long)have);
        if (truncate(dest, 0) == 0) *again = 1;
    } else if (rc == CURLE_OK && status != 200 && status != 206) {
        s = http_error(o, what, status, &x, e);
        *again = status >= 500;
    } else if (rc != CURLE_OK) {
        s = ds_fail(e, DS_EIO, "%s: the download broke off at byte %lld: %s", what, (long long)file_size(dest),
                    curl_easy_strerror(rc));
        *again = retryable(rc);
    } else if (f->size >= 0 && file_size(dest) < f->size) {
        /* an answer without a length that ended early */
        s = ds_fail(e, DS_EIO, "%s: the download ended at byte %lld of %lld", what, (long long)file_size(dest),
                    (long long)f->size);
        *again = 1;
    }
    curl_easy_cleanup(c);
    curl_slist_free_all(hdrs);
    free(x.body);
    return s;
}

ds_status ds_hub_download(const ds_hub_opts *o, const char *repo, const char *commit, const ds_hub_file *f,
                          const char *dest, ds_err *e) {
    char path[4096], url[8192], what[600];
    url_escape(path, sizeof path, f->path, 1);
    snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", o->endpoint, repo, commit, path);
    snprintf(what, sizeof what, "%s/%s", repo, f->path);
    const char *label = strrchr(f->path, '/') ? strrchr(f->path, '/') + 1 : f->path;
    ds_progress bar;
    ds_progress_start(&bar, label, f->size > 0 ? (uint64_t)f->size : 0);
    if (!o->progress) bar.enabled = 0;
    char linked[80] = "";
    ds_status s = DS_OK;
    for (int stalls = 0;;) {
        int again = 0;
        int64_t at = file_size(dest);
        s = fetch_once(o, url, what, f, dest, &bar, &again, linked, e);
        if (!s || !again) break;
        if (file_size(dest) > at) continue; /* it moved on before breaking off: go on from there */
        if (++stalls >= MAX_ATTEMPTS) break;
        sleep(1); /* nothing came: give the server a moment */
    }
    if (s) {
        ds_progress_stop(&bar);
        if (file_size(dest) == 0) unlink(dest); /* a part with something in it stays: the next run resumes it */
        return s;
    }
    ds_progress_finish(&bar);
    int64_t got = file_size(dest);
    if (f->size >= 0 && got != f->size) {
        unlink(dest);
        return ds_fail(e, DS_ECORRUPT, "%s: downloaded %lld bytes, the hub lists %lld; the file was removed", what,
                       (long long)got, (long long)f->size);
    }
    const char *want = f->lfs ? f->oid : is_hex(linked, 64) ? linked : NULL;
    if (want) {
        char sum[65];
        if ((s = ds_sha256_file(dest, sum, e))) return s;
        if (strcasecmp(sum, want)) {
            unlink(dest);
            return ds_fail(e, DS_ECORRUPT,
                           "%s: checksum mismatch: the download's sha256 is %s, the hub lists %s; the file was removed "
                           "(run again to download it anew)",
                           what, sum, want);
        }
    }
    return DS_OK;
}
