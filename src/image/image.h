/* image.h - pictures from clients, decoded to RGB with Debian's libraries.
 *
 * JPEG (libjpeg-turbo, with its EXIF orientation applied), PNG (libpng),
 * WebP (libwebp), GIF (giflib, the first frame). Alpha is composited on
 * white, as the Hugging Face processor's convert_to_rgb does. The
 * dimensions are read before any pixel is: a file that says it is larger
 * than the pixel budget is refused before memory is taken for it, so a
 * decompression bomb costs nothing. */
#ifndef DS_IMAGE_H
#define DS_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct {
    int width, height;
    uint8_t *rgb;          /* [height][width][3], owned */
} ds_image;

typedef struct {
    int64_t max_pixels;    /* width x height of the decoded image, at most (--max-image-pixels) */
    size_t max_bytes;      /* encoded size, at most */
} ds_image_limits;

void ds_image_default_limits(ds_image_limits *l);

/* Decodes an encoded image, recognised by its first bytes. Fails with
 * DS_EINVAL (an empty, truncated or corrupt file, zero size, or a format
 * that is not one of the four) or DS_ENOMEM (past a limit), naming the
 * format and, where the library says, the byte offset. */
ds_status ds_image_decode(const uint8_t *data, size_t n, const ds_image_limits *lim, ds_image *out, ds_err *e);
/* The same for a file. */
ds_status ds_image_load(const char *path, const ds_image_limits *lim, ds_image *out, ds_err *e);
void ds_image_free(ds_image *im);

/* A key for the prefix cache: SHA-256 of the dimensions and RGB pixels, so
 * the same picture sent twice (even in another file format) has one key and
 * any other picture another. */
void ds_image_hash(const ds_image *im, uint8_t out[32]);

#endif
