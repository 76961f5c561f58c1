/* model_make_mtp.c - make-model's --mtp-agree knob: random weights on which
 * the MTP head agrees with the main model a chosen fraction of the time, so
 * that speculative decoding can be tested and measured at any acceptance.
 *
 * How: the main model is made residual-dominated (every block's output
 * projection scaled by 1/100), so its next token after x is close to
 * f(x) = argmax head(norm(E[x])). The MTP head is made to compute
 * g(x) = argmax head(norm((I + beta R) norm(E[x]))) from the token it is fed:
 * eh_proj = [I + beta R | 0], unit pre-norms, its block scaled down like the
 * others and its final norm equal to the model's. With beta = 0 the head
 * predicts what the model will say; as beta grows it agrees less. beta is
 * found by bisection so that f and g agree on the wanted fraction of a
 * sample of tokens. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loading/model_make.h"

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static ds_tensor_spec spec_named(const ds_model_config *c, const char *name, ds_tensor_kind kind, int64_t ne0,
                                 int64_t ne1) {
    ds_tensor_spec s = {.n_dims = ne1 > 1 ? 2 : 1, .ne = {ne0, ne1, 1, 1}, .kind = kind, .layer = -1};
    snprintf(s.name, sizeof s.name, "%s", name);
    (void)c;
    return s;
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
    ds_make_values(c, s, o->seed, o->scale, expert, dst);
    if (!o->mtp_agree_set) return;
    int64_t n = s->ne[0] * s->ne[1], H = c->n_embd;
    int mtp = s->layer >= c->n_layer;
    if (s->layer >= 0 && (ends_with(s->name, "attn_output.weight") || ends_with(s->name, "ssm_out.weight") ||
                          strstr(s->name, "ffn_down")))
        for (int64_t i = 0; i < n; i++) dst[i] *= 0.01f;
    if (!mtp) return;
    int zero_centred = c->arch != DS_ARCH_QWEN3;
    if (ends_with(s->name, "nextn.enorm.weight") || ends_with(s->name, "nextn.hnorm.weight")) {
        for (int64_t i = 0; i < n; i++) dst[i] = zero_centred ? 0.0f : 1.0f;
    } else if (ends_with(s->name, "nextn.shared_head_norm.weight")) {
        ds_tensor_spec on = spec_named(c, "output_norm.weight", DS_TK_NORM, H, 1);
        ds_make_values(c, &on, o->seed, o->scale, 0, dst);
    } else if (ends_with(s->name, "nextn.eh_proj.weight")) { /* [H][2H]: embedding half first */
        for (int64_t i = 0; i < H; i++)
            for (int64_t j = 0; j < 2 * H; j++)
                dst[i * 2 * H + j] = j < H ? (i == j ? 1.0f : 0.0f) + beta * perturb(o->seed, i, j, H) : 0.0f;
    }
}

/* y = norm(x) * w (w already the multiplier) */
static void norm_mul(float *y, const float *x, const float *w, int64_t H, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < H; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / (double)H + eps));
    for (int64_t i = 0; i < H; i++) y[i] = x[i] * r * w[i];
}

static int32_t argmax_head(const float *head, int64_t V, int64_t H, const float *h) {
    int32_t best = 0;
    double bv = -INFINITY;
    for (int64_t v = 0; v < V; v++) {
        double d = 0;
        for (int64_t i = 0; i < H; i++) d += (double)head[v * H + i] * h[i];
        if (d > bv) { bv = d; best = (int32_t)v; }
    }
    return best;
}

ds_status ds_make_mtp_calibrate(const ds_model_config *c, const ds_make_options *o, float *beta_out, float *measured,
                                ds_err *e) {
    *beta_out = 0.0f;
    *measured = 1.0f;
    if (!o->mtp_agree_set) return DS_OK;
    if (c->n_mtp == 0) return ds_fail(e, DS_EINVAL, "--mtp-agree needs a model with an MTP head");
    int64_t H = c->n_embd, V = c->n_vocab;
    ds_tensor_spec emb = spec_named(c, "token_embd.weight", DS_TK_EMBED, H, V);
    ds_tensor_spec head = spec_named(c, "output.weight", DS_TK_MATRIX, H, V);
    ds_tensor_spec on = spec_named(c, "output_norm.weight", DS_TK_NORM, H, 1);
    float *E = malloc((size_t)(V * H) * sizeof *E), *O = c->tied_embeddings ? E : malloc((size_t)(V * H) * sizeof *O);
    float *w = malloc((size_t)H * sizeof *w), *t1 = malloc((size_t)H * sizeof *t1), *t2 = malloc((size_t)H * sizeof *t2);
    enum { N_SAMPLE_MAX = 96 };
    /* every probe costs N_SAMPLE x vocab x hidden: real vocabularies get a smaller sample */
    int N_SAMPLE = (int64_t)V * H > ((int64_t)1 << 24) ? 32 : N_SAMPLE_MAX;
    int32_t want[N_SAMPLE_MAX], xs[N_SAMPLE_MAX];
    if (!E || !O || !w || !t1 || !t2) {
        free(E);
        if (O != E) free(O);
        free(w), free(t1), free(t2);
        return ds_fail(e, DS_ENOMEM, "--mtp-agree: out of memory calibrating the MTP head");
    }
    ds_make_values(c, &emb, o->seed, o->scale, 0, E);
    if (!c->tied_embeddings) ds_make_values(c, &head, o->seed, o->scale, 0, O);
    ds_make_values(c, &on, o->seed, o->scale, 0, w);
    if (c->arch != DS_ARCH_QWEN3)
        for (int64_t i = 0; i < H; i++) w[i] += 1.0f;
    for (int k = 0; k < N_SAMPLE; k++) {
        xs[k] = (int32_t)(((uint64_t)k * 2654435761u + o->seed) % (uint64_t)(V < 1000 ? V : 1000));
        norm_mul(t1, E + (int64_t)xs[k] * H, w, H, c->rms_eps);
        want[k] = argmax_head(O, V, H, t1);
    }
    /* agreement falls from 1 at beta = 0 towards chance as beta grows: bisect on it */
    float lo = 0.0f, hi = 64.0f, best = 0.0f, best_rate = 1.0f;
    for (int it = 0; it < (N_SAMPLE < N_SAMPLE_MAX ? 9 : 14); it++) {
        float beta = it == 0 ? 0.0f : 0.5f * (lo + hi);
        int agree = 0;
        for (int k = 0; k < N_SAMPLE; k++) {
            const float *x = E + (int64_t)xs[k] * H;
            double ss = 0;
            for (int64_t i = 0; i < H; i++) ss += (double)x[i] * x[i];
            float r = (float)(1.0 / sqrt(ss / (double)H + c->rms_eps));
            for (int64_t i = 0; i < H; i++) {
                double acc = x[i] * r;
                for (int64_t j = 0; j < H; j++) acc += beta * perturb(o->seed, i, j, H) * x[j] * r;
                t2[i] = (float)acc;
            }
            norm_mul(t1, t2, w, H, c->rms_eps);
            agree += argmax_head(O, V, H, t1) == want[k];
        }
        float rate = (float)agree / N_SAMPLE;
        if (fabsf(rate - o->mtp_agree) < fabsf(best_rate - o->mtp_agree)) { best = beta; best_rate = rate; }
        if (it == 0) {
            if (rate <= o->mtp_agree) break;
            continue;
        }
        if (rate > o->mtp_agree) lo = beta;
        else hi = beta;
    }
    *beta_out = best;
    *measured = best_rate;
    free(E);
    if (O != E) free(O);
    free(w), free(t1), free(t2);
    return DS_OK;
}
