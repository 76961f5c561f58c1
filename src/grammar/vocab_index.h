/* vocab_index.h - a tokenizer's tokens arranged for computing which of them a
 * grammar allows next: their bytes in a trie, shared prefixes walked once.
 * Control tokens (the end tokens among them) are not text and are left out:
 * the grammar filter decides about them itself. Built once per tokenizer. */
#ifndef DS_VOCAB_INDEX_H
#define DS_VOCAB_INDEX_H

#include <stdint.h>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

typedef struct ds_vocab_index ds_vocab_index;

ds_status ds_vocab_index_new(const ds_tokenizer *tok, ds_vocab_index **out, ds_err *e);
void ds_vocab_index_free(ds_vocab_index *v);
/* Tokens of the tokenizer (the bit set a mask fills has this many bits). */
int ds_vocab_index_n_tokens(const ds_vocab_index *v);

#endif
