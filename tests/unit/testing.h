/* testing.h - a tiny test harness: one executable per file, one line per case.
 *
 * A test binary prints "ok NAME" or "FAIL NAME: message" for each case and
 * ends with "RESULT passed=N failed=M"; tests/run.sh adds those up. */
#ifndef DS_TESTING_H
#define DS_TESTING_H

#include <stdio.h>
#include <string.h>

static int ds_t_failed_cases, ds_t_passed_cases, ds_t_case_failed;
static const char *ds_t_case_name;

#define CHECK(cond, ...)                                                           \
    do {                                                                           \
        if (!(cond)) {                                                             \
            if (!ds_t_case_failed) printf("FAIL %s: ", ds_t_case_name);            \
            else printf("     %s: ", ds_t_case_name);                              \
            printf("%s:%d: (%s) ", __FILE__, __LINE__, #cond);                     \
            printf(__VA_ARGS__);                                                   \
            printf("\n");                                                          \
            ds_t_case_failed = 1;                                                  \
        }                                                                          \
    } while (0)

/* Like CHECK but leaves the test case on failure (for checks later code relies on). */
#define REQUIRE(cond, ...)                                                         \
    do {                                                                           \
        CHECK(cond, __VA_ARGS__);                                                  \
        if (!(cond)) return;                                                       \
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

static inline int ds_test_finish(void) {
    printf("RESULT passed=%d failed=%d\n", ds_t_passed_cases, ds_t_failed_cases);
    return ds_t_failed_cases ? 1 : 0;
}

#endif
