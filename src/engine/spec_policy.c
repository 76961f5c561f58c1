/* spec_policy.c - the per-step speculation plan (see spec_policy.h). */
#include "engine/spec_policy.h"

#include <math.h>

#include "engine/engine.h" /* DS_MAX_SPEC */

#define MARGIN 1.03 /* a plan must promise this much over plain decoding */

typedef struct {
    int K, U;                   /* drafts in all; catch-up rows */
    int m[DS_MAX_SPEC + 1];     /* m[j]: sequences with more than j drafts (rows of further call j, j >= 1) */
    double tokens, seconds;
} plan_state;

static double call(double (*f)(void *, int), void *u, int rows) { return rows > 0 ? f(u, rows) : 0.0; }

/* Extra seconds and tokens of giving cand one more draft in state st. */
static void marginal(const ds_spec_costs_fn *c, const ds_spec_step *s, const plan_state *st, const ds_spec_cand *cd,
                     double *dt, double *dtok) {
    int j = cd->k;
    double pj = pow(cd->p, j + 1);
    double t = call(c->forward, c->user, s->base_rows + st->K + 1) - call(c->forward, c->user, s->base_rows + st->K);
    if (j == 0) t += call(c->catchup, c->user, st->U + cd->catchup_rows) - call(c->catchup, c->user, st->U);
    else t += call(c->draft, c->user, st->m[j] + 1) - call(c->draft, c->user, st->m[j]);
    t += cd->choice_s * (1.0 + pj); /* the draft's own choice, and the verify's choice past it when it is kept */
    *dt = t > 1e-9 ? t : 1e-9;
    *dtok = pj;
}

/* The candidate whose next draft gives the most tokens per extra second, or -1. */
static int pick(const ds_spec_costs_fn *c, const ds_spec_step *s, const plan_state *st, const ds_spec_cand *cand,
                int n, double *dt_out, double *dtok_out) {
    int best = -1;
    double best_ratio = -1.0;
    if (st->K >= s->max_drafts) return -1;
    for (int i = 0; i < n; i++) {
        if (cand[i].k >= cand[i].k_max || cand[i].k >= DS_MAX_SPEC || !(cand[i].p > 0)) continue;
        double dt, dtok;
        marginal(c, s, st, &cand[i], &dt, &dtok);
        if (dtok / dt > best_ratio) best_ratio = dtok / dt, best = i, *dt_out = dt, *dtok_out = dtok;
    }
    return best;
}

static void add(plan_state *st, ds_spec_cand *cd, double dt, double dtok) {
    if (cd->k == 0) st->U += cd->catchup_rows;
    else st->m[cd->k]++;
    cd->k++;
    st->K++;
    st->tokens += dtok;
    st->seconds += dt;
}

double ds_spec_policy_plan(const ds_spec_costs_fn *c, const ds_spec_step *s, ds_spec_cand *cand, int n) {
    for (int i = 0; i < n; i++) cand[i].k = 0;
    plan_state st = {.U = s->base_catchup_rows, .tokens = s->base_tokens};
    st.seconds = call(c->forward, c->user, s->base_rows) + call(c->catchup, c->user, s->base_catchup_rows) + s->base_s;
    if (!(st.seconds > 0) || s->base_tokens <= 0) return 1.0;
    double plain = st.tokens / st.seconds, best = plain * MARGIN;
    int best_len = 0;
    /* the greedy path: one draft at a time, the best value first; keep its best prefix */
    for (int len = 1;; len++) {
        double dt = 0, dtok = 0;
        int i = pick(c, s, &st, cand, n, &dt, &dtok);
        if (i < 0) break;
        add(&st, &cand[i], dt, dtok);
        if (st.tokens / st.seconds > best) best = st.tokens / st.seconds, best_len = len;
    }
    /* replay it up to that prefix (the path is deterministic) */
    for (int i = 0; i < n; i++) cand[i].k = 0;
    st = (plan_state){.U = s->base_catchup_rows, .tokens = s->base_tokens};
    for (int len = 0; len < best_len; len++) {
        double dt = 0, dtok = 0;
        int i = pick(c, s, &st, cand, n, &dt, &dtok);
        if (i < 0) break;
        add(&st, &cand[i], dt, dtok);
    }
    return best_len ? best / plain : 1.0;
}
