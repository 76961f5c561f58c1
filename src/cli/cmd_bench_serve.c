/* cmd_bench_serve.c - `deltaserve bench-serve URL`: a client-side serving
 * benchmark of an OpenAI-compatible server (chat or text completions,
 * --endpoint; or the same workload through the Responses or Anthropic
 * Messages API, --api, whose text deltas and end events play the chunks'
 * and [DONE]'s parts), measured the way
 * `vllm bench serve` measures (docs: serving-notes.md, section 2):
 *   TTFT  send -> first streamed chunk carrying text (content or reasoning);
 *   TPOT  per request (E2E - TTFT) / (output tokens - 1);
 *   ITL   gaps between consecutive text chunks, pooled over all requests;
 *   E2E   send -> end of the response;
 *   throughput: completed / duration, output tokens / duration,
 *   (input + output tokens) / duration, duration = first send -> last end.
 * Token counts come from the usage chunk (stream_options.include_usage), or
 * from the number of text chunks and prompt words when the server sends none.
 *
 * Workloads: `random` (prompts of --input-len random token-like words) and
 * `shared-prefix` (a common prefix of --prefix-len words, one per group, plus
 * --input-len random words per request). Load: Poisson arrivals at
 * --request-rate (default: all at once), at most --concurrency in flight.
 * Every request streams with max_tokens = --output-len and, when the server
 * accepts it (checked by a first test request), `ignore_eos: true`.
 *
 * All requests run on one thread over a libcurl multi handle. A request that
 * fails (transport error, HTTP status, malformed stream, no [DONE], an error
 * event, finish_reason other than stop/length, no text) is counted as failed
 * and reported with its reason; the exit code is 1 when any failed. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/client_api.h"
#include "cli/commands.h"
#include "cli/http_client.h"
#include "server/json_text.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: deltaserve bench-serve URL [options]\n"
            "  URL                  the server, e.g. http://127.0.0.1:8080 (or .../v1)\n"
            "  --model NAME         model name (default: the first of GET /v1/models)\n"
            "  --api-key KEY        sent as 'Authorization: Bearer KEY'\n"
            "  --workload W         random (default) or shared-prefix\n"
            "  --num-prompts N      requests to send (default 100)\n"
            "  --input-len N        random words per prompt (default 128)\n"
            "  --output-len N       max_tokens of each request (default 128)\n"
            "  --prefix-len N       words of the shared prefix (default 256 for shared-prefix, else 0)\n"
            "  --prefix-groups G    distinct shared prefixes, used in turn (default 1)\n"
            "  --request-rate R     Poisson arrivals, requests/s (default inf: all at once)\n"
            "  --concurrency C      at most C requests in flight (default: no limit)\n"
            "  --seed S             seed of the prompts and arrival times (default 0)\n"
            "  --no-ignore-eos      never send ignore_eos\n"
            "  --endpoint E         chat (default: /v1/chat/completions) or completions (/v1/completions)\n"
            "  --api A              chat (default), responses (/v1/responses) or messages (Anthropic's\n"
            "                       /v1/messages, key as x-api-key): the same workload through that API\n"
            "  --thinking on|off    ask for thinking on or off in the API's words (default: not sent)\n"
            "  --temperature T      sent with every request (default: not sent, the server's default)\n"
            "  --timeout S          seconds allowed per request (default 600)\n"
            "  --json               print the results as one JSON object\n"
            "  --svg FILE           write a plot of the latency percentiles\n"
            "Exit code 1 when any request failed (each failure is reported), 2 for bad options.\n");
}

/* ------------------------------------------------------------------------ */
/* Prompts                                                                   */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { return (double)(splitmix(s) >> 11) * 0x1.0p-53; }

/* Appends n random token-like words ("vokar", "tisel", ...) to buf. */
static void add_words(char *buf, size_t *len, long n, uint64_t *rng) {
    static const char *const on[] = {"b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch", "st"};
    static const char *const nu[] = {"a", "e", "i", "o", "u", "ai", "ou"};
    static const char *const co[] = {"", "n", "r", "s", "l", "k", "th"};
    for (long w = 0; w < n; w++) {
        if (*len) buf[(*len)++] = ' ';
        int syl = 1 + (int)(splitmix(rng) % 3);
        for (int k = 0; k < syl; k++) {
            const char *parts[3] = {on[splitmix(rng) % 16], nu[splitmix(rng) % 7], co[splitmix(rng) % 7]};
            for (int p = 0; p < 3; p++) {
                size_t l = strlen(parts[p]);
                memcpy(buf + *len, parts[p], l);
                *len += l;
            }
        }
    }
    buf[*len] = '\0';
}

#define MAX_WORD 16 /* bytes a word can take, with its space (3 syllables of at most 5) */

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */

typedef struct {
    double *v;
    size_t n, cap;
} dvec;

static int dvec_push(dvec *d, double x) {
    if (d->n == d->cap) {
        size_t c = d->cap ? d->cap * 2 : 64;
        double *p = realloc(d->v, c * sizeof *p);
        if (!p) return -1;
        d->v = p;
        d->cap = c;
    }
    d->v[d->n++] = x;
    return 0;
}

typedef struct {
    ds_http_req *r;
    long input_words;
    double t_first, t_last; /* first and last text chunk (0: none yet) */
    int text_chunks, done, after_done, non_json, error_events, finish_count, usage_count;
    char finish[32];
    long usage_prompt, usage_completion;
    char err[200];
    dvec itl;
    int oom;
} req_state;

static void text_chunk(req_state *s, double t) {
    if (s->text_chunks++ == 0) s->t_first = t;
    else if (dvec_push(&s->itl, t - s->t_last)) s->oom = 1;
    s->t_last = t;
}

static void set_finish(req_state *s, const char *f) {
    if (s->finish_count++ == 0) snprintf(s->finish, sizeof s->finish, "%s", f);
}

/* What the Responses and Messages streams share: every event's data is a JSON
 * object with a "type". Returns that type (*j holds the object; caller
 * decrefs), or NULL for an event counted here: data without a type, or an
 * error event. */
static const char *typed_event(req_state *s, const char *event, const char *data, size_t len, json_t **j) {
    if (s->done) s->after_done++;
    *j = ds_json_parse(data, len, NULL, 0);
    const json_t *type = json_object_get(*j, "type");
    const char *ty = json_is_string(type) ? json_string_value(type) : NULL;
    if (!ty) {
        if (s->non_json++ == 0) snprintf(s->err, sizeof s->err, "data is not a JSON object with a type: %.120s", data);
        return NULL;
    }
    if (!strcmp(ty, "error") || !strcmp(event, "error")) {
        if (s->error_events++ == 0) snprintf(s->err, sizeof s->err, "error event: %.150s", data);
        return NULL;
    }
    return ty;
}

/* OpenAI Responses events: text from output_text / reasoning deltas, the end
 * and usage from response.completed / .incomplete (.failed: a failure). */
static void on_responses_event(void *ud, const char *event, const char *data, size_t len, double t) {
    req_state *s = ud;
    json_t *j;
    const char *ty = typed_event(s, event, data, len, &j);
    if (!ty) {
        json_decref(j);
        return;
    }
    if (!strcmp(ty, "response.output_text.delta") || !strcmp(ty, "response.reasoning_text.delta") ||
        !strcmp(ty, "response.reasoning_summary_text.delta")) {
        if (json_string_length(json_object_get(j, "delta"))) text_chunk(s, t);
    } else if (!strcmp(ty, "response.completed") || !strcmp(ty, "response.incomplete") || !strcmp(ty, "response.failed")) {
        const json_t *resp = json_object_get(j, "response");
        const json_t *st = json_object_get(resp, "status");
        s->done++;
        set_finish(s, ds_json_str_is(st, "completed") ? "stop"
                      : ds_json_str_is(st, "incomplete") ? "length"
                      : json_is_string(st) ? json_string_value(st) : "(no status)");
        const json_t *u = json_object_get(resp, "usage");
        if (json_is_object(u) && s->usage_count++ == 0) {
            const json_t *p = json_object_get(u, "input_tokens"), *c = json_object_get(u, "output_tokens");
            s->usage_prompt = json_is_number(p) ? (long)json_number_value(p) : -1;
            s->usage_completion = json_is_number(c) ? (long)json_number_value(c) : -1;
        }
    }
    json_decref(j);
}

/* Anthropic Messages events: text from text / thinking deltas, input tokens
 * from message_start, stop_reason and output tokens from message_delta, the
 * end at message_stop. */
static void on_messages_event(void *ud, const char *event, const char *data, size_t len, double t) {
    req_state *s = ud;
    json_t *j;
    const char *ty = typed_event(s, event, data, len, &j);
    if (!ty) {
        json_decref(j);
        return;
    }
    if (!strcmp(ty, "message_start")) {
        const json_t *p = json_object_get(json_object_get(json_object_get(j, "message"), "usage"), "input_tokens");
        s->usage_prompt = json_is_number(p) ? (long)json_number_value(p) : -1;
    } else if (!strcmp(ty, "content_block_delta")) {
        const json_t *d = json_object_get(j, "delta");
        if (json_string_length(json_object_get(d, "text")) || json_string_length(json_object_get(d, "thinking")))
            text_chunk(s, t);
    } else if (!strcmp(ty, "message_delta")) {
        const json_t *sr = json_object_get(json_object_get(j, "delta"), "stop_reason");
        const json_t *c = json_object_get(json_object_get(j, "usage"), "output_tokens");
        set_finish(s, ds_json_str_is(sr, "end_turn") || ds_json_str_is(sr, "stop_sequence") ? "stop"
                      : ds_json_str_is(sr, "max_tokens") ? "length"
                      : json_is_string(sr) ? json_string_value(sr) : "(no stop_reason)");
        s->usage_completion = json_is_number(c) ? (long)json_number_value(c) : -1;
        s->usage_count = 1;
    } else if (!strcmp(ty, "message_stop")) {
        s->done++;
    }
    json_decref(j);
}

/* OpenAI chat and text completion chunks. */
static void on_event(void *ud, const char *event, const char *data, size_t len, double t) {
    req_state *s = ud;
    if (s->done) s->after_done++;
    if (!strcmp(event, "error")) {
        if (s->error_events++ == 0) snprintf(s->err, sizeof s->err, "error event: %.150s", data);
        return;
    }
    if (len == 6 && !strcmp(data, "[DONE]")) {
        s->done++;
        return;
    }
    json_t *j = ds_json_parse(data, len, NULL, 0);
    if (!json_is_object(j)) {
        if (s->non_json++ == 0) snprintf(s->err, sizeof s->err, "data is not a JSON object: %.120s", data);
        json_decref(j);
        return;
    }
    const json_t *e = json_object_get(j, "error");
    if (e && !json_is_null(e) && s->error_events++ == 0) {
        const json_t *m = json_object_get(e, "message");
        snprintf(s->err, sizeof s->err, "error chunk: %.150s", json_is_string(m) ? json_string_value(m) : "(no message)");
    }
    const json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    if (ch) {
        const json_t *delta = json_object_get(ch, "delta");
        const json_t *c = delta ? json_object_get(delta, "content")
                               : json_object_get(ch, "text"); /* completions chunk */
        const json_t *rc = json_object_get(delta, "reasoning_content");
        if (!rc) rc = json_object_get(delta, "reasoning");
        if (json_string_length(c) || json_string_length(rc)) text_chunk(s, t);
        const json_t *fr = json_object_get(ch, "finish_reason");
        if (fr && !json_is_null(fr) && s->finish_count++ == 0)
            snprintf(s->finish, sizeof s->finish, "%s", json_is_string(fr) ? json_string_value(fr) : "(not a string)");
    }
    const json_t *u = json_object_get(j, "usage");
    if (json_is_object(u) && s->usage_count++ == 0) {
        const json_t *p = json_object_get(u, "prompt_tokens");
        const json_t *c = json_object_get(u, "completion_tokens");
        s->usage_prompt = json_is_number(p) ? (long)json_number_value(p) : -1;
        s->usage_completion = json_is_number(c) ? (long)json_number_value(c) : -1;
    }
    json_decref(j);
}

/* Why a finished request does not count as completed, or NULL when it does. */
static const char *failure(req_state *s, char *detail, size_t n) {
    ds_http_req *r = s->r;
    if (r->rc != CURLE_OK || r->status != 200 || r->oom) {
        ds_http_describe_error(r, detail, n);
        return r->rc == CURLE_OPERATION_TIMEDOUT ? "timeout" : r->rc != CURLE_OK ? "transport error" : "HTTP status";
    }
    if (s->oom) return snprintf(detail, n, "out of memory"), "out of memory";
    if (s->error_events) return snprintf(detail, n, "%s", s->err), "error event";
    if (r->sse_problems) return snprintf(detail, n, "%s", r->sse_problem), "malformed SSE";
    if (s->non_json) return snprintf(detail, n, "%s", s->err), "malformed SSE";
    if (s->finish_count == 0) return snprintf(detail, n, "no chunk with a finish_reason"), "finish_reason missing";
    if (strcmp(s->finish, "stop") && strcmp(s->finish, "length"))
        return snprintf(detail, n, "finish_reason \"%s\"", s->finish), "bad finish_reason";
    if (!s->done || s->after_done)
        return snprintf(detail, n, "%s", s->done ? "events after the stream's end" : "stream ended without [DONE], "
                                                   "response.completed or message_stop"), "no [DONE]";
    if (s->text_chunks == 0) return snprintf(detail, n, "no chunk carried text"), "empty output";
    if (s->usage_count && (s->usage_prompt <= 0 || s->usage_completion <= 0))
        return snprintf(detail, n, "usage prompt_tokens=%ld completion_tokens=%ld", s->usage_prompt, s->usage_completion),
               "bad usage";
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Statistics                                                                */

typedef struct {
    size_t n;
    double mean, std, min, p50, p90, p95, p99, max;
} stats;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Percentile with linear interpolation between closest ranks (numpy's default). */
static double pct(const double *v, size_t n, double q) {
    double pos = q / 100.0 * (double)(n - 1);
    size_t lo = (size_t)pos;
    if (lo + 1 >= n) return v[n - 1];
    return v[lo] + (pos - (double)lo) * (v[lo + 1] - v[lo]);
}

/* Sorts v; values in seconds, stats in milliseconds. */
static stats compute(double *v, size_t n) {
    stats s = {.n = n};
    if (!n) return s;
    qsort(v, n, sizeof *v, cmp_double);
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    s.mean = sum / (double)n;
    for (size_t i = 0; i < n; i++) sq += (v[i] - s.mean) * (v[i] - s.mean);
    s.std = sqrt(sq / (double)n) * 1e3;
    s.mean *= 1e3;
    s.min = v[0] * 1e3;
    s.max = v[n - 1] * 1e3;
    s.p50 = pct(v, n, 50) * 1e3;
    s.p90 = pct(v, n, 90) * 1e3;
    s.p95 = pct(v, n, 95) * 1e3;
    s.p99 = pct(v, n, 99) * 1e3;
    return s;
}

/* ------------------------------------------------------------------------ */
/* Options and results                                                       */

typedef struct {
    const char *base, *model, *api_key, *workload, *svg;
    long num_prompts, input_len, output_len, prefix_len, prefix_groups, concurrency;
    double rate, timeout, temperature; /* temperature < 0: not sent */
    uint64_t seed;
    int shared, json, ignore_eos, completions; /* completions: /v1/completions instead of chat */
    int thinking;                              /* -1: not sent, 0 off, 1 on */
    ds_client_api api;
} bench_opts;

typedef struct {
    const char *reason;
    char example[320];
    int count;
} fail_kind;

#define MAX_FAIL_KINDS 16

typedef struct {
    long completed, failed, short_outputs;
    long total_input, total_output;
    int input_estimated, output_estimated;
    double duration;
    stats ttft, tpot, itl, e2e;
    fail_kind fails[MAX_FAIL_KINDS];
    int n_fail_kinds;
} bench_result;

static void add_failure(bench_result *res, const char *reason, const char *detail) {
    for (int i = 0; i < res->n_fail_kinds; i++)
        if (!strcmp(res->fails[i].reason, reason)) {
            res->fails[i].count++;
            return;
        }
    if (res->n_fail_kinds == MAX_FAIL_KINDS) { /* cannot happen: reasons are a fixed set of fewer */
        res->fails[MAX_FAIL_KINDS - 1].count++;
        return;
    }
    int i = res->n_fail_kinds++;
    res->fails[i].reason = reason;
    res->fails[i].count = 1;
    snprintf(res->fails[i].example, sizeof res->fails[i].example, "%s", detail);
}

/* a number for the JSON text: one that is not finite has no JSON form and is written as null */
static json_t *num_json(double x) { return isfinite(x) ? json_real(x) : json_null(); }

/* The same request in each API's words: the prompt as one user message (or
 * text), max_tokens, streamed with usage, ignore_eos, temperature, thinking. */
static char *request_body(const bench_opts *o, const char *prompt, long max_tokens, int ignore_eos) {
    json_t *r = json_object();
    if (o->model) json_object_set_new(r, "model", ds_json_text(o->model));
    if (o->api == DS_CLIENT_RESPONSES) {
        json_object_set_new(r, "input", ds_json_text(prompt));
    } else if (o->completions) {
        json_object_set_new(r, "prompt", ds_json_text(prompt));
    } else {
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("user"));
        json_object_set_new(m, "content", ds_json_text(prompt));
        json_t *msgs = json_array();
        json_array_append_new(msgs, m);
        json_object_set_new(r, "messages", msgs);
    }
    json_object_set_new(r, o->api == DS_CLIENT_RESPONSES ? "max_output_tokens" : "max_tokens", json_integer(max_tokens));
    json_object_set_new(r, "stream", json_boolean(1));
    if (o->api == DS_CLIENT_CHAT) {
        json_t *so = json_object();
        json_object_set_new(so, "include_usage", json_true());
        json_object_set_new(r, "stream_options", so);
    }
    if (o->api == DS_CLIENT_RESPONSES) json_object_set_new(r, "store", json_false());
    if (ignore_eos) json_object_set_new(r, "ignore_eos", json_boolean(1));
    if (o->temperature >= 0) json_object_set_new(r, "temperature", num_json(o->temperature));
    if (o->thinking >= 0) {
        if (o->api == DS_CLIENT_RESPONSES)
            json_object_set_new(r, "reasoning", json_pack("{s:s}", "effort", o->thinking ? "medium" : "none"));
        else if (o->api == DS_CLIENT_MESSAGES)
            json_object_set_new(r, "thinking", o->thinking ? json_pack("{s:s,s:I}", "type", "enabled", "budget_tokens",
                                                                       (json_int_t)(max_tokens > 1 ? max_tokens - 1 : 1))
                                                           : json_pack("{s:s}", "type", "disabled"));
        else if (!o->completions)
            json_object_set_new(r, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", o->thinking));
    }
    char *s = ds_json_dump(r);
    json_decref(r);
    return s;
}

/* The event parser for the API's stream. */
static ds_sse_cb event_cb(const bench_opts *o) {
    return o->api == DS_CLIENT_RESPONSES ? on_responses_event : o->api == DS_CLIENT_MESSAGES ? on_messages_event : on_event;
}

/* The prompt of request i (malloc'd). */
static char *make_prompt(const bench_opts *o, long i, long *words) {
    size_t cap = (size_t)(o->prefix_len + o->input_len + 2) * MAX_WORD + 64, len = 0;
    char *p = malloc(cap);
    if (!p) return NULL;
    p[0] = '\0';
    if (o->prefix_len > 0) {
        uint64_t g = o->seed * 1000003u + 0xabcdefu + (uint64_t)(i % o->prefix_groups);
        add_words(p, &len, o->prefix_len, &g);
    }
    uint64_t rng = o->seed * 0x100000001b3ull + 17u + (uint64_t)i * 0x9e3779b9u;
    add_words(p, &len, o->input_len, &rng);
    *words = o->prefix_len + o->input_len;
    return p;
}

/* One streamed test request before the run: does the server answer, and does
 * it take ignore_eos? Returns 0 when it answered (with or without ignore_eos). */
static int probe(bench_opts *o, const char *url) {
    long words;
    char *prompt = make_prompt(o, 0, &words);
    if (!prompt) return -1;
    int rc = -1;
    for (int attempt = o->ignore_eos ? 0 : 1; attempt < 2 && rc; attempt++) {
        req_state s = {0};
        char *body = request_body(o, prompt, o->output_len < 4 ? o->output_len : 4, attempt == 0);
        ds_http_req *r = body ? ds_client_api_req(o->api, url, o->api_key, body, 1, event_cb(o), &s, 4096, o->timeout) : NULL;
        free(body);
        if (!r) break;
        ds_http_perform(r);
        s.r = r;
        char detail[300];
        const char *why = failure(&s, detail, sizeof detail);
        if (!why) {
            rc = 0;
            if (attempt == 1 && o->ignore_eos)
                fprintf(stderr, "bench-serve: the server refused ignore_eos; outputs may end before --output-len\n");
            o->ignore_eos = attempt == 0;
        } else if (attempt == 1 || !(r->rc == CURLE_OK && r->status >= 400 && r->status < 500)) {
            fprintf(stderr, "deltaserve bench-serve: the test request to %s failed: %s: %s\n", url, why, detail);
            attempt = 2;
        }
        free(s.itl.v);
        ds_http_req_free(r);
    }
    free(prompt);
    return rc;
}

static int run(bench_opts *o, const char *url, bench_result *res) {
    long n = o->num_prompts;
    double *arrival = malloc((size_t)n * sizeof *arrival);
    req_state *st = calloc((size_t)n, sizeof *st);
    dvec ttft = {0}, tpot = {0}, itl = {0}, e2e = {0};
    CURLM *multi = curl_multi_init();
    int rc = -1;
    if (!arrival || !st || !multi) goto out;
    /* arrival times: Poisson process (exponential gaps) or all at 0 */
    uint64_t rng = o->seed ^ 0x5eedf00dull;
    double t = 0;
    for (long i = 0; i < n; i++) {
        arrival[i] = t;
        if (o->rate > 0 && isfinite(o->rate)) t += -log(1.0 - uniform01(&rng)) / o->rate;
    }
    long limit = o->concurrency > 0 ? o->concurrency : n;
    long next = 0, inflight = 0, finished = 0;
    double t0 = ds_http_now(), t_last_end = t0;
    while (finished < n) {
        double now = ds_http_now() - t0;
        while (next < n && inflight < limit && arrival[next] <= now) {
            req_state *s = &st[next];
            char *prompt = make_prompt(o, next, &s->input_words);
            char *body = prompt ? request_body(o, prompt, o->output_len, o->ignore_eos) : NULL;
            free(prompt);
            s->r = body ? ds_client_api_req(o->api, url, o->api_key, body, 1, event_cb(o), s, 4096, o->timeout) : NULL;
            free(body);
            if (!s->r || curl_multi_add_handle(multi, s->r->easy) != CURLM_OK) {
                fprintf(stderr, "deltaserve bench-serve: out of memory starting request %ld\n", next);
                goto out;
            }
            s->r->t_start = ds_http_now();
            next++;
            inflight++;
        }
        int running = 0;
        if (curl_multi_perform(multi, &running) != CURLM_OK) {
            fprintf(stderr, "deltaserve bench-serve: curl_multi_perform failed\n");
            goto out;
        }
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(multi, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            char *priv = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
            ds_http_req *r = (ds_http_req *)(void *)priv;
            CURLcode result = msg->data.result;
            curl_multi_remove_handle(multi, msg->easy_handle);
            ds_http_req_finish(r, result);
            req_state *s = r->ud;
            inflight--;
            finished++;
            if (r->t_end > t_last_end) t_last_end = r->t_end;
            char detail[300];
            const char *why = failure(s, detail, sizeof detail);
            if (why) {
                res->failed++;
                add_failure(res, why, detail);
                if (!o->json) fprintf(stderr, "bench-serve: request %ld failed: %s: %s\n", (long)(s - st), why, detail);
            } else {
                long out = s->usage_count && s->usage_completion > 0 ? s->usage_completion : s->text_chunks;
                long in = s->usage_count && s->usage_prompt > 0 ? s->usage_prompt : s->input_words;
                if (!(s->usage_count && s->usage_completion > 0)) res->output_estimated = 1;
                if (!(s->usage_count && s->usage_prompt > 0)) res->input_estimated = 1;
                if (out < o->output_len) res->short_outputs++;
                res->completed++;
                res->total_input += in;
                res->total_output += out;
                double tt = s->t_first - r->t_start, el = r->t_end - r->t_start;
                int bad = dvec_push(&ttft, tt) | dvec_push(&e2e, el);
                if (out > 1) bad |= dvec_push(&tpot, (el - tt) / (double)(out - 1));
                for (size_t k = 0; k < s->itl.n; k++) bad |= dvec_push(&itl, s->itl.v[k]);
                if (bad) goto out;
            }
            free(s->itl.v);
            s->itl.v = NULL;
            ds_http_req_free(r);
            s->r = NULL;
        }
        if (finished >= n) break;
        int wait_ms = 200;
        if (next < n && inflight < limit) {
            double dt = arrival[next] - (ds_http_now() - t0);
            wait_ms = dt <= 0 ? 0 : dt < 0.2 ? (int)(dt * 1e3) + 1 : 200;
        }
        curl_multi_poll(multi, NULL, 0, wait_ms, NULL);
    }
    res->duration = t_last_end - t0;
    res->ttft = compute(ttft.v, ttft.n);
    res->tpot = compute(tpot.v, tpot.n);
    res->itl = compute(itl.v, itl.n);
    res->e2e = compute(e2e.v, e2e.n);
    rc = 0;
out:
    for (long i = 0; st && i < n; i++) {
        if (st[i].r) {
            if (multi) curl_multi_remove_handle(multi, st[i].r->easy);
            ds_http_req_free(st[i].r);
        }
        free(st[i].itl.v);
    }
    if (multi) curl_multi_cleanup(multi);
    free(arrival);
    free(st);
    free(ttft.v);
    free(tpot.v);
    free(itl.v);
    free(e2e.v);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Output                                                                    */

static double per_s(double x, double d) { return d > 0 ? x / d : 0; }

static void print_table(const bench_opts *o, const bench_result *r) {
    const char *rule = "==================================================";
    printf("%s\n%-40s\n%s\n", rule, "          Serving Benchmark Result", rule);
    printf("%-40s %s\n", "Workload:", o->workload);
    printf("%-40s %s\n", "API:", o->completions ? "completions" : ds_client_api_name(o->api));
    printf("%-40s %ld\n", "Successful requests:", r->completed);
    printf("%-40s %ld\n", "Failed requests:", r->failed);
    if (o->rate > 0 && isfinite(o->rate)) printf("%-40s %.2f\n", "Request rate (req/s, Poisson):", o->rate);
    else printf("%-40s %s\n", "Request rate (req/s):", "inf");
    if (o->concurrency > 0) printf("%-40s %ld\n", "Maximum concurrency:", o->concurrency);
    printf("%-40s %.2f\n", "Benchmark duration (s):", r->duration);
    printf("%-40s %ld%s\n", "Total input tokens:", r->total_input, r->input_estimated ? " (some estimated)" : "");
    printf("%-40s %ld%s\n", "Total generated tokens:", r->total_output, r->output_estimated ? " (some estimated)" : "");
    printf("%-40s %.2f\n", "Request throughput (req/s):", per_s((double)r->completed, r->duration));
    printf("%-40s %.2f\n", "Output token throughput (tok/s):", per_s((double)r->total_output, r->duration));
    printf("%-40s %.2f\n", "Total token throughput (tok/s):",
           per_s((double)(r->total_input + r->total_output), r->duration));
    const struct {
        const char *title, *abbr;
        const stats *s;
    } rows[] = {{"Time to First Token", "TTFT", &r->ttft},
                {"Time per Output Token (excl. 1st token)", "TPOT", &r->tpot},
                {"Inter-token Latency", "ITL", &r->itl},
                {"End-to-end Latency", "E2EL", &r->e2e}};
    for (int i = 0; i < 4; i++) {
        char head[64];
        snprintf(head, sizeof head, "%s", rows[i].title);
        size_t hl = strlen(head), pad = hl < 48 ? (50 - hl) / 2 : 1;
        printf("%.*s%s%.*s\n", (int)pad, "--------------------------", head, (int)(50 - hl - pad),
               "--------------------------");
        const stats *s = rows[i].s;
        char lab[64];
        if (!s->n) {
            printf("%-40s %s\n", "(no samples)", "-");
            continue;
        }
        snprintf(lab, sizeof lab, "Mean %s (ms):", rows[i].abbr);
        printf("%-40s %.2f\n", lab, s->mean);
        snprintf(lab, sizeof lab, "Median %s (ms):", rows[i].abbr);
        printf("%-40s %.2f\n", lab, s->p50);
        snprintf(lab, sizeof lab, "P99 %s (ms):", rows[i].abbr);
        printf("%-40s %.2f\n", lab, s->p99);
    }
    printf("%s\n", rule);
    if (r->short_outputs)
        printf("note: %ld completed requests stopped before %ld output tokens%s\n", r->short_outputs, o->output_len,
               o->ignore_eos ? "" : " (ignore_eos not sent)");
    for (int i = 0; i < r->n_fail_kinds; i++)
        printf("failed: %d x %s (e.g. %s)\n", r->fails[i].count, r->fails[i].reason, r->fails[i].example);
}

static void add_stats(json_t *j, const char *prefix, const stats *s) {
    static const char *names[] = {"mean", "std", "min", "p50", "p90", "p95", "p99", "max"};
    const double v[] = {s->mean, s->std, s->min, s->p50, s->p90, s->p95, s->p99, s->max};
    char key[48];
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof key, "%s_ms_%s", prefix, names[i]);
        if (s->n) json_object_set_new(j, key, num_json(round(v[i] * 1e4) / 1e4));
        else json_object_set_new(j, key, json_null());
    }
    snprintf(key, sizeof key, "%s_samples", prefix);
    json_object_set_new(j, key, json_integer(s->n));
}

static int print_json(const bench_opts *o, const bench_result *r) {
    json_t *j = json_object();
    json_object_set_new(j, "workload", ds_json_text(o->workload));
    json_object_set_new(j, "model", ds_json_text(o->model ? o->model : ""));
    json_object_set_new(j, "num_prompts", json_integer(o->num_prompts));
    json_object_set_new(j, "input_len", json_integer(o->input_len));
    json_object_set_new(j, "output_len", json_integer(o->output_len));
    json_object_set_new(j, "prefix_len", json_integer(o->prefix_len));
    if (o->rate > 0 && isfinite(o->rate)) json_object_set_new(j, "request_rate", num_json(o->rate));
    else json_object_set_new(j, "request_rate", json_string("inf"));
    json_object_set_new(j, "concurrency", json_integer(o->concurrency));
    json_object_set_new(j, "seed", json_integer(o->seed));
    json_object_set_new(j, "ignore_eos", json_boolean(o->ignore_eos));
    if (o->temperature >= 0) json_object_set_new(j, "temperature", num_json(o->temperature));
    json_object_set_new(j, "endpoint", ds_json_text(o->completions ? "completions" : "chat"));
    json_object_set_new(j, "api", ds_json_text(ds_client_api_name(o->api)));
    json_object_set_new(j, "completed", json_integer(r->completed));
    json_object_set_new(j, "failed", json_integer(r->failed));
    json_object_set_new(j, "duration_s", num_json(round(r->duration * 1e6) / 1e6));
    json_object_set_new(j, "total_input_tokens", json_integer(r->total_input));
    json_object_set_new(j, "total_output_tokens", json_integer(r->total_output));
    json_object_set_new(j, "input_tokens_estimated", json_boolean(r->input_estimated));
    json_object_set_new(j, "output_tokens_estimated", json_boolean(r->output_estimated));
    json_object_set_new(j, "short_outputs", json_integer(r->short_outputs));
    json_object_set_new(j, "request_throughput", num_json(per_s((double)r->completed, r->duration)));
    json_object_set_new(j, "output_tok_s", num_json(per_s((double)r->total_output, r->duration)));
    json_object_set_new(j, "total_tok_s", num_json(per_s((double)(r->total_input + r->total_output), r->duration)));
    add_stats(j, "ttft", &r->ttft);
    add_stats(j, "tpot", &r->tpot);
    add_stats(j, "itl", &r->itl);
    add_stats(j, "e2e", &r->e2e);
    json_t *errs = json_array();
    json_object_set_new(j, "errors", errs);
    for (int i = 0; i < r->n_fail_kinds; i++) {
        json_t *e = json_object();
        json_object_set_new(e, "reason", ds_json_text(r->fails[i].reason));
        json_object_set_new(e, "count", json_integer(r->fails[i].count));
        json_object_set_new(e, "example", ds_json_text(r->fails[i].example));
        json_array_append_new(errs, e);
    }
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    json_decref(j);
    if (!s) return -1;
    printf("%s\n", s);
    free(s);
    return 0;
}

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f);
    }
}

/* A round axis maximum at or above x, and its tick step. */
static double nice_max(double x, double *step) {
    if (!(x > 0)) x = 1;
    double raw = x / 5, mag = pow(10, floor(log10(raw))), f = raw / mag;
    double s = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * mag;
    *step = s;
    return ceil(x / s - 1e-9) * s;
}

/* Four panels (TTFT, TPOT, ITL, E2E), each with bars for mean, p50, p90, p95, p99. */
static int write_svg(const char *path, const bench_opts *o, const bench_result *r) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    const int W = 960, H = 660, PW = 440, PH = 260;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H, W, H);
    char title[400];
    snprintf(title, sizeof title, "deltaserve bench-serve: %s, %ld prompts (%ld ok, %ld failed), in %ld + out %ld, %s",
             o->workload, o->num_prompts, r->completed, r->failed, o->prefix_len + o->input_len, o->output_len,
             o->concurrency > 0 ? "fixed concurrency" : o->rate > 0 && isfinite(o->rate) ? "Poisson arrivals" : "burst");
    fprintf(f, "<text x=\"%d\" y=\"26\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">", W / 2);
    xml_text(f, title);
    fprintf(f, "</text>\n");
    const struct {
        const char *name;
        const stats *s;
    } panels[] = {{"TTFT (ms)", &r->ttft}, {"TPOT (ms)", &r->tpot}, {"ITL (ms)", &r->itl}, {"E2E latency (ms)", &r->e2e}};
    static const char *labels[] = {"mean", "p50", "p90", "p95", "p99"};
    static const char *colors[] = {"#7f7f7f", "#1f77b4", "#2ca02c", "#ff7f0e", "#d62728"};
    for (int p = 0; p < 4; p++) {
        const stats *s = panels[p].s;
        int ox = 50 + (p % 2) * (PW + 30), oy = 60 + (p / 2) * (PH + 50);
        double v[5] = {s->mean, s->p50, s->p90, s->p95, s->p99}, vmax = 0;
        for (int k = 0; k < 5; k++) vmax = v[k] > vmax ? v[k] : vmax;
        double step, top = nice_max(vmax, &step);
        fprintf(f, "<g transform=\"translate(%d,%d)\">\n", ox, oy);
        fprintf(f, "<text x=\"%d\" y=\"-8\" text-anchor=\"middle\" font-weight=\"bold\">%s</text>\n", PW / 2,
                panels[p].name);
        fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n", PW, PH);
        for (int k = 0; step > 0 && k <= 20 && k * step <= top + 1e-9; k++) {
            double y = PH - (double)PH * (k * step) / top;
            fprintf(f, "<line x1=\"0\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", y, PW, y);
            fprintf(f, "<text x=\"-4\" y=\"%.1f\" text-anchor=\"end\" font-size=\"10\">%g</text>\n", y + 3, k * step);
        }
        if (!s->n) {
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#999\">no samples</text>\n", PW / 2, PH / 2);
        } else {
            double bw = (double)PW / 5;
            for (int k = 0; k < 5; k++) {
                double h = (double)PH * v[k] / top, x = k * bw + bw * 0.15;
                fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", x, PH - h,
                        bw * 0.7, h, colors[k]);
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\">%.2f</text>\n",
                        x + bw * 0.35, PH - h - 4, v[k]);
            }
        }
        for (int k = 0; k < 5; k++)
            fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", (k + 0.5) * PW / 5, PH + 16,
                    labels[k]);
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" font-size=\"10\" fill=\"#555\">n=%zu</text>\n", PW - 4,
                14, s->n);
        fprintf(f, "</g>\n");
    }
    fprintf(f, "</svg>\n");
    return fclose(f) ? -1 : 0;
}

/* ------------------------------------------------------------------------ */

static char *first_model(const bench_opts *o) {
    char *url = ds_http_endpoint(o->base, "models");
    ds_http_req *r = url ? ds_http_req_new(url, o->api_key, NULL, 0, NULL, NULL, 1 << 20, o->timeout) : NULL;
    free(url);
    char *id = NULL;
    if (!r) return NULL;
    if (ds_http_perform(r) == CURLE_OK && r->status == 200) {
        json_t *j = ds_json_parse(r->body, r->body_len, NULL, 0);
        const json_t *v = json_object_get(json_array_get(json_object_get(j, "data"), 0), "id");
        if (json_is_string(v)) id = strdup(json_string_value(v));
        json_decref(j);
    }
    ds_http_req_free(r);
    return id;
}

int ds_cmd_bench_serve(int argc, char **argv) {
    bench_opts o = {.workload = "random", .num_prompts = 100, .input_len = 128, .output_len = 128, .prefix_len = -1,
                    .prefix_groups = 1, .timeout = 600, .ignore_eos = 1, .temperature = -1, .thinking = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long *lp = NULL, lo = 0, hi = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--model")) {
            if (!(o.model = ds_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--api-key")) {
            if (!(o.api_key = ds_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--workload")) {
            if (!(o.workload = ds_arg_value(argc, argv, &i))) return 2;
            if (strcmp(o.workload, "random") && strcmp(o.workload, "shared-prefix")) {
                fprintf(stderr, "deltaserve bench-serve: --workload '%s' is not random or shared-prefix\n", o.workload);
                return 2;
            }
        } else if (!strcmp(a, "--num-prompts")) lp = &o.num_prompts, lo = 1, hi = 1000000;
        else if (!strcmp(a, "--input-len")) lp = &o.input_len, lo = 0, hi = 200000;
        else if (!strcmp(a, "--output-len")) lp = &o.output_len, lo = 1, hi = 1000000;
        else if (!strcmp(a, "--prefix-len")) lp = &o.prefix_len, lo = 0, hi = 200000;
        else if (!strcmp(a, "--prefix-groups")) lp = &o.prefix_groups, lo = 1, hi = 1000000;
        else if (!strcmp(a, "--concurrency")) lp = &o.concurrency, lo = 1, hi = 100000;
        else if (!strcmp(a, "--request-rate")) {
            if (!(v = ds_arg_value(argc, argv, &i))) return 2;
            if (!strcmp(v, "inf")) o.rate = 0;
            else if (ds_arg_float(a, v, 1e-6, 1e9, &o.rate)) return 2;
        } else if (!strcmp(a, "--timeout")) {
            if (!(v = ds_arg_value(argc, argv, &i)) || ds_arg_float(a, v, 0.1, 86400, &o.timeout)) return 2;
        } else if (!strcmp(a, "--seed")) {
            if (!(v = ds_arg_value(argc, argv, &i)) || ds_arg_u64(a, v, &o.seed)) return 2;
        } else if (!strcmp(a, "--endpoint")) {
            if (!(v = ds_arg_value(argc, argv, &i))) return 2;
            if (strcmp(v, "chat") && strcmp(v, "completions")) {
                fprintf(stderr, "deltaserve bench-serve: --endpoint '%s' is not chat or completions\n", v);
                return 2;
            }
            o.completions = !strcmp(v, "completions");
        } else if (!strcmp(a, "--api")) {
            if (!(v = ds_arg_value(argc, argv, &i))) return 2;
            if (ds_client_api_parse(v, &o.api)) {
                fprintf(stderr, "deltaserve bench-serve: --api '%s' is not chat, responses or messages\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--thinking")) {
            if (!(v = ds_arg_value(argc, argv, &i))) return 2;
            if (strcmp(v, "on") && strcmp(v, "off")) {
                fprintf(stderr, "deltaserve bench-serve: --thinking '%s' is not on or off\n", v);
                return 2;
            }
            o.thinking = !strcmp(v, "on");
        } else if (!strcmp(a, "--temperature")) {
            if (!(v = ds_arg_value(argc, argv, &i)) || ds_arg_float(a, v, 0, 2, &o.temperature)) return 2;
        } else if (!strcmp(a, "--svg")) {
            if (!(o.svg = ds_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--json")) o.json = 1;
        else if (!strcmp(a, "--no-ignore-eos")) o.ignore_eos = 0;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "deltaserve bench-serve: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (!o.base) o.base = a;
        else {
            fprintf(stderr, "deltaserve bench-serve: more than one URL ('%s', '%s')\n", o.base, a);
            return 2;
        }
        if (lp && (!(v = ds_arg_value(argc, argv, &i)) || ds_arg_int(a, v, lo, hi, lp))) return 2;
    }
    if (!o.base) {
        usage(stderr);
        return 2;
    }
    if (strncmp(o.base, "http://", 7) && strncmp(o.base, "https://", 8)) {
        fprintf(stderr, "deltaserve bench-serve: URL '%s' must start with http:// or https://\n", o.base);
        return 2;
    }
    if (o.completions && o.api != DS_CLIENT_CHAT) {
        fprintf(stderr, "deltaserve bench-serve: --endpoint completions is an OpenAI chat-style endpoint; it does not go with --api %s\n",
                ds_client_api_name(o.api));
        return 2;
    }
    o.shared = !strcmp(o.workload, "shared-prefix");
    if (o.prefix_len < 0) o.prefix_len = o.shared ? 256 : 0;
    if (o.prefix_len + o.input_len == 0) {
        fprintf(stderr, "deltaserve bench-serve: --input-len and --prefix-len are both 0: empty prompts\n");
        return 2;
    }
    if (ds_http_global_init()) {
        fprintf(stderr, "deltaserve bench-serve: libcurl initialisation failed\n");
        return 1;
    }
    int code = 1;
    char *model = NULL, *url = o.completions ? ds_http_endpoint(o.base, "completions") : ds_client_api_endpoint(o.api, o.base);
    if (!url) goto out;
    if (!o.model) o.model = model = first_model(&o);
    if (probe(&o, url)) goto out;
    if (!o.json)
        fprintf(stderr, "bench-serve: %ld %s prompts of %ld words to %s (model %s, ignore_eos %s)\n", o.num_prompts,
                o.workload, o.prefix_len + o.input_len, url, o.model ? o.model : "(none)", o.ignore_eos ? "on" : "off");
    bench_result res = {0};
    if (run(&o, url, &res)) {
        fprintf(stderr, "deltaserve bench-serve: out of memory\n");
        goto out;
    }
    if (o.json ? print_json(&o, &res) : (print_table(&o, &res), 0)) goto out;
    if (o.svg && write_svg(o.svg, &o, &res)) {
        fprintf(stderr, "deltaserve bench-serve: cannot write %s\n", o.svg);
        goto out;
    }
    if (res.failed) fprintf(stderr, "bench-serve: %ld of %ld requests failed\n", res.failed, o.num_prompts);
    code = res.failed ? 1 : 0;
out:
    free(url);
    free(model);
    ds_http_global_cleanup();
    return code;
}
