/* image_png.c - PNG through libpng's classic interface, with the
 * transforms that make PIL's pixels: 16-bit samples cut to their high byte
 * (PIL's "RGB;16B"), no gamma correction, palettes and low bit depths
 * expanded, tRNS made alpha, alpha then composited on white.
 *
 * libpng reports errors by a callback that jumps back here (setjmp). Its
 * warnings (a wrong sRGB profile and the like) change no pixel and are
 * ignored; reading past the data is an error naming the offset. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "image/image_int.h"

typedef struct {
    const uint8_t *data;
    size_t n, pos;
    char msg[200];
} png_source;

static void on_error(png_structp p, png_const_charp msg) {
    png_source *src = png_get_error_ptr(p);
    if (!src->msg[0]) snprintf(src->msg, sizeof src->msg, "%s", msg);
    png_longjmp(p, 1);
}

static void on_warning(png_structp p, png_const_charp msg) { (void)p, (void)msg; }

static void on_read(png_structp p, png_bytep buf, size_t len) {
    png_source *src = png_get_io_ptr(p);
    if (len > src->n - src->pos) {
        snprintf(src->msg, sizeof src->msg, "truncated: %zu bytes wanted at byte %zu of %zu", len, src->pos, src->n);
        png_error(p, "truncated");
    }
    memcpy(buf, src->data + src->pos, len);
    src->pos += len;
}

ds_status ds_image_decode_png(const uint8_t *data, size_t n, const ds_image_limits *lim, ds_image *out, ds_err *e) {
    png_source src = {.data = data, .n = n};
    png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, on_error, on_warning);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    uint8_t *volatile buf = NULL;
    png_bytep *volatile rows = NULL;
    if (!info) {
        png_destroy_read_struct(&p, NULL, NULL);
        return ds_fail(e, DS_ENOMEM, "PNG: no memory for the decoder");
    }
    if (setjmp(png_jmpbuf(p))) {
        png_destroy_read_struct(&p, &info, NULL);
        free(buf);
        free(rows);
        return ds_fail(e, DS_EINVAL, "PNG: %s", src.msg[0] ? src.msg : "corrupt data");
    }
    png_set_read_fn(p, &src, on_read);
    png_read_info(p, info);
    png_uint_32 w32, h32;
    int depth, color, interlace;
    png_get_IHDR(p, info, &w32, &h32, &depth, &color, &interlace, NULL, NULL);
    ds_status s = ds_image_check_size("PNG", w32, h32, lim, e);
    if (s != DS_OK) {
        png_destroy_read_struct(&p, &info, NULL);
        return s;
    }
    int w = (int)w32, h = (int)h32;
    png_set_strip_16(p);
    png_set_packing(p);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(p);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(p);
    if (png_get_valid(p, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(p);
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(p);
    png_set_filler(p, 0xff, PNG_FILLER_AFTER); /* only where there is no alpha */
    png_set_interlace_handling(p);
    png_read_update_info(p, info);
    if (png_get_rowbytes(p, info) != (size_t)w * 4) {
        snprintf(src.msg, sizeof src.msg, "unexpected row size %zu for width %d", (size_t)png_get_rowbytes(p, info), w);
        png_longjmp(p, 1);
    }
    buf = malloc((size_t)w * h * 4);
    rows = malloc((size_t)h * sizeof *rows);
    if (!buf || !rows) {
        snprintf(src.msg, sizeof src.msg, "no memory for %dx%d pixels", w, h);
        png_longjmp(p, 1);
    }
    for (int y = 0; y < h; y++) rows[y] = buf + (size_t)y * w * 4;
    png_read_image(p, rows);
    png_read_end(p, NULL);
    png_destroy_read_struct(&p, &info, NULL);
    free(rows);
    ds_image_rgba_to_rgb(buf, (size_t)w * h);
    uint8_t *rgb = realloc(buf, (size_t)w * h * 3);
    out->rgb = rgb ? rgb : buf;
    out->width = w;
    out->height = h;
    return DS_OK;
}
