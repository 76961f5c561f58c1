/* json_file.h - JSON files of a checkpoint (config.json, tokenizer.json, the
 * safetensors index) read into jansson values, with errors that say where. */
#ifndef DS_JSON_FILE_H
#define DS_JSON_FILE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

/* Parses len bytes of text (flags: jansson's JSON_* decoding flags). On a
 * syntax error the message names `name`, the line, the column and the byte
 * offset, plus `base` added to the offset for text that sits inside a larger
 * file (a safetensors header starts at byte 8). used (may be NULL) gets the
 * bytes the value took, which with JSON_DISABLE_EOF_CHECK may be fewer than len. */
ds_status ds_json_text_parse(const char *text, size_t len, size_t flags, const char *name, size_t base, json_t **out,
                             size_t *used, ds_err *e);

/* Reads and parses a whole file of at most max_bytes; the top level must be an
 * object. optional: a missing file is DS_OK with *out NULL. */
ds_status ds_json_file_read(const char *path, size_t max_bytes, int optional, json_t **out, ds_err *e);

/* A non-negative integer no larger than max: jansson integers, and reals
 * with no fractional part (writers that only have doubles produce 4.0). */
int ds_json_uint(const json_t *v, uint64_t max, uint64_t *out);

#endif
