/* engine_int.h - the engine's private structures, shared by engine.c (the
 * scheduler) and speculate.c (MTP drafting and verification). */
#ifndef DS_ENGINE_INT_H
#define DS_ENGINE_INT_H

#include <pthread.h>

#include "engine/engine.h"
#include "engine/id_pool.h"
#include "engine/prefix_cache.h"
#include "engine/spec_cost.h"
#include "engine/spec_policy.h"

enum { PENDING_ABORT = 1, PENDING_FAULT = 2 };

/* One image of a request (engine_image.c). Its patches are kept until its
 * rows exist (a cache hit that covers it skips the encoding, and a recompute
 * after the cache let the pages go needs them again); its rows are kept to
 * the end of the request, since a preemption recomputes the prompt. */
typedef struct {
    int first, n;               /* prompt tokens [first, first + n) */
    ds_image_patches patches;   /* owned until rows exist */
    uint8_t hash[32];
    ds_vision_job *job;         /* being encoded (a running request's, one at a time) */
    size_t job_bytes;           /* taken from the engine's vision budget */
    int64_t job_piece;          /* its average piece of work (a block), to choose a step's jobs by */
    float *rows;                /* [n][row_floats] once encoded */
} req_image;

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
    /* images (engine_image.c): NULL / 0 for text */
    req_image *images;
    int n_images;
    int32_t *rope_pos;          /* [n_prompt][3] M-RoPE positions of the prompt */
    int rope_delta;             /* past the prompt: position p has p + rope_delta on every axis */
    int32_t *keys;              /* the prompt as the prefix cache sees it: image tokens keyed by their image */
    ds_prefix_image *spans;     /* [n_images] the images as the prefix cache's KV events name them */
    int owns_patches;           /* submit succeeded: the images' patches are the request's to free */
    struct req *next;           /* inbox / waiting list */
    /* speculative decoding (speculate.c) */
    int n_drafts;               /* drafts waiting to be verified */
    int32_t drafts[DS_MAX_SPEC];
    int32_t vslots[DS_MAX_SPEC + 1]; /* verify slots held during a step */
    int n_vslots;
    int n_want;                 /* drafts wanted this round */
    int k;                      /* drafts per step at most now (REQUEST: adapts to acceptance; BATCH: the
                                 * most the plan may give it, 1 while probing) */
    int plan_k;                 /* drafts this step's plan gives it */
    float choice_s;             /* seconds one sampler choice of it takes (recent) */
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
    double draft_cost;          /* one draft step / one decode step (ds_model_draft_cost; REQUEST policy) */
    /* what a step's parts cost, measured (BATCH policy, spec_policy.h), by rows: a step all in but for
     * its MTP calls and sampler choices, the MTP catch-up call, a further draft call */
    ds_cost_curve cost_forward, cost_catchup, cost_draft;
    double step_parts_s;        /* this step's seconds in MTP calls and sampler choices so far */
    double *memo;               /* [3][step_tokens + 1] the curves' estimates during one plan */
    int64_t *memo_at;           /* [3][step_tokens + 1] the plan that filled each */
    int64_t n_plans;
    ds_spec_cand *cand;         /* [max_running] a plan's candidates */
    req **cand_req;
    int draft_vocab;            /* drafts are drawn over token ids 0..draft_vocab-1 (mtp_logits rows are that wide) */
    ds_kv_pool mtp_kv;          /* the MTP head's KV, indexed by the same page ids */
    ds_state_pool records;      /* verify records (a record is ~1/11 of a state slot) */
    ds_id_pool vslots;          /* slots of records */
    float *hidden;              /* [rows][H] main hidden states of this step */
    float *mtp_hidden_in, *mtp_hidden_out, *mtp_logits; /* MTP batch buffers */
    ds_batch_token *mtp_rows;
    ds_batch_seq *mtp_seqs;
    req **mtp_req;
    /* images (engine_image.c) */
    ds_vision *vision;          /* NULL: requests with images are refused */
    size_t vision_budget, vision_used; /* bytes of jobs, at most and now */
    int vision_row_floats;      /* one image token's row: n_embd * (1 + n_deepstack) */
    int64_t token_macs;         /* multiply-adds of one prefill token through the decoder layers */
    int64_t vision_step_flops;  /* what ds_vision_run gets per step */
    ds_vision_job **jobs;       /* [max_running] a step's jobs */
    req **job_req;
    int32_t *rope;              /* [step_tokens][3] a step's M-RoPE positions */
    const float **embd;         /* [step_tokens] a step's image rows */
    int32_t *mtp_rope;          /* the same for the MTP calls */
    const float **mtp_embd;
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
 * DS_FILTER_MASK g->allowed holds its answer (over the whole vocabulary) and
 * g->filtered the logits of tokens 0..n_logits-1 (n_vocab, or a draft's
 * subset) with every token it refused at -inf; the caller records
 * DS_FILTER_DONE. */
ds_filter_result ds_engine_filter(ds_engine *g, req *r, int n_answer, const float *logits, int n_logits);
/* Ends r with an error (its answer so far stays delivered). */
void ds_engine_fail_request(ds_engine *g, req *r, const char *why);

/* engine_image.c */
/* Validates rp's images against the prompt and the tower, and on success
 * fills r's images (patches not yet taken), positions and cache keys. */
ds_status ds_image_req_init(ds_engine *g, req *r, const ds_request_params *rp, ds_err *e);
void ds_image_req_free(req *r);
/* Drops r's job (a preempted or finished request keeps no activations). */
void ds_image_release_job(ds_engine *g, req *r);
/* What the prefix cache sees of r's prompt. */
const int32_t *ds_image_keys(const req *r);
/* The end of a prefill chunk of r from `from` to `end`, cut (at a multiple
 * of DS_DELTANET_CHUNK) before an image whose rows are not ready. */
int ds_image_prefill_end(const ds_engine *g, const req *r, int from, int end);
/* Starts the jobs the vision budget allows and advances every job by one
 * step's worth of work. Returns the multiply-adds done, in prefill tokens. */
int ds_image_encode_step(ds_engine *g);
/* Inputs of a row of r at position pos reading token_pos's token (pos for
 * the main model, pos + 1 for the MTP head): its M-RoPE position and its
 * image row (NULL for text). */
void ds_image_row(const ds_engine *g, const req *r, int pos, int token_pos, int32_t rope[3], const float **embd);
/* Gives b the rows' M-RoPE positions and image rows (rope [n_tokens][3],
 * embd [n_tokens], filled by ds_image_row) when any_image: a batch with a
 * request with images carries positions for all its rows; text-only batches
 * stay as they always were. */
void ds_image_batch(const ds_engine *g, ds_batch *b, int any_image, const int32_t *rope, const float *const *embd);

/* Records that r's sampler made n choices in `seconds` (the plan prices drafts by it). */
void ds_engine_note_choice(ds_engine *g, req *r, double seconds, int n);
/* Seconds on a monotonic clock. */
double ds_engine_now(void);

/* speculate.c */
/* Sets up and frees the cost curves and the plan's tables. */
int ds_spec_init(ds_engine *g);
void ds_spec_free(ds_engine *g);
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
