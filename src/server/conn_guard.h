/* conn_guard.h - keeps the server answerable whatever its clients hold.
 *
 * libmicrohttpd gives each connection a thread and knows one timeout, for
 * inactivity: it closes idle keep-alive connections (--idle-timeout), but a
 * client sending a header byte now and then (slowloris) is never inactive, and
 * once --max-connections are open every new one, a health probe among them,
 * is closed unanswered. The guard follows every connection
 * (MHD_OPTION_NOTIFY_CONNECTION) and closes, with shutdown(2) so that its own
 * thread ends it:
 *   - a connection whose request began (bytes arrived since its last answer)
 *     but whose headers are not complete --header-timeout seconds later;
 *   - when a new connection would make more than max_connections, the one
 *     that has waited longest without a request in progress, to let it in.
 * libmicrohttpd's own limit is max_connections + DS_CONN_RESERVE: when every
 * connection has a request running, the reserve still lets probes in; such an
 * over-the-limit connection is told (ds_conn_guard_request_begins) so that it
 * answers only /health and /metrics.
 *
 * A connection's slot is freed by the CLOSED notification under the guard's
 * lock, which every shutdown also holds: the guard never touches a socket
 * number that was closed (and perhaps reused). Slots are allocated once. */
#ifndef DS_CONN_GUARD_H
#define DS_CONN_GUARD_H

#include <microhttpd.h>

#include "common/status.h"

#define DS_CONN_RESERVE 16

typedef struct ds_conn_guard ds_conn_guard;

/* Starts the watchdog thread. header_timeout_s > 0. */
ds_status ds_conn_guard_new(int max_connections, double header_timeout_s, ds_conn_guard **out, ds_err *e);
/* Stops the watchdog; call after MHD_stop_daemon. NULL is fine. */
void ds_conn_guard_free(ds_conn_guard *g);

/* MHD_OPTION_NOTIFY_CONNECTION's callback; cls is the guard. */
void ds_conn_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code);
/* A request's headers are complete. Returns 1 when the connection is over
 * max_connections (admitted from the reserve, every other one being busy). */
int ds_conn_guard_request_begins(ds_conn_guard *g, struct MHD_Connection *c);
/* The request ended (MHD_OPTION_NOTIFY_COMPLETED). */
void ds_conn_guard_request_ends(ds_conn_guard *g, struct MHD_Connection *c);

#endif
