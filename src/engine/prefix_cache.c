/* prefix_cache.c - the page trie with DeltaNet checkpoints (see the design
 * notes in prefix_cache.h). */
#include "engine/prefix_cache.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

typedef struct node {
    int32_t *tokens;            /* [page_size] */
    int page;                   /* KV page (the trie holds one reference) */
    int ckpt;                   /* checkpoint slot after this node's last token, or -1 */
    struct node *parent, *child, *sibling;
    uint64_t last_use;
    int in_use;
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
