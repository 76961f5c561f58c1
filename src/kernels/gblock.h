/* gblock.h - the quantised types without a kernel of their own, in one integer
 * form that a single family of kernels computes (private to src/kernels).
 *
 * Every such type (q4_1, q5_0, q5_1, q2_K, q3_K, the iq types, mxfp4, the
 * ternary types) describes each 32-element block of a row as small integer
 * levels with integer scales per 16-element half:
 *
 *     value[i] = d * sc[h] * lv[i] + dm * mn[h],    h = i / 16
 *
 * d and dm are floats; lv, sc and mn are integers. The grid types fit
 * because their scales are odd integers times a power of two (iq2_xxs:
 * d (0.5 + ls) / 4 = (d / 8) (2 ls + 1)) and their grid values are integers
 * (iq1's +-1/8 shift becomes levels 8 g +- 1 with d / 8). The kernels read
 * this form (see kern.h NUMERICS), so the decoders below define the numbers;
 * ds_dequantize_row stays the format's own formula, tested against NumPy. */
#ifndef DS_GBLOCK_H
#define DS_GBLOCK_H

#include <stdint.h>

#include "kernels/dtype.h"

typedef struct {
    int8_t lv[32]; /* integer levels */
    int8_t sc[2];  /* integer scale of elements 0..15 and 16..31 */
    int8_t mn[2];  /* integer min of each half (0 when the type has none) */
    float d;       /* scale of sc * lv */
    float dm;      /* scale of mn (0 when the type has none) */
} ds_gblock;

/* The distinct levels a type's blocks can hold, ascending (at most 32).
 * A packer stores indices into this table. */
typedef struct {
    int count;
    int8_t lv[32];
} ds_glevels;

/* Whether type t is computed through this form. */
int ds_gblock_type(ds_dtype t);
/* The level table of a type of this form. */
const ds_glevels *ds_gblock_levels(ds_dtype t);
/* Block b (of 32 elements) of a row of type t in GGUF layout. */
void ds_gblock_decode(ds_dtype t, const void *row, int64_t b, ds_gblock *out);

#endif
