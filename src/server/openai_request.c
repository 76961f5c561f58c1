/* openai_request.c - see openai_request.h. */
#include "server/openai_request.h"

#include "server/jinja.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(ds_oai_error *err, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(ds_oai_error *err, const char *param, const char *fmt, ...) {
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

static const cJSON *get(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNull(v) ? NULL : v;
}

static int get_number(const cJSON *o, const char *k, double lo, double hi, double *out, ds_oai_error *err) {
    const cJSON *v = get(o, k);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return fail(err, k, "'%s' must be a number", k);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return fail(err, k, "'%s' must be between %g and %g, got %g", k, lo, hi, v->valuedouble);
    *out = v->valuedouble;
    return 1;
}

static int get_int(const cJSON *o, const char *k, double lo, double hi, long long *out, ds_oai_error *err) {
    const cJSON *v = get(o, k);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || !isfinite(v->valuedouble))
        return fail(err, k, "'%s' must be an integer", k);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return fail(err, k, "'%s' must be between %.0f and %.0f, got %.0f", k, lo, hi, v->valuedouble);
    *out = (long long)v->valuedouble;
    return 1;
}

static int get_bool(const cJSON *o, const char *k, int *out, ds_oai_error *err) {
    const cJSON *v = get(o, k);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return fail(err, k, "'%s' must be a boolean", k);
    *out = cJSON_IsTrue(v);
    return 1;
}

/* message content: a string, or a list of text parts, as one string */
static int content_text(const cJSON *c, int i, char **out, ds_oai_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (cJSON_IsString(c)) {
        *out = strdup(c->valuestring);
        return *out ? 0 : fail(err, param, "out of memory");
    }
    if (!cJSON_IsArray(c)) return fail(err, param, "'%s' must be a string or an array of content parts", param);
    size_t n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        const cJSON *t = get(p, "type"), *x = get(p, "text");
        if (!cJSON_IsObject(p) || !cJSON_IsString(t))
            return fail(err, param, "each part of '%s' must be an object with a 'type'", param);
        if (strcmp(t->valuestring, "text"))
            return fail(err, param, "content parts of type '%s' are not supported (only 'text')", t->valuestring);
        if (!cJSON_IsString(x)) return fail(err, param, "a text part of '%s' needs a 'text' string", param);
        n += strlen(x->valuestring);
    }
    char *s = malloc(n + 1);
    if (!s) return fail(err, param, "out of memory");
    s[0] = 0;
    cJSON_ArrayForEach(p, c) strcat(s, get(p, "text")->valuestring);
    *out = s;
    return 0;
}

/* Sets obj[key] = v, dropping every item of that name first: a JSON object
 * may repeat a name, and the template must see the one value checked here
 * (the first, which is what the lookups above read). */
static void set_only(cJSON *obj, const char *key, cJSON *v) {
    while (cJSON_GetObjectItemCaseSensitive(obj, key)) cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    cJSON_AddItemToObject(obj, key, v);
}

static int parse_messages(const cJSON *root, ds_oai_request *r, ds_oai_error *err) {
    const cJSON *ms = get(root, "messages");
    if (!ms) return fail(err, "messages", "'messages' is required");
    if (!cJSON_IsArray(ms)) return fail(err, "messages", "'messages' must be an array");
    int n_messages = cJSON_GetArraySize(ms);
    if (n_messages == 0) return fail(err, "messages", "'messages' must not be empty");
    if (n_messages > DS_OAI_MAX_MESSAGES)
        return fail(err, "messages", "'messages' has %d messages; at most %d are allowed", n_messages, DS_OAI_MAX_MESSAGES);
    r->messages = cJSON_CreateArray();
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, ms) {
        char param[64];
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!cJSON_IsObject(m)) return fail(err, param, "'%s' must be an object", param);
        const cJSON *role = get(m, "role");
        snprintf(param, sizeof param, "messages[%d].role", i);
        if (!cJSON_IsString(role)) return fail(err, param, "'%s' must be a string", param);
        const char *rl = role->valuestring;
        if (strcmp(rl, "system") && strcmp(rl, "developer") && strcmp(rl, "user") && strcmp(rl, "assistant") &&
            strcmp(rl, "tool"))
            return fail(err, param, "'%s' must be system, developer, user, assistant or tool, got '%s'", param, rl);
        cJSON *out = cJSON_Duplicate(m, 1);
        cJSON_AddItemToArray(r->messages, out);
        set_only(out, "role", cJSON_CreateString(strcmp(rl, "developer") ? rl : "system"));
        const cJSON *c = get(m, "content"), *calls = get(m, "tool_calls");
        if (!c) {
            if (strcmp(rl, "assistant") || !calls) {
                snprintf(param, sizeof param, "messages[%d].content", i);
                return fail(err, param, "'%s' is required", param);
            }
            set_only(out, "content", cJSON_CreateString(""));
        } else {
            char *text;
            if (content_text(c, i, &text, err)) return -1;
            set_only(out, "content", cJSON_CreateString(text));
            free(text);
        }
        if (!calls) {   /* null, or a null first of repeated names: no calls */
            while (cJSON_GetObjectItemCaseSensitive(out, "tool_calls"))
                cJSON_DeleteItemFromObjectCaseSensitive(out, "tool_calls");
        } else {
            snprintf(param, sizeof param, "messages[%d].tool_calls", i);
            if (!cJSON_IsArray(calls)) return fail(err, param, "'%s' must be an array", param);
            cJSON *oc = cJSON_DetachItemFromObjectCaseSensitive(out, "tool_calls"), *call;
            set_only(out, "tool_calls", oc);
            cJSON_ArrayForEach(call, oc) {
                cJSON *f = cJSON_GetObjectItemCaseSensitive(call, "function");
                cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
                cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
                if (!cJSON_IsObject(f) || !cJSON_IsString(nm))
                    return fail(err, param, "each of '%s' needs a function with a name", param);
                if (cJSON_IsString(args)) {   /* templates iterate over the arguments: give them the object */
                    cJSON *parsed = cJSON_ParseWithOpts(args->valuestring, NULL, 1);
                    if (!cJSON_IsObject(parsed)) {
                        cJSON_Delete(parsed);
                        return fail(err, param, "the arguments of '%s' must be a JSON object", param);
                    }
                    cJSON_ReplaceItemInObjectCaseSensitive(f, "arguments", parsed);
                } else if (!args) {
                    cJSON_AddItemToObject(f, "arguments", cJSON_CreateObject());
                } else if (!cJSON_IsObject(args)) {
                    return fail(err, param, "the arguments of '%s' must be a JSON string", param);
                }
            }
        }
        i++;
    }
    return 0;
}

static int parse_tools(const cJSON *root, ds_oai_request *r, ds_oai_error *err) {
    const cJSON *tools = get(root, "tools");
    if (tools) {
        if (!cJSON_IsArray(tools)) return fail(err, "tools", "'tools' must be an array");
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            const cJSON *type = get(t, "type"), *f = get(t, "function");
            if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function"))
                return fail(err, "tools", "each tool must be an object of type 'function'");
            if (!cJSON_IsObject(f) || !cJSON_IsString(get(f, "name")))
                return fail(err, "tools", "each tool needs a 'function' with a 'name' string");
        }
        if (cJSON_GetArraySize(tools) > 0) r->tools = cJSON_Duplicate(tools, 1);
    }
    const cJSON *tc = get(root, "tool_choice");
    r->tool_choice = r->tools ? DS_TOOLS_AUTO : DS_TOOLS_NONE;
    if (!tc) return 0;
    if (cJSON_IsString(tc)) {
        const char *s = tc->valuestring;
        if (!strcmp(s, "none")) r->tool_choice = DS_TOOLS_NONE;
        else if (!strcmp(s, "auto")) r->tool_choice = r->tools ? DS_TOOLS_AUTO : DS_TOOLS_NONE;
        else if (!strcmp(s, "required")) r->tool_choice = DS_TOOLS_REQUIRED;
        else return fail(err, "tool_choice", "'tool_choice' must be none, auto, required or a function, got '%s'", s);
    } else if (cJSON_IsObject(tc)) {
        const cJSON *f = get(tc, "function"), *nm = get(f, "name");
        if (!cJSON_IsString(nm)) return fail(err, "tool_choice", "'tool_choice.function.name' must be a string");
        r->tool_choice = DS_TOOLS_NAMED;
        r->tool_name = strdup(nm->valuestring);
        int found = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, r->tools) found |= !strcmp(get(get(t, "function"), "name")->valuestring, nm->valuestring);
        if (!found) return fail(err, "tool_choice", "'tool_choice' names '%s', which is not in 'tools'", nm->valuestring);
    } else {
        return fail(err, "tool_choice", "'tool_choice' must be a string or an object");
    }
    if (r->tool_choice >= DS_TOOLS_REQUIRED && !r->tools)
        return fail(err, "tool_choice", "'tool_choice' requires 'tools'");
    return 0;
}

static int parse_prompt(const cJSON *root, ds_oai_request *r, ds_oai_error *err) {
    const cJSON *p = get(root, "prompt");
    if (!p) return fail(err, "prompt", "'prompt' is required");
    if (cJSON_IsString(p)) {
        r->prompt = strdup(p->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(p)) return fail(err, "prompt", "'prompt' must be a string, an array of strings or of token ids");
    int n = cJSON_GetArraySize(p);
    if (n == 0) return fail(err, "prompt", "'prompt' must not be empty");
    const cJSON *first = cJSON_GetArrayItem(p, 0);
    if (cJSON_IsString(first)) {
        if (n > 1) return fail(err, "prompt", "several prompts in one request are not supported; send one per request");
        r->prompt = strdup(first->valuestring);
        return 0;
    }
    if (cJSON_IsArray(first)) return fail(err, "prompt", "several prompts in one request are not supported");
    r->prompt_ids = malloc((size_t)n * sizeof *r->prompt_ids);
    if (!r->prompt_ids) return fail(err, "prompt", "out of memory");
    const cJSON *t;
    cJSON_ArrayForEach(t, p) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
            t->valuedouble > 2147483647.0)
            return fail(err, "prompt", "'prompt' must be a string, an array of strings or of token ids");
        r->prompt_ids[r->n_prompt_ids++] = (int32_t)t->valuedouble;
    }
    return 0;
}

static int parse_stop(const cJSON *root, ds_oai_request *r, ds_oai_error *err) {
    const cJSON *s = get(root, "stop");
    if (!s) return 0;
    if (cJSON_IsString(s)) {
        if (!s->valuestring[0]) return 0;
        r->stop[r->n_stop++] = strdup(s->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(s)) return fail(err, "stop", "'stop' must be a string or an array of strings");
    if (cJSON_GetArraySize(s) > DS_OAI_MAX_STOP) return fail(err, "stop", "'stop' has more than %d strings", DS_OAI_MAX_STOP);
    const cJSON *x;
    cJSON_ArrayForEach(x, s) {
        if (!cJSON_IsString(x)) return fail(err, "stop", "'stop' must be a string or an array of strings");
        if (x->valuestring[0]) r->stop[r->n_stop++] = strdup(x->valuestring);
    }
    return 0;
}

static int parse_common(const cJSON *root, ds_oai_request *r, ds_oai_error *err) {
    const cJSON *v;
    double x;
    long long k;
    int rc;
    if ((v = get(root, "model"))) {
        if (!cJSON_IsString(v)) return fail(err, "model", "'model' must be a string");
        r->model = strdup(v->valuestring);
    }
    ds_sampling_params *sp = &r->sampling;
    if ((rc = get_number(root, "temperature", 0, 2, &x, err)) < 0) return -1;
    if (rc) sp->temperature = (float)x;
    if ((rc = get_number(root, "top_p", 0, 1, &x, err)) < 0) return -1;
    if (rc) {
        if (x <= 0) return fail(err, "top_p", "'top_p' must be greater than 0");
        sp->top_p = (float)x;
    }
    if ((rc = get_int(root, "top_k", -1, 1 << 24, &k, err)) < 0) return -1;
    if (rc) sp->top_k = k < 0 ? 0 : (int)k;
    if ((rc = get_number(root, "min_p", 0, 1, &x, err)) < 0) return -1;
    if (rc) sp->min_p = (float)x;
    if ((rc = get_number(root, "presence_penalty", -2, 2, &x, err)) < 0) return -1;
    if (rc) sp->presence_penalty = (float)x;
    if ((rc = get_number(root, "frequency_penalty", -2, 2, &x, err)) < 0) return -1;
    if (rc) sp->frequency_penalty = (float)x;
    if ((rc = get_number(root, "repetition_penalty", 0, 10, &x, err)) < 0) return -1;
    if (rc) {
        if (x <= 0) return fail(err, "repetition_penalty", "'repetition_penalty' must be greater than 0");
        sp->repetition_penalty = (float)x;
    }
    if ((rc = get_int(root, "seed", -9.2e18, 1.8e19, &k, err)) < 0) return -1;
    if (rc) {
        sp->seed = (uint64_t)k;
        r->seed_given = 1;
    }
    r->max_tokens = -1;
    if ((rc = get_int(root, "max_tokens", 1, 1 << 30, &k, err)) < 0) return -1;
    if (rc) r->max_tokens = (int)k;
    if ((rc = get_int(root, "max_completion_tokens", 1, 1 << 30, &k, err)) < 0) return -1;
    if (rc) r->max_tokens = (int)k;
    if (parse_stop(root, r, err)) return -1;
    r->n = 1;
    if ((rc = get_int(root, "n", 1, DS_OAI_MAX_N, &k, err)) < 0) return -1;
    if (rc) r->n = (int)k;
    if (get_bool(root, "stream", &r->stream, err) < 0) return -1;
    if (get_bool(root, "ignore_eos", &r->ignore_eos, err) < 0) return -1;
    if ((v = get(root, "stream_options"))) {
        if (!cJSON_IsObject(v)) return fail(err, "stream_options", "'stream_options' must be an object");
        if (!r->stream) return fail(err, "stream_options", "'stream_options' is only allowed with 'stream': true");
        if (get_bool(v, "include_usage", &r->include_usage, err) < 0) return -1;
    }
    if ((v = get(root, "user")) && !cJSON_IsString(v)) return fail(err, "user", "'user' must be a string");
    if ((v = get(root, "response_format"))) {
        const cJSON *t = get(v, "type");
        if (!cJSON_IsObject(v) || !cJSON_IsString(t)) return fail(err, "response_format", "'response_format' must be an object with a 'type'");
        if (!strcmp(t->valuestring, "json_object")) r->json_object = 1;
        else if (strcmp(t->valuestring, "text"))
            return fail(err, "response_format", "response_format of type '%s' is not supported yet (only text and "
                        "json_object)", t->valuestring);
    }
    if ((v = get(root, "logit_bias"))) {
        if (!cJSON_IsObject(v)) return fail(err, "logit_bias", "'logit_bias' must be an object");
        if (cJSON_GetArraySize(v) > 0) return fail(err, "logit_bias", "'logit_bias' is not supported yet");
    }
    return 0;
}

int ds_oai_request_parse(const char *body, size_t len, ds_oai_kind kind, ds_oai_request *r, ds_oai_error *err) {
    memset(r, 0, sizeof *r);
    memset(err, 0, sizeof *err);
    r->kind = kind;
    ds_sampling_defaults(&r->sampling);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    /* only whitespace may follow the value, within len: the body need not end with a NUL */
    size_t at = root && end ? (size_t)(end - body) : len;
    while (at < len && (body[at] == ' ' || body[at] == '\t' || body[at] == '\r' || body[at] == '\n')) at++;
    if (!root || at < len) {
        cJSON_Delete(root);
        return fail(err, "", "the request body is not valid JSON");
    }
    int rc = -1;
    if (!cJSON_IsObject(root)) {
        fail(err, "", "the request body must be a JSON object");
        goto out;
    }
    if (parse_common(root, r, err)) goto out;
    long long k;
    int got;
    if (kind == DS_OAI_CHAT) {
        if (parse_messages(root, r, err) || parse_tools(root, r, err)) goto out;
        if (r->json_object && r->tool_choice >= DS_TOOLS_REQUIRED) {
            fail(err, "response_format", "response_format json_object cannot be combined with tool_choice '%s'",
                 r->tool_choice == DS_TOOLS_REQUIRED ? "required" : "naming a function");
            goto out;
        }
        const cJSON *kw = get(root, "chat_template_kwargs");
        if (kw) {
            if (!cJSON_IsObject(kw)) {
                fail(err, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
                goto out;
            }
            r->template_kwargs = cJSON_Duplicate(kw, 1);
        }
        if (get_bool(root, "logprobs", &r->logprobs, err) < 0) goto out;
        if ((got = get_int(root, "top_logprobs", 0, 20, &k, err)) < 0) goto out;
        if (got) {
            if (!r->logprobs && k > 0) {
                fail(err, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
                goto out;
            }
            r->top_logprobs = (int)k;
        }
        int ptc;
        if (get_bool(root, "parallel_tool_calls", &ptc, err) < 0) goto out;
        if (get(root, "functions")) {
            fail(err, "functions", "'functions' is not supported; use 'tools'");
            goto out;
        }
    } else {
        if (parse_prompt(root, r, err)) goto out;
        if ((got = get_int(root, "logprobs", 0, 20, &k, err)) < 0) goto out;
        if (got) {
            r->logprobs = 1;
            r->top_logprobs = (int)k;
        }
        int echo = 0;
        if (get_bool(root, "echo", &echo, err) < 0) goto out;
        if (echo) {
            fail(err, "echo", "'echo' is not supported yet");
            goto out;
        }
        const cJSON *v = get(root, "suffix");
        if (v && (!cJSON_IsString(v) || v->valuestring[0])) {
            fail(err, "suffix", "'suffix' is not supported");
            goto out;
        }
        if ((got = get_int(root, "best_of", 1, DS_OAI_MAX_N, &k, err)) < 0) goto out;
        if (got && k != r->n) {
            fail(err, "best_of", "'best_of' other than n is not supported");
            goto out;
        }
    }
    rc = 0;
out:
    cJSON_Delete(root);
    if (rc) ds_oai_request_free(r);
    return rc;
}

cJSON *ds_oai_template_context(const ds_oai_request *r, const char *eos_text, ds_err *e) {
    cJSON *ctx = cJSON_CreateObject();
    cJSON_AddItemToObject(ctx, "messages", cJSON_Duplicate(r->messages, 1));
    if (r->tools && r->tool_choice != DS_TOOLS_NONE) cJSON_AddItemToObject(ctx, "tools", cJSON_Duplicate(r->tools, 1));
    cJSON_AddTrueToObject(ctx, "add_generation_prompt");
    cJSON_AddStringToObject(ctx, "eos_token", eos_text);
    cJSON_AddStringToObject(ctx, "bos_token", "");
    if (ds_jinja_merge_kwargs(ctx, r->template_kwargs, e) != DS_OK) {
        cJSON_Delete(ctx);
        return NULL;
    }
    return ctx;
}

void ds_oai_request_free(ds_oai_request *r) {
    free(r->model);
    cJSON_Delete(r->messages);
    cJSON_Delete(r->tools);
    cJSON_Delete(r->template_kwargs);
    free(r->tool_name);
    free(r->prompt);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}
