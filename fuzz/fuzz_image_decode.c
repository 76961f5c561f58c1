/* fuzz_image_decode.c - ds_image_decode on arbitrary bytes (JPEG, PNG, WebP,
 * GIF or none of them), under a pixel budget small enough that a hostile
 * header cannot make a run slow; then, for a picture that decodes, its hash
 * and its preprocessing for a small tower. Beyond "no crash, no leak, no
 * UB": a refusal has a message and leaves no pixels; a picture is within the
 * budget and every byte of it is readable; the patches have the grid smart
 * resize promised and every value within the normalised range. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "image/image.h"
#include "image/image_prep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* a copy of exactly size bytes, so ASan flags any read past the end */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    ds_image_limits lim;
    ds_image_default_limits(&lim);
    lim.max_pixels = 1 << 20;
    ds_image im;
    ds_err e = {0};
    ds_status s = ds_image_decode(buf, size, &lim, &im, &e);
    free(buf);
    if (s != DS_OK) {
        FUZZ_CHECK(e.msg[0] != 0, "decode failed without a message");
        FUZZ_CHECK(im.rgb == NULL, "pixels left after a failure");
        return 0;
    }
    FUZZ_CHECK(im.width > 0 && im.height > 0 && (int64_t)im.width * im.height <= lim.max_pixels,
               "decoded %dx%d past the budget", im.width, im.height);
    fuzz_touch(im.rgb);
    fuzz_touch(im.rgb + (size_t)im.width * im.height * 3 - 1);
    uint8_t h[32];
    ds_image_hash(&im, h);

    ds_vision_config vc;
    memset(&vc, 0, sizeof vc);
    vc.patch_size = 4, vc.temporal_patch = 2, vc.merge = 2;
    vc.min_pixels = 64, vc.max_pixels = 4096;
    for (int c = 0; c < 3; c++) vc.image_mean[c] = 0.5f, vc.image_std[c] = 0.5f;
    int tw = 0, th = 0;
    ds_image_patches p;
    if (ds_image_target_size(&vc, im.width, im.height, &tw, &th, &e) == DS_OK) {
        FUZZ_CHECK(tw > 0 && th > 0 && tw % 8 == 0 && th % 8 == 0, "target %dx%d", tw, th);
        FUZZ_CHECK(ds_image_preprocess(&im, &vc, &p, &e) == DS_OK, "preprocess failed: %s", e.msg);
        FUZZ_CHECK(p.grid_t == 1 && p.grid_h == th / 4 && p.grid_w == tw / 4 && p.patch_dim == 3 * 2 * 4 * 4,
                   "grid %d %d %d dim %d for %dx%d", p.grid_t, p.grid_h, p.grid_w, p.patch_dim, tw, th);
        size_t n = (size_t)p.grid_h * p.grid_w * p.patch_dim;
        for (size_t i = 0; i < n; i++)
            FUZZ_CHECK(p.patches[i] >= -1.0f && p.patches[i] <= 1.0f, "patch value %g at %zu", p.patches[i], i);
        ds_image_patches_free(&p);
    } else {
        FUZZ_CHECK(e.msg[0] != 0, "target size failed without a message");
    }
    ds_image_free(&im);
    return 0;
}
