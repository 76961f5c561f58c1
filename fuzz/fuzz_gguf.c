/* fuzz_gguf.c - ds_gguf_parse on arbitrary bytes; then every typed getter on
 * every key, and the first and last byte of every tensor through t->data. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "loading/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void gguf_exercise_kv(const ds_gguf *g, const ds_gguf_kv *kv, size_t size) {
    char key[256];
    size_t n = kv->key.len < sizeof key - 1 ? (size_t)kv->key.len : sizeof key - 1;
    memcpy(key, kv->key.ptr, n);
    key[n] = 0;
    ds_err e = {0};
    uint32_t u;
    float f;
    bool b;
    ds_str s;
    if (kv->key.len < sizeof key) FUZZ_CHECK(ds_gguf_find(g, key) != NULL, "key '%s' not found", key);
    (void)ds_gguf_get_u32(g, key, &u, &e);
    (void)ds_gguf_get_f32(g, key, &f, &e);
    (void)ds_gguf_get_bool(g, key, &b, &e);
    if (ds_gguf_get_str(g, key, &s, &e) == DS_OK && s.len) {
        fuzz_touch((const uint8_t *)s.ptr);
        fuzz_touch((const uint8_t *)s.ptr + s.len - 1);
    }
    if (kv->type != DS_GGUF_ARRAY) return;
    /* the parser checked the elements against the file: at most size of them */
    FUZZ_CHECK(kv->arr_len <= size, "array '%s' of %llu elements in %zu bytes", key,
               (unsigned long long)kv->arr_len, size);
    size_t cnt = (size_t)kv->arr_len;
    int64_t *ints = malloc((cnt ? cnt : 1) * sizeof *ints);
    float *floats = malloc((cnt ? cnt : 1) * sizeof *floats);
    ds_str *strs = malloc((cnt ? cnt : 1) * sizeof *strs);
    if (ints && floats && strs) {
        (void)ds_gguf_arr_ints(g, kv, ints, &e);
        (void)ds_gguf_arr_floats(g, kv, floats, &e);
        if (ds_gguf_arr_strings(g, kv, strs, &e) == DS_OK) {
            for (size_t i = 0; i < cnt; i++)
                if (strs[i].len) {
                    fuzz_touch((const uint8_t *)strs[i].ptr);
                    fuzz_touch((const uint8_t *)strs[i].ptr + strs[i].len - 1);
                }
        }
    }
    free(ints);
    free(floats);
    free(strs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* a copy of exactly size bytes, so ASan flags any read past the end */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    ds_gguf g;
    memset(&g, 0, sizeof g);
    ds_err e = {0};
    if (ds_gguf_parse(&g, buf, size, "fuzz.gguf", &e) == DS_OK) {
        for (uint64_t i = 0; i < g.n_kv; i++) gguf_exercise_kv(&g, &g.kv[i], size);
        for (uint64_t i = 0; i < g.n_tensors; i++) {
            const ds_gguf_tensor *t = &g.tensors[i];
            FUZZ_CHECK(ds_gguf_find_tensor(&g, t->name) != NULL, "tensor '%s' not found", t->name);
            if (t->nbytes) {
                FUZZ_CHECK(t->data >= buf && t->data + t->nbytes <= buf + size, "tensor '%s' outside the file",
                           t->name);
                fuzz_touch(t->data);
                fuzz_touch(t->data + t->nbytes - 1);
            }
        }
        uint32_t u;
        (void)ds_gguf_get_u32(&g, "general.alignment", &u, &e);
        (void)ds_gguf_find(&g, "");
    } else {
        FUZZ_CHECK(e.msg[0] != 0, "parse failed without a message");
    }
    ds_gguf_close(&g); /* also after a failure, as ds_gguf_open does */
    free(buf);
    return 0;
}
