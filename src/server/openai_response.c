/* openai_response.c - see openai_response.h. */
#include "server/openai_response.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "server/json_text.h"

json_t *ds_oai_textn(const char *s, size_t n) {
    json_t *j = ds_json_textn(s, n);
    return j ? j : json_string("");
}

json_t *ds_oai_text(const char *s) { return ds_oai_textn(s, s ? strlen(s) : 0); }

json_t *ds_oai_error_obj(const char *type, const char *code, const char *param, const char *message) {
    json_t *o = json_object(), *e = json_object();
    json_object_set_new(o, "error", e);
    json_object_set_new(e, "message", ds_oai_text(message));
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "param", param && param[0] ? ds_oai_text(param) : json_null());
    json_object_set_new(e, "code", code ? json_string(code) : json_null());
    return o;
}

char *ds_oai_error_json(const char *type, const char *code, const char *param, const char *message) {
    json_t *o = ds_oai_error_obj(type, code, param, message);
    char *s = ds_json_dump(o);
    json_decref(o);
    return s;
}

json_t *ds_oai_envelope(const char *id, const char *object, long created, const char *model, const char *fingerprint,
                        json_t **choices) {
    json_t *o = json_object(), *c = json_array();
    json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer(created));
    json_object_set_new(o, "model", ds_oai_text(model));
    if (fingerprint) json_object_set_new(o, "system_fingerprint", json_string(fingerprint));
    json_object_set_new(o, "choices", c);
    if (choices) *choices = c;
    return o;
}

json_t *ds_oai_chat_message(const char *content, size_t n_content, const char *reasoning, size_t n_reasoning,
                            int with_reasoning, json_t *tool_calls) {
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "content", n_content || !tool_calls ? ds_oai_textn(content, n_content) : json_null());
    if (n_reasoning || with_reasoning) json_object_set_new(m, "reasoning_content", ds_oai_textn(reasoning, n_reasoning));
    if (tool_calls) json_object_set_new(m, "tool_calls", tool_calls);
    return m;
}

json_t *ds_oai_usage_json(const ds_oai_usage *u) {
    json_t *o = json_object(), *p = json_object(), *c = json_object();
    json_object_set_new(o, "prompt_tokens", json_integer(u->prompt_tokens));
    json_object_set_new(o, "completion_tokens", json_integer(u->completion_tokens));
    json_object_set_new(o, "total_tokens", json_integer(u->prompt_tokens + u->completion_tokens));
    json_object_set_new(o, "prompt_tokens_details", p);
    json_object_set_new(p, "cached_tokens", json_integer(u->cached_tokens));
    json_object_set_new(o, "completion_tokens_details", c);
    json_object_set_new(c, "reasoning_tokens", json_integer(u->reasoning_tokens));
    return o;
}

json_t *ds_oai_token_string(const char *raw, size_t n, json_t **bytes) {
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((uint8_t)raw[i]));
    }
    return ds_oai_textn(raw, n);
}

void ds_random_id(const char *prefix, char *buf, size_t cap) {
    uint64_t x[2];
    /* random, not a clock and a counter: replicas and data-parallel ranks started in the same second would
     * otherwise give the same ids */
    if (getrandom(x, sizeof x, GRND_NONBLOCK) != (ssize_t)sizeof x) {
        static _Atomic uint64_t counter;
        x[0] = (atomic_fetch_add(&counter, 1) + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
        x[1] = (x[0] ^ (uint64_t)getpid() << 32) * 0xBF58476D1CE4E5B9ull ^ (uint64_t)clock();
    }
    snprintf(buf, cap, "%s%016llx%016llx", prefix, (unsigned long long)x[0], (unsigned long long)x[1]);
}

void ds_oai_call_id(char *buf, size_t cap) {
    char id[48];
    ds_random_id("call_", id, sizeof id);
    snprintf(buf, cap, "%.29s", id); /* "call_" and 24 hex digits, as before */
}

void ds_oai_fingerprint(const char *identity, size_t n, char *buf, size_t cap) {
    uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a: stable across runs and machines */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)identity[i];
        h *= 0x100000001b3ull;
    }
    snprintf(buf, cap, "fp_%012llx", (unsigned long long)(h & 0xffffffffffffull));
}
