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

void ds_sse_event(ds_sb *out, const char *name, const json_t *obj) {
    ds_sb_puts(out, "event: ");
    ds_sb_puts(out, name);
    ds_sb_puts(out, "\n");
    ds_sse_data(out, obj);
}

void ds_sse_done(ds_sb *out) { ds_sb_puts(out, "data: [DONE]\n\n"); }

void ds_sse_error(ds_sb *out, const char *type, const char *code, const char *message) {
    json_t *o = ds_oai_error_obj(type, code, NULL, message);
    char *s = ds_json_dump(o);
    ds_sb_puts(out, "event: error\ndata: ");
    ds_sb_puts(out, s ? s : "{}");
    ds_sb_puts(out, "\n\n");
    free(s);
    json_decref(o);
}
