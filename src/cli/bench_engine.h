/* bench_engine.h - engine-level benchmarks of `deltaserve bench`:
 *   --workload shared-prefix: time to first token with the prefix cache cold
 *     and warm (a 2,048-token shared prefix plus a 64-token suffix), and
 *     output throughput at 1, 4, 16 and 64 concurrent requests;
 *   --workload branch: for several checkpoint intervals, time to first token
 *     of requests that branch off a cached prompt at arbitrary positions;
 *   --spec-tokens K: decode speed with MTP speculation (K drafts) and without,
 *     for one sequence and for `batch` at once (how many verify per step), and
 *     the cost of one verify pass of K+1 tokens relative to one decode step.
 *     With the batch policy it also says how often the plan drafted. */
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
typedef struct {
    int spec_tokens;
    size_t spec_state_bytes;    /* the verify records' budget (0: the engine's default) */
    int spec_max_batch;         /* the engine's drafting cap (-1: its default) */
    int spec_policy;            /* ds_spec_policy */
    int batch, n_gen;
    float temp;                 /* 0: greedy; else sequence i samples at temp with seed seed + i */
    int mix;                    /* 1: only the odd sequences sample (at temp), the even ones are greedy */
    uint64_t seed;
    int spec_vocab;             /* drafts over the first spec_vocab token ids (0: all; < 0: the engine's default) */
} ds_bench_spec_params;
int ds_bench_spec(const char *path, int n_threads, const ds_bench_spec_params *sp, int json);

#endif
