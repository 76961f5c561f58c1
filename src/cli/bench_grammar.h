/* bench_grammar.h - `deltaserve bench --schema FILE` / `--grammar FILE`: what
 * constrained decoding costs.
 *   compile: JSON Schema -> GBNF (ds_json_schema_to_gbnf) -> ds_grammar_parse,
 *     the first time and the mean of repeats (a GBNF file: the parse alone);
 *   masks: per tokenizer (the model's, and --tokenizer PATH), the time of one
 *     ds_matcher_fill_mask over random walks through the grammar (seeded
 *     random allowed tokens, leaning to ones that close the text as it
 *     grows): mean, 99th percentile and maximum, on a fresh grammar (states
 *     met for the first time) and the same walks again (its caches warm);
 *   decode: tokens/s through the engine with every request constrained by
 *     the grammar (ds_grammar_filter) and without, one sequence and `conc`
 *     at once (a closed loop: a finished request is replaced at once). */
#ifndef DS_BENCH_GRAMMAR_H
#define DS_BENCH_GRAMMAR_H

#include "loading/model_file.h"

typedef struct {
    const char *model_path;
    const ds_load_options *load;
    int n_threads;
    const char *schema_path;    /* one of these two */
    const char *grammar_path;
    const char *tokenizer_path; /* NULL: the model's tokenizer only */
    int walks;                  /* per tokenizer and pass */
    int max_steps;              /* tokens per walk, at most */
    int n_gen;                  /* decode: tokens per request, at most (0: skip the decode test) */
    int conc;                   /* decode: the concurrent run's requests at once (<= 1: skip it) */
    uint64_t seed;
    int json;
} ds_bench_grammar_params;

/* Returns the process exit code. */
int ds_bench_grammar(const ds_bench_grammar_params *p);

#endif
