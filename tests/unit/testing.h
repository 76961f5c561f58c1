/* testing.h - a tiny test harness: one executable per file, one line per case.
 *
 * A test binary prints "ok NAME" or "FAIL NAME: message" for each case and
 * ends with "RESULT passed=N failed=M"; tests/run.sh adds those up. */
#ifndef DS_TESTING_H
#define DS_TESTING_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ds_t_failed_cases, ds_t_passed_cases, ds_t_case_failed;
static const char *ds_t_case_name;

#define DS_CHECK_TEXT(ok, text, ...)                                               \
    do {                                                                           \
        if (!(ok)) {                                                               \
            if (!ds_t_case_failed) printf("FAIL %s: ", ds_t_case_name);            \
            else printf("     %s: ", ds_t_case_name);                              \
            printf("%s:%d: (%s) ", __FILE__, __LINE__, text);                      \
            printf(__VA_ARGS__);                                                   \
            printf("\n");                                                          \
            ds_t_case_failed = 1;                                                  \
        }                                                                          \
    } while (0)

#define CHECK(cond, ...) DS_CHECK_TEXT(cond, #cond, __VA_ARGS__)

/* Like CHECK but leaves the test case on failure (for checks later code relies
 * on). The condition is evaluated exactly once: it often has side effects. */
#define REQUIRE(cond, ...)                                                         \
    do {                                                                           \
        int ds_t_ok_ = (cond) ? 1 : 0;                                             \
        DS_CHECK_TEXT(ds_t_ok_, #cond, __VA_ARGS__);                               \
        if (!ds_t_ok_) return;                                                     \
    } while (0)

static inline void ds_test_run(const char *name, void (*fn)(void)) {
    ds_t_case_name = name;
    ds_t_case_failed = 0;
    fflush(stdout);
    fn();
    if (ds_t_case_failed) ds_t_failed_cases++;
    else { ds_t_passed_cases++; printf("ok %s\n", name); }
    fflush(stdout);
}
#define RUN(fn) ds_test_run(#fn, fn)

/* Under the sanitizers (make test-sanitize sets DS_SANITIZE) everything runs
 * many times slower: heavy tests make the same checks on a fifth of the work. */
static inline int ds_test_scaled(int n) { return getenv("DS_SANITIZE") ? n / 5 : n; }

static inline int ds_test_finish(void) {
    printf("RESULT passed=%d failed=%d\n", ds_t_passed_cases, ds_t_failed_cases);
    return ds_t_failed_cases ? 1 : 0;
}

#endif
