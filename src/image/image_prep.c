/* image_prep.c - smart resize, normalisation and patches (image_prep.h). */
#include "image/image_prep.h"

#include <stdlib.h>
#include <string.h>

ds_status ds_image_target_size(const ds_vision_config *vc, int width, int height, int *out_w, int *out_h, ds_err *e) {
    (void)vc, (void)width, (void)height, (void)out_w, (void)out_h;
    return ds_fail(e, DS_EUNSUPPORTED, "image: preprocessing is not built yet");
}
ds_status ds_image_token_count(const ds_vision_config *vc, int width, int height, int *n_tokens, ds_err *e) {
    (void)vc, (void)width, (void)height, (void)n_tokens;
    return ds_fail(e, DS_EUNSUPPORTED, "image: preprocessing is not built yet");
}
ds_status ds_image_preprocess(const ds_image *im, const ds_vision_config *vc, ds_image_patches *out, ds_err *e) {
    (void)im, (void)vc;
    memset(out, 0, sizeof *out);
    return ds_fail(e, DS_EUNSUPPORTED, "image: preprocessing is not built yet");
}
void ds_image_patches_free(ds_image_patches *p) {
    if (!p) return;
    free(p->patches);
    p->patches = NULL;
}
