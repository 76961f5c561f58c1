/* image_decode.c - recognises an encoded image by its first bytes and hands
 * it to its format's decoder (image.h); what they share: the size checks,
 * compositing on white, EXIF orientation and the cache key. */
#include "image/image.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "image/image_int.h"
#include "loading/hub_sha256.h"

void ds_image_default_limits(ds_image_limits *l) {
    l->max_pixels = 16 * 1024 * 1024;
    l->max_bytes = 20u << 20;
}

ds_status ds_image_check_size(const char *fmt, int64_t width, int64_t height, const ds_image_limits *lim, ds_err *e) {
    if (width <= 0 || height <= 0)
        return ds_fail(e, DS_EINVAL, "%s: the image is %lldx%lld pixels (zero size)", fmt, (long long)width,
                       (long long)height);
    if (width > INT32_MAX / 4 || height > INT32_MAX / 4 || width * height > lim->max_pixels)
        return ds_fail(e, DS_ENOMEM, "%s: the image is %lldx%lld = %lld pixels, past the limit of %lld (--max-image-pixels)",
                       fmt, (long long)width, (long long)height, (long long)(width * height),
                       (long long)lim->max_pixels);
    return DS_OK;
}

void ds_image_rgba_to_rgb(uint8_t *buf, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint8_t r = buf[4 * i], g = buf[4 * i + 1], b = buf[4 * i + 2], a = buf[4 * i + 3];
        if (a == 255) {
            buf[3 * i] = r, buf[3 * i + 1] = g, buf[3 * i + 2] = b;
        } else {
            buf[3 * i] = ds_image_on_white(r, a);
            buf[3 * i + 1] = ds_image_on_white(g, a);
            buf[3 * i + 2] = ds_image_on_white(b, a);
        }
    }
}

/* Where output pixel (x, y) of an image turned by orientation o comes from,
 * for a source of sw x sh: PIL's FLIP_LEFT_RIGHT (2), ROTATE_180 (3),
 * FLIP_TOP_BOTTOM (4), TRANSPOSE (5), ROTATE_270 (6), TRANSVERSE (7),
 * ROTATE_90 (8). */
static void orient_source(int o, int sw, int sh, int x, int y, int *sx, int *sy) {
    switch (o) {
    case 2: *sx = sw - 1 - x, *sy = y; break;
    case 3: *sx = sw - 1 - x, *sy = sh - 1 - y; break;
    case 4: *sx = x, *sy = sh - 1 - y; break;
    case 5: *sx = y, *sy = x; break;
    case 6: *sx = y, *sy = sh - 1 - x; break;
    case 7: *sx = sw - 1 - y, *sy = sh - 1 - x; break;
    case 8: *sx = sw - 1 - y, *sy = x; break;
    default: *sx = x, *sy = y; break;
    }
}

ds_status ds_image_orient(ds_image *im, int orientation, ds_err *e) {
    if (orientation < 2 || orientation > 8) return DS_OK;
    int sw = im->width, sh = im->height;
    int ow = orientation >= 5 ? sh : sw, oh = orientation >= 5 ? sw : sh;
    uint8_t *dst = malloc((size_t)ow * oh * 3);
    if (!dst) return ds_fail(e, DS_ENOMEM, "JPEG: no memory to turn a %dx%d image (EXIF orientation %d)", sw, sh, orientation);
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++) {
            int sx, sy;
            orient_source(orientation, sw, sh, x, y, &sx, &sy);
            memcpy(dst + ((size_t)y * ow + x) * 3, im->rgb + ((size_t)sy * sw + sx) * 3, 3);
        }
    free(im->rgb);
    im->rgb = dst;
    im->width = ow;
    im->height = oh;
    return DS_OK;
}

/* What the first bytes of an unrecognised file look like, for the message. */
static void describe_unknown(const uint8_t *d, size_t n, char *out, size_t cap) {
    static const struct { const char *magic; size_t len, at; const char *name; } KNOWN[] = {
        {"BM", 2, 0, "a BMP image"},          {"II*\0", 4, 0, "a TIFF image"},
        {"MM\0*", 4, 0, "a TIFF image"},      {"ftypavif", 8, 4, "an AVIF image"},
        {"ftypheic", 8, 4, "a HEIC image"},   {"ftypmif1", 8, 4, "a HEIF image"},
        {"ftyp", 4, 4, "an ISO media (MP4/HEIF) file"},
        {"\0\0\1\0", 4, 0, "an ICO icon"},    {"8BPS", 4, 0, "a Photoshop file"},
        {"%PDF", 4, 0, "a PDF document"},     {"<svg", 4, 0, "an SVG drawing"},
        {"<?xml", 5, 0, "XML text (SVG?)"},   {"<!DOCTYPE", 9, 0, "an HTML page"},
        {"<html", 5, 0, "an HTML page"},      {"{", 1, 0, "JSON text"},
        {"RIFF", 4, 0, "a RIFF file that is not WebP"},
        {"\xff\xd8", 2, 0, "a JPEG cut short in its first marker"},
        {"\x89PNG", 4, 0, "a PNG cut short in its signature"},
        {"GIF8", 4, 0, "a GIF cut short in its signature"},
        {"iVBOR", 5, 0, "base64 text of a PNG (decoded twice?)"},
        {"/9j/", 4, 0, "base64 text of a JPEG (decoded twice?)"},
    };
    const char *name = NULL;
    for (size_t i = 0; i < sizeof KNOWN / sizeof *KNOWN && !name; i++)
        if (n >= KNOWN[i].at + KNOWN[i].len && memcmp(d + KNOWN[i].at, KNOWN[i].magic, KNOWN[i].len) == 0)
            name = KNOWN[i].name;
    char hex[3 * 8 + 1] = "";
    size_t k = n < 8 ? n : 8, at = 0;
    for (size_t i = 0; i < k; i++) at += (size_t)snprintf(hex + at, sizeof hex - at, i ? " %02x" : "%02x", d[i]);
    if (name) snprintf(out, cap, "it starts %s, which looks like %s", hex, name);
    else snprintf(out, cap, "its first bytes are %s", hex);
}

ds_status ds_image_decode(const uint8_t *data, size_t n, const ds_image_limits *lim, ds_image *out, ds_err *e) {
    memset(out, 0, sizeof *out);
    ds_image_limits dflt;
    if (!lim) {
        ds_image_default_limits(&dflt);
        lim = &dflt;
    }
    if (n == 0) return ds_fail(e, DS_EINVAL, "image: the data is empty");
    if (n > lim->max_bytes)
        return ds_fail(e, DS_ENOMEM, "image: %zu bytes, past the limit of %zu bytes", n, lim->max_bytes);
    ds_status s;
    if (n >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff)
        s = ds_image_decode_jpeg(data, n, lim, out, e);
    else if (n >= 8 && memcmp(data, "\x89PNG\r\n\x1a\n", 8) == 0)
        s = ds_image_decode_png(data, n, lim, out, e);
    else if (n >= 6 && (memcmp(data, "GIF87a", 6) == 0 || memcmp(data, "GIF89a", 6) == 0))
        s = ds_image_decode_gif(data, n, lim, out, e);
    else if (n >= 12 && memcmp(data, "RIFF", 4) == 0 && memcmp(data + 8, "WEBP", 4) == 0)
        s = ds_image_decode_webp(data, n, lim, out, e);
    else {
        char what[160];
        describe_unknown(data, n, what, sizeof what);
        return ds_fail(e, DS_EINVAL, "image: not a JPEG, PNG, WebP or GIF file (%s)", what);
    }
    if (s != DS_OK) ds_image_free(out);
    return s;
}

ds_status ds_image_load(const char *path, const ds_image_limits *lim, ds_image *out, ds_err *e) {
    memset(out, 0, sizeof *out);
    ds_image_limits dflt;
    if (!lim) {
        ds_image_default_limits(&dflt);
        lim = &dflt;
    }
    FILE *f = fopen(path, "rb");
    if (!f) return ds_fail(e, DS_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return ds_fail(e, DS_EIO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > lim->max_bytes) {
        fclose(f);
        return ds_fail(e, DS_ENOMEM, "%s: %lld bytes, past the image limit of %zu bytes", path, (long long)st.st_size,
                       lim->max_bytes);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        fclose(f);
        return ds_fail(e, DS_ENOMEM, "%s: no memory for %zu bytes", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) {
        free(buf);
        return ds_fail(e, DS_EIO, "%s: read %zu of %zu bytes", path, got, n);
    }
    ds_status s = ds_image_decode(buf, n, lim, out, e);
    free(buf);
    if (s != DS_OK) ds_err_prefix(e, "%s", path);
    return s;
}

void ds_image_free(ds_image *im) {
    if (!im) return;
    free(im->rgb);
    im->rgb = NULL;
    im->width = im->height = 0;
}

void ds_image_hash(const ds_image *im, uint8_t out[32]) {
    ds_sha256 s;
    ds_sha256_init(&s);
    uint8_t dims[8];
    for (int i = 0; i < 4; i++) {
        dims[i] = (uint8_t)((uint32_t)im->width >> (8 * i));
        dims[4 + i] = (uint8_t)((uint32_t)im->height >> (8 * i));
    }
    ds_sha256_update(&s, dims, sizeof dims);
    if (im->rgb) ds_sha256_update(&s, im->rgb, (size_t)im->width * im->height * 3);
    char hex[65];
    ds_sha256_final_hex(&s, hex);
    for (int i = 0; i < 32; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
}
