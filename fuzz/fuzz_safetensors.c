/* fuzz_safetensors.c - ds_safetensors_parse on arbitrary bytes; then every
 * tensor's first and last byte through t->data and a lookup by name. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "loading/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    ds_safetensors st;
    memset(&st, 0, sizeof st);
    ds_err e = {0};
    if (ds_safetensors_parse(&st, buf, size, "fuzz.safetensors", &e) == DS_OK) {
        for (int i = 0; i < st.n_tensors; i++) {
            const ds_st_tensor *t = &st.tensors[i];
            FUZZ_CHECK(t->name != NULL, "tensor %d has no name", i);
            FUZZ_CHECK(ds_safetensors_find(&st, t->name) != NULL, "tensor '%s' not found", t->name);
            FUZZ_CHECK(t->n_dims >= 0 && t->n_dims <= DS_ST_MAX_DIMS, "tensor '%s': %d dims", t->name, t->n_dims);
            if (t->nbytes) {
                FUZZ_CHECK(t->data >= buf && t->data + t->nbytes <= buf + size, "tensor '%s' outside the file",
                           t->name);
                fuzz_touch(t->data);
                fuzz_touch(t->data + t->nbytes - 1);
            }
        }
    } else {
        FUZZ_CHECK(e.msg[0] != 0, "parse failed without a message");
    }
    ds_safetensors_close(&st); /* also after a failure, as ds_safetensors_open does */
    free(buf);
    return 0;
}
