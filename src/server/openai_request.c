/* openai_request.c - see openai_request.h. */
#include "server/openai_request.h"

#include "jinja/jinja.h"
#include "server/json_text.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int ds_oai_fail(ds_oai_error *err, const char *param, const char *fmt, ...) {
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    err->code = NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

static char *dup_str(const json_t *v, size_t *len);

static const json_t *get(const json_t *o, const char *k) {
    const json_t *v = json_is_object(o) ? json_object_get(o, k) : NULL;
    return json_is_null(v) ? NULL : v;
}

static int get_number(const json_t *o, const char *k, double lo, double hi, double *out, ds_oai_error *err) {
    const json_t *v = get(o, k);
    if (!v) return 0;
    double x = json_number_value(v);
    if (!json_is_number(v) || !isfinite(x)) return ds_oai_fail(err, k, "'%s' must be a number", k);
    if (x < lo || x > hi) return ds_oai_fail(err, k, "'%s' must be between %g and %g, got %g", k, lo, hi, x);
    *out = x;
    return 1;
}

static int get_int(const json_t *o, const char *k, double lo, double hi, long long *out, ds_oai_error *err) {
    const json_t *v = get(o, k);
    if (!v) return 0;
    double x = json_number_value(v);
    if (!json_is_number(v) || x != floor(x) || !isfinite(x)) return ds_oai_fail(err, k, "'%s' must be an integer", k);
    if (x < lo || x > hi) return ds_oai_fail(err, k, "'%s' must be between %.0f and %.0f, got %.0f", k, lo, hi, x);
    *out = (long long)x;
    return 1;
}

static int get_bool(const json_t *o, const char *k, int *out, ds_oai_error *err) {
    const json_t *v = get(o, k);
    if (!v) return 0;
    if (!json_is_boolean(v)) return ds_oai_fail(err, k, "'%s' must be a boolean", k);
    *out = json_is_true(v);
    return 1;
}

/* the URL of an image_url part: {"image_url": {"url": ..., "detail"?}} (OpenAI) or
 * {"image_url": "..."} (vLLM takes the URL itself), kept in r->images */
static int add_image(ds_oai_request *r, const json_t *part, const char *param, ds_oai_error *err) {
    const json_t *iu = get(part, "image_url"), *url = iu;
    if (json_is_object(iu)) {
        url = get(iu, "url");
        const json_t *detail = get(iu, "detail");
        /* the tower sees every image at its own resolution: detail changes nothing, but is checked */
        if (detail && !ds_json_str_is(detail, "auto") && !ds_json_str_is(detail, "low") && !ds_json_str_is(detail, "high"))
            return ds_oai_fail(err, param, "'%s.detail' must be auto, low or high", param);
    }
    if (!json_is_string(url))
        return ds_oai_fail(err, param, "'%s' must be an object with a 'url' string, or the URL itself", param);
    size_t n = json_string_length(url);
    const char *u = json_string_value(url);
    if (!n) return ds_oai_fail(err, param, "the URL of '%s' is empty", param);
    static const char *const SCHEMES[] = {"data:", "file://", "http://", "https://"};
    int known = 0;
    for (size_t i = 0; i < sizeof SCHEMES / sizeof *SCHEMES; i++)
        known |= n >= strlen(SCHEMES[i]) && !strncasecmp(u, SCHEMES[i], strlen(SCHEMES[i]));
    if (!known) {
        size_t colon = strcspn(u, ":/");
        return ds_oai_fail(err, param, "the URL of '%s' has the scheme '%.*s', which is not supported (data:, "
                           "file://, http://, https://)", param, (int)(colon < 24 ? colon : 24), u);
    }
    ds_oai_image *im = realloc(r->images, (size_t)(r->n_images + 1) * sizeof *im);
    if (!im) return ds_oai_fail(err, param, "out of memory");
    r->images = im;
    im = &r->images[r->n_images];
    memset(im, 0, sizeof *im);
    if (!(im->url = dup_str(url, &im->url_len))) return ds_oai_fail(err, param, "out of memory");
    snprintf(im->param, sizeof im->param, "%s", param);
    r->n_images++;
    return 0;
}

/* message content: a string, or a list of parts. Text parts alone become one string; with
 * image_url parts (user messages only) the content stays a list of {"type": "text", "text"} and
 * {"type": "image"} parts, which Qwen's templates write as <|vision_start|><|image_pad|><|vision_end|>,
 * and the images' URLs go to r->images. */
static json_t *content_text(const json_t *c, int i, int user, ds_oai_request *r, ds_oai_error *err) {
    char param[64], pp[64];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (json_is_string(c)) return json_copy((json_t *)c);
    if (!json_is_array(c)) {
        ds_oai_fail(err, param, "'%s' must be a string or an array of content parts", param);
        return NULL;
    }
    size_t n = 0, k;
    int images = 0;
    const json_t *p;
    json_array_foreach(c, k, p) {
        const json_t *t = get(p, "type"), *x = get(p, "text");
        if (!json_is_object(p) || !json_is_string(t)) {
            ds_oai_fail(err, param, "each part of '%s' must be an object with a 'type'", param);
            return NULL;
        }
        if (ds_json_str_is(t, "image_url")) {
            /* both indexes are bounded (DS_OAI_MAX_MESSAGES, the body size): the name fits */
            snprintf(pp, sizeof pp, "messages[%d].content[%d].image_url", i % 100000, (int)(k % 100000));
            if (!user) {
                ds_oai_fail(err, pp, "'%s': images are taken in user messages only", pp);
                return NULL;
            }
            if (add_image(r, p, pp, err)) return NULL;
            images = 1;
            continue;
        }
        if (!ds_json_str_is(t, "text")) {
            ds_oai_fail(err, param, "content parts of type '%s' are not supported (only 'text' and 'image_url')",
                        json_string_value(t));
            return NULL;
        }
        if (!json_is_string(x)) {
            ds_oai_fail(err, param, "a text part of '%s' needs a 'text' string", param);
            return NULL;
        }
        n += json_string_length(x);
    }
    if (images) {
        json_t *parts = json_array();
        json_array_foreach(c, k, p) {
            json_t *o = json_object();
            if (ds_json_str_is(get(p, "type"), "image_url")) {
                json_object_set_new(o, "type", json_string("image"));
            } else {
                json_object_set_new(o, "type", json_string("text"));
                json_object_set_new(o, "text", json_copy(json_object_get(p, "text")));
            }
            if (json_array_append_new(parts, o)) {
                json_decref(parts);
                ds_oai_fail(err, param, "out of memory");
                return NULL;
            }
        }
        return parts;
    }
    char *s = malloc(n + 1);
    if (!s) {
        ds_oai_fail(err, param, "out of memory");
        return NULL;
    }
    size_t at = 0;
    json_array_foreach(c, k, p) {
        const json_t *x = get(p, "text");
        memcpy(s + at, json_string_value(x), json_string_length(x));
        at += json_string_length(x);
    }
    json_t *out = json_stringn_nocheck(s, n);   /* parts of valid strings joined: valid */
    free(s);
    if (!out) ds_oai_fail(err, param, "out of memory");
    return out;
}

static int is_role(const json_t *v) {
    static const char *roles[] = {"system", "developer", "user", "assistant", "tool"};
    for (size_t i = 0; i < sizeof roles / sizeof *roles; i++)
        if (ds_json_str_is(v, roles[i])) return 1;
    return 0;
}

static int parse_calls(json_t *out, const json_t *calls, int i, ds_oai_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].tool_calls", i);
    if (!json_is_array(calls)) return ds_oai_fail(err, param, "'%s' must be an array", param);
    size_t k;
    json_t *call, *oc = json_object_get(out, "tool_calls");
    json_array_foreach(oc, k, call) {
        json_t *f = json_is_object(call) ? json_object_get(call, "function") : NULL;
        json_t *nm = json_is_object(f) ? json_object_get(f, "name") : NULL;
        json_t *args = json_is_object(f) ? json_object_get(f, "arguments") : NULL;
        if (!json_is_object(f) || !json_is_string(nm))
            return ds_oai_fail(err, param, "each of '%s' needs a function with a name", param);
        if (json_is_string(args)) {   /* templates iterate over the arguments: give them the object */
            char msg[256];
            json_t *parsed = ds_json_parse(json_string_value(args), json_string_length(args), msg, sizeof msg);
            if (!json_is_object(parsed)) {
                json_decref(parsed);
                return ds_oai_fail(err, param, "the arguments of '%s' must be a JSON object", param);
            }
            json_object_set_new(f, "arguments", parsed);
        } else if (!args || json_is_null(args)) {
            json_object_set_new(f, "arguments", json_object());
        } else if (!json_is_object(args)) {
            return ds_oai_fail(err, param, "the arguments of '%s' must be a JSON string", param);
        }
    }
    return 0;
}

static int parse_messages(const json_t *root, ds_oai_request *r, ds_oai_error *err) {
    const json_t *ms = get(root, "messages");
    if (!ms) return ds_oai_fail(err, "messages", "'messages' is required");
    if (!json_is_array(ms)) return ds_oai_fail(err, "messages", "'messages' must be an array");
    size_t n_messages = json_array_size(ms);
    if (n_messages == 0) return ds_oai_fail(err, "messages", "'messages' must not be empty");
    if (n_messages > DS_OAI_MAX_MESSAGES)
        return ds_oai_fail(err, "messages", "'messages' has %zu messages; at most %d are allowed", n_messages, DS_OAI_MAX_MESSAGES);
    r->messages = json_array();
    size_t i;
    const json_t *m;
    json_array_foreach(ms, i, m) {
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) return ds_oai_fail(err, param, "'%s' must be an object", param);
        const json_t *role = get(m, "role");
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!json_is_string(role)) return ds_oai_fail(err, param, "'%s' must be a string", param);
        if (!is_role(role))
            return ds_oai_fail(err, param, "'%s' must be system, developer, user, assistant or tool, got '%s'", param,
                        json_string_value(role));
        json_t *out = json_deep_copy(m);
        if (!out || json_array_append_new(r->messages, out)) return ds_oai_fail(err, param, "out of memory");
        if (ds_json_str_is(role, "developer")) json_object_set_new(out, "role", json_string("system"));
        const json_t *c = get(m, "content"), *calls = get(m, "tool_calls");
        if (!c) {
            if (!ds_json_str_is(role, "assistant") || !calls) {
                snprintf(param, sizeof param, "messages[%zu].content", i);
                return ds_oai_fail(err, param, "'%s' is required", param);
            }
            json_object_set_new(out, "content", json_string(""));
        } else {
            json_t *text = content_text(c, (int)i, ds_json_str_is(role, "user"), r, err);
            if (!text) return -1;
            json_object_set_new(out, "content", text);
        }
        if (!calls) json_object_del(out, "tool_calls");   /* null: no calls */
        else if (parse_calls(out, calls, (int)i, err)) return -1;
    }
    return 0;
}

static const json_t *tool_name(const json_t *tool) { return get(get(tool, "function"), "name"); }

static int parse_tools(const json_t *root, ds_oai_request *r, ds_oai_error *err) {
    const json_t *tools = get(root, "tools");
    if (tools) {
        if (!json_is_array(tools)) return ds_oai_fail(err, "tools", "'tools' must be an array");
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t) {
            const json_t *type = get(t, "type"), *f = get(t, "function");
            if (!json_is_object(t) || !ds_json_str_is(type, "function"))
                return ds_oai_fail(err, "tools", "each tool must be an object of type 'function'");
            if (!json_is_object(f) || !json_is_string(get(f, "name")))
                return ds_oai_fail(err, "tools", "each tool needs a 'function' with a 'name' string");
            const json_t *params = get(f, "parameters"), *strict = get(f, "strict");
            char param[64];
            snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
            if (params && !json_is_object(params)) return ds_oai_fail(err, param, "'%s' must be an object (a JSON Schema)", param);
            snprintf(param, sizeof param, "tools[%zu].function.strict", i);
            if (strict && !json_is_boolean(strict)) return ds_oai_fail(err, param, "'%s' must be a boolean", param);
            r->strict_tools |= json_is_true(strict);
        }
        if (json_array_size(tools) > 0) r->tools = json_deep_copy(tools);
    }
    const json_t *tc = get(root, "tool_choice");
    r->tool_choice = r->tools ? DS_TOOLS_AUTO : DS_TOOLS_NONE;
    if (!tc) return 0;
    if (json_is_string(tc)) {
        if (ds_json_str_is(tc, "none")) r->tool_choice = DS_TOOLS_NONE;
        else if (ds_json_str_is(tc, "auto")) r->tool_choice = r->tools ? DS_TOOLS_AUTO : DS_TOOLS_NONE;
        else if (ds_json_str_is(tc, "required")) r->tool_choice = DS_TOOLS_REQUIRED;
        else return ds_oai_fail(err, "tool_choice", "'tool_choice' must be none, auto, required or a function, got '%s'",
                         json_string_value(tc));
    } else if (json_is_object(tc)) {
        const json_t *nm = get(get(tc, "function"), "name");
        if (!json_is_string(nm)) return ds_oai_fail(err, "tool_choice", "'tool_choice.function.name' must be a string");
        r->tool_choice = DS_TOOLS_NAMED;
        r->tool_name = strndup(json_string_value(nm), json_string_length(nm));
        int found = 0;
        size_t i;
        const json_t *t;
        json_array_foreach(r->tools, i, t) found |= json_equal(tool_name(t), nm);
        if (!found)
            return ds_oai_fail(err, "tool_choice", "'tool_choice' names '%s', which is not in 'tools'", json_string_value(nm));
    } else {
        return ds_oai_fail(err, "tool_choice", "'tool_choice' must be a string or an object");
    }
    if (r->tool_choice >= DS_TOOLS_REQUIRED && !r->tools)
        return ds_oai_fail(err, "tool_choice", "'tool_choice' requires 'tools'");
    return 0;
}

static char *dup_str(const json_t *v, size_t *len) {
    size_t n = json_string_length(v);
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, json_string_value(v), n + 1);
    if (len) *len = n;
    return s;
}

static int fail_prompt(ds_oai_error *err) {
    return ds_oai_fail(err, "prompt", "'prompt' must be a string, an array of strings, an array of token ids or an array "
                "of arrays of token ids");
}

/* p: a string, or an array of token ids */
static int add_prompt(ds_oai_request *r, const json_t *p, ds_oai_error *err) {
    ds_oai_prompt *o = &r->prompts[r->n_prompts];
    if (json_is_string(p)) {
        o->text = dup_str(p, &o->len);
        if (!o->text) return ds_oai_fail(err, "prompt", "out of memory");
        r->n_prompts++;
        return 0;
    }
    if (!json_is_array(p) || !json_array_size(p)) return fail_prompt(err);
    o->ids = malloc(json_array_size(p) * sizeof *o->ids);
    if (!o->ids) return ds_oai_fail(err, "prompt", "out of memory");
    r->n_prompts++;
    size_t i;
    const json_t *t;
    json_array_foreach(p, i, t) {
        double x = json_number_value(t);
        if (!json_is_number(t) || x != floor(x) || x < 0 || x > 2147483647.0) return fail_prompt(err);
        o->ids[o->n_ids++] = (int32_t)x;
    }
    return 0;
}

/* a string, an array of token ids (one prompt), or an array of strings or of id arrays (several) */
static int parse_prompt(const json_t *root, ds_oai_request *r, ds_oai_error *err) {
    const json_t *p = get(root, "prompt");
    if (!p) return ds_oai_fail(err, "prompt", "'prompt' is required");
    if (!json_is_string(p) && !json_is_array(p)) return fail_prompt(err);
    size_t n = json_is_array(p) ? json_array_size(p) : 1;
    if (n == 0) return ds_oai_fail(err, "prompt", "'prompt' must not be empty");
    const json_t *first = json_is_array(p) ? json_array_get(p, 0) : p;
    int several = json_is_array(p) && (json_is_string(first) || json_is_array(first));
    if (!several) n = 1;
    if (n > DS_OAI_MAX_CHOICES)
        return ds_oai_fail(err, "prompt", "'prompt' has %zu prompts; at most %d are allowed", n, DS_OAI_MAX_CHOICES);
    r->prompts = calloc(n, sizeof *r->prompts);
    if (!r->prompts) return ds_oai_fail(err, "prompt", "out of memory");
    if (!several) return add_prompt(r, p, err);
    size_t i;
    const json_t *x;
    json_array_foreach(p, i, x) {
        /* a list is of strings or of id lists, not both, as OpenAI's schema has it */
        if (json_typeof(x) != json_typeof(first)) return fail_prompt(err);
        if (add_prompt(r, x, err)) return -1;
    }
    return 0;
}

static int add_stop(ds_oai_request *r, const json_t *x, ds_oai_error *err) {
    if (!json_string_length(x)) return 0;
    r->stop[r->n_stop] = dup_str(x, &r->stop_len[r->n_stop]);
    if (!r->stop[r->n_stop]) return ds_oai_fail(err, "stop", "out of memory");
    r->n_stop++;
    return 0;
}

static int parse_stop(const json_t *root, ds_oai_request *r, ds_oai_error *err) {
    const json_t *s = get(root, "stop");
    if (!s) return 0;
    if (json_is_string(s)) return add_stop(r, s, err);
    if (!json_is_array(s)) return ds_oai_fail(err, "stop", "'stop' must be a string or an array of strings");
    if (json_array_size(s) > DS_OAI_MAX_STOP) return ds_oai_fail(err, "stop", "'stop' has more than %d strings", DS_OAI_MAX_STOP);
    size_t i;
    const json_t *x;
    json_array_foreach(s, i, x) {
        if (!json_is_string(x)) return ds_oai_fail(err, "stop", "'stop' must be a string or an array of strings");
        if (add_stop(r, x, err)) return -1;
    }
    return 0;
}

/* characters of a well-formed UTF-8 string (every jansson string is one) */
static size_t utf8_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((uint8_t)s[i] & 0xC0) != 0x80;
    return c;
}

/* OpenAI's limits: at most 16 pairs, keys up to 64 characters, string values up to 512.
 * Accepted and not used (nothing is stored), but a body OpenAI refuses is refused here too. */
static int parse_metadata(const json_t *root, ds_oai_error *err) {
    const json_t *m = get(root, "metadata");
    if (!m) return 0;
    if (!json_is_object(m)) return ds_oai_fail(err, "metadata", "'metadata' must be an object of strings");
    if (json_object_size(m) > 16)
        return ds_oai_fail(err, "metadata", "'metadata' has %zu keys; at most 16 are allowed", json_object_size(m));
    const char *k;
    size_t kl;
    const json_t *v;
    json_object_keylen_foreach((json_t *)m, k, kl, v) {
        if (utf8_chars(k, kl) > 64)
            return ds_oai_fail(err, "metadata", "a key of 'metadata' is longer than 64 characters");
        if (!json_is_string(v)) return ds_oai_fail(err, "metadata", "'metadata.%.64s' must be a string", k);
        if (utf8_chars(json_string_value(v), json_string_length(v)) > 512)
            return ds_oai_fail(err, "metadata", "'metadata.%.64s' is longer than 512 characters", k);
    }
    return 0;
}

static int parse_reasoning_effort(const json_t *root, ds_oai_request *r, ds_oai_error *err) {
    const json_t *v = get(root, "reasoning_effort");
    r->thinking = -1;
    if (!v) return 0;
    static const char *const on[] = {"minimal", "low", "medium", "high"};
    if (ds_json_str_is(v, "none")) {
        r->thinking = 0;
        return 0;
    }
    for (size_t i = 0; i < sizeof on / sizeof *on; i++)
        if (ds_json_str_is(v, on[i])) {
            r->thinking = 1;
            return 0;
        }
    return ds_oai_fail(err, "reasoning_effort", "'reasoning_effort' must be none, minimal, low, medium or high");
}

/* --- output constraints ---
 * Every spelling of a constraint ends up in r->output; a second one is a 400
 * naming both, as the answer cannot follow two grammars at once. */

/* whitespace bytes in a row a JSON answer may hold between tokens (a model that indents may) */
#define OUT_SPACE 4

/* value is taken over (also on failure) */
static int set_output(ds_oai_request *r, ds_out_kind kind, const char *field, json_t *value, int strict,
                      ds_oai_error *err) {
    if (r->output.kind != DS_OUT_NONE) {
        json_decref(value);
        return ds_oai_fail(err, field, "only one output constraint per request: '%s' and '%s' were both given",
                    r->output.field, field);
    }
    r->output.kind = kind;
    snprintf(r->output.field, sizeof r->output.field, "%s", field);
    r->output.value = value;
    r->output.strict = strict;
    r->output.max_space = OUT_SPACE;
    return 0;
}

/* a schema: an object (or true / false); as_text also takes JSON text holding one (vLLM's guided_json) */
static int set_schema(ds_oai_request *r, const char *field, const json_t *v, int as_text, int strict,
                      ds_oai_error *err) {
    if (as_text && json_is_string(v)) {
        char msg[300];
        json_t *parsed = ds_json_parse(json_string_value(v), json_string_length(v), msg, sizeof msg);
        if (!parsed) return ds_oai_fail(err, field, "'%s' holds text that is not JSON: %s", field, msg);
        if (!json_is_object(parsed) && !json_is_boolean(parsed)) {
            json_decref(parsed);
            return ds_oai_fail(err, field, "'%s' must be a JSON Schema (an object)", field);
        }
        return set_output(r, DS_OUT_SCHEMA, field, parsed, strict, err);
    }
    if (!json_is_object(v) && !json_is_boolean(v))
        return ds_oai_fail(err, field, "'%s' must be a JSON Schema (an object)%s", field, as_text ? " or its JSON text" : "");
    return set_output(r, DS_OUT_SCHEMA, field, json_deep_copy(v), strict, err);
}

static int set_text(ds_oai_request *r, ds_out_kind kind, const char *field, const json_t *v, ds_oai_error *err) {
    if (!json_is_string(v)) return ds_oai_fail(err, field, "'%s' must be a string", field);
    if (kind == DS_OUT_GRAMMAR && !json_string_length(v)) return ds_oai_fail(err, field, "'%s' must not be empty", field);
    return set_output(r, kind, field, json_copy((json_t *)v), 0, err);
}

static int set_choice(ds_oai_request *r, const char *field, const json_t *v, ds_oai_error *err) {
    if (!json_is_array(v) || !json_array_size(v))
        return ds_oai_fail(err, field, "'%s' must be a non-empty array of strings", field);
    size_t i;
    const json_t *x;
    json_array_foreach(v, i, x) if (!json_is_string(x)) return ds_oai_fail(err, field, "'%s[%zu]' must be a string", field, i);
    return set_output(r, DS_OUT_CHOICE, field, json_deep_copy(v), 0, err);
}

/* OpenAI's response_format (and llama-server's {"type": "json_object", "schema": ...}) */
static int parse_response_format(const json_t *v, ds_oai_request *r, ds_oai_error *err) {
    static const char F[] = "response_format";
    const json_t *t = get(v, "type");
    if (!json_is_object(v) || !json_is_string(t)) return ds_oai_fail(err, F, "'response_format' must be an object with a 'type'");
    if (ds_json_str_is(t, "text")) return 0;
    if (ds_json_str_is(t, "json_object")) {
        const json_t *schema = get(v, "schema");
        return schema ? set_schema(r, F, schema, 0, 1, err) : set_output(r, DS_OUT_JSON_OBJECT, F, NULL, 0, err);
    }
    if (!ds_json_str_is(t, "json_schema"))
        return ds_oai_fail(err, F, "response_format of type '%s' is not supported (only text, json_object and json_schema)",
                    json_string_value(t));
    const json_t *js = get(v, "json_schema");
    if (!json_is_object(js)) return ds_oai_fail(err, F, "'response_format.json_schema' must be an object");
    const json_t *name = get(js, "name"), *schema = get(js, "schema");
    if (name && !json_is_string(name)) return ds_oai_fail(err, F, "'response_format.json_schema.name' must be a string");
    int strict = 0;
    const json_t *st = get(js, "strict");
    if (st && !json_is_boolean(st)) return ds_oai_fail(err, F, "'response_format.json_schema.strict' must be a boolean");
    strict = json_is_true(st);
    if (!schema) return ds_oai_fail(err, F, "'response_format.json_schema.schema' is required");
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return ds_oai_fail(err, F, "'response_format.json_schema.schema' must be a JSON Schema (an object)");
    return set_schema(r, F, schema, 0, strict, err);
}

/* vLLM's structured_outputs: one of json, regex, choice, grammar, json_object, and options */
static int parse_structured_outputs(const json_t *so, ds_oai_request *r, ds_oai_error *err) {
    static const char F[] = "structured_outputs";
    if (!json_is_object(so)) return ds_oai_fail(err, F, "'structured_outputs' must be an object");
    int strict = 1, space = OUT_SPACE, flag = 0;
    const char *k;
    const json_t *v;
    /* options first: they shape the constraint whatever the key order (the other two only checked:
     * the grammar is strict already, and there is no other backend to fall back to) */
    if (get_bool(so, "disable_any_whitespace", &flag, err) < 0) return -1;
    if (flag) space = 0;
    if (get_bool(so, "disable_additional_properties", &flag, err) < 0) return -1;
    if (get_bool(so, "disable_fallback", &flag, err) < 0) return -1;
    json_object_foreach((json_t *)so, k, v) {
        char field[64];
        snprintf(field, sizeof field, "structured_outputs.%.40s", k);
        if (json_is_null(v) || !strcmp(k, "disable_any_whitespace") || !strcmp(k, "disable_additional_properties") ||
            !strcmp(k, "disable_fallback"))
            continue;
        int rc;
        if (!strcmp(k, "json")) rc = set_schema(r, field, v, 1, strict, err);
        else if (!strcmp(k, "regex")) rc = set_text(r, DS_OUT_REGEX, field, v, err);
        else if (!strcmp(k, "grammar")) rc = set_text(r, DS_OUT_GRAMMAR, field, v, err);
        else if (!strcmp(k, "choice")) rc = set_choice(r, field, v, err);
        else if (!strcmp(k, "json_object")) {
            if (!json_is_boolean(v)) return ds_oai_fail(err, field, "'%s' must be a boolean", field);
            rc = json_is_true(v) ? set_output(r, DS_OUT_JSON_OBJECT, field, NULL, 0, err) : 0;
        } else if (!strcmp(k, "whitespace_pattern")) {
            return ds_oai_fail(err, field, "'%s' is not supported: whitespace between JSON tokens is at most %d bytes of "
                        "spaces, tabs and newlines (disable_any_whitespace: none)", field, OUT_SPACE);
        } else {
            return ds_oai_fail(err, field, "'%s' is not supported (json, regex, choice, grammar, json_object, "
                        "disable_any_whitespace, disable_additional_properties, disable_fallback)", field);
        }
        if (rc) return -1;
    }
    if (!strncmp(r->output.field, F, sizeof F - 1)) r->output.max_space = space;
    return 0;
}

static int parse_output(const json_t *root, ds_oai_request *r, ds_oai_error *err) {
    const json_t *v;
    if ((v = get(root, "response_format")) && parse_response_format(v, r, err)) return -1;
    if ((v = get(root, "structured_outputs")) && parse_structured_outputs(v, r, err)) return -1;
    /* vLLM's older spellings */
    if ((v = get(root, "guided_json")) && set_schema(r, "guided_json", v, 1, 1, err)) return -1;
    if ((v = get(root, "guided_regex")) && set_text(r, DS_OUT_REGEX, "guided_regex", v, err)) return -1;
    if ((v = get(root, "guided_choice")) && set_choice(r, "guided_choice", v, err)) return -1;
    if ((v = get(root, "guided_grammar")) && set_text(r, DS_OUT_GRAMMAR, "guided_grammar", v, err)) return -1;
    if ((v = get(root, "guided_decoding_backend")) && !json_is_string(v))
        return ds_oai_fail(err, "guided_decoding_backend", "'guided_decoding_backend' must be a string");
    if ((v = get(root, "guided_whitespace_pattern")) && (!json_is_string(v) || json_string_length(v)))
        return ds_oai_fail(err, "guided_whitespace_pattern", "'guided_whitespace_pattern' is not supported: whitespace "
                    "between JSON tokens is at most %d bytes of spaces, tabs and newlines", OUT_SPACE);
    /* llama-server's */
    if ((v = get(root, "grammar")) && set_text(r, DS_OUT_GRAMMAR, "grammar", v, err)) return -1;
    if ((v = get(root, "json_schema")) && set_schema(r, "json_schema", v, 0, 1, err)) return -1;
    return 0;
}

/* OpenAI's logit_bias: {"token id": bias}, ids as decimal strings, biases -100..100, at most
 * DS_MAX_LOGIT_BIAS entries. Whether an id is in the vocabulary is checked where the vocabulary
 * is known (ds_completion_prompt). */
static int parse_logit_bias(const json_t *v, ds_sampling_params *sp, ds_oai_error *err) {
    static const char F[] = "logit_bias";
    if (!json_is_object(v)) return ds_oai_fail(err, F, "'logit_bias' must be an object of token ids to numbers");
    if (json_object_size(v) > DS_MAX_LOGIT_BIAS)
        return ds_oai_fail(err, F, "'logit_bias' has %zu entries; at most %d are allowed", json_object_size(v), DS_MAX_LOGIT_BIAS);
    const char *k;
    size_t kl;
    const json_t *x;
    json_object_keylen_foreach((json_t *)v, k, kl, x) {
        char *end = NULL;
        long long id = kl && kl <= 10 && k[0] >= '0' && k[0] <= '9' ? strtoll(k, &end, 10) : -1;
        if (id < 0 || id > INT32_MAX || end != k + kl)
            return ds_oai_fail(err, F, "the key '%.40s' of 'logit_bias' is not a token id (a non-negative integer written "
                        "as a string)", k);
        double b = json_number_value(x);
        if (!json_is_number(x) || !isfinite(b))
            return ds_oai_fail(err, F, "'logit_bias.%.40s' must be a number", k);
        if (b < -100 || b > 100) return ds_oai_fail(err, F, "'logit_bias.%.40s' must be between -100 and 100, got %g", k, b);
        sp->bias[sp->n_bias++] = (ds_logit_bias){.token = (int32_t)id, .bias = (float)b};
    }
    return 0;
}

static int parse_common(const json_t *root, ds_oai_request *r, ds_oai_error *err) {
    const json_t *v;
    double x;
    long long k;
    int rc;
    if ((v = get(root, "model"))) {
        if (!json_is_string(v)) return ds_oai_fail(err, "model", "'model' must be a string");
        r->model = dup_str(v, NULL);
    }
    ds_sampling_params *sp = &r->sampling;
    if ((rc = get_number(root, "temperature", 0, 2, &x, err)) < 0) return -1;
    if (rc) sp->temperature = (float)x;
    if ((rc = get_number(root, "top_p", 0, 1, &x, err)) < 0) return -1;
    if (rc) {
        if (x <= 0) return ds_oai_fail(err, "top_p", "'top_p' must be greater than 0");
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
        if (x <= 0) return ds_oai_fail(err, "repetition_penalty", "'repetition_penalty' must be greater than 0");
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
        if (!json_is_object(v)) return ds_oai_fail(err, "stream_options", "'stream_options' must be an object");
        if (!r->stream) return ds_oai_fail(err, "stream_options", "'stream_options' is only allowed with 'stream': true");
        if (get_bool(v, "include_usage", &r->include_usage, err) < 0) return -1;
    }
    if ((v = get(root, "user")) && !json_is_string(v)) return ds_oai_fail(err, "user", "'user' must be a string");
    if (parse_metadata(root, err)) return -1;
    int store = 0;
    if (get_bool(root, "store", &store, err) < 0) return -1;
    if (store) return ds_oai_fail(err, "store", "'store': true is not supported: this server stores no completions");
    if (parse_output(root, r, err)) return -1;
    if ((v = get(root, "logit_bias")) && parse_logit_bias(v, sp, err)) return -1;
    return 0;
}

int ds_oai_request_parse(const char *body, size_t len, ds_oai_kind kind, ds_oai_request *r, ds_oai_error *err) {
    memset(r, 0, sizeof *r);
    memset(err, 0, sizeof *err);
    char msg[400];
    json_t *root = ds_json_parse(body, len, msg, sizeof msg);
    if (!root) return ds_oai_fail(err, "", "the request body is %s", msg);
    int rc = ds_oai_request_parse_json(root, kind, r, err);
    json_decref(root);
    return rc;
}

int ds_oai_request_parse_json(const json_t *root, ds_oai_kind kind, ds_oai_request *r, ds_oai_error *err) {
    memset(r, 0, sizeof *r);
    memset(err, 0, sizeof *err);
    r->kind = kind;
    r->thinking = -1;
    r->parallel_tool_calls = 1;
    ds_sampling_defaults(&r->sampling);
    int rc = -1;
    if (!json_is_object(root)) {
        ds_oai_fail(err, "", "the request body must be a JSON object");
        goto out;
    }
    if (parse_common(root, r, err)) goto out;
    long long k;
    int got;
    if (kind == DS_OAI_CHAT) {
        if (parse_messages(root, r, err) || parse_tools(root, r, err)) goto out;
        /* a forced or strict tool call is a constraint of its own */
        if (r->output.kind != DS_OUT_NONE && r->tool_choice >= DS_TOOLS_REQUIRED) {
            ds_oai_fail(err, r->output.field, "only one output constraint per request: '%s' and 'tool_choice' (%s) were "
                 "both given", r->output.field, r->tool_choice == DS_TOOLS_REQUIRED ? "required" : "naming a function");
            goto out;
        }
        if (r->output.kind != DS_OUT_NONE && r->tool_choice == DS_TOOLS_AUTO && r->strict_tools) {
            ds_oai_fail(err, r->output.field, "only one output constraint per request: '%s' and the strict functions of "
                 "'tools' were both given", r->output.field);
            goto out;
        }
        const json_t *kw = get(root, "chat_template_kwargs");
        if (kw) {
            if (!json_is_object(kw)) {
                ds_oai_fail(err, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
                goto out;
            }
            r->template_kwargs = json_deep_copy(kw);
        }
        if (get_bool(root, "logprobs", &r->logprobs, err) < 0) goto out;
        if ((got = get_int(root, "top_logprobs", 0, 20, &k, err)) < 0) goto out;
        if (got) {
            if (!r->logprobs && k > 0) {
                ds_oai_fail(err, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
                goto out;
            }
            r->top_logprobs = (int)k;
        }
        r->parallel_tool_calls = 1;
        if (get_bool(root, "parallel_tool_calls", &r->parallel_tool_calls, err) < 0) goto out;
        if (parse_reasoning_effort(root, r, err)) goto out;
        if (get(root, "functions")) {
            ds_oai_fail(err, "functions", "'functions' is not supported; use 'tools'");
            goto out;
        }
    } else {
        if (parse_prompt(root, r, err)) goto out;
        if ((got = get_int(root, "logprobs", 0, 20, &k, err)) < 0) goto out;
        if (got) {
            r->logprobs = 1;
            r->top_logprobs = (int)k;
        }
        if (get_bool(root, "echo", &r->echo, err) < 0) goto out;
        if (r->echo && r->logprobs) {
            /* the prompt's own logprobs would need a scoring pass the engine does not make */
            ds_oai_fail(err, "echo", "'echo' with 'logprobs' is not supported: this server does not compute the prompt's "
                 "logprobs; ask without 'logprobs', or without 'echo'");
            goto out;
        }
        const json_t *v = get(root, "suffix");
        if (v && !json_is_string(v)) {
            ds_oai_fail(err, "suffix", "'suffix' must be a string");
            goto out;
        }
        if (v && json_string_length(v) && !(r->suffix = dup_str(v, &r->suffix_len))) {
            ds_oai_fail(err, "suffix", "out of memory");
            goto out;
        }
        r->best_of = r->n;
        if ((got = get_int(root, "best_of", 1, DS_OAI_MAX_N, &k, err)) < 0) goto out;
        if (got) {
            if (k < r->n) {
                ds_oai_fail(err, "best_of", "'best_of' (%lld) must be at least 'n' (%d)", k, r->n);
                goto out;
            }
            if (k > r->n && r->stream) {
                ds_oai_fail(err, "best_of", "'best_of' greater than 'n' cannot stream: the best are known only at the end");
                goto out;
            }
            r->best_of = (int)k;
        }
        if (r->n_prompts * r->best_of > DS_OAI_MAX_CHOICES) {
            ds_oai_fail(err, r->best_of > 1 ? "best_of" : "n", "%d prompts x %d choices are more than %d choices in one request",
                 r->n_prompts, r->best_of, DS_OAI_MAX_CHOICES);
            goto out;
        }
    }
    rc = 0;
out:
    if (rc) ds_oai_request_free(r);
    return rc;
}

json_t *ds_oai_template_context(const ds_oai_request *r, const char *eos_text, ds_err *e) {
    /* the render only reads: messages and tools are shared with the request, not copied */
    json_t *ctx = json_object();
    if (!ctx) {
        ds_fail(e, DS_ENOMEM, "out of memory building the chat template context");
        return NULL;
    }
    json_object_set(ctx, "messages", r->messages);
    if (r->tools && r->tool_choice != DS_TOOLS_NONE) json_object_set(ctx, "tools", r->tools);
    json_object_set_new(ctx, "add_generation_prompt", json_true());
    json_object_set_new(ctx, "eos_token", ds_json_textn(eos_text, strlen(eos_text)));
    json_object_set_new(ctx, "bos_token", json_string(""));
    if (r->thinking >= 0) json_object_set_new(ctx, "enable_thinking", json_boolean(r->thinking));
    if (ds_jinja_merge_kwargs(ctx, r->template_kwargs, e) != DS_OK) {
        json_decref(ctx);
        return NULL;
    }
    return ctx;
}

void ds_oai_request_free(ds_oai_request *r) {
    free(r->model);
    json_decref(r->messages);
    json_decref(r->tools);
    json_decref(r->template_kwargs);
    free(r->tool_name);
    json_decref(r->output.value);
    for (int i = 0; i < r->n_prompts; i++) free(r->prompts[i].text), free(r->prompts[i].ids);
    free(r->prompts);
    free(r->suffix);
    for (int i = 0; i < r->n_images; i++) free(r->images[i].url);
    free(r->images);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}
