/* SPDX-License-Identifier: MIT */
/*
 * health.h - the daemon's HTTP endpoint (/healthz, /readyz, /metrics,
 * /status), served from the supervisor's own loop (pm_cluster_watch_fd).
 * Hardened against bad clients: a request is at most PMD_HTTP_MAX bytes and
 * must arrive within PMD_HTTP_TIMEOUT_MS (else 408), at most
 * PMD_HTTP_MAX_CONN connections are open at once (a new one then takes the
 * place of the oldest, which is closed without an answer: idle connections
 * cannot lock a probe out), and nothing a client does can block the loop
 * (every socket is non-blocking). A request that arrives with its
 * connection is answered in the turn that accepts it. Out of file
 * descriptors, accepting pauses until a connection closes or the next tick
 * (the pending connection waits in the backlog; no busy loop). The /status
 * body is status.c's.
 */
#ifndef PMD_HEALTH_H
#define PMD_HEALTH_H

#include <stddef.h>
#include <stdint.h>

#include "procmesh.h"

#define PMD_HTTP_MAX 4096
#define PMD_HTTP_TIMEOUT_MS 2000
#define PMD_HTTP_MAX_CONN 64

/*
 * Parses the request head in buf[0..len). Returns 0 while incomplete (no
 * blank line yet), else an HTTP status: 200 with *path set (a GET or HEAD
 * of a known path; *head for HEAD), 400 malformed, 404 unknown path, 405
 * another method, 413 when len reached PMD_HTTP_MAX without a complete head.
 * Pure.
 */
int pmd_http_parse(const char *buf, size_t len, const char **path, size_t *pathlen, int *head);

typedef struct pmd_health pmd_health;

/* What the endpoint reports; kept by the daemon, read on every request. */
typedef struct pmd_health_state {
    int draining;
    int min_ready;          /* -1: all slots */
    int spawn_failures;     /* consecutive failed starts, reset by a start */
    uint64_t exits_clean, exits_failed, exits_signal, exits_ready_timeout, exits_fenced,
        exits_oom;
    uint64_t http_evicted;       /* idle connections closed to make room */
    uint64_t http_accept_paused; /* accepts stopped for lack of fds */
    uint64_t log_suppressed;     /* log lines past a slot's rate limit (events.c) */
} pmd_health_state;

/* Listens on host:port and serves from c's loop. NULL with errno set on
 * failure (nothing left open or watched). */
pmd_health *pmd_health_start(pm_cluster *c, const char *host, unsigned port,
                             pmd_health_state *state);
/* Closes connections past their deadline (408) and resumes accepting after
 * a pause for lack of fds; call at least once a second, also while the
 * daemon waits in a rolling restart. */
void pmd_health_tick(pmd_health *h);
void pmd_health_stop(pmd_health *h);

/* The /metrics body; returns the length written (at most size - 1,
 * NUL-terminated). */
size_t pmd_health_metrics(pm_cluster *c, const pmd_health_state *st, char *buf, size_t size);
/* 1 when /readyz says ready: not draining, and at least min_ready slots
 * (all when -1, and at least one) ready. */
int pmd_health_ready(pm_cluster *c, const pmd_health_state *st);

/* Pure: 1 when a peer connection that ended with reason (a name of
 * pm_cluster_peer_failures) failed, 0 for an orderly end ("closed",
 * "local", "self"). */
int pmd_peer_reason_is_failure(const char *reason);

#endif /* PMD_HEALTH_H */
