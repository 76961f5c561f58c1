/* messages_api.c - see messages_api.h.
 *
 * A Messages request is rewritten as a chat completions body and parsed by
 * openai_request.c, so that both APIs run exactly the same checks, template
 * and engine path; this file checks the Messages fields itself first, so that
 * a 400 names the field the client sent. */
#include "server/messages_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_text.h"
#include "server/sse.h"

static const json_t *get(const json_t *o, const char *k) { return json_is_object(o) ? json_object_get(o, k) : NULL; }

/* --- the billing header --- */

/* Claude Code opens its system prompt with a text block
 *   x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=a5145;
 * whose values (cch= above all) change from one request to the next. It means nothing to the model and,
 * being the first text of the prompt, would keep the prefix cache from matching a single token of two
 * such requests: the header's "key=value;" fields are dropped (the text after them stays). */
static const char BILLING[] = "x-anthropic-billing-header:";

static size_t billing_header_len(const char *s, size_t n) {
    size_t p = sizeof BILLING - 1;
    if (n < p || memcmp(s, BILLING, p)) return 0;
    for (int fields = 0;; fields++) {   /* fields: spaces, a key of letters, digits and '_', '=', a value up to ';' */
        size_t q = p;
        while (q < n && (s[q] == ' ' || s[q] == '\t')) q++;
        size_t k = q;
        while (q < n && (s[q] == '_' || s[q] == '-' || (s[q] >= 'a' && s[q] <= 'z') || (s[q] >= 'A' && s[q] <= 'Z') ||
                         (s[q] >= '0' && s[q] <= '9')))
            q++;
        if (q == k || q >= n || s[q] != '=') {
            if (!fields) return 0;   /* not the header: no field */
            break;
        }
        while (q < n && s[q] != ';' && s[q] != '\n') q++;
        if (q >= n || s[q] != ';') {
            if (!fields) return 0;
            break;
        }
        p = q + 1;
    }
    while (p < n && (s[p] == ' ' || s[p] == '\t' || s[p] == '\n' || s[p] == '\r')) p++;
    return p;
}

/* --- text pieces --- */

/* Appends the text of content (a string, or an array of text blocks) to b; sep goes between
 * pieces that are not empty (b's own text counts). billing: drop a billing header (system text). */
static int append_text(ds_sb *b, const json_t *content, const char *sep, int billing, const char *param,
                       ds_oai_error *err) {
    const json_t *blocks = content, *one[1] = {content};
    size_t n = json_is_array(content) ? json_array_size(content) : 1;
    if (!json_is_string(content) && !json_is_array(content))
        return ds_oai_fail(err, param, "'%s' must be a string or an array of text blocks", param);
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_is_array(blocks) ? json_array_get(blocks, i) : one[0];
        if (json_is_array(blocks)) {
            const json_t *t = get(x, "type");
            if (!json_is_object(x) || !json_is_string(t))
                return ds_oai_fail(err, param, "each block of '%s' must be an object with a 'type'", param);
            if (ds_json_str_is(t, "image") || ds_json_str_is(t, "document"))
                return ds_oai_fail(err, param, "'%s' blocks (in '%s') are not supported here: images are taken in user "
                                   "messages only", json_string_value(t), param);
            if (!ds_json_str_is(t, "text"))
                return ds_oai_fail(err, param, "'%s' may hold only 'text' blocks, got '%s'", param, json_string_value(t));
            x = get(x, "text");
            if (!json_is_string(x)) return ds_oai_fail(err, param, "a text block of '%s' needs a 'text' string", param);
        }
        const char *s = json_string_value(x);
        size_t len = json_string_length(x);
        if (billing) {
            size_t h = billing_header_len(s, len);
            s += h;
            len -= h;
        }
        if (!len) continue;
        if (b->n && sep) ds_sb_puts(b, sep);
        ds_sb_append(b, s, len);
    }
    if (b->oom) return ds_oai_fail(err, param, "out of memory");
    return 0;
}

static json_t *sb_string(const ds_sb *b) { return json_stringn(b->s ? b->s : "", b->n); }

static json_t *chat_message(const char *role, json_t *content) {
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(role));
    json_object_set_new(m, "content", content);
    return m;
}

/* --- messages --- */

/* An image block as a chat image_url part: source {"type": "base64", "media_type", "data"} becomes a
 * data: URL, {"type": "url", "url"} stays a URL; files need stored files (400). param names the
 * block; its name for later errors (fetch, decode) goes to params. */
static json_t *image_part(const json_t *b, const char *param, json_t *params, ds_oai_error *err) {
    const json_t *src = get(b, "source"), *st = get(src, "type");
    char pp[112];
    snprintf(pp, sizeof pp, "%s.source", param);
    json_t *url = NULL;
    if (!json_is_object(src) || !json_is_string(st)) {
        ds_oai_fail(err, param, "the image block '%s' needs a 'source' object with a 'type'", param);
        return NULL;
    }
    if (ds_json_str_is(st, "base64")) {
        const json_t *mt = get(src, "media_type"), *data = get(src, "data");
        if (!json_is_string(mt) || !json_is_string(data)) {
            ds_oai_fail(err, param, "'%s' of type base64 needs 'media_type' and 'data' strings", pp);
            return NULL;
        }
        ds_sb u = {0};
        ds_sb_puts(&u, "data:");
        ds_sb_append(&u, json_string_value(mt), json_string_length(mt));
        ds_sb_puts(&u, ";base64,");
        ds_sb_append(&u, json_string_value(data), json_string_length(data));
        url = u.oom ? NULL : json_stringn(u.s, u.n);
        ds_sb_free(&u);
    } else if (ds_json_str_is(st, "url")) {
        const json_t *x = get(src, "url");
        if (!json_is_string(x)) {
            ds_oai_fail(err, param, "'%s' of type url needs a 'url' string", pp);
            return NULL;
        }
        url = json_copy((json_t *)x);
    } else {
        ds_oai_fail(err, param, "'%s' of type '%s' is not supported (base64 and url are: this server stores no files)",
                    pp, json_string_value(st));
        return NULL;
    }
    if (!url) {
        ds_oai_fail(err, param, "out of memory");
        return NULL;
    }
    json_t *part = json_object(), *iu = json_object();
    json_object_set_new(iu, "url", url);
    json_object_set_new(part, "type", json_string("image_url"));
    json_object_set_new(part, "image_url", iu);
    json_array_append_new(params, json_string(pp));
    return part;
}

/* a user turn's text so far as a chat message: a string, or (with images) content parts */
static json_t *user_message(ds_sb *text, json_t **parts) {
    if (!*parts) return chat_message("user", sb_string(text));
    if (text->n) {
        json_t *t = json_object();
        json_object_set_new(t, "type", json_string("text"));
        json_object_set_new(t, "text", sb_string(text));
        json_array_append_new(*parts, t);
    }
    json_t *m = chat_message("user", *parts);
    *parts = NULL;
    return m;
}

/* a user turn's blocks: text and images (joined into user messages) and tool_result (tool messages), in order */
static int user_blocks(const json_t *content, size_t i, json_t *out, json_t *params, ds_oai_error *err) {
    char param[96];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    if (json_is_string(content)) {
        json_array_append_new(out, chat_message("user", json_copy((json_t *)content)));
        return 0;
    }
    if (!json_is_array(content)) return ds_oai_fail(err, param, "'%s' must be a string or an array of content blocks", param);
    ds_sb text = {0};
    json_t *parts = NULL;   /* the turn's parts once it holds an image */
    int have_text = 0, rc = 0;
    size_t k;
    const json_t *b;
    json_array_foreach(content, k, b) {
        snprintf(param, sizeof param, "messages[%zu].content[%zu]", i, k);
        const json_t *t = get(b, "type");
        if (!json_is_object(b) || !json_is_string(t)) {
            rc = ds_oai_fail(err, param, "'%s' must be an object with a 'type'", param);
            break;
        }
        if (ds_json_str_is(t, "text")) {
            const json_t *x = get(b, "text");
            if (!json_is_string(x)) {
                rc = ds_oai_fail(err, param, "the text block '%s' needs a 'text' string", param);
                break;
            }
            ds_sb_append(&text, json_string_value(x), json_string_length(x));
            have_text = 1;
        } else if (ds_json_str_is(t, "tool_result")) {
            const json_t *id = get(b, "tool_use_id"), *c = get(b, "content"), *e = get(b, "is_error");
            if (!json_is_string(id)) {
                rc = ds_oai_fail(err, param, "the tool_result '%s' needs a 'tool_use_id' string", param);
                break;
            }
            if (e && !json_is_boolean(e)) {
                rc = ds_oai_fail(err, param, "'is_error' of '%s' must be a boolean", param);
                break;
            }
            if (have_text) {   /* text before the result stays before it */
                json_array_append_new(out, user_message(&text, &parts));
                ds_sb_clear(&text);
                have_text = 0;
            }
            ds_sb r = {0};
            /* the chat templates have no error flag: the model reads it in the result */
            if (json_is_true(e)) ds_sb_puts(&r, "Error: ");
            char cparam[112];
            snprintf(cparam, sizeof cparam, "%s.content", param);
            if (c && !json_is_null(c) && append_text(&r, c, NULL, 0, cparam, err)) {
                ds_sb_free(&r);
                rc = -1;
                break;
            }
            json_t *m = chat_message("tool", sb_string(&r));
            ds_sb_free(&r);
            json_object_set_new(m, "tool_call_id", json_copy((json_t *)id));
            json_array_append_new(out, m);
        } else if (ds_json_str_is(t, "image")) {
            json_t *part = image_part(b, param, params, err);
            if (!part) {
                rc = -1;
                break;
            }
            if (!parts) parts = json_array();
            if (text.n) {   /* the text before the image stays before it */
                json_t *tp = json_object();
                json_object_set_new(tp, "type", json_string("text"));
                json_object_set_new(tp, "text", sb_string(&text));
                json_array_append_new(parts, tp);
                ds_sb_clear(&text);
            }
            json_array_append_new(parts, part);
            have_text = 1;
        } else if (ds_json_str_is(t, "document")) {
            rc = ds_oai_fail(err, param, "'document' blocks ('%s') are not supported: this server reads text and images",
                             param);
            break;
        } else {
            rc = ds_oai_fail(err, param, "a user message cannot hold a '%s' block ('%s')", json_string_value(t), param);
            break;
        }
    }
    if (!rc && (have_text || !json_array_size(content))) json_array_append_new(out, user_message(&text, &parts));
    json_decref(parts);
    ds_sb_free(&text);
    return rc;
}

/* an assistant turn's blocks: text → content, thinking → reasoning_content, tool_use → tool_calls */
static int assistant_blocks(const json_t *content, size_t i, json_t *out, ds_oai_error *err) {
    char param[96];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    if (json_is_string(content)) {
        json_array_append_new(out, chat_message("assistant", json_copy((json_t *)content)));
        return 0;
    }
    if (!json_is_array(content)) return ds_oai_fail(err, param, "'%s' must be a string or an array of content blocks", param);
    ds_sb text = {0}, thinking = {0};
    json_t *calls = json_array();
    int rc = 0, have_thinking = 0;
    size_t k;
    const json_t *b;
    json_array_foreach(content, k, b) {
        snprintf(param, sizeof param, "messages[%zu].content[%zu]", i, k);
        const json_t *t = get(b, "type");
        if (!json_is_object(b) || !json_is_string(t)) {
            rc = ds_oai_fail(err, param, "'%s' must be an object with a 'type'", param);
            break;
        }
        if (ds_json_str_is(t, "text") || ds_json_str_is(t, "thinking")) {
            int th = ds_json_str_is(t, "thinking");
            const json_t *x = get(b, th ? "thinking" : "text");
            if (!json_is_string(x)) {
                rc = ds_oai_fail(err, param, "the %s block '%s' needs a '%s' string", th ? "thinking" : "text", param,
                          th ? "thinking" : "text");
                break;
            }
            ds_sb_append(th ? &thinking : &text, json_string_value(x), json_string_length(x));
            have_thinking |= th;
        } else if (ds_json_str_is(t, "redacted_thinking")) {
            /* encrypted reasoning of another model: nothing this one can read */
        } else if (ds_json_str_is(t, "tool_use")) {
            const json_t *id = get(b, "id"), *name = get(b, "name"), *input = get(b, "input");
            if (!json_is_string(id) || !json_is_string(name)) {
                rc = ds_oai_fail(err, param, "the tool_use block '%s' needs 'id' and 'name' strings", param);
                break;
            }
            if (!json_is_object(input)) {
                rc = ds_oai_fail(err, param, "'input' of the tool_use block '%s' must be an object", param);
                break;
            }
            json_t *call = json_object(), *f = json_object();
            json_object_set_new(call, "id", json_copy((json_t *)id));
            json_object_set_new(call, "type", json_string("function"));
            json_object_set_new(call, "function", f);
            json_object_set_new(f, "name", json_copy((json_t *)name));
            json_object_set_new(f, "arguments", json_deep_copy(input));
            json_array_append_new(calls, call);
        } else if (ds_json_str_is(t, "image") || ds_json_str_is(t, "document")) {
            rc = ds_oai_fail(err, param, "'%s' blocks ('%s') are not supported here: images are taken in user messages "
                             "only", json_string_value(t), param);
            break;
        } else {
            rc = ds_oai_fail(err, param, "an assistant message cannot hold a '%s' block ('%s')", json_string_value(t), param);
            break;
        }
    }
    if (!rc) {
        json_t *m = chat_message("assistant", sb_string(&text));
        if (have_thinking) json_object_set_new(m, "reasoning_content", sb_string(&thinking));
        if (json_array_size(calls)) json_object_set(m, "tool_calls", calls);
        json_array_append_new(out, m);
    }
    json_decref(calls);
    ds_sb_free(&text);
    ds_sb_free(&thinking);
    return rc;
}

/* The chat messages: one system message first holding `system` and the role-system messages that
 * open `messages`, then the turns. Qwen templates accept system text only at the very beginning; a
 * system message later in the conversation (Claude Code sends them) stays where it is, as a user
 * turn: moving it up would reorder the conversation, and change the start of the prompt, which the
 * prefix cache keys on, whenever a turn adds one. */
static int translate_messages(const json_t *body, json_t *chat, json_t *params, ds_oai_error *err) {
    const json_t *sys = get(body, "system"), *ms = get(body, "messages");
    if (!ms) return ds_oai_fail(err, "messages", "'messages' is required");
    if (!json_is_array(ms)) return ds_oai_fail(err, "messages", "'messages' must be an array");
    if (!json_array_size(ms)) return ds_oai_fail(err, "messages", "'messages' must not be empty");
    if (json_array_size(ms) > DS_OAI_MAX_MESSAGES)
        return ds_oai_fail(err, "messages", "'messages' has %zu messages; at most %d are allowed", json_array_size(ms),
                    DS_OAI_MAX_MESSAGES);
    ds_sb st = {0};
    json_t *turns = json_array();
    int rc = 0;
    if (sys && !json_is_null(sys)) rc = append_text(&st, sys, "\n\n", 1, "system", err);
    size_t i;
    const json_t *m;
    json_array_foreach(ms, i, m) {
        if (rc) break;
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        const json_t *role = get(m, "role"), *c = get(m, "content");
        if (!json_is_object(m)) {
            rc = ds_oai_fail(err, param, "'%s' must be an object", param);
            break;
        }
        snprintf(param, sizeof param, "messages[%zu].content", i);
        if (!c) {
            rc = ds_oai_fail(err, param, "'%s' is required", param);
            break;
        }
        if (ds_json_str_is(role, "user")) {
            rc = user_blocks(c, i, turns, params, err);
        } else if (ds_json_str_is(role, "assistant")) {
            rc = assistant_blocks(c, i, turns, err);
        } else if (ds_json_str_is(role, "system") && !json_array_size(turns)) {
            rc = append_text(&st, c, "\n\n", 1, param, err);
        } else if (ds_json_str_is(role, "system")) {
            ds_sb t = {0};
            if (!(rc = append_text(&t, c, "\n\n", 1, param, err)))
                json_array_append_new(turns, chat_message("user", sb_string(&t)));
            ds_sb_free(&t);
        } else {
            snprintf(param, sizeof param, "messages[%zu].role", i);
            rc = ds_oai_fail(err, param, "'%s' must be user or assistant%s%s%s", param, json_is_string(role) ? ", got '" : "",
                      json_is_string(role) ? json_string_value(role) : "", json_is_string(role) ? "'" : "");
        }
    }
    if (!rc && !json_array_size(turns)) rc = ds_oai_fail(err, "messages", "'messages' holds no user or assistant message");
    if (!rc) {
        json_t *all = json_array();
        if (st.n) json_array_append_new(all, chat_message("system", sb_string(&st)));
        json_array_extend(all, turns);
        json_object_set_new(chat, "messages", all);
    }
    json_decref(turns);
    ds_sb_free(&st);
    return rc;
}

/* --- tools --- */

static int translate_tools(const json_t *body, json_t *chat, ds_oai_error *err) {
    const json_t *tools = get(body, "tools"), *tc = get(body, "tool_choice");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return ds_oai_fail(err, "tools", "'tools' must be an array");
        json_t *out = json_array();
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t) {
            char param[64];
            snprintf(param, sizeof param, "tools[%zu]", i);
            const json_t *type = get(t, "type"), *name = get(t, "name"), *schema = get(t, "input_schema"),
                         *desc = get(t, "description");
            if (!json_is_object(t)) {
                json_decref(out);
                return ds_oai_fail(err, param, "'%s' must be an object", param);
            }
            /* Anthropic's own server tools (web_search_*, bash_*, text_editor_*, ...) run on its side: skipped */
            if (type && !json_is_null(type) && !ds_json_str_is(type, "custom")) {
                if (json_is_string(type)) continue;
                json_decref(out);
                return ds_oai_fail(err, param, "'type' of '%s' must be a string", param);
            }
            if (!json_is_string(name) || !json_string_length(name)) {
                json_decref(out);
                return ds_oai_fail(err, param, "'%s' needs a 'name' string", param);
            }
            if (!json_is_object(schema)) {
                json_decref(out);
                snprintf(param, sizeof param, "tools[%zu].input_schema", i);
                return ds_oai_fail(err, param, "'%s' must be an object (a JSON Schema)", param);
            }
            if (desc && !json_is_string(desc)) {
                json_decref(out);
                snprintf(param, sizeof param, "tools[%zu].description", i);
                return ds_oai_fail(err, param, "'%s' must be a string", param);
            }
            json_t *f = json_object(), *ct = json_object();
            json_object_set_new(ct, "type", json_string("function"));
            json_object_set_new(ct, "function", f);
            json_object_set_new(f, "name", json_copy((json_t *)name));
            if (desc) json_object_set_new(f, "description", json_copy((json_t *)desc));
            json_object_set_new(f, "parameters", json_deep_copy(schema));
            json_array_append_new(out, ct);
        }
        if (json_array_size(out)) json_object_set_new(chat, "tools", out);
        else json_decref(out);
    }
    if (tc && !json_is_null(tc)) {
        const json_t *type = get(tc, "type"), *name = get(tc, "name"), *dp = get(tc, "disable_parallel_tool_use");
        if (!json_is_object(tc) || !json_is_string(type))
            return ds_oai_fail(err, "tool_choice", "'tool_choice' must be an object with a 'type'");
        if (dp && !json_is_boolean(dp))
            return ds_oai_fail(err, "tool_choice.disable_parallel_tool_use",
                        "'tool_choice.disable_parallel_tool_use' must be a boolean");
        if (json_is_true(dp)) json_object_set_new(chat, "parallel_tool_calls", json_false());
        int has_tools = json_object_get(chat, "tools") != NULL;
        if (ds_json_str_is(type, "auto")) {
            if (has_tools) json_object_set_new(chat, "tool_choice", json_string("auto"));
        } else if (ds_json_str_is(type, "none")) {
            if (has_tools) json_object_set_new(chat, "tool_choice", json_string("none"));
        } else if (ds_json_str_is(type, "any") || ds_json_str_is(type, "tool")) {
            if (!has_tools) return ds_oai_fail(err, "tool_choice", "'tool_choice' of type '%s' needs 'tools'", json_string_value(type));
            if (ds_json_str_is(type, "any")) {
                json_object_set_new(chat, "tool_choice", json_string("required"));
            } else {
                if (!json_is_string(name))
                    return ds_oai_fail(err, "tool_choice.name", "'tool_choice' of type 'tool' needs a 'name' string");
                json_t *o = json_object(), *f = json_object();
                json_object_set_new(o, "type", json_string("function"));
                json_object_set_new(o, "function", f);
                json_object_set_new(f, "name", json_copy((json_t *)name));
                json_object_set_new(chat, "tool_choice", o);
            }
        } else {
            return ds_oai_fail(err, "tool_choice.type", "'tool_choice.type' must be auto, any, tool or none, got '%s'",
                        json_string_value(type));
        }
    }
    return 0;
}

/* --- the rest --- */

/* thinking: {type: enabled (budget_tokens) | adaptive} turns the model's thinking on, disabled off;
 * no field leaves the chat template's default. The budget is not enforced. */
static int translate_thinking(const json_t *body, json_t *chat, ds_oai_error *err) {
    const json_t *th = get(body, "thinking");
    if (!th || json_is_null(th)) return 0;
    const json_t *type = get(th, "type"), *budget = get(th, "budget_tokens");
    if (!json_is_object(th) || !json_is_string(type)) return ds_oai_fail(err, "thinking", "'thinking' must be an object with a 'type'");
    if (budget && !json_is_null(budget) && (!json_is_integer(budget) || json_integer_value(budget) < 1))
        return ds_oai_fail(err, "thinking.budget_tokens", "'thinking.budget_tokens' must be a positive integer");
    if (ds_json_str_is(type, "enabled") || ds_json_str_is(type, "adaptive"))
        json_object_set_new(chat, "reasoning_effort", json_string("medium"));
    else if (ds_json_str_is(type, "disabled"))
        json_object_set_new(chat, "reasoning_effort", json_string("none"));
    else
        return ds_oai_fail(err, "thinking.type", "'thinking.type' must be enabled, disabled or adaptive, got '%s'",
                    json_string_value(type));
    return 0;
}

static int translate_sampling(const json_t *body, int for_count, json_t *chat, ds_oai_error *err) {
    const json_t *v;
    if ((v = get(body, "model"))) {
        if (!json_is_string(v)) return ds_oai_fail(err, "model", "'model' must be a string");
        json_object_set(chat, "model", (json_t *)v);
    }
    v = get(body, "max_tokens");
    if (!v && !for_count) return ds_oai_fail(err, "max_tokens", "'max_tokens' is required");
    if (v && !for_count) {
        if (!json_is_integer(v) || json_integer_value(v) < 1)
            return ds_oai_fail(err, "max_tokens", "'max_tokens' must be a positive integer");
        json_object_set(chat, "max_tokens", (json_t *)v);
    }
    if ((v = get(body, "temperature")) && !json_is_null(v)) {
        if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1)
            return ds_oai_fail(err, "temperature", "'temperature' must be a number from 0 to 1");
        json_object_set(chat, "temperature", (json_t *)v);
    }
    if ((v = get(body, "top_p")) && !json_is_null(v)) {
        if (!json_is_number(v) || json_number_value(v) <= 0 || json_number_value(v) > 1)
            return ds_oai_fail(err, "top_p", "'top_p' must be a number above 0 and at most 1");
        json_object_set(chat, "top_p", (json_t *)v);
    }
    if ((v = get(body, "top_k")) && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return ds_oai_fail(err, "top_k", "'top_k' must be a non-negative integer");
        json_object_set(chat, "top_k", (json_t *)v);
    }
    if ((v = get(body, "stop_sequences")) && !json_is_null(v)) {
        if (!json_is_array(v)) return ds_oai_fail(err, "stop_sequences", "'stop_sequences' must be an array of strings");
        if (json_array_size(v) > DS_OAI_MAX_STOP)
            return ds_oai_fail(err, "stop_sequences", "'stop_sequences' has %zu strings; at most %d are allowed", json_array_size(v),
                        DS_OAI_MAX_STOP);
        size_t i;
        const json_t *s;
        json_array_foreach(v, i, s)
            if (!json_is_string(s) || !json_string_length(s))
                return ds_oai_fail(err, "stop_sequences", "'stop_sequences' must hold strings that are not empty");
        if (json_array_size(v)) json_object_set(chat, "stop", (json_t *)v);
    }
    if ((v = get(body, "stream")) && !json_is_null(v)) {
        if (!json_is_boolean(v)) return ds_oai_fail(err, "stream", "'stream' must be a boolean");
        if (!for_count) json_object_set(chat, "stream", (json_t *)v);
    }
    /* metadata, context_management, output_config (effort), service_tier, container: accepted,
     * nothing here acts on them */
    return 0;
}

int ds_messages_parse(const json_t *body, int for_count, ds_oai_request *out, ds_oai_error *err) {
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    if (!json_is_object(body)) return ds_oai_fail(err, "", "the request body must be a JSON object");
    json_t *chat = json_object(), *params = json_array();
    int rc = -1;
    if (!get(body, "model")) {
        ds_oai_fail(err, "model", "'model' is required");
        goto out;
    }
    if (translate_sampling(body, for_count, chat, err) || translate_messages(body, chat, params, err) ||
        translate_tools(body, chat, err) || translate_thinking(body, chat, err))
        goto out;
    if (ds_oai_request_parse_json(chat, DS_OAI_CHAT, out, err)) goto out;
    out->clamp_max_tokens = 1;
    /* the images' errors (fetched and decoded later) name the Messages block, not the chat part */
    for (int k = 0; k < out->n_images && k < (int)json_array_size(params); k++)
        snprintf(out->images[k].param, sizeof out->images[k].param, "%s", json_string_value(json_array_get(params, k)));
    rc = 0;
out:
    json_decref(params);
    json_decref(chat);
    return rc;
}

/* --- the answer --- */

static void make_id(char *buf, size_t cap) { ds_random_id("msg_", buf, cap); }

static const char *stop_reason(ds_end_kind k) {
    switch (k) {
    case DS_END_STOP_STRING: return "stop_sequence";
    case DS_END_LENGTH: return "max_tokens";
    case DS_END_TOOL_CALLS: return "tool_use";
    default: return "end_turn";
    }
}

static json_t *stop_sequence(const ds_answer_end *e) {
    return e->kind == DS_END_STOP_STRING && e->stop_string ? ds_oai_textn(e->stop_string, e->stop_len) : json_null();
}

/* Anthropic counts input_tokens without the cached part: the three add up to the prompt */
static json_t *usage_json(int prompt, int cached, int output) {
    json_t *u = json_object();
    json_object_set_new(u, "input_tokens", json_integer(prompt - cached));
    json_object_set_new(u, "cache_creation_input_tokens", json_integer(0));
    json_object_set_new(u, "cache_read_input_tokens", json_integer(cached));
    json_object_set_new(u, "output_tokens", json_integer(output));
    return u;
}

/* the input of a tool_use block: the call's arguments (JSON text of an object) */
static json_t *call_input(const json_t *call) {
    size_t n;
    const char *s = ds_json_str(json_object_get(call, "arguments"), &n);
    char msg[64];
    json_t *v = s ? ds_json_parse(s, n, msg, sizeof msg) : NULL;
    if (json_is_object(v)) return v;
    json_decref(v);
    return json_object();   /* the tool grammar and parser give objects only: not reached */
}

static json_t *tool_use_block(const json_t *call, json_t *input) {
    char id[64];
    ds_random_id("toolu_", id, sizeof id);
    json_t *b = json_object();
    json_object_set_new(b, "type", json_string("tool_use"));
    json_object_set_new(b, "id", json_string(id));
    json_object_set_new(b, "name", json_deep_copy(json_object_get(call, "name")));
    json_object_set_new(b, "input", input);
    return b;
}

static json_t *message_shell(const ds_answer_ctx *a, json_t *content) {
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(a->id));
    json_object_set_new(m, "type", json_string("message"));
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "model", ds_oai_text(a->model));
    json_object_set_new(m, "content", content);
    return m;
}

static char *body(ds_answer_ctx *a, const ds_answer_result *r) {
    json_t *content = json_array();
    if (r->n_reasoning) {
        json_t *b = json_object();
        json_object_set_new(b, "type", json_string("thinking"));
        json_object_set_new(b, "thinking", ds_oai_textn(r->reasoning, r->n_reasoning));
        json_object_set_new(b, "signature", json_string(""));
        json_array_append_new(content, b);
    }
    size_t n_calls = r->tool_calls ? json_array_size(r->tool_calls) : 0;
    if (r->n_content || (!r->n_reasoning && !n_calls)) {
        json_t *b = json_object();
        json_object_set_new(b, "type", json_string("text"));
        json_object_set_new(b, "text", ds_oai_textn(r->content, r->n_content));
        json_array_append_new(content, b);
    }
    for (size_t i = 0; i < n_calls; i++) {
        const json_t *call = json_array_get(r->tool_calls, i);
        json_array_append_new(content, tool_use_block(call, call_input(call)));
    }
    json_t *m = message_shell(a, content);
    json_object_set_new(m, "stop_reason", json_string(stop_reason(r->end.kind)));
    json_object_set_new(m, "stop_sequence", stop_sequence(&r->end));
    json_object_set_new(m, "usage", usage_json(r->usage.prompt_tokens, r->usage.cached_tokens, r->usage.completion_tokens));
    char *s = ds_json_dump(m);
    json_decref(m);
    return s;
}

/* --- the stream --- */

typedef enum { OPEN_NONE = 0, OPEN_THINKING, OPEN_TEXT } open_block;

typedef struct {
    open_block open;
    int index;      /* the next block's index */
} stream_state;

static int init(ds_answer_ctx *a) {
    a->state = calloc(1, sizeof(stream_state));
    return a->state ? 0 : -1;
}

static void release(ds_answer_ctx *a) {
    free(a->state);
    a->state = NULL;
}

/* "event: NAME" with data {"type": NAME, ...o} (o taken over) */
static void event(ds_sb *out, const char *name, json_t *o) {
    json_t *t = json_object();
    json_object_set_new(t, "type", json_string(name));
    json_object_update(t, o);
    json_decref(o);
    ds_sse_event(out, name, t);
    json_decref(t);
}

static void block_start(stream_state *st, ds_sb *out, json_t *block) {
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(st->index));
    json_object_set_new(o, "content_block", block);
    event(out, "content_block_start", o);
}

static void block_delta(stream_state *st, ds_sb *out, const char *type, const char *key, json_t *value) {
    json_t *o = json_object(), *d = json_object();
    json_object_set_new(o, "index", json_integer(st->index));
    json_object_set_new(o, "delta", d);
    json_object_set_new(d, "type", json_string(type));
    json_object_set_new(d, key, value);
    event(out, "content_block_delta", o);
}

static void block_stop(stream_state *st, ds_sb *out) {
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(st->index));
    event(out, "content_block_stop", o);
    st->index++;
    st->open = OPEN_NONE;
}

/* a thinking block ends with its signature (empty: nothing signs this server's reasoning) */
static void close_open(stream_state *st, ds_sb *out) {
    if (st->open == OPEN_NONE) return;
    if (st->open == OPEN_THINKING) block_delta(st, out, "signature_delta", "signature", json_string(""));
    block_stop(st, out);
}

static void open_block_of(stream_state *st, ds_sb *out, open_block kind) {
    if (st->open == kind) return;
    close_open(st, out);
    json_t *b = json_object();
    if (kind == OPEN_THINKING) {
        json_object_set_new(b, "type", json_string("thinking"));
        json_object_set_new(b, "thinking", json_string(""));
        json_object_set_new(b, "signature", json_string(""));
    } else {
        json_object_set_new(b, "type", json_string("text"));
        json_object_set_new(b, "text", json_string(""));
    }
    block_start(st, out, b);
    st->open = kind;
}

static void stream_begin(ds_answer_ctx *a, ds_sb *out) {
    json_t *m = message_shell(a, json_array());
    json_object_set_new(m, "stop_reason", json_null());
    json_object_set_new(m, "stop_sequence", json_null());
    json_object_set_new(m, "usage", usage_json(a->prompt_tokens, a->cached_tokens, 0));
    json_t *o = json_object();
    json_object_set_new(o, "message", m);
    event(out, "message_start", o);
    event(out, "ping", json_object());
}

static void stream_part(ds_answer_ctx *a, ds_sb *out, ds_part_kind kind, const char *text, size_t n, const json_t *call) {
    stream_state *st = a->state;
    if (kind == DS_PART_TOOL_CALL) {
        close_open(st, out);
        json_t *input = call_input(call);
        char *args = ds_json_dump(input);
        json_decref(input);
        block_start(st, out, tool_use_block(call, json_object()));
        block_delta(st, out, "input_json_delta", "partial_json", json_string(args ? args : "{}"));
        free(args);
        block_stop(st, out);
        return;
    }
    int thinking = kind == DS_PART_REASONING;
    open_block_of(st, out, thinking ? OPEN_THINKING : OPEN_TEXT);
    block_delta(st, out, thinking ? "thinking_delta" : "text_delta", thinking ? "thinking" : "text", ds_oai_textn(text, n));
}

static void stream_end(ds_answer_ctx *a, ds_sb *out, const ds_answer_end *end, const ds_oai_usage *u) {
    stream_state *st = a->state;
    if (st->index == 0 && st->open == OPEN_NONE) open_block_of(st, out, OPEN_TEXT);   /* as the body: one text block */
    close_open(st, out);
    json_t *o = json_object(), *d = json_object();
    json_object_set_new(o, "delta", d);
    json_object_set_new(d, "stop_reason", json_string(stop_reason(end->kind)));
    json_object_set_new(d, "stop_sequence", stop_sequence(end));
    json_object_set_new(o, "usage", usage_json(u->prompt_tokens, u->cached_tokens, u->completion_tokens));
    event(out, "message_delta", o);
    event(out, "message_stop", json_object());
}

static void stream_fail(ds_answer_ctx *a, ds_sb *out, const char *message) {
    (void)a;
    json_t *o = json_object(), *e = json_object();
    json_object_set_new(o, "error", e);
    json_object_set_new(e, "type", json_string("api_error"));
    json_object_set_new(e, "message", ds_oai_text(message));
    event(out, "error", o);
}

/* Anthropic's error types by HTTP status (its API reference, "Errors") */
static const char *error_type(int status) {
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return status >= 400 && status < 500 ? "invalid_request_error" : "api_error";
    }
}

/* {"type": "error", "error": {"type", "message"}}: the OpenAI type and code have no place in it;
 * the parameter a 400 is about is named in the message */
static char *error_body(int status, const char *type, const char *code, const char *param, const char *message) {
    (void)type;
    (void)code;
    json_t *o = json_object(), *e = json_object();
    json_object_set_new(o, "type", json_string("error"));
    json_object_set_new(o, "error", e);
    json_object_set_new(e, "type", json_string(error_type(status)));
    if (param && *param && !strstr(message, param)) {
        char buf[800];
        snprintf(buf, sizeof buf, "%s: %s", param, message);
        json_object_set_new(e, "message", ds_oai_text(buf));
    } else {
        json_object_set_new(e, "message", ds_oai_text(message));
    }
    char *s = ds_json_dump(o);
    json_decref(o);
    return s;
}

const ds_answer_format ds_messages_format = {
    .name = "messages",
    .make_id = make_id,
    .init = init,
    .release = release,
    .stream_begin = stream_begin,
    .stream_part = stream_part,
    .stream_end = stream_end,
    .stream_fail = stream_fail,
    .body = body,
    .error_body = error_body,
};
