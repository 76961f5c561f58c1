/* data_parallel.c - see data_parallel.h. */
#include "server/data_parallel.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/cpu.h"

ds_status ds_dp_endpoint(const char *ep, int rank, char *out, size_t cap, ds_err *e) {
    int n;
    if (rank <= 0) n = snprintf(out, cap, "%s", ep);
    else if (!strncmp(ep, "tcp://", 6)) {
        /* the port follows the last colon (tcp://HOST:5557, also with HOST [::1]) */
        const char *colon = strrchr(ep, ':');
        long port = 0;
        const char *p = colon && colon >= ep + 6 ? colon + 1 : NULL;
        if (p && *p && strspn(p, "0123456789") == strlen(p) && strlen(p) <= 5) port = strtol(p, NULL, 10);
        if (port < 1 || port > 65535)
            return ds_fail(e, DS_EINVAL, "%s has no port (1..65535) to move by the data-parallel rank", ep);
        if (port + rank > 65535)
            return ds_fail(e, DS_EINVAL, "%s: rank %d would publish on port %ld, past 65535", ep, rank, port + rank);
        n = snprintf(out, cap, "%.*s:%ld", (int)(colon - ep), ep, port + rank);
    } else
        n = snprintf(out, cap, "%s_dp%d", ep, rank);
    if (n < 0 || (size_t)n >= cap) return ds_fail(e, DS_EINVAL, "%.200s: the endpoint is too long", ep);
    return DS_OK;
}

/* rank's KV event endpoints in the two buffers ("" where none is configured) */
static ds_status rank_endpoints(const ds_server_config *c, int rank, char pub[256], char replay[256], ds_err *e) {
    ds_status st;
    pub[0] = replay[0] = 0;
    if (c->kv_events_endpoint && (st = ds_dp_endpoint(c->kv_events_endpoint, rank, pub, 256, e)) != DS_OK) {
        ds_err_prefix(e, "--kv-events-endpoint");
        return st;
    }
    if (c->kv_events_replay_endpoint &&
        (st = ds_dp_endpoint(c->kv_events_replay_endpoint, rank, replay, 256, e)) != DS_OK) {
        ds_err_prefix(e, "--kv-events-replay-endpoint");
        return st;
    }
    return DS_OK;
}

ds_status ds_dp_check(const ds_server_config *c, ds_err *e) {
    int n = c->data_parallel_size, rank = c->data_parallel_rank;
    if (n < 1 || n > DS_DP_MAX_RANKS)
        return ds_fail(e, DS_EINVAL, "--data-parallel %d: the number of ranks must be in 1..%d", n, DS_DP_MAX_RANKS);
    if (rank >= n)
        return ds_fail(e, DS_EINVAL, "--data-parallel-rank %d is not below --data-parallel %d (ranks are 0..%d)",
                       rank, n, n - 1);
    if (rank < -1) return ds_fail(e, DS_EINVAL, "--data-parallel-rank %d is negative", rank);
    int supervisor = n > 1 && rank < 0;
    if (supervisor && c->reuse_port && c->port == 0)
        return ds_fail(e, DS_EINVAL, "--reuse-port needs a fixed --port: with --port 0 each rank would get a port of "
                       "its own");
    if (supervisor && !c->reuse_port && c->port > 0 && c->port + n - 1 > 65535)
        return ds_fail(e, DS_EINVAL, "--port %d with --data-parallel %d: rank %d would listen on port %d, past 65535 "
                       "(choose a lower --port, or --reuse-port for one port)", c->port, n, n - 1, c->port + n - 1);
    /* every rank's endpoints, also for a rank started by hand (the others compute theirs alike) */
    static char pub[DS_DP_MAX_RANKS][256], replay[DS_DP_MAX_RANKS][256];
    for (int r = 0; r < n; r++) {
        ds_status st = rank_endpoints(c, r, pub[r], replay[r], e);
        if (st) return st;
    }
    for (int r = 0; r < n; r++)
        for (int q = 0; q < n; q++)
            /* a port of "*" is one zmq picks when it binds: two of them never collide */
            if (pub[r][0] && !strcmp(pub[r], replay[q]) && !strstr(pub[r], ":*"))
                return ds_fail(e, DS_EINVAL, "rank %d would publish KV events on %s, where rank %d answers replays "
                               "(--kv-events-replay-endpoint): move one by at least --data-parallel %d", r, pub[r], q,
                               n);
    return DS_OK;
}

/* Runs one rank: the configuration with this rank's port, endpoints and threads. */
static int run_rank(const ds_server_config *base, int rank, int port, int n_threads, int supervisor_pid) {
    ds_server_config c = *base;
    static char pub[256], replay[256];
    ds_err e = {0};
    if (rank_endpoints(base, rank, pub, replay, &e) != DS_OK) {   /* checked before: cannot fail here */
        fprintf(stderr, "deltaserve serve: %s\n", e.msg);
        return 2;
    }
    if (c.kv_events_endpoint) c.kv_events_endpoint = pub;
    if (c.kv_events_replay_endpoint) c.kv_events_replay_endpoint = replay;
    c.data_parallel_rank = rank;
    c.port = port;
    c.supervisor_pid = supervisor_pid;
    c.n_threads = c.load.n_threads = n_threads;
    return ds_server_run(&c);
}

static void describe(int status, char *out, size_t cap) {
    if (WIFEXITED(status)) snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, cap, "was killed by signal %d (%s)%s", WTERMSIG(status), strsignal(WTERMSIG(status)),
                 WCOREDUMP(status) ? ", core dumped" : "");
    else snprintf(out, cap, "ended (wait status %#x)", (unsigned)status);
}

static void signal_ranks(const pid_t *pids, int n, int sig) {
    for (int r = 0; r < n; r++)
        if (pids[r] > 0) kill(pids[r], sig);
}

static int supervise(const ds_server_config *c) {
    int n = c->data_parallel_size;
    pid_t pids[DS_DP_MAX_RANKS] = {0};
    /* the cores are shared: each rank computes on its part unless --threads says otherwise */
    int threads = c->n_threads;
    if (threads <= 0) threads = ds_cpu()->n_cores / n > 0 ? ds_cpu()->n_cores / n : 1;
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGCHLD);
    sigprocmask(SIG_BLOCK, &sigs, &old);   /* from here every one of them waits for sigwait */
    pid_t self = getpid();
    fprintf(stderr, "deltaserve serve: data parallel: %d ranks (supervisor pid %d), %s, %d compute threads each\n", n,
            (int)self, c->reuse_port ? "one port shared with SO_REUSEPORT" : "one port per rank", threads);
    fflush(NULL);   /* nothing buffered may be written twice by the children */
    int rc = 0, left = 0, stopping = 0;
    for (int r = 0; r < n; r++) {
        int port = c->reuse_port || c->port == 0 ? c->port : c->port + r;
        pid_t pid = fork();
        if (pid == 0) {
            /* the parent's death (even by SIGKILL) sends the rank SIGTERM: no rank outlives
             * the supervisor */
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != self) _exit(1);
            sigset_t m = old;
            sigaddset(&m, SIGTERM);   /* pending ones stay for the rank's own sigwait */
            sigaddset(&m, SIGINT);
            sigprocmask(SIG_SETMASK, &m, NULL);
            int code = run_rank(c, r, port, threads, (int)self);
            fflush(NULL);
            exit(code);
        }
        if (pid < 0) {
            fprintf(stderr, "deltaserve serve: cannot start rank %d: %s; stopping the others\n", r, strerror(errno));
            rc = 1;
            stopping = 1;
            signal_ranks(pids, n, SIGTERM);
            break;
        }
        pids[r] = pid;
        left++;
        if (port) fprintf(stderr, "deltaserve serve: rank %d: pid %d, port %d\n", r, (int)pid, port);
        else fprintf(stderr, "deltaserve serve: rank %d: pid %d, any free port (its 'listening on' line names it)\n",
                     r, (int)pid);
    }
    fflush(stderr);
    while (left > 0) {
        int sig = 0;
        if (sigwait(&sigs, &sig) != 0) continue;
        if (sig == SIGTERM || sig == SIGINT) {
            /* each rank drains as a single server does; a second signal ends their requests at once */
            fprintf(stderr, "deltaserve serve: %s: passing it to %d rank(s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                    left);
            stopping = 1;
            signal_ranks(pids, n, sig);
            continue;
        }
        int status;
        pid_t p;
        while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
            int r = 0;
            while (r < n && pids[r] != p) r++;
            if (r == n) continue;
            pids[r] = 0;
            left--;
            char how[128];
            describe(status, how, sizeof how);
            if (!stopping) {
                fprintf(stderr, "deltaserve serve: rank %d (pid %d) %s; stopping the other %d rank(s)\n", r, (int)p,
                        how, left);
                rc = 1;
                stopping = 1;
                signal_ranks(pids, n, SIGTERM);
            } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                fprintf(stderr, "deltaserve serve: rank %d (pid %d) %s\n", r, (int)p, how);
                rc = 1;
            }
        }
    }
    fprintf(stderr, "deltaserve serve: data parallel: every rank stopped%s\n", rc ? " (not every one cleanly)" : "");
    sigprocmask(SIG_SETMASK, &old, NULL);
    return rc;
}

int ds_serve(const ds_server_config *c) {
    ds_err e = {0};
    if (ds_dp_check(c, &e) != DS_OK) {
        fprintf(stderr, "deltaserve serve: %s\n", e.msg);
        return 2;
    }
    if (c->data_parallel_size > 1 && c->data_parallel_rank < 0) return supervise(c);
    if (c->data_parallel_rank >= 0) return run_rank(c, c->data_parallel_rank, c->port, c->n_threads, 0);
    return ds_server_run(c);
}
