/* jinja.c - compile, render and free (see jinja.h); error positions; limits. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_int.h"

#define COMPILE_MEMORY_LIMIT ((size_t)1 << 30)

ds_jinja_limits ds_jinja_default_limits(void) {
    ds_jinja_limits l = {
        .max_output = (size_t)16 << 20,
        .max_memory = (size_t)256 << 20,
        .max_steps = 20000000,
        .max_depth = 400,
    };
    return l;
}

void ds_jinja_line_col(const char *src, size_t n, size_t pos, int *line, int *col) {
    int l = 1, c = 1;
    if (pos > n) pos = n;
    for (size_t i = 0; i < pos; i++) {
        if (src[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)src[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

int ds_jinja_fail(jr *r, uint32_t pos, ds_status code, const char *fmt, ...) {
    if (!r->e) return J_ERR;
    char msg[520];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (pos == UINT32_MAX) {
        ds_fail(r->e, code, "template: %s", msg);
    } else {
        int line, col;
        ds_jinja_line_col(r->t->src, r->t->src_len, pos, &line, &col);
        ds_fail(r->e, code, "template:%d:%d: %s", line, col, msg);
    }
    return J_ERR;
}

int ds_jinja_fail_oom(jr *r, uint32_t pos) {
    return ds_jinja_fail(r, pos, DS_ENOMEM, "out of memory (the render may use at most %zu bytes)", r->lim.max_memory);
}

int ds_jinja_charge_scan(jr *r, uint32_t pos, size_t units) {
    r->steps += units / 16 + 1;
    if (r->steps > r->lim.max_steps)
        return ds_jinja_fail(r, pos, DS_ENOMEM, "more than %llu evaluation steps", (unsigned long long)r->lim.max_steps);
    return J_OK;
}

ds_status ds_jinja_compile(const char *text, ds_jinja **out, ds_err *e) {
    *out = NULL;
    if (!text) return ds_fail(e, DS_EINVAL, "template: no text");
    size_t n = strlen(text);
    if (n >= UINT32_MAX / 2) return ds_fail(e, DS_EINVAL, "template: %zu bytes is too long", n);
    ds_jinja *t = calloc(1, sizeof *t);
    if (!t) return ds_fail(e, DS_ENOMEM, "template: out of memory");
    t->arena.limit = COMPILE_MEMORY_LIMIT;
    t->src = malloc(n + 1);
    if (!t->src) {
        free(t);
        return ds_fail(e, DS_ENOMEM, "template: out of memory");
    }
    memcpy(t->src, text, n + 1);
    t->src_len = n;
    /* the tokens stay in the template's arena: the tree points into their text */
    jtok *toks;
    size_t n_toks;
    ds_status s = ds_jinja_lex(&t->arena, t->src, n, &toks, &n_toks, e);
    if (!s) s = ds_jinja_parse(&t->arena, t->src, n, toks, n_toks, &t->body, e);
    if (s) {
        ds_jinja_free(t);
        return s;
    }
    *out = t;
    return DS_OK;
}

void ds_jinja_free(ds_jinja *t) {
    if (!t) return;
    ds_jinja_arena_release(&t->arena);
    free(t->src);
    free(t);
}

ds_status ds_jinja_render_limited(const ds_jinja *t, const json_t *ctx, const ds_jinja_limits *lim, char **out,
                                  size_t *len, ds_err *e) {
    *out = NULL;
    *len = 0;
    ds_err local = {0};
    jr r = {.lim = *lim, .t = t, .e = e ? e : &local};
    r.arena.limit = lim->max_memory;
    jbuf b = {0};
    int rc = ds_jinja_eval_template(&r, t, ctx, &b);
    ds_status s = DS_OK;
    if (rc) {
        s = r.e->code ? r.e->code : DS_EINVAL;
    } else {
        *out = ds_jinja_wtf8_to_utf8(b.p ? b.p : "", b.n, len);
        if (!*out) s = ds_fail(e, DS_ENOMEM, "template: out of memory");
    }
    ds_jinja_arena_release(&r.arena);
    return s;
}

ds_status ds_jinja_render(const ds_jinja *t, const json_t *ctx, char **out, size_t *len, ds_err *e) {
    ds_jinja_limits lim = ds_jinja_default_limits();
    return ds_jinja_render_limited(t, ctx, &lim, out, len, e);
}

ds_status ds_jinja_merge_kwargs(json_t *ctx, const json_t *kwargs, ds_err *e) {
    if (!kwargs || json_is_null(kwargs)) return DS_OK;
    if (!json_is_object(ctx)) return ds_fail(e, DS_EINVAL, "chat template context is not a JSON object");
    if (!json_is_object(kwargs)) return ds_fail(e, DS_EINVAL, "chat_template_kwargs must be a JSON object");
    const char *k;
    size_t kn;
    json_t *v;
    json_object_keylen_foreach((json_t *)kwargs, k, kn, v) {
        if ((kn == 8 && !memcmp(k, "messages", 8)) || (kn == 5 && !memcmp(k, "tools", 5))) continue;
        /* the render only reads: the value is shared, not copied */
        if (json_object_setn(ctx, k, kn, v)) return ds_fail(e, DS_ENOMEM, "out of memory");
    }
    return DS_OK;
}
