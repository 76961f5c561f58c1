/* tokenizer.h - byte-level BPE encoding and decoding that gives the ids
 * Hugging Face's tokenizers gives for the same vocabulary.
 *
 * Encoding, in Hugging Face's order:
 *   1. bytes that are not well-formed UTF-8 are repaired (utf8.h: one U+FFFD
 *      per maximal ill-formed subpart);
 *   2. added tokens (tokenizer.json "added_tokens", GGUF CONTROL and
 *      USER_DEFINED tokens) are matched leftmost-longest in the raw text;
 *   3. each stretch of text between them is put in NFC (normalize.h), split
 *      by the vocabulary's pre-tokenizer regex (pretokenize.h), and each
 *      piece is byte-level BPE encoded by merge rank, leftmost pair first on
 *      ties.
 * Both Qwen pre-tokenizers ("qwen2" for Qwen2/3, "qwen35") use NFC; added
 * tokens are matched as written (Qwen's are all "normalized": false).
 * NUL bytes are ordinary characters. A tokenizer is read-only once loaded:
 * threads may share one; each call allocates its own scratch and frees it. */
#ifndef DS_TOKENIZER_H
#define DS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "tokenizer/vocab.h"

typedef struct ds_tokenizer ds_tokenizer;
struct ds_model_file;

/* A growable list of token ids; encode appends to it. Free ids with free(). */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} ds_tokens;

/* PATH: a GGUF file, a tokenizer.json, or a Hugging Face directory (or its
 * config.json) holding tokenizer.json. */
ds_status ds_tokenizer_open(const char *path, ds_tokenizer **out, ds_err *e);
ds_status ds_tokenizer_from_model(const struct ds_model_file *m, ds_tokenizer **out, ds_err *e);
/* Takes over v's tables (v is left empty, also on failure). */
ds_status ds_tokenizer_from_vocab(ds_vocab *v, ds_tokenizer **out, ds_err *e);
void ds_tokenizer_free(ds_tokenizer *t);

/* allow_special = 0 treats special (CONTROL) tokens written in the text as
 * plain text, as Hugging Face's encode_special_tokens does (for untrusted
 * content); the other added tokens are matched either way. */
ds_status ds_tokenizer_encode(const ds_tokenizer *t, const char *text, size_t len, int allow_special, ds_tokens *out,
                              ds_err *e);

/* The bytes the ids stand for, concatenated exactly (so possibly not
 * well-formed UTF-8 when the ids cut a character; stream_decoder.h repairs).
 * *out is NUL-terminated and freed by the caller. skip_special leaves out
 * CONTROL tokens. Unused ids (padding rows) decode to nothing. */
ds_status ds_tokenizer_decode(const ds_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **out,
                              size_t *out_len, ds_err *e);

/* The pieces encode would BPE-encode (after NFC), and the added tokens, in
 * order; added_id is the token id for an added token and -1 otherwise. */
typedef ds_status (*ds_tokenizer_piece_fn)(void *ctx, const char *piece, size_t len, int32_t added_id, ds_err *e);
ds_status ds_tokenizer_pretokenize(const ds_tokenizer *t, const char *text, size_t len, int allow_special,
                                   ds_tokenizer_piece_fn fn, void *ctx, ds_err *e);

int ds_tokenizer_n_tokens(const ds_tokenizer *t);
const ds_vocab *ds_tokenizer_vocab(const ds_tokenizer *t);
/* The token as the vocabulary writes it (GPT-2 byte-level form for BPE
 * tokens, e.g. "Ġworld"), or NULL for an id out of range. */
const char *ds_tokenizer_piece(const ds_tokenizer *t, int32_t id);
/* The bytes the token stands for, or NULL for an id out of range. */
const char *ds_tokenizer_token_bytes(const ds_tokenizer *t, int32_t id, size_t *len);
/* 1 for a CONTROL token (what skip_special leaves out). */
int ds_tokenizer_is_special(const ds_tokenizer *t, int32_t id);
/* Id of a vocabulary string (BPE or added token), or -1. */
int32_t ds_tokenizer_find(const ds_tokenizer *t, const char *piece);
/* Length in bytes of the longest token. */
size_t ds_tokenizer_max_token_bytes(const ds_tokenizer *t);

#endif
