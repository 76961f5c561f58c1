/* args.c - see args.h. */
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

const char *ds_arg_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "deltaserve: option %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int ds_arg_int(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "deltaserve: %s '%s' is not an integer in %ld..%ld\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int ds_arg_u64(const char *opt, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-') {
        fprintf(stderr, "deltaserve: %s '%s' is not a non-negative integer\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

int ds_arg_float(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "deltaserve: %s '%s' is not a number in %g..%g\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}
