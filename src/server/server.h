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
#define DS_DEFAULT_MAX_IMAGES 16                      /* --limit-mm-per-prompt */
#define DS_DEFAULT_VISION_BYTES ((size_t)1024 << 20)  /* --vision-memory */

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
    int ctx;                      /* 0: the model's context (ds_model_context_limit) */
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
    /* images (the tower itself: load.mmproj_path / load.no_mmproj) */
    size_t vision_bytes;          /* --vision-memory: images being encoded hold at most this at once */
    int64_t max_image_pixels;     /* --max-image-pixels: a decoded image's width x height, at most */
    size_t max_image_bytes;       /* --max-image-mb: an encoded image's size, at most */
    int max_images;               /* --limit-mm-per-prompt: images per request, at most */
    const char *allowed_local_media_path;  /* file:// URLs under this directory; NULL: refused */
    const char *allowed_media_domains;     /* http(s) URLs from these hosts (comma list, "*"); NULL: refused */
    double media_timeout_s;       /* --media-timeout: an http(s) image fetch, at most */
    /* past one machine (README "Scaling out") */
    const char *kv_events_endpoint;         /* --kv-events-endpoint: ZeroMQ PUB to bind; NULL: no KV events */
    const char *kv_events_replay_endpoint;  /* --kv-events-replay-endpoint: ROUTER to bind; NULL: no replay */
    int kv_events_array;                    /* --kv-events-format array: the older positional events */
    size_t kv_events_queue_bytes;           /* the engine-to-publisher ring */
    int data_parallel_size;                 /* --data-parallel N: N engines (processes) on one port; 1: one */
    int data_parallel_rank;                 /* this process's rank, 0..N-1 (events, metrics); -1: not data parallel */
    int reuse_port;                         /* SO_REUSEPORT on the listening socket (data parallel) */
    /* a rank of --data-parallel: its supervisor's pid, whose SIGTERM/SIGINT are counted apart from
     * others' (a process-group signal reaches the rank from both: one stop, not two); 0: none */
    int supervisor_pid;
} ds_server_config;

void ds_server_defaults(ds_server_config *c);
/* Serves until SIGTERM/SIGINT, then drains. Returns the process exit code. */
int ds_server_run(const ds_server_config *c);

#endif
