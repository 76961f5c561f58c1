/* token_api.c - see token_api.h. */
#include "server/token_api.h"

#include "server/openai_response.h"

int ds_token_api_answer(ds_server *s, ds_token_route route, const char *body, size_t len, char **out) {
    (void)s, (void)route, (void)body, (void)len;
    *out = ds_oai_error_json("invalid_request_error", NULL, NULL, "the token routes are not implemented yet");
    return 501;
}
