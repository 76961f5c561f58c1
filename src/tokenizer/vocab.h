/* vocab.h - a byte-level BPE vocabulary as files store it: token strings (in
 * the GPT-2 byte-to-unicode alphabet), token kinds, ranked merges, the
 * pre-tokenizer flavour and the special ids. Read from tokenizer.json or GGUF
 * metadata, written to both, or generated for test models. */
#ifndef DS_VOCAB_H
#define DS_VOCAB_H

#include <stdint.h>

#include "common/status.h"

struct ds_gguf;
struct ds_gguf_writer;

/* GGUF token types (llama.cpp's llama_token_type) */
enum { DS_TOKEN_NORMAL = 1, DS_TOKEN_UNKNOWN = 2, DS_TOKEN_CONTROL = 3, DS_TOKEN_USER_DEFINED = 4, DS_TOKEN_UNUSED = 5,
       DS_TOKEN_BYTE = 6 };

/* pre-tokenizer split patterns (tokenizer.json "Split" regex) */
extern const char DS_PRETOK_QWEN2[];  /* Qwen2 / Qwen3 */
extern const char DS_PRETOK_QWEN35[]; /* Qwen3.5 / Qwen3.6: combining marks join letters */

typedef struct {
    char **tokens;       /* [n_tokens] NUL-terminated; NULL for ids no file defines */
    int32_t *types;      /* [n_tokens] DS_TOKEN_* */
    int n_tokens;
    char **merges;       /* [n_merges] "left right", rank order */
    int n_merges;
    char *pre;           /* "qwen35" or "qwen2": which split pattern */
    int32_t eos_id;      /* <|im_end|> in chat models (-1 when none) */
    int32_t eot_id;      /* <|endoftext|> (-1 when none) */
    int32_t pad_id;
} ds_vocab;

void ds_vocab_free(ds_vocab *v);

/* A deterministic vocabulary of n_regular BPE tokens (256 bytes plus merges
 * that build words letter by letter) followed by the Qwen3.5 special tokens. */
ds_status ds_vocab_generate(ds_vocab *v, int n_regular, ds_err *e);
ds_status ds_vocab_read_tokenizer_json(ds_vocab *v, const char *path, ds_err *e);
ds_status ds_vocab_write_tokenizer_json(const ds_vocab *v, const char *path, ds_err *e);
ds_status ds_vocab_read_gguf(ds_vocab *v, const struct ds_gguf *g, ds_err *e);
void ds_vocab_write_gguf(const ds_vocab *v, struct ds_gguf_writer *w);

/* Extends the table to n_tokens with unused "[PAD<id>]" entries, as GGUF
 * files do so that there is one token per embedding row. */
ds_status ds_vocab_pad(ds_vocab *v, int n_tokens, ds_err *e);
/* The split regex of v->pre. */
const char *ds_vocab_pretok_regex(const ds_vocab *v);
/* Id of a token string, or -1 (linear scan: for set-up code, not encoding). */
int32_t ds_vocab_find(const ds_vocab *v, const char *token);

#endif
