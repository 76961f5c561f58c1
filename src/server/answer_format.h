/* answer_format.h - how one API writes an answer: the Responses API and
 * Anthropic's Messages API run the same engine path as chat completions
 * (their requests become a chat request: openai_request.h) and differ only in
 * the bodies and the stream they send back. completion.c calls a format's
 * functions, on the HTTP thread of the request, in this order:
 *
 *   streaming:      stream_begin, then stream_part for each piece of the
 *                   answer (reasoning text, content text, a whole tool call),
 *                   then stream_end (success) or stream_fail (the model
 *                   failed after the headers went out), once;
 *   non-streaming:  body once, or error_body.
 *
 * Errors before any output (a bad request, a full queue, a model that failed
 * on its first call) are an HTTP status whose body error_body writes, in the
 * API's own shape. A format serves requests of one choice (n = 1): neither
 * API has n. Formats keep per-request state in ctx->state (init/release). */
#ifndef DS_ANSWER_FORMAT_H
#define DS_ANSWER_FORMAT_H

#include <jansson.h>
#include <stddef.h>

#include "common/strbuf.h"
#include "server/chat_parser.h"
#include "server/openai_response.h"

typedef enum {
    DS_END_STOP = 0,      /* the model ended its answer (an end token) */
    DS_END_STOP_STRING,   /* a stop string of the request matched: stop_string says which */
    DS_END_LENGTH,        /* max tokens (or the context) cut it */
    DS_END_TOOL_CALLS,    /* the model ended its answer and made tool calls */
} ds_end_kind;

typedef struct {
    ds_end_kind kind;
    const char *stop_string;   /* DS_END_STOP_STRING: the one that matched (may hold U+0000) */
    size_t stop_len;
} ds_answer_end;

typedef struct {
    const char *id;            /* the request's id ("resp_...", "msg_..." as the format chose by make_id) */
    long created;              /* Unix seconds */
    const char *model;         /* the served model's name */
    const char *fingerprint;
    int prompt_tokens;         /* known from stream_begin on */
    int cached_tokens;         /* prompt tokens the prefix cache had (known from stream_begin on) */
    int prompt_opened_reasoning; /* the prompt ends inside a reasoning part (thinking on) */
    const json_t *request;     /* the API's own request body as the client sent it (read only) */
    void *state;               /* the format's */
} ds_answer_ctx;

typedef struct {
    const char *content;
    size_t n_content;
    const char *reasoning;
    size_t n_reasoning;
    const json_t *tool_calls;  /* array of {"name", "arguments" (JSON text)}, in order, or NULL */
    ds_answer_end end;
    ds_oai_usage usage;
} ds_answer_result;

typedef struct ds_answer_format {
    const char *name;          /* "responses", "messages": for logs and errors */
    /* the request id into buf (cap >= 48), with the API's prefix */
    void (*make_id)(char *buf, size_t cap);
    /* per-request state (may be NULL functions); init returns -1 when out of memory */
    int (*init)(ds_answer_ctx *a);
    void (*release)(ds_answer_ctx *a);
    void (*stream_begin)(ds_answer_ctx *a, ds_sb *out);
    /* kind/text/n for reasoning and content (n > 0), call = {"name", "arguments"} for a tool call */
    void (*stream_part)(ds_answer_ctx *a, ds_sb *out, ds_part_kind kind, const char *text, size_t n,
                        const json_t *call);
    void (*stream_end)(ds_answer_ctx *a, ds_sb *out, const ds_answer_end *end, const ds_oai_usage *u);
    /* message: what went wrong, for the client */
    void (*stream_fail)(ds_answer_ctx *a, ds_sb *out, const char *message);
    /* the whole non-streamed body (caller frees); NULL when out of memory */
    char *(*body)(ds_answer_ctx *a, const ds_answer_result *r);
    /* an error answer's body for HTTP status (caller frees). type and code are OpenAI's
     * vocabulary (openai_response.h); a format maps them to its own. */
    char *(*error_body)(int status, const char *type, const char *code, const char *param, const char *message);
} ds_answer_format;

#endif
