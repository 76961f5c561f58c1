/* hub_select.c - the files `REPO[:QUANT]` means in a repository listing,
 * chosen the way llama.cpp's `-hf` chooses them:
 *  - the model: a GGUF (not an mmproj, imatrix, MTP or other draft file)
 *    whose name holds QUANT (any case) followed by '.' or '-'; without QUANT,
 *    Q4_K_M, then Q8_0, then the first GGUF. Of a split GGUF
 *    (NAME-00001-of-0000N.gguf) every shard is taken.
 *  - the mmproj and MTP files: a GGUF whose name holds "mmproj" / "mtp-", in
 *    the model's folder or one above it; the deepest first, then one named
 *    with QUANT exactly, then the one whose bit count (the first number of
 *    its quantization tag) is nearest the model's. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loading/hub_int.h"

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int ends_with_ci(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcasecmp(s + n - k, suffix);
}

static int is_gguf(const char *p) { return ends_with_ci(p, ".gguf"); }

/* A split GGUF's name: PREFIX-IIIII-of-NNNNN.gguf. Returns the length of the
 * path before ".gguf" (and of PREFIX when split), the shard index and count
 * (1 and 1 when not split). */
static size_t split_info(const char *p, int *index, int *count) {
    size_t n = strlen(p) - 5; /* without ".gguf" */
    *index = *count = 1;
    static const char pat[] = "-00000-of-00000";
    size_t k = sizeof pat - 1;
    if (n <= k) return n;
    const char *s = p + n - k;
    for (size_t i = 0; i < k; i++) {
        if (pat[i] == '0' ? !isdigit((unsigned char)s[i]) : tolower((unsigned char)s[i]) != pat[i]) return n;
    }
    *index = atoi(s + 1);
    *count = atoi(s + 10);
    return n - k;
}

/* The bit count of a file's quantization tag: the first number in the last
 * run of letters, digits and '_' after a '-' or '.' (Q4_K_M: 4, BF16: 16);
 * 0 without one. */
static int quant_bits(const char *p) {
    int index, count;
    size_t n = split_info(p, &index, &count);
    size_t i = n;
    while (i > 0 && (isalnum((unsigned char)p[i - 1]) || p[i - 1] == '_')) i--;
    if (i == n || i == 0 || (p[i - 1] != '-' && p[i - 1] != '.')) return 0;
    for (; i < n; i++)
        if (isdigit((unsigned char)p[i])) return atoi(p + i);
    return 0;
}

static const char *strcasestr_n(const char *h, const char *needle) {
    size_t k = strlen(needle);
    for (; *h; h++)
        if (!strncasecmp(h, needle, k)) return h;
    return NULL;
}

static int is_model(const char *p) {
    if (!is_gguf(p)) return 0;
    static const char *const SIDE[] = {"mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"};
    const char *b = base_name(p);
    for (size_t i = 0; i < sizeof SIDE / sizeof SIDE[0]; i++)
        if (strcasestr_n(b, SIDE[i])) return 0;
    return 1;
}

/* QUANT in the name, any case, as a whole tag: not after a letter or digit,
 * and followed by '.' or '-'. */
static int has_tag(const char *p, const char *tag) {
    size_t k = strlen(tag);
    for (const char *s = p; (s = strcasestr_n(s, tag)); s++) {
        if (s > p && isalnum((unsigned char)s[-1])) continue;
        if (s[k] == '.' || s[k] == '-') return 1;
    }
    return 0;
}

static int first_shard(const char *p) {
    int index, count;
    split_info(p, &index, &count);
    return index == 1;
}

static int find_model(const ds_hub_listing *l, const char *quant) {
    static const char *const DEFAULTS[] = {"Q4_K_M", "Q8_0"};
    const char *const *tags = quant ? &quant : DEFAULTS;
    int n_tags = quant ? 1 : 2;
    for (int t = 0; t < n_tags; t++)
        for (int i = 0; i < l->n; i++)
            if (is_model(l->files[i].path) && has_tag(l->files[i].path, tags[t]) && first_shard(l->files[i].path))
                return i;
    if (!quant)
        for (int i = 0; i < l->n; i++)
            if (is_model(l->files[i].path) && first_shard(l->files[i].path)) return i;
    return -1;
}

/* Number of folder parts of p that are also the first folder parts of model,
 * or -1 when p's folder is not model's folder or one above it. */
static int shared_depth(const char *p, const char *model) {
    const char *ps = strrchr(p, '/');
    if (!ps) return 0;
    size_t plen = (size_t)(ps - p);
    const char *ms = model ? strrchr(model, '/') : NULL;
    size_t mlen = ms ? (size_t)(ms - model) : 0;
    if (plen > mlen || memcmp(p, model, plen) || (plen < mlen && model[plen] != '/')) return -1;
    int depth = 1;
    for (size_t i = 0; i < plen; i++) depth += p[i] == '/';
    return depth;
}

static int find_sibling(const ds_hub_listing *l, const char *model, const char *keyword, const char *quant) {
    int bits = quant ? 0 : (model ? quant_bits(model) : 0);
    if (quant)
        for (const char *s = quant; *s; s++)
            if (isdigit((unsigned char)*s)) { bits = atoi(s); break; }
    char exact[80] = "";
    if (quant) snprintf(exact, sizeof exact, "-%s.", quant);
    int best = -1, best_depth = 0, best_diff = 0, best_exact = 0;
    for (int i = 0; i < l->n; i++) {
        const char *p = l->files[i].path;
        if (!is_gguf(p) || !strcasestr_n(base_name(p), keyword)) continue;
        int depth = shared_depth(p, model);
        if (depth < 0) continue;
        int diff = abs(quant_bits(p) - bits);
        int ex = exact[0] && strcasestr_n(p, exact);
        if (best < 0 || depth > best_depth || (depth == best_depth && ex && !best_exact) ||
            (depth == best_depth && ex == best_exact && diff < best_diff)) {
            best = i, best_depth = depth, best_diff = diff, best_exact = ex;
        }
    }
    return best;
}

/* "a.gguf, b.gguf" into buf, as many as fit */
static void list_ggufs(const ds_hub_listing *l, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    int any = 0;
    for (int i = 0; i < l->n && n + 8 < cap; i++) {
        if (!is_gguf(l->files[i].path)) continue;
        int w = snprintf(buf + n, cap - n, "%s%s", any ? ", " : "", l->files[i].path);
        if (w < 0 || (size_t)w >= cap - n) {
            snprintf(buf + n, cap - n, ", ...");
            break;
        }
        n += (size_t)w;
        any = 1;
    }
    if (!any) snprintf(buf, cap, "no GGUF file at all");
}

ds_status ds_hub_choose(const ds_hub_listing *l, const char *where, const char *quant, ds_hub_choice *c, ds_err *e) {
    memset(c, 0, sizeof *c);
    c->mmproj = c->mtp = -1;
    int m = find_model(l, quant);
    const char *model = m >= 0 ? l->files[m].path : NULL;
    c->mtp = find_sibling(l, model, "mtp-", quant);
    if (m < 0) {
        int any_model = 0;
        for (int i = 0; i < l->n; i++) any_model |= is_model(l->files[i].path);
        if (c->mtp >= 0 && !any_model) return DS_OK; /* an MTP-only repository: the head is what there is */
        char names[400];
        list_ggufs(l, names, sizeof names);
        if (quant) return ds_fail(e, DS_ENOTFOUND, "%s has no GGUF file for '%s' (it has: %s)", where, quant, names);
        return ds_fail(e, DS_ENOTFOUND, "%s has no model GGUF file (it has: %s)", where, names);
    }
    c->mmproj = find_sibling(l, model, "mmproj", NULL);
    int index, count;
    size_t plen = split_info(model, &index, &count);
    c->model = calloc((size_t)count, sizeof *c->model);
    if (!c->model) return ds_fail(e, DS_ENOMEM, "out of memory");
    c->n_model = count;
    for (int k = 0; k < count; k++) c->model[k] = -1;
    for (int i = 0; i < l->n; i++) {
        const char *p = l->files[i].path;
        int fi, fc;
        if (!is_gguf(p)) continue;
        size_t fl = split_info(p, &fi, &fc);
        if (fc == count && fl == plen && !memcmp(p, model, plen) && fi >= 1 && fi <= count) c->model[fi - 1] = i;
    }
    for (int k = 0; k < count; k++)
        if (c->model[k] < 0) {
            ds_status s = ds_fail(e, DS_ENOTFOUND, "%s lacks shard %d of %d of %.*s.gguf", where, k + 1, count,
                                  (int)plen, model);
            ds_hub_choice_free(c);
            return s;
        }
    return DS_OK;
}

void ds_hub_choice_free(ds_hub_choice *c) {
    free(c->model);
    memset(c, 0, sizeof *c);
    c->mmproj = c->mtp = -1;
}
