/* image_int.h - shared by the per-format decoders (image_jpeg.c,
 * image_png.c, image_webp.c, image_gif.c) and their dispatcher
 * (image_decode.c). Not for use outside src/image. */
#ifndef DS_IMAGE_INT_H
#define DS_IMAGE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "image/image.h"

/* Checks width x height (as the file states it, before any pixel is decoded)
 * against zero and lim->max_pixels; fmt names the format in the message. */
ds_status ds_image_check_size(const char *fmt, int64_t width, int64_t height, const ds_image_limits *lim, ds_err *e);

/* A colour channel c with alpha a composited on opaque white, with the
 * integer rounding of PIL's Image.alpha_composite (which the Hugging Face
 * processor's convert_to_rgb uses), so that a transparent picture becomes
 * the same RGB here as there. */
static inline uint8_t ds_image_on_white(uint8_t c, uint8_t a) {
    if (a == 0) return 255;
    const uint32_t prec = 7, dst = 255;
    uint32_t outa255 = (uint32_t)a * 255 + dst * (255 - a);
    uint32_t coef1 = (uint32_t)a * 255 * 255 * (1u << prec) / outa255;
    uint32_t coef2 = 255 * (1u << prec) - coef1;
    uint32_t t = (uint32_t)c * coef1 + dst * coef2 + (0x80u << prec);
    return (uint8_t)((((t >> 8) + t) >> 8) >> prec);
}

/* Turns n RGBA pixels into RGB on white, in place (the RGB bytes end up at
 * the start of the same buffer). */
void ds_image_rgba_to_rgb(uint8_t *buf, size_t n);

ds_status ds_image_decode_jpeg(const uint8_t *data, size_t n, const ds_image_limits *lim, ds_image *out, ds_err *e);
ds_status ds_image_decode_png(const uint8_t *data, size_t n, const ds_image_limits *lim, ds_image *out, ds_err *e);
ds_status ds_image_decode_webp(const uint8_t *data, size_t n, const ds_image_limits *lim, ds_image *out, ds_err *e);
ds_status ds_image_decode_gif(const uint8_t *data, size_t n, const ds_image_limits *lim, ds_image *out, ds_err *e);

/* Applies an EXIF orientation (tag 0x0112, 1..8) as PIL's
 * ImageOps.exif_transpose does; other values leave the image as it is. */
ds_status ds_image_orient(ds_image *im, int orientation, ds_err *e);

#endif
