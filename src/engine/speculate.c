/* speculate.c - self-speculative decoding with the model's MTP head.
 *
 * Per speculating request and step:
 *   1. verify: the pending token x and the drafts d1..dk run as one VERIFY
 *      chunk of the step's ragged batch, keeping a record of each (its conv
 *      window and recurrence inputs) in a verify slot;
 *   2. accept: keep the longest prefix of drafts equal to the model's choice,
 *      plus the model's token at the first mismatch. The choice is the one
 *      plain decoding makes: the argmax for greedy requests, and for sampling
 *      ones the token the sampler draws from the model's distribution with
 *      the key (seed, choice, position) (sampler.h). Drafts are drawn from the
 *      head's distribution with that same key, so they agree with the model
 *      as often as the two distributions overlap (at least o / (2 - o) of the
 *      time, o = sum(min(p, q)), against o for rejection sampling), and the
 *      emitted tokens are plain sampling's own: a seed reproduces its
 *      completion whatever the drafts, k, the batch or a preemption were.
 *      The state slot, which the verify left untouched, advances by the kept
 *      tokens from their records (ds_model_verify_commit); KV past them is
 *      overwritten later;
 *   3. draft: the MTP head is fed (h_t, x_{t+1}) for every position the step
 *      kept (this also fills its own KV cache, prompt included), and drafts
 *      d1 from its last row, then d2..dk one batched MTP row per request at a
 *      time, each from its own previous output. The head's logits cover only
 *      the vocabulary's first draft_vocab tokens (the most frequent: BPE ids
 *      follow merge rank), so a draft reads that part of the output head and
 *      not all of it; it is drawn over them with the same key (greedy: their
 *      argmax). A model choice outside the subset just rejects the draft.
 *      Verification keeps the whole vocabulary: the subset changes how often
 *      drafts are kept, never what is emitted.
 * A request whose token filter narrows its choices speculates too: draft j
 * is drawn from the head's logits masked by the filter's answer for the
 * answer so far plus drafts 1..j-1 (drafting stops where the filter leaves
 * nothing the head may draw), and at verify the choice at each position is
 * drawn from the model's logits masked by the filter's answer for the answer
 * plus the drafts before it, which is plain constrained decoding's own
 * choice there. The filter is shown drafts that may be refused; it takes
 * back what it followed when the next answer differs (engine.h). Its
 * DS_FILTER_DONE for an answer with drafts holds once they are kept.
 * Who drafts and how many is planned each step for the whole batch
 * (spec_policy.h): each request's recent acceptance against what a verify
 * row, an MTP call and a sampler choice cost at the batch size at hand,
 * which the engine measures from its own steps (spec_cost.h) rather than
 * assumes, since the answer moves with the batch (on a CPU a batched step is
 * bound by arithmetic, and at 100% acceptance and k=3 on the 0.8B shape
 * drafting for everyone gave 1.59x alone, 1.39x at 2, 1.09x at 4, 0.97x at
 * 8), with the sampler (a sampled choice costs twenty greedy ones) and with
 * the draft head's cost. A request whose drafts would not pay even alone
 * pauses them (and the MTP head), a pause that doubles while probes fail,
 * so that a head that never agrees costs almost nothing. Whether a request
 * drafts never changes what it produces. Runs on the engine thread. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"

#define PAUSE_STEPS 32
#define PAUSE_MAX 1024

void ds_spec_release(ds_engine *g, req *r) {
    for (int i = 0; i < r->n_vslots; i++) ds_id_unref(&g->vslots, r->vslots[i]);
    r->n_vslots = 0;
}

int ds_spec_plan(ds_engine *g, req *r) {
    if (!g->spec_max || r->n_drafts == 0) return 1;
    for (int i = 0; i <= r->n_drafts; i++) {
        int id = ds_id_get(&g->vslots);
        if (id < 0) { /* others took the verify slots this step: decode plainly, the drafts are dropped */
            ds_spec_release(g, r);
            r->n_drafts = 0;
            return 1;
        }
        r->vslots[r->n_vslots++] = id;
    }
    return 1 + r->n_drafts;
}

int ds_spec_init(ds_engine *g) {
    int n = g->p.step_tokens, m = g->p.max_running;
    g->memo = calloc(3 * ((size_t)n + 1), sizeof *g->memo);
    g->memo_at = calloc(3 * ((size_t)n + 1), sizeof *g->memo_at);
    g->cand = calloc((size_t)m, sizeof *g->cand);
    g->cand_req = calloc((size_t)m, sizeof *g->cand_req);
    if (!g->memo || !g->memo_at || !g->cand || !g->cand_req || ds_cost_curve_init(&g->cost_forward, n) ||
        ds_cost_curve_init(&g->cost_catchup, n) || ds_cost_curve_init(&g->cost_draft, n))
        return -1;
    return 0;
}

void ds_spec_free(ds_engine *g) {
    ds_cost_curve_free(&g->cost_forward);
    ds_cost_curve_free(&g->cost_catchup);
    ds_cost_curve_free(&g->cost_draft);
    free(g->memo);
    free(g->memo_at);
    free(g->cand);
    free(g->cand_req);
}

/* One MTP call for the requests reqs[0..n). A failure is no request's failure
 * (they decode without drafts this step) but is never silent: it is counted
 * (spec_draft_failures) and logged, the first and then every power of two. */
static ds_status mtp_call(ds_engine *g, const ds_batch *b, req **reqs, int n, ds_cost_curve *cost) {
    ds_err e = {0};
    ds_status s = DS_OK;
    for (int i = 0; i < n && !s; i++) /* test hook */
        if (reqs[i]->fault == DS_FAULT_DRAFT && reqs[i]->n_generated >= reqs[i]->p.fault_after_tokens) {
            reqs[i]->fault = DS_FAULT_NONE;
            s = ds_fail(&e, DS_EINVAL, "injected fault in a draft step (request %llu)",
                        (unsigned long long)reqs[i]->id);
        }
    if (!s) {
        double t0 = ds_engine_now();
        s = ds_model_mtp_forward(g->model, &g->mtp_kv, b, g->mtp_hidden_in, &e);
        double dt = ds_engine_now() - t0;
        g->step_parts_s += dt;
        if (!s) ds_cost_curve_add(cost, b->n_tokens, dt, g->step_no);
    }
    if (!s) return DS_OK;
    pthread_mutex_lock(&g->mu);
    int64_t nth = ++g->stats.spec_draft_failures;
    pthread_mutex_unlock(&g->mu);
    if ((nth & (nth - 1)) == 0)
        fprintf(stderr, "deltaserve engine: an MTP draft call failed (failure %lld; %d requests decode without "
                        "drafts this step): %s\n", (long long)nth, n, e.msg);
    return s;
}

/* The token r's sampler takes at position pos of r->tokens, from logits (the
 * main model's or the head's), the tokens before pos seen by the penalties:
 * one function for drafts and for the model's choices, so that a draft is
 * kept exactly when it is the token plain decoding would have drawn there. */
static int32_t choose(ds_engine *g, req *r, const float *logits, int pos) {
    double t0 = ds_engine_now();
    int32_t t = ds_sampler_sample(&r->sampler, logits, r->tokens + r->n_prompt, pos - r->n_prompt, pos, &g->scratch);
    ds_engine_note_choice(g, r, ds_engine_now() - t0, 1);
    return t;
}

/* choose over the draft vocabulary: logits of its first draft_vocab tokens, the same key, so a draft
 * is the head's own draw over the whole vocabulary whenever that one is in the subset (sampler.h) */
static int32_t choose_in_subset(ds_engine *g, const req *r, const float *logits, int pos) {
    ds_sampler_scratch sub = ds_sampler_scratch_prefix(&g->scratch, g->draft_vocab);
    return ds_sampler_sample(&r->sampler, logits, r->tokens + r->n_prompt, pos - r->n_prompt, pos, &sub);
}

/* The k that gives the most tokens per unit of time at per-draft acceptance
 * p: a step with k drafts yields 1 + p + ... + p^k tokens on average and
 * costs, in decode steps, 1 + k VERIFY_ROW (a verify's extra rows, which the
 * weight stream mostly hides) + k draft_cost (each draft reads the MTP block
 * and the whole output head). 0 when no k beats plain decoding. */
#define VERIFY_ROW 0.15
static int best_k(const ds_engine *g, double p) {
    int best = 0;
    double best_rate = 1.0, tokens = 1.0, pk = 1.0;
    for (int k = 1; k <= g->spec_max; k++) {
        pk *= p;
        tokens += pk;
        double rate = tokens / (1.0 + k * (VERIFY_ROW + g->draft_cost));
        if (rate > best_rate * 1.02) best = k, best_rate = rate; /* a gain within noise is not worth drafting */
    }
    return best;
}

/* The costs a plan reads: measured curves (BATCH) or fixed ones (GIVEN),
 * each estimate kept for the rest of the plan (a plan asks for the same
 * row counts many times). */
static double memo(ds_engine *g, int curve, int rows, const ds_cost_curve *c, double given) {
    if (rows > g->p.step_tokens) rows = g->p.step_tokens;
    size_t at = (size_t)curve * ((size_t)g->p.step_tokens + 1) + (size_t)rows;
    if (g->memo_at[at] != g->n_plans) {
        g->memo_at[at] = g->n_plans;
        g->memo[at] = g->p.spec_policy == DS_SPEC_POLICY_GIVEN ? given : ds_cost_curve_at(c, rows, g->step_no);
    }
    return g->memo[at];
}

static double cost_forward(void *u, int rows) {
    ds_engine *g = u;
    const ds_spec_given_costs *k = g->p.spec_given;
    return memo(g, 0, rows, &g->cost_forward, k ? k->step + k->row * rows : 0);
}

static double cost_catchup(void *u, int rows) {
    ds_engine *g = u;
    const ds_spec_given_costs *k = g->p.spec_given;
    return memo(g, 1, rows, &g->cost_catchup, k ? k->call + k->call_row * rows : 0);
}

static double cost_draft(void *u, int rows) {
    ds_engine *g = u;
    const ds_spec_given_costs *k = g->p.spec_given;
    return memo(g, 2, rows, &g->cost_draft, k ? k->call + k->call_row * rows : 0);
}

static double choice_cost(const ds_engine *g, const req *r) {
    const ds_spec_given_costs *k = g->p.spec_given;
    if (g->p.spec_policy != DS_SPEC_POLICY_GIVEN || !k) return r->choice_s;
    return r->p.sampling.temperature > 0 ? k->choice_sampled : k->choice_greedy;
}

static double acceptance(const req *r) { return r->acc_trials > 0 ? r->acc_hits / r->acc_trials : 0.8; }

/* Per-draft acceptance is estimated from the drafts actually compared: a
 * step that accepts a of k compared min(a + 1, k) of them, each accepted or
 * not on its own (the accepted/drafted ratio would count the drafts after a
 * rejection as misses and undervalue longer k). Under the batch policy a
 * request keeps drafting while its drafts would pay alone (the most
 * favourable batch: the plan of each step decides whether they pay there). */
static void adapt(ds_engine *g, req *r, int drafted, int accepted) {
    int compared = accepted < drafted ? accepted + 1 : drafted;
    r->acc_hits = 0.8f * r->acc_hits + (float)accepted;
    r->acc_trials = 0.8f * r->acc_trials + (float)compared;
    if (g->p.spec_policy == DS_SPEC_POLICY_REQUEST) {
        r->k = best_k(g, r->acc_hits / r->acc_trials);
    } else {
        ds_spec_costs_fn fn = {cost_forward, cost_catchup, cost_draft, g};
        ds_spec_cand alone = {.p = acceptance(r), .choice_s = choice_cost(g, r), .catchup_rows = 1,
                              .k_max = g->spec_max};
        ds_spec_step st = {.base_rows = 1, .base_s = alone.choice_s, .base_tokens = 1,
                           .max_drafts = g->spec_max};
        g->n_plans++;
        ds_spec_policy_plan(&fn, &st, &alone, 1);
        r->k = alone.k > 0 ? g->spec_max : 0;
    }
    if (r->k == 0) {
        /* each failed probe doubles the pause: a head that never agrees ends up costing one
         * probe every thousand tokens */
        r->pause_len = r->pause_len ? (r->pause_len * 2 < PAUSE_MAX ? r->pause_len * 2 : PAUSE_MAX) : PAUSE_STEPS;
        r->paused = r->pause_len;
    } else {
        r->pause_len = 0;
    }
}

/* The logits r draws from at draft or verify position i (the token after
 * the pending one and i drafts): row itself, or row masked by r's filter for
 * that answer. */
static const float *filtered_row(ds_engine *g, req *r, int i, const float *row) {
    if (!r->p.filter || r->filter_done) return row;
    if (i == r->draft_free_from) { /* the filter said so for this very answer while drafting */
        r->filter_done = 1;
        return row;
    }
    ds_filter_result f = ds_engine_filter(g, r, r->n_generated + i, row, g->cfg->n_vocab);
    if (f == DS_FILTER_DONE) r->filter_done = 1;
    if (f == DS_FILTER_ERROR) r->filter_failed = 1; /* the drafts before i are the model's: the answer fails there */
    return f == DS_FILTER_MASK ? g->filtered : row;
}

int ds_spec_accept(ds_engine *g, req *r, const float *logits) {
    int k = r->n_drafts, V = g->cfg->n_vocab, base = r->n_tokens; /* tokens[base-1] is the pending token */
    int a = 0;
    int32_t next = -1;
    for (int i = 0; i <= k; i++) {
        /* the model's choice after the pending token and i drafts, which sit at tokens[base..base+i)
         * (penalties and the filter see them): the draft there is kept when it is that choice */
        const float *row = filtered_row(g, r, i, logits + (size_t)i * V);
        if (r->filter_failed) break;
        int32_t t = choose(g, r, row, base + i);
        if (i < k && t == r->drafts[i]) { a++; continue; }
        next = t;
        break;
    }
    if (g->hybrid) {
        ds_err e = {0};
        /* cannot fail: the slots were checked by the forward that wrote the records */
        (void)ds_model_verify_commit(g->model, &g->st, &g->records, r->slot, r->vslots, a + 1, &e);
    }
    ds_spec_release(g, r);
    r->n_drafts = 0;
    r->draft_free_from = DS_MAX_SPEC + 1;
    r->n_computed = base + a; /* the pending token and a drafts */
    pthread_mutex_lock(&g->mu);
    g->stats.spec_drafted += k;
    g->stats.spec_accepted += a;
    g->stats.spec_compared += a < k ? a + 1 : k;
    g->stats.spec_verify_steps++;
    g->stats.spec_accept_hist[a]++;
    pthread_mutex_unlock(&g->mu);
    adapt(g, r, k, a);
    int32_t drafts[DS_MAX_SPEC];
    memcpy(drafts, r->drafts, sizeof drafts);
    for (int j = 0; j < a; j++)
        if (ds_engine_append(g, r, drafts[j], logits + (size_t)j * V)) return 1;
    if (r->filter_failed) {
        ds_engine_fail_request(g, r, DS_FILTER_ERROR_MESSAGE);
        return 1;
    }
    return ds_engine_append(g, r, next, logits + (size_t)a * V);
}

/* Chooses draft j of r from the MTP logits (over the draft vocabulary), as the model would choose
 * the token at that position (same sampler, same key, the same filter); the draft is written past
 * n_tokens so penalties and the filter see it. Returns 0, drafting nothing, when the filter leaves
 * the head nothing to draw in the subset. */
static int choose_draft(ds_engine *g, req *r, int j, const float *mtp_logits) {
    const float *from = mtp_logits;
    if (r->p.filter && !r->filter_done && j < r->draft_free_from) {
        ds_filter_result f = ds_engine_filter(g, r, r->n_generated + j, mtp_logits, g->draft_vocab);
        if (f == DS_FILTER_DONE) {
            if (j == 0) r->filter_done = 1; /* the answer it saw holds no draft */
            else r->draft_free_from = j;
        }
        if (f == DS_FILTER_MASK) from = g->filtered;
        if (f == DS_FILTER_ERROR) return 0; /* a dead end on the drafts' path: no draft; verify decides */
    }
    int32_t d = choose_in_subset(g, r, from, r->n_tokens + j);
    /* an empty mask (or one the head gives no mass) draws a refused token: no draft there */
    if (from == g->filtered && (d < 0 || d >= g->draft_vocab || !DS_MASK_HAS(g->allowed, d) || !(from[d] > -INFINITY)))
        return 0;
    r->drafts[j] = d;
    r->tokens[r->n_tokens + j] = d;
    r->n_drafts = j + 1;
    return 1;
}

/* The drafts r may take next step: its k, the tokens it may still produce
 * (the bonus token always comes on top) and the room in its token array. */
static int room_for(const req *r) {
    int room = r->p.max_tokens - r->n_generated - 1;
    if (r->cap_tokens - r->n_tokens < room) room = r->cap_tokens - r->n_tokens;
    return r->k < room ? r->k : room;
}

/* Sets plan_k of reqs[0..n), the requests that computed something this
 * step: 0 for those that feed the head nothing, k for requests in their
 * prompt that feed it (their catch-up), and for those about to decode the
 * drafts the policy gives them. */
static void plan_step(ds_engine *g, req **reqs, int n) {
    int crowded = g->p.spec_max_batch > 0 && g->n_running > g->p.spec_max_batch;
    int batch = g->p.spec_policy != DS_SPEC_POLICY_REQUEST, n_cand = 0, base_catchup = 0;
    for (int i = 0; i < n; i++) {
        req *r = reqs[i];
        r->plan_k = 0;
        if (r->paused > 0 && --r->paused == 0) { /* probe again, gently, judged on its own result */
            r->k = 1;
            r->acc_hits = r->acc_trials = 0.0f;
        }
        int first = r->step_first_pos, last = r->n_computed;
        if (r->k == 0 || crowded || last <= first || last >= r->n_tokens) continue;
        if (r->n_tokens != r->n_computed + 1) { /* still in its prompt: the catch-up is all */
            r->plan_k = r->k;
            base_catchup += last - first;
            continue;
        }
        int k = room_for(r);
        if (k <= 0) continue;
        if (!batch) {
            r->plan_k = k;
        } else {
            g->cand[n_cand] = (ds_spec_cand){.p = acceptance(r), .choice_s = choice_cost(g, r),
                                             .catchup_rows = last - first, .k_max = k};
            g->cand_req[n_cand++] = r;
        }
    }
    if (!batch || n_cand == 0) return;
    /* the next step without drafts: every decode, and prefill chunks as far as the budget goes */
    int decodes = 0, prefill = 0;
    double base_s = 0;
    for (int i = 0; i < g->n_running; i++) {
        req *r = g->running[i];
        int left = r->n_tokens - r->n_computed;
        if (left == 1 && r->n_computed >= r->n_prompt) {
            decodes++;
            base_s += choice_cost(g, r);
        } else if (left > 0) {
            prefill += left < g->p.prefill_chunk ? left : g->p.prefill_chunk;
        }
    }
    if (prefill > g->p.step_tokens - decodes) prefill = g->p.step_tokens - decodes;
    int slots = g->vslots.n - ds_id_used(&g->vslots) - n_cand; /* each drafting sequence also verifies its token */
    ds_spec_step st = {.base_rows = decodes + prefill, .base_catchup_rows = base_catchup, .base_s = base_s,
                       .base_tokens = decodes, .max_drafts = g->p.step_tokens - decodes - prefill};
    if (slots < st.max_drafts) st.max_drafts = slots > 0 ? slots : 0;
    ds_spec_costs_fn fn = {cost_forward, cost_catchup, cost_draft, g};
    g->n_plans++;
    ds_spec_policy_plan(&fn, &st, g->cand, n_cand);
    int drafting = 0;
    for (int i = 0; i < n_cand; i++) {
        g->cand_req[i]->plan_k = g->cand[i].k;
        drafting += g->cand[i].k > 0;
    }
    pthread_mutex_lock(&g->mu);
    g->stats.spec_plan_steps++;
    g->stats.spec_plan_draft_steps += drafting > 0;
    g->stats.spec_plan_seqs += n_cand;
    g->stats.spec_plan_drafting_seqs += drafting;
    pthread_mutex_unlock(&g->mu);
}

void ds_spec_draft(ds_engine *g, req **reqs, int n) {
    size_t H = (size_t)g->cfg->n_embd, V = (size_t)g->draft_vocab; /* the MTP logits' width */
    int32_t subset = g->draft_vocab < g->cfg->n_vocab ? g->draft_vocab : 0;
    int n_rows = 0, n_seqs = 0, any_image = 0;
    plan_step(g, reqs, n);
    /* 1. catch-up rows: (h_t, x_{t+1}) for every position this step kept */
    for (int i = 0; i < n; i++) {
        req *r = reqs[i];
        r->n_drafts = 0;
        r->draft_free_from = DS_MAX_SPEC + 1;
        if (r->plan_k == 0) continue;
        int first = r->step_first_pos, last = r->n_computed; /* positions [first, last) */
        if (last <= first || last >= r->n_tokens) continue;
        g->mtp_seqs[n_seqs] = (ds_batch_seq){.mode = DS_SEQ_PREFILL, .pages = r->pages, .n_pages = r->n_pages};
        g->mtp_req[n_seqs] = r;
        any_image |= r->n_images > 0;
        for (int p = first; p < last; p++) {
            /* the head reads x_{p+1} at position p: an image token's row where it is one */
            ds_image_row(g, r, p, p + 1, g->mtp_rope + (size_t)n_rows * 3, &g->mtp_embd[n_rows]);
            g->mtp_rows[n_rows] = (ds_batch_token){.token = r->tokens[p + 1], .seq = n_seqs, .pos = p,
                                                   .want_logits = p == last - 1, .want_hidden = p == last - 1};
            memcpy(g->mtp_hidden_in + (size_t)n_rows * H, g->hidden + (size_t)(r->step_hidden_row + p - first) * H,
                   H * sizeof(float));
            n_rows++;
        }
        n_seqs++;
    }
    if (n_rows == 0) return;
    ds_batch b = {.tokens = g->mtp_rows, .n_tokens = n_rows, .seqs = g->mtp_seqs, .n_seqs = n_seqs,
                  .logits = g->mtp_logits, .hidden = g->mtp_hidden_out, .logits_vocab = subset};
    ds_image_batch(g, &b, any_image, g->mtp_rope, g->mtp_embd);
    if (mtp_call(g, &b, g->mtp_req, n_seqs, &g->cost_catchup) != DS_OK) return; /* no drafts */
    /* 2. first drafts; requests that cannot hold k more positions draft fewer */
    int live = 0;
    for (int s = 0; s < n_seqs; s++) {
        req *r = g->mtp_req[s];
        int k = r->plan_k; /* within its room (plan_step) */
        if (r->n_tokens != r->n_computed + 1) continue; /* still in its prompt: the catch-up was all */
        if (k <= 0 || ds_engine_ensure_pages(g, r, r->n_tokens + k) != 0) continue;
        if (!choose_draft(g, r, 0, g->mtp_logits + (size_t)s * V)) continue;
        memcpy(g->mtp_hidden_in + (size_t)live * H, g->mtp_hidden_out + (size_t)s * H, H * sizeof(float));
        g->mtp_req[live] = r;
        g->mtp_seqs[live] = (ds_batch_seq){.mode = DS_SEQ_PREFILL, .pages = r->pages, .n_pages = r->n_pages};
        r->n_want = k;
        live++;
    }
    /* 3. further drafts, one MTP row per request at a time, each fed its own previous output */
    for (int j = 1; j < g->spec_max && live > 0; j++) {
        int m = 0, any = 0;
        for (int s = 0; s < live; s++) {
            req *r = g->mtp_req[s];
            if (r->n_want <= j) continue;
            g->mtp_req[m] = r;
            g->mtp_seqs[m] = (ds_batch_seq){.mode = DS_SEQ_DECODE, .pages = r->pages, .n_pages = r->n_pages};
            g->mtp_rows[m] = (ds_batch_token){.token = r->drafts[j - 1], .seq = m, .pos = r->n_tokens - 2 + j,
                                              .want_logits = 1, .want_hidden = 1};
            ds_image_row(g, r, r->n_tokens - 2 + j, r->n_tokens - 1 + j, g->mtp_rope + (size_t)m * 3, &g->mtp_embd[m]);
            any |= r->n_images > 0;
            if (m != s) memcpy(g->mtp_hidden_in + (size_t)m * H, g->mtp_hidden_in + (size_t)s * H, H * sizeof(float));
            m++;
        }
        if (m == 0) break;
        ds_batch bj = {.tokens = g->mtp_rows, .n_tokens = m, .seqs = g->mtp_seqs, .n_seqs = m,
                       .logits = g->mtp_logits, .hidden = g->mtp_hidden_out, .logits_vocab = subset};
        ds_image_batch(g, &bj, any, g->mtp_rope, g->mtp_embd);
        if (mtp_call(g, &bj, g->mtp_req, m, &g->cost_draft) != DS_OK) break;
        for (int s = 0; s < m; s++) {
            req *r = g->mtp_req[s];
            if (!choose_draft(g, r, j, g->mtp_logits + (size_t)s * V)) r->n_want = j; /* it drafts no further */
            memcpy(g->mtp_hidden_in + (size_t)s * H, g->mtp_hidden_out + (size_t)s * H, H * sizeof(float));
        }
        live = m;
    }
}
