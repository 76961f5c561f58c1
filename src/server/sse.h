/* sse.h - Server-Sent Events framing for the streaming OpenAI endpoints. */
#ifndef DS_SSE_H
#define DS_SSE_H

#include <jansson.h>

#include "common/strbuf.h"

/* "data: <json>\n\n" */
void ds_sse_data(ds_sb *out, const json_t *obj);
/* "event: NAME\ndata: <json>\n\n": the named events of the Responses and Messages streams */
void ds_sse_event(ds_sb *out, const char *name, const json_t *obj);
/* "data: [DONE]\n\n" */
void ds_sse_done(ds_sb *out);
/* "event: error\ndata: {"error": {...}}\n\n" - ends a stream that failed after its headers went out;
 * the body is the one an error status would have had (ds_oai_error_obj; code may be NULL). */
void ds_sse_error(ds_sb *out, const char *type, const char *code, const char *message);

#endif
