/* fuzz_grammar.c - GBNF text from the input, then the matcher on bytes and
 * its token masks over the generated vocabulary of the tiny shape.
 * Input: the grammar text, a NUL byte, then the bytes to feed (in steps of
 * 1 to 4 bytes, the step length taken from each step's first byte).
 * Invariants:
 *   - parsing either fails with a message or gives a grammar;
 *   - a mask holds exactly the tokens whose bytes the matcher takes (checked
 *     against feeding each token and rolling it back);
 *   - a refused step leaves the state as it was; rollback restores the steps;
 *   - however ambiguous the grammar, a step ends in bounded time (the matcher's
 *     byte budget and stack limit; past them it refuses everything). */
#include <string.h>

#include "engine/engine.h"
#include "fuzz.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/vocab_index.h"
#include "loading/model_shapes.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ds_tokenizer *gr_tok;
static ds_vocab_index *gr_index;

static void gr_init(void) {
    const ds_model_shape *sh = ds_model_shape_find("tiny");
    ds_vocab v;
    memset(&v, 0, sizeof v);
    ds_err e = {0};
    if (ds_vocab_generate(&v, sh ? sh->n_vocab_regular : 2000, &e) != DS_OK) FUZZ_FAIL("vocab: %s", e.msg);
    if (ds_tokenizer_from_vocab(&v, &gr_tok, &e) != DS_OK) FUZZ_FAIL("tokenizer: %s", e.msg);
    if (ds_vocab_index_new(gr_tok, &gr_index, &e) != DS_OK) FUZZ_FAIL("index: %s", e.msg);
}

static void gr_check_mask(ds_matcher *m, uint32_t *bits, int n) {
    memset(bits, 0, DS_MASK_WORDS(n) * sizeof *bits);
    int count = ds_matcher_fill_mask(m, gr_index, bits), seen = 0;
    for (int t = 0; t < n; t++) {
        size_t len = 0;
        const char *b = ds_tokenizer_token_bytes(gr_tok, t, &len);
        int want = 0;
        if (b && len && !ds_tokenizer_is_special(gr_tok, t) && ds_matcher_accept(m, b, len)) {
            want = 1;
            ds_matcher_rollback(m, 1);
        }
        if (ds_matcher_failed(m)) return; /* out of its budget (too ambiguous a grammar): it refuses everything */
        FUZZ_CHECK(want == DS_MASK_HAS(bits, t), "token %d: mask %d, matcher %d", t, DS_MASK_HAS(bits, t), want);
        seen += want;
    }
    FUZZ_CHECK(seen == count, "mask count %d, tokens %d", count, seen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!gr_tok) gr_init();
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    if (glen > 4096) return 0;
    ds_grammar *g = NULL;
    ds_err e = {0};
    if (ds_grammar_parse((const char *)data, glen, &g, &e) != DS_OK) {
        FUZZ_CHECK(e.msg[0] != '\0', "a parse failure without a message");
        return 0;
    }
    ds_matcher *m = NULL;
    if (ds_matcher_new(g, &m, &e) != DS_OK) FUZZ_FAIL("matcher: %s", e.msg);
    int n = ds_tokenizer_n_tokens(gr_tok);
    uint32_t *bits = malloc(DS_MASK_WORDS(n) * sizeof *bits);
    if (!bits) FUZZ_FAIL("oom");
    gr_check_mask(m, bits, n);
    const uint8_t *p = nul ? nul + 1 : data + size, *end = data + size;
    for (int step = 0; p < end && step < 64; step++) {
        size_t len = (size_t)(*p % 4) + 1;
        if (len > (size_t)(end - p)) len = (size_t)(end - p);
        int before = ds_matcher_steps(m);
        if (!ds_matcher_accept(m, (const char *)p, len)) {
            FUZZ_CHECK(ds_matcher_steps(m) == before, "a refused step changed the state");
        } else if (step % 4 == 3) {
            ds_matcher_rollback(m, 1);
            FUZZ_CHECK(ds_matcher_accept(m, (const char *)p, len), "a rolled-back step is refused again");
        }
        if (step % 8 == 0) gr_check_mask(m, bits, n);
        p += len;
    }
    gr_check_mask(m, bits, n);
    free(bits);
    ds_matcher_free(m);
    ds_grammar_unref(g);
    return 0;
}
