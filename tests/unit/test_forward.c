/* test_forward.c - the ragged-batch forward pass against itself:
 *   - chunked prefill == token-by-token decode (max|d| / max|logit| <= 1e-5);
 *   - every row of a mixed batch (a prefill chunk, decodes, a verify) equals
 *     running its sequence alone, bitwise;
 *   - verify slots hold the state after each verified token (resume from any);
 *   - the same model as GGUF and as safetensors gives the same logits;
 *   - malformed batches are refused with a message naming the row.
 * Numerical parity with the independent NumPy reference is test_parity.py's job. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "model/model_make.h"
#include "numeric_testing.h"
#include "testing.h"

#define PAGE 16
#define MAXTOK 96

static char tmpdir[256];

typedef struct {
    ds_model_file *file;
    ds_model *m;
    ds_kv_pool kv;
    ds_state_pool st;
    int V;
} rig;

static int make(const char *shape, const char *dtype, ds_format fmt, const char *name, char *path, size_t n) {
    snprintf(path, n, "%s/%s", tmpdir, name);
    ds_make_options o = {.shape = shape, .dtype = dtype, .format = fmt, .seed = 7, .scale = 3.0f, .out = path};
    ds_err e = {0};
    if (ds_make_model(&o, &e) != DS_OK) {
        printf("make-model %s: %s\n", name, e.msg);
        return -1;
    }
    return 0;
}

static int rig_open(rig *r, const char *path, int chunk) {
    ds_err e = {0};
    memset(r, 0, sizeof *r);
    if (ds_model_open(path, &r->file, &e) != DS_OK) { printf("open: %s\n", e.msg); return -1; }
    ds_model_params p = {.max_batch_tokens = MAXTOK, .gdn_chunk = chunk};
    if (ds_model_new(r->file, &p, &r->m, &e) != DS_OK) { printf("model: %s\n", e.msg); return -1; }
    const ds_model_config *c = ds_model_cfg(r->m);
    int n_attn = ds_model_n_attn_layers(r->m);
    if (ds_kv_pool_init(&r->kv, n_attn, c->n_head_kv, c->head_dim, PAGE, (size_t)64 << 20, &e) ||
        ds_state_pool_init(&r->st, ds_model_n_gdn_layers(r->m), c->conv_kernel, ds_model_conv_dim(r->m), c->lin_v_heads,
                           c->lin_k_dim, c->lin_v_dim, 32, &e)) {
        printf("pools: %s\n", e.msg);
        return -1;
    }
    r->V = c->n_vocab;
    return 0;
}

static void rig_close(rig *r) {
    ds_kv_pool_free(&r->kv);
    ds_state_pool_free(&r->st);
    ds_model_free(r->m);
    ds_model_close(r->file);
}

static int32_t tok(int seq, int pos) { return (int32_t)((seq * 131 + pos * 17 + 5) % 1000); }

/* sequence s uses pages s*8 .. s*8+7 (128 positions) and state slot s */
static int32_t page_tables[8][8];

static void seq_of(ds_batch_seq *q, int s, ds_seq_mode mode) {
    for (int p = 0; p < 8; p++) page_tables[s][p] = s * 8 + p;
    *q = (ds_batch_seq){.mode = mode, .pages = page_tables[s], .n_pages = 8, .state_slot = s};
}

/* Runs positions [from, to) of sequence s in chunks of `step` tokens, logits of each into out[pos]. */
static int run_alone(rig *r, int s, int from, int to, int step, ds_seq_mode mode, float *out) {
    ds_batch_token toks[MAXTOK];
    ds_batch_seq q;
    seq_of(&q, s, mode);
    for (int p0 = from; p0 < to; p0 += step) {
        int n = to - p0 < step ? to - p0 : step;
        for (int i = 0; i < n; i++) toks[i] = (ds_batch_token){.token = tok(s, p0 + i), .seq = 0, .pos = p0 + i, .want_logits = 1};
        ds_batch b = {.tokens = toks, .n_tokens = n, .seqs = &q, .n_seqs = 1, .logits = out + (size_t)p0 * r->V};
        ds_err e = {0};
        if (ds_model_forward(r->m, &r->kv, &r->st, &b, &e) != DS_OK) { printf("forward: %s\n", e.msg); return -1; }
    }
    return 0;
}

static double logit_spread(const float *l, size_t n) {
    double mx = -1e30, mn = 1e30;
    for (size_t i = 0; i < n; i++) { mx = l[i] > mx ? l[i] : mx; mn = l[i] < mn ? l[i] : mn; }
    return mx - mn;
}

static void chunked_vs_decode(const char *shape) {
    char path[512];
    REQUIRE(make(shape, "f32", DS_FORMAT_GGUF, shape, path, sizeof path) == 0, "make-model");
    rig a, b;
    REQUIRE(rig_open(&a, path, DS_DELTANET_CHUNK) == 0 && rig_open(&b, path, 1) == 0, "open");
    int T = 90;
    float *la = calloc((size_t)T * a.V, sizeof(float)), *lb = calloc((size_t)T * a.V, sizeof(float));
    ds_state_clear(&a.st, 0);
    ds_state_clear(&b.st, 0);
    REQUIRE(run_alone(&a, 0, 0, T, 90, DS_SEQ_PREFILL, la) == 0, "chunked prefill");
    REQUIRE(run_alone(&b, 0, 0, T, 1, DS_SEQ_DECODE, lb) == 0, "decode");
    double d = rel_diff(la, lb, (size_t)T * a.V);
    printf("     %s: chunked prefill vs decode over %d tokens: max|d|/max|logit| = %.2e, logit spread %.1f\n", shape, T,
           d, logit_spread(la + (size_t)(T - 1) * a.V, (size_t)a.V));
    CHECK(d <= 1e-5, "%s: %.3e", shape, d);
    CHECK(logit_spread(la + (size_t)(T - 1) * a.V, (size_t)a.V) > 8, "logits are not peaked enough to catch bugs");
    free(la);
    free(lb);
    rig_close(&a);
    rig_close(&b);
}

static void test_chunked_equals_decode(void) {
    chunked_vs_decode("tiny");
    chunked_vs_decode("tiny-moe");
    chunked_vs_decode("tiny-qwen3");
}

/* A batch with: seq 0 a prefill chunk (positions 20..39, after 0..19 alone), seq 1 a decode at
 * position 30, seq 2 a verify of 4 tokens at 25..28, seq 3 a fresh prefill 0..9. Every row must
 * equal the same positions run alone. The verify's records go to slots of the state pool, or
 * (records_apart) to a record pool of their own, as the engine keeps them. */
static void mixed_batch(const char *shape, int records_apart) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, shape);
    rig r;
    REQUIRE(rig_open(&r, path, DS_DELTANET_CHUNK) == 0, "open");
    int V = r.V;
    float *alone = calloc((size_t)4 * 64 * V, sizeof(float)), *mixed = calloc((size_t)64 * V, sizeof(float));
    /* alone: the reference run of each sequence in its own calls */
    for (int s = 0; s < 4; s++) ds_state_clear(&r.st, s);
    REQUIRE(run_alone(&r, 0, 0, 20, 20, DS_SEQ_PREFILL, alone) == 0, "0");
    REQUIRE(run_alone(&r, 0, 20, 40, 20, DS_SEQ_PREFILL, alone) == 0, "0b");
    REQUIRE(run_alone(&r, 1, 0, 30, 30, DS_SEQ_PREFILL, alone + (size_t)64 * V) == 0, "1");
    REQUIRE(run_alone(&r, 1, 30, 31, 1, DS_SEQ_DECODE, alone + (size_t)64 * V) == 0, "1b");
    REQUIRE(run_alone(&r, 2, 0, 25, 25, DS_SEQ_PREFILL, alone + (size_t)128 * V) == 0, "2");
    REQUIRE(run_alone(&r, 2, 25, 29, 1, DS_SEQ_DECODE, alone + (size_t)128 * V) == 0, "2b");
    REQUIRE(run_alone(&r, 3, 0, 10, 10, DS_SEQ_PREFILL, alone + (size_t)192 * V) == 0, "3");
    /* mixed: set the sequences up to the same starting points, then one batch */
    for (int s = 0; s < 4; s++) ds_state_clear(&r.st, s);
    float *scratch = calloc((size_t)64 * V, sizeof(float));
    REQUIRE(run_alone(&r, 0, 0, 20, 20, DS_SEQ_PREFILL, scratch) == 0, "m0");
    REQUIRE(run_alone(&r, 1, 0, 30, 30, DS_SEQ_PREFILL, scratch) == 0, "m1");
    REQUIRE(run_alone(&r, 2, 0, 25, 25, DS_SEQ_PREFILL, scratch) == 0, "m2");
    ds_batch_token toks[40];
    int n = 0;
    for (int p = 20; p < 40; p++) toks[n++] = (ds_batch_token){tok(0, p), 0, p, 1, 0};
    toks[n++] = (ds_batch_token){tok(1, 30), 1, 30, 1, 0};
    for (int p = 25; p < 29; p++) toks[n++] = (ds_batch_token){tok(2, p), 2, p, 1, 0};
    for (int p = 0; p < 10; p++) toks[n++] = (ds_batch_token){tok(3, p), 3, p, 1, 0};
    ds_batch_seq seqs[4];
    seq_of(&seqs[0], 0, DS_SEQ_PREFILL);
    seq_of(&seqs[1], 1, DS_SEQ_DECODE);
    seq_of(&seqs[2], 2, DS_SEQ_VERIFY);
    seq_of(&seqs[3], 3, DS_SEQ_PREFILL);
    int32_t vslots[4] = {10, 11, 12, 13};
    ds_state_pool records = {0};
    ds_err e = {0};
    if (records_apart) {
        REQUIRE(ds_record_pool_init(&records, ds_model_n_gdn_layers(r.m), ds_model_verify_record_floats(r.m), 4, &e) ==
                    DS_OK, "record pool: %s", e.msg);
        for (int j = 0; j < 4; j++) vslots[j] = 3 - j; /* any order */
    }
    seqs[2].verify_slots = vslots;
    ds_batch b = {.tokens = toks, .n_tokens = n, .seqs = seqs, .n_seqs = 4, .logits = mixed,
                  .records = records_apart ? &records : NULL};
    REQUIRE(ds_model_forward(r.m, &r.kv, &r.st, &b, &e) == DS_OK, "mixed forward: %s", e.msg);
    int row = 0, bad = 0;
    for (int i = 0; i < n; i++, row++) {
        const float *want = alone + ((size_t)toks[i].seq * 64 + (size_t)toks[i].pos) * V;
        if (memcmp(want, mixed + (size_t)row * V, (size_t)V * sizeof(float)) != 0) {
            if (!bad) printf("     row %d (seq %d pos %d) differs: rel %.2e\n", i, toks[i].seq, toks[i].pos,
                             rel_diff(mixed + (size_t)row * V, want, (size_t)V));
            bad++;
        }
    }
    CHECK(bad == 0, "%s: %d of %d rows differ from running alone", shape, bad, n);
    /* verify records: commit seq 2's first two verified tokens (positions 25, 26): the next token
     * at 27 must give the same logits as the straight run */
    REQUIRE(ds_model_verify_commit(r.m, &r.st, records_apart ? &records : NULL, 2, vslots, 2, &e) == DS_OK,
            "commit: %s", e.msg);
    float *again = calloc((size_t)64 * V, sizeof(float));
    REQUIRE(run_alone(&r, 2, 27, 29, 1, DS_SEQ_DECODE, again) == 0, "resume");
    CHECK(memcmp(again + (size_t)27 * V, alone + ((size_t)128 + 27) * V, (size_t)2 * V * sizeof(float)) == 0,
          "%s: resuming after committing 2 verified tokens does not reproduce positions 27..28", shape);
    free(again);
    free(scratch);
    free(alone);
    free(mixed);
    ds_state_pool_free(&records);
    rig_close(&r);
}

static void test_mixed_batch_rows_equal_alone(void) {
    for (int apart = 0; apart < 2; apart++) {
        mixed_batch("tiny", apart);
        mixed_batch("tiny-moe", apart);
        mixed_batch("tiny-qwen3", apart);
    }
}

/* Cutting a prefill into calls at multiples of the DeltaNet chunk length changes nothing, bitwise:
 * the engine relies on it so that batching and cache hits cannot change a sequence's outputs. */
static void test_prefill_cut_at_chunk_multiples_is_exact(void) {
    const char *shapes[] = {"tiny", "tiny-moe"};
    for (int k = 0; k < 2; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", tmpdir, shapes[k]);
        rig r;
        REQUIRE(rig_open(&r, path, DS_DELTANET_CHUNK) == 0, "open");
        int T = 90;
        float *one = calloc((size_t)T * r.V, sizeof(float)), *cut = calloc((size_t)T * r.V, sizeof(float));
        ds_state_clear(&r.st, 0);
        REQUIRE(run_alone(&r, 0, 0, T, T, DS_SEQ_PREFILL, one) == 0, "one call");
        ds_state_clear(&r.st, 0);
        REQUIRE(run_alone(&r, 0, 0, 64, 64, DS_SEQ_PREFILL, cut) == 0 && run_alone(&r, 0, 64, T, T, DS_SEQ_PREFILL, cut) == 0,
                "two calls");
        CHECK(memcmp(one, cut, (size_t)T * r.V * sizeof(float)) == 0, "%s: logits differ", shapes[k]);
        free(one);
        free(cut);
        rig_close(&r);
    }
}

static void test_gguf_equals_safetensors(void) {
    const char *shapes[] = {"tiny", "tiny-moe"};
    for (int k = 0; k < 2; k++) {
        char g[512], h[512], name[64];
        snprintf(name, sizeof name, "%s-hf", shapes[k]);
        REQUIRE(make(shapes[k], "f32", DS_FORMAT_SAFETENSORS, name, h, sizeof h) == 0, "make hf");
        snprintf(g, sizeof g, "%s/%s", tmpdir, shapes[k]);
        rig a, b;
        REQUIRE(rig_open(&a, g, DS_DELTANET_CHUNK) == 0 && rig_open(&b, h, DS_DELTANET_CHUNK) == 0, "open");
        int T = 40;
        float *la = calloc((size_t)T * a.V, sizeof(float)), *lb = calloc((size_t)T * a.V, sizeof(float));
        ds_state_clear(&a.st, 0);
        ds_state_clear(&b.st, 0);
        REQUIRE(run_alone(&a, 0, 0, T, T, DS_SEQ_PREFILL, la) == 0 && run_alone(&b, 0, 0, T, T, DS_SEQ_PREFILL, lb) == 0, "run");
        double d = rel_diff(la, lb, (size_t)T * a.V);
        printf("     %s: GGUF vs safetensors: max|d|/max|logit| = %.2e\n", shapes[k], d);
        CHECK(d <= 1e-5, "%s: %.3e", shapes[k], d);
        free(la);
        free(lb);
        rig_close(&a);
        rig_close(&b);
    }
}

static void test_bad_batches_are_refused(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/tiny", tmpdir);
    rig r;
    REQUIRE(rig_open(&r, path, DS_DELTANET_CHUNK) == 0, "open");
    float *logits = calloc((size_t)8 * r.V, sizeof(float));
    ds_batch_seq q;
    seq_of(&q, 0, DS_SEQ_PREFILL);
    struct { ds_batch_token t[2]; int n; const char *needle; } cases[] = {
        {{{5, 0, 0, 1, 0}, {6, 0, 2, 1, 0}}, 2, "does not follow"},
        {{{5, 1, 0, 1, 0}}, 1, "sequence 1 does not exist"},
        {{{-1, 0, 0, 1, 0}}, 1, "outside the vocabulary"},
        {{{5, 0, 200, 1, 0}}, 1, "needs page"},
        {{{5, 0, -3, 1, 0}}, 1, "position -3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ds_batch b = {.tokens = cases[i].t, .n_tokens = cases[i].n, .seqs = &q, .n_seqs = 1, .logits = logits};
        ds_err e = {0};
        ds_status s = ds_model_forward(r.m, &r.kv, &r.st, &b, &e);
        CHECK(s == DS_EINVAL && strstr(e.msg, cases[i].needle), "case %zu: status %d, message '%s'", i, s, e.msg);
    }
    ds_batch_seq v;
    seq_of(&v, 0, DS_SEQ_VERIFY); /* verify without slots */
    ds_batch_token t = {5, 0, 0, 1, 0};
    ds_batch b = {.tokens = &t, .n_tokens = 1, .seqs = &v, .n_seqs = 1, .logits = logits};
    ds_err e = {0};
    CHECK(ds_model_forward(r.m, &r.kv, &r.st, &b, &e) == DS_EINVAL && strstr(e.msg, "verify"), "%s", e.msg);
    free(logits);
    rig_close(&r);
}

static void test_mtp_head(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/tiny", tmpdir);
    rig r;
    REQUIRE(rig_open(&r, path, DS_DELTANET_CHUNK) == 0, "open");
    const ds_model_config *c = ds_model_cfg(r.m);
    ds_kv_pool mkv;
    ds_err e = {0};
    REQUIRE(ds_kv_pool_init(&mkv, 1, c->n_head_kv, c->head_dim, PAGE, (size_t)4 << 20, &e) == DS_OK, "%s", e.msg);
    int T = 12, H = c->n_embd;
    float *hid = calloc((size_t)T * H, sizeof(float)), *lg = calloc((size_t)T * r.V, sizeof(float));
    ds_batch_token toks[12];
    ds_batch_seq q;
    seq_of(&q, 0, DS_SEQ_PREFILL);
    ds_state_clear(&r.st, 0);
    for (int i = 0; i < T; i++) toks[i] = (ds_batch_token){tok(0, i), 0, i, 1, 1};
    ds_batch b = {.tokens = toks, .n_tokens = T, .seqs = &q, .n_seqs = 1, .logits = lg, .hidden = hid};
    REQUIRE(ds_model_forward(r.m, &r.kv, &r.st, &b, &e) == DS_OK, "%s", e.msg);
    /* MTP over (h_t, x_{t+1}) for t = 0..T-2, all at once and then one by one: same outputs */
    float *m1 = calloc((size_t)T * r.V, sizeof(float)), *m2 = calloc((size_t)T * r.V, sizeof(float));
    float *h1 = calloc((size_t)T * H, sizeof(float)), *h2 = calloc((size_t)T * H, sizeof(float));
    ds_batch_token mt[12];
    for (int i = 0; i < T - 1; i++) mt[i] = (ds_batch_token){tok(0, i + 1), 0, i, 1, 1};
    ds_batch mb = {.tokens = mt, .n_tokens = T - 1, .seqs = &q, .n_seqs = 1, .logits = m1, .hidden = h1};
    REQUIRE(ds_model_mtp_forward(r.m, &mkv, &mb, hid, &e) == DS_OK, "%s", e.msg);
    for (int i = 0; i < T - 1; i++) {
        ds_batch one = {.tokens = &mt[i], .n_tokens = 1, .seqs = &q, .n_seqs = 1,
                        .logits = m2 + (size_t)i * r.V, .hidden = h2 + (size_t)i * H};
        REQUIRE(ds_model_mtp_forward(r.m, &mkv, &one, hid + (size_t)i * H, &e) == DS_OK, "%s", e.msg);
    }
    double d = rel_diff(m1, m2, (size_t)(T - 1) * r.V);
    CHECK(d <= 1e-6, "MTP batched vs one by one: %.3e", d);
    CHECK(logit_spread(m1, (size_t)r.V) > 1, "MTP logits are flat");
    /* a model without an MTP head says so */
    char nomtp[512];
    snprintf(nomtp, sizeof nomtp, "%s/tiny-qwen3", tmpdir);
    rig q3;
    REQUIRE(rig_open(&q3, nomtp, DS_DELTANET_CHUNK) == 0, "open qwen3");
    CHECK(ds_model_mtp_forward(q3.m, &mkv, &mb, hid, &e) == DS_EUNSUPPORTED, "qwen3 has no MTP head");
    rig_close(&q3);
    free(m1); free(m2); free(h1); free(h2); free(hid); free(lg);
    ds_kv_pool_free(&mkv);
    rig_close(&r);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ds-forward-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_chunked_equals_decode);
    RUN(test_mixed_batch_rows_equal_alone);
    RUN(test_prefill_cut_at_chunk_multiples_is_exact);
    RUN(test_gguf_equals_safetensors);
    RUN(test_bad_batches_are_refused);
    RUN(test_mtp_head);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    return ds_test_finish();
}
