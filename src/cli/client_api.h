/* client_api.h - which of the server's APIs a client command (`canary`,
 * `bench-serve`) speaks: OpenAI chat completions, OpenAI Responses or
 * Anthropic Messages. Decides the endpoint and how the key travels
 * (Messages: `x-api-key` and `anthropic-version`, as Anthropic's clients send
 * them; the others: `Authorization: Bearer`). */
#ifndef DS_CLIENT_API_H
#define DS_CLIENT_API_H

#include "cli/http_client.h"

typedef enum { DS_CLIENT_CHAT, DS_CLIENT_RESPONSES, DS_CLIENT_MESSAGES } ds_client_api;

/* "chat", "responses" or "messages". Returns 0, or -1 for any other name. */
int ds_client_api_parse(const char *name, ds_client_api *api);
const char *ds_client_api_name(ds_client_api api);
/* The endpoint for a base URL (see ds_http_endpoint), malloc'd. */
char *ds_client_api_endpoint(ds_client_api api, const char *base);
/* ds_http_req_new with the API's headers. */
ds_http_req *ds_client_api_req(ds_client_api api, const char *url, const char *api_key, const char *body, int stream,
                               ds_sse_cb on_event, void *ud, size_t max_body, double timeout_s);

#endif
