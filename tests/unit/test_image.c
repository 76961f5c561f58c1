/* test_image.c - image decoding (image.h) and preprocessing (image_prep.h).
 *
 * Decoding: every file in tests/data/images/ (made by make_images.py with
 * PIL) decodes to exactly the pixels PIL gives (NAME_EXT.rgb beside it):
 * every format, EXIF orientations 1..8, GIF transparency, alpha on white.
 * Then every bad input is refused with the format named: empty, truncated
 * at several offsets, corrupt, zero size, a decompression bomb (refused
 * before any pixel memory is taken), an unknown format, past max_bytes.
 * The hash is the same for the same pixels in two formats and differs for
 * one changed pixel. Preprocessing: smart-resize sizes, token counts and the
 * patch order on pictures whose pixel values say where they came from.
 *
 * Helper modes for tests/reference/test_image_prep.py:
 *   test_image --decode FILE OUT        OUT: u32 width, u32 height, RGB
 *   test_image --sizes P M MIN MAX      stdin "w h" lines -> "tw th tokens" or "error ..."
 *   test_image --prep IN.ppm OUT P M T MIN MAX MEAN STD
 *                                       OUT: i32 grid t, h, w, dim, then float32 patches */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"
#include "image/image_prep.h"
#include "testing.h"

static const char *root(void) {
    const char *r = getenv("DS_ROOT");
    return r && *r ? r : ".";
}

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(len > 0 ? (size_t)len : 1);
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return b;
}

static uint8_t *data_file(const char *name, size_t *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/images/%s", root(), name);
    return read_all(path, n);
}

/* decodes name and compares with the PIL pixels in its .rgb file */
static void check_against_pil(const char *name) {
    char rgbname[256];
    snprintf(rgbname, sizeof rgbname, "%s", name);
    char *dot = strrchr(rgbname, '.');
    *dot = '_';
    strcat(rgbname, ".rgb");
    size_t n, m;
    uint8_t *enc = data_file(name, &n), *want = data_file(rgbname, &m);
    if (!enc || !want || m < 8) {
        CHECK(0, "%s: missing test data (%s)", name, rgbname);
        free(enc), free(want);
        return;
    }
    uint32_t ww = want[0] | want[1] << 8 | want[2] << 16 | (uint32_t)want[3] << 24;
    uint32_t wh = want[4] | want[5] << 8 | want[6] << 16 | (uint32_t)want[7] << 24;
    ds_image im;
    ds_err e = {0};
    ds_status s = ds_image_decode(enc, n, NULL, &im, &e);
    CHECK(s == DS_OK, "%s: %s", name, e.msg);
    if (s == DS_OK) {
        CHECK(im.width == (int)ww && im.height == (int)wh, "%s: %dx%d, PIL %ux%u", name, im.width, im.height, ww, wh);
        if (im.width == (int)ww && im.height == (int)wh && m == 8 + (size_t)ww * wh * 3) {
            size_t diff = 0, first = 0;
            for (size_t i = 0; i < (size_t)ww * wh * 3; i++)
                if (im.rgb[i] != want[8 + i] && !diff++) first = i;
            CHECK(diff == 0, "%s: %zu bytes differ from PIL, first at pixel %zu (%u vs %u)", name, diff, first / 3,
                  im.rgb[first], want[8 + first]);
        }
    }
    ds_image_free(&im);
    free(enc), free(want);
}

static void test_formats_match_pil(void) {
    static const char *NAMES[] = {"pattern.png", "pattern.webp", "pattern.gif", "pattern_changed.png", "gray.png",
                                  "gray_alpha.png", "palette.png", "quadrants.jpg", "quadrants_progressive.jpg",
                                  "gray.jpg", "quadrants_lossy.webp"};
    for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++) check_against_pil(NAMES[i]);
}

static void test_alpha_on_white(void) {
    check_against_pil("alpha.png");
    check_against_pil("alpha.webp");
    /* and the values themselves: transparent is white, opaque is the colour */
    size_t n;
    uint8_t *enc = data_file("alpha.png", &n);
    REQUIRE(enc, "alpha.png missing");
    ds_image im;
    ds_err e = {0};
    REQUIRE(ds_image_decode(enc, n, NULL, &im, &e) == DS_OK, "%s", e.msg);
    free(enc);
    CHECK(im.rgb[0] == 255 && im.rgb[1] == 255 && im.rgb[2] == 255, "alpha 0 not white: %u %u %u", im.rgb[0],
          im.rgb[1], im.rgb[2]);
    const uint8_t *opaque = im.rgb + (4 + 2) * 3; /* (10, 250, 90, 255) */
    CHECK(opaque[0] == 10 && opaque[1] == 250 && opaque[2] == 90, "alpha 255 changed: %u %u %u", opaque[0],
          opaque[1], opaque[2]);
    const uint8_t *half = im.rgb + 3 * 3; /* (200, 100, 0, 128): about halfway to white */
    CHECK(half[0] > 220 && half[0] < 235 && half[1] > 170 && half[1] < 185 && half[2] > 120 && half[2] < 135,
          "alpha 128: %u %u %u", half[0], half[1], half[2]);
    ds_image_free(&im);
}

static void test_gif_transparency(void) {
    check_against_pil("transparent.gif");
    size_t n;
    uint8_t *enc = data_file("transparent.gif", &n);
    REQUIRE(enc, "transparent.gif missing");
    ds_image im;
    ds_err e = {0};
    REQUIRE(ds_image_decode(enc, n, NULL, &im, &e) == DS_OK, "%s", e.msg);
    free(enc);
    /* index 3 is pixel (3, 0) and transparent */
    CHECK(im.rgb[9] == 255 && im.rgb[10] == 255 && im.rgb[11] == 255, "transparent index not white");
    CHECK(im.rgb[12] == 120 && im.rgb[13] == 0 && im.rgb[14] == 40, "pixel (4,0) %u %u %u", im.rgb[12], im.rgb[13],
          im.rgb[14]);
    ds_image_free(&im);
}

/* the quadrant colour at (x, y) of a decoded orientation test, as the index
 * 0 red, 1 green, 2 blue, 3 yellow (-1: none of them) */
static int quadrant_at(const ds_image *im, int x, int y) {
    static const int COLS[4][3] = {{220, 30, 30}, {30, 200, 30}, {30, 30, 220}, {230, 220, 40}};
    const uint8_t *p = im->rgb + ((size_t)y * im->width + x) * 3;
    for (int i = 0; i < 4; i++)
        if (abs(p[0] - COLS[i][0]) < 24 && abs(p[1] - COLS[i][1]) < 24 && abs(p[2] - COLS[i][2]) < 24) return i;
    return -1;
}

static void test_exif_orientations(void) {
    /* the stored picture is 16x8: red green / blue yellow. What the viewer
     * should see at the four corners (top-left, top-right, bottom-left,
     * bottom-right) after each orientation's transform. */
    static const int WANT[9][4] = {
        {0}, {0, 1, 2, 3}, {1, 0, 3, 2}, {3, 2, 1, 0}, {2, 3, 0, 1},
        {0, 2, 1, 3}, {2, 0, 3, 1}, {3, 1, 2, 0}, {1, 3, 0, 2},
    };
    for (int o = 1; o <= 8; o++) {
        char name[32];
        snprintf(name, sizeof name, "orient%d.jpg", o);
        check_against_pil(name);
        size_t n;
        uint8_t *enc = data_file(name, &n);
        REQUIRE(enc, "%s missing", name);
        ds_image im;
        ds_err e = {0};
        ds_status s = ds_image_decode(enc, n, NULL, &im, &e);
        free(enc);
        REQUIRE(s == DS_OK, "%s: %s", name, e.msg);
        int ew = o >= 5 ? 8 : 16, eh = o >= 5 ? 16 : 8;
        CHECK(im.width == ew && im.height == eh, "%s: %dx%d, want %dx%d", name, im.width, im.height, ew, eh);
        if (im.width == ew && im.height == eh) {
            int got[4] = {quadrant_at(&im, 1, 1), quadrant_at(&im, ew - 2, 1), quadrant_at(&im, 1, eh - 2),
                          quadrant_at(&im, ew - 2, eh - 2)};
            CHECK(memcmp(got, WANT[o], sizeof got) == 0, "%s: corners %d %d %d %d, want %d %d %d %d", name, got[0],
                  got[1], got[2], got[3], WANT[o][0], WANT[o][1], WANT[o][2], WANT[o][3]);
        }
        ds_image_free(&im);
    }
}

/* decoding fails, with the status and a message containing each of the words */
static void expect_refusal(const char *what, const uint8_t *d, size_t n, const ds_image_limits *lim, ds_status want,
                           const char *word1, const char *word2) {
    uint8_t *copy = malloc(n ? n : 1); /* exactly n bytes, so ASan sees any read past the end */
    if (n) memcpy(copy, d, n);
    ds_image im;
    ds_err e = {0};
    ds_status s = ds_image_decode(copy, n, lim, &im, &e);
    free(copy);
    CHECK(s != DS_OK, "%s: decoded (%dx%d)", what, im.width, im.height);
    CHECK(s != DS_OK && im.rgb == NULL, "%s: pixels left after a failure", what);
    if (want != DS_OK) CHECK(s == want, "%s: status %s, want %s (%s)", what, ds_status_name(s), ds_status_name(want), e.msg);
    if (word1) CHECK(strstr(e.msg, word1) != NULL, "%s: message '%s' lacks '%s'", what, e.msg, word1);
    if (word2) CHECK(strstr(e.msg, word2) != NULL, "%s: message '%s' lacks '%s'", what, e.msg, word2);
    ds_image_free(&im);
}

static void test_empty_and_unknown(void) {
    expect_refusal("empty", (const uint8_t *)"", 0, NULL, DS_EINVAL, "empty", NULL);
    expect_refusal("bmp", (const uint8_t *)"BM\x36\0\0\0\0\0\0\0", 10, NULL, DS_EINVAL, "BMP", "42 4d");
    expect_refusal("html", (const uint8_t *)"<!DOCTYPE html><html>", 21, NULL, DS_EINVAL, "HTML", NULL);
    expect_refusal("random", (const uint8_t *)"\x01\x02\x03\x04\x05\x06\x07\x08\x09", 9, NULL, DS_EINVAL,
                   "01 02 03 04 05 06 07 08", "not a JPEG, PNG, WebP or GIF");
    expect_refusal("png signature cut", (const uint8_t *)"\x89PNG", 4, NULL, DS_EINVAL, "PNG", NULL);
    expect_refusal("riff not webp", (const uint8_t *)"RIFF\x10\0\0\0WAVEfmt ", 16, NULL, DS_EINVAL, "RIFF", NULL);
}

static void test_truncated(void) {
    static const struct { const char *name, *fmt; } FILES[] = {
        {"quadrants.jpg", "JPEG"}, {"quadrants_progressive.jpg", "JPEG"}, {"pattern.png", "PNG"},
        {"pattern.gif", "GIF"},    {"pattern.webp", "WebP"},             {"quadrants_lossy.webp", "WebP"},
        {"alpha.webp", "WebP"},
    };
    for (size_t i = 0; i < sizeof FILES / sizeof *FILES; i++) {
        size_t n;
        uint8_t *d = data_file(FILES[i].name, &n);
        REQUIRE(d, "%s missing", FILES[i].name);
        /* every cut from the first byte past the signature to the last */
        for (size_t cut = 9; cut < n - 1; cut += (n < 120 ? 1 : 7)) {
            char what[96];
            snprintf(what, sizeof what, "%s cut at %zu of %zu", FILES[i].name, cut, n);
            expect_refusal(what, d, cut, NULL, DS_OK, FILES[i].fmt, NULL);
        }
        char what[96];
        snprintf(what, sizeof what, "%s without its last 2 bytes", FILES[i].name);
        /* GIF's last bytes are the frame's block terminator and the trailer */
        expect_refusal(what, d, n - 2, NULL, DS_OK, FILES[i].fmt, NULL);
        free(d);
    }
}

/* PNG chunk CRC over type and data */
static uint32_t crc32_png(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* pattern.png with its IHDR saying w x h (CRC fixed) */
static uint8_t *png_with_size(uint32_t w, uint32_t h, size_t *n) {
    uint8_t *d = data_file("pattern.png", n);
    if (!d) return NULL;
    put_be32(d + 16, w);
    put_be32(d + 20, h);
    put_be32(d + 29, crc32_png(d + 12, 17));
    return d;
}

static void test_zero_size(void) {
    size_t n;
    uint8_t *d = png_with_size(0, 5, &n);
    REQUIRE(d, "pattern.png missing");
    expect_refusal("png width 0", d, n, NULL, DS_EINVAL, "PNG", NULL);
    free(d);
    d = data_file("pattern.gif", &n);
    REQUIRE(d, "pattern.gif missing");
    d[6] = d[7] = 0; /* logical screen width */
    expect_refusal("gif width 0", d, n, NULL, DS_EINVAL, "GIF", "zero size");
    free(d);
    d = data_file("quadrants.jpg", &n);
    REQUIRE(d, "quadrants.jpg missing");
    for (size_t i = 2; i + 9 < n; i++)
        if (d[i] == 0xff && (d[i + 1] == 0xc0 || d[i + 1] == 0xc1)) {
            d[i + 5] = d[i + 6] = 0; /* SOF height */
            break;
        }
    expect_refusal("jpeg height 0", d, n, NULL, DS_EINVAL, "JPEG", NULL);
    free(d);
}

static void test_corrupt(void) {
    size_t n;
    uint8_t *d = data_file("pattern.png", &n);
    REQUIRE(d, "pattern.png missing");
    d[n - 20] ^= 0x55; /* inside IDAT: its CRC no longer matches */
    expect_refusal("png idat byte flipped", d, n, NULL, DS_EINVAL, "PNG", NULL);
    free(d);
    d = data_file("quadrants.jpg", &n);
    REQUIRE(d, "quadrants.jpg missing");
    for (size_t i = 2; i + 9 < n; i++)
        if (d[i] == 0xff && d[i + 1] == 0xc0) {
            d[i + 9] = 7; /* seven components */
            break;
        }
    expect_refusal("jpeg bad component count", d, n, NULL, DS_EINVAL, "JPEG", NULL);
    free(d);
    d = data_file("pattern.webp", &n);
    REQUIRE(d, "pattern.webp missing");
    d[20] ^= 0xff; /* the VP8L signature byte */
    expect_refusal("webp bad signature", d, n, NULL, DS_EINVAL, "WebP", NULL);
    free(d);
    d = data_file("pattern.gif", &n);
    REQUIRE(d, "pattern.gif missing");
    /* the LZW minimum code size after the image descriptor (global table of 64 entries) */
    size_t at = 13 + 3 * 64;
    while (at + 2 < n && d[at] == 0x21) { /* an extension: introducer, label, sub-blocks, terminator */
        for (at += 2; at < n && d[at]; at += d[at] + 1u) {}
        at++;
    }
    CHECK(at < n && d[at] == 0x2c, "no image descriptor in pattern.gif");
    if (at + 10 < n) {
        d[at + 10] = 13; /* LZW code size past 12 bits */
        expect_refusal("gif bad lzw size", d, n, NULL, DS_EINVAL, "GIF", NULL);
    }
    free(d);
}

static void test_bombs_refused_before_allocating(void) {
    ds_image_limits lim;
    ds_image_default_limits(&lim);
    size_t n;
    /* 100000 x 100000 in a 83-byte file: refused from the header, with the
     * limit's status (a decode would fail on the missing data instead) */
    uint8_t *d = png_with_size(100000, 100000, &n);
    REQUIRE(d, "pattern.png missing");
    expect_refusal("png bomb", d, n, &lim, DS_ENOMEM, "PNG", "past the limit");
    free(d);
    d = data_file("pattern.gif", &n);
    REQUIRE(d, "pattern.gif missing");
    d[6] = d[7] = d[8] = d[9] = 0xff; /* 65535 x 65535 screen */
    expect_refusal("gif bomb", d, n, &lim, DS_ENOMEM, "GIF", "past the limit");
    free(d);
    d = data_file("quadrants.jpg", &n);
    REQUIRE(d, "quadrants.jpg missing");
    for (size_t i = 2; i + 9 < n; i++)
        if (d[i] == 0xff && d[i + 1] == 0xc0) {
            d[i + 5] = d[i + 7] = 0xfd, d[i + 6] = d[i + 8] = 0xe8; /* 65000 x 65000, libjpeg's largest is 65500 */
            break;
        }
    expect_refusal("jpeg bomb", d, n, &lim, DS_ENOMEM, "JPEG", "past the limit");
    free(d);
    d = data_file("pattern.webp", &n);
    REQUIRE(d, "pattern.webp missing");
    /* VP8L: 14-bit width-1 and height-1 after the signature byte at 20 */
    uint32_t bits = 16383u | 16383u << 14 | (uint32_t)(d[24] & 0xf0) << 24;
    d[21] = (uint8_t)bits, d[22] = (uint8_t)(bits >> 8), d[23] = (uint8_t)(bits >> 16), d[24] = (uint8_t)(bits >> 24);
    expect_refusal("webp bomb", d, n, &lim, DS_ENOMEM, "WebP", "past the limit");
    free(d);
    /* a small limit refuses a real picture: 7x5 = 35 pixels */
    lim.max_pixels = 34;
    d = data_file("pattern.png", &n);
    REQUIRE(d, "pattern.png missing");
    expect_refusal("png past 34 pixels", d, n, &lim, DS_ENOMEM, "PNG", "35 pixels");
    lim.max_pixels = 35;
    ds_image im;
    ds_err e = {0};
    CHECK(ds_image_decode(d, n, &lim, &im, &e) == DS_OK, "35 pixels within a 35-pixel limit: %s", e.msg);
    ds_image_free(&im);
    lim.max_bytes = n - 1;
    expect_refusal("past max_bytes", d, n, &lim, DS_ENOMEM, "bytes", NULL);
    free(d);
}

static void test_load_file(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/images/pattern.png", root());
    ds_image im;
    ds_err e = {0};
    REQUIRE(ds_image_load(path, NULL, &im, &e) == DS_OK, "%s", e.msg);
    CHECK(im.width == 7 && im.height == 5, "%dx%d", im.width, im.height);
    ds_image_free(&im);
    CHECK(ds_image_load("/nonexistent/x.png", NULL, &im, &e) == DS_EIO, "missing file");
    CHECK(strstr(e.msg, "/nonexistent/x.png") != NULL, "message '%s' lacks the path", e.msg);
}

static int hash_of(const char *name, uint8_t h[32]) {
    size_t n;
    uint8_t *d = data_file(name, &n);
    if (!d) return 0;
    ds_image im;
    ds_err e = {0};
    ds_status s = ds_image_decode(d, n, NULL, &im, &e);
    free(d);
    if (s != DS_OK) return 0;
    ds_image_hash(&im, h);
    ds_image_free(&im);
    return 1;
}

static void test_hash(void) {
    uint8_t png[32], webp[32], gif[32], changed[32], again[32];
    REQUIRE(hash_of("pattern.png", png) && hash_of("pattern.webp", webp) && hash_of("pattern.gif", gif) &&
                hash_of("pattern_changed.png", changed) && hash_of("pattern.png", again),
            "decoding the pattern files failed");
    CHECK(memcmp(png, again, 32) == 0, "the same file hashes differently");
    CHECK(memcmp(png, webp, 32) == 0, "PNG and lossless WebP of the same pixels hash differently");
    CHECK(memcmp(png, gif, 32) == 0, "PNG and GIF of the same pixels hash differently");
    CHECK(memcmp(png, changed, 32) != 0, "one changed pixel leaves the hash");
    /* the dimensions are part of the key: 35 pixels as 7x5 and 5x7 */
    uint8_t px[105] = {0}, h1[32], h2[32];
    ds_image a = {7, 5, px}, b = {5, 7, px};
    ds_image_hash(&a, h1);
    ds_image_hash(&b, h2);
    CHECK(memcmp(h1, h2, 32) != 0, "7x5 and 5x7 of the same bytes hash alike");
    /* a known digest: SHA-256 of 8 zero bytes (a 0x0 image, no pixels) */
    ds_image z = {0, 0, NULL};
    uint8_t hz[32];
    ds_image_hash(&z, hz);
    CHECK(hz[0] == 0xaf && hz[1] == 0x55 && hz[31] == 0xfc, "SHA-256 of 8 zero bytes: %02x%02x..%02x", hz[0], hz[1],
          hz[31]);
}

/* ---- preprocessing ---- */

static ds_vision_config qwen35_config(void) {
    ds_vision_config vc;
    memset(&vc, 0, sizeof vc);
    vc.patch_size = 16, vc.temporal_patch = 2, vc.merge = 2;
    vc.min_pixels = 65536, vc.max_pixels = 16777216;
    for (int c = 0; c < 3; c++) vc.image_mean[c] = 0.5f, vc.image_std[c] = 0.5f;
    return vc;
}

static void test_target_sizes(void) {
    ds_vision_config vc = qwen35_config();
    /* width, height -> want width, height (the HF processor's smart_resize) */
    static const int CASES[][4] = {
        {448, 448, 448, 448},    {1024, 1024, 1024, 1024}, {640, 480, 640, 480}, {500, 300, 512, 288},
        {32, 32, 256, 256},      {1, 200, 32, 3648},       {80, 80, 256, 256},   {48, 48, 256, 256},
        {8000, 6000, 4704, 3520}, {16, 3200, 32, 3648},
    };
    ds_err e = {0};
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        int w = 0, h = 0;
        ds_status s = ds_image_target_size(&vc, CASES[i][0], CASES[i][1], &w, &h, &e);
        CHECK(s == DS_OK && w == CASES[i][2] && h == CASES[i][3], "%dx%d -> %dx%d, want %dx%d (%s)", CASES[i][0],
              CASES[i][1], w, h, CASES[i][2], CASES[i][3], s == DS_OK ? "" : e.msg);
    }
    int w = 0, h = 0, n = 0;
    /* 48 / 32 = 1.5 and 80 / 32 = 2.5: Python's round() goes to even (2 and 2) */
    vc.min_pixels = 1;
    CHECK(ds_image_target_size(&vc, 48, 80, &w, &h, &e) == DS_OK && w == 64 && h == 64, "48x80 -> %dx%d", w, h);
    vc = qwen35_config();
    CHECK(ds_image_target_size(&vc, 201, 1, &w, &h, &e) == DS_EINVAL && strstr(e.msg, "aspect"), "201:1 accepted");
    CHECK(ds_image_target_size(&vc, 1, 200, &w, &h, &e) == DS_OK, "1:200 refused: %s", e.msg);
    CHECK(ds_image_target_size(&vc, 0, 10, &w, &h, &e) == DS_EINVAL, "zero width accepted");
    CHECK(ds_image_token_count(&vc, 448, 448, &n, &e) == DS_OK && n == 196, "448x448: %d tokens", n);
    CHECK(ds_image_token_count(&vc, 640, 480, &n, &e) == DS_OK && n == 300, "640x480: %d tokens", n);
    CHECK(ds_image_token_count(&vc, 10, 10, &n, &e) == DS_OK && n == 64, "10x10: %d tokens", n);
}

/* On a picture already of the target size (no resampling), each patch's
 * values say which pixels it holds: the order is merge group, then within
 * the group, each patch [3][2][P][P] with the frame repeated. */
static void test_patch_order(void) {
    ds_vision_config vc = qwen35_config();
    vc.patch_size = 2, vc.min_pixels = 1;
    for (int c = 0; c < 3; c++) vc.image_mean[c] = 0.0f, vc.image_std[c] = 1.0f / 255.0f;
    const int W = 12, H = 8, P = 2, M = 2; /* grid 6 x 4 patches, 3 x 2 groups */
    uint8_t px[12 * 8 * 3];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++) px[(y * W + x) * 3 + c] = (uint8_t)(c * 80 + y * W + x);
    ds_image im = {W, H, px};
    ds_image_patches p;
    ds_err e = {0};
    REQUIRE(ds_image_preprocess(&im, &vc, &p, &e) == DS_OK, "%s", e.msg);
    CHECK(p.grid_t == 1 && p.grid_h == 4 && p.grid_w == 6 && p.patch_dim == 3 * 2 * P * P, "grid %d %d %d dim %d",
          p.grid_t, p.grid_h, p.grid_w, p.patch_dim);
    int bad = 0;
    for (int g = 0; g < (H / P / M) * (W / P / M); g++)
        for (int m = 0; m < M * M; m++) {
            int gy = g / (W / P / M), gx = g % (W / P / M);
            int py = gy * M + m / M, pxx = gx * M + m % M;
            const float *v = p.patches + (size_t)(g * M * M + m) * p.patch_dim;
            for (int c = 0; c < 3; c++)
                for (int t = 0; t < 2; t++)
                    for (int r = 0; r < P; r++)
                        for (int q = 0; q < P; q++) {
                            float want = (float)(c * 80 + (py * P + r) * W + pxx * P + q);
                            float got = v[((c * 2 + t) * P + r) * P + q];
                            if (got < want - 1e-3f || got > want + 1e-3f) bad++;
                        }
        }
    CHECK(bad == 0, "%d patch values out of place", bad);
    ds_image_patches_free(&p);
    /* normalisation: (v / 255 - 0.5) / 0.5 */
    vc = qwen35_config();
    vc.patch_size = 2, vc.min_pixels = 1;
    REQUIRE(ds_image_preprocess(&im, &vc, &p, &e) == DS_OK, "%s", e.msg);
    CHECK(p.patches[0] == -1.0f, "pixel 0 -> %g", p.patches[0]);
    float want = (float)((float)(1 * (1.0 / 255.0)) - 0.5f) / 0.5f;
    CHECK(p.patches[1] == want, "pixel 1 -> %.9g, want %.9g", p.patches[1], want);
    ds_image_patches_free(&p);
}

static void test_resize_flat_and_limits(void) {
    /* a flat picture stays flat through any resize */
    ds_vision_config vc = qwen35_config();
    const int W = 37, H = 53;
    uint8_t *px = malloc(W * H * 3);
    REQUIRE(px, "no memory");
    for (int i = 0; i < W * H; i++) px[3 * i] = 10, px[3 * i + 1] = 128, px[3 * i + 2] = 250;
    ds_image im = {W, H, px};
    ds_image_patches p;
    ds_err e = {0};
    REQUIRE(ds_image_preprocess(&im, &vc, &p, &e) == DS_OK, "%s", e.msg);
    int tw, th;
    REQUIRE(ds_image_target_size(&vc, W, H, &tw, &th, &e) == DS_OK, "%s", e.msg);
    CHECK(p.grid_h == th / 16 && p.grid_w == tw / 16, "grid %dx%d for %dx%d", p.grid_h, p.grid_w, tw, th);
    float r = (float)((float)(10 * (1.0 / 255.0)) - 0.5f) / 0.5f, b = (float)((float)(250 * (1.0 / 255.0)) - 0.5f) / 0.5f;
    int bad = 0;
    size_t per = (size_t)2 * 16 * 16;
    for (size_t i = 0; i < (size_t)p.grid_h * p.grid_w; i++) {
        const float *v = p.patches + i * p.patch_dim;
        if (v[0] != r || v[per - 1] != r || v[2 * per] != b || v[3 * per - 1] != b) bad++;
    }
    CHECK(bad == 0, "%d patches not flat", bad);
    ds_image_patches_free(&p);
    im.width = 201, im.height = 1;
    CHECK(ds_image_preprocess(&im, &vc, &p, &e) == DS_EINVAL && p.patches == NULL, "201:1 preprocessed");
    free(px);
}

/* ---- helper modes for the reference test ---- */

static int mode_decode(const char *in, const char *out) {
    ds_image im;
    ds_err e = {0};
    if (ds_image_load(in, NULL, &im, &e) != DS_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    FILE *f = fopen(out, "wb");
    uint32_t dims[2] = {(uint32_t)im.width, (uint32_t)im.height};
    int ok = f && fwrite(dims, sizeof dims, 1, f) == 1 &&
             fwrite(im.rgb, 1, (size_t)im.width * im.height * 3, f) == (size_t)im.width * im.height * 3;
    if (f) fclose(f);
    ds_image_free(&im);
    return ok ? 0 : 1;
}

static int mode_sizes(char **argv) {
    ds_vision_config vc = qwen35_config();
    vc.patch_size = atoi(argv[0]), vc.merge = atoi(argv[1]);
    vc.min_pixels = atoll(argv[2]), vc.max_pixels = atoll(argv[3]);
    int w, h;
    while (scanf("%d %d", &w, &h) == 2) {
        int tw, th, n;
        ds_err e = {0};
        if (ds_image_target_size(&vc, w, h, &tw, &th, &e) != DS_OK || ds_image_token_count(&vc, w, h, &n, &e) != DS_OK)
            printf("error %s\n", e.msg);
        else
            printf("%d %d %d\n", tw, th, n);
    }
    return 0;
}

/* a binary PPM (P6, maxval 255) as written by PIL */
static int read_ppm(const char *path, ds_image *im) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    int w, h, maxv;
    if (fscanf(f, "P6 %d %d %d", &w, &h, &maxv) != 3 || maxv != 255 || fgetc(f) == EOF || w <= 0 || h <= 0) {
        fclose(f);
        return 0;
    }
    im->width = w, im->height = h;
    im->rgb = malloc((size_t)w * h * 3);
    int ok = im->rgb && fread(im->rgb, 1, (size_t)w * h * 3, f) == (size_t)w * h * 3;
    fclose(f);
    return ok;
}

static int mode_prep(char **argv) {
    ds_vision_config vc = qwen35_config();
    vc.patch_size = atoi(argv[2]), vc.merge = atoi(argv[3]), vc.temporal_patch = atoi(argv[4]);
    vc.min_pixels = atoll(argv[5]), vc.max_pixels = atoll(argv[6]);
    for (int c = 0; c < 3; c++) vc.image_mean[c] = (float)atof(argv[7]), vc.image_std[c] = (float)atof(argv[8]);
    ds_image im = {0};
    if (!read_ppm(argv[0], &im)) {
        fprintf(stderr, "%s: not a P6 PPM\n", argv[0]);
        ds_image_free(&im);
        return 1;
    }
    ds_image_patches p;
    ds_err e = {0};
    ds_status s = ds_image_preprocess(&im, &vc, &p, &e);
    ds_image_free(&im);
    if (s != DS_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    FILE *f = fopen(argv[1], "wb");
    int32_t hdr[4] = {p.grid_t, p.grid_h, p.grid_w, p.patch_dim};
    size_t cnt = (size_t)p.grid_t * p.grid_h * p.grid_w * p.patch_dim;
    int ok = f && fwrite(hdr, sizeof hdr, 1, f) == 1 && fwrite(p.patches, sizeof(float), cnt, f) == cnt;
    if (f) fclose(f);
    ds_image_patches_free(&p);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--decode") == 0) return mode_decode(argv[2], argv[3]);
    if (argc == 6 && strcmp(argv[1], "--sizes") == 0) return mode_sizes(argv + 2);
    if (argc == 11 && strcmp(argv[1], "--prep") == 0) return mode_prep(argv + 2);
    RUN(test_formats_match_pil);
    RUN(test_alpha_on_white);
    RUN(test_gif_transparency);
    RUN(test_exif_orientations);
    RUN(test_empty_and_unknown);
    RUN(test_truncated);
    RUN(test_zero_size);
    RUN(test_corrupt);
    RUN(test_bombs_refused_before_allocating);
    RUN(test_load_file);
    RUN(test_hash);
    RUN(test_target_sizes);
    RUN(test_patch_order);
    RUN(test_resize_flat_and_limits);
    return ds_test_finish();
}
