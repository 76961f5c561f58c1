/* model_shapes.h - named model configurations for make-model: small test
 * shapes and the real Qwen3.5 / Qwen3 shapes (docs/model.md §1.2). */
#ifndef DS_MODEL_SHAPES_H
#define DS_MODEL_SHAPES_H

#include "loading/model_file.h"

typedef struct {
    const char *name;
    const char *description;
    ds_model_config cfg;     /* layer_full is derived from full_attn_interval */
    int n_vocab_regular;     /* BPE tokens of the generated tokenizer (specials come after) */
} ds_model_shape;

const ds_model_shape *ds_model_shape_find(const char *name);
int ds_model_shape_count(void);
const ds_model_shape *ds_model_shape_at(int i);
/* Fills cfg from a shape, overriding the layer count when n_layers > 0 and
 * the vocabulary rows with n_vocab (a multiple of 64 at least the tokenizer's). */
void ds_model_shape_config(const ds_model_shape *s, int n_layers, ds_model_config *cfg);

#endif
