/* progress.c - see progress.h. Redraws only when the percentage changes. */
#include "common/progress.h"

#include <stdio.h>
#include <unistd.h>

static void draw(ds_progress *p) {
    int pct = p->total ? (int)(p->done * 100 / p->total) : 100;
    if (pct == p->last_pct) return;
    p->last_pct = pct;
    char bar[41];
    int fill = pct * 40 / 100;
    for (int i = 0; i < 40; i++) bar[i] = i < fill ? '#' : '.';
    bar[40] = '\0';
    fprintf(stderr, "\r%-24s [%s] %3d%%", p->label, bar, pct);
    fflush(stderr);
}

void ds_progress_start(ds_progress *p, const char *label, uint64_t total) {
    p->label = label;
    p->total = total;
    p->done = 0;
    p->last_pct = -1;
    p->enabled = isatty(STDERR_FILENO);
    if (p->enabled) draw(p);
}

void ds_progress_add(ds_progress *p, uint64_t n) {
    p->done += n;
    if (p->done > p->total) p->done = p->total;
    if (p->enabled) draw(p);
}

void ds_progress_stop(ds_progress *p) {
    if (p->enabled) fputc('\n', stderr);
}

void ds_progress_finish(ds_progress *p) {
    if (!p->enabled) return;
    p->done = p->total;
    draw(p);
    fputc('\n', stderr);
}
