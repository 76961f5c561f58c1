/* gguf_writer.c - streaming GGUF v3 writer (see gguf.c for the layout). */
#include "loading/gguf_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loading/gguf.h"

typedef struct {
    uint8_t *p;
    size_t len, cap;
} bytes;

typedef struct {
    char *name;
    ds_dtype type;
    int n_dims;
    int64_t ne[DS_GGUF_MAX_DIMS];
    uint64_t offset;
    size_t nbytes;
} tensor_info;

struct ds_gguf_writer {
    uint32_t alignment;
    bytes kv;
    uint64_t n_kv;
    tensor_info *tensors;
    int n_tensors, cap_tensors;
    uint64_t data_bytes;
    int oom;
    FILE *f;
    char *path;
    int next_tensor;
    size_t chunk_done;    /* bytes of tensor next_tensor written so far */
    uint64_t written;
};

static void put(ds_gguf_writer *w, const void *src, size_t n) {
    bytes *b = &w->kv;
    if (w->oom || n == 0) return; /* n == 0: src may be NULL (an empty array) */
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) { w->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void put_u32(ds_gguf_writer *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(ds_gguf_writer *w, uint64_t v) { put(w, &v, 8); }
static void put_strn(ds_gguf_writer *w, const char *s, size_t n) { put_u64(w, n); put(w, s, n); }
static void put_str(ds_gguf_writer *w, const char *s) { put_strn(w, s, strlen(s)); }
static void key(ds_gguf_writer *w, const char *k, uint32_t type) { put_str(w, k); put_u32(w, type); w->n_kv++; }

ds_gguf_writer *ds_gguf_writer_new(uint32_t alignment) {
    if (alignment & (alignment - 1)) return NULL; /* readers accept powers of two only */
    ds_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->alignment = alignment ? alignment : 32;
    /* readers assume 32 unless the file says otherwise */
    if (w->alignment != 32) ds_gguf_writer_u32(w, "general.alignment", w->alignment);
    return w;
}

void ds_gguf_writer_free(ds_gguf_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    for (int i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->tensors);
    free(w->kv.p);
    free(w->path);
    free(w);
}

void ds_gguf_writer_u32(ds_gguf_writer *w, const char *k, uint32_t v) { key(w, k, DS_GGUF_UINT32); put_u32(w, v); }
void ds_gguf_writer_i32(ds_gguf_writer *w, const char *k, int32_t v) { key(w, k, DS_GGUF_INT32); put(w, &v, 4); }
void ds_gguf_writer_f32(ds_gguf_writer *w, const char *k, float v) { key(w, k, DS_GGUF_FLOAT32); put(w, &v, 4); }
void ds_gguf_writer_bool(ds_gguf_writer *w, const char *k, int v) {
    uint8_t b = v ? 1 : 0;
    key(w, k, DS_GGUF_BOOL);
    put(w, &b, 1);
}
void ds_gguf_writer_str(ds_gguf_writer *w, const char *k, const char *v) { key(w, k, DS_GGUF_STRING); put_str(w, v); }

static void arr_head(ds_gguf_writer *w, const char *k, uint32_t type, size_t n) {
    key(w, k, DS_GGUF_ARRAY);
    put_u32(w, type);
    put_u64(w, n);
}
void ds_gguf_writer_arr_i32(ds_gguf_writer *w, const char *k, const int32_t *v, size_t n) {
    arr_head(w, k, DS_GGUF_INT32, n);
    put(w, v, 4 * n);
}
void ds_gguf_writer_arr_f32(ds_gguf_writer *w, const char *k, const float *v, size_t n) {
    arr_head(w, k, DS_GGUF_FLOAT32, n);
    put(w, v, 4 * n);
}
void ds_gguf_writer_arr_bool(ds_gguf_writer *w, const char *k, const uint8_t *v, size_t n) {
    arr_head(w, k, DS_GGUF_BOOL, n);
    put(w, v, n);
}
void ds_gguf_writer_arr_str(ds_gguf_writer *w, const char *k, const char *const *v, size_t n) {
    arr_head(w, k, DS_GGUF_STRING, n);
    for (size_t i = 0; i < n; i++) put_str(w, v[i]);
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

int ds_gguf_writer_add_tensor(ds_gguf_writer *w, const char *name, ds_dtype type, int n_dims, const int64_t *ne) {
    if (w->n_tensors == w->cap_tensors) {
        int cap = w->cap_tensors ? 2 * w->cap_tensors : 256;
        tensor_info *t = realloc(w->tensors, (size_t)cap * sizeof *t);
        if (!t) { w->oom = 1; return -1; }
        w->tensors = t;
        w->cap_tensors = cap;
    }
    tensor_info *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) { w->oom = 1; return -1; }
    t->type = type;
    t->n_dims = n_dims;
    int64_t rows = 1;
    for (int d = 0; d < DS_GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    for (int d = 1; d < n_dims; d++) rows *= ne[d];
    t->nbytes = ds_dtype_row_bytes(type, ne[0]) * (size_t)rows;
    t->offset = w->data_bytes;
    w->data_bytes = align_up(w->data_bytes + t->nbytes, w->alignment);
    return w->n_tensors++;
}

size_t ds_gguf_writer_tensor_bytes(const ds_gguf_writer *w, int idx) { return w->tensors[idx].nbytes; }

static ds_status write_all(ds_gguf_writer *w, const void *p, size_t n, ds_err *e) {
    if (n && fwrite(p, 1, n, w->f) != n)
        return ds_fail(e, DS_EIO, "%s: write failed at byte %llu: %s", w->path, (unsigned long long)w->written,
                       strerror(errno));
    w->written += n;
    return DS_OK;
}

static ds_status pad_to(ds_gguf_writer *w, ds_err *e) {
    static const uint8_t zeros[256];
    uint64_t target = align_up(w->written, w->alignment);
    while (w->written < target) {
        size_t n = (size_t)(target - w->written);
        ds_status s = write_all(w, zeros, n > sizeof zeros ? sizeof zeros : n, e);
        if (s) return s;
    }
    return DS_OK;
}

ds_status ds_gguf_writer_begin(ds_gguf_writer *w, const char *path, ds_err *e) {
    if (w->oom) return ds_fail(e, DS_ENOMEM, "%s: out of memory while collecting the GGUF header", path);
    w->path = strdup(path);
    w->f = fopen(path, "wb");
    if (!w->f || !w->path) return ds_fail(e, DS_EIO, "%s: cannot create: %s", path, strerror(errno));
    setvbuf(w->f, NULL, _IOFBF, 1 << 20);
    bytes hdr = w->kv;
    uint32_t version = 3;
    uint64_t n_tensors = (uint64_t)w->n_tensors;
    ds_status s;
    if ((s = write_all(w, "GGUF", 4, e)) || (s = write_all(w, &version, 4, e)) ||
        (s = write_all(w, &n_tensors, 8, e)) || (s = write_all(w, &w->n_kv, 8, e)) ||
        (s = write_all(w, hdr.p, hdr.len, e)))
        return s;
    /* tensor infos go through the same byte buffer, after the kv bytes */
    w->kv.len = 0;
    for (int i = 0; i < w->n_tensors; i++) {
        tensor_info *t = &w->tensors[i];
        put_str(w, t->name);
        put_u32(w, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) put_u64(w, (uint64_t)t->ne[d]);
        put_u32(w, ds_dtype_get(t->type)->gguf_type);
        put_u64(w, t->offset);
    }
    if (w->oom) return ds_fail(e, DS_ENOMEM, "%s: out of memory while writing tensor infos", path);
    if ((s = write_all(w, w->kv.p, w->kv.len, e))) return s;
    return pad_to(w, e);
}

ds_status ds_gguf_writer_tensor_chunk(ds_gguf_writer *w, int idx, const void *data, size_t nbytes, ds_err *e) {
    if (idx != w->next_tensor || idx >= w->n_tensors)
        return ds_fail(e, DS_EINVAL, "%s: tensor data written out of order (got #%d, expected #%d)", w->path, idx,
                       w->next_tensor);
    tensor_info *t = &w->tensors[idx];
    if (nbytes > t->nbytes - w->chunk_done)
        return ds_fail(e, DS_EINVAL, "%s: tensor '%s' got more than the %zu bytes its shape needs", w->path, t->name,
                       t->nbytes);
    ds_status s = write_all(w, data, nbytes, e);
    if (s) return s;
    w->chunk_done += nbytes;
    if (w->chunk_done < t->nbytes) return DS_OK;
    w->chunk_done = 0;
    w->next_tensor++;
    return pad_to(w, e);
}

ds_status ds_gguf_writer_finish(ds_gguf_writer *w, ds_err *e) {
    if (w->next_tensor != w->n_tensors || w->chunk_done)
        return ds_fail(e, DS_EINVAL, "%s: only %d of %d tensors were written", w->path, w->next_tensor, w->n_tensors);
    int rc = fclose(w->f);
    w->f = NULL;
    if (rc != 0) return ds_fail(e, DS_EIO, "%s: close failed: %s", w->path, strerror(errno));
    return DS_OK;
}
