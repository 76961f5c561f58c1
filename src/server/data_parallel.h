/* data_parallel.h - `serve --data-parallel N`: N whole servers (ranks) on one machine.
 *
 * A supervisor process forks the ranks before any thread exists; each rank runs
 * ds_server_run with its own engine and pools (the weights are mmapped, so the
 * page cache holds them once). Rank r listens on --port + r, one endpoint per
 * rank (llm-d's InferencePool scores each rank on its own /metrics and KV
 * events), or every rank on --port itself with SO_REUSEPORT (--reuse-port: the
 * kernel spreads the connections, for clients without a router). Rank r
 * publishes its KV events on the configured endpoints moved by r, as vLLM does.
 * The supervisor forwards SIGTERM/SIGINT to the ranks (each drains as a single
 * server does) and reaps them; when a rank ends without being asked to, it
 * stops the others and exits non-zero, naming the rank and how it ended.
 *
 * `--data-parallel N --data-parallel-rank R` runs rank R alone (N processes
 * started by hand, on distinct ports or one port with --reuse-port). */
#ifndef DS_DATA_PARALLEL_H
#define DS_DATA_PARALLEL_H

#include <stddef.h>

#include "common/status.h"
#include "server/server.h"

#define DS_DP_MAX_RANKS 64

/* The endpoint rank `rank` binds for the configured one: tcp://HOST:PORT moves to
 * PORT + rank, other transports (ipc://, inproc://) get "_dp<rank>" appended;
 * rank 0 (or -1, not data parallel) keeps it. DS_EINVAL for a tcp endpoint
 * without a numeric port, a port past 65535, or an out too small. */
ds_status ds_dp_endpoint(const char *endpoint, int rank, char *out, size_t cap, ds_err *e);

/* The data-parallel settings of c, checked before anything starts: the size
 * (1..DS_DP_MAX_RANKS), the rank (-1, or below the size), every rank's HTTP
 * port within 65535 (--port + N - 1 without --reuse-port), a fixed --port with
 * --reuse-port, and every rank's KV event endpoints valid and distinct from
 * each other's (the publisher of one rank on another's replay port). */
ds_status ds_dp_check(const ds_server_config *c, ds_err *e);

/* Serves as c says: one server (size 1, or the rank c names), or a supervisor
 * of c->data_parallel_size ranks. Returns the process exit code (2: a bad
 * setting, after one line on stderr). */
int ds_serve(const ds_server_config *c);

#endif
