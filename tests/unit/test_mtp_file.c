/* test_mtp_file.c - the MTP head from a file of its own (--mtp-model):
 *   - make-model --mtp-out writes the pair llama.cpp's converter writes with
 *     --no-mtp / --mtp: the main file without nextn_predict_layers or an MTP
 *     block, the head file with both and the shared embedding;
 *   - greedy speculation with the pair gives the single file's tokens,
 *     logprobs and every speculation counter, alone and 16 at a time, for
 *     heads agreeing ~50% and ~100%, in F32 and Q8_0;
 *   - the head's tensors are the single file's bytes;
 *   - a pair that does not belong together is refused naming both files. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "loading/gguf.h"
#include "model/model_make.h"
#include "testing.h"

#define NREQ 40
#define GEN 16

static char tmpdir[256];

typedef struct {
    int32_t tok[NREQ][GEN];
    float lp[NREQ][GEN];
    int n[NREQ];
} outs;

typedef struct { outs *o; int i; } ctx;
static ctx ctxs[NREQ];
static outs A, B;

static void on_event(const ds_event *ev, void *user) {
    ctx *c = user;
    if (ev->finished || c->o->n[c->i] >= GEN) return;
    c->o->tok[c->i][c->o->n[c->i]] = ev->token;
    c->o->lp[c->i][c->o->n[c->i]++] = ev->logprob;
}

static int make(const char *shape, const char *dtype, float agree, int layers, const char *out, const char *mtp_out,
                int no_mtp) {
    ds_make_options o = {.shape = shape, .dtype = dtype, .format = DS_FORMAT_GGUF, .seed = 5, .scale = 1.0f,
                         .out = out, .mtp_out = mtp_out, .no_mtp = no_mtp, .n_layers = layers,
                         .mtp_agree_set = agree >= 0, .mtp_agree = agree};
    ds_err e = {0};
    if (ds_make_model(&o, &e)) {
        printf("     make %s: %s\n", out, e.msg);
        return -1;
    }
    return 0;
}

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", tmpdir, name); }

static int n_req(void) { return ds_test_scaled(NREQ); }

static int run(ds_model *m, int max_running, outs *o, ds_engine_stats *st) {
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.spec_tokens = 3;
    ep.max_running = max_running;
    ep.spec_policy = DS_SPEC_POLICY_REQUEST; /* every request drafts, whatever the batch */
    ep.step_tokens = 512;
    ds_engine *eng;
    ds_err e = {0};
    if (ds_engine_new(m, &ep, &eng, &e)) { printf("     engine: %s\n", e.msg); return -1; }
    memset(o, 0, sizeof *o);
    ds_sampling_params sp;
    ds_sampling_defaults(&sp);
    sp.temperature = 0;
    uint32_t x = 777;
    int32_t prompts[NREQ][12];
    for (int r = 0; r < n_req(); r++) {
        int len = 4 + r % 8;
        for (int i = 0; i < len; i++) prompts[r][i] = (int32_t)(((x = x * 1664525u + 1013904223u) >> 8) % 1000);
        ctxs[r] = (ctx){o, r};
        ds_request_params rp = {.prompt = prompts[r], .n_prompt = len, .max_tokens = GEN, .ignore_eos = 1,
                                .want_logprob = 1, .sampling = sp, .on_event = on_event, .user = &ctxs[r]};
        if (!ds_engine_submit(eng, &rp, &e)) { printf("     submit: %s\n", e.msg); ds_engine_free(eng); return -1; }
    }
    while (ds_engine_step(eng)) {}
    ds_engine_stats_get(eng, st);
    ds_engine_free(eng);
    return 0;
}

typedef struct { ds_model_file *f; ds_model *m; } loaded;

static int load(const char *path, const char *mtp, loaded *l) {
    ds_err e = {0};
    ds_load_options lo = {.mtp_path = mtp};
    ds_model_params mp = {.max_batch_tokens = 512};
    l->f = NULL;
    l->m = NULL;
    if (ds_model_open_ex(path, &lo, &l->f, &e) || ds_model_new(l->f, &mp, &l->m, &e)) {
        printf("     load %s: %s\n", path, e.msg);
        if (l->f) ds_model_close(l->f);
        return -1;
    }
    return 0;
}

static void unload(loaded *l) {
    ds_model_free(l->m);
    ds_model_close(l->f);
}

static void pair_case(const char *dtype, float agree) {
    char single[512], main_f[512], head[512], name[64];
    snprintf(name, sizeof name, "%s-%.0f", dtype, agree * 100);
    char a[96], b[96], c[96];
    snprintf(a, sizeof a, "single-%s.gguf", name);
    snprintf(b, sizeof b, "main-%s.gguf", name);
    snprintf(c, sizeof c, "mtp-%s.gguf", name);
    path_of(single, sizeof single, a);
    path_of(main_f, sizeof main_f, b);
    path_of(head, sizeof head, c);
    REQUIRE(make("tiny", dtype, agree, 0, single, NULL, 0) == 0, "make single");
    REQUIRE(make("tiny", dtype, agree, 0, main_f, head, 0) == 0, "make pair");

    /* the files say what llama.cpp's converter says */
    ds_gguf gm, gh;
    ds_err e = {0};
    REQUIRE(ds_gguf_open(&gm, main_f, &e) == DS_OK, "%s", e.msg);
    uint32_t v = 0;
    CHECK(ds_gguf_get_u32(&gm, "qwen35.nextn_predict_layers", &v, &e) == DS_ENOTFOUND, "main: nextn key present");
    CHECK(ds_gguf_get_u32(&gm, "qwen35.block_count", &v, &e) == DS_OK && v == 4, "main block_count %u", v);
    CHECK(ds_gguf_find_tensor(&gm, "blk.4.nextn.eh_proj.weight") == NULL, "main has the MTP block");
    ds_gguf_close(&gm);
    REQUIRE(ds_gguf_open(&gh, head, &e) == DS_OK, "%s", e.msg);
    CHECK(ds_gguf_get_u32(&gh, "qwen35.nextn_predict_layers", &v, &e) == DS_OK && v == 1, "head nextn %u", v);
    CHECK(ds_gguf_get_u32(&gh, "qwen35.block_count", &v, &e) == DS_OK && v == 5, "head block_count %u", v);
    CHECK(ds_gguf_find_tensor(&gh, "token_embd.weight") && ds_gguf_find_tensor(&gh, "output_norm.weight"),
          "head lacks the shared tensors");
    CHECK(ds_gguf_find_tensor(&gh, "blk.0.attn_norm.weight") == NULL, "head has a decoder layer");
    ds_gguf_close(&gh);

    loaded one, two;
    REQUIRE(load(single, NULL, &one) == 0, "load single");
    if (load(main_f, head, &two) != 0) {
        unload(&one);
        REQUIRE(0, "load pair");
    }
    CHECK(ds_model_cfg(two.m)->n_mtp == 1, "pair: n_mtp %d", ds_model_cfg(two.m)->n_mtp);
    CHECK(strcmp(ds_model_mtp_path(two.f), head) == 0, "mtp path %s", ds_model_mtp_path(two.f));
    /* the head's tensors are the single file's, byte for byte */
    int n_same = 0, n_mtp = 0;
    for (int i = 0; i < ds_model_n_tensors(one.f); i++) {
        const ds_tensor *t1 = ds_model_tensor_at(one.f, i);
        if (strncmp(t1->name, "blk.4.", 6) != 0) continue;
        n_mtp++;
        const ds_tensor *t2 = ds_model_tensor(two.f, t1->name);
        n_same += t2 && t2->type == t1->type && ds_tensor_bytes(t1) == ds_tensor_bytes(t2) &&
                  !memcmp(t1->data, t2->data, ds_tensor_bytes(t1));
    }
    CHECK(n_mtp > 0 && n_same == n_mtp, "%d of %d MTP tensors equal", n_same, n_mtp);
    for (int conc = 0; conc < 2; conc++) {
        ds_engine_stats s1, s2;
        int max_running = conc ? 16 : 1;
        if (run(one.m, max_running, &A, &s1) || run(two.m, max_running, &B, &s2)) {
            CHECK(0, "run");
            break;
        }
        int same = 0;
        for (int r = 0; r < n_req(); r++)
            same += A.n[r] == GEN && B.n[r] == GEN && !memcmp(A.tok[r], B.tok[r], sizeof A.tok[r]) &&
                    !memcmp(A.lp[r], B.lp[r], sizeof A.lp[r]);
        printf("     %s %s: %d/%d identical; drafted %lld/%lld accepted %lld/%lld verify %lld/%lld steps %lld/%lld\n",
               name, conc ? "16 at once" : "alone", same, n_req(), (long long)s1.spec_drafted,
               (long long)s2.spec_drafted, (long long)s1.spec_accepted, (long long)s2.spec_accepted,
               (long long)s1.spec_verify_steps, (long long)s2.spec_verify_steps, (long long)s1.steps,
               (long long)s2.steps);
        CHECK(same == n_req(), "%s: %d of %d requests differ", name, n_req() - same, n_req());
        CHECK(s1.spec_drafted > 0 && s1.spec_accepted > 0, "%s: no speculation happened", name);
        CHECK(s1.spec_drafted == s2.spec_drafted && s1.spec_accepted == s2.spec_accepted &&
                  s1.spec_compared == s2.spec_compared && s1.spec_verify_steps == s2.spec_verify_steps &&
                  s1.steps == s2.steps && !memcmp(s1.spec_accept_hist, s2.spec_accept_hist, sizeof s1.spec_accept_hist),
              "%s: the counters differ", name);
    }
    unload(&one);
    unload(&two);
}

static void test_pair_f32_agree50(void) { pair_case("f32", 0.5f); }
static void test_pair_f32_agree100(void) { pair_case("f32", 1.0f); }
static void test_pair_q8_0_agree50(void) { pair_case("q8_0", 0.5f); }

/* Opens main with head and checks that it is refused with both names and `what` in the message. */
static void refused(const char *main_name, const char *head_name, const char *what) {
    char m[512], h[512];
    path_of(m, sizeof m, main_name);
    path_of(h, sizeof h, head_name);
    ds_load_options lo = {.mtp_path = h};
    ds_model_file *f = NULL;
    ds_err e = {0};
    ds_status s = ds_model_open_ex(m, &lo, &f, &e);
    CHECK(s != DS_OK && f == NULL, "%s + %s was accepted", main_name, head_name);
    CHECK(strstr(e.msg, main_name) && strstr(e.msg, head_name) && strstr(e.msg, what),
          "%s + %s: message '%s' should name both files and '%s'", main_name, head_name, e.msg, what);
    if (f) ds_model_close(f);
}

static void test_mismatch_refused(void) {
    char p[512], q[512];
    path_of(p, sizeof p, "ref-main.gguf");
    path_of(q, sizeof q, "ref-mtp.gguf");
    REQUIRE(make("tiny", "f32", -1, 0, p, q, 0) == 0, "make pair");
    path_of(p, sizeof p, "ref-single.gguf");
    REQUIRE(make("tiny", "f32", -1, 0, p, NULL, 0) == 0, "make single");
    path_of(p, sizeof p, "ref-3layers.gguf");
    REQUIRE(make("tiny", "f32", -1, 3, p, NULL, 1) == 0, "make 3 layers");
    path_of(p, sizeof p, "ref-moe.gguf");
    REQUIRE(make("tiny-moe", "f32", -1, 0, p, NULL, 1) == 0, "make moe");
    refused("ref-single.gguf", "ref-mtp.gguf", "already has an MTP head");
    refused("ref-3layers.gguf", "ref-mtp.gguf", "decoder layer count 3, the head's model has 4");
    refused("ref-moe.gguf", "ref-mtp.gguf", "architecture qwen35moe, the head's is qwen35");
    refused("ref-main.gguf", "ref-main.gguf", "has no MTP head");
    /* the right pair still loads */
    char m[512], h[512];
    path_of(m, sizeof m, "ref-main.gguf");
    path_of(h, sizeof h, "ref-mtp.gguf");
    ds_load_options lo = {.mtp_path = h};
    ds_model_file *f = NULL;
    ds_err e = {0};
    CHECK(ds_model_open_ex(m, &lo, &f, &e) == DS_OK, "%s", e.msg);
    ds_model_close(f);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ds-mtpfile-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_pair_f32_agree50);
    RUN(test_pair_f32_agree100);
    RUN(test_pair_q8_0_agree50);
    RUN(test_mismatch_refused);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    return ds_test_finish();
}
