/* grammar_cache.c - see grammar_cache.h.
 *
 * A list in use order (most recent first) searched linearly with a hash
 * compared first: the budget keeps it to a few hundred grammars at most, and
 * a lookup is nothing beside the parse it saves. Sizes are taken again at
 * every put, as a grammar's mask caches grow while requests use it. */
#include "server/grammar_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    struct entry *prev, *next;
    uint64_t hash;
    char *key;
    size_t key_len;
    ds_grammar *g;
} entry;

struct ds_grammar_cache {
    pthread_mutex_t mu;
    size_t budget;
    entry *head, *tail;
    size_t entries;
    uint64_t hits, misses;
};

static uint64_t hash_of(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

ds_status ds_grammar_cache_new(size_t budget, ds_grammar_cache **out, ds_err *e) {
    ds_grammar_cache *c = calloc(1, sizeof *c);
    if (!c) return ds_fail(e, DS_ENOMEM, "out of memory for the grammar cache");
    pthread_mutex_init(&c->mu, NULL);
    c->budget = budget;
    *out = c;
    return DS_OK;
}

static void unlink_entry(ds_grammar_cache *c, entry *x) {
    if (x->prev) x->prev->next = x->next;
    else c->head = x->next;
    if (x->next) x->next->prev = x->prev;
    else c->tail = x->prev;
    x->prev = x->next = NULL;
}

static void push_front(ds_grammar_cache *c, entry *x) {
    x->next = c->head;
    x->prev = NULL;
    if (c->head) c->head->prev = x;
    c->head = x;
    if (!c->tail) c->tail = x;
}

static void drop(entry *x) {
    ds_grammar_unref(x->g);
    free(x->key);
    free(x);
}

void ds_grammar_cache_free(ds_grammar_cache *c) {
    if (!c) return;
    for (entry *x = c->head, *nx; x; x = nx) {
        nx = x->next;
        drop(x);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static entry *find(ds_grammar_cache *c, uint64_t h, const char *key, size_t n) {
    for (entry *x = c->head; x; x = x->next)
        if (x->hash == h && x->key_len == n && !memcmp(x->key, key, n)) return x;
    return NULL;
}

ds_grammar *ds_grammar_cache_get(ds_grammar_cache *c, const char *key, size_t n) {
    uint64_t h = hash_of(key, n);
    pthread_mutex_lock(&c->mu);
    entry *x = find(c, h, key, n);
    ds_grammar *g = NULL;
    if (x) {
        unlink_entry(c, x);
        push_front(c, x);
        g = x->g;
        ds_grammar_ref(g);
        c->hits++;
    } else {
        c->misses++;
    }
    pthread_mutex_unlock(&c->mu);
    return g;
}

static size_t entry_bytes(const entry *x) { return sizeof *x + x->key_len + ds_grammar_bytes(x->g); }

static size_t total_bytes(const ds_grammar_cache *c) {
    size_t t = 0;
    for (const entry *x = c->head; x; x = x->next) t += entry_bytes(x);
    return t;
}

void ds_grammar_cache_put(ds_grammar_cache *c, const char *key, size_t n, ds_grammar *g) {
    entry *x = calloc(1, sizeof *x);
    char *k = malloc(n ? n : 1);
    if (!x || !k) {   /* not kept: the next request parses again */
        free(x);
        free(k);
        return;
    }
    memcpy(k, key, n);
    *x = (entry){.hash = hash_of(key, n), .key = k, .key_len = n, .g = g};
    size_t need = entry_bytes(x);
    if (need > c->budget) {
        free(k);
        free(x);
        return;
    }
    ds_grammar_ref(g);
    pthread_mutex_lock(&c->mu);
    entry *old = find(c, x->hash, key, n);   /* two requests parsed the same grammar: keep the first */
    if (old) {
        pthread_mutex_unlock(&c->mu);
        drop(x);
        return;
    }
    size_t total = total_bytes(c);
    while (c->tail && total + need > c->budget) {
        entry *victim = c->tail;
        total -= entry_bytes(victim);
        unlink_entry(c, victim);
        c->entries--;
        drop(victim);
    }
    push_front(c, x);
    c->entries++;
    pthread_mutex_unlock(&c->mu);
}

void ds_grammar_cache_stats_get(ds_grammar_cache *c, ds_grammar_cache_stats *out) {
    pthread_mutex_lock(&c->mu);
    out->hits = c->hits;
    out->misses = c->misses;
    out->entries = c->entries;
    out->bytes = total_bytes(c);
    pthread_mutex_unlock(&c->mu);
}
