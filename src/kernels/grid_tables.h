/* grid_tables.h - the codebooks of the grid ("iq") weight types (private to
 * src/kernels).
 *
 * These numbers are part of the GGUF file format: an iq block stores indices
 * into them, so they must be exactly ggml's. Each entry packs one group of 8
 * (iq2, iq1) or 4 (iq3) grid values, element j in byte j (little-endian
 * order): iq2 bytes are 8, 25 or 43; iq3_xxs bytes 4, 12, .., 52, 62; iq3_s
 * bytes 1, 3, .., 15; iq1 bytes are int8 -1, 0 or 1. */
#ifndef DS_GRID_TABLES_H
#define DS_GRID_TABLES_H

#include <stdint.h>

/* Sign masks of 8 elements stored in 7 bits: entry i is i with bit 7 set when
 * i has an odd number of bits, so every mask has an even number of negative
 * elements (iq2_xxs, iq2_xs, iq3_xxs). Bit j set negates element j. */
extern const uint8_t ds_grid_ksigns[128];

extern const uint64_t ds_grid_iq2xxs[256];
extern const uint64_t ds_grid_iq2xs[512];
extern const uint64_t ds_grid_iq2s[1024];
extern const uint32_t ds_grid_iq3xxs[256];
extern const uint32_t ds_grid_iq3s[512];
extern const uint64_t ds_grid_iq1s[2048]; /* iq1_s and iq1_m */

/* iq1_s and iq1_m add +-1/8 (sign from a bit of the block) to every grid value. */
#define DS_IQ1S_DELTA 0.125f
#define DS_IQ1M_DELTA 0.125f

#endif
