/* status.c - error messages for ds_status. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Messages quote names and values from files, which may hold any bytes:
 * control characters become '?' so that a message stays one line. */
static void one_line(char *msg) {
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
}

ds_status ds_fail(ds_err *e, ds_status code, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        one_line(e->msg);
        e->code = code;
    }
    return code;
}

void ds_err_prefix(ds_err *e, const char *fmt, ...) {
    if (!e) return;
    char head[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    char old[sizeof e->msg];
    memcpy(old, e->msg, sizeof old);
    /* the new text may not fit: keep the head whole and cut the tail */
    size_t n = strlen(head);
    if (n + 2 >= sizeof e->msg) n = sizeof e->msg - 3;
    memcpy(e->msg, head, n);
    memcpy(e->msg + n, ": ", 2);
    size_t rest = sizeof e->msg - n - 3;
    size_t m = strnlen(old, rest);
    memcpy(e->msg + n + 2, old, m);
    e->msg[n + 2 + m] = '\0';
    one_line(e->msg);
}

const char *ds_status_name(ds_status s) {
    switch (s) {
    case DS_OK: return "ok";
    case DS_EIO: return "i/o error";
    case DS_ECORRUPT: return "corrupt input";
    case DS_EINVAL: return "invalid argument";
    case DS_ENOMEM: return "out of memory";
    case DS_EUNSUPPORTED: return "unsupported";
    case DS_ENOTFOUND: return "not found";
    case DS_EBUSY: return "busy";
    }
    return "unknown status";
}
