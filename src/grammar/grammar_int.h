/* grammar_int.h - what the grammar layer's files share: the compiled form of a
 * grammar, and the caches the matcher fills.
 *
 * Compiled form: every rule is a list of alternatives, each a sequence of
 * elements ending in E_END, laid out one after the other in `el`. A terminal
 * (E_BYTES) matches one byte of a 256-bit set: literals become one terminal
 * per byte, and character classes over code points become alternatives of
 * UTF-8 byte sequences, so the matcher works on bytes, which is what tokens
 * are made of (a token may end inside a character). A position is an index
 * into `el`. */
#ifndef DS_GRAMMAR_INT_H
#define DS_GRAMMAR_INT_H

#include <stdatomic.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "grammar/vocab_index.h"

enum { E_END = 0, E_BYTES, E_REF };

typedef struct {
    uint32_t kind : 2;
    uint32_t arg : 30; /* E_BYTES: the byte set; E_REF: the rule */
} gr_elem;

typedef struct {
    uint32_t w[8];
} gr_byteset;

static inline int gr_set_has(const gr_byteset *s, unsigned b) { return (s->w[b >> 5] >> (b & 31)) & 1u; }

/* What a token does from the top two frames of a stack (a position and the
 * continuation below it: inside a string, the character loop and the rest of
 * the string rule), looking no further: the tokens they take whole, and the
 * ones that complete both frames at some byte and whose rest the stack below
 * must take ("uncertain", checked when a state is met). Two frames, because
 * one is often a single character class; more would be shared by fewer
 * stacks. Where most tokens are uncertain (frames that are only whitespace,
 * say) the entry is wide: states holding such a stack walk it whole. */
typedef struct {
    uint64_t key;            /* the two positions */
    int wide;
    uint32_t *accepted;      /* bit set over the vocabulary, or NULL when none */
    int n_accepted;
    /* uncertain tokens: (token, offset of the rest) sorted by the rest's bytes, with the common
     * prefix length of each rest with the one before, so that a walk shares prefixes */
    int n_uncertain;
    int32_t *u_token;
    uint32_t *u_off;
    uint16_t *u_lcp;
    size_t bytes;
} gr_position_entry;

/* A finished mask for a whole matcher state, keyed by the state's stacks (a
 * hash of each stack's positions, sorted): found again by any matcher of
 * the grammar that reaches the same stacks. */
typedef struct gr_state_mask {
    uint64_t *key;
    int n_key;
    uint64_t hash;
    uint32_t *bits;
    int n_allowed;
    struct gr_state_mask *next;
} gr_state_mask;

struct ds_grammar {
    atomic_int refs;
    gr_elem *el;
    int n_el;
    gr_byteset *sets;
    int n_sets;
    int n_rules;
    int *rule_alt0;     /* [n_rules] index of the rule's first alternative in alt_pos */
    int *rule_n_alts;   /* [n_rules] */
    int *alt_pos;       /* position of each alternative's first element */
    int n_alts;
    char **rule_names;  /* for messages */
    int root;
    size_t bytes;       /* the compiled form */

    /* caches for one vocabulary, filled on the engine thread (matcher.h) */
    const ds_vocab_index *cache_vocab;
    gr_position_entry **pos_cache;  /* open hash table by key */
    int pos_cap, n_pos;
    gr_state_mask **state_cache;    /* hash buckets */
    int n_state_buckets, n_state_masks;
    atomic_size_t cache_bytes;      /* read by other threads for the server's cache budget */
};

/* Clears the mask caches (the vocabulary changed, or they outgrew their budget). */
void gr_clear_caches(ds_grammar *g);

#endif
