/* matcher.c - see matcher.h and matcher_int.h. */
#include <stdlib.h>
#include <string.h>

#include "grammar/matcher.h"
#include "grammar/matcher_int.h"

/* A matcher's byte budget: one that runs into it has met a grammar whose
 * stacks do not repeat (or an answer far longer than any request allows),
 * and refuses from then on (matcher.h: ds_matcher_failed). A state costs its
 * transition table, a node its entry and its hash slot. */
#define SPACE_BUDGET (48u << 20)
#define STATE_BYTES (sizeof(gr_state) + 256 * sizeof(int32_t) + 2 * sizeof(int32_t))
#define NODE_BYTES (sizeof(gr_node) + 2 * sizeof(int32_t))

/* Stacks one state may hold: an ambiguous grammar (a repetition next to a recursion that
 * can start with the same bytes) multiplies them with every byte. */
#define MAX_STACKS 2048

static int over_budget(const gr_space *sp) {
    return (size_t)sp->n_states * STATE_BYTES + (size_t)sp->n_nodes * NODE_BYTES + sp->n_items * sizeof(int32_t) >
           SPACE_BUDGET;
}

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int grow(void **p, int *cap, int need, size_t size) {
    if (need <= *cap) return 1;
    int c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

int ds_gr_space_init(gr_space *sp, const ds_grammar *g) {
    memset(sp, 0, sizeof *sp);
    sp->g = g;
    sp->node_tcap = 1024;
    sp->state_tcap = 256;
    sp->node_table = malloc((size_t)sp->node_tcap * sizeof *sp->node_table);
    sp->state_table = malloc((size_t)sp->state_tcap * sizeof *sp->state_table);
    if (!sp->node_table || !sp->state_table || !grow((void **)&sp->nodes, &sp->cap_nodes, 1, sizeof *sp->nodes)) return 0;
    memset(sp->node_table, -1, (size_t)sp->node_tcap * sizeof *sp->node_table);
    memset(sp->state_table, -1, (size_t)sp->state_tcap * sizeof *sp->state_table);
    sp->nodes[0] = (gr_node){.pos = UINT32_MAX, .parent = -1, .hash = 0x5bd1e995u};
    sp->n_nodes = 1;
    return 1;
}

void ds_gr_space_free(gr_space *sp) {
    for (int i = 0; i < sp->n_states; i++) free(sp->states[i].trans);
    free(sp->states);
    free(sp->state_table);
    free(sp->items);
    free(sp->nodes);
    free(sp->node_table);
    free(sp->tmp);
    memset(sp, 0, sizeof *sp);
}

static uint64_t node_key(uint32_t pos, int32_t parent) { return ((uint64_t)pos << 32) ^ (uint32_t)parent; }

static int rehash_nodes(gr_space *sp) {
    int cap = sp->node_tcap * 2;
    int32_t *t = malloc((size_t)cap * sizeof *t);
    if (!t) return 0;
    memset(t, -1, (size_t)cap * sizeof *t);
    for (int i = 1; i < sp->n_nodes; i++) {
        size_t h = mix(node_key(sp->nodes[i].pos, sp->nodes[i].parent)) & (size_t)(cap - 1);
        while (t[h] >= 0) h = (h + 1) & (size_t)(cap - 1);
        t[h] = i;
    }
    free(sp->node_table);
    sp->node_table = t;
    sp->node_tcap = cap;
    return 1;
}

/* The node (pos, parent), made if new; -1 when out of room. */
static int32_t node(gr_space *sp, uint32_t pos, int32_t parent) {
    size_t mask = (size_t)sp->node_tcap - 1, h = mix(node_key(pos, parent)) & mask;
    for (; sp->node_table[h] >= 0; h = (h + 1) & mask) {
        const gr_node *n = &sp->nodes[sp->node_table[h]];
        if (n->pos == pos && n->parent == parent) return sp->node_table[h];
    }
    if (over_budget(sp) || !grow((void **)&sp->nodes, &sp->cap_nodes, sp->n_nodes + 1, sizeof *sp->nodes)) {
        sp->overflow = 1;
        return -1;
    }
    int32_t id = sp->n_nodes++;
    sp->nodes[id] = (gr_node){.pos = pos, .parent = parent, .hash = mix(sp->nodes[parent].hash * 31 + pos + 1)};
    sp->node_table[h] = id;
    if (sp->n_nodes * 2 > sp->node_tcap && !rehash_nodes(sp)) sp->overflow = 1;
    return id;
}

static void add_tmp(gr_space *sp, int32_t n) {
    if (sp->n_tmp >= 8 * MAX_STACKS) { sp->overflow = 1; return; }
    if (!grow((void **)&sp->tmp, &sp->cap_tmp, sp->n_tmp + 1, sizeof *sp->tmp)) { sp->overflow = 1; return; }
    sp->tmp[sp->n_tmp++] = n;
}

/* Adds to tmp the stacks that continue at pos on top of parent, each topped by a terminal or
 * the bottom: references open their rule's alternatives, ends return to the frame below. */
static void expand(gr_space *sp, uint32_t pos, int32_t parent) {
    const ds_grammar *g = sp->g;
    while (!sp->overflow) {
        gr_elem e = g->el[pos];
        if (e.kind == E_BYTES) {
            int32_t n = node(sp, pos, parent);
            if (n >= 0) add_tmp(sp, n);
            return;
        }
        if (e.kind == E_END) {
            if (parent == 0) { add_tmp(sp, 0); return; }
            pos = sp->nodes[parent].pos;
            parent = sp->nodes[parent].parent;
            continue;
        }
        /* E_REF: the rest of this frame waits below the rule's alternatives (nothing waits when the
         * reference ends its alternative: a repetition's tail call does not deepen the stack) */
        int32_t cont = g->el[pos + 1].kind == E_END ? parent : node(sp, pos + 1, parent);
        if (cont < 0) return;
        int r = (int)e.arg;
        for (int a = 0; a < g->rule_n_alts[r]; a++) expand(sp, (uint32_t)g->alt_pos[g->rule_alt0[r] + a], cont);
        return;
    }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static int rehash_states(gr_space *sp) {
    int cap = sp->state_tcap * 2;
    int32_t *t = malloc((size_t)cap * sizeof *t);
    if (!t) return 0;
    memset(t, -1, (size_t)cap * sizeof *t);
    for (int i = 0; i < sp->n_states; i++) {
        size_t h = sp->states[i].hash & (size_t)(cap - 1);
        while (t[h] >= 0) h = (h + 1) & (size_t)(cap - 1);
        t[h] = i;
    }
    free(sp->state_table);
    sp->state_table = t;
    sp->state_tcap = cap;
    return 1;
}

/* The state of the nodes tmp[from..n_tmp) (sorted, duplicates dropped); -1 when there are none. */
static int32_t intern_tmp(gr_space *sp, int from) {
    int32_t *v = sp->tmp + from;
    int n = sp->n_tmp - from;
    if (n <= 0 || sp->overflow) { sp->n_tmp = from; return -1; }
    if (n > 16) qsort(v, (size_t)n, sizeof *v, cmp_i32);
    else /* the usual few stacks: an insertion sort beats qsort's calls */
        for (int i = 1; i < n; i++) {
            int32_t x = v[i];
            int j = i;
            for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
            v[j] = x;
        }
    int m = 1;
    for (int i = 1; i < n; i++)
        if (v[i] != v[m - 1]) v[m++] = v[i];
    if (m > MAX_STACKS) { sp->overflow = 1; sp->n_tmp = from; return -1; }
    uint64_t h = 0x12345;
    for (int i = 0; i < m; i++) h = mix(h ^ (uint64_t)v[i]);
    size_t mask = (size_t)sp->state_tcap - 1, k = h & mask;
    for (; sp->state_table[k] >= 0; k = (k + 1) & mask) {
        const gr_state *s = &sp->states[sp->state_table[k]];
        if (s->hash == h && s->n == (uint32_t)m && !memcmp(sp->items + s->first, v, (size_t)m * sizeof *v)) {
            sp->n_tmp = from;
            return sp->state_table[k];
        }
    }
    if (over_budget(sp) || !grow((void **)&sp->states, &sp->cap_states, sp->n_states + 1, sizeof *sp->states)) {
        sp->overflow = 1;
        sp->n_tmp = from;
        return -1;
    }
    if (sp->n_items + (size_t)m > sp->cap_items) {
        size_t c = sp->cap_items ? sp->cap_items * 2 : 1024;
        while (c < sp->n_items + (size_t)m) c *= 2;
        int32_t *q = realloc(sp->items, c * sizeof *q);
        if (!q) { sp->overflow = 1; sp->n_tmp = from; return -1; }
        sp->items = q, sp->cap_items = c;
    }
    v = sp->tmp + from;
    int32_t id = sp->n_states++;
    gr_state *s = &sp->states[id];
    *s = (gr_state){.first = (uint32_t)sp->n_items, .n = (uint32_t)m, .hash = h, .can_end = v[0] == 0};
    memcpy(sp->items + sp->n_items, v, (size_t)m * sizeof *v);
    sp->n_items += (size_t)m;
    sp->state_table[k] = id;
    if (sp->n_states * 2 > sp->state_tcap && !rehash_states(sp)) sp->overflow = 1;
    sp->n_tmp = from;
    return id;
}

int32_t ds_gr_state_at(gr_space *sp, uint32_t pos, int32_t parent) {
    int from = sp->n_tmp;
    expand(sp, pos, parent);
    return intern_tmp(sp, from);
}

int32_t ds_gr_node_on(gr_space *sp, uint32_t pos, int32_t parent) { return node(sp, pos, parent); }

int32_t ds_gr_state_of_nodes(gr_space *sp, const int32_t *nodes, int n) {
    int from = sp->n_tmp;
    for (int i = 0; i < n; i++) add_tmp(sp, nodes[i]);
    return intern_tmp(sp, from);
}

int32_t ds_gr_state_after_frame(gr_space *sp, int32_t n) {
    int32_t parent = sp->nodes[n].parent;
    int from = sp->n_tmp;
    if (parent == 0) add_tmp(sp, 0);
    else expand(sp, sp->nodes[parent].pos, sp->nodes[parent].parent);
    return intern_tmp(sp, from);
}

int32_t ds_gr_trans(gr_space *sp, int32_t s, unsigned char b) {
    if (sp->states[s].trans && sp->states[s].trans[b] != -2) return sp->states[s].trans[b];
    if (!sp->states[s].trans) {
        int32_t *t = malloc(256 * sizeof *t);
        if (!t) { sp->overflow = 1; return -1; }
        for (int i = 0; i < 256; i++) t[i] = -2;
        sp->states[s].trans = t;
    }
    const ds_grammar *g = sp->g;
    int from = sp->n_tmp;
    for (uint32_t i = 0; i < sp->states[s].n; i++) {
        int32_t n = sp->items[sp->states[s].first + i];
        if (n == 0) continue;
        uint32_t pos = sp->nodes[n].pos;
        if (gr_set_has(&g->sets[g->el[pos].arg], b)) expand(sp, pos + 1, sp->nodes[n].parent);
    }
    int32_t next = intern_tmp(sp, from);
    if (sp->overflow) return -1; /* not remembered: the limit refuses, not the grammar */
    sp->states[s].trans[b] = next; /* states may have moved: index again */
    return next;
}

ds_status ds_matcher_new(ds_grammar *g, ds_matcher **out, ds_err *e) {
    *out = NULL;
    ds_matcher *m = calloc(1, sizeof *m);
    if (!m || !ds_gr_space_init(&m->sp, g) || !grow((void **)&m->hist, &m->cap_hist, 16, sizeof *m->hist)) {
        if (m) ds_gr_space_free(&m->sp), free(m->hist), free(m);
        return ds_fail(e, DS_ENOMEM, "matcher: out of memory");
    }
    m->g = g;
    ds_grammar_ref(g);
    int from = m->sp.n_tmp;
    for (int a = 0; a < g->rule_n_alts[g->root]; a++) expand(&m->sp, (uint32_t)g->alt_pos[g->rule_alt0[g->root] + a], 0);
    m->hist[0] = intern_tmp(&m->sp, from);
    m->n_hist = 1;
    if (m->sp.overflow) {
        ds_matcher_free(m);
        return ds_fail(e, DS_ENOMEM, "matcher: out of memory");
    }
    *out = m;
    return DS_OK;
}

void ds_matcher_free(ds_matcher *m) {
    if (!m) return;
    ds_gr_space_free(&m->sp);
    free(m->hist);
    ds_grammar_unref(m->g);
    free(m);
}

int ds_matcher_accept(ds_matcher *m, const char *bytes, size_t len) {
    int32_t s = m->hist[m->n_hist - 1];
    for (size_t i = 0; i < len && s >= 0; i++) s = ds_gr_trans(&m->sp, s, (unsigned char)bytes[i]);
    if (s < 0) return 0;
    if (!grow((void **)&m->hist, &m->cap_hist, m->n_hist + 1, sizeof *m->hist)) return 0;
    m->hist[m->n_hist++] = s;
    return 1;
}

int ds_matcher_steps(const ds_matcher *m) { return m->n_hist - 1; }

int ds_matcher_failed(const ds_matcher *m) { return m->sp.overflow; }

void ds_matcher_rollback(ds_matcher *m, int n_steps) {
    if (n_steps > m->n_hist - 1) n_steps = m->n_hist - 1;
    if (n_steps > 0) m->n_hist -= n_steps;
}

int ds_matcher_can_end(const ds_matcher *m) {
    int32_t s = m->hist[m->n_hist - 1];
    return s >= 0 && m->sp.states[s].can_end;
}

int ds_matcher_must_end(const ds_matcher *m) {
    int32_t s = m->hist[m->n_hist - 1];
    return s >= 0 && m->sp.states[s].can_end && m->sp.states[s].n == 1;
}
