/* server_int.h - what http.c and completion.c share: the server state. */
#ifndef DS_SERVER_INT_H
#define DS_SERVER_INT_H

#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>

#include "engine/engine.h"
#include "loading/model_file.h"
#include "loading/vision_file.h"
#include "model/model.h"
#include "model/vision.h"
#include "jinja/jinja.h"
#include "server/metrics.h"
#include "server/server.h"
#include "grammar/vocab_index.h"
#include "server/grammar_cache.h"
#include "server/tool_grammar.h"
#include "tokenizer/tokenizer.h"

/* parsed grammars kept between requests (grammar_cache.h) */
#define DS_GRAMMAR_CACHE_BYTES ((size_t)64 << 20)

typedef struct ds_server {
    ds_server_config cfg;
    ds_model_file *file;
    ds_tokenizer *tok;
    ds_model *model;
    ds_vision_file *vision_file;   /* the tower's file (--mmproj, or found beside the model); NULL: none */
    ds_vision *vision;             /* the tower; NULL: images are refused */
    int32_t image_pad_id;          /* <|image_pad|>, -1 when the vocabulary has none */
    char media_dir[PATH_MAX];      /* --allowed-local-media-path, resolved ("": file:// refused) */
    ds_engine *eng;
    ds_jinja *tmpl;
    char model_name[256];
    char eos_text[64];
    char fingerprint[24];          /* system_fingerprint of every answer (ds_oai_fingerprint) */
    long created;                  /* when the server started: the model object's "created" */
    int ctx;                       /* longest prompt + completion */
    ds_call_form call_form;        /* how the template writes tool calls (what tool_choice required forces) */
    ds_vocab_index *vocab;         /* the tokenizer's tokens for grammar masks (every constrained answer) */
    ds_grammar_cache *grammars;    /* parsed grammars by constraint (grammar_cache.h) */
    int32_t keep_ids[4];           /* special tokens whose text the parsers need (<think>, <tool_call>...) */
    atomic_int ready;              /* model loaded, engine running */
    atomic_int draining;           /* SIGTERM seen: refuse new work */
    atomic_int in_flight;          /* completion requests not yet freed */
    atomic_ullong n_requests;      /* completion requests submitted (fault hook) */
    ds_metrics metrics;
    struct ds_kv_event_queue *kv_queue;   /* --kv-events-endpoint: what the engine tells the publisher */
    struct ds_kv_publisher *kv_pub;       /* sends it to routers (kv_publisher.h); NULL: no KV events */
    struct ds_conn_guard *guard;   /* closes slow and idle connections (conn_guard.h) */
} ds_server;

double ds_server_now(void);

#endif
