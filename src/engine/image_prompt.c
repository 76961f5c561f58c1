/* image_prompt.c - expanding each image's pad token (image_prompt.h). */
#include "engine/image_prompt.h"

ds_status ds_image_prompt_expand(const int32_t *in, int n_in, int32_t pad_id, const int *n_tokens, int n_images,
                                 int32_t *out, int out_cap, int *n_out, int *firsts, ds_err *e) {
    int k = 0, n = 0;
    for (int i = 0; i < n_in; i++) {
        if (in[i] != pad_id) {
            if (n >= out_cap) return ds_fail(e, DS_EINVAL, "prompt: longer than %d tokens with its images", out_cap);
            out[n++] = in[i];
            continue;
        }
        if (k >= n_images)
            return ds_fail(e, DS_EINVAL, "prompt: has more image places than the %d image(s) sent", n_images);
        if (n_tokens[k] < 1 || n_tokens[k] > out_cap - n)
            return ds_fail(e, DS_EINVAL, "prompt: longer than %d tokens with image %d's %d tokens", out_cap, k + 1,
                           n_tokens[k]);
        firsts[k] = n;
        for (int j = 0; j < n_tokens[k]; j++) out[n++] = pad_id;
        k++;
    }
    if (k != n_images)
        return ds_fail(e, DS_EINVAL, "prompt: has %d image place(s) for %d image(s) sent", k, n_images);
    *n_out = n;
    return DS_OK;
}
