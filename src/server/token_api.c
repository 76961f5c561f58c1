/* token_api.c - see token_api.h.
 *
 * /tokenize tells the two shapes apart by the body: "content" is
 * llama-server's ({content, add_special, parse_special, with_pieces} ->
 * {tokens}), "prompt" or "messages" is vLLM's ({prompt} or {messages,
 * add_generation_prompt, chat_template_kwargs, tools}, with
 * add_special_tokens and return_token_strs -> {count, max_model_len, tokens,
 * token_strs}). /detokenize takes {tokens} in both and answers with both
 * keys, "prompt" (vLLM) and "content" (llama-server), the same text.
 * Qwen's vocabularies add no BOS/EOS when encoding, so add_special and
 * add_special_tokens change nothing; they are checked for their type.
 *
 * The render routes parse the body exactly as the completion routes do and
 * take the prompt from ds_completion_prompt_placed, so their token_ids are the
 * ones the completion would run. A prompt with images also gets vLLM's
 * "features": {"mm_hashes": {"image": [id...]}, "mm_placeholders": {"image":
 * [{"offset", "length"}...]}} (null without images), where id is the image's
 * SHA-256 in lowercase hex, the key our KV events put in the extra_keys of the
 * blocks holding its tokens, and offset/length are where its pad tokens lie:
 * a router keys those blocks from them as it keys ours. */
#include "server/token_api.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/completion.h"
#include "server/image_input.h"
#include "server/json_text.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "tokenizer/utf8.h"

static int error(char **out, int status, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int error(char **out, int status, const char *code, const char *param, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    *out = ds_oai_error_json(status >= 500 ? "server_error" : "invalid_request_error", code, param, msg);
    return status;
}

static int answer(char **out, json_t *o) {
    *out = o ? ds_json_dump(o) : NULL;
    json_decref(o);
    return *out ? 200 : error(out, 500, NULL, NULL, "out of memory");
}

static const json_t *get(const json_t *o, const char *k) {
    const json_t *v = json_object_get(o, k);
    return json_is_null(v) ? NULL : v;
}

/* a boolean field, or def when absent; -1 when it is not a boolean */
static int get_flag(const json_t *o, const char *k, int def, char **out, int *status) {
    const json_t *v = get(o, k);
    if (!v) return def;
    if (json_is_boolean(v)) return json_is_true(v);
    *status = error(out, 400, NULL, k, "'%s' must be a boolean", k);
    return -1;
}

static int check_model(ds_server *s, const json_t *root, char **out) {
    const json_t *m = get(root, "model");
    if (!m) return 0;
    if (!json_is_string(m)) return error(out, 400, NULL, "model", "'model' must be a string");
    if (strcmp(json_string_value(m), s->model_name))
        return error(out, 404, "model_not_found", "model", "the model '%.200s' does not exist; this server serves '%s'",
                     json_string_value(m), s->model_name);
    return 0;
}

static json_t *ids_json(const ds_tokens *t) {
    json_t *a = json_array();
    for (size_t i = 0; i < t->n; i++) json_array_append_new(a, json_integer(t->ids[i]));
    return a;
}

/* llama-server's piece: the token's text, or its bytes when they are not well-formed UTF-8 */
static json_t *piece_json(const ds_tokenizer *tok, int32_t id) {
    size_t n = 0;
    const char *b = ds_tokenizer_token_bytes(tok, id, &n);
    if (!b) b = "", n = 0;
    if (ds_utf8_valid_prefix((const uint8_t *)b, n) == n) return ds_json_textn(b, n);
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((uint8_t)b[i]));
    return a;
}

static int tokenize_llama(ds_server *s, const json_t *root, char **out) {
    int status = 0;
    const json_t *content = get(root, "content");
    if (!json_is_string(content)) return error(out, 400, NULL, "content", "'content' must be a string");
    int add = get_flag(root, "add_special", 0, out, &status);
    int special = add < 0 ? -1 : get_flag(root, "parse_special", 1, out, &status);
    int pieces = special < 0 ? -1 : get_flag(root, "with_pieces", 0, out, &status);
    if (pieces < 0) return status;
    ds_tokens t = {0};
    ds_err e = {0};
    if (ds_tokenizer_encode(s->tok, json_string_value(content), json_string_length(content), special, &t, &e) != DS_OK)
        return error(out, 400, NULL, "content", "'content' could not be tokenized: %s", e.msg);
    json_t *o = json_object(), *a = json_array();
    json_object_set_new(o, "tokens", a);
    for (size_t i = 0; i < t.n; i++) {
        if (!pieces) {
            json_array_append_new(a, json_integer(t.ids[i]));
            continue;
        }
        json_t *p = json_object();
        json_object_set_new(p, "id", json_integer(t.ids[i]));
        json_object_set_new(p, "piece", piece_json(s->tok, t.ids[i]));
        json_array_append_new(a, p);
    }
    free(t.ids);
    return answer(out, o);
}

static int tokenize_vllm(ds_server *s, const json_t *root, char **out) {
    int status = 0;
    if (get_flag(root, "add_special_tokens", 1, out, &status) < 0) return status;
    int strs = get_flag(root, "return_token_strs", 0, out, &status);
    if (strs < 0) return status;
    ds_tokens t = {0};
    if (get(root, "messages")) {
        /* a chat request's prompt, as the chat completion would render it */
        int gen = get_flag(root, "add_generation_prompt", 1, out, &status);
        if (gen < 0) return status;
        ds_oai_request req;
        ds_oai_error perr;
        if (ds_oai_request_parse_json(root, DS_OAI_CHAT, &req, &perr))
            return error(out, 400, perr.code, perr.param, "%s", perr.message);
        if (!gen) {   /* add_generation_prompt is the template's own variable: the kwargs set it */
            if (!req.template_kwargs) req.template_kwargs = json_object();
            json_object_set_new(req.template_kwargs, "add_generation_prompt", json_false());
        }
        ds_http_error herr;
        int rc = ds_completion_prompt(s, &req, &t, NULL, &herr);
        ds_oai_request_free(&req);
        if (rc) return error(out, herr.status, herr.code, herr.param, "%s", herr.message);
    } else {
        const json_t *p = get(root, "prompt");
        if (!json_is_string(p)) return error(out, 400, NULL, "prompt", "'prompt' must be a string");
        ds_err e = {0};
        if (ds_tokenizer_encode(s->tok, json_string_value(p), json_string_length(p), 1, &t, &e) != DS_OK)
            return error(out, 400, NULL, "prompt", "'prompt' could not be tokenized: %s", e.msg);
    }
    json_t *o = json_object();
    json_object_set_new(o, "count", json_integer((json_int_t)t.n));
    json_object_set_new(o, "max_model_len", json_integer(s->ctx));
    json_object_set_new(o, "tokens", ids_json(&t));
    if (strs) {
        json_t *a = json_array();
        for (size_t i = 0; i < t.n; i++) {
            const char *piece = ds_tokenizer_piece(s->tok, t.ids[i]);
            json_array_append_new(a, ds_json_textn(piece ? piece : "", piece ? strlen(piece) : 0));
        }
        json_object_set_new(o, "token_strs", a);
    }
    free(t.ids);
    return answer(out, o);
}

static int detokenize(ds_server *s, const json_t *root, char **out) {
    const json_t *a = get(root, "tokens");
    if (!json_is_array(a)) return error(out, 400, NULL, "tokens", "'tokens' must be an array of token ids");
    size_t n = json_array_size(a);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return error(out, 500, NULL, NULL, "out of memory");
    int V = ds_tokenizer_n_tokens(s->tok);
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(a, i);
        json_int_t v = json_integer_value(x);
        if (!json_is_integer(x) || v < 0 || v >= V) {
            free(ids);
            if (!json_is_integer(x)) return error(out, 400, NULL, "tokens", "'tokens[%zu]' is not a token id", i);
            return error(out, 400, NULL, "tokens", "'tokens[%zu]' (%lld) is outside the vocabulary of %d tokens", i,
                         (long long)v, V);
        }
        ids[i] = (int32_t)v;
    }
    char *text = NULL;
    size_t len = 0;
    ds_err e = {0};
    ds_status st = ds_tokenizer_decode(s->tok, ids, n, 0, &text, &len, &e);
    free(ids);
    if (st != DS_OK) return error(out, 500, NULL, NULL, "the tokens could not be decoded: %s", e.msg);
    json_t *o = json_object();
    /* ids that cut a character: the text shows U+FFFD there, as in an answer */
    json_object_set_new(o, "prompt", ds_oai_textn(text, len));
    json_object_set_new(o, "content", ds_oai_textn(text, len));
    free(text);
    return answer(out, o);
}

/* vLLM's features of a prompt with images: each image's id and where its pad
 * tokens are (they run from its first token up to the first other token) */
static json_t *features_json(const ds_tokens *t, const ds_prompt_images *im) {
    if (!im->n) return json_null();
    json_t *ids = json_array(), *places = json_array();
    for (int k = 0; k < im->n; k++) {
        char hex[65];
        for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", im->items[k].hash[i]);
        json_array_append_new(ids, json_string(hex));
        size_t first = (size_t)im->items[k].first, end = first;
        size_t stop = k + 1 < im->n ? (size_t)im->items[k + 1].first : t->n;
        while (end < stop && t->ids[end] == t->ids[first]) end++;
        json_t *p = json_object();
        json_object_set_new(p, "offset", json_integer((json_int_t)first));
        json_object_set_new(p, "length", json_integer((json_int_t)(end - first)));
        json_array_append_new(places, p);
    }
    json_t *f = json_object(), *h = json_object(), *pl = json_object();
    json_object_set_new(h, "image", ids);
    json_object_set_new(pl, "image", places);
    json_object_set_new(f, "mm_hashes", h);
    json_object_set_new(f, "mm_placeholders", pl);
    return f;
}

/* {"token_ids": [...], "features": ..., "prompt": the text they decode to} */
static json_t *rendered(ds_server *s, const ds_tokens *t, const ds_prompt_images *im) {
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(s->model_name));
    json_object_set_new(o, "token_ids", ids_json(t));
    json_object_set_new(o, "features", features_json(t, im));
    char *text = NULL;
    size_t len = 0;
    ds_err e = {0};
    if (ds_tokenizer_decode(s->tok, t->ids, t->n, 0, &text, &len, &e) == DS_OK)
        json_object_set_new(o, "prompt", ds_oai_textn(text, len));
    free(text);
    return o;
}

static int render(ds_server *s, const char *body, size_t len, ds_oai_kind kind, char **out) {
    ds_oai_request req;
    ds_oai_error perr;
    if (ds_oai_request_parse(body, len, kind, &req, &perr))
        return error(out, 400, perr.code, perr.param, "%s", perr.message);
    if (req.model && strcmp(req.model, s->model_name)) {
        int st = error(out, 404, "model_not_found", "model", "the model '%.200s' does not exist; this server serves "
                       "'%s'", req.model, s->model_name);
        ds_oai_request_free(&req);
        return st;
    }
    json_t *list = kind == DS_OAI_COMPLETION ? json_array() : NULL, *one = NULL;
    int n = kind == DS_OAI_COMPLETION ? req.n_prompts : 1, status = 200;
    for (int i = 0; i < n; i++) {
        ds_tokens t;
        ds_prompt_images im;
        ds_http_error herr;
        if (ds_completion_prompt_placed(s, &req, i, &t, &im, &herr)) {
            status = error(out, herr.status, herr.code, herr.param, "%s", herr.message);
            break;
        }
        one = rendered(s, &t, &im);
        ds_prompt_images_free(&im);
        free(t.ids);
        if (list) json_array_append_new(list, one);
    }
    ds_oai_request_free(&req);
    if (status != 200) {
        json_decref(list ? list : one);
        return status;
    }
    return answer(out, list ? list : one);
}

int ds_token_api_answer(ds_server *s, ds_token_route route, const char *body, size_t len, char **out) {
    *out = NULL;
    if (route == DS_TOKEN_RENDER_CHAT) return render(s, body, len, DS_OAI_CHAT, out);
    if (route == DS_TOKEN_RENDER_COMPLETION) return render(s, body, len, DS_OAI_COMPLETION, out);
    char msg[400];
    json_t *root = ds_json_parse(body, len, msg, sizeof msg);
    if (!root) return error(out, 400, NULL, "", "the request body is %s", msg);
    int status;
    if (!json_is_object(root)) status = error(out, 400, NULL, "", "the request body must be a JSON object");
    else if ((status = check_model(s, root, out))) {
    } else if (route == DS_TOKEN_DETOKENIZE) status = detokenize(s, root, out);
    else if (get(root, "content")) status = tokenize_llama(s, root, out);
    else if (get(root, "prompt") || get(root, "messages")) status = tokenize_vllm(s, root, out);
    else status = error(out, 400, NULL, "prompt", "the body needs 'prompt' or 'messages' (vLLM) or 'content' "
                        "(llama-server)");
    json_decref(root);
    return status;
}
