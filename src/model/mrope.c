/* mrope.c - M-RoPE positions of a prompt with images (mrope.h). */
#include "model/mrope.h"

ds_status ds_mrope_positions(int n, const ds_mrope_image *imgs, int n_imgs, int32_t *pos, int *delta, ds_err *e) {
    (void)n, (void)imgs, (void)n_imgs, (void)pos, (void)delta;
    return ds_fail(e, DS_EUNSUPPORTED, "M-RoPE positions are not built yet");
}
