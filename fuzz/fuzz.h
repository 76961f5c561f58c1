/* fuzz.h - shared by the libFuzzer targets in fuzz/ and by the replay test
 * (tests/unit/test_fuzz_replay.c, which includes the target files with gcc).
 *
 * A target defines LLVMFuzzerTestOneInput; a broken invariant calls
 * FUZZ_FAIL, which prints the reason and aborts, so libFuzzer records the
 * input as a crash and the replay test stops on it. */
#ifndef DS_FUZZ_H
#define DS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "jinja/jinja.h"

#define FUZZ_FAIL(...)                                       \
    do {                                                     \
        fprintf(stderr, "fuzz invariant broken (%s:%d): ", __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                        \
        fputc('\n', stderr);                                 \
        abort();                                             \
    } while (0)

#define FUZZ_CHECK(cond, ...)                  \
    do {                                       \
        if (!(cond)) FUZZ_FAIL(__VA_ARGS__);   \
    } while (0)

/* Reads a byte so that ASan sees the access and the compiler cannot drop it. */
static inline void fuzz_touch(const uint8_t *p) {
    volatile uint8_t sink = *p;
    (void)sink;
}

/* Limits for rendering a chat template under fuzzing: generous enough for any
 * real conversation, small enough that a hostile template ends quickly. */
static inline ds_jinja_limits fuzz_template_limits(void) {
    ds_jinja_limits lim = ds_jinja_default_limits();
    lim.max_output = 1u << 20;
    lim.max_memory = 64u << 20;
    lim.max_steps = 200000;
    return lim;
}

#endif
