/* spec_policy.h - which sequences of a step draft, and how many drafts each.
 *
 * Drafting never changes what a request produces (verification keeps plain
 * decoding's choices), only how fast: a sequence whose drafts are accepted
 * at rate p gets 1 + p + ... + p^k tokens from a step with k drafts instead
 * of 1, and the step pays for k more rows in the model's forward, for the
 * MTP calls that make the drafts (one that feeds the head the positions the
 * step kept and drafts the first, then one per further draft, for all the
 * sequences at that depth at once), and for the sampler's extra choices.
 * On a CPU a batched forward soon becomes bound by arithmetic, so an extra
 * row costs little alone and nearly a whole token's share in a batch of
 * sixteen; the plan is therefore made per step, for the whole batch, from
 * what these things cost now (spec_cost.h measures them): it adds drafts
 * one at a time, the one with the most expected tokens per second of extra
 * cost first, and keeps the allocation with the most expected tokens per
 * second of the whole step, or none when none beats plain decoding by a
 * margin (gains within noise are not worth the variance). */
#ifndef DS_SPEC_POLICY_H
#define DS_SPEC_POLICY_H

/* The step's costs in seconds, by rows (ds_cost_curve_at or fixed ones). */
typedef struct {
    double (*forward)(void *user, int rows); /* a step of the main model (all in but the two below and choices) */
    double (*catchup)(void *user, int rows); /* the MTP call that feeds the kept positions and drafts the first */
    double (*draft)(void *user, int rows);   /* one further MTP call, one row per sequence */
    void *user;
} ds_spec_costs_fn;

typedef struct {
    double p;           /* per-draft acceptance (recent) */
    double choice_s;    /* seconds of one sampler choice of this request */
    int catchup_rows;   /* rows it adds to the catch-up call if it drafts */
    int k_max;          /* most drafts it may take */
    int k;              /* out: drafts planned */
} ds_spec_cand;

typedef struct {
    int base_rows;          /* rows of the next forward without drafts (decodes + expected prefill) */
    int base_catchup_rows;  /* catch-up rows fed anyway (prompts being prefilled; 0: no call unless drafting) */
    double base_s;          /* seconds of the step that do not depend on drafts (the plain choices) */
    double base_tokens;     /* tokens the step yields without drafts (one per decoding sequence) */
    int max_drafts;         /* most drafts in all (step budget, verify slots) */
} ds_spec_step;

/* Plans cand[0..n).k; returns the expected gain in tokens per second over
 * plain decoding, as a ratio (1.0: no drafts planned). */
double ds_spec_policy_plan(const ds_spec_costs_fn *c, const ds_spec_step *s, ds_spec_cand *cand, int n);

#endif
