/* cmd_vision.c - `deltaserve vision`: the vision tower on given patches,
 * its output rows written as a little-endian F32 file, for checking the
 * tower against other implementations (tests/reference/test_vision.py).
 * DS_VISION_DUMP=DIR adds the residual stream after the patch embedding and
 * after every block (vision.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "loading/model_file.h"
#include "loading/vision_file.h"
#include "model/model.h"
#include "model/vision.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: deltaserve vision -m MODEL [--mmproj FILE] --grid HxW[,HxW...] [--patches FILE] --out FILE\n"
            "                         [--budget MADDS] [-t N]\n"
            "  runs the vision tower on images of HxW patches (even numbers), one job each, encoded\n"
            "  together: --patches holds their [H*W][3*2*P*P] F32 values one image after the other in\n"
            "  the processor's order (image_prep.h; default: a fixed pseudo-random pattern); writes\n"
            "  each image's [H*W/4][E*(1+deepstack)] F32 rows to FILE, in order. --budget advances\n"
            "  the jobs that many multiply-adds per call (default: all at once)\n");
}

static int fail(const char *msg) {
    fprintf(stderr, "deltaserve vision: %s\n", msg);
    return 1;
}

#define MAX_IMAGES 64

int ds_cmd_vision(int argc, char **argv) {
    const char *path = NULL, *mmproj = NULL, *grid = NULL, *pfile = NULL, *out = NULL;
    long threads = 0;
    double budget = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!(v = ds_arg_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m")) path = v;
        else if (!strcmp(a, "--mmproj")) mmproj = v;
        else if (!strcmp(a, "--grid")) grid = v;
        else if (!strcmp(a, "--patches")) pfile = v;
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "-t")) { if (ds_arg_int(a, v, 1, 1024, &threads)) return 2; }
        else if (!strcmp(a, "--budget")) { if (ds_arg_float(a, v, 1, 9e18, &budget)) return 2; }
        else { fprintf(stderr, "deltaserve vision: unknown option '%s'\n", a); usage(stderr); return 2; }
    }
    int gh[MAX_IMAGES], gw[MAX_IMAGES], ni = 0;
    for (const char *g = grid; g && *g && ni < MAX_IMAGES; ni++) {
        int used = 0;
        if (sscanf(g, "%dx%d%n", &gh[ni], &gw[ni], &used) != 2 || gh[ni] <= 0 || gw[ni] <= 0 || gh[ni] > 4096 ||
            gw[ni] > 4096 || (g[used] && g[used] != ',')) {
            fprintf(stderr, "deltaserve vision: --grid: '%s' is not a list of HxW\n", grid);
            return 2;
        }
        g += used + (g[used] == ',');
    }
    if (!path || !ni || !out) {
        usage(stderr);
        return 2;
    }
    char found[4096];
    if (!mmproj && ds_vision_find(path, found, sizeof found)) mmproj = found;
    if (!mmproj) return fail("no vision tower: give --mmproj");
    ds_err e = {0};
    ds_model_file *mf = NULL;
    ds_vision_file *vf = NULL;
    ds_model *m = NULL;
    ds_vision *v = NULL;
    ds_vision_job *jobs[MAX_IMAGES] = {0};
    ds_image_patches p[MAX_IMAGES] = {0};
    FILE *pf = NULL, *of = NULL;
    int rc = 1;
    ds_model_params mp = {.n_threads = (int)threads};
    if (ds_model_open(path, &mf, &e) || ds_vision_open(mmproj, &vf, &e) || ds_model_new(mf, &mp, &m, &e) ||
        ds_vision_new(m, vf, &v, &e)) {
        fail(e.msg);
        goto out;
    }
    const ds_vision_config *c = ds_vision_cfg(v);
    if (pfile && !(pf = fopen(pfile, "rb"))) {
        fprintf(stderr, "deltaserve vision: cannot open %s\n", pfile);
        goto out;
    }
    uint32_t seed = 12345;
    for (int k = 0; k < ni; k++) {
        p[k] = (ds_image_patches){.grid_t = 1, .grid_h = gh[k], .grid_w = gw[k],
                                  .patch_dim = 3 * c->temporal_patch * c->patch_size * c->patch_size};
        size_t n = (size_t)gh[k] * gw[k] * (size_t)p[k].patch_dim;
        if (!(p[k].patches = malloc(n * sizeof(float)))) goto out;
        if (pf && fread(p[k].patches, sizeof(float), n, pf) != n) {
            fprintf(stderr, "deltaserve vision: %s: too few F32 values for image %d\n", pfile, k);
            goto out;
        }
        for (size_t i = 0; !pf && i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            p[k].patches[i] = (float)(seed >> 8) / (float)(1u << 24) * 4.0f - 2.0f;
        }
        if (ds_vision_job_new(v, &p[k], &jobs[k], &e)) {
            fail(e.msg);
            goto out;
        }
    }
    int64_t b = budget > 0 ? (int64_t)budget : INT64_MAX;
    for (int k = 0; k < ni; k++)
        while (!ds_vision_job_done(jobs[k]))
            if (ds_vision_run(v, jobs, ni, b, &e)) {
                fail(e.msg);
                goto out;
            }
    if (!(of = fopen(out, "wb"))) {
        fprintf(stderr, "deltaserve vision: cannot write %s\n", out);
        goto out;
    }
    size_t width = (size_t)c->out_embd * (size_t)(1 + c->n_deepstack);
    for (int k = 0; k < ni; k++) {
        int nt;
        const float *o = ds_vision_job_output(jobs[k], &nt);
        if (fwrite(o, sizeof(float), (size_t)nt * width, of) != (size_t)nt * width) {
            fprintf(stderr, "deltaserve vision: cannot write %s\n", out);
            goto out;
        }
    }
    rc = 0;
out:
    if (of && fclose(of) && !rc) rc = fail("cannot write the output");
    if (pf) fclose(pf);
    for (int k = 0; k < ni; k++) {
        ds_vision_job_free(jobs[k]);
        free(p[k].patches);
    }
    ds_vision_free(v);
    ds_model_free(m);
    ds_vision_close(vf);
    ds_model_close(mf);
    return rc;
}
