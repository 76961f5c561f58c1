/* fuzz_chat_template.c - the chat-template engine (jinja/jinja.h).
 * The first input byte picks the mode (value % 4), the rest is:
 *   0  a template: compiled, then rendered with a fixed context;
 *   1  message contents separated by NUL bytes (roles cycle system, user,
 *      assistant, tool, user...), rendered with the default template;
 *   2  a JSON render context for the default template;
 *   3  JSON chat_template_kwargs merged into a fixed context
 *      (ds_jinja_merge_kwargs), rendered with the default template.
 * Renders run under tight limits so that one input stays fast; a render
 * may fail, but a success must give *len bytes with a NUL after them. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "jinja/jinja.h"
#include "server/json_text.h"
#include "tokenizer/default_chat_template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *CT_CTX =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Hi \\u00e9\\ud83d\\ude00\"},"
    " {\"role\": \"assistant\", \"content\": \"Hello\", \"reasoning_content\": \"think\","
    "  \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1, \"b\": [true, null]}}}]},"
    " {\"role\": \"tool\", \"content\": \"42\"}, {\"role\": \"user\", \"content\": \"again\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
    "  \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}}}],"
    " \"add_generation_prompt\": true, \"enable_thinking\": false, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    " \"n\": 3, \"s\": \" Hi \", \"xs\": [1, 2.5, \"x\"], \"d\": {\"a\": 1}}";

static ds_jinja *ct_default;
static json_t *ct_ctx;

static void ct_init(void) {
    ds_err e = {0};
    if (ds_jinja_compile(DS_DEFAULT_CHAT_TEMPLATE, &ct_default, &e) != DS_OK) FUZZ_FAIL("default template: %s", e.msg);
    ct_ctx = ds_json_parse(CT_CTX, strlen(CT_CTX), NULL, 0);
    if (!ct_ctx) FUZZ_FAIL("context JSON");
}

static void ct_render(const ds_jinja *t, const json_t *ctx) {
    ds_jinja_limits lim = fuzz_template_limits();
    char *out = NULL;
    size_t len = 0;
    ds_err e = {0};
    ds_status s = ds_jinja_render_limited(t, ctx, &lim, &out, &len, &e);
    if (s == DS_OK) {
        FUZZ_CHECK(out != NULL && len <= lim.max_output && out[len] == 0, "render: bad output (%zu bytes)", len);
        free(out);
    } else {
        FUZZ_CHECK(out == NULL || len == 0, "failed render left output");
        FUZZ_CHECK(e.msg[0] != 0, "render failed without a message");
        free(out);
    }
}

static json_t *ct_messages(const uint8_t *data, size_t size) {
    static const char *roles[] = {"system", "user", "assistant", "tool", "user", "assistant"};
    json_t *ctx = json_object(), *msgs = json_array();
    json_object_set_new(ctx, "messages", msgs);
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(1));
    size_t start = 0;
    for (int i = 0; start <= size && i < 16; i++) {
        const uint8_t *z = size > start ? memchr(data + start, 0, size - start) : NULL;
        size_t end = z ? (size_t)(z - data) : size;
        /* any bytes, unchecked: the engine must cope with text that is not UTF-8 */
        const char *content = (const char *)data + start;
        size_t cn = end - start;
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string(roles[i % 6]));
        json_object_set_new(m, (i % 6 == 5) ? "reasoning_content" : "content", json_stringn_nocheck(content, cn));
        if (i % 6 == 5) json_object_set_new(m, "content", json_stringn_nocheck(content, cn));
        json_array_append_new(msgs, m);
        start = end + 1;
    }
    return ctx;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!ct_default) ct_init();
    if (size < 1) return 0;
    int mode = data[0] % 4;
    data++, size--;
    if (mode == 0) {
        char *text = malloc(size + 1);
        if (!text) return 0;
        memcpy(text, data, size);
        text[size] = 0;
        ds_jinja *t = NULL;
        ds_err e = {0};
        if (ds_jinja_compile(text, &t, &e) == DS_OK) {
            FUZZ_CHECK(t != NULL, "compile succeeded without a template");
            ct_render(t, ct_ctx);
            ct_render(t, NULL);
            ds_jinja_free(t);
        } else {
            FUZZ_CHECK(t == NULL && e.msg[0], "compile failed without a message");
        }
        free(text);
    } else if (mode == 1) {
        json_t *ctx = ct_messages(data, size);
        ct_render(ct_default, ctx);
        json_decref(ctx);
    } else {
        json_t *j = ds_json_parse((const char *)data, size, NULL, 0);
        if (!j) return 0;
        if (mode == 2) {
            ct_render(ct_default, j);
        } else {
            json_t *ctx = json_deep_copy(ct_ctx);
            ds_err e = {0};
            if (ctx && ds_jinja_merge_kwargs(ctx, j, &e) == DS_OK) ct_render(ct_default, ctx);
            json_decref(ctx);
        }
        json_decref(j);
    }
    return 0;
}
