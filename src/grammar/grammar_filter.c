/* grammar_filter.c - see grammar_filter.h. */
#include "grammar/grammar_filter.h"

ds_status ds_grammar_filter_new(const ds_grammar_filter_params *p, ds_grammar_filter **out, ds_err *e) {
    (void)p;
    *out = NULL;
    return ds_fail(e, DS_EUNSUPPORTED, "grammar filter: not built yet");
}
void ds_grammar_filter_free(ds_grammar_filter *f) { (void)f; }
ds_filter_result ds_grammar_filter_fn(void *user, const int32_t *generated, int n_generated, uint32_t *allowed,
                                      int n_vocab) {
    (void)user, (void)generated, (void)n_generated, (void)allowed, (void)n_vocab;
    return DS_FILTER_DONE;
}
int ds_grammar_filter_complete(const ds_grammar_filter *f) { (void)f; return 0; }
