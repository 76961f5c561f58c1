/* metrics.h - the server's Prometheus counters and histograms (GET /metrics).
 *
 * Any thread records; the text is rendered with the engine's gauges (running,
 * waiting, pool usage, prefix cache) read at that moment. Names are
 * deltaserve:* with the vllm:* aliases routers read (README, "Metrics"). */
#ifndef DS_METRICS_H
#define DS_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "engine/engine.h"
#include "common/strbuf.h"

#define DS_HIST_MAX_BUCKETS 20

typedef struct {
    int n;
    double le[DS_HIST_MAX_BUCKETS];
    uint64_t count[DS_HIST_MAX_BUCKETS];   /* per bucket, not cumulative */
    uint64_t total;
    double sum;
} ds_histogram;

typedef enum {
    DS_ERRK_BAD_REQUEST = 0, DS_ERRK_AUTH, DS_ERRK_NOT_FOUND, DS_ERRK_TOO_LARGE, DS_ERRK_QUEUE_FULL,
    DS_ERRK_UNAVAILABLE, DS_ERRK_ENGINE, DS_ERRK_INTERNAL, DS_ERRK_COUNT
} ds_error_kind;

/* What vllm:cache_config_info says of the engine's KV cache, as vLLM's CacheConfig
 * labels name it (known once the engine exists). */
typedef struct {
    int known;                    /* 0: still loading (no cache_config_info line yet) */
    int block_size;               /* tokens per block: ds_engine_kv_block_size */
    int64_t num_gpu_blocks;       /* the KV pool's capacity in those blocks */
    int64_t kv_cache_size_tokens; /* the KV pool's capacity in tokens */
    size_t kv_cache_memory_bytes; /* the KV pool's budget (--kv-mb) */
    int enable_prefix_caching;
    int mamba_block_size;         /* hybrid: tokens between DeltaNet checkpoints; 0: no DeltaNet layers */
} ds_cache_info;

typedef struct {
    pthread_mutex_t mu;
    /* the engine="N" label of every line: this process's data-parallel rank (0 when not data
     * parallel, as vLLM labels its one engine) */
    int engine;
    ds_cache_info cache;
    ds_histogram ttft, itl, e2e;
    /* completion requests: once nothing is in flight, started = ok + aborted_by_client + rejected + failed */
    uint64_t requests_started, requests_ok, aborted_by_client, requests_rejected, requests_failed;
    uint64_t errors[DS_ERRK_COUNT];
    uint64_t prompt_tokens, generation_tokens;
    uint64_t grammar_hits, grammar_misses;   /* lookups in the grammar cache (grammar_cache.h) */
    struct ds_kv_publisher *kv_pub;          /* KV events' counters (kv_publisher.h); NULL: none */
} ds_metrics;

void ds_metrics_init(ds_metrics *m);
void ds_metrics_free(ds_metrics *m);
void ds_metrics_ttft(ds_metrics *m, double seconds);
void ds_metrics_itl(ds_metrics *m, double seconds);
/* A request that ended: e2e latency and its token counts. */
void ds_metrics_done(ds_metrics *m, double e2e_seconds, int prompt_tokens, int generation_tokens);
void ds_metrics_error(ds_metrics *m, ds_error_kind k);
void ds_metrics_client_abort(ds_metrics *m);
/* Outcomes of completion requests (each request ends in exactly one of
 * done, client_abort, rejected, failed). */
void ds_metrics_started(ds_metrics *m);
void ds_metrics_rejected(ds_metrics *m);   /* answered with a 4xx or 503 before generating */
void ds_metrics_failed(ds_metrics *m);     /* the engine or the server failed it (500, SSE error event) */
/* A constrained request looked its grammar up in the cache: hit (1) or parsed anew (0). */
void ds_metrics_grammar_lookup(ds_metrics *m, int hit);
/* The KV event publisher whose counters /metrics shows (NULL: none, before it stops). */
void ds_metrics_kv_publisher(ds_metrics *m, struct ds_kv_publisher *pub);
const char *ds_error_kind_name(ds_error_kind k);
/* Before serving: the engine label (a data-parallel rank; < 0: 0) and, once the engine exists,
 * its cache (NULL: not known yet). */
void ds_metrics_set_engine(ds_metrics *m, int engine, const ds_cache_info *cache);
/* Prometheus text format 0.0.4. st: the engine's stats (NULL while loading). */
void ds_metrics_render(ds_metrics *m, const ds_engine_stats *st, const char *model_name, ds_sb *out);

#endif
