/* bench_roofline.h - the roofline of `deltaserve bench`: for a decode step of
 * B sequences, the arithmetic the model's shapes call for and the bytes a step
 * must move at the least, set against the machine's limits (bench_peak.h and
 * the read-bandwidth probe).
 *
 * Counted per step (B tokens, one per sequence), in multiply-adds (MAC):
 *   weights   every weight matrix but the output head, B x rows x columns;
 *             an MoE expert stack n_expert_used experts per token; the
 *             DeltaNet conv is not a product (it counts under DeltaNet);
 *   head      the output head (output.weight, or token_embd when tied);
 *   attention per full-attention layer and token: Q.K and P.V over `keys`
 *             cached positions, 2 x n_head x head_dim x keys;
 *   deltanet  per Gated DeltaNet layer and token: the delta rule on the
 *             [Hv][Dk][Dv] state (decay, S^T k, the rank-1 update, S^T q:
 *             4 x Hv x Dk x Dv) and the causal conv (conv_dim x K).
 * Bytes, each read once per step (what any kernel must move):
 *   weights   every matrix of the main model (not the MTP block, not the
 *             embedding lookup unless tied); an expert stack for the experts
 *             the batch touches: with uniform routing, of E experts with k
 *             per token, B tokens touch E (1 - (1 - k/E)^B) distinct ones;
 *   kv        K and V of `keys` positions per sequence and attention layer;
 *   state     the DeltaNet recurrent state and conv window of every
 *             sequence, read and written (F32).
 * The executed multiply-adds by precision: quantised weights run int8 dot
 * products (Q8_0 twice: its activations carry a second int8 term, kern.h),
 * BF16 weights bf16 dot products where the level has them, everything else
 * (F32/F16 weights, attention, DeltaNet) F32. */
#ifndef DS_BENCH_ROOFLINE_H
#define DS_BENCH_ROOFLINE_H

#include <stdio.h>

#include "cli/bench_peak.h"
#include "loading/model_file.h"

typedef enum { DS_RF_INT8 = 0, DS_RF_BF16, DS_RF_F32, DS_RF_N_PREC } ds_rf_prec;

typedef struct {
    int b;                                 /* sequences in the step */
    double keys;                           /* positions each token attends to (mean over the run) */
    double mac_weights, mac_head, mac_attn, mac_gdn;
    double mac_exec[DS_RF_N_PREC];         /* multiply-adds executed, by precision */
    double bytes_weights, bytes_kv, bytes_state;
    double experts_touched;                /* distinct experts per MoE layer (0: dense) */
} ds_roofline_counts;

/* Counts of one decode step of b sequences at `keys` positions each; kv_elem_bytes: one cached
 * K or V element; state_elem_bytes: one DeltaNet state element; level: the kernels in use. */
void ds_roofline_count(const ds_model_file *f, int b, double keys, int kv_elem_bytes, int state_elem_bytes,
                       ds_isa level, ds_roofline_counts *out);

/* A measured step against the limits. */
typedef struct {
    ds_roofline_counts c;
    const char *test;                      /* "tg128", "b16 tg128" */
    double step_s;                         /* seconds per step, measured */
    double gb_s, gop_s;                    /* achieved: bytes / step_s, 2 x MAC (model's) / step_s */
    double t_mem_s, t_compute_s;           /* the least time the read probe and the compute peaks allow */
    double bw_frac, compute_frac;          /* t_mem / step_s, t_compute / step_s */
    double prec_frac[DS_RF_N_PREC];        /* executed ops of each precision / its peak, per step_s */
    const char *bound;                     /* "memory" or "compute": the larger of t_mem and t_compute */
} ds_roofline_row;

void ds_roofline_eval(const ds_roofline_counts *c, double step_s, double read_gb_s, const ds_bench_peak *pk,
                      ds_roofline_row *out);
void ds_roofline_print(FILE *o, const ds_roofline_row *rows, int n, double read_gb_s, const ds_bench_peak *pk,
                       int n_threads);
/* Writes `, "roofline": {...}` (the limits and one object per row) into an open JSON object. */
void ds_roofline_json(FILE *o, const ds_roofline_row *rows, int n, double read_gb_s, const ds_bench_peak *pk);

#endif
