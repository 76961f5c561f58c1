/* engine_int.h - the engine's private structures, shared by engine.c (the
 * scheduler) and speculate.c (MTP drafting and verification). */
#ifndef DS_ENGINE_INT_H
#define DS_ENGINE_INT_H

#include <pthread.h>

#include "engine/engine.h"
#include "engine/id_pool.h"
#include "engine/prefix_cache.h"

enum { PENDING_ABORT = 1, PENDING_FAULT = 2 };

typedef struct req {
    uint64_t id;
    ds_request_params p;
    int32_t *prompt_copy, *stop_copy;
    ds_sampler sampler;
    int32_t *tokens;            /* prompt + generated: [cap_tokens] */
    int n_tokens, cap_tokens;
    int n_prompt, n_generated, n_computed, n_cached;
    int32_t *pages;             /* page table: [cap_pages] */
    int n_pages, cap_pages;
    int slot;                   /* state slot, -1 while waiting */
    int running_index;
    int64_t scheduled_step;     /* the step that last gave it rows */
    int aborted;
    ds_fault_phase fault;       /* test hook: pending fault (p.fault_after_tokens applies) */
    /* guarded by the engine's mu: every request from submission to its last event is on the
     * live list, so that ds_engine_abort finds it by id; a request asked to end (or to fail)
     * is flagged and linked once into the pending list, whose links live in the request
     * itself, so that no number of aborts can overflow anything */
    struct req *live_prev, *live_next;
    struct req *pending_next;
    int pending;                /* PENDING_ABORT | PENDING_FAULT, applied by the next step */
    int filter_done;            /* p.filter returned DS_FILTER_DONE */
    int filter_failed;          /* p.filter returned DS_FILTER_ERROR for the answer (drafts kept) */
    int draft_free_from;        /* p.filter returned DS_FILTER_DONE for the answer up to this draft (a draft
                                 * index >= 1; past n_drafts: it did not): it holds once those drafts are kept */
    int share_cut;              /* a waiting request shares the prompt up to here: cut and checkpoint there */
    struct req *next;           /* inbox / waiting list */
    /* speculative decoding (speculate.c) */
    int n_drafts;               /* drafts waiting to be verified */
    int32_t drafts[DS_MAX_SPEC];
    int32_t vslots[DS_MAX_SPEC + 1]; /* verify slots held during a step */
    int n_vslots;
    int n_want;                 /* drafts wanted this round */
    int k;                      /* drafts per step now (adapts to acceptance) */
    float acc_hits, acc_trials; /* drafts accepted / compared, recent ones weighing more */
    int paused;                 /* steps left without drafting */
    int pause_len;              /* length of the last pause (doubles while probes fail) */
    int step_first_pos, step_hidden_row; /* where this step's rows start (for the MTP catch-up) */
} req;

struct ds_engine {
    ds_model *model;
    const ds_model_config *cfg;
    ds_engine_params p;
    ds_kv_pool kv;
    ds_state_pool st;
    ds_id_pool pages, slots, ckpts;
    ds_prefix_cache *cache;
    int hybrid;                 /* the model has DeltaNet layers */
    int max_seq;                /* positions one sequence may use */
    req **running;
    int n_running;
    req *waiting_head, *waiting_tail;
    int n_waiting;
    /* per-step tables, sized once */
    ds_batch_token *rows;
    ds_batch_seq *seqs;
    req **seq_req;
    int *seq_first_row, *seq_n_rows;
    float *logits;
    ds_sampler_scratch scratch;
    uint32_t *allowed;          /* [DS_MASK_WORDS(vocab)] a token filter's answer, one bit per token */
    float *filtered;            /* [vocab] logits with the filtered-out tokens at -inf */
    int32_t *lookup_pages;
    /* shared with other threads */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    req *inbox_head, *inbox_tail;
    int n_inbox;
    req *live_head;             /* every request not yet ended (inbox, waiting, running) */
    req *pending_head;          /* requests with pending flags */
    char fail_all[160];         /* ds_engine_fail_all's message, "" when none is pending */
    char fail_msg[160];         /* the message the failed requests' events point to */
    uint64_t next_id;
    int stop;
    int64_t step_no;            /* steps begun */
    ds_engine_stats stats;      /* guarded by mu when read from outside */
    /* speculative decoding */
    int spec_max;               /* k; 0: off */
    double draft_cost;          /* one draft step / one decode step (ds_model_draft_cost) */
    ds_kv_pool mtp_kv;          /* the MTP head's KV, indexed by the same page ids */
    ds_state_pool records;      /* verify records (a record is ~1/11 of a state slot) */
    ds_id_pool vslots;          /* slots of records */
    float *hidden;              /* [rows][H] main hidden states of this step */
    float *mtp_hidden_in, *mtp_hidden_out, *mtp_logits; /* MTP batch buffers */
    ds_batch_token *mtp_rows;
    ds_batch_seq *mtp_seqs;
    req **mtp_req;
    /* ds_engine_check_invariants (engine_check.c) */
    int check_invariants;       /* after every step, or abort */
    int32_t *check_pages, *check_ckpts, *check_scratch; /* holders per id, sized once */
};


/* scheduler services speculate.c uses */
int ds_engine_ensure_pages(ds_engine *g, req *r, int upto);
/* Appends a sampled token: event, stop and length checks. Returns 1 when the
 * request finished (and was freed). */
int ds_engine_append(ds_engine *g, req *r, int32_t token, const float *logits);

/* Asks r's token filter (set, not done) about the token that follows the
 * first n_answer tokens of r's answer, drafts past n_tokens included. On
 * DS_FILTER_MASK g->allowed holds its answer and g->filtered the logits with
 * every token it refused at -inf; the caller records DS_FILTER_DONE. */
ds_filter_result ds_engine_filter(ds_engine *g, req *r, int n_answer, const float *logits);
/* Ends r with an error (its answer so far stays delivered). */
void ds_engine_fail_request(ds_engine *g, req *r, const char *why);

/* speculate.c */
/* Rows a decode of r runs this step: 1, or 1 + drafts when verifying. Takes the verify slots. */
int ds_spec_plan(ds_engine *g, req *r);
/* After the forward: accepts drafts against the rows' logits, appends the
 * tokens, rolls the state back. Returns 1 when the request finished. */
int ds_spec_accept(ds_engine *g, req *r, const float *logits);
/* After the step's tokens are in: feeds the MTP head the positions computed
 * this step and drafts the next tokens of every speculating request. */
void ds_spec_draft(ds_engine *g, req **reqs, int n);
void ds_spec_release(ds_engine *g, req *r);

/* engine_check.c: ds_engine_check_invariants, and on failure a message and abort() */
void ds_engine_check_or_die(ds_engine *g);

#endif
