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
    /* found for the report only: no kernel uses these in this build */
    int amx_tile, amx_int8, amx_bf16;            /* AMX tiles (usable only with os_amx and the permission below) */
    int os_amx;                                  /* XCR0: the OS can save the tile configuration and data */
    int avx512fp16, avx_vnni, avx_vnni_int8;
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

/* AMX needs the kernel's permission for the tile data state (Linux: arch_prctl
 * ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA) before the first tile
 * instruction. Asks once; returns 1 when granted, 0 when the CPU or the OS
 * lacks AMX or the kernel refuses (then AMX paths must not run). */
int ds_cpu_amx_permitted(void);

/* An extension the build might use and what became of it on this CPU. */
typedef struct {
    const char *name;    /* "AMX-INT8" */
    int cpu_has;         /* cpuid (and the OS state) reports it */
    int kernel;          /* this build has a kernel path for it */
    int used;            /* the path runs here: kernel && cpu_has (&& permitted for AMX) */
} ds_cpu_ext;

/* The extensions the report names (levels and the optional extensions), in a fixed order; *n gets
 * the count. */
const ds_cpu_ext *ds_cpu_extensions(int *n);
/* One line: "avx512 kernels; AVX2 yes, AVX-512 yes, ..., AMX-INT8 no (CPU lacks it)". */
void ds_cpu_describe(char *buf, int size);

#endif
