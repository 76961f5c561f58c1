/* openai_response.h - JSON bodies of OpenAI responses: errors, the skeleton
 * of a completion or a streamed chunk, usage, and logprob entries. Every
 * function returns a new cJSON tree (caller deletes) or fills a string the
 * caller frees. */
#ifndef DS_OPENAI_RESPONSE_H
#define DS_OPENAI_RESPONSE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* A JSON string of s made well-formed UTF-8 by the repair rule (tokenizer/utf8.h):
 * messages quote what the client sent, which may be any bytes, and may cut a
 * quote in the middle of a character; JSON text must be UTF-8. */
cJSON *ds_oai_text(const char *s);

/* {"error": {"message", "type", "param", "code"}} as text (caller frees); message and param
 * pass through ds_oai_text. */
char *ds_oai_error_json(int status, const char *type, const char *param, const char *message);

/* {"id", "object", "created", "model", "choices": []}; returns the choices array in *choices. */
cJSON *ds_oai_envelope(const char *id, const char *object, long created, const char *model, cJSON **choices);

typedef struct {
    int prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens;
} ds_oai_usage;

cJSON *ds_oai_usage_json(const ds_oai_usage *u);

/* Text of a token for logprobs, made well-formed UTF-8 (a token that cuts a
 * character shows U+FFFD), with its raw bytes as an int array when bytes != NULL. */
cJSON *ds_oai_token_string(const char *raw, size_t n, cJSON **bytes);

/* A random "call_..." id (24 hex digits) into buf (>= 32 bytes). */
void ds_oai_call_id(char *buf, size_t cap);

#endif
