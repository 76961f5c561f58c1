/* prefix_cache.c - the page trie with DeltaNet checkpoints (see the design
 * notes in prefix_cache.h).
 *
 * Invariants of the trie, between calls (ds_prefix_check checks T1-T6):
 *   T1. Every node in use is reached from the root exactly once, through its
 *       parent's child list, and its parent pointer names that parent.
 *   T2. Nodes in use + nodes on the free list = max_nodes; the free list
 *       holds each unused node once and no node in use; st.nodes counts the
 *       nodes in use.
 *   T3. Each node names one page of the pool, and no other node names it:
 *       the trie holds exactly one reference to each of its pages.
 *   T4. A checkpoint exists only when the model needs them (need_ckpt), is a
 *       slot of the checkpoint pool, belongs to one node (the trie holds its
 *       only reference), and st.checkpoints counts them.
 *   T5. The root names no page and no checkpoint.
 *   T6. A node's children start with different tokens, so a prompt has one
 *       path (not checked: quadratic in the children; find_child returns the
 *       first match and new_node is only called when there is none). */
#include "engine/prefix_cache.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct node {
    int32_t *tokens;            /* [page_size] */
    int page;                   /* KV page (the trie holds one reference) */
    int ckpt;                   /* checkpoint slot after this node's last token, or -1 */
    struct node *parent, *child, *sibling;
    uint64_t last_use;
    int in_use;
    uint64_t seen;              /* the check that last reached it (ds_prefix_check) */
} node;

struct ds_prefix_cache {
    int page_size, max_nodes, need_ckpt;
    ds_id_pool *pages, *ckpts;
    node root;
    node *nodes;                /* [max_nodes] */
    int32_t *token_store;       /* [max_nodes][page_size] */
    int32_t *free_nodes;
    int n_free;
    uint64_t tick;
    uint64_t checks;            /* ds_prefix_check calls, to mark nodes reached */
    ds_prefix_stats st;
};

ds_prefix_cache *ds_prefix_cache_new(int page_size, int max_nodes, ds_id_pool *pages, ds_id_pool *ckpts,
                                     int need_checkpoint) {
    ds_prefix_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->page_size = page_size;
    c->max_nodes = max_nodes;
    c->need_ckpt = need_checkpoint;
    c->pages = pages;
    c->ckpts = ckpts;
    c->root.ckpt = -1;
    c->root.page = -1;
    c->nodes = calloc((size_t)max_nodes, sizeof *c->nodes);
    c->token_store = malloc((size_t)max_nodes * (size_t)page_size * sizeof *c->token_store);
    c->free_nodes = malloc((size_t)max_nodes * sizeof *c->free_nodes);
    if (!c->nodes || !c->token_store || !c->free_nodes) {
        ds_prefix_cache_free(c);
        return NULL;
    }
    for (int i = 0; i < max_nodes; i++) {
        c->free_nodes[i] = max_nodes - 1 - i;
        c->nodes[i].tokens = c->token_store + (size_t)i * page_size;
    }
    c->n_free = max_nodes;
    return c;
}

void ds_prefix_cache_free(ds_prefix_cache *c) {
    if (!c) return;
    free(c->nodes);
    free(c->token_store);
    free(c->free_nodes);
    free(c);
}

static node *find_child(ds_prefix_cache *c, node *parent, const int32_t *tokens) {
    for (node *ch = parent->child; ch; ch = ch->sibling)
        if (memcmp(ch->tokens, tokens, (size_t)c->page_size * sizeof *tokens) == 0) return ch;
    return NULL;
}

int ds_prefix_lookup(ds_prefix_cache *c, const int32_t *tokens, int n, int32_t *pages_out, int *ckpt) {
    *ckpt = -1;
    c->st.queries++;
    c->st.query_tokens += n;
    node *path[4096];
    int depth = 0, usable = 0;
    node *cur = &c->root;
    /* at least one token must be left to compute, for the logits of the next token */
    while ((depth + 1) * c->page_size < n && depth < (int)(sizeof path / sizeof path[0])) {
        node *ch = find_child(c, cur, tokens + (size_t)depth * c->page_size);
        if (!ch) break;
        path[depth++] = ch;
        cur = ch;
        if (!c->need_ckpt || ch->ckpt >= 0) usable = depth;
    }
    c->tick++;
    for (int i = 0; i < usable; i++) {
        path[i]->last_use = c->tick;
        pages_out[i] = path[i]->page;
        ds_id_ref(c->pages, path[i]->page);
    }
    if (usable > 0) {
        c->st.hits++;
        c->st.hit_tokens += (int64_t)usable * c->page_size;
        if (c->need_ckpt) {
            *ckpt = path[usable - 1]->ckpt;
            c->st.checkpoint_restores++;
        }
    }
    return usable * c->page_size;
}

static node *new_node(ds_prefix_cache *c, node *parent, const int32_t *tokens, int page) {
    if (c->n_free == 0) return NULL;
    node *nd = &c->nodes[c->free_nodes[--c->n_free]];
    memcpy(nd->tokens, tokens, (size_t)c->page_size * sizeof *tokens);
    nd->page = page;
    ds_id_ref(c->pages, page);
    nd->ckpt = -1;
    nd->parent = parent;
    nd->child = NULL;
    nd->sibling = parent->child;
    parent->child = nd;
    nd->in_use = 1;
    c->st.nodes++;
    return nd;
}

void ds_prefix_insert(ds_prefix_cache *c, const int32_t *tokens, int n_pages, const int32_t *pages, int ckpt,
                      int ckpt_pos) {
    node *cur = &c->root;
    c->tick++;
    int ckpt_depth = ckpt >= 0 ? ckpt_pos / c->page_size : -1;
    for (int d = 0; d < n_pages; d++) {
        const int32_t *t = tokens + (size_t)d * c->page_size;
        node *ch = find_child(c, cur, t);
        if (!ch) ch = new_node(c, cur, t, pages[d]);
        if (!ch) break; /* out of nodes: the rest is simply not cached */
        ch->last_use = c->tick;
        if (d + 1 == ckpt_depth && ckpt >= 0) {
            if (ch->ckpt < 0) {
                ch->ckpt = ckpt;
                c->st.checkpoints++;
            } else {
                ds_id_unref(c->ckpts, ckpt);
            }
            ckpt = -1;
        }
        cur = ch;
    }
    if (ckpt >= 0) ds_id_unref(c->ckpts, ckpt); /* its node could not be made */
}

static void drop_ckpt(ds_prefix_cache *c, node *nd) {
    if (nd->ckpt < 0) return;
    ds_id_unref(c->ckpts, nd->ckpt);
    nd->ckpt = -1;
    c->st.checkpoints--;
    c->st.evicted_checkpoints++;
}

int ds_prefix_evict_page(ds_prefix_cache *c) {
    node *best = NULL;
    for (int i = 0; i < c->max_nodes; i++) {
        node *nd = &c->nodes[i];
        if (!nd->in_use || nd->child || ds_id_refs(c->pages, nd->page) > 1) continue;
        if (!best || nd->last_use < best->last_use) best = nd;
    }
    if (!best) return 0;
    drop_ckpt(c, best);
    node **link = &best->parent->child;
    while (*link != best) link = &(*link)->sibling;
    *link = best->sibling;
    ds_id_unref(c->pages, best->page);
    best->in_use = 0;
    c->free_nodes[c->n_free++] = (int32_t)(best - c->nodes);
    c->st.nodes--;
    c->st.evicted_pages++;
    return 1;
}

int ds_prefix_evict_checkpoint(ds_prefix_cache *c) {
    node *best = NULL;
    for (int i = 0; i < c->max_nodes; i++) {
        node *nd = &c->nodes[i];
        if (nd->in_use && nd->ckpt >= 0 && (!best || nd->last_use < best->last_use)) best = nd;
    }
    if (!best) return 0;
    drop_ckpt(c, best);
    return 1;
}

void ds_prefix_stats_get(const ds_prefix_cache *c, ds_prefix_stats *s) { *s = c->st; }

#define FREE_MARK ((uint64_t)1 << 63) /* in `seen`: reached on the free list */

static int in_pool(const ds_id_pool *p, int id) { return id >= p->first && id < p->first + p->n; }

ds_status ds_prefix_check(ds_prefix_cache *c, int32_t *page_holds, int32_t *ckpt_holds, ds_err *e) {
    uint64_t mark = ++c->checks;
    node *root = &c->root;
    if (root->page != -1 || root->ckpt != -1)
        return ds_fail(e, DS_ECORRUPT, "prefix cache T5: the root names page %d, checkpoint %d", root->page, root->ckpt);
    int reached = 0, ckpts = 0;
    /* depth first without a stack: down to the first child, else on to the next sibling,
     * else back up; bounded, so that a corrupted link cannot loop forever */
    node *nd = root->child, *parent = root;
    while (nd) {
        if (reached++ > c->max_nodes)
            return ds_fail(e, DS_ECORRUPT, "prefix cache T1: more nodes reached than the %d that exist", c->max_nodes);
        int idx = (int)(nd - c->nodes);
        if (idx < 0 || idx >= c->max_nodes)
            return ds_fail(e, DS_ECORRUPT, "prefix cache T1: a child link points outside the node storage");
        if (!nd->in_use) return ds_fail(e, DS_ECORRUPT, "prefix cache T1: node %d is reached but not in use", idx);
        if (nd->seen == mark) return ds_fail(e, DS_ECORRUPT, "prefix cache T1: node %d is reached twice", idx);
        if (nd->parent != parent)
            return ds_fail(e, DS_ECORRUPT, "prefix cache T1: node %d is in the child list of a node it does not "
                                           "name as its parent", idx);
        nd->seen = mark;
        if (!in_pool(c->pages, nd->page))
            return ds_fail(e, DS_ECORRUPT, "prefix cache T3: node %d names page %d, outside the pool", idx, nd->page);
        if (++page_holds[nd->page - c->pages->first] > 1)
            return ds_fail(e, DS_ECORRUPT, "prefix cache T3: page %d is named by two nodes", nd->page);
        if (nd->ckpt >= 0) {
            if (!c->need_ckpt)
                return ds_fail(e, DS_ECORRUPT, "prefix cache T4: node %d holds checkpoint %d, but the model has "
                                               "no DeltaNet state", idx, nd->ckpt);
            if (!in_pool(c->ckpts, nd->ckpt))
                return ds_fail(e, DS_ECORRUPT, "prefix cache T4: node %d holds checkpoint %d, outside the pool", idx,
                               nd->ckpt);
            if (++ckpt_holds[nd->ckpt - c->ckpts->first] > 1)
                return ds_fail(e, DS_ECORRUPT, "prefix cache T4: checkpoint %d belongs to two nodes", nd->ckpt);
            ckpts++;
        }
        if (nd->child) {
            parent = nd;
            nd = nd->child;
            continue;
        }
        while (nd && !nd->sibling) {
            nd = nd->parent == root ? NULL : nd->parent;
            if (nd) parent = nd->parent;
        }
        if (nd) nd = nd->sibling;
    }
    int in_use = 0;
    for (int i = 0; i < c->max_nodes; i++) {
        in_use += c->nodes[i].in_use;
        if (c->nodes[i].in_use && c->nodes[i].seen != mark)
            return ds_fail(e, DS_ECORRUPT, "prefix cache T1: node %d is in use but not reached from the root", i);
    }
    if (in_use != reached || reached != c->st.nodes || in_use + c->n_free != c->max_nodes)
        return ds_fail(e, DS_ECORRUPT, "prefix cache T2: %d nodes reached, %d in use, %d counted, %d free of %d",
                       reached, in_use, c->st.nodes, c->n_free, c->max_nodes);
    for (int i = 0; i < c->n_free; i++) {
        int idx = c->free_nodes[i];
        if (idx < 0 || idx >= c->max_nodes || c->nodes[idx].in_use)
            return ds_fail(e, DS_ECORRUPT, "prefix cache T2: the free list holds node %d, which is in use", idx);
        if (c->nodes[idx].seen == (mark | FREE_MARK))
            return ds_fail(e, DS_ECORRUPT, "prefix cache T2: the free list holds node %d twice", idx);
        c->nodes[idx].seen = mark | FREE_MARK;
    }
    if (ckpts != c->st.checkpoints)
        return ds_fail(e, DS_ECORRUPT, "prefix cache T4: %d checkpoints in the trie, %d counted", ckpts,
                       c->st.checkpoints);
    return DS_OK;
}
