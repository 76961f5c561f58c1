/* vocab_index.c - see vocab_index.h.
 *
 * The trie is kept implicit: the tokens sorted by their bytes, each with the
 * length of the prefix it shares with the one before. A walk in that order
 * keeps the states of the previous token's bytes and starts the next token
 * where their common prefix ends, which visits each trie node once. */
#include <stdlib.h>
#include <string.h>

#include "grammar/vocab_index_int.h"

static const ds_tokenizer *sort_tok;

static int cmp_tokens(const void *a, const void *b) {
    size_t la, lb;
    const char *x = ds_tokenizer_token_bytes(sort_tok, *(const int32_t *)a, &la);
    const char *y = ds_tokenizer_token_bytes(sort_tok, *(const int32_t *)b, &lb);
    int c = memcmp(x, y, la < lb ? la : lb);
    if (c) return c;
    return la < lb ? -1 : la > lb;
}

/* Nodes in preorder: the sorted tokens insert their bytes past the common prefix as new
 * last children, which is the order a depth-first walk meets them. */
static int build_trie(ds_vocab_index *v) {
    size_t cap = 1;
    for (int i = 0; i < v->n; i++) cap += (size_t)(v->len[i] - v->lcp[i]);
    v->node_byte = malloc(cap);
    v->node_depth = malloc(cap * sizeof *v->node_depth);
    v->node_size = malloc(cap * sizeof *v->node_size);
    v->node_token = malloc(cap * sizeof *v->node_token);
    v->node_ntok = calloc(cap, 1);
    int32_t *path = malloc(((size_t)v->max_len + 2) * sizeof *path);
    if (!v->node_byte || !v->node_depth || !v->node_size || !v->node_token || !v->node_ntok || !path) { free(path); return -1; }
    int n = 1;
    v->node_byte[0] = 0, v->node_depth[0] = 0, v->node_token[0] = -1;
    path[0] = 0;
    for (int i = 0; i < v->n; i++) {
        const unsigned char *b = v->bytes + v->off[i];
        for (int d = v->lcp[i]; d < v->len[i]; d++) {
            v->node_byte[n] = b[d];
            v->node_depth[n] = (uint16_t)(d + 1);
            v->node_token[n] = -1;
            path[d + 1] = n++;
        }
        int32_t at = path[v->len[i]];
        if (v->node_token[at] < 0) v->node_token[at] = i;
        if (v->node_ntok[at] < 255) v->node_ntok[at]++;
        /* sizes: every node on the path now ends at n (set when its subtree is closed below) */
        for (int d = 0; d <= v->len[i]; d++) v->node_size[path[d]] = (uint32_t)(n - path[d]);
    }
    v->n_nodes = n;
    free(path);
    return 0;
}

ds_status ds_vocab_index_new(const ds_tokenizer *tok, ds_vocab_index **out, ds_err *e) {
    *out = NULL;
    int n = ds_tokenizer_n_tokens(tok);
    ds_vocab_index *v = calloc(1, sizeof *v);
    if (!v) return ds_fail(e, DS_ENOMEM, "vocab index: out of memory");
    v->n_tokens = n;
    v->ids = malloc(((size_t)n + 1) * sizeof *v->ids);
    if (!v->ids) goto oom;
    size_t total = 0;
    for (int t = 0; t < n; t++) {
        size_t len = 0;
        const char *b = ds_tokenizer_token_bytes(tok, t, &len);
        if (!b || len == 0 || ds_tokenizer_is_special(tok, t)) continue;
        v->ids[v->n++] = t;
        total += len;
    }
    sort_tok = tok; /* qsort has no context argument; the index is built on one thread at a time */
    qsort(v->ids, (size_t)v->n, sizeof *v->ids, cmp_tokens);
    v->off = malloc(((size_t)v->n + 1) * sizeof *v->off);
    v->len = malloc(((size_t)v->n + 1) * sizeof *v->len);
    v->lcp = malloc(((size_t)v->n + 1) * sizeof *v->lcp);
    v->bytes = malloc(total + 1);
    if (!v->off || !v->len || !v->lcp || !v->bytes) goto oom;
    size_t at = 0;
    for (int i = 0; i < v->n; i++) {
        size_t len = 0;
        const char *b = ds_tokenizer_token_bytes(tok, v->ids[i], &len);
        if (len > UINT16_MAX) len = UINT16_MAX;
        memcpy(v->bytes + at, b, len);
        v->off[i] = (uint32_t)at;
        v->len[i] = (uint16_t)len;
        uint16_t l = 0;
        if (i > 0) {
            const unsigned char *p = v->bytes + v->off[i - 1], *q = v->bytes + at;
            size_t m = v->len[i - 1] < len ? v->len[i - 1] : len;
            while (l < m && p[l] == q[l]) l++;
        }
        v->lcp[i] = l;
        if ((int)len > v->max_len) v->max_len = (int)len;
        int space = len <= 4 && v->n_space < 64;
        for (size_t k = 0; k < len && space; k++) space = b[k] == ' ' || b[k] == '\n' || b[k] == '\t' || b[k] == '\r';
        if (space) v->space_ids[v->n_space] = v->ids[i], v->space_len[v->n_space++] = (uint8_t)len;
        at += len;
    }
    if (build_trie(v) != 0) goto oom;
    *out = v;
    return DS_OK;
oom:
    ds_vocab_index_free(v);
    return ds_fail(e, DS_ENOMEM, "vocab index: out of memory (%d tokens)", n);
}

void ds_vocab_index_free(ds_vocab_index *v) {
    if (!v) return;
    free(v->ids);
    free(v->off);
    free(v->len);
    free(v->lcp);
    free(v->bytes);
    free(v->node_byte);
    free(v->node_depth);
    free(v->node_size);
    free(v->node_token);
    free(v->node_ntok);
    free(v);
}

int ds_vocab_index_n_tokens(const ds_vocab_index *v) { return v ? v->n_tokens : 0; }
