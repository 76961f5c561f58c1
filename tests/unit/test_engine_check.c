/* test_engine_check.c - ds_engine_check_invariants can fail: an engine in
 * the middle of a workload (requests running, the prefix trie holding pages
 * and checkpoints) passes, then each kind of broken bookkeeping is made by
 * hand and must be reported by the invariant it breaks, and the engine passes
 * again once it is undone:
 *   - a page reference count one too high, and a page taken with no holder;
 *   - a page in use pushed on the free list;
 *   - two running sequences holding one state slot;
 *   - a checkpoint slot taken that no trie node holds;
 *   - a waiting request holding a page;
 *   - the vision budget counting bytes no encoding job holds.
 * (test_engine.c runs the checks after every step of its workloads.) */
#include <string.h>
#include <unistd.h>

#include "engine/engine_int.h"
#include "model/model_make.h"
#include "testing.h"

static char tmpdir[256];
static ds_model_file *file;
static ds_model *model;
static ds_engine *eng;

/* An engine with a few requests sharing a prefix, stepped until several run and the trie holds checkpoints. */
static int start(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/tiny.gguf", tmpdir);
    ds_make_options o = {.shape = "tiny", .dtype = "f32", .format = DS_FORMAT_GGUF, .seed = 11, .scale = 3.0f,
                         .out = path};
    ds_err e = {0};
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.checkpoint_interval = 64;
    ep.prefill_chunk = 64;
    ep.step_tokens = 256;
    ep.max_running = 4; /* two of the six wait */
    ds_model_params mp = {.max_batch_tokens = ds_engine_required_batch_capacity(&ep)};
    if (ds_make_model(&o, &e) || ds_model_open(path, &file, &e) || ds_model_new(file, &mp, &model, &e) ||
        ds_engine_new(model, &ep, &eng, &e)) {
        printf("set-up: %s\n", e.msg);
        return -1;
    }
    static int32_t prompt[6][200];
    for (int r = 0; r < 6; r++) {
        for (int i = 0; i < 200; i++) prompt[r][i] = (int32_t)(i < 150 ? (i * 13 + 1) % 1000 : (r * 97 + i * 7) % 1000);
        ds_request_params rp = {.prompt = prompt[r], .n_prompt = 200, .max_tokens = 30, .ignore_eos = 1};
        ds_sampling_defaults(&rp.sampling);
        rp.sampling.temperature = 0;
        if (!ds_engine_submit(eng, &rp, &e)) { printf("submit: %s\n", e.msg); return -1; }
    }
    for (int s = 0; s < 40 && !(eng->n_running >= 2 && eng->stats.checkpoints_cached > 0 &&
                                eng->running[0]->n_pages > 0 && eng->running[1]->n_pages > 0); s++)
        ds_engine_step(eng);
    return 0;
}

static int check_says(const char *needle, char *msg, size_t cap) {
    ds_err e = {0};
    ds_status s = ds_engine_check_invariants(eng, &e);
    snprintf(msg, cap, "%s", s ? e.msg : "(no error)");
    return s == DS_ECORRUPT && strstr(e.msg, needle) != NULL;
}

static int clean(char *msg, size_t cap) {
    ds_err e = {0};
    ds_status s = ds_engine_check_invariants(eng, &e);
    snprintf(msg, cap, "%s", s ? e.msg : "");
    return s == DS_OK;
}

static void test_healthy_engine_passes(void) {
    char msg[700];
    REQUIRE(eng->n_running >= 2 && eng->stats.checkpoints_cached > 0, "set-up: %d running, %d checkpoints",
            eng->n_running, eng->stats.checkpoints_cached);
    CHECK(clean(msg, sizeof msg), "%s", msg);
}

static void test_refcount_off(void) {
    char msg[700];
    int page = eng->running[0]->pages[0];
    eng->pages.refs[page - eng->pages.first]++;
    CHECK(check_says("reference counts equal holders: page", msg, sizeof msg), "%s", msg);
    eng->pages.refs[page - eng->pages.first]--;
    CHECK(clean(msg, sizeof msg), "undone: %s", msg);
    int leaked = ds_id_get(&eng->pages); /* taken, held by no one */
    REQUIRE(leaked >= 0, "no free page");
    CHECK(check_says("reference counts equal holders", msg, sizeof msg), "%s", msg);
    ds_id_unref(&eng->pages, leaked);
    CHECK(clean(msg, sizeof msg), "undone: %s", msg);
}

static void test_free_list_holds_page_in_use(void) {
    char msg[700];
    int page = eng->running[1]->pages[0];
    eng->pages.free[eng->pages.n_free++] = page;
    CHECK(check_says("free lists hold no id in use", msg, sizeof msg), "%s", msg);
    eng->pages.n_free--;
    CHECK(clean(msg, sizeof msg), "undone: %s", msg);
}

static void test_slot_held_twice(void) {
    char msg[700];
    int own = eng->running[1]->slot;
    eng->running[1]->slot = eng->running[0]->slot;
    CHECK(check_says("no sequence holds a slot twice", msg, sizeof msg), "%s", msg);
    eng->running[1]->slot = own;
    int p1 = eng->running[0]->pages[0];
    if (eng->running[0]->n_pages > 1) {
        int p2 = eng->running[0]->pages[1];
        eng->running[0]->pages[1] = p1;
        CHECK(check_says("names page", msg, sizeof msg), "a page named twice by one request: %s", msg);
        eng->running[0]->pages[1] = p2;
    }
    CHECK(clean(msg, sizeof msg), "undone: %s", msg);
}

static void test_checkpoint_outside_trie(void) {
    char msg[700];
    int ck = ds_id_get(&eng->ckpts);
    REQUIRE(ck >= 0, "no free checkpoint slot");
    CHECK(check_says("every cached checkpoint belongs to a trie node", msg, sizeof msg), "%s", msg);
    ds_id_unref(&eng->ckpts, ck);
    CHECK(clean(msg, sizeof msg), "undone: %s", msg);
}

static void test_waiting_request_holds_page(void) {
    char msg[700];
    req *w = eng->waiting_head;
    REQUIRE(w, "nothing waiting");
    w->n_pages = 1;
    w->pages[0] = eng->running[0]->pages[0];
    CHECK(check_says("a waiting request holds nothing", msg, sizeof msg), "%s", msg);
    w->n_pages = 0;
    CHECK(clean(msg, sizeof msg), "undone: %s", msg);
}

static void test_vision_bytes_without_a_job(void) {
    char msg[700];
    eng->vision_used += 4096;
    CHECK(check_says("vision jobs hold 0 bytes, the budget counts 4096", msg, sizeof msg), "%s", msg);
    eng->vision_used -= 4096;
    CHECK(clean(msg, sizeof msg), "undone: %s", msg);
}

static void test_runs_to_the_end_clean(void) {
    char msg[700];
    int guard = 0;
    while (ds_engine_step(eng) && guard++ < 1000) CHECK(clean(msg, sizeof msg), "step %d: %s", guard, msg);
    CHECK(clean(msg, sizeof msg), "%s", msg);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ds-engine-check-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    if (start() == 0) {
        RUN(test_healthy_engine_passes);
        RUN(test_refcount_off);
        RUN(test_free_list_holds_page_in_use);
        RUN(test_slot_held_twice);
        RUN(test_checkpoint_outside_trie);
        RUN(test_waiting_request_holds_page);
        RUN(test_vision_bytes_without_a_job);
        RUN(test_runs_to_the_end_clean);
    } else {
        printf("FAIL set-up\n");
        ds_t_failed_cases++;
    }
    ds_engine_free(eng);
    ds_model_free(model);
    ds_model_close(file);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    return ds_test_finish();
}
