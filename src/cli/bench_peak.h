/* bench_peak.h - the compute limits of the machine for `deltaserve bench`'s
 * roofline: short loops of the instructions the kernels' products are made
 * of, on n threads at once, timed. Each loop keeps 12 independent
 * accumulators so that latency hides behind throughput; the figure is the
 * best of a few passes, in GOP/s (1e9 operations: a multiply-add counts 2).
 *
 *   int8: the integer dot product of the quantised kernels (AVX-512: VPDPBUSD
 *         on 64 byte pairs; AVX2: VPMADDUBSW + VPMADDWD + VPADDD on 32);
 *   bf16: VDPBF16PS (32 pairs), only where the CPU has AVX512_BF16;
 *   f32:  FMA on 16 (AVX-512) or 8 (AVX2) lanes; the reference level a
 *         scalar multiply-add loop.
 * A limit the level cannot run is 0. */
#ifndef DS_BENCH_PEAK_H
#define DS_BENCH_PEAK_H

#include "kernels/cpu.h"

typedef struct {
    ds_isa level;
    double int8_gops, bf16_gops, f32_gops;
} ds_bench_peak;

/* Measures the limits of `level` on n_threads threads (about 0.1-0.3 s). */
void ds_bench_peak_measure(ds_isa level, int n_threads, ds_bench_peak *out);

#endif
