/* stream_decoder.h - turns generated token ids into text one token at a
 * time without ever emitting part of a UTF-8 character.
 *
 * Byte-level tokens often end in the middle of a character (an emoji is
 * usually two or three tokens). The decoder holds back the 1..3 bytes of a
 * character that may still be completed and emits them once it is; bytes
 * that can no longer become a character are emitted as U+FFFD, by the
 * repair rule of utf8.h. So the text of a whole stream, flush included, is
 * ds_tokenizer_decode's bytes with that rule applied, and every piece is
 * well-formed UTF-8. One decoder per sequence; its memory is fixed at init. */
#ifndef DS_STREAM_DECODER_H
#define DS_STREAM_DECODER_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const ds_tokenizer *tok;  /* borrowed: outlives the decoder */
    int skip_special;         /* CONTROL tokens produce no text */
    uint8_t held[4];          /* the start of a character still incomplete */
    int n_held;
    uint8_t *in;              /* held bytes + one token */
    char *out;                /* the text of the last push or flush */
    size_t cap;               /* bytes of in; out has 3 * cap */
} ds_stream_decoder;

ds_status ds_stream_decoder_init(ds_stream_decoder *d, const ds_tokenizer *tok, int skip_special, ds_err *e);
void ds_stream_decoder_free(ds_stream_decoder *d);

/* Adds one token. *text and *len receive what is now safe to emit (possibly
 * nothing); the pointer stays valid until the next call on d. An id outside
 * the vocabulary fails with DS_EINVAL and leaves d as it was. */
ds_status ds_stream_decoder_push(ds_stream_decoder *d, int32_t id, const char **text, size_t *len, ds_err *e);

/* Bytes held back: the start of a character whose remaining bytes have not
 * arrived yet (0..3). */
int ds_stream_decoder_held(const ds_stream_decoder *d);

/* Ends the stream: a held incomplete character becomes U+FFFD. The decoder
 * is then ready for a new stream. */
void ds_stream_decoder_flush(ds_stream_decoder *d, const char **text, size_t *len);

#endif
