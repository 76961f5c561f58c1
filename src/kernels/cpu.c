/* cpu.c - run-time CPU feature detection (see cpu.h). */
#include "kernels/cpu.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define DS_X86 1
static unsigned long long read_xcr0(void) {
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
#endif

static ds_cpu_features features;
static atomic_int detected;           /* 0: not yet, 1: done */
static atomic_int level_now = -1;     /* -1: not chosen yet */

static void detect(ds_cpu_features *f) {
    memset(f, 0, sizeof *f);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    f->n_cores = n > 0 ? (int)n : 1;
#ifdef DS_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    f->fma = (c >> 12) & 1;
    f->f16c = (c >> 29) & 1;
    if (osxsave && avx) {
        unsigned long long xcr0 = read_xcr0();
        f->os_avx = (xcr0 & 0x6) == 0x6;             /* XMM and YMM state */
        f->os_avx512 = f->os_avx && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    }
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        f->avx2 = (b >> 5) & 1;
        f->avx512f = (b >> 16) & 1;
        f->avx512dq = (b >> 17) & 1;
        f->avx512bw = (b >> 30) & 1;
        f->avx512vl = (b >> 31) & 1;
        f->avx512vnni = (c >> 11) & 1;
        unsigned max_sub = a;
        if (max_sub >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            f->avx512bf16 = (a >> 5) & 1;
        }
    }
    if (!f->os_avx) f->avx2 = f->fma = f->f16c = 0;
    if (!f->os_avx512) f->avx512f = f->avx512bw = f->avx512vl = f->avx512dq = f->avx512vnni = f->avx512bf16 = 0;
#endif
}

const ds_cpu_features *ds_cpu(void) {
    if (!atomic_load(&detected)) {
        ds_cpu_features f;
        detect(&f); /* idempotent: racing threads compute the same thing */
        features = f;
        atomic_store(&detected, 1);
    }
    return &features;
}

ds_isa ds_cpu_best_level(void) {
    const ds_cpu_features *f = ds_cpu();
    int avx2 = f->avx2 && f->fma && f->f16c;
    if (avx2 && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni) return DS_ISA_AVX512;
    if (avx2) return DS_ISA_AVX2;
    return DS_ISA_REF;
}

static ds_isa level_from_env(void) {
    ds_isa best = ds_cpu_best_level();
    const char *s = getenv("DS_KERNELS");
    if (!s || !*s) return best;
    ds_isa want = best;
    if (!strcmp(s, "ref") || !strcmp(s, "scalar")) want = DS_ISA_REF;
    else if (!strcmp(s, "avx2")) want = DS_ISA_AVX2;
    else if (!strcmp(s, "avx512")) want = DS_ISA_AVX512;
    return want < best ? want : best;
}

ds_isa ds_cpu_level(void) {
    int l = atomic_load(&level_now);
    if (l < 0) {
        l = (int)level_from_env();
        atomic_store(&level_now, l);
    }
    return (ds_isa)l;
}

ds_isa ds_cpu_set_level(ds_isa level) {
    ds_isa best = ds_cpu_best_level();
    if (level > best) level = best;
    if ((int)level < 0) level = DS_ISA_REF;
    atomic_store(&level_now, (int)level);
    return level;
}

const char *ds_isa_name(ds_isa level) {
    switch (level) {
    case DS_ISA_REF: return "ref";
    case DS_ISA_AVX2: return "avx2";
    case DS_ISA_AVX512: return "avx512";
    default: return "?";
    }
}
