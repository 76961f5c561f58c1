/* model_make_vision.h - make-model's vision tower (model_make.h's
 * --mmproj / --vision): the config of a shape's tower, its deterministic
 * random values, and the mmproj GGUF llama.cpp's mtmd loads. */
#ifndef DS_MODEL_MAKE_VISION_H
#define DS_MODEL_MAKE_VISION_H

#include "loading/vision_file.h"
#include "model/model_make.h"

/* The tower of o->shape for a text model of config text, with
 * o->vision_layers and o->deepstack applied and checked. */
ds_status ds_make_vision_config(const ds_make_options *o, const ds_model_config *text, ds_vision_config *vc,
                                ds_err *e);
/* The tower's tensor specs, in file order (free with free()). */
ds_status ds_make_vision_specs(const ds_vision_config *vc, ds_tensor_spec **specs, int *n, ds_err *e);
/* Elements of a (up to 4-D) spec. */
int64_t ds_make_vision_elems(const ds_tensor_spec *s);
/* The values make-model writes for tensor s (canonical form, ggml order;
 * ds_make_vision_elems floats), from the seed and the tensor's name. */
void ds_make_vision_values(const ds_vision_config *vc, const ds_tensor_spec *s, uint64_t seed, float scale, float *dst);
/* The type tensor s gets in an mmproj GGUF written with --dtype dtype. */
ds_dtype ds_make_vision_type(const ds_tensor_spec *s, const char *dtype);
/* Writes the tower as an mmproj GGUF file at path. */
ds_status ds_make_vision_gguf(const ds_make_options *o, const ds_vision_config *vc, const char *path, ds_err *e);

#endif
