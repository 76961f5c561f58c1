/* matcher_int.h - the parse stacks a matcher works with, shared by matcher.c
 * (following the answer) and token_mask.c (which tokens may come next).
 *
 * A stack is a node of a persistent tree: (position of the next element in
 * its frame, the node below), hash-consed so that equal stacks are equal
 * ids; node 0 is the bottom (nothing below: the grammar, or the frame a
 * position cache looks at, is complete). A state is the sorted set of the
 * stacks the bytes so far allow, each topped by a terminal (or the bottom),
 * interned too, with its transitions by byte filled as they are needed. */
#ifndef DS_MATCHER_INT_H
#define DS_MATCHER_INT_H

#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar_int.h"

typedef struct {
    uint32_t pos;
    int32_t parent;
    uint64_t hash;  /* of the positions from this node down: equal stacks of any matcher hash alike */
} gr_node;

typedef struct {
    uint32_t first, n;  /* the state's nodes: items[first .. first + n) */
    uint64_t hash;
    int32_t *trans;     /* [256] next state by byte: -2 not computed yet, -1 none */
    uint8_t can_end;    /* holds the bottom */
} gr_state;

typedef struct {
    const ds_grammar *g;
    gr_node *nodes;
    int n_nodes, cap_nodes;
    int32_t *node_table;
    int node_tcap;
    int32_t *items;
    size_t n_items, cap_items;
    gr_state *states;
    int n_states, cap_states;
    int32_t *state_table;
    int state_tcap;
    int32_t *tmp;       /* nodes of a state being built */
    int n_tmp, cap_tmp;
    int overflow;       /* a limit was reached: the matcher refuses everything from then on */
} gr_space;

int ds_gr_space_init(gr_space *sp, const ds_grammar *g);
void ds_gr_space_free(gr_space *sp);
/* The state of the stacks expand(pos) gives on top of node parent (-1 when none). */
int32_t ds_gr_state_at(gr_space *sp, uint32_t pos, int32_t parent);
/* The state after node n's frame completed: its parent's continuation (the bottom alone
 * when n stands on the bottom). */
int32_t ds_gr_state_after_frame(gr_space *sp, int32_t n);
/* The node (pos, parent), made if new (-1 when out of room). */
int32_t ds_gr_node_on(gr_space *sp, uint32_t pos, int32_t parent);
/* The state of these nodes (tops of stacks), -1 when there are none. */
int32_t ds_gr_state_of_nodes(gr_space *sp, const int32_t *nodes, int n);
/* The state after byte b (-1: b is not allowed). */
int32_t ds_gr_trans(gr_space *sp, int32_t s, unsigned char b);

/* ds_gr_trans where the transition is known already (the walks' inner loop). */
static inline int32_t ds_gr_trans_fast(gr_space *sp, int32_t s, unsigned char b) {
    const int32_t *t = sp->states[s].trans;
    if (t && t[b] != -2) return t[b];
    return ds_gr_trans(sp, s, b);
}

struct ds_matcher {
    ds_grammar *g;
    gr_space sp;
    int32_t *hist;      /* hist[0]: the start; hist[k]: the state after step k */
    int n_hist, cap_hist;
};

#endif
