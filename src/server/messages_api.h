/* messages_api.h - Anthropic's Messages API (POST /v1/messages and
 * POST /v1/messages/count_tokens): the request becomes a chat request (system
 * blocks, text / tool_use / tool_result / thinking blocks, tools with
 * input_schema, tool_choice, thinking), and ds_messages_format writes the
 * message object, its event stream (message_start ... message_stop) and
 * errors in Anthropic's shape. */
#ifndef DS_MESSAGES_API_H
#define DS_MESSAGES_API_H

#include <jansson.h>

#include "server/answer_format.h"
#include "server/openai_request.h"

/* for_count: a count_tokens body (max_tokens not required). Returns 0 with *out a chat request,
 * or -1 with err filled (a 400 naming the Messages field). */
int ds_messages_parse(const json_t *body, int for_count, ds_oai_request *out, ds_oai_error *err);

extern const ds_answer_format ds_messages_format;

#endif
