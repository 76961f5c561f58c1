/* json_file.c - JSON files read into jansson values, errors with positions. */
#include "loading/json_file.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/mapped_file.h"

ds_status ds_json_text_parse(const char *text, size_t len, size_t flags, const char *name, size_t base, json_t **out,
                             size_t *used, ds_err *e) {
    json_error_t je;
    /* object keys are looked up by name: a second copy of one would silently win */
    *out = json_loadb(text, len, flags | JSON_REJECT_DUPLICATES, &je);
    if (*out) {
        if (used) *used = je.position > 0 ? (size_t)je.position : 0;
        return DS_OK;
    }
    if (json_error_code(&je) == json_error_out_of_memory) return ds_fail(e, DS_ENOMEM, "%s: out of memory parsing JSON", name);
    /* jansson's position and column count up to the end of the offending token,
     * which it quotes as "near '<token>'": step back to where the token starts */
    size_t at = (size_t)(je.position > 0 ? je.position : 0);
    int col = je.column;
    const char *tok = strstr(je.text, " near '");
    size_t tlen = tok ? strlen(tok + 7) : 0;
    if (tlen >= 1 && tok[7 + tlen - 1] == '\'' && tlen - 1 <= at) {
        at -= tlen - 1;
        int ascii = 1;
        for (size_t i = 0; i < tlen - 1; i++) ascii &= (unsigned char)tok[7 + i] < 0x80;
        if (ascii && (int)(tlen - 1) <= col) col -= (int)(tlen - 1) - 1; /* (columns count from 1) */
    }
    at += base;
    /* jansson names the key as "near '\"key\"'": quote it the way the other messages do */
    const char *near = strstr(je.text, " near '\"");
    size_t klen = near ? strlen(near + 8) : 0;
    if (json_error_code(&je) == json_error_duplicate_key && klen >= 2 && !strcmp(near + 8 + klen - 2, "\"'"))
        return ds_fail(e, DS_ECORRUPT, "%s: key '%.*s' appears twice in one object, at byte %zu (line %d, column %d)",
                       name, (int)(klen - 2), near + 8, at, je.line, col);
    return ds_fail(e, DS_ECORRUPT, "%s: not valid JSON at byte %zu (line %d, column %d): %s", name, at, je.line, col,
                   je.text);
}

ds_status ds_json_file_read(const char *path, size_t max_bytes, int optional, json_t **out, ds_err *e) {
    *out = NULL;
    char *text;
    size_t len;
    ds_status s = ds_read_text_file(path, max_bytes, &text, &len, e);
    if (s == DS_ENOTFOUND && optional) return DS_OK;
    if (s) return s;
    s = ds_json_text_parse(text, len, 0, path, 0, out, NULL, e);
    free(text);
    if (!s && !json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        s = ds_fail(e, DS_ECORRUPT, "%s: not a JSON object", path);
    }
    return s;
}

int ds_json_uint(const json_t *v, uint64_t max, uint64_t *out) {
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0 || (uint64_t)i > max) return -1;
        *out = (uint64_t)i;
        return 0;
    }
    if (!json_is_real(v)) return -1;
    double d = json_real_value(v);
    if (!(d >= 0) || d >= 0x1p64 || d > (double)max || d != floor(d)) return -1;
    *out = (uint64_t)d;
    return 0;
}
