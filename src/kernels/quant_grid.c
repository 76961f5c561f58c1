/* quant_grid.c - the grid types: iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m:
 * dequantisation (the format's formula), quantisation, and the common integer form. */
#include "kernels/quant_int.h"

int ds_grid_dequantize(ds_dtype t, const void *src, float *dst, int64_t n) {
    (void)src, (void)dst, (void)n;
    switch (t) {
    default: return 0;
    }
}

int ds_grid_quantize(ds_dtype t, const float *src, void *dst, int64_t n) {
    (void)src, (void)dst, (void)n;
    switch (t) {
    default: return 0;
    }
}

int ds_grid_gblock(ds_dtype t, const void *row, int64_t b, ds_gblock *out) {
    (void)row, (void)b, (void)out;
    switch (t) {
    default: return 0;
    }
}

const ds_glevels *ds_grid_levels(ds_dtype t) {
    switch (t) {
    default: return 0;
    }
}
