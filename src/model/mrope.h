/* mrope.h - the three-axis positions (M-RoPE) of a prompt with images, as
 * Hugging Face's get_rope_index gives them for Qwen3-VL and Qwen3.5.
 *
 * Text tokens have one position on all three axes, counting on from the
 * previous token. An image whose merged grid is t x h x w (tokens in that
 * order) starting after text position s has positions (s+1+ti, s+1+hi, s+1+wi);
 * the text after it continues from the largest of those plus one. So past
 * the prompt, sequence position p has rope position p + delta on every axis,
 * delta <= 0 (the decode and speculation need only that number). */
#ifndef DS_MROPE_H
#define DS_MROPE_H

#include <stdint.h>

#include "common/status.h"

typedef struct {
    int first;                  /* its first token in the prompt */
    int grid_t, grid_h, grid_w; /* merged grid: t x h x w tokens */
} ds_mrope_image;

/* Fills pos[n][3] for a prompt of n tokens whose images (in order, not
 * overlapping, inside the prompt) are imgs, and *delta for what follows.
 * Fails, naming the image, when they are out of order or out of range. */
ds_status ds_mrope_positions(int n, const ds_mrope_image *imgs, int n_imgs, int32_t *pos, int *delta, ds_err *e);

#endif
