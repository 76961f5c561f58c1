/* hub_sha256.h - SHA-256 (FIPS 180-4), the checksum the model hub lists for
 * every large (LFS) file; downloads are checked against it. */
#ifndef DS_HUB_SHA256_H
#define DS_HUB_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct {
    uint32_t h[8];
    uint64_t n_bytes;
    uint8_t buf[64];
    size_t n_buf;
} ds_sha256;

void ds_sha256_init(ds_sha256 *s);
void ds_sha256_update(ds_sha256 *s, const void *data, size_t n);
/* Writes the digest as 64 lower-case hex digits and a NUL into hex[65]. */
void ds_sha256_final_hex(ds_sha256 *s, char hex[65]);
/* The digest of a whole file, as hex. */
ds_status ds_sha256_file(const char *path, char hex[65], ds_err *e);

#endif
