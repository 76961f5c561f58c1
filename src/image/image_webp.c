/* image_webp.c - WebP through libwebp: a still image (lossy or lossless,
 * with or without alpha) by WebPDecode into a buffer sized from
 * WebPGetFeatures, an animation's first frame through libwebpdemux's
 * WebPAnimDecoder (as PIL reads WebP), alpha then composited on white. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <webp/decode.h>
#include <webp/demux.h>

#include "image/image_int.h"

static const char *status_text(VP8StatusCode st) {
    switch (st) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "corrupt bitstream";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "truncated (not enough data)";
    default: return "failed";
    }
}

static ds_status first_frame(const uint8_t *data, size_t n, int w, int h, uint8_t *rgba, ds_err *e) {
    WebPData wd = {data, n};
    WebPAnimDecoderOptions opt;
    if (!WebPAnimDecoderOptionsInit(&opt)) return ds_fail(e, DS_EINVAL, "WebP: libwebpdemux version mismatch");
    opt.color_mode = MODE_RGBA;
    opt.use_threads = 0;
    WebPAnimDecoder *dec = WebPAnimDecoderNew(&wd, &opt);
    if (!dec) return ds_fail(e, DS_EINVAL, "WebP: corrupt or truncated animation (%zu bytes)", n);
    WebPAnimInfo info;
    uint8_t *frame = NULL;
    int ts = 0;
    ds_status s = DS_OK;
    if (!WebPAnimDecoderGetInfo(dec, &info) || (int)info.canvas_width != w || (int)info.canvas_height != h)
        s = ds_fail(e, DS_EINVAL, "WebP: the animation's canvas does not match its header (%dx%d)", w, h);
    else if (!WebPAnimDecoderGetNext(dec, &frame, &ts) || !frame)
        s = ds_fail(e, DS_EINVAL, "WebP: the first frame of the animation is corrupt or truncated (%zu bytes)", n);
    else
        memcpy(rgba, frame, (size_t)w * h * 4);
    WebPAnimDecoderDelete(dec);
    return s;
}

ds_status ds_image_decode_webp(const uint8_t *data, size_t n, const ds_image_limits *lim, ds_image *out, ds_err *e) {
    WebPBitstreamFeatures f;
    VP8StatusCode st = WebPGetFeatures(data, n, &f);
    if (st != VP8_STATUS_OK) return ds_fail(e, DS_EINVAL, "WebP: header %s (%zu bytes)", status_text(st), n);
    ds_status s = ds_image_check_size("WebP", f.width, f.height, lim, e);
    if (s != DS_OK) return s;
    int w = f.width, h = f.height;
    size_t size = (size_t)w * h * 4;
    uint8_t *buf = malloc(size);
    if (!buf) return ds_fail(e, DS_ENOMEM, "WebP: no memory for %dx%d pixels", w, h);
    if (f.has_animation) {
        s = first_frame(data, n, w, h, buf, e);
    } else {
        WebPDecoderConfig cfg;
        if (!WebPInitDecoderConfig(&cfg)) {
            free(buf);
            return ds_fail(e, DS_EINVAL, "WebP: libwebp version mismatch");
        }
        cfg.output.colorspace = MODE_RGBA;
        cfg.output.is_external_memory = 1;
        cfg.output.u.RGBA.rgba = buf;
        cfg.output.u.RGBA.stride = w * 4;
        cfg.output.u.RGBA.size = size;
        st = WebPDecode(data, n, &cfg);
        if (st != VP8_STATUS_OK) s = ds_fail(e, DS_EINVAL, "WebP: %s (%zu bytes)", status_text(st), n);
        else if (cfg.output.width != w || cfg.output.height != h)
            s = ds_fail(e, DS_EINVAL, "WebP: decoded %dx%d, the header says %dx%d", cfg.output.width,
                        cfg.output.height, w, h);
        WebPFreeDecBuffer(&cfg.output);
    }
    if (s != DS_OK) {
        free(buf);
        return s;
    }
    ds_image_rgba_to_rgb(buf, (size_t)w * h);
    uint8_t *rgb = realloc(buf, (size_t)w * h * 3);
    out->rgb = rgb ? rgb : buf;
    out->width = w;
    out->height = h;
    return DS_OK;
}
