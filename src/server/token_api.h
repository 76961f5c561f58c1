/* token_api.h - tokens over HTTP: POST /tokenize and POST /detokenize (the
 * request and response shapes of vLLM and llama-server), and
 * POST /v1/chat/completions/render and POST /v1/completions/render, which
 * answer with the exact token_ids the same body would run (what a
 * prefix-cache-aware router hashes). */
#ifndef DS_TOKEN_API_H
#define DS_TOKEN_API_H

#include <stddef.h>

#include "server/server_int.h"

typedef enum {
    DS_TOKEN_TOKENIZE = 0,
    DS_TOKEN_DETOKENIZE,
    DS_TOKEN_RENDER_CHAT,
    DS_TOKEN_RENDER_COMPLETION,
} ds_token_route;

/* Answers one request: returns the HTTP status and the body in *out (caller frees; an error in
 * OpenAI's shape for a 4xx/5xx). NULL *out: out of memory. */
int ds_token_api_answer(ds_server *s, ds_token_route route, const char *body, size_t len, char **out);

#endif
