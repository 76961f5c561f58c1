/* image_prep.h - a decoded image made into the vision tower's input, as the
 * Hugging Face Qwen2-VL / Qwen3-VL image processor does it.
 *
 *   1. smart resize: both sides become multiples of factor = patch x merge
 *      (32), rounded to the nearest, with the aspect ratio kept and the pixel
 *      count brought within [min_pixels, max_pixels];
 *   2. resampled (bicubic, as the processor's PIL resize), scaled to [0,1],
 *      normalised with the tower's image_mean / image_std;
 *   3. cut into P x P patches; the frame is repeated to fill the temporal
 *      patch, so one image is grid_t = 1;
 *   4. patches ordered as the processor flattens them: by 2x2 merge group
 *      (row of groups, column of groups), then within the group (row, column),
 *      each patch a vector [3][temporal][P][P] (channel, frame, row, column),
 *      which is the Conv3D weight's input order.
 * The merged token of group g is therefore made of patches 4g .. 4g+3. */
#ifndef DS_IMAGE_PREP_H
#define DS_IMAGE_PREP_H

#include <stdint.h>

#include "common/status.h"
#include "image/image.h"
#include "loading/vision_file.h"

typedef struct {
    int grid_t, grid_h, grid_w;   /* in patches (grid_h, grid_w multiples of merge) */
    int patch_dim;                /* 3 x temporal x P x P */
    float *patches;               /* [grid_t * grid_h * grid_w][patch_dim], owned */
} ds_image_patches;

/* The size smart resize gives an image of width x height. Fails (naming the
 * sizes) when the aspect ratio is past 200, as the processor refuses it. */
ds_status ds_image_target_size(const ds_vision_config *vc, int width, int height, int *out_w, int *out_h, ds_err *e);
/* Text tokens an image of width x height becomes (grid_h x grid_w / merge^2). */
ds_status ds_image_token_count(const ds_vision_config *vc, int width, int height, int *n_tokens, ds_err *e);

ds_status ds_image_preprocess(const ds_image *im, const ds_vision_config *vc, ds_image_patches *out, ds_err *e);
void ds_image_patches_free(ds_image_patches *p);

#endif
