/* image_gif.c - the first frame of a GIF through giflib, read record by
 * record from memory (never DGifSlurp, which would decode every frame of
 * an animation). As PIL does: the frame lies on the logical screen (grown
 * to hold the frame if it pokes out); the rest of the screen is the
 * transparent index when the frame has one, else index 0; the transparent
 * index becomes white. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gif_lib.h>

#include "image/image_int.h"

typedef struct {
    const uint8_t *data;
    size_t n, pos;
} gif_source;

static int on_read(GifFileType *g, GifByteType *buf, int len) {
    gif_source *src = g->UserData;
    size_t k = len < 0 ? 0 : (size_t)len;
    if (k > src->n - src->pos) k = src->n - src->pos;
    memcpy(buf, src->data + src->pos, k);
    src->pos += k;
    return (int)k;
}

static ds_status gif_fail(GifFileType *g, const gif_source *src, const char *what, ds_err *e) {
    int code = g ? g->Error : 0;
    const char *why = code ? GifErrorString(code) : NULL;
    return ds_fail(e, DS_EINVAL, "GIF: %s: %s (at byte %zu of %zu)", what, why ? why : "corrupt data", src->pos, src->n);
}

/* Reads the frame's rows onto the canvas (stride cw), in the order an
 * interlaced frame stores them when it is one. */
static int read_rows(GifFileType *g, uint8_t *canvas, int cw, int x0, int y0, int fw, int fh, int interlaced) {
    static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    int passes = interlaced ? 4 : 1;
    for (int p = 0; p < passes; p++)
        for (int y = interlaced ? start[p] : 0; y < fh; y += interlaced ? step[p] : 1)
            if (DGifGetLine(g, canvas + (size_t)(y0 + y) * cw + x0, fw) != GIF_OK) return 0;
    return 1;
}

ds_status ds_image_decode_gif(const uint8_t *data, size_t n, const ds_image_limits *lim, ds_image *out, ds_err *e) {
    gif_source src = {.data = data, .n = n};
    int err = 0;
    GifFileType *g = DGifOpen(&src, on_read, &err);
    if (!g) {
        const char *why = GifErrorString(err);
        return ds_fail(e, DS_EINVAL, "GIF: reading the header: %s (at byte %zu of %zu)", why ? why : "corrupt data",
                       src.pos, n);
    }
    ds_status s = ds_image_check_size("GIF", g->SWidth, g->SHeight, lim, e);
    int transparent = -1;
    uint8_t *canvas = NULL;
    int cw = 0, ch = 0;
    while (s == DS_OK && !canvas) {
        GifRecordType type;
        if (DGifGetRecordType(g, &type) != GIF_OK) {
            s = gif_fail(g, &src, "reading a record", e);
            break;
        }
        if (type == TERMINATE_RECORD_TYPE) {
            s = ds_fail(e, DS_EINVAL, "GIF: the file ends without an image (at byte %zu)", src.pos);
        } else if (type == EXTENSION_RECORD_TYPE) {
            int code;
            GifByteType *ext = NULL;
            if (DGifGetExtension(g, &code, &ext) != GIF_OK) {
                s = gif_fail(g, &src, "reading an extension", e);
                break;
            }
            if (code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4) {
                GraphicsControlBlock gcb;
                if (DGifExtensionToGCB(ext[0], ext + 1, &gcb) == GIF_OK) transparent = gcb.TransparentColor;
            }
            while (ext)
                if (DGifGetExtensionNext(g, &ext) != GIF_OK) {
                    s = gif_fail(g, &src, "reading an extension", e);
                    break;
                }
        } else if (type == IMAGE_DESC_RECORD_TYPE) {
            if (DGifGetImageDesc(g) != GIF_OK) {
                s = gif_fail(g, &src, "reading the image descriptor", e);
                break;
            }
            const GifImageDesc *d = &g->Image;
            int64_t x1 = (int64_t)d->Left + d->Width, y1 = (int64_t)d->Top + d->Height;
            if (d->Width <= 0 || d->Height <= 0) {
                s = ds_fail(e, DS_EINVAL, "GIF: the first frame is %dx%d pixels (zero size)", d->Width, d->Height);
                break;
            }
            int64_t w = x1 > g->SWidth ? x1 : g->SWidth, h = y1 > g->SHeight ? y1 : g->SHeight;
            if ((s = ds_image_check_size("GIF", w, h, lim, e)) != DS_OK) break;
            cw = (int)w, ch = (int)h;
            canvas = malloc((size_t)cw * ch);
            if (!canvas) {
                s = ds_fail(e, DS_ENOMEM, "GIF: no memory for %dx%d pixels", cw, ch);
                break;
            }
            memset(canvas, transparent >= 0 ? transparent : 0, (size_t)cw * ch);
            if (!read_rows(g, canvas, cw, d->Left, d->Top, d->Width, d->Height, d->Interlace))
                s = gif_fail(g, &src, "reading the first frame", e);
        } else {
            s = ds_fail(e, DS_EINVAL, "GIF: unknown record type (at byte %zu)", src.pos);
        }
    }
    uint8_t *rgb = NULL;
    if (s == DS_OK) {
        /* the frame's own palette, else the global one; none: grey levels (PIL's mode "L") */
        const ColorMapObject *map = g->Image.ColorMap ? g->Image.ColorMap : g->SColorMap;
        rgb = malloc((size_t)cw * ch * 3);
        if (!rgb) s = ds_fail(e, DS_ENOMEM, "GIF: no memory for %dx%d pixels", cw, ch);
        for (size_t i = 0; rgb && i < (size_t)cw * ch; i++) {
            int idx = canvas[i];
            uint8_t *px = rgb + 3 * i;
            if (idx == transparent) px[0] = px[1] = px[2] = 255;
            else if (!map) px[0] = px[1] = px[2] = (uint8_t)idx;
            else if (idx < map->ColorCount)
                px[0] = map->Colors[idx].Red, px[1] = map->Colors[idx].Green, px[2] = map->Colors[idx].Blue;
            else
                px[0] = px[1] = px[2] = 0;
        }
    }
    free(canvas);
    DGifCloseFile(g, &err);
    if (s != DS_OK) {
        free(rgb);
        return s;
    }
    out->rgb = rgb;
    out->width = cw;
    out->height = ch;
    return DS_OK;
}
