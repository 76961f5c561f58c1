/* completion.c - see completion.h.
 *
 * DESIGN NOTES
 * 1. The engine thread only runs on_event: it copies the event into its
 *    choice's queue under c->mu and signals c->cv. Decoding, stop strings,
 *    reasoning and tool parsing run on the HTTP thread (pump).
 * 2. References: 1 for the HTTP side (a streaming response takes it over),
 *    1 per engine request until its last event. The last unref frees, outside c->mu.
 * 3. A choice is "done" on the HTTP side when its text ended (stop string,
 *    or its last event processed). A stop string aborts the engine request;
 *    its late tokens are ignored, and usage counts the tokens up to the stop.
 * 4. A choice that ends with DS_FINISH_ERROR fails the whole request: an
 *    HTTP 500 before the headers, an SSE error event (no [DONE]) after.
 * 5. Every request is counted in /metrics under exactly one outcome (settle):
 *    done, aborted by the client, or failed; a request refused by
 *    ds_completion_start is counted by the HTTP side, which sends the error. */
#include "server/completion.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include "grammar/grammar_filter.h"
#include "server/answer_format.h"
#include "server/chat_parser.h"
#include "server/image_input.h"
#include "server/json_text.h"
#include "server/output_grammar.h"
#include "server/openai_response.h"
#include "server/sse.h"
#include "server/stop_filter.h"
#include "common/strbuf.h"
#include "tokenizer/stream_decoder.h"

#include <microhttpd.h>

typedef struct {
    ds_completion *rq;
    int index;
    uint64_t id;
    /* engine -> HTTP, under rq->mu */
    ds_event *q;
    int q_n, q_cap, q_max;
    int engine_done;
    /* HTTP side */
    ds_stream_decoder dec;
    ds_stop_filter stop;
    ds_chat_parser parser;
    ds_grammar_filter *gf;    /* the answer follows a grammar: engine-thread filter state (NULL: free) */
    int done, stop_hit, has_cached;
    ds_finish reason;
    char error[256];
    int n_tokens, n_generated_final, n_cached, reasoning_tokens, think_closed;
    int prompt_index, n_prompt, max_tokens;
    double cum_logprob;     /* of the tokens it kept: best_of ranks candidates by it */
    ds_sb think_tail;
    ds_sb content, reasoning;
    json_t *tool_calls;     /* non-streaming: collected calls */
    json_t *raw_calls;      /* non-streaming, with an answer format: the calls as the parser gave them */
    json_t *lp;             /* logprob entries not yet sent (streaming) or all (non-streaming) */
    json_t *lp_tokens, *lp_token_lps, *lp_tops, *lp_offsets;  /* completions logprobs */
    size_t n_chars;         /* characters the decoder gave so far (before the stop filter) */
    int n_calls;
} choice;

struct ds_completion {
    ds_server *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    ds_oai_request req;
    const ds_answer_format *fmt;   /* NULL: OpenAI chat completions or completions */
    ds_answer_ctx actx;            /* the format's view of the request */
    json_t *api_body;              /* the API's own request body (answer_format.h) */
    int n;
    choice ch[DS_OAI_MAX_CHOICES];   /* completions: prompt p's candidates at [p * per_prompt, (p + 1) * per_prompt) */
    int per_prompt;         /* candidates per prompt: best_of (n when not given) */
    char id[48];
    long created;
    int n_prompt;
    int start_in_reasoning;
    int parse_tools;
    int fd;
    int client_gone;
    int failed;             /* a choice ended with an error */
    int settled;            /* its outcome was counted (settle) */
    char fail_msg[256];
    double t_start, t_first, t_last;
    double t_checked;       /* last look at the client's socket */
    /* streaming */
    ds_sb out;
    int stream_ended;
    int headers_done;
};

double ds_server_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --- life cycle --- */

typedef enum { OUT_DONE, OUT_ABORTED, OUT_FAILED, OUT_REFUSED } outcome;

static void record_done(ds_completion *c);

/* Counts the request's outcome once: the first call wins. OUT_REFUSED: the
 * HTTP side answers with an error status and counts it. */
static void settle(ds_completion *c, outcome o) {
    if (c->settled) return;
    c->settled = 1;
    ds_metrics *m = &c->srv->metrics;
    switch (o) {
    case OUT_DONE: record_done(c); break;
    case OUT_ABORTED: ds_metrics_client_abort(m); break;
    case OUT_FAILED: ds_metrics_error(m, DS_ERRK_ENGINE); ds_metrics_failed(m); break;
    case OUT_REFUSED: break;
    }
}

static void completion_free(ds_completion *c) {
    for (int i = 0; i < c->n; i++) {
        choice *h = &c->ch[i];
        free(h->q);
        ds_stream_decoder_free(&h->dec);
        ds_stop_filter_free(&h->stop);
        ds_chat_parser_free(&h->parser);
        ds_grammar_filter_free(h->gf);
        ds_sb_free(&h->think_tail);
        ds_sb_free(&h->content);
        ds_sb_free(&h->reasoning);
        json_decref(h->tool_calls);
        json_decref(h->raw_calls);
        json_decref(h->lp);
        json_decref(h->lp_tokens);
        json_decref(h->lp_token_lps);
        json_decref(h->lp_tops);
        json_decref(h->lp_offsets);
    }
    ds_sb_free(&c->out);
    if (c->fmt && c->fmt->release) c->fmt->release(&c->actx);
    json_decref(c->api_body);
    ds_oai_request_free(&c->req);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    atomic_fetch_sub(&c->srv->in_flight, 1);
    free(c);
}

static void unref(ds_completion *c) {
    pthread_mutex_lock(&c->mu);
    int left = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (left == 0) completion_free(c);
}

static void abort_all(ds_completion *c) {
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n; i++)
        if (c->ch[i].id && !c->ch[i].engine_done) ds_engine_abort(c->srv->eng, c->ch[i].id);
    pthread_mutex_unlock(&c->mu);
}

void ds_completion_release(ds_completion *c) {
    if (!c) return;
    /* dropped before its answer was complete (a stream whose end was never
     * written, a connection that broke): the client did not get it */
    if (!c->settled) c->client_gone = 1;
    settle(c, OUT_ABORTED);
    abort_all(c);
    unref(c);
}

void ds_completion_release_cb(void *cls) { ds_completion_release(cls); }

int ds_completion_is_stream(const ds_completion *c) { return c->req.stream; }

/* engine thread */
static void on_event(const ds_event *ev, void *user) {
    choice *h = user;
    ds_completion *c = h->rq;
    int last = 0;
    pthread_mutex_lock(&c->mu);
    if (h->q_n == h->q_cap && h->q_cap < h->q_max) {
        int cap = h->q_cap ? h->q_cap * 2 : 16;
        if (cap > h->q_max) cap = h->q_max;
        ds_event *q = realloc(h->q, (size_t)cap * sizeof *q);
        if (q) {
            h->q = q;
            h->q_cap = cap;
        }
    }
    if (h->q_n < h->q_cap) {
        h->q[h->q_n] = *ev;
        h->q[h->q_n].error = NULL;
        if (ev->finished) {
            h->reason = ev->reason;
            if (ev->error) snprintf(h->error, sizeof h->error, "%s", ev->error);
        }
        h->q_n++;
    } else if (ev->finished) {   /* cannot happen: the queue holds max_tokens + 1 events */
        h->q_n = 0;
    }
    if (ev->finished) {
        h->engine_done = 1;
        h->n_generated_final = ev->n_generated;
        /* a request whose only token was a stop token had no token event to carry it */
        if (ev->n_cached > h->n_cached) h->n_cached = ev->n_cached;
        last = --c->refs == 0;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (last) completion_free(c);
}

/* --- output --- */

/* The text of prompt p, for echo: as given, or its token ids decoded. Returns 0, or -1 (out of
 * memory or undecodable ids: the answer then echoes nothing rather than fail after the work). */
static int echo_text(const ds_completion *c, int p, ds_sb *out) {
    const ds_oai_prompt *pr = &c->req.prompts[p];
    if (pr->text) {
        ds_sb_append(out, pr->text, pr->len);
        return 0;
    }
    char *t = NULL;
    size_t n = 0;
    ds_err e = {0};
    if (ds_tokenizer_decode(c->srv->tok, pr->ids, (size_t)pr->n_ids, 0, &t, &n, &e) != DS_OK) return -1;
    ds_sb_append(out, t, n);
    free(t);
    return 0;
}


static json_t *chunk_new(ds_completion *c, int index, json_t **choice_out) {
    json_t *arr;
    int chat = c->req.kind == DS_OAI_CHAT;
    json_t *o = ds_oai_envelope(c->id, chat ? "chat.completion.chunk" : "text_completion", c->created,
                                c->srv->model_name, c->srv->fingerprint, &arr);
    /* OpenAI: with include_usage every chunk has "usage": null but the last, which has the counts */
    if (c->req.include_usage) json_object_set_new(o, "usage", json_null());
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer(index));
    json_array_append_new(arr, ch);
    *choice_out = ch;
    return o;
}

/* logprob entries of choice h not sent yet, for a chunk or the final answer */
static json_t *take_logprobs(ds_completion *c, choice *h) {
    if (!c->req.logprobs) return NULL;
    json_t *o = json_object();
    if (c->req.kind == DS_OAI_CHAT) {
        json_object_set_new(o, "content", h->lp ? h->lp : json_array());
        h->lp = NULL;
    } else {
        json_object_set_new(o, "tokens", h->lp_tokens ? h->lp_tokens : json_array());
        json_object_set_new(o, "token_logprobs", h->lp_token_lps ? h->lp_token_lps : json_array());
        json_object_set_new(o, "top_logprobs", h->lp_tops ? h->lp_tops : json_array());
        json_object_set_new(o, "text_offset", h->lp_offsets ? h->lp_offsets : json_array());
        h->lp_tokens = h->lp_token_lps = h->lp_tops = h->lp_offsets = NULL;
    }
    return o;
}

static void emit_chunk(ds_completion *c, choice *h, json_t *delta_or_text, const char *finish) {
    json_t *ch;
    json_t *o = chunk_new(c, h->index, &ch);
    json_object_set_new(ch, c->req.kind == DS_OAI_CHAT ? "delta" : "text", delta_or_text);
    json_t *lp = take_logprobs(c, h);
    json_object_set_new(ch, "logprobs", lp ? lp : json_null());
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    ds_sse_data(&c->out, o);
    json_decref(o);
}

static void on_part(void *user, ds_part_kind kind, const char *text, size_t n, const json_t *call) {
    choice *h = user;
    ds_completion *c = h->rq;
    char idbuf[48];
    if (c->fmt) {
        if (kind != DS_PART_TOOL_CALL && !n) return;
        if (c->req.stream) {
            c->fmt->stream_part(&c->actx, &c->out, kind, text, n, call);
        } else if (kind == DS_PART_TOOL_CALL) {
            if (!h->raw_calls) h->raw_calls = json_array();
            json_array_append_new(h->raw_calls, json_deep_copy(call));
        } else {
            ds_sb_append(kind == DS_PART_REASONING ? &h->reasoning : &h->content, text, n);
        }
        if (kind == DS_PART_TOOL_CALL) h->n_calls++;
        return;
    }
    if (kind == DS_PART_TOOL_CALL) {
        ds_oai_call_id(idbuf, sizeof idbuf);
        json_t *tc = json_object();
        if (c->req.stream) json_object_set_new(tc, "index", json_integer(h->n_calls));
        json_object_set_new(tc, "id", json_string(idbuf));
        json_object_set_new(tc, "type", json_string("function"));
        json_object_set_new(tc, "function", json_deep_copy(call));
        h->n_calls++;
        if (c->req.stream) {
            json_t *d = json_object(), *arr = json_array();
            json_object_set_new(d, "tool_calls", arr);
            json_array_append_new(arr, tc);
            emit_chunk(c, h, d, NULL);
        } else {
            if (!h->tool_calls) h->tool_calls = json_array();
            json_array_append_new(h->tool_calls, tc);
        }
        return;
    }
    if (!n) return;
    if (c->req.stream) {
        json_t *d = json_object();
        json_object_set_new(d, kind == DS_PART_REASONING ? "reasoning_content" : "content", ds_oai_textn(text, n));
        emit_chunk(c, h, d, NULL);
    } else {
        ds_sb_append(kind == DS_PART_REASONING ? &h->reasoning : &h->content, text, n);
    }
}

/* text that passed the stop filter */
static void on_text(void *user, const char *s, size_t n) {
    choice *h = user;
    ds_completion *c = h->rq;
    if (c->req.kind == DS_OAI_CHAT) {
        ds_chat_parser_feed(&h->parser, s, n, on_part, h);
    } else if (c->req.stream) {
        emit_chunk(c, h, ds_oai_textn(s, n), NULL);
    } else {
        ds_sb_append(&h->content, s, n);
    }
}

/* characters of the decoder's output (well-formed UTF-8: a held-back partial character comes later) */
static size_t utf8_chars(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((uint8_t)s[i] & 0xC0) != 0x80;
    return k;
}

/* a logprob of -inf (a token the sampler could not pick) has no JSON number: null, as before */
static json_t *logprob_json(double x) { return isfinite(x) ? json_real(x) : json_null(); }

/* offset: where the token's text starts in the choice's text, in characters (OpenAI's and vLLM's
 * text_offset counts characters, not bytes), before any stop string cut it */
static void add_logprobs(ds_completion *c, choice *h, const ds_event *ev, size_t offset) {
    const ds_tokenizer *tok = c->srv->tok;
    size_t len = 0;
    const char *raw = ds_tokenizer_token_bytes(tok, ev->token, &len);
    if (!raw) raw = "", len = 0;
    if (c->req.kind == DS_OAI_CHAT) {
        if (!h->lp) h->lp = json_array();
        json_t *e = json_object(), *bytes, *tops = json_array();
        json_object_set_new(e, "token", ds_oai_token_string(raw, len, &bytes));
        json_object_set_new(e, "logprob", logprob_json(ev->logprob));
        json_object_set_new(e, "bytes", bytes);
        json_object_set_new(e, "top_logprobs", tops);
        for (int k = 0; k < ev->n_top && k < c->req.top_logprobs; k++) {
            size_t tl = 0;
            const char *tr = ds_tokenizer_token_bytes(tok, ev->top_ids[k], &tl);
            if (!tr) tr = "", tl = 0;
            json_t *t = json_object(), *tb;
            json_object_set_new(t, "token", ds_oai_token_string(tr, tl, &tb));
            json_object_set_new(t, "logprob", logprob_json(ev->top_logprobs[k]));
            json_object_set_new(t, "bytes", tb);
            json_array_append_new(tops, t);
        }
        json_array_append_new(h->lp, e);
    } else {
        if (!h->lp_tokens) {
            h->lp_tokens = json_array();
            h->lp_token_lps = json_array();
            h->lp_tops = json_array();
            h->lp_offsets = json_array();
        }
        json_array_append_new(h->lp_tokens, ds_oai_token_string(raw, len, NULL));
        json_array_append_new(h->lp_token_lps, logprob_json(ev->logprob));
        json_t *tops = json_object();
        for (int k = 0; k < ev->n_top && k < c->req.top_logprobs; k++) {
            size_t tl = 0;
            const char *tr = ds_tokenizer_token_bytes(tok, ev->top_ids[k], &tl);
            json_t *key = ds_oai_token_string(tr ? tr : "", tr ? tl : 0, NULL);
            const char *ks = json_string_value(key);
            size_t kn = json_string_length(key);
            if (ks && !json_object_getn(tops, ks, kn)) json_object_setn_new(tops, ks, kn, logprob_json(ev->top_logprobs[k]));
            json_decref(key);
        }
        /* OpenAI: "the API will always return the logprob of the sampled token", so up to logprobs + 1 entries */
        const char *ss = json_string_value(json_array_get(h->lp_tokens, json_array_size(h->lp_tokens) - 1));
        size_t sn = json_string_length(json_array_get(h->lp_tokens, json_array_size(h->lp_tokens) - 1));
        if (ss && !json_object_getn(tops, ss, sn)) json_object_setn_new(tops, ss, sn, logprob_json(ev->logprob));
        json_array_append_new(h->lp_tops, tops);
        json_array_append_new(h->lp_offsets, json_integer((json_int_t)offset));
    }
}

static const char *finish_name(const choice *h) {
    if (h->reason == DS_FINISH_LENGTH && !h->stop_hit) return "length";
    if (h->n_calls) return "tool_calls";
    return "stop";
}

/* how the choice ended, for an answer format */
static ds_answer_end end_of(const ds_completion *c, const choice *h) {
    ds_answer_end e = {.kind = DS_END_STOP};
    if (h->reason == DS_FINISH_LENGTH && !h->stop_hit) e.kind = DS_END_LENGTH;
    else if (h->n_calls) e.kind = DS_END_TOOL_CALLS;
    else if (h->stop.hit && h->stop.which >= 0) {
        e.kind = DS_END_STOP_STRING;
        e.stop_string = c->req.stop[h->stop.which];
        e.stop_len = c->req.stop_len[h->stop.which];
    }
    return e;
}

/* the choice's text ended: flush what was held back */
static void end_text(ds_completion *c, choice *h) {
    const char *t;
    size_t n;
    if (!h->stop_hit) {
        ds_stream_decoder_flush(&h->dec, &t, &n);
        if (n) ds_stop_filter_feed(&h->stop, t, n, on_text, h);
        ds_stop_filter_finish(&h->stop, on_text, h);
    }
    if (c->req.kind == DS_OAI_CHAT) ds_chat_parser_finish(&h->parser, on_part, h);
    h->done = 1;
    if (c->req.stream && !c->failed && !c->fmt) {   /* a format ends its stream once, with the usage (stream_tail) */
        json_t *d = c->req.kind == DS_OAI_CHAT ? json_object() : json_string("");
        emit_chunk(c, h, d, finish_name(h));
    }
}

static int keep_special(const ds_server *s, int32_t id) {
    for (int i = 0; i < 4; i++)
        if (s->keep_ids[i] == id) return 1;
    return 0;
}

static void on_token(ds_completion *c, choice *h, const ds_event *ev) {
    ds_server *s = c->srv;
    double now = ds_server_now();
    if (!c->t_first) {
        c->t_first = now;
        ds_metrics_ttft(&s->metrics, now - c->t_start);
    } else if (h->index == 0) {
        ds_metrics_itl(&s->metrics, now - c->t_last);
    }
    if (h->index == 0) c->t_last = now;
    h->n_tokens++;
    h->n_cached = ev->n_cached;
    h->cum_logprob += ev->logprob;
    /* the start of a character the decoder holds back (begun by an earlier token) is one character:
     * this token's own text starts after it, as the U+FFFD of a token that cuts a character counts one */
    if (c->req.logprobs) add_logprobs(c, h, ev, h->n_chars + (ds_stream_decoder_held(&h->dec) > 0));
    if (c->start_in_reasoning && !h->think_closed) h->reasoning_tokens++;
    const char *t = NULL;
    size_t n = 0;
    ds_err e = {0};
    if (!ds_tokenizer_is_special(s->tok, ev->token) || keep_special(s, ev->token))
        if (ds_stream_decoder_push(&h->dec, ev->token, &t, &n, &e) != DS_OK) n = 0;
    if (c->start_in_reasoning && !h->think_closed && n) {
        ds_sb_append(&h->think_tail, t, n);
        if (memmem(h->think_tail.s, h->think_tail.n, "</think>", 8)) h->think_closed = 1;
        if (h->think_tail.n > 16) ds_sb_consume(&h->think_tail, h->think_tail.n - 16);
    }
    h->n_chars += utf8_chars(t, n);
    /* a stop string, or (parallel_tool_calls: false) the end of the first tool call, ends the text */
    if ((n && ds_stop_filter_feed(&h->stop, t, n, on_text, h)) || ds_chat_parser_ended(&h->parser)) {
        h->stop_hit = 1;
        h->reason = DS_FINISH_STOP;
        ds_engine_abort(s->eng, h->id);
        end_text(c, h);
    }
}

static void on_finish(ds_completion *c, choice *h, const ds_event *ev) {
    if (h->done) return;
    if (ev->reason == DS_FINISH_ERROR || (ev->reason == DS_FINISH_ABORT && !c->client_gone)) {
        if (!c->failed) {
            c->failed = 1;
            snprintf(c->fail_msg, sizeof c->fail_msg, "%s",
                     ev->reason == DS_FINISH_ERROR ? (h->error[0] ? h->error : "the model failed")
                                                   : "the request was aborted by the server");
        }
        h->done = 1;
        return;
    }
    h->reason = ev->reason;
    end_text(c, h);
}

static int all_done(const ds_completion *c) {
    for (int i = 0; i < c->n; i++)
        if (!c->ch[i].done) return 0;
    return 1;
}

static int events_pending(const ds_completion *c) {
    for (int i = 0; i < c->n; i++)
        if (c->ch[i].q_n) return 1;
    return 0;
}

static int first_event_is_token(ds_completion *c) {
    int token = 0;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n; i++) token |= c->ch[i].q_n > 0 && !c->ch[i].q[0].finished;
    pthread_mutex_unlock(&c->mu);
    return token;
}

/* Moves the queued events out and processes them on this thread. */
static void pump(ds_completion *c) {
    for (int i = 0; i < c->n; i++) {
        choice *h = &c->ch[i];
        pthread_mutex_lock(&c->mu);
        int n = h->q_n;
        ds_event *evs = n ? malloc((size_t)n * sizeof *evs) : NULL;
        if (evs) memcpy(evs, h->q, (size_t)n * sizeof *evs);
        if (evs || !n) h->q_n = 0;
        pthread_mutex_unlock(&c->mu);
        for (int k = 0; evs && k < n; k++) {
            if (h->done) continue;
            if (evs[k].finished) on_finish(c, h, &evs[k]);
            else on_token(c, h, &evs[k]);
        }
        free(evs);
    }
    if (c->failed) {   /* one failed choice fails the request: stop the others */
        for (int i = 0; i < c->n; i++) c->ch[i].done = 1;
        abort_all(c);
    }
}

static int client_closed(int fd) {
    if (fd < 0) return 0;
    char b;
    ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Waits up to 50 ms for events; returns -1 when the client went away. */
static int wait_events(ds_completion *c) {
    pthread_mutex_lock(&c->mu);
    if (!events_pending(c)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    pthread_mutex_unlock(&c->mu);
    double now = ds_server_now();
    if (now - c->t_checked < 0.01) return 0;
    c->t_checked = now;
    if (client_closed(c->fd)) {
        settle(c, OUT_ABORTED);
        c->client_gone = 1;
        abort_all(c);
        return -1;
    }
    return 0;
}

static ds_oai_usage usage_of(const ds_completion *c) {
    ds_oai_usage u = {.prompt_tokens = c->n_prompt, .cached_tokens = c->ch[0].n_cached};
    for (int i = 0; i < c->n; i++) {
        const choice *h = &c->ch[i];
        /* a natural stop counts the end token the engine sampled; a stop string counts up to the match */
        u.completion_tokens += h->stop_hit ? h->n_tokens : (h->n_generated_final > h->n_tokens ? h->n_generated_final : h->n_tokens);
        u.reasoning_tokens += h->reasoning_tokens;
    }
    return u;
}

static void record_done(ds_completion *c) {   /* through settle only */
    ds_oai_usage u = usage_of(c);
    ds_metrics_done(&c->srv->metrics, ds_server_now() - c->t_start, u.prompt_tokens, u.completion_tokens);
}

/* --- start --- */

int ds_http_vfail(ds_http_error *err, int status, const char *type, const char *code, const char *param,
                  const char *fmt, va_list ap) {
    err->status = status;
    err->type = type;
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    return -1;
}

static int http_fail(ds_http_error *err, int status, const char *type, const char *code, const char *param,
                     const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int http_fail(ds_http_error *err, int status, const char *type, const char *code, const char *param,
                     const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ds_http_vfail(err, status, type, code, param, fmt, ap);
    va_end(ap);
    return -1;
}

static int render_prompt(ds_server *s, const ds_oai_request *r, char **text, size_t *len, ds_http_error *err) {
    ds_err e = {0};
    json_t *ctx = ds_oai_template_context(r, s->eos_text, &e);
    ds_status st = ctx ? ds_jinja_render(s->tmpl, ctx, text, len, &e) : e.code ? e.code : DS_EINVAL;
    json_decref(ctx);
    if (st) return http_fail(err, 400, "invalid_request_error", NULL, "messages", "the chat template failed: %s", e.msg);
    return 0;
}

/* A seed for a request that did not give one: from the kernel's generator, or,
 * should that fail, the clock and a counter, which still differ per request. */
static uint64_t fresh_seed(void) {
    uint64_t x;
    if (getrandom(&x, sizeof x, GRND_NONBLOCK) == (ssize_t)sizeof x) return x;
    static _Atomic uint64_t n;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ (atomic_fetch_add(&n, 1) * 0x9E3779B97F4A7C15ull);
}

/* --- the grammar the answer follows --- */

/* The constraint's grammar from the cache, or compiled (gbnf, when not NULL,
 * writes it) and parsed, then kept. field: the request field, for errors. */
typedef ds_status (*compile_fn)(const void *arg, char **gbnf, size_t *len, ds_err *e);

static int cached_grammar(ds_server *s, const char *key, size_t key_len, compile_fn compile, const void *arg,
                          const char *field, int client_text, ds_grammar **out, ds_http_error *err) {
    ds_grammar *g = key ? ds_grammar_cache_get(s->grammars, key, key_len) : NULL;
    ds_metrics_grammar_lookup(&s->metrics, g != NULL);
    if (g) {
        *out = g;
        return 0;
    }
    ds_err e = {0};
    char *gbnf = NULL;
    size_t n = 0;
    ds_status st = compile(arg, &gbnf, &n, &e);
    if (st == DS_OK && (st = ds_grammar_parse(gbnf, n, &g, &e)) != DS_OK && !client_text)
        ds_err_prefix(&e, "the grammar compiled from it does not parse");
    free(gbnf);
    if (st == DS_ENOMEM) return http_fail(err, 500, "server_error", NULL, NULL, "'%s': %s", field, e.msg);
    if (st) return http_fail(err, 400, "invalid_request_error", NULL, field, "'%s': %s", field, e.msg);
    if (key) ds_grammar_cache_put(s->grammars, key, key_len, g);
    *out = g;
    return 0;
}

static ds_status compile_output(const void *o, char **gbnf, size_t *len, ds_err *e) {
    return ds_output_gbnf(o, gbnf, len, e);
}

static ds_status compile_tools(const void *p, char **gbnf, size_t *len, ds_err *e) {
    return ds_tool_grammar(p, gbnf, len, e);
}

/* The grammar of the request's answer, or none (*g NULL): a forced tool call
 * (from the start, after the reasoning), strict functions under tool_choice
 * auto (from the call's first byte on: *trigger), or the output constraint. */
static int request_grammar(ds_completion *c, ds_grammar **g, const char **trigger, ds_http_error *err) {
    ds_server *s = c->srv;
    const ds_oai_request *r = &c->req;
    *g = NULL;
    *trigger = NULL;
    char *key = NULL;
    size_t kl = 0;
    int rc = 0;
    int forced = r->kind == DS_OAI_CHAT && r->tool_choice >= DS_TOOLS_REQUIRED;
    if (forced || (r->kind == DS_OAI_CHAT && r->tool_choice == DS_TOOLS_AUTO && r->strict_tools)) {
        ds_tool_grammar_params tp = {.form = s->call_form, .tools = r->tools,
                                     .only = r->tool_choice == DS_TOOLS_NAMED ? r->tool_name : NULL,
                                     .parallel = r->parallel_tool_calls,
                                     /* the filter allows the blank bytes after </think> itself */
                                     .lead_space = 0,
                                     .max_space = 4};
        key = ds_tool_grammar_key(&tp, &kl);
        rc = cached_grammar(s, key, kl, compile_tools, &tp, "tools", 0, g, err);
        if (!forced) *trigger = "<tool_call>";
    } else if (r->output.kind != DS_OUT_NONE) {
        key = ds_output_cache_key(&r->output, &kl);
        rc = cached_grammar(s, key, kl, compile_output, &r->output, r->output.field, r->output.kind == DS_OUT_GRAMMAR,
                            g, err);
    }
    free(key);
    return rc;
}

/* ids appended to toks; field: the request field they came from, for errors */
static int append_ids(ds_server *s, ds_tokens *toks, const int32_t *ids, int n, const char *field, ds_http_error *err) {
    int V = ds_tokenizer_n_tokens(s->tok);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return http_fail(err, 400, "invalid_request_error", NULL, field, "token id %d at index %d is outside the "
                             "vocabulary", ids[i], i);
    if (toks->n + (size_t)n > toks->cap) {
        size_t cap = toks->n + (size_t)n + 1;
        int32_t *x = realloc(toks->ids, cap * sizeof *x);
        if (!x) return http_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        toks->ids = x;
        toks->cap = cap;
    }
    memcpy(toks->ids + toks->n, ids, (size_t)n * sizeof *ids);
    toks->n += (size_t)n;
    return 0;
}

static int append_text(ds_server *s, ds_tokens *toks, const char *text, size_t len, const char *field,
                       ds_http_error *err) {
    ds_err e = {0};
    if (ds_tokenizer_encode(s->tok, text, len, 1, toks, &e) != DS_OK)
        return http_fail(err, 400, "invalid_request_error", NULL, field, "the %s could not be tokenized: %s",
                         field, e.msg);
    return 0;
}

static int append_special(ds_server *s, ds_tokens *toks, const char *name, ds_http_error *err) {
    int32_t id = ds_tokenizer_find(s->tok, name);
    if (id < 0)
        return http_fail(err, 400, "invalid_request_error", NULL, "suffix", "'suffix' needs fill-in-the-middle, and "
                         "this model's vocabulary has no %s token", name);
    return append_ids(s, toks, &id, 1, "suffix", err);
}

/* logit_bias names tokens the vocabulary has */
static int check_bias(ds_server *s, const ds_oai_request *r, ds_http_error *err) {
    int V = ds_tokenizer_n_tokens(s->tok);
    for (int i = 0; i < r->sampling.n_bias; i++)
        if (r->sampling.bias[i].token >= V)
            return http_fail(err, 400, "invalid_request_error", NULL, "logit_bias", "the key '%d' of 'logit_bias' is "
                             "outside the vocabulary (%d tokens)", r->sampling.bias[i].token, V);
    return 0;
}

/* ds_completion_prompt_at, and the request's images (images NULL: only their token counts; patches 0: only
 * their hashes and first tokens) */
static int prompt_with_images(ds_server *s, const ds_oai_request *r, int which, ds_tokens *toks, int *opened_reasoning,
                              ds_prompt_images *images, int patches, ds_http_error *err) {
    memset(err, 0, sizeof *err);
    *toks = (ds_tokens){0};
    if (images) *images = (ds_prompt_images){0};
    if (opened_reasoning) *opened_reasoning = 0;
    if (check_bias(s, r, err)) return -1;
    const char *field = r->kind == DS_OAI_CHAT ? "messages" : "prompt";
    int rc = 0;
    if (r->kind == DS_OAI_CHAT) {
        char *text = NULL;
        size_t tl = 0;
        /* a request the server cannot take the images of is refused before any work */
        if (ds_image_input_check(s, r, err) || render_prompt(s, r, &text, &tl, err)) return -1;
        if (opened_reasoning) *opened_reasoning = tl >= 8 && !memcmp(text + tl - 8, "<think>\n", 8);
        rc = append_text(s, toks, text, tl, field, err);
        free(text);
        if (!rc) rc = ds_image_input_expand(s, r, toks, images, patches, err);
    } else {
        if (which < 0 || which >= r->n_prompts) return http_fail(err, 400, "invalid_request_error", NULL, field,
                                                                 "'prompt' has no prompt %d", which);
        const ds_oai_prompt *p = &r->prompts[which];
        /* fill in the middle, in Qwen's order: prefix, suffix, then the middle is generated */
        if (r->suffix) rc = append_special(s, toks, "<|fim_prefix|>", err);
        if (!rc) rc = p->text ? append_text(s, toks, p->text, p->len, field, err)
                              : append_ids(s, toks, p->ids, p->n_ids, field, err);
        if (!rc && r->suffix) rc = append_special(s, toks, "<|fim_suffix|>", err);
        if (!rc && r->suffix) rc = append_text(s, toks, r->suffix, r->suffix_len, "suffix", err);
        if (!rc && r->suffix) rc = append_special(s, toks, "<|fim_middle|>", err);
    }
    if (!rc && toks->n == 0) rc = http_fail(err, 400, "invalid_request_error", NULL, field, "the prompt is empty");
    if (rc) {
        free(toks->ids);
        *toks = (ds_tokens){0};
    }
    return rc;
}

int ds_completion_prompt_at(ds_server *s, const ds_oai_request *r, int which, ds_tokens *toks, int *opened_reasoning,
                            ds_http_error *err) {
    return prompt_with_images(s, r, which, toks, opened_reasoning, NULL, 0, err);
}

int ds_completion_prompt_placed(ds_server *s, const ds_oai_request *r, int which, ds_tokens *toks,
                                struct ds_prompt_images *images, ds_http_error *err) {
    return prompt_with_images(s, r, which, toks, NULL, images, 0, err);
}

int ds_completion_prompt(ds_server *s, const ds_oai_request *r, ds_tokens *toks, int *opened_reasoning,
                         ds_http_error *err) {
    return ds_completion_prompt_at(s, r, 0, toks, opened_reasoning, err);
}

ds_completion *ds_completion_start(ds_server *s, ds_oai_request *req, const ds_answer_format *fmt,
                                   const json_t *api_body, int fd, ds_http_error *err) {
    memset(err, 0, sizeof *err);
    ds_completion *c = calloc(1, sizeof *c);
    if (!c) {
        http_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        ds_oai_request_free(req);
        return NULL;
    }
    atomic_fetch_add(&s->in_flight, 1);
    c->srv = s;
    c->req = *req;
    memset(req, 0, sizeof *req);
    c->n = c->req.n;
    c->fd = fd;
    c->refs = 1;
    c->t_start = ds_server_now();
    c->created = (long)time(NULL);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (fmt) fmt->make_id(c->id, sizeof c->id);
    else ds_random_id(c->req.kind == DS_OAI_CHAT ? "chatcmpl-" : "cmpl-", c->id, sizeof c->id);
    int n_prompts = c->req.kind == DS_OAI_CHAT ? 1 : c->req.n_prompts;
    c->per_prompt = c->req.kind == DS_OAI_COMPLETION && c->req.best_of > c->n ? c->req.best_of : c->n;
    c->n = n_prompts * c->per_prompt;
    ds_tokens ptoks[DS_OAI_MAX_CHOICES] = {0};
    ds_prompt_images images = {0};   /* the chat prompt's, handed to the last choice's engine request (copies to the others) */
    ds_err e = {0};
    ds_grammar *grammar = NULL;
    if (c->n > DS_OAI_MAX_CHOICES) {
        c->n = 0;
        http_fail(err, 400, "invalid_request_error", NULL, "n", "more than %d choices in one request", DS_OAI_MAX_CHOICES);
        goto fail;
    }
    if (fmt) {
        c->fmt = fmt;
        c->api_body = api_body ? json_incref((json_t *)api_body) : NULL;
        c->actx = (ds_answer_ctx){.id = c->id, .created = c->created, .model = s->model_name,
                                  .fingerprint = s->fingerprint, .request = c->api_body};
        if (c->n != 1) {
            http_fail(err, 400, "invalid_request_error", NULL, "n", "this API answers with one choice");
            goto fail;
        }
        if (fmt->init && fmt->init(&c->actx)) {
            c->fmt = NULL;   /* nothing to release */
            http_fail(err, 500, "server_error", NULL, NULL, "out of memory");
            goto fail;
        }
    }
    for (int p = 0; p < n_prompts; p++) {
        ds_tokens *t = &ptoks[p];
        if (prompt_with_images(s, &c->req, p, t, &c->start_in_reasoning, p == 0 ? &images : NULL, 1, err)) goto fail;
        const char *field = c->req.kind == DS_OAI_CHAT ? "messages" : "prompt";
        int np = (int)t->n, mt = c->req.max_tokens < 0 ? s->ctx - np : c->req.max_tokens;
        if (np >= s->ctx) {
            http_fail(err, 400, "invalid_request_error", "context_length_exceeded", field,
                      "the prompt%s has %d tokens; the context holds %d", n_prompts > 1 ? " (one of several)" : "", np,
                      s->ctx);
            goto fail;
        }
        /* Anthropic's clients ask for far more than a local context holds (Claude Code: 32000) and
         * expect the server to cut, as its API does when the model's limit is lower */
        if (c->req.clamp_max_tokens && np + mt > s->ctx) mt = s->ctx - np;
        if (np + mt > s->ctx) {
            http_fail(err, 400, "invalid_request_error", "context_length_exceeded", "max_tokens",
                      "the prompt (%d tokens) + max_tokens (%d) exceeds the context of %d tokens", np, mt, s->ctx);
            goto fail;
        }
        c->n_prompt += np;
        for (int k = 0; k < c->per_prompt; k++) {
            choice *h = &c->ch[p * c->per_prompt + k];
            h->prompt_index = p;
            h->n_prompt = np;
            h->max_tokens = mt;
        }
    }
    c->parse_tools = c->req.kind == DS_OAI_CHAT && c->req.tools && c->req.tool_choice != DS_TOOLS_NONE;
    const char *trigger = NULL;
    if (request_grammar(c, &grammar, &trigger, err)) goto fail;
    for (int i = 0; i < c->n; i++) {
        choice *h = &c->ch[i];
        h->rq = c;
        h->index = i;
        h->q_max = h->max_tokens + 2;
        if (ds_stream_decoder_init(&h->dec, s->tok, 0, &e) != DS_OK) {
            http_fail(err, 500, "server_error", NULL, NULL, "%s", e.msg);
            goto fail;
        }
        ds_stop_filter_init(&h->stop, c->req.stop, c->req.stop_len, c->req.n_stop);
        ds_chat_parser_init(&h->parser, c->start_in_reasoning, c->parse_tools);
        if (!c->req.parallel_tool_calls) ds_chat_parser_limit_calls(&h->parser, 1);
        if (grammar && !trigger) ds_chat_parser_strip_blanks(&h->parser);
    }
    if (grammar) {
        const ds_model_config *mc = ds_model_cfg(s->model);
        for (int i = 0; i < c->n; i++) {
            ds_grammar_filter_params fp = {.grammar = grammar, .vocab = s->vocab, .tok = s->tok, .end_ids = mc->eos_ids,
                                           .n_end = mc->n_eos, .in_reasoning = c->start_in_reasoning,
                                           .trigger = trigger};
            if (ds_grammar_filter_new(&fp, &c->ch[i].gf, &e) != DS_OK) {
                http_fail(err, 500, "server_error", NULL, NULL, "the output constraint: %s", e.msg);
                goto fail;
            }
        }
        ds_grammar_unref(grammar);   /* the filters hold it */
        grammar = NULL;
    }
    uint64_t seed = c->req.seed_given ? 0 : fresh_seed();
    for (int i = 0; i < c->n; i++) {
        choice *h = &c->ch[i];
        const ds_tokens *t = &ptoks[h->prompt_index];
        ds_request_params rp = {.prompt = t->ids, .n_prompt = (int)t->n, .sampling = c->req.sampling,
                                .max_tokens = h->max_tokens,
                                /* best_of ranks by the candidates' logprobs */
                                .want_logprob = c->req.logprobs || c->per_prompt > c->req.n,
                                .n_top_logprobs = c->req.logprobs ? c->req.top_logprobs : 0,
                                .ignore_eos = c->req.ignore_eos, .on_event = on_event, .user = h};
        if (h->gf) rp.filter = ds_grammar_filter_fn, rp.filter_user = h->gf;
        /* the choices of one request share its seed (drawn here when the client gave none) and
         * differ by their index, which the sampler keys every draw with */
        rp.sampling.seed = c->req.seed_given ? c->req.sampling.seed : seed;
        rp.sampling.choice = (uint32_t)i;
        /* the fault hook decides at submission, so the engine (not this thread, which may lag
         * behind it) picks the call that fails */
        unsigned long long nreq = atomic_fetch_add(&s->n_requests, 1) + 1;
        if ((s->cfg.fault_after > 0 && nreq == (unsigned long long)s->cfg.fault_after) ||
            (s->cfg.fault_every > 0 && nreq % (unsigned long long)s->cfg.fault_every == 0)) {
            rp.fault = s->cfg.fault_phase;
            rp.fault_after_tokens = s->cfg.fault_at_token;
        }
        ds_prompt_images mine = {0};
        if (images.n) {
            if (i + 1 < c->n ? ds_prompt_images_copy(&images, &mine) : (mine = images, images = (ds_prompt_images){0}, 0)) {
                http_fail(err, 500, "server_error", NULL, NULL, "out of memory for the images");
                for (int k = i; k < c->n; k++) c->ch[k].done = 1, c->ch[k].engine_done = 1;
                ds_prompt_images_free(&images);
                for (int p = 0; p < n_prompts; p++) free(ptoks[p].ids);
                settle(c, OUT_REFUSED);
                ds_completion_release(c);
                return NULL;
            }
            rp.images = mine.items;
            rp.n_images = mine.n;
        }
        pthread_mutex_lock(&c->mu);
        c->refs++;
        pthread_mutex_unlock(&c->mu);
        h->id = ds_engine_submit(s->eng, &rp, &e);
        if (h->id) {   /* the engine took the patches */
            for (int k = 0; k < mine.n; k++) mine.items[k].patches = (ds_image_patches){0};
        }
        ds_prompt_images_free(&mine);
        if (!h->id) {
            ds_prompt_images_free(&images);
            pthread_mutex_lock(&c->mu);
            c->refs--;
            pthread_mutex_unlock(&c->mu);
            for (int k = i; k < c->n; k++) c->ch[k].done = 1, c->ch[k].engine_done = 1;
            if (e.code == DS_EBUSY)
                http_fail(err, 429, "rate_limit_error", "rate_limit_exceeded", NULL, "%s; retry later", e.msg);
            else if (e.code == DS_EINVAL)
                http_fail(err, 400, "invalid_request_error", NULL, c->req.n_images ? "messages" : "max_tokens", "%s", e.msg);
            else
                http_fail(err, 503, "server_error", "server_overloaded", NULL, "%s", e.msg);
            for (int p = 0; p < n_prompts; p++) free(ptoks[p].ids);
            settle(c, OUT_REFUSED);
            ds_completion_release(c);
            return NULL;
        }
    }
    for (int p = 0; p < n_prompts; p++) free(ptoks[p].ids), ptoks[p].ids = NULL;
    /* wait for the first event, so a failure before any output is still a status */
    for (;;) {
        pthread_mutex_lock(&c->mu);
        int any = events_pending(c);
        pthread_mutex_unlock(&c->mu);
        if (any) break;
        if (wait_events(c) < 0) break;
    }
    /* a stream has begun once the model produced a token: a failure after that is an SSE
     * error event, even when it is queued already */
    if (!c->client_gone && !(c->req.stream && first_event_is_token(c))) pump(c);
    if (c->client_gone) {   /* before any output: nothing to answer (counted as an abort) */
        err->status = 0;
        ds_completion_release(c);
        return NULL;
    }
    if (c->failed) {
        http_fail(err, 500, "server_error", NULL, NULL, "the model failed: %s", c->fail_msg);
        err->engine = 1;
        settle(c, OUT_REFUSED);
        ds_completion_release(c);
        return NULL;
    }
    if (c->fmt) {
        c->actx.prompt_tokens = c->n_prompt;
        pthread_mutex_lock(&c->mu);
        if (c->ch[0].q_n) c->actx.cached_tokens = c->ch[0].q[0].n_cached;
        pthread_mutex_unlock(&c->mu);
        if (c->ch[0].n_cached > c->actx.cached_tokens) c->actx.cached_tokens = c->ch[0].n_cached;
        c->actx.prompt_opened_reasoning = c->start_in_reasoning;
    }
    if (c->req.stream && c->fmt) {   /* the format's opening events go first */
        ds_sb pending = c->out;
        c->out = (ds_sb){0};
        c->fmt->stream_begin(&c->actx, &c->out);
        if (pending.n) ds_sb_append(&c->out, pending.s, pending.n);
        ds_sb_free(&pending);
    } else if (c->req.stream && c->req.echo) {   /* each choice's prompt goes first */
        ds_sb pending = c->out;
        c->out = (ds_sb){0};
        for (int i = 0; i < c->n; i++) {
            ds_sb t = {0};
            echo_text(c, c->ch[i].prompt_index, &t);
            emit_chunk(c, &c->ch[i], ds_oai_textn(t.s ? t.s : "", t.n), NULL);
            ds_sb_free(&t);
        }
        if (pending.n) ds_sb_append(&c->out, pending.s, pending.n);
        ds_sb_free(&pending);
    } else if (c->req.stream && c->req.kind == DS_OAI_CHAT) {   /* role chunks go first */
        ds_sb pending = c->out;
        c->out = (ds_sb){0};
        for (int i = 0; i < c->n; i++) {
            json_t *ch, *o = chunk_new(c, i, &ch), *d = json_object();
            json_object_set_new(ch, "delta", d);
            json_object_set_new(d, "role", json_string("assistant"));
            json_object_set_new(d, "content", json_string(""));
            json_object_set_new(ch, "logprobs", json_null());
            json_object_set_new(ch, "finish_reason", json_null());
            ds_sse_data(&c->out, o);
            json_decref(o);
        }
        if (pending.n) ds_sb_append(&c->out, pending.s, pending.n);
        ds_sb_free(&pending);
    }
    return c;
fail:
    ds_prompt_images_free(&images);
    for (int p = 0; p < n_prompts && p < DS_OAI_MAX_CHOICES; p++) free(ptoks[p].ids);
    ds_grammar_unref(grammar);
    for (int i = 0; i < c->n; i++) c->ch[i].done = 1;
    settle(c, OUT_REFUSED);
    ds_completion_release(c);
    return NULL;
}

/* --- non-streaming --- */

/* The choices to answer with, in order: all of them, or (best_of) for each prompt its n
 * candidates with the highest cumulative logprob (ties: the earlier candidate), as vLLM ranks
 * them. Returns how many. */
static int best_choices(const ds_completion *c, int *order) {
    int n = c->req.kind == DS_OAI_CHAT ? c->n : c->req.n, k = c->per_prompt, m = 0;
    for (int p = 0; p * k < c->n; p++) {
        int cand[DS_OAI_MAX_N];
        for (int j = 0; j < k; j++) {   /* insertion sort: at most 16 */
            int i = p * k + j, at = j;
            for (; at > 0 && c->ch[cand[at - 1]].cum_logprob < c->ch[i].cum_logprob; at--) cand[at] = cand[at - 1];
            cand[at] = i;
        }
        for (int j = 0; j < n && j < k; j++) order[m++] = k == n ? p * k + j : cand[j];
    }
    return m;
}


char *ds_completion_wait_json(ds_completion *c, int *status) {
    while (!all_done(c) && !c->client_gone) {
        if (wait_events(c) < 0) break;
        pump(c);
    }
    if (c->client_gone) {
        *status = 499;
        return NULL;
    }
    if (c->failed) {
        *status = 500;
        settle(c, OUT_FAILED);
        char msg[320];
        snprintf(msg, sizeof msg, "the model failed: %s", c->fail_msg);
        return c->fmt ? c->fmt->error_body(500, "server_error", NULL, NULL, msg)
                      : ds_oai_error_json("server_error", NULL, NULL, msg);
    }
    if (c->fmt) {
        choice *h = &c->ch[0];
        ds_answer_result r = {.content = h->content.s ? h->content.s : "", .n_content = h->content.n,
                              .reasoning = h->reasoning.s ? h->reasoning.s : "", .n_reasoning = h->reasoning.n,
                              .tool_calls = h->raw_calls, .end = end_of(c, h), .usage = usage_of(c)};
        settle(c, OUT_DONE);
        char *s = c->fmt->body(&c->actx, &r);
        *status = s ? 200 : 500;
        return s ? s : c->fmt->error_body(500, "server_error", NULL, NULL, "out of memory");
    }
    json_t *arr;
    int chat = c->req.kind == DS_OAI_CHAT;
    json_t *o = ds_oai_envelope(c->id, chat ? "chat.completion" : "text_completion", c->created, c->srv->model_name,
                                c->srv->fingerprint, &arr);
    int order[DS_OAI_MAX_CHOICES], n_out = best_choices(c, order);
    for (int i = 0; i < n_out; i++) {
        choice *h = &c->ch[order[i]];
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(i));
        if (chat) {
            json_object_set_new(ch, "message", ds_oai_chat_message(h->content.s, h->content.n, h->reasoning.s, h->reasoning.n,
                                                                   c->start_in_reasoning, h->tool_calls));
            h->tool_calls = NULL;
        } else if (c->req.echo) {
            ds_sb t = {0};
            echo_text(c, h->prompt_index, &t);
            ds_sb_append(&t, h->content.s ? h->content.s : "", h->content.n);
            json_object_set_new(ch, "text", ds_oai_textn(t.s, t.n));
            ds_sb_free(&t);
        } else {
            json_object_set_new(ch, "text", ds_oai_textn(h->content.s, h->content.n));
        }
        json_t *lp = take_logprobs(c, h);
        json_object_set_new(ch, "logprobs", lp ? lp : json_null());
        json_object_set_new(ch, "finish_reason", json_string(finish_name(h)));
        json_array_append_new(arr, ch);
    }
    ds_oai_usage u = usage_of(c);
    json_object_set_new(o, "usage", ds_oai_usage_json(&u));
    settle(c, OUT_DONE);
    char *s = ds_json_dump(o);
    json_decref(o);
    *status = s ? 200 : 500;
    return s ? s : ds_oai_error_json("server_error", NULL, NULL, "out of memory");
}

/* --- streaming --- */

static void stream_tail(ds_completion *c) {
    if (c->fmt) {
        if (c->failed) {
            settle(c, OUT_FAILED);
            char msg[320];
            snprintf(msg, sizeof msg, "the model failed: %s", c->fail_msg);
            c->fmt->stream_fail(&c->actx, &c->out, msg);
        } else {
            ds_answer_end end = end_of(c, &c->ch[0]);
            ds_oai_usage u = usage_of(c);
            settle(c, OUT_DONE);
            c->fmt->stream_end(&c->actx, &c->out, &end, &u);
        }
        c->stream_ended = 1;
        return;
    }
    if (c->failed) {
        settle(c, OUT_FAILED);
        char msg[320];
        snprintf(msg, sizeof msg, "the model failed: %s", c->fail_msg);
        ds_sse_error(&c->out, "server_error", NULL, msg);
    } else {
        if (c->req.include_usage) {
            json_t *arr;
            json_t *o = ds_oai_envelope(c->id, c->req.kind == DS_OAI_CHAT ? "chat.completion.chunk" : "text_completion",
                                        c->created, c->srv->model_name, c->srv->fingerprint, &arr);
            ds_oai_usage u = usage_of(c);
            json_object_set_new(o, "usage", ds_oai_usage_json(&u));
            ds_sse_data(&c->out, o);
            json_decref(o);
        }
        settle(c, OUT_DONE);
        ds_sse_done(&c->out);
    }
    c->stream_ended = 1;
}

ssize_t ds_completion_read(void *cls, uint64_t pos, char *buf, size_t max) {
    ds_completion *c = cls;
    for (;;) {
        if (c->out.n) {
            size_t k = c->out.n < max ? c->out.n : max;
            memcpy(buf, c->out.s, k);
            ds_sb_consume(&c->out, k);
            return (ssize_t)k;
        }
        if (c->stream_ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (c->client_gone) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (all_done(c)) {
            stream_tail(c);
            continue;
        }
        if (wait_events(c) < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        pump(c);
    }
}
