/* stream_decoder.c - see stream_decoder.h. */
#include "tokenizer/stream_decoder.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer/utf8.h"

ds_status ds_stream_decoder_init(ds_stream_decoder *d, const ds_tokenizer *tok, int skip_special, ds_err *e) {
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->skip_special = skip_special;
    d->cap = ds_tokenizer_max_token_bytes(tok) + sizeof d->held;
    d->in = malloc(d->cap);
    /* a repaired byte grows to three (U+FFFD) */
    d->out = malloc(3 * d->cap);
    if (!d->in || !d->out) {
        ds_stream_decoder_free(d);
        return ds_fail(e, DS_ENOMEM, "out of memory for a stream decoder");
    }
    return DS_OK;
}

void ds_stream_decoder_free(ds_stream_decoder *d) {
    free(d->in);
    free(d->out);
    memset(d, 0, sizeof *d);
}

int ds_stream_decoder_held(const ds_stream_decoder *d) { return d->n_held; }

ds_status ds_stream_decoder_push(ds_stream_decoder *d, int32_t id, const char **text, size_t *len, ds_err *e) {
    *text = d->out;
    *len = 0;
    size_t n;
    const char *bytes = ds_tokenizer_token_bytes(d->tok, id, &n);
    if (!bytes)
        return ds_fail(e, DS_EINVAL, "token id %d is outside the vocabulary of %d", id, ds_tokenizer_n_tokens(d->tok));
    if (d->skip_special && ds_tokenizer_is_special(d->tok, id)) return DS_OK;
    memcpy(d->in, d->held, (size_t)d->n_held);
    memcpy(d->in + d->n_held, bytes, n);
    n += (size_t)d->n_held;
    d->n_held = 0;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        ds_utf8_kind k;
        size_t step = ds_utf8_next(d->in + i, n - i, &k);
        if (k == DS_UTF8_TRUNCATED) { /* only ever at the end: wait for the next token */
            memcpy(d->held, d->in + i, step);
            d->n_held = (int)step;
        } else if (k == DS_UTF8_VALID) {
            memcpy(d->out + o, d->in + i, step);
            o += step;
        } else {
            memcpy(d->out + o, DS_UTF8_REPLACEMENT, 3);
            o += 3;
        }
        i += step;
    }
    *len = o;
    return DS_OK;
}

void ds_stream_decoder_flush(ds_stream_decoder *d, const char **text, size_t *len) {
    *text = d->out;
    *len = 0;
    if (d->n_held) { /* a truncated character is one maximal subpart */
        memcpy(d->out, DS_UTF8_REPLACEMENT, 3);
        *len = 3;
    }
    d->n_held = 0;
}
