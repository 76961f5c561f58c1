/* test_hub.c - the hub client's parts that need no network: SHA-256 against
 * the FIPS 180-4 examples, the choice of files `REPO:QUANT` means in a
 * listing (llama.cpp's rules), and the paths a listing may name. The HTTP side
 * is tests/cli/test_hub.sh, against a stand-in of the hub. */
#include <string.h>

#include "loading/hub_int.h"
#include "loading/hub_sha256.h"
#include "testing.h"

static void sha_of(const char *data, size_t n, size_t step, char hex[65]) {
    ds_sha256 s;
    ds_sha256_init(&s);
    for (size_t i = 0; i < n; i += step) ds_sha256_update(&s, data + i, n - i < step ? n - i : step);
    ds_sha256_final_hex(&s, hex);
}

static void test_sha256_vectors(void) {
    char h[65];
    sha_of("", 0, 1, h);
    CHECK(!strcmp(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "%s", h);
    sha_of("abc", 3, 3, h);
    CHECK(!strcmp(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "%s", h);
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 56 bytes: padding spills */
    for (size_t step = 1; step <= 57; step += 7) {
        sha_of(two, strlen(two), step, h);
        CHECK(!strcmp(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"), "step %zu: %s", step, h);
    }
    static char million[1000000];
    memset(million, 'a', sizeof million);
    sha_of(million, sizeof million, 4093, h);
    CHECK(!strcmp(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "%s", h);
}

/* a listing of the given paths, in that order */
static void listing(ds_hub_listing *l, const char *const *paths) {
    ds_err e;
    memset(l, 0, sizeof *l);
    for (; *paths; paths++) ds_hub_listing_add(l, *paths, &e);
}

/* the path chosen as the model (its first shard), "" when none, "ERR" on error */
static const char *pick(const char *const *paths, const char *quant, ds_hub_choice *c, ds_hub_listing *l, ds_err *e) {
    listing(l, paths);
    if (ds_hub_choose(l, "test/repo", quant, c, e)) return "ERR";
    return c->n_model ? l->files[c->model[0]].path : "";
}

#define EXPECT_PICK(paths, quant, want)                                                            \
    do {                                                                                           \
        ds_hub_listing l_;                                                                         \
        ds_hub_choice c_;                                                                          \
        ds_err e_ = {0};                                                                           \
        const char *got_ = pick(paths, quant, &c_, &l_, &e_);                                      \
        CHECK(!strcmp(got_, want), "quant %s: got %s, want %s (%s)", quant ? quant : "(none)",     \
              got_, want, e_.msg);                                                                 \
        if (strcmp(got_, "ERR")) ds_hub_choice_free(&c_);                                          \
        ds_hub_listing_free(&l_);                                                                  \
    } while (0)

static void test_choose_model(void) {
    static const char *const A[] = {"README.md", "M-IQ4_XS.gguf", "M-Q8_0.gguf", "M-Q4_K_S.gguf", "M-Q4_K_M.gguf",
                                    "mmproj-M-Q4_K_M.gguf", "imatrix-Q4_K_M.gguf", "mtp-M-Q4_K_M.gguf", NULL};
    EXPECT_PICK(A, NULL, "M-Q4_K_M.gguf");     /* the default, wherever it stands */
    EXPECT_PICK(A, "q8_0", "M-Q8_0.gguf");     /* any case */
    EXPECT_PICK(A, "Q4_K_S", "M-Q4_K_S.gguf");
    EXPECT_PICK(A, "iq4_xs", "M-IQ4_XS.gguf");
    EXPECT_PICK(A, "Q4_K", "ERR");             /* a whole tag: Q4_K is not Q4_K_M */
    EXPECT_PICK(A, "Q4_XS", "ERR");            /* nor inside IQ4_XS */
    EXPECT_PICK(A, "Q5_K_M", "ERR");
    static const char *const B[] = {"mmproj-F16.gguf", "M-BF16.gguf", "M-Q8_0.gguf", NULL};
    EXPECT_PICK(B, NULL, "M-Q8_0.gguf");       /* then Q8_0 */
    static const char *const C[] = {"mmproj-F16.gguf", "M-BF16.gguf", "M-F16.gguf", NULL};
    EXPECT_PICK(C, NULL, "M-BF16.gguf");       /* then the first model file */
    static const char *const D[] = {"README.md", "mmproj-F16.gguf", NULL};
    EXPECT_PICK(D, NULL, "ERR");

    ds_hub_listing l;
    ds_hub_choice c;
    ds_err e = {0};
    pick(A, "Q5_K_M", &c, &l, &e);
    CHECK(strstr(e.msg, "Q5_K_M") && strstr(e.msg, "M-IQ4_XS.gguf") && strstr(e.msg, "test/repo"),
          "the error names the quantization, the repository and the files: %s", e.msg);
    ds_hub_listing_free(&l);
}

static void test_choose_split(void) {
    static const char *const S[] = {"Q6_K/M-Q6_K-00002-of-00003.gguf", "Q6_K/M-Q6_K-00003-of-00003.gguf",
                                    "Q6_K/M-Q6_K-00001-of-00003.gguf", "M-Q6_K.gguf.part", "Q8_0/M-Q8_0-00001-of-00002.gguf",
                                    NULL};
    ds_hub_listing l;
    ds_hub_choice c;
    ds_err e = {0};
    REQUIRE(!strcmp(pick(S, "Q6_K", &c, &l, &e), "Q6_K/M-Q6_K-00001-of-00003.gguf"), "%s", e.msg);
    REQUIRE(c.n_model == 3, "%d shards", c.n_model);
    for (int k = 0; k < 3; k++) {
        char want[64];
        snprintf(want, sizeof want, "Q6_K/M-Q6_K-%05d-of-00003.gguf", k + 1);
        CHECK(!strcmp(l.files[c.model[k]].path, want), "shard %d: %s", k, l.files[c.model[k]].path);
    }
    ds_hub_choice_free(&c);
    ds_hub_listing_free(&l);
    CHECK(!strcmp(pick(S, "Q8_0", &c, &l, &e), "ERR") && strstr(e.msg, "shard 2 of 2"),
          "a missing shard is named: %s", e.msg);
    ds_hub_listing_free(&l);
}

static const char *side(const char *const *paths, const char *quant, int mtp) {
    static char got[128];
    ds_hub_listing l;
    ds_hub_choice c;
    ds_err e = {0};
    listing(&l, paths);
    if (ds_hub_choose(&l, "test/repo", quant, &c, &e)) snprintf(got, sizeof got, "ERR %.100s", e.msg);
    else {
        int i = mtp ? c.mtp : c.mmproj;
        snprintf(got, sizeof got, "%s", i >= 0 ? l.files[i].path : "");
        ds_hub_choice_free(&c);
    }
    ds_hub_listing_free(&l);
    return got;
}

static void test_choose_sidecars(void) {
    static const char *const A[] = {"mmproj-F32.gguf", "mmproj-F16.gguf", "M-Q8_0.gguf", NULL};
    CHECK(!strcmp(side(A, NULL, 0), "mmproj-F16.gguf"), "nearest bit count to Q8_0: %s", side(A, NULL, 0));
    static const char *const B[] = {"mmproj-F16.gguf", "Q4_K_M/mmproj-BF16.gguf", "Q4_K_M/M-Q4_K_M.gguf",
                                    "other/mmproj-F16.gguf", NULL};
    CHECK(!strcmp(side(B, NULL, 0), "Q4_K_M/mmproj-BF16.gguf"), "the model's own folder first: %s", side(B, NULL, 0));
    static const char *const C[] = {"M-Q4_K_M.gguf", "mtp-M-Q8_0.gguf", "mtp-M-Q4_K_M.gguf", "mtp-M-Q4_0.gguf", NULL};
    CHECK(!strcmp(side(C, "q4_k_m", 1), "mtp-M-Q4_K_M.gguf"), "the exact quantization: %s", side(C, "q4_k_m", 1));
    CHECK(!strcmp(side(C, NULL, 1), "mtp-M-Q4_K_M.gguf"), "none asked: the first of the nearest: %s", side(C, NULL, 1));
    static const char *const D[] = {"M-Q4_K_M.gguf", "sub/mtp-M-Q4_K_M.gguf", NULL};
    CHECK(!strcmp(side(D, NULL, 1), ""), "a sidecar below the model's folder is not its: %s", side(D, NULL, 1));
    CHECK(!strcmp(side(D, NULL, 0), ""), "no mmproj: %s", side(D, NULL, 0));
    static const char *const E[] = {"README.md", "mtp-M-Q8_0.gguf", NULL};
    CHECK(!strcmp(side(E, NULL, 1), "mtp-M-Q8_0.gguf"), "an MTP-only repository: %s", side(E, NULL, 1));
}

static void test_path_ok(void) {
    static const char *const good[] = {"a.gguf", "Q4_K_M/a-Q4_K_M.gguf", "a..b.gguf", ".hidden", NULL};
    static const char *const bad[] = {"", "/etc/x", "../x", "a/../x", "a//b", "a/./b", "a/", "a\\b", "a\nb", "..", NULL};
    for (int i = 0; good[i]; i++) CHECK(ds_hub_path_ok(good[i]), "'%s' refused", good[i]);
    for (int i = 0; bad[i]; i++) CHECK(!ds_hub_path_ok(bad[i]), "'%s' accepted", bad[i]);
}

int main(void) {
    RUN(test_sha256_vectors);
    RUN(test_choose_model);
    RUN(test_choose_split);
    RUN(test_choose_sidecars);
    RUN(test_path_ok);
    return ds_test_finish();
}
