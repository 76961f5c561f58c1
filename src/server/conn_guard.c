/* conn_guard.c - see conn_guard.h.
 *
 * Whether a request has begun on a connection without one in progress is
 * the kernel's count of bytes received (TCP_INFO), compared with the count
 * when its last request ended: libmicrohttpd reads the bytes of a request
 * line and headers into its own buffer, and says nothing until they are
 * complete. The watchdog looks every WATCH_MS, so a deadline is met to
 * within that. */
#include "server/conn_guard.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define WATCH_MS 200

typedef struct {
    int used;
    int fd;
    int busy;             /* a request's headers came and its answer is not done */
    int closing;          /* shut down by the guard, waiting for libmicrohttpd to close it */
    int over;             /* admitted from the reserve */
    double since;         /* accepted, or its last request ended */
    uint64_t bytes_since; /* bytes received by then */
    double begun;         /* when the guard first saw bytes of a next request (0: none) */
} slot;

struct ds_conn_guard {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t watchdog;
    int stop;
    int max_open;
    double header_timeout;
    int n_slots, n_open, n_closing;
    slot *slots;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Bytes the socket has received; 0 when the kernel does not say (then a
 * request counts as begun from the start of the wait: stricter, never laxer). */
static uint64_t bytes_received(int fd, int *known) {
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    *known = getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
             len >= offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received;
    return *known ? ti.tcpi_bytes_received : 0;
}

/* under g->mu */
static void close_slot(ds_conn_guard *g, slot *s) {
    s->closing = 1;
    g->n_closing++;
    shutdown(s->fd, SHUT_RDWR);
}

static void *watch(void *arg) {
    ds_conn_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += WATCH_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        double now = now_s();
        for (int i = 0; i < g->n_slots && !g->stop; i++) {
            slot *s = &g->slots[i];
            if (!s->used || s->busy || s->closing) continue;
            if (!s->begun) {
                int known;
                uint64_t b = bytes_received(s->fd, &known);
                if (!known || b > s->bytes_since) s->begun = known ? now : s->since;
            }
            if (s->begun && now - s->begun > g->header_timeout) close_slot(g, s);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

ds_status ds_conn_guard_new(int max_connections, double header_timeout_s, ds_conn_guard **out, ds_err *e) {
    *out = NULL;
    ds_conn_guard *g = calloc(1, sizeof *g);
    if (!g) return ds_fail(e, DS_ENOMEM, "out of memory");
    g->max_open = max_connections;
    g->header_timeout = header_timeout_s;
    g->n_slots = max_connections + DS_CONN_RESERVE;
    g->slots = calloc((size_t)g->n_slots, sizeof *g->slots);
    if (!g->slots) {
        free(g);
        return ds_fail(e, DS_ENOMEM, "out of memory (%d connection slots)", max_connections + DS_CONN_RESERVE);
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->watchdog, NULL, watch, g) != 0) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
        free(g->slots);
        free(g);
        return ds_fail(e, DS_EIO, "cannot start the connection watchdog thread");
    }
    *out = g;
    return DS_OK;
}

void ds_conn_guard_free(ds_conn_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->watchdog, NULL);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->slots);
    free(g);
}

/* under g->mu: the connection that has waited longest without a request, other than keep */
static slot *oldest_idle(ds_conn_guard *g, const slot *keep) {
    slot *best = NULL;
    for (int i = 0; i < g->n_slots; i++) {
        slot *s = &g->slots[i];
        if (s->used && s != keep && !s->busy && !s->closing && (!best || s->since < best->since)) best = s;
    }
    return best;
}

void ds_conn_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    ds_conn_guard *g = cls;
    pthread_mutex_lock(&g->mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        slot *s = NULL;
        for (int i = 0; ci && i < g->n_slots && !s; i++)
            if (!g->slots[i].used) s = &g->slots[i];
        if (s) {   /* (libmicrohttpd admits no more than the slots; without one the connection goes unguarded) */
            *s = (slot){.used = 1, .fd = ci->connect_fd, .since = now_s()};
            g->n_open++;
            if (g->n_open - g->n_closing > g->max_open) {
                slot *victim = oldest_idle(g, s);
                if (victim) close_slot(g, victim);
                else s->over = 1;
            }
        }
        *socket_context = s;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        slot *s = *socket_context;
        if (s && s->used) {
            g->n_open--;
            if (s->closing) g->n_closing--;
            memset(s, 0, sizeof *s);
        }
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&g->mu);
}

static slot *slot_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

int ds_conn_guard_request_begins(ds_conn_guard *g, struct MHD_Connection *c) {
    slot *s = slot_of(c);
    if (!g || !s) return 0;
    pthread_mutex_lock(&g->mu);
    s->busy = 1;
    if (s->over && g->n_open - g->n_closing <= g->max_open) s->over = 0;   /* room was made since */
    int over = s->over;
    pthread_mutex_unlock(&g->mu);
    return over;
}

void ds_conn_guard_request_ends(ds_conn_guard *g, struct MHD_Connection *c) {
    slot *s = slot_of(c);
    if (!g || !s) return;
    pthread_mutex_lock(&g->mu);
    if (s->used) {
        int known;
        s->busy = 0;
        s->since = now_s();
        s->bytes_since = bytes_received(s->fd, &known);
        s->begun = 0;
    }
    pthread_mutex_unlock(&g->mu);
}
