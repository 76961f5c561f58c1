/* cli_image.h - `generate --image`: pictures made into the prompt the model
 * runs, without the server: each image decoded, preprocessed and encoded by
 * the vision tower, <|vision_start|><|image_pad|><|vision_end|> put before the
 * prompt text once per image (the place Qwen's chat template gives an image
 * at the start of a user turn), each pad expanded to the image's tokens, and
 * the M-RoPE positions of the whole prompt. */
#ifndef DS_CLI_IMAGE_H
#define DS_CLI_IMAGE_H

#include <stdint.h>

#include "cli/cli_model.h"

typedef struct {
    int32_t *tokens;        /* [n] the prompt with every image's tokens */
    int n;
    int32_t *rope;          /* [n][3] M-RoPE positions */
    const float **embd;     /* [n] an image row, or NULL for text */
    float *rows;            /* every image's rows, [image tokens][E * (1 + n_deepstack)] */
    int n_deepstack;
    int delta;              /* past the prompt, position p turns by p + delta on every axis */
} ds_cli_image_prompt;

/* Builds the prompt for text and the images at paths, with the tower of
 * cm->vision_file (bound to cm->vision here when it is not yet: the caller
 * frees it with ds_vision_free). Prints the error (naming the image) and
 * returns non-zero on failure: 2 for bad input, 1 otherwise. */
int ds_cli_image_prompt_build(ds_cli_model *cm, const char *cmd, const char *const *paths, int n_paths,
                              const char *text, ds_cli_image_prompt *out);
void ds_cli_image_prompt_free(ds_cli_image_prompt *p);

#endif
