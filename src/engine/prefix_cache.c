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
 *       first match and new_node is only called when there is none).
 * With KV events (bp = pages per block):
 *   A1. A node's depth is its parent's + 1; a block end (depth a multiple of
 *       bp) names as bparent its ancestor bp levels up (the root at bp).
 *   A2. A checkpoint sits only at a block end.
 *   A3. An announced node is a block end, holds a checkpoint (when the model
 *       needs them), has an announced bparent (or the root), its block
 *       touches no more images than kept; none is announced while a resync
 *       is due; st.announced counts them.
 *   A4. A block that could be announced (A3 but for the flag) is, unless a
 *       flush is due (pending or resync). */
#include "engine/prefix_cache.h"

#include <assert.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct node {
    int32_t *tokens;            /* [page_size] */
    int page;                   /* KV page (the trie holds one reference) */
    int ckpt;                   /* checkpoint slot after this node's last token, or -1 */
    struct node *parent, *child, *sibling;
    uint64_t last_use;
    int in_use;
    uint64_t seen;              /* the check that last reached it (ds_prefix_check) */
    /* KV events */
    int depth;                  /* pages from the root */
    struct node *bparent;       /* a block end: the end of the block before (the root for the first) */
    int announced;              /* a block end whose BlockStored went out and still stands */
    int blk_over;               /* a block end: a page of its block touches more images than kept */
    int n_img, img_cont;        /* images touching this page (at most DS_PREFIX_PAGE_IMAGES, else img_over);
                                 * img_cont: the first began on an earlier page */
    int img_over;
    uint64_t hash;              /* a block end: our block hash */
    int32_t *real;              /* [page_size] the real token ids */
    uint8_t (*img)[DS_KV_HASH_BYTES]; /* [DS_PREFIX_PAGE_IMAGES] */
    uint64_t mark;              /* eviction: the pass that found an announced block below it */
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
    /* KV events (NULL q: off) */
    ds_kv_event_queue *q;
    int bp;                     /* pages per block */
    int resync;                 /* the router's picture is wrong: AllBlocksCleared is due */
    int pending;                /* a BlockStored waits for room */
    uint64_t marks;
    int32_t *real_store;        /* [max_nodes][page_size] */
    uint8_t (*img_store)[DS_KV_HASH_BYTES]; /* [max_nodes][DS_PREFIX_PAGE_IMAGES] */
    const struct node **blk_pages; /* [bp] a block's nodes, first to last */
    int32_t *blk_tokens;        /* [bp * page_size] an event's tokens */
    uint8_t (*blk_extra)[DS_KV_HASH_BYTES]; /* [bp * DS_PREFIX_PAGE_IMAGES] an event's image hashes */
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
    free(c->real_store);
    free(c->img_store);
    free(c->blk_pages);
    free(c->blk_tokens);
    free(c->blk_extra);
    free(c);
}

/* --- KV events --- */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int is_block_end(const ds_prefix_cache *c, const node *nd) {
    return c->q && nd->depth > 0 && nd->depth % c->bp == 0;
}

/* Whether the block ending at nd may be announced, its own flag aside. */
static int announceable(const ds_prefix_cache *c, const node *nd) {
    return is_block_end(c, nd) && !nd->blk_over && (!c->need_ckpt || nd->ckpt >= 0) &&
           (nd->bparent == &c->root || nd->bparent->announced);
}

/* The nodes of the block ending at nd into c->blk_pages; returns the block end before it. */
static node *block_pages(ds_prefix_cache *c, node *nd) {
    for (int i = c->bp - 1; i >= 0; i--, nd = nd->parent) c->blk_pages[i] = nd;
    return nd;
}

/* The block ending at nd: its real tokens and its images' hashes, in order. */
static int gather_block(ds_prefix_cache *c, node *nd) {
    const node **pages = c->blk_pages;
    int bp = c->bp;
    block_pages(c, nd);
    int n_extra = 0;
    for (int i = 0; i < bp; i++) {
        memcpy(c->blk_tokens + (size_t)i * c->page_size, pages[i]->real, (size_t)c->page_size * sizeof(int32_t));
        /* an image running on from the page before is already listed */
        for (int k = i > 0 && pages[i]->img_cont ? 1 : 0; k < pages[i]->n_img; k++)
            memcpy(c->blk_extra[n_extra++], pages[i]->img[k], DS_KV_HASH_BYTES);
    }
    return n_extra;
}

/* Announces the block ending at nd when the queue has room; 0 when not. */
static int push_stored(ds_prefix_cache *c, node *nd) {
    if (c->resync) return 0;
    int n_extra = gather_block(c, nd);
    int n_tokens = c->bp * c->page_size;
    if (!ds_kv_event_fits(c->q, n_tokens, n_extra)) {
        c->pending = 1;
        return 0;
    }
    ds_kv_event ev = {.type = DS_KV_BLOCK_STORED, .time = now_seconds(), .hash = nd->hash,
                      .has_parent = nd->bparent != &c->root,
                      .parent_hash = nd->bparent != &c->root ? nd->bparent->hash : 0, .n_tokens = n_tokens,
                      .tokens = c->blk_tokens, .n_extra = n_extra, .extra = (const uint8_t (*)[DS_KV_HASH_BYTES])c->blk_extra};
    if (!ds_kv_event_push(c->q, &ev)) {
        c->pending = 1;
        return 0;
    }
    return 1;
}

/* Preorder within top's subtree; descend 0 skips nd's children. */
static node *next_in(node *nd, node *top, int descend) {
    if (descend && nd->child) return nd->child;
    for (; nd != top; nd = nd->parent)
        if (nd->sibling) return nd->sibling;
    return NULL;
}

/* Announces, parents first, every block in top's subtree that may be. */
static void announce_under(ds_prefix_cache *c, node *top) {
    for (node *nd = top; nd;) {
        int descend = 1;
        if (is_block_end(c, nd) && !nd->announced) {
            descend = announceable(c, nd) && push_stored(c, nd);
            if (descend) {
                nd->announced = 1;
                c->st.announced++;
            }
        }
        nd = next_in(nd, top, descend);
    }
}

/* The router's picture is wrong: nothing counts as announced until a flush
 * has sent AllBlocksCleared and announced everything again. */
static void lose_picture(ds_prefix_cache *c) {
    c->resync = 1;
    for (int i = 0; i < c->max_nodes; i++) c->nodes[i].announced = 0;
    c->st.announced = 0;
}

/* Withdraws the block ending at nd (its checkpoint or a page goes) and every announced block below it. */
static void withdraw(ds_prefix_cache *c, node *nd) {
    if (!c->q || !nd->announced) return;
    for (node *d = nd; d;) {
        if (d->announced) {
            d->announced = 0;
            c->st.announced--;
            ds_kv_event ev = {.type = DS_KV_BLOCK_REMOVED, .time = now_seconds(), .hash = d->hash};
            if (!c->resync && !ds_kv_event_push(c->q, &ev)) {
                lose_picture(c);
                return;
            }
        }
        d = next_in(d, nd, 1);
    }
}

int ds_prefix_events_on(ds_prefix_cache *c, ds_kv_event_queue *q, int block_size) {
    int ps = c->page_size;
    if (block_size < ps || block_size % ps) return -1;
    c->bp = block_size / ps;
    c->blk_pages = malloc((size_t)c->bp * sizeof *c->blk_pages);
    c->real_store = malloc((size_t)c->max_nodes * (size_t)ps * sizeof *c->real_store);
    c->img_store = malloc((size_t)c->max_nodes * DS_PREFIX_PAGE_IMAGES * sizeof *c->img_store);
    c->blk_tokens = malloc((size_t)block_size * sizeof *c->blk_tokens);
    c->blk_extra = malloc((size_t)c->bp * DS_PREFIX_PAGE_IMAGES * sizeof *c->blk_extra);
    if (!c->blk_pages || !c->real_store || !c->img_store || !c->blk_tokens || !c->blk_extra) return -1;
    for (int i = 0; i < c->max_nodes; i++) {
        c->nodes[i].real = c->real_store + (size_t)i * ps;
        c->nodes[i].img = c->img_store + (size_t)i * DS_PREFIX_PAGE_IMAGES;
    }
    c->q = q;
    c->resync = 1; /* AllBlocksCleared is the first event */
    ds_prefix_events_flush(c);
    return 0;
}

void ds_prefix_events_flush(ds_prefix_cache *c) {
    if (!c->q || (!c->resync && !c->pending)) return;
    if (c->resync) {
        ds_kv_event ev = {.type = DS_KV_ALL_CLEARED, .time = now_seconds()};
        if (!ds_kv_event_fits(c->q, 0, 0) || !ds_kv_event_push(c->q, &ev)) return;
        c->resync = 0;
    }
    c->pending = 0;
    announce_under(c, &c->root);
}

int ds_prefix_events_pending(const ds_prefix_cache *c) { return c->q && (c->resync || c->pending); }

/* A new node's event data: its real tokens, the images touching it, and at a block end the block's hash. */
static void describe_node(ds_prefix_cache *c, node *nd, int d, const int32_t *keys, const ds_prefix_origin *o) {
    int ps = c->page_size, start = d * ps, end = start + ps;
    nd->n_img = nd->img_cont = 0;
    nd->img_over = !o;
    if (o) {
        memcpy(nd->real, o->tokens + start, (size_t)ps * sizeof *nd->real);
        for (int k = 0; k < o->n_images; k++) {
            const ds_prefix_image *im = &o->images[k];
            if (im->first >= end || im->first + im->n <= start) continue;
            if (nd->n_img == DS_PREFIX_PAGE_IMAGES) {
                nd->img_over = 1;
                break;
            }
            if (nd->n_img == 0) nd->img_cont = im->first < start;
            memcpy(nd->img[nd->n_img++], im->hash, DS_KV_HASH_BYTES);
        }
    } else {
        memcpy(nd->real, keys, (size_t)ps * sizeof *nd->real);
    }
    nd->bparent = NULL;
    nd->blk_over = 0;
    nd->hash = 0;
    if (nd->depth % c->bp) return;
    /* our hash: SHA-256 over the previous block's hash and this block's cache keys (which carry image identity) */
    node *up = block_pages(c, nd);
    const node **pages = c->blk_pages;
    for (int i = 0; i < c->bp; i++) nd->blk_over |= pages[i]->img_over;
    nd->bparent = up;
    struct sha256_ctx h;
    sha256_init(&h);
    if (up != &c->root) {
        uint8_t ph[8];
        for (int i = 0; i < 8; i++) ph[i] = (uint8_t)(up->hash >> (8 * i));
        sha256_update(&h, sizeof ph, ph);
    }
    for (int i = 0; i < c->bp; i++)
        for (int t = 0; t < ps; t++) {
            uint32_t k = (uint32_t)pages[i]->tokens[t];
            uint8_t b[4] = {(uint8_t)k, (uint8_t)(k >> 8), (uint8_t)(k >> 16), (uint8_t)(k >> 24)};
            sha256_update(&h, sizeof b, b);
        }
    uint8_t dig[SHA256_DIGEST_SIZE];
    sha256_digest(&h, sizeof dig, dig);
    for (int i = 0; i < 8; i++) nd->hash |= (uint64_t)dig[i] << (8 * i);
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
        if (c->q ? ch->announced : !c->need_ckpt || ch->ckpt >= 0) usable = depth;
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

static node *new_node(ds_prefix_cache *c, node *parent, const int32_t *tokens, int page, int d,
                      const ds_prefix_origin *o) {
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
    nd->announced = 0;
    nd->depth = parent->depth + 1;
    if (c->q) describe_node(c, nd, d, tokens, o);
    c->st.nodes++;
    return nd;
}

void ds_prefix_insert(ds_prefix_cache *c, const int32_t *tokens, int n_pages, const int32_t *pages, int ckpt,
                      int ckpt_pos, const ds_prefix_origin *origin) {
    node *cur = &c->root, *first_new = NULL; /* the first block end on the path not announced */
    c->tick++;
    int ckpt_depth = ckpt >= 0 ? ckpt_pos / c->page_size : -1;
    for (int d = 0; d < n_pages; d++) {
        const int32_t *t = tokens + (size_t)d * c->page_size;
        node *ch = find_child(c, cur, t);
        if (!ch) ch = new_node(c, cur, t, pages[d], d, origin);
        if (!ch) break; /* out of nodes: the rest is simply not cached */
        if (c->q && d + 1 == ckpt_depth && ckpt >= 0 && ckpt_depth % c->bp) {
            ds_id_unref(c->ckpts, ckpt); /* with KV events checkpoints sit only at block ends */
            ckpt = -1;
        }
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
        if (!first_new && is_block_end(c, ch) && !ch->announced) first_new = ch;
        cur = ch;
    }
    if (ckpt >= 0) ds_id_unref(c->ckpts, ckpt); /* its node could not be made */
    /* a block newly resumable makes those below it announceable too */
    if (first_new && announceable(c, first_new)) announce_under(c, first_new);
}

static void drop_ckpt(ds_prefix_cache *c, node *nd) {
    if (nd->ckpt < 0) return;
    withdraw(c, nd);
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
        /* with KV events an unannounced leaf goes first: it withdraws nothing */
        if (!best || (c->q && nd->announced != best->announced ? !nd->announced : nd->last_use < best->last_use))
            best = nd;
    }
    if (!best) return 0;
    drop_ckpt(c, best);
    withdraw(c, best);
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

/* With KV events, which checkpoints to drop first: 0 for one no announced
 * block uses (no lookup can resume from it until the blocks above it are
 * computed again, so it holds memory for little), 1 for the end of an
 * announced chain (it withdraws one block), 2 for one with announced blocks
 * below it (it withdraws them all). */
static int ckpt_rank(const ds_prefix_cache *c, const node *nd) {
    if (!c->q) return 0;
    return !nd->announced ? 0 : nd->mark == c->marks ? 2 : 1;
}

int ds_prefix_evict_checkpoint(ds_prefix_cache *c) {
    node *best = NULL;
    if (c->q) { /* mark every block that has an announced block right below it */
        c->marks++;
        for (int i = 0; i < c->max_nodes; i++)
            if (c->nodes[i].in_use && c->nodes[i].announced) c->nodes[i].bparent->mark = c->marks;
    }
    int best_rank = 3;
    for (int i = 0; i < c->max_nodes; i++) {
        node *nd = &c->nodes[i];
        if (!nd->in_use || nd->ckpt < 0) continue;
        int rank = ckpt_rank(c, nd);
        if (!best || rank < best_rank || (rank == best_rank && nd->last_use < best->last_use)) {
            best = nd;
            best_rank = rank;
        }
    }
    if (!best) return 0;
    drop_ckpt(c, best);
    return 1;
}

void ds_prefix_stats_get(const ds_prefix_cache *c, ds_prefix_stats *s) { *s = c->st; }

#define FREE_MARK ((uint64_t)1 << 63) /* in `seen`: reached on the free list */

static int in_pool(const ds_id_pool *p, int id) { return id >= p->first && id < p->first + p->n; }

/* A1-A4 (the trie's shape checked). */
static ds_status check_announced(ds_prefix_cache *c, ds_err *e) {
    int announced = 0;
    for (int i = 0; i < c->max_nodes; i++) {
        const node *nd = &c->nodes[i];
        if (!nd->in_use) continue;
        if (nd->depth != nd->parent->depth + 1)
            return ds_fail(e, DS_ECORRUPT, "prefix cache A1: node %d has depth %d under a parent of depth %d", i,
                           nd->depth, nd->parent->depth);
        if (!c->q) {
            if (nd->announced) return ds_fail(e, DS_ECORRUPT, "prefix cache A3: node %d is announced without KV "
                                                              "events", i);
            continue;
        }
        if (is_block_end(c, nd)) {
            const node *up = nd;
            for (int k = 0; k < c->bp; k++) up = up->parent;
            if (nd->bparent != up)
                return ds_fail(e, DS_ECORRUPT, "prefix cache A1: block end %d (depth %d) does not name the block "
                                               "end %d levels up", i, nd->depth, c->bp);
        } else if (nd->ckpt >= 0) {
            return ds_fail(e, DS_ECORRUPT, "prefix cache A2: node %d at depth %d holds a checkpoint inside a block "
                                           "of %d pages", i, nd->depth, c->bp);
        }
        if (nd->announced) {
            announced++;
            if (!announceable(c, nd))
                return ds_fail(e, DS_ECORRUPT, "prefix cache A3: node %d (depth %d) is announced, but %s", i,
                               nd->depth, !is_block_end(c, nd) ? "it ends no block"
                                          : nd->blk_over ? "its block touches more images than are kept"
                                          : c->need_ckpt && nd->ckpt < 0 ? "it holds no checkpoint"
                                                                         : "the block before it is not announced");
            if (c->resync)
                return ds_fail(e, DS_ECORRUPT, "prefix cache A3: node %d is announced while AllBlocksCleared is due",
                               i);
        } else if (announceable(c, nd) && !c->pending && !c->resync) {
            return ds_fail(e, DS_ECORRUPT, "prefix cache A4: the block ending at node %d (depth %d) can be resumed "
                                           "from but is not announced, and no flush is due", i, nd->depth);
        }
    }
    if (announced != c->st.announced)
        return ds_fail(e, DS_ECORRUPT, "prefix cache A3: %d blocks announced, %d counted", announced,
                       c->st.announced);
    return DS_OK;
}

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
    return check_announced(c, e);
}
