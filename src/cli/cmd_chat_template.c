/* cmd_chat_template.c - `deltaserve chat-template`: renders chat requests with
 * a model's chat template (jinja/jinja.h), one request or a batch of them
 * (the batch mode serves the comparison with @huggingface/jinja in
 * tests/chat_template). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/mapped_file.h"
#include "loading/model_file.h"
#include "jinja/jinja.h"
#include "server/json_text.h"

#define MAX_INPUT ((size_t)1 << 30)

static void usage(FILE *f) {
    fprintf(f,
            "usage: deltaserve chat-template -m PATH (--messages FILE | --messages-jsonl FILE)\n"
            "                                [--add-generation-prompt] [--kwargs JSON]\n"
            "  -m PATH                 where the template comes from: a GGUF file or a Hugging Face\n"
            "                          directory (the model's chat template), a tokenizer_config.json\n"
            "                          (its chat_template), or a file holding the template itself\n"
            "  --messages FILE         one chat request as a JSON object ('-': standard input):\n"
            "                          {\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": true,\n"
            "                           \"chat_template_kwargs\": {...}, ...}; prints the rendered prompt\n"
            "  --messages-jsonl FILE   one request per line; prints one JSON line per request:\n"
            "                          {\"ok\": true, \"text\": ...} or {\"ok\": false, \"error\": ...}\n"
            "  --add-generation-prompt sets add_generation_prompt where a request does not say\n"
            "  --kwargs JSON           chat_template_kwargs for every request (after the request's own)\n"
            "Every member of a request is a template variable; chat_template_kwargs are merged in at\n"
            "the top level. bos_token / eos_token come from tokenizer_config.json when the request\n"
            "does not set them.\n");
}

typedef struct {
    char *text;        /* the template */
    json_t *specials;   /* bos_token, eos_token... as tokenizer_config.json gives them */
} template_source;

/* tokenizer_config.json: the chat template (a string, or a list of named
 * templates, of which "default" is used) and the special tokens' text. */
static int from_tokenizer_config(const json_t *cfg, const char *path, template_source *src) {
    const json_t *t = json_object_get(cfg, "chat_template");
    if (json_is_array(t)) {
        size_t i;
        const json_t *item;
        json_array_foreach(t, i, item) {
            const json_t *name = json_object_get(item, "name");
            if (ds_json_str_is(name, "default")) {
                t = json_object_get(item, "template");
                break;
            }
        }
    }
    if (!json_is_string(t)) {
        fprintf(stderr, "deltaserve chat-template: %s: no chat_template string\n", path);
        return -1;
    }
    src->text = strdup(json_string_value(t));
    src->specials = json_object();
    static const char *const NAMES[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) {
        const json_t *v = json_object_get(cfg, NAMES[i]);
        if (json_is_object(v)) v = json_object_get(v, "content");
        if (json_is_string(v) && src->specials) json_object_set_new(src->specials, NAMES[i], json_copy((json_t *)v));
    }
    return src->text && src->specials ? 0 : -1;
}

static int load_source(const char *path, template_source *src) {
    ds_err e = {0};
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "deltaserve chat-template: %s: no such file or directory\n", path);
        return -1;
    }
    char *text = NULL;
    size_t len = 0;
    int is_model = S_ISDIR(st.st_mode);
    if (!is_model) {
        FILE *f = fopen(path, "rb");
        char magic[4] = {0};
        if (f) {
            is_model = fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
            fclose(f);
        }
    }
    if (is_model) {   /* the template as the loader finds it: GGUF metadata, chat_template.jinja, tokenizer_config.json */
        ds_model_file *m;
        if (ds_model_open(path, &m, &e) != DS_OK) {
            fprintf(stderr, "deltaserve chat-template: %s\n", e.msg);
            return -1;
        }
        const char *tmpl = ds_model_chat_template(m);
        src->text = tmpl ? strdup(tmpl) : NULL;
        ds_model_close(m);
        if (!tmpl) {
            fprintf(stderr, "deltaserve chat-template: %s: the model has no chat template\n", path);
            return -1;
        }
        if (S_ISDIR(st.st_mode)) {   /* the special tokens' text, when the directory has it */
            char cfg_path[4096];
            snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", path);
            if (ds_read_text_file(cfg_path, MAX_INPUT, &text, &len, &e) == DS_OK) {
                json_t *cfg = ds_json_parse(text, len, NULL, 0);
                template_source tmp = {0};
                if (cfg && from_tokenizer_config(cfg, cfg_path, &tmp) == 0) src->specials = tmp.specials;
                else json_decref(tmp.specials);
                free(tmp.text);
                json_decref(cfg);
                free(text);
            }
        }
        return src->text ? 0 : -1;
    }
    if (ds_read_text_file(path, MAX_INPUT, &text, &len, &e) != DS_OK) {
        fprintf(stderr, "deltaserve chat-template: %s\n", e.msg);
        return -1;
    }
    json_t *cfg = ds_json_parse(text, len, NULL, 0);
    if (json_is_object(cfg)) {
        int rc = from_tokenizer_config(cfg, path, src);
        json_decref(cfg);
        free(text);
        return rc;
    }
    json_decref(cfg);
    src->text = text;   /* the template itself */
    return 0;
}

/* The render context of one request: its members, with chat_template_kwargs
 * merged in, plus the special tokens it does not set. */
static ds_status build_context(const json_t *req, const template_source *src, int add_gen, const json_t *extra_kwargs,
                               json_t **out, ds_err *e) {
    *out = NULL;
    if (!json_is_object(req)) return ds_fail(e, DS_EINVAL, "a request must be a JSON object");
    json_t *ctx = json_deep_copy(req);
    if (!ctx) return ds_fail(e, DS_ENOMEM, "out of memory");
    json_t *kwargs = json_incref(json_object_get(ctx, "chat_template_kwargs"));
    json_object_del(ctx, "chat_template_kwargs");
    ds_status s = ds_jinja_merge_kwargs(ctx, kwargs, e);
    json_decref(kwargs);
    if (!s) s = ds_jinja_merge_kwargs(ctx, extra_kwargs, e);
    if (!s && add_gen && !json_object_get(ctx, "add_generation_prompt"))
        json_object_set_new(ctx, "add_generation_prompt", json_boolean(1));
    const char *k;
    json_t *sp;
    if (!s && src->specials)
        json_object_foreach(src->specials, k, sp) {
            if (!json_object_get(ctx, k)) json_object_set(ctx, k, sp);
        }
    if (s) {
        json_decref(ctx);
        return s;
    }
    *out = ctx;
    return DS_OK;
}

static ds_status render_request(const ds_jinja *t, const json_t *req, const template_source *src, int add_gen,
                                const json_t *extra_kwargs, char **text, size_t *len, ds_err *e) {
    json_t *ctx;
    ds_status s = build_context(req, src, add_gen, extra_kwargs, &ctx, e);
    if (s) return s;
    s = ds_jinja_render(t, ctx, text, len, e);
    json_decref(ctx);
    return s;
}

static int read_all(const char *path, char **out, size_t *len) {
    ds_err e = {0};
    if (strcmp(path, "-") != 0) {
        if (ds_read_text_file(path, MAX_INPUT, out, len, &e) == DS_OK) return 0;
        fprintf(stderr, "deltaserve chat-template: %s\n", e.msg);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, stdin)) > 0;) {
        n += got;
        if (n == cap) {
            char *b2 = cap < MAX_INPUT ? realloc(buf, cap * 2 + 1) : NULL;
            if (!b2) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b2;
            cap *= 2;
        }
    }
    if (!buf) {
        fprintf(stderr, "deltaserve chat-template: standard input is too large\n");
        return -1;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

static void print_line(json_t *obj) {
    char *line = obj ? ds_json_dump(obj) : NULL;
    puts(line ? line : "{\"ok\":false,\"error\":\"out of memory\"}");
    free(line);
    json_decref(obj);
}

static int run_batch(const ds_jinja *t, const char *path, const template_source *src, int add_gen,
                     const json_t *extra_kwargs) {
    char *all;
    size_t n;
    if (read_all(path, &all, &n)) return 1;
    for (char *line = all, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (!*line) continue;
        char why[300];
        json_t *req = ds_json_parse(line, strlen(line), why, sizeof why);
        json_t *res = json_object();
        ds_err e = {0};
        char *text = NULL;
        size_t len = 0;
        ds_status s = req ? render_request(t, req, src, add_gen, extra_kwargs, &text, &len, &e)
                          : ds_fail(&e, DS_EINVAL, "a line is %s", why);
        if (res) {
            json_object_set_new(res, "ok", json_boolean(s == DS_OK));
            if (s == DS_OK) json_object_set_new(res, "text", ds_json_textn(text, len));
            else json_object_set_new(res, "error", ds_json_text(e.msg));
        }
        print_line(res);
        free(text);
        json_decref(req);
    }
    free(all);
    fflush(stdout);
    return 0;   /* a request that fails is a result here, not a failure of the command */
}

int ds_cmd_chat_template(int argc, char **argv) {
    const char *model = NULL, *messages = NULL, *jsonl = NULL, *kwargs_text = NULL;
    int add_gen = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = ds_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--messages")) {
            if (!(messages = ds_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--messages-jsonl")) {
            if (!(jsonl = ds_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--kwargs")) {
            if (!(kwargs_text = ds_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--add-generation-prompt")) {
            add_gen = 1;
        } else {
            fprintf(stderr, "deltaserve chat-template: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model || !!messages == !!jsonl) {
        usage(stderr);
        return 2;
    }
    json_t *extra_kwargs = NULL;
    if (kwargs_text && !json_is_object(extra_kwargs = ds_json_parse(kwargs_text, strlen(kwargs_text), NULL, 0))) {
        fprintf(stderr, "deltaserve chat-template: --kwargs is not a JSON object\n");
        json_decref(extra_kwargs);
        return 2;
    }
    template_source src = {0};
    int rc = 1;
    ds_jinja *t = NULL;
    ds_err e = {0};
    if (load_source(model, &src) != 0) goto done;
    if (ds_jinja_compile(src.text, &t, &e) != DS_OK) {
        fprintf(stderr, "deltaserve chat-template: %s: %s\n", model, e.msg);
        goto done;
    }
    if (jsonl) {
        rc = run_batch(t, jsonl, &src, add_gen, extra_kwargs);
    } else {
        char *in, *text = NULL;
        size_t n, len;
        if (read_all(messages, &in, &n)) goto done;
        char why[300];
        json_t *req = ds_json_parse(in, n, why, sizeof why);
        free(in);
        if (!req) {
            fprintf(stderr, "deltaserve chat-template: %s is %s\n", messages, why);
            goto done;
        }
        if (render_request(t, req, &src, add_gen, extra_kwargs, &text, &len, &e) != DS_OK) {
            fprintf(stderr, "deltaserve chat-template: %s\n", e.msg);
        } else {
            fwrite(text, 1, len, stdout);
            rc = 0;
        }
        free(text);
        json_decref(req);
    }
done:
    ds_jinja_free(t);
    free(src.text);
    json_decref(src.specials);
    json_decref(extra_kwargs);
    return rc;
}
