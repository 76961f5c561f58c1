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

#include "kernels/backend.h"
#include "kernels/dtype.h"
#include "kernels/ops.h"
#include "model/model_make.h"

/* --vocab-skew: a random model picks its argmax uniformly over the vocabulary,
 * a real one mostly among the frequent tokens, which a BPE vocabulary ordered
 * by merge rank puts at low ids. Scaling output-head row v by
 * (1 + v/1024)^-a makes the largest of the (roughly Gaussian) logits fall on
 * low ids that often: at a = 0.11 on a 248k vocabulary, simulated on
 * independent Gaussian logits, about 65% of the choices fall below id 4096,
 * 90% below 16384, 96% below 32768, close to the share of real English text
 * and C code below those ids with Qwen's tokenizer (README, "Speculation over
 * a vocabulary subset"). The skew is applied to the head (the embedding when
 * tied, whose rows the model reads normed, so the input side barely moves). */
static int is_head(const ds_model_config *c, const ds_tensor_spec *s) {
    return strcmp(s->name, "output.weight") == 0 || (c->tied_embeddings && strcmp(s->name, "token_embd.weight") == 0);
}

static void skew_rows(const ds_tensor_spec *s, float a, float *dst) {
    for (int64_t v = 0; v < s->ne[1]; v++) {
        float f = powf(1.0f + (float)v / 1024.0f, -a);
        for (int64_t i = 0; i < s->ne[0]; i++) dst[v * s->ne[0] + i] *= f;
    }
}

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
    if (o->vocab_skew > 0.0f && is_head(c, s)) skew_rows(s, o->vocab_skew, dst);
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

/* --- calibration: f and g on the generated weights, products by the CPU
 * backend at the file's types (so the head rounds as the model's will) --- */

enum { CHAINS = 8, CHAIN_LEN = 20, N_SAMPLE = CHAINS * CHAIN_LEN };

typedef struct {
    const ds_model_config *c;
    const ds_make_options *o;
    ds_backend *be;
    int64_t H, V, Fw;
    float *E;                  /* embedding, F32 */
    float *out_norm, *ffn_norm; /* multipliers */
    float *sh_gate;            /* MoE: the shared expert's sigmoid gate [H], else NULL */
    ds_bweight *head, *gate, *up, *down;
    uint8_t *blocks[4];        /* the matrices in file form, read by the backend */
    float *u, *g, *a, *y, *logits; /* scratch for N_SAMPLE rows */
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

static int find_spec(const ds_model_config *c, const char *name, ds_tensor_spec *out) {
    spec_find f = {.name = name};
    ds_model_for_each_spec(c, find_cb, &f);
    *out = f.spec;
    return f.found;
}

/* the values of tensor `name` as the file will hold them (before GGUF form); NULL if absent or out of memory */
static float *values_of(calib *k, const char *name, int norm) {
    ds_tensor_spec s;
    if (!find_spec(k->c, name, &s)) return NULL;
    int64_t n = s.ne[0] * s.ne[1];
    float *p = malloc((size_t)n * sizeof *p);
    if (!p) return NULL;
    ds_make_values_ex(k->c, &s, k->o, 0.0f, 0, p);
    if (norm && k->c->arch != DS_ARCH_QWEN3)
        for (int64_t i = 0; i < n; i++) p[i] += 1.0f;
    return p;
}

/* Uploads values [rows][cols] rounded to the type the file gives tensor `s`. */
static ds_status upload(calib *k, const ds_tensor_spec *s, const float *vals, int64_t rows, int64_t cols, int slot,
                        ds_bweight **out, ds_err *e) {
    ds_dtype t;
    ds_status st = ds_make_tensor_type(k->c, s, k->o, &t, e);
    if (st) return st;
    size_t rb = ds_dtype_row_bytes(t, cols);
    k->blocks[slot] = malloc(rb * (size_t)rows);
    if (!k->blocks[slot]) return ds_fail(e, DS_ENOMEM, "--mtp-agree: out of memory calibrating the MTP head");
    for (int64_t r = 0; r < rows; r++) ds_quantize_row(t, vals + r * cols, k->blocks[slot] + (size_t)r * rb, cols);
    ds_mat m = {.type = t, .data = k->blocks[slot], .rows = rows, .cols = cols};
    return ds_be_weight_new(k->be, &m, DS_W_MATMUL, out, e);
}

/* y = norm(x) * w (w NULL: 1) */
static void norm_mul(float *y, const float *x, const float *w, int64_t H, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < H; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / (double)H + eps));
    for (int64_t i = 0; i < H; i++) y[i] = x[i] * r * (w ? w[i] : 1.0f);
}

/* For n residuals r: the token head(norm(r + F(norm(r) * ffn_norm)) * out_norm) picks. */
static void choose(calib *k, const float *r, int n, int32_t *tok) {
    int64_t H = k->H, Fw = k->Fw, V = k->V;
    for (int i = 0; i < n; i++) norm_mul(k->u + i * H, r + i * H, k->ffn_norm, H, k->c->rms_eps);
    ds_be_matmul1(k->be, k->g, Fw, k->gate, k->u, H, n);
    ds_be_matmul1(k->be, k->a, Fw, k->up, k->u, H, n);
    for (int64_t j = 0; j < n * Fw; j++) k->a[j] *= k->g[j] / (1.0f + expf(-k->g[j]));
    ds_be_matmul1(k->be, k->y, H, k->down, k->a, Fw, n);
    for (int i = 0; i < n; i++) {
        float sg = k->sh_gate ? 1.0f / (1.0f + expf(-ds_dot(k->sh_gate, k->u + i * H, H))) : 1.0f;
        for (int64_t p = 0; p < H; p++) k->y[i * H + p] = r[i * H + p] + sg * k->y[i * H + p];
        norm_mul(k->u + i * H, k->y + i * H, k->out_norm, H, k->c->rms_eps);
    }
    ds_be_matmul1(k->be, k->logits, V, k->head, k->u, H, n);
    for (int i = 0; i < n; i++) {
        const float *l = k->logits + (size_t)i * V;
        int32_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (l[v] > l[best]) best = (int32_t)v;
        tok[i] = best;
    }
}

/* Fraction of the sample on which the head's choice with this beta is the model's. */
static float agreement(calib *k, float beta, const float *R, float *M, uint8_t *qrow, ds_dtype eh_type,
                       const int32_t *xs, const int32_t *want, float *r) {
    int64_t H = k->H;
    for (int64_t p = 0; p < H; p++) { /* the values ds_make_values_ex writes, then the file's rounding */
        float *row = M + p * H;
        for (int64_t q = 0; q < H; q++) row[q] = (p == q ? 1.0f : 0.0f) + beta * R[p * H + q];
        if (H % ds_dtype_get(eh_type)->block_elems == 0) {
            ds_quantize_row(eh_type, row, qrow, H);
            ds_dequantize_row(eh_type, qrow, row, H);
        }
    }
    for (int i = 0; i < N_SAMPLE; i++) {
        norm_mul(k->u, k->E + (int64_t)xs[i] * H, NULL, H, k->c->rms_eps);
        for (int64_t p = 0; p < H; p++) r[i * H + p] = ds_dot(M + p * H, k->u, H);
    }
    int32_t got[N_SAMPLE];
    choose(k, r, N_SAMPLE, got);
    int agree = 0;
    for (int i = 0; i < N_SAMPLE; i++) agree += got[i] == want[i];
    return (float)agree / (float)N_SAMPLE;
}

ds_status ds_make_mtp_calibrate(const ds_model_config *c, const ds_make_options *o, float *beta_out, float *measured,
                                ds_err *e) {
    *beta_out = 0.0f;
    *measured = 1.0f;
    if (!o->mtp_agree_set) return DS_OK;
    if (c->n_mtp == 0) return ds_fail(e, DS_EINVAL, "--mtp-agree needs a model with an MTP head");
    int moe = c->arch == DS_ARCH_QWEN35MOE;
    calib k = {.c = c, .o = o, .H = c->n_embd, .V = c->n_vocab, .Fw = moe ? c->n_ff_shexp : c->n_ff};
    int64_t H = k.H, V = k.V, Fw = k.Fw;
    const char *names[3] = {moe ? "blk.0.ffn_gate_shexp.weight" : "blk.0.ffn_gate.weight",
                            moe ? "blk.0.ffn_up_shexp.weight" : "blk.0.ffn_up.weight",
                            moe ? "blk.0.ffn_down_shexp.weight" : "blk.0.ffn_down.weight"};
    float *vals[3] = {NULL, NULL, NULL}, *O = NULL, *r = NULL, *R = NULL, *M = NULL;
    uint8_t *qrow = NULL;
    ds_status st = ds_backend_cpu_new(0, &k.be, e);
    if (st) return st;
    ds_tensor_spec emb = {.name = "token_embd.weight", .n_dims = 2, .ne = {H, V, 1, 1}, .kind = DS_TK_EMBED, .layer = -1};
    ds_tensor_spec head_spec = emb, sp[3], eh;
    if (!c->tied_embeddings) find_spec(c, "output.weight", &head_spec);
    k.E = malloc((size_t)(V * H) * sizeof *k.E);
    if (k.E) ds_make_values_ex(c, &emb, o, 0.0f, 0, k.E); /* the skewed head, when tied */
    O = c->tied_embeddings ? k.E : values_of(&k, "output.weight", 0);
    k.out_norm = values_of(&k, "output_norm.weight", 1);
    k.ffn_norm = values_of(&k, c->arch == DS_ARCH_QWEN3 ? "blk.0.ffn_norm.weight" : "blk.0.post_attention_norm.weight", 1);
    k.sh_gate = moe ? values_of(&k, "blk.0.ffn_gate_inp_shexp.weight", 0) : NULL;
    int found = 1;
    for (int i = 0; i < 3; i++) found &= find_spec(c, names[i], &sp[i]), vals[i] = values_of(&k, names[i], 0);
    char eh_name[64];
    snprintf(eh_name, sizeof eh_name, "blk.%d.nextn.eh_proj.weight", c->n_layer);
    found &= find_spec(c, eh_name, &eh);
    ds_dtype eh_type = DS_F32;
    if (found && (st = ds_make_tensor_type(c, &eh, o, &eh_type, e))) goto done;
    size_t F = sizeof(float);
    k.u = malloc((size_t)(N_SAMPLE * H) * F), k.y = malloc((size_t)(N_SAMPLE * H) * F);
    k.g = malloc((size_t)(N_SAMPLE * Fw) * F), k.a = malloc((size_t)(N_SAMPLE * Fw) * F);
    k.logits = malloc((size_t)N_SAMPLE * (size_t)V * F);
    r = malloc((size_t)(N_SAMPLE * H) * F), R = malloc((size_t)(H * H) * F), M = malloc((size_t)(H * H) * F);
    qrow = malloc(ds_dtype_row_bytes(eh_type, H) + 64);
    if (!found) {
        st = ds_fail(e, DS_EINVAL, "--mtp-agree: the model lacks a tensor the calibration reads");
        goto done;
    }
    if (!k.E || !O || !k.out_norm || !k.ffn_norm || !vals[0] || !vals[1] || !vals[2] || (moe && !k.sh_gate) || !k.u ||
        !k.y || !k.g || !k.a || !k.logits || !r || !R || !M || !qrow) {
        st = ds_fail(e, DS_ENOMEM, "--mtp-agree: out of memory calibrating the MTP head");
        goto done;
    }
    ds_be_limits lim = {.max_rows = N_SAMPLE, .max_group_rows = N_SAMPLE, .n_heads = 1, .head_dim = 64};
    if ((st = upload(&k, &head_spec, O, V, H, 0, &k.head, e)) || (st = upload(&k, &sp[0], vals[0], Fw, H, 1, &k.gate, e)) ||
        (st = upload(&k, &sp[1], vals[1], Fw, H, 2, &k.up, e)) || (st = upload(&k, &sp[2], vals[2], H, Fw, 3, &k.down, e)) ||
        (st = k.be->ops->reserve(k.be, &lim, e)))
        goto done;
    /* the sample: greedy chains from prompt-like tokens, which is what generation visits */
    int32_t want[N_SAMPLE], xs[N_SAMPLE], step[CHAINS];
    uint64_t rs = o->seed * 2654435761u + 17;
    for (int ch = 0; ch < CHAINS; ch++) {
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        step[ch] = (int32_t)((rs >> 33) % (uint64_t)(V < 1000 ? V : 1000));
    }
    for (int t = 0; t < CHAIN_LEN; t++) {
        for (int ch = 0; ch < CHAINS; ch++) {
            xs[t * CHAINS + ch] = step[ch];
            memcpy(r + (size_t)ch * H, k.E + (int64_t)step[ch] * H, (size_t)H * F);
        }
        choose(&k, r, CHAINS, step);
        memcpy(want + t * CHAINS, step, sizeof step);
    }
    for (int64_t p = 0; p < H; p++)
        for (int64_t q = 0; q < H; q++) R[p * H + q] = perturb(o->seed, p, q, H);
    /* agreement falls from about 1 at beta = 0 towards chance as beta grows: bisect on it, in
     * ratios (the interesting range spans decades, and depends on the model's width), then
     * interpolate between the last probes either side of the target (a sample's agreement moves
     * in steps of 1/N_SAMPLE, coarser than the last probes' spacing) and measure there */
    float lo = 1.0f / 1024, hi = 64.0f, rate_lo = 1.0f, rate_hi = 0.0f, best = 0.0f, best_rate = 1.0f;
    int bracketed = 0, iters = 12;
    for (int it = 0; it <= iters; it++) {
        float beta = it == 0 ? 0.0f : sqrtf(lo * hi);
        if (it == iters) { /* the final probe */
            if (!bracketed || rate_lo == rate_hi) break;
            float f = (rate_lo - o->mtp_agree) / (rate_lo - rate_hi);
            beta = lo * powf(hi / lo, f);
        }
        float rate = agreement(&k, beta, R, M, qrow, eh_type, xs, want, r);
        if (it == iters || fabsf(rate - o->mtp_agree) < fabsf(best_rate - o->mtp_agree)) best = beta, best_rate = rate;
        if (it == 0) {
            if (rate <= o->mtp_agree) break;
            continue;
        }
        if (it == iters) break;
        if (rate > o->mtp_agree) lo = beta, rate_lo = rate;
        else hi = beta, rate_hi = rate, bracketed = 1;
    }
    *beta_out = best;
    *measured = best_rate;
done:
    ds_be_weight_free(k.be, k.head), ds_be_weight_free(k.be, k.gate), ds_be_weight_free(k.be, k.up);
    ds_be_weight_free(k.be, k.down);
    ds_be_free(k.be);
    for (int i = 0; i < 4; i++) free(k.blocks[i]);
    for (int i = 0; i < 3; i++) free(vals[i]);
    if (O != k.E) free(O);
    free(k.E), free(k.out_norm), free(k.ffn_norm), free(k.sh_gate);
    free(k.u), free(k.y), free(k.g), free(k.a), free(k.logits);
    free(r), free(R), free(M), free(qrow);
    return st;
}
