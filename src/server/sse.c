/* sse.c - see sse.h. */
#include "server/sse.h"

#include <stdlib.h>

#include "server/openai_response.h"

void ds_sse_data(ds_sb *out, const cJSON *obj) {
    char *s = cJSON_PrintUnformatted(obj);
    if (!s) { out->oom = 1; return; }
    ds_sb_puts(out, "data: ");
    ds_sb_puts(out, s);
    ds_sb_puts(out, "\n\n");
    free(s);
}

void ds_sse_done(ds_sb *out) { ds_sb_puts(out, "data: [DONE]\n\n"); }

void ds_sse_error(ds_sb *out, const char *type, const char *message) {
    cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
    cJSON_AddItemToObject(err, "message", ds_oai_text(message));
    cJSON_AddStringToObject(err, "type", type);
    cJSON_AddNullToObject(err, "param");
    cJSON_AddNumberToObject(err, "code", 500);
    char *s = cJSON_PrintUnformatted(o);
    ds_sb_puts(out, "event: error\ndata: ");
    ds_sb_puts(out, s ? s : "{}");
    ds_sb_puts(out, "\n\n");
    free(s);
    cJSON_Delete(o);
}
