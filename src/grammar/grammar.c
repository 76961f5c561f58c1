/* grammar.c - see grammar.h: a grammar's life, and the checks that make it
 * safe to match (every rule can end its expansion: no left recursion). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

ds_status gr_parse_gbnf(const char *text, size_t len, ds_grammar *g, ds_err *e);

/* nullable[r]: rule r can match the empty string */
static void compute_nullable(const ds_grammar *g, uint8_t *nullable) {
    memset(nullable, 0, (size_t)g->n_rules);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < g->n_rules; r++) {
            if (nullable[r]) continue;
            for (int a = 0; a < g->rule_n_alts[r] && !nullable[r]; a++) {
                int p = g->alt_pos[g->rule_alt0[r] + a], ok = 1;
                for (; g->el[p].kind != E_END && ok; p++)
                    ok = g->el[p].kind == E_REF && nullable[g->el[p].arg];
                if (ok) nullable[r] = 1, changed = 1;
            }
        }
    }
}

/* Depth-first over "r may start with s" edges; state 1: on the path, 2: done. */
static int find_left_cycle(const ds_grammar *g, const uint8_t *nullable, uint8_t *state, int *path, int depth, int r,
                           int *cycle_len) {
    state[r] = 1;
    path[depth] = r;
    for (int a = 0; a < g->rule_n_alts[r]; a++) {
        for (int p = g->alt_pos[g->rule_alt0[r] + a]; g->el[p].kind == E_REF; p++) {
            int s = (int)g->el[p].arg;
            if (state[s] == 1) {
                int k = depth;
                while (k > 0 && path[k] != s) k--;
                memmove(path, path + k, (size_t)(depth - k + 1) * sizeof *path);
                path[depth - k + 1] = s;
                *cycle_len = depth - k + 2;
                return 1;
            }
            if (state[s] == 0 && find_left_cycle(g, nullable, state, path, depth + 1, s, cycle_len)) return 1;
            if (!nullable[s]) break;
        }
    }
    state[r] = 2;
    return 0;
}

static ds_status check_left_recursion(const ds_grammar *g, ds_err *e) {
    uint8_t *nullable = malloc((size_t)g->n_rules + 1), *state = calloc((size_t)g->n_rules + 1, 1);
    int *path = malloc(((size_t)g->n_rules + 2) * sizeof *path);
    ds_status st = DS_OK;
    if (!nullable || !state || !path) {
        st = ds_fail(e, DS_ENOMEM, "grammar: out of memory");
        goto out;
    }
    compute_nullable(g, nullable);
    for (int r = 0; r < g->n_rules && !st; r++) {
        int len = 0;
        if (state[r] || !find_left_cycle(g, nullable, state, path, 0, r, &len)) continue;
        char chain[400];
        size_t at = 0;
        for (int i = 0; i < len && at + 4 < sizeof chain; i++)
            at += (size_t)snprintf(chain + at, sizeof chain - at, "%s%s", i ? " -> " : "", g->rule_names[path[i]]);
        st = ds_fail(e, DS_EINVAL, "grammar: rule '%s' is left-recursive (%s): rewrite it to consume text before it "
                     "refers to itself", g->rule_names[path[0]], chain);
    }
out:
    free(nullable);
    free(state);
    free(path);
    return st;
}

ds_status ds_grammar_parse(const char *gbnf, size_t len, ds_grammar **out, ds_err *e) {
    *out = NULL;
    ds_grammar *g = calloc(1, sizeof *g);
    if (!g) return ds_fail(e, DS_ENOMEM, "grammar: out of memory");
    atomic_init(&g->refs, 1);
    ds_status st = gr_parse_gbnf(gbnf ? gbnf : "", gbnf ? len : 0, g, e);
    if (!st) st = check_left_recursion(g, e);
    if (st) {
        ds_grammar_unref(g);
        return st;
    }
    *out = g;
    return DS_OK;
}

void ds_grammar_ref(ds_grammar *g) {
    if (g) atomic_fetch_add(&g->refs, 1);
}

void ds_grammar_unref(ds_grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    gr_clear_caches(g);
    free(g->pos_cache);
    free(g->state_cache);
    for (int r = 0; r < g->n_rules; r++) free(g->rule_names ? g->rule_names[r] : NULL);
    free(g->rule_names);
    free(g->el);
    free(g->sets);
    free(g->alt_pos);
    free(g->rule_alt0);
    free(g->rule_n_alts);
    free(g);
}

size_t ds_grammar_bytes(const ds_grammar *g) { return g ? g->bytes + g->cache_bytes : 0; }
