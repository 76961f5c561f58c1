/* vision_file_int.h - what the vision tower's loaders (GGUF, Hugging Face)
 * and make-model share inside the loading layer. */
#ifndef DS_VISION_FILE_INT_H
#define DS_VISION_FILE_INT_H

#include "loading/model_file_int.h"
#include "loading/vision_file.h"

struct ds_vision_file {
    ds_vision_config cfg;
    ds_model_file *m;    /* path, format, tensor table, owned buffers, the mapped file or shards */
};

/* The config fields a check can find wrong, named as each format calls them. */
typedef enum {
    DS_VF_LAYERS, DS_VF_EMBD, DS_VF_HEADS, DS_VF_FF, DS_VF_PATCH, DS_VF_MERGE, DS_VF_POS, DS_VF_OUT,
    DS_VF_DEEPSTACK, DS_VF_EPS, DS_VF_MEAN, DS_VF_STD, DS_VF_PIXELS, DS_VF_COUNT
} ds_vision_field;

/* Values that cannot be right (zero sizes, heads that do not divide the
 * width, DeepStack blocks out of range); names the field by names[field]. */
ds_status ds_vision_config_check(const ds_vision_config *vc, const char *path, const char *const names[DS_VF_COUNT],
                                 ds_err *e);
/* 1 when a tower with this config has a tensor of this name. */
int ds_vision_spec_has(const ds_vision_config *vc, const char *name);
/* Checks every tensor against the config (shapes, types; norms, biases and
 * the embeddings become F32), and that there is no tensor it does not explain. */
ds_status ds_vision_validate(ds_vision_file *v, ds_err *e);

ds_status ds_vision_load_gguf(ds_vision_file *v, ds_err *e);
ds_status ds_vision_load_hf(ds_vision_file *v, const char *dir, ds_err *e);
/* How a canonical (mmproj) tensor is stored in a Hugging Face checkpoint. */
enum { DS_VH_PLAIN, DS_VH_PATCH0, DS_VH_PATCH1 }; /* PATCHt: frame t of the Conv3D [D, 3, 2, P, P] */
/* Writes the name after "model.visual." of canonical tensor `name` of a
 * tower with config vc; returns its DS_VH_* form, or -1 for a name that is
 * not the tower's. Shared by the loader and make-model. */
int ds_vision_hf_name(const ds_vision_config *vc, const char *name, char *hf, size_t n);
/* 1 when the config.json at path has a vision_config object. */
int ds_vision_hf_has_config(const char *config_json);

#endif
