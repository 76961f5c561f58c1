/* model_make_mtp.c - make-model's --mtp-agree knob: random weights on which
 * the MTP head agrees with the main model a chosen fraction of the time, so
 * that speculative decoding can be tested and measured at any acceptance.
 *
 * The main model is made to compute, nearly exactly, a fixed random function
 * of the current token: f(x) = argmax head(norm(E[x] + F(norm(E[x])))), where
 * F is layer 0's feed-forward block (its down projection scaled up so that F
 * dominates the residual) and every other block's output projection is scaled
 * down (by 1/100, or 1/10000 for the mixers that precede F). F matters for two reasons. Without it, a model with tied
 * embeddings scores x itself highest (E[x].E[x] dwarfs every other product),
 * so greedy generation repeats one token forever, and whether the head agrees
 * on that single token decides the whole run; and a symmetric score (any
 * E^T D E) would still end every greedy chain in a two-token cycle. With F
 * the scores are asymmetric and the chain wanders like a random function's
 * (hundreds of distinct tokens on a real vocabulary), so agreement on a
 * fraction of tokens becomes acceptance on that fraction of a generation.
 *
 * The MTP head is made to compute g(x) from the token it is fed, through its
 * own decoder layer, which is given layer 0's feed-forward weights:
 * eh_proj = [I + beta R | 0] and unit pre-norms give c = (I + beta R) norm(E[x]),
 * its attention output is scaled down like the model's, its FFN adds
 * F(norm(c)) and its final norm is the model's, so g(x) = f(x) at beta = 0
 * (up to the 1% share of E[x] and rounding); as beta grows, F's input turns
 * away from norm(E[x]) and g agrees less. beta is found by bisection so that
 * f and g agree on the wanted fraction of the tokens of a greedy chain
 * x, f(x), f(f(x)), ..., which is what generation visits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loading/model_make.h"

#define DAMP 0.01f      /* output projections of every block but layer 0's FFN */
#define DAMP_IN 1e-4f   /* the mixers before F's input, in layer 0 and the MTP block: F's input is
                         * a unit-sized residual, where 1% would turn it enough to flip close calls */
#define FFN_GAIN 200.0f /* layer 0's FFN output: about 100x the embedding's size */

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* the name after "blk.N." (NULL for globals) */
static const char *block_suffix(const char *name) {
    if (strncmp(name, "blk.", 4) != 0) return NULL;
    const char *p = strchr(name + 4, '.');
    return p ? p + 1 : NULL;
}

/* Tensors of the feed-forward half of a block, its norm included: the MTP
 * block takes layer 0's. */
static int ffn_part(const ds_model_config *c, const char *suffix) {
    return suffix && (strncmp(suffix, "ffn_", 4) == 0 ||
                      strcmp(suffix, c->arch == DS_ARCH_QWEN3 ? "ffn_norm.weight" : "post_attention_norm.weight") == 0);
}

/* The projection whose output is F: the shared expert's in MoE (routed experts
 * stay damped, so F needs no routing), the FFN's down projection otherwise. */
static int ffn_out(const ds_model_config *c, const char *suffix) {
    return strcmp(suffix, c->arch == DS_ARCH_QWEN35MOE ? "ffn_down_shexp.weight" : "ffn_down.weight") == 0;
}

/* the (I + beta R) perturbation, deterministic from the seed */
static float perturb(uint64_t seed, int64_t i, int64_t j, int64_t H) {
    uint64_t z = seed ^ 0xA24BAED4963EE407ull ^ ((uint64_t)i * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)j * 0xC2B2AE3D27D4EB4Full);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    double u = (double)(z >> 11) * (2.0 / 9007199254740992.0) - 1.0;
    return (float)(u * 1.7320508 / sqrt((double)H));
}

void ds_make_values_ex(const ds_model_config *c, const ds_tensor_spec *s, const ds_make_options *o, float beta,
                       int expert, float *dst) {
    const char *suffix = block_suffix(s->name);
    int mtp = s->layer >= c->n_layer && o->mtp_agree_set;
    if (mtp && ffn_part(c, suffix)) { /* layer 0's values, with layer 0's adjustments */
        ds_tensor_spec l0 = *s;
        snprintf(l0.name, sizeof l0.name, "blk.0.%s", suffix);
        l0.layer = 0;
        ds_make_values_ex(c, &l0, o, beta, expert, dst);
        return;
    }
    ds_make_values(c, s, o->seed, o->scale, expert, dst);
    if (!o->mtp_agree_set) return;
    int64_t n = s->ne[0] * s->ne[1], H = c->n_embd;
    if (s->layer >= 0 && suffix) {
        int mixer = ends_with(suffix, "attn_output.weight") || ends_with(suffix, "ssm_out.weight");
        float mul = s->layer == 0 && ffn_out(c, suffix)                    ? FFN_GAIN
                  : mixer && (s->layer == 0 || s->layer >= c->n_layer)     ? DAMP_IN
                  : mixer || strncmp(suffix, "ffn_down", 8) == 0           ? DAMP
                                                                           : 1.0f;
        if (mul != 1.0f)
            for (int64_t i = 0; i < n; i++) dst[i] *= mul;
    }
    if (!mtp) return;
    int zero_centred = c->arch != DS_ARCH_QWEN3;
    if (ends_with(s->name, "nextn.enorm.weight") || ends_with(s->name, "nextn.hnorm.weight")) {
        for (int64_t i = 0; i < n; i++) dst[i] = zero_centred ? 0.0f : 1.0f;
    } else if (ends_with(s->name, "nextn.shared_head_norm.weight")) {
        ds_tensor_spec on = {.name = "output_norm.weight", .n_dims = 1, .ne = {H, 1, 1, 1}, .kind = DS_TK_NORM, .layer = -1};
        ds_make_values(c, &on, o->seed, o->scale, 0, dst);
    } else if (ends_with(s->name, "nextn.eh_proj.weight")) { /* [H][2H]: embedding half first */
        for (int64_t i = 0; i < H; i++)
            for (int64_t j = 0; j < 2 * H; j++)
                dst[i * 2 * H + j] = j < H ? (i == j ? 1.0f : 0.0f) + beta * perturb(o->seed, i, j, H) : 0.0f;
    }
}

/* --- calibration: f and g in F32 on the generated (unquantised) weights --- */

typedef struct {
    const ds_model_config *c;
    const ds_make_options *o;
    int64_t H, V, Fw;
    float *E, *O;             /* embedding, output head (O == E when tied) */
    float *out_norm, *ffn_norm; /* multipliers */
    float *gate, *up, *down;  /* layer 0's F: [Fw][H], [Fw][H], [H][Fw] */
    float *sh_gate;           /* MoE: the shared expert's sigmoid gate [H], else NULL */
    float *a, *b;             /* scratch [Fw] */
} calib;

typedef struct {
    const char *name;
    ds_tensor_spec spec;
    int found;
} spec_find;

static void find_cb(const ds_tensor_spec *s, void *ctx) {
    spec_find *f = ctx;
    if (!f->found && strcmp(s->name, f->name) == 0) f->spec = *s, f->found = 1;
}

/* the values of tensor `name` as the file will hold them (before GGUF form); NULL if absent or out of memory */
static float *values_of(calib *k, const char *name, int norm) {
    spec_find f = {.name = name};
    ds_model_for_each_spec(k->c, find_cb, &f);
    if (!f.found) return NULL;
    int64_t n = f.spec.ne[0] * f.spec.ne[1];
    float *p = malloc((size_t)n * sizeof *p);
    if (!p) return NULL;
    ds_make_values_ex(k->c, &f.spec, k->o, 0.0f, 0, p);
    if (norm && k->c->arch != DS_ARCH_QWEN3)
        for (int64_t i = 0; i < n; i++) p[i] += 1.0f;
    return p;
}

static float dotf(const float *a, const float *b, int64_t n) {
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) acc[l] += a[i + l] * b[i + l];
    float s = 0.0f;
    for (int l = 0; l < 16; l++) s += acc[l];
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* y = norm(x) * w (w NULL: 1) */
static void norm_mul(float *y, const float *x, const float *w, int64_t H, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < H; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / (double)H + eps));
    for (int64_t i = 0; i < H; i++) y[i] = x[i] * r * (w ? w[i] : 1.0f);
}

/* h = norm(r + F(norm(r) * ffn_norm)) * out_norm, for a residual r */
static void final_hidden(calib *k, const float *r, float *u, float *h) {
    int64_t H = k->H, Fw = k->Fw;
    norm_mul(u, r, k->ffn_norm, H, k->c->rms_eps);
    for (int64_t j = 0; j < Fw; j++) {
        float g = dotf(k->gate + j * H, u, H);
        k->a[j] = g / (1.0f + expf(-g)) * dotf(k->up + j * H, u, H);
    }
    float sg = k->sh_gate ? 1.0f / (1.0f + expf(-dotf(k->sh_gate, u, H))) : 1.0f;
    for (int64_t i = 0; i < H; i++) u[i] = r[i] + sg * dotf(k->down + i * Fw, k->a, Fw);
    norm_mul(h, u, k->out_norm, H, k->c->rms_eps);
}

static int32_t argmax_head(const calib *k, const float *h) {
    int32_t best = 0;
    float bv = -INFINITY;
    for (int64_t v = 0; v < k->V; v++) {
        float d = dotf(k->O + v * k->H, h, k->H);
        if (d > bv) bv = d, best = (int32_t)v;
    }
    return best;
}

/* whether want is the argmax of head(h): stops at the first row that beats it */
static int is_argmax(const calib *k, const float *h, int32_t want) {
    float w = dotf(k->O + (int64_t)want * k->H, h, k->H);
    for (int64_t v = 0; v < k->V; v++) {
        if (v == want) continue;
        float d = dotf(k->O + v * k->H, h, k->H);
        if (d > w || (d == w && v < want)) return 0;
    }
    return 1;
}

ds_status ds_make_mtp_calibrate(const ds_model_config *c, const ds_make_options *o, float *beta_out, float *measured,
                                ds_err *e) {
    *beta_out = 0.0f;
    *measured = 1.0f;
    if (!o->mtp_agree_set) return DS_OK;
    if (c->n_mtp == 0) return ds_fail(e, DS_EINVAL, "--mtp-agree needs a model with an MTP head");
    int moe = c->arch == DS_ARCH_QWEN35MOE;
    calib k = {.c = c, .o = o, .H = c->n_embd, .V = c->n_vocab, .Fw = moe ? c->n_ff_shexp : c->n_ff};
    int64_t H = k.H, V = k.V;
    ds_tensor_spec emb = {.name = "token_embd.weight", .n_dims = 2, .ne = {H, V, 1, 1}, .kind = DS_TK_EMBED, .layer = -1};
    k.E = malloc((size_t)(V * H) * sizeof *k.E);
    if (k.E) ds_make_values(c, &emb, o->seed, o->scale, 0, k.E);
    k.O = c->tied_embeddings ? k.E : values_of(&k, "output.weight", 0);
    k.out_norm = values_of(&k, "output_norm.weight", 1);
    k.ffn_norm = values_of(&k, c->arch == DS_ARCH_QWEN3 ? "blk.0.ffn_norm.weight" : "blk.0.post_attention_norm.weight", 1);
    k.gate = values_of(&k, moe ? "blk.0.ffn_gate_shexp.weight" : "blk.0.ffn_gate.weight", 0);
    k.up = values_of(&k, moe ? "blk.0.ffn_up_shexp.weight" : "blk.0.ffn_up.weight", 0);
    k.down = values_of(&k, moe ? "blk.0.ffn_down_shexp.weight" : "blk.0.ffn_down.weight", 0);
    k.sh_gate = moe ? values_of(&k, "blk.0.ffn_gate_inp_shexp.weight", 0) : NULL;
    k.a = malloc((size_t)k.Fw * sizeof *k.a);
    float *r = malloc((size_t)H * sizeof *r), *u = malloc((size_t)H * sizeof *u), *h = malloc((size_t)H * sizeof *h);
    ds_status st = DS_OK;
    if (!k.E || !k.O || !k.out_norm || !k.ffn_norm || !k.gate || !k.up || !k.down || (moe && !k.sh_gate) || !k.a || !r ||
        !u || !h) {
        st = ds_fail(e, DS_ENOMEM, "--mtp-agree: out of memory calibrating the MTP head");
        goto done;
    }
    enum { N_SAMPLE_MAX = 96 };
    /* every probe costs N_SAMPLE x vocab x hidden: real vocabularies get a smaller sample */
    int N_SAMPLE = V * H > ((int64_t)1 << 24) ? 40 : N_SAMPLE_MAX;
    int32_t want[N_SAMPLE_MAX], xs[N_SAMPLE_MAX];
    /* the greedy chain from a prompt-like token, restarted where it closes a cycle */
    uint64_t rs = o->seed * 2654435761u + 17;
    for (int i = 0; i < N_SAMPLE; i++) {
        int fresh = i == 0;
        for (int j = 0; !fresh && j < i; j++) fresh = xs[j] == want[i - 1];
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        xs[i] = fresh ? (int32_t)((rs >> 33) % (uint64_t)(V < 1000 ? V : 1000)) : want[i - 1];
        final_hidden(&k, k.E + (int64_t)xs[i] * H, u, h);
        want[i] = argmax_head(&k, h);
    }
    /* agreement falls from about 1 at beta = 0 towards chance as beta grows: bisect on it */
    float lo = 0.0f, hi = 64.0f, best = 0.0f, best_rate = 1.0f;
    for (int it = 0; it < (N_SAMPLE < N_SAMPLE_MAX ? 9 : 14); it++) {
        float beta = it == 0 ? 0.0f : 0.5f * (lo + hi);
        int agree = 0;
        for (int i = 0; i < N_SAMPLE; i++) {
            norm_mul(u, k.E + (int64_t)xs[i] * H, NULL, H, c->rms_eps);
            for (int64_t p = 0; p < H; p++) {
                double acc = u[p];
                for (int64_t q = 0; q < H; q++) acc += beta * perturb(o->seed, p, q, H) * u[q];
                r[p] = (float)acc;
            }
            final_hidden(&k, r, u, h);
            agree += is_argmax(&k, h, want[i]);
        }
        float rate = (float)agree / N_SAMPLE;
        if (fabsf(rate - o->mtp_agree) < fabsf(best_rate - o->mtp_agree)) best = beta, best_rate = rate;
        if (it == 0) {
            if (rate <= o->mtp_agree) break;
            continue;
        }
        if (rate > o->mtp_agree) lo = beta;
        else hi = beta;
    }
    *beta_out = best;
    *measured = best_rate;
done:
    if (k.O != k.E) free(k.O);
    free(k.E);
    free(k.out_norm), free(k.ffn_norm), free(k.gate), free(k.up), free(k.down), free(k.sh_gate), free(k.a);
    free(r), free(u), free(h);
    return st;
}
