/* test_cors.c - the CORS policy (server/cors.h): its lists, as JSON or comma
 * lists, and what a request's Origin gets. */
#include "server/cors.h"

#include <stdlib.h>
#include <string.h>

#include "testing.h"

static void json_list_exact_origins(void) {
    ds_cors *c = NULL;
    ds_err e = {0};
    REQUIRE(ds_cors_new("[\"https://a.example\", \"http://localhost:5173\"]", NULL, NULL, &c, &e) == DS_OK, "%s", e.msg);
    const char *a = ds_cors_allow_origin(c, "https://a.example");
    CHECK(a && !strcmp(a, "https://a.example"), "%s", a ? a : "NULL");
    CHECK(ds_cors_allow_origin(c, "http://localhost:5173") != NULL, "second");
    CHECK(ds_cors_allow_origin(c, "https://a.example.evil") == NULL, "a longer origin");
    CHECK(ds_cors_allow_origin(c, "https://A.example") == NULL, "origins compare exactly");
    CHECK(ds_cors_allow_origin(c, NULL) == NULL, "no Origin");
    CHECK(ds_cors_varies(c), "the answer depends on the Origin");
    CHECK(!strcmp(ds_cors_methods(c), "GET, POST, OPTIONS"), "%s", ds_cors_methods(c));
    CHECK(!strcmp(ds_cors_headers(c, "authorization"), "authorization"), "echoes the request's");
    CHECK(strstr(ds_cors_headers(c, NULL), "Authorization") != NULL, "%s", ds_cors_headers(c, NULL));
    ds_cors_free(c);
}

static void comma_lists_and_any(void) {
    ds_cors *c = NULL;
    ds_err e = {0};
    REQUIRE(ds_cors_new(" * ", "GET, POST", "Content-Type,Authorization", &c, &e) == DS_OK, "%s", e.msg);
    const char *a = ds_cors_allow_origin(c, "https://any.example");
    CHECK(a && !strcmp(a, "*"), "%s", a ? a : "NULL");
    CHECK(!ds_cors_varies(c), "*");
    CHECK(!strcmp(ds_cors_methods(c), "GET, POST"), "%s", ds_cors_methods(c));
    CHECK(!strcmp(ds_cors_headers(c, "x-other"), "Content-Type, Authorization"), "%s", ds_cors_headers(c, "x-other"));
    ds_cors_free(c);
}

static void bad_lists_name_the_option(void) {
    static const struct { const char *o, *m, *h, *want; } CASES[] = {
        {"", NULL, NULL, "--allowed-origins: an empty item"},
        {"a,,b", NULL, NULL, "--allowed-origins: an empty item"},
        {"[]", NULL, NULL, "--allowed-origins: the list is empty"},
        {"[\"a\", 1]", NULL, NULL, "--allowed-origins: item 2 is not a string"},
        {"[\"a\"", NULL, NULL, "--allowed-origins: not a JSON list"},
        {"*", "[\"GET\\r\\nX: y\"]", NULL, "--allowed-methods: item 1 has a space, a control character"},
        {"*", NULL, "Content-Type,{}", "--allowed-headers: item 2 is not a method or header name"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        ds_cors *c = (ds_cors *)1;
        ds_err e = {0};
        ds_status st = ds_cors_new(CASES[i].o, CASES[i].m, CASES[i].h, &c, &e);
        CHECK(st == DS_EINVAL && c == NULL, "case %zu: status %d", i, (int)st);
        CHECK(strstr(e.msg, CASES[i].want) != NULL, "case %zu: %s", i, e.msg);
    }
}

int main(void) {
    RUN(json_list_exact_origins);
    RUN(comma_lists_and_any);
    RUN(bad_lists_name_the_option);
    return ds_test_finish();
}
