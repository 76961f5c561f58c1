/* responses_api.c - see responses_api.h. */
#include "server/responses_api.h"

#include <stdio.h>
#include <string.h>

#include "server/json_text.h"

int ds_responses_parse(const json_t *body, ds_oai_request *out, ds_oai_error *err) {
    (void)body;
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    snprintf(err->message, sizeof err->message, "the Responses API is not implemented yet");
    return -1;
}

static void make_id(char *buf, size_t cap) { snprintf(buf, cap, "resp_0"); }

static char *error_body(int status, const char *type, const char *code, const char *param, const char *message) {
    (void)status;
    return ds_oai_error_json(type, code, param, message);
}

const ds_answer_format ds_responses_format = {.name = "responses", .make_id = make_id, .error_body = error_body};
