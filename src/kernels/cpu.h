/* cpu.h - what the processor we run on can do, found once at run time, and
 * the kernel level chosen from it.
 *
 * Levels, best last: REF (portable scalar C, the definition every other path
 * is tested against), AVX2 (AVX2 + FMA + F16C), AVX512 (F, BW, VL, DQ and
 * VNNI; BF16 dot products when the CPU has AVX512_BF16). A level is usable
 * only when cpuid reports the instructions AND the OS saves the registers
 * (XGETBV), so a VM that hides the AVX-512 state falls back cleanly.
 *
 * DS_KERNELS=ref|avx2|avx512 in the environment caps the level (it never
 * raises it above what the CPU has); ds_cpu_set_level() does the same from
 * code (tests use it to run every path on one machine). */
#ifndef DS_CPU_H
#define DS_CPU_H

typedef enum { DS_ISA_REF = 0, DS_ISA_AVX2 = 1, DS_ISA_AVX512 = 2, DS_ISA_COUNT } ds_isa;

typedef struct {
    int avx2, fma, f16c;                         /* the AVX2 level */
    int avx512f, avx512bw, avx512vl, avx512dq;   /* the AVX512 level ... */
    int avx512vnni;                              /* ... needs VNNI too */
    int avx512bf16;                              /* optional: BF16 dot products */
    int os_avx, os_avx512;                       /* XGETBV: the OS saves YMM / ZMM and mask state */
    int n_cores;                                 /* online processors */
} ds_cpu_features;

const ds_cpu_features *ds_cpu(void);
/* The best level this CPU supports. */
ds_isa ds_cpu_best_level(void);
/* The level kernels use now: the best one, capped by DS_KERNELS. */
ds_isa ds_cpu_level(void);
/* Caps the level (clamped to what the CPU supports); returns the level set. */
ds_isa ds_cpu_set_level(ds_isa level);
const char *ds_isa_name(ds_isa level);

#endif
