/* spec_cost.h - a running estimate of how long something takes as a
 * function of how many rows it carries (a model call of x rows), learned
 * from the engine's own measurements.
 *
 * Each row count x keeps the mean of its recent times; a query is answered
 * by a weighted linear fit over the row counts near it (in log x), so that a
 * count never measured is read off its neighbours. Where the data say
 * little, the estimate leans optimistic on purpose, so that what was never
 * tried is tried once and then known: above the measured counts the curve
 * is taken as flat, below them as proportional (a call's time rises with
 * its rows and has a fixed part). Old measurements fade (half-life in
 * steps) and after four half-lives count as none, so that the estimate
 * leans optimistic again there and a choice made on stale figures is retried
 * now and then. Fixed memory: one
 * bin per row count, sized at creation. */
#ifndef DS_SPEC_COST_H
#define DS_SPEC_COST_H

#include <stdint.h>

typedef struct {
    int n;              /* row counts 1..n */
    double *w;          /* [n + 1] weight of each count's mean (capped) */
    double *t;          /* [n + 1] mean seconds */
    int64_t *at;        /* [n + 1] the step of the last measurement */
    int *used;          /* [n] counts with a measurement, in first-seen order */
    int n_used;
} ds_cost_curve;

/* 0 on success, -1 when out of memory. */
int ds_cost_curve_init(ds_cost_curve *c, int max_rows);
void ds_cost_curve_free(ds_cost_curve *c);
/* A call of `rows` rows (clamped to 1..n) took `seconds`, measured at step `now`. */
void ds_cost_curve_add(ds_cost_curve *c, int rows, double seconds, int64_t now);
/* Estimated seconds of a call of `rows` rows (0 rows: 0; no fresh data: 0, the optimistic answer). */
double ds_cost_curve_at(const ds_cost_curve *c, int rows, int64_t now);

#endif
