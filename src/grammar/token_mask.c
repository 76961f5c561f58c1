/* token_mask.c - which tokens the grammar allows next (ds_matcher_fill_mask).
 *
 * Three levels, cheapest first:
 *   1. a mask cache per whole state, keyed by the hashes of its stacks, so
 *      that any matcher of the grammar meeting the same stacks again (every
 *      byte inside a string, say) copies the mask;
 *   2. per grammar position, what each token does within the position's own
 *      frame (grammar_int.h, gr_position_entry): the tokens it takes whole
 *      are or-ed in, and only the "uncertain" ones, which complete the frame
 *      mid-token, are walked from the stack below;
 *   3. a walk of the whole vocabulary from the state, for stacks topped by a
 *      "wide" position, where most tokens would be uncertain.
 * A walk visits the tokens in byte order, starting each where its common
 * prefix with the previous one ends, over transitions the state space
 * memoises per byte: a trie walk without a trie. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "grammar/matcher.h"
#include "grammar/matcher_int.h"
#include "grammar/vocab_index_int.h"

#define CACHE_BUDGET (96u << 20)   /* bytes of masks a grammar keeps per vocabulary */

typedef struct {
    const ds_vocab_index *v;
    int32_t *st;        /* [max_len + 1] the states along the current token */
} walker;

/* The bytes of entry i: token v->ids[vi[i]] from byte off[i] on (off NULL: the whole token). */
static inline const unsigned char *entry_bytes(const ds_vocab_index *v, const int32_t *vi, const uint32_t *off, int i,
                                               int *len) {
    int t = vi ? vi[i] : i;
    uint32_t o = off ? off[i] : 0;
    *len = (int)v->len[t] - (int)o;
    return v->bytes + v->off[t] + o;
}

/* What a walk reports: entries taken whole, and (building a position entry) entries that
 * complete the frames after k bytes and go on. */
typedef struct {
    void (*accept)(void *ctx, int i);
    void (*uncertain)(void *ctx, int i, int k);
    void *ctx;
} walk_sink;

/* Walks n entries (sorted by their bytes; lcp[i] shared with entry i-1) from state start:
 * accept(i) for each entry taken whole. */
static void walk(gr_space *sp, walker *w, int32_t start, int n, const int32_t *vi, const uint32_t *off,
                 const uint16_t *lcp, const walk_sink *sink) {
    int32_t *st = w->st;
    st[0] = start;
    int ok = 0;
    for (int i = 0; i < n; i++) {
        int len;
        const unsigned char *b = entry_bytes(w->v, vi, off, i, &len);
        int d = lcp[i] < ok ? lcp[i] : ok;
        if (i == 0) d = 0;
        while (d < len) {
            int32_t s = ds_gr_trans_fast(sp, st[d], b[d]);
            if (s < 0) break;
            st[++d] = s;
        }
        ok = d;
        if (d == len) sink->accept(sink->ctx, i);
    }
}

/* Walks the whole vocabulary's trie from state start: accept(i) for every token index position
 * i taken whole; with uncertain, uncertain(i, k) for each token that dies (or is not taken
 * whole) after passing a state holding the bottom at depth k. A dead child skips its subtree.
 * Returns 0 when stop() asked to stop. */
static int walk_trie(gr_space *sp, walker *w, int32_t start, uint32_t *accepted, int *n_accepted,
                     const walk_sink *sink, const int *stop) {
    const ds_vocab_index *v = w->v;
    const uint8_t *byte = v->node_byte, *ntok = v->node_ntok;
    const uint16_t *depth = v->node_depth;
    const int32_t *tok = v->node_token, *ids = v->ids;
    int32_t *st = w->st;
    int ends[64], n_ends = 0, n_acc = 0; /* depths on the path whose state holds the bottom */
    /* the state table in a local: the build does not assume strict aliasing, so every store to
     * st[] would reload it; only the slow path (a transition not computed yet) may move it */
    const gr_state *states = sp->states;
    st[0] = start;
    if (sink && states[start].can_end) ends[n_ends++] = 0;
    for (int x = 1, n = v->n_nodes; x < n;) {
        int d = depth[x];
        while (n_ends && ends[n_ends - 1] >= d) n_ends--;
        const int32_t *t = states[st[d - 1]].trans;
        int32_t s = t ? t[byte[x]] : -2;
        if (s == -2) {
            s = ds_gr_trans(sp, st[d - 1], byte[x]);
            states = sp->states;
        }
        if (s < 0) {
            if (n_ends) /* every token below completed the frames on the way: uncertain */
                for (int y = x; y < x + (int)v->node_size[x]; y++)
                    for (int k = 0; k < ntok[y]; k++)
                        for (int e = 0; e < n_ends; e++) sink->uncertain(sink->ctx, tok[y] + k, ends[e]);
            x += (int)v->node_size[x];
            if (stop && *stop) break;
            continue;
        }
        st[d] = s;
        for (int k = 0; k < ntok[x]; k++) DS_MASK_SET(accepted, ids[tok[x] + k]), n_acc++;
        if (sink && states[s].can_end && n_ends < 64) ends[n_ends++] = d;
        x++;
    }
    *n_accepted += n_acc;
    return !(stop && *stop);
}

/* --- per-position entries --- */

typedef struct {
    const ds_vocab_index *v;
    gr_position_entry *pe;
    int32_t *u_vi;
    uint32_t *u_off;
    int n_u, cap_u, limit_u;
    int failed;
} pe_build;

static void pe_uncertain(void *ctx, int i, int k) {
    pe_build *b = ctx;
    if (b->n_u >= b->limit_u) { b->pe->wide = 1; return; }
    if (b->n_u == b->cap_u) {
        int c = b->cap_u ? b->cap_u * 2 : 256;
        int32_t *a = realloc(b->u_vi, (size_t)c * sizeof *a);
        if (a) b->u_vi = a;
        uint32_t *o = realloc(b->u_off, (size_t)c * sizeof *o);
        if (o) b->u_off = o;
        if (!a || !o) { b->failed = 1; return; }
        b->cap_u = c;
    }
    b->u_vi[b->n_u] = i;
    b->u_off[b->n_u] = (uint32_t)k;
    b->n_u++;
}

/* Uncertain entries are ordered by the first 8 bytes of their rest (big-endian, then length):
 * close enough to byte order for the walk to share most prefixes, and an integer sort. The walk
 * is right in any order (it takes the common prefix from the bytes themselves). */
typedef struct {
    uint64_t key;
    int idx;
} rest_key;

static int cmp_rest_key(const void *pa, const void *pb) {
    const rest_key *a = pa, *b = pb;
    return a->key < b->key ? -1 : a->key > b->key ? 1 : a->idx - b->idx;
}

static uint64_t rest_key_of(const unsigned char *b, int len) {
    uint64_t k = 0;
    for (int i = 0; i < 7; i++) k = k << 8 | (i < len ? b[i] : 0);
    return k << 8 | (uint64_t)(len < 255 ? len : 255);
}

static void free_entry(gr_position_entry *pe) {
    if (!pe) return;
    free(pe->accepted);
    free(pe->u_token);
    free(pe->u_off);
    free(pe->u_lcp);
    free(pe);
}

static uint64_t entry_key(const gr_space *sp, int32_t nd) {
    int32_t below = sp->nodes[nd].parent;
    return (uint64_t)sp->nodes[nd].pos << 32 | (below ? sp->nodes[below].pos : UINT32_MAX);
}

static gr_position_entry **entry_slot(ds_grammar *g, uint64_t key) {
    size_t mask = (size_t)g->pos_cap - 1, h = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & mask;
    while (g->pos_cache[h] && g->pos_cache[h]->key != key) h = (h + 1) & mask;
    return &g->pos_cache[h];
}

static int grow_entries(ds_grammar *g) {
    gr_position_entry **old = g->pos_cache;
    int old_cap = g->pos_cap;
    g->pos_cap = old_cap ? old_cap * 2 : 256;
    if (!(g->pos_cache = calloc((size_t)g->pos_cap, sizeof *g->pos_cache))) {
        g->pos_cache = old, g->pos_cap = old_cap;
        return 0;
    }
    for (int i = 0; i < old_cap; i++)
        if (old[i]) *entry_slot(g, old[i]->key) = old[i];
    free(old);
    return 1;
}

/* The entry of node nd's top two frames, built on first use (NULL when out of memory). */
static gr_position_entry *position_entry(ds_matcher *m, walker *w, int32_t nd) {
    ds_grammar *g = m->g;
    gr_space *sp = &m->sp;
    uint64_t key = entry_key(sp, nd);
    gr_position_entry **slot = entry_slot(g, key);
    if (*slot) return *slot;
    if ((g->n_pos + 1) * 2 > g->pos_cap) {
        if (!grow_entries(g)) return NULL;
        slot = entry_slot(g, key);
    }
    const ds_vocab_index *v = w->v;
    gr_position_entry *pe = calloc(1, sizeof *pe);
    if (!pe) return NULL;
    pe->key = key;

    pe_build b = {.v = v, .pe = pe, .limit_u = v->n / 8 + 64};
    /* the two frames on their own: the continuation below copied onto the bottom */
    int32_t below = sp->nodes[nd].parent, copy = below ? ds_gr_node_on(sp, sp->nodes[below].pos, 0) : 0;
    int32_t start = copy >= 0 ? ds_gr_state_at(sp, sp->nodes[nd].pos, copy) : -1;
    walk_sink sink = {NULL, pe_uncertain, &b};
    pe->accepted = calloc(DS_MASK_WORDS(v->n_tokens), sizeof *pe->accepted);
    if (!pe->accepted) b.failed = 1;
    else if (start >= 0) walk_trie(sp, w, start, pe->accepted, &pe->n_accepted, &sink, &pe->wide);
    if (pe->accepted && pe->n_accepted == 0) free(pe->accepted), pe->accepted = NULL;
    if (b.failed || m->sp.overflow) {
        free(b.u_vi), free(b.u_off);
        free_entry(pe);
        return NULL;
    }
    pe->bytes = sizeof *pe + (pe->accepted ? DS_MASK_WORDS(v->n_tokens) * sizeof(uint32_t) : 0);
    if (!pe->wide && b.n_u) {
        rest_key *order = malloc((size_t)b.n_u * sizeof *order);
        pe->u_token = malloc((size_t)b.n_u * sizeof *pe->u_token);
        pe->u_off = malloc((size_t)b.n_u * sizeof *pe->u_off);
        pe->u_lcp = malloc((size_t)b.n_u * sizeof *pe->u_lcp);
        if (!order || !pe->u_token || !pe->u_off || !pe->u_lcp) {
            free(order), free(b.u_vi), free(b.u_off), free_entry(pe);
            return NULL;
        }
        for (int i = 0; i < b.n_u; i++) {
            int len;
            const unsigned char *r = entry_bytes(v, b.u_vi, b.u_off, i, &len);
            order[i] = (rest_key){rest_key_of(r, len), i};
        }
        qsort(order, (size_t)b.n_u, sizeof *order, cmp_rest_key);
        /* u_token holds the index position (the walk reads bytes through it); u_off the offset */
        int prev = -1;
        for (int i = 0; i < b.n_u; i++) {
            int j = order[i].idx, lj, lp;
            pe->u_token[i] = b.u_vi[j];
            pe->u_off[i] = b.u_off[j];
            uint16_t l = 0;
            if (prev >= 0) {
                const unsigned char *x = entry_bytes(v, b.u_vi, b.u_off, prev, &lp);
                const unsigned char *y = entry_bytes(v, b.u_vi, b.u_off, j, &lj);
                int mx = lp < lj ? lp : lj;
                while (l < mx && x[l] == y[l]) l++;
            }
            pe->u_lcp[i] = l;
            prev = j;
        }
        free(order);
        pe->n_uncertain = b.n_u;
        pe->bytes += (size_t)b.n_u * (sizeof(int32_t) + sizeof(uint32_t) + sizeof(uint16_t));
    }
    free(b.u_vi);
    free(b.u_off);
    *slot = pe;
    g->n_pos++;
    g->cache_bytes += pe->bytes;
    return pe;
}

/* --- whole-state masks --- */

void ds_gr_clear_caches(ds_grammar *g) {
    if (g->pos_cache)
        for (int i = 0; i < g->pos_cap; i++) free_entry(g->pos_cache[i]), g->pos_cache[i] = NULL;
    g->n_pos = 0;
    if (g->state_cache)
        for (int b = 0; b < g->n_state_buckets; b++) {
            for (gr_state_mask *s = g->state_cache[b], *nx; s; s = nx) {
                nx = s->next;
                free(s->key), free(s->bits), free(s);
            }
            g->state_cache[b] = NULL;
        }
    g->n_state_masks = 0;
    g->cache_bytes = 0;
}

static int bind_vocab(ds_grammar *g, const ds_vocab_index *v) {
    if (g->cache_vocab == v && g->pos_cache) return 1;
    ds_gr_clear_caches(g);
    if (!g->pos_cache && !grow_entries(g)) return 0;
    if (!g->state_cache) {
        g->n_state_buckets = 4096;
        if (!(g->state_cache = calloc((size_t)g->n_state_buckets, sizeof *g->state_cache))) return 0;
    }
    g->cache_vocab = v;
    return 1;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    uint32_t *bits;
    const ds_vocab_index *v;
    const int32_t *vi;    /* entry -> index position (NULL: the entry is the index position) */
    int n;
} mask_sink;

static void mask_accept(void *ctx, int i) {
    mask_sink *s = ctx;
    int32_t t = s->v->ids[s->vi ? s->vi[i] : i];
    DS_MASK_SET(s->bits, t);
}

static int popcount_words(const uint32_t *bits, size_t n) {
    int c = 0;
    for (size_t i = 0; i < n; i++)
        if (bits[i]) c += __builtin_popcount(bits[i]);
    return c;
}

int ds_matcher_fill_mask(ds_matcher *m, const ds_vocab_index *v, uint32_t *bits) {
    int32_t s = m->hist[m->n_hist - 1];
    if (s < 0 || m->sp.overflow) return 0;
    ds_grammar *g = m->g;
    size_t words = DS_MASK_WORDS(v->n_tokens);
    if (!bind_vocab(g, v)) return 0;
    gr_space *sp = &m->sp;
    uint32_t first = sp->states[s].first, n = sp->states[s].n;
    uint64_t key_local[64], *key = n <= 64 ? key_local : malloc(n * sizeof *key);
    if (!key) return 0;
    for (uint32_t i = 0; i < n; i++) key[i] = sp->nodes[sp->items[first + i]].hash;
    qsort(key, n, sizeof *key, cmp_u64);
    uint64_t h = 0x9ae16a3b2f90404full;
    for (uint32_t i = 0; i < n; i++) h = (h ^ key[i]) * 0x100000001b3ull;
    gr_state_mask **bucket = &g->state_cache[h & (uint64_t)(g->n_state_buckets - 1)];
    for (gr_state_mask *c = *bucket; c; c = c->next)
        if (c->hash == h && c->n_key == (int)n && !memcmp(c->key, key, n * sizeof *key)) {
            memcpy(bits, c->bits, words * sizeof *bits);
            if (key != key_local) free(key);
            return c->n_allowed;
        }

    int32_t st_local[512];
    walker w = {.v = v, .st = v->max_len < 511 ? st_local : malloc(((size_t)v->max_len + 1) * sizeof(int32_t))};
    int fail = !w.st;
    /* the state's nodes are copied: building entries interns new states and may move items */
    int32_t nodes_local[64], *nodes = n <= 64 ? nodes_local : malloc(n * sizeof *nodes);
    if (!nodes) fail = 1;
    else memcpy(nodes, sp->items + first, n * sizeof *nodes);
    int n_wide = 0;
    for (uint32_t i = 0; i < n && !fail; i++) {
        int32_t nd = nodes[i];
        if (nd == 0) continue; /* the grammar may end here: no token follows from that stack */
        gr_position_entry *pe = position_entry(m, &w, nd);
        if (!pe) { fail = 1; break; }
        if (pe->wide) { nodes[n_wide++] = nd; continue; }
        if (pe->accepted)
            for (size_t k = 0; k < words; k++) bits[k] |= pe->accepted[k];
        int32_t a1 = sp->nodes[nd].parent;
        if (pe->n_uncertain && a1 != 0 && sp->nodes[a1].parent != 0) {
            /* both frames completed: what the stack below them takes */
            int32_t below = ds_gr_state_after_frame(sp, a1);
            mask_sink ms = {.bits = bits, .v = v, .vi = pe->u_token};
            walk_sink sink = {mask_accept, NULL, &ms};
            if (below >= 0) walk(sp, &w, below, pe->n_uncertain, pe->u_token, pe->u_off, pe->u_lcp, &sink);
        }
    }
    if (!fail && n_wide) {
        int32_t ws = ds_gr_state_of_nodes(sp, nodes, n_wide);
        int n_acc = 0;
        if (ws >= 0) walk_trie(sp, &w, ws, bits, &n_acc, NULL, NULL);
    }
    if (nodes != nodes_local) free(nodes);
    if (w.st != st_local) free(w.st);
    if (fail || sp->overflow) {
        if (key != key_local) free(key);
        memset(bits, 0, words * sizeof *bits);
        return 0;
    }
    int n_allowed = popcount_words(bits, words);
    if (g->cache_bytes + words * sizeof *bits > CACHE_BUDGET) ds_gr_clear_caches(g), bind_vocab(g, v);
    gr_state_mask *c = malloc(sizeof *c);
    uint32_t *copy = malloc(words * sizeof *copy);
    uint64_t *kcopy = malloc(n * sizeof *kcopy);
    if (c && copy && kcopy) {
        memcpy(copy, bits, words * sizeof *bits);
        memcpy(kcopy, key, n * sizeof *key);
        *c = (gr_state_mask){.key = kcopy, .n_key = (int)n, .hash = h, .bits = copy, .n_allowed = n_allowed};
        bucket = &g->state_cache[h & (uint64_t)(g->n_state_buckets - 1)];
        c->next = *bucket;
        *bucket = c;
        g->n_state_masks++;
        g->cache_bytes += sizeof *c + words * sizeof *bits + n * sizeof *key;
    } else {
        free(c), free(copy), free(kcopy);
    }
    if (key != key_local) free(key);
    return n_allowed;
}
