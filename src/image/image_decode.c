/* image_decode.c - JPEG, PNG, WebP and GIF to RGB (image.h). */
#include "image/image.h"

#include <stdlib.h>
#include <string.h>

void ds_image_default_limits(ds_image_limits *l) {
    l->max_pixels = 16 * 1024 * 1024;
    l->max_bytes = 20u << 20;
}
ds_status ds_image_decode(const uint8_t *data, size_t n, const ds_image_limits *lim, ds_image *out, ds_err *e) {
    (void)data, (void)n, (void)lim;
    memset(out, 0, sizeof *out);
    return ds_fail(e, DS_EUNSUPPORTED, "image: decoding is not built yet");
}
ds_status ds_image_load(const char *path, const ds_image_limits *lim, ds_image *out, ds_err *e) {
    (void)lim;
    memset(out, 0, sizeof *out);
    return ds_fail(e, DS_EUNSUPPORTED, "%s: image decoding is not built yet", path);
}
void ds_image_free(ds_image *im) {
    if (!im) return;
    free(im->rgb);
    im->rgb = NULL;
}
void ds_image_hash(const ds_image *im, uint8_t out[32]) {
    (void)im;
    memset(out, 0, 32);
}
