/* vision_hf.c - the vision tower of a Hugging Face checkpoint directory. */
#include "loading/vision_file_int.h"

ds_status ds_vision_load_hf(ds_vision_file *v, const char *dir, ds_err *e) {
    (void)v;
    return ds_fail(e, DS_EUNSUPPORTED, "%s: vision towers of Hugging Face directories are not loaded yet", dir);
}

int ds_vision_hf_has_config(const char *config_json) {
    (void)config_json;
    return 0;
}
