/* test_rope_scaling.c - YaRN rope scaling as the loaders read it (GGUF
 * rope.scaling.* keys, Hugging Face rope_parameters) with Hugging Face's
 * defaults, bad values refused naming the key, the frequencies and attention
 * factor it gives, and the context limit it sets. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loading/model_file.h"
#include "model/model_make.h"
#include "model/rope_freqs.h"
#include "testing.h"

static char tmpdir[256];

static int make(ds_format fmt, float yarn, const char *name, char *path, size_t n) {
    snprintf(path, n, "%s/%s", tmpdir, name);
    ds_make_options o = {.shape = "tiny", .dtype = "f32", .format = fmt, .seed = 5, .scale = 3.0f, .out = path,
                         .yarn_factor = yarn};
    ds_err e = {0};
    if (ds_make_model(&o, &e) != DS_OK) {
        printf("make-model %s: %s\n", name, e.msg);
        return -1;
    }
    return 0;
}

static ds_status open_cfg(const char *path, ds_model_config *c, ds_err *e) {
    ds_model_file *f;
    ds_status s = ds_model_open(path, &f, e);
    if (s) return s;
    *c = *ds_model_config_of(f);
    ds_model_close(f);
    return DS_OK;
}

static void test_both_files_read_yarn(void) {
    char path[512];
    const char *names[2] = {"y.gguf", "y-hf"};
    ds_format fmts[2] = {DS_FORMAT_GGUF, DS_FORMAT_SAFETENSORS};
    for (int k = 0; k < 2; k++) {
        REQUIRE(make(fmts[k], 4.0f, names[k], path, sizeof path) == 0, "make %s", names[k]);
        ds_model_config c;
        ds_err e = {0};
        REQUIRE(open_cfg(path, &c, &e) == DS_OK, "%s: %s", names[k], e.msg);
        CHECK(c.yarn_factor == 4.0f && c.yarn_orig_ctx == 4096 && c.yarn_beta_fast == 32.0f && c.yarn_beta_slow == 1.0f &&
                  c.yarn_truncate == 1,
              "%s: factor %g orig %d beta %g/%g", names[k], (double)c.yarn_factor, c.yarn_orig_ctx,
              (double)c.yarn_beta_fast, (double)c.yarn_beta_slow);
        CHECK(fabsf(c.yarn_mscale - (float)(0.1 * log(4.0) + 1)) < 1e-6f, "%s: attention factor %g", names[k],
              (double)c.yarn_mscale);
        CHECK(ds_model_context_limit(&c) == 4 * 4096, "%s: context %d", names[k], ds_model_context_limit(&c));
    }
    /* no scaling: the trained context, the plain frequencies */
    REQUIRE(make(DS_FORMAT_GGUF, 0, "plain.gguf", path, sizeof path) == 0, "make plain");
    ds_model_config c;
    ds_err e = {0};
    REQUIRE(open_cfg(path, &c, &e) == DS_OK, "plain: %s", e.msg);
    CHECK(c.yarn_factor == 0 && ds_model_context_limit(&c) == 4096, "plain: factor %g context %d",
          (double)c.yarn_factor, ds_model_context_limit(&c));
}

/* rope_dim 16, theta 1e7, L 4096: the ramp runs from pair floor(16 ln(4096 / 64 pi) / (2 ln 1e7)) = 1 to
 * ceil(16 ln(4096 / 2 pi) / (2 ln 1e7)) = 4: pairs 0..1 keep theta^(-2i/16), 4..7 are divided by the factor,
 * pairs 2 and 3 are blended a third and two thirds of the way */
static void test_frequencies(void) {
    ds_model_config c = {.rope_dim = 16, .rope_theta = 1e7f, .yarn_factor = 4, .yarn_orig_ctx = 4096,
                         .yarn_beta_fast = 32, .yarn_beta_slow = 1, .yarn_mscale = 1.25f, .yarn_truncate = 1};
    double f[8];
    float ms;
    ds_rope_freqs(&c, f, &ms);
    for (int i = 0; i < 8; i++) {
        double keep = pow(1e7, -2.0 * i / 16), ramp = i < 1 ? 0 : i > 4 ? 1 : (i - 1) / 3.0;
        double want = keep / 4 * ramp + keep * (1 - ramp);
        CHECK(fabs(f[i] - want) <= 1e-12 * keep, "pair %d: %.17g, expected %.17g", i, f[i], want);
    }
    CHECK(ms == 1.25f, "mscale %g", (double)ms);
    c.yarn_factor = 0;
    ds_rope_freqs(&c, f, &ms);
    CHECK(f[3] == pow(1e7f, -2.0 * 3 / 16) && ms == 1.0f, "plain: %.17g, mscale %g", f[3], (double)ms);
}

/* Edits the GGUF in place: the value of the first key named key (a same-length change). */
static int patch(const char *path, const char *key, const void *val, size_t n) {
    FILE *fp = fopen(path, "r+b");
    if (!fp) return -1;
    static char buf[1 << 16];
    size_t got = fread(buf, 1, sizeof buf, fp);
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl + 12 + n < got; i++)
        if (!memcmp(buf + i, key, kl) && buf[i - 8] == (char)kl) {
            size_t off = i + kl + 4; /* after the key: type u32, then the value */
            uint32_t type;
            memcpy(&type, buf + off - 4, 4);
            if (type == 8) off += 8; /* a string: its length first */
            fseek(fp, (long)off, SEEK_SET);
            size_t w = fwrite(val, 1, n, fp);
            fclose(fp);
            return w == n ? 0 : -1;
        }
    fclose(fp);
    return -1;
}

static void test_bad_gguf_values(void) {
    struct {
        const char *name, *key;
        const char *str;
        float f;
        ds_status code;
        const char *word;
    } cases[] = {
        {"factor-0.gguf", "qwen35.rope.scaling.factor", NULL, 0.0f, DS_ECORRUPT, "'qwen35.rope.scaling.factor'"},
        {"factor-neg.gguf", "qwen35.rope.scaling.factor", NULL, -4.0f, DS_ECORRUPT, "'qwen35.rope.scaling.factor'"},
        {"type.gguf", "qwen35.rope.scaling.type", "ntkx", 0, DS_EUNSUPPORTED, "'qwen35.rope.scaling.type' is 'ntkx'"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char path[512];
        REQUIRE(make(DS_FORMAT_GGUF, 4.0f, cases[k].name, path, sizeof path) == 0, "make %s", cases[k].name);
        int p = cases[k].str ? patch(path, cases[k].key, cases[k].str, strlen(cases[k].str))
                             : patch(path, cases[k].key, &cases[k].f, 4);
        REQUIRE(p == 0, "%s: could not edit %s", cases[k].name, cases[k].key);
        ds_model_config c;
        ds_err e = {0};
        ds_status s = open_cfg(path, &c, &e);
        CHECK(s == cases[k].code && strstr(e.msg, cases[k].word) && strstr(e.msg, cases[k].name),
              "%s: status %d, message '%s' (expected %d naming %s)", cases[k].name, s, e.msg, cases[k].code,
              cases[k].word);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ds-yarn-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_both_files_read_yarn);
    RUN(test_frequencies);
    RUN(test_bad_gguf_values);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    return ds_test_finish();
}
