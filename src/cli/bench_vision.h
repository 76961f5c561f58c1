/* bench_vision.h - `deltaserve bench --image WxH`: the vision tower's time per
 * image (bench_vision.c). */
#ifndef DS_BENCH_VISION_H
#define DS_BENCH_VISION_H

#include "loading/model_file.h"

/* sizes: "WxH[,WxH...]" in pixels; the tower from lo->mmproj_path or found
 * beside the model. Returns the exit status. */
int ds_bench_vision(const char *path, const ds_load_options *lo, const char *sizes, int threads, int reps, int json);

#endif
