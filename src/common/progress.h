/* progress.h - a one-line progress bar on stderr, drawn only on a terminal. */
#ifndef DS_PROGRESS_H
#define DS_PROGRESS_H

#include <stdint.h>

typedef struct {
    const char *label;
    uint64_t total, done;
    int enabled, last_pct;
} ds_progress;

void ds_progress_start(ds_progress *p, const char *label, uint64_t total);
void ds_progress_add(ds_progress *p, uint64_t n);
void ds_progress_finish(ds_progress *p);
/* Ends the line where the bar stands (the work failed). */
void ds_progress_stop(ds_progress *p);

#endif
