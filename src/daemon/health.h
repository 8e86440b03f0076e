/*
 * health.h - the daemon's HTTP endpoint (/healthz, /readyz, /metrics,
 * /status), served from the supervisor's own loop (pm_cluster_watch_fd).
 * Hardened against bad clients: a request is at most PM__HTTP_MAX bytes and
 * must arrive within PM__HTTP_TIMEOUT_MS, at most PM__HTTP_MAX_CONN
 * connections are open at once, and nothing a client does can block the
 * loop (every socket is non-blocking).
 */
#ifndef PM_DAEMON_HEALTH_H
#define PM_DAEMON_HEALTH_H

#include <stddef.h>
#include <stdint.h>

#include "procmesh.h"

#define PM__HTTP_MAX 4096
#define PM__HTTP_TIMEOUT_MS 2000
#define PM__HTTP_MAX_CONN 64

/*
 * Parses the request head in buf[0..len). Returns 0 while incomplete (no
 * blank line yet), else an HTTP status: 200 with *path set (a GET or HEAD
 * of a known path; *head for HEAD), 400 malformed, 404 unknown path, 405
 * another method, 413 when len reached PM__HTTP_MAX without a complete head.
 * Pure.
 */
int pm__http_parse(const char *buf, size_t len, const char **path, size_t *pathlen, int *head);

typedef struct pm__health pm__health;

/* What the endpoint reports; kept by the daemon, read on every request. */
typedef struct pm__health_state {
    int draining;
    int min_ready;          /* -1: all slots */
    int spawn_failures;     /* consecutive failed starts, reset by a start */
    uint64_t exits_clean, exits_failed, exits_signal, exits_ready_timeout, exits_fenced,
        exits_oom;
} pm__health_state;

/* Listens on host:port and serves from c's loop. NULL with a log line on
 * failure. */
pm__health *pm__health_start(pm_cluster *c, const char *host, unsigned port,
                             pm__health_state *state);
/* Closes connections past their deadline; call at least once a second. */
void pm__health_tick(pm__health *h);
void pm__health_stop(pm__health *h);

/* The bodies, exposed for tests. Each returns the length written (at most
 * size - 1, NUL-terminated). */
size_t pm__health_metrics(pm_cluster *c, const pm__health_state *st, char *buf, size_t size);
size_t pm__health_status(pm_cluster *c, const pm__health_state *st, char *buf, size_t size);
int pm__health_ready(pm_cluster *c, const pm__health_state *st);

#endif /* PM_DAEMON_HEALTH_H */
