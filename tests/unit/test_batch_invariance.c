/* test_batch_invariance.c - a sequence's logits do not depend on what else
 * runs with it: bit for bit the same alone, in a step with 64 other
 * sequences (prefills and decodes of other lengths), and with 1, 2 or 3
 * compute threads; for every weight type (F32, BF16, F16, Q8_0, Q4_0, and a
 * Q4_K_M mix with Q4_K, Q5_K, Q6_K and Q8_0 matrices, dense and MoE) and on
 * every kernel level this CPU has. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu.h"
#include "model/model.h"
#include "model/model_make.h"
#include "testing.h"

#define PAGE 16
#define PAGES_PER_SEQ 8 /* 128 positions */
#define N_OTHERS 64
#define N_SEQS (N_OTHERS + 1)
#define N_SLOTS (N_SEQS + 8) /* + verify snapshots */
#define MAXTOK 256
#define PROMPT 29
#define DECODES 2

static char tmpdir[256];

typedef struct {
    ds_model_file *file;
    ds_model *m;
    ds_kv_pool kv;
    ds_state_pool st;
    int V;
    int32_t pages[N_SEQS][PAGES_PER_SEQ];
} rig;

static int rig_open(rig *r, const char *path, int threads) {
    ds_err e = {0};
    memset(r, 0, sizeof *r);
    if (ds_model_open(path, &r->file, &e) != DS_OK) { printf("open: %s\n", e.msg); return -1; }
    ds_model_params p = {.max_batch_tokens = MAXTOK, .n_threads = threads};
    if (ds_model_new(r->file, &p, &r->m, &e) != DS_OK) { printf("model: %s\n", e.msg); return -1; }
    const ds_model_config *c = ds_model_cfg(r->m);
    int n_attn = ds_model_n_attn_layers(r->m);
    size_t page_bytes = (size_t)n_attn * PAGE * (size_t)c->n_head_kv * (size_t)c->head_dim * 2 * sizeof(float);
    if (ds_kv_pool_init(&r->kv, n_attn, c->n_head_kv, c->head_dim, PAGE, page_bytes * N_SEQS * PAGES_PER_SEQ, &e) ||
        ds_state_pool_init(&r->st, ds_model_n_gdn_layers(r->m), c->conv_kernel, ds_model_conv_dim(r->m), c->lin_v_heads,
                           c->lin_k_dim, c->lin_v_dim, N_SLOTS, &e)) {
        printf("pools: %s\n", e.msg);
        return -1;
    }
    for (int s = 0; s < N_SEQS; s++)
        for (int p2 = 0; p2 < PAGES_PER_SEQ; p2++) r->pages[s][p2] = s * PAGES_PER_SEQ + p2;
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

/* The target is sequence 0: a prompt of PROMPT tokens, then DECODES decode
 * steps; its logits (all positions) go to out[(PROMPT + DECODES)][V]. With
 * others, every step also carries the other sequences: in the prompt step a
 * mix of short prefills (1..3 tokens) and decodes at other positions, in the
 * decode steps one decode each. */
static int run_target(rig *r, int others, float *out) {
    static ds_batch_token toks[MAXTOK];
    static ds_batch_seq seqs[N_SEQS];
    float *lg = malloc((size_t)MAXTOK * (size_t)r->V * sizeof(float));
    for (int s = 0; s < N_SEQS; s++) ds_state_clear(&r->st, s);
    int pos_of[N_SEQS] = {0};
    for (int step = 0; step <= DECODES; step++) {
        int n = 0, ns = 0;
        int tn = step == 0 ? PROMPT : 1, tp = step == 0 ? 0 : PROMPT + step - 1;
        /* the target sits in the middle of the batch, not first */
        int target_at = others / 2;
        for (int o = 0; o <= others; o++) {
            if (o == target_at) {
                for (int i = 0; i < tn; i++) toks[n++] = (ds_batch_token){tok(0, tp + i), ns, tp + i, 1, 0};
                seqs[ns++] = (ds_batch_seq){.mode = step == 0 ? DS_SEQ_PREFILL : DS_SEQ_DECODE, .pages = r->pages[0],
                                            .n_pages = PAGES_PER_SEQ, .state_slot = 0};
                continue;
            }
            int s = o < target_at ? o + 1 : o; /* 1..others */
            int len = step == 0 ? 1 + s % 3 : 1;
            seqs[ns] = (ds_batch_seq){.mode = len > 1 ? DS_SEQ_PREFILL : DS_SEQ_DECODE, .pages = r->pages[s],
                                      .n_pages = PAGES_PER_SEQ, .state_slot = s};
            for (int i = 0; i < len; i++, pos_of[s]++) toks[n++] = (ds_batch_token){tok(s, pos_of[s]), ns, pos_of[s], 1, 0};
            ns++;
        }
        ds_batch b = {.tokens = toks, .n_tokens = n, .seqs = seqs, .n_seqs = ns, .logits = lg};
        ds_err e = {0};
        if (ds_model_forward(r->m, &r->kv, &r->st, &b, &e) != DS_OK) {
            printf("forward: %s\n", e.msg);
            free(lg);
            return -1;
        }
        int row = 0;
        for (int i = 0; i < n; i++, row++)
            if (seqs[toks[i].seq].state_slot == 0) /* the target's rows */
                memcpy(out + (size_t)toks[i].pos * r->V, lg + (size_t)row * r->V, (size_t)r->V * sizeof(float));
    }
    free(lg);
    return 0;
}

static int make(const char *shape, const char *dtype, const char *name, char *path, size_t n) {
    snprintf(path, n, "%s/%s", tmpdir, name);
    if (access(path, F_OK) == 0) return 0;
    ds_make_options o = {.shape = shape, .dtype = dtype, .format = DS_FORMAT_GGUF, .seed = 3, .scale = 2.0f, .out = path};
    ds_err e = {0};
    if (ds_make_model(&o, &e) != DS_OK) {
        printf("make-model %s: %s\n", name, e.msg);
        return -1;
    }
    return 0;
}

static void check_model(const char *shape, const char *dtype) {
    char path[512], name[64];
    snprintf(name, sizeof name, "%s-%s.gguf", shape, dtype);
    REQUIRE(make(shape, dtype, name, path, sizeof path) == 0, "make %s", name);
    ds_isa best = ds_cpu_best_level();
    /* the best level gets every check; the others alone vs batched */
    for (int lvl = (int)best; lvl >= 0; lvl--) {
        ds_cpu_set_level((ds_isa)lvl);
        int full = lvl == (int)best;
        rig r2, r1, r3;
        REQUIRE(rig_open(&r2, path, 2) == 0, "open");
        size_t sz = (size_t)(PROMPT + DECODES) * (size_t)r2.V;
        float *alone = calloc(sz, sizeof(float)), *batched = calloc(sz, sizeof(float));
        float *threads1 = calloc(sz, sizeof(float)), *threads3 = calloc(sz, sizeof(float));
        int ok = run_target(&r2, 0, alone) == 0 && run_target(&r2, N_OTHERS, batched) == 0;
        rig_close(&r2);
        if (ok && full) {
            REQUIRE(rig_open(&r1, path, 1) == 0 && rig_open(&r3, path, 3) == 0, "open");
            ok = run_target(&r1, N_OTHERS, threads1) == 0 && run_target(&r3, 7, threads3) == 0;
            rig_close(&r1);
            rig_close(&r3);
        }
        CHECK(ok, "runs");
        int finite = 1;
        for (size_t i = 0; i < sz; i++) finite &= isfinite(alone[i]);
        CHECK(finite, "%s %s: non-finite logits", name, ds_isa_name((ds_isa)lvl));
        CHECK(memcmp(alone, batched, sz * sizeof(float)) == 0, "%s %s: alone vs with %d other sequences differ", name,
              ds_isa_name((ds_isa)lvl), N_OTHERS);
        if (full) {
            CHECK(memcmp(alone, threads1, sz * sizeof(float)) == 0, "%s %s: 2 threads vs 1 thread differ", name,
                  ds_isa_name((ds_isa)lvl));
            CHECK(memcmp(alone, threads3, sz * sizeof(float)) == 0, "%s %s: 2 threads vs 3 threads differ", name,
                  ds_isa_name((ds_isa)lvl));
        }
        int bad = !ok || memcmp(alone, batched, sz * sizeof(float)) ||
                  (full && (memcmp(alone, threads1, sz * sizeof(float)) || memcmp(alone, threads3, sz * sizeof(float))));
        free(alone);
        free(batched);
        free(threads1);
        free(threads3);
        if (bad) break;
    }
    ds_cpu_set_level(best);
}

/* A verify where a slice would cut (the model runs batches over 128 tokens
 * in slices): the slice ends before it instead, and its logits and the
 * records in its verify slots are those of the verify run alone. */
static void test_verify_across_slices(void) {
    char path[512];
    REQUIRE(make("tiny", "q8_0", "tiny-q8_0.gguf", path, sizeof path) == 0, "make");
    rig r;
    REQUIRE(rig_open(&r, path, 2) == 0, "open");
    int V = r.V, n_pre = 126;
    size_t slot_bytes = r.st.slot_floats * sizeof(float);
    float *lg = malloc((size_t)(n_pre + 4) * V * sizeof(float)), *alone = malloc((size_t)4 * V * sizeof(float));
    float *snaps = malloc(4 * slot_bytes);
    static ds_batch_token toks[MAXTOK];
    int32_t vslots[4] = {N_SEQS, N_SEQS + 1, N_SEQS + 2, N_SEQS + 3};
    ds_err e = {0};
    for (int pass = 0; pass < 2; pass++) {
        /* sequence 1: a prefill of 5 tokens alone, then a verify of 4 */
        ds_state_clear(&r.st, 1);
        ds_state_clear(&r.st, 2);
        ds_batch_seq pre = {.mode = DS_SEQ_PREFILL, .pages = r.pages[1], .n_pages = PAGES_PER_SEQ, .state_slot = 1};
        for (int i = 0; i < 5; i++) toks[i] = (ds_batch_token){tok(1, i), 0, i, 0, 0};
        ds_batch b0 = {.tokens = toks, .n_tokens = 5, .seqs = &pre, .n_seqs = 1, .logits = lg};
        REQUIRE(ds_model_forward(r.m, &r.kv, &r.st, &b0, &e) == DS_OK, "%s", e.msg);
        ds_batch_seq seqs[2] = {
            {.mode = DS_SEQ_PREFILL, .pages = r.pages[2], .n_pages = PAGES_PER_SEQ, .state_slot = 2},
            {.mode = DS_SEQ_VERIFY, .pages = r.pages[1], .n_pages = PAGES_PER_SEQ, .state_slot = 1, .verify_slots = vslots}};
        int n = 0;
        if (pass == 1)
            for (int i = 0; i < n_pre; i++) toks[n++] = (ds_batch_token){tok(2, i), 0, i, 0, 0};
        for (int i = 0; i < 4; i++) toks[n++] = (ds_batch_token){tok(1, 5 + i), 1, 5 + i, 1, 0};
        ds_batch b = {.tokens = toks, .n_tokens = n, .seqs = seqs, .n_seqs = 2, .logits = pass ? lg : alone};
        REQUIRE(ds_model_forward(r.m, &r.kv, &r.st, &b, &e) == DS_OK, "%s", e.msg);
        if (pass == 0)
            for (int j = 0; j < 4; j++) memcpy((char *)snaps + j * slot_bytes, ds_state_conv(&r.st, vslots[j], 0), slot_bytes);
    }
    CHECK(memcmp(lg, alone, (size_t)4 * V * sizeof(float)) == 0, "verify logits differ when the verify is cut");
    int same = 1;
    for (int j = 0; j < 4; j++) same &= memcmp((char *)snaps + j * slot_bytes, ds_state_conv(&r.st, vslots[j], 0), slot_bytes) == 0;
    CHECK(same, "verify records differ when the verify meets a slice end");
    free(lg);
    free(alone);
    free(snaps);
    rig_close(&r);
}

static void test_f32(void) { check_model("tiny", "f32"); }
static void test_bf16(void) { check_model("tiny", "bf16"); }
static void test_f16(void) { check_model("tiny", "f16"); }
static void test_q8_0(void) { check_model("tiny", "q8_0"); }
static void test_q4_0(void) { check_model("tiny", "q4_0"); }
static void test_q4_k_m_moe(void) { check_model("tiny-moe", "q4_k_m"); }
static void test_qwen3_q4_k_m(void) { check_model("tiny-qwen3", "q4_k_m"); }

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ds-batchinv-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_verify_across_slices);
    RUN(test_f32);
    RUN(test_bf16);
    RUN(test_f16);
    RUN(test_q8_0);
    RUN(test_q4_0);
    RUN(test_q4_k_m_moe);
    RUN(test_qwen3_q4_k_m);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    return ds_test_finish();
}
