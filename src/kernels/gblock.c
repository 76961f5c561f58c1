/* gblock.c - which types take the common integer form, and the decoder of each. */
#include "kernels/gblock.h"

#include "kernels/quant_int.h"

int ds_gblock_type(ds_dtype t) { return ds_gblock_levels(t) != 0; }

const ds_glevels *ds_gblock_levels(ds_dtype t) {
    const ds_glevels *l = ds_lowbit_levels(t);
    return l ? l : ds_grid_levels(t);
}

void ds_gblock_decode(ds_dtype t, const void *row, int64_t b, ds_gblock *out) {
    if (!ds_lowbit_gblock(t, row, b, out)) ds_grid_gblock(t, row, b, out);
}
