/* status.h - one error convention for the whole project.
 *
 * Every function that can fail returns a ds_status and, when it fails, fills
 * a caller-owned ds_err with one line that names the input (file, tensor,
 * field, byte offset). Only main() turns a status into an exit code. */
#ifndef DS_STATUS_H
#define DS_STATUS_H

typedef enum {
    DS_OK = 0,
    DS_EIO = -1,          /* the OS refused: open, read, write, mmap */
    DS_ECORRUPT = -2,     /* bytes of a file or request do not make sense */
    DS_EINVAL = -3,       /* an argument or option is wrong */
    DS_ENOMEM = -4,       /* an allocation or a byte budget ran out */
    DS_EUNSUPPORTED = -5, /* valid, but not something we handle */
    DS_ENOTFOUND = -6,    /* a named thing (tensor, key, file) is missing */
    DS_EBUSY = -7,        /* valid, but refused for now (a full queue): retrying later may succeed */
} ds_status;

typedef struct {
    ds_status code;
    char msg[640];
} ds_err;

/* Formats the message into e (if e is non-NULL) and returns code, so that
 * callers can write `return ds_fail(e, DS_ECORRUPT, "%s: ...", path);`. */
ds_status ds_fail(ds_err *e, ds_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an existing message, for adding the outer context
 * (usually the file name) once the inner function has named the detail. */
void ds_err_prefix(ds_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

const char *ds_status_name(ds_status s);

#endif
