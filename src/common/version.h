/* version.h - the one place deltaserve's version lives (`deltaserve --version`,
 * `deltaserve serve --version`). */
#ifndef DS_VERSION_H
#define DS_VERSION_H

#include <stdio.h>

#define DS_VERSION "0.1.0"

/* "deltaserve VERSION (build: COMPILER, OPTIONS)\n": the version and how this
 * binary was built (the compiler, optimised or not, with sanitizers or not). */
void ds_version_print(FILE *f);

#endif
