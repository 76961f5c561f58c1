/* grammar_filter.c - see grammar_filter.h.
 *
 * The filter keeps, for every token of the answer it followed, where it
 * stood before that token (phase, the tail bytes of a tag being looked for,
 * the matcher's step count): a call that shows a different answer past some
 * point restores the snapshot there, as speculative decoding needs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_filter.h"
#include "grammar/matcher.h"
#include "grammar/vocab_index_int.h"

enum { PH_REASONING, PH_FREE, PH_GRAMMAR, PH_BROKEN };

#define MAX_LEAD 4 /* whitespace bytes allowed after </think> before the grammar (templates write "\n\n") */
#define TAIL 64 /* the longest tag looked for across token boundaries (</think>, a trigger) */

static const char THINK_END[] = "</think>";

typedef struct {
    uint8_t phase;
    uint8_t n_tail;
    uint8_t lead;     /* whitespace bytes between a reasoning part's end and the grammar's first byte */
    char tail[TAIL];  /* the last bytes of the free text, for a tag split over tokens */
    int steps;        /* the matcher's steps */
} snapshot;

struct ds_grammar_filter {
    ds_matcher *m;
    const ds_vocab_index *v;
    const ds_tokenizer *tok;
    int32_t *end_ids;
    int n_end;
    char *trigger;
    size_t n_trigger;
    snapshot cur;
    int32_t *seen;        /* the answer followed so far */
    snapshot *before;     /* before[k]: where the filter stood before seen[k] */
    int n_seen, cap_seen;
};

ds_status ds_grammar_filter_new(const ds_grammar_filter_params *p, ds_grammar_filter **out, ds_err *e) {
    *out = NULL;
    if (p->trigger && (!*p->trigger || strlen(p->trigger) >= TAIL))
        return ds_fail(e, DS_EINVAL, "grammar filter: the trigger must have 1 to %d bytes", TAIL - 1);
    ds_grammar_filter *f = calloc(1, sizeof *f);
    if (!f) return ds_fail(e, DS_ENOMEM, "grammar filter: out of memory");
    ds_status st = ds_matcher_new(p->grammar, &f->m, e);
    if (st) { free(f); return st; }
    f->v = p->vocab;
    f->tok = p->tok;
    f->n_end = p->n_end;
    f->end_ids = malloc(((size_t)p->n_end + 1) * sizeof *f->end_ids);
    if (p->trigger) f->trigger = strdup(p->trigger), f->n_trigger = strlen(p->trigger);
    if (!f->end_ids || (p->trigger && !f->trigger)) {
        ds_grammar_filter_free(f);
        return ds_fail(e, DS_ENOMEM, "grammar filter: out of memory");
    }
    if (p->n_end) memcpy(f->end_ids, p->end_ids, (size_t)p->n_end * sizeof *f->end_ids);
    f->cur.phase = p->in_reasoning ? PH_REASONING : p->trigger ? PH_FREE : PH_GRAMMAR;
    f->cur.lead = MAX_LEAD; /* leading blanks only after a reasoning part */
    *out = f;
    return DS_OK;
}

void ds_grammar_filter_free(ds_grammar_filter *f) {
    if (!f) return;
    ds_matcher_free(f->m);
    free(f->end_ids);
    free(f->trigger);
    free(f->seen);
    free(f->before);
    free(f);
}

static int is_end(const ds_grammar_filter *f, int32_t t) {
    for (int i = 0; i < f->n_end; i++)
        if (f->end_ids[i] == t) return 1;
    return 0;
}

/* Appends byte b to the tail; returns 1 when the tail now ends with tag. */
static int tail_push(snapshot *s, char b, const char *tag, size_t n_tag) {
    if (s->n_tail == TAIL) {
        memmove(s->tail, s->tail + 1, TAIL - 1);
        s->n_tail--;
    }
    s->tail[s->n_tail++] = b;
    return s->n_tail >= n_tag && !memcmp(s->tail + s->n_tail - n_tag, tag, n_tag);
}

static int is_space_only(const char *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (b[i] != ' ' && b[i] != '\n' && b[i] != '\t' && b[i] != '\r') return 0;
    return 1;
}

/* Follows one token of the answer. */
static void follow(ds_grammar_filter *f, int32_t t) {
    snapshot *s = &f->cur;
    if (s->phase == PH_BROKEN || is_end(f, t)) return;
    size_t len = 0;
    const char *b = ds_tokenizer_token_bytes(f->tok, t, &len);
    if (!b) len = 0;
    size_t i = 0;
    if (s->phase == PH_REASONING) {
        while (i < len && !tail_push(s, b[i], THINK_END, sizeof THINK_END - 1)) i++;
        if (i == len) return;
        i++;
        s->n_tail = 0;
        s->phase = f->trigger ? PH_FREE : PH_GRAMMAR;
        s->lead = f->trigger ? MAX_LEAD : 0;
    }
    if (s->phase == PH_FREE) {
        while (i < len && !tail_push(s, b[i], f->trigger, f->n_trigger)) i++;
        if (i == len) return;
        i++;
        s->n_tail = 0;
        s->phase = PH_GRAMMAR;
        /* the grammar matches from the trigger's first byte, which earlier tokens may hold */
        if (!ds_matcher_accept(f->m, f->trigger, f->n_trigger) ||
            (i < len && !ds_matcher_accept(f->m, b + i, len - i))) {
            s->phase = PH_BROKEN;
            return;
        }
        s->steps = ds_matcher_steps(f->m);
        return;
    }
    if (s->phase == PH_GRAMMAR && i < len) {
        if (s->lead < MAX_LEAD && ds_matcher_steps(f->m) == 0 && is_space_only(b + i, len - i) &&
            s->lead + (len - i) <= MAX_LEAD) {
            s->lead = (uint8_t)(s->lead + (len - i));
            return;
        }
        if (ds_tokenizer_is_special(f->tok, t) || !ds_matcher_accept(f->m, b + i, len - i)) {
            /* a token the mask did not allow (a client-side override, or a filter given up on) */
            s->phase = PH_BROKEN;
            return;
        }
        s->steps = ds_matcher_steps(f->m);
    } else if (s->phase == PH_GRAMMAR && len == 0) {
        s->phase = PH_BROKEN;
    }
}

static int remember(ds_grammar_filter *f, int32_t t) {
    if (f->n_seen == f->cap_seen) {
        int c = f->cap_seen ? f->cap_seen * 2 : 64;
        int32_t *a = realloc(f->seen, (size_t)c * sizeof *a);
        if (a) f->seen = a;
        snapshot *b = realloc(f->before, (size_t)c * sizeof *b);
        if (b) f->before = b;
        if (!a || !b) return 0;
        f->cap_seen = c;
    }
    f->seen[f->n_seen] = t;
    f->before[f->n_seen] = f->cur;
    f->n_seen++;
    return 1;
}

ds_filter_result ds_grammar_filter_fn(void *user, const int32_t *generated, int n_generated, uint32_t *allowed,
                                      int n_vocab) {
    ds_grammar_filter *f = user;
    int common = 0;
    while (common < f->n_seen && common < n_generated && f->seen[common] == generated[common]) common++;
    if (common < f->n_seen) { /* drafts refused: back to where the answers part */
        f->cur = f->before[common];
        ds_matcher_rollback(f->m, ds_matcher_steps(f->m) - f->cur.steps);
        f->n_seen = common;
    }
    for (int k = common; k < n_generated; k++) {
        if (!remember(f, generated[k])) { f->cur.phase = PH_BROKEN; break; }
        follow(f, generated[k]);
    }
    snapshot *s = &f->cur;
    size_t words = DS_MASK_WORDS(n_vocab);
    if (s->phase == PH_BROKEN) return DS_FILTER_FREE; /* free from here; a refused draft may still restore */
    if (s->phase == PH_FREE) return DS_FILTER_FREE;
    if (s->phase == PH_REASONING) {
        /* free text, but an end token would end the answer before its constrained part */
        memset(allowed, 0xff, words * sizeof *allowed);
        for (int i = 0; i < f->n_end; i++)
            if (f->end_ids[i] >= 0 && f->end_ids[i] < n_vocab)
                allowed[f->end_ids[i] >> 5] &= ~(1u << (f->end_ids[i] & 31));
        return DS_FILTER_MASK;
    }
    int any = 0;
    if (!ds_matcher_must_end(f->m)) {
        if (ds_vocab_index_n_tokens(f->v) > n_vocab) return DS_FILTER_ERROR; /* one tokenizer: cannot happen */
        any = ds_matcher_fill_mask(f->m, f->v, allowed);
    }
    if (s->lead < MAX_LEAD && ds_matcher_steps(f->m) == 0) /* after a reasoning part: a few blank bytes first */
        for (int i = 0; i < f->v->n_space; i++)
            if (s->lead + f->v->space_len[i] <= MAX_LEAD && !DS_MASK_HAS(allowed, f->v->space_ids[i]))
                DS_MASK_SET(allowed, f->v->space_ids[i]), any++;
    if (ds_matcher_can_end(f->m))
        for (int i = 0; i < f->n_end; i++)
            if (f->end_ids[i] >= 0 && f->end_ids[i] < n_vocab) DS_MASK_SET(allowed, f->end_ids[i]), any++;
    if (!any || ds_matcher_failed(f->m)) {
        /* nothing can follow: a grammar the vocabulary cannot spell on from here, a complete
         * answer with no end token to give, or a matcher out of its budget. The answer fails
         * rather than go on unconstrained. */
        fprintf(stderr, "deltaserve: a grammar-constrained answer cannot go on after %d tokens (%s)\n", n_generated,
                ds_matcher_failed(f->m) ? "the matcher ran out of its memory budget" : "no token is allowed");
        return DS_FILTER_ERROR;
    }
    return DS_FILTER_MASK;
}

int ds_grammar_filter_complete(const ds_grammar_filter *f) {
    return f->cur.phase == PH_GRAMMAR && ds_matcher_can_end(f->m);
}
