/* model_int.h - the model's private structures, shared by its files:
 * model.c (binding, batch checks, the layer loop), attention.c, deltanet.c,
 * ffn.c and mtp.c.
 *
 * Dimension legend: n tokens in the batch, H hidden, nh/nkv attention heads
 * of hd, Hk/Hv DeltaNet key/value heads of Dk/Dv, C conv channels
 * (2*Hk*Dk + Hv*Dv), K conv taps, F FFN width, E experts. */
#ifndef DS_MODEL_INT_H
#define DS_MODEL_INT_H

#include "kernels/ops.h"
#include "model/model.h"

typedef struct {
    int full;                   /* 1: gated attention, 0: Gated DeltaNet */
    int cache_index;            /* index among attention layers (KV page layer) or DeltaNet layers (state layer) */
    const float *attn_norm;     /* [H] */
    const float *ffn_norm;      /* [H] */
    /* attention */
    ds_mat wq;                  /* [nh*hd*(gated ? 2 : 1)][H]; per head: query rows then gate rows */
    ds_mat wk, wv;              /* [nkv*hd][H] */
    ds_mat wo;                  /* [H][nh*hd] */
    const float *q_norm, *k_norm; /* [hd] */
    /* Gated DeltaNet */
    ds_mat wqkv;                /* [C][H] */
    ds_mat wz;                  /* [Hv*Dv][H] */
    ds_mat wbeta, walpha;       /* [Hv][H] */
    ds_mat wout;                /* [H][Hv*Dv] */
    const float *conv;          /* [C][K] */
    const float *dt_bias, *ssm_a; /* [Hv]; ssm_a = -exp(A_log) */
    const float *ssm_norm;      /* [Dv] */
    /* dense FFN */
    ds_mat ffn_gate, ffn_up;    /* [F][H] */
    ds_mat ffn_down;            /* [H][F] */
    /* MoE */
    ds_mat router;              /* [E][H] */
    const ds_tensor *gate_exps, *up_exps, *down_exps; /* E matrices each */
    const float *shexp_gate;    /* [H] */
    ds_mat sh_gate, sh_up, sh_down;
} ds_layer;

/* Scratch for one forward call, sized for max_batch_tokens at creation. */
typedef struct {
    float *x, *u, *y;           /* [n][H] */
    float *q, *k, *v;           /* attention: [n][nh*hd*2], [n][nkv*hd] x2 */
    float *att;                 /* [n][nh*hd] attention output */
    float *scores;              /* [max positions] one softmax row */
    float *mixed, *z, *ab;      /* DeltaNet: [n][C], [n][Hv*Dv], [n][2*Hv] */
    float *o;                   /* [n][Hv*Dv] */
    float *ff1, *ff2;           /* [n][max(F, moe width)] */
    float *row;                 /* [max(H, vocab)] */
    float *chunk;               /* chunked DeltaNet scratch */
    float *router;              /* MoE: [n][E] probabilities */
    int *choice;                /* MoE: [n][k] chosen experts */
    float *choice_w;            /* MoE: [n][k] their weights */
    float *gather, *eout;       /* MoE: [n][H] rows routed to one expert, and its outputs */
    float *cat;                 /* MTP: [n][2H] normed embedding and hidden state */
    int32_t *rows;              /* [n] token indices (MoE grouping) */
    float *weights;             /* [n] */
} ds_workspace;

struct ds_model {
    const ds_model_file *file;
    ds_model_config cfg;
    ds_model_params params;
    const ds_tensor *tok_embd;  /* [V][H] */
    ds_mat output;              /* [V][H], the embedding when tied */
    const float *output_norm;
    ds_layer *layers;           /* n_layer + n_mtp */
    ds_mat eh_proj;             /* MTP: [H][2H] */
    const float *enorm, *hnorm, *head_norm;
    int n_attn, n_gdn;
    int conv_dim, key_dim, value_dim;
    int max_positions;          /* longest sequence the scores buffer can attend over */
    ds_workspace ws;
};

ds_mat ds_expert_mat(const ds_tensor *t, int expert);
void ds_embed_rows(const ds_model *m, const ds_batch *b, float *x);

/* Mixers and FFN: read u [n][H], write y [n][H]. */
void ds_attention(ds_model *m, const ds_layer *L, int kv_layer, ds_kv_pool *kv, const ds_batch *b, const float *u, float *y);
void ds_deltanet(ds_model *m, const ds_layer *L, ds_state_pool *st, const ds_batch *b, const float *u, float *y);
void ds_ffn(ds_model *m, const ds_layer *L, int n, const float *u, float *y);

/* One pre-norm decoder layer on ws.x: x += mixer(norm(x)); x += ffn(norm(x)). */
void ds_decoder_layer(ds_model *m, const ds_layer *L, int kv_layer, ds_kv_pool *kv, ds_state_pool *st,
                      const ds_batch *b);
/* Final norm of each row that wants an output, then hidden and logits. */
void ds_model_outputs(ds_model *m, const ds_batch *b, const float *norm_w);

ds_status ds_batch_check(const ds_model *m, const ds_kv_pool *kv, const ds_state_pool *st, const ds_batch *b,
                         int needs_state, ds_err *e);

#endif
