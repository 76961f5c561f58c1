/* deltanet.c - the Gated DeltaNet mixer (docs/model.md §3.5): the input projections,
 * the backend's deltanet op (causal depthwise conv with a K-1 window carried
 * in the state slot, l2-normalised q and k, the gated delta rule on a
 * [Hv][Dk][Dv] F32 state, a per-head RMSNorm gated by SiLU(z)), then the
 * output projection.
 *
 * The recurrence runs token by token (decode, verify, and prefill when the
 * chunk length is 1) or in chunks of up to DS_DELTANET_CHUNK tokens (prefill). Chunks sit on
 * multiples of the chunk length in absolute positions, so that a prefill cut
 * into calls at such multiples computes exactly what one call would: where a
 * scheduler cuts a prompt must not change its outputs. VERIFY keeps, per
 * token, the conv window and state right after it in the sequence's verify
 * slots. */
#include "model/model_int.h"

void ds_deltanet(ds_model *m, const ds_layer *L, ds_state_pool *st, const ds_batch *b, const float *u, float *y) {
    const ds_model_config *c = &m->cfg;
    ds_workspace *w = &m->ws;
    int n = b->n_tokens, H = c->n_embd, Hv = c->lin_v_heads, li = L->cache_index;
    ds_mm_out in[4] = {{w->mixed, m->conv_dim, L->wqkv},
                       {w->z, m->value_dim, L->wz},
                       {w->ab, 2 * Hv, L->wbeta},
                       {w->ab + Hv, 2 * Hv, L->walpha}};
    ds_be_matmul(m->be, in, 4, u, H, n);
    int n_seqs = 0;
    for (int i0 = 0; i0 < n;) {
        int i1 = i0 + 1;
        while (i1 < n && b->tokens[i1].seq == b->tokens[i0].seq) i1++;
        const ds_batch_seq *s = &b->seqs[b->tokens[i0].seq];
        ds_gdn_seq *g = &w->gdn_seqs[n_seqs++];
        *g = (ds_gdn_seq){.i0 = i0, .i1 = i1, .pos0 = b->tokens[i0].pos, .conv_state = ds_state_conv(st, s->state_slot, li),
                          .state = ds_state_rec(st, s->state_slot, li),
                          /* a prefill is chunked even when it has one token here: the same token in a
                           * longer call would be a chunk of one too (chunks sit on absolute positions) */
                          .chunked = s->mode == DS_SEQ_PREFILL && m->params.gdn_chunk > 1};
        if (s->mode == DS_SEQ_VERIFY) {
            const ds_state_pool *rp = b->records ? b->records : st;
            for (int i = i0; i < i1; i++) w->snaps[i] = ds_state_conv(rp, s->verify_slots[i - i0], li);
            g->snap = w->snaps + i0;
        }
        i0 = i1;
    }
    m->be->ops->deltanet(m->be, &L->gdn, w->gdn_seqs, n_seqs, w->mixed, w->ab, w->z, w->o, L->ssm_norm, c->rms_eps,
                         m->params.gdn_chunk);
    ds_be_matmul1(m->be, y, H, L->wout, w->o, m->value_dim, n);
}
