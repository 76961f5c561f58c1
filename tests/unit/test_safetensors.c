/* test_safetensors.c - the safetensors reader on hand-built headers (valid
 * ones of every dtype, then header length past the end, bad JSON, bad dtype,
 * shape/offset mismatch, overlap, duplicates, non-integer numbers), and the
 * Hugging Face directory loader on edited copies of make-model output (split
 * and fused experts, conv1d, MTP, layer indices, dtypes). Every failure must
 * give the right status and one message line naming the file and the tensor. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "loading/model_file.h"
#include "loading/safetensors.h"
#include "model/model_make.h"
#include "testing.h"

static char g_dir[512];

static void make_dir(void) {
    const char *base = getenv("DS_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/safetensors.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        exit(1);
    }
}

static void remove_dir(void) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

static int one_line(const char *msg) { return msg[0] && !strchr(msg, '\n'); }

/* ------------------------------------------------------------------------ */
/* buffers: 8-byte length, JSON, data                                       */

/* A safetensors image with header `json` (length field = strlen, unless
 * hlen_override != UINT64_MAX) followed by data_bytes of a byte pattern. */
static uint8_t *st_image(const char *json, size_t data_bytes, uint64_t hlen_override, size_t *size) {
    size_t j = strlen(json);
    *size = 8 + j + data_bytes;
    uint8_t *p = malloc(*size ? *size : 1);
    uint64_t hlen = hlen_override != UINT64_MAX ? hlen_override : j;
    memcpy(p, &hlen, 8);
    memcpy(p + 8, json, j);
    for (size_t i = 0; i < data_bytes; i++) p[8 + j + i] = (uint8_t)(i * 7 + 1);
    return p;
}

typedef struct {
    ds_safetensors st;
    ds_err e;
    ds_status s;
    uint8_t *buf;
    size_t size;
} st_parsed;

static void st_parse(st_parsed *p, const char *json, size_t data_bytes, uint64_t hlen_override, const char *name) {
    memset(p, 0, sizeof *p);
    p->buf = st_image(json, data_bytes, hlen_override, &p->size);
    p->s = ds_safetensors_parse(&p->st, p->buf, p->size, name, &p->e);
}

static void st_free(st_parsed *p) {
    ds_safetensors_close(&p->st);
    free(p->buf);
}

#define EXPECT_ST_BAD(json, data_bytes, name, code, ...)                                                     \
    do {                                                                                                    \
        st_parsed p_;                                                                                       \
        st_parse(&p_, (json), (data_bytes), UINT64_MAX, (name));                                            \
        CHECK(p_.s == (code), "%s: status %d (%s), expected %d; message: %s", (name), p_.s,                 \
              ds_status_name(p_.s), (code), p_.e.msg);                                                      \
        if (p_.s != DS_OK) {                                                                                \
            CHECK(one_line(p_.e.msg) && strstr(p_.e.msg, (name)), "%s: message does not name the file: %s", \
                  (name), p_.e.msg);                                                                        \
            const char *words_[] = {__VA_ARGS__, NULL};                                                     \
            for (int w_ = 0; words_[w_]; w_++)                                                              \
                CHECK(strstr(p_.e.msg, words_[w_]) != NULL, "%s: message lacks '%s': %s", (name), words_[w_], \
                      p_.e.msg);                                                                            \
        }                                                                                                   \
        st_free(&p_);                                                                                       \
    } while (0)

static void test_valid_header(void) {
    const char *json =
        "{\"__metadata__\": {\"format\": \"pt\"},"
        " \"w.f32\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]},"
        " \"b.bf16\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [24, 32]},"
        " \"s.f16\": {\"dtype\": \"F16\", \"shape\": [], \"data_offsets\": [32, 34]},"
        " \"i.i64\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [34, 42]},"
        " \"z.empty\": {\"dtype\": \"F32\", \"shape\": [0, 5], \"data_offsets\": [42, 42]},"
        " \"a.4d\": {\"dtype\": \"F16\", \"shape\": [1, 2, 1, 3], \"data_offsets\": [42, 54]}}     ";
    st_parsed p;
    st_parse(&p, json, 64, UINT64_MAX, "valid.safetensors");
    REQUIRE(p.s == DS_OK, "parse: %s", p.e.msg);
    CHECK(p.st.n_tensors == 6, "n_tensors %d (metadata must be skipped)", p.st.n_tensors);
    const uint8_t *data = p.buf + 8 + strlen(json);
    static const struct {
        const char *name, *dtype;
        int has, n_dims;
        ds_dtype type;
        int64_t shape[4];
        size_t off, nbytes;
    } want[] = {
        {"w.f32", "F32", 1, 2, DS_F32, {2, 3}, 0, 24},     {"b.bf16", "BF16", 1, 1, DS_BF16, {4}, 24, 8},
        {"s.f16", "F16", 1, 0, DS_F16, {0}, 32, 2},        {"i.i64", "I64", 0, 1, DS_F32, {1}, 34, 8},
        {"z.empty", "F32", 1, 2, DS_F32, {0, 5}, 42, 0},   {"a.4d", "F16", 1, 4, DS_F16, {1, 2, 1, 3}, 42, 12},
    };
    for (int i = 0; i < 6; i++) {
        const ds_st_tensor *t = ds_safetensors_find(&p.st, want[i].name);
        REQUIRE(t, "find %s", want[i].name);
        CHECK(strcmp(t->st_dtype, want[i].dtype) == 0, "%s dtype %s", want[i].name, t->st_dtype);
        CHECK(t->has_dtype == want[i].has, "%s has_dtype %d", want[i].name, t->has_dtype);
        if (want[i].has) CHECK(t->type == want[i].type, "%s type %d", want[i].name, t->type);
        CHECK(t->n_dims == want[i].n_dims, "%s n_dims %d", want[i].name, t->n_dims);
        for (int d = 0; d < want[i].n_dims; d++)
            CHECK(t->shape[d] == want[i].shape[d], "%s shape[%d] %lld", want[i].name, d, (long long)t->shape[d]);
        CHECK(t->data == data + want[i].off, "%s data pointer", want[i].name);
        CHECK(t->nbytes == want[i].nbytes, "%s nbytes %zu", want[i].name, t->nbytes);
    }
    CHECK(ds_safetensors_find(&p.st, "__metadata__") == NULL, "metadata is not a tensor");
    CHECK(ds_safetensors_find(&p.st, "w.f3") == NULL && ds_safetensors_find(&p.st, "zz") == NULL &&
              ds_safetensors_find(&p.st, "") == NULL, "find of absent names");
    st_free(&p);

    /* no tensors at all, and data past the last tensor, are fine */
    st_parse(&p, "{}", 0, UINT64_MAX, "empty-header.safetensors");
    CHECK(p.s == DS_OK && p.st.n_tensors == 0, "{}: %s", p.e.msg);
    st_free(&p);
    st_parse(&p, "{\"x\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}", 100, UINT64_MAX, "extra.safetensors");
    CHECK(p.s == DS_OK && p.st.n_tensors == 1, "trailing data: %s", p.e.msg);
    st_free(&p);
    /* every dtype of the format is known, with its element size */
    static const struct { const char *dt; int size; } all[] = {
        {"F64", 8}, {"I64", 8}, {"U64", 8}, {"I32", 4}, {"U32", 4}, {"I16", 2}, {"U16", 2},
        {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F32", 4}, {"F16", 2}, {"BF16", 2}};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        char js[200];
        snprintf(js, sizeof js, "{\"t\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[0,%d]}}", all[i].dt,
                 3 * all[i].size);
        st_parse(&p, js, 32, UINT64_MAX, "dtypes.safetensors");
        CHECK(p.s == DS_OK, "dtype %s: %s", all[i].dt, p.e.msg);
        st_free(&p);
    }
}

static void test_bad_length_and_json(void) {
    st_parsed p;
    /* fewer than 8 bytes */
    for (size_t n = 0; n < 8; n++) {
        ds_safetensors st;
        ds_err e = {0};
        memset(&st, 0, sizeof st);
        uint8_t *b = malloc(n ? n : 1);
        memset(b, 0, n);
        ds_status s = ds_safetensors_parse(&st, b, n, "short.safetensors", &e);
        CHECK(s == DS_ECORRUPT && strstr(e.msg, "short.safetensors") && strstr(e.msg, "truncated"), "%zu bytes: %s", n,
              e.msg);
        ds_safetensors_close(&st);
        free(b);
    }
    /* header length past the end of the file, by one and by a lot */
    const char *ok = "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    st_parse(&p, ok, 4, strlen(ok) + 5, "hlen-plus5.safetensors");
    CHECK(p.s == DS_ECORRUPT && strstr(p.e.msg, "hlen-plus5.safetensors") && strstr(p.e.msg, "header length"), "%s",
          p.e.msg);
    st_free(&p);
    st_parse(&p, ok, 4, UINT64_MAX - 3, "hlen-huge.safetensors");
    CHECK(p.s == DS_ECORRUPT && strstr(p.e.msg, "header length"), "%s", p.e.msg);
    st_free(&p);
    /* a length that cuts the JSON short */
    st_parse(&p, ok, 4, strlen(ok) - 1, "hlen-short.safetensors");
    CHECK(p.s == DS_ECORRUPT && strstr(p.e.msg, "JSON"), "%s", p.e.msg);
    st_free(&p);
    /* a header length that covers the data: the tensor is then out of range or the JSON has junk */
    st_parse(&p, ok, 4, strlen(ok) + 4, "hlen-all.safetensors");
    CHECK(p.s != DS_OK && strstr(p.e.msg, "hlen-all.safetensors"), "%s", p.e.msg);
    st_free(&p);

    EXPECT_ST_BAD("{\"t\": {\"dtype\": \"F32\", ", 0, "badjson.safetensors", DS_ECORRUPT, "not valid JSON");
    EXPECT_ST_BAD("", 0, "nojson.safetensors", DS_ECORRUPT, "JSON");
    /* the message says where: the byte counts from the start of the file (the header starts at byte 8) */
    EXPECT_ST_BAD("{\"t\": {\"dtype\": \"F32\",\n\"shape\": [1] \"data_offsets\": [0, 4]}}", 4, "where.safetensors",
                  DS_ECORRUPT, "line 2, column 14", "byte 44");
    EXPECT_ST_BAD("[1, 2, 3]", 0, "array.safetensors", DS_ECORRUPT, "not a JSON object");
    EXPECT_ST_BAD("\"str\"", 0, "string.safetensors", DS_ECORRUPT, "not a JSON object");
    EXPECT_ST_BAD("{\"t\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},}", 4, "comma.safetensors",
                  DS_ECORRUPT, "JSON");
    EXPECT_ST_BAD("{\"t\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}} garbage", 4,
                  "trailing.safetensors", DS_ECORRUPT, "JSON");
}

static void test_bad_entries(void) {
#define E1(body) "{\"tensor.x\": " body "}"
    EXPECT_ST_BAD(E1("5"), 16, "entry-number.safetensors", DS_ECORRUPT, "tensor.x", "not an object");
    /* names and values quoted from the file cannot break the message into lines */
    EXPECT_ST_BAD("{\"two\\nlines\\r\": 5}", 16, "newline-name.safetensors", DS_ECORRUPT, "two?lines?");
    EXPECT_ST_BAD(E1("{\"dtype\":\"B\\n16\",\"shape\":[1],\"data_offsets\":[0,2]}"), 16, "newline-dtype.safetensors",
                  DS_EUNSUPPORTED, "B?16");
    EXPECT_ST_BAD(E1("{\"shape\":[1],\"data_offsets\":[0,4]}"), 16, "nodtype.safetensors", DS_ECORRUPT, "tensor.x", "dtype");
    EXPECT_ST_BAD(E1("{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}"), 16, "dtype-num.safetensors", DS_ECORRUPT,
                  "tensor.x", "dtype");
    EXPECT_ST_BAD(E1("{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}"), 16, "dtype-f33.safetensors",
                  DS_EUNSUPPORTED, "tensor.x", "F33");
    EXPECT_ST_BAD(E1("{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}"), 16, "dtype-lower.safetensors",
                  DS_EUNSUPPORTED, "tensor.x", "f32");
    EXPECT_ST_BAD(E1("{\"dtype\":\"\",\"shape\":[1],\"data_offsets\":[0,4]}"), 16, "dtype-empty.safetensors",
                  DS_EUNSUPPORTED, "tensor.x");
    EXPECT_ST_BAD(E1("{\"dtype\":\"F32\",\"data_offsets\":[0,4]}"), 16, "noshape.safetensors", DS_ECORRUPT, "tensor.x", "shape");
    EXPECT_ST_BAD(E1("{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,4]}"), 16, "shape-num.safetensors", DS_ECORRUPT,
                  "tensor.x", "shape");
    EXPECT_ST_BAD(E1("{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}"), 16, "9dims.safetensors",
                  DS_ECORRUPT, "tensor.x", "dimensions");
    /* non-integer, negative and too large sizes */
    static const char *const bad_dims[] = {"-1", "1.5", "\"4\"", "null", "true", "[4]", "1e300", "1099511627777", "-0.5"};
    for (size_t i = 0; i < sizeof bad_dims / sizeof bad_dims[0]; i++) {
        char js[256];
        snprintf(js, sizeof js, E1("{\"dtype\":\"F32\",\"shape\":[1,%s],\"data_offsets\":[0,4]}"), bad_dims[i]);
        EXPECT_ST_BAD(js, 16, "baddim.safetensors", DS_ECORRUPT, "tensor.x", "shape[1]");
    }
    EXPECT_ST_BAD(E1("{\"dtype\":\"F64\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,4]}"), 16,
                  "shape-ovf.safetensors", DS_ECORRUPT, "tensor.x", "overflows");
    /* offsets */
    EXPECT_ST_BAD(E1("{\"dtype\":\"F32\",\"shape\":[1]}"), 16, "nooffs.safetensors", DS_ECORRUPT, "tensor.x", "data_offsets");
    static const char *const bad_offs[] = {"[0]", "[0,4,8]", "\"0,4\"", "[0,17]", "[8,4]", "[-4,0]", "[0,3.5]",
                                           "[0.5,4.5]", "[\"0\",4]", "[0,null]", "[0,1e20]", "{}"};
    for (size_t i = 0; i < sizeof bad_offs / sizeof bad_offs[0]; i++) {
        char js[256];
        snprintf(js, sizeof js, E1("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":%s}"), bad_offs[i]);
        EXPECT_ST_BAD(js, 16, "badoffs.safetensors", DS_ECORRUPT, "tensor.x", "data_offsets");
    }
    /* the span must be exactly what shape and dtype need */
    EXPECT_ST_BAD(E1("{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}"), 16, "span-short.safetensors",
                  DS_ECORRUPT, "tensor.x", "16");
    EXPECT_ST_BAD(E1("{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]}"), 16, "span-long.safetensors",
                  DS_ECORRUPT, "tensor.x", "8");
    EXPECT_ST_BAD(E1("{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,4]}"), 16, "span-zero.safetensors",
                  DS_ECORRUPT, "tensor.x");
#undef E1
    /* overlapping tensors, in either order, and containment */
    EXPECT_ST_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[12,28]}}",
                  32, "overlap.safetensors", DS_ECORRUPT, "'a'", "'b'", "overlap");
    EXPECT_ST_BAD("{\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[12,28]},"
                  "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
                  32, "overlap2.safetensors", DS_ECORRUPT, "'a'", "'b'", "overlap");
    EXPECT_ST_BAD("{\"big\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},"
                  "\"in\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}",
                  32, "inside.safetensors", DS_ECORRUPT, "'big'", "'in'", "overlap");
    EXPECT_ST_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
                  32, "alias.safetensors", DS_ECORRUPT, "overlap");
    /* adjacent tensors and empty tensors at the same offset are fine */
    {
        st_parsed p;
        st_parse(&p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                     "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,16]},"
                     "\"f\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,16]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}",
                 32, UINT64_MAX, "adjacent.safetensors");
        CHECK(p.s == DS_OK, "adjacent: %s", p.e.msg);
        st_free(&p);
        /* an empty tensor at the first byte of another, whatever order a sort puts them in */
        for (int k = 0; k < 2; k++) {
            st_parse(&p, k ? "{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                             "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}"
                           : "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                             "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                     16, UINT64_MAX, "empty-first.safetensors");
            CHECK(p.s == DS_OK, "empty tensor at the start of another: %s", p.e.msg);
            st_free(&p);
        }
    }
    /* the same name twice (JSON allows it; the format does not) */
    EXPECT_ST_BAD("{\"dup\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                  "\"dup\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}",
                  32, "dupname.safetensors", DS_ECORRUPT, "'dup'", "twice");
    /* a bad entry after good ones: no leak, no crash, the bad one named */
    EXPECT_ST_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]},"
                  "\"c\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[32,64]}}",
                  64, "third.safetensors", DS_ECORRUPT, "'c'");
}

/* Files on disk: missing, empty, a directory, and a 100 MiB+ header length in a
 * (sparse) file large enough to hold it. */
static void test_files_on_disk(void) {
    char path[700];
    ds_safetensors st;
    ds_err e = {0};
    snprintf(path, sizeof path, "%s/missing.safetensors", g_dir);
    CHECK(ds_safetensors_open(&st, path, &e) == DS_EIO && strstr(e.msg, path), "missing: %s", e.msg);
    snprintf(path, sizeof path, "%s/empty.safetensors", g_dir);
    FILE *f = fopen(path, "wb");
    REQUIRE(f, "create");
    fclose(f);
    e.msg[0] = 0;
    CHECK(ds_safetensors_open(&st, path, &e) == DS_ECORRUPT && strstr(e.msg, path), "empty: %s", e.msg);
    e.msg[0] = 0;
    CHECK(ds_safetensors_open(&st, g_dir, &e) == DS_EIO && strstr(e.msg, g_dir), "directory: %s", e.msg);
    snprintf(path, sizeof path, "%s/huge-header.safetensors", g_dir);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    REQUIRE(fd >= 0, "create");
    uint64_t hlen = (100u << 20) + 8;
    int bad = write(fd, &hlen, 8) != 8 || ftruncate(fd, (off_t)hlen + 64) != 0;
    close(fd);
    REQUIRE(!bad, "write");
    e.msg[0] = 0;
    CHECK(ds_safetensors_open(&st, path, &e) == DS_ECORRUPT && strstr(e.msg, path) && strstr(e.msg, "100 MiB"),
          "100 MiB limit: %s", e.msg);
    /* a valid file on disk: data points into the mapping */
    snprintf(path, sizeof path, "%s/ok.safetensors", g_dir);
    size_t n;
    uint8_t *img = st_image("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, UINT64_MAX, &n);
    f = fopen(path, "wb");
    REQUIRE(f, "create");
    fwrite(img, 1, n, f);
    fclose(f);
    ds_status s = ds_safetensors_open(&st, path, &e);
    CHECK(s == DS_OK, "open: %s", e.msg);
    if (!s) {
        const ds_st_tensor *t = ds_safetensors_find(&st, "t");
        CHECK(t && t->data == st.map.data + n - 8 && memcmp(t->data, img + n - 8, 8) == 0, "data in place");
        ds_safetensors_close(&st);
    }
    free(img);
}

/* ------------------------------------------------------------------------ */
/* Hugging Face directories edited by hand                                   */

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *p = malloc((size_t)len + 1);
    if (fread(p, 1, (size_t)len, f) != (size_t)len) {
        free(p);
        p = NULL;
    } else {
        p[len] = 0;
    }
    fclose(f);
    *n = (size_t)len;
    return p;
}

static int spit(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int bad = fwrite(p, 1, n, f) != n;
    return (fclose(f) != 0 || bad) ? -1 : 0;
}

typedef void (*header_edit)(json_t *hdr);

/* Copies model dir `src` to `dst` with model.safetensors's header edited. */
static int copy_model_edited(const char *src, const char *dst, header_edit edit) {
    char a[1200], b[1200];
    mkdir(dst, 0755);
    static const char *const small[] = {"config.json", "generation_config.json", "tokenizer_config.json"};
    for (int i = 0; i < 3; i++) {
        size_t n;
        snprintf(a, sizeof a, "%s/%s", src, small[i]);
        snprintf(b, sizeof b, "%s/%s", dst, small[i]);
        char *t = slurp(a, &n);
        if (!t || spit(b, t, n)) {
            free(t);
            return -1;
        }
        free(t);
    }
    size_t n;
    snprintf(a, sizeof a, "%s/model.safetensors", src);
    char *file = slurp(a, &n);
    if (!file) return -1;
    uint64_t hlen;
    memcpy(&hlen, file, 8);
    json_t *hdr = json_loadb(file + 8, (size_t)hlen, 0, NULL);
    if (!hdr) {
        free(file);
        return -1;
    }
    edit(hdr);
    char *js = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(hdr);
    size_t jl = strlen(js), padded = (jl + 7) / 8 * 8;
    size_t out_n = 8 + padded + (n - 8 - (size_t)hlen);
    char *out = malloc(out_n);
    uint64_t nh = padded;
    memcpy(out, &nh, 8);
    memcpy(out + 8, js, jl);
    memset(out + 8 + jl, ' ', padded - jl);
    memcpy(out + 8 + padded, file + 8 + hlen, n - 8 - (size_t)hlen);
    snprintf(b, sizeof b, "%s/model.safetensors", dst);
    int rc = spit(b, out, out_n);
    free(js);
    free(out);
    free(file);
    return rc;
}

static void rename_key(json_t *hdr, const char *from, const char *to) {
    json_t *it = json_incref(json_object_get(hdr, from));
    if (!it) {
        fprintf(stderr, "no tensor %s\n", from);
        abort();
    }
    json_object_del(hdr, from);
    json_object_set_new(hdr, to, it);
}

static json_t *int_array(const int *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

static void set_shape(json_t *hdr, const char *name, int n, const int *dims) {
    json_t *it = json_object_get(hdr, name);
    if (!it) {
        fprintf(stderr, "no tensor %s\n", name);
        abort();
    }
    json_object_set_new(it, "shape", int_array(dims, n));
}

#define LM "model.language_model."
#define EXP(e, proj) LM "layers.0.mlp.experts." #e "." proj ".weight"
static void ed_neg_expert(json_t *h) { rename_key(h, EXP(3, "gate_proj"), EXP(-1, "gate_proj")); }
static void ed_big_expert(json_t *h) { rename_key(h, EXP(3, "up_proj"), EXP(8, "up_proj")); }
static void ed_huge_expert(json_t *h) { rename_key(h, EXP(3, "up_proj"), EXP(99999999999, "up_proj")); }
static void ed_dup_expert(json_t *h) { rename_key(h, EXP(4, "down_proj"), LM "layers.0.mlp.experts.03.down_proj.weight"); }
static void ed_drop_expert(json_t *h) { json_object_del(h, EXP(5, "down_proj")); }
static void ed_expert_shape(json_t *h) {
    static const int dims[2] = {128, 512};
    set_shape(h, EXP(2, "gate_proj"), 2, dims);
}
static void ed_expert_3d(json_t *h) {
    static const int dims[3] = {1, 256, 256};
    set_shape(h, EXP(2, "gate_proj"), 3, dims);
}
static void ed_expert_dtype(json_t *h) {
    json_object_set_new(json_object_get(h, EXP(4, "up_proj")), "dtype", json_string("F16"));
}
static void ed_expert_bad_layer(json_t *h) { rename_key(h, EXP(4, "up_proj"), LM "layers.1.mlp.experts.4.up_proj.weight"); }
static void ed_gate_up_odd(json_t *h) {
    static const int dims[3] = {4096, 1, 256};
    set_shape(h, LM "layers.0.mlp.experts.gate_up_proj", 3, dims);
}
static void ed_gate_up_2d(json_t *h) {
    static const int dims[2] = {4096, 256};
    set_shape(h, LM "layers.0.mlp.experts.gate_up_proj", 2, dims);
}
static void ed_conv_2d(json_t *h) {
    static const int dims[2] = {256, 4};
    set_shape(h, LM "layers.0.linear_attn.conv1d.weight", 2, dims);
}
static void ed_conv_mid(json_t *h) {
    static const int dims[3] = {128, 2, 4};
    set_shape(h, LM "layers.0.linear_attn.conv1d.weight", 3, dims);
}
static void ed_layer_range(json_t *h) {
    rename_key(h, LM "layers.0.input_layernorm.weight", LM "layers.7.input_layernorm.weight");
}
static void ed_layer_neg(json_t *h) {
    rename_key(h, LM "layers.0.input_layernorm.weight", LM "layers.-2.input_layernorm.weight");
}
static void ed_mtp_layer1(json_t *h) { rename_key(h, "mtp.layers.0.input_layernorm.weight", "mtp.layers.1.input_layernorm.weight"); }
static void ed_dtype_i64(json_t *h) {
    json_object_set_new(json_object_get(h, LM "layers.0.linear_attn.dt_bias"), "dtype", json_string("I16"));
}
static void ed_norm_2d(json_t *h) {
    static const int dims[2] = {128, 2};
    set_shape(h, LM "norm.weight", 2, dims);
}
static void ed_missing(json_t *h) { json_object_del(h, LM "layers.0.linear_attn.out_proj.weight"); }
static void ed_extras(json_t *h) {
    /* vision tensors (any dtype), unknown language-model tensors and an unused MTP name are ignored */
    json_t *emb = json_object_get(h, LM "embed_tokens.weight");
    json_t *v = json_deep_copy(emb);
    json_object_set_new(v, "dtype", json_string("U8"));
    json_int_t b = json_integer_value(json_array_get(json_object_get(v, "data_offsets"), 0));
    json_object_set_new(v, "shape", int_array((const int[]){4}, 1));
    json_object_set_new(v, "data_offsets", json_pack("[I, I]", b, b));
    json_t *w = json_deep_copy(v);
    json_t *x = json_deep_copy(v);
    json_t *y = json_deep_copy(v);
    json_object_set_new(v, "shape", int_array((const int[]){0}, 1));
    json_object_set_new(w, "shape", int_array((const int[]){0}, 1));
    json_object_set_new(w, "dtype", json_string("F32"));
    json_object_set_new(x, "shape", int_array((const int[]){0}, 1));
    json_object_set_new(x, "dtype", json_string("F32"));
    json_object_set_new(y, "shape", int_array((const int[]){0}, 1));
    json_object_set_new(y, "dtype", json_string("F32"));
    json_object_set_new(h, "model.visual.blocks.0.attn.qkv.weight", v);
    json_object_set_new(h, LM "rotary_emb.inv_freq", w);
    json_object_set_new(h, LM "layers.0.self_attn.rotary_emb.inv_freq", x);
    json_object_set_new(h, "some.other.tensor", y);
}

typedef struct {
    const char *name;
    int model; /* 0: dense tiny (1 layer + MTP), 1: MoE split experts, 2: MoE fused experts */
    header_edit edit;
    ds_status code; /* DS_OK: must load */
    const char *words[3];
} hf_case;

static const hf_case HF_CASES[] = {
    {"neg-expert", 1, ed_neg_expert, DS_ECORRUPT, {"experts.-1.gate_proj", "expert -1"}},
    {"big-expert", 1, ed_big_expert, DS_ECORRUPT, {"experts.8.up_proj", "expert 8"}},
    {"huge-expert", 1, ed_huge_expert, DS_ECORRUPT, {"experts.99999999999.up_proj"}},
    {"dup-expert", 1, ed_dup_expert, DS_ECORRUPT, {"down_proj", "twice"}},
    {"drop-expert", 1, ed_drop_expert, DS_ENOTFOUND, {"expert 5", "down_proj"}},
    {"expert-shape", 1, ed_expert_shape, DS_ECORRUPT, {"experts.2.gate_proj"}},
    {"expert-3d", 1, ed_expert_3d, DS_ECORRUPT, {"experts.2.gate_proj"}},
    {"expert-dtype", 1, ed_expert_dtype, DS_ECORRUPT, {"experts.4.up_proj"}},
    {"expert-layer", 1, ed_expert_bad_layer, DS_ECORRUPT, {"layers.1.mlp.experts.4.up_proj"}},
    {"gate-up-odd", 2, ed_gate_up_odd, DS_ECORRUPT, {"gate_up_proj"}},
    {"gate-up-2d", 2, ed_gate_up_2d, DS_ECORRUPT, {"gate_up_proj"}},
    {"conv-2d", 0, ed_conv_2d, DS_ECORRUPT, {"conv1d.weight"}},
    {"conv-mid", 0, ed_conv_mid, DS_ECORRUPT, {"conv1d.weight"}},
    {"layer-range", 0, ed_layer_range, DS_ECORRUPT, {"layers.7.input_layernorm"}},
    {"layer-neg", 0, ed_layer_neg, DS_ECORRUPT, {"layers.-2.input_layernorm"}},
    {"mtp-layer1", 0, ed_mtp_layer1, DS_EUNSUPPORTED, {"mtp.layers.1.input_layernorm"}},
    {"dtype-i16", 0, ed_dtype_i64, DS_EUNSUPPORTED, {"dt_bias", "I16"}},
    {"norm-2d", 0, ed_norm_2d, DS_ECORRUPT, {"output_norm.weight"}},
    {"missing", 0, ed_missing, DS_ENOTFOUND, {"blk.0.ssm_out.weight", "missing"}},
    {"extras", 0, ed_extras, DS_OK, {NULL}},
};

static char g_models[3][700];

static void make_models(void) {
    static const struct { const char *shape; int split; } m[3] = {{"tiny", 0}, {"tiny-moe", 1}, {"tiny-moe", 0}};
    for (int i = 0; i < 3; i++) {
        snprintf(g_models[i], sizeof g_models[i], "%s/model%d", g_dir, i);
        ds_make_options o = {.shape = m[i].shape, .n_layers = 1, .dtype = "bf16", .format = DS_FORMAT_SAFETENSORS,
                             .seed = 7, .scale = 1.0f, .out = g_models[i], .split_experts = m[i].split,
                             .no_mtp = i != 0};
        ds_err e = {0};
        if (ds_make_model(&o, &e) != DS_OK) {
            printf("FAIL make-model %s: %s\n", m[i].shape, e.msg);
            g_models[i][0] = 0;
        }
    }
}

static void test_hf_edited_dirs(void) {
    for (size_t i = 0; i < sizeof HF_CASES / sizeof HF_CASES[0]; i++) {
        const hf_case *c = &HF_CASES[i];
        REQUIRE(g_models[c->model][0], "model %d was not made", c->model);
        /* the unedited model loads */
        if (i == 0 || c->model != HF_CASES[i - 1].model) {
            ds_model_file *m;
            ds_err e = {0};
            ds_status s = ds_model_open(g_models[c->model], &m, &e);
            CHECK(s == DS_OK, "model %d: %s", c->model, e.msg);
            ds_model_close(m);
        }
        char dst[800];
        snprintf(dst, sizeof dst, "%s/case-%s", g_dir, c->name);
        int rc = copy_model_edited(g_models[c->model], dst, c->edit);
        REQUIRE(rc == 0, "%s: copy failed", c->name);
        ds_model_file *m = NULL;
        ds_err e = {0};
        ds_status s = ds_model_open(dst, &m, &e);
        CHECK(s == c->code, "%s: status %d (%s), expected %d: %s", c->name, s, ds_status_name(s), c->code, e.msg);
        if (s) {
            CHECK(m == NULL, "%s: model returned on failure", c->name);
            CHECK(one_line(e.msg) && strstr(e.msg, dst), "%s: message does not name the directory: %s", c->name, e.msg);
            for (int w = 0; w < 3 && c->words[w]; w++)
                CHECK(strstr(e.msg, c->words[w]) != NULL, "%s: message lacks '%s': %s", c->name, c->words[w], e.msg);
        }
        ds_model_close(m);
    }
}


/* config.json and generation_config.json fields: missing, wrong type, out of
 * range, contradictory between text_config and the top level. */
typedef struct {
    const char *name;
    const char *where; /* "text", "top", "both", "gen", "raw" (replace config.json), "rm" (delete config.json) */
    const char *key;   /* "a" or "a.b" */
    const char *value; /* JSON, or NULL to delete the key */
    ds_status code;
    const char *file;  /* the file the message must name */
    const char *words[2]; /* a name starting "moe-" edits the MoE model with split experts */
} cfg_case;

static const cfg_case CFG_CASES[] = {
    {"no-hidden", "text", "hidden_size", NULL, DS_ENOTFOUND, "config.json", {"'hidden_size'", "missing"}},
    {"hidden-float", "text", "hidden_size", "1.5", DS_ECORRUPT, "config.json", {"'hidden_size'"}},
    {"hidden-string", "text", "hidden_size", "\"256\"", DS_ECORRUPT, "config.json", {"'hidden_size'"}},
    {"hidden-512", "text", "hidden_size", "512", DS_ECORRUPT, "", {"token_embd.weight", "shape"}},
    {"hidden-top", "top", "hidden_size", "512", DS_ECORRUPT, "config.json", {"'hidden_size'", "differs"}},
    {"hidden-top-same", "top", "hidden_size", "256", DS_OK, "", {NULL}},
    {"vocab", "text", "vocab_size", "2000", DS_ECORRUPT, "", {"token_embd.weight"}},
    {"layers-neg", "text", "num_hidden_layers", "-1", DS_ECORRUPT, "config.json", {"'num_hidden_layers'"}},
    {"layers-600", "text", "num_hidden_layers", "600", DS_EUNSUPPORTED, "config.json", {"600"}},
    {"layers-0", "text", "num_hidden_layers", "0", DS_ECORRUPT, "config.json", {"layer_types"}},
    {"heads-0", "text", "num_attention_heads", "0", DS_ECORRUPT, "config.json", {"'num_attention_heads'"}},
    {"kv-heads-0", "text", "num_key_value_heads", "0", DS_ECORRUPT, "config.json", {"'num_key_value_heads'"}},
    {"model-type", "text", "model_type", "\"llama\"", DS_EUNSUPPORTED, "config.json", {"llama"}},
    {"no-model-type", "both", "model_type", NULL, DS_ENOTFOUND, "config.json", {"model_type"}},
    {"layer-types-len", "text", "layer_types", "[\"linear_attention\", \"full_attention\"]", DS_ECORRUPT, "config.json",
     {"layer_types"}},
    {"layer-types-bad", "text", "layer_types", "[\"mamba\"]", DS_ECORRUPT, "config.json", {"layer_types[0]"}},
    {"layer-types-num", "text", "layer_types", "[4]", DS_ECORRUPT, "config.json", {"layer_types[0]"}},
    {"layer-types-full", "text", "layer_types", "[\"full_attention\"]", DS_ENOTFOUND, "", {"blk.0.attn_q.weight", "missing"}},
    {"layer-types-obj", "text", "layer_types", "{}", DS_ECORRUPT, "config.json", {"layer_types"}},
    {"pad-huge", "text", "pad_token_id", "1e300", DS_ECORRUPT, "config.json", {"pad_token_id"}},
    {"pad-neg", "text", "pad_token_id", "-3", DS_ECORRUPT, "config.json", {"pad_token_id"}},
    {"eps-huge", "text", "rms_norm_eps", "1e300", DS_ECORRUPT, "config.json", {"rms_norm_eps"}},
    {"eps-zero", "text", "rms_norm_eps", "0", DS_ECORRUPT, "", {"rms_norm_eps"}},
    {"eps-string", "text", "rms_norm_eps", "\"1e-6\"", DS_ECORRUPT, "config.json", {"rms_norm_eps"}},
    {"theta-huge", "text", "rope_parameters.rope_theta", "1e39", DS_ECORRUPT, "config.json", {"rope_theta"}},
    {"rotary-0", "text", "rope_parameters.partial_rotary_factor", "0", DS_ECORRUPT, "config.json", {"partial_rotary_factor"}},
    {"rotary-2", "text", "rope_parameters.partial_rotary_factor", "2", DS_ECORRUPT, "config.json", {"partial_rotary_factor"}},
    {"rope-string", "text", "rope_parameters", "\"x\"", DS_ECORRUPT, "config.json", {"rope_parameters"}},
    /* YaRN (the tiny model's rope_parameters say rope_type "default": these edit it) */
    {"yarn-ok", "text", "rope_parameters.rope_type", "\"yarn\"", DS_ECORRUPT, "config.json", {"rope_parameters.factor", "missing"}},
    {"rope-type-linear", "text", "rope_parameters.rope_type", "\"linear\"", DS_EUNSUPPORTED, "config.json",
     {"rope_parameters.rope_type", "linear"}},
    {"rope-type-num", "text", "rope_parameters.rope_type", "3", DS_ECORRUPT, "config.json", {"rope_parameters.rope_type"}},
    {"yarn-good", "text", "rope_parameters", "{\"rope_type\": \"yarn\", \"factor\": 4}", DS_OK, "", {NULL}},
    {"yarn-factor-0", "text", "rope_parameters", "{\"rope_type\": \"yarn\", \"factor\": 0}", DS_ECORRUPT, "config.json",
     {"'rope_parameters.factor'"}},
    {"yarn-factor-neg", "text", "rope_parameters", "{\"type\": \"yarn\", \"factor\": -2}", DS_ECORRUPT, "config.json",
     {"'rope_parameters.factor'"}},
    {"yarn-beta", "text", "rope_parameters", "{\"rope_type\": \"yarn\", \"factor\": 4, \"beta_fast\": -1}", DS_ECORRUPT,
     "config.json", {"'rope_parameters.beta_fast'"}},
    {"yarn-orig-0", "text", "rope_parameters",
     "{\"rope_type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 0}", DS_ECORRUPT, "config.json",
     {"'rope_parameters.original_max_position_embeddings'"}},
    {"yarn-truncate", "text", "rope_parameters", "{\"rope_type\": \"yarn\", \"factor\": 4, \"truncate\": 1}", DS_ECORRUPT,
     "config.json", {"'rope_parameters.truncate'"}},
    {"text-config-num", "top", "text_config", "5", DS_ECORRUPT, "config.json", {"text_config"}},
    {"tie-string", "text", "tie_word_embeddings", "\"yes\"", DS_ECORRUPT, "config.json", {"tie_word_embeddings"}},
    {"tie-top", "top", "tie_word_embeddings", "true", DS_ECORRUPT, "config.json", {"tie_word_embeddings", "differs"}},
    {"hv-3", "text", "linear_num_value_heads", "3", DS_ECORRUPT, "", {"value heads"}},
    {"no-hk", "text", "linear_num_key_heads", NULL, DS_ENOTFOUND, "config.json", {"linear_num_key_heads"}},
    {"mtp-2", "text", "mtp_num_hidden_layers", "2", DS_EUNSUPPORTED, "", {"MTP"}},
    {"mtp-0", "text", "mtp_num_hidden_layers", "0", DS_OK, "", {NULL}},
    {"intermediate", "text", "intermediate_size", "1000", DS_ECORRUPT, "", {"ffn_gate.weight"}},
    {"eos-string", "gen", "eos_token_id", "\"x\"", DS_ECORRUPT, "generation_config.json", {"eos_token_id"}},
    {"eos-neg", "text", "eos_token_id", "[1, -1]", DS_ECORRUPT, "config.json", {"eos_token_id"}},
    {"not-json", "raw", NULL, "{\"model_type\": ", DS_ECORRUPT, "config.json", {"JSON"}},
    {"not-object", "raw", NULL, "[1, 2]", DS_ECORRUPT, "config.json", {"object"}},
    {"empty", "raw", NULL, "", DS_ECORRUPT, "config.json", {"JSON"}},
    /* where the syntax breaks: line and column in a multi-line file */
    {"not-json-where", "raw", NULL, "{\n  \"model_type\": \"qwen3_5\",\n  \"hidden_size\": 256,,\n}", DS_ECORRUPT,
     "config.json", {"line 3, column 22", "byte 50"}},
    /* a field given twice: which one is meant cannot be told */
    {"field-twice", "raw", NULL, "{\"model_type\": \"qwen3\", \"model_type\": \"qwen3_5\"}", DS_ECORRUPT, "config.json",
     {"'model_type'", "twice"}},
    {"no-config", "rm", NULL, NULL, DS_ENOTFOUND, "config.json", {"cannot open"}},
    /* split experts are stacked in memory: a huge expert count must fail before it allocates */
    {"moe-experts-huge", "text", "num_experts", "600000", DS_ECORRUPT, "model.safetensors", {"600000 experts"}},
    {"moe-experts-16", "text", "num_experts", "16", DS_ENOTFOUND, "", {"expert 8", "missing"}},
};

static void copy_small(const char *src, const char *dst, const char *file) {
    char a[1200], b[1200];
    size_t n;
    snprintf(a, sizeof a, "%s/%s", src, file);
    snprintf(b, sizeof b, "%s/%s", dst, file);
    char *t = slurp(a, &n);
    if (t) spit(b, t, n);
    free(t);
}

static void test_hf_config_fields(void) {
    REQUIRE(g_models[0][0] && g_models[1][0], "models were not made");
    for (size_t i = 0; i < sizeof CFG_CASES / sizeof CFG_CASES[0]; i++) {
        const cfg_case *c = &CFG_CASES[i];
        const char *src = g_models[strncmp(c->name, "moe-", 4) == 0];
        char shard[1200];
        snprintf(shard, sizeof shard, "%s/model.safetensors", src);
        char dst[800], path[1200];
        snprintf(dst, sizeof dst, "%s/cfg-%s", g_dir, c->name);
        mkdir(dst, 0755);
        snprintf(path, sizeof path, "%s/model.safetensors", dst);
        int rc = symlink(shard, path);
        REQUIRE(rc == 0, "symlink");
        copy_small(src, dst, "tokenizer_config.json");
        copy_small(src, dst, "generation_config.json");
        copy_small(src, dst, "config.json");
        int gen = !strcmp(c->where, "gen");
        snprintf(path, sizeof path, "%s/%s", dst, gen ? "generation_config.json" : "config.json");
        if (!strcmp(c->where, "rm")) {
            unlink(path);
        } else if (!strcmp(c->where, "raw")) {
            spit(path, c->value, strlen(c->value));
        } else {
            size_t n;
            char *text = slurp(path, &n);
            json_t *root = json_loads(text, 0, NULL);
            free(text);
            REQUIRE(root, "parse %s", path);
            json_t *obj = !strcmp(c->where, "text") ? json_object_get(root, "text_config") : root;
            char key[64];
            snprintf(key, sizeof key, "%s", c->key);
            char *dot = strchr(key, '.');
            if (dot) {
                *dot = 0;
                obj = json_object_get(obj, key);
                memmove(key, dot + 1, strlen(dot + 1) + 1);
            }
            REQUIRE(obj, "%s: no object for %s", c->name, c->key);
            json_object_del(obj, key);
            if (!strcmp(c->where, "both")) json_object_del(json_object_get(root, "text_config"), key);
            if (c->value) {
                json_t *v = json_loads(c->value, JSON_DECODE_ANY, NULL);
                REQUIRE(v, "%s: bad value", c->name);
                json_object_set_new(obj, key, v);
            }
            char *out = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
            json_decref(root);
            spit(path, out, strlen(out));
            free(out);
        }
        ds_model_file *m = NULL;
        ds_err e = {0};
        ds_status s = ds_model_open(dst, &m, &e);
        CHECK(s == c->code, "%s: status %d (%s), expected %d: %s", c->name, s, ds_status_name(s), c->code, e.msg);
        if (s) {
            char want[1000];
            snprintf(want, sizeof want, "%s%s%s", dst, *c->file ? "/" : "", c->file);
            CHECK(one_line(e.msg) && strstr(e.msg, want), "%s: message does not name %s: %s", c->name, want, e.msg);
            for (int w = 0; w < 2 && c->words[w]; w++)
                CHECK(strstr(e.msg, c->words[w]) != NULL, "%s: message lacks '%s': %s", c->name, c->words[w], e.msg);
        }
        ds_model_close(m);
    }
}

int main(void) {
    make_dir();
    RUN(test_valid_header);
    RUN(test_bad_length_and_json);
    RUN(test_bad_entries);
    RUN(test_files_on_disk);
    make_models();
    RUN(test_hf_edited_dirs);
    RUN(test_hf_config_fields);
    remove_dir();
    return ds_test_finish();
}
