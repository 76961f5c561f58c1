/* model.h - the forward pass of Qwen3 / Qwen3.5 / Qwen3.5-MoE over a ragged batch.
 *
 * One call computes any mix of work for any number of sequences: a flat list
 * of tokens, each carrying its sequence and its explicit position, and per
 * sequence its KV page table, its DeltaNet state slot and its mode. There is
 * no padding, no mask and no offset hidden in a cache object:
 *
 *   - the tokens of one sequence are contiguous in the list, with consecutive
 *     positions; the KV pages must already hold every earlier position;
 *   - attention at position p reads positions 0..p of its own sequence;
 *   - the state slot holds the DeltaNet memory after position first_pos-1 and
 *     is advanced in place to the last token of the sequence in this batch;
 *   - VERIFY leaves the state slot as it was and keeps, in verify_slots[j], a
 *     record of the j-th token of the sequence in this batch (at most
 *     DS_UBATCH tokens); ds_model_verify_commit then advances the slot by
 *     the first n of them, exactly as decoding them would have (the caller
 *     truncates the KV length to match). Writing records instead of whole
 *     states keeps a verify's state traffic that of a decode;
 *   - a token asks for logits and/or the final hidden state (after the final
 *     norm, the MTP head's input); outputs are packed in token order.
 *
 * Threads: a ds_model is used by one thread at a time (the engine loop). */
#ifndef DS_MODEL_H
#define DS_MODEL_H

#include <stdint.h>

#include "common/status.h"
#include "loading/model_file.h"
#include "model/cache.h"

/* The longest DeltaNet prefill chunk. Chunks sit on multiples of the chunk
 * length in absolute positions, so a caller that cuts prefill only at
 * multiples of this (and a chunk length that divides it) gets bitwise the
 * outputs of one uncut call: the engine's prefill chunks, checkpoints and KV
 * page size all align to it, and determinism depends on them agreeing. */
#define DS_DELTANET_CHUNK 64

typedef enum { DS_SEQ_PREFILL = 0, DS_SEQ_DECODE, DS_SEQ_VERIFY } ds_seq_mode;

typedef struct {
    int32_t token;
    int32_t seq;          /* index into ds_batch.seqs */
    int32_t pos;          /* position in its sequence */
    uint8_t want_logits;
    uint8_t want_hidden;
} ds_batch_token;

typedef struct {
    ds_seq_mode mode;
    const int32_t *pages; /* KV page table; must cover every position this batch writes */
    int32_t n_pages;
    int32_t state_slot;   /* DeltaNet state, read and advanced in place */
    const int32_t *verify_slots; /* VERIFY: one slot per token of the sequence in this batch */
} ds_batch_seq;

typedef struct {
    const ds_batch_token *tokens;
    int32_t n_tokens;
    const ds_batch_seq *seqs;
    int32_t n_seqs;
    float *logits;        /* [rows wanting logits][logits_vocab or n_vocab] */
    float *hidden;        /* [rows wanting hidden][n_embd] */
    ds_state_pool *records; /* where verify_slots point: a record pool, or NULL for slots of the state pool */
    /* Images (all NULL / 0 for text). rope_pos[i] is token i's M-RoPE position
     * (t, h, w): for text the same number on all three axes, which after an
     * image is smaller than pos (mrope.h); NULL: pos on every axis (a text
     * row gives the same bits either way). Only for a model with M-RoPE
     * sections; each in 0..max positions-1. pos still places the token: its
     * KV slot and the positions it attends to. embd[i], when not NULL, is
     * token i's input in place of the embedding of its token id: an image row
     * of n_embd * (1 + n_deepstack) floats (vision.h) whose k-th DeepStack
     * part (floats n_embd * (1 + k) on) is added to the hidden state after
     * layer k (Qwen3-VL; Qwen3.5 has none). An image row needs rope_pos (an
     * image is never placed by pos alone); n_deepstack is 0..DS_MAX_DEEPSTACK
     * and at most n_layer. The MTP head takes embd and rope_pos too: its row
     * at position t reads token t+1, so embd[i] is token t+1's image row (as
     * vLLM's drafter reads the image embedding one position ahead) and
     * rope_pos[i] position t's; it adds no DeepStack parts. */
    const int32_t *rope_pos;     /* [n_tokens][3] */
    const float *const *embd;    /* [n_tokens] */
    int n_deepstack;
    /* 0: logits over the whole vocabulary. Otherwise over its first
     * logits_vocab tokens only (1..n_vocab), rows that wide: the output head
     * reads only those rows and gives each the bits of the full product (the
     * MTP head's drafts over a frequency-ranked subset; speculate.c). */
    int32_t logits_vocab;
} ds_batch;

typedef struct ds_model ds_model;

typedef struct {
    int max_batch_tokens; /* largest n_tokens a call may pass */
    int gdn_chunk;        /* chunk length of the chunked DeltaNet prefill, dividing DS_DELTANET_CHUNK;
                           * 0: DS_DELTANET_CHUNK; 1: per token */
    int n_threads;        /* compute threads; 0: one per online core */
} ds_model_params;

/* Binds the tensors of an opened model file (borrowed: keep it open). */
ds_status ds_model_new(const ds_model_file *file, const ds_model_params *params, ds_model **out, ds_err *e);
void ds_model_free(ds_model *m);
const ds_model_config *ds_model_cfg(const ds_model *m);
int ds_model_max_batch_tokens(const ds_model *m); /* the largest n_tokens a call may pass */
int ds_model_n_attn_layers(const ds_model *m);  /* attention layers per KV page (MTP excluded) */
int ds_model_n_gdn_layers(const ds_model *m);
int ds_model_conv_dim(const ds_model *m);
/* Weights one MTP draft step reads (its block and the output head's first
 * draft_vocab rows; 0: all of them) over those one decode step reads (every
 * layer's active weights and the whole head): what a draft costs relative to
 * a decode where weights' bytes bound the time. 0 without an MTP head. */
double ds_model_draft_cost(const ds_model *m, int draft_vocab);

/* Runs the batch. Fails, naming the row, on a malformed batch (positions not
 * consecutive, a page table too short, a slot or token out of range). */
ds_status ds_model_forward(ds_model *m, ds_kv_pool *kv, ds_state_pool *st, const ds_batch *b, ds_err *e);

/* Advances state_slot by the first n (1 or more) tokens of its last VERIFY,
 * from their records in verify_slots[0..n-1] of records (NULL: of st, as the
 * VERIFY's batch said): bitwise the state a DECODE of those tokens would have
 * left. Fails only on arguments out of range. */
ds_status ds_model_verify_commit(ds_model *m, ds_state_pool *st, const ds_state_pool *records, int32_t slot,
                                 const int32_t *verify_slots, int n, ds_err *e);
/* Floats one verify record takes per DeltaNet layer (ds_record_pool_init). */
size_t ds_model_verify_record_floats(const ds_model *m);

/* The MTP head (docs/model.md §5.1) over a batch whose tokens are x_{t+1} at position t,
 * with hidden_in[i] = h_t for each token (the main model's final hidden state
 * after the final norm, or the head's own previous output when drafting more
 * than one token). Its attention layer uses its own KV pool (one layer per
 * page) through the sequences' page tables. Hidden outputs are the head's
 * normed output, to feed the next draft step. */
ds_status ds_model_mtp_forward(ds_model *m, ds_kv_pool *mtp_kv, const ds_batch *b, const float *hidden_in, ds_err *e);

#endif
