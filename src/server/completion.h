/* completion.h - one OpenAI completion request from parsed body to answer.
 *
 * ds_completion_start renders (chat) or takes (completions) the prompt,
 * tokenizes it, submits n engine requests, and waits for the first event so
 * that a failure before any output is still an HTTP status. Then:
 *   non-streaming: ds_completion_wait_json blocks until every choice ended
 *                  and gives the status and body;
 *   streaming:     ds_completion_read is libmicrohttpd's content reader.
 * The request is reference counted: the HTTP side (ds_completion_release; a
 * streaming response takes it over) and every engine request in flight hold
 * one; the last one frees it. A client that goes away aborts its engine requests. */
#ifndef DS_COMPLETION_H
#define DS_COMPLETION_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "server/openai_request.h"
#include "server/server_int.h"

typedef struct ds_completion ds_completion;
struct ds_answer_format;

typedef struct {
    int status;        /* HTTP status (0: the client went away) */
    int engine;        /* the model failed (an engine error, not the server's) */
    const char *type;  /* OpenAI error type */
    const char *code;  /* OpenAI error code ("context_length_exceeded"...) or NULL */
    char param[64];
    char message[512];
} ds_http_error;

/* Fills err (status, type, code, param, the formatted message); returns -1. */
int ds_http_vfail(ds_http_error *err, int status, const char *type, const char *code, const char *param,
                  const char *fmt, va_list ap) __attribute__((format(printf, 6, 0)));

/* Takes over *req (left zeroed). fmt: how the answer is written (answer_format.h), NULL for
 * OpenAI's chat completions and completions; api_body: the API's own request body, which the
 * format may read (a reference is taken). fd: the client's socket (to notice a disconnect while
 * waiting). Returns NULL with err filled on failure. */
ds_completion *ds_completion_start(ds_server *srv, ds_oai_request *req, const struct ds_answer_format *fmt,
                                   const json_t *api_body, int fd, ds_http_error *err);
/* The exact tokens a request runs: its chat template rendered (chat) or its prompt, tokenized;
 * *opened_reasoning (may be NULL) says whether the prompt ends inside a reasoning part. What
 * ds_completion_start submits, for the render and token-count endpoints. Returns 0, or -1 with
 * err filled (toks empty); the caller frees toks->ids. */
int ds_completion_prompt(ds_server *srv, const ds_oai_request *req, ds_tokens *toks, int *opened_reasoning,
                         ds_http_error *err);
/* The same for prompt `which` of a completions request (several prompts; chat: 0), with its
 * fill-in-the-middle form when the request has a suffix. Also checks that logit_bias names
 * tokens of the vocabulary. */
int ds_completion_prompt_at(ds_server *srv, const ds_oai_request *req, int which, ds_tokens *toks,
                            int *opened_reasoning, ds_http_error *err);
/* ds_completion_prompt_at that also tells each image's hash and first token
 * (image_input.h; no patches are made): what the render routes report. The
 * caller frees images with ds_prompt_images_free. */
struct ds_prompt_images;
int ds_completion_prompt_placed(ds_server *srv, const ds_oai_request *req, int which, ds_tokens *toks,
                                struct ds_prompt_images *images, ds_http_error *err);
int ds_completion_is_stream(const ds_completion *c);
/* Non-streaming: waits for the end; returns the body (caller frees) and the status in *status. */
char *ds_completion_wait_json(ds_completion *c, int *status);
/* Streaming content reader (MHD_ContentReaderCallback semantics). */
ssize_t ds_completion_read(void *cls, uint64_t pos, char *buf, size_t max);
/* Drops the HTTP side's reference (held by the streaming response once it is
 * queued); aborts whatever is still running. */
void ds_completion_release(ds_completion *c);
/* ds_completion_release as a libmicrohttpd free callback. */
void ds_completion_release_cb(void *cls);

#endif
