/* openai_response.h - JSON bodies of OpenAI responses: errors, the skeleton
 * of a completion or a streamed chunk, the final chat message, usage, and
 * logprob entries. Every function returns a new jansson value (caller
 * decrefs) or fills a string the caller frees. Text keeps its length: a
 * U+0000 the model wrote is sent as \u0000. */
#ifndef DS_OPENAI_RESPONSE_H
#define DS_OPENAI_RESPONSE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* A JSON string of s made well-formed UTF-8 by the repair rule (tokenizer/utf8.h):
 * messages quote what the client sent, which may be any bytes, and may cut a
 * quote in the middle of a character; JSON text must be UTF-8. */
json_t *ds_oai_text(const char *s);
json_t *ds_oai_textn(const char *s, size_t n);

/* {"error": {"message", "type", "param", "code"}} (caller decrefs), in OpenAI's vocabulary:
 * type such as "invalid_request_error", "authentication_error", "rate_limit_error",
 * "server_error"; code a short string such as "model_not_found" or NULL (JSON null);
 * param NULL or "" is null. message and param pass through ds_oai_text. */
json_t *ds_oai_error_obj(const char *type, const char *code, const char *param, const char *message);
/* The same as text (caller frees). */
char *ds_oai_error_json(const char *type, const char *code, const char *param, const char *message);

/* {"id", "object", "created", "model", "system_fingerprint", "choices": []}; returns the
 * choices array (borrowed) in *choices. fingerprint NULL leaves the field out. */
json_t *ds_oai_envelope(const char *id, const char *object, long created, const char *model, const char *fingerprint,
                        json_t **choices);

/* "fp_" and 12 hex digits of a hash of what decides the answers to a request (the build, the
 * model file's identity, the context) into buf (>= 20 bytes): stable while those stay the same,
 * as OpenAI's system_fingerprint is for one backend configuration. */
void ds_oai_fingerprint(const char *identity, size_t n, char *buf, size_t cap);

/* The message of a non-streamed chat choice: {"role", "content", ["reasoning_content"], ["tool_calls"]}.
 * content is null when there are tool calls and no text; reasoning_content is there when
 * with_reasoning or there is some. tool_calls (may be NULL) is taken over. */
json_t *ds_oai_chat_message(const char *content, size_t n_content, const char *reasoning, size_t n_reasoning,
                            int with_reasoning, json_t *tool_calls);

typedef struct {
    int prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens;
} ds_oai_usage;

json_t *ds_oai_usage_json(const ds_oai_usage *u);

/* Text of a token for logprobs, made well-formed UTF-8 (a token that cuts a
 * character shows U+FFFD), with its raw bytes as an int array when bytes != NULL. */
json_t *ds_oai_token_string(const char *raw, size_t n, json_t **bytes);

/* prefix + 32 random hex digits: ids unique across processes (replicas, data-parallel ranks) */
void ds_random_id(const char *prefix, char *buf, size_t cap);
/* A random "call_..." id (24 hex digits) into buf (>= 32 bytes). */
void ds_oai_call_id(char *buf, size_t cap);

#endif
