/* test_fuzz_replay.c - replays every file of fuzz/regressions/<target>/ (the
 * reproducers of crashes the fuzzers found) and fuzz/corpus/<target>/ (the
 * seeds) through the fuzz targets themselves, built here with the normal
 * compiler (and with the sanitizers under make test-sanitize), so a fixed
 * crash stays fixed without clang or libFuzzer. A target that breaks an
 * invariant aborts, naming the file it was given just before. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testing.h"

/* each target file defines LLVMFuzzerTestOneInput: give each its own name */
#define LLVMFuzzerTestOneInput fuzz_gguf_one
#include "../../fuzz/fuzz_gguf.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_safetensors_one
#include "../../fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_hf_config_one
#include "../../fuzz/fuzz_hf_config.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_tokenizer_one
#include "../../fuzz/fuzz_tokenizer.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_chat_template_one
#include "../../fuzz/fuzz_chat_template.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_server_stream_one
#include "../../fuzz/fuzz_server_stream.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_openai_request_one
#include "../../fuzz/fuzz_openai_request.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_grammar_one
#include "../../fuzz/fuzz_grammar.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_image_decode_one
#include "../../fuzz/fuzz_image_decode.c"
#undef LLVMFuzzerTestOneInput

typedef struct {
    const char *name;
    int (*fn)(const uint8_t *, size_t);
} replay_target;

static const replay_target TARGETS[] = {
    {"fuzz_gguf", fuzz_gguf_one},
    {"fuzz_safetensors", fuzz_safetensors_one},
    {"fuzz_hf_config", fuzz_hf_config_one},
    {"fuzz_tokenizer", fuzz_tokenizer_one},
    {"fuzz_chat_template", fuzz_chat_template_one},
    {"fuzz_server_stream", fuzz_server_stream_one},
    {"fuzz_openai_request", fuzz_openai_request_one},
    {"fuzz_grammar", fuzz_grammar_one},
    {"fuzz_image_decode", fuzz_image_decode_one},
};

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Runs every regular file of dir through fn; returns the count (-1: no folder). */
static int replay_dir(const char *dir, int (*fn)(const uint8_t *, size_t)) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    char *names[4096];
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) && n < 4096;)
        if (de->d_name[0] != '.') names[n++] = strdup(de->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    int done = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        free(names[i]);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        size_t cap = 1 << 16, len = 0;
        uint8_t *buf = malloc(cap);
        for (size_t r; buf && (r = fread(buf + len, 1, cap - len, f)) > 0;) {
            len += r;
            if (len == cap) {
                uint8_t *nb = realloc(buf, cap *= 2);
                if (!nb) { free(buf); buf = NULL; }
                buf = nb;
            }
        }
        fclose(f);
        if (!buf) continue;
        fprintf(stderr, "replay %s\n", path); /* the last line before an abort names the input */
        fn(buf, len);
        free(buf);
        done++;
    }
    return done;
}

static void test_replay(void) {
    const char *root = getenv("DS_ROOT");
    if (!root || !*root) root = ".";
    for (size_t i = 0; i < sizeof TARGETS / sizeof *TARGETS; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/fuzz/corpus/%s", root, TARGETS[i].name);
        int seeds = replay_dir(dir, TARGETS[i].fn);
        CHECK(seeds > 0, "%s: no seed corpus in %s", TARGETS[i].name, dir);
        snprintf(dir, sizeof dir, "%s/fuzz/regressions/%s", root, TARGETS[i].name);
        int regs = replay_dir(dir, TARGETS[i].fn);
        printf("# %s: %d seeds, %d regressions replayed\n", TARGETS[i].name, seeds, regs < 0 ? 0 : regs);
    }
}

int main(void) {
    RUN(test_replay);
    return ds_test_finish();
}
