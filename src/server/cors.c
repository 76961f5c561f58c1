/* cors.c - see cors.h. */
#include "server/cors.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"

#define MAX_ITEMS 64

typedef struct {
    char *items[MAX_ITEMS];
    int n;
    int any;    /* "*" among them */
    char *joined;   /* "a, b": a header value */
} list;

struct ds_cors {
    list origins, methods, headers;
};

/* what the server has: every route is GET or POST */
static const char ALL_METHODS[] = "GET, POST, OPTIONS";
/* what the clients send when a browser does not say (a preflight always does) */
static const char COMMON_HEADERS[] = "Authorization, Content-Type, x-api-key, anthropic-version";

/* an HTTP token (RFC 9110): what a method or a header name is made of */
static int token_char(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || strchr("!#$%&'*+-.^_`|~", c);
}

/* origins: printable ASCII without spaces or commas; methods and headers: tokens. Nothing that
 * could break the header line it goes into. */
static ds_status add(list *l, const char *opt, int tokens, const char *s, size_t n, ds_err *e) {
    while (n && (*s == ' ' || *s == '\t')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    if (!n) return ds_fail(e, DS_EINVAL, "%s: an empty item in the list", opt);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c >= 0x7f || c == ',')
            return ds_fail(e, DS_EINVAL, "%s: item %d has a space, a control character, a comma or a byte past ASCII",
                           opt, l->n + 1);
        if (tokens && !token_char((char)c))
            return ds_fail(e, DS_EINVAL, "%s: item %d is not a method or header name ('%c')", opt, l->n + 1, c);
    }
    if (l->n == MAX_ITEMS) return ds_fail(e, DS_EINVAL, "%s: more than %d items", opt, MAX_ITEMS);
    char *it = strndup(s, n);
    if (!it) return ds_fail(e, DS_ENOMEM, "%s: out of memory", opt);
    l->items[l->n++] = it;
    if (!strcmp(it, "*")) l->any = 1;
    return DS_OK;
}

static ds_status parse(list *l, const char *opt, int tokens, const char *text, ds_err *e) {
    const char *p = text;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '[') {
        json_error_t je;
        json_t *a = json_loads(text, 0, &je);
        if (!a || !json_is_array(a)) {
            json_decref(a);
            return ds_fail(e, DS_EINVAL, "%s: not a JSON list of strings (%s at byte %d)", opt,
                           a ? "not a list" : je.text, a ? 0 : je.position);
        }
        ds_status st = json_array_size(a) ? DS_OK : ds_fail(e, DS_EINVAL, "%s: the list is empty", opt);
        for (size_t i = 0; !st && i < json_array_size(a); i++) {
            const json_t *v = json_array_get(a, i);
            if (!json_is_string(v)) st = ds_fail(e, DS_EINVAL, "%s: item %zu is not a string", opt, i + 1);
            else st = add(l, opt, tokens, json_string_value(v), json_string_length(v), e);
        }
        json_decref(a);
        if (st) return st;
    } else {
        for (const char *s = text;;) {
            const char *c = strchr(s, ',');
            size_t n = c ? (size_t)(c - s) : strlen(s);
            ds_status st = add(l, opt, tokens, s, n, e);
            if (st) return st;
            if (!c) break;
            s = c + 1;
        }
    }
    ds_sb j = {0};
    for (int i = 0; i < l->n; i++) {
        if (i) ds_sb_puts(&j, ", ");
        ds_sb_puts(&j, l->items[i]);
    }
    if (j.oom || !j.s) {
        ds_sb_free(&j);
        return ds_fail(e, DS_ENOMEM, "%s: out of memory", opt);
    }
    l->joined = j.s;
    return DS_OK;
}

static void list_free(list *l) {
    for (int i = 0; i < l->n; i++) free(l->items[i]);
    free(l->joined);
}

ds_status ds_cors_new(const char *origins, const char *methods, const char *headers, ds_cors **out, ds_err *e) {
    *out = NULL;
    ds_cors *c = calloc(1, sizeof *c);
    if (!c) return ds_fail(e, DS_ENOMEM, "out of memory for the CORS policy");
    ds_status st = parse(&c->origins, "--allowed-origins", 0, origins, e);
    if (!st && methods) st = parse(&c->methods, "--allowed-methods", 1, methods, e);
    if (!st && headers) st = parse(&c->headers, "--allowed-headers", 1, headers, e);
    if (st) {
        ds_cors_free(c);
        return st;
    }
    if (!methods) c->methods.any = 1;
    if (!headers) c->headers.any = 1;
    *out = c;
    return DS_OK;
}

void ds_cors_free(ds_cors *c) {
    if (!c) return;
    list_free(&c->origins);
    list_free(&c->methods);
    list_free(&c->headers);
    free(c);
}

const char *ds_cors_allow_origin(const ds_cors *c, const char *origin) {
    if (!c || !origin) return NULL;
    if (c->origins.any) return "*";
    for (int i = 0; i < c->origins.n; i++)
        if (!strcmp(origin, c->origins.items[i])) return c->origins.items[i];
    return NULL;
}

int ds_cors_varies(const ds_cors *c) { return c && !c->origins.any; }

const char *ds_cors_methods(const ds_cors *c) { return c->methods.any ? ALL_METHODS : c->methods.joined; }

const char *ds_cors_headers(const ds_cors *c, const char *requested) {
    if (!c->headers.any) return c->headers.joined;
    return requested && requested[0] ? requested : COMMON_HEADERS;
}
