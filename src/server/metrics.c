/* metrics.c - see metrics.h. */
#include "server/metrics.h"

#include "server/kv_publisher.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static const double LAT_BUCKETS[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                     0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
static const double ITL_BUCKETS[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15,
                                     0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0};

static void hist_init(ds_histogram *h, const double *le, int n) {
    memset(h, 0, sizeof *h);
    h->n = n;
    memcpy(h->le, le, (size_t)n * sizeof *le);
}

static void hist_add(ds_histogram *h, double v) {
    int i = 0;
    while (i < h->n && v > h->le[i]) i++;
    if (i < h->n) h->count[i]++;
    h->total++;
    h->sum += v;
}

void ds_metrics_init(ds_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    hist_init(&m->ttft, LAT_BUCKETS, (int)(sizeof LAT_BUCKETS / sizeof *LAT_BUCKETS));
    hist_init(&m->e2e, LAT_BUCKETS, (int)(sizeof LAT_BUCKETS / sizeof *LAT_BUCKETS));
    hist_init(&m->itl, ITL_BUCKETS, (int)(sizeof ITL_BUCKETS / sizeof *ITL_BUCKETS));
}

void ds_metrics_free(ds_metrics *m) { pthread_mutex_destroy(&m->mu); }

void ds_metrics_set_engine(ds_metrics *m, int engine, const ds_cache_info *cache) {
    pthread_mutex_lock(&m->mu);
    m->engine = engine > 0 ? engine : 0;
    if (cache) m->cache = *cache, m->cache.known = 1;
    pthread_mutex_unlock(&m->mu);
}

#define LOCKED(m, stmt) do { pthread_mutex_lock(&(m)->mu); stmt; pthread_mutex_unlock(&(m)->mu); } while (0)

void ds_metrics_ttft(ds_metrics *m, double s) { LOCKED(m, hist_add(&m->ttft, s)); }
void ds_metrics_itl(ds_metrics *m, double s) { LOCKED(m, hist_add(&m->itl, s)); }
void ds_metrics_done(ds_metrics *m, double e2e, int prompt_tokens, int generation_tokens) {
    LOCKED(m, {
        hist_add(&m->e2e, e2e);
        m->requests_ok++;
        m->prompt_tokens += (uint64_t)prompt_tokens;
        m->generation_tokens += (uint64_t)generation_tokens;
    });
}
void ds_metrics_error(ds_metrics *m, ds_error_kind k) { LOCKED(m, m->errors[k]++); }
void ds_metrics_client_abort(ds_metrics *m) { LOCKED(m, m->aborted_by_client++); }
void ds_metrics_started(ds_metrics *m) { LOCKED(m, m->requests_started++); }
void ds_metrics_rejected(ds_metrics *m) { LOCKED(m, m->requests_rejected++); }
void ds_metrics_failed(ds_metrics *m) { LOCKED(m, m->requests_failed++); }
void ds_metrics_grammar_lookup(ds_metrics *m, int hit) { LOCKED(m, (hit ? m->grammar_hits++ : m->grammar_misses++)); }
void ds_metrics_kv_publisher(ds_metrics *m, struct ds_kv_publisher *pub) { LOCKED(m, m->kv_pub = pub); }

const char *ds_error_kind_name(ds_error_kind k) {
    static const char *const N[DS_ERRK_COUNT] = {"bad_request", "auth", "not_found", "too_large",
                                                 "queue_full", "unavailable", "engine", "internal"};
    return k < DS_ERRK_COUNT ? N[k] : "unknown";
}

static void hist_render(ds_sb *o, const char *name, const char *help, const ds_histogram *h, const char *lbl) {
    ds_sb_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->count[i];
        ds_sb_printf(o, "%s_bucket{%s,le=\"%g\"} %llu\n", name, lbl, h->le[i], (unsigned long long)cum);
    }
    ds_sb_printf(o, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, lbl, (unsigned long long)h->total);
    ds_sb_printf(o, "%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name, lbl, h->sum, name, lbl,
                 (unsigned long long)h->total);
}

static void metric(ds_sb *o, const char *name, const char *type, const char *help, const char *lbl, double v) {
    ds_sb_printf(o, "# HELP %s %s\n# TYPE %s %s\n%s{%s} %.10g\n", name, help, name, type, name, lbl, v);
}

/* `model_name="..."` with the value escaped as the text format asks (a backslash,
 * a double quote and a newline would otherwise end the label or the line);
 * a name too long for the buffer is cut between escapes, never inside one. */
static void name_label(char *dst, size_t cap, const char *name) {
    size_t n = (size_t)snprintf(dst, cap, "model_name=\"");
    for (const char *p = name; *p && n + 3 < cap; p++) {
        if (*p == '\\' || *p == '"') dst[n++] = '\\', dst[n++] = *p;
        else if (*p == '\n') dst[n++] = '\\', dst[n++] = 'n';
        else dst[n++] = *p;
    }
    dst[n++] = '"';
    dst[n] = '\0';
}

/* The routers' view of the engine (llm-d's endpoint picker reads both): vllm:cache_config_info, a
 * gauge of 1 whose labels are vLLM's CacheConfig fields we have a real value for, spelled as vLLM
 * writes them (Python's str: "True", "None"), and vllm:lora_requests_info, whose value is when its
 * labels were last true (vLLM sets it to the current time; the picker takes the latest series).
 * This server loads no LoRA adapters: max_lora 0, none running or waiting. */
static void router_info(ds_sb *o, const ds_metrics *m) {
    const ds_cache_info *c = &m->cache;
    if (c->known) {
        char mamba[24] = "None";
        if (c->mamba_block_size > 0) snprintf(mamba, sizeof mamba, "%d", c->mamba_block_size);
        ds_sb_printf(o, "# HELP vllm:cache_config_info Information of the KV cache (vLLM's CacheConfig labels).\n"
                        "# TYPE vllm:cache_config_info gauge\n"
                        "vllm:cache_config_info{block_size=\"%d\",cache_dtype=\"float32\",enable_prefix_caching=\"%s\","
                        "engine=\"%d\",is_attention_free=\"False\",kv_cache_memory_bytes=\"%zu\","
                        "kv_cache_size_tokens=\"%lld\",mamba_block_size=\"%s\",num_gpu_blocks=\"%lld\","
                        "sliding_window=\"None\"} 1\n",
                     c->block_size, c->enable_prefix_caching ? "True" : "False", m->engine, c->kv_cache_memory_bytes,
                     (long long)c->kv_cache_size_tokens, mamba, (long long)c->num_gpu_blocks);
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    ds_sb_printf(o, "# HELP vllm:lora_requests_info Running stats on LoRA requests (this server loads no adapters).\n"
                    "# TYPE vllm:lora_requests_info gauge\n"
                    "vllm:lora_requests_info{max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} "
                    "%.3f\n", (double)now.tv_sec + (double)now.tv_nsec * 1e-9);
}

void ds_metrics_render(ds_metrics *m, const ds_engine_stats *st, const char *model_name, ds_sb *o) {
    ds_engine_stats z = {0};
    if (!st) st = &z;
    /* every per-engine line: model_name and engine (vLLM labels its engines "0", "1", ... even when
     * there is one) */
    char name[300], lbl[340], lbl_c[350];
    name_label(name, sizeof name, model_name);
    double kv = st->kv_pages_total ? (double)st->kv_pages_used / st->kv_pages_total : 0.0;
    double state = st->state_slots_total ? (double)st->state_slots_used / st->state_slots_total : 0.0;
    pthread_mutex_lock(&m->mu);
    snprintf(lbl, sizeof lbl, "%s,engine=\"%d\"", name, m->engine);
    snprintf(lbl_c, sizeof lbl_c, "%s,", lbl);
    /* engine gauges and counters */
    metric(o, "deltaserve:num_requests_running", "gauge", "Requests being computed.", lbl, st->running);
    metric(o, "deltaserve:num_requests_waiting", "gauge", "Requests waiting for memory or a slot.", lbl, st->waiting);
    metric(o, "deltaserve:kv_pages_used", "gauge", "KV cache pages in use (running and cached).", lbl, st->kv_pages_used);
    metric(o, "deltaserve:kv_pages_total", "gauge", "KV cache pages in the pool.", lbl, st->kv_pages_total);
    metric(o, "deltaserve:kv_pages_cached", "gauge", "KV pages held by the prefix cache (all pages in use when idle).",
           lbl, st->kv_pages_cached);
    metric(o, "deltaserve:kv_cache_usage_perc", "gauge", "Fraction of KV pages in use (0..1).", lbl, kv);
    metric(o, "deltaserve:state_slots_used", "gauge", "DeltaNet state slots in use.", lbl, st->state_slots_used);
    metric(o, "deltaserve:state_slots_total", "gauge", "DeltaNet state slots in the pool.", lbl, st->state_slots_total);
    metric(o, "deltaserve:state_usage_perc", "gauge", "Fraction of DeltaNet state slots in use (0..1).", lbl, state);
    metric(o, "deltaserve:checkpoint_slots_used", "gauge", "DeltaNet checkpoint slots in use.", lbl,
           st->checkpoint_slots_used);
    metric(o, "deltaserve:checkpoints_cached", "gauge", "DeltaNet checkpoints held by the prefix cache.", lbl,
           st->checkpoints_cached);
    metric(o, "deltaserve:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", lbl,
           (double)st->prefix_query_tokens);
    metric(o, "deltaserve:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.", lbl,
           (double)st->prefix_hit_tokens);
    metric(o, "deltaserve:checkpoint_restores_total", "counter", "DeltaNet checkpoints restored.", lbl,
           (double)st->checkpoint_restores);
    metric(o, "deltaserve:num_preemptions_total", "counter", "Requests preempted for memory.", lbl, (double)st->preemptions);
    metric(o, "deltaserve:prompt_tokens_total", "counter", "Prompt tokens of finished requests.", lbl,
           (double)m->prompt_tokens);
    metric(o, "deltaserve:generation_tokens_total", "counter", "Generated tokens of finished requests.", lbl,
           (double)m->generation_tokens);
    metric(o, "deltaserve:engine_generated_tokens_total", "counter", "Tokens sampled by the engine.", lbl,
           (double)st->generated_tokens);
    metric(o, "deltaserve:requests_started_total", "counter",
           "Completion requests received (success + client aborts + rejected + failed, once none is in flight).", lbl,
           (double)m->requests_started);
    metric(o, "deltaserve:request_success_total", "counter", "Requests answered successfully.", lbl,
           (double)m->requests_ok);
    metric(o, "deltaserve:request_client_aborts_total", "counter", "Requests ended by a client disconnect.", lbl,
           (double)m->aborted_by_client);
    /* speculative decoding (MTP drafts verified by the model) */
    double acc_rate = st->spec_drafted ? (double)st->spec_accepted / (double)st->spec_drafted : 0.0;
    double acc_len = st->spec_verify_steps ? (double)st->spec_accepted / (double)st->spec_verify_steps : 0.0;
    metric(o, "deltaserve:spec_decode_num_drafts_total", "counter", "Verify steps (drafts of one sequence checked at once).",
           lbl, (double)st->spec_verify_steps);
    metric(o, "deltaserve:spec_decode_num_draft_tokens_total", "counter", "Draft tokens proposed by the MTP head.", lbl,
           (double)st->spec_drafted);
    metric(o, "deltaserve:spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.", lbl,
           (double)st->spec_accepted);
    metric(o, "deltaserve:spec_decode_acceptance_rate", "gauge", "Accepted / drafted tokens since start (0..1).", lbl,
           acc_rate);
    metric(o, "deltaserve:spec_decode_mean_accepted_length", "gauge",
           "Drafts accepted per verify step since start (each step also yields one token of the model's own).", lbl,
           acc_len);
    metric(o, "deltaserve:spec_decode_draft_failures_total", "counter",
           "MTP draft calls that failed (their requests decoded that step without drafts; also logged).", lbl,
           (double)st->spec_draft_failures);
    /* what the per-step speculation plan decided */
    metric(o, "deltaserve:spec_plan_steps_total", "counter",
           "Steps whose drafts the batch policy planned (some decoding sequence could have drafted).", lbl,
           (double)st->spec_plan_steps);
    metric(o, "deltaserve:spec_plan_draft_steps_total", "counter", "Planned steps in which some sequence drafted.", lbl,
           (double)st->spec_plan_draft_steps);
    metric(o, "deltaserve:spec_plan_sequences_total", "counter",
           "Sequences that could have drafted, summed over planned steps.", lbl, (double)st->spec_plan_seqs);
    metric(o, "deltaserve:spec_plan_drafting_sequences_total", "counter",
           "Sequences the plan gave drafts, summed over planned steps.", lbl, (double)st->spec_plan_drafting_seqs);
    /* accepted per draft position, as vLLM counts them: position p is accepted in every step that
     * kept more than p drafts */
    ds_sb_printf(o, "# HELP deltaserve:spec_decode_num_accepted_tokens_per_pos_total Drafts accepted, by position.\n"
                    "# TYPE deltaserve:spec_decode_num_accepted_tokens_per_pos_total counter\n");
    for (int p = 0; p < DS_MAX_SPEC; p++) {
        int64_t n = 0;
        for (int a = p + 1; a <= DS_MAX_SPEC; a++) n += st->spec_accept_hist[a];
        ds_sb_printf(o, "deltaserve:spec_decode_num_accepted_tokens_per_pos_total{%sposition=\"%d\"} %lld\n", lbl_c, p,
                     (long long)n);
    }
    metric(o, "deltaserve:requests_rejected_total", "counter", "Completion requests refused with a 4xx or 503.", lbl,
           (double)m->requests_rejected);
    metric(o, "deltaserve:requests_failed_total", "counter",
           "Completion requests that failed after they were accepted (500 or an SSE error event).", lbl,
           (double)m->requests_failed);
    metric(o, "deltaserve:grammar_cache_hits_total", "counter",
           "Constrained requests whose grammar was in the grammar cache.", lbl, (double)m->grammar_hits);
    metric(o, "deltaserve:grammar_cache_misses_total", "counter",
           "Constrained requests whose grammar was compiled and parsed.", lbl, (double)m->grammar_misses);
    ds_sb_printf(o, "# HELP deltaserve:request_errors_total Requests refused or failed, by kind.\n"
                    "# TYPE deltaserve:request_errors_total counter\n");
    for (int k = 0; k < DS_ERRK_COUNT; k++)
        ds_sb_printf(o, "deltaserve:request_errors_total{%skind=\"%s\"} %llu\n", lbl_c,
                     ds_error_kind_name((ds_error_kind)k), (unsigned long long)m->errors[k]);
    if (m->kv_pub) {   /* KV events for routers (--kv-events-endpoint) */
        ds_kv_publisher_stats ks;
        ds_kv_publisher_stats_get(m->kv_pub, &ks);
        metric(o, "deltaserve:kv_events_queued_total", "counter",
               "KV cache events the engine queued for the publisher (sent or in flight).", lbl,
               (double)ks.events_queued);
        metric(o, "deltaserve:kv_events_published_total", "counter",
               "KV cache events of the engine sent to subscribers (BlockStored, BlockRemoved, AllBlocksCleared).",
               lbl, (double)ks.events_sent);
        metric(o, "deltaserve:kv_events_dropped_total", "counter",
               "KV cache events lost because the engine-to-publisher queue was full (--kv-events-queue-mb).", lbl,
               (double)ks.events_dropped);
        metric(o, "deltaserve:kv_events_last_sequence", "gauge",
               "Sequence number of the last KV event batch sent (-1: none yet).", lbl,
               (double)ks.batches_sent - 1.0);
    }
    hist_render(o, "deltaserve:time_to_first_token_seconds", "Time to first token.", &m->ttft, lbl);
    hist_render(o, "deltaserve:inter_token_latency_seconds", "Time between streamed tokens.", &m->itl, lbl);
    hist_render(o, "deltaserve:e2e_request_latency_seconds", "End-to-end request latency.", &m->e2e, lbl);
    /* the names vLLM uses, for routers such as llm-d's endpoint picker */
    metric(o, "vllm:num_requests_running", "gauge", "Alias of deltaserve:num_requests_running.", lbl, st->running);
    metric(o, "vllm:num_requests_waiting", "gauge", "Alias of deltaserve:num_requests_waiting.", lbl, st->waiting);
    metric(o, "vllm:gpu_cache_usage_perc", "gauge", "Alias of deltaserve:kv_cache_usage_perc.", lbl, kv);
    metric(o, "vllm:kv_cache_usage_perc", "gauge", "Alias of deltaserve:kv_cache_usage_perc.", lbl, kv);
    metric(o, "vllm:prefix_cache_queries_total", "counter", "Alias of deltaserve:prefix_cache_queries_total.", lbl,
           (double)st->prefix_query_tokens);
    metric(o, "vllm:prefix_cache_hits_total", "counter", "Alias of deltaserve:prefix_cache_hits_total.", lbl,
           (double)st->prefix_hit_tokens);
    metric(o, "vllm:gpu_prefix_cache_queries_total", "counter", "Alias of deltaserve:prefix_cache_queries_total.", lbl,
           (double)st->prefix_query_tokens);
    metric(o, "vllm:gpu_prefix_cache_hits_total", "counter", "Alias of deltaserve:prefix_cache_hits_total.", lbl,
           (double)st->prefix_hit_tokens);
    metric(o, "vllm:prompt_tokens_total", "counter", "Alias of deltaserve:prompt_tokens_total.", lbl,
           (double)m->prompt_tokens);
    metric(o, "vllm:generation_tokens_total", "counter", "Alias of deltaserve:generation_tokens_total.", lbl,
           (double)m->generation_tokens);
    metric(o, "vllm:spec_decode_num_drafts_total", "counter", "Alias of deltaserve:spec_decode_num_drafts_total.", lbl,
           (double)st->spec_verify_steps);
    metric(o, "vllm:spec_decode_num_draft_tokens_total", "counter",
           "Alias of deltaserve:spec_decode_num_draft_tokens_total.", lbl, (double)st->spec_drafted);
    metric(o, "vllm:spec_decode_num_accepted_tokens_total", "counter",
           "Alias of deltaserve:spec_decode_num_accepted_tokens_total.", lbl, (double)st->spec_accepted);
    hist_render(o, "vllm:time_to_first_token_seconds", "Alias of deltaserve:time_to_first_token_seconds.", &m->ttft, lbl);
    hist_render(o, "vllm:e2e_request_latency_seconds", "Alias of deltaserve:e2e_request_latency_seconds.", &m->e2e, lbl);
    router_info(o, m);
    pthread_mutex_unlock(&m->mu);
}
