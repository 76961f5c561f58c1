/* vocab_index_int.h - the layout of a vocab index, for the mask walk. */
#ifndef DS_VOCAB_INDEX_INT_H
#define DS_VOCAB_INDEX_INT_H

#include <stdint.h>

#include "grammar/vocab_index.h"

struct ds_vocab_index {
    int n_tokens;          /* of the tokenizer: the mask's size */
    int n;                 /* text tokens in the index */
    int32_t *ids;          /* [n] sorted by their bytes */
    uint32_t *off;         /* [n] where each token's bytes start in `bytes` */
    uint16_t *len;         /* [n] */
    uint16_t *lcp;         /* [n] bytes shared with the token before */
    unsigned char *bytes;
    int max_len;
    /* the trie, nodes in preorder (node 0 the root): a node's subtree is nodes [x, x + size[x]) */
    int n_nodes;
    uint8_t *node_byte;
    uint16_t *node_depth;
    uint32_t *node_size;
    int32_t *node_token;   /* the index position of the first token ending here, or -1 */
    uint8_t *node_ntok;    /* tokens ending here (equal bytes: consecutive index positions) */
    int32_t space_ids[64]; /* tokens made of at most 4 whitespace bytes (after a reasoning part) */
    uint8_t space_len[64];
    int n_space;
};

#endif
