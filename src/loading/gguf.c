/* gguf.c - GGUF reader.
 *
 * File layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 * n_kv × (string key, u32 type, value), n_tensors × (string name, u32 n_dims,
 * u64 ne[n_dims], u32 ggml type, u64 offset), zero padding to the alignment
 * (general.alignment, default 32), then the tensor data. A string is a u64
 * length followed by that many bytes. */
#include "loading/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_NAME 64 /* llama.cpp's GGML_MAX_NAME, terminator included */

typedef struct {
    const uint8_t *buf;
    size_t size, pos;
    const char *path;
    ds_err *e;
} cursor;

static const size_t scalar_size[DS_GGUF_TYPE_COUNT] = {
    [DS_GGUF_UINT8] = 1, [DS_GGUF_INT8] = 1, [DS_GGUF_UINT16] = 2, [DS_GGUF_INT16] = 2,
    [DS_GGUF_UINT32] = 4, [DS_GGUF_INT32] = 4, [DS_GGUF_FLOAT32] = 4, [DS_GGUF_BOOL] = 1,
    [DS_GGUF_UINT64] = 8, [DS_GGUF_INT64] = 8, [DS_GGUF_FLOAT64] = 8,
};

static const char *type_name(uint32_t t) {
    static const char *names[DS_GGUF_TYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64"};
    return t < DS_GGUF_TYPE_COUNT ? names[t] : "unknown";
}

static ds_status need(cursor *c, size_t n, const char *what) {
    if (c->size - c->pos < n)
        return ds_fail(c->e, DS_ECORRUPT, "%s: truncated at byte %zu: %s needs %zu bytes, %zu left",
                       c->path, c->pos, what, n, c->size - c->pos);
    return DS_OK;
}

static ds_status rd_u32(cursor *c, uint32_t *v, const char *what) {
    ds_status s = need(c, 4, what);
    if (s) return s;
    memcpy(v, c->buf + c->pos, 4);
    c->pos += 4;
    return DS_OK;
}

static ds_status rd_u64(cursor *c, uint64_t *v, const char *what) {
    ds_status s = need(c, 8, what);
    if (s) return s;
    memcpy(v, c->buf + c->pos, 8);
    c->pos += 8;
    return DS_OK;
}

static ds_status rd_str(cursor *c, ds_str *out, const char *what) {
    uint64_t len;
    size_t at = c->pos;
    ds_status s = rd_u64(c, &len, what);
    if (s) return s;
    if (len > c->size - c->pos)
        return ds_fail(c->e, DS_ECORRUPT, "%s: %s at byte %zu has length %llu, past the end of the file",
                       c->path, what, at, (unsigned long long)len);
    out->ptr = (const char *)c->buf + c->pos;
    out->len = len;
    c->pos += (size_t)len;
    return DS_OK;
}

bool ds_str_eq(ds_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && memcmp(s.ptr, cstr, n) == 0;
}

/* Skips one value of type t, checking it is inside the file. */
static ds_status skip_value(cursor *c, uint32_t t, uint64_t count, const char *key) {
    if (t == DS_GGUF_STRING) {
        for (uint64_t i = 0; i < count; i++) {
            ds_str tmp;
            char what[200];
            snprintf(what, sizeof what, "string %llu of key '%s'", (unsigned long long)i, key);
            ds_status s = rd_str(c, &tmp, what);
            if (s) return s;
        }
        return DS_OK;
    }
    size_t sz = scalar_size[t];
    if (count > (c->size - c->pos) / sz)
        return ds_fail(c->e, DS_ECORRUPT, "%s: key '%s' at byte %zu: %llu values of %s do not fit in the file",
                       c->path, key, c->pos, (unsigned long long)count, type_name(t));
    c->pos += (size_t)(count * sz);
    return DS_OK;
}

static ds_status parse_kv(cursor *c, ds_gguf *g) {
    for (uint64_t i = 0; i < g->n_kv; i++) {
        ds_gguf_kv *kv = &g->kv[i];
        size_t at = c->pos;
        ds_status s = rd_str(c, &kv->key, "metadata key");
        if (s) return s;
        char key[160];
        snprintf(key, sizeof key, "%.*s", (int)(kv->key.len > 150 ? 150 : kv->key.len), kv->key.ptr);
        if (kv->key.len == 0 || memchr(kv->key.ptr, '\0', kv->key.len))
            return ds_fail(c->e, DS_ECORRUPT, "%s: metadata key #%llu at byte %zu is empty or has a NUL byte",
                           c->path, (unsigned long long)i, at);
        for (uint64_t j = 0; j < i; j++)
            if (g->kv[j].key.len == kv->key.len && memcmp(g->kv[j].key.ptr, kv->key.ptr, kv->key.len) == 0)
                return ds_fail(c->e, DS_ECORRUPT, "%s: metadata key '%s' appears twice (byte %zu)", c->path, key, at);
        char what[200]; /* names the key in a message about its own bytes running out */
        snprintf(what, sizeof what, "the type of key '%s'", key);
        if ((s = rd_u32(c, &kv->type, what))) return s;
        if (kv->type >= DS_GGUF_TYPE_COUNT)
            return ds_fail(c->e, DS_ECORRUPT, "%s: key '%s' has unknown value type %u (byte %zu)", c->path, key,
                           kv->type, c->pos - 4);
        if (kv->type == DS_GGUF_ARRAY) {
            snprintf(what, sizeof what, "the element type of key '%s'", key);
            if ((s = rd_u32(c, &kv->arr_type, what))) return s;
            if (kv->arr_type >= DS_GGUF_TYPE_COUNT || kv->arr_type == DS_GGUF_ARRAY)
                return ds_fail(c->e, DS_ECORRUPT, "%s: key '%s' is an array of unsupported type %u (byte %zu)",
                               c->path, key, kv->arr_type, c->pos - 4);
            snprintf(what, sizeof what, "the array length of key '%s'", key);
            if ((s = rd_u64(c, &kv->arr_len, what))) return s;
            kv->val = c->buf + c->pos;
            kv->val_offset = c->pos;
            if ((s = skip_value(c, kv->arr_type, kv->arr_len, key))) return s;
        } else {
            kv->val = c->buf + c->pos;
            kv->val_offset = c->pos;
            if ((s = skip_value(c, kv->type, 1, key))) return s;
            if (kv->type == DS_GGUF_BOOL && *kv->val > 1)
                return ds_fail(c->e, DS_ECORRUPT, "%s: key '%s' is a bool with value %u (byte %llu)", c->path,
                               key, *kv->val, (unsigned long long)kv->val_offset);
        }
    }
    return DS_OK;
}

static ds_status parse_tensor_infos(cursor *c, ds_gguf *g) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        ds_gguf_tensor *t = &g->tensors[i];
        size_t at = c->pos;
        ds_str name;
        ds_status s = rd_str(c, &name, "tensor name");
        if (s) return s;
        if (name.len == 0 || name.len >= GGUF_MAX_NAME || memchr(name.ptr, '\0', name.len))
            return ds_fail(c->e, DS_ECORRUPT, "%s: tensor #%llu at byte %zu: name length %llu is not in 1..%d",
                           c->path, (unsigned long long)i, at, (unsigned long long)name.len, GGUF_MAX_NAME - 1);
        memcpy(t->name, name.ptr, (size_t)name.len);
        t->name[name.len] = '\0';
        char what[128]; /* names the tensor in a message about its own bytes running out */
        snprintf(what, sizeof what, "n_dims of tensor '%s'", t->name);
        if ((s = rd_u32(c, &t->n_dims, what))) return s;
        if (t->n_dims < 1 || t->n_dims > DS_GGUF_MAX_DIMS)
            return ds_fail(c->e, DS_ECORRUPT, "%s: tensor '%s' has %u dimensions (1..%d allowed)", c->path,
                           t->name, t->n_dims, DS_GGUF_MAX_DIMS);
        int64_t n_elems = 1;
        for (int d = 0; d < DS_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne;
            snprintf(what, sizeof what, "dimension %u of tensor '%s'", d, t->name);
            if ((s = rd_u64(c, &ne, what))) return s;
            if (ne == 0 || ne > (uint64_t)INT64_MAX / (uint64_t)n_elems)
                return ds_fail(c->e, DS_ECORRUPT, "%s: tensor '%s' dimension %u is %llu: zero or too large",
                               c->path, t->name, d, (unsigned long long)ne);
            t->ne[d] = (int64_t)ne;
            n_elems *= (int64_t)ne;
        }
        uint32_t gtype;
        snprintf(what, sizeof what, "the type of tensor '%s'", t->name);
        if ((s = rd_u32(c, &gtype, what))) return s;
        if (ds_dtype_from_gguf(gtype, &t->type) != 0)
            return ds_fail(c->e, DS_EUNSUPPORTED, "%s: tensor '%s' has ggml type %u, which deltaserve does not read",
                           c->path, t->name, gtype);
        const ds_dtype_info *ti = ds_dtype_get(t->type);
        if (t->ne[0] % ti->block_elems != 0)
            return ds_fail(c->e, DS_ECORRUPT, "%s: tensor '%s' row of %lld elements is not a multiple of the %s block (%d)",
                           c->path, t->name, (long long)t->ne[0], ti->name, ti->block_elems);
        /* blocks * block bytes can overflow even though the element count fits */
        uint64_t blocks = (uint64_t)t->ne[0] / (uint64_t)ti->block_elems;
        if (blocks > UINT64_MAX / (uint64_t)ti->block_bytes)
            return ds_fail(c->e, DS_ECORRUPT, "%s: tensor '%s' byte size overflows", c->path, t->name);
        uint64_t row_bytes = blocks * (uint64_t)ti->block_bytes;
        uint64_t n_rows = (uint64_t)(n_elems / t->ne[0]);
        if (n_rows > UINT64_MAX / row_bytes)
            return ds_fail(c->e, DS_ECORRUPT, "%s: tensor '%s' byte size overflows", c->path, t->name);
        t->nbytes = (size_t)(row_bytes * n_rows);
        snprintf(what, sizeof what, "the offset of tensor '%s'", t->name);
        if ((s = rd_u64(c, &t->offset, what))) return s;
        for (uint64_t j = 0; j < i; j++)
            if (strcmp(g->tensors[j].name, t->name) == 0)
                return ds_fail(c->e, DS_ECORRUPT, "%s: tensor '%s' appears twice", c->path, t->name);
    }
    return DS_OK;
}

ds_status ds_gguf_parse(ds_gguf *g, const uint8_t *buf, size_t size, const char *name, ds_err *e) {
    ds_mapped_file keep = g->map;
    memset(g, 0, sizeof *g);
    g->map = keep;
    g->path = name;
    cursor c = {.buf = buf, .size = size, .pos = 0, .path = name, .e = e};
    ds_status s = need(&c, 4, "magic");
    if (s) return s;
    if (memcmp(buf, "GGUF", 4) != 0)
        return ds_fail(e, DS_ECORRUPT, "%s: not a GGUF file (magic is not \"GGUF\" at byte 0)", name);
    c.pos = 4;
    if ((s = rd_u32(&c, &g->version, "version"))) return s;
    if (g->version != 2 && g->version != 3)
        return ds_fail(e, DS_EUNSUPPORTED, "%s: GGUF version %u (2 and 3 are supported)", name, g->version);
    if ((s = rd_u64(&c, &g->n_tensors, "tensor count")) || (s = rd_u64(&c, &g->n_kv, "metadata count"))) return s;
    /* a kv takes at least 8+1+4+1 bytes and a tensor info 8+1+4+8+4+8 */
    if (g->n_kv > (size - c.pos) / 14)
        return ds_fail(e, DS_ECORRUPT, "%s: metadata count %llu (byte 16) cannot fit in %zu bytes", name,
                       (unsigned long long)g->n_kv, size);
    if (g->n_tensors > (size - c.pos) / 33)
        return ds_fail(e, DS_ECORRUPT, "%s: tensor count %llu (byte 8) cannot fit in %zu bytes", name,
                       (unsigned long long)g->n_tensors, size);
    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) return ds_fail(e, DS_ENOMEM, "%s: cannot allocate the header tables", name);
    if ((s = parse_kv(&c, g))) return s;

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    uint32_t align;
    s = ds_gguf_get_u32(g, "general.alignment", &align, e);
    if (s == DS_OK) {
        if (align == 0 || (align & (align - 1)) != 0)
            return ds_fail(e, DS_ECORRUPT, "%s: general.alignment is %u, not a power of two", name, align);
        g->alignment = align;
    } else if (s != DS_ENOTFOUND) {
        return s;
    }

    if ((s = parse_tensor_infos(&c, g))) return s;
    uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    g->data_offset = c.pos + pad;
    if (g->n_tensors > 0 && g->data_offset > size)
        return ds_fail(e, DS_ECORRUPT, "%s: truncated: data section would start at byte %llu, file has %zu bytes",
                       name, (unsigned long long)g->data_offset, size);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        ds_gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment != 0)
            return ds_fail(e, DS_ECORRUPT, "%s: tensor '%s' offset %llu is not aligned to %llu bytes", name,
                           t->name, (unsigned long long)t->offset, (unsigned long long)g->alignment);
        uint64_t avail = size - g->data_offset;
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return ds_fail(e, DS_ECORRUPT,
                           "%s: tensor '%s' data (offset %llu, %zu bytes) runs past the end of the file (%zu bytes)",
                           name, t->name, (unsigned long long)(g->data_offset + t->offset), t->nbytes, size);
        t->data = buf + g->data_offset + t->offset;
    }
    return DS_OK;
}

ds_status ds_gguf_open(ds_gguf *g, const char *path, ds_err *e) {
    memset(g, 0, sizeof *g);
    ds_status s = ds_mapped_file_open(&g->map, path, e);
    if (s) return s;
    s = ds_gguf_parse(g, g->map.data ? g->map.data : (const uint8_t *)"", g->map.size, path, e);
    if (s) ds_gguf_close(g);
    return s;
}

void ds_gguf_close(ds_gguf *g) {
    free(g->kv);
    free(g->tensors);
    ds_mapped_file_close(&g->map);
    memset(g, 0, sizeof *g);
}

const ds_gguf_kv *ds_gguf_find(const ds_gguf *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (ds_str_eq(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const ds_gguf_tensor *ds_gguf_find_tensor(const ds_gguf *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0) return &g->tensors[i];
    return NULL;
}

/* Reads element i of an integer-typed value as int64; 0 on success. */
static int int_at(uint32_t t, const uint8_t *p, uint64_t i, int64_t *out, int *is_u64_big) {
    *is_u64_big = 0;
    switch (t) {
    case DS_GGUF_UINT8: *out = p[i]; return 0;
    case DS_GGUF_INT8: { int8_t v; memcpy(&v, p + i, 1); *out = v; return 0; }
    case DS_GGUF_UINT16: { uint16_t v; memcpy(&v, p + 2 * i, 2); *out = v; return 0; }
    case DS_GGUF_INT16: { int16_t v; memcpy(&v, p + 2 * i, 2); *out = v; return 0; }
    case DS_GGUF_UINT32: { uint32_t v; memcpy(&v, p + 4 * i, 4); *out = v; return 0; }
    case DS_GGUF_INT32: { int32_t v; memcpy(&v, p + 4 * i, 4); *out = v; return 0; }
    case DS_GGUF_UINT64: {
        uint64_t v;
        memcpy(&v, p + 8 * i, 8);
        if (v > (uint64_t)INT64_MAX) { *is_u64_big = 1; return -1; }
        *out = (int64_t)v;
        return 0;
    }
    case DS_GGUF_INT64: { int64_t v; memcpy(&v, p + 8 * i, 8); *out = v; return 0; }
    default: return -1;
    }
}

static ds_status wrong_type(const ds_gguf *g, const ds_gguf_kv *kv, const char *want, ds_err *e) {
    return ds_fail(e, DS_ECORRUPT, "%s: key '%.*s' is %s%s%s, expected %s", g->path, (int)kv->key.len, kv->key.ptr,
                   type_name(kv->type), kv->type == DS_GGUF_ARRAY ? " of " : "",
                   kv->type == DS_GGUF_ARRAY ? type_name(kv->arr_type) : "", want);
}

ds_status ds_gguf_get_u32(const ds_gguf *g, const char *key, uint32_t *out, ds_err *e) {
    const ds_gguf_kv *kv = ds_gguf_find(g, key);
    if (!kv) return ds_fail(e, DS_ENOTFOUND, "%s: key '%s' is missing", g->path, key);
    int64_t v;
    int big = 0;
    if (kv->type == DS_GGUF_ARRAY || int_at(kv->type, kv->val, 0, &v, &big) != 0) {
        if (big) return ds_fail(e, DS_ECORRUPT, "%s: key '%s' is out of range", g->path, key);
        return wrong_type(g, kv, "an integer", e);
    }
    if (v < 0 || v > (int64_t)UINT32_MAX)
        return ds_fail(e, DS_ECORRUPT, "%s: key '%s' = %lld is out of range", g->path, key, (long long)v);
    *out = (uint32_t)v;
    return DS_OK;
}

ds_status ds_gguf_get_f32(const ds_gguf *g, const char *key, float *out, ds_err *e) {
    const ds_gguf_kv *kv = ds_gguf_find(g, key);
    if (!kv) return ds_fail(e, DS_ENOTFOUND, "%s: key '%s' is missing", g->path, key);
    if (kv->type == DS_GGUF_FLOAT32) {
        memcpy(out, kv->val, 4);
    } else if (kv->type == DS_GGUF_FLOAT64) {
        double d;
        memcpy(&d, kv->val, 8);
        *out = (float)d;
    } else {
        return wrong_type(g, kv, "a float", e);
    }
    if (*out != *out) return ds_fail(e, DS_ECORRUPT, "%s: key '%s' is NaN", g->path, key);
    return DS_OK;
}

ds_status ds_gguf_get_bool(const ds_gguf *g, const char *key, bool *out, ds_err *e) {
    const ds_gguf_kv *kv = ds_gguf_find(g, key);
    if (!kv) return ds_fail(e, DS_ENOTFOUND, "%s: key '%s' is missing", g->path, key);
    if (kv->type != DS_GGUF_BOOL) return wrong_type(g, kv, "a bool", e);
    *out = kv->val[0] != 0;
    return DS_OK;
}

ds_status ds_gguf_get_str(const ds_gguf *g, const char *key, ds_str *out, ds_err *e) {
    const ds_gguf_kv *kv = ds_gguf_find(g, key);
    if (!kv) return ds_fail(e, DS_ENOTFOUND, "%s: key '%s' is missing", g->path, key);
    if (kv->type != DS_GGUF_STRING) return wrong_type(g, kv, "a string", e);
    uint64_t len;
    memcpy(&len, kv->val, 8);
    out->ptr = (const char *)kv->val + 8;
    out->len = len;
    return DS_OK;
}

ds_status ds_gguf_arr_ints(const ds_gguf *g, const ds_gguf_kv *kv, int64_t *out, ds_err *e) {
    if (kv->type != DS_GGUF_ARRAY) return wrong_type(g, kv, "an array of integers", e);
    for (uint64_t i = 0; i < kv->arr_len; i++) {
        int big;
        if (int_at(kv->arr_type, kv->val, i, &out[i], &big) != 0)
            return big ? ds_fail(e, DS_ECORRUPT, "%s: key '%.*s' element %llu is out of range", g->path,
                                 (int)kv->key.len, kv->key.ptr, (unsigned long long)i)
                       : wrong_type(g, kv, "an array of integers", e);
    }
    return DS_OK;
}

ds_status ds_gguf_arr_floats(const ds_gguf *g, const ds_gguf_kv *kv, float *out, ds_err *e) {
    if (kv->type != DS_GGUF_ARRAY || (kv->arr_type != DS_GGUF_FLOAT32 && kv->arr_type != DS_GGUF_FLOAT64))
        return wrong_type(g, kv, "an array of floats", e);
    for (uint64_t i = 0; i < kv->arr_len; i++) {
        if (kv->arr_type == DS_GGUF_FLOAT32) {
            memcpy(&out[i], kv->val + 4 * i, 4);
        } else {
            double d;
            memcpy(&d, kv->val + 8 * i, 8);
            out[i] = (float)d;
        }
    }
    return DS_OK;
}

ds_status ds_gguf_arr_strings(const ds_gguf *g, const ds_gguf_kv *kv, ds_str *out, ds_err *e) {
    if (kv->type != DS_GGUF_ARRAY || kv->arr_type != DS_GGUF_STRING)
        return wrong_type(g, kv, "an array of strings", e);
    const uint8_t *p = kv->val; /* lengths were checked against the file by the parser */
    for (uint64_t i = 0; i < kv->arr_len; i++) {
        uint64_t len;
        memcpy(&len, p, 8);
        out[i].ptr = (const char *)p + 8;
        out[i].len = len;
        p += 8 + len;
    }
    return DS_OK;
}
