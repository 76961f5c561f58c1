/* args.h - small helpers for parsing subcommand options strictly: a number
 * that does not parse completely, or an option without its value, is an error. */
#ifndef DS_ARGS_H
#define DS_ARGS_H

#include <stdint.h>

/* Returns the value of option argv[*i] and advances *i, or NULL (after
 * printing an error) when the value is missing. */
const char *ds_arg_value(int argc, char **argv, int *i);
int ds_arg_int(const char *opt, const char *s, long lo, long hi, long *out);
int ds_arg_u64(const char *opt, const char *s, uint64_t *out);
int ds_arg_float(const char *opt, const char *s, double lo, double hi, double *out);

#endif
