/* openai_response.c - see openai_response.h. */
#include "server/openai_response.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/utf8.h"

cJSON *ds_oai_text(const char *s) {
    size_t n = strlen(s);
    if (ds_utf8_valid_prefix((const uint8_t *)s, n) == n) return cJSON_CreateString(s);
    return ds_oai_token_string(s, n, NULL);
}

char *ds_oai_error_json(int status, const char *type, const char *param, const char *message) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddItemToObject(e, "message", ds_oai_text(message));
    cJSON_AddStringToObject(e, "type", type);
    if (param && param[0]) cJSON_AddItemToObject(e, "param", ds_oai_text(param));
    else cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", status);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

cJSON *ds_oai_envelope(const char *id, const char *object, long created, const char *model, cJSON **choices) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)created);
    cJSON_AddStringToObject(o, "model", model);
    cJSON *c = cJSON_AddArrayToObject(o, "choices");
    if (choices) *choices = c;
    return o;
}

cJSON *ds_oai_usage_json(const ds_oai_usage *u) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "prompt_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(o, "completion_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(o, "total_tokens", u->prompt_tokens + u->completion_tokens);
    cJSON *p = cJSON_AddObjectToObject(o, "prompt_tokens_details");
    cJSON_AddNumberToObject(p, "cached_tokens", u->cached_tokens);
    cJSON *c = cJSON_AddObjectToObject(o, "completion_tokens_details");
    cJSON_AddNumberToObject(c, "reasoning_tokens", u->reasoning_tokens);
    return o;
}

cJSON *ds_oai_token_string(const char *raw, size_t n, cJSON **bytes) {
    uint8_t *fixed = malloc(n * 3 + 1);
    cJSON *s;
    if (!fixed) return cJSON_CreateString("");
    size_t m = ds_utf8_repair((const uint8_t *)raw, n, fixed);
    fixed[m] = 0;
    s = cJSON_CreateString((const char *)fixed);
    free(fixed);
    if (bytes) {
        *bytes = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(*bytes, cJSON_CreateNumber((uint8_t)raw[i]));
    }
    return s;
}

void ds_oai_call_id(char *buf, size_t cap) {
    static _Atomic uint64_t counter;
    uint64_t x = atomic_fetch_add(&counter, 1) + (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    snprintf(buf, cap, "call_%016llx%08x", (unsigned long long)x, (unsigned)(x >> 13) & 0xffffffffu);
}
