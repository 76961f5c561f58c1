/* mtp_file.c - the MTP head from a file of its own.
 *
 * llama.cpp's converter can split a Qwen3.5 checkpoint in two: run with
 * --no-mtp it writes the main model with block_count = the decoder layers and
 * no nextn_predict_layers key; run with --mtp it writes the head alone, as a
 * GGUF of the same architecture whose metadata describes the whole model
 * (block_count = layers + 1, nextn_predict_layers = 1, the tokenizer) and
 * whose tensors are the MTP block blk.<layers>.* plus the shared token_embd,
 * output_norm and output. The shared tensors are the main file's to use; only
 * the block is taken from the head file, after checking that the two were
 * made from the same model: a head trained for another model would load and
 * draft nonsense, and speculation would only ever get slower, silently. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "loading/model_file_int.h"

typedef struct {
    ds_model_file *m, *h;
    ds_err *e;
    ds_status status;
} take_ctx;

static void take_one(const ds_tensor_spec *s, void *arg) {
    take_ctx *c = arg;
    if (c->status || s->layer < c->m->cfg.n_layer) return;
    const ds_tensor *t = ds_model_tensor(c->h, s->name);
    if (t) c->status = ds_model_add_tensor(c->m, t, c->e);
}

/* The sizes the MTP block's tensors are made of, with what a user calls them. */
static int differs(const ds_model_config *a, const ds_model_config *b, char *what, size_t n) {
    const struct { const char *name; int x, y; } f[] = {
        {"hidden size", a->n_embd, b->n_embd},
        {"vocabulary (token_embd rows)", a->n_vocab, b->n_vocab},
        {"decoder layer count", a->n_layer, b->n_layer},
        {"attention heads", a->n_head, b->n_head},
        {"key/value heads", a->n_head_kv, b->n_head_kv},
        {"attention head size", a->head_dim, b->head_dim},
        {"feed-forward size", a->n_ff, b->n_ff},
        {"expert count", a->n_expert, b->n_expert},
        {"experts used", a->n_expert_used, b->n_expert_used},
        {"expert feed-forward size", a->n_ff_exp, b->n_ff_exp},
        {"shared expert size", a->n_ff_shexp, b->n_ff_shexp},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].x != f[i].y) {
            snprintf(what, n, "%s %d, the head's model has %d", f[i].name, f[i].x, f[i].y);
            return 1;
        }
    return 0;
}

ds_status ds_model_attach_mtp(ds_model_file *m, const char *path, ds_err *e) {
    if (m->cfg.n_mtp)
        return ds_fail(e, DS_EINVAL, "%s already has an MTP head; it cannot take another from %s (use a main file "
                       "converted without one)", m->path, path);
    ds_model_file *h = calloc(1, sizeof *h);
    if (!h) return ds_fail(e, DS_ENOMEM, "%s: out of memory", path);
    m->mtp = h; /* closed with m, also on failure */
    h->path = strdup(path);
    h->format = DS_FORMAT_GGUF;
    h->cfg.pad_id = -1;
    h->is_mtp_file = 1;
    if (!h->path) return ds_fail(e, DS_ENOMEM, "%s: out of memory", path);
    struct stat st;
    if (stat(path, &st) != 0) return ds_fail(e, DS_ENOTFOUND, "%s: no such file (the MTP head for %s)", path, m->path);
    if (S_ISDIR(st.st_mode))
        return ds_fail(e, DS_EUNSUPPORTED, "%s: an MTP head is read from a GGUF file, not a directory (for %s)", path,
                       m->path);
    ds_status s = ds_model_load_gguf(h, e);
    if (s) {
        ds_err_prefix(e, "MTP head for %s", m->path);
        return s;
    }
    const ds_model_config *mc = &m->cfg, *hc = &h->cfg;
    if (hc->n_mtp == 0)
        return ds_fail(e, DS_EINVAL, "%s has no MTP head (%s.nextn_predict_layers is absent or 0), so it cannot be "
                       "the MTP head of %s", path, ds_arch_name(hc->arch), m->path);
    char what[160];
    if (hc->arch != mc->arch)
        return ds_fail(e, DS_EINVAL, "%s and its MTP head %s do not belong together: architecture %s, the head's is %s",
                       m->path, path, ds_arch_name(mc->arch), ds_arch_name(hc->arch));
    if (differs(mc, hc, what, sizeof what))
        return ds_fail(e, DS_EINVAL, "%s and its MTP head %s do not belong together: %s", m->path, path, what);
    /* the head's block is checked against the main model's config, under the head file's name */
    int n_mtp = hc->n_mtp;
    h->cfg = *mc;
    h->cfg.n_mtp = n_mtp;
    if ((s = ds_model_validate(h, 1, e))) {
        ds_err_prefix(e, "MTP head for %s", m->path);
        return s;
    }
    m->cfg.n_mtp = n_mtp;
    take_ctx c = {.m = m, .h = h, .e = e};
    ds_model_for_each_spec(&m->cfg, take_one, &c);
    if (c.status) m->cfg.n_mtp = 0;
    return c.status;
}
