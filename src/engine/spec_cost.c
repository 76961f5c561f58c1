/* spec_cost.c - running cost curves (see spec_cost.h). */
#include "engine/spec_cost.h"

#include <math.h>
#include <stdlib.h>

#define MAX_WEIGHT 8.0      /* a count's mean follows its last ~8 measurements */
#define HALF_LIFE 512.0     /* steps */
#define BANDWIDTH 0.5       /* of the kernel, in log rows: counts within ~1.6x weigh most */
#define RIDGE 0.25          /* how much data it takes to move the slope off its prior */
#define MAX_AGE (4 * HALF_LIFE) /* older measurements count as none: the prior, and a retry, take over */

int ds_cost_curve_init(ds_cost_curve *c, int max_rows) {
    *c = (ds_cost_curve){.n = max_rows > 1 ? max_rows : 1};
    c->w = calloc((size_t)c->n + 1, sizeof *c->w);
    c->t = calloc((size_t)c->n + 1, sizeof *c->t);
    c->at = calloc((size_t)c->n + 1, sizeof *c->at);
    c->used = calloc((size_t)c->n, sizeof *c->used);
    if (!c->w || !c->t || !c->at || !c->used) {
        ds_cost_curve_free(c);
        return -1;
    }
    return 0;
}

void ds_cost_curve_free(ds_cost_curve *c) {
    free(c->w);
    free(c->t);
    free(c->at);
    free(c->used);
    *c = (ds_cost_curve){0};
}

static double faded(const ds_cost_curve *c, int x, int64_t now) {
    double age = (double)(now - c->at[x]);
    if (age > MAX_AGE) return 0.0;
    return c->w[x] * (age > 0 ? exp2(-age / HALF_LIFE) : 1.0);
}

void ds_cost_curve_add(ds_cost_curve *c, int rows, double seconds, int64_t now) {
    if (!c->w || !(seconds >= 0)) return;
    int x = rows < 1 ? 1 : rows > c->n ? c->n : rows;
    if (c->w[x] == 0.0) c->used[c->n_used++] = x;
    double w = faded(c, x, now) + 1.0;
    if (w > MAX_WEIGHT) w = MAX_WEIGHT;
    c->t[x] += (seconds - c->t[x]) / w;
    c->w[x] = w;
    c->at[x] = now;
}

double ds_cost_curve_at(const ds_cost_curve *c, int rows, int64_t now) {
    if (rows <= 0 || !c->w || c->n_used == 0) return 0.0;
    double x = rows > c->n ? c->n : rows, lx = log(x);
    int fresh = 0;
    for (int i = 0; i < c->n_used; i++) fresh += now - c->at[c->used[i]] <= MAX_AGE;
    if (!fresh) return 0.0;
    /* weighted means and spread of the measured counts around x */
    double sw = 0, sx = 0, st = 0;
    for (int i = 0; i < c->n_used; i++) {
        int xi = c->used[i];
        double d = (log((double)xi) - lx) / BANDWIDTH, w = faded(c, xi, now) * exp(-0.5 * d * d);
        sw += w, sx += w * xi, st += w * c->t[xi];
    }
    if (!(sw > 1e-12)) { /* everything far away: the nearest fresh count, flat above it, proportional below */
        int best = 0;
        for (int i = 0; i < c->n_used; i++)
            if (now - c->at[c->used[i]] <= MAX_AGE &&
                (!best || fabs(log((double)c->used[i]) - lx) < fabs(log((double)best) - lx)))
                best = c->used[i];
        return x >= best ? c->t[best] : c->t[best] * x / best;
    }
    double mx = sx / sw, mt = st / sw, sxx = 0, sxt = 0;
    for (int i = 0; i < c->n_used; i++) {
        int xi = c->used[i];
        double d = (log((double)xi) - lx) / BANDWIDTH, w = faded(c, xi, now) * exp(-0.5 * d * d);
        sxx += w * (xi - mx) * (xi - mx), sxt += w * (xi - mx) * (c->t[xi] - mt);
    }
    /* the slope's prior: flat above the data, through the origin below it */
    double prior = x >= mx ? 0.0 : (mt > 0 ? mt / mx : 0.0);
    double slope = (sxt + RIDGE * sw * prior) / (sxx + RIDGE * sw);
    if (slope < 0) slope = 0; /* more rows never cost less; a negative slope is noise */
    double est = mt + slope * (x - mx);
    return est > 0 ? est : 0.0;
}
