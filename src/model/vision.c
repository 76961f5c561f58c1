/* vision.c - the vision tower's forward pass (vision.h). */
#include "model/vision.h"

ds_status ds_vision_new(ds_model *text, const ds_vision_file *f, ds_vision **out, ds_err *e) {
    (void)text, (void)f;
    *out = NULL;
    return ds_fail(e, DS_EUNSUPPORTED, "vision: the tower's forward pass is not built yet");
}
void ds_vision_free(ds_vision *v) { (void)v; }
const ds_vision_config *ds_vision_cfg(const ds_vision *v) { (void)v; return NULL; }
size_t ds_vision_job_bytes(const ds_vision *v, const ds_image_patches *p) { (void)v, (void)p; return 0; }
ds_status ds_vision_job_new(ds_vision *v, const ds_image_patches *p, ds_vision_job **out, ds_err *e) {
    (void)v, (void)p;
    *out = NULL;
    return ds_fail(e, DS_EUNSUPPORTED, "vision: not built yet");
}
void ds_vision_job_free(ds_vision_job *j) { (void)j; }
int64_t ds_vision_job_remaining_flops(const ds_vision_job *j) { (void)j; return 0; }
ds_status ds_vision_run(ds_vision *v, ds_vision_job *const *jobs, int n_jobs, int64_t flop_budget, ds_err *e) {
    (void)v, (void)jobs, (void)n_jobs, (void)flop_budget;
    return ds_fail(e, DS_EUNSUPPORTED, "vision: not built yet");
}
int ds_vision_job_done(const ds_vision_job *j) { (void)j; return 0; }
const float *ds_vision_job_output(const ds_vision_job *j, int *n_tokens) {
    (void)j;
    *n_tokens = 0;
    return NULL;
}
ds_status ds_vision_encode(ds_vision *v, const ds_image_patches *p, float *out, ds_err *e) {
    (void)v, (void)p, (void)out;
    return ds_fail(e, DS_EUNSUPPORTED, "vision: not built yet");
}
