/* model_int.h - the model's private structures, shared by its files:
 * model.c (binding, batch checks, the layer loop), attention.c, deltanet.c,
 * ffn.c and mtp.c. All arithmetic runs on the backend (kernels/backend.h):
 * weights are uploaded to it once, scratch buffers come from it.
 *
 * Dimension legend: n tokens in the batch, H hidden, nh/nkv attention heads
 * of hd, Hk/Hv DeltaNet key/value heads of Dk/Dv, C conv channels
 * (2*Hk*Dk + Hv*Dv), K conv taps, F FFN width, E experts, V vocabulary. */
#ifndef DS_MODEL_INT_H
#define DS_MODEL_INT_H

#include "kernels/backend.h"
#include "kernels/ops.h"
#include "common/progress.h"
#include "model/model.h"

typedef const ds_bweight *ds_w; /* a matrix on the backend */

typedef struct {
    int full;                   /* 1: gated attention, 0: Gated DeltaNet */
    int cache_index;            /* index among attention layers (KV page layer) or DeltaNet layers (state layer) */
    const float *attn_norm;     /* [H] */
    const float *ffn_norm;      /* [H] */
    /* attention */
    ds_w wq;                    /* [nh*hd*(gated ? 2 : 1)][H]; per head: query rows then gate rows */
    ds_w wk, wv;                /* [nkv*hd][H] */
    ds_w wo;                    /* [H][nh*hd] */
    const float *q_norm, *k_norm; /* [hd] */
    /* Gated DeltaNet */
    ds_w wqkv;                  /* [C][H] */
    ds_w wz;                    /* [Hv*Dv][H] */
    ds_w wbeta, walpha;         /* [Hv][H] */
    ds_w wout;                  /* [H][Hv*Dv] */
    ds_gdn_layer gdn;           /* geometry, conv [C][K], dt_bias and ssm_a [Hv] */
    const float *ssm_norm;      /* [Dv] */
    /* dense FFN */
    ds_w ffn_gate, ffn_up;      /* [F][H] */
    ds_w ffn_down;              /* [H][F] */
    /* MoE */
    ds_w router;                /* [E][H] */
    ds_w *gate_exps, *up_exps, *down_exps; /* E matrices each */
    ds_w shexp_gate;            /* [1][H] */
    ds_w sh_gate, sh_up, sh_down;
} ds_layer;

/* Scratch for one forward call, sized for max_batch_tokens at creation (backend buffers). */
typedef struct {
    float *x, *u, *y;           /* [n][H] */
    float *q, *k, *v;           /* attention: [n][nh*hd*2], [n][nkv*hd] x2 */
    float *att;                 /* [n][nh*hd] attention output */
    float *mixed, *z, *ab;      /* DeltaNet: [n][C], [n][Hv*Dv], [n][2*Hv] */
    float *o;                   /* [n][Hv*Dv] */
    float *ff1, *ff2;           /* [n][F] (MoE: [n*k][moe width]) */
    float *router;              /* MoE: [n][E] probabilities */
    float *shg;                 /* MoE: [n] shared expert gate logits */
    int32_t *choice;            /* MoE: [n][k] chosen experts */
    float *choice_w;            /* MoE: [n][k] their weights */
    float *gather, *eout;       /* MoE: [n*k][H] rows grouped by expert, and the experts' outputs */
    int *eoff, *ecur;           /* MoE: [E+1] first row of each expert's group */
    int32_t *rowof;             /* MoE: [n*k] row of each (token, choice) */
    int32_t *src_of;            /* MoE: [n*k] token of each grouped row */
    ds_mm_group *groups;        /* MoE: [E] one per active expert */
    float *cat;                 /* MTP: [n][2H] normed embedding and hidden state */
    int32_t *rows;              /* [n] token indices (MoE grouping, output rows) */
    int32_t *ids;               /* [n] token ids */
    float *weights;             /* [n] */
    ds_attn_row *att_rows;      /* [n] */
    ds_gdn_seq *gdn_seqs;       /* [n] */
    float **snaps;              /* [n] verify records (a slot's layer region per token) */
    ds_batch_token *slice_toks; /* [n] one slice of a long batch */
    ds_batch_seq *slice_seqs;   /* [n] its sequences */
} ds_workspace;

/* Longest slice a forward call runs at once (scratch is sized for it); a
 * multiple of the DeltaNet chunk. */
#define DS_UBATCH 128

struct ds_model {
    const ds_model_file *file;
    ds_model_config cfg;
    ds_model_params params;
    ds_backend *be;
    ds_w tok_embd;              /* [V][H]; rows looked up (and the output matrix when tied) */
    ds_w output;                /* [V][H], the embedding when tied */
    const float *output_norm;
    ds_layer *layers;           /* n_layer + n_mtp */
    ds_w eh_proj;               /* MTP: [H][2H] */
    const float *enorm, *hnorm, *head_norm;
    int n_attn, n_gdn;
    int conv_dim, key_dim, value_dim;
    int max_positions;          /* longest sequence attention may span */
    uint8_t *rope_axis;         /* M-RoPE: [rope_dim / 2] axis of each rotated pair; NULL: 1-D RoPE */
    ds_rope_freqs_view rope;    /* each pair's frequency (plain or YaRN) and the cos/sin factor */
    int ub;                     /* tokens per slice: min(max_batch_tokens, DS_UBATCH) */
    ds_bweight **owned;         /* every uploaded weight, freed with the model */
    int n_owned, cap_owned;
    ds_progress loading;        /* weight bytes prepared (a bar on a terminal) */
    void **bufs;                /* every backend buffer */
    ds_status vec_status;       /* a vector could not be copied at load */
    int n_bufs, cap_bufs;
    ds_workspace ws;
};

void ds_embed_rows(ds_model *m, const ds_batch *b, float *x);

/* Mixers and FFN: read u [n][H], write y [n][H]. */
void ds_attention(ds_model *m, const ds_layer *L, int kv_layer, ds_kv_pool *kv, const ds_batch *b, const float *u, float *y);
void ds_deltanet(ds_model *m, const ds_layer *L, ds_state_pool *st, const ds_batch *b, const float *u, float *y);
void ds_ffn(ds_model *m, const ds_layer *L, int n, const float *u, float *y);

/* One pre-norm decoder layer on ws.x: x += mixer(norm(x)); x += ffn(norm(x)). */
void ds_decoder_layer(ds_model *m, const ds_layer *L, int kv_layer, ds_kv_pool *kv, ds_state_pool *st,
                      const ds_batch *b);
/* Final norm of each row that wants an output, then hidden and logits. */
void ds_model_outputs(ds_model *m, const ds_batch *b, const float *norm_w);

/* Slicing of long batches: the end of the slice starting at token s0 (cuts
 * anywhere when cuts_free), and the slice as a batch of its own (tokens and
 * sequences copied to scratch, verify slots advanced; outputs not offset). */
int ds_model_next_slice(const ds_model *m, const ds_batch *b, int s0, int cuts_free);
void ds_model_slice(ds_model *m, const ds_batch *b, int s0, int s1, ds_batch *out);

ds_status ds_batch_check(const ds_model *m, const ds_kv_pool *kv, const ds_state_pool *st, const ds_batch *b,
                         int needs_state, ds_err *e);

#endif
