/* messages_api.c - see messages_api.h. */
#include "server/messages_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_text.h"

int ds_messages_parse(const json_t *body, int for_count, ds_oai_request *out, ds_oai_error *err) {
    (void)body;
    (void)for_count;
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    snprintf(err->message, sizeof err->message, "the Messages API is not implemented yet");
    return -1;
}

static void make_id(char *buf, size_t cap) { snprintf(buf, cap, "msg_0"); }

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

const ds_answer_format ds_messages_format = {.name = "messages", .make_id = make_id, .error_body = error_body};
