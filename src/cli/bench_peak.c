/* bench_peak.c - see bench_peak.h. The loops use the instructions directly
 * (target attributes, chosen at run time like the kernels), and an empty asm
 * statement tells the compiler the inputs may change on every pass, so it
 * can neither hoist the products out of the loop nor fold them. */
#include "cli/bench_peak.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { CHAINS = 12, MAX_THREADS = 256 };

/* the chains spelled out: an array of accumulators would live in memory at -O2 */
#define EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

typedef enum { K_INT8, K_BF16, K_F32 } peak_kind;

typedef struct {
    ds_isa level;
    peak_kind kind;
    long iters;
    atomic_int *go;
    double sink;
} peak_arg;

/* operations (a multiply-add counts 2) of one loop iteration over all chains */
static double ops_per_iter(ds_isa level, peak_kind kind) {
    int lanes = level == DS_ISA_AVX512 ? 16 : level == DS_ISA_AVX2 ? 8 : 1; /* 32-bit lanes */
    if (kind == K_INT8) return (double)CHAINS * lanes * (level == DS_ISA_REF ? 1 : 4) * 2;
    if (kind == K_BF16) return (double)CHAINS * lanes * 2 * 2;
    return (double)CHAINS * lanes * 2;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static double loop_avx2(peak_kind kind, long iters) {
    if (kind == K_INT8) {
        __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
#define DECL(c) __m256i acc##c = _mm256_setzero_si256();
#define STEP(c) acc##c = _mm256_add_epi32(acc##c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
#define SUM(c) s += (uint32_t)_mm256_extract_epi32(acc##c, 0);
        EACH(DECL)
        for (long i = 0; i < iters; i++) {
            __asm__("" : "+x"(a), "+x"(b));
            EACH(STEP)
        }
        uint32_t s = 0; /* the sums wrap (defined for unsigned): only the work matters */
        EACH(SUM)
        return (double)s;
#undef DECL
#undef STEP
    }
    __m256 a = _mm256_set1_ps(0.9999999f), b = _mm256_set1_ps(1e-7f);
#define DECL(c) __m256 acc##c = _mm256_set1_ps((float)c);
#define STEP(c) acc##c = _mm256_fmadd_ps(acc##c, a, b);
#define SUMF(c) s += _mm256_cvtss_f32(acc##c);
    EACH(DECL)
    for (long i = 0; i < iters; i++) {
        EACH(STEP)
    }
    float s = 0;
    EACH(SUMF)
    return (double)s;
#undef DECL
#undef STEP
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static double loop_avx512(peak_kind kind, long iters) {
    if (kind == K_INT8) {
        __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
#define DECL(c) __m512i acc##c = _mm512_setzero_si512();
#define STEP(c) acc##c = _mm512_dpbusd_epi32(acc##c, a, b);
#define SUMI(c) s += (uint32_t)_mm512_reduce_add_epi32(acc##c);
        EACH(DECL)
        for (long i = 0; i < iters; i++) {
            __asm__("" : "+v"(a), "+v"(b));
            EACH(STEP)
        }
        uint32_t s = 0; /* the sums wrap (defined for unsigned): only the work matters */
        EACH(SUMI)
        return (double)s;
#undef DECL
#undef STEP
    }
    __m512 a = _mm512_set1_ps(0.9999999f), b = _mm512_set1_ps(1e-7f);
#define DECL(c) __m512 acc##c = _mm512_set1_ps((float)c);
#define STEP(c) acc##c = _mm512_fmadd_ps(acc##c, a, b);
#define SUM512(c) s += _mm512_reduce_add_ps(acc##c);
    EACH(DECL)
    for (long i = 0; i < iters; i++) {
        EACH(STEP)
    }
    float s = 0;
    EACH(SUM512)
    return (double)s;
#undef DECL
#undef STEP
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) static double loop_bf16(long iters) {
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380); /* 1.0, ~6e-8 */
#define DECL(c) __m512 acc##c = _mm512_set1_ps((float)c);
#define STEP(c) acc##c = _mm512_dpbf16_ps(acc##c, a, b);
    EACH(DECL)
    for (long i = 0; i < iters; i++) {
        __asm__("" : "+v"(a), "+v"(b));
        EACH(STEP)
    }
    float s = 0;
    EACH(SUM512)
    return (double)s;
#undef DECL
#undef STEP
}
#endif

static double loop_ref(peak_kind kind, long iters) {
    if (kind == K_INT8) {
        volatile int8_t va = 3, vb = -2;
        int8_t a = va, b = vb;
#define DECL(c) uint32_t acc##c = c;
#define STEP(c) acc##c += (uint32_t)((int32_t)a * b);
#define SUMS(c) s += (uint32_t)acc##c;
        EACH(DECL)
        for (long i = 0; i < iters; i++) {
            __asm__("" : "+r"(a), "+r"(b));
            EACH(STEP)
        }
        uint32_t s = 0; /* the sums wrap (defined for unsigned): only the work matters */
        EACH(SUMS)
        return (double)s;
#undef DECL
#undef STEP
    }
    volatile float va = 0.9999999f, vb = 1e-7f;
    float a = va, b = vb;
#define DECL(c) float acc##c = (float)c;
#define STEP(c) acc##c = acc##c * a + b;
    EACH(DECL)
    for (long i = 0; i < iters; i++) {
        EACH(STEP)
    }
    float s = 0;
#define SUMR(c) s += acc##c;
    EACH(SUMR)
    return (double)s;
#undef DECL
#undef STEP
}

static void *peak_thread(void *p) {
    peak_arg *a = p;
    while (!atomic_load(a->go)) {} /* all threads start together */
#if defined(__x86_64__)
    if (a->kind == K_BF16) a->sink = loop_bf16(a->iters);
    else if (a->level == DS_ISA_AVX512) a->sink = loop_avx512(a->kind, a->iters);
    else if (a->level == DS_ISA_AVX2) a->sink = loop_avx2(a->kind, a->iters);
    else
#endif
        a->sink = loop_ref(a->kind, a->iters);
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* GOP/s of `kind` at `level` on n threads: the best of 5 passes */
static double measure(ds_isa level, peak_kind kind, int n) {
    long iters = level == DS_ISA_REF ? 1L << 20 : 1L << 22;
    pthread_t th[MAX_THREADS];
    peak_arg args[MAX_THREADS];
    double best = 0;
    for (int pass = 0; pass < 5; pass++) {
        atomic_int go = 0;
        int started = 1; /* a thread that cannot be created is left out of the count */
        for (int i = 0; i < n; i++) args[i] = (peak_arg){.level = level, .kind = kind, .iters = iters, .go = &go};
        for (int i = 1; i < n; i++, started++)
            if (pthread_create(&th[i], NULL, peak_thread, &args[i]) != 0) break;
        double t0 = now_s();
        atomic_store(&go, 1);
        peak_thread(&args[0]);
        for (int i = 1; i < started; i++) pthread_join(th[i], NULL);
        double t = now_s() - t0;
        double gops = ops_per_iter(level, kind) * (double)iters * started / t / 1e9;
        if (gops > best) best = gops;
    }
    return best;
}

void ds_bench_peak_measure(ds_isa level, int n_threads, ds_bench_peak *out) {
    memset(out, 0, sizeof *out);
    out->level = level;
    int n = n_threads < 1 ? 1 : n_threads > MAX_THREADS ? MAX_THREADS : n_threads;
    out->int8_gops = measure(level, K_INT8, n);
    out->f32_gops = measure(level, K_F32, n);
    if (level == DS_ISA_AVX512 && ds_cpu()->avx512bf16) out->bf16_gops = measure(level, K_BF16, n);
}
