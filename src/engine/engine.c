/* engine.c - the continuous batching scheduler (see engine.h).
 *
 * DESIGN NOTES
 * Request states and who moves them:
 *
 *   submit --> INBOX --(step: drain_inbox)--> WAITING --(admit)--> RUNNING --(finish)--> gone
 *                                                ^                    |
 *                                                +----(preempt)-------+
 *   abort marks a request; the next step releases it wherever it is.
 *
 * Invariants:
 *   1. A running request holds one state slot and the pages covering its
 *      computed positions; a waiting request holds nothing.
 *   2. tokens[0..n_tokens) is the prompt followed by the generated tokens;
 *      positions [0, n_computed) have their KV and DeltaNet state computed.
 *      Preemption resets n_computed to 0 and keeps the tokens.
 *   3. A step runs at most step_tokens tokens; a decode (n_tokens - n_computed
 *      == 1) always gets its token before any prefill does.
 *   4. Prefill of a request is cut only at its own fixed cut points, so its
 *      outputs do not depend on what else is in the step.
 * Memory: every table is sized at creation except each request's own token
 * and page arrays, sized once at submission from its prompt and max_tokens. */
#include "engine/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_int.h"

void ds_engine_defaults(ds_engine_params *p) {
    *p = (ds_engine_params){.kv_bytes = (size_t)256 << 20, .state_bytes = (size_t)256 << 20,
                            .cache_state_bytes = (size_t)256 << 20, .page_size = 16, .max_running = 64,
                            .step_tokens = 512, .prefill_chunk = 256, .checkpoint_interval = 512,
                            .prefix_cache = 1, .max_queue = 0, .spec_tokens = 3,
                            .spec_state_bytes = (size_t)256 << 20};
    p->spec_vocab = DS_SPEC_VOCAB_DEFAULT;
}

/* --- set-up --- */

typedef struct {
    const ds_model_config *c;
    int64_t macs;
} macs_ctx;

static void count_macs(const ds_tensor_spec *t, void *arg) {
    macs_ctx *m = arg;
    if (t->kind != DS_TK_MATRIX || t->layer < 0 || t->layer >= m->c->n_layer) return;
    int64_t n = t->ne[0] * t->ne[1] * (t->n_dims > 2 ? t->ne[2] : 1);
    if (t->n_dims == 3 && m->c->n_expert > 0) n = n / m->c->n_expert * m->c->n_expert_used;
    m->macs += n;
}

/* Multiply-adds one prefill token costs in the decoder layers' weight
 * matrices: the unit the vision tower's work is measured against. */
static int64_t token_macs(const ds_model_config *c) {
    macs_ctx m = {.c = c};
    ds_model_for_each_spec(c, count_macs, &m);
    return m.macs > 0 ? m.macs : 1;
}

/* Every row of a step counts against step_tokens, which is at least one
 * prefill chunk; the MTP calls of a step carry at most the rows it kept. */
int ds_engine_required_batch_capacity(const ds_engine_params *p) {
    return p->step_tokens > p->prefill_chunk ? p->step_tokens : p->prefill_chunk;
}

ds_status ds_engine_new(ds_model *model, const ds_engine_params *params, ds_engine **out, ds_err *e) {
    *out = NULL;
    ds_engine_params p = *params;
    if (p.page_size <= 0 || DS_DELTANET_CHUNK % p.page_size != 0)
        return ds_fail(e, DS_EINVAL, "engine: page size %d does not divide %d", p.page_size, DS_DELTANET_CHUNK);
    if (p.prefill_chunk <= 0 || p.prefill_chunk % DS_DELTANET_CHUNK || p.checkpoint_interval < 0 ||
        p.checkpoint_interval % DS_DELTANET_CHUNK)
        return ds_fail(e, DS_EINVAL, "engine: prefill chunk (%d) and checkpoint interval (%d) must be multiples of %d",
                       p.prefill_chunk, p.checkpoint_interval, DS_DELTANET_CHUNK);
    if (p.kv_events && p.checkpoint_interval == 0 && ds_model_n_gdn_layers(model) > 0)
        return ds_fail(e, DS_EINVAL, "engine: KV events need a checkpoint interval on a model with DeltaNet layers: "
                                     "a request resumes only at a checkpoint, and the interval is the event block "
                                     "(checkpoint interval 0 gives none; use a multiple of %d, e.g. 512)",
                       DS_DELTANET_CHUNK);
    int need = ds_engine_required_batch_capacity(&p), have = ds_model_max_batch_tokens(model);
    if (have < need)
        return ds_fail(e, DS_EINVAL,
                       "engine: the model takes at most %d tokens per call, the engine's steps need %d "
                       "(step tokens %d, prefill chunk %d; see ds_engine_required_batch_capacity)",
                       have, need, p.step_tokens, p.prefill_chunk);
    if (p.spec_vocab < 0)
        return ds_fail(e, DS_EINVAL, "engine: a draft vocabulary of %d tokens (0: the whole vocabulary, or 1 and up)",
                       p.spec_vocab);
    if (p.step_tokens < p.prefill_chunk) p.step_tokens = p.prefill_chunk;
    if (p.max_running < 1) p.max_running = 1;
    ds_engine *g = calloc(1, sizeof *g);
    if (!g) return ds_fail(e, DS_ENOMEM, "engine: out of memory");
    g->model = model;
    g->cfg = ds_model_cfg(model);
    g->p = p;
    g->hybrid = ds_model_n_gdn_layers(model) > 0;
    g->next_id = 1;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    const ds_model_config *c = g->cfg;
    ds_status s = ds_kv_pool_init(&g->kv, ds_model_n_attn_layers(model) ? ds_model_n_attn_layers(model) : 1,
                                  c->n_head_kv, c->head_dim, p.page_size, p.kv_bytes, e);
    size_t slot_bytes = 0;
    int n_slots = p.max_running, n_ckpt = 0, n_vslots = 0;
    if (!s && g->hybrid) {
        ds_state_pool probe;
        if ((s = ds_state_pool_init(&probe, ds_model_n_gdn_layers(model), c->conv_kernel, ds_model_conv_dim(model),
                                    c->lin_v_heads, c->lin_k_dim, c->lin_v_dim, 1, e)) == DS_OK) {
            slot_bytes = probe.slot_floats * sizeof(float);
            ds_state_pool_free(&probe);
            n_slots = (int)(p.state_bytes / slot_bytes);
            n_ckpt = p.prefix_cache ? (int)(p.cache_state_bytes / slot_bytes) : 0;
            size_t record_bytes = ds_model_verify_record_floats(model) * sizeof(float) *
                                  (size_t)ds_model_n_gdn_layers(model);
            if (c->n_mtp && p.spec_tokens > 0 && record_bytes > 0) {
                size_t fit = p.spec_state_bytes / record_bytes;
                /* more than every running sequence verifying its longest draft would sit unused */
                size_t most = (size_t)p.max_running * (size_t)((p.spec_tokens < DS_MAX_SPEC ? p.spec_tokens : DS_MAX_SPEC) + 1);
                n_vslots = (int)(fit < most ? fit : most);
                if (n_vslots < 2) n_vslots = 0; /* not even one draft: no speculation */
                if (n_vslots > 0)
                    s = ds_record_pool_init(&g->records, ds_model_n_gdn_layers(model),
                                            ds_model_verify_record_floats(model), n_vslots, e);
            }
            if (n_slots < 1)
                s = ds_fail(e, DS_ENOMEM, "engine: a state budget of %zu bytes does not hold one sequence (%zu bytes)",
                            p.state_bytes, slot_bytes);
            if (n_slots > p.max_running) n_slots = p.max_running;
            /* decode-time boundary checkpoints need one per running sequence on top of the cache's */
            if (!s) s = ds_state_pool_init(&g->st, ds_model_n_gdn_layers(model), c->conv_kernel,
                                           ds_model_conv_dim(model), c->lin_v_heads, c->lin_k_dim, c->lin_v_dim,
                                           n_slots + n_ckpt, e);
        }
    }
    if (!s && g->hybrid && n_slots < p.max_running) g->p.max_running = p.max_running = n_slots;
    if (!s && (ds_id_pool_init(&g->pages, 0, g->kv.n_pages) || ds_id_pool_init(&g->slots, 0, n_slots) ||
               ds_id_pool_init(&g->ckpts, n_slots, n_ckpt) || ds_id_pool_init(&g->vslots, 0, n_vslots)))
        s = ds_fail(e, DS_ENOMEM, "engine: out of memory");
    g->max_seq = g->kv.n_pages * p.page_size;
    if (!p.allow_long_context && g->max_seq > ds_model_context_limit(c)) g->max_seq = ds_model_context_limit(c);
    if (!s && p.prefix_cache) {
        g->cache = ds_prefix_cache_new(p.page_size, g->kv.n_pages, &g->pages, &g->ckpts, g->hybrid);
        if (!g->cache) s = ds_fail(e, DS_ENOMEM, "engine: out of memory for the prefix cache");
        else if (p.kv_events && ds_prefix_events_on(g->cache, p.kv_events, ds_engine_kv_block_size(g)))
            s = ds_fail(e, DS_ENOMEM, "engine: out of memory for the KV events' block records");
    } else if (!s && p.kv_events) { /* no cache, nothing to announce: the router learns just that */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ds_kv_event ev = {.type = DS_KV_ALL_CLEARED, .time = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9};
        ds_kv_event_push(p.kv_events, &ev);
    }
    /* speculation: drafts need the MTP head's own KV (one layer, same page ids) and verify slots */
    if (!s && n_vslots > 0) {
        g->spec_max = p.spec_tokens < DS_MAX_SPEC ? p.spec_tokens : DS_MAX_SPEC;
        g->draft_vocab = p.spec_vocab > 0 && p.spec_vocab < c->n_vocab ? p.spec_vocab : c->n_vocab;
        g->draft_cost = ds_model_draft_cost(model, g->draft_vocab);
        size_t mtp_page = (size_t)p.page_size * (size_t)c->n_head_kv * (size_t)c->head_dim * 2 * sizeof(float);
        s = ds_kv_pool_init(&g->mtp_kv, 1, c->n_head_kv, c->head_dim, p.page_size, mtp_page * (size_t)g->kv.n_pages, e);
    }
    int n_rows = p.step_tokens; /* every row of a step counts against its budget */
    size_t H = (size_t)c->n_embd;
    g->hidden = malloc((size_t)n_rows * H * sizeof *g->hidden);
    g->mtp_hidden_in = malloc((size_t)n_rows * H * sizeof(float));
    g->mtp_hidden_out = malloc((size_t)n_rows * H * sizeof(float));
    g->mtp_logits = malloc((size_t)n_rows * (size_t)(g->draft_vocab ? g->draft_vocab : c->n_vocab) * sizeof(float));
    g->mtp_rows = malloc((size_t)n_rows * sizeof *g->mtp_rows);
    g->mtp_seqs = malloc((size_t)p.max_running * sizeof *g->mtp_seqs);
    g->mtp_req = malloc((size_t)p.max_running * sizeof *g->mtp_req);
    if (!s && (!g->hidden || !g->mtp_hidden_in || !g->mtp_hidden_out || !g->mtp_logits || !g->mtp_rows ||
               !g->mtp_seqs || !g->mtp_req))
        s = ds_fail(e, DS_ENOMEM, "engine: out of memory for step tables");
    g->running = calloc((size_t)p.max_running, sizeof *g->running);
    g->rows = calloc((size_t)n_rows, sizeof *g->rows);
    g->seqs = calloc((size_t)p.max_running, sizeof *g->seqs);
    g->seq_req = calloc((size_t)p.max_running, sizeof *g->seq_req);
    g->seq_first_row = calloc((size_t)p.max_running, sizeof *g->seq_first_row);
    g->seq_n_rows = calloc((size_t)p.max_running, sizeof *g->seq_n_rows);
    g->logits = malloc((size_t)n_rows * (size_t)c->n_vocab * sizeof *g->logits);
    g->lookup_pages = malloc(((size_t)g->max_seq / (size_t)p.page_size + 1) * sizeof *g->lookup_pages);
    g->allowed = malloc(DS_MASK_WORDS(c->n_vocab) * sizeof *g->allowed);
    g->rope = malloc((size_t)n_rows * 3 * sizeof *g->rope);
    g->embd = malloc((size_t)n_rows * sizeof *g->embd);
    g->mtp_rope = malloc((size_t)n_rows * 3 * sizeof *g->mtp_rope);
    g->mtp_embd = malloc((size_t)n_rows * sizeof *g->mtp_embd);
    g->jobs = malloc((size_t)p.max_running * sizeof *g->jobs);
    g->job_req = malloc((size_t)p.max_running * sizeof *g->job_req);
    g->token_macs = token_macs(c);
    g->vision_step_flops = g->token_macs * p.step_tokens;
    g->filtered = malloc((size_t)c->n_vocab * sizeof *g->filtered);
    if (!s && p.spec_policy == DS_SPEC_POLICY_GIVEN && !p.spec_given)
        s = ds_fail(e, DS_EINVAL, "engine: the GIVEN speculation policy needs its costs (spec_given)");
    if (!s && (p.spec_policy < DS_SPEC_POLICY_BATCH || p.spec_policy > DS_SPEC_POLICY_GIVEN))
        s = ds_fail(e, DS_EINVAL, "engine: speculation policy %d is not one of BATCH, REQUEST, GIVEN", p.spec_policy);
    if (!s && ds_spec_init(g)) s = ds_fail(e, DS_ENOMEM, "engine: out of memory for the speculation plan's tables");
    if (!s && (!g->running || !g->rows || !g->seqs || !g->seq_req || !g->seq_first_row || !g->seq_n_rows ||
               !g->logits || !g->lookup_pages || !g->allowed || !g->filtered || !g->rope || !g->embd ||
               !g->mtp_rope || !g->mtp_embd || !g->jobs || !g->job_req ||
               ds_sampler_scratch_init(&g->scratch, c->n_vocab)))
        s = ds_fail(e, DS_ENOMEM, "engine: out of memory for step tables");
    size_t most = (size_t)g->pages.n;
    if ((size_t)g->slots.n > most) most = (size_t)g->slots.n;
    if ((size_t)g->vslots.n > most) most = (size_t)g->vslots.n;
    g->check_pages = malloc(((size_t)g->pages.n + 1) * sizeof *g->check_pages);
    g->check_ckpts = malloc(((size_t)g->ckpts.n + 1) * sizeof *g->check_ckpts);
    g->check_scratch = malloc((most + 1) * sizeof *g->check_scratch);
    if (!s && (!g->check_pages || !g->check_ckpts || !g->check_scratch))
        s = ds_fail(e, DS_ENOMEM, "engine: out of memory for the invariant checks");
    const char *env = getenv("DS_CHECK_INVARIANTS");
    g->check_invariants = p.check_invariants || (env && !strcmp(env, "1"));
    g->stats.kv_pages_total = g->kv.n_pages;
    g->stats.state_slots_total = n_slots;
    g->stats.checkpoint_slots_total = n_ckpt;
    if (s) {
        ds_engine_free(g);
        return s;
    }
    *out = g;
    return DS_OK;
}

static void req_free(req *r) {
    if (!r) return;
    ds_image_req_free(r);
    free(r->prompt_copy);
    free(r->stop_copy);
    free(r->tokens);
    free(r->pages);
    free(r);
}

/* Frees a request that has sent its last event: off the live list (and the
 * pending list, should a flag have arrived after it ended), then gone. */
static void req_retire(ds_engine *g, req *r) {
    pthread_mutex_lock(&g->mu);
    if (r->live_prev) r->live_prev->live_next = r->live_next;
    else g->live_head = r->live_next;
    if (r->live_next) r->live_next->live_prev = r->live_prev;
    if (r->pending) {
        req **link = &g->pending_head;
        while (*link != r) link = &(*link)->pending_next;
        *link = r->pending_next;
    }
    pthread_mutex_unlock(&g->mu);
    req_free(r);
}

void ds_engine_free(ds_engine *g) {
    if (!g) return;
    for (int i = 0; i < g->n_running; i++) req_free(g->running[i]);
    for (req *r = g->waiting_head, *nx; r; r = nx) { nx = r->next; req_free(r); }
    for (req *r = g->inbox_head, *nx; r; r = nx) { nx = r->next; req_free(r); }
    ds_prefix_cache_free(g->cache);
    ds_kv_pool_free(&g->kv);
    ds_state_pool_free(&g->st);
    ds_state_pool_free(&g->records);
    ds_id_pool_free(&g->pages);
    ds_id_pool_free(&g->slots);
    ds_id_pool_free(&g->ckpts);
    ds_id_pool_free(&g->vslots);
    ds_kv_pool_free(&g->mtp_kv);
    ds_spec_free(g);
    free(g->hidden);
    free(g->mtp_hidden_in);
    free(g->mtp_hidden_out);
    free(g->mtp_logits);
    free(g->mtp_rows);
    free(g->mtp_seqs);
    free(g->mtp_req);
    free(g->running);
    free(g->rows);
    free(g->seqs);
    free(g->seq_req);
    free(g->seq_first_row);
    free(g->seq_n_rows);
    free(g->logits);
    free(g->lookup_pages);
    free(g->allowed);
    free(g->filtered);
    free(g->rope);
    free(g->embd);
    free(g->mtp_rope);
    free(g->mtp_embd);
    free(g->jobs);
    free(g->job_req);
    free(g->check_pages);
    free(g->check_ckpts);
    free(g->check_scratch);
    ds_sampler_scratch_free(&g->scratch);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

/* --- any thread --- */

ds_status ds_engine_set_vision(ds_engine *g, ds_vision *v, size_t budget_bytes, ds_err *e) {
    const ds_vision_config *vc = v ? ds_vision_cfg(v) : NULL;
    if (!vc) return ds_fail(e, DS_EINVAL, "engine: no vision tower given");
    if (vc->out_embd != g->cfg->n_embd)
        return ds_fail(e, DS_EINVAL, "engine: the vision tower's output width %d is not the model's width %d",
                       vc->out_embd, g->cfg->n_embd);
    if (vc->merge < 1 || vc->n_deepstack < 0 || vc->n_deepstack > DS_MAX_DEEPSTACK)
        return ds_fail(e, DS_EINVAL, "engine: the vision tower's merge (%d) or DeepStack count (%d) is out of range",
                       vc->merge, vc->n_deepstack);
    if (budget_bytes == 0) return ds_fail(e, DS_EINVAL, "engine: a vision budget of 0 bytes encodes nothing");
    /* image tokens need three-axis positions: a model without them would refuse every batch with an image */
    if (g->cfg->mrope_sections[0] + g->cfg->mrope_sections[1] + g->cfg->mrope_sections[2] == 0)
        return ds_fail(e, DS_EINVAL, "engine: the model has no M-RoPE sections, so it cannot place image tokens");
    g->vision = v;
    g->vision_budget = budget_bytes;
    g->vision_row_floats = vc->out_embd * (1 + vc->n_deepstack);
    pthread_mutex_lock(&g->mu);
    g->stats.vision_bytes_total = budget_bytes;
    g->stats.vision_step_flops = g->vision_step_flops;
    pthread_mutex_unlock(&g->mu);
    return DS_OK;
}

uint64_t ds_engine_submit(ds_engine *g, const ds_request_params *rp, ds_err *e) {
    if (rp->n_prompt < 1) { ds_fail(e, DS_EINVAL, "the prompt is empty"); return 0; }
    if (rp->max_tokens < 1) { ds_fail(e, DS_EINVAL, "max_tokens must be at least 1"); return 0; }
    if ((int64_t)rp->n_prompt + rp->max_tokens > g->max_seq) {
        ds_fail(e, DS_EINVAL, "prompt (%d tokens) + max_tokens (%d) exceeds the context of %d tokens", rp->n_prompt,
                rp->max_tokens, g->max_seq);
        return 0;
    }
    if (rp->n_top_logprobs < 0 || rp->n_top_logprobs > DS_MAX_TOP_LOGPROBS) {
        ds_fail(e, DS_EINVAL, "top logprobs must be 0..%d", DS_MAX_TOP_LOGPROBS);
        return 0;
    }
    for (int i = 0; i < rp->n_prompt; i++)
        if (rp->prompt[i] < 0 || rp->prompt[i] >= g->cfg->n_vocab) {
            ds_fail(e, DS_EINVAL, "prompt token %d at index %d is outside the vocabulary", rp->prompt[i], i);
            return 0;
        }
    req *r = calloc(1, sizeof *r);
    if (!r) { ds_fail(e, DS_ENOMEM, "out of memory"); return 0; }
    r->p = *rp;
    r->cap_tokens = rp->n_prompt + rp->max_tokens;
    r->cap_pages = (r->cap_tokens + g->p.page_size - 1) / g->p.page_size;
    r->tokens = malloc((size_t)r->cap_tokens * sizeof *r->tokens);
    r->pages = malloc((size_t)r->cap_pages * sizeof *r->pages);
    r->stop_copy = malloc((size_t)(rp->n_stop_ids + 1) * sizeof *r->stop_copy);
    if (!r->tokens || !r->pages || !r->stop_copy) {
        req_free(r);
        ds_fail(e, DS_ENOMEM, "out of memory");
        return 0;
    }
    memcpy(r->tokens, rp->prompt, (size_t)rp->n_prompt * sizeof *r->tokens);
    if (rp->n_stop_ids) memcpy(r->stop_copy, rp->stop_ids, (size_t)rp->n_stop_ids * sizeof *r->stop_copy);
    r->p.prompt = NULL;
    r->p.stop_ids = r->stop_copy;
    r->n_tokens = r->n_prompt = rp->n_prompt;
    r->slot = -1;
    r->k = g->spec_max;
    r->draft_free_from = DS_MAX_SPEC + 1;
    /* an optimistic start: a new request drafts the most until its own acceptance says otherwise */
    r->acc_hits = 1.6f;
    r->acc_trials = 2.0f;
    r->fault = rp->fault;
    if (ds_image_req_init(g, r, rp, e) != DS_OK) {
        req_free(r);
        return 0;
    }
    ds_sampler_init(&r->sampler, &rp->sampling);
    pthread_mutex_lock(&g->mu);
    if (g->p.max_queue > 0 && g->n_inbox + g->stats.waiting >= g->p.max_queue) {
        pthread_mutex_unlock(&g->mu);
        req_free(r);
        ds_fail(e, DS_EBUSY, "the queue is full (%d requests waiting)", g->p.max_queue);
        return 0;
    }
    r->id = g->next_id++;
    /* the images' patches are the request's from here on: the caller's copies are emptied */
    r->owns_patches = 1;
    for (int k = 0; k < rp->n_images; k++) rp->images[k].patches = (ds_image_patches){0};
    r->live_next = g->live_head;
    if (g->live_head) g->live_head->live_prev = r;
    g->live_head = r;
    if (g->inbox_tail) g->inbox_tail->next = r;
    else g->inbox_head = r;
    g->inbox_tail = r;
    g->n_inbox++;
    g->stats.started++;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return r->id;
}

/* Flags the live request with this id for the next step. An id not live has
 * ended already (or never existed): there is nothing to do. The flag lives in
 * the request, so however many arrive between two steps none is lost. */
static void flag_request(ds_engine *g, uint64_t id, int flag) {
    pthread_mutex_lock(&g->mu);
    for (req *r = g->live_head; r; r = r->live_next) {
        if (r->id != id) continue;
        if (!r->pending) {
            r->pending_next = g->pending_head;
            g->pending_head = r;
        }
        r->pending |= flag;
        pthread_cond_signal(&g->cv);
        break;
    }
    pthread_mutex_unlock(&g->mu);
}

void ds_engine_abort(ds_engine *g, uint64_t id) { flag_request(g, id, PENDING_ABORT); }
void ds_engine_inject_fault(ds_engine *g, uint64_t id) { flag_request(g, id, PENDING_FAULT); }

void ds_engine_fail_all(ds_engine *g, const char *why) {
    pthread_mutex_lock(&g->mu);
    snprintf(g->fail_all, sizeof g->fail_all, "%s", why && *why ? why : "the engine was stopped");
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void ds_engine_stop(ds_engine *g) {
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

int ds_engine_kv_block_size(const ds_engine *g) { return g->hybrid ? g->p.checkpoint_interval : g->p.page_size; }

void ds_engine_stats_get(ds_engine *g, ds_engine_stats *st) {
    pthread_mutex_lock(&g->mu);
    *st = g->stats;
    st->waiting += g->n_inbox;
    pthread_mutex_unlock(&g->mu);
}

/* --- engine thread --- */

static void release_memory(ds_engine *g, req *r) {
    ds_spec_release(g, r);
    ds_image_release_job(g, r);
    for (int i = 0; i < r->n_pages; i++) ds_id_unref(&g->pages, r->pages[i]);
    r->n_pages = 0;
    if (r->slot >= 0) ds_id_unref(&g->slots, r->slot);
    r->slot = -1;
    r->n_drafts = 0;
}

static void remove_running(ds_engine *g, req *r) {
    int i = r->running_index;
    g->running[i] = g->running[--g->n_running];
    g->running[i]->running_index = i;
}

static void emit_finish(ds_engine *g, req *r, ds_finish reason, const char *error) {
    ds_event ev = {.id = r->id, .finished = 1, .reason = reason, .error = error, .n_prompt = r->n_prompt,
                   .n_cached = r->n_cached, .n_generated = r->n_generated};
    if (r->p.on_event) r->p.on_event(&ev, r->p.user);
    pthread_mutex_lock(&g->mu);
    if (reason == DS_FINISH_ABORT) g->stats.aborted++;
    else if (reason == DS_FINISH_ERROR) g->stats.failed++;
    else g->stats.finished++;
    pthread_mutex_unlock(&g->mu);
}

/* Leaves the full pages of a finished request's prompt to the cache. Only
 * prompt positions are offered: they were computed by prefill, as a later
 * prompt that repeats them would compute them, so a hit changes nothing. */
static void offer_to_cache(ds_engine *g, req *r) {
    int upto = r->n_computed < r->n_prompt ? r->n_computed : r->n_prompt;
    if (g->cache && upto >= g->p.page_size) {
        ds_prefix_origin o = {.tokens = r->tokens, .images = r->spans, .n_images = r->n_images};
        ds_prefix_insert(g->cache, ds_image_keys(r), upto / g->p.page_size, r->pages, -1, 0, &o);
    }
}

/* Where checkpoints may sit: with KV events only at the event block (the
 * router's unit), else at any multiple of DS_DELTANET_CHUNK. */
static int ckpt_unit(const ds_engine *g) {
    return g->p.kv_events && g->hybrid ? ds_engine_kv_block_size(g) : DS_DELTANET_CHUNK;
}

static void finish(ds_engine *g, req *r, ds_finish reason, const char *error) {
    if (reason == DS_FINISH_STOP || reason == DS_FINISH_LENGTH) offer_to_cache(g, r);
    release_memory(g, r);
    remove_running(g, r);
    emit_finish(g, r, reason, error);
    req_retire(g, r);
}

/* ds_engine_fail_all, on the engine thread. */
static void fail_all_pending(ds_engine *g) {
    pthread_mutex_lock(&g->mu);
    int pending = g->fail_all[0] != '\0';
    if (pending) {
        memcpy(g->fail_msg, g->fail_all, sizeof g->fail_msg);
        g->fail_all[0] = '\0';
    }
    pthread_mutex_unlock(&g->mu);
    if (!pending) return;
    while (g->n_running > 0) finish(g, g->running[g->n_running - 1], DS_FINISH_ERROR, g->fail_msg);
    for (req *r = g->waiting_head, *nx; r; r = nx) {
        nx = r->next;
        emit_finish(g, r, DS_FINISH_ERROR, g->fail_msg);
        req_retire(g, r);
    }
    g->waiting_head = g->waiting_tail = NULL;
    g->n_waiting = 0;
}

static void drain_inbox(ds_engine *g) {
    pthread_mutex_lock(&g->mu);
    req *in = g->inbox_head;
    g->inbox_head = g->inbox_tail = NULL;
    g->n_inbox = 0;
    /* the flagged requests are all live, and only this thread frees them */
    for (req *r = g->pending_head, *nx; r; r = nx) {
        nx = r->pending_next;
        if (r->pending & PENDING_ABORT) r->aborted = 1;
        if (r->pending & PENDING_FAULT) r->fault = DS_FAULT_ANY, r->p.fault_after_tokens = 0;
        r->pending = 0;
        r->pending_next = NULL;
    }
    g->pending_head = NULL;
    pthread_mutex_unlock(&g->mu);
    for (req *r = in, *nx; r; r = nx) {
        nx = r->next;
        r->next = NULL;
        if (g->waiting_tail) g->waiting_tail->next = r;
        else g->waiting_head = r;
        g->waiting_tail = r;
        g->n_waiting++;
    }
}

static void handle_aborts(ds_engine *g) {
    for (req **link = &g->waiting_head, *r; (r = *link);) {
        if (!r->aborted) {
            link = &r->next;
            continue;
        }
        *link = r->next;
        if (g->waiting_tail == r) {
            g->waiting_tail = NULL;
            for (req *t = g->waiting_head; t; t = t->next) g->waiting_tail = t;
        }
        g->n_waiting--;
        emit_finish(g, r, DS_FINISH_ABORT, NULL);
        req_retire(g, r);
    }
    for (int i = 0; i < g->n_running;) {
        req *r = g->running[i];
        if (r->aborted) finish(g, r, DS_FINISH_ABORT, NULL);
        else i++;
    }
}

static int get_page(ds_engine *g) {
    int id = ds_id_get(&g->pages);
    while (id < 0 && g->cache && ds_prefix_evict_page(g->cache)) id = ds_id_get(&g->pages);
    return id;
}

static int get_ckpt(ds_engine *g) {
    int id = ds_id_get(&g->ckpts);
    while (id < 0 && g->cache && ds_prefix_evict_checkpoint(g->cache)) id = ds_id_get(&g->ckpts);
    return id;
}

/* Puts a running request back at the head of the queue, keeping its tokens. */
static void preempt(ds_engine *g, req *r) {
    release_memory(g, r);
    remove_running(g, r);
    r->n_computed = 0;
    r->next = g->waiting_head;
    g->waiting_head = r;
    if (!g->waiting_tail) g->waiting_tail = r;
    g->n_waiting++;
    g->stats.preemptions++;
}

/* Requests sharing a long prompt prefix often arrive together (one system
 * prompt, many users). Admitted side by side they would each compute the
 * prefix; instead the later one waits while the first is prefilled up to the
 * shared point, where the first leaves its pages and a DeltaNet checkpoint in
 * the cache (an extra cut at a multiple of DS_DELTANET_CHUNK, which changes none of its
 * arithmetic). Returns 1 when w should wait. */
static int wait_for_shared_prefill(ds_engine *g, req *w) {
    if (!g->cache) return 0;
    for (int i = 0; i < g->n_running; i++) {
        req *r = g->running[i];
        if (r->n_computed >= r->n_prompt) continue;
        int n = w->n_prompt - 1 < r->n_prompt ? w->n_prompt - 1 : r->n_prompt; /* w computes at least one token */
        int shared = 0;
        const int32_t *wk = ds_image_keys(w), *rk = ds_image_keys(r);
        while (shared < n && wk[shared] == rk[shared]) shared++;
        int at = shared / ckpt_unit(g) * ckpt_unit(g);
        if (at < 128 || at <= r->n_computed) continue; /* too little to gain, or r is past it */
        if (r->share_cut <= r->n_computed || at < r->share_cut) r->share_cut = at;
        return 1;
    }
    return 0;
}

static int admit(ds_engine *g) {
    int admitted = 0, looked = 0;
    req **link = &g->waiting_head, *prev = NULL;
    while (*link && g->n_running < g->p.max_running) {
        req *r = *link;
        /* bounded, so that a long queue costs little per step */
        if (looked++ < 64 && wait_for_shared_prefill(g, r)) {
            prev = r;
            link = &r->next;
            continue;
        }
        /* a request that could not get pages for its first chunk would only be preempted again;
         * with nothing running it is admitted anyway, as it fits the pool alone (submit checked) */
        int first = r->n_prompt < g->p.prefill_chunk ? r->n_prompt : g->p.prefill_chunk;
        int need = first / g->p.page_size + 1;
        while (g->n_running > 0 && g->pages.n_free < need && g->cache && ds_prefix_evict_page(g->cache)) {}
        if (g->n_running > 0 && g->pages.n_free < need) break;
        int slot = g->hybrid ? ds_id_get(&g->slots) : 0;
        if (slot < 0) break;
        *link = r->next;
        if (g->waiting_tail == r) g->waiting_tail = prev;
        g->n_waiting--;
        r->next = NULL;
        r->share_cut = 0;
        r->slot = g->hybrid ? slot : -1;
        if (g->hybrid) ds_state_clear(&g->st, slot);
        r->n_computed = 0;
        if (g->cache) {
            int ckpt = -1;
            /* only prompt positions are in the cache; after a preemption the whole prompt may be
             * reused since generated tokens are left to compute */
            int n_look = r->n_prompt + (r->n_generated > 0 ? 1 : 0);
            int reused = ds_prefix_lookup(g->cache, ds_image_keys(r), n_look, g->lookup_pages, &ckpt);
            if (reused > 0) {
                memcpy(r->pages, g->lookup_pages, (size_t)(reused / g->p.page_size) * sizeof *r->pages);
                r->n_pages = reused / g->p.page_size;
                if (ckpt >= 0) ds_state_copy(&g->st, slot, ckpt);
                r->n_computed = reused;
                if (r->n_generated == 0) r->n_cached = reused;
                int image_tokens = 0;
                for (int k = 0; k < r->n_images && r->images[k].first < reused; k++)
                    image_tokens += (r->images[k].first + r->images[k].n < reused ? r->images[k].first + r->images[k].n
                                                                                  : reused) - r->images[k].first;
                pthread_mutex_lock(&g->mu);
                g->stats.image_tokens_cached += image_tokens;
                pthread_mutex_unlock(&g->mu);
            }
        }
        r->running_index = g->n_running;
        g->running[g->n_running++] = r;
        admitted++;
    }
    return admitted;
}

static int round_down(int x, int m) { return x / m * m; }

/* End of the next chunk of r. Prompt positions are prefilled up to the
 * nearest of r's fixed cut points; generated positions being recomputed after
 * a preemption go through the decode path, as they were first computed, so
 * that a preemption does not change what a request produces. */
static int chunk_end(const ds_engine *g, const req *r, ds_seq_mode *mode) {
    int from = r->n_computed;
    if (from >= r->n_prompt) {
        *mode = DS_SEQ_DECODE;
        int end = r->n_tokens;
        if (end - from > g->p.prefill_chunk) end = from + g->p.prefill_chunk;
        return end;
    }
    *mode = DS_SEQ_PREFILL;
    int end = r->n_prompt;
    int cut = round_down(from, g->p.prefill_chunk) + g->p.prefill_chunk;
    if (cut < end) end = cut;
    if (g->p.checkpoint_interval) {
        int ck = round_down(from, g->p.checkpoint_interval) + g->p.checkpoint_interval;
        if (ck < end) end = ck;
    }
    int prompt_cut = round_down(r->n_prompt, ckpt_unit(g)); /* the end-of-prompt checkpoint */
    if (prompt_cut > from && prompt_cut < end) end = prompt_cut;
    if (r->share_cut > from && r->share_cut < end) end = r->share_cut;
    return r->n_images ? ds_image_prefill_end(g, r, from, end) : end;
}

int ds_engine_ensure_pages(ds_engine *g, req *r, int upto) {
    int need = (upto + g->p.page_size - 1) / g->p.page_size;
    while (r->n_pages < need) {
        int id = get_page(g);
        if (id < 0) return -1;
        r->pages[r->n_pages++] = id;
    }
    return 0;
}

static int is_stop(const ds_engine *g, const req *r, int32_t t) {
    if (!r->p.ignore_eos)
        for (int i = 0; i < g->cfg->n_eos; i++)
            if (t == g->cfg->eos_ids[i]) return 1;
    for (int i = 0; i < r->p.n_stop_ids; i++)
        if (t == r->p.stop_ids[i]) return 1;
    return 0;
}

/* The token's log-probability and the k most likely tokens (ties: the lower id
 * first), in one pass for the normaliser and one for the top k. */
static void token_logprobs(const float *logits, int V, int k, ds_event *ev) {
    float mx = logits[0];
    for (int i = 1; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    ev->logprob = (float)(logits[ev->token] - lse);
    int n = 0;
    for (int i = 0; i < V && k > 0; i++) {
        float v = logits[i];
        if (n == k && !(v > logits[ev->top_ids[k - 1]])) continue;
        int j = n < k ? n++ : k - 1;
        for (; j > 0 && logits[ev->top_ids[j - 1]] < v; j--) ev->top_ids[j] = ev->top_ids[j - 1];
        ev->top_ids[j] = i;
    }
    ev->n_top = n;
    for (int j = 0; j < n; j++) ev->top_logprobs[j] = (float)(logits[ev->top_ids[j]] - lse);
}

int ds_engine_append(ds_engine *g, req *r, int32_t t, const float *logits) {
    r->tokens[r->n_tokens++] = t;
    r->n_generated++;
    ds_event ev = {.id = r->id, .token = t, .n_prompt = r->n_prompt, .n_cached = r->n_cached,
                   .n_generated = r->n_generated};
    /* a pass over the vocabulary (a millisecond for 248k tokens): only when asked */
    if (r->p.want_logprob || r->p.n_top_logprobs > 0) token_logprobs(logits, g->cfg->n_vocab, r->p.n_top_logprobs, &ev);
    int stop = is_stop(g, r, t);
    if (!stop && r->p.on_event) r->p.on_event(&ev, r->p.user);
    pthread_mutex_lock(&g->mu);
    g->stats.generated_tokens++;
    pthread_mutex_unlock(&g->mu);
    if (stop) finish(g, r, DS_FINISH_STOP, NULL);
    else if (r->n_generated >= r->p.max_tokens) finish(g, r, DS_FINISH_LENGTH, NULL);
    else return 0;
    return 1;
}

ds_filter_result ds_engine_filter(ds_engine *g, req *r, int n_answer, const float *logits, int n_logits) {
    int V = g->cfg->n_vocab;
    memset(g->allowed, 0, DS_MASK_WORDS(V) * sizeof *g->allowed);
    ds_filter_result f = r->p.filter(r->p.filter_user, r->tokens + r->n_prompt, n_answer, g->allowed, V);
    if (f != DS_FILTER_MASK) return f;
    V = n_logits; /* the mask is the whole vocabulary's; a draft's logits cover only its first tokens */
    /* by words: a speculating request masks up to 2k + 1 rows a step, and masks are mostly runs */
    for (size_t w = 0, words = DS_MASK_WORDS(V); w < words; w++) {
        uint32_t bits = g->allowed[w];
        int i0 = (int)w * 32, n = V - i0 < 32 ? V - i0 : 32;
        float *out = g->filtered + i0;
        if (bits == 0) {
            for (int i = 0; i < n; i++) out[i] = -INFINITY;
        } else if (bits == UINT32_MAX && n == 32) {
            memcpy(out, logits + i0, 32 * sizeof *out);
        } else {
            for (int i = 0; i < n; i++) out[i] = (bits >> i) & 1u ? logits[i0 + i] : -INFINITY;
        }
    }
    return f;
}

void ds_engine_fail_request(ds_engine *g, req *r, const char *why) { finish(g, r, DS_FINISH_ERROR, why); }

double ds_engine_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ds_engine_note_choice(ds_engine *g, req *r, double seconds, int n) {
    if (n <= 0) return;
    double per = seconds / n;
    r->choice_s = r->choice_s > 0 ? (float)(0.8 * r->choice_s + 0.2 * per) : (float)per;
    g->step_parts_s += seconds;
}

/* After a forward: the request whose computed positions reached its last token samples the next one. */
static int sample_next(ds_engine *g, req *r, const float *logits) {
    const float *from = logits;
    if (r->p.filter && !r->filter_done) {
        ds_filter_result f = ds_engine_filter(g, r, r->n_generated, logits, g->cfg->n_vocab);
        if (f == DS_FILTER_DONE) r->filter_done = 1;
        if (f == DS_FILTER_MASK) from = g->filtered;
        if (f == DS_FILTER_ERROR) {
            finish(g, r, DS_FINISH_ERROR, DS_FILTER_ERROR_MESSAGE);
            return 1;
        }
    }
    double t0 = ds_engine_now();
    int32_t t = ds_sampler_sample(&r->sampler, from, r->tokens + r->n_prompt, r->n_generated, r->n_tokens, &g->scratch);
    ds_engine_note_choice(g, r, ds_engine_now() - t0, 1);
    /* logprobs report the model's own distribution, as without a filter */
    return ds_engine_append(g, r, t, logits);
}

/* After a prefill chunk that ended on a checkpoint position (an interval
 * multiple, or the prompt's end rounded down to DS_DELTANET_CHUNK), the pages so far and a
 * copy of the DeltaNet state go to the cache; they are visible from now on,
 * their KV being written. */
static void take_checkpoint(ds_engine *g, req *r) {
    int pos = r->n_computed;
    if (!g->cache || pos % DS_DELTANET_CHUNK != 0 || pos > r->n_prompt) return;
    int at_interval = g->p.checkpoint_interval && pos % g->p.checkpoint_interval == 0;
    if (!at_interval && pos != round_down(r->n_prompt, DS_DELTANET_CHUNK) && pos != r->share_cut) return;
    if (pos % ckpt_unit(g)) return; /* KV events: the block is the unit (the cuts were rounded to it) */
    int ck = -1;
    if (g->hybrid) {
        ck = get_ckpt(g);
        if (ck < 0) return;
        ds_state_copy(&g->st, ck, r->slot);
    }
    ds_prefix_origin o = {.tokens = r->tokens, .images = r->spans, .n_images = r->n_images};
    ds_prefix_insert(g->cache, ds_image_keys(r), pos / g->p.page_size, r->pages, ck, pos, &o);
}

/* Test hook: whether the request's pending fault hits a call computing it in this mode. */
static int fault_hits(const req *r, ds_seq_mode mode) {
    if (r->fault == DS_FAULT_NONE || r->n_generated < r->p.fault_after_tokens) return 0;
    switch (r->fault) {
    case DS_FAULT_PREFILL: return mode == DS_SEQ_PREFILL;
    case DS_FAULT_DECODE: return mode == DS_SEQ_DECODE;
    case DS_FAULT_VERIFY: return mode == DS_SEQ_VERIFY;
    case DS_FAULT_DRAFT: return 0; /* speculate.c */
    default: return 1;
    }
}

static const char *fault_message(ds_seq_mode mode) {
    return mode == DS_SEQ_PREFILL ? "the model call failed (injected fault in a prefill step)"
         : mode == DS_SEQ_VERIFY  ? "the model call failed (injected fault in a verify step)"
                                  : "the model call failed (injected fault in a decode step)";
}

int ds_engine_step(ds_engine *g) {
    g->step_no++;
    double step_t0 = ds_engine_now();
    g->step_parts_s = 0;
    drain_inbox(g);
    fail_all_pending(g);
    handle_aborts(g);
    admit(g);
    int budget = g->p.step_tokens, n_rows = 0, n_seqs = 0, any_image = 0;
    /* decodes first, then images' encoding and prefill chunks, oldest requests first */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && g->vision) {
            int spent = ds_image_encode_step(g); /* in prefill tokens; prefill keeps at least half of what is left */
            budget -= spent < budget / 2 ? spent : budget / 2;
        }
        for (int i = 0; i < g->n_running; i++) {
            req *r = g->running[i];
            if (r->scheduled_step == g->step_no) continue; /* a rescan after a preemption */
            int is_decode = r->n_tokens - r->n_computed == 1 && r->n_computed >= r->n_prompt;
            if (pass == 0 ? !is_decode : is_decode) continue;
            ds_seq_mode mode;
            int end = chunk_end(g, r, &mode);
            if (is_decode) {
                int rows = ds_spec_plan(g, r); /* 1, or 1 + drafts to verify */
                if (rows > 1) mode = DS_SEQ_VERIFY;
                end = r->n_computed + rows;
            }
            int n = end - r->n_computed;
            if (n > budget || n <= 0) {
                ds_spec_release(g, r);
                continue;
            }
            if (ds_engine_ensure_pages(g, r, end) != 0) {
                /* Out of pages even after evicting the cache: preempt the youngest request younger
                 * than r, so that the oldest always makes progress and two requests can never keep
                 * preempting each other. Without one, r waits, keeping what it has. */
                req *victim = NULL;
                for (int j = 0; j < g->n_running; j++) {
                    req *o = g->running[j];
                    if (o->id > r->id && (!victim || o->id > victim->id)) victim = o;
                }
                int in_batch = 0;
                for (int s = 0; s < n_seqs; s++) in_batch |= g->seq_req[s] == victim;
                ds_spec_release(g, r);
                if (!victim || in_batch) continue;
                preempt(g, victim);
                i = -1; /* the running array changed: rescan this pass */
                continue;
            }
            ds_batch_seq *sq = &g->seqs[n_seqs];
            *sq = (ds_batch_seq){.mode = mode, .pages = r->pages, .n_pages = r->n_pages,
                                 .state_slot = g->hybrid ? r->slot : 0,
                                 .verify_slots = mode == DS_SEQ_VERIFY ? r->vslots : NULL};
            r->step_first_pos = r->n_computed;
            r->step_hidden_row = n_rows;
            g->seq_req[n_seqs] = r;
            r->scheduled_step = g->step_no;
            g->seq_first_row[n_seqs] = n_rows;
            g->seq_n_rows[n_seqs] = n;
            any_image |= r->n_images > 0;
            for (int k = 0; k < n; k++) {
                int pos = r->n_computed + k;
                ds_image_row(g, r, pos, pos, g->rope + (size_t)n_rows * 3, &g->embd[n_rows]);
                /* verify rows: the pending token, then the drafts (kept past n_tokens) */
                g->rows[n_rows++] = (ds_batch_token){.token = r->tokens[pos], .seq = n_seqs, .pos = pos,
                                                     .want_logits = mode == DS_SEQ_VERIFY || pos == r->n_tokens - 1,
                                                     .want_hidden = g->spec_max > 0};
            }
            n_seqs++;
            budget -= n;
        }
    }
    if (n_rows > 0) {
        ds_batch b = {.tokens = g->rows, .n_tokens = n_rows, .seqs = g->seqs, .n_seqs = n_seqs, .logits = g->logits,
                      .hidden = g->hidden, .records = g->records.n_slots ? &g->records : NULL};
        ds_image_batch(g, &b, any_image, g->rope, g->embd);
        ds_err e = {0};
        ds_state_pool empty = {0};
        ds_status s = ds_model_forward(g->model, &g->kv, g->hybrid ? &g->st : &empty, &b, &e);
        if (s != DS_OK) {
            /* a failed call leaves no result for anyone in it: each gets the error */
            for (int k = 0; k < n_seqs; k++) finish(g, g->seq_req[k], DS_FINISH_ERROR, e.msg);
        } else {
            int logit_row = 0;
            pthread_mutex_lock(&g->mu);
            g->stats.steps++;
            pthread_mutex_unlock(&g->mu);
            int n_live = 0;
            size_t V = (size_t)g->cfg->n_vocab;
            for (int k = 0; k < n_seqs; k++) {
                req *r = g->seq_req[k];
                ds_seq_mode mode = g->seqs[k].mode;
                int done = 0;
                if (fault_hits(r, mode)) {
                    /* an injected fault: this request's part of the call failed, the others' did not */
                    logit_row += mode == DS_SEQ_VERIFY ? g->seq_n_rows[k]
                                                       : r->n_computed + g->seq_n_rows[k] == r->n_tokens;
                    finish(g, r, DS_FINISH_ERROR, fault_message(mode));
                    continue;
                }
                if (mode == DS_SEQ_PREFILL) {
                    pthread_mutex_lock(&g->mu);
                    g->stats.prompt_tokens += g->seq_n_rows[k];
                    pthread_mutex_unlock(&g->mu);
                }
                if (mode == DS_SEQ_VERIFY) {
                    done = ds_spec_accept(g, r, g->logits + (size_t)logit_row * V);
                    logit_row += g->seq_n_rows[k];
                } else {
                    r->n_computed += g->seq_n_rows[k];
                    if (mode == DS_SEQ_PREFILL) take_checkpoint(g, r);
                    if (r->n_computed == r->n_tokens) done = sample_next(g, r, g->logits + (size_t)logit_row++ * V);
                }
                if (!done) g->seq_req[n_live++] = r; /* finished requests are freed: keep only the live */
            }
            if (g->spec_max) ds_spec_draft(g, g->seq_req, n_live);
            /* what a step of n_rows rows costs all in (the forward, a verify's state commits, events,
             * bookkeeping) but for the MTP calls and the sampler's choices, which the plan prices apart */
            double rest = ds_engine_now() - step_t0 - g->step_parts_s;
            ds_cost_curve_add(&g->cost_forward, n_rows, rest > 0 ? rest : 0, g->step_no);
        }
    }
    pthread_mutex_lock(&g->mu);
    g->stats.running = g->n_running;
    g->stats.waiting = g->n_waiting;
    g->stats.kv_pages_used = ds_id_used(&g->pages);
    g->stats.state_slots_used = ds_id_used(&g->slots);
    g->stats.checkpoint_slots_used = ds_id_used(&g->ckpts);
    g->stats.vision_bytes_used = g->vision_used;
    if (g->cache) {
        ds_prefix_stats ps;
        ds_prefix_stats_get(g->cache, &ps);
        g->stats.prefix_query_tokens = ps.query_tokens;
        g->stats.prefix_hit_tokens = ps.hit_tokens;
        g->stats.checkpoint_restores = ps.checkpoint_restores;
        g->stats.evicted_pages = ps.evicted_pages;
        g->stats.evicted_checkpoints = ps.evicted_checkpoints;
        g->stats.kv_pages_cached = ps.nodes;
        g->stats.checkpoints_cached = ps.checkpoints;
    }
    int active = g->n_running + g->n_waiting + g->n_inbox;
    pthread_mutex_unlock(&g->mu);
    /* after the step, not before admitting: a lookup sees the blocks the router was told of before the
     * request came */
    if (g->cache) ds_prefix_events_flush(g->cache);
    if (g->check_invariants) ds_engine_check_or_die(g);
    return active;
}

void ds_engine_run(ds_engine *g) {
    for (;;) {
        pthread_mutex_lock(&g->mu);
        while (!g->stop && !g->inbox_head && !g->pending_head && g->n_running + g->n_waiting == 0) {
            if (!g->cache || !ds_prefix_events_pending(g->cache)) {
                pthread_cond_wait(&g->cv, &g->mu);
                continue;
            }
            /* KV events wait for room in the queue: an idle engine looks again every 10 ms */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 10 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&g->cv, &g->mu, &ts);
            if (!g->stop && !g->inbox_head && !g->pending_head && g->n_running + g->n_waiting == 0) {
                pthread_mutex_unlock(&g->mu);
                ds_prefix_events_flush(g->cache);
                pthread_mutex_lock(&g->mu);
            }
        }
        int stop = g->stop;
        pthread_mutex_unlock(&g->mu);
        if (stop) return;
        ds_engine_step(g);
    }
}

