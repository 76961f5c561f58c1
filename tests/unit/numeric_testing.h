/* numeric_testing.h - what the numeric tests (kernels, quantisers, forward
 * passes) share: seeded random numbers and the relative difference of two
 * float arrays. */
#ifndef DS_NUMERIC_TESTING_H
#define DS_NUMERIC_TESTING_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* Deterministic random numbers, state passed explicitly so each test's data
 * depend on its seed alone. */
typedef struct { uint64_t s; } rng;

static inline uint64_t rng_next(rng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) */
static inline double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

/* uniform in [-1, 1), as a float */
static inline float rng_symmetric(rng *r) { return (float)(rng_uniform(r) * 2.0 - 1.0); }

static inline double rng_gauss(rng *r) {
    const double u = 1.0 - rng_uniform(r); /* (0, 1]: log stays finite */
    const double v = rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* max |a - b| / max |b|; infinite when a holds a NaN */
static inline double rel_diff(const float *a, const float *b, size_t n) {
    double md = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md || d != d) md = d != d ? INFINITY : d;
        if (fabs(b[i]) > mx) mx = fabs(b[i]);
    }
    return md / (mx > 0 ? mx : 1);
}

#endif
