/* fuzz_hf_config.c - ds_model_open on a Hugging Face directory whose
 * config.json (first input byte even) or model.safetensors.index.json (odd)
 * is the rest of the input. The directories are made once, with
 * ds_make_model (shape tiny, 1 layer, BF16; the seeds come from the same
 * model, see make_seeds.py), under $TMPDIR:
 *   flat/     config.json + model.safetensors
 *   sharded/  config.json + model-0000N-of-0000M.safetensors (1 MiB shards) + index */
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "loading/model_file.h"
#include "model/model_make.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char hf_root[4096], hf_flat[4200], hf_sharded[4200];

static int hf_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void hf_cleanup(void) {
    if (hf_root[0]) nftw(hf_root, hf_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void hf_make(const char *out, size_t shard_bytes) {
    ds_make_options o = {.shape = "tiny", .n_layers = 1, .dtype = "bf16", .format = DS_FORMAT_SAFETENSORS,
                         .seed = 1, .scale = 1.0f, .out = out, .shard_bytes = shard_bytes};
    ds_err e = {0};
    if (ds_make_model(&o, &e) != DS_OK) FUZZ_FAIL("make-model %s: %s", out, e.msg);
}

static void hf_init(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(hf_root, sizeof hf_root, "%s/ds-fuzz-hf.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(hf_root)) FUZZ_FAIL("mkdtemp %s failed", hf_root);
    atexit(hf_cleanup);
    snprintf(hf_flat, sizeof hf_flat, "%s/flat", hf_root);
    snprintf(hf_sharded, sizeof hf_sharded, "%s/sharded", hf_root);
    hf_make(hf_flat, 0);
    hf_make(hf_sharded, 1u << 20);
}

static void hf_write(const char *path, const uint8_t *data, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) FUZZ_FAIL("cannot write %s", path);
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) FUZZ_FAIL("cannot write %s", path);
        done += (size_t)w;
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!hf_root[0]) hf_init();
    if (size < 1) return 0;
    int index_mode = data[0] & 1;
    const char *dir = index_mode ? hf_sharded : hf_flat;
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", dir, index_mode ? "model.safetensors.index.json" : "config.json");
    hf_write(path, data + 1, size - 1);
    ds_model_file *m = NULL;
    ds_err e = {0};
    if (ds_model_open(dir, &m, &e) == DS_OK) {
        const ds_model_config *c = ds_model_config_of(m);
        FUZZ_CHECK(c->n_layer > 0 && c->n_layer < DS_MAX_LAYERS, "n_layer %d", c->n_layer);
        for (int i = 0; i < ds_model_n_tensors(m); i++) {
            const ds_tensor *t = ds_model_tensor_at(m, i);
            FUZZ_CHECK(ds_model_tensor(m, t->name) == t, "tensor '%s' not found by name", t->name);
            if (t->data) fuzz_touch(t->data);
        }
        ds_model_stats st;
        ds_model_compute_stats(m, &st);
        ds_model_close(m);
    } else {
        FUZZ_CHECK(m == NULL && e.msg[0], "open failed without a message");
    }
    return 0;
}
