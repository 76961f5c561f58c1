/* test_mrope.c - the text model's side of images:
 *   - ds_mrope_positions against positions worked out by hand from Hugging
 *     Face's get_rope_index (Qwen3-VL / Qwen3.5), and its refusals;
 *   - the M-RoPE sections read from GGUF (rope.dimension_sections) and from
 *     config.json (rope_parameters, or rope_scaling in older exports), and a
 *     sum that does not cover the rotated pairs refused;
 *   - image inputs in a ragged batch: a sequence with an image (embeddings,
 *     DeepStack parts, M-RoPE positions) beside a text-only one gives bit for
 *     bit the outputs of each run alone, in prefill and in decode with the
 *     delta, and a prompt cut at a DeltaNet chunk multiple those of one call;
 *   - malformed image inputs refused with a message naming the row.
 * Numerics against the NumPy reference: tests/reference/test_mrope.py. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "model/model_make.h"
#include "model/mrope.h"
#include "testing.h"

#define PAGE 16
#define MAXTOK 256
#define NPAGES 16 /* per sequence: 256 positions */

static char tmpdir[256];

/* ---- positions ---- */

static int pos_equal(const int32_t *got, const int32_t (*want)[3], int n, int *bad) {
    for (int i = 0; i < n; i++)
        for (int a = 0; a < 3; a++)
            if (got[3 * i + a] != want[i][a]) {
                *bad = i;
                return 0;
            }
    return 1;
}

static void test_positions_text_only(void) {
    int32_t pos[5 * 3];
    int delta = 99, bad = -1;
    ds_err e = {0};
    REQUIRE(ds_mrope_positions(5, NULL, 0, pos, &delta, &e) == DS_OK, "%s", e.msg);
    const int32_t want[5][3] = {{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {3, 3, 3}, {4, 4, 4}};
    CHECK(pos_equal(pos, want, 5, &bad), "token %d", bad);
    CHECK(delta == 0, "delta %d", delta);
}

/* get_rope_index on [a b <vs> img(grid_thw 1x4x6: merged 2x3) <ve> c d]: text 0..2,
 * the image from st_idx + text_len = 3 with (t, h, w) offsets, <ve> at max + 1 = 6 */
static void test_positions_one_image(void) {
    ds_mrope_image im = {.first = 3, .grid_t = 1, .grid_h = 2, .grid_w = 3};
    int32_t pos[12 * 3];
    int delta = 0, bad = -1;
    ds_err e = {0};
    REQUIRE(ds_mrope_positions(12, &im, 1, pos, &delta, &e) == DS_OK, "%s", e.msg);
    const int32_t want[12][3] = {{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {3, 3, 3}, {3, 3, 4}, {3, 3, 5}, {3, 4, 3},
                                 {3, 4, 4}, {3, 4, 5}, {6, 6, 6}, {7, 7, 7}, {8, 8, 8}};
    CHECK(pos_equal(pos, want, 12, &bad), "token %d: (%d, %d, %d)", bad, pos[3 * bad], pos[3 * bad + 1], pos[3 * bad + 2]);
    CHECK(delta == -3, "delta %d (max 8 + 1 - 12 tokens)", delta); /* decode: position p turns by p - 3 */
}

/* two images back to back at the start (no text before the first), a
 * tall one and a 1x1 one, then text; and a grid with t = 2 (a video's
 * temporal pairs, which Qwen3-VL otherwise splits into frames: t counts like h and w) */
static void test_positions_several(void) {
    ds_mrope_image im[2] = {{.first = 0, .grid_t = 1, .grid_h = 3, .grid_w = 1}, {.first = 3, .grid_t = 1, .grid_h = 1, .grid_w = 1}};
    int32_t pos[6 * 3];
    int delta = 0, bad = -1;
    ds_err e = {0};
    REQUIRE(ds_mrope_positions(6, im, 2, pos, &delta, &e) == DS_OK, "%s", e.msg);
    const int32_t want[6][3] = {{0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {3, 3, 3}, {4, 4, 4}, {5, 5, 5}};
    CHECK(pos_equal(pos, want, 6, &bad), "token %d: (%d, %d, %d)", bad, pos[3 * bad], pos[3 * bad + 1], pos[3 * bad + 2]);
    CHECK(delta == 0, "delta %d", delta);

    ds_mrope_image v = {.first = 1, .grid_t = 2, .grid_h = 1, .grid_w = 2};
    int32_t p2[6 * 3];
    REQUIRE(ds_mrope_positions(6, &v, 1, p2, &delta, &e) == DS_OK, "%s", e.msg);
    const int32_t want2[6][3] = {{0, 0, 0}, {1, 1, 1}, {1, 1, 2}, {2, 1, 1}, {2, 1, 2}, {3, 3, 3}};
    CHECK(pos_equal(p2, want2, 6, &bad), "t=2 token %d: (%d, %d, %d)", bad, p2[3 * bad], p2[3 * bad + 1], p2[3 * bad + 2]);
    CHECK(delta == -2, "t=2 delta %d", delta);

    /* an image ending the prompt (its last token at (2, 3, 3)): the delta counts from its largest position */
    ds_mrope_image last = {.first = 2, .grid_t = 1, .grid_h = 2, .grid_w = 2};
    int32_t p3[6 * 3];
    REQUIRE(ds_mrope_positions(6, &last, 1, p3, &delta, &e) == DS_OK, "%s", e.msg);
    CHECK(p3[3 * 5] == 2 && p3[3 * 5 + 1] == 3 && p3[3 * 5 + 2] == 3 && delta == -2, "last image: (%d, %d, %d), delta %d",
          p3[15], p3[16], p3[17], delta);
}

static void test_positions_refused(void) {
    int32_t pos[10 * 3];
    int delta;
    struct { ds_mrope_image im[2]; int n; const char *needle; } cases[] = {
        {{{2, 1, 2, 2}, {4, 1, 1, 1}}, 2, "image 1"},    /* overlaps the first */
        {{{5, 1, 1, 1}, {2, 1, 1, 1}}, 2, "image 1"},    /* out of order */
        {{{8, 1, 2, 2}}, 1, "image 0"},                  /* past the end */
        {{{-1, 1, 1, 1}}, 1, "image 0"},
        {{{1, 1, 0, 2}}, 1, "grid of 1 x 0 x 2"},
        {{{1, 1, 1 << 20, 1 << 20}}, 1, "image 0"},      /* a grid whose size overflows an int */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ds_err e = {0};
        ds_status s = ds_mrope_positions(10, cases[i].im, cases[i].n, pos, &delta, &e);
        CHECK(s == DS_EINVAL && strstr(e.msg, cases[i].needle), "case %zu: status %d, '%s'", i, s, e.msg);
    }
}

/* ---- configs ---- */

static int make(const char *shape, ds_format fmt, const char *name, char *path, size_t n) {
    snprintf(path, n, "%s/%s", tmpdir, name);
    if (access(path, F_OK) == 0) return 0;
    ds_make_options o = {.shape = shape, .dtype = "f32", .format = fmt, .seed = 5, .scale = 3.0f, .out = path};
    ds_err e = {0};
    if (ds_make_model(&o, &e) != DS_OK) {
        printf("make-model %s: %s\n", name, e.msg);
        return -1;
    }
    return 0;
}

static int open_cfg(const char *path, ds_model_config *c, ds_err *e) {
    ds_model_file *f;
    ds_status s = ds_model_open(path, &f, e);
    if (s) return s;
    *c = *ds_model_config_of(f);
    ds_model_close(f);
    return DS_OK;
}

/* Replaces the first `from` in file path by `to`; 0 when done. */
static int edit_file(const char *path, const char *from, const char *to) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    static char buf[1 << 16], out[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strstr(buf, from);
    if (!p) return -1;
    snprintf(out, sizeof out, "%.*s%s%s", (int)(p - buf), buf, to, p + strlen(from));
    f = fopen(path, "wb");
    if (!f) return -1;
    fputs(out, f);
    return fclose(f);
}

static void test_config_sections(void) {
    char gguf[512], hf[512], q3[512];
    REQUIRE(make("tiny", DS_FORMAT_GGUF, "tiny.gguf", gguf, sizeof gguf) == 0, "make");
    REQUIRE(make("tiny", DS_FORMAT_SAFETENSORS, "tiny-hf", hf, sizeof hf) == 0, "make");
    REQUIRE(make("tiny-qwen3", DS_FORMAT_GGUF, "tiny-qwen3.gguf", q3, sizeof q3) == 0, "make");
    ds_model_config c;
    ds_err e = {0};
    /* tiny rotates 16 of 64 dims: 8 pairs, [3, 3, 2] as [11, 11, 10] is for the real 32 */
    REQUIRE(open_cfg(gguf, &c, &e) == DS_OK, "%s", e.msg);
    CHECK(c.mrope_sections[0] == 3 && c.mrope_sections[1] == 3 && c.mrope_sections[2] == 2 && c.mrope_interleaved,
          "GGUF: [%d, %d, %d] interleaved %d", c.mrope_sections[0], c.mrope_sections[1], c.mrope_sections[2],
          c.mrope_interleaved);
    REQUIRE(open_cfg(hf, &c, &e) == DS_OK, "%s", e.msg);
    CHECK(c.mrope_sections[0] == 3 && c.mrope_sections[1] == 3 && c.mrope_sections[2] == 2 && c.mrope_interleaved,
          "HF: [%d, %d, %d] interleaved %d", c.mrope_sections[0], c.mrope_sections[1], c.mrope_sections[2],
          c.mrope_interleaved);
    REQUIRE(open_cfg(q3, &c, &e) == DS_OK, "%s", e.msg);
    CHECK(c.mrope_sections[0] + c.mrope_sections[1] + c.mrope_sections[2] == 0, "qwen3 has no M-RoPE");

    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/config.json", hf);
    /* an older export: the sections under rope_scaling, not interleaved (Qwen2-VL's layout) */
    REQUIRE(edit_file(cfg, "\"rope_parameters\"", "\"rope_scaling\"") == 0, "edit config.json");
    REQUIRE(edit_file(cfg, "\"mrope_interleaved\": true", "\"mrope_interleaved\": false") == 0, "edit config.json");
    REQUIRE(open_cfg(hf, &c, &e) == DS_OK, "%s", e.msg);
    CHECK(c.mrope_sections[0] == 3 && c.mrope_sections[1] == 3 && c.mrope_sections[2] == 2 && !c.mrope_interleaved,
          "rope_scaling: [%d, %d, %d] interleaved %d", c.mrope_sections[0], c.mrope_sections[1], c.mrope_sections[2],
          c.mrope_interleaved);
    REQUIRE(edit_file(cfg, "2\n", "3\n") == 0 || edit_file(cfg, "2]", "3]") == 0, "edit config.json");
    CHECK(open_cfg(hf, &c, &e) == DS_ECORRUPT && strstr(e.msg, "M-RoPE sections [3, 3, 3]"), "sum 9 of 8: '%s'", e.msg);
}

/* ---- forward ---- */

typedef struct {
    ds_model_file *file;
    ds_model *m;
    ds_kv_pool kv;
    ds_state_pool st;
    int V, H;
    int32_t pages[2][NPAGES];
} rig;

static int rig_open(rig *r, const char *path) {
    ds_err e = {0};
    memset(r, 0, sizeof *r);
    if (ds_model_open(path, &r->file, &e) != DS_OK) { printf("open: %s\n", e.msg); return -1; }
    ds_model_params p = {.max_batch_tokens = MAXTOK};
    if (ds_model_new(r->file, &p, &r->m, &e) != DS_OK) { printf("model: %s\n", e.msg); return -1; }
    const ds_model_config *c = ds_model_cfg(r->m);
    int n_attn = ds_model_n_attn_layers(r->m);
    if (ds_kv_pool_init(&r->kv, n_attn, c->n_head_kv, c->head_dim, PAGE, (size_t)64 << 20, &e) ||
        ds_state_pool_init(&r->st, ds_model_n_gdn_layers(r->m), c->conv_kernel, ds_model_conv_dim(r->m), c->lin_v_heads,
                           c->lin_k_dim, c->lin_v_dim, 4, &e)) {
        printf("pools: %s\n", e.msg);
        return -1;
    }
    for (int s = 0; s < 2; s++)
        for (int p2 = 0; p2 < NPAGES; p2++) r->pages[s][p2] = s * NPAGES + p2;
    r->V = c->n_vocab;
    r->H = c->n_embd;
    return 0;
}

static void rig_close(rig *r) {
    ds_kv_pool_free(&r->kv);
    ds_state_pool_free(&r->st);
    ds_model_free(r->m);
    ds_model_close(r->file);
}

/* One sequence's work for a call: tokens [from, to) of its prompt/decode. */
typedef struct {
    int slot;                  /* 0 or 1: its pages and state slot */
    const int32_t *toks;       /* [len] */
    const int32_t *rope;       /* [len][3] or NULL (text) */
    const float *const *embd;  /* [len] or NULL */
} seq_desc;

/* Runs positions [from, to) of each sequence in one call (all rows want logits). */
static int run(rig *r, const seq_desc *sq, int n_sq, int from, int to, int n_ds, float *logits) {
    ds_batch_token bt[MAXTOK];
    ds_batch_seq seqs[2];
    int32_t rope[MAXTOK][3];
    const float *embd[MAXTOK];
    int n = 0, any_rope = 0, any_embd = 0;
    for (int s = 0; s < n_sq; s++) {
        seqs[s] = (ds_batch_seq){.mode = to - from == 1 ? DS_SEQ_DECODE : DS_SEQ_PREFILL, .pages = r->pages[sq[s].slot],
                                 .n_pages = NPAGES, .state_slot = sq[s].slot};
        any_rope |= sq[s].rope != NULL;
        any_embd |= sq[s].embd != NULL;
        for (int p = from; p < to; p++, n++) {
            bt[n] = (ds_batch_token){.token = sq[s].toks[p], .seq = s, .pos = p, .want_logits = 1};
            for (int a = 0; a < 3; a++) rope[n][a] = sq[s].rope ? sq[s].rope[3 * p + a] : p;
            embd[n] = sq[s].embd ? sq[s].embd[p] : NULL;
        }
    }
    ds_batch b = {.tokens = bt, .n_tokens = n, .seqs = seqs, .n_seqs = n_sq, .logits = logits,
                  .rope_pos = any_rope ? &rope[0][0] : NULL, .embd = any_embd ? embd : NULL, .n_deepstack = n_ds};
    ds_err e = {0};
    if (ds_model_forward(r->m, &r->kv, &r->st, &b, &e) != DS_OK) {
        printf("forward: %s\n", e.msg);
        return -1;
    }
    return 0;
}

#define N0 100 /* the image sequence: 30 text tokens, an image of 4 x 10 = 40 tokens over position 64, text */
#define N1 50  /* the text sequence */
#define IMG0 30
#define DEC 3
#define NDS 2

static void image_sequence(int H, int32_t *toks, int32_t *rope, float *rows, const float **embd) {
    ds_mrope_image im = {.first = IMG0, .grid_t = 1, .grid_h = 4, .grid_w = 10};
    int delta;
    ds_err e = {0};
    ds_mrope_positions(N0, &im, 1, rope, &delta, &e);
    for (int p = N0; p < N0 + DEC; p++)
        for (int a = 0; a < 3; a++) rope[3 * p + a] = p + delta;
    unsigned x = 12345;
    for (int i = 0; i < 40 * H * (1 + NDS); i++) {
        x = x * 1103515245u + 12345u;
        rows[i] = ((float)(x >> 8 & 0xffff) / 65536.0f - 0.5f) * 0.2f;
    }
    for (int p = 0; p < N0 + DEC; p++) {
        toks[p] = (int32_t)((p * 37 + 11) % 900);
        embd[p] = p >= IMG0 && p < IMG0 + 40 ? rows + (size_t)(p - IMG0) * H * (1 + NDS) : NULL;
    }
}

/* The text sequence (slot 0) and the image one (slot 1) in one call each
 * step: the prompts (150 rows, run as two slices cut inside the image, at
 * the image sequence's position 64), then DEC decodes of both. Text rows
 * carry M-RoPE positions equal to pos and no embedding. */
static int run_pair(rig *r, const seq_desc *sq, float *prompt_logits, float *dec_logits) {
    ds_batch_token tk[N0 + N1];
    ds_batch_seq seqs[2];
    int32_t rope[N0 + N1][3];
    const float *embd[N0 + N1];
    int n = 0;
    for (int s = 0; s < 2; s++) {
        int len = s == 0 ? N1 : N0;
        seqs[s] = (ds_batch_seq){.mode = DS_SEQ_PREFILL, .pages = r->pages[s], .n_pages = NPAGES, .state_slot = s};
        for (int p = 0; p < len; p++, n++) {
            tk[n] = (ds_batch_token){.token = sq[s].toks[p], .seq = s, .pos = p, .want_logits = 1};
            for (int x = 0; x < 3; x++) rope[n][x] = sq[s].rope ? sq[s].rope[3 * p + x] : p;
            embd[n] = sq[s].embd ? sq[s].embd[p] : NULL;
        }
    }
    ds_batch b = {.tokens = tk, .n_tokens = n, .seqs = seqs, .n_seqs = 2, .logits = prompt_logits,
                  .rope_pos = &rope[0][0], .embd = embd, .n_deepstack = NDS};
    ds_err e = {0};
    if (ds_model_forward(r->m, &r->kv, &r->st, &b, &e) != DS_OK) {
        printf("pair prompt: %s\n", e.msg);
        return -1;
    }
    for (int k = 0; k < DEC; k++) {
        for (int s = 0; s < 2; s++) {
            int p = (s == 0 ? N1 : N0) + k;
            seqs[s].mode = DS_SEQ_DECODE;
            tk[s] = (ds_batch_token){.token = sq[s].toks[p], .seq = s, .pos = p, .want_logits = 1};
            for (int x = 0; x < 3; x++) rope[s][x] = sq[s].rope ? sq[s].rope[3 * p + x] : p;
            embd[s] = NULL;
        }
        ds_batch d = {.tokens = tk, .n_tokens = 2, .seqs = seqs, .n_seqs = 2, .logits = dec_logits + (size_t)k * 2 * r->V,
                      .rope_pos = &rope[0][0], .embd = embd, .n_deepstack = NDS};
        if (ds_model_forward(r->m, &r->kv, &r->st, &d, &e) != DS_OK) {
            printf("pair decode: %s\n", e.msg);
            return -1;
        }
    }
    return 0;
}

static void test_ragged_batch_with_an_image(void) {
    char path[512];
    REQUIRE(make("tiny", DS_FORMAT_GGUF, "tiny.gguf", path, sizeof path) == 0, "make");
    rig r;
    REQUIRE(rig_open(&r, path) == 0, "open");
    int V = r.V, H = r.H;
    int32_t toks0[N0 + DEC], toks1[N1 + DEC], rope0[(N0 + DEC) * 3];
    const float *embd0[N0 + DEC];
    float *rows = malloc((size_t)40 * H * (1 + NDS) * sizeof(float));
    image_sequence(H, toks0, rope0, rows, embd0);
    for (int p = 0; p < N1 + DEC; p++) toks1[p] = (int32_t)((p * 53 + 7) % 900);
    seq_desc img = {.slot = 1, .toks = toks0, .rope = rope0, .embd = embd0}, txt = {.slot = 0, .toks = toks1};
    float *alone0 = calloc((size_t)(N0 + DEC) * V, sizeof(float)), *alone1 = calloc((size_t)(N1 + DEC) * V, sizeof(float));
    float *both = calloc((size_t)(N0 + N1) * V, sizeof(float)), *dec = calloc((size_t)DEC * 2 * V, sizeof(float));
    /* each alone: its prompt in one call, then its decodes; the text one with no image inputs at all */
    ds_state_clear(&r.st, 0);
    ds_state_clear(&r.st, 1);
    REQUIRE(run(&r, &img, 1, 0, N0, NDS, alone0) == 0, "image sequence alone");
    for (int p = N0; p < N0 + DEC; p++) REQUIRE(run(&r, &img, 1, p, p + 1, NDS, alone0 + (size_t)p * V) == 0, "decode");
    REQUIRE(run(&r, &txt, 1, 0, N1, 0, alone1) == 0, "text sequence alone");
    for (int p = N1; p < N1 + DEC; p++) REQUIRE(run(&r, &txt, 1, p, p + 1, 0, alone1 + (size_t)p * V) == 0, "decode");
    ds_state_clear(&r.st, 0);
    ds_state_clear(&r.st, 1);
    seq_desc pair[2] = {txt, img};
    REQUIRE(run_pair(&r, pair, both, dec) == 0, "the pair");
    CHECK(!memcmp(both, alone1, (size_t)N1 * V * sizeof(float)), "text sequence's prompt logits differ beside an image");
    for (int p = 0; p < N0; p++)
        if (memcmp(both + (size_t)(N1 + p) * V, alone0 + (size_t)p * V, (size_t)V * sizeof(float))) {
            CHECK(0, "image sequence's logits at position %d differ in the pair", p);
            break;
        }
    for (int k = 0; k < DEC; k++) {
        CHECK(!memcmp(dec + (size_t)k * 2 * V, alone1 + (size_t)(N1 + k) * V, (size_t)V * sizeof(float)),
              "decode %d of the text sequence", k);
        CHECK(!memcmp(dec + (size_t)(k * 2 + 1) * V, alone0 + (size_t)(N0 + k) * V, (size_t)V * sizeof(float)),
              "decode %d of the image sequence", k);
    }
    /* the image prompt cut at position 64 (inside the image): the same bits as one call */
    float *cut = calloc((size_t)N0 * V, sizeof(float));
    ds_state_clear(&r.st, 1);
    REQUIRE(run(&r, &img, 1, 0, 64, NDS, cut) == 0, "first part");
    REQUIRE(run(&r, &img, 1, 64, N0, NDS, cut + (size_t)64 * V) == 0, "second part");
    CHECK(!memcmp(cut, alone0, (size_t)N0 * V * sizeof(float)), "a prompt cut at 64 differs from one call");
    /* and the image inputs matter: without the DeepStack parts, or with 1-D positions, the logits move */
    int last = N0 - 1;
    ds_state_clear(&r.st, 1);
    REQUIRE(run(&r, &img, 1, 0, N0, 0, cut) == 0, "without DeepStack");
    CHECK(memcmp(cut + (size_t)last * V, alone0 + (size_t)last * V, (size_t)V * sizeof(float)), "DeepStack parts were ignored");
    int32_t rope_flat[N0 * 3];
    for (int p = 0; p < N0; p++) rope_flat[3 * p] = rope_flat[3 * p + 1] = rope_flat[3 * p + 2] = p;
    seq_desc flat = {.slot = 1, .toks = toks0, .rope = rope_flat, .embd = embd0};
    ds_state_clear(&r.st, 1);
    REQUIRE(run(&r, &flat, 1, 0, N0, NDS, cut) == 0, "1-D positions");
    CHECK(memcmp(cut + (size_t)last * V, alone0 + (size_t)last * V, (size_t)V * sizeof(float)), "M-RoPE positions were ignored");
    free(cut);
    free(dec);
    free(both);
    free(alone0);
    free(alone1);
    free(rows);
    rig_close(&r);
}

static void test_bad_image_inputs_are_refused(void) {
    char path[512], q3[512];
    REQUIRE(make("tiny", DS_FORMAT_GGUF, "tiny.gguf", path, sizeof path) == 0, "make");
    REQUIRE(make("tiny-qwen3", DS_FORMAT_GGUF, "tiny-qwen3.gguf", q3, sizeof q3) == 0, "make");
    rig r;
    REQUIRE(rig_open(&r, path) == 0, "open");
    float *logits = calloc((size_t)4 * r.V, sizeof(float)), row[4096 * 3] = {0};
    ds_batch_seq q = {.mode = DS_SEQ_PREFILL, .pages = r.pages[0], .n_pages = NPAGES, .state_slot = 0};
    ds_batch_token t[2] = {{5, 0, 0, 1, 0}, {6, 0, 1, 1, 0}};
    const float *embd[2] = {NULL, row};
    int32_t good[2][3] = {{0, 0, 0}, {1, 1, 1}}, neg[2][3] = {{0, 0, 0}, {1, -1, 1}}, far[2][3] = {{0, 0, 0}, {1, 1, 1 << 30}};
    struct { const int32_t *rope; const float *const *embd; int nds; const char *needle; } cases[] = {
        {&neg[0][0], NULL, 0, "row 1: M-RoPE position -1 (axis H)"},
        {&far[0][0], NULL, 0, "row 1: M-RoPE position 1073741824 (axis W)"},
        {NULL, embd, 0, "row 1: an image embedding without M-RoPE positions"},
        {&good[0][0], embd, -1, "-1 DeepStack parts"},
        {&good[0][0], embd, 9, "9 DeepStack parts"},
        {&good[0][0], embd, 5, "5 DeepStack parts"}, /* tiny has 4 layers */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ds_batch b = {.tokens = t, .n_tokens = 2, .seqs = &q, .n_seqs = 1, .logits = logits, .rope_pos = cases[i].rope,
                      .embd = cases[i].embd, .n_deepstack = cases[i].nds};
        ds_err e = {0};
        ds_status s = ds_model_forward(r.m, &r.kv, &r.st, &b, &e);
        CHECK(s == DS_EINVAL && strstr(e.msg, cases[i].needle), "case %zu: status %d, message '%s'", i, s, e.msg);
    }
    ds_batch ok = {.tokens = t, .n_tokens = 2, .seqs = &q, .n_seqs = 1, .logits = logits, .rope_pos = &good[0][0],
                   .embd = embd, .n_deepstack = 2};
    ds_err e = {0};
    CHECK(ds_model_forward(r.m, &r.kv, &r.st, &ok, &e) == DS_OK, "a good image batch: %s", e.msg);
    rig_close(&r);
    /* a model without M-RoPE takes no M-RoPE positions */
    rig r3;
    REQUIRE(rig_open(&r3, q3) == 0, "open qwen3");
    ds_batch b = {.tokens = t, .n_tokens = 2, .seqs = &q, .n_seqs = 1, .logits = logits, .rope_pos = &good[0][0]};
    q.pages = r3.pages[0];
    CHECK(ds_model_forward(r3.m, &r3.kv, &r3.st, &b, &e) == DS_EINVAL && strstr(e.msg, "no M-RoPE sections"), "%s", e.msg);
    rig_close(&r3);
    free(logits);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ds-mrope-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_positions_text_only);
    RUN(test_positions_one_image);
    RUN(test_positions_several);
    RUN(test_positions_refused);
    RUN(test_config_sections);
    RUN(test_ragged_batch_with_an_image);
    RUN(test_bad_image_inputs_are_refused);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    return ds_test_finish();
}
