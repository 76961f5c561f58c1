/* jinja.h - chat templates: the Jinja subset Hugging Face chat templates use.
 *
 * The engine renders what @huggingface/jinja (the JavaScript engine that
 * transformers.js and the Hub use) renders, byte for byte, quirks included:
 * trim_blocks and lstrip_blocks are on, `{{ true }}` prints "true", `==`
 * compares as JavaScript's loose `==`, `str.strip(chars)` ignores chars, and
 * strings are measured, indexed and case-mapped as UTF-16 JavaScript strings.
 * jinja_eval.c lists the places where it knowingly differs.
 *
 * A template is compiled once (read-only afterwards, so one compiled template
 * may be rendered by several threads at once) and rendered with a context
 * given as a jansson JSON object: its members become the template's top-level
 * variables (messages, tools, add_generation_prompt, bos_token, ... and the
 * request's chat_template_kwargs, see ds_jinja_merge_kwargs). Its strings
 * are taken with their length: a U+0000 in a message is part of it.
 *
 * Every render is bounded (output bytes, memory, evaluation steps, nesting),
 * so a hostile template or request ends with an error, never a hang. */
#ifndef DS_JINJA_H
#define DS_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct ds_jinja ds_jinja;

typedef struct {
    size_t max_output;   /* bytes of rendered text, also of any captured block */
    size_t max_memory;   /* bytes one render may allocate for values and text */
    uint64_t max_steps;  /* expressions evaluated + loop iterations */
    int max_depth;       /* nesting of evaluation: expressions, blocks, macro calls */
} ds_jinja_limits;

/* 16 MiB of output, 256 MiB of memory, 20M steps, depth 200. */
ds_jinja_limits ds_jinja_default_limits(void);

/* Compiles a template (NUL-terminated). On failure *out is NULL and e says
 * "template:LINE:COL: what" for the place in text where it went wrong. */
ds_status ds_jinja_compile(const char *text, ds_jinja **out, ds_err *e);
void ds_jinja_free(ds_jinja *t);

/* Renders with the default limits. ctx is a JSON object (or NULL for none);
 * it is only read, and must outlive the call. On success *out is a
 * NUL-terminated UTF-8 string of *len bytes that the caller frees with free().
 * Failures name the template's LINE:COL: DS_EINVAL for errors of the
 * template or of the values it got (raise_exception, `'a' + none`, unknown
 * filter...), DS_ENOMEM when a limit was reached. */
ds_status ds_jinja_render(const ds_jinja *t, const json_t *ctx, char **out, size_t *len, ds_err *e);
ds_status ds_jinja_render_limited(const ds_jinja *t, const json_t *ctx, const ds_jinja_limits *lim, char **out,
                                  size_t *len, ds_err *e);

/* Adds a request's chat_template_kwargs (a JSON object, or NULL) to a render
 * context, at the top level, as transformers' apply_chat_template does: a
 * kwarg replaces a context member of the same name, except "messages" and
 * "tools", which only the request itself sets. */
ds_status ds_jinja_merge_kwargs(json_t *ctx, const json_t *kwargs, ds_err *e);

#endif
