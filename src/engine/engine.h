/* engine.h - continuous batching: many requests, one model, one loop.
 *
 * Requests go waiting -> running -> finished (or aborted at any time). Each
 * step the scheduler builds one ragged batch: first one decode token for every
 * running sequence that has its prompt done (decodes are never starved), then
 * prefill chunks of waiting work while the step's token budget lasts. KV
 * pages and DeltaNet state slots come from pools sized by byte budgets at
 * start; when they run out, the newest running request is preempted (its
 * memory freed, its tokens kept) and recomputed later, so memory pressure
 * slows requests down but never fails them. A prefix cache (prefix_cache.h)
 * lets a request skip the part of its prompt that is already computed.
 *
 * Outputs are deterministic per request: prefill is cut at fixed positions
 * (multiples of the prefill chunk, checkpoint interval and prompt end rounded
 * to DS_DELTANET_CHUNK), so neither the other requests in a step nor a cache hit changes
 * what a request computes.
 *
 * Threads: the engine (and the model) belong to the thread that calls
 * ds_engine_step / ds_engine_run. ds_engine_submit, ds_engine_abort,
 * ds_engine_stats and ds_engine_stop may be called from any thread. Event
 * callbacks run on the engine thread and must return quickly. */
#ifndef DS_ENGINE_H
#define DS_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "engine/sampler.h"
#include "image/image_prep.h"
#include "model/model.h"
#include "model/vision.h"

typedef struct {
    size_t kv_bytes;            /* KV page pool */
    size_t state_bytes;         /* DeltaNet state slots of running sequences */
    size_t cache_state_bytes;   /* DeltaNet checkpoints kept by the prefix cache */
    int page_size;              /* tokens per KV page (divides DS_DELTANET_CHUNK) */
    int max_running;            /* sequences in flight */
    int step_tokens;            /* tokens per step */
    int prefill_chunk;          /* prefill tokens per sequence per step (multiple of DS_DELTANET_CHUNK) */
    int checkpoint_interval;    /* prefill tokens between checkpoints (multiple of DS_DELTANET_CHUNK; 0: prompt
                                 * end only) */
    int prefix_cache;           /* 0: off */
    int allow_long_context;     /* 1: sequences may run past the model's context (ds_model_context_limit),
                                 * as far as the KV pages reach */
    int max_queue;              /* waiting requests accepted (0: unlimited) */
    int spec_tokens;            /* MTP drafts per step, at most (0: no speculation; models without an MTP head never speculate) */
    int spec_vocab;             /* drafts come from the head's logits over the vocabulary's first spec_vocab
                                 * tokens (the most frequent: BPE ids follow merge rank), the head reading only
                                 * those rows; verification keeps the whole vocabulary, so outputs never change
                                 * (0, or spec_vocab >= n_vocab: the whole vocabulary) */
    size_t spec_state_bytes;    /* DeltaNet verify records (k+1 per speculating sequence) */
    int spec_policy;            /* ds_spec_policy: who drafts how many (default DS_SPEC_POLICY_BATCH) */
    int spec_max_batch;         /* a user's cap: no request drafts while more sequences than this run (0: none;
                                 * the batch policy finds where drafting stops paying by itself) */
    struct ds_spec_given_costs *spec_given; /* DS_SPEC_POLICY_GIVEN: the costs the plan assumes (borrowed) */
    /* KV events for a router (kv_events.h): NULL: none. With a queue, checkpoints sit only at multiples of
     * the event block (ds_engine_kv_block_size) and a request resumes only where every block before it is
     * announced, so that what the router predicts is what a request reuses (prefix_cache.h, notes 4-8).
     * A hybrid model then needs a checkpoint interval (0 is refused). */
    struct ds_kv_event_queue *kv_events;
    int check_invariants;       /* 1: ds_engine_check_invariants after every step, abort() when one is broken
                                 * (also with $DS_CHECK_INVARIANTS=1; for tests: it costs a pass over the pools) */
} ds_engine_params;

#define DS_MAX_SPEC 8
/* The default spec_vocab: see the README, "Speculation over a vocabulary subset", for the measurement */
#define DS_SPEC_VOCAB_DEFAULT 32768

/* Speculation policies (spec_policy.h).
 *   BATCH: each step, from the whole batch, which sequences draft and how many, to make the most tokens
 *     per second: each request's recent acceptance against what a verify row, an MTP call and a sampler
 *     choice cost at this batch size, measured by the engine from its own steps;
 *   REQUEST: each request drafts the k its own acceptance calls for, priced by the model's nominal costs
 *     (a draft reads the head, a verify row ~0.15 of a step), whatever the batch: the policy before the
 *     batch one, kept for comparison and for tests that want every sequence to draft;
 *   GIVEN: BATCH's plan on the fixed costs in spec_given (tests: a plan that does not depend on timing). */
typedef enum { DS_SPEC_POLICY_BATCH = 0, DS_SPEC_POLICY_REQUEST, DS_SPEC_POLICY_GIVEN } ds_spec_policy;

/* DS_SPEC_POLICY_GIVEN's costs, in any unit of time: a forward of R rows costs step + row * R, an MTP
 * call of m rows call + call_row * m (the catch-up call and each further one alike), a sampler choice
 * choice_greedy or choice_sampled (temperature > 0). */
typedef struct ds_spec_given_costs {
    double step, row, call, call_row, choice_greedy, choice_sampled;
} ds_spec_given_costs;

void ds_engine_defaults(ds_engine_params *p);

typedef enum { DS_FINISH_NONE = 0, DS_FINISH_STOP, DS_FINISH_LENGTH, DS_FINISH_ABORT, DS_FINISH_ERROR } ds_finish;

#define DS_MAX_TOP_LOGPROBS 20

typedef struct {
    uint64_t id;
    int finished;               /* 0: a token event; 1: the last event of the request */
    int32_t token;              /* the new token (token events) */
    float logprob;              /* its log-probability under the raw logits (when asked: want_logprob) */
    int n_top;                  /* top alternatives (when asked) */
    int32_t top_ids[DS_MAX_TOP_LOGPROBS];
    float top_logprobs[DS_MAX_TOP_LOGPROBS];
    ds_finish reason;           /* last event: why it ended */
    const char *error;          /* last event with DS_FINISH_ERROR: what failed */
    int n_prompt, n_cached, n_generated;
} ds_event;

typedef void (*ds_event_fn)(const ds_event *ev, void *user);

/* Test hook: which of a request's model calls fails (ds_request_params.fault). */
typedef enum {
    DS_FAULT_NONE = 0,
    DS_FAULT_ANY,       /* its next model call, whatever it computes */
    DS_FAULT_PREFILL,   /* a call that computes a chunk of its prompt */
    DS_FAULT_DECODE,    /* a call that computes its pending token without drafts */
    DS_FAULT_VERIFY,    /* a call that verifies MTP drafts */
    DS_FAULT_DRAFT,     /* an MTP call that drafts for it: that call fails for all in it, who decode
                         * without drafts (a failed draft does not fail a request) */
} ds_fault_phase;

/* A request may narrow which tokens it samples next (a tool call the client
 * requires, an answer that must follow a grammar). Called on the engine thread
 * before each of the request's tokens is drawn, with the tokens of its answer
 * so far: it either sets bit t of allowed (words of 32 bits, (n_vocab + 31) / 32
 * of them, arriving zeroed) for every token it permits (at least one) and
 * returns DS_FILTER_MASK, or returns DS_FILTER_FREE (any token this time) or
 * DS_FILTER_DONE (any token from now on; it is not called again). The others
 * keep their logits and are drawn from as usual. A speculating request's
 * answer may include drafts the model has not yet checked; the next call may
 * then show a different answer past some point (drafts refused), and the
 * filter takes back what it followed past the common prefix. DS_FILTER_DONE
 * for an answer with drafts holds once they are kept: if one is refused, the
 * filter is called again with the answer that replaced it. DS_FILTER_ERROR:
 * the filter cannot go on (its grammar allows nothing the vocabulary can
 * spell, or it ran out of its memory budget): the request ends with an
 * error rather than go on unconstrained. */
typedef enum { DS_FILTER_FREE = 0, DS_FILTER_MASK, DS_FILTER_DONE, DS_FILTER_ERROR } ds_filter_result;
#define DS_FILTER_ERROR_MESSAGE "the output constraint cannot go on: its grammar allows no token the model's " \
                                "vocabulary can write here, or its matcher ran out of memory"
typedef ds_filter_result (*ds_token_filter_fn)(void *user, const int32_t *generated, int n_generated, uint32_t *allowed,
                                               int n_vocab);
#define DS_MASK_WORDS(n_vocab) (((size_t)(n_vocab) + 31) / 32)
#define DS_MASK_HAS(bits, t) ((int)(((bits)[(size_t)(t) >> 5] >> ((uint32_t)(t) & 31)) & 1u))
#define DS_MASK_SET(bits, t) ((bits)[(size_t)(t) >> 5] |= 1u << ((uint32_t)(t) & 31))

/* One image of a prompt. Its tokens are prompt[first .. first + n) (n =
 * grid_t x grid_h x grid_w / merge^2 of its patches), each the image pad
 * token (the one at prompt[first]; every image of a request has the same,
 * and no other prompt token may be it): the engine encodes the patches (a
 * few blocks per step, like a prefill: engine_image.c), puts the embeddings
 * at those positions with their M-RoPE positions, and keys them in the
 * prefix cache by hash, so the same picture hits (and is not encoded again)
 * and any other misses. */
typedef struct {
    int first;
    ds_image_patches patches;   /* a successful submit takes them (and frees them later), leaving this
                                 * empty; a refused one leaves them to the caller */
    uint8_t hash[32];           /* ds_image_hash */
} ds_request_image;

typedef struct {
    const int32_t *prompt;      /* copied by submit */
    int n_prompt;
    ds_request_image *images;   /* in prompt order; NULL: text only (needs ds_engine_set_vision) */
    int n_images;
    ds_sampling_params sampling;
    int max_tokens;
    const int32_t *stop_ids;    /* extra stop tokens (copied) */
    int n_stop_ids;
    int ignore_eos;             /* 1: the model's end tokens do not stop */
    int want_logprob;           /* 1: events carry the token's logprob (implied by n_top_logprobs > 0) */
    int n_top_logprobs;         /* 0..DS_MAX_TOP_LOGPROBS */
    ds_event_fn on_event;
    void *user;
    ds_token_filter_fn filter;  /* NULL: every token allowed */
    void *filter_user;
    /* test hook: the first model call of this phase made once fault_after_tokens
     * tokens were generated fails this request (as a failed call would), while
     * the rest of the batch goes on */
    ds_fault_phase fault;
    int fault_after_tokens;
} ds_request_params;

typedef struct {
    int running, waiting;
    int kv_pages_total, kv_pages_used;
    int state_slots_total, state_slots_used;
    int checkpoint_slots_total, checkpoint_slots_used;
    int kv_pages_cached, checkpoints_cached;  /* held by the prefix cache (all that is held when idle) */
    int64_t prefix_query_tokens, prefix_hit_tokens, checkpoint_restores;
    int64_t evicted_pages, evicted_checkpoints, preemptions;
    int64_t prompt_tokens, generated_tokens, steps;
    int64_t spec_drafted, spec_accepted, spec_verify_steps; /* MTP drafts made and accepted, verify passes */
    int64_t spec_compared;        /* drafts compared with the model's choice (up to the first rejection) */
    int64_t spec_accept_hist[DS_MAX_SPEC + 1]; /* verify passes by number of drafts accepted (0..DS_MAX_SPEC) */
    int64_t spec_draft_failures;  /* MTP calls that failed: their requests decoded that step without drafts */
    int64_t spec_plan_steps;      /* steps whose drafts were planned (a sequence could have drafted) */
    int64_t spec_plan_draft_steps; /* ... of those, steps where some sequence drafted */
    int64_t spec_plan_seqs, spec_plan_drafting_seqs; /* ... sequences that could have drafted, and did, summed */
    int64_t started, finished, aborted, failed;
    /* images: encoded, and their tokens reused from the prefix cache (also in prefix_hit_tokens) */
    int64_t images_encoded, image_tokens_cached;
    size_t vision_bytes_total, vision_bytes_used; /* the jobs' budget, and what they hold now */
    int64_t vision_step_flops;      /* multiply-adds ds_vision_run may do per step (engine_image.c) */
    int64_t vision_steps, vision_flops, vision_flops_step_max; /* steps that encoded, their work, the most in one */
} ds_engine_stats;

typedef struct ds_engine ds_engine;

/* The tokens one model call of an engine with these parameters carries at
 * most: create the model with at least this max_batch_tokens. */
int ds_engine_required_batch_capacity(const ds_engine_params *p);

/* The model is borrowed and used only by the engine thread from now on.
 * Refuses (DS_EINVAL) a model whose max_batch_tokens is below
 * ds_engine_required_batch_capacity. */
ds_status ds_engine_new(ds_model *model, const ds_engine_params *p, ds_engine **out, ds_err *e);
void ds_engine_free(ds_engine *eng);
/* Lets requests carry images (before the first step): v is borrowed; jobs of
 * images being encoded hold at most budget_bytes (ds_vision_job_bytes) at
 * once (more wait their turn), and an image larger than that alone is
 * refused at submit. Each step gives the tower about one step's prefill
 * work (ds_engine_stats.vision_step_flops), so an image never stalls the
 * decodes of other requests for longer than that. */
ds_status ds_engine_set_vision(ds_engine *eng, ds_vision *v, size_t budget_bytes, ds_err *e);

/* Queues a request; returns its id (> 0), or 0 with e filled: DS_EINVAL when it
 * cannot ever run (too long for the pools or the context, a token outside the
 * vocabulary, images without a tower, an image not on its pad tokens or
 * larger than the vision budget: the message names the image), DS_EBUSY when
 * the queue is full (it may be retried later), DS_ENOMEM when memory ran out. */
uint64_t ds_engine_submit(ds_engine *eng, const ds_request_params *rp, ds_err *e);
/* Ends a request at the next step; its memory is free after that step. */
void ds_engine_abort(ds_engine *eng, uint64_t id);
/* Ends every request, waiting or running, at the next step with DS_FINISH_ERROR
 * and this message (copied): a shutdown that cannot wait any longer still tells
 * each client why its answer stopped. */
void ds_engine_fail_all(ds_engine *eng, const char *why);

/* One scheduler step. Returns the number of requests still waiting or running. */
int ds_engine_step(ds_engine *eng);
/* Steps until ds_engine_stop, sleeping while there is nothing to do. */
void ds_engine_run(ds_engine *eng);
void ds_engine_stop(ds_engine *eng);

void ds_engine_stats_get(ds_engine *eng, ds_engine_stats *st);

/* Tokens per block of the KV events and of vllm:cache_config_info: the page
 * size for a model without DeltaNet layers (any page can be resumed), else
 * the checkpoint interval (a request resumes only at a checkpoint). */
int ds_engine_kv_block_size(const ds_engine *eng);

/* Checks the engine's bookkeeping (engine thread, between steps): reference
 * counts of KV pages and checkpoint slots equal their holders (running
 * requests' page tables, prefix-cache nodes), free lists hold no id in use and
 * every unused one, every cached checkpoint belongs to a trie node, no
 * sequence holds a slot twice, waiting requests hold nothing, the request
 * lists agree with their counts, vision jobs (one per running request at
 * most) hold exactly the vision budget's use, within it, and the prefix
 * trie's own invariants (prefix_cache.c: T1-T6, and with KV events A1-A4: what is announced can be
 * resumed from, and what can be is announced unless a flush is due). DS_ECORRUPT names the first broken invariant. */
ds_status ds_engine_check_invariants(ds_engine *eng, ds_err *e);
/* Test hook: the next forward call of the request with this id fails
 * (DS_FAULT_ANY, from any thread; ds_request_params.fault chooses the phase). */
void ds_engine_inject_fault(ds_engine *eng, uint64_t id);

#endif
