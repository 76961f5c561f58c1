/* media_fetch.c - see media_fetch.h. */
#include "server/media_fetch.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <nettle/base64.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/strbuf.h"

static int starts_with(const char *s, size_t n, const char *lit) {
    size_t k = strlen(lit);
    return n >= k && !strncasecmp(s, lit, k);
}

ds_status ds_media_data_url(const char *url, size_t n, size_t max_bytes, uint8_t **data, size_t *out_n, ds_err *e) {
    *data = NULL;
    *out_n = 0;
    const char *comma = memchr(url, ',', n);
    if (!starts_with(url, n, "data:") || !comma)
        return ds_fail(e, DS_EINVAL, "a data URL is data:image/TYPE;base64,DATA; this one has no ','");
    size_t head = (size_t)(comma - url);
    if (!starts_with(url + 5, head - 5, "image/"))
        return ds_fail(e, DS_EINVAL, "the data URL's media type '%.*s' is not an image type (image/...)",
                       (int)(head - 5 < 40 ? head - 5 : 40), url + 5);
    if (head < 12 || strncasecmp(comma - 7, ";base64", 7))
        return ds_fail(e, DS_EINVAL, "the data URL is not base64 (data:image/TYPE;base64,DATA)");
    const char *src = comma + 1;
    size_t len = n - head - 1;
    if (!len) return ds_fail(e, DS_EINVAL, "the data URL holds no data (zero bytes)");
    if (len / 4 * 3 > max_bytes + 3)
        return ds_fail(e, DS_ENOMEM, "the image is larger than the limit of %zu bytes", max_bytes);
    uint8_t *buf = malloc(BASE64_DECODE_LENGTH(len) + 1);
    if (!buf) return ds_fail(e, DS_ENOMEM, "out of memory for the image");
    struct base64_decode_ctx ctx;
    base64_decode_init(&ctx);
    size_t got = BASE64_DECODE_LENGTH(len) + 1;
    /* nettle skips white space (a line-wrapped encoding) and refuses any other character */
    if (!base64_decode_update(&ctx, &got, buf, len, src) || !base64_decode_final(&ctx)) {
        free(buf);
        size_t bad = 0;   /* the first byte that is neither base64 nor padding nor white space */
        while (bad < len && (strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/= \t\r\n",
                                    src[bad]) && src[bad]))
            bad++;
        if (bad < len)
            return ds_fail(e, DS_EINVAL, "the data URL's base64 is invalid: byte %zu of the data (0x%02x) is not base64",
                           bad, (unsigned char)src[bad]);
        return ds_fail(e, DS_EINVAL, "the data URL's base64 is invalid: it is cut short or wrongly padded");
    }
    if (!got) {
        free(buf);
        return ds_fail(e, DS_EINVAL, "the data URL holds no data (zero bytes)");
    }
    if (got > max_bytes) {
        free(buf);
        return ds_fail(e, DS_ENOMEM, "the image is %zu bytes, larger than the limit of %zu", got, max_bytes);
    }
    *data = buf;
    *out_n = got;
    return DS_OK;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static ds_status file_url(const ds_media_policy *p, const char *url, size_t n, uint8_t **data, size_t *out_n,
                          ds_err *e) {
    if (!p->local_dir)
        return ds_fail(e, DS_EUNSUPPORTED, "file:// URLs are refused: the server was not started with "
                                           "--allowed-local-media-path");
    const char *s = url + 7;
    size_t len = n - 7;
    if (starts_with(s, len, "localhost/")) s += 9, len -= 9;
    if (!len || s[0] != '/') return ds_fail(e, DS_EINVAL, "a file:// URL names an absolute path (file:///DIR/FILE)");
    char path[PATH_MAX], real[PATH_MAX];
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {   /* percent-decoding, as file URLs spell a space %20 */
        char c = s[i];
        if (c == '%' && i + 2 < len && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
            c = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            i += 2;
        }
        if (!c) return ds_fail(e, DS_EINVAL, "the file:// URL's path holds a NUL byte");
        if (k + 1 >= sizeof path) return ds_fail(e, DS_EINVAL, "the file:// URL's path is too long");
        path[k++] = c;
    }
    path[k] = 0;
    if (!realpath(path, real)) return ds_fail(e, DS_EIO, "cannot open the file of the file:// URL: %s", strerror(errno));
    size_t dl = strlen(p->local_dir);
    int inside = !strcmp(p->local_dir, "/") || (!strncmp(real, p->local_dir, dl) && real[dl] == '/');
    if (!inside)
        return ds_fail(e, DS_EUNSUPPORTED, "the file:// URL's file is outside --allowed-local-media-path (after "
                                           "resolving '..' and symbolic links)");
    int fd = open(real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return ds_fail(e, DS_EIO, "cannot open the file of the file:// URL: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ds_fail(e, DS_EINVAL, "the file:// URL does not name a regular file");
    }
    if ((uint64_t)st.st_size > p->max_bytes) {
        close(fd);
        return ds_fail(e, DS_ENOMEM, "the image is %lld bytes, larger than the limit of %zu", (long long)st.st_size,
                       p->max_bytes);
    }
    size_t size = (size_t)st.st_size, at = 0;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) {
        close(fd);
        return ds_fail(e, DS_ENOMEM, "out of memory for the image");
    }
    while (at < size) {
        ssize_t r = read(fd, buf + at, size - at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        at += (size_t)r;
    }
    close(fd);
    *data = buf;
    *out_n = at;
    return DS_OK;
}

/* whether host is one of the comma list (case-insensitive; "*": any) */
static int domain_allowed(const char *list, const char *host) {
    size_t hl = strlen(host);
    for (const char *s = list; *s;) {
        while (*s == ' ' || *s == ',') s++;
        size_t n = strcspn(s, ",");
        size_t m = n;
        while (m && s[m - 1] == ' ') m--;
        if ((m == 1 && s[0] == '*') || (m == hl && m && !strncasecmp(s, host, m))) return 1;
        s += n;
    }
    return 0;
}

typedef struct {
    ds_sb body;
    size_t max;
    int over;
} fetch_sink;

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *user) {
    fetch_sink *f = user;
    size_t n = size * nmemb;
    if (f->body.n + n > f->max) {
        f->over = 1;
        return 0;   /* stops the transfer */
    }
    ds_sb_append(&f->body, ptr, n);
    return f->body.oom ? 0 : n;
}

static ds_status http_url(const ds_media_policy *p, const char *url, size_t n, uint8_t **data, size_t *out_n,
                          ds_err *e) {
    if (!p->domains)
        return ds_fail(e, DS_EUNSUPPORTED, "http(s) URLs are refused: the server fetches images only from the hosts of "
                                           "--allowed-media-domains (none given)");
    char *u = strndup(url, n);
    if (!u) return ds_fail(e, DS_ENOMEM, "out of memory");
    CURLU *h = curl_url();
    char *host = NULL;
    ds_status st = DS_OK;
    if (!h || curl_url_set(h, CURLUPART_URL, u, 0) != CURLUE_OK || curl_url_get(h, CURLUPART_HOST, &host, 0) != CURLUE_OK)
        st = ds_fail(e, DS_EINVAL, "the URL does not parse");
    else if (!domain_allowed(p->domains, host))
        st = ds_fail(e, DS_EUNSUPPORTED, "the host '%.100s' is not among --allowed-media-domains", host);
    curl_free(host);
    curl_url_cleanup(h);
    if (st) {
        free(u);
        return st;
    }
    CURL *c = curl_easy_init();
    if (!c) {
        free(u);
        return ds_fail(e, DS_ENOMEM, "libcurl failed to start");
    }
    fetch_sink f = {.max = p->max_bytes};
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(c, CURLOPT_URL, u);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);   /* a redirect could lead off the allowed hosts */
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(p->timeout_s * 1000));
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)p->max_bytes);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &f);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "deltaserve");
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    free(u);
    if (f.over || rc == CURLE_FILESIZE_EXCEEDED)
        st = ds_fail(e, DS_ENOMEM, "the image is larger than the limit of %zu bytes", p->max_bytes);
    else if (rc == CURLE_OPERATION_TIMEDOUT)
        st = ds_fail(e, DS_EIO, "fetching the image took longer than %g s", p->timeout_s);
    else if (rc != CURLE_OK)
        st = ds_fail(e, DS_EIO, "fetching the image failed: %s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
    else if (code < 200 || code > 299)
        st = ds_fail(e, DS_EIO, "fetching the image failed: the server answered %ld%s", code,
                     code >= 300 && code < 400 ? " (redirects are not followed)" : "");
    else if (f.body.oom)
        st = ds_fail(e, DS_ENOMEM, "out of memory for the image");
    if (st) {
        ds_sb_free(&f.body);
        return st;
    }
    *data = (uint8_t *)(f.body.s ? f.body.s : calloc(1, 1));
    *out_n = f.body.n;
    return *data ? DS_OK : ds_fail(e, DS_ENOMEM, "out of memory");
}

ds_status ds_media_fetch(const ds_media_policy *p, const char *url, size_t n, uint8_t **data, size_t *out_n, ds_err *e) {
    *data = NULL;
    *out_n = 0;
    if (starts_with(url, n, "data:")) return ds_media_data_url(url, n, p->max_bytes, data, out_n, e);
    if (starts_with(url, n, "file://")) return file_url(p, url, n, data, out_n, e);
    if (starts_with(url, n, "http://") || starts_with(url, n, "https://")) return http_url(p, url, n, data, out_n, e);
    return ds_fail(e, DS_EINVAL, "the URL's scheme is not supported (data:, file://, http://, https://)");
}
