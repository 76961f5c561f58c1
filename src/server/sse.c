/* sse.c - see sse.h. */
#include "server/sse.h"

#include <stdlib.h>

#include "server/json_text.h"
#include "server/openai_response.h"

void ds_sse_data(ds_sb *out, const json_t *obj) {
    char *s = ds_json_dump(obj);
    if (!s) { out->oom = 1; return; }
    ds_sb_puts(out, "data: ");
    ds_sb_puts(out, s);
    ds_sb_puts(out, "\n\n");
    free(s);
}

void ds_sse_done(ds_sb *out) { ds_sb_puts(out, "data: [DONE]\n\n"); }

void ds_sse_error(ds_sb *out, const char *type, const char *message) {
    json_t *o = json_object(), *err = json_object();
    json_object_set_new(o, "error", err);
    json_object_set_new(err, "message", ds_oai_text(message));
    json_object_set_new(err, "type", json_string(type));
    json_object_set_new(err, "param", json_null());
    json_object_set_new(err, "code", json_integer(500));
    char *s = ds_json_dump(o);
    ds_sb_puts(out, "event: error\ndata: ");
    ds_sb_puts(out, s ? s : "{}");
    ds_sb_puts(out, "\n\n");
    free(s);
    json_decref(o);
}
