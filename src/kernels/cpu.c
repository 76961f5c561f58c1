/* cpu.c - run-time CPU feature detection (see cpu.h). */
#include "kernels/cpu.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/syscall.h>
#endif

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
        f->avx512fp16 = (d >> 23) & 1;
        f->amx_bf16 = (d >> 22) & 1;
        f->amx_tile = (d >> 24) & 1;
        f->amx_int8 = (d >> 25) & 1;
        if (max_sub >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            f->avx512bf16 = (a >> 5) & 1;
            f->avx_vnni = (a >> 4) & 1;
            f->avx_vnni_int8 = (d >> 4) & 1;
        }
    }
    if (osxsave) f->os_amx = (read_xcr0() & 0x60000) == 0x60000; /* XTILECFG and XTILEDATA */
    if (!f->os_amx || !f->amx_tile) f->amx_tile = f->amx_int8 = f->amx_bf16 = 0;
    if (!f->os_avx) f->avx_vnni = f->avx_vnni_int8 = 0;
    if (!f->os_avx) f->avx2 = f->fma = f->f16c = 0;
    if (!f->os_avx512)
        f->avx512f = f->avx512bw = f->avx512vl = f->avx512dq = f->avx512vnni = f->avx512bf16 = f->avx512fp16 = 0;
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

static atomic_int amx_state = -1; /* -1: not asked yet */

int ds_cpu_amx_permitted(void) {
    int st = atomic_load(&amx_state);
    if (st >= 0) return st;
    st = 0;
#if defined(DS_X86) && defined(__linux__) && defined(SYS_arch_prctl)
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 }; /* from the kernel's uapi asm/prctl.h */
    if (ds_cpu()->amx_tile) st = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#endif
    atomic_store(&amx_state, st);
    return st;
}

const ds_cpu_ext *ds_cpu_extensions(int *n) {
    static ds_cpu_ext ext[8];
    const ds_cpu_features *f = ds_cpu();
    int avx2 = f->avx2 && f->fma && f->f16c;
    int avx512 = ds_cpu_best_level() == DS_ISA_AVX512;
#if defined(__x86_64__)
    int x86 = 1;
#else
    int x86 = 0;
#endif
    /* no AMX, AVX512-FP16 or AVX-VNNI kernels exist yet: such a CPU runs the AVX-512 or AVX2 paths */
    ext[0] = (ds_cpu_ext){"AVX2", avx2, x86, 0};
    ext[1] = (ds_cpu_ext){"AVX-512", avx512, x86, 0};
    ext[2] = (ds_cpu_ext){"AVX512-BF16", avx512 && f->avx512bf16, x86, 0};
    ext[3] = (ds_cpu_ext){"AMX-INT8", f->amx_int8, 0, 0};
    ext[4] = (ds_cpu_ext){"AMX-BF16", f->amx_bf16, 0, 0};
    ext[5] = (ds_cpu_ext){"AVX512-FP16", f->avx512fp16, 0, 0};
    ext[6] = (ds_cpu_ext){"AVX-VNNI", f->avx_vnni, 0, 0};
    ext[7] = (ds_cpu_ext){"AVX-VNNI-INT8", f->avx_vnni_int8, 0, 0};
    for (int i = 0; i < 8; i++) ext[i].used = ext[i].kernel && ext[i].cpu_has;
    *n = 8;
    return ext;
}

void ds_cpu_describe(char *buf, int size) {
    int n, len = snprintf(buf, (size_t)size, "%s kernels", ds_isa_name(ds_cpu_level()));
    const ds_cpu_ext *ext = ds_cpu_extensions(&n);
    for (int i = 0; i < n && len >= 0 && len < size; i++) {
        const char *what = ext[i].used ? "yes"
                           : !ext[i].cpu_has ? "no (CPU lacks it)"
                           : strncmp(ext[i].name, "AMX", 3) ? "yes, no kernel for it in this build"
                           : ds_cpu_amx_permitted() ? "yes (tile state permitted), no kernel for it in this build"
                                                    : "yes, but the kernel refuses the tile state";
        len += snprintf(buf + len, (size_t)(size - len), "; %s %s", ext[i].name, what);
    }
}
