/* safetensors.c - safetensors header parsing and validation. */
#include "loading/safetensors.h"

#include <jansson.h>

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "loading/json_file.h"

static const struct { const char *name; int bytes; int ds; ds_dtype type; } st_types[] = {
    {"F32", 4, 1, DS_F32},  {"F16", 2, 1, DS_F16},  {"BF16", 2, 1, DS_BF16}, {"F64", 8, 0, DS_F32},
    {"I64", 8, 0, DS_F32},  {"I32", 4, 0, DS_F32},  {"I16", 2, 0, DS_F32},   {"I8", 1, 0, DS_F32},
    {"U8", 1, 0, DS_F32},   {"BOOL", 1, 0, DS_F32}, {"F8_E4M3", 1, 0, DS_F32}, {"F8_E5M2", 1, 0, DS_F32},
    {"U16", 2, 0, DS_F32},  {"U32", 4, 0, DS_F32},  {"U64", 8, 0, DS_F32},
};

static int cmp_offset(const void *a, const void *b) {
    const ds_st_tensor *x = *(const ds_st_tensor *const *)a, *y = *(const ds_st_tensor *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const ds_st_tensor *)a)->name, ((const ds_st_tensor *)b)->name);
}

static ds_status parse_entry(ds_safetensors *st, const char *nm, const json_t *item, ds_st_tensor *t,
                             const uint8_t *data, uint64_t data_size, ds_err *e) {
    const char *path = st->path;
    if (!json_is_object(item)) return ds_fail(e, DS_ECORRUPT, "%s: tensor '%s': header entry is not an object", path, nm);
    const json_t *dt = json_object_get(item, "dtype");
    const json_t *shape = json_object_get(item, "shape");
    const json_t *offs = json_object_get(item, "data_offsets");
    if (!json_is_string(dt)) return ds_fail(e, DS_ECORRUPT, "%s: tensor '%s': field 'dtype' is missing or not a string", path, nm);
    if (!json_is_array(shape)) return ds_fail(e, DS_ECORRUPT, "%s: tensor '%s': field 'shape' is missing or not an array", path, nm);
    if (!json_is_array(offs) || json_array_size(offs) != 2)
        return ds_fail(e, DS_ECORRUPT, "%s: tensor '%s': field 'data_offsets' is not a pair", path, nm);
    const char *dts = json_string_value(dt);
    int esize = 0;
    for (size_t i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
        if (strcmp(dts, st_types[i].name) == 0) {
            esize = st_types[i].bytes;
            t->has_dtype = st_types[i].ds;
            t->type = st_types[i].type;
        }
    if (!esize) return ds_fail(e, DS_EUNSUPPORTED, "%s: tensor '%s' has unknown dtype '%.15s'", path, nm, dts);
    snprintf(t->st_dtype, sizeof t->st_dtype, "%s", dts);
    size_t nd = json_array_size(shape);
    if (nd > DS_ST_MAX_DIMS) return ds_fail(e, DS_ECORRUPT, "%s: tensor '%s' has %zu dimensions", path, nm, nd);
    t->n_dims = (int)nd;
    uint64_t n_elems = 1;
    for (int d = 0; d < t->n_dims; d++) {
        uint64_t v;
        if (ds_json_uint(json_array_get(shape, (size_t)d), (uint64_t)1 << 40, &v) != 0)
            return ds_fail(e, DS_ECORRUPT, "%s: tensor '%s': shape[%d] is not a valid size", path, nm, d);
        t->shape[d] = (int64_t)v;
        if (v && n_elems > UINT64_MAX / 16 / v)
            return ds_fail(e, DS_ECORRUPT, "%s: tensor '%s': shape overflows", path, nm);
        n_elems *= v;
    }
    uint64_t b, en;
    if (ds_json_uint(json_array_get(offs, 0), data_size, &b) != 0 ||
        ds_json_uint(json_array_get(offs, 1), data_size, &en) != 0 || en < b)
        return ds_fail(e, DS_ECORRUPT, "%s: tensor '%s': data_offsets are out of range (data section has %llu bytes)",
                       path, nm, (unsigned long long)data_size);
    if (en - b != n_elems * (uint64_t)esize)
        return ds_fail(e, DS_ECORRUPT, "%s: tensor '%s': data_offsets span %llu bytes, shape and dtype need %llu",
                       path, nm, (unsigned long long)(en - b), (unsigned long long)(n_elems * (uint64_t)esize));
    t->data = data + b;
    t->nbytes = (size_t)(en - b);
    t->name = strdup(nm);
    if (!t->name) return ds_fail(e, DS_ENOMEM, "%s: out of memory", path);
    return DS_OK;
}

ds_status ds_safetensors_parse(ds_safetensors *st, const uint8_t *buf, size_t size, const char *name, ds_err *e) {
    ds_mapped_file keep = st->map;
    memset(st, 0, sizeof *st);
    st->map = keep;
    st->path = name;
    if (size < 8) return ds_fail(e, DS_ECORRUPT, "%s: truncated: %zu bytes, the header length alone takes 8", name, size);
    uint64_t hlen;
    memcpy(&hlen, buf, 8);
    if (hlen > size - 8 || hlen > DS_ST_MAX_HEADER)
        return ds_fail(e, DS_ECORRUPT, "%s: header length %llu (byte 0) is larger than the file (%zu bytes) or the 100 MiB limit",
                       name, (unsigned long long)hlen, size);
    /* JSON_DECODE_ANY: a header that is valid JSON but not an object gets its own message below */
    json_t *root;
    size_t used;
    ds_status s = ds_json_text_parse((const char *)buf + 8, (size_t)hlen, JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK,
                                     name, 8, &root, &used, e);
    if (s) return s;
    if (!json_is_object(root)) {
        s = ds_fail(e, DS_ECORRUPT, "%s: header is not a JSON object", name);
        goto out;
    }
    /* after the object only the padding may follow (spaces, as writers pad to 8 bytes) */
    const char *end = (const char *)buf + 8 + used, *hend = (const char *)buf + 8 + hlen;
    while (end < hend && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r' || *end == '\0')) end++;
    if (end < hend) {
        s = ds_fail(e, DS_ECORRUPT, "%s: header is not valid JSON (junk at byte %ld)", name, (long)(end - (const char *)buf));
        goto out;
    }
    size_t n = 0;
    const char *key;
    json_t *it;
    json_object_foreach(root, key, it) n += strcmp(key, "__metadata__") != 0;
    st->tensors = calloc(n ? n : 1, sizeof *st->tensors);
    ds_st_tensor **by_offset = calloc(n ? n : 1, sizeof *by_offset);
    if (!st->tensors || !by_offset) {
        free(by_offset);
        s = ds_fail(e, DS_ENOMEM, "%s: out of memory for %zu tensors", name, n);
        goto out;
    }
    const uint8_t *data = buf + 8 + hlen;
    uint64_t data_size = size - 8 - hlen;
    json_object_foreach(root, key, it) {
        if (strcmp(key, "__metadata__") == 0) continue;
        ds_st_tensor *t = &st->tensors[st->n_tensors];
        if ((s = parse_entry(st, key, it, t, data, data_size, e))) {
            free(t->name);
            t->name = NULL;
            break;
        }
        by_offset[st->n_tensors++] = t;
    }
    if (!s) {
        /* the format forbids overlapping tensors; a crafted file could alias one tensor's bytes for another */
        qsort(by_offset, (size_t)st->n_tensors, sizeof *by_offset, cmp_offset);
        const ds_st_tensor *last = NULL; /* the non-empty tensor reaching furthest so far */
        for (int i = 0; i < st->n_tensors; i++) {
            const ds_st_tensor *t = by_offset[i];
            if (t->nbytes == 0) continue; /* an empty tensor overlaps nothing, wherever it sits */
            if (last && t->data < last->data + last->nbytes) {
                s = ds_fail(e, DS_ECORRUPT, "%s: tensors '%s' and '%s' overlap", name, last->name, t->name);
                break;
            }
            last = t;
        }
    }
    free(by_offset);
    if (!s) {
        /* sorted by name: lookups are binary searches and duplicates sit side by side */
        qsort(st->tensors, (size_t)st->n_tensors, sizeof *st->tensors, cmp_name);
        for (int i = 1; i < st->n_tensors; i++)
            if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0) {
                s = ds_fail(e, DS_ECORRUPT, "%s: tensor '%s' appears twice in the header", name, st->tensors[i].name);
                break;
            }
    }
out:
    json_decref(root);
    return s;
}

ds_status ds_safetensors_open(ds_safetensors *st, const char *path, ds_err *e) {
    memset(st, 0, sizeof *st);
    ds_status s = ds_mapped_file_open(&st->map, path, e);
    if (s) return s;
    s = ds_safetensors_parse(st, st->map.data ? st->map.data : (const uint8_t *)"", st->map.size, path, e);
    if (s) ds_safetensors_close(st);
    return s;
}

void ds_safetensors_close(ds_safetensors *st) {
    for (int i = 0; i < st->n_tensors; i++) free(st->tensors[i].name);
    free(st->tensors);
    ds_mapped_file_close(&st->map);
    memset(st, 0, sizeof *st);
}

const ds_st_tensor *ds_safetensors_find(const ds_safetensors *st, const char *name) {
    ds_st_tensor key = {.name = (char *)name};
    return bsearch(&key, st->tensors, (size_t)st->n_tensors, sizeof *st->tensors, cmp_name);
}
