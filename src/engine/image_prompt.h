/* image_prompt.h - a rendered prompt whose images each appear as one
 * <|image_pad|> token (as the chat template writes them), made into the
 * prompt the model runs: each pad repeated once per text token of its image. */
#ifndef DS_IMAGE_PROMPT_H
#define DS_IMAGE_PROMPT_H

#include <stdint.h>

#include "common/status.h"

/* Replaces the k-th pad_id of in[0..n_in) by n_tokens[k] copies and writes
 * where they start to firsts[k]. out has room for out_cap tokens. Fails when
 * the number of pads is not n_images (naming both counts) or out is too small. */
ds_status ds_image_prompt_expand(const int32_t *in, int n_in, int32_t pad_id, const int *n_tokens, int n_images,
                                 int32_t *out, int out_cap, int *n_out, int *firsts, ds_err *e);

#endif
