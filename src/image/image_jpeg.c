/* image_jpeg.c - JPEG through libjpeg(-turbo), with the EXIF orientation
 * (libexif) applied as PIL's ImageOps.exif_transpose does, since the
 * Hugging Face loader applies it before the processor sees the picture.
 *
 * libjpeg reports errors through a callback that must not return: it jumps
 * back here (setjmp), never exit()s. Its warnings about data ending early
 * (a truncated file, a segment cut by a marker) are errors here: it would
 * otherwise fill the missing part with grey and call the image good. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>
#include <libexif/exif-data.h>

#include "image/image_int.h"

/* A progressive file can declare any number of scans, each a pass over the
 * whole coefficient buffer: past this many the file is refused. */
#define MAX_SCANS 256

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} jpeg_fail;

static void on_error(j_common_ptr c) {
    jpeg_fail *f = (jpeg_fail *)c->err;
    c->err->format_message(c, f->msg);
    longjmp(f->jump, 1);
}

static void on_message(j_common_ptr c, int level) {
    if (level >= 0) return; /* trace messages */
    int code = c->err->msg_code;
    if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_MUST_RESYNC) on_error(c);
    c->err->num_warnings++;
}

static void on_progress(j_common_ptr c) {
    if (!c->is_decompressor) return;
    j_decompress_ptr d = (j_decompress_ptr)c;
    if (d->input_scan_number > MAX_SCANS) {
        jpeg_fail *f = (jpeg_fail *)c->err;
        snprintf(f->msg, sizeof f->msg, "more than %d progressive scans", MAX_SCANS);
        longjmp(f->jump, 1);
    }
}

/* The orientation in the first APP1 "Exif" segment's IFD0 (where PIL reads
 * it); 1 when there is none or it is not a short between 1 and 8. */
static int exif_orientation(j_decompress_ptr ci) {
    for (jpeg_saved_marker_ptr m = ci->marker_list; m; m = m->next) {
        if (m->marker != JPEG_APP0 + 1 || m->data_length < 6 || memcmp(m->data, "Exif\0\0", 6) != 0) continue;
        ExifData *ed = exif_data_new_from_data(m->data, m->data_length);
        if (!ed) return 1;
        int o = 1;
        ExifEntry *en = exif_content_get_entry(ed->ifd[EXIF_IFD_0], EXIF_TAG_ORIENTATION);
        if (en && en->format == EXIF_FORMAT_SHORT && en->components >= 1 && en->data && en->size >= 2) {
            int v = exif_get_short(en->data, exif_data_get_byte_order(ed));
            if (v >= 1 && v <= 8) o = v;
        }
        exif_data_unref(ed);
        return o;
    }
    return 1;
}

/* PIL's CMYK to RGB (Convert.c cmyk2rgb), for Adobe's four-channel JPEGs. */
static uint8_t cmyk_channel(int c, int k) {
    int nk = 255 - k, t = c * nk + 128;
    int v = nk - (((t >> 8) + t) >> 8);
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

ds_status ds_image_decode_jpeg(const uint8_t *data, size_t n, const ds_image_limits *lim, ds_image *out, ds_err *e) {
    struct jpeg_decompress_struct ci;
    jpeg_fail fail;
    struct jpeg_progress_mgr progress = {.progress_monitor = on_progress};
    uint8_t *volatile rgb = NULL;
    uint8_t *volatile row = NULL;
    memset(&ci, 0, sizeof ci);
    ci.err = jpeg_std_error(&fail.pub);
    fail.pub.error_exit = on_error;
    fail.pub.emit_message = on_message;
    fail.msg[0] = 0;
    if (setjmp(fail.jump)) {
        jpeg_destroy_decompress(&ci);
        free(rgb);
        free(row);
        return ds_fail(e, DS_EINVAL, "JPEG: %s (%zu bytes)", fail.msg, n);
    }
    jpeg_create_decompress(&ci);
    ci.progress = &progress;
    jpeg_mem_src(&ci, data, (unsigned long)n);
    jpeg_save_markers(&ci, JPEG_APP0 + 1, 0xffff);
    jpeg_read_header(&ci, TRUE);
    /* the saved markers live until jpeg_finish_decompress */
    const int orientation = exif_orientation(&ci);
    ds_status s = ds_image_check_size("JPEG", ci.image_width, ci.image_height, lim, e);
    if (s != DS_OK) {
        jpeg_destroy_decompress(&ci);
        return s;
    }
    int cmyk = ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK;
    ci.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(&ci);
    int w = (int)ci.output_width, h = (int)ci.output_height, comps = ci.output_components;
    if (comps != (cmyk ? 4 : 3)) {
        snprintf(fail.msg, sizeof fail.msg, "%d output components", comps);
        longjmp(fail.jump, 1);
    }
    rgb = malloc((size_t)w * h * 3);
    row = malloc((size_t)w * 4);
    if (!rgb || !row) {
        snprintf(fail.msg, sizeof fail.msg, "no memory for %dx%d pixels", w, h);
        longjmp(fail.jump, 1);
    }
    /* PIL reads every CMYK JPEG inverted ("CMYK;I", Adobe's convention) */
    int inverted = cmyk;
    while (ci.output_scanline < ci.output_height) {
        uint8_t *dst = rgb + (size_t)ci.output_scanline * w * 3;
        JSAMPROW r = cmyk ? row : dst;
        if (jpeg_read_scanlines(&ci, &r, 1) != 1) {
            snprintf(fail.msg, sizeof fail.msg, "no data for row %u", ci.output_scanline);
            longjmp(fail.jump, 1);
        }
        if (cmyk)
            for (int x = 0; x < w; x++) {
                int c[4];
                for (int k = 0; k < 4; k++) c[k] = inverted ? 255 - row[4 * x + k] : row[4 * x + k];
                for (int k = 0; k < 3; k++) dst[3 * x + k] = cmyk_channel(c[k], c[3]);
            }
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    free(row);
    out->width = w;
    out->height = h;
    out->rgb = rgb;
    return ds_image_orient(out, orientation, e);
}
