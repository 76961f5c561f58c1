/* client_api.c - see client_api.h. */
#include "cli/client_api.h"

#include <string.h>

static const char *const names[] = {"chat", "responses", "messages"};
static const char *const paths[] = {"chat/completions", "responses", "messages"};

int ds_client_api_parse(const char *name, ds_client_api *api) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, names[i])) {
            *api = (ds_client_api)i;
            return 0;
        }
    return -1;
}

const char *ds_client_api_name(ds_client_api api) { return names[api]; }

char *ds_client_api_endpoint(ds_client_api api, const char *base) { return ds_http_endpoint(base, paths[api]); }

ds_http_req *ds_client_api_req(ds_client_api api, const char *url, const char *api_key, const char *body, int stream,
                               ds_sse_cb on_event, void *ud, size_t max_body, double timeout_s) {
    int anthropic = api == DS_CLIENT_MESSAGES;
    ds_http_req *r = ds_http_req_new(url, anthropic ? NULL : api_key, body, stream, on_event, ud, max_body, timeout_s);
    if (r && anthropic &&
        ((api_key && ds_http_req_header(r, "x-api-key", api_key)) ||
         ds_http_req_header(r, "anthropic-version", "2023-06-01"))) {
        ds_http_req_free(r);
        return NULL;
    }
    return r;
}
