/* vision_file.c - loading the vision tower (vision_file.h). */
#include "loading/vision_file.h"

ds_status ds_vision_open(const char *path, ds_vision_file **out, ds_err *e) {
    *out = NULL;
    return ds_fail(e, DS_EUNSUPPORTED, "%s: vision towers are not loaded yet", path);
}
void ds_vision_close(ds_vision_file *v) { (void)v; }
int ds_vision_find(const char *model_path, char *out, size_t out_size) {
    (void)model_path, (void)out, (void)out_size;
    return 0;
}
const ds_vision_config *ds_vision_config_of(const ds_vision_file *v) { (void)v; return NULL; }
const char *ds_vision_path(const ds_vision_file *v) { (void)v; return NULL; }
const ds_tensor *ds_vision_tensor(const ds_vision_file *v, const char *name) { (void)v, (void)name; return NULL; }
int ds_vision_n_tensors(const ds_vision_file *v) { (void)v; return 0; }
const ds_tensor *ds_vision_tensor_at(const ds_vision_file *v, int i) { (void)v, (void)i; return NULL; }
void ds_vision_for_each_spec(const ds_vision_config *vc, void (*fn)(const ds_tensor_spec *, void *), void *ctx) {
    (void)vc, (void)fn, (void)ctx;
}
int ds_vision_shape_config(const char *shape, int n_layers, int out_embd, ds_vision_config *vc) {
    (void)shape, (void)n_layers, (void)out_embd, (void)vc;
    return 0;
}
