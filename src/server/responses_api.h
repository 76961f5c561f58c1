/* responses_api.h - OpenAI's Responses API (POST /v1/responses), stateless:
 * the request becomes a chat request (instructions and input items as
 * messages, function tools, reasoning effort, text.format as the output
 * constraint), and ds_responses_format writes the response object and its
 * event stream (response.created ... response.completed). */
#ifndef DS_RESPONSES_API_H
#define DS_RESPONSES_API_H

#include <jansson.h>

#include "server/answer_format.h"
#include "server/openai_request.h"

/* Returns 0 with *out a chat request, or -1 with err filled (a 400 naming the Responses field). */
int ds_responses_parse(const json_t *body, ds_oai_request *out, ds_oai_error *err);

extern const ds_answer_format ds_responses_format;

#endif
