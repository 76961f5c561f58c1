/* version.c - see version.h. */
#include "common/version.h"

void ds_version_print(FILE *f) {
    fprintf(f, "deltaserve %s (build: gcc %s, C17, %s%s, %s)\n", DS_VERSION, __VERSION__,
#ifdef __OPTIMIZE__
            "optimised",
#else
            "not optimised",
#endif
#ifdef __SANITIZE_ADDRESS__
            ", ASan+UBSan",
#else
            "",
#endif
#if defined(__x86_64__)
            "x86-64 kernels"
#else
            "reference kernels"
#endif
    );
}
