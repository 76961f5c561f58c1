/* grammar.c - see grammar.h. */
#include "grammar/grammar.h"

ds_status ds_grammar_parse(const char *gbnf, size_t len, ds_grammar **out, ds_err *e) {
    (void)gbnf, (void)len;
    *out = NULL;
    return ds_fail(e, DS_EUNSUPPORTED, "grammar: not built yet");
}
void ds_grammar_ref(ds_grammar *g) { (void)g; }
void ds_grammar_unref(ds_grammar *g) { (void)g; }
size_t ds_grammar_bytes(const ds_grammar *g) { (void)g; return 0; }
