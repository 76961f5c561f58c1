/* bench_vision.c - `deltaserve bench --image WxH`: the vision tower alone on
 * synthetic images (random patch values; the encoder's work depends on the
 * grid only): per size, the encoder time per image (mean and standard
 * deviation of -r runs after a warm-up run) and patches per second. A size is
 * taken as the processor would cut it: each side rounded to a multiple of
 * patch x merge (32 pixels), with no further resizing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_vision.h"
#include "cli/cli_model.h"
#include "kernels/cpu.h"
#include "loading/vision_file.h"
#include "model/model.h"
#include "model/vision.h"

#define MAX_SIZES 16
#define MAX_REPS 50

int ds_bench_vision(const char *path, const ds_load_options *lo, const char *sizes, int threads, int reps, int json) {
    int W[MAX_SIZES], H[MAX_SIZES], ns = 0;
    for (const char *s = sizes; *s && ns < MAX_SIZES; ns++) {
        int used = 0;
        if (sscanf(s, "%dx%d%n", &W[ns], &H[ns], &used) != 2 || W[ns] < 16 || H[ns] < 16 || W[ns] > 8192 ||
            H[ns] > 8192 || (s[used] && s[used] != ',')) {
            fprintf(stderr, "deltaserve bench: --image: '%s' is not a list of WxH sizes (16 to 8192 pixels)\n", sizes);
            return 2;
        }
        s += used + (s[used] == ',');
    }
    char found[4096];
    const char *mmproj = lo->mmproj_path;
    if (!mmproj && ds_vision_find(path, found, sizeof found)) mmproj = found;
    if (!mmproj) {
        fprintf(stderr, "deltaserve bench: --image needs a vision tower: give --mmproj\n");
        return 2;
    }
    ds_err e = {0};
    ds_model_file *mf = NULL;
    ds_vision_file *vf = NULL;
    ds_model *m = NULL;
    ds_vision *v = NULL;
    float *out = NULL;
    ds_image_patches p = {0};
    int rc = 1;
    ds_model_params mp = {.n_threads = threads};
    if (ds_model_open(path, &mf, &e) || ds_vision_open(mmproj, &vf, &e) || ds_model_new(mf, &mp, &m, &e) ||
        ds_vision_new(m, vf, &v, &e)) {
        fprintf(stderr, "deltaserve bench: %s\n", e.msg);
        goto out;
    }
    const ds_vision_config *c = ds_vision_cfg(v);
    int step = c->patch_size * c->merge, nth = threads > 0 ? threads : ds_cpu()->n_cores;
    if (json) printf("{\"vision\": {\"mmproj\": \"%s\", \"threads\": %d, \"layers\": %d, \"results\": [", mmproj, nth,
                     c->n_layer);
    else printf("vision tower %s: %d blocks, width %d, %d threads, %s kernels\n%-11s %8s %8s %12s %12s\n", mmproj,
                c->n_layer, c->n_embd, nth, ds_isa_name(ds_cpu_level()), "image", "patches", "tokens", "ms/image",
                "patches/s");
    for (int k = 0; k < ns; k++) {
        int w = (W[k] + step / 2) / step * step, h = (H[k] + step / 2) / step * step;
        if (w < step) w = step;
        if (h < step) h = step;
        p = (ds_image_patches){.grid_t = 1, .grid_h = h / c->patch_size, .grid_w = w / c->patch_size,
                               .patch_dim = 3 * c->temporal_patch * c->patch_size * c->patch_size};
        int n = p.grid_h * p.grid_w;
        p.patches = malloc((size_t)n * (size_t)p.patch_dim * sizeof(float));
        out = malloc((size_t)n / 4 * (size_t)c->out_embd * (size_t)(1 + c->n_deepstack) * sizeof(float));
        if (!p.patches || !out) goto out;
        uint32_t seed = 7;
        for (size_t i = 0; i < (size_t)n * (size_t)p.patch_dim; i++) {
            seed = seed * 1664525u + 1013904223u;
            p.patches[i] = (float)(seed >> 8) / (float)(1u << 24) * 4.0f - 2.0f;
        }
        double t[MAX_REPS + 1], mean = 0, var = 0;
        for (int r = 0; r <= reps; r++) { /* run 0 warms up */
            double t0 = ds_now();
            if (ds_vision_encode(v, &p, out, &e)) {
                fprintf(stderr, "deltaserve bench: %s\n", e.msg);
                goto out;
            }
            t[r] = ds_now() - t0;
        }
        for (int r = 1; r <= reps; r++) mean += t[r] / reps;
        for (int r = 1; r <= reps; r++) var += (t[r] - mean) * (t[r] - mean) / reps;
        if (json)
            printf("%s{\"width\": %d, \"height\": %d, \"patches\": %d, \"tokens\": %d, \"ms_per_image\": %.2f, "
                   "\"ms_stddev\": %.2f, \"patches_per_s\": %.1f}",
                   k ? ", " : "", w, h, n, n / 4, mean * 1e3, sqrt(var) * 1e3, n / mean);
        else {
            char name[32];
            snprintf(name, sizeof name, "%dx%d", w, h);
            printf("%-11s %8d %8d %8.1f±%-4.0f %12.1f\n", name, n, n / 4, mean * 1e3, sqrt(var) * 1e3, n / mean);
        }
        fflush(stdout);
        free(p.patches);
        free(out);
        p.patches = NULL;
        out = NULL;
    }
    if (json) printf("]}}\n");
    rc = 0;
out:
    free(p.patches);
    free(out);
    ds_vision_free(v);
    ds_model_free(m);
    ds_vision_close(vf);
    ds_model_close(mf);
    return rc;
}
