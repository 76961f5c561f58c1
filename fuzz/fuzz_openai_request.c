/* fuzz_openai_request.c - an HTTP request body to parameters
 * (server/openai_request.h), as the server does it before the engine.
 * Input: one byte of settings (bit 0: /v1/completions instead of chat;
 * bit 1: render the chat template on a parsed chat request; bits 2-3: the
 * API whose body it is: 0 OpenAI's, 1 the Responses API, 2 Anthropic's
 * Messages API, 3 a Messages count_tokens body), then the body. The Responses
 * and Messages bodies are translated to a chat request (responses_api.h,
 * messages_api.h), which must hold the same invariants as a chat body's.
 * Invariants:
 *   - a refusal has a message, and its error body (the 400 the server sends)
 *     is well-formed UTF-8 JSON that parses back;
 *   - an accepted request has every field in the range the server relies on
 *     (n, max_tokens, stop strings, sampling numbers, logprobs, messages or
 *     the prompt), and its template context builds and renders or fails
 *     with a message. */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "jinja/jinja.h"
#include "server/json_text.h"
#include "server/messages_api.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/responses_api.h"
#include "tokenizer/default_chat_template.h"
#include "tokenizer/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ds_jinja *or_template;

/* fmt: the API whose error shape the 400 takes (NULL: OpenAI's) */
static void or_check_error(const ds_oai_error *err, const ds_answer_format *fmt) {
    FUZZ_CHECK(err->message[0] != 0, "a refusal without a message (param '%s')", err->param);
    char *body = fmt ? fmt->error_body(400, "invalid_request_error", err->code, err->param, err->message)
                     : ds_oai_error_json("invalid_request_error", err->code, err->param, err->message);
    FUZZ_CHECK(body != NULL, "no error body");
    size_t n = strlen(body);
    FUZZ_CHECK(ds_utf8_valid_prefix((const uint8_t *)body, n) == n, "the error body is not UTF-8: %s", body);
    json_t *back = ds_json_parse(body, strlen(body), NULL, 0);
    FUZZ_CHECK(json_is_object(json_object_get(back, "error")), "the error body does not parse back");
    json_decref(back);
    free(body);
}

static void or_check_request(const ds_oai_request *r, ds_oai_kind kind, int render) {
    const ds_sampling_params *sp = &r->sampling;
    FUZZ_CHECK(r->kind == kind, "kind");
    FUZZ_CHECK(r->n >= 1 && r->n <= DS_OAI_MAX_N, "n = %d", r->n);
    FUZZ_CHECK(r->max_tokens == -1 || (r->max_tokens >= 1 && r->max_tokens <= (1 << 30)), "max_tokens = %d", r->max_tokens);
    FUZZ_CHECK(r->n_stop >= 0 && r->n_stop <= DS_OAI_MAX_STOP, "%d stop strings", r->n_stop);
    for (int i = 0; i < r->n_stop; i++) FUZZ_CHECK(r->stop[i] && r->stop_len[i], "stop string %d empty", i);
    FUZZ_CHECK(isfinite(sp->temperature) && sp->temperature >= 0 && sp->temperature <= 2, "temperature %g", sp->temperature);
    FUZZ_CHECK(sp->top_p > 0 && sp->top_p <= 1, "top_p %g", sp->top_p);
    FUZZ_CHECK(sp->min_p >= 0 && sp->min_p <= 1, "min_p %g", sp->min_p);
    FUZZ_CHECK(sp->top_k >= 0, "top_k %d", sp->top_k);
    FUZZ_CHECK(sp->repetition_penalty > 0 && sp->repetition_penalty <= 10, "repetition_penalty %g", sp->repetition_penalty);
    FUZZ_CHECK(fabsf(sp->presence_penalty) <= 2 && fabsf(sp->frequency_penalty) <= 2, "penalties");
    FUZZ_CHECK(r->top_logprobs >= 0 && r->top_logprobs <= 20, "top_logprobs %d", r->top_logprobs);
    FUZZ_CHECK(!r->include_usage || r->stream, "include_usage without stream");
    if (kind == DS_OAI_COMPLETION) {
        FUZZ_CHECK(r->n_prompts >= 1 && r->n_prompts <= DS_OAI_MAX_CHOICES, "%d prompts", r->n_prompts);
        FUZZ_CHECK(r->best_of >= r->n && r->n_prompts * r->best_of <= DS_OAI_MAX_CHOICES, "best_of %d", r->best_of);
        FUZZ_CHECK(!r->echo || !r->logprobs, "echo with logprobs");
        for (int p = 0; p < r->n_prompts; p++) {
            const ds_oai_prompt *q = &r->prompts[p];
            FUZZ_CHECK((q->text != NULL) != (q->ids != NULL), "prompt %d: text and ids", p);
            FUZZ_CHECK(q->text || q->n_ids > 0, "prompt %d: no ids", p);
            for (int i = 0; i < q->n_ids; i++) FUZZ_CHECK(q->ids[i] >= 0, "negative token id");
        }
        FUZZ_CHECK(sp->n_bias >= 0 && sp->n_bias <= DS_MAX_LOGIT_BIAS, "%d biases", sp->n_bias);
        for (int i = 0; i < sp->n_bias; i++)
            FUZZ_CHECK(sp->bias[i].token >= 0 && fabsf(sp->bias[i].bias) <= 100, "bias %d", i);
        FUZZ_CHECK(!r->messages, "messages in a completion");
        return;
    }
    size_t n = json_array_size(r->messages), i;
    FUZZ_CHECK(json_is_array(r->messages) && n >= 1 && n <= DS_OAI_MAX_MESSAGES, "%zu messages", n);
    const json_t *m;
    int n_image_parts = 0;
    json_array_foreach(r->messages, i, m) {
        const json_t *role = json_object_get(m, "role");
        FUZZ_CHECK(json_is_string(role), "a message without a role");
        FUZZ_CHECK(ds_json_str_is(role, "system") || ds_json_str_is(role, "user") || ds_json_str_is(role, "assistant") ||
                   ds_json_str_is(role, "tool"), "role '%s' reaches the template", json_string_value(role));
        /* a string, or (a user message with images) text and image parts, one image part per r->images */
        const json_t *c = json_object_get(m, "content"), *p;
        size_t k;
        FUZZ_CHECK(json_is_string(c) || (json_is_array(c) && ds_json_str_is(role, "user")), "content is not a string");
        if (json_is_array(c)) json_array_foreach(c, k, p) {
            if (ds_json_str_is(json_object_get(p, "type"), "image")) n_image_parts++;
            else FUZZ_CHECK(ds_json_str_is(json_object_get(p, "type"), "text") &&
                            json_is_string(json_object_get(p, "text")), "a content part is neither text nor image");
        }
        const json_t *calls = json_object_get(m, "tool_calls");
        FUZZ_CHECK(!calls || json_is_array(calls), "tool_calls reach the template as something else than an array");
    }
    FUZZ_CHECK(n_image_parts == r->n_images, "%d image parts for %d images", n_image_parts, r->n_images);
    for (int k = 0; k < r->n_images; k++)
        FUZZ_CHECK(r->images[k].url && r->images[k].url_len > 0 && r->images[k].param[0], "image %d", k);
    FUZZ_CHECK(r->tool_choice == DS_TOOLS_NONE || r->tool_choice == DS_TOOLS_AUTO || r->tools, "tool_choice without tools");
    FUZZ_CHECK(r->tool_choice != DS_TOOLS_NAMED || r->tool_name, "named tool_choice without a name");
    if (!render) return;
    ds_err e = {0};
    json_t *ctx = ds_oai_template_context(r, "<|im_end|>", &e);
    if (!ctx) {
        FUZZ_CHECK(e.msg[0] != 0, "template context failed without a message");
        return;
    }
    if (!or_template && ds_jinja_compile(DS_DEFAULT_CHAT_TEMPLATE, &or_template, &e) != DS_OK)
        FUZZ_FAIL("default template: %s", e.msg);
    ds_jinja_limits lim = fuzz_template_limits();
    char *out = NULL;
    size_t len = 0;
    if (ds_jinja_render_limited(or_template, ctx, &lim, &out, &len, &e) == DS_OK)
        FUZZ_CHECK(out && out[len] == 0, "render: bad output");
    else
        FUZZ_CHECK(e.msg[0] != 0, "render failed without a message");
    free(out);
    json_decref(ctx);
}

/* A Responses or Messages body: refused with a message in the API's shape, or a chat request */
static void or_translated(const char *body, size_t n, int api, int render) {
    char msg[200];
    json_t *root = ds_json_parse(body, n, msg, sizeof msg);
    if (!root || !json_is_object(root)) {   /* the server refuses these before translating */
        json_decref(root);
        return;
    }
    ds_oai_request r;
    ds_oai_error err;
    const ds_answer_format *fmt = api == 1 ? &ds_responses_format : &ds_messages_format;
    int rc = api == 1 ? ds_responses_parse(root, &r, &err) : ds_messages_parse(root, api == 3, &r, &err);
    if (rc != 0) {
        or_check_error(&err, fmt);
    } else {
        or_check_request(&r, DS_OAI_CHAT, render);
        ds_oai_request_free(&r);
    }
    json_decref(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    ds_oai_kind kind = data[0] & 1 ? DS_OAI_COMPLETION : DS_OAI_CHAT;
    int render = (data[0] >> 1) & 1, api = (data[0] >> 2) & 3;
    /* the server hands the parser its body buffer, which is not NUL-terminated */
    size_t n = size - 1;
    char *body = malloc(n ? n : 1);
    if (!body) return 0;
    if (n) memcpy(body, data + 1, n);
    if (api) {
        or_translated(body, n, api, render);
        free(body);
        return 0;
    }
    ds_oai_request r;
    ds_oai_error err;
    if (ds_oai_request_parse(body, n, kind, &r, &err) != 0) {
        or_check_error(&err, NULL);
    } else {
        or_check_request(&r, kind, render);
        ds_oai_request_free(&r);
    }
    free(body);
    return 0;
}
