/* rope_freqs.c - rotary frequencies, plain or YaRN (rope_freqs.h).
 *
 * YaRN ("NTK-by-parts", as transformers computes it): with d = rope_dim,
 * base theta, pair i has the kept frequency e_i = theta^(-2i/d) and the
 * interpolated one e_i / factor. The pair that turns r times over the
 * original context L sits at dim(r) = d ln(L / (2 pi r)) / (2 ln theta);
 * low = dim(beta_fast), high = dim(beta_slow) (rounded down and up when
 * truncating, then clamped to [0, d-1]). ramp_i = clamp((i - low) / (high -
 * low), 0, 1): fast pairs (ramp 0) keep e_i, slow ones (ramp 1) are
 * interpolated, the ones between are blended. The attention factor scales
 * cos and sin (so every score by its square). */
#include "model/rope_freqs.h"

#include <math.h>

static double correction_dim(double rotations, int dim, double base, int orig_ctx) {
    return dim * log(orig_ctx / (rotations * 2 * M_PI)) / (2 * log(base));
}

void ds_rope_freqs(const ds_model_config *c, double *inv_freq, float *mscale) {
    int d = c->rope_dim, half = d / 2;
    for (int i = 0; i < half; i++) inv_freq[i] = pow((double)c->rope_theta, -2.0 * i / d);
    *mscale = 1.0f;
    if (!(c->yarn_factor > 0)) return;
    double low = correction_dim(c->yarn_beta_fast, d, c->rope_theta, c->yarn_orig_ctx);
    double high = correction_dim(c->yarn_beta_slow, d, c->rope_theta, c->yarn_orig_ctx);
    if (c->yarn_truncate) {
        low = floor(low);
        high = ceil(high);
    }
    if (low < 0) low = 0;
    if (high > d - 1) high = d - 1;
    if (low == high) high += 0.001; /* no division by zero */
    for (int i = 0; i < half; i++) {
        double ramp = (i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double keep = inv_freq[i], interp = inv_freq[i] / c->yarn_factor;
        inv_freq[i] = interp * ramp + keep * (1 - ramp);
    }
    *mscale = c->yarn_mscale;
}
