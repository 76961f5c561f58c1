/* cors.h - Cross-Origin Resource Sharing, so that a web page on another origin
 * can call the server (vLLM's --allowed-origins, --allowed-methods,
 * --allowed-headers).
 *
 * Browsers send an OPTIONS "preflight" (Origin, Access-Control-Request-Method,
 * -Headers) before a request with a JSON body or an Authorization header, and
 * then read the real answer only when it carries Access-Control-Allow-Origin
 * for their Origin. The policy is built once at start-up; a request's Origin
 * is only compared with it. */
#ifndef DS_CORS_H
#define DS_CORS_H

#include "common/status.h"

/* How long a browser may keep a preflight's answer. */
#define DS_CORS_MAX_AGE "600"

typedef struct ds_cors ds_cors;

/* Each list is a JSON array of strings (["https://a.example", "*"]) or a comma
 * list (https://a.example,https://b.example); "*" allows any. methods and
 * headers may be NULL: any. Fails on an empty list, an empty or non-string
 * item, or more than 64 items, naming the option. */
ds_status ds_cors_new(const char *origins, const char *methods, const char *headers, ds_cors **out, ds_err *e);
void ds_cors_free(ds_cors *c);

/* The Access-Control-Allow-Origin value for a request's Origin header ("*"
 * when any is allowed, else the origin itself), or NULL when origin is NULL or
 * not allowed. */
const char *ds_cors_allow_origin(const ds_cors *c, const char *origin);
/* Whether the answer depends on the Origin (the value above echoes it): then
 * caches must be told (Vary: Origin). */
int ds_cors_varies(const ds_cors *c);
/* Access-Control-Allow-Methods of a preflight. */
const char *ds_cors_methods(const ds_cors *c);
/* Access-Control-Allow-Headers of a preflight: the allowed list, or with any
 * allowed the headers the browser asked for (requested, may be NULL). */
const char *ds_cors_headers(const ds_cors *c, const char *requested);

#endif
