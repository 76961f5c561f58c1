/* vision_file.h - the vision tower of a Qwen3-VL / Qwen3.5 / Qwen3.6 model,
 * whatever file it came from.
 *
 * llama.cpp's converter writes the tower as its own GGUF file ("mmproj",
 * projector type qwen3vl, shipped beside the text model); a Hugging Face
 * checkpoint keeps it in the same safetensors files as model.visual.* with
 * vision_config in config.json. Both become one ds_vision_file: a config and
 * tensors under the mmproj GGUF names, in ggml order (ne[0] contiguous):
 *
 *   v.patch_embd.weight      {P, P, 3, D}  the Conv3D patch embedding, frame 0
 *   v.patch_embd.weight.1    {P, P, 3, D}  ... and frame 1 (temporal patch 2)
 *   v.patch_embd.bias        {D}
 *   v.position_embd.weight   {D, n_pos}    learned, a side x side grid (side^2 = n_pos)
 *   v.blk.N.ln1.{weight,bias}, v.blk.N.ln2.{weight,bias}        {D} LayerNorm
 *   v.blk.N.attn_qkv.{weight,bias}   {D, 3D}, {3D}
 *   v.blk.N.attn_out.{weight,bias}   {D, D}, {D}
 *   v.blk.N.ffn_up.{weight,bias}     {D, F}, {F}   (GELU, tanh form)
 *   v.blk.N.ffn_down.{weight,bias}   {F, D}, {D}
 *   v.post_ln.{weight,bias}  {D}           the merger's LayerNorm, per patch
 *   mm.0.{weight,bias}       {4D, 4D}      the merger over 2x2 patches
 *   mm.2.{weight,bias}       {4D, E}       ... into the text model's width E
 *   v.deepstack.N.norm.{weight,bias} {4D}  (only for N in deepstack_layers; its
 *   v.deepstack.N.fc1.{weight,bias}  {4D, 4D}  LayerNorm is over the merged
 *   v.deepstack.N.fc2.{weight,bias}  {4D, E}   4D, after the 2x2 shuffle)
 *
 * Nothing above this layer needs to know the file format. */
#ifndef DS_VISION_FILE_H
#define DS_VISION_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "loading/model_file.h"

#define DS_MAX_DEEPSTACK 8

typedef struct {
    int n_layer;            /* ViT blocks (HF depth) */
    int n_embd;             /* D: hidden_size */
    int n_head;             /* num_heads; head_dim = D / n_head */
    int n_ff;               /* F: intermediate_size */
    int patch_size;         /* P: 16 */
    int temporal_patch;     /* 2: one image is one temporal pair (the frame twice) */
    int merge;              /* spatial_merge_size: 2 (2x2 patches -> one text token) */
    int n_pos;              /* num_position_embeddings: a square grid */
    int out_embd;           /* E: out_hidden_size, the text model's n_embd */
    int n_deepstack;        /* 0 for Qwen3.5 / 3.6 */
    int deepstack_layers[DS_MAX_DEEPSTACK]; /* block after which each DeepStack merger reads */
    float eps;              /* LayerNorm epsilon */
    float rope_theta;       /* 2D rotary base of the tower's attention (10000) */
    float image_mean[3], image_std[3];
    int64_t min_pixels, max_pixels;  /* the preprocessor's smart-resize bounds */
} ds_vision_config;

typedef struct ds_vision_file ds_vision_file;

/* Opens an mmproj GGUF file, or the vision tower of a Hugging Face directory
 * (or its config.json), and validates every tensor against the config. On
 * failure *out is NULL and e names the file and the key or tensor. */
ds_status ds_vision_open(const char *path, ds_vision_file **out, ds_err *e);
void ds_vision_close(ds_vision_file *v);

/* The mmproj file llama-server users keep beside the model: a GGUF in the
 * model's folder whose name starts with "mmproj" (the only one, or the one
 * that shares the most of the model's name). For a Hugging Face directory,
 * the directory itself when its config has a vision_config. Returns 1 and
 * writes the path, 0 when there is none. */
int ds_vision_find(const char *model_path, char *out, size_t out_size);

const ds_vision_config *ds_vision_config_of(const ds_vision_file *v);
const char *ds_vision_path(const ds_vision_file *v);
/* NULL when absent. */
const ds_tensor *ds_vision_tensor(const ds_vision_file *v, const char *name);
int ds_vision_n_tensors(const ds_vision_file *v);
const ds_tensor *ds_vision_tensor_at(const ds_vision_file *v, int i);

/* Calls fn for each tensor a tower with this config has, in file order
 * (shared by the loaders, their validation and make-model). */
void ds_vision_for_each_spec(const ds_vision_config *vc, void (*fn)(const ds_tensor_spec *, void *), void *ctx);

/* A tower of the real shapes of a text model shape (make-model's --shape
 * names), with n_layers blocks (<= 0: the real depth). 0 when the shape has
 * no tower. */
int ds_vision_shape_config(const char *shape, int n_layers, int out_embd, ds_vision_config *vc);

#endif
