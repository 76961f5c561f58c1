/* gblock_lowbit.c - q4_1, q5_0, q5_1, q2_K, q3_K, iq4_nl, iq4_xs, mxfp4, tq1_0 and
 * tq2_0 in the kernels' common integer form (gblock.h). */
#include "kernels/quant_int.h"

int ds_lowbit_gblock(ds_dtype t, const void *row, int64_t b, ds_gblock *out) {
    (void)row, (void)b, (void)out;
    switch (t) {
    default: return 0;
    }
}

const ds_glevels *ds_lowbit_levels(ds_dtype t) {
    switch (t) {
    default: return 0;
    }
}
