/* test_mutate.c - mutates the headers of valid model files of both formats
 * thousands of times and opens each result with ds_model_open, which must
 * either fail with one message line naming the file, or succeed with every
 * tensor view inside a mapped file or a heap buffer (heap views are read in
 * full so that AddressSanitizer sees any overrun; one row of each tensor is
 * dequantised). It must never crash or hang (an alarm ends a hung run).
 *
 * Valid files come from ds_make_model: a tiny GGUF in F32 and in Q4_K_M, and
 * tiny Hugging Face directories (one file, sharded, split MoE experts). GGUF
 * mutations target the structural fields of the header (magic, version,
 * counts, key lengths, value types, array lengths, string lengths, tensor
 * names, dims, types, offsets), random header bytes, and truncation.
 * safetensors mutations target the 8-byte length, raw JSON bytes, and valid
 * JSON with changed numbers, dtypes, shapes, offsets, names and dropped keys;
 * config.json, generation_config.json and model.safetensors.index.json get
 * deleted, garbled, retyped and contradictory fields; shards go missing.
 *
 * DS_MUTATE_ITERS sets the iterations per format (default 3000), and
 * DS_MUTATE_SEED the seed (default 1). Counts of accepted and rejected files
 * are printed as '#' lines. */
#include <jansson.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loading/model_file.h"
#include "loading/model_file_int.h"
#include "model/model_make.h"
#include "testing.h"

static char g_dir[512];
static int g_iters = 3000;

/* ------------------------------------------------------------------------ */
/* random numbers, files                                                    */

static uint64_t g_rng;
static uint64_t rnd(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint64_t rn(uint64_t n) { return n ? rnd() % n : 0; }

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *p = malloc((size_t)len + 1);
    if (fread(p, 1, (size_t)len, f) != (size_t)len) {
        free(p);
        fclose(f);
        return NULL;
    }
    p[len] = 0;
    fclose(f);
    *n = (size_t)len;
    return p;
}

/* Writes a whole file as a new one: truncating and rewriting an existing file
 * makes ext4 flush it to disk on close (auto_da_alloc), which is slow. */
static int spit(const char *path, const void *p, size_t n) {
    unlink(path);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int bad = n && fwrite(p, 1, n, f) != n;
    return (fclose(f) != 0 || bad) ? -1 : 0;
}

static int pwrite_at(const char *path, size_t off, const void *p, size_t n) {
    int fd = open(path, O_WRONLY);
    if (fd < 0) return -1;
    ssize_t w = pwrite(fd, p, n, (off_t)off);
    close(fd);
    return w == (ssize_t)n ? 0 : -1;
}

/* ------------------------------------------------------------------------ */
/* opening a mutated model and checking what comes back                     */

typedef struct {
    const char *label;
    int accepted, rejected, skipped;
    int by_status[8];
    int bad; /* invariant violations reported */
} tally;

static int within(const uint8_t *p, size_t n, const uint8_t *base, size_t size) {
    return base && p >= base && n <= size && (size_t)(p - base) <= size - n;
}

static volatile uint64_t g_sink;

/* Every byte a tensor exposes is in a mapped file or a heap buffer. */
static void check_views(const ds_model_file *m, tally *t, const char *what) {
    float *row = NULL, *raw = NULL;
    size_t row_cap = 0;
    for (int i = 0; i < ds_model_n_tensors(m); i++) {
        const ds_tensor *x = ds_model_tensor_at(m, i);
        const ds_dtype_info *ti = ds_dtype_get(x->type);
        if (!ti || x->ne[0] <= 0 || x->ne[1] <= 0 || x->ne[2] <= 0 || x->ne[3] <= 0 || x->ne[0] % ti->block_elems) {
            if (t->bad++ < 5) CHECK(0, "%s: tensor %s has type %d, ne %lld", what, x->name, x->type, (long long)x->ne[0]);
            continue;
        }
        size_t mat = ds_dtype_row_bytes(x->type, x->ne[0]) * (size_t)x->ne[1];
        int64_t n_mat = x->ne[2] * x->ne[3];
        if (ds_tensor_bytes(x) != mat * (size_t)n_mat) {
            if (t->bad++ < 5) CHECK(0, "%s: tensor %s: ds_tensor_bytes", what, x->name);
            continue;
        }
        for (int64_t k = 0; k < n_mat; k++) {
            const uint8_t *p = x->data + (size_t)k * (n_mat > 1 ? x->nb2 : 0);
            int mapped = 0;
            if (m->format == DS_FORMAT_GGUF) mapped = within(p, mat, m->gguf.map.data, m->gguf.map.size);
            for (int s = 0; s < m->n_shards && !mapped; s++)
                mapped = within(p, mat, m->shards[s].map.data, m->shards[s].map.size);
            int in_any_map = 0; /* a view that starts in a map but runs past it */
            if (!mapped) {
                if (m->format == DS_FORMAT_GGUF) in_any_map |= within(p, 1, m->gguf.map.data, m->gguf.map.size);
                for (int s = 0; s < m->n_shards; s++) in_any_map |= within(p, 1, m->shards[s].map.data, m->shards[s].map.size);
            }
            if (in_any_map) {
                if (t->bad++ < 5) CHECK(0, "%s: tensor %s matrix %lld runs past the end of its file", what, x->name, (long long)k);
                break;
            }
            uint64_t sum = 0;
            if (mapped) {
                sum = p[0] + p[mat - 1];
            } else {
                /* a converted copy: read it all, so ASan checks the buffer's bounds */
                for (size_t b = 0; b < mat; b++) sum += p[b];
            }
            g_sink += sum;
        }
        /* dequantise the first row of the first matrix and the last row of the last, from an
         * aligned copy (safetensors views need not be aligned; the converters need it) */
        size_t rb = ds_dtype_row_bytes(x->type, x->ne[0]);
        if ((size_t)x->ne[0] > row_cap) {
            free(row);
            free(raw);
            row_cap = (size_t)x->ne[0];
            row = malloc(row_cap * sizeof *row);
            raw = malloc(row_cap * sizeof *row);
        }
        memcpy(raw, x->data, rb);
        ds_dequantize_row(x->type, raw, row, x->ne[0]);
        const uint8_t *last = x->data + (size_t)(n_mat - 1) * (n_mat > 1 ? x->nb2 : 0) + rb * (size_t)(x->ne[1] - 1);
        memcpy(raw, last, rb);
        ds_dequantize_row(x->type, raw, row, x->ne[0]);
        g_sink += (uint64_t)(row[0] != row[0]);
        /* what the loader converted itself (norms, vectors, conv; on the heap) is aligned F32 */
        int heap = !within(x->data, 1, m->gguf.map.data, m->gguf.map.size);
        for (int s = 0; s < m->n_shards; s++) heap &= !within(x->data, 1, m->shards[s].map.data, m->shards[s].map.size);
        if (heap && x->type == DS_F32 && (uintptr_t)x->data % sizeof(float) != 0 && t->bad++ < 5)
            CHECK(0, "%s: tensor %s: converted data is not aligned", what, x->name);
    }
    free(row);
    free(raw);
    ds_model_stats st;
    ds_model_compute_stats(m, &st);
    g_sink += (uint64_t)st.n_params;
}

/* Opens path; `names` is what a failure message must mention (the file or
 * directory). */
static void try_open(const char *path, const char *names, tally *t, const char *what) {
    ds_model_file *m = (ds_model_file *)(uintptr_t)1;
    ds_err e;
    memset(&e, 0, sizeof e);
    ds_status s = ds_model_open(path, &m, &e);
    if (s == DS_OK) {
        t->accepted++;
        if (!m) {
            if (t->bad++ < 5) CHECK(0, "%s: DS_OK without a model", what);
            return;
        }
        check_views(m, t, what);
        ds_model_close(m);
        return;
    }
    t->rejected++;
    if (s < DS_ENOTFOUND || s > DS_EIO) {
        if (t->bad++ < 5) CHECK(0, "%s: status %d is not a ds_status", what, s);
    } else {
        t->by_status[-s]++;
    }
    if (m != NULL && t->bad++ < 5) CHECK(0, "%s: failure but *out is not NULL", what);
    if (!e.msg[0] || strchr(e.msg, '\n') || !strstr(e.msg, names)) {
        if (t->bad++ < 5) CHECK(0, "%s: message does not name %s on one line: '%s'", what, names, e.msg);
    }
}

static void report(const tally *t) {
    printf("# %s: %d accepted, %d rejected (corrupt %d, unsupported %d, not found %d, i/o %d), %d skipped\n", t->label,
           t->accepted, t->rejected, t->by_status[-DS_ECORRUPT], t->by_status[-DS_EUNSUPPORTED],
           t->by_status[-DS_ENOTFOUND], t->by_status[-DS_EIO], t->skipped);
    CHECK(t->rejected > 0, "%s: nothing was rejected: the mutations do not reach the parser", t->label);
}

/* ------------------------------------------------------------------------ */
/* GGUF                                                                     */

enum {
    F_MAGIC, F_VERSION, F_COUNT, F_KEYLEN, F_KEYBYTE, F_TYPE, F_ARRTYPE, F_ARRLEN, F_VALUE, F_STRLEN,
    F_TNAMELEN, F_TNAMEBYTE, F_NDIMS, F_DIM, F_TTYPE, F_TOFF
};

typedef struct {
    size_t off;
    int size, kind;
} field;

typedef struct {
    char path[800];
    uint8_t *orig;
    size_t size, header_end;
    field *f;
    int n, cap;
} gguf_target;

static void add_field(gguf_target *g, size_t off, int size, int kind) {
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 256;
        g->f = realloc(g->f, (size_t)g->cap * sizeof *g->f);
    }
    g->f[g->n++] = (field){off, size, kind};
}

static uint64_t rd(const uint8_t *p, int size) {
    uint64_t v = 0;
    memcpy(&v, p, (size_t)size);
    return v;
}

static const int scalar_size[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* Records the structural fields of a valid GGUF file. */
static void walk_gguf(gguf_target *g) {
    const uint8_t *b = g->orig;
    size_t p = 0;
    add_field(g, 0, 4, F_MAGIC);
    add_field(g, 4, 4, F_VERSION);
    add_field(g, 8, 8, F_COUNT);
    add_field(g, 16, 8, F_COUNT);
    uint64_t n_t = rd(b + 8, 8), n_kv = rd(b + 16, 8);
    p = 24;
    for (uint64_t i = 0; i < n_kv; i++) {
        uint64_t kl = rd(b + p, 8);
        add_field(g, p, 8, F_KEYLEN);
        add_field(g, p + 8 + rn(kl), 1, F_KEYBYTE);
        p += 8 + kl;
        uint32_t type = (uint32_t)rd(b + p, 4);
        add_field(g, p, 4, F_TYPE);
        p += 4;
        uint64_t count = 1;
        uint32_t et = type;
        if (type == 9) {
            et = (uint32_t)rd(b + p, 4);
            add_field(g, p, 4, F_ARRTYPE);
            count = rd(b + p + 4, 8);
            add_field(g, p + 4, 8, F_ARRLEN);
            p += 12;
        }
        for (uint64_t k = 0; k < count; k++) {
            if (et == 8) {
                uint64_t sl = rd(b + p, 8);
                if (k < 3 || k + 3 >= count) add_field(g, p, 8, F_STRLEN);
                p += 8 + sl;
            } else {
                if (k < 3 || k + 3 >= count) add_field(g, p, scalar_size[et], F_VALUE);
                p += (size_t)scalar_size[et];
            }
        }
    }
    for (uint64_t i = 0; i < n_t; i++) {
        uint64_t nl = rd(b + p, 8);
        add_field(g, p, 8, F_TNAMELEN);
        add_field(g, p + 8 + rn(nl), 1, F_TNAMEBYTE);
        p += 8 + nl;
        uint32_t nd = (uint32_t)rd(b + p, 4);
        add_field(g, p, 4, F_NDIMS);
        p += 4;
        for (uint32_t d = 0; d < nd; d++, p += 8) add_field(g, p, 8, F_DIM);
        add_field(g, p, 4, F_TTYPE);
        add_field(g, p + 4, 8, F_TOFF);
        p += 12;
    }
    g->header_end = (p + 31) / 32 * 32;
}

static int load_gguf_target(gguf_target *g, const char *path) {
    memset(g, 0, sizeof *g);
    snprintf(g->path, sizeof g->path, "%s", path);
    g->orig = (uint8_t *)slurp(path, &g->size);
    if (!g->orig) return -1;
    walk_gguf(g);
    return 0;
}

static uint64_t mutate_int(uint64_t v, int size, int kind, const gguf_target *g) {
    uint64_t mask = size == 8 ? UINT64_MAX : ((1ull << (8 * size)) - 1);
    static const uint32_t ggml_types[] = {0, 1, 2, 3, 8, 12, 13, 14, 30, 6, 99, 39};
    switch (rn(kind == F_TTYPE || kind == F_TYPE || kind == F_ARRTYPE ? 14 : 12)) {
    case 0: return 0;
    case 1: return 1;
    case 2: return mask;
    case 3: { int64_t d = (int64_t)rn(9) - 4; return (v + (uint64_t)(d ? d : 1)) & mask; }
    case 4: return (v * 2) & mask;
    case 5: return v / 2;
    case 6: return rnd() & mask;
    case 7: return (1ull << rn((uint64_t)(8 * size))) & mask;
    case 8: return rn(300) & mask;
    case 9: return (uint64_t)g->size & mask;
    case 10: return v ^ (1ull << rn((uint64_t)(8 * size)));
    case 11: { /* another value of the same kind from the file */
        for (int tries = 0; tries < 20; tries++) {
            const field *o = &g->f[rn((uint64_t)g->n)];
            if (o->kind == kind && o->size == size) return rd(g->orig + o->off, size);
        }
        return v;
    }
    case 12: return kind == F_TTYPE ? ggml_types[rn(sizeof ggml_types / sizeof ggml_types[0])] : rn(14);
    default: return rn(13);
    }
}

/* One iteration on a GGUF target: mutate (in place, restored after) or truncate. */
static void gguf_iteration(gguf_target *g, tally *t, const char *trunc_path, int iter) {
    char what[64];
    snprintf(what, sizeof what, "%s #%d", t->label, iter);
    if (rn(100) < 8) {
        /* truncation: mostly inside the header, sometimes in the data */
        size_t cut = rn(100) < 70 ? rn(g->header_end + 1) : rn(g->size);
        if (spit(trunc_path, g->orig, cut) != 0) {
            CHECK(0, "write %s", trunc_path);
            return;
        }
        try_open(trunc_path, trunc_path, t, what);
        return;
    }
    /* up to 3 mutations, each of a structural field or a random header byte */
    size_t offs[3], sizes[3];
    int n_mut = 1 + (rn(4) == 0) + (rn(8) == 0);
    for (int k = 0; k < n_mut; k++) {
        uint8_t buf[8];
        if (rn(100) < 12) {
            offs[k] = rn(g->header_end);
            sizes[k] = 1;
            buf[0] = rn(2) ? (uint8_t)rnd() : (uint8_t)(g->orig[offs[k]] ^ (1u << rn(8)));
        } else {
            const field *f = &g->f[rn((uint64_t)g->n)];
            offs[k] = f->off;
            sizes[k] = (size_t)f->size;
            if (f->kind == F_MAGIC) {
                memcpy(buf, g->orig + f->off, 4);
                buf[rn(4)] ^= (uint8_t)(1u << rn(8));
            } else if (f->kind == F_KEYBYTE || f->kind == F_TNAMEBYTE) {
                static const char chars[] = {'.', '0', '1', '9', 'a', 'x', '_', '\0', '\xff', '-'};
                buf[0] = (uint8_t)chars[rn(sizeof chars)];
            } else {
                uint64_t v = mutate_int(rd(g->orig + f->off, f->size), f->size, f->kind, g);
                memcpy(buf, &v, (size_t)f->size);
            }
        }
        if (pwrite_at(g->path, offs[k], buf, sizes[k]) != 0) CHECK(0, "pwrite %s", g->path);
    }
    try_open(g->path, g->path, t, what);
    for (int k = n_mut - 1; k >= 0; k--) pwrite_at(g->path, offs[k], g->orig + offs[k], sizes[k]);
}

static void run_gguf(const char *dtype, const char *label, int iters) {
    tally t = {.label = label};
    char path[800], trunc[800];
    snprintf(path, sizeof path, "%s/%s.gguf", g_dir, label);
    snprintf(trunc, sizeof trunc, "%s/%s-truncated.gguf", g_dir, label);
    ds_make_options o = {.shape = "tiny", .dtype = dtype, .format = DS_FORMAT_GGUF, .seed = 5, .scale = 1.0f, .out = path};
    ds_err e = {0};
    ds_status s = ds_make_model(&o, &e);
    REQUIRE(s == DS_OK, "make-model: %s", e.msg);
    gguf_target g;
    REQUIRE(load_gguf_target(&g, path) == 0, "read %s", path);
    try_open(path, path, &t, label);
    REQUIRE(t.accepted == 1, "the unmutated file does not load");
    t.accepted = 0;
    for (int i = 0; i < iters && t.bad < 5; i++) gguf_iteration(&g, &t, trunc, i);
    /* the file is back as it was */
    size_t n;
    uint8_t *now = (uint8_t *)slurp(path, &n);
    CHECK(now && n == g.size && memcmp(now, g.orig, n) == 0, "%s: not restored", label);
    free(now);
    report(&t);
    free(g.orig);
    free(g.f);
    unlink(path);
    unlink(trunc);
}

/* ------------------------------------------------------------------------ */
/* Hugging Face directories                                                 */

#define SLACK 4096

typedef struct {
    char path[1000];
    uint8_t *orig;      /* the whole file as written (re-padded) */
    size_t size, hlen;  /* hlen includes the SLACK spaces */
} shard;

typedef struct {
    char dir[800];
    shard shards[64];
    int n_shards;
    char *config, *gen, *index; /* original texts (index NULL when single-file) */
    size_t config_n, gen_n, index_n;
} hf_target;

static void path_in(const hf_target *h, const char *file, char *buf, size_t n) { snprintf(buf, n, "%s/%s", h->dir, file); }

/* Rewrites a shard with SLACK spaces more header room, so that mutated JSON
 * of a different length can be written in place. */
static int repad_shard(shard *s) {
    size_t n;
    uint8_t *f = (uint8_t *)slurp(s->path, &n);
    if (!f || n < 8) return -1;
    uint64_t hlen;
    memcpy(&hlen, f, 8);
    s->hlen = (size_t)hlen + SLACK;
    s->size = n + SLACK;
    s->orig = malloc(s->size);
    uint64_t nh = s->hlen;
    memcpy(s->orig, &nh, 8);
    memcpy(s->orig + 8, f + 8, (size_t)hlen);
    memset(s->orig + 8 + hlen, ' ', SLACK);
    memcpy(s->orig + 8 + s->hlen, f + 8 + hlen, n - 8 - (size_t)hlen);
    free(f);
    return spit(s->path, s->orig, s->size);
}

static int load_hf_target(hf_target *h, const char *dir) {
    memset(h, 0, sizeof *h);
    snprintf(h->dir, sizeof h->dir, "%s", dir);
    char p[1000];
    path_in(h, "config.json", p, sizeof p);
    if (!(h->config = slurp(p, &h->config_n))) return -1;
    path_in(h, "generation_config.json", p, sizeof p);
    if (!(h->gen = slurp(p, &h->gen_n))) return -1;
    path_in(h, "model.safetensors.index.json", p, sizeof p);
    h->index = slurp(p, &h->index_n);
    if (!h->index) {
        path_in(h, "model.safetensors", h->shards[0].path, sizeof h->shards[0].path);
        h->n_shards = 1;
    } else {
        json_t *root = json_loads(h->index, 0, NULL);
        const char *key;
        json_t *it;
        json_object_foreach(json_object_get(root, "weight_map"), key, it) {
            char sp[1000];
            path_in(h, json_string_value(it), sp, sizeof sp);
            int seen = 0;
            for (int i = 0; i < h->n_shards; i++) seen |= strcmp(h->shards[i].path, sp) == 0;
            if (!seen && h->n_shards < 64) snprintf(h->shards[h->n_shards++].path, sizeof h->shards[0].path, "%s", sp);
        }
        json_decref(root);
    }
    for (int i = 0; i < h->n_shards; i++)
        if (repad_shard(&h->shards[i]) != 0) return -1;
    return h->n_shards ? 0 : -1;
}

static void free_hf_target(hf_target *h) {
    for (int i = 0; i < h->n_shards; i++) free(h->shards[i].orig);
    free(h->config);
    free(h->gen);
    free(h->index);
}

/* Sets obj[key] = val, replacing or adding; val is consumed either way. */
static void put(json_t *obj, const char *key, json_t *val) {
    if (!json_is_object(obj)) {
        json_decref(val);
        return;
    }
    json_object_set_new(obj, key, val);
}

/* a number as a file would write it: whole values as integers */
static json_t *number(double d) {
    return d == (double)(json_int_t)d && d > -0x1p62 && d < 0x1p62 ? json_integer((json_int_t)d) : json_real(d);
}

static json_t *random_value(void) {
    switch (rn(12)) {
    case 0: return json_integer(0);
    case 1: return json_integer(-1);
    case 2: return json_real(1.5);
    case 3: return json_integer(1000000000000);
    case 4: return json_real(1e300);
    case 5: return json_string("x");
    case 6: return json_null();
    case 7: return json_true();
    case 8: return json_array();
    case 9: return json_object();
    case 10: return json_integer((json_int_t)rn(5000));
    default: return json_integer(2147483648);
    }
}

/* The key of obj's n-th member, or NULL. */
static const char *nth_key(json_t *obj, int n) {
    void *it = json_is_object(obj) ? json_object_iter(obj) : NULL;
    while (it && n-- > 0) it = json_object_iter_next(obj, it);
    return it ? json_object_iter_key(it) : NULL;
}

static double num_mutated(double v) {
    switch (rn(8)) {
    case 0: return v + 1;
    case 1: return v - 1;
    case 2: return v * 2;
    case 3: return v / 2;
    case 4: return 0;
    case 5: return -v;
    case 6: return v + 0.5;
    default: return (double)rn(1u << 20);
    }
}

/* A copy of item with a number changed somewhere inside (a number, or an
 * array/object holding some); jansson numbers are not changed in place. */
static json_t *mutate_numbers(json_t *item) {
    if (json_is_number(item)) return number(num_mutated(json_number_value(item)));
    json_t *c = json_deep_copy(item);
    if (json_is_array(c) && json_array_size(c) > 0) {
        size_t i = (size_t)rn(json_array_size(c));
        json_array_set_new(c, i, mutate_numbers(json_array_get(c, i)));
    } else if (json_is_object(c) && json_object_size(c) > 0) {
        const char *k = nth_key(c, (int)rn(json_object_size(c)));
        json_object_set_new(c, k, mutate_numbers(json_object_get(c, k)));
    }
    return c;
}

/* Valid-JSON mutations of a safetensors header. A second copy of a key cannot
 * live in a jansson object, so that one is returned as text ("," "\"name\":{...}")
 * in *dup for the writer to splice in before the closing brace. */
static void mutate_st_json(json_t *hdr, char **dup) {
    int n = (int)json_object_size(hdr);
    const char *tk = nth_key(hdr, (int)rn((uint64_t)n));
    if (!tk) return;
    char tname[300];
    snprintf(tname, sizeof tname, "%s", tk);
    json_t *t = json_object_get(hdr, tname);
    static const char *const dtypes[] = {"F32", "F16", "BF16", "F64", "I64", "U8", "BOOL", "F8_E4M3", "X", "", "bf16"};
    switch (rn(14)) {
    case 0:
        put(t, "dtype", rn(6) ? json_string(dtypes[rn(11)]) : random_value());
        break;
    case 1:
    case 2: { /* a shape element */
        json_t *sh = json_object_get(t, "shape");
        if (json_array_size(sh) > 0 && rn(3)) put(t, "shape", mutate_numbers(sh));
        else if (sh && rn(2)) json_array_append_new(sh, json_integer((json_int_t)rn(3)));
        else if (json_array_size(sh) > 0) json_array_remove(sh, 0);
        break;
    }
    case 3:
    case 4: { /* an offset */
        json_t *offs = json_object_get(t, "data_offsets");
        if (offs) put(t, "data_offsets", mutate_numbers(offs));
        break;
    }
    case 5: { /* offsets of another tensor: aliasing */
        json_t *offs = json_object_get(json_object_get(hdr, nth_key(hdr, (int)rn((uint64_t)n))), "data_offsets");
        if (offs) put(t, "data_offsets", json_deep_copy(offs));
        break;
    }
    case 6: { /* drop a key, or the tensor */
        static const char *const keys[] = {"dtype", "shape", "data_offsets"};
        if (rn(4)) json_object_del(t, keys[rn(3)]); /* (-1 for a t that is not an object) */
        else json_object_del(hdr, tname);
        break;
    }
    case 7: { /* a key of the wrong type */
        static const char *const keys[] = {"dtype", "shape", "data_offsets"};
        put(t, keys[rn(3)], random_value());
        break;
    }
    case 8:
    case 9: { /* rename: another tensor's name, another layer or expert, MTP, vision, garbage */
        char name[300];
        snprintf(name, sizeof name, "%s", tname);
        char *dig = strpbrk(name, "0123456789");
        static const char *const repl[] = {"-1", "999", "1", "0", "2147483648", "7", "03"};
        switch (rn(5)) {
        case 0: {
            const char *o = nth_key(hdr, (int)rn((uint64_t)n));
            if (o) snprintf(name, sizeof name, "%s", o);
            break;
        }
        case 1:
            if (dig) {
                char tail[300];
                size_t k = strspn(dig, "0123456789");
                snprintf(tail, sizeof tail, "%s", dig + k);
                snprintf(dig, sizeof name - (size_t)(dig - name), "%s%s", repl[rn(7)], tail);
            }
            break;
        case 2: snprintf(name, sizeof name, "mtp.layers.%d.input_layernorm.weight", (int)rn(3)); break;
        case 3: snprintf(name, sizeof name, "model.visual.%.280s", tname); break;
        default: name[rn(strlen(name) + 1)] = (char)"._x9"[rn(4)]; break;
        }
        json_incref(t);
        json_object_del(hdr, tname);
        json_object_set_new(hdr, name, t); /* (onto another tensor's name: that one is replaced) */
        break;
    }
    case 10: { /* the same entry twice: a duplicate key in the text */
        const char *o = nth_key(hdr, (int)rn((uint64_t)n));
        char *body = o ? json_dumps(t, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER) : NULL;
        json_t *key = o ? json_string(o) : NULL;
        char *qkey = key ? json_dumps(key, JSON_ENCODE_ANY) : NULL;
        if (body && qkey && !*dup && (*dup = malloc(strlen(qkey) + strlen(body) + 3)))
            sprintf(*dup, ",%s:%s", qkey, body);
        free(body);
        free(qkey);
        json_decref(key);
        break;
    }
    case 11: /* metadata of another shape */
        put(hdr, "__metadata__", random_value());
        break;
    case 12: { /* shape and offsets consistent, but not what the config implies */
        json_t *sh = json_object_get(t, "shape");
        if (json_array_size(sh) >= 2) {
            json_t *a = json_incref(json_array_get(sh, 0));
            json_array_set(sh, 0, json_array_get(sh, 1));
            json_array_set_new(sh, 1, a);
        }
        break;
    }
    default: /* a different entry replaced by this one */
        if (n > 1) {
            const char *o = nth_key(hdr, (int)rn((uint64_t)n));
            if (o && strcmp(o, tname) != 0) put(hdr, o, json_deep_copy(t));
        }
        break;
    }
}

/* Mutates one shard's header in place; returns 0 when written (else skipped). */
static int mutate_shard(shard *s) {
    int kind = (int)rn(10);
    if (kind == 0) { /* the 8-byte length */
        uint64_t v;
        memcpy(&v, s->orig, 8);
        switch (rn(7)) {
        case 0: v = 0; break;
        case 1: v = UINT64_MAX; break;
        case 2: v = v + 1 + rn(16); break;
        case 3: v = v > 16 ? v - 1 - rn(16) : 0; break;
        case 4: v = s->size - 8; break;
        case 5: v = s->size - 7; break;
        default: v ^= 1ull << rn(64); break;
        }
        return pwrite_at(s->path, 0, &v, 8);
    }
    if (kind <= 3) { /* raw JSON bytes */
        static const char chars[] = "\"{}[],:0123456789-.e \\\x01x";
        size_t at = 8 + rn(s->hlen);
        uint8_t c = rn(3) ? (uint8_t)chars[rn(sizeof chars - 1)] : (uint8_t)rnd();
        return pwrite_at(s->path, at, &c, 1);
    }
    /* valid JSON with something changed */
    json_t *hdr = json_loadb((const char *)s->orig + 8, s->hlen, 0, NULL);
    if (!hdr) return -1;
    int n_mut = 1 + (rn(4) == 0);
    char *dup = NULL;
    for (int k = 0; k < n_mut; k++) mutate_st_json(hdr, &dup);
    char *js = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(hdr);
    size_t jl = js ? strlen(js) : 0, dl = dup ? strlen(dup) : 0;
    int rc = -1;
    if (jl >= 2 && jl + dl <= s->hlen) {
        char *buf = malloc(s->hlen);
        memcpy(buf, js, jl - 1); /* the duplicate goes before the closing brace */
        if (dl) memcpy(buf + jl - 1, dup, dl);
        buf[jl - 1 + dl] = '}';
        memset(buf + jl + dl, ' ', s->hlen - jl - dl);
        rc = pwrite_at(s->path, 8, buf, s->hlen);
        free(buf);
    }
    free(js);
    free(dup);
    return rc;
}

static void restore_shard(const shard *s) { pwrite_at(s->path, 0, s->orig, 8 + s->hlen); }

/* config.json / generation_config.json mutations: returns the new text (malloc'd). */
static char *mutate_config_text(const char *orig, int is_config) {
    if (rn(8) == 0) { /* raw text damage */
        char *t = strdup(orig);
        size_t n = strlen(t);
        if (rn(3) == 0) t[rn(n)] = 0; /* truncated */
        else t[rn(n)] = "\"{}[],:01-. x"[rn(13)];
        return t;
    }
    json_t *root = json_loads(orig, 0, NULL);
    json_t *text = json_object_get(root, "text_config");
    json_t *obj = text && rn(4) ? text : root;
    int n = (int)json_object_size(obj);
    const char *fk = nth_key(obj, (int)rn((uint64_t)n));
    char key[300];
    snprintf(key, sizeof key, "%s", fk ? fk : "");
    json_t *f = fk ? json_object_get(obj, key) : NULL;
    if (f) {
        switch (rn(is_config ? 10 : 6)) {
        case 0: json_object_del(obj, key); break;
        case 1:
        case 2: put(obj, key, random_value()); break;
        case 3:
        case 4: put(obj, key, mutate_numbers(f)); break;
        case 5: /* a string field gets another known value */
            if (json_is_string(f)) {
                static const char *const vals[] = {"qwen3", "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "llama", "",
                                                   "full_attention", "linear_attention"};
                put(obj, key, json_string(vals[rn(8)]));
            } else {
                put(obj, key, mutate_numbers(f));
            }
            break;
        case 6:
        case 7: /* the field at the other level too, with the same or a changed value */
            if (text && obj == text) {
                json_t *d = rn(3) ? mutate_numbers(f) : json_deep_copy(f);
                json_object_del(root, key);
                json_object_set_new(root, key, d);
            } else if (text) {
                put(root, "text_config", random_value());
            }
            break;
        default: { /* layer_types: wrong length, wrong entries */
            json_t *lt = json_object_get(text ? text : root, "layer_types");
            size_t k = json_array_size(lt);
            if (k > 0) {
                switch (rn(4)) {
                case 0: json_array_remove(lt, (size_t)rn(k)); break;
                case 1: json_array_append_new(lt, json_string("linear_attention")); break;
                case 2: json_array_set_new(lt, (size_t)rn(k), json_string(rn(2) ? "full_attention" : "mamba")); break;
                default: json_array_set_new(lt, (size_t)rn(k), random_value()); break;
                }
            } else {
                json_object_del(obj, key);
            }
            break;
        }
        }
    }
    char *out = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return out;
}

static char *mutate_index_text(const char *orig) {
    if (rn(8) == 0) {
        char *t = strdup(orig);
        t[rn(strlen(t))] = "\"{}[],:01-. x/"[rn(14)];
        return t;
    }
    json_t *root = json_loads(orig, 0, NULL);
    json_t *map = json_object_get(root, "weight_map");
    int n = (int)json_object_size(map);
    const char *ek = nth_key(map, (int)rn((uint64_t)n));
    char e[300];
    snprintf(e, sizeof e, "%s", ek ? ek : "");
    const char *efile = ek ? json_string_value(json_object_get(map, e)) : NULL;
    static const char *const files[] = {"model-00099-of-00099.safetensors", "../model.safetensors", "", ".hidden",
                                        "config.json", "a/b.safetensors", "model.safetensors"};
    switch (rn(8)) {
    case 0: if (ek) json_object_del(map, e); break;
    case 1: { /* another shard's file */
        const char *o = nth_key(map, (int)rn((uint64_t)n));
        json_t *of = o ? json_deep_copy(json_object_get(map, o)) : NULL;
        if (ek && of) put(map, e, of);
        else json_decref(of);
        break;
    }
    case 2: if (ek) put(map, e, json_string(files[rn(7)])); break;
    case 3: if (ek) put(map, e, random_value()); break;
    case 4: put(map, "model.language_model.layers.0.no_such.weight", json_string(efile ? efile : "x")); break;
    case 5: put(root, "weight_map", random_value()); break;
    case 6: json_object_del(root, "weight_map"); break;
    default: {
        json_t *meta = json_object_get(root, "metadata");
        if (meta) put(root, "metadata", mutate_numbers(meta));
        break;
    }
    }
    char *out = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return out;
}

static void hf_iteration(hf_target *h, tally *t, int iter) {
    char what[64], p[1000];
    snprintf(what, sizeof what, "%s #%d", t->label, iter);
    int r = (int)rn(100);
    if (r < 55) { /* a shard header */
        shard *s = &h->shards[rn((uint64_t)h->n_shards)];
        if (mutate_shard(s) != 0) {
            t->skipped++;
            restore_shard(s);
            return;
        }
        try_open(h->dir, h->dir, t, what);
        restore_shard(s);
    } else if (r < 85 || (r < 93 && !h->index)) { /* config.json, sometimes generation_config.json */
        int gen = rn(8) == 0;
        char *text = mutate_config_text(gen ? h->gen : h->config, !gen);
        path_in(h, gen ? "generation_config.json" : "config.json", p, sizeof p);
        spit(p, text, strlen(text));
        free(text);
        try_open(h->dir, h->dir, t, what);
        spit(p, gen ? h->gen : h->config, gen ? h->gen_n : h->config_n);
    } else if (r < 93) { /* the index */
        char *text = mutate_index_text(h->index);
        path_in(h, "model.safetensors.index.json", p, sizeof p);
        spit(p, text, strlen(text));
        free(text);
        try_open(h->dir, h->dir, t, what);
        spit(p, h->index, h->index_n);
    } else if (r < 96) { /* a shard missing, or truncated */
        shard *s = &h->shards[rn((uint64_t)h->n_shards)];
        if (rn(2)) {
            char away[1200];
            snprintf(away, sizeof away, "%s.away", s->path);
            rename(s->path, away);
            try_open(h->dir, h->dir, t, what);
            rename(away, s->path);
        } else {
            size_t cut = rn(2) ? rn(8 + s->hlen + 1) : rn(s->size);
            if (truncate(s->path, (off_t)cut) != 0) CHECK(0, "truncate");
            try_open(h->dir, h->dir, t, what);
            spit(s->path, s->orig, s->size);
        }
    } else { /* two things at once: a config field and a shard header */
        shard *s = &h->shards[rn((uint64_t)h->n_shards)];
        char *text = mutate_config_text(h->config, 1);
        path_in(h, "config.json", p, sizeof p);
        spit(p, text, strlen(text));
        free(text);
        if (mutate_shard(s) != 0) t->skipped++;
        try_open(h->dir, h->dir, t, what);
        restore_shard(s);
        spit(p, h->config, h->config_n);
    }
}

static void run_hf(const char *label, const char *shape, int layers, const char *dtype, int split, size_t shard_bytes,
                   int iters) {
    tally t = {.label = label};
    char dir[800];
    snprintf(dir, sizeof dir, "%s/%s", g_dir, label);
    ds_make_options o = {.shape = shape, .n_layers = layers, .dtype = dtype, .format = DS_FORMAT_SAFETENSORS, .seed = 9,
                         .scale = 1.0f, .out = dir, .split_experts = split, .shard_bytes = shard_bytes};
    ds_err e = {0};
    ds_status s = ds_make_model(&o, &e);
    REQUIRE(s == DS_OK, "make-model: %s", e.msg);
    hf_target h;
    int rc = load_hf_target(&h, dir);
    REQUIRE(rc == 0, "read %s", dir);
    try_open(dir, dir, &t, label);
    REQUIRE(t.accepted == 1 && t.bad == 0, "the re-padded directory does not load");
    t.accepted = 0;
    for (int i = 0; i < iters && t.bad < 5; i++) hf_iteration(&h, &t, i);
    /* everything is back as it was */
    int before = t.accepted;
    try_open(dir, dir, &t, label);
    CHECK(t.accepted == before + 1 && t.bad == 0, "%s: not restored", label);
    report(&t);
    free_hf_target(&h);
    char cmd[900];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static void test_mutate_gguf_f32(void) { run_gguf("f32", "gguf-f32", g_iters * 6 / 10); }
static void test_mutate_gguf_q4_k_m(void) { run_gguf("q4_k_m", "gguf-q4_k_m", g_iters - g_iters * 6 / 10); }
static void test_mutate_hf_single(void) { run_hf("hf-single", "tiny", 0, "bf16", 0, 0, g_iters * 4 / 10); }
static void test_mutate_hf_sharded(void) { run_hf("hf-sharded", "tiny", 0, "f16", 0, 1 << 20, g_iters * 4 / 10); }
static void test_mutate_hf_split_moe(void) {
    run_hf("hf-moe-split", "tiny-moe", 1, "bf16", 1, 1 << 20, g_iters - 2 * (g_iters * 4 / 10));
}

int main(void) {
    const char *it = getenv("DS_MUTATE_ITERS"), *seed = getenv("DS_MUTATE_SEED");
    if (it && atoi(it) > 0) g_iters = atoi(it);
    g_rng = seed && *seed ? strtoull(seed, NULL, 10) : 1;
    alarm(900); /* a hang ends the run (without a RESULT line, so the runner reports it) */
    const char *base = getenv("DS_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/mutate.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    printf("# %d iterations per format, seed %llu\n", g_iters, (unsigned long long)g_rng);
    RUN(test_mutate_gguf_f32);
    RUN(test_mutate_gguf_q4_k_m);
    RUN(test_mutate_hf_single);
    RUN(test_mutate_hf_sharded);
    RUN(test_mutate_hf_split_moe);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return ds_test_finish();
}
