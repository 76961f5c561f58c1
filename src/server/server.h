/* server.h - `deltaserve serve`: an OpenAI-compatible HTTP server over the
 * continuous batching engine.
 *
 * Threads: the main thread loads the model, then waits for SIGTERM/SIGINT;
 * one engine thread runs ds_engine_run and owns the model; libmicrohttpd runs
 * one thread per connection, which parses, renders the chat template,
 * tokenizes, submits, and turns the request's events into the answer. The
 * engine hands events to a request through a queue under the request's mutex
 * (completion.c); nothing else is shared but the engine's thread-safe calls. */
#ifndef DS_SERVER_H
#define DS_SERVER_H

#include <stddef.h>

#include "engine/engine.h"
#include "loading/model_file.h"

#define DS_MAX_MODEL_NAMES 16

typedef struct {
    const char *model_path;       /* required */
    ds_load_options load;         /* --mtp-model, --fp8-as */
    const char *host;             /* "127.0.0.1" */
    int port;                     /* 0: any free port (printed) */
    const char *api_key;          /* NULL: no authentication */
    /* the model ids clients may use (--served-model-name, repeated or a list); the first one is the id
     * answers carry; none: the model file's base name */
    const char *served_model_names[DS_MAX_MODEL_NAMES];
    int n_served_model_names;
    /* --chat-template: a template's text and where it came from (a file's path, or "inline"), used in
     * place of the model's; NULL: the model's own */
    const char *chat_template;
    const char *chat_template_origin;
    /* CORS (cors.h), as given: NULL origins: no CORS headers at all */
    const char *allowed_origins;
    const char *allowed_methods;
    const char *allowed_headers;
    ds_engine_params engine;
    int n_threads;                /* compute threads (0: one per core) */
    int ctx;                      /* 0: the model's trained context */
    size_t max_body_bytes;        /* larger bodies get 413 */
    int max_connections;          /* open connections (one thread each); past it the longest idle one is closed */
    int idle_timeout_s;           /* a connection with nothing coming in this long is closed */
    double header_timeout_s;      /* a request's headers must be complete this long after its first byte */
    /* test hooks: the chosen engine requests (one per choice, counted from 1)
     * get a fault (ds_request_params.fault) */
    int fault_after;              /* > 0: the Nth request's model call fails */
    int fault_every;              /* > 0: every Nth request's model call fails */
    int fault_at_token;           /* with the two above: the first call once this many tokens came */
    ds_fault_phase fault_phase;   /* with the two above: which call (DS_FAULT_ANY: the first one) */
    double drain_timeout_s;       /* SIGTERM: running requests get this long to finish */
} ds_server_config;

void ds_server_defaults(ds_server_config *c);
/* Serves until SIGTERM/SIGINT, then drains. Returns the process exit code. */
int ds_server_run(const ds_server_config *c);

#endif
