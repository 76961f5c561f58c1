/* http.c - the HTTP side of `deltaserve serve` (libmicrohttpd, one thread per
 * connection): routing, authentication, body limits, status codes, and the
 * server's life cycle (load, serve, drain on SIGTERM).
 *
 * Routes:
 *   POST /v1/chat/completions, POST /v1/completions   (completion.c)
 *   POST /v1/responses                                (responses_api.c, through completion.c)
 *   POST /v1/messages, POST /v1/messages/count_tokens (messages_api.c, through completion.c)
 *   POST /tokenize, POST /detokenize,
 *   POST /v1/chat/completions/render, POST /v1/completions/render  (token_api.c)
 *   GET  /v1/models, GET /v1/models/{id}, GET /health, GET /metrics
 * Every route but /health and /metrics (probes and scrapers) needs the key
 * when --api-key is set: "Authorization: Bearer KEY", or "x-api-key: KEY" as
 * Anthropic's clients send it. Errors on the Messages routes are in
 * Anthropic's shape, all others in OpenAI's. With --allowed-origins (cors.h)
 * an OPTIONS preflight from an allowed Origin gets 204 on any path, without
 * the key (browsers send none), and every answer to such an Origin carries
 * Access-Control-Allow-Origin. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/answer_format.h"
#include "server/completion.h"
#include "server/conn_guard.h"
#include "server/cors.h"
#include "server/json_text.h"
#include "server/kv_publisher.h"
#include "server/messages_api.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/responses_api.h"
#include "server/server_int.h"
#include "server/token_api.h"
#include "common/strbuf.h"
#include "engine/kv_events.h"
#include "image/image.h"
#include "tokenizer/default_chat_template.h"

typedef struct {
    ds_sb body;
    int too_large;
    int over;   /* admitted past --max-connections (conn_guard.h): probes only */
} conn_ctx;

void ds_server_defaults(ds_server_config *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    ds_engine_defaults(&c->engine);
    c->max_body_bytes = (size_t)8 << 20;
    c->max_connections = 256;
    c->idle_timeout_s = 60;
    c->header_timeout_s = 10.0;
    c->drain_timeout_s = 60.0;
    c->fault_phase = DS_FAULT_ANY;
    ds_image_limits lim;
    ds_image_default_limits(&lim);
    c->max_image_pixels = lim.max_pixels;
    c->max_image_bytes = lim.max_bytes;
    c->max_images = DS_DEFAULT_MAX_IMAGES;
    c->vision_bytes = DS_DEFAULT_VISION_BYTES;
    c->media_timeout_s = 10.0;
    c->kv_events_queue_bytes = (size_t)16 << 20;
    c->data_parallel_size = 1;
    c->data_parallel_rank = -1;
}

/* --- responses --- */

/* The CORS policy of the one server this process runs (NULL: none), set once before the daemon
 * starts: every response is made where only the connection is at hand. */
static const ds_cors *cors_policy;

static void add_cors_headers(struct MHD_Connection *conn, struct MHD_Response *r) {
    if (!cors_policy) return;
    const char *allow = ds_cors_allow_origin(
        cors_policy, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN));
    if (ds_cors_varies(cors_policy)) MHD_add_response_header(r, MHD_HTTP_HEADER_VARY, "Origin");
    if (allow) MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, allow);
}

static enum MHD_Result send_text(struct MHD_Connection *conn, int status, const char *ctype, char *body, size_t len,
                                 const char *retry_after) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (retry_after) MHD_add_response_header(r, "Retry-After", retry_after);
    add_cors_headers(conn, r);
    enum MHD_Result ok = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *conn, int status, char *body) {
    if (!body) return MHD_NO;
    return send_text(conn, status, "application/json", body, strlen(body), NULL);
}

/* OPTIONS with an Origin and Access-Control-Request-Method: 204 with what the policy allows, or
 * 400 for an Origin it does not (as Starlette's CORS middleware, vLLM's, answers it) */
static enum MHD_Result send_preflight(struct MHD_Connection *conn) {
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN);
    if (!ds_cors_allow_origin(cors_policy, origin))
        return send_json(conn, 400, ds_oai_error_json("invalid_request_error", "cors_origin_not_allowed", NULL,
                                                      "this origin is not among --allowed-origins"));
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    add_cors_headers(conn, r);
    MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_METHODS, ds_cors_methods(cors_policy));
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            ds_cors_headers(cors_policy, MHD_lookup_connection_value(
                                                             conn, MHD_HEADER_KIND, "Access-Control-Request-Headers")));
    MHD_add_response_header(r, "Access-Control-Max-Age", DS_CORS_MAX_AGE);
    enum MHD_Result ok = MHD_queue_response(conn, 204, r);
    MHD_destroy_response(r);
    return ok;
}

static ds_error_kind kind_of_status(int status) {
    return status == 400 ? DS_ERRK_BAD_REQUEST : status == 401 ? DS_ERRK_AUTH
         : status == 404 || status == 405 ? DS_ERRK_NOT_FOUND : status == 413 ? DS_ERRK_TOO_LARGE
         : status == 429 ? DS_ERRK_QUEUE_FULL : status == 503 ? DS_ERRK_UNAVAILABLE : DS_ERRK_INTERNAL;
}

/* completion: the error ends a completion request, which counts it as
 * rejected (refused before generating) or failed (a 5xx other than 503), so
 * that the started counter always equals the sum of the outcomes. fmt: the
 * API whose error shape the body takes (NULL: OpenAI's). */
static enum MHD_Result send_error_kind(ds_server *s, struct MHD_Connection *conn, const ds_answer_format *fmt,
                                       int completion, int status, ds_error_kind k, const char *type,
                                       const char *code, const char *param, const char *msg) {
    ds_metrics_error(&s->metrics, k);
    if (completion) {
        if (status >= 500 && status != 503) ds_metrics_failed(&s->metrics);
        else ds_metrics_rejected(&s->metrics);
    }
    char *body = fmt ? fmt->error_body(status, type, code, param, msg) : ds_oai_error_json(type, code, param, msg);
    if (!body) return MHD_NO;
    return send_text(conn, status, "application/json", body, strlen(body), status == 429 || status == 503 ? "1" : NULL);
}

/* type and code in OpenAI's vocabulary (ds_oai_error_obj); code may be NULL */
static enum MHD_Result send_error(ds_server *s, struct MHD_Connection *conn, int completion, int status,
                                  const char *type, const char *code, const char *param, const char *msg) {
    return send_error_kind(s, conn, NULL, completion, status, kind_of_status(status), type, code, param, msg);
}

static enum MHD_Result send_error_in(ds_server *s, struct MHD_Connection *conn, const ds_answer_format *fmt,
                                     int completion, int status, const char *type, const char *code,
                                     const char *param, const char *msg) {
    return send_error_kind(s, conn, fmt, completion, status, kind_of_status(status), type, code, param, msg);
}

/* --- checks --- */

static int key_ok(const ds_server *s, struct MHD_Connection *conn) {
    if (!s->cfg.api_key) return 1;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    const char *x = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key");
    const char *got;
    if (h && !strncmp(h, "Bearer ", 7)) got = h + 7;
    else if (x) got = x;
    else return 0;
    const char *want = s->cfg.api_key;
    size_t gl = strlen(got), wl = strlen(want);
    unsigned diff = (unsigned)(gl ^ wl);
    for (size_t i = 0; i < wl; i++) diff |= (unsigned char)want[i] ^ (unsigned char)(i < gl ? got[i] : 0);
    return diff == 0;
}

/* --- routes --- */

/* whether a request's model is one of the names this server answers to (--served-model-name) */
static int model_known(const ds_server *s, const char *id) {
    if (!s->cfg.n_served_model_names) return !strcmp(id, s->model_name);
    for (int i = 0; i < s->cfg.n_served_model_names; i++)
        if (!strcmp(id, s->cfg.served_model_names[i])) return 1;
    return 0;
}

static void model_missing_message(const ds_server *s, const char *id, char *msg, size_t cap) {
    int n = snprintf(msg, cap, "the model '%.200s' does not exist; this server serves '%.150s'", id, s->model_name);
    for (int i = 1; i < s->cfg.n_served_model_names && n > 0 && (size_t)n < cap; i++)
        n += snprintf(msg + n, cap - (size_t)n, "%s'%.60s'", i + 1 == s->cfg.n_served_model_names ? " and " : ", ",
                      s->cfg.served_model_names[i]);
}

/* the model object of GET /v1/models and GET /v1/models/{id} */
static json_t *model_object(const ds_server *s, const char *id) {
    json_t *m = json_object();
    json_object_set_new(m, "id", ds_oai_text(id));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer((json_int_t)s->created));
    json_object_set_new(m, "owned_by", json_string("deltaserve"));
    json_object_set_new(m, "max_model_len", json_integer(s->ctx));
    /* what the model takes, in the two shapes clients read: llama-server's capabilities, and the
     * input/output modalities of OpenRouter's model list (llama.cpp's router writes them too) */
    json_t *caps = json_array(), *arch = json_object(), *in = json_array(), *out = json_array();
    json_array_append_new(caps, json_string("completion"));
    json_array_append_new(in, json_string("text"));
    if (s->vision) {
        json_array_append_new(caps, json_string("multimodal"));
        json_array_append_new(in, json_string("image"));
    }
    json_array_append_new(out, json_string("text"));
    json_object_set_new(m, "capabilities", caps);
    json_object_set_new(arch, "input_modalities", in);
    json_object_set_new(arch, "output_modalities", out);
    json_object_set_new(m, "architecture", arch);
    return m;
}

static enum MHD_Result route_models(ds_server *s, struct MHD_Connection *conn) {
    json_t *o = json_object(), *data = json_array();
    json_object_set_new(o, "object", json_string("list"));
    json_object_set_new(o, "data", data);
    /* one object per name, as vLLM lists its served model names */
    if (!s->cfg.n_served_model_names) json_array_append_new(data, model_object(s, s->model_name));
    for (int i = 0; i < s->cfg.n_served_model_names; i++)
        json_array_append_new(data, model_object(s, s->cfg.served_model_names[i]));
    char *body = ds_json_dump(o);
    json_decref(o);
    return send_json(conn, 200, body);
}

/* GET /v1/models/{id}: id is the rest of the path (libmicrohttpd has decoded it), so a name with
 * a '/' in it (owner/model) is found too */
static enum MHD_Result route_model(ds_server *s, struct MHD_Connection *conn, const char *id) {
    if (!model_known(s, id)) {
        char msg[480];
        model_missing_message(s, id, msg, sizeof msg);
        return send_error(s, conn, 0, 404, "invalid_request_error", "model_not_found", "model", msg);
    }
    json_t *m = model_object(s, id);
    char *body = ds_json_dump(m);
    json_decref(m);
    return send_json(conn, 200, body);
}

static enum MHD_Result route_metrics(ds_server *s, struct MHD_Connection *conn) {
    ds_engine_stats st;
    ds_sb out = {0};
    if (atomic_load(&s->ready)) ds_engine_stats_get(s->eng, &st);
    ds_metrics_render(&s->metrics, atomic_load(&s->ready) ? &st : NULL, s->model_name, &out);
    if (out.oom || !out.s) {
        ds_sb_free(&out);
        return MHD_NO;
    }
    return send_text(conn, 200, "text/plain; version=0.0.4", out.s, out.n, NULL);
}

/* Runs a parsed request (taken over) and answers: the body, or the stream. fmt as ds_completion_start. */
static enum MHD_Result run_completion(ds_server *s, struct MHD_Connection *conn, ds_oai_request *req,
                                      const ds_answer_format *fmt, const json_t *api_body) {
    if (req->model && !model_known(s, req->model)) {
        char msg[480];
        model_missing_message(s, req->model, msg, sizeof msg);
        ds_oai_request_free(req);
        return send_error_in(s, conn, fmt, 1, 404, "invalid_request_error", "model_not_found", "model", msg);
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    ds_http_error herr = {0};
    ds_completion *c = ds_completion_start(s, req, fmt, api_body, ci ? ci->connect_fd : -1, &herr);
    if (!c) {
        if (herr.status == 0) return MHD_NO;   /* the client went away (counted as an abort) */
        return send_error_kind(s, conn, fmt, 1, herr.status, herr.engine ? DS_ERRK_ENGINE : kind_of_status(herr.status),
                               herr.type, herr.code, herr.param, herr.message);
    }
    enum MHD_Result ok;
    if (ds_completion_is_stream(c)) {
        /* the response takes over the HTTP side's reference; freeing it aborts what still runs */
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, ds_completion_read, c, ds_completion_release_cb);
        if (!r) {
            ds_completion_release(c);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        add_cors_headers(conn, r);
        ok = MHD_queue_response(conn, 200, r);
        MHD_destroy_response(r);
        return ok;
    }
    int status = 0;
    char *body = ds_completion_wait_json(c, &status);
    ds_completion_release(c);
    if (!body) return MHD_NO;      /* client gone */
    return send_json(conn, status, body);
}

static enum MHD_Result route_completion(ds_server *s, struct MHD_Connection *conn, conn_ctx *cc, ds_oai_kind kind) {
    ds_oai_request req;
    ds_oai_error perr;
    if (ds_oai_request_parse(cc->body.s ? cc->body.s : "", cc->body.n, kind, &req, &perr))
        return send_error(s, conn, 1, 400, "invalid_request_error", perr.code, perr.param, perr.message);
    return run_completion(s, conn, &req, NULL, NULL);
}

/* The request body as JSON, or NULL after a 400 in fmt's shape. */
static json_t *body_json(ds_server *s, struct MHD_Connection *conn, conn_ctx *cc, const ds_answer_format *fmt,
                         int completion, enum MHD_Result *sent) {
    char msg[400], full[480];
    json_t *root = ds_json_parse(cc->body.s ? cc->body.s : "", cc->body.n, msg, sizeof msg);
    if (root && json_is_object(root)) return root;
    json_decref(root);
    snprintf(full, sizeof full, root ? "the request body must be a JSON object" : "the request body is %s", msg);
    *sent = send_error_in(s, conn, fmt, completion, 400, "invalid_request_error", NULL, NULL, full);
    return NULL;
}

/* POST /v1/responses, POST /v1/messages: the API's request becomes a chat request; its format writes the answer */
static enum MHD_Result route_api(ds_server *s, struct MHD_Connection *conn, conn_ctx *cc, const ds_answer_format *fmt) {
    enum MHD_Result sent = MHD_NO;
    json_t *root = body_json(s, conn, cc, fmt, 1, &sent);
    if (!root) return sent;
    ds_oai_request req;
    ds_oai_error perr;
    int rc = fmt == &ds_messages_format ? ds_messages_parse(root, 0, &req, &perr) : ds_responses_parse(root, &req, &perr);
    if (rc) {
        json_decref(root);
        return send_error_in(s, conn, fmt, 1, 400, "invalid_request_error", perr.code, perr.param, perr.message);
    }
    sent = run_completion(s, conn, &req, fmt, root);
    json_decref(root);
    return sent;
}

/* POST /v1/messages/count_tokens: {"input_tokens": N}, the tokens /v1/messages would run */
static enum MHD_Result route_count_tokens(ds_server *s, struct MHD_Connection *conn, conn_ctx *cc) {
    const ds_answer_format *fmt = &ds_messages_format;
    enum MHD_Result sent = MHD_NO;
    json_t *root = body_json(s, conn, cc, fmt, 0, &sent);
    if (!root) return sent;
    ds_oai_request req;
    ds_oai_error perr;
    int rc = ds_messages_parse(root, 1, &req, &perr);
    json_decref(root);
    if (rc) return send_error_in(s, conn, fmt, 0, 400, "invalid_request_error", perr.code, perr.param, perr.message);
    if (req.model && !model_known(s, req.model)) {
        char msg[480];
        model_missing_message(s, req.model, msg, sizeof msg);
        ds_oai_request_free(&req);
        return send_error_in(s, conn, fmt, 0, 404, "invalid_request_error", "model_not_found", "model", msg);
    }
    ds_tokens toks;
    ds_http_error herr;
    rc = ds_completion_prompt(s, &req, &toks, NULL, &herr);
    ds_oai_request_free(&req);
    if (rc) return send_error_in(s, conn, fmt, 0, herr.status, herr.type, herr.code, herr.param, herr.message);
    free(toks.ids);
    json_t *o = json_object();
    json_object_set_new(o, "input_tokens", json_integer((json_int_t)toks.n));
    char *body = ds_json_dump(o);
    json_decref(o);
    return send_json(conn, 200, body);
}

static enum MHD_Result route_tokens(ds_server *s, struct MHD_Connection *conn, conn_ctx *cc, ds_token_route which) {
    char *body = NULL;
    int status = ds_token_api_answer(s, which, cc->body.s ? cc->body.s : "", cc->body.n, &body);
    if (!body) return MHD_NO;
    if (status >= 400) ds_metrics_error(&s->metrics, kind_of_status(status));
    return send_json(conn, status, body);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    ds_server *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        *con_cls = cc;
        cc->over = ds_conn_guard_request_begins(s->guard, conn);
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cc->too_large) {
            if (cc->body.n + *upload_size > s->cfg.max_body_bytes) {
                cc->too_large = 1;
                ds_sb_free(&cc->body);
            } else {
                ds_sb_append(&cc->body, upload, *upload_size);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (cors_policy && !strcmp(method, "OPTIONS") &&
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN) &&
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Method"))
        return send_preflight(conn);
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health")) {
        if (!get) return send_error(s, conn, 0, 405, "invalid_request_error", "method_not_allowed", NULL, "use GET");
        int ok = atomic_load(&s->ready) && !atomic_load(&s->draining);
        const char *msg = ok ? "{\"status\":\"ok\"}" : atomic_load(&s->draining) ? "{\"status\":\"draining\"}"
                                                                                 : "{\"status\":\"loading\"}";
        return send_text(conn, ok ? 200 : 503, "application/json", strdup(msg), strlen(msg), NULL);
    }
    if (!strcmp(url, "/metrics")) {
        if (!get) return send_error(s, conn, 0, 405, "invalid_request_error", "method_not_allowed", NULL, "use GET");
        return route_metrics(s, conn);
    }
    static const char MODEL_PREFIX[] = "/v1/models/";
    typedef enum { RT_CHAT, RT_COMPLETIONS, RT_RESPONSES, RT_MESSAGES, RT_COUNT_TOKENS, RT_TOKENIZE, RT_DETOKENIZE,
                   RT_RENDER_CHAT, RT_RENDER_COMPLETIONS, RT_MODELS, RT_MODEL, RT_NONE } route;
    static const struct { const char *path; route r; } ROUTES[] = {
        {"/v1/chat/completions", RT_CHAT},          {"/v1/completions", RT_COMPLETIONS},
        {"/v1/responses", RT_RESPONSES},            {"/v1/messages", RT_MESSAGES},
        {"/v1/messages/count_tokens", RT_COUNT_TOKENS}, {"/tokenize", RT_TOKENIZE},
        {"/detokenize", RT_DETOKENIZE},             {"/v1/chat/completions/render", RT_RENDER_CHAT},
        {"/v1/completions/render", RT_RENDER_COMPLETIONS}, {"/v1/models", RT_MODELS},
    };
    route rt = RT_NONE;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++)
        if (!strcmp(url, ROUTES[i].path)) rt = ROUTES[i].r;
    if (rt == RT_NONE && !strncmp(url, MODEL_PREFIX, sizeof MODEL_PREFIX - 1) && url[sizeof MODEL_PREFIX - 1]) rt = RT_MODEL;
    if (rt == RT_NONE) {
        /* OpenAI's answer to an unknown URL: invalid_request_error without a code */
        char msg[200];
        snprintf(msg, sizeof msg, "no such route: %.16s %.150s", method, url);
        return send_error(s, conn, 0, 404, "invalid_request_error", NULL, NULL, msg);
    }
    int completion = rt == RT_CHAT || rt == RT_COMPLETIONS || rt == RT_RESPONSES || rt == RT_MESSAGES;
    const ds_answer_format *fmt = rt == RT_MESSAGES || rt == RT_COUNT_TOKENS ? &ds_messages_format : NULL;
    if (completion) ds_metrics_started(&s->metrics);
    if (cc->over)
        return send_error_in(s, conn, fmt, completion, 503, "server_error", "server_overloaded", NULL,
                             "every connection the server keeps (--max-connections) has a request running; retry later");
    if (!key_ok(s, conn))
        return send_error_in(s, conn, fmt, completion, 401, "authentication_error", "invalid_api_key", NULL,
                             "a valid API key is required (Authorization: Bearer KEY, or x-api-key: KEY)");
    if (cc->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", s->cfg.max_body_bytes);
        return send_error_in(s, conn, fmt, completion, 413, "invalid_request_error", "body_too_large", NULL, msg);
    }
    if (!atomic_load(&s->ready) || atomic_load(&s->draining))
        return send_error_in(s, conn, fmt, completion, 503, "server_error",
                             atomic_load(&s->draining) ? "server_shutting_down" : "model_loading", NULL,
                             atomic_load(&s->draining) ? "the server is shutting down" : "the model is loading");
    if (rt == RT_MODELS || rt == RT_MODEL) {
        if (!get) return send_error(s, conn, 0, 405, "invalid_request_error", "method_not_allowed", NULL, "use GET");
        return rt == RT_MODEL ? route_model(s, conn, url + sizeof MODEL_PREFIX - 1) : route_models(s, conn);
    }
    if (!post)
        return send_error_in(s, conn, fmt, completion, 405, "invalid_request_error", "method_not_allowed", NULL, "use POST");
    switch (rt) {
    case RT_CHAT: return route_completion(s, conn, cc, DS_OAI_CHAT);
    case RT_COMPLETIONS: return route_completion(s, conn, cc, DS_OAI_COMPLETION);
    case RT_RESPONSES: return route_api(s, conn, cc, &ds_responses_format);
    case RT_MESSAGES: return route_api(s, conn, cc, &ds_messages_format);
    case RT_COUNT_TOKENS: return route_count_tokens(s, conn, cc);
    case RT_TOKENIZE: return route_tokens(s, conn, cc, DS_TOKEN_TOKENIZE);
    case RT_DETOKENIZE: return route_tokens(s, conn, cc, DS_TOKEN_DETOKENIZE);
    case RT_RENDER_CHAT: return route_tokens(s, conn, cc, DS_TOKEN_RENDER_CHAT);
    case RT_RENDER_COMPLETIONS: return route_tokens(s, conn, cc, DS_TOKEN_RENDER_COMPLETION);
    default: return MHD_NO;
    }
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    ds_server *s = cls;
    ds_conn_guard_request_ends(s->guard, conn);
    conn_ctx *cc = *con_cls;
    if (!cc) return;
    ds_sb_free(&cc->body);
    free(cc);
    *con_cls = NULL;
}

/* --- life cycle --- */

static void *engine_main(void *arg) {
    ds_engine_run(arg);
    return NULL;
}

/* What decides the answers: the build (the compiler stands for it: there is no version number), the
 * weights and the vision tower's (each tensor's name, type, shape and first bytes, not the whole
 * file, which can be large), the chat template and the context. */
static void set_fingerprint(ds_server *s) {
    ds_sb id = {0};
    char buf[160];
    snprintf(buf, sizeof buf, "deltaserve|%s|ctx=%d|", __VERSION__, s->ctx);
    ds_sb_puts(&id, buf);
    for (int i = 0; i < ds_model_n_tensors(s->file); i++) {
        const ds_tensor *t = ds_model_tensor_at(s->file, i);
        size_t nb = ds_tensor_bytes(t);
        snprintf(buf, sizeof buf, "%s:%d:%lld,%lld,%lld,%lld|", t->name, (int)t->type, (long long)t->ne[0],
                 (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
        ds_sb_puts(&id, buf);
        if (t->data) ds_sb_append(&id, (const char *)t->data, nb < 64 ? nb : 64);
    }
    /* the tower decides the answers to images: its weights count the same way */
    for (int i = 0; s->vision_file && i < ds_vision_n_tensors(s->vision_file); i++) {
        const ds_tensor *t = ds_vision_tensor_at(s->vision_file, i);
        size_t nb = ds_tensor_bytes(t);
        snprintf(buf, sizeof buf, "%s:%d:%lld,%lld,%lld,%lld|", t->name, (int)t->type, (long long)t->ne[0],
                 (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
        ds_sb_puts(&id, buf);
        if (t->data) ds_sb_append(&id, (const char *)t->data, nb < 64 ? nb : 64);
    }
    const char *tmpl = s->cfg.chat_template ? s->cfg.chat_template : ds_model_chat_template(s->file);
    if (tmpl) ds_sb_puts(&id, tmpl);
    ds_oai_fingerprint(id.s ? id.s : "", id.n, s->fingerprint, sizeof s->fingerprint);
    ds_sb_free(&id);
}

/* The vision tower: --mmproj, or the mmproj file found beside the model (none with --no-mmproj),
 * on the text model's backend, given to the engine with its byte budget. No tower: images get a 400. */
static ds_status load_vision(ds_server *s, ds_err *e) {
    const ds_server_config *c = &s->cfg;
    s->image_pad_id = -1;
    char found[PATH_MAX];
    const char *path = c->load.mmproj_path;
    if (c->load.no_mmproj) return DS_OK;
    if (!path && ds_vision_find(c->model_path, found, sizeof found)) path = found;
    if (!path) return DS_OK;
    ds_status st = ds_vision_open(path, &s->vision_file, e);
    if (!st) st = ds_vision_new(s->model, s->vision_file, &s->vision, e);
    if (!st) st = ds_engine_set_vision(s->eng, s->vision, c->vision_bytes, e);
    if (!st && (s->image_pad_id = ds_tokenizer_find(s->tok, "<|image_pad|>")) < 0)
        st = ds_fail(e, DS_EINVAL, "the model's vocabulary has no <|image_pad|> token");
    if (st) {
        ds_err_prefix(e, "vision tower %s%s", path, c->load.mmproj_path ? "" : " (found beside the model; --no-mmproj "
                                                                             "serves without it)");
        return st;
    }
    const ds_vision_config *vc = ds_vision_cfg(s->vision);
    fprintf(stderr, "deltaserve serve: vision tower %s: %d blocks, width %d, patch %d, merge %d; images up to %lld "
            "pixels, %d per request\n", path, vc->n_layer, vc->n_embd, vc->patch_size, vc->merge,
            (long long)c->max_image_pixels, c->max_images);
    return DS_OK;
}

/* The rest of the loading, after the file was opened: tokenizer, weights, engine, template. */
static int load(ds_server *s) {
    ds_err e = {0};
    const ds_server_config *c = &s->cfg;
    ds_status st = ds_tokenizer_from_model(s->file, &s->tok, &e);
    if (!st) {
        ds_model_params mp = {.max_batch_tokens = ds_engine_required_batch_capacity(&c->engine),
                              .n_threads = c->n_threads};
        st = ds_model_new(s->file, &mp, &s->model, &e);
    }
    /* the default is a size for real vocabularies; a value given larger than this model's is a mistake */
    if (!st && c->engine.spec_vocab > ds_model_cfg(s->model)->n_vocab && c->engine.spec_vocab != DS_SPEC_VOCAB_DEFAULT)
        st = ds_fail(&e, DS_EINVAL, "--spec-vocab %d: the model's vocabulary has %d tokens (0: drafts over all of them)",
                     c->engine.spec_vocab, ds_model_cfg(s->model)->n_vocab);
    if (!st && (st = ds_engine_new(s->model, &c->engine, &s->eng, &e)) != DS_OK) {
        /* the engine cannot name the options its budgets came from */
        char pre[160];
        snprintf(pre, sizeof pre, "the engine's budgets (--kv-mb %.3g, --state-mb %.3g, --max-running %d)",
                 (double)c->engine.kv_bytes / (1 << 20), (double)c->engine.state_bytes / (1 << 20), c->engine.max_running);
        ds_err_prefix(&e, "%s", pre);
    }
    if (!st) st = load_vision(s, &e);
    if (!st) {
        const char *t = c->chat_template ? c->chat_template : ds_model_chat_template(s->file);
        st = ds_jinja_compile(t ? t : DS_DEFAULT_CHAT_TEMPLATE, &s->tmpl, &e);
        if (st) ds_err_prefix(&e, "chat template%s%s", c->chat_template ? " " : "",
                              c->chat_template ? c->chat_template_origin : "");
        s->call_form = ds_call_form_of_template(t ? t : DS_DEFAULT_CHAT_TEMPLATE);
    }
    if (st) {
        fprintf(stderr, "deltaserve serve: %s\n", e.msg);
        return -1;
    }
    const ds_model_config *mc = ds_model_cfg(s->model);
    ds_engine_stats es;
    ds_engine_stats_get(s->eng, &es);
    /* the model's context: past it positions were never trained (or, with
     * YaRN, never scaled for); a longer --max-model-len needs the override */
    int limit = ds_model_context_limit(mc);
    if (c->ctx > limit && !c->engine.allow_long_context) {
        fprintf(stderr,
                "deltaserve serve: --max-model-len %d exceeds the model's context of %d tokens (%s); "
                "--allow-long-context (or VLLM_ALLOW_LONG_MAX_MODEL_LEN=1) uses it anyway\n",
                c->ctx, limit, mc->yarn_factor > 0 ? "its original context times the YaRN factor" : "context_length");
        return -1;
    }
    s->ctx = c->ctx > limit ? c->ctx : limit;
    int kv_tokens = es.kv_pages_total * c->engine.page_size;
    if (kv_tokens > 0 && kv_tokens < s->ctx) s->ctx = kv_tokens;
    if (c->ctx > 0 && c->ctx < s->ctx) s->ctx = c->ctx;
    /* vllm:cache_config_info: the pool in the blocks a router counts (the KV events' blocks) */
    ds_cache_info ci = {.block_size = ds_engine_kv_block_size(s->eng),
                        .kv_cache_size_tokens = (int64_t)es.kv_pages_total * c->engine.page_size,
                        .kv_cache_memory_bytes = c->engine.kv_bytes, .enable_prefix_caching = c->engine.prefix_cache != 0};
    ci.num_gpu_blocks = ci.block_size > 0 ? ci.kv_cache_size_tokens / ci.block_size : 0;
    ci.mamba_block_size = ds_model_n_gdn_layers(s->model) > 0 ? ci.block_size : 0;
    ds_metrics_set_engine(&s->metrics, c->data_parallel_rank, &ci);
    size_t n = 0;
    const char *eos = mc->n_eos ? ds_tokenizer_token_bytes(s->tok, mc->eos_ids[0], &n) : NULL;
    if (eos && n < sizeof s->eos_text) memcpy(s->eos_text, eos, n);
    static const char *const KEEP[4] = {"<think>", "</think>", "<tool_call>", "</tool_call>"};
    for (int i = 0; i < 4; i++) s->keep_ids[i] = ds_tokenizer_find(s->tok, KEEP[i]);
    set_fingerprint(s);
    if (ds_vocab_index_new(s->tok, &s->vocab, &e) != DS_OK ||
        ds_grammar_cache_new(DS_GRAMMAR_CACHE_BYTES, &s->grammars, &e) != DS_OK) {
        fprintf(stderr, "deltaserve serve: output constraints: %s\n", e.msg);
        return -1;
    }
    if (mc->n_mtp && c->engine.spec_tokens > 0) {
        int dv = c->engine.spec_vocab > 0 && c->engine.spec_vocab < mc->n_vocab ? c->engine.spec_vocab : mc->n_vocab;
        fprintf(stderr, "deltaserve serve: MTP drafts over token ids 0..%d of %d (--spec-vocab), verified over all\n",
                dv - 1, mc->n_vocab);
    }
    return 0;
}

static void base_name(const char *path, char *out, size_t cap) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    const char *b = path;
    for (size_t i = 0; i < len; i++)
        if (path[i] == '/') b = path + i + 1;
    size_t n = (size_t)(path + len - b);
    if (n > 5 && !strncmp(b + n - 5, ".gguf", 5)) n -= 5;
    snprintf(out, cap, "%.*s", (int)n, b);
}

/* A listening TCP socket on host:port (port 0: any free one, returned in
 * *bound). host is an IPv4 or IPv6 address, the latter also in brackets
 * ([::1], as in a URL); "::" listens on IPv4 too (dual stack). Made here
 * rather than by libmicrohttpd so that a failure can say why (the port in
 * use, an address not on this machine). reuse_port: SO_REUSEPORT, so that the
 * ranks of --data-parallel (or processes started by hand) share the port and
 * the kernel spreads the connections among them. Returns the socket, -2 for a
 * host that is not an IP address, -1 for any other failure, each after its one
 * line on stderr. */
static int listen_socket(const char *host, int port, int reuse_port, int *bound) {
    char name[INET6_ADDRSTRLEN + 16];
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') snprintf(name, sizeof name, "%.*s", (int)(hl - 2), host + 1);
    else snprintf(name, sizeof name, "%s", host);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char service[8];
    snprintf(service, sizeof service, "%d", port);
    if (hl >= sizeof name || getaddrinfo(name, service, &hints, &ai) != 0 || !ai) {
        if (ai) freeaddrinfo(ai);
        fprintf(stderr, "deltaserve serve: --host %s is not an IPv4 or IPv6 address\n", host);
        return -2;
    }
    int family = ai->ai_family;
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, zero = 0;
    if (fd < 0) {
        fprintf(stderr, "deltaserve serve: cannot create a socket: %s\n", strerror(errno));
        freeaddrinfo(ai);
        return -1;
    }
    /* lets a restarted server take its port while old connections linger in TIME_WAIT; a port
     * another process listens on still fails with EADDRINUSE */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (reuse_port && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) {
        fprintf(stderr, "deltaserve serve: --reuse-port: SO_REUSEPORT refused: %s\n", strerror(errno));
        freeaddrinfo(ai);
        close(fd);
        return -1;
    }
    /* "::" takes IPv4 clients too, whatever the system's default (net.ipv6.bindv6only) */
    if (family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    int failed = bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0;
    freeaddrinfo(ai);
    if (failed) {
        int err = errno;
        fprintf(stderr, "deltaserve serve: cannot listen on %s%s%s:%d: %s%s\n", family == AF_INET6 ? "[" : "", name,
                family == AF_INET6 ? "]" : "", port, strerror(err),
                err != EADDRINUSE ? ""
                : reuse_port ? " (another process has this port without SO_REUSEPORT, or as another user)"
                             : " (another process has this port; choose another with --port)");
        close(fd);
        return -1;
    }
    struct sockaddr_storage got;
    socklen_t len = sizeof got;
    *bound = port;
    if (getsockname(fd, (struct sockaddr *)&got, &len) == 0)
        *bound = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
                                                 : ((struct sockaddr_in *)&got)->sin_port);
    return fd;
}

/* host as it stands in a URL: an IPv6 address in brackets */
static void url_host(const char *host, char *out, size_t cap) {
    snprintf(out, cap, strchr(host, ':') && host[0] != '[' ? "[%s]" : "%s", host);
}

/* --kv-events-replay-endpoint: the batches kept (vLLM's buffer_steps) */
#define DS_KV_REPLAY_BATCHES 10000

/* The host part of the KV events' topic, which llm-d reads as the pod's address: --host, or for a
 * wildcard address ($POD_IP as Kubernetes sets it, else the machine's name) */
static void topic_host(const char *host, char *out, size_t cap) {
    const char *pod = getenv("POD_IP");
    if (strcmp(host, "0.0.0.0") && strcmp(host, "::") && strcmp(host, "[::]") && host[0]) url_host(host, out, cap);
    else if (pod && pod[0]) url_host(pod, out, cap);
    else if (gethostname(out, cap) != 0 || !out[0]) snprintf(out, cap, "localhost");
    out[cap - 1] = '\0';
}

/* Starts the publisher of the engine's KV events (after the engine exists: the block size is its).
 * Returns 0, or -1 after one line on stderr naming the endpoint and zmq's reason. */
static int start_kv_events(ds_server *s, int port) {
    const ds_server_config *c = &s->cfg;
    char host[256], topic[600];
    topic_host(c->host, host, sizeof host);
    snprintf(topic, sizeof topic, "kv@%s:%d@%s", host, port, s->model_name);
    ds_kv_publisher_params p = {.endpoint = c->kv_events_endpoint, .replay_endpoint = c->kv_events_replay_endpoint,
                                .topic = topic, .array_format = c->kv_events_array,
                                .data_parallel_rank = c->data_parallel_rank,
                                .block_size = ds_engine_kv_block_size(s->eng),
                                .replay_batches = DS_KV_REPLAY_BATCHES};
    ds_err e = {0};
    if (ds_kv_publisher_start(s->kv_queue, &p, &s->kv_pub, &e) != DS_OK) {
        fprintf(stderr, "deltaserve serve: %s\n", e.msg);
        return -1;
    }
    ds_metrics_kv_publisher(&s->metrics, s->kv_pub);
    const char *replay = ds_kv_publisher_endpoint(s->kv_pub, 1);
    fprintf(stderr, "deltaserve serve: KV events on %s%s%s, topic '%s', %s form, blocks of %d tokens\n",
            ds_kv_publisher_endpoint(s->kv_pub, 0), replay[0] ? ", replay on " : "", replay, topic,
            c->kv_events_array ? "array" : "map", p.block_size);
    return 0;
}

int ds_server_run(const ds_server_config *cfg) {
    ds_server *s = calloc(1, sizeof *s);
    if (!s) return 1;
    s->cfg = *cfg;
    s->created = (long)time(NULL);
    ds_metrics_init(&s->metrics);
    ds_metrics_set_engine(&s->metrics, cfg->data_parallel_rank, NULL);
    if (cfg->n_served_model_names) snprintf(s->model_name, sizeof s->model_name, "%s", cfg->served_model_names[0]);
    else base_name(cfg->model_path, s->model_name, sizeof s->model_name);

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);   /* every thread started from here inherits it */
    signal(SIGPIPE, SIG_IGN);

    /* Start-up failures end with exactly one line on stderr naming the problem
     * (the port, the model file, the budget) and exit code 1: the socket and
     * the model file are checked before anything is announced. */
    ds_err e = {0};
    ds_cors *cors = NULL;
    if (cfg->allowed_origins && ds_cors_new(cfg->allowed_origins, cfg->allowed_methods, cfg->allowed_headers, &cors,
                                            &e) != DS_OK) {
        fprintf(stderr, "deltaserve serve: %s\n", e.msg);
        ds_metrics_free(&s->metrics);
        free(s);
        return 2;
    }
    /* file:// images are checked against the resolved directory (media_fetch.h); http(s) fetches
     * run on connection threads, so libcurl starts here */
    if (cfg->allowed_local_media_path && !realpath(cfg->allowed_local_media_path, s->media_dir)) {
        fprintf(stderr, "deltaserve serve: --allowed-local-media-path %s: %s\n", cfg->allowed_local_media_path,
                strerror(errno));
        ds_cors_free(cors);
        ds_metrics_free(&s->metrics);
        free(s);
        return 2;
    }
    if (cfg->allowed_media_domains && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "deltaserve serve: libcurl failed to start (--allowed-media-domains)\n");
        ds_cors_free(cors);
        ds_metrics_free(&s->metrics);
        free(s);
        return 1;
    }
    char host[INET6_ADDRSTRLEN + 16];
    url_host(cfg->host, host, sizeof host);
    int port = 0, fd = listen_socket(cfg->host, cfg->port, cfg->reuse_port, &port);
    if (fd < 0) {
        ds_cors_free(cors);
        ds_metrics_free(&s->metrics);
        free(s);
        return fd == -2 ? 2 : 1;
    }
    if (ds_model_open_ex(cfg->model_path, &cfg->load, &s->file, &e) != DS_OK) {
        fprintf(stderr, "deltaserve serve: %s\n", e.msg);
        close(fd);
        ds_cors_free(cors);
        ds_metrics_free(&s->metrics);
        free(s);
        return 1;
    }
    if (ds_conn_guard_new(cfg->max_connections, cfg->header_timeout_s, &s->guard, &e) != DS_OK) {
        fprintf(stderr, "deltaserve serve: %s\n", e.msg);
        close(fd);
        ds_model_close(s->file);
        ds_cors_free(cors);
        ds_metrics_free(&s->metrics);
        free(s);
        return 1;
    }
    /* the inactivity timeout closes idle keep-alive connections; the guard closes slow headers
     * and, past --max-connections, the longest idle connection, and keeps a reserve for probes */
    cors_policy = cors;
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL, 0, NULL, NULL, handler, s,
        MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_NOTIFY_CONNECTION,
        ds_conn_guard_notify, s->guard, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->idle_timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(cfg->max_connections + DS_CONN_RESERVE), MHD_OPTION_END);
    if (!d) {
        cors_policy = NULL;
        ds_conn_guard_free(s->guard);
        fprintf(stderr, "deltaserve serve: cannot start the HTTP server on %s:%d\n", host, port);
        close(fd);
        ds_model_close(s->file);
        ds_cors_free(cors);
        ds_metrics_free(&s->metrics);
        free(s);
        return 1;
    }
    char rank[48] = "";   /* data parallel: which rank says it */
    if (cfg->data_parallel_rank >= 0)
        snprintf(rank, sizeof rank, ", rank %d of %d", cfg->data_parallel_rank, cfg->data_parallel_size);
    fprintf(stderr, "deltaserve serve: listening on http://%s:%d (loading %s%s)\n", host, port, cfg->model_path, rank);
    int rc = 0;
    pthread_t engine_thread;
    int engine_started = 0;
    /* the engine pushes its KV events into the queue from its first step: made before it */
    if (cfg->kv_events_endpoint && !(s->kv_queue = ds_kv_event_queue_new(cfg->kv_events_queue_bytes))) {
        fprintf(stderr, "deltaserve serve: the KV events queue (--kv-events-queue-mb): out of memory\n");
        rc = 1;
        goto out;
    }
    s->cfg.engine.kv_events = s->kv_queue;
    if (load(s) != 0 || (s->kv_queue && start_kv_events(s, port) != 0)) {
        rc = 1;
        goto out;
    }
    if (pthread_create(&engine_thread, NULL, engine_main, s->eng) != 0) {
        fprintf(stderr, "deltaserve serve: cannot start the engine thread\n");
        rc = 1;
        goto out;
    }
    engine_started = 1;
    atomic_store(&s->ready, 1);
    fprintf(stderr, "deltaserve serve: ready: model '%s', context %d tokens, %s, http://%s:%d/v1%s\n", s->model_name,
            s->ctx, s->vision ? "text and images" : "text only", host, port, rank);
    fflush(stderr);
    siginfo_t si;
    int sig;
    while ((sig = sigwaitinfo(&sigs, &si)) < 0) {}
    /* A rank of --data-parallel counts its supervisor's signals apart from everyone else's: a
     * signal to the process group (systemd's stop, a terminal's Ctrl-C) comes both directly and
     * passed on by the supervisor, and is one stop. */
    int from[2] = {0, 0};   /* signals seen: [0] from others, [1] from the supervisor */
    from[cfg->supervisor_pid && si.si_pid == cfg->supervisor_pid]++;
    /* drain: refuse new work, let the running requests finish */
    atomic_store(&s->draining, 1);
    fprintf(stderr, "deltaserve serve: %s: draining %d request(s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
            atomic_load(&s->in_flight));
    double t0 = ds_server_now();
    int again = 0;   /* a second signal: whoever sent it wants the process gone now */
    while (!again && atomic_load(&s->in_flight) > 0 && ds_server_now() - t0 < cfg->drain_timeout_s) {
        struct timespec tick = {.tv_nsec = 10 * 1000000L};
        int got = sigtimedwait(&sigs, &si, &tick);
        if ((got == SIGTERM || got == SIGINT) && ++from[cfg->supervisor_pid && si.si_pid == cfg->supervisor_pid] > 1)
            again = got;
    }
    if (atomic_load(&s->in_flight) > 0) {
        /* out of patience, but not silent: every request still running ends with an error its
         * client sees (an SSE error event, or a 500 before the headers) */
        if (again)
            fprintf(stderr, "deltaserve serve: %s again: ending %d request(s) now with an error\n",
                    again == SIGTERM ? "SIGTERM" : "SIGINT", atomic_load(&s->in_flight));
        else
            fprintf(stderr, "deltaserve serve: drain timed out: ending %d request(s) with an error\n",
                    atomic_load(&s->in_flight));
        ds_engine_fail_all(s->eng, again ? "the server is shutting down: stopped by a second signal during the drain"
                                         : "the server is shutting down: the drain timeout passed before this request ended");
        double t1 = ds_server_now();
        while (atomic_load(&s->in_flight) > 0 && ds_server_now() - t1 < 10.0) usleep(10000);
        if (atomic_load(&s->in_flight) > 0) fprintf(stderr, "deltaserve serve: %d request(s) did not end\n",
                                                    atomic_load(&s->in_flight));
    }
out:
    MHD_stop_daemon(d);
    ds_conn_guard_free(s->guard);
    s->guard = NULL;
    if (engine_started) {
        ds_engine_stop(s->eng);
        pthread_join(engine_thread, NULL);
    }
    if (s->kv_pub) {   /* the engine pushes no more: what it queued goes out, then the sockets close */
        ds_metrics_kv_publisher(&s->metrics, NULL);
        ds_kv_publisher_stop(s->kv_pub);
        s->kv_pub = NULL;
    }
    if (atomic_load(&s->in_flight) > 0) rc = rc ? rc : 1;
    else {   /* nothing references the engine any more */
        ds_engine_free(s->eng);
        ds_kv_event_queue_free(s->kv_queue);
        ds_vision_free(s->vision);
        ds_vision_close(s->vision_file);
        ds_model_free(s->model);
        ds_tokenizer_free(s->tok);
        ds_grammar_cache_free(s->grammars);
        ds_vocab_index_free(s->vocab);
        ds_model_close(s->file);
        ds_jinja_free(s->tmpl);
        ds_metrics_free(&s->metrics);
        cors_policy = NULL;
        ds_cors_free(cors);
        free(s);
    }
    if (engine_started) fprintf(stderr, "deltaserve serve: stopped\n");
    return rc;
}
