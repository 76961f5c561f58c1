/* mapped_file.h - a read-only memory map of a whole file.
 * Weights are used in place from the map; nothing is copied unless a format
 * conversion requires it. */
#ifndef DS_MAPPED_FILE_H
#define DS_MAPPED_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct {
    const uint8_t *data; /* NULL for an empty file */
    size_t size;
} ds_mapped_file;

ds_status ds_mapped_file_open(ds_mapped_file *mf, const char *path, ds_err *e);
void ds_mapped_file_close(ds_mapped_file *mf);

/* Reads a whole (small) file into a NUL-terminated heap buffer that the
 * caller frees. Refuses files over max_bytes. */
ds_status ds_read_text_file(const char *path, size_t max_bytes, char **out, size_t *len, ds_err *e);

#endif
