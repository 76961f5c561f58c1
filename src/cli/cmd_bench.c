/* cmd_bench.c - `deltaserve bench`: prefill and decode speed of a model file,
 * printed like llama.cpp's llama-bench so the two can be read side by side:
 *   ppN    one prompt of N tokens in one call, logits of the last (tokens/s);
 *   tgN    N tokens decoded one at a time from an empty context (tokens/s);
 *   bB     B sequences decoded together, N steps of B tokens (tokens/s in all);
 * each the mean and standard deviation of -r runs after a warm-up run. Also:
 * peak RSS against weights + caches, a read-bandwidth probe of the machine
 * (all threads streaming a buffer much larger than the caches), and the
 * bandwidth decode reaches: the weight bytes one decode step reads (active
 * experts only) times tg tokens/s; then the roofline of every decode test
 * (bench_roofline.h) against that probe and the compute peaks (bench_peak.h).
 * --depth D: every test starts after a context of D tokens (each sequence
 * prefilled once, its DeltaNet state kept and put back before each run), as
 * llama-bench's -d. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/args.h"
#include "cli/bench_engine.h"
#include "cli/bench_grammar.h"
#include "cli/bench_kernel.h"
#include "cli/bench_peak.h"
#include "cli/bench_roofline.h"
#include "cli/bench_vision.h"
#include "cli/cli_hub.h"
#include "cli/cli_model.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "kernels/cpu.h"
#include "loading/model_file.h"
#include "model/model.h"

#define PAGE 64
#define MAX_BATCHES 16
#define MAX_REPS 50

static void usage(FILE *f) {
    fprintf(f, "usage: deltaserve bench (-m PATH | -hf ORG/NAME[:QUANT]) [-p 512] [-n 128] [-t THREADS] [-b 1,2,4,8,16] [-r 3] [--depth D] [--json]\n"
               DS_CLI_HUB_HELP
               "  -p N        prompt tokens of the prefill test (0: skip)\n"
               "  -n N        decoded tokens of the decode tests (0: skip)\n"
               "  -t N        threads (default: one per core)\n"
               "  -b LIST     batch sizes of the batched decode test (0: skip)\n"
               "  -r N        repetitions of each test (default 3)\n"
               "  --depth D   run every test after a context of D tokens (each sequence prefilled first)\n"
               "  --json      one JSON object instead of the table\n"
               "  --kernel TYPE[,TYPE...] [--shape RxK[,RxK...]] [--tokens 1,64]\n"
               "              the matrix product alone for each weight type on random blocks (no model):\n"
               "              ms per call, GB/s of the file's weight bytes, GFLOP/s (default shapes\n"
               "              1024x3584,248320x1024: a projection and an output head)\n"
               "  --workload shared-prefix [--prefix-len N]\n"
               "              through the engine: time to first token with the prefix cache cold and warm\n"
               "              (N shared tokens, default 2048, + 64), and throughput at 1/4/16/64 requests\n"
               "  --workload branch [--prefix-len N]\n"
               "              through the engine, for checkpoint intervals 0 (prompt end only), 128, 256,\n"
               "              512, 1024: time to first token of requests branching off a cached prompt\n"
               "  --spec-tokens K [--spec-batch N] [--spec-state-mb X] [--spec-max-batch M] [--temp T] [--seed S]\n"
               "              decode with and without MTP speculation (K drafts), one sequence and N at\n"
               "              once (default 8, at most 64; 1: skip), and the cost of a verify pass of K+1\n"
               "              tokens against a decode step (verify_cost_ratio); X: the verify records'\n"
               "              budget in MiB (default: the engine's, 256); M: no drafts while more than M\n"
               "              sequences run (default 0: no cap); T: the sequences sample at temperature T\n"
               "              (default 0: greedy), sequence i with seed S + i (default 0)\n"
               "  --spec-policy batch|request  with --spec-tokens: who drafts how many (default batch: planned\n"
               "              per step from measured costs; request: each sequence by its own acceptance)\n"
               "  --spec-mix  with --spec-tokens and --temp T > 0: only the odd sequences sample at T, the\n"
               "              even ones decode greedily\n"
               "  --spec-vocab V  with --spec-tokens: drafts over the first V token ids only (the most\n"
               "              frequent; the head reads V rows of the output head), verification over all\n"
               "              (default %d; 0: the whole vocabulary)\n"
               "  --image WxH[,WxH...] [--mmproj FILE]\n"
               "              the vision tower alone: encoder time per image and patches/s for images of these\n"
               "              sizes in pixels (each side rounded to a multiple of 32; random pixels)\n"
               "  --schema FILE | --grammar FILE [--tokenizer PATH] [--walks W] [--walk-len L] [--conc C]\n"
               "              constrained decoding: the schema's compile time (JSON Schema -> grammar; a GBNF\n"
               "              file: its parse), the time of one token mask (mean, p99, max) over W random\n"
               "              walks (default 20) of at most L tokens (default 256) for the model's tokenizer\n"
               "              and PATH's (a tokenizer.json), on a fresh grammar then cached, and decode\n"
               "              tokens/s with the grammar and without, alone and C at once (default 16; 1:\n"
               "              skip), up to -n tokens per request (0: skip)\n"
               DS_CLI_LOAD_USAGE, DS_SPEC_VOCAB_DEFAULT);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------ */
/* Read-bandwidth probe                                                      */

/* unsigned: the sums wrap, which is defined, and only the reads matter */
typedef unsigned long long v4ll __attribute__((vector_size(32)));

typedef struct {
    const v4ll *p;
    size_t n;
    unsigned long long sum;
} probe_arg;

static void *probe_thread(void *arg) {
    probe_arg *a = arg;
    v4ll s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    for (size_t i = 0; i + 4 <= a->n; i += 4) {
        s0 += a->p[i];
        s1 += a->p[i + 1];
        s2 += a->p[i + 2];
        s3 += a->p[i + 3];
    }
    v4ll s = s0 + s1 + s2 + s3;
    a->sum = s[0] + s[1] + s[2] + s[3];
    return NULL;
}

/* GB/s (1e9 bytes) of the best of a few passes of nth threads over 512 MiB */
static double probe_bandwidth(int nth) {
    size_t bytes = (size_t)512 << 20, n = bytes / sizeof(v4ll);
    v4ll *buf = aligned_alloc(64, bytes);
    if (!buf) return 0;
    memset(buf, 1, bytes);
    pthread_t th[64];
    probe_arg args[64];
    if (nth > 64) nth = 64;
    double best = 0;
    for (int pass = 0; pass < 5; pass++) {
        double t0 = now();
        for (int i = 0; i < nth; i++) {
            args[i] = (probe_arg){buf + n * (size_t)i / (size_t)nth, n / (size_t)nth, 0};
            if (i && pthread_create(&th[i], NULL, probe_thread, &args[i]) != 0) args[i].n = 0;
        }
        probe_thread(&args[0]);
        for (int i = 1; i < nth; i++)
            if (args[i].n) pthread_join(th[i], NULL);
        double gbs = (double)bytes / (now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    free(buf);
    return best;
}

static long long status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long v = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl)) v = atoll(line + kl);
    if (f) fclose(f);
    return v;
}

static void reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

/* ------------------------------------------------------------------------ */
/* Model bytes                                                               */

/* Weight bytes of the file, and the bytes one decode step reads: every
 * matrix but the embedding lookup (unless it is also the output) and the MTP
 * block, experts counted for the share a token uses. */
static void model_bytes(const ds_model_file *f, double *total, double *per_token) {
    const ds_model_config *c = ds_model_config_of(f);
    char mtp[32];
    snprintf(mtp, sizeof mtp, "blk.%d.", c->n_layer);
    *total = *per_token = 0;
    for (int i = 0; i < ds_model_n_tensors(f); i++) {
        const ds_tensor *t = ds_model_tensor_at(f, i);
        double b = (double)ds_dtype_row_bytes(t->type, t->ne[0]);
        for (int d = 1; d < t->n_dims; d++) b *= (double)t->ne[d];
        *total += b;
        if (t->n_dims < 2 || !strncmp(t->name, mtp, strlen(mtp))) continue;
        if (!strcmp(t->name, "token_embd.weight") && !c->tied_embeddings) continue;
        if (strstr(t->name, "_exps") && c->n_expert > 0) b *= (double)c->n_expert_used / c->n_expert;
        *per_token += b;
    }
}

/* ------------------------------------------------------------------------ */

typedef struct {
    ds_model *m;
    ds_kv_pool kv;
    ds_state_pool st;
    int32_t *pages;      /* [n_seq][pages_per_seq] */
    int pages_per_seq;
    ds_batch_token *toks;
    ds_batch_seq *seqs;
    float *logits;
    int V;
    int depth;           /* context every test starts from */
    float *saved;        /* [bmax][slot_floats]: the states after the depth prefill */
} rig;

static int run(rig *r, int n_seqs, int n_tok_each, int pos0, int all_logits, ds_seq_mode mode) {
    int n = 0;
    for (int s = 0; s < n_seqs; s++) {
        r->seqs[s] = (ds_batch_seq){.mode = mode, .pages = r->pages + (size_t)s * r->pages_per_seq,
                                    .n_pages = r->pages_per_seq, .state_slot = s};
        for (int i = 0; i < n_tok_each; i++, n++)
            r->toks[n] = (ds_batch_token){.token = (int32_t)((s * 131 + (pos0 + i) * 17 + 5) % (r->V < 1000 ? r->V : 1000)),
                                          .seq = s, .pos = pos0 + i,
                                          .want_logits = (uint8_t)(all_logits || i == n_tok_each - 1)};
    }
    ds_batch b = {.tokens = r->toks, .n_tokens = n, .seqs = r->seqs, .n_seqs = n_seqs, .logits = r->logits};
    ds_err e = {0};
    if (ds_model_forward(r->m, &r->kv, &r->st, &b, &e) != DS_OK) {
        fprintf(stderr, "deltaserve bench: %s\n", e.msg);
        return -1;
    }
    return 0;
}

/* The states of sequences [0, n) as every test starts: empty, or as the depth prefill left them. */
static void clear_states(rig *r, int n) {
    if (r->saved && r->st.n_slots && r->st.slot_floats) {
        memcpy(r->st.data, r->saved, (size_t)n * r->st.slot_floats * sizeof(float));
        return;
    }
    for (int s = 0; s < n; s++)
        if (r->st.n_slots) ds_state_clear(&r->st, s);
}

/* Prefills `depth` tokens into each of n sequences, chunk tokens per sequence and call (whole
 * DeltaNet chunks, so the cut changes nothing), and keeps the states for clear_states. Later
 * tests write K and V only at positions >= depth, so the cached prefix stays as it is. */
static int prefill_depth(rig *r, int n, int depth, int chunk) {
    for (int s = 0; s < n; s++)
        if (r->st.n_slots) ds_state_clear(&r->st, s);
    for (int pos = 0; pos < depth; pos += chunk) {
        int len = depth - pos < chunk ? depth - pos : chunk;
        if (run(r, n, len, pos, 0, DS_SEQ_PREFILL)) return -1;
    }
    size_t floats = (size_t)n * r->st.slot_floats;
    r->saved = malloc((floats ? floats : 1) * sizeof(float));
    if (!r->saved) return -1;
    if (floats) memcpy(r->saved, r->st.data, floats * sizeof(float));
    r->depth = depth;
    return 0;
}

/* seconds of one prefill of p tokens */
static double time_pp(rig *r, int p) {
    clear_states(r, 1);
    double t0 = now();
    if (run(r, 1, p, r->depth, 0, DS_SEQ_PREFILL)) return -1;
    return now() - t0;
}

/* seconds of n decode steps of b sequences */
static double time_tg(rig *r, int b, int n) {
    clear_states(r, b);
    double t0 = now();
    for (int i = 0; i < n; i++)
        if (run(r, b, 1, r->depth + i, 1, DS_SEQ_DECODE)) return -1;
    return now() - t0;
}

typedef struct {
    char name[32];
    double mean, sd;
    int b;
} result;

static void stats(const double *v, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

int ds_cmd_bench(int argc, char **argv) {
    const char *path = NULL, *blist = "1,2,4,8,16", *workload = NULL, *kernel = NULL;
    const char *kshape = "1024x3584,248320x1024", *ktokens = "1,64";
    const char *schema = NULL, *grammar = NULL, *tokenizer = NULL, *images = NULL;
    long walks = 20, walk_len = 256, conc = 16;
    long p = 512, n = 128, threads = 0, reps = 3, depth = 0, spec = 0, prefix = 2048, spec_batch = 8, spec_max_batch = -1;
    long spec_vocab = -1; /* not given: the engine's default */
    double spec_mb = 0, temp = 0;
    uint64_t seed = 0;
    int json = 0, lr, spec_policy = DS_SPEC_POLICY_BATCH, spec_mix = 0;
    ds_load_options lo = {0};
    static ds_cli_hub hub; /* its paths are used until the process ends */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--spec-mix")) { spec_mix = 1; continue; }
        int hf = ds_cli_hub_option(&hub, argc, argv, &i);
        if (hf) { if (hf < 0) return 2; continue; }
        if (ds_cli_load_flag(a, &lo)) continue;
        if (!(v = ds_arg_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) path = v;
        else if (!strcmp(a, "-p")) { if (ds_arg_int(a, v, 0, 1 << 16, &p)) return 2; }
        else if (!strcmp(a, "-n")) { if (ds_arg_int(a, v, 0, 1 << 16, &n)) return 2; }
        else if (!strcmp(a, "-t")) { if (ds_arg_int(a, v, 1, 1024, &threads)) return 2; }
        else if (!strcmp(a, "-r")) { if (ds_arg_int(a, v, 1, MAX_REPS, &reps)) return 2; }
        else if (!strcmp(a, "--depth")) { if (ds_arg_int(a, v, 0, 1 << 20, &depth)) return 2; }
        else if (!strcmp(a, "-b")) blist = v;
        else if (!strcmp(a, "--workload")) workload = v;
        else if (!strcmp(a, "--kernel")) kernel = v;
        else if (!strcmp(a, "--shape")) kshape = v;
        else if (!strcmp(a, "--tokens")) ktokens = v;
        else if (!strcmp(a, "--prefix-len")) { if (ds_arg_int(a, v, 64, 1 << 20, &prefix)) return 2; }
        else if (!strcmp(a, "--spec-tokens")) { if (ds_arg_int(a, v, 1, 8, &spec)) return 2; }
        else if (!strcmp(a, "--spec-batch")) { if (ds_arg_int(a, v, 1, 64, &spec_batch)) return 2; }
        else if (!strcmp(a, "--spec-max-batch")) { if (ds_arg_int(a, v, 0, 1 << 16, &spec_max_batch)) return 2; }
        else if (!strcmp(a, "--spec-policy")) {
            if (!strcmp(v, "batch")) spec_policy = DS_SPEC_POLICY_BATCH;
            else if (!strcmp(v, "request")) spec_policy = DS_SPEC_POLICY_REQUEST;
            else { fprintf(stderr, "deltaserve bench: --spec-policy '%s' is not batch or request\n", v); return 2; }
        }
        else if (!strcmp(a, "--spec-vocab")) { if (ds_arg_int(a, v, 0, INT_MAX, &spec_vocab)) return 2; }
        else if (!strcmp(a, "--spec-state-mb")) { if (ds_arg_float(a, v, 0.001, 1 << 22, &spec_mb)) return 2; }
        else if (!strcmp(a, "--temp")) { if (ds_arg_float(a, v, 0, 100, &temp)) return 2; }
        else if (!strcmp(a, "--seed")) { if (ds_arg_u64(a, v, &seed)) return 2; }
        else if (!strcmp(a, "--schema")) schema = v;
        else if (!strcmp(a, "--grammar")) grammar = v;
        else if (!strcmp(a, "--tokenizer")) tokenizer = v;
        else if (!strcmp(a, "--walks")) { if (ds_arg_int(a, v, 1, 100000, &walks)) return 2; }
        else if (!strcmp(a, "--walk-len")) { if (ds_arg_int(a, v, 1, 1 << 20, &walk_len)) return 2; }
        else if (!strcmp(a, "--conc")) { if (ds_arg_int(a, v, 1, 64, &conc)) return 2; }
        else if (!strcmp(a, "--image")) images = v;
        else if (!strcmp(a, "--mmproj")) lo.mmproj_path = v;
        else if ((lr = ds_cli_load_arg("bench", a, v, &lo))) { if (lr < 0) return 2; }
        else { fprintf(stderr, "deltaserve bench: unknown option '%s'\n", a); usage(stderr); return 2; }
    }
    if (kernel) return ds_bench_kernels(kernel, kshape, ktokens, (int)threads, (int)reps);
    int hub_rc = ds_cli_hub_model(&hub, "bench", &path);
    if (hub_rc) return hub_rc;
    if (hub.res.mtp && !lo.mtp_path) lo.mtp_path = hub.res.mtp; /* the head file beside it */
    if (!path) { usage(stderr); return 2; }
    lo.n_threads = (int)threads;
    if (images) return ds_bench_vision(path, &lo, images, (int)threads, (int)reps, json);
    ds_bench_load_options(&lo);
    /* engine-level benchmarks (bench_engine.c) */
    if (workload && strcmp(workload, "shared-prefix") != 0 && strcmp(workload, "branch") != 0) {
        fprintf(stderr, "deltaserve bench: --workload '%s' is not shared-prefix or branch\n", workload);
        return 2;
    }
    if (schema && grammar) {
        fprintf(stderr, "deltaserve bench: --schema and --grammar: give one of them\n");
        return 2;
    }
    if (tokenizer && !schema && !grammar) {
        fprintf(stderr, "deltaserve bench: --tokenizer goes with --schema or --grammar\n");
        return 2;
    }
    if (schema || grammar) {
        ds_bench_grammar_params gp = {.model_path = path, .load = &lo, .n_threads = (int)threads, .schema_path = schema,
                                      .grammar_path = grammar, .tokenizer_path = tokenizer, .walks = (int)walks,
                                      .max_steps = (int)walk_len, .n_gen = (int)n, .conc = (int)conc, .seed = seed,
                                      .json = json};
        return ds_bench_grammar(&gp);
    }
    if (workload && !strcmp(workload, "branch")) return ds_bench_branch(path, (int)threads, (int)prefix, json);
    if (workload) return ds_bench_shared_prefix(path, (int)threads, (int)prefix, json);
    if (spec_mix && !(spec && temp > 0)) {
        fprintf(stderr, "deltaserve bench: --spec-mix goes with --spec-tokens K and --temp T > 0 (the sampled half's)\n");
        return 2;
    }
    if (spec) {
        ds_bench_spec_params sp = {.spec_tokens = (int)spec, .spec_state_bytes = (size_t)(spec_mb * (1 << 20)),
                                   .spec_max_batch = (int)spec_max_batch, .spec_policy = spec_policy,
                                   .batch = (int)spec_batch, .n_gen = (int)n, .temp = (float)temp, .mix = spec_mix,
                                   .seed = seed, .spec_vocab = (int)spec_vocab};
        return ds_bench_spec(path, (int)threads, &sp, json);
    }
    int bs[MAX_BATCHES], nb = 0, bmax = 1;
    for (const char *s = blist; *s && nb < MAX_BATCHES;) {
        char *end;
        long b = strtol(s, &end, 10);
        if (end == s || b < 0 || b > 512 || (*end && *end != ',')) {
            fprintf(stderr, "deltaserve bench: -b: '%s' is not a list of batch sizes\n", blist);
            return 2;
        }
        if (b > 0) bs[nb++] = (int)b;
        if (b > bmax) bmax = (int)b;
        s = *end ? end + 1 : end;
    }
    if (n == 0) nb = 0;

    int nth = threads > 0 ? (int)threads : ds_cpu()->n_cores;
    double probe = probe_bandwidth(nth);
    ds_bench_peak peak = {.level = ds_cpu_level()};
    if (n > 0) ds_bench_peak_measure(ds_cpu_level(), nth, &peak); /* for the decode tests' roofline */
    reset_peak_rss();

    ds_err e = {0};
    ds_model_file *file = NULL;
    rig r;
    memset(&r, 0, sizeof r);
    if (ds_model_open_ex(path, &lo, &file, &e) != DS_OK) {
        fprintf(stderr, "deltaserve bench: %s\n", e.msg);
        return 1;
    }
    double t_load = now();
    int max_tok = (int)(p > bmax ? p : bmax);
    /* the depth prefill: up to 4096 tokens a call, whole 64-token chunks per sequence */
    int depth_chunk = 0;
    if (depth > 0) {
        int want = (int)(depth * bmax < 4096 ? depth * bmax : 4096);
        if (want > max_tok) max_tok = want;
        depth_chunk = max_tok / bmax;
        if (depth_chunk > 64) depth_chunk -= depth_chunk % 64;
        if (depth_chunk < 1) depth_chunk = 1;
    }
    ds_model_params mp = {.max_batch_tokens = max_tok > 0 ? max_tok : 1, .n_threads = (int)threads};
    int rc = 1;
    if (ds_model_new(file, &mp, &r.m, &e) != DS_OK) {
        fprintf(stderr, "deltaserve bench: %s\n", e.msg);
        ds_model_close(file);
        return 1;
    }
    t_load = now() - t_load;
    const ds_model_config *c = ds_model_cfg(r.m);
    r.V = c->n_vocab;
    int span = (int)depth + (int)(p > n ? p : n) + 1;
    r.pages_per_seq = (span + PAGE - 1) / PAGE;
    int n_attn = ds_model_n_attn_layers(r.m);
    size_t page_bytes = (size_t)(n_attn ? n_attn : 1) * PAGE * (size_t)c->n_head_kv * (size_t)c->head_dim * 2 * sizeof(float);
    size_t kv_bytes = page_bytes * (size_t)r.pages_per_seq * (size_t)bmax;
    if (ds_kv_pool_init(&r.kv, n_attn ? n_attn : 1, c->n_head_kv, c->head_dim, PAGE, kv_bytes, &e) != DS_OK ||
        ds_state_pool_init(&r.st, ds_model_n_gdn_layers(r.m), c->conv_kernel, ds_model_conv_dim(r.m), c->lin_v_heads,
                           c->lin_k_dim, c->lin_v_dim, bmax, &e) != DS_OK) {
        fprintf(stderr, "deltaserve bench: %s\n", e.msg);
        goto out;
    }
    size_t state_bytes = r.st.slot_floats * sizeof(float) * (size_t)bmax;
    r.pages = malloc((size_t)r.pages_per_seq * (size_t)bmax * sizeof *r.pages);
    r.toks = malloc((size_t)(max_tok > 0 ? max_tok : 1) * sizeof *r.toks);
    r.seqs = malloc((size_t)bmax * sizeof *r.seqs);
    r.logits = malloc((size_t)bmax * (size_t)r.V * sizeof(float));
    if (!r.pages || !r.toks || !r.seqs || !r.logits) {
        fprintf(stderr, "deltaserve bench: out of memory\n");
        goto out;
    }
    for (int i = 0; i < r.pages_per_seq * bmax; i++) r.pages[i] = i;
    if (depth > 0 && prefill_depth(&r, bmax, (int)depth, depth_chunk)) {
        fprintf(stderr, "deltaserve bench: the prefill of --depth %ld failed\n", depth);
        goto out;
    }
    char at[24] = "";
    if (depth > 0) snprintf(at, sizeof at, " @ d%ld", depth);

    result res[MAX_BATCHES + 2];
    int nres = 0;
    double v[MAX_REPS];
    if (p > 0) {
        if (time_pp(&r, (int)(p < 32 ? p : 32)) < 0) goto out; /* warm-up */
        for (int k = 0; k < reps; k++) {
            double t = time_pp(&r, (int)p);
            if (t < 0) goto out;
            v[k] = (double)p / t;
        }
        snprintf(res[nres].name, sizeof res[nres].name, "pp%ld%s", p, at);
        res[nres].b = 0;
        stats(v, (int)reps, &res[nres].mean, &res[nres].sd);
        nres++;
    }
    double tg = 0;
    if (n > 0) {
        if (time_tg(&r, 1, (int)(n < 8 ? n : 8)) < 0) goto out;
        for (int k = 0; k < reps; k++) {
            double t = time_tg(&r, 1, (int)n);
            if (t < 0) goto out;
            v[k] = (double)n / t;
        }
        snprintf(res[nres].name, sizeof res[nres].name, "tg%ld%s", n, at);
        res[nres].b = 1;
        stats(v, (int)reps, &res[nres].mean, &res[nres].sd);
        tg = res[nres].mean;
        nres++;
    }
    for (int i = 0; i < nb; i++) {
        if (time_tg(&r, bs[i], (int)(n < 4 ? n : 4)) < 0) goto out;
        for (int k = 0; k < reps; k++) {
            double t = time_tg(&r, bs[i], (int)n);
            if (t < 0) goto out;
            v[k] = (double)bs[i] * (double)n / t;
        }
        snprintf(res[nres].name, sizeof res[nres].name, "b%d tg%ld%s", bs[i], n, at);
        res[nres].b = bs[i];
        stats(v, (int)reps, &res[nres].mean, &res[nres].sd);
        nres++;
    }
    double wbytes, tok_bytes;
    model_bytes(file, &wbytes, &tok_bytes);
    double decode_gbs = tg * tok_bytes / 1e9;
    long long hwm = status_kb("VmHWM:"), anon = status_kb("RssAnon:"), filek = status_kb("RssFile:");
    double peak_rss = hwm > 0 ? (double)hwm * 1024.0 : 0;
    double budget = wbytes + (double)kv_bytes + (double)state_bytes;
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const char *isa = ds_isa_name(ds_cpu_level());
    /* the roofline of every decode test: tokens attend to depth + 1 .. depth + n positions */
    ds_roofline_row roof[MAX_BATCHES + 2];
    int nroof = 0;
    for (int i = 0; i < nres; i++) {
        if (res[i].b < 1 || res[i].mean <= 0) continue;
        ds_roofline_counts rc_;
        ds_roofline_count(file, res[i].b, (double)depth + (double)(n + 1) / 2, (int)sizeof(float), (int)sizeof(float),
                          ds_cpu_level(), &rc_);
        ds_roofline_eval(&rc_, (double)res[i].b / res[i].mean, probe, &peak, &roof[nroof]);
        roof[nroof++].test = res[i].name;
    }
    if (json) {
        printf("{\"model\": \"%s\", \"weights_bytes\": %.0f, \"threads\": %d, \"kernels\": \"%s\", \"load_s\": %.3f, "
               "\"depth\": %ld", name, wbytes, nth, isa, t_load, depth);
        for (int i = 0; i < nres; i++)
            if (res[i].b == 0) printf(", \"pp\": %ld, \"pp_tok_s\": %.3f, \"pp_tok_s_sd\": %.3f", p, res[i].mean, res[i].sd);
            else if (!strncmp(res[i].name, "tg", 2))
                printf(", \"tg\": %ld, \"tg_tok_s\": %.3f, \"tg_tok_s_sd\": %.3f", n, res[i].mean, res[i].sd);
        printf(", \"batched\": [");
        int first = 1;
        for (int i = 0; i < nres; i++)
            if (res[i].name[0] == 'b') {
                printf("%s{\"b\": %d, \"tok_s\": %.3f, \"tok_s_sd\": %.3f}", first ? "" : ", ", res[i].b, res[i].mean,
                       res[i].sd);
                first = 0;
            }
        printf("], \"peak_rss_bytes\": %.0f, \"weights_plus_caches_bytes\": %.0f, \"probe_gb_s\": %.2f, "
               "\"decode_bytes_per_token\": %.0f, \"decode_gb_s\": %.2f, \"decode_bw_frac\": %.3f",
               peak_rss, budget, probe, tok_bytes, decode_gbs, probe > 0 ? decode_gbs / probe : 0);
        ds_roofline_json(stdout, roof, nroof, probe, &peak);
        printf("}\n");
    } else {
        printf("| %-28s | %10s | %7s | %7s | %12s | %18s |\n", "model", "size", "threads", "kernels", "test", "t/s");
        printf("| %-28s | %10s | %7s | %7s | %12s | %18s |\n", "----------------------------", "---------:", "------:",
               "-------", "-----------:", "-----------------:");
        for (int i = 0; i < nres; i++) {
            char sz[32], tps[48];
            snprintf(sz, sizeof sz, "%.2f GiB", wbytes / (1024.0 * 1024 * 1024));
            snprintf(tps, sizeof tps, "%.2f ± %.2f", res[i].mean, res[i].sd);
            printf("| %-28s | %10s | %7d | %7s | %12s | %18s |\n", name, sz, nth, isa, res[i].name, tps);
        }
        printf("\npeak RSS %.1f MiB (now %.1f MiB anonymous, %.1f MiB file); weights %.1f MiB + KV %.1f MiB + "
               "DeltaNet state %.1f MiB = %.1f MiB (%+.1f%%)\n",
               peak_rss / 1048576, anon / 1024.0, filek / 1024.0, wbytes / 1048576, kv_bytes / 1048576.0,
               state_bytes / 1048576.0, budget / 1048576, budget > 0 ? (peak_rss / budget - 1) * 100 : 0);
        if (n > 0)
            printf("bandwidth: probe %.1f GB/s; decode reads %.1f MB/token x %.2f tok/s = %.1f GB/s (%.0f%% of the probe)\n",
                   probe, tok_bytes / 1e6, tg, decode_gbs, probe > 0 ? 100 * decode_gbs / probe : 0);
        else printf("bandwidth: probe %.1f GB/s\n", probe);
        char cpu_line[512];
        ds_cpu_describe(cpu_line, sizeof cpu_line);
        printf("cpu: %s\n", cpu_line);
        if (nroof) ds_roofline_print(stdout, roof, nroof, probe, &peak, nth);
    }
    rc = 0;
out:
    free(r.pages);
    free(r.toks);
    free(r.seqs);
    free(r.logits);
    free(r.saved);
    ds_kv_pool_free(&r.kv);
    ds_state_pool_free(&r.st);
    ds_model_free(r.m);
    ds_model_close(file);
    return rc;
}
