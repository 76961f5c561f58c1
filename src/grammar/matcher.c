/* matcher.c - see matcher.h. */
#include "grammar/matcher.h"

ds_status ds_matcher_new(ds_grammar *g, ds_matcher **out, ds_err *e) {
    (void)g;
    *out = NULL;
    return ds_fail(e, DS_EUNSUPPORTED, "matcher: not built yet");
}
void ds_matcher_free(ds_matcher *m) { (void)m; }
int ds_matcher_accept(ds_matcher *m, const char *bytes, size_t len) { (void)m, (void)bytes, (void)len; return 0; }
int ds_matcher_steps(const ds_matcher *m) { (void)m; return 0; }
void ds_matcher_rollback(ds_matcher *m, int n_steps) { (void)m, (void)n_steps; }
int ds_matcher_can_end(const ds_matcher *m) { (void)m; return 0; }
int ds_matcher_must_end(const ds_matcher *m) { (void)m; return 0; }
int ds_matcher_fill_mask(ds_matcher *m, const ds_vocab_index *v, uint32_t *bits) { (void)m, (void)v, (void)bits; return 0; }
