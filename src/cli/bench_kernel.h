/* bench_kernel.h - `deltaserve bench --kernel`: the matrix product alone per
 * weight type (bench_kernel.c). */
#ifndef DS_BENCH_KERNEL_H
#define DS_BENCH_KERNEL_H

/* types, shapes ("RxK") and token counts as comma-separated lists; threads <= 0:
 * one per core. Returns the exit status. */
int ds_bench_kernels(const char *types, const char *shapes, const char *tokens, int threads, int reps);

#endif
