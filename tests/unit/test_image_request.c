/* test_image_request.c - images in requests: the content part forms of chat
 * completions (image_url object and string), the Responses API's input_image
 * and the Messages API's image blocks, each refusal naming its part; and the
 * URL policy (media_fetch.h): data: URLs, file:// under the allowed directory
 * only ('..' and symbolic links resolved), http(s) off by default. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/json_text.h"
#include "server/media_fetch.h"
#include "server/messages_api.h"
#include "server/openai_request.h"
#include "server/responses_api.h"
#include "testing.h"

static int chat(const char *body, ds_oai_request *r, ds_oai_error *err) {
    return ds_oai_request_parse(body, strlen(body), DS_OAI_CHAT, r, err);
}

static void test_chat_image_forms(void) {
    ds_oai_request r;
    ds_oai_error err;
    /* OpenAI's object form, vLLM's string form, detail, several per message and per conversation */
    const char *body =
        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,AAAA\",\"detail\":\"high\"}},"
        "{\"type\":\"image_url\",\"image_url\":\"file:///tmp/x.png\"}]},"
        "{\"role\":\"assistant\",\"content\":\"ok\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"HTTPS://h/i.jpg\"}},"
        "{\"type\":\"text\",\"text\":\"b\"}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"},{\"type\":\"text\",\"text\":\"y\"}]}]}";
    REQUIRE(chat(body, &r, &err) == 0, "%s: %s", err.param, err.message);
    CHECK(r.n_images == 3, "%d images", r.n_images);
    if (r.n_images == 3) {
        CHECK(!strcmp(r.images[0].url, "data:image/png;base64,AAAA"), "%s", r.images[0].url);
        CHECK(!strcmp(r.images[0].param, "messages[0].content[1].image_url"), "%s", r.images[0].param);
        CHECK(!strcmp(r.images[1].url, "file:///tmp/x.png"), "%s", r.images[1].url);
        CHECK(!strcmp(r.images[1].param, "messages[0].content[2].image_url"), "%s", r.images[1].param);
        CHECK(!strcmp(r.images[2].param, "messages[2].content[0].image_url"), "%s", r.images[2].param);
    }
    /* what the template sees: parts, images as {"type": "image"} (as vLLM gives Qwen's templates) */
    char *m0 = ds_json_dump(json_object_get(json_array_get(r.messages, 0), "content"));
    CHECK(m0 && !strcmp(m0, "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"image\"},{\"type\":\"image\"}]"), "%s", m0);
    free(m0);
    /* text parts alone stay one string, as before */
    const json_t *c3 = json_object_get(json_array_get(r.messages, 3), "content");
    CHECK(json_is_string(c3) && !strcmp(json_string_value(c3), "xy"), "text-only content");
    ds_oai_request_free(&r);
}

static void test_chat_image_refusals(void) {
    static const char *const cases[][3] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "messages[0].content[0].image_url",
         "'url' string"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
         "messages[0].content[0].image_url", "'url' string"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":7}}]}]}",
         "messages[0].content[0].image_url", "'url' string"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":\"\"}]}]}",
         "messages[0].content[0].image_url", "empty"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"image_url\","
         "\"image_url\":{\"url\":\"ftp://h/x.png\"}}]}]}", "messages[0].content[1].image_url", "scheme 'ftp'"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;"
         "base64,AA\",\"detail\":\"max\"}}]}]}", "messages[0].content[0].image_url", "auto, low or high"},
        {"{\"messages\":[{\"role\":\"system\",\"content\":[{\"type\":\"image_url\",\"image_url\":\"data:image/png;base64,"
         "AA\"}]},{\"role\":\"user\",\"content\":\"x\"}]}", "messages[0].content[0].image_url", "user messages only"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"image_url\","
         "\"image_url\":\"data:image/png;base64,AA\"}]}]}", "messages[1].content[0].image_url", "user messages only"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}]}]}", "messages[0].content",
         "'text' and 'image_url'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ds_oai_request r;
        ds_oai_error err;
        int rc = chat(cases[i][0], &r, &err);
        CHECK(rc != 0, "case %zu accepted", i);
        if (rc) {
            CHECK(!strcmp(err.param, cases[i][1]), "case %zu: param %s, want %s", i, err.param, cases[i][1]);
            CHECK(strstr(err.message, cases[i][2]) != NULL, "case %zu: %s", i, err.message);
        } else {
            ds_oai_request_free(&r);
        }
    }
}

static json_t *parse_json(const char *s) {
    char msg[200];
    return ds_json_parse(s, strlen(s), msg, sizeof msg);
}

static void test_responses_input_image(void) {
    json_t *body = parse_json("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"what?\"},"
                              "{\"type\":\"input_image\",\"image_url\":\"data:image/png;base64,AAAA\",\"detail\":\"auto\"}]},"
                              "{\"role\":\"assistant\",\"content\":\"a cat\"},"
                              "{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"https://h/c.png\"}]}]}");
    ds_oai_request r;
    ds_oai_error err;
    REQUIRE(ds_responses_parse(body, &r, &err) == 0, "%s: %s", err.param, err.message);
    CHECK(r.n_images == 2, "%d images", r.n_images);
    if (r.n_images == 2) {
        CHECK(!strcmp(r.images[0].param, "input[0].content[1].image_url"), "%s", r.images[0].param);
        CHECK(!strcmp(r.images[1].param, "input[2].content[0].image_url"), "%s", r.images[1].param);
        CHECK(!strcmp(r.images[1].url, "https://h/c.png"), "%s", r.images[1].url);
    }
    char *m0 = ds_json_dump(json_object_get(json_array_get(r.messages, 0), "content"));
    CHECK(m0 && !strcmp(m0, "[{\"type\":\"text\",\"text\":\"what?\"},{\"type\":\"image\"}]"), "%s", m0);
    free(m0);
    ds_oai_request_free(&r);
    json_decref(body);
}

static void test_messages_image_blocks(void) {
    json_t *body = parse_json(
        "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"one\"},"
        "{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/jpeg\",\"data\":\"/9j/\"}},"
        "{\"type\":\"text\",\"text\":\"two\"},{\"type\":\"image\",\"source\":{\"type\":\"url\",\"url\":\"https://h/a.png\"}}]}]}");
    ds_oai_request r;
    ds_oai_error err;
    REQUIRE(ds_messages_parse(body, 0, &r, &err) == 0, "%s: %s", err.param, err.message);
    CHECK(r.n_images == 2, "%d images", r.n_images);
    if (r.n_images == 2) {
        CHECK(!strcmp(r.images[0].url, "data:image/jpeg;base64,/9j/"), "%s", r.images[0].url);
        CHECK(!strcmp(r.images[0].param, "messages[0].content[1].source"), "%s", r.images[0].param);
        CHECK(!strcmp(r.images[1].param, "messages[0].content[3].source"), "%s", r.images[1].param);
    }
    char *m0 = ds_json_dump(json_object_get(json_array_get(r.messages, 0), "content"));
    CHECK(m0 && !strcmp(m0, "[{\"type\":\"text\",\"text\":\"one\"},{\"type\":\"image\"},{\"type\":\"text\",\"text\":\"two\"},"
                            "{\"type\":\"image\"}]"), "%s", m0);
    free(m0);
    ds_oai_request_free(&r);
    json_decref(body);
    static const char *const bad[][3] = {
        {"{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":"
         "{\"type\":\"file\",\"file_id\":\"f\"}}]}]}", "messages[0].content[0]", "stores no files"},
        {"{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":"
         "{\"type\":\"base64\",\"data\":\"AA\"}}]}]}", "messages[0].content[0]", "media_type"},
        {"{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":"
         "{\"type\":\"url\"}}]}]}", "messages[0].content[0]", "'url' string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *b = parse_json(bad[i][0]);
        int rc = ds_messages_parse(b, 0, &r, &err);
        CHECK(rc != 0, "case %zu accepted", i);
        if (rc) {
            CHECK(!strcmp(err.param, bad[i][1]), "case %zu: param %s", i, err.param);
            CHECK(strstr(err.message, bad[i][2]) != NULL, "case %zu: %s", i, err.message);
        } else {
            ds_oai_request_free(&r);
        }
        json_decref(b);
    }
}

static ds_status fetch(const ds_media_policy *p, const char *url, uint8_t **d, size_t *n, ds_err *e) {
    return ds_media_fetch(p, url, strlen(url), d, n, e);
}

static void test_data_urls(void) {
    ds_media_policy p = {.max_bytes = 16};
    uint8_t *d = NULL;
    size_t n = 0;
    ds_err e = {0};
    /* "hello" in base64, wrapped (white space is skipped) */
    REQUIRE(fetch(&p, "data:image/png;base64,aGVs\nbG8=", &d, &n, &e) == DS_OK, "%s", e.msg);
    CHECK(n == 5 && !memcmp(d, "hello", 5), "decoded %zu bytes", n);
    free(d);
    static const char *const bad[][2] = {
        {"data:image/png;base64,aGV*bG8=", "byte 3"},          /* not base64 */
        {"data:image/png;base64,aGVsbG8", "cut short"},         /* truncated: no padding */
        {"data:text/plain;base64,aGVsbG8=", "not an image"},   /* not an image type */
        {"data:image/png,hello", "not base64"},
        {"data:image/png;base64,", "zero bytes"},
        {"data:image/png;base64", "no ','"},
        {"data:image/png;base64,QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB", "larger than the limit"},   /* 24 bytes > 16 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        d = NULL;
        ds_status st = fetch(&p, bad[i][0], &d, &n, &e);
        CHECK(st != DS_OK && !d, "case %zu accepted", i);
        CHECK(st == DS_OK || strstr(e.msg, bad[i][1]), "case %zu: %s", i, e.msg);
        free(d);
    }
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) fputs(text, f), fclose(f);
}

static void test_file_urls(void) {
    char tmpl[] = "/tmp/ds_media_XXXXXX";
    REQUIRE(mkdtemp(tmpl), "mkdtemp");
    char allowed[PATH_MAX + 32], outside[PATH_MAX + 64], inside[PATH_MAX + 64], link[PATH_MAX + 64], url[3 * PATH_MAX];
    snprintf(allowed, sizeof allowed, "%s/allowed", tmpl);
    mkdir(allowed, 0700);
    snprintf(inside, sizeof inside, "%s/in.png", allowed);
    snprintf(outside, sizeof outside, "%s/secret.png", tmpl);
    snprintf(link, sizeof link, "%s/link.png", allowed);
    write_file(inside, "INSIDE");
    write_file(outside, "SECRET");
    CHECK(symlink(outside, link) == 0, "symlink");
    char real[PATH_MAX];
    REQUIRE(realpath(allowed, real), "realpath");
    ds_media_policy p = {.local_dir = real, .max_bytes = 1 << 20};
    uint8_t *d = NULL;
    size_t n = 0;
    ds_err e = {0};
    snprintf(url, sizeof url, "file://%s", inside);
    CHECK(fetch(&p, url, &d, &n, &e) == DS_OK && n == 6 && !memcmp(d, "INSIDE", 6), "inside: %s", e.msg);
    free(d), d = NULL;
    const char *escapes[] = {"%s/../secret.png", "%s/link.png"};
    for (int i = 0; i < 2; i++) {
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, escapes[i], allowed);
        snprintf(url, sizeof url, "file://%s", path);
        CHECK(fetch(&p, url, &d, &n, &e) == DS_EUNSUPPORTED && !d, "escape %d read", i);
        CHECK(strstr(e.msg, "outside --allowed-local-media-path"), "escape %d: %s", i, e.msg);
        free(d), d = NULL;
    }
    snprintf(url, sizeof url, "file://%s/missing.png", allowed);
    CHECK(fetch(&p, url, &d, &n, &e) == DS_EIO && strstr(e.msg, "cannot open"), "missing: %s", e.msg);
    snprintf(url, sizeof url, "file://%s", allowed);
    CHECK(fetch(&p, url, &d, &n, &e) != DS_OK, "a directory is not an image");
    /* without the option: refused, whatever the path */
    ds_media_policy none = {.max_bytes = 1 << 20};
    snprintf(url, sizeof url, "file://%s", inside);
    CHECK(fetch(&none, url, &d, &n, &e) == DS_EUNSUPPORTED && strstr(e.msg, "--allowed-local-media-path"), "%s", e.msg);
    /* the size limit holds for files too */
    ds_media_policy small = {.local_dir = real, .max_bytes = 3};
    CHECK(fetch(&small, url, &d, &n, &e) == DS_ENOMEM && strstr(e.msg, "larger than"), "%s", e.msg);
    unlink(link), unlink(inside), unlink(outside), rmdir(allowed), rmdir(tmpl);
}

static void test_http_policy(void) {
    uint8_t *d = NULL;
    size_t n = 0;
    ds_err e = {0};
    ds_media_policy off = {.max_bytes = 1 << 20, .timeout_s = 1};
    CHECK(fetch(&off, "http://127.0.0.1:9/x.png", &d, &n, &e) == DS_EUNSUPPORTED &&
          strstr(e.msg, "--allowed-media-domains"), "default: %s", e.msg);
    ds_media_policy some = {.domains = "images.example, cdn.example", .max_bytes = 1 << 20, .timeout_s = 1};
    CHECK(fetch(&some, "https://evil.example/x.png", &d, &n, &e) == DS_EUNSUPPORTED && strstr(e.msg, "evil.example"),
          "other host: %s", e.msg);
    CHECK(fetch(&some, "https://images.example.evil/x.png", &d, &n, &e) == DS_EUNSUPPORTED, "suffix is not the host");
    /* an allowed host that does not answer: the fetch fails (port 9, discard, is closed here) */
    ds_media_policy local = {.domains = "127.0.0.1", .max_bytes = 1 << 20, .timeout_s = 2};
    CHECK(fetch(&local, "http://127.0.0.1:9/x.png", &d, &n, &e) == DS_EIO && strstr(e.msg, "fetching the image failed"),
          "%s", e.msg);
    CHECK(!d, "no data");
}

int main(void) {
    RUN(test_chat_image_forms);
    RUN(test_chat_image_refusals);
    RUN(test_responses_input_image);
    RUN(test_messages_image_blocks);
    RUN(test_data_urls);
    RUN(test_file_urls);
    RUN(test_http_policy);
    return ds_test_finish();
}
