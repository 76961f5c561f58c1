/* responses_api.c - see responses_api.h.
 *
 * Parsing builds a chat completions body from the Responses request and hands
 * it to ds_oai_request_parse_json, so both APIs share every check and the
 * engine path; what the chat parser refuses is reported under the Responses
 * field it came from. Nothing is stored: a request naming an earlier response
 * is refused. */
#include "server/responses_api.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "server/json_text.h"
#include "server/sse.h"

/* --- request --- */

/* a member that is there and not null: clients send null for "not given" */
static const json_t *field(const json_t *o, const char *k) {
    const json_t *v = json_is_object(o) ? json_object_get(o, k) : NULL;
    return json_is_null(v) ? NULL : v;
}

static int set(json_t *o, const char *k, json_t *v, ds_oai_error *err) {
    if (!v || json_object_set_new(o, k, v)) return ds_oai_fail(err, k, "out of memory");
    return 0;
}

/* The text of a message's content: a string, or parts whose text is joined (as chat
 * completions joins its text parts). param names the content for errors. */
static int content_text(const json_t *c, const char *param, ds_sb *out, ds_oai_error *err) {
    size_t len;
    const char *s = ds_json_str(c, &len);
    if (s) {
        ds_sb_append(out, s, len);
        return 0;
    }
    if (!json_is_array(c)) return ds_oai_fail(err, param, "'%s' must be a string or an array of content parts", param);
    size_t k;
    const json_t *p;
    json_array_foreach(c, k, p) {
        char pp[96];
        snprintf(pp, sizeof pp, "%s[%zu]", param, k);
        const json_t *t = field(p, "type");
        if (!json_is_object(p) || !json_is_string(t)) return ds_oai_fail(err, pp, "'%s' must be an object with a 'type'", pp);
        const char *key = "text";
        if (ds_json_str_is(t, "refusal")) key = "refusal";
        else if (ds_json_str_is(t, "input_image"))
            return ds_oai_fail(err, pp, "'%s' is an image: images are taken in user messages only", pp);
        else if (ds_json_str_is(t, "input_file") || ds_json_str_is(t, "input_audio"))
            return ds_oai_fail(err, pp, "'%s' is of type '%s': only text is supported", pp, json_string_value(t));
        else if (!ds_json_str_is(t, "input_text") && !ds_json_str_is(t, "output_text") && !ds_json_str_is(t, "text") &&
                 !ds_json_str_is(t, "reasoning_text") && !ds_json_str_is(t, "summary_text"))
            return ds_oai_fail(err, pp, "'%s' has an unknown type '%s'", pp, json_string_value(t));
        s = ds_json_str(field(p, key), &len);
        if (!s) return ds_oai_fail(err, pp, "'%s' needs a '%s' string", pp, key);
        ds_sb_append(out, s, len);
    }
    return 0;
}

static json_t *sb_string(ds_sb *b) {
    json_t *v = ds_json_textn(b->s ? b->s : "", b->n);
    ds_sb_free(b);
    return v;
}

/* the translation of input items into chat messages */
typedef struct {
    json_t *messages;
    json_t *turn;          /* the assistant message the next function_call joins (borrowed), or NULL */
    ds_sb reasoning;       /* reasoning items' text waiting for the assistant message they belong to */
    json_t *image_params;  /* the Responses name of each image part, in order (errors name them) */
} conv;

static int has_image(const json_t *c) {
    size_t k;
    const json_t *p;
    if (json_is_array(c)) json_array_foreach(c, k, p) if (ds_json_str_is(field(p, "type"), "input_image")) return 1;
    return 0;
}

/* A user message's content with input_image parts: chat content parts, text and image_url
 * ({"type": "input_image", "image_url": URL, "detail"?}; a file_id needs stored files: 400). */
static json_t *user_parts(conv *cv, const json_t *c, const char *param, ds_oai_error *err) {
    json_t *parts = json_array();
    size_t k;
    const json_t *p;
    json_array_foreach(c, k, p) {
        char pp[96];
        snprintf(pp, sizeof pp, "%.60s[%d]", param, (int)(k % 100000));
        json_t *o = json_object();
        json_array_append_new(parts, o);
        if (ds_json_str_is(field(p, "type"), "input_image")) {
            const json_t *url = field(p, "image_url"), *detail = field(p, "detail");
            if (!url && field(p, "file_id")) {
                ds_oai_fail(err, pp, "'%s.file_id' is not supported: this server stores no files; send the image as "
                            "'image_url' (a data: URL)", pp);
                goto fail;
            }
            if (!json_is_string(url)) {
                ds_oai_fail(err, pp, "'%s.image_url' must be a string (a data:, file:// or http(s) URL)", pp);
                goto fail;
            }
            json_t *iu = json_object();
            json_object_set_new(iu, "url", json_copy((json_t *)url));
            if (detail) json_object_set_new(iu, "detail", json_copy((json_t *)detail));
            json_object_set_new(o, "type", json_string("image_url"));
            json_object_set_new(o, "image_url", iu);
            snprintf(pp, sizeof pp, "%.60s[%d].image_url", param, (int)(k % 100000));
            json_array_append_new(cv->image_params, json_string(pp));
            continue;
        }
        /* any other part: its text, through the checks text parts get */
        json_t *one = json_array();
        json_array_append((json_t *)one, (json_t *)p);
        ds_sb text = {0};
        int rc = content_text(one, pp, &text, err);
        json_decref(one);
        if (rc) {
            ds_sb_free(&text);
            /* content_text named the part [0] of a list of one: the part is pp itself */
            snprintf(err->param, sizeof err->param, "%.63s", pp);
            goto fail;
        }
        json_object_set_new(o, "type", json_string("text"));
        json_object_set_new(o, "text", sb_string(&text));
    }
    return parts;
fail:
    json_decref(parts);
    return NULL;
}

static json_t *assistant(conv *cv) {
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "content", json_string(""));
    if (cv->reasoning.n) json_object_set_new(m, "reasoning_content", sb_string(&cv->reasoning));
    ds_sb_free(&cv->reasoning);
    json_array_append_new(cv->messages, m);
    cv->turn = m;
    return m;
}

static int message_item(conv *cv, const json_t *it, const char *param, ds_oai_error *err) {
    char pp[96];
    const json_t *role = field(it, "role");
    snprintf(pp, sizeof pp, "%s.role", param);
    if (!json_is_string(role)) return ds_oai_fail(err, pp, "'%s' must be a string", pp);
    int is_user = ds_json_str_is(role, "user"), is_asst = ds_json_str_is(role, "assistant");
    int is_sys = ds_json_str_is(role, "system") || ds_json_str_is(role, "developer");
    if (!is_user && !is_asst && !is_sys)
        return ds_oai_fail(err, pp, "'%s' must be user, assistant, system or developer, got '%s'", pp, json_string_value(role));
    snprintf(pp, sizeof pp, "%s.content", param);
    const json_t *c = field(it, "content");
    if (!c) return ds_oai_fail(err, pp, "'%s' is required", pp);
    if (is_user && has_image(c)) {
        json_t *parts = user_parts(cv, c, pp, err);
        if (!parts) return -1;
        if (cv->reasoning.n) ds_sb_clear(&cv->reasoning);
        cv->turn = NULL;
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("user"));
        json_object_set_new(m, "content", parts);
        json_array_append_new(cv->messages, m);
        return 0;
    }
    ds_sb text = {0};
    if (content_text(c, pp, &text, err)) {
        ds_sb_free(&text);
        return -1;
    }
    if (is_asst) {
        json_t *m = assistant(cv);
        json_object_set_new(m, "content", sb_string(&text));
        return 0;
    }
    if (cv->reasoning.n) ds_sb_clear(&cv->reasoning);   /* reasoning no answer followed: the template has no place for it */
    cv->turn = NULL;
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(is_user ? "user" : "system"));
    json_object_set_new(m, "content", sb_string(&text));
    json_array_append_new(cv->messages, m);
    return 0;
}

static int function_call_item(conv *cv, const json_t *it, const char *param, ds_oai_error *err) {
    char pp[96];
    const json_t *id = field(it, "call_id"), *name = field(it, "name"), *args = field(it, "arguments");
    snprintf(pp, sizeof pp, "%s.call_id", param);
    if (!json_is_string(id)) return ds_oai_fail(err, pp, "'%s' must be a string", pp);
    snprintf(pp, sizeof pp, "%s.name", param);
    if (!json_is_string(name)) return ds_oai_fail(err, pp, "'%s' must be a string", pp);
    snprintf(pp, sizeof pp, "%s.arguments", param);
    if (!json_is_string(args)) return ds_oai_fail(err, pp, "'%s' must be a string (JSON text)", pp);
    char msg[256];
    json_t *parsed = ds_json_parse(json_string_value(args), json_string_length(args), msg, sizeof msg);
    if (!json_is_object(parsed)) {
        json_decref(parsed);
        return ds_oai_fail(err, pp, "'%s' must be the JSON text of an object", pp);
    }
    json_decref(parsed);
    json_t *m = cv->turn && !cv->reasoning.n ? cv->turn : assistant(cv);
    json_t *calls = json_object_get(m, "tool_calls");
    if (!calls) {
        calls = json_array();
        json_object_set_new(m, "tool_calls", calls);
    }
    json_t *call = json_object(), *f = json_object();
    json_object_set_new(call, "id", json_copy((json_t *)id));
    json_object_set_new(call, "type", json_string("function"));
    json_object_set_new(f, "name", json_copy((json_t *)name));
    json_object_set_new(f, "arguments", json_copy((json_t *)args));
    json_object_set_new(call, "function", f);
    json_array_append_new(calls, call);
    return 0;
}

static int function_output_item(conv *cv, const json_t *it, const char *param, ds_oai_error *err) {
    char pp[96];
    const json_t *id = field(it, "call_id"), *o = field(it, "output");
    snprintf(pp, sizeof pp, "%s.call_id", param);
    if (!json_is_string(id)) return ds_oai_fail(err, pp, "'%s' must be a string", pp);
    snprintf(pp, sizeof pp, "%s.output", param);
    if (!o) return ds_oai_fail(err, pp, "'%s' is required", pp);
    ds_sb text = {0};
    if (content_text(o, pp, &text, err)) {
        ds_sb_free(&text);
        return -1;
    }
    cv->turn = NULL;
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("tool"));
    json_object_set_new(m, "tool_call_id", json_copy((json_t *)id));
    json_object_set_new(m, "content", sb_string(&text));
    json_array_append_new(cv->messages, m);
    return 0;
}

/* a reasoning item's text (its content, else its summary) goes to the assistant message after it */
static int reasoning_item(conv *cv, const json_t *it, const char *param, ds_oai_error *err) {
    char pp[96];
    const json_t *c = field(it, "content"), *s = field(it, "summary");
    if (json_is_array(c) && !json_array_size(c) && s) c = NULL;   /* only a summary: better than nothing */
    snprintf(pp, sizeof pp, "%s.%s", param, c ? "content" : "summary");
    if (!c) c = s;
    if (!c) return 0;
    if (!json_is_array(c)) return ds_oai_fail(err, pp, "'%s' must be an array", pp);
    if (cv->reasoning.n && json_array_size(c)) ds_sb_puts(&cv->reasoning, "\n");
    return content_text(c, pp, &cv->reasoning, err);
}

static int parse_input(const json_t *body, conv *cv, ds_oai_error *err) {
    const json_t *in = field(body, "input");
    if (!in) return ds_oai_fail(err, "input", "'input' is required");
    size_t len;
    const char *s = ds_json_str(in, &len);
    if (s) {
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("user"));
        json_object_set_new(m, "content", json_copy((json_t *)in));
        json_array_append_new(cv->messages, m);
        return 0;
    }
    if (!json_is_array(in)) return ds_oai_fail(err, "input", "'input' must be a string or an array of items");
    if (json_array_size(in) == 0) return ds_oai_fail(err, "input", "'input' must not be empty");
    if (json_array_size(in) > DS_OAI_MAX_MESSAGES)
        return ds_oai_fail(err, "input", "'input' has %zu items; at most %d are allowed", json_array_size(in), DS_OAI_MAX_MESSAGES);
    size_t i;
    const json_t *it;
    json_array_foreach(in, i, it) {
        char param[64];
        snprintf(param, sizeof param, "input[%zu]", i);
        if (!json_is_object(it)) return ds_oai_fail(err, param, "'%s' must be an object", param);
        const json_t *t = field(it, "type");
        if (t && !json_is_string(t)) return ds_oai_fail(err, param, "'%s.type' must be a string", param);
        int rc;
        if (!t || ds_json_str_is(t, "message")) rc = message_item(cv, it, param, err);
        else if (ds_json_str_is(t, "function_call")) rc = function_call_item(cv, it, param, err);
        else if (ds_json_str_is(t, "function_call_output")) rc = function_output_item(cv, it, param, err);
        else if (ds_json_str_is(t, "reasoning")) rc = reasoning_item(cv, it, param, err);
        else if (ds_json_str_is(t, "item_reference"))
            rc = ds_oai_fail(err, param, "'%s' is an item_reference: this server stores no items; send the item itself", param);
        else
            rc = ds_oai_fail(err, param, "'%s' has type '%s', which is not supported (message, function_call, "
                      "function_call_output and reasoning are)", param, json_string_value(t));
        if (rc) return -1;
    }
    return 0;
}

/* Qwen's templates take one system message, first: instructions and the leading
 * system/developer messages become it; one later in the conversation (a client
 * changing its rules mid-way) becomes a user message, where the template can render it. */
static json_t *merge_system(json_t *messages, const json_t *instructions) {
    json_t *out = json_array();
    ds_sb sys = {0};
    int have_sys = 0, leading = 1;
    size_t len;
    const char *s = ds_json_str(instructions, &len);
    if (s) ds_sb_append(&sys, s, len), have_sys = 1;
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        int is_sys = ds_json_str_is(json_object_get(m, "role"), "system");
        if (is_sys && leading) {
            if (have_sys) ds_sb_puts(&sys, "\n\n");
            s = ds_json_str(json_object_get(m, "content"), &len);
            ds_sb_append(&sys, s, len);
            have_sys = 1;
            continue;
        }
        leading = 0;
        if (is_sys) json_object_set_new(m, "role", json_string("user"));
        json_array_append(out, m);
    }
    if (have_sys) {
        json_t *sm = json_object();
        json_object_set_new(sm, "role", json_string("system"));
        json_object_set_new(sm, "content", sb_string(&sys));
        json_array_insert_new(out, 0, sm);
    }
    ds_sb_free(&sys);
    return out;
}

/* function tools become chat tools; namespace tools (Codex's MCP groups) and the hosted
 * tools (web_search, file_search...) have nothing here to run them: ignored */
static int parse_tools(const json_t *body, json_t *chat, ds_oai_error *err) {
    const json_t *tools = field(body, "tools");
    if (!tools) return 0;
    if (!json_is_array(tools)) return ds_oai_fail(err, "tools", "'tools' must be an array");
    json_t *out = json_array();
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        char param[64];
        snprintf(param, sizeof param, "tools[%zu]", i);
        const json_t *type = field(t, "type");
        if (!json_is_object(t) || !json_is_string(type)) {
            json_decref(out);
            return ds_oai_fail(err, param, "'%s' must be an object with a 'type'", param);
        }
        if (!ds_json_str_is(type, "function")) continue;
        const json_t *name = field(t, "name"), *desc = field(t, "description"), *params = field(t, "parameters"),
                     *strict = field(t, "strict");
        if (!json_is_string(name) || (desc && !json_is_string(desc)) || (params && !json_is_object(params)) ||
            (strict && !json_is_boolean(strict))) {
            json_decref(out);
            return ds_oai_fail(err, param, "'%s' needs a 'name' string, and 'description' a string, 'parameters' an "
                        "object, 'strict' a boolean when given", param);
        }
        json_t *f = json_object(), *ct = json_object();
        json_object_set_new(f, "name", json_copy((json_t *)name));
        if (desc) json_object_set_new(f, "description", json_copy((json_t *)desc));
        json_object_set_new(f, "parameters", params ? json_deep_copy(params) : json_pack("{s:s}", "type", "object"));
        if (strict) json_object_set_new(f, "strict", json_copy((json_t *)strict));
        json_object_set_new(ct, "type", json_string("function"));
        json_object_set_new(ct, "function", f);
        json_array_append_new(out, ct);
    }
    if (!json_array_size(out)) {
        json_decref(out);
        return 0;
    }
    return set(chat, "tools", out, err);
}

static int parse_tool_choice(const json_t *body, json_t *chat, ds_oai_error *err) {
    const json_t *tc = field(body, "tool_choice");
    if (!tc) return 0;
    if (json_is_string(tc)) return set(chat, "tool_choice", json_copy((json_t *)tc), err);
    const json_t *type = field(tc, "type"), *name = field(tc, "name");
    if (!json_is_object(tc) || !ds_json_str_is(type, "function"))
        return ds_oai_fail(err, "tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", "
                    "\"name\": ...}");
    if (!json_is_string(name)) return ds_oai_fail(err, "tool_choice", "'tool_choice.name' must be a string");
    return set(chat, "tool_choice", json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name), err);
}

static int parse_reasoning(const json_t *body, json_t *chat, ds_oai_error *err) {
    const json_t *r = field(body, "reasoning");
    if (!r) return 0;
    if (!json_is_object(r)) return ds_oai_fail(err, "reasoning", "'reasoning' must be an object");
    const json_t *e = field(r, "effort"), *s = field(r, "summary");
    if (s && !json_is_string(s)) return ds_oai_fail(err, "reasoning.summary", "'reasoning.summary' must be a string");
    if (!e) return 0;
    if (ds_json_str_is(e, "none") || ds_json_str_is(e, "minimal"))
        return set(chat, "reasoning_effort", json_string("none"), err);
    static const char *const on[] = {"low", "medium", "high", "xhigh"};
    for (size_t i = 0; i < sizeof on / sizeof *on; i++)
        if (ds_json_str_is(e, on[i])) return set(chat, "reasoning_effort", json_string("medium"), err);
    return ds_oai_fail(err, "reasoning.effort", "'reasoning.effort' must be none, minimal, low, medium or high");
}

static int parse_text(const json_t *body, json_t *chat, ds_oai_error *err) {
    const json_t *t = field(body, "text");
    if (!t) return 0;
    if (!json_is_object(t)) return ds_oai_fail(err, "text", "'text' must be an object");
    const json_t *f = field(t, "format");
    if (!f) return 0;
    const json_t *type = field(f, "type");
    if (!json_is_object(f) || !json_is_string(type))
        return ds_oai_fail(err, "text.format", "'text.format' must be an object with a 'type'");
    if (ds_json_str_is(type, "text")) return 0;
    if (ds_json_str_is(type, "json_object"))
        return set(chat, "response_format", json_pack("{s:s}", "type", "json_object"), err);
    if (!ds_json_str_is(type, "json_schema"))
        return ds_oai_fail(err, "text.format.type", "'text.format.type' must be text, json_object or json_schema, got '%s'",
                    json_string_value(type));
    const json_t *name = field(f, "name"), *schema = field(f, "schema"), *strict = field(f, "strict");
    if (name && !json_is_string(name)) return ds_oai_fail(err, "text.format.name", "'text.format.name' must be a string");
    if (!json_is_object(schema))
        return ds_oai_fail(err, "text.format.schema", "'text.format.schema' is required: a JSON Schema (an object)");
    if (strict && !json_is_boolean(strict))
        return ds_oai_fail(err, "text.format.strict", "'text.format.strict' must be a boolean");
    json_t *js = json_object();
    json_object_set_new(js, "name", name ? json_copy((json_t *)name) : json_string("response"));
    json_object_set_new(js, "schema", json_deep_copy(schema));
    if (strict) json_object_set_new(js, "strict", json_copy((json_t *)strict));
    return set(chat, "response_format", json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js), err);
}

/* members copied as they are: the chat parser checks them */
static int copy_as(const json_t *body, const char *from, json_t *chat, const char *to, ds_oai_error *err) {
    const json_t *v = field(body, from);
    if (!v) return 0;
    return set(chat, to, json_deep_copy(v), err);
}

static json_t *build_chat(const json_t *body, json_t *image_params, ds_oai_error *err) {
    const json_t *v;
    if ((v = field(body, "previous_response_id")))
        return ds_oai_fail(err, "previous_response_id", "'previous_response_id' is not supported: this server keeps no "
                    "responses (it is stateless); send the whole conversation in 'input'"), NULL;
    if ((v = field(body, "conversation")))
        return ds_oai_fail(err, "conversation", "'conversation' is not supported: this server keeps no conversations; "
                    "send the whole conversation in 'input'"), NULL;
    if ((v = field(body, "background")) && !json_is_false(v))
        return ds_oai_fail(err, "background", "'background': true is not supported: this server keeps no responses"), NULL;
    if ((v = field(body, "store")) && !json_is_boolean(v)) return ds_oai_fail(err, "store", "'store' must be a boolean"), NULL;
    if ((v = field(body, "instructions")) && !json_is_string(v))
        return ds_oai_fail(err, "instructions", "'instructions' must be a string"), NULL;
    if ((v = field(body, "stream")) && !json_is_boolean(v)) return ds_oai_fail(err, "stream", "'stream' must be a boolean"), NULL;
    json_t *chat = json_object();
    conv cv = {.messages = json_array(), .image_params = image_params};
    int rc = parse_input(body, &cv, err);
    ds_sb_free(&cv.reasoning);
    if (!rc) {
        json_t *ms = merge_system(cv.messages, field(body, "instructions"));
        rc = set(chat, "messages", ms, err);
    }
    json_decref(cv.messages);
    if (rc || parse_tools(body, chat, err) || parse_tool_choice(body, chat, err) || parse_reasoning(body, chat, err) ||
        parse_text(body, chat, err) || copy_as(body, "model", chat, "model", err) ||
        copy_as(body, "max_output_tokens", chat, "max_tokens", err) ||
        copy_as(body, "temperature", chat, "temperature", err) || copy_as(body, "top_p", chat, "top_p", err) ||
        copy_as(body, "parallel_tool_calls", chat, "parallel_tool_calls", err) ||
        copy_as(body, "metadata", chat, "metadata", err) || copy_as(body, "stream", chat, "stream", err)) {
        json_decref(chat);
        return NULL;
    }
    return chat;
}

/* A chat field an error names (the chat parser's, or completion.c's context checks) as the
 * Responses field it came from, in param and in the message that quotes it. */
static void rename_field(char *param, size_t pcap, char *message, size_t mcap) {
    static const char *const map[][2] = {{"max_tokens", "max_output_tokens"}, {"response_format", "text.format"},
                                         {"reasoning_effort", "reasoning.effort"}, {"messages", "input"}};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        size_t n = strlen(map[i][0]);
        if (strncmp(param, map[i][0], n) || (param[n] && param[n] != '[' && param[n] != '.')) continue;
        /* a message index is not an input index: the field is named as a whole */
        snprintf(param, pcap, "%s", map[i][1]);
        const char *at = strstr(message, map[i][0]);
        if (at) {
            char m[1024];
            snprintf(m, sizeof m, "%.*s%s%s", (int)(at - message), message, map[i][1], at + n);
            snprintf(message, mcap, "%s", m);
        }
        return;
    }
}

int ds_responses_parse(const json_t *body, ds_oai_request *out, ds_oai_error *err) {
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    if (!json_is_object(body)) return ds_oai_fail(err, NULL, "the request body must be a JSON object");
    json_t *params = json_array();
    json_t *chat = build_chat(body, params, err);
    if (!chat) {
        json_decref(params);
        return -1;
    }
    int rc = ds_oai_request_parse_json(chat, DS_OAI_CHAT, out, err);
    json_decref(chat);
    if (rc) rename_field(err->param, sizeof err->param, err->message, sizeof err->message);
    /* the images' errors (fetched and decoded later) name the input part, not the chat one */
    for (int k = 0; !rc && k < out->n_images && k < (int)json_array_size(params); k++)
        snprintf(out->images[k].param, sizeof out->images[k].param, "%s", json_string_value(json_array_get(params, k)));
    json_decref(params);
    return rc;
}

/* --- response --- */

/* PREFIX and 32 random hex digits (the kernel's random source; a counter mix if it has none) */
static void make_id(char *buf, size_t cap) { ds_random_id("resp_", buf, cap); }

static json_t *echo(const json_t *req, const char *k, json_t *dflt) {
    const json_t *v = field(req, k);
    if (!v) return dflt ? dflt : json_null();
    json_decref(dflt);
    return json_deep_copy(v);
}

/* the response object with the request's settings echoed, as OpenAI's has them; output empty */
static json_t *response_object(const ds_answer_ctx *a, const char *status) {
    const json_t *q = a->request;
    json_t *r = json_object();
    json_object_set_new(r, "id", json_string(a->id));
    json_object_set_new(r, "object", json_string("response"));
    json_object_set_new(r, "created_at", json_integer(a->created));
    json_object_set_new(r, "status", json_string(status));
    json_object_set_new(r, "background", json_false());
    json_object_set_new(r, "error", json_null());
    json_object_set_new(r, "incomplete_details", json_null());
    json_object_set_new(r, "instructions", echo(q, "instructions", NULL));
    json_object_set_new(r, "max_output_tokens", echo(q, "max_output_tokens", NULL));
    json_object_set_new(r, "max_tool_calls", json_null());
    json_object_set_new(r, "model", ds_json_text(a->model));
    json_object_set_new(r, "output", json_array());
    json_object_set_new(r, "parallel_tool_calls", echo(q, "parallel_tool_calls", json_true()));
    json_object_set_new(r, "previous_response_id", json_null());
    json_object_set_new(r, "prompt_cache_key", echo(q, "prompt_cache_key", NULL));
    const json_t *rq = field(q, "reasoning");
    json_object_set_new(r, "reasoning", json_pack("{s:O,s:O}", "effort", field(rq, "effort") ? field(rq, "effort") : json_null(),
                                                  "summary", field(rq, "summary") ? field(rq, "summary") : json_null()));
    json_object_set_new(r, "service_tier", json_string("default"));
    json_object_set_new(r, "store", json_false());
    json_object_set_new(r, "temperature", echo(q, "temperature", json_real(1.0)));
    json_t *text = echo(q, "text", json_object());
    if (json_is_object(text) && !json_object_get(text, "format"))
        json_object_set_new(text, "format", json_pack("{s:s}", "type", "text"));
    json_object_set_new(r, "text", text);
    json_object_set_new(r, "tool_choice", echo(q, "tool_choice", json_string("auto")));
    json_object_set_new(r, "tools", echo(q, "tools", json_array()));
    json_object_set_new(r, "top_logprobs", echo(q, "top_logprobs", json_integer(0)));
    json_object_set_new(r, "top_p", echo(q, "top_p", json_real(1.0)));
    json_object_set_new(r, "truncation", echo(q, "truncation", json_string("disabled")));
    json_object_set_new(r, "usage", json_null());
    json_object_set_new(r, "user", echo(q, "user", NULL));
    json_object_set_new(r, "metadata", echo(q, "metadata", json_object()));
    return r;
}

static json_t *usage_json(const ds_oai_usage *u) {
    return json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", u->prompt_tokens, "input_tokens_details",
                     "cached_tokens", u->cached_tokens, "output_tokens", u->completion_tokens, "output_tokens_details",
                     "reasoning_tokens", u->reasoning_tokens, "total_tokens", u->prompt_tokens + u->completion_tokens);
}

static json_t *text_part(const char *type, json_t *text) {
    json_t *p = json_object();
    json_object_set_new(p, "type", json_string(type));
    json_object_set_new(p, "text", text);
    if (!strcmp(type, "output_text")) {
        json_object_set_new(p, "annotations", json_array());
        json_object_set_new(p, "logprobs", json_array());
    }
    return p;
}

/* an output item; text (taken over) NULL: its content is still empty (an added event) */
static json_t *reasoning_item_json(const char *id, json_t *text) {
    json_t *it = json_object(), *c = json_array();
    json_object_set_new(it, "id", json_string(id));
    json_object_set_new(it, "type", json_string("reasoning"));
    json_object_set_new(it, "summary", json_array());
    if (text) json_array_append_new(c, text_part("reasoning_text", text));
    json_object_set_new(it, "content", c);
    return it;
}

static json_t *message_item_json(const char *id, const char *status, json_t *text) {
    json_t *it = json_object(), *c = json_array();
    json_object_set_new(it, "id", json_string(id));
    json_object_set_new(it, "type", json_string("message"));
    json_object_set_new(it, "status", json_string(status));
    json_object_set_new(it, "role", json_string("assistant"));
    if (text) json_array_append_new(c, text_part("output_text", text));
    json_object_set_new(it, "content", c);
    return it;
}

static json_t *call_item_json(const char *id, const char *status, const json_t *call, int with_args) {
    char call_id[48];
    ds_oai_call_id(call_id, sizeof call_id);
    json_t *it = json_object();
    json_object_set_new(it, "id", json_string(id));
    json_object_set_new(it, "type", json_string("function_call"));
    json_object_set_new(it, "status", json_string(status));
    json_object_set_new(it, "call_id", json_string(call_id));
    json_object_set_new(it, "name", json_deep_copy(json_object_get(call, "name")));
    json_object_set_new(it, "arguments", with_args ? json_deep_copy(json_object_get(call, "arguments")) : json_string(""));
    return it;
}

/* status and incomplete_details of a finished response */
static void set_outcome(json_t *r, const ds_answer_end *end, const ds_oai_usage *u) {
    if (end->kind == DS_END_LENGTH) {
        json_object_set_new(r, "status", json_string("incomplete"));
        json_object_set_new(r, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    } else {
        json_object_set_new(r, "status", json_string("completed"));
    }
    json_object_set_new(r, "usage", usage_json(u));
}

static char *body(ds_answer_ctx *a, const ds_answer_result *res) {
    json_t *r = response_object(a, "completed");
    json_t *out = json_object_get(r, "output");
    const char *item_status = res->end.kind == DS_END_LENGTH ? "incomplete" : "completed";
    char id[64];
    if (res->n_reasoning) {
        ds_random_id("rs_", id, sizeof id);
        json_array_append_new(out, reasoning_item_json(id, ds_oai_textn(res->reasoning, res->n_reasoning)));
    }
    size_t n_calls = json_array_size(res->tool_calls);
    if (res->n_content || (!n_calls && !res->n_reasoning)) {   /* an empty answer is an empty message */
        ds_random_id("msg_", id, sizeof id);
        json_array_append_new(out, message_item_json(id, item_status, ds_oai_textn(res->content, res->n_content)));
    }
    for (size_t i = 0; i < n_calls; i++) {
        ds_random_id("fc_", id, sizeof id);
        json_array_append_new(out, call_item_json(id, "completed", json_array_get(res->tool_calls, i), 1));
    }
    set_outcome(r, &res->end, &res->usage);
    char *s = ds_json_dump(r);
    json_decref(r);
    return s;
}

/* --- stream --- */

typedef enum { OPEN_NONE = 0, OPEN_REASONING, OPEN_MESSAGE } open_kind;

typedef struct {
    long seq;            /* the next sequence_number */
    int n_items;         /* output items added so far (the next output_index) */
    json_t *done;        /* the finished output items, for the final response */
    open_kind open;      /* the item whose text is streaming */
    char open_id[64];
    ds_sb text;          /* its text so far */
} stream_state;

/* stream_begin writes exactly these two events, numbered 0 and 1, so that a part
 * written before it (completion.c puts stream_begin's output first) numbers right */
#define BEGIN_EVENTS 2

static int init(ds_answer_ctx *a) {
    stream_state *st = calloc(1, sizeof *st);
    if (!st) return -1;
    st->seq = BEGIN_EVENTS;
    st->done = json_array();
    a->state = st;
    return 0;
}

static void release(ds_answer_ctx *a) {
    stream_state *st = a->state;
    if (!st) return;
    json_decref(st->done);
    ds_sb_free(&st->text);
    free(st);
    a->state = NULL;
}

/* writes event type with its sequence_number (ev taken over) */
static void emit_seq(ds_sb *out, long seq, const char *type, json_t *ev) {
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "sequence_number", json_integer(seq));
    json_object_update(o, ev);
    json_decref(ev);
    ds_sse_event(out, type, o);
    json_decref(o);
}

static void emit(stream_state *st, ds_sb *out, const char *type, json_t *ev) { emit_seq(out, st->seq++, type, ev); }

static void stream_begin(ds_answer_ctx *a, ds_sb *out) {
    json_t *r = response_object(a, "in_progress");
    emit_seq(out, 0, "response.created", json_pack("{s:O}", "response", r));
    emit_seq(out, 1, "response.in_progress", json_pack("{s:O}", "response", r));
    json_decref(r);
}

/* content part events of the open item: added or done (with text) */
static json_t *part_event(stream_state *st, json_t *part) {
    return json_pack("{s:s,s:i,s:i,s:o}", "item_id", st->open_id, "output_index", st->n_items - 1, "content_index", 0,
                     "part", part);
}

static void close_open(stream_state *st, ds_sb *out, const char *status) {
    if (st->open == OPEN_NONE) return;
    int reasoning = st->open == OPEN_REASONING;
    json_t *text = ds_oai_textn(st->text.s ? st->text.s : "", st->text.n);
    emit(st, out, reasoning ? "response.reasoning_text.done" : "response.output_text.done",
         json_pack(reasoning ? "{s:s,s:i,s:i,s:O}" : "{s:s,s:i,s:i,s:O,s:[]}", "item_id", st->open_id, "output_index",
                   st->n_items - 1, "content_index", 0, "text", text, "logprobs"));
    emit(st, out, "response.content_part.done",
         part_event(st, text_part(reasoning ? "reasoning_text" : "output_text", json_incref(text))));
    json_t *item = reasoning ? reasoning_item_json(st->open_id, text) : message_item_json(st->open_id, status, text);
    emit(st, out, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", st->n_items - 1, "item", item));
    json_array_append_new(st->done, item);
    ds_sb_clear(&st->text);
    st->open = OPEN_NONE;
}

static void open_item(stream_state *st, ds_sb *out, open_kind kind) {
    int reasoning = kind == OPEN_REASONING;
    ds_random_id(reasoning ? "rs_" : "msg_", st->open_id, sizeof st->open_id);
    json_t *item = reasoning ? reasoning_item_json(st->open_id, NULL) : message_item_json(st->open_id, "in_progress", NULL);
    emit(st, out, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", st->n_items, "item", item));
    st->n_items++;
    st->open = kind;
    emit(st, out, "response.content_part.added",
         part_event(st, text_part(reasoning ? "reasoning_text" : "output_text", json_string(""))));
}

static void stream_part(ds_answer_ctx *a, ds_sb *out, ds_part_kind kind, const char *text, size_t n, const json_t *call) {
    stream_state *st = a->state;
    if (kind == DS_PART_TOOL_CALL) {
        close_open(st, out, "completed");
        char id[64];
        ds_random_id("fc_", id, sizeof id);
        int index = st->n_items++;
        json_t *item = call_item_json(id, "in_progress", call, 0);
        emit(st, out, "response.output_item.added", json_pack("{s:i,s:O}", "output_index", index, "item", item));
        const json_t *args = json_object_get(call, "arguments");
        emit(st, out, "response.function_call_arguments.delta",
             json_pack("{s:s,s:i,s:O}", "item_id", id, "output_index", index, "delta", args));
        emit(st, out, "response.function_call_arguments.done",
             json_pack("{s:s,s:i,s:O,s:O}", "item_id", id, "output_index", index, "name",
                       json_object_get(call, "name"), "arguments", args));
        json_object_set_new(item, "status", json_string("completed"));
        json_object_set(item, "arguments", (json_t *)args);
        emit(st, out, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", index, "item", item));
        json_array_append_new(st->done, item);
        return;
    }
    open_kind want = kind == DS_PART_REASONING ? OPEN_REASONING : OPEN_MESSAGE;
    if (st->open != want) {
        close_open(st, out, "completed");
        open_item(st, out, want);
    }
    ds_sb_append(&st->text, text, n);
    emit(st, out, want == OPEN_REASONING ? "response.reasoning_text.delta" : "response.output_text.delta",
         json_pack(want == OPEN_REASONING ? "{s:s,s:i,s:i,s:o}" : "{s:s,s:i,s:i,s:o,s:[]}", "item_id", st->open_id,
                   "output_index", st->n_items - 1, "content_index", 0, "delta", ds_oai_textn(text, n), "logprobs"));
}

static void stream_end(ds_answer_ctx *a, ds_sb *out, const ds_answer_end *end, const ds_oai_usage *u) {
    stream_state *st = a->state;
    if (!st->n_items) open_item(st, out, OPEN_MESSAGE);   /* an empty answer is an empty message, as in the body */
    close_open(st, out, end->kind == DS_END_LENGTH ? "incomplete" : "completed");
    json_t *r = response_object(a, "completed");
    json_object_set(r, "output", st->done);
    set_outcome(r, end, u);
    emit(st, out, end->kind == DS_END_LENGTH ? "response.incomplete" : "response.completed",
         json_pack("{s:o}", "response", r));
}

static void stream_fail(ds_answer_ctx *a, ds_sb *out, const char *message) {
    stream_state *st = a->state;
    close_open(st, out, "incomplete");
    json_t *r = response_object(a, "failed");
    json_object_set(r, "output", st->done);
    json_object_set_new(r, "error", json_pack("{s:s,s:o}", "code", "server_error", "message", ds_oai_text(message)));
    emit(st, out, "response.failed", json_pack("{s:o}", "response", r));
}

/* errors found after parsing (the context checks of completion.c) name chat fields too */
static char *error_body(int status, const char *type, const char *code, const char *param, const char *message) {
    (void)status;
    char p[64], m[1024];
    snprintf(p, sizeof p, "%s", param ? param : "");
    snprintf(m, sizeof m, "%s", message ? message : "");
    rename_field(p, sizeof p, m, sizeof m);
    return ds_oai_error_json(type, code, param ? p : NULL, m);
}

const ds_answer_format ds_responses_format = {.name = "responses",
                                              .make_id = make_id,
                                              .init = init,
                                              .release = release,
                                              .stream_begin = stream_begin,
                                              .stream_part = stream_part,
                                              .stream_end = stream_end,
                                              .stream_fail = stream_fail,
                                              .body = body,
                                              .error_body = error_body};
