/* bench_engine.h - engine-level benchmarks of `deltaserve bench`:
 *   --workload shared-prefix: time to first token with the prefix cache cold
 *     and warm (a 2,048-token shared prefix plus a 64-token suffix), and
 *     output throughput at 1, 4, 16 and 64 concurrent requests;
 *   --workload branch: for several checkpoint intervals, time to first token
 *     of requests that branch off a cached prompt at arbitrary positions;
 *   --spec-tokens K: decode speed with MTP speculation (K drafts) and without,
 *     for one sequence and for `batch` at once (how many verify per step), and
 *     the cost of one verify pass of K+1 tokens relative to one decode step.
 *     spec_state_bytes: the verify records' budget (0: the engine's default);
 *     spec_max_batch: the engine's drafting limit (-1: its default); temp: 0
 *     decodes greedily, otherwise sequence i samples at temp with seed seed + i. */
#ifndef DS_BENCH_ENGINE_H
#define DS_BENCH_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "loading/model_file.h"

/* How the benchmarks below open their model (--mtp-model, --fp8-as); copied. */
void ds_bench_load_options(const ds_load_options *lo);
/* Returns the process exit code. */
int ds_bench_shared_prefix(const char *path, int n_threads, int prefix_len, int json);
int ds_bench_branch(const char *path, int n_threads, int prefix_len, int json);
/* spec_vocab: drafts over the first spec_vocab token ids (0: all; < 0: the engine's default) */
int ds_bench_spec(const char *path, int n_threads, int spec_tokens, size_t spec_state_bytes, int spec_max_batch,
                  int batch, int n_gen, float temp, uint64_t seed, int json, int spec_vocab);

#endif
