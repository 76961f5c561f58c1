/* test_gguf_rw.c - the GGUF writer and reader against each other and against
 * hand-built files: metadata of every value type, tensors of every dtype and
 * rank, alignment and padding, the typed getters, the chunked tensor writer,
 * and targeted bad files. Every bad file must give the right status and one
 * message line naming the file and the key or tensor at fault.
 *
 * Hand-built files come from a small byte builder (bb_*) that writes the GGUF
 * layout directly, so that the reader is also checked on files our writer
 * would never produce (all 13 value types, v2, custom alignment...). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/dtype.h"
#include "loading/gguf.h"
#include "loading/gguf_writer.h"
#include "testing.h"

/* ------------------------------------------------------------------------ */
/* scratch directory, files, random numbers                                 */

static char g_dir[512];

static void make_dir(void) {
    const char *base = getenv("DS_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/gguf_rw.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        exit(1);
    }
}

static void tmp_path(char *buf, size_t n, const char *file) { snprintf(buf, n, "%s/%s", g_dir, file); }

static void remove_dir(void) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

static int write_all_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int bad = n && fwrite(p, 1, n, f) != n;
    bad |= fclose(f) != 0;
    return bad ? -1 : 0;
}

static uint64_t rng_state = 0x1234567;
static uint64_t rnd(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float rndf(void) { return (float)((double)(rnd() >> 11) * (2.0 / 9007199254740992.0) - 1.0); }

/* ------------------------------------------------------------------------ */
/* byte builder                                                             */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bb_put(bb *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) abort();
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void bb_u8(bb *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_u16(bb *b, uint16_t v) { bb_put(b, &v, 2); }
static void bb_u32(bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_f32(bb *b, float v) { bb_put(b, &v, 4); }
static void bb_f64(bb *b, double v) { bb_put(b, &v, 8); }
static void bb_strn(bb *b, const char *s, size_t n) { bb_u64(b, n); bb_put(b, s, n); }
static void bb_str(bb *b, const char *s) { bb_strn(b, s, strlen(s)); }
static void bb_header(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
static void bb_key(bb *b, const char *k, uint32_t type) { bb_str(b, k); bb_u32(b, type); }
static void bb_kv_u32(bb *b, const char *k, uint32_t v) { bb_key(b, k, DS_GGUF_UINT32); bb_u32(b, v); }
static void bb_tinfo(bb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off) {
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) bb_u64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, off);
}
static void bb_pad(bb *b, size_t align) {
    while (b->n % align) bb_u8(b, 0);
}
static void bb_zeros(bb *b, size_t n) {
    for (size_t i = 0; i < n; i++) bb_u8(b, 0);
}

/* ------------------------------------------------------------------------ */
/* parsing a buffer from an exact-size heap copy, so that ASan sees over-reads */

typedef struct {
    uint8_t *copy;
    ds_gguf g;
    ds_err e;
    ds_status s;
} parsed;

static void parse_buf(parsed *p, const uint8_t *buf, size_t n, const char *name) {
    memset(p, 0, sizeof *p);
    p->copy = malloc(n ? n : 1);
    if (n) memcpy(p->copy, buf, n);
    p->s = ds_gguf_parse(&p->g, n ? p->copy : (const uint8_t *)"", n, name, &p->e);
}

static void parsed_free(parsed *p) {
    ds_gguf_close(&p->g);
    free(p->copy);
    p->copy = NULL;
}

static int one_line(const char *msg) { return msg[0] && !strchr(msg, '\n'); }

/* Parses buf as file `name` and checks the status and that the message holds
 * the name and each of the given words (NULL-terminated list). */
#define EXPECT_BAD(buf, n, name, code, ...)                                                                 \
    do {                                                                                                   \
        parsed p_;                                                                                         \
        parse_buf(&p_, (buf), (n), (name));                                                                \
        CHECK(p_.s == (code), "%s: status %d (%s), expected %d; message: %s", (name), p_.s,                \
              ds_status_name(p_.s), (code), p_.e.msg);                                                     \
        if (p_.s != DS_OK) {                                                                               \
            CHECK(one_line(p_.e.msg), "%s: message is empty or has several lines: '%s'", (name), p_.e.msg); \
            CHECK(strstr(p_.e.msg, (name)) != NULL, "message does not name the file %s: %s", (name), p_.e.msg); \
            const char *words_[] = {__VA_ARGS__, NULL};                                                    \
            for (int w_ = 0; words_[w_]; w_++)                                                             \
                CHECK(strstr(p_.e.msg, words_[w_]) != NULL, "%s: message lacks '%s': %s", (name), words_[w_], \
                      p_.e.msg);                                                                           \
        }                                                                                                  \
        parsed_free(&p_);                                                                                  \
    } while (0)

/* ------------------------------------------------------------------------ */
/* writer -> reader: metadata                                               */

static void test_writer_metadata_roundtrip(void) {
    char path[600];
    tmp_path(path, sizeof path, "meta.gguf");
    ds_gguf_writer *w = ds_gguf_writer_new(32);
    REQUIRE(w, "writer_new");
    static const int32_t ai[] = {-2147483647 - 1, -1, 0, 1, 2147483647};
    static const float af[] = {-1.5f, 0.0f, 3.25e-20f, 1e30f};
    static const uint8_t ab[] = {1, 0, 1};
    static const char *const as[] = {"", "a", "hello world", "\xe4\xbd\xa0\xe5\xa5\xbd", "tab\there"};
    ds_gguf_writer_u32(w, "t.u32.zero", 0);
    ds_gguf_writer_u32(w, "t.u32.max", UINT32_MAX);
    ds_gguf_writer_i32(w, "t.i32.neg", -123456);
    ds_gguf_writer_i32(w, "t.i32.pos", 77);
    ds_gguf_writer_f32(w, "t.f32", 0.15625f);
    ds_gguf_writer_f32(w, "t.f32.negzero", -0.0f);
    ds_gguf_writer_bool(w, "t.bool.true", 1);
    ds_gguf_writer_bool(w, "t.bool.false", 0);
    ds_gguf_writer_bool(w, "t.bool.seven", 7); /* any non-zero is true */
    ds_gguf_writer_str(w, "t.str", "qwen35");
    ds_gguf_writer_str(w, "t.str.empty", "");
    ds_gguf_writer_arr_i32(w, "t.arr.i32", ai, 5);
    ds_gguf_writer_arr_i32(w, "t.arr.empty", NULL, 0);
    ds_gguf_writer_arr_f32(w, "t.arr.f32", af, 4);
    ds_gguf_writer_arr_bool(w, "t.arr.bool", ab, 3);
    ds_gguf_writer_arr_str(w, "t.arr.str", as, 5);
    ds_err e = {0};
    ds_status s = ds_gguf_writer_begin(w, path, &e);
    if (!s) s = ds_gguf_writer_finish(w, &e);
    ds_gguf_writer_free(w);
    REQUIRE(s == DS_OK, "write: %s", e.msg);

    ds_gguf g;
    s = ds_gguf_open(&g, path, &e);
    REQUIRE(s == DS_OK, "open: %s", e.msg);
    CHECK(g.version == 3, "version %u", g.version);
    CHECK(g.n_kv == 16, "n_kv %llu", (unsigned long long)g.n_kv);
    CHECK(g.n_tensors == 0, "n_tensors %llu", (unsigned long long)g.n_tensors);
    CHECK(g.alignment == 32, "alignment %llu", (unsigned long long)g.alignment);
    uint32_t u;
    CHECK(ds_gguf_get_u32(&g, "t.u32.zero", &u, &e) == DS_OK && u == 0, "u32 zero");
    CHECK(ds_gguf_get_u32(&g, "t.u32.max", &u, &e) == DS_OK && u == UINT32_MAX, "u32 max: %u", u);
    CHECK(ds_gguf_get_u32(&g, "t.i32.pos", &u, &e) == DS_OK && u == 77, "i32 read as u32");
    CHECK(ds_gguf_find(&g, "t.u32.max")->type == DS_GGUF_UINT32, "type of u32");
    CHECK(ds_gguf_find(&g, "t.i32.neg")->type == DS_GGUF_INT32, "type of i32");
    int32_t iv;
    memcpy(&iv, ds_gguf_find(&g, "t.i32.neg")->val, 4);
    CHECK(iv == -123456, "i32 value %d", iv);
    e.msg[0] = 0;
    CHECK(ds_gguf_get_u32(&g, "t.i32.neg", &u, &e) == DS_ECORRUPT && strstr(e.msg, "t.i32.neg"),
          "negative i32 as u32 must be out of range: %s", e.msg);
    float f;
    CHECK(ds_gguf_get_f32(&g, "t.f32", &f, &e) == DS_OK && f == 0.15625f, "f32");
    CHECK(ds_gguf_get_f32(&g, "t.f32.negzero", &f, &e) == DS_OK && f == 0.0f && signbit(f), "f32 -0");
    bool bv;
    CHECK(ds_gguf_get_bool(&g, "t.bool.true", &bv, &e) == DS_OK && bv, "bool true");
    CHECK(ds_gguf_get_bool(&g, "t.bool.false", &bv, &e) == DS_OK && !bv, "bool false");
    CHECK(ds_gguf_get_bool(&g, "t.bool.seven", &bv, &e) == DS_OK && bv, "bool 7 written as true");
    CHECK(ds_gguf_find(&g, "t.bool.seven")->val[0] == 1, "bool stored as 1");
    ds_str str;
    CHECK(ds_gguf_get_str(&g, "t.str", &str, &e) == DS_OK && ds_str_eq(str, "qwen35"), "str");
    CHECK(ds_gguf_get_str(&g, "t.str.empty", &str, &e) == DS_OK && str.len == 0, "empty str");

    const ds_gguf_kv *kv = ds_gguf_find(&g, "t.arr.i32");
    REQUIRE(kv && kv->type == DS_GGUF_ARRAY && kv->arr_type == DS_GGUF_INT32 && kv->arr_len == 5, "arr i32 head");
    int64_t ints[5];
    CHECK(ds_gguf_arr_ints(&g, kv, ints, &e) == DS_OK, "arr ints: %s", e.msg);
    for (int i = 0; i < 5; i++) CHECK(ints[i] == ai[i], "arr i32[%d] %lld", i, (long long)ints[i]);
    kv = ds_gguf_find(&g, "t.arr.empty");
    CHECK(kv && kv->type == DS_GGUF_ARRAY && kv->arr_len == 0, "empty array");
    kv = ds_gguf_find(&g, "t.arr.f32");
    REQUIRE(kv && kv->arr_type == DS_GGUF_FLOAT32 && kv->arr_len == 4, "arr f32 head");
    float fl[4];
    CHECK(ds_gguf_arr_floats(&g, kv, fl, &e) == DS_OK, "arr floats");
    CHECK(memcmp(fl, af, sizeof af) == 0, "arr f32 values");
    kv = ds_gguf_find(&g, "t.arr.bool");
    REQUIRE(kv && kv->arr_type == DS_GGUF_BOOL && kv->arr_len == 3, "arr bool head");
    CHECK(memcmp(kv->val, ab, 3) == 0, "arr bool values");
    kv = ds_gguf_find(&g, "t.arr.str");
    REQUIRE(kv && kv->arr_type == DS_GGUF_STRING && kv->arr_len == 5, "arr str head");
    ds_str strs[5];
    CHECK(ds_gguf_arr_strings(&g, kv, strs, &e) == DS_OK, "arr strings");
    for (int i = 0; i < 5; i++) CHECK(ds_str_eq(strs[i], as[i]), "arr str[%d]", i);
    /* the file ends at the aligned end of the header: no tensors, no data */
    struct stat st;
    stat(path, &st);
    CHECK((uint64_t)st.st_size == g.data_offset && g.data_offset % 32 == 0, "size %lld data_offset %llu",
          (long long)st.st_size, (unsigned long long)g.data_offset);
    ds_gguf_close(&g);
}

/* ------------------------------------------------------------------------ */
/* hand-built file with all 13 value types: the reader and the typed getters */

static void build_all_types(bb *b) {
    bb_header(b, 3, 0, 26);
    bb_key(b, "v.u8", DS_GGUF_UINT8); bb_u8(b, 200);
    bb_key(b, "v.i8", DS_GGUF_INT8); bb_u8(b, (uint8_t)(int8_t)-5);
    bb_key(b, "v.u16", DS_GGUF_UINT16); bb_u16(b, 65535);
    bb_key(b, "v.i16", DS_GGUF_INT16); bb_u16(b, (uint16_t)(int16_t)300);
    bb_key(b, "v.u32", DS_GGUF_UINT32); bb_u32(b, 4000000000u);
    bb_key(b, "v.i32", DS_GGUF_INT32); bb_u32(b, (uint32_t)-7);
    bb_key(b, "vf32", DS_GGUF_FLOAT32); bb_f32(b, 2.5f);
    bb_key(b, "v.bool", DS_GGUF_BOOL); bb_u8(b, 1);
    bb_key(b, "v.str", DS_GGUF_STRING); bb_str(b, "text");
    bb_key(b, "v.u64", DS_GGUF_UINT64); bb_u64(b, 12345);
    bb_key(b, "v.u64.big", DS_GGUF_UINT64); bb_u64(b, UINT64_MAX);
    bb_key(b, "v.u64.33bit", DS_GGUF_UINT64); bb_u64(b, 1ull << 33);
    bb_key(b, "v.i64", DS_GGUF_INT64); bb_u64(b, (uint64_t)(int64_t)-1);
    bb_key(b, "v.f64", DS_GGUF_FLOAT64); bb_f64(b, 1e-6);
    bb_key(b, "v.f64.nan", DS_GGUF_FLOAT64); bb_f64(b, NAN);
    /* arrays of every element type but array */
    bb_key(b, "a.u8", DS_GGUF_ARRAY); bb_u32(b, DS_GGUF_UINT8); bb_u64(b, 3); bb_u8(b, 1); bb_u8(b, 2); bb_u8(b, 255);
    bb_key(b, "a.i8", DS_GGUF_ARRAY); bb_u32(b, DS_GGUF_INT8); bb_u64(b, 2); bb_u8(b, 0x80); bb_u8(b, 0x7f);
    bb_key(b, "a.u16", DS_GGUF_ARRAY); bb_u32(b, DS_GGUF_UINT16); bb_u64(b, 2); bb_u16(b, 1); bb_u16(b, 60000);
    bb_key(b, "a.i16", DS_GGUF_ARRAY); bb_u32(b, DS_GGUF_INT16); bb_u64(b, 1); bb_u16(b, (uint16_t)(int16_t)-300);
    bb_key(b, "a.u32", DS_GGUF_ARRAY); bb_u32(b, DS_GGUF_UINT32); bb_u64(b, 2); bb_u32(b, 11); bb_u32(b, 4000000000u);
    bb_key(b, "a.u64", DS_GGUF_ARRAY); bb_u32(b, DS_GGUF_UINT64); bb_u64(b, 2); bb_u64(b, 5); bb_u64(b, UINT64_MAX);
    bb_key(b, "a.i64", DS_GGUF_ARRAY); bb_u32(b, DS_GGUF_INT64); bb_u64(b, 2); bb_u64(b, (uint64_t)INT64_MIN); bb_u64(b, 9);
    bb_key(b, "a.f64", DS_GGUF_ARRAY); bb_u32(b, DS_GGUF_FLOAT64); bb_u64(b, 2); bb_f64(b, 0.5); bb_f64(b, -2.0);
    bb_key(b, "a.bool", DS_GGUF_ARRAY); bb_u32(b, DS_GGUF_BOOL); bb_u64(b, 2); bb_u8(b, 0); bb_u8(b, 1);
    bb_key(b, "a.str", DS_GGUF_ARRAY); bb_u32(b, DS_GGUF_STRING); bb_u64(b, 3); bb_str(b, "x"); bb_str(b, ""); bb_str(b, "yz");
    bb_key(b, "a.f32", DS_GGUF_ARRAY); bb_u32(b, DS_GGUF_FLOAT32); bb_u64(b, 1); bb_f32(b, 7.0f);
}

static void test_reader_all_value_types(void) {
    bb b = {0};
    build_all_types(&b);
    parsed p;
    const char *name = "all-types.gguf";
    parse_buf(&p, b.p, b.n, name);
    free(b.p);
    REQUIRE(p.s == DS_OK, "parse: %s", p.e.msg);
    ds_gguf *g = &p.g;
    CHECK(g->n_kv == 26, "n_kv");
    static const struct { const char *k; uint32_t type; } types[] = {
        {"v.u8", DS_GGUF_UINT8}, {"v.i8", DS_GGUF_INT8}, {"v.u16", DS_GGUF_UINT16}, {"v.i16", DS_GGUF_INT16},
        {"v.u32", DS_GGUF_UINT32}, {"v.i32", DS_GGUF_INT32}, {"vf32", DS_GGUF_FLOAT32}, {"v.bool", DS_GGUF_BOOL},
        {"v.str", DS_GGUF_STRING}, {"v.u64", DS_GGUF_UINT64}, {"v.i64", DS_GGUF_INT64}, {"v.f64", DS_GGUF_FLOAT64},
        {"a.u8", DS_GGUF_ARRAY}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const ds_gguf_kv *kv = ds_gguf_find(g, types[i].k);
        CHECK(kv && kv->type == types[i].type, "type of %s", types[i].k);
    }
    ds_err e = {0};
    uint32_t u = 0;
    /* integers of any width are accepted when they fit in u32 */
    CHECK(ds_gguf_get_u32(g, "v.u8", &u, &e) == DS_OK && u == 200, "u8 -> %u", u);
    CHECK(ds_gguf_get_u32(g, "v.u16", &u, &e) == DS_OK && u == 65535, "u16");
    CHECK(ds_gguf_get_u32(g, "v.i16", &u, &e) == DS_OK && u == 300, "i16");
    CHECK(ds_gguf_get_u32(g, "v.u32", &u, &e) == DS_OK && u == 4000000000u, "u32");
    CHECK(ds_gguf_get_u32(g, "v.u64", &u, &e) == DS_OK && u == 12345, "u64");
    /* out of range: negative, above u32, above i64 */
    static const char *const out_of_range[] = {"v.i8", "v.i32", "v.i64", "v.u64.33bit", "v.u64.big"};
    for (int i = 0; i < 5; i++) {
        e.msg[0] = 0;
        ds_status s = ds_gguf_get_u32(g, out_of_range[i], &u, &e);
        CHECK(s == DS_ECORRUPT, "%s: status %d", out_of_range[i], s);
        CHECK(strstr(e.msg, out_of_range[i]) && strstr(e.msg, name), "%s: message %s", out_of_range[i], e.msg);
    }
    /* wrong types name the key and the type found */
    static const struct { const char *k; int getter; } wrong[] = {
        {"vf32", 0}, {"v.str", 0}, {"v.bool", 0}, {"a.u8", 0}, {"v.u32", 1}, {"v.str", 1}, {"a.f32", 1},
        {"v.u8", 2}, {"v.str", 2}, {"v.u32", 3}, {"a.str", 3}};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        e.msg[0] = 0;
        float f;
        bool bv;
        ds_str str;
        ds_status s = wrong[i].getter == 0   ? ds_gguf_get_u32(g, wrong[i].k, &u, &e)
                      : wrong[i].getter == 1 ? ds_gguf_get_f32(g, wrong[i].k, &f, &e)
                      : wrong[i].getter == 2 ? ds_gguf_get_bool(g, wrong[i].k, &bv, &e)
                                             : ds_gguf_get_str(g, wrong[i].k, &str, &e);
        CHECK(s == DS_ECORRUPT, "getter %d on %s: status %d", wrong[i].getter, wrong[i].k, s);
        CHECK(strstr(e.msg, wrong[i].k) && strstr(e.msg, name) && strstr(e.msg, "expected"),
              "getter %d on %s: message %s", wrong[i].getter, wrong[i].k, e.msg);
    }
    /* missing keys: ENOTFOUND naming the key, so callers can apply defaults */
    e.msg[0] = 0;
    CHECK(ds_gguf_get_u32(g, "no.such.key", &u, &e) == DS_ENOTFOUND && strstr(e.msg, "no.such.key"), "missing u32");
    float f;
    bool bv;
    ds_str str;
    CHECK(ds_gguf_get_f32(g, "no.such.key", &f, &e) == DS_ENOTFOUND, "missing f32");
    CHECK(ds_gguf_get_bool(g, "no.such.key", &bv, &e) == DS_ENOTFOUND, "missing bool");
    CHECK(ds_gguf_get_str(g, "no.such.key", &str, &e) == DS_ENOTFOUND, "missing str");
    CHECK(ds_gguf_find(g, "v.u") == NULL && ds_gguf_find(g, "v.u8x") == NULL, "find matches whole keys only");
    CHECK(ds_gguf_find_tensor(g, "nothing") == NULL, "no tensors");
    /* floats */
    CHECK(ds_gguf_get_f32(g, "vf32", &f, &e) == DS_OK && f == 2.5f, "f32");
    CHECK(ds_gguf_get_f32(g, "v.f64", &f, &e) == DS_OK && f == 1e-6f, "f64 as f32 %g", (double)f);
    e.msg[0] = 0;
    CHECK(ds_gguf_get_f32(g, "v.f64.nan", &f, &e) == DS_ECORRUPT && strstr(e.msg, "v.f64.nan"), "NaN: %s", e.msg);
    CHECK(ds_gguf_get_bool(g, "v.bool", &bv, &e) == DS_OK && bv, "bool");
    CHECK(ds_gguf_get_str(g, "v.str", &str, &e) == DS_OK && ds_str_eq(str, "text"), "str");
    /* integer arrays of every width */
    int64_t iv[3];
    const ds_gguf_kv *kv;
    kv = ds_gguf_find(g, "a.u8");
    CHECK(ds_gguf_arr_ints(g, kv, iv, &e) == DS_OK && iv[0] == 1 && iv[1] == 2 && iv[2] == 255, "a.u8");
    kv = ds_gguf_find(g, "a.i8");
    CHECK(ds_gguf_arr_ints(g, kv, iv, &e) == DS_OK && iv[0] == -128 && iv[1] == 127, "a.i8");
    kv = ds_gguf_find(g, "a.u16");
    CHECK(ds_gguf_arr_ints(g, kv, iv, &e) == DS_OK && iv[0] == 1 && iv[1] == 60000, "a.u16");
    kv = ds_gguf_find(g, "a.i16");
    CHECK(ds_gguf_arr_ints(g, kv, iv, &e) == DS_OK && iv[0] == -300, "a.i16");
    kv = ds_gguf_find(g, "a.u32");
    CHECK(ds_gguf_arr_ints(g, kv, iv, &e) == DS_OK && iv[0] == 11 && iv[1] == 4000000000ll, "a.u32");
    kv = ds_gguf_find(g, "a.i64");
    CHECK(ds_gguf_arr_ints(g, kv, iv, &e) == DS_OK && iv[0] == INT64_MIN && iv[1] == 9, "a.i64");
    kv = ds_gguf_find(g, "a.u64");
    e.msg[0] = 0;
    CHECK(ds_gguf_arr_ints(g, kv, iv, &e) == DS_ECORRUPT && strstr(e.msg, "a.u64") && strstr(e.msg, "element 1"),
          "u64 element above i64: %s", e.msg);
    static const char *const not_int_arrays[] = {"a.f64", "a.f32", "a.str", "a.bool", "v.u32"};
    for (int i = 0; i < 5; i++) {
        e.msg[0] = 0;
        kv = ds_gguf_find(g, not_int_arrays[i]);
        CHECK(ds_gguf_arr_ints(g, kv, iv, &e) == DS_ECORRUPT && strstr(e.msg, not_int_arrays[i]), "arr_ints on %s: %s",
              not_int_arrays[i], e.msg);
    }
    float fv[2];
    kv = ds_gguf_find(g, "a.f64");
    CHECK(ds_gguf_arr_floats(g, kv, fv, &e) == DS_OK && fv[0] == 0.5f && fv[1] == -2.0f, "a.f64");
    kv = ds_gguf_find(g, "a.f32");
    CHECK(ds_gguf_arr_floats(g, kv, fv, &e) == DS_OK && fv[0] == 7.0f, "a.f32");
    kv = ds_gguf_find(g, "a.u32");
    CHECK(ds_gguf_arr_floats(g, kv, fv, &e) == DS_ECORRUPT, "arr_floats on ints");
    ds_str sv[3];
    kv = ds_gguf_find(g, "a.str");
    CHECK(ds_gguf_arr_strings(g, kv, sv, &e) == DS_OK && ds_str_eq(sv[0], "x") && sv[1].len == 0 &&
              ds_str_eq(sv[2], "yz"), "a.str");
    kv = ds_gguf_find(g, "a.u8");
    CHECK(ds_gguf_arr_strings(g, kv, sv, &e) == DS_ECORRUPT, "arr_strings on u8");
    kv = ds_gguf_find(g, "v.str");
    CHECK(ds_gguf_arr_strings(g, kv, sv, &e) == DS_ECORRUPT, "arr_strings on a string");
    parsed_free(&p);
}

/* ------------------------------------------------------------------------ */
/* writer -> reader: tensors of every dtype and rank, chunked writes        */

typedef struct {
    const char *name;
    ds_dtype type;
    int n_dims;
    int64_t ne[4];
} tdesc;

static const tdesc TENSORS[] = {
    {"t.f32.1d", DS_F32, 1, {7, 1, 1, 1}},
    {"t.f16.2d", DS_F16, 2, {5, 3, 1, 1}},
    {"t.bf16.3d", DS_BF16, 3, {4, 3, 2, 1}},
    {"t.q8_0.2d", DS_Q8_0, 2, {64, 3, 1, 1}},
    {"t.q4_0.3d", DS_Q4_0, 3, {32, 2, 3, 1}},
    {"t.q4_k.2d", DS_Q4_K, 2, {256, 2, 1, 1}},
    {"t.q5_k.3d", DS_Q5_K, 3, {512, 1, 2, 1}},
    {"t.q6_k.4d", DS_Q6_K, 4, {256, 2, 1, 2}},
    {"t.f32.4d", DS_F32, 4, {3, 1, 2, 2}},
    {"blk.0.name_of_63_bytes_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", DS_F32, 1, {1, 1, 1, 1}},
};
#define N_TENSORS (int)(sizeof TENSORS / sizeof TENSORS[0])

static size_t tensor_nbytes(const tdesc *t) {
    return ds_dtype_row_bytes(t->type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

/* the quantised bytes of tensor i, deterministic */
static uint8_t *tensor_data(int i) {
    const tdesc *t = &TENSORS[i];
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    uint8_t *out = malloc(tensor_nbytes(t));
    float *row = malloc((size_t)t->ne[0] * sizeof *row);
    rng_state = 1000 + (uint64_t)i;
    size_t rb = ds_dtype_row_bytes(t->type, t->ne[0]);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t k = 0; k < t->ne[0]; k++) row[k] = rndf() * (float)(1 + r);
        ds_quantize_row(t->type, row, out + (size_t)r * rb, t->ne[0]);
    }
    free(row);
    return out;
}

/* Writes TENSORS with the given alignment, in chunks of chunk(i, k) bytes. */
static ds_status write_tensors(const char *path, uint32_t alignment, int chunk_mode, ds_err *e) {
    ds_gguf_writer *w = ds_gguf_writer_new(alignment);
    if (!w) return ds_fail(e, DS_ENOMEM, "writer_new(%u) failed", alignment);
    ds_gguf_writer_str(w, "general.architecture", "test");
    for (int i = 0; i < N_TENSORS; i++) {
        int idx = ds_gguf_writer_add_tensor(w, TENSORS[i].name, TENSORS[i].type, TENSORS[i].n_dims, TENSORS[i].ne);
        if (idx != i || ds_gguf_writer_tensor_bytes(w, idx) != tensor_nbytes(&TENSORS[i])) {
            ds_gguf_writer_free(w);
            return ds_fail(e, DS_EINVAL, "add_tensor %d returned %d", i, idx);
        }
    }
    ds_status s = ds_gguf_writer_begin(w, path, e);
    for (int i = 0; i < N_TENSORS && !s; i++) {
        uint8_t *data = tensor_data(i);
        size_t n = tensor_nbytes(&TENSORS[i]), done = 0;
        for (int k = 0; done < n && !s; k++) {
            size_t c = chunk_mode == 0 ? n : chunk_mode == 1 ? 1 : (size_t)(k % 7) * 13; /* includes 0-byte chunks */
            if (c > n - done) c = n - done;
            s = ds_gguf_writer_tensor_chunk(w, i, data + done, c, e);
            done += c;
        }
        free(data);
    }
    if (!s) s = ds_gguf_writer_finish(w, e);
    ds_gguf_writer_free(w);
    return s;
}

static void check_tensors_file(const char *path, uint64_t alignment) {
    ds_gguf g;
    ds_err e = {0};
    ds_status s = ds_gguf_open(&g, path, &e);
    REQUIRE(s == DS_OK, "open %s: %s", path, e.msg);
    CHECK(g.alignment == alignment, "alignment %llu, expected %llu", (unsigned long long)g.alignment,
          (unsigned long long)alignment);
    CHECK(g.data_offset % alignment == 0, "data offset %llu", (unsigned long long)g.data_offset);
    REQUIRE(g.n_tensors == (uint64_t)N_TENSORS, "n_tensors %llu", (unsigned long long)g.n_tensors);
    uint64_t expect_off = 0;
    for (int i = 0; i < N_TENSORS; i++) {
        const tdesc *t = &TENSORS[i];
        const ds_gguf_tensor *gt = &g.tensors[i];
        CHECK(strcmp(gt->name, t->name) == 0, "tensor %d name %s", i, gt->name);
        CHECK(ds_gguf_find_tensor(&g, t->name) == gt, "find_tensor %s", t->name);
        CHECK(gt->type == t->type, "%s type %d", t->name, gt->type);
        CHECK((int)gt->n_dims == t->n_dims, "%s n_dims %u", t->name, gt->n_dims);
        for (int d = 0; d < 4; d++) CHECK(gt->ne[d] == t->ne[d], "%s ne[%d] %lld", t->name, d, (long long)gt->ne[d]);
        CHECK(gt->nbytes == tensor_nbytes(t), "%s nbytes %zu", t->name, gt->nbytes);
        /* llama.cpp requires offsets to follow each other, each padded to the alignment */
        CHECK(gt->offset == expect_off, "%s offset %llu, expected %llu", t->name, (unsigned long long)gt->offset,
              (unsigned long long)expect_off);
        CHECK(gt->offset % alignment == 0, "%s offset not aligned", t->name);
        CHECK(gt->data == g.map.data + g.data_offset + gt->offset, "%s data pointer", t->name);
        uint8_t *want = tensor_data(i);
        CHECK(memcmp(gt->data, want, gt->nbytes) == 0, "%s: data differs", t->name);
        free(want);
        /* the padding after each tensor is zero */
        uint64_t end = (gt->offset + gt->nbytes + alignment - 1) / alignment * alignment;
        for (uint64_t k = gt->offset + gt->nbytes; k < end; k++)
            if (g.map.data[g.data_offset + k]) {
                CHECK(0, "%s: padding byte %llu is not zero", t->name, (unsigned long long)k);
                break;
            }
        expect_off = end;
    }
    /* the header padding is zero and the file ends at the last tensor's padded end */
    CHECK(g.map.size == g.data_offset + expect_off, "file size %zu, expected %llu", g.map.size,
          (unsigned long long)(g.data_offset + expect_off));
    ds_gguf_close(&g);
}

static void test_writer_tensors_every_dtype(void) {
    char path[600];
    for (int mode = 0; mode < 3; mode++) {
        tmp_path(path, sizeof path, "tensors.gguf");
        ds_err e = {0};
        ds_status s = write_tensors(path, 32, mode, &e);
        REQUIRE(s == DS_OK, "write (chunk mode %d): %s", mode, e.msg);
        check_tensors_file(path, 32);
    }
}

static void test_writer_custom_alignment(void) {
    static const uint32_t aligns[] = {1, 8, 64, 4096};
    for (int i = 0; i < 4; i++) {
        char path[600], file[64];
        snprintf(file, sizeof file, "align%u.gguf", aligns[i]);
        tmp_path(path, sizeof path, file);
        ds_err e = {0};
        ds_status s = write_tensors(path, aligns[i], 2, &e);
        REQUIRE(s == DS_OK, "write (alignment %u): %s", aligns[i], e.msg);
        check_tensors_file(path, aligns[i]);
    }
}

static void test_writer_errors(void) {
    char path[600];
    tmp_path(path, sizeof path, "errors.gguf");
    int64_t ne[2] = {32, 2};
    ds_err e = {0};
    /* data for tensor 1 before tensor 0 */
    ds_gguf_writer *w = ds_gguf_writer_new(32);
    ds_gguf_writer_add_tensor(w, "a", DS_Q8_0, 2, ne);
    ds_gguf_writer_add_tensor(w, "b", DS_F32, 2, ne);
    ds_status s = ds_gguf_writer_begin(w, path, &e);
    REQUIRE(s == DS_OK, "begin: %s", e.msg);
    uint8_t buf[512] = {0};
    CHECK(ds_gguf_writer_tensor_chunk(w, 1, buf, 8, &e) == DS_EINVAL && strstr(e.msg, path), "out of order: %s", e.msg);
    CHECK(ds_gguf_writer_tensor_chunk(w, 0, buf, 60, &e) == DS_OK, "first chunk");
    e.msg[0] = 0;
    CHECK(ds_gguf_writer_tensor_chunk(w, 0, buf, 9, &e) == DS_EINVAL && strstr(e.msg, "'a'"), "too many bytes: %s", e.msg);
    CHECK(ds_gguf_writer_tensor_chunk(w, 0, buf, 8, &e) == DS_OK, "rest of a");
    e.msg[0] = 0;
    CHECK(ds_gguf_writer_finish(w, &e) == DS_EINVAL && strstr(e.msg, "1 of 2"), "finish with b unwritten: %s", e.msg);
    CHECK(ds_gguf_writer_tensor_chunk(w, 2, buf, 8, &e) == DS_EINVAL, "index past the end");
    ds_gguf_writer_free(w);
    /* a file that cannot be created */
    w = ds_gguf_writer_new(32);
    e.msg[0] = 0;
    CHECK(ds_gguf_writer_begin(w, "/nonexistent-dir/x.gguf", &e) == DS_EIO && strstr(e.msg, "/nonexistent-dir/x.gguf"),
          "unwritable: %s", e.msg);
    ds_gguf_writer_free(w);
    ds_gguf_writer_free(NULL);
}

/* ------------------------------------------------------------------------ */
/* bad files                                                                */

/* A small valid file: 3 kv (u32, string, string array), 2 tensors. Offsets of
 * its parts are recorded so that truncation can be attributed. */
typedef struct {
    bb b;
    size_t kv_start[3], kv_key_end[3], kv_end[3];
    size_t ti_start[2], ti_name_end[2], ti_end[2];
    size_t data_offset;
} small_file;

static const char *const SMALL_KEYS[3] = {"general.alignment", "general.architecture", "tok.list"};
static const char *const SMALL_TENSORS[2] = {"w.q8", "vf32"};

static void build_small(small_file *s) {
    memset(s, 0, sizeof *s);
    bb *b = &s->b;
    bb_header(b, 3, 2, 3);
    s->kv_start[0] = b->n;
    bb_str(b, SMALL_KEYS[0]);
    s->kv_key_end[0] = b->n;
    bb_u32(b, DS_GGUF_UINT32);
    bb_u32(b, 32);
    s->kv_end[0] = b->n;
    s->kv_start[1] = b->n;
    bb_str(b, SMALL_KEYS[1]);
    s->kv_key_end[1] = b->n;
    bb_u32(b, DS_GGUF_STRING);
    bb_str(b, "qwen35");
    s->kv_end[1] = b->n;
    s->kv_start[2] = b->n;
    bb_str(b, SMALL_KEYS[2]);
    s->kv_key_end[2] = b->n;
    bb_u32(b, DS_GGUF_ARRAY);
    bb_u32(b, DS_GGUF_STRING);
    bb_u64(b, 3);
    bb_str(b, "alpha");
    bb_str(b, "");
    bb_str(b, "gamma");
    s->kv_end[2] = b->n;
    uint64_t ne0[2] = {64, 2}, ne1[1] = {5};
    s->ti_start[0] = b->n;
    bb_str(b, SMALL_TENSORS[0]);
    s->ti_name_end[0] = b->n;
    bb_u32(b, 2);
    bb_u64(b, ne0[0]);
    bb_u64(b, ne0[1]);
    bb_u32(b, 8); /* Q8_0 */
    bb_u64(b, 0);
    s->ti_end[0] = b->n;
    s->ti_start[1] = b->n;
    bb_str(b, SMALL_TENSORS[1]);
    s->ti_name_end[1] = b->n;
    bb_u32(b, 1);
    bb_u64(b, ne1[0]);
    bb_u32(b, 0); /* F32 */
    bb_u64(b, 160); /* 136 bytes of Q8_0 padded to 160 */
    s->ti_end[1] = b->n;
    bb_pad(b, 32);
    s->data_offset = b->n;
    for (int i = 0; i < 136; i++) bb_u8(b, (uint8_t)i);
    bb_pad(b, 32);
    for (int i = 0; i < 5; i++) bb_f32(b, (float)i);
    bb_pad(b, 32);
}

static void test_small_file_is_valid(void) {
    small_file s;
    build_small(&s);
    parsed p;
    parse_buf(&p, s.b.p, s.b.n, "small.gguf");
    CHECK(p.s == DS_OK, "parse: %s", p.e.msg);
    if (!p.s) {
        CHECK(p.g.n_tensors == 2 && p.g.data_offset == s.data_offset, "layout");
        CHECK(p.g.tensors[1].data == p.copy + s.data_offset + 160, "second tensor data");
    }
    parsed_free(&p);
    /* version 2 has the same layout */
    s.b.p[4] = 2;
    parse_buf(&p, s.b.p, s.b.n, "small-v2.gguf");
    CHECK(p.s == DS_OK && p.g.version == 2, "v2: %s", p.e.msg);
    parsed_free(&p);
    free(s.b.p);
}

/* Every prefix of the small file is rejected with a message naming the file,
 * and the key or tensor being read when the bytes ran out. */
static void test_truncated_everywhere(void) {
    small_file s;
    build_small(&s);
    char name[64];
    for (size_t n = 0; n < s.b.n; n++) {
        snprintf(name, sizeof name, "cut-at-%zu.gguf", n);
        parsed p;
        parse_buf(&p, s.b.p, n, name);
        /* the last tensor ends 12 bytes before the final padding: those cuts are harmless */
        size_t last_end = s.data_offset + 160 + 20;
        if (n >= last_end) {
            CHECK(p.s == DS_OK, "%s: %s", name, p.e.msg);
            parsed_free(&p);
            continue;
        }
        CHECK(p.s == DS_ECORRUPT, "%s: status %d: %s", name, p.s, p.e.msg);
        CHECK(one_line(p.e.msg) && strstr(p.e.msg, name), "%s: message does not name the file: %s", name, p.e.msg);
        const char *who = NULL;
        for (int k = 0; k < 3; k++)
            if (n >= s.kv_key_end[k] && n < s.kv_end[k]) who = SMALL_KEYS[k];
        for (int k = 0; k < 2; k++)
            if (n >= s.ti_name_end[k] && n < s.ti_end[k]) who = SMALL_TENSORS[k];
        if (n >= s.data_offset) who = n < s.data_offset + 136 ? SMALL_TENSORS[0] : SMALL_TENSORS[1];
        /* (a cut so early that the counts cannot fit is reported on the count itself) */
        if (who && !strstr(p.e.msg, "count"))
            CHECK(strstr(p.e.msg, who) != NULL, "%s: message does not name '%s': %s", name, who, p.e.msg);
        parsed_free(&p);
        if (ds_t_case_failed) break; /* one report is enough */
    }
    free(s.b.p);
}

/* Builds a one-kv, one-tensor file with the given tensor info fields. */
static void build_one_tensor(bb *b, const char *tname, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                             uint64_t offset, size_t data_bytes) {
    memset(b, 0, sizeof *b);
    bb_header(b, 3, 1, 1);
    bb_key(b, "general.architecture", DS_GGUF_STRING);
    bb_str(b, "qwen35");
    bb_tinfo(b, tname, n_dims, ne, type, offset);
    bb_pad(b, 32);
    bb_zeros(b, data_bytes);
}

static void test_bad_header_fields(void) {
    small_file s;
    build_small(&s);
    uint8_t *v = malloc(s.b.n);
    size_t n = s.b.n;
#define MUTATED(stmt) (memcpy(v, s.b.p, n), (stmt), v)
    EXPECT_BAD(MUTATED(memcpy(v, "GGUX", 4)), n, "magic.gguf", DS_ECORRUPT, "magic");
    EXPECT_BAD(MUTATED(memcpy(v, "gguf", 4)), n, "magic2.gguf", DS_ECORRUPT, "magic");
    EXPECT_BAD(MUTATED(v[4] = 1), n, "v1.gguf", DS_EUNSUPPORTED, "version 1");
    EXPECT_BAD(MUTATED(v[4] = 4), n, "v4.gguf", DS_EUNSUPPORTED, "version 4");
    EXPECT_BAD(MUTATED(memset(v + 4, 0xff, 4)), n, "vmax.gguf", DS_EUNSUPPORTED, "version");
    /* counts: too large for the file, and 2^64-1 */
    uint64_t big = UINT64_MAX;
    EXPECT_BAD(MUTATED(memcpy(v + 8, &big, 8)), n, "ntensors-max.gguf", DS_ECORRUPT, "tensor count");
    EXPECT_BAD(MUTATED(memcpy(v + 16, &big, 8)), n, "nkv-max.gguf", DS_ECORRUPT, "metadata count");
    big = 1000000;
    EXPECT_BAD(MUTATED(memcpy(v + 8, &big, 8)), n, "ntensors-big.gguf", DS_ECORRUPT, "tensor count");
    EXPECT_BAD(MUTATED(memcpy(v + 16, &big, 8)), n, "nkv-big.gguf", DS_ECORRUPT, "metadata count");
    /* one more kv than there is: the tensor info is read as a kv and fails somewhere */
    uint64_t four = 4;
    EXPECT_BAD(MUTATED(memcpy(v + 16, &four, 8)), n, "nkv-plus1.gguf", DS_ECORRUPT, "");
    /* key length past the end, key of length 0, key with a NUL */
    EXPECT_BAD(MUTATED(memset(v + s.kv_start[0], 0x7f, 8)), n, "keylen.gguf", DS_ECORRUPT, "metadata key", "past the end");
    uint64_t zero = 0;
    EXPECT_BAD(MUTATED(memcpy(v + s.kv_start[0], &zero, 8)), n, "keylen0.gguf", DS_ECORRUPT, "empty");
    EXPECT_BAD(MUTATED(v[s.kv_start[0] + 8 + 3] = 0), n, "keynul.gguf", DS_ECORRUPT, "NUL");
    /* value types */
    EXPECT_BAD(MUTATED(v[s.kv_key_end[0]] = 13), n, "type13.gguf", DS_ECORRUPT, "general.alignment", "unknown value type");
    EXPECT_BAD(MUTATED(memset(v + s.kv_key_end[0], 0xff, 4)), n, "typemax.gguf", DS_ECORRUPT, "general.alignment");
    EXPECT_BAD(MUTATED(v[s.kv_key_end[2] + 4] = DS_GGUF_ARRAY), n, "arrarr.gguf", DS_ECORRUPT, "tok.list", "array");
    EXPECT_BAD(MUTATED(v[s.kv_key_end[2] + 4] = 77), n, "arrtype.gguf", DS_ECORRUPT, "tok.list");
    /* string value length past the end, array length past the end */
    EXPECT_BAD(MUTATED(memset(v + s.kv_key_end[1] + 4, 0x7f, 8)), n, "strlen.gguf", DS_ECORRUPT,
               "general.architecture", "past the end");
    EXPECT_BAD(MUTATED(memset(v + s.kv_key_end[2] + 8, 0x7f, 8)), n, "arrlen.gguf", DS_ECORRUPT, "tok.list");
    EXPECT_BAD(MUTATED(memset(v + s.kv_key_end[2] + 8 + 8, 0x7f, 8)), n, "arrstrlen.gguf", DS_ECORRUPT, "tok.list",
               "past the end");
    /* an array of u64 of 2^61 elements: count * size overflows 64 bits */
    EXPECT_BAD(MUTATED((v[s.kv_key_end[2] + 4] = DS_GGUF_UINT64, memcpy(v + s.kv_key_end[2] + 8, &(uint64_t){1ull << 61}, 8))),
               n, "arroverflow.gguf", DS_ECORRUPT, "tok.list");
    /* alignment */
    EXPECT_BAD(MUTATED(v[s.kv_key_end[0] + 4] = 48), n, "align48.gguf", DS_ECORRUPT, "general.alignment");
    EXPECT_BAD(MUTATED(v[s.kv_key_end[0] + 4] = 0), n, "align0.gguf", DS_ECORRUPT, "general.alignment");
    EXPECT_BAD(MUTATED(v[s.kv_key_end[0]] = DS_GGUF_FLOAT32), n, "alignf32.gguf", DS_ECORRUPT, "general.alignment");
    /* 64-byte alignment: the data section moves and tensor 1's offset 160 is not a multiple */
    EXPECT_BAD(MUTATED(v[s.kv_key_end[0] + 4] = 64), n, "align64.gguf", DS_ECORRUPT, "vf32");
    /* a bool that is neither 0 nor 1 */
    {
        bb b = {0};
        bb_header(&b, 3, 0, 1);
        bb_key(&b, "flag", DS_GGUF_BOOL);
        bb_u8(&b, 2);
        EXPECT_BAD(b.p, b.n, "bool2.gguf", DS_ECORRUPT, "flag");
        free(b.p);
    }
    /* duplicate key */
    {
        bb b = {0};
        bb_header(&b, 3, 0, 2);
        bb_kv_u32(&b, "dup.key", 1);
        bb_kv_u32(&b, "dup.key", 2);
        EXPECT_BAD(b.p, b.n, "dupkey.gguf", DS_ECORRUPT, "dup.key", "twice");
        free(b.p);
    }
    /* a key with control characters: the message stays one line */
    {
        bb b = {0};
        bb_header(&b, 3, 0, 2);
        bb_kv_u32(&b, "line\none", 1);
        bb_kv_u32(&b, "line\none", 2);
        EXPECT_BAD(b.p, b.n, "ctrl-key.gguf", DS_ECORRUPT, "line?one", "twice");
        free(b.p);
    }
    /* tensor infos */
    EXPECT_BAD(MUTATED(memset(v + s.ti_start[0], 0x7f, 8)), n, "tnamelen.gguf", DS_ECORRUPT, "past the end");
    EXPECT_BAD(MUTATED(memcpy(v + s.ti_start[0], &zero, 8)), n, "tname0.gguf", DS_ECORRUPT, "tensor #0");
    EXPECT_BAD(MUTATED(v[s.ti_name_end[0]] = 0), n, "ndims0.gguf", DS_ECORRUPT, "w.q8", "dimensions");
    EXPECT_BAD(MUTATED(v[s.ti_name_end[0]] = 5), n, "ndims5.gguf", DS_ECORRUPT, "w.q8", "dimensions");
    EXPECT_BAD(MUTATED(memset(v + s.ti_name_end[0] + 4, 0, 8)), n, "dim0.gguf", DS_ECORRUPT, "w.q8", "dimension 0");
    EXPECT_BAD(MUTATED(memset(v + s.ti_name_end[0] + 12, 0, 8)), n, "dim1zero.gguf", DS_ECORRUPT, "w.q8", "dimension 1");
    EXPECT_BAD(MUTATED(memset(v + s.ti_name_end[0] + 12, 0xff, 8)), n, "dimhuge.gguf", DS_ECORRUPT, "w.q8");
    EXPECT_BAD(MUTATED(v[s.ti_name_end[0] + 20] = 99), n, "type99.gguf", DS_EUNSUPPORTED, "w.q8", "99");
    EXPECT_BAD(MUTATED(v[s.ti_name_end[0] + 20] = 9), n, "type-q8_1.gguf", DS_EUNSUPPORTED, "w.q8", "ggml type 9");
    EXPECT_BAD(MUTATED(v[s.ti_name_end[0] + 20] = 12), n, "q4k-row64.gguf", DS_ECORRUPT, "w.q8", "block");
    EXPECT_BAD(MUTATED(v[s.ti_name_end[0] + 4] = 33), n, "q8-row33.gguf", DS_ECORRUPT, "w.q8", "block");
    EXPECT_BAD(MUTATED(v[s.ti_name_end[1] + 4 + 8 + 4] = 161), n, "misaligned.gguf", DS_ECORRUPT, "vf32", "aligned");
    EXPECT_BAD(MUTATED(memcpy(v + s.ti_name_end[1] + 16, &(uint64_t){192}, 8)), n, "offpast.gguf", DS_ECORRUPT, "vf32",
               "past the end");
    EXPECT_BAD(MUTATED(memcpy(v + s.ti_name_end[1] + 16, &(uint64_t){UINT64_MAX - 31}, 8)), n, "offmax.gguf",
               DS_ECORRUPT, "vf32", "past the end");
    EXPECT_BAD(MUTATED(v[s.ti_name_end[1] + 4] = 9), n, "sizepast.gguf", DS_ECORRUPT, "vf32", "past the end");
    /* duplicate tensor name */
    EXPECT_BAD(MUTATED(memcpy(v + s.ti_start[1] + 8, "w.q8", 4)), n, "duptensor.gguf", DS_ECORRUPT, "w.q8", "twice");
#undef MUTATED
    free(v);
    free(s.b.p);

    /* names of 64 bytes or more (GGML_MAX_NAME) */
    bb b;
    uint64_t ne[4] = {4, 1, 1, 1};
    build_one_tensor(&b, "blk.0.name_of_64_bytes_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 1, ne, 0, 0, 32);
    EXPECT_BAD(b.p, b.n, "name64.gguf", DS_ECORRUPT, "name length 64");
    free(b.p);
    /* dimensions whose product overflows int64 */
    uint64_t ne_ovf[3] = {1ull << 32, 1ull << 32, 4};
    build_one_tensor(&b, "huge.3d", 3, ne_ovf, 0, 0, 32);
    EXPECT_BAD(b.p, b.n, "ovf-elems.gguf", DS_ECORRUPT, "huge.3d");
    free(b.p);
    /* a row so long that its byte size overflows 64 bits, though its element count fits */
    uint64_t ne_row[1] = {1ull << 62};
    build_one_tensor(&b, "huge.row", 1, ne_row, 0, 0, 32);
    EXPECT_BAD(b.p, b.n, "ovf-row.gguf", DS_ECORRUPT, "huge.row");
    free(b.p);
    uint64_t ne_row2[2] = {(1ull << 62) + 64, 1};
    build_one_tensor(&b, "wrap.row", 2, ne_row2, 0, 0, 256);
    EXPECT_BAD(b.p, b.n, "ovf-row2.gguf", DS_ECORRUPT, "wrap.row");
    free(b.p);
    uint64_t ne_rows[2] = {32, 1ull << 60};
    build_one_tensor(&b, "many.rows", 2, ne_rows, 8, 0, 32);
    EXPECT_BAD(b.p, b.n, "ovf-rows.gguf", DS_ECORRUPT, "many.rows");
    free(b.p);
    /* a header that ends before the padding of the data section */
    build_one_tensor(&b, "x", 1, ne, 0, 0, 0);
    size_t hdr = b.n;
    EXPECT_BAD(b.p, hdr - 1, "nodata.gguf", DS_ECORRUPT, "truncated");
    EXPECT_BAD(b.p, hdr, "nodata2.gguf", DS_ECORRUPT, "'x'", "past the end");
    free(b.p);
    /* an empty file, and a file of 3 bytes */
    EXPECT_BAD((const uint8_t *)"GGU", 0, "empty.gguf", DS_ECORRUPT, "truncated");
    EXPECT_BAD((const uint8_t *)"GGU", 3, "three.gguf", DS_ECORRUPT, "truncated");
}

/* The same bad files through ds_gguf_open: the message names the real path. */
static void test_bad_files_on_disk(void) {
    char path[600];
    small_file s;
    build_small(&s);
    tmp_path(path, sizeof path, "disk-truncated.gguf");
    int rc = write_all_file(path, s.b.p, s.kv_key_end[2] + 13);
    REQUIRE(rc == 0, "write");
    ds_gguf g;
    ds_err e = {0};
    CHECK(ds_gguf_open(&g, path, &e) == DS_ECORRUPT && strstr(e.msg, path) && strstr(e.msg, "tok.list"),
          "truncated on disk: %s", e.msg);
    tmp_path(path, sizeof path, "disk-empty.gguf");
    rc = write_all_file(path, "", 0);
    REQUIRE(rc == 0, "write");
    e.msg[0] = 0;
    CHECK(ds_gguf_open(&g, path, &e) == DS_ECORRUPT && strstr(e.msg, path), "empty on disk: %s", e.msg);
    tmp_path(path, sizeof path, "does-not-exist.gguf");
    e.msg[0] = 0;
    CHECK(ds_gguf_open(&g, path, &e) == DS_EIO && strstr(e.msg, path), "missing file: %s", e.msg);
    e.msg[0] = 0;
    CHECK(ds_gguf_open(&g, g_dir, &e) == DS_EIO && strstr(e.msg, g_dir), "a directory: %s", e.msg);
    free(s.b.p);
}

/* The small file with single bytes changed anywhere in the header: never a
 * crash (ASan checks the reads), and a failure always names the file. */
static void test_header_byte_flips(void) {
    small_file s;
    build_small(&s);
    size_t n = s.b.n;
    uint8_t *v = malloc(n);
    int ok = 0, bad = 0;
    for (size_t pos = 0; pos < s.data_offset; pos++) {
        static const uint8_t vals[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
        for (int k = 0; k < 6; k++) {
            memcpy(v, s.b.p, n);
            v[pos] = k < 5 ? vals[k] : (uint8_t)(v[pos] ^ 0x10);
            parsed p;
            parse_buf(&p, v, n, "flipped.gguf");
            if (p.s == DS_OK) {
                ok++;
                for (uint64_t t = 0; t < p.g.n_tensors; t++) {
                    const ds_gguf_tensor *gt = &p.g.tensors[t];
                    CHECK(gt->data >= p.copy && gt->data + gt->nbytes <= p.copy + n, "byte %zu: tensor %s outside",
                          pos, gt->name);
                }
            } else {
                bad++;
                CHECK(one_line(p.e.msg) && strstr(p.e.msg, "flipped.gguf"), "byte %zu: %s", pos, p.e.msg);
            }
            parsed_free(&p);
        }
    }
    CHECK(ok > 0 && bad > 0, "accepted %d, rejected %d", ok, bad);
    free(v);
    free(s.b.p);
}

int main(void) {
    make_dir();
    RUN(test_writer_metadata_roundtrip);
    RUN(test_reader_all_value_types);
    RUN(test_writer_tensors_every_dtype);
    RUN(test_writer_custom_alignment);
    RUN(test_writer_errors);
    RUN(test_small_file_is_valid);
    RUN(test_truncated_everywhere);
    RUN(test_bad_header_fields);
    RUN(test_bad_files_on_disk);
    RUN(test_header_byte_flips);
    remove_dir();
    return ds_test_finish();
}
