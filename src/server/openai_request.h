/* openai_request.h - parsing and validating an OpenAI request body
 * (POST /v1/chat/completions, POST /v1/completions) into plain fields.
 *
 * Every field is checked for its type and range; a failure names the field
 * (err->param) and says what is wrong (err->message), for a 400. Fields the
 * server knows but does not handle (store: true, echo with logprobs) are
 * refused with a message saying they are not supported. The output constraints of OpenAI (response_format), vLLM
 * (structured_outputs, guided_*) and llama-server (grammar, json_schema) are
 * gathered into one ds_oai_output: at most one per request. Unknown fields are
 * ignored; README.md lists the known ones that are accepted without effect.
 * Strings keep their length: a U+0000 in a prompt, a message or a stop string
 * is part of it (the body is read by server/json_text.h). */
#ifndef DS_OPENAI_REQUEST_H
#define DS_OPENAI_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "engine/sampler.h"

typedef enum { DS_OAI_CHAT = 0, DS_OAI_COMPLETION } ds_oai_kind;
typedef enum { DS_TOOLS_NONE = 0, DS_TOOLS_AUTO, DS_TOOLS_REQUIRED, DS_TOOLS_NAMED } ds_tool_choice;

#define DS_OAI_MAX_N 16
/* engine requests per completions request: prompts x max(n, best_of) */
#define DS_OAI_MAX_CHOICES 64
#define DS_OAI_MAX_STOP 16
/* messages per chat request: bounds the template's work per request whatever the body limit */
#define DS_OAI_MAX_MESSAGES 4096

/* what the answer must follow (compiled to a grammar by server/output_grammar.h) */
typedef enum {
    DS_OUT_NONE = 0,
    DS_OUT_JSON_OBJECT,   /* one JSON object */
    DS_OUT_SCHEMA,        /* a JSON value valid under value (a schema) */
    DS_OUT_REGEX,         /* text value (a string) fully matches */
    DS_OUT_CHOICE,        /* exactly one of value (an array of strings) */
    DS_OUT_GRAMMAR,       /* a sentence of value (GBNF text) */
} ds_out_kind;

typedef struct {
    ds_out_kind kind;
    char field[64];       /* the request field it came from, for errors ("response_format", "guided_regex"...) */
    json_t *value;        /* see ds_out_kind; NULL for NONE and JSON_OBJECT */
    int strict;           /* SCHEMA: objects allow only their listed properties unless additionalProperties says */
    int max_space;        /* whitespace bytes in a row between JSON tokens */
} ds_oai_output;

/* an image of a chat request (a content part of type image_url), in prompt order: fetched,
 * decoded and checked where the server's limits are known (server/image_input.h) */
typedef struct {
    char *url;                   /* data:image/...;base64,..., file://PATH or http(s)://... */
    size_t url_len;
    char param[64];              /* the part, for errors: messages[1].content[2].image_url */
} ds_oai_image;

/* one prompt of a completions request: text, or token ids */
typedef struct {
    char *text;                  /* NULL when ids are used */
    size_t len;
    int32_t *ids;
    int n_ids;
} ds_oai_prompt;

typedef struct {
    ds_oai_kind kind;
    char *model;                 /* NULL when not given */
    /* chat */
    json_t *messages;            /* normalised for the template: content as one string (or, with images, a
                                  * list of {"type": "text", "text"} and {"type": "image"} parts, as vLLM
                                  * gives Qwen's templates), arguments as objects */
    ds_oai_image *images;        /* the image parts of messages, in order (their URLs) */
    int n_images;
    json_t *tools;               /* NULL when none */
    json_t *template_kwargs;     /* NULL when none */
    ds_tool_choice tool_choice;
    char *tool_name;             /* DS_TOOLS_NAMED */
    int strict_tools;            /* a function of tools has strict: true (its arguments follow its schema) */
    /* completions */
    ds_oai_prompt *prompts;      /* in order; each has its own n choices */
    int n_prompts;
    int echo;                    /* the prompt's text comes before each choice's text */
    char *suffix;                /* fill-in-the-middle: the text after the completion (NULL: none) */
    size_t suffix_len;
    int best_of;                 /* candidates per prompt (>= n); the n most likely are returned */
    /* both */
    ds_sampling_params sampling;
    int seed_given;
    int ignore_eos;             /* vLLM's extra parameter: the model's end tokens do not stop */
    int max_tokens;              /* -1: up to the context */
    char *stop[DS_OAI_MAX_STOP];
    size_t stop_len[DS_OAI_MAX_STOP];
    int n_stop;
    int logprobs;                /* 1: return logprobs */
    int top_logprobs;            /* alternatives per token */
    int n;
    int stream;
    int include_usage;
    ds_oai_output output;        /* the constraint on the answer (kind DS_OUT_NONE: none) */
    int parallel_tool_calls;     /* 0: at most one tool call per choice (parallel_tool_calls: false) */
    int thinking;                /* reasoning_effort: -1 not given, 0 "none", 1 a level (enable_thinking) */
    int clamp_max_tokens;        /* a max_tokens past the context is cut to it rather than refused (Anthropic's clients) */
} ds_oai_request;

typedef struct {
    char param[64];
    char message[512];
    const char *code;            /* OpenAI's error code, or NULL (most 400s have none) */
} ds_oai_error;

/* Fills err (param may be NULL: none; code NULL) and returns -1: every parser of a request
 * body (this one, responses_api.h, messages_api.h) refuses through it. */
int ds_oai_fail(ds_oai_error *err, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Returns 0, or -1 with err filled (always a 400) and *out left empty. */
int ds_oai_request_parse(const char *body, size_t len, ds_oai_kind kind, ds_oai_request *out, ds_oai_error *err);
/* The same from a parsed body (not taken over): the Responses and Messages APIs translate their
 * requests into a chat completions body and parse that. */
int ds_oai_request_parse_json(const json_t *root, ds_oai_kind kind, ds_oai_request *out, ds_oai_error *err);
void ds_oai_request_free(ds_oai_request *r);

/* The chat template's render context for a parsed chat request: messages,
 * tools (unless tool_choice is none), add_generation_prompt, the end token's
 * text, enable_thinking when reasoning_effort was given, then
 * chat_template_kwargs merged over them (an explicit enable_thinking there wins). Returns NULL with e
 * filled when the kwargs cannot be merged. */
json_t *ds_oai_template_context(const ds_oai_request *r, const char *eos_text, ds_err *e);

#endif
