/* cmd_info.c - `deltaserve info -m PATH`: what a model file holds. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli_model.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "loading/model_file.h"
#include "server/server.h"

static void human(char *buf, size_t n, double v, const char *unit) {
    const char *p[] = {"", "K", "M", "G", "T"};
    int i = 0;
    while (v >= 1000 && i < 4) { v /= 1000; i++; }
    snprintf(buf, n, "%.2f %s%s", v, p[i], unit);
}

/* What `serve` may hold at its default budgets, for sizing a container's memory: every pool is
 * allocated at start and filled as the prefix cache keeps what requests computed, so under traffic
 * the resident size climbs to this. A bound, not a measure: each pool is counted at its budget
 * (the engine may cut the state pools to fewer slots), the weights as the file holds them (the
 * 2- and 3-bit types are repacked wider at load). The MTP head's KV pool has no budget of its
 * own: it holds one F32 attention layer for every page of the main pool. */
static void print_serve_memory(const ds_model_config *c, const ds_model_stats *st, int has_vision) {
    ds_engine_params p;
    ds_engine_defaults(&p);
    const double MiB = (double)(1 << 20);
    int attn_layers = st->n_full_layers ? st->n_full_layers : 1;
    size_t layer_page = (size_t)p.page_size * (size_t)c->n_head_kv * (size_t)c->head_dim * 2 * sizeof(float);
    size_t n_pages = p.kv_bytes / (layer_page * (size_t)attn_layers);
    int speculates = c->n_mtp && p.spec_tokens > 0 && st->n_gdn_layers > 0;
    size_t mtp_kv = speculates ? n_pages * layer_page : 0;
    size_t states = st->n_gdn_layers ? p.state_bytes + (p.prefix_cache ? p.cache_state_bytes : 0) : 0;
    size_t records = speculates ? p.spec_state_bytes : 0;
    /* logits of the step and of its MTP drafts, three rows of hidden state per step token */
    size_t step = (size_t)p.step_tokens * ((size_t)c->n_vocab * 2 + (size_t)c->n_embd * 3) * sizeof(float);
    size_t vision = has_vision ? DS_DEFAULT_VISION_BYTES : 0;
    double total = (double)st->weight_bytes + (double)(p.kv_bytes + mtp_kv + states + records + step + vision);
    printf("serve memory   at most %.0f MiB at serve's default budgets: weights %.1f + KV %.0f (--kv-mb)", total / MiB,
           (double)st->weight_bytes / MiB, (double)p.kv_bytes / MiB);
    if (mtp_kv) printf(" + MTP KV %.0f", (double)mtp_kv / MiB);
    if (states) printf(" + DeltaNet %.0f (--state-mb, --cache-state-mb)", (double)states / MiB);
    if (records) printf(" + drafts %.0f (--spec-state-mb)", (double)records / MiB);
    if (vision) printf(" + images %.0f (--vision-memory)", (double)vision / MiB);
    printf(" + step %.1f MiB\n", (double)step / MiB);
}

static void print_info(const ds_model_file *m, int has_vision) {
    const ds_model_config *c = ds_model_config_of(m);
    ds_model_stats st;
    ds_model_compute_stats(m, &st);
    char a[32], b[32];
    static const char *const kind[DS_ARCH_COUNT] = {"full attention, dense", "Gated DeltaNet + gated attention, dense",
                                                    "Gated DeltaNet + gated attention, mixture of experts"};
    printf("model          %s (%s)\n", ds_model_path(m), ds_model_format(m) == DS_FORMAT_GGUF ? "GGUF" : "safetensors");
    printf("architecture   %s (%s)\n", ds_arch_name(c->arch), kind[c->arch]);
    printf("layers         %d: %d Gated DeltaNet, %d full attention%s\n", c->n_layer, st.n_gdn_layers,
           st.n_full_layers, c->n_mtp ? ", + 1 MTP block" : "");
    printf("layer kinds    ");
    for (int i = 0; i < c->n_layer; i++) putchar(c->layer_full[i] ? 'A' : 'D');
    printf("%s   (D = Gated DeltaNet, A = attention)\n", c->n_mtp ? "+M" : "");
    printf("hidden         %d, vocabulary %d rows, trained context %d\n", c->n_embd, c->n_vocab, c->n_ctx_train);
    printf("attention      %d query heads, %d kv heads, head dim %d, rope %d dims theta %g%s\n", c->n_head,
           c->n_head_kv, c->head_dim, c->rope_dim, (double)c->rope_theta, c->attn_output_gate ? ", sigmoid output gate" : "");
    if (c->yarn_factor > 0)
        printf("yarn           factor %g over %d positions (beta %g/%g, attention factor %.4f): context %d\n",
               (double)c->yarn_factor, c->yarn_orig_ctx, (double)c->yarn_beta_fast, (double)c->yarn_beta_slow,
               (double)c->yarn_mscale, ds_model_context_limit(c));
    if (st.n_gdn_layers)
        printf("deltanet       %d key heads x %d, %d value heads x %d (%s order), conv kernel %d\n", c->lin_k_heads,
               c->lin_k_dim, c->lin_v_heads, c->lin_v_dim, c->v_heads_tiled ? "tiled" : "grouped", c->conv_kernel);
    if (c->arch == DS_ARCH_QWEN35MOE)
        printf("ffn            MoE: %d experts, %d per token, width %d, shared expert %d\n", c->n_expert,
               c->n_expert_used, c->n_ff_exp, c->n_ff_shexp);
    else
        printf("ffn            SwiGLU, width %d\n", c->n_ff);
    /* tensor types with counts */
    int counts[DS_DTYPE_COUNT] = {0};
    for (int i = 0; i < ds_model_n_tensors(m); i++) counts[ds_model_tensor_at(m, i)->type]++;
    printf("tensors        %d:", ds_model_n_tensors(m));
    for (int t = 0; t < DS_DTYPE_COUNT; t++)
        if (counts[t]) printf(" %s x%d", ds_dtype_get((ds_dtype)t)->name, counts[t]);
    printf("\n");
    human(a, sizeof a, (double)st.n_params, "");
    human(b, sizeof b, (double)st.n_params_active, "");
    printf("parameters     %lld total (%s), %lld active per token (%s)", (long long)st.n_params, a,
           (long long)st.n_params_active, b);
    if (st.n_params_mtp) printf(", MTP %lld", (long long)st.n_params_mtp);
    printf("\n");
    human(a, sizeof a, (double)st.weight_bytes, "B");
    printf("weights        %lld bytes (%s)\n", (long long)st.weight_bytes, a);
    printf("KV cache       %lld bytes per token (%d attention layer%s, 16-bit K and V)\n",
           (long long)st.kv_bytes_per_token, st.n_full_layers, st.n_full_layers == 1 ? "" : "s");
    if (st.n_gdn_layers) {
        human(a, sizeof a, (double)st.gdn_state_bytes_per_seq, "B");
        printf("DeltaNet state %lld bytes per sequence (%s: F32 recurrent state + 16-bit conv window, %d layers)\n",
               (long long)st.gdn_state_bytes_per_seq, a, st.n_gdn_layers);
    }
    print_serve_memory(c, &st, has_vision);
    if (ds_model_mtp_path(m) && strcmp(ds_model_mtp_path(m), ds_model_path(m)) != 0)
        printf("MTP head       from %s\n", ds_model_mtp_path(m));
    if (c->n_mtp) {
        ds_engine_params p;
        ds_engine_defaults(&p);
        int dv = p.spec_vocab > 0 && p.spec_vocab < c->n_vocab ? p.spec_vocab : c->n_vocab;
        printf("MTP drafts     over token ids 0..%d of %d (serve's default --spec-vocab; verified over all)\n", dv - 1,
               c->n_vocab);
    }
    printf("stop tokens    ");
    for (int i = 0; i < c->n_eos; i++) printf("%s%d", i ? ", " : "", c->eos_ids[i]);
    printf("%s\n", c->n_eos ? "" : "none");
    const char *tmpl = ds_model_chat_template(m);
    printf("chat template  %s", tmpl ? "yes" : "none");
    if (tmpl) printf(" (%zu bytes)", strlen(tmpl));
    printf("\n");
}

typedef struct {
    const ds_vision_file *v;
    int64_t params;
} vparams;

static void count_vision(const ds_tensor_spec *s, void *arg) {
    vparams *c = arg;
    if (ds_vision_tensor(c->v, s->name)) c->params += s->ne[0] * s->ne[1] * s->ne[2] * s->ne[3];
}

static void print_vision(const ds_vision_file *v) {
    const ds_vision_config *vc = ds_vision_config_of(v);
    vparams c = {v, 0};
    ds_vision_for_each_spec(vc, count_vision, &c);
    int64_t bytes = 0;
    for (int i = 0; i < ds_vision_n_tensors(v); i++) bytes += (int64_t)ds_tensor_bytes(ds_vision_tensor_at(v, i));
    char a[32], b[32];
    human(a, sizeof a, (double)c.params, "");
    human(b, sizeof b, (double)bytes, "B");
    int side = 1;
    while (side * side < vc->n_pos) side++;
    printf("vision tower   %s\n", ds_vision_path(v));
    printf("  blocks       %d, width %d, %d heads of %d, FFN %d (GELU)\n", vc->n_layer, vc->n_embd, vc->n_head,
           vc->n_embd / vc->n_head, vc->n_ff);
    printf("  patches      %dx%d pixels, %d frames, merged %dx%d into %d-wide tokens; positions %dx%d\n",
           vc->patch_size, vc->patch_size, vc->temporal_patch, vc->merge, vc->merge, vc->out_embd, side, side);
    printf("  deepstack    ");
    for (int k = 0; k < vc->n_deepstack; k++) printf("%s%d", k ? ", " : "after blocks ", vc->deepstack_layers[k]);
    printf("%s\n", vc->n_deepstack ? "" : "none");
    printf("  images       %lld..%lld pixels, mean %g/%g/%g, std %g/%g/%g\n", (long long)vc->min_pixels,
           (long long)vc->max_pixels, (double)vc->image_mean[0], (double)vc->image_mean[1], (double)vc->image_mean[2],
           (double)vc->image_std[0], (double)vc->image_std[1], (double)vc->image_std[2]);
    printf("  parameters   %lld (%s), %s in memory\n", (long long)c.params, a, b);
}

int ds_cmd_info(int argc, char **argv) {
    const char *path = NULL, *v;
    ds_load_options lo = {0};
    int r;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: deltaserve info -m PATH [--mtp-model PATH] [--fp8-as T] [--mmproj PATH] [--no-mmproj]   (a "
                   "GGUF file or a Hugging Face directory)\n" DS_CLI_LOAD_USAGE);
            return 0;
        } else if (ds_cli_load_flag(argv[i], &lo)) {
            continue;
        } else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            if (!(path = ds_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(argv[i], "--mtp-model") || !strcmp(argv[i], "--fp8-as") || !strcmp(argv[i], "--mmproj")) {
            const char *a = argv[i];
            if (!(v = ds_arg_value(argc, argv, &i))) return 2;
            if ((r = ds_cli_load_arg("info", a, v, &lo)) < 0) return 2;
        } else {
            fprintf(stderr, "deltaserve info: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "deltaserve info: -m PATH is required\n");
        return 2;
    }
    ds_model_file *m;
    ds_err e = {0};
    if (ds_model_open_ex(path, &lo, &m, &e) != DS_OK) {
        fprintf(stderr, "deltaserve info: %s\n", e.msg);
        return 1;
    }
    ds_vision_file *vf;
    if (ds_cli_open_vision("info", path, m, &lo, &vf)) {
        ds_model_close(m);
        return 1;
    }
    print_info(m, vf != NULL);
    if (vf) print_vision(vf);
    ds_vision_close(vf);
    ds_model_close(m);
    return 0;
}
