/* mrope.c - M-RoPE positions of a prompt with images (mrope.h).
 *
 * Hugging Face's get_rope_index (Qwen3-VL, inherited by Qwen3.5) walks the
 * prompt in pieces: a run of text counts on from the largest position used so
 * far plus one; an image of merged grid t x h x w starting right after text
 * whose next position would be s takes (s + ti, s + hi, s + wi) for its
 * tokens in t, h, w order. Qwen3-VL marks time in videos with timestamp text
 * and gives every frame t = 1, so an image (one temporal patch pair) has
 * t index 0; a grid with t > 1 counts ti = 0..t-1 like the other axes. */
#include "model/mrope.h"

#include <stddef.h>

ds_status ds_mrope_positions(int n, const ds_mrope_image *imgs, int n_imgs, int32_t *pos, int *delta, ds_err *e) {
    if (n < 0 || n_imgs < 0) return ds_fail(e, DS_EINVAL, "M-RoPE: %d tokens and %d images", n, n_imgs);
    int next = 0; /* the position the next text token takes on every axis */
    int i = 0;
    for (int k = 0; k <= n_imgs; k++) {
        int first = n;
        if (k < n_imgs) {
            const ds_mrope_image *im = &imgs[k];
            if (im->grid_t < 1 || im->grid_h < 1 || im->grid_w < 1)
                return ds_fail(e, DS_EINVAL, "M-RoPE: image %d has a grid of %d x %d x %d", k, im->grid_t, im->grid_h,
                               im->grid_w);
            int64_t len = (int64_t)im->grid_t * im->grid_h * im->grid_w;
            if (im->first < i || im->first > n || len > n - im->first)
                return ds_fail(e, DS_EINVAL,
                               "M-RoPE: image %d (tokens %d..%lld) is out of order or outside the prompt of %d tokens",
                               k, im->first, (long long)(im->first + len - 1), n);
            first = im->first;
        }
        for (; i < first; i++, next++) pos[3 * (size_t)i] = pos[3 * (size_t)i + 1] = pos[3 * (size_t)i + 2] = next;
        if (k == n_imgs) break;
        const ds_mrope_image *im = &imgs[k];
        for (int t = 0; t < im->grid_t; t++)
            for (int h = 0; h < im->grid_h; h++)
                for (int w = 0; w < im->grid_w; w++, i++) {
                    pos[3 * (size_t)i] = next + t;
                    pos[3 * (size_t)i + 1] = next + h;
                    pos[3 * (size_t)i + 2] = next + w;
                }
        int span = im->grid_t > im->grid_h ? im->grid_t : im->grid_h;
        span = span > im->grid_w ? span : im->grid_w;
        next += span; /* the largest position used plus one */
    }
    *delta = next - n;
    return DS_OK;
}
