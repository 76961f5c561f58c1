/* tokenizer.c - byte-level BPE as Hugging Face's tokenizers runs it (see
 * tokenizer.h for the pipeline). Everything the encoder looks up at run time
 * is in id space: a byte -> id table for the initial symbols and a hash of
 * (left id, right id) -> (rank, merged id); strings are only used at load. */
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#include "loading/gguf.h"
#include "loading/model_file.h"
#include "tokenizer/normalize.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/utf8.h"

typedef struct {
    uint64_t key; /* left << 32 | right; EMPTY_KEY when free */
    int32_t rank;
    int32_t id;
} merge_slot;
#define EMPTY_KEY UINT64_MAX

/* A byte trie of the added tokens, children as sibling lists. */
typedef struct {
    int32_t child, sibling;
    int32_t id; /* token that ends here, or -1 */
    uint8_t byte;
} trie_node;

struct ds_tokenizer {
    ds_vocab v;
    ds_pretok *pretok;
    int32_t byte_id[256];   /* the BPE symbol of each byte */
    int32_t *names;         /* open addressing: piece string -> id (-1 free) */
    size_t names_mask;
    merge_slot *merges;
    size_t merges_mask;
    size_t *bytes_off;      /* [n_tokens + 1]: the bytes of token i are bytes[off[i] .. off[i+1]) */
    char *bytes;
    size_t max_bytes;
    trie_node *trie;        /* [0] is the root */
    int n_trie, cap_trie;
    uint8_t may_start[256]; /* 1 when an added token begins with this byte */
};

/* --- GPT-2's byte-to-unicode alphabet --- */

static int byte_printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

/* Printable bytes stand for themselves; the others are moved to U+0100 and up. */
static void byte_alphabet(int cp_of_byte[256], int byte_of_cp[324]) {
    for (int i = 0; i < 324; i++) byte_of_cp[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        cp_of_byte[b] = byte_printable(b) ? b : 256 + n++;
        byte_of_cp[cp_of_byte[b]] = b;
    }
}

/* --- hashing --- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* murmur3's finalizer: both ids must reach the low bits the table uses */
static size_t hash_pair(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ull;
    key ^= key >> 33;
    return (size_t)key;
}

static size_t table_size(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    return cap;
}

static int32_t find_name(const ds_tokenizer *t, const char *s, size_t n) {
    for (size_t i = hash_bytes(s, n) & t->names_mask;; i = (i + 1) & t->names_mask) {
        int32_t id = t->names[i];
        if (id < 0) return -1;
        const char *p = t->v.tokens[id];
        if (strncmp(p, s, n) == 0 && p[n] == '\0') return id;
    }
}

static const merge_slot *find_merge(const ds_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = hash_pair(key) & t->merges_mask;; i = (i + 1) & t->merges_mask) {
        const merge_slot *m = &t->merges[i];
        if (m->key == key) return m;
        if (m->key == EMPTY_KEY) return NULL;
    }
}

static int is_added(int32_t type) { return type == DS_TOKEN_CONTROL || type == DS_TOKEN_USER_DEFINED; }

/* --- building --- */

static ds_status build_names(ds_tokenizer *t, ds_err *e) {
    t->names_mask = table_size((size_t)t->v.n_tokens) - 1;
    t->names = malloc((t->names_mask + 1) * sizeof *t->names);
    if (!t->names) return ds_fail(e, DS_ENOMEM, "out of memory for a vocabulary of %d tokens", t->v.n_tokens);
    memset(t->names, 0xff, (t->names_mask + 1) * sizeof *t->names);
    for (int32_t id = 0; id < t->v.n_tokens; id++) {
        if (t->v.types[id] == DS_TOKEN_UNUSED) continue;
        const char *s = t->v.tokens[id];
        size_t i = hash_bytes(s, strlen(s)) & t->names_mask;
        while (t->names[i] >= 0 && strcmp(t->v.tokens[t->names[i]], s) != 0) i = (i + 1) & t->names_mask;
        if (t->names[i] < 0) t->names[i] = id; /* a repeated string keeps its first id */
    }
    return DS_OK;
}

static ds_status build_bytes(ds_tokenizer *t, ds_err *e) {
    int cp_of_byte[256], byte_of_cp[324];
    byte_alphabet(cp_of_byte, byte_of_cp);
    size_t total = 0;
    for (int i = 0; i < t->v.n_tokens; i++) total += strlen(t->v.tokens[i]);
    t->bytes_off = malloc(((size_t)t->v.n_tokens + 1) * sizeof *t->bytes_off);
    t->bytes = malloc(total + 1);
    if (!t->bytes_off || !t->bytes) return ds_fail(e, DS_ENOMEM, "out of memory for token bytes");
    size_t o = 0;
    for (int32_t id = 0; id < t->v.n_tokens; id++) {
        t->bytes_off[id] = o;
        const char *s = t->v.tokens[id];
        int32_t type = t->v.types[id];
        if (type == DS_TOKEN_UNUSED) continue;
        if (is_added(type)) { /* added tokens are their own text */
            size_t n = strlen(s);
            memcpy(t->bytes + o, s, n);
            o += n;
        } else {
            size_t n = strlen(s);
            for (size_t i = 0; i < n;) {
                utf8proc_int32_t cp;
                utf8proc_ssize_t len = utf8proc_iterate((const uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
                if (len > 0 && cp < 324 && byte_of_cp[cp] >= 0) {
                    t->bytes[o++] = (char)byte_of_cp[cp];
                    i += (size_t)len;
                } else { /* outside the byte alphabet: Hugging Face's decoder keeps such text as it is */
                    size_t k = len > 0 ? (size_t)len : 1;
                    memcpy(t->bytes + o, s + i, k);
                    o += k;
                    i += k;
                }
            }
        }
        if (o - t->bytes_off[id] > t->max_bytes) t->max_bytes = o - t->bytes_off[id];
    }
    t->bytes_off[t->v.n_tokens] = o;
    t->bytes[o] = '\0';
    for (int b = 0; b < 256; b++) {
        char buf[3];
        size_t n = cp_of_byte[b] < 0x80 ? 1 : 2;
        if (n == 1) buf[0] = (char)cp_of_byte[b];
        else {
            buf[0] = (char)(0xC0 | (cp_of_byte[b] >> 6));
            buf[1] = (char)(0x80 | (cp_of_byte[b] & 0x3F));
        }
        buf[n] = '\0';
        t->byte_id[b] = find_name(t, buf, n);
        if (t->byte_id[b] < 0 || t->v.types[t->byte_id[b]] != DS_TOKEN_NORMAL)
            return ds_fail(e, DS_EUNSUPPORTED, "not a byte-level BPE vocabulary: byte 0x%02x ('%s') has no token", b, buf);
    }
    return DS_OK;
}

static ds_status build_merges(ds_tokenizer *t, ds_err *e) {
    t->merges_mask = table_size((size_t)t->v.n_merges) - 1;
    t->merges = malloc((t->merges_mask + 1) * sizeof *t->merges);
    if (!t->merges) return ds_fail(e, DS_ENOMEM, "out of memory for %d merges", t->v.n_merges);
    for (size_t i = 0; i <= t->merges_mask; i++) t->merges[i].key = EMPTY_KEY;
    char *joined = NULL;
    size_t joined_cap = 0;
    for (int r = 0; r < t->v.n_merges; r++) {
        const char *m = t->v.merges[r];
        size_t n = strlen(m);
        int32_t a = -1, b = -1;
        /* byte-level tokens never hold a space, so the first space that splits
         * the rule into two tokens is the separator */
        for (const char *sp = strchr(m, ' '); sp && (a < 0 || b < 0); sp = strchr(sp + 1, ' ')) {
            a = find_name(t, m, (size_t)(sp - m));
            b = find_name(t, sp + 1, n - (size_t)(sp - m) - 1);
            if (a >= 0 && b >= 0) {
                if (joined_cap < n) {
                    free(joined);
                    joined_cap = n * 2;
                    if (!(joined = malloc(joined_cap))) return ds_fail(e, DS_ENOMEM, "out of memory");
                }
                size_t la = (size_t)(sp - m);
                memcpy(joined, m, la);
                memcpy(joined + la, sp + 1, n - la - 1);
                int32_t id = find_name(t, joined, n - 1);
                if (id < 0) {
                    free(joined);
                    return ds_fail(e, DS_ECORRUPT, "merge %d '%.80s' makes a token the vocabulary does not have", r, m);
                }
                uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
                size_t i = hash_pair(key) & t->merges_mask;
                while (t->merges[i].key != EMPTY_KEY && t->merges[i].key != key) i = (i + 1) & t->merges_mask;
                /* a repeated rule takes its last rank, as Hugging Face's map does */
                t->merges[i] = (merge_slot){key, r, id};
            }
        }
        if (a < 0 || b < 0) {
            free(joined);
            return ds_fail(e, DS_ECORRUPT, "merge %d '%.80s' is not two tokens of the vocabulary separated by a space", r, m);
        }
    }
    free(joined);
    return DS_OK;
}

static ds_status trie_add(ds_tokenizer *t, const char *s, int32_t id, ds_err *e) {
    int32_t node = 0;
    for (; *s; s++) {
        int32_t c = t->trie[node].child;
        while (c >= 0 && t->trie[c].byte != (uint8_t)*s) c = t->trie[c].sibling;
        if (c < 0) {
            if (t->n_trie == t->cap_trie) {
                int cap = t->cap_trie ? t->cap_trie * 2 : 256;
                trie_node *nt = realloc(t->trie, (size_t)cap * sizeof *nt);
                if (!nt) return ds_fail(e, DS_ENOMEM, "out of memory for added tokens");
                t->trie = nt;
                t->cap_trie = cap;
            }
            c = t->n_trie++;
            t->trie[c] = (trie_node){.child = -1, .sibling = t->trie[node].child, .id = -1, .byte = (uint8_t)*s};
            t->trie[node].child = c;
        }
        node = c;
    }
    if (t->trie[node].id < 0) t->trie[node].id = id;
    return DS_OK;
}

static ds_status build_trie(ds_tokenizer *t, ds_err *e) {
    if (!(t->trie = malloc(256 * sizeof *t->trie))) return ds_fail(e, DS_ENOMEM, "out of memory for added tokens");
    t->cap_trie = 256;
    t->n_trie = 1;
    t->trie[0] = (trie_node){.child = -1, .sibling = -1, .id = -1};
    for (int32_t id = 0; id < t->v.n_tokens; id++) {
        const char *s = t->v.tokens[id];
        size_t n = strlen(s);
        /* text is well-formed by the time it is matched, so other tokens could never match */
        if (!is_added(t->v.types[id]) || n == 0 || ds_utf8_valid_prefix((const uint8_t *)s, n) != n) continue;
        ds_status st = trie_add(t, s, id, e);
        if (st) return st;
        t->may_start[(uint8_t)s[0]] = 1;
    }
    return DS_OK;
}

void ds_tokenizer_free(ds_tokenizer *t) {
    if (!t) return;
    ds_vocab_free(&t->v);
    ds_pretok_free(t->pretok);
    free(t->names);
    free(t->merges);
    free(t->bytes_off);
    free(t->bytes);
    free(t->trie);
    free(t);
}

ds_status ds_tokenizer_from_vocab(ds_vocab *v, ds_tokenizer **out, ds_err *e) {
    *out = NULL;
    ds_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        ds_vocab_free(v);
        return ds_fail(e, DS_ENOMEM, "out of memory");
    }
    t->v = *v;
    memset(v, 0, sizeof *v);
    ds_status s = ds_pretok_new(ds_vocab_pretok_regex(&t->v), &t->pretok, e);
    if (!s) s = build_names(t, e);
    if (!s) s = build_bytes(t, e);
    if (!s) s = build_merges(t, e);
    if (!s) s = build_trie(t, e);
    if (s) {
        ds_tokenizer_free(t);
        return s;
    }
    *out = t;
    return DS_OK;
}

static ds_status from_json(const char *path, ds_tokenizer **out, ds_err *e) {
    ds_vocab v;
    ds_status s = ds_vocab_read_tokenizer_json(&v, path, e);
    if (s) return s;
    if ((s = ds_tokenizer_from_vocab(&v, out, e))) ds_err_prefix(e, "%s", path);
    return s;
}

static ds_status from_gguf(const ds_gguf *g, ds_tokenizer **out, ds_err *e) {
    ds_vocab v;
    ds_status s = ds_vocab_read_gguf(&v, g, e);
    if (s) return s;
    if ((s = ds_tokenizer_from_vocab(&v, out, e))) ds_err_prefix(e, "%s", g->path);
    return s;
}

ds_status ds_tokenizer_from_model(const ds_model_file *m, ds_tokenizer **out, ds_err *e) {
    *out = NULL;
    if (ds_model_format(m) == DS_FORMAT_GGUF) return from_gguf(ds_model_gguf(m), out, e);
    const char *json = ds_model_tokenizer_json(m);
    if (!json) return ds_fail(e, DS_ENOTFOUND, "%s: the model has no tokenizer.json", ds_model_path(m));
    return from_json(json, out, e);
}

ds_status ds_tokenizer_open(const char *path, ds_tokenizer **out, ds_err *e) {
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0) return ds_fail(e, DS_EIO, "%s: cannot open", path);
    size_t n = strlen(path);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (S_ISDIR(st.st_mode) || strcmp(base, "config.json") == 0) {
        size_t dir_len = S_ISDIR(st.st_mode) ? n : (size_t)(base - path);
        char *json = malloc(dir_len + 32);
        if (!json) return ds_fail(e, DS_ENOMEM, "out of memory");
        snprintf(json, dir_len + 32, "%.*s%stokenizer.json", (int)dir_len, path,
                 dir_len && path[dir_len - 1] != '/' ? "/" : "");
        ds_status s = stat(json, &st) == 0 ? from_json(json, out, e)
                                           : ds_fail(e, DS_ENOTFOUND, "%s: no tokenizer.json next to the model", path);
        free(json);
        return s;
    }
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    if (!f) return ds_fail(e, DS_EIO, "%s: cannot open", path);
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0) {
        ds_gguf g;
        ds_status s = ds_gguf_open(&g, path, e);
        if (s) return s;
        s = from_gguf(&g, out, e);
        ds_gguf_close(&g);
        return s;
    }
    return from_json(path, out, e);
}

/* --- lookups --- */

int ds_tokenizer_n_tokens(const ds_tokenizer *t) { return t->v.n_tokens; }
const ds_vocab *ds_tokenizer_vocab(const ds_tokenizer *t) { return &t->v; }
size_t ds_tokenizer_max_token_bytes(const ds_tokenizer *t) { return t->max_bytes; }

const char *ds_tokenizer_piece(const ds_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->v.n_tokens ? t->v.tokens[id] : NULL;
}

const char *ds_tokenizer_token_bytes(const ds_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->v.n_tokens) return NULL;
    *len = t->bytes_off[id + 1] - t->bytes_off[id];
    return t->bytes + t->bytes_off[id];
}

int ds_tokenizer_is_special(const ds_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->v.n_tokens && t->v.types[id] == DS_TOKEN_CONTROL;
}

int32_t ds_tokenizer_find(const ds_tokenizer *t, const char *piece) { return find_name(t, piece, strlen(piece)); }

/* --- encoding --- */

/* Heap entries order merges by rank, then by position (leftmost first). */
typedef struct {
    uint64_t key; /* rank << 32 | position of the left symbol */
    int32_t id;   /* what the merge makes: a stale entry no longer matches */
} bpe_entry;

typedef struct {
    const ds_tokenizer *t;
    ds_tokens *out;
    int32_t *sym, *prev, *next; /* the word as a linked list of symbols; sym -1 once merged away */
    bpe_entry *heap;
    size_t n_heap, cap;          /* cap: longest word the arrays hold */
} bpe_work;

static ds_status push_ids(ds_tokens *out, const int32_t *ids, size_t n, ds_err *e) {
    if (out->cap - out->n < n) {
        size_t cap = out->cap ? out->cap : 64;
        while (cap - out->n < n) {
            if (cap > SIZE_MAX / 2 / sizeof *out->ids) return ds_fail(e, DS_ENOMEM, "too many tokens");
            cap *= 2;
        }
        int32_t *ids2 = realloc(out->ids, cap * sizeof *ids2);
        if (!ids2) return ds_fail(e, DS_ENOMEM, "out of memory for %zu tokens", cap);
        out->ids = ids2;
        out->cap = cap;
    }
    memcpy(out->ids + out->n, ids, n * sizeof *ids);
    out->n += n;
    return DS_OK;
}

static void heap_push(bpe_work *w, uint64_t key, int32_t id) {
    size_t i = w->n_heap++;
    while (i > 0 && w->heap[(i - 1) / 2].key > key) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = (bpe_entry){key, id};
}

static bpe_entry heap_pop(bpe_work *w) {
    bpe_entry top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && w->heap[c + 1].key < w->heap[c].key) c++;
        if (w->heap[c].key >= last.key) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

static void try_pair(bpe_work *w, int32_t pos) {
    int32_t nx = w->next[pos];
    if (nx < 0) return;
    const merge_slot *m = find_merge(w->t, w->sym[pos], w->sym[nx]);
    if (m) heap_push(w, (uint64_t)(uint32_t)m->rank << 32 | (uint32_t)pos, m->id);
}

static ds_status grow_work(bpe_work *w, size_t n, ds_err *e) {
    if (n <= w->cap) return DS_OK;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < n) cap *= 2;
    if (cap > INT32_MAX) return ds_fail(e, DS_ENOMEM, "a pre-token of %zu bytes is too long", n);
    free(w->sym);
    free(w->prev);
    free(w->next);
    free(w->heap);
    w->sym = malloc(cap * sizeof *w->sym);
    w->prev = malloc(cap * sizeof *w->prev);
    w->next = malloc(cap * sizeof *w->next);
    /* each merge adds at most two entries to the n - 1 it starts with */
    w->heap = malloc(3 * cap * sizeof *w->heap);
    w->cap = w->sym && w->prev && w->next && w->heap ? cap : 0;
    return w->cap ? DS_OK : ds_fail(e, DS_ENOMEM, "out of memory for a pre-token of %zu bytes", n);
}

/* BPE as Hugging Face's Word::merge_all: the lowest-ranked pair anywhere in
 * the word merges first, the leftmost of equal pairs first; O(n log n). */
static ds_status bpe_piece(void *ctx, const char *piece, size_t n, ds_err *e) {
    bpe_work *w = ctx;
    const ds_tokenizer *t = w->t;
    if (n == 1) return push_ids(w->out, &t->byte_id[(uint8_t)piece[0]], 1, e);
    ds_status s = grow_work(w, n, e);
    if (s) return s;
    for (size_t i = 0; i < n; i++) {
        w->sym[i] = t->byte_id[(uint8_t)piece[i]];
        w->prev[i] = (int32_t)i - 1;
        w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    w->n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++) try_pair(w, (int32_t)i);
    while (w->n_heap) {
        bpe_entry top = heap_pop(w);
        int32_t pos = (int32_t)(top.key & 0xffffffffu), nx = w->next[pos];
        if (w->sym[pos] < 0 || nx < 0) continue;
        const merge_slot *m = find_merge(t, w->sym[pos], w->sym[nx]);
        if (!m || m->id != top.id) continue; /* the pair changed since this entry was pushed */
        w->sym[pos] = m->id;
        w->sym[nx] = -1;
        w->next[pos] = w->next[nx];
        if (w->next[nx] >= 0) w->prev[w->next[nx]] = pos;
        if (w->prev[pos] >= 0) try_pair(w, w->prev[pos]);
        try_pair(w, pos);
    }
    /* the merged ids, in order, overwrite the front of sym: positions only grow */
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = w->next[i]) w->sym[k++] = w->sym[i];
    return push_ids(w->out, w->sym, k, e);
}

/* The longest allowed added token at text[i..n), or -1 (*len its length). */
static int32_t match_added(const ds_tokenizer *t, const char *text, size_t i, size_t n, int allow_special,
                           size_t *len) {
    int32_t best = -1, node = 0;
    for (size_t j = i; j < n; j++) {
        int32_t c = t->trie[node].child;
        while (c >= 0 && t->trie[c].byte != (uint8_t)text[j]) c = t->trie[c].sibling;
        if (c < 0) break;
        node = c;
        int32_t id = t->trie[node].id;
        if (id >= 0 && (allow_special || t->v.types[id] != DS_TOKEN_CONTROL)) {
            best = id;
            *len = j + 1 - i;
        }
    }
    return best;
}

typedef struct {
    ds_tokenizer_piece_fn fn;
    void *ctx;
} piece_adapter;

static ds_status adapt_piece(void *ctx, const char *piece, size_t len, ds_err *e) {
    piece_adapter *a = ctx;
    return a->fn(a->ctx, piece, len, -1, e);
}

/* Steps 1-3 of tokenizer.h up to the pieces: repair, added tokens, NFC, split. */
static ds_status walk(const ds_tokenizer *t, const char *text, size_t len, int allow_special, ds_pretok_fn on_piece,
                      void *piece_ctx, ds_tokenizer_piece_fn on_added, void *added_ctx, ds_err *e) {
    char *repaired = NULL;
    if (ds_utf8_valid_prefix((const uint8_t *)text, len) != len) {
        size_t n = ds_utf8_repaired_len((const uint8_t *)text, len);
        if (!(repaired = malloc(n ? n : 1))) return ds_fail(e, DS_ENOMEM, "out of memory repairing %zu bytes", len);
        len = ds_utf8_repair((const uint8_t *)text, len, (uint8_t *)repaired);
        text = repaired;
    }
    ds_status s = DS_OK;
    size_t start = 0, i = 0; /* start: of the text not yet handed on */
    while (!s) {
        size_t mlen = 0;
        int32_t id = -1;
        while (i < len && !(t->may_start[(uint8_t)text[i]] &&
                            (id = match_added(t, text, i, len, allow_special, &mlen)) >= 0))
            i++;
        if (i > start) {
            const char *norm = NULL;
            size_t norm_len = 0;
            char *owned = NULL;
            if (!(s = ds_nfc(text + start, i - start, &norm, &norm_len, &owned, e)))
                s = ds_pretok_split(t->pretok, norm, norm_len, on_piece, piece_ctx, e);
            free(owned);
        }
        if (s || id < 0) break;
        s = on_added(added_ctx, text + i, mlen, id, e);
        start = i += mlen;
    }
    free(repaired);
    return s;
}

static ds_status push_added(void *ctx, const char *piece, size_t len, int32_t id, ds_err *e) {
    bpe_work *w = ctx;
    return push_ids(w->out, &id, 1, e);
}

ds_status ds_tokenizer_encode(const ds_tokenizer *t, const char *text, size_t len, int allow_special, ds_tokens *out,
                              ds_err *e) {
    bpe_work w = {.t = t, .out = out};
    ds_status s = walk(t, text, len, allow_special, bpe_piece, &w, push_added, &w, e);
    free(w.sym);
    free(w.prev);
    free(w.next);
    free(w.heap);
    return s;
}

ds_status ds_tokenizer_pretokenize(const ds_tokenizer *t, const char *text, size_t len, int allow_special,
                                   ds_tokenizer_piece_fn fn, void *ctx, ds_err *e) {
    piece_adapter a = {fn, ctx};
    return walk(t, text, len, allow_special, adapt_piece, &a, fn, ctx, e);
}

/* --- decoding --- */

ds_status ds_tokenizer_decode(const ds_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **out,
                              size_t *out_len, ds_err *e) {
    *out = NULL;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->v.n_tokens)
            return ds_fail(e, DS_EINVAL, "token id %d (at %zu) is outside the vocabulary of %d", ids[i], i, t->v.n_tokens);
        if (!(skip_special && ds_tokenizer_is_special(t, ids[i]))) total += t->bytes_off[ids[i] + 1] - t->bytes_off[ids[i]];
    }
    char *buf = malloc(total + 1);
    if (!buf) return ds_fail(e, DS_ENOMEM, "out of memory decoding %zu tokens", n);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (skip_special && ds_tokenizer_is_special(t, ids[i])) continue;
        size_t k = t->bytes_off[ids[i] + 1] - t->bytes_off[ids[i]];
        memcpy(buf + o, t->bytes + t->bytes_off[ids[i]], k);
        o += k;
    }
    buf[o] = '\0';
    *out = buf;
    *out_len = o;
    return DS_OK;
}
