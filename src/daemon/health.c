/* SPDX-License-Identifier: MIT */
/* health.c - the HTTP health endpoint in the supervisor's loop: request
 * parsing, /healthz /readyz /metrics answers, connection limits; see
 * health.h. */
#define _GNU_SOURCE
#include "health.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "sbuf.h"
#include "status.h"

/*
 * Which ends of a peer connection are failures (procmesh_peer_failures_total;
 * every end is in procmesh_peer_links_ended_total). Not failures: "closed"
 * (the peer's CLOSE: it stopped or dropped the link in order), "local" (we
 * ended it: stopping, a replaced or duplicate link, a flood's oldest
 * unauthenticated connection cut) and "self" (a --peers-dns answer lists
 * our own address, found once by the handshake: every pod of a headless
 * Service sees it). An alert on the failures' rate then fires for what an
 * operator must look at, not for every restart of a peer.
 */
int pmd_peer_reason_is_failure(const char *reason)
{
    static const char *const orderly[] = {"closed", "local", "self"};
    for (size_t i = 0; i < sizeof(orderly) / sizeof(orderly[0]); i++)
        if (strcmp(reason, orderly[i]) == 0)
            return 0;
    return 1;
}

static const char *const paths[] = {"/healthz", "/readyz", "/metrics", "/status"};

int pmd_http_parse(const char *buf, size_t len, const char **path, size_t *pathlen, int *head)
{
    const char *end = memmem(buf, len, "\r\n\r\n", 4);
    if (end == NULL)
        end = memmem(buf, len, "\n\n", 2);
    if (end == NULL)
        return len >= PMD_HTTP_MAX ? 413 : 0;
    /* The request line ends at the first newline, which exists: the blank
     * line found above has one. */
    const char *eol = memchr(buf, '\n', len);
    size_t l = (size_t)(eol - buf);
    if (l > 0 && buf[l - 1] == '\r')
        l--;
    /* METHOD SP TARGET SP HTTP/1.x */
    const char *sp1 = memchr(buf, ' ', l);
    if (sp1 == NULL || sp1 == buf)
        return 400;
    const char *target = sp1 + 1;
    const char *sp2 = memchr(target, ' ', l - (size_t)(target - buf));
    if (sp2 == NULL || sp2 == target || target[0] != '/')
        return 400;
    size_t vlen = l - (size_t)(sp2 + 1 - buf);
    if (vlen != 8 || (memcmp(sp2 + 1, "HTTP/1.0", 8) != 0 && memcmp(sp2 + 1, "HTTP/1.1", 8) != 0))
        return 400;
    for (const char *p = buf; p < sp1; p++)
        if (*p < 'A' || *p > 'Z')
            return 400;
    for (const char *p = target; p < sp2; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
            return 400;
    size_t tlen = (size_t)(sp2 - target);
    const char *q = memchr(target, '?', tlen);
    if (q != NULL)
        tlen = (size_t)(q - target);
    int known = 0;
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        known |= strlen(paths[i]) == tlen && memcmp(paths[i], target, tlen) == 0;
    size_t mlen = (size_t)(sp1 - buf);
    int get = mlen == 3 && memcmp(buf, "GET", 3) == 0;
    *head = mlen == 4 && memcmp(buf, "HEAD", 4) == 0;
    if (!known)
        return 404;
    if (!get && !*head)
        return 405;
    *path = target;
    *pathlen = tlen;
    return 200;
}

/* ------------------------------------------------------------------ bodies */

int pmd_health_ready(pm_cluster *c, const pmd_health_state *st)
{
    if (st->draining)
        return 0;
    unsigned ready = 0, n = pm_cluster_slots(c);
    for (unsigned i = 0; i < n; i++) {
        pm_slot_info si;
        if (pm_cluster_slot_info(c, i, &si) == 0 && si.state == PM_SLOT_READY)
            ready++;
    }
    unsigned need = st->min_ready < 0 ? n : (unsigned)st->min_ready;
    return ready >= need && ready > 0;
}

static void metric(pmd_sbuf *b, const char *name, const char *type, const char *help)
{
    pmd_sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The per-link counters /metrics shows in pairs: name, help, the label
 * that tells the pair apart, its two values, and where each value lives in
 * pm_peer_info. */
static const struct peer_pair {
    const char *name, *help, *label, *value[2];
    size_t off[2];
} peer_pairs[] = {
    {"procmesh_peer_frames_total", "Frames over each up link, by direction.", "direction",
     {"in", "out"}, {offsetof(pm_peer_info, frames_in), offsetof(pm_peer_info, frames_out)}},
    {"procmesh_peer_bytes_total", "Frame bytes over each up link, by direction.", "direction",
     {"in", "out"}, {offsetof(pm_peer_info, bytes_in), offsetof(pm_peer_info, bytes_out)}},
    {"procmesh_peer_records_total",
     "FRAMES records over each up link, by direction (frames / records: the batching).",
     "direction", {"in", "out"},
     {offsetof(pm_peer_info, records_in), offsetof(pm_peer_info, records_out)}},
    {"procmesh_peer_frames_dropped_total",
     "Frames an up link's peer sent that were dropped, by reason (forged: claiming another "
     "host; malformed: failing to decode or route).",
     "reason", {"forged", "malformed"},
     {offsetof(pm_peer_info, frames_forged), offsetof(pm_peer_info, frames_malformed)}},
};

/* Peer links (peer mode only): the links up, each up link's RTT, frames,
 * bytes and records, and the ended connections by reason. */
static void peer_metrics(pmd_sbuf *b, pm_cluster *c)
{
    enum { MAXP = 64, MAXR = 32 };
    if (pm_cluster_peer_failures(c, NULL, NULL, 0) <= 0)
        return; /* not in peer mode: no peer samples at all */
    pm_peer_info *p = calloc(MAXP, sizeof(*p));
    int n = p != NULL ? pm_cluster_peers(c, p, MAXP) : 0;
    if (n > MAXP)
        n = MAXP;
    unsigned up = 0;
    for (int i = 0; i < n; i++)
        up += strcmp(p[i].state, "up") == 0;
    metric(b, "procmesh_peer_links_up", "gauge", "Peer links up.");
    pmd_sb_printf(b, "procmesh_peer_links_up %u\n", up);
    metric(b, "procmesh_peer_rtt_seconds", "gauge", "Round trip of each up link's last heartbeat echo.");
    for (int i = 0; i < n; i++)
        if (strcmp(p[i].state, "up") == 0 && p[i].rtt_us >= 0)
            pmd_sb_printf(b, "procmesh_peer_rtt_seconds{host=\"%s\"} %.6f\n", p[i].host,
                          (double)p[i].rtt_us / 1e6);
    for (size_t k = 0; k < sizeof(peer_pairs) / sizeof(peer_pairs[0]); k++) {
        const struct peer_pair *q = &peer_pairs[k];
        metric(b, q->name, "counter", q->help);
        for (int i = 0; i < n; i++) {
            if (strcmp(p[i].state, "up") != 0)
                continue;
            const unsigned char *base = (const unsigned char *)&p[i];
            uint64_t v0, v1;
            memcpy(&v0, base + q->off[0], sizeof(v0));
            memcpy(&v1, base + q->off[1], sizeof(v1));
            pmd_sb_printf(b, "%s{host=\"%s\",%s=\"%s\"} %llu\n%s{host=\"%s\",%s=\"%s\"} %llu\n",
                          q->name, p[i].host, q->label, q->value[0], (unsigned long long)v0,
                          q->name, p[i].host, q->label, q->value[1], (unsigned long long)v1);
        }
    }
    free(p);
    const char *why[MAXR];
    uint64_t count[MAXR];
    int r = pm_cluster_peer_failures(c, why, count, MAXR);
    metric(b, "procmesh_peer_links_ended_total", "counter",
           "Peer connections ended, every end (orderly ones too), by reason.");
    for (int i = 0; i < r && i < MAXR; i++) /* every reason */
        pmd_sb_printf(b, "procmesh_peer_links_ended_total{reason=\"%s\"} %llu\n", why[i],
                      (unsigned long long)count[i]);
    metric(b, "procmesh_peer_failures_total", "counter",
           "Peer connections that failed (handshakes refused, links broken), by reason.");
    for (int i = 0; i < r && i < MAXR; i++) /* the failures among them */
        if (pmd_peer_reason_is_failure(why[i]))
            pmd_sb_printf(b, "procmesh_peer_failures_total{reason=\"%s\"} %llu\n", why[i],
                          (unsigned long long)count[i]);
}

/* The slots: how many, how many ready, and per slot its restarts, its
 * readiness and its heartbeat's age. */
static void slot_metrics(pmd_sbuf *b, pm_cluster *c)
{
    unsigned n = pm_cluster_slots(c);
    pm_slot_info *info = calloc(n ? n : 1, sizeof(*info));
    unsigned ready = 0;
    for (unsigned i = 0; i < n && info != NULL; i++) {
        pm_cluster_slot_info(c, i, &info[i]);
        ready += info[i].state == PM_SLOT_READY;
    }
    metric(b, "procmesh_workers", "gauge", "Worker slots.");
    pmd_sb_printf(b, "procmesh_workers %u\n", n);
    metric(b, "procmesh_workers_ready", "gauge", "Slots with a ready worker.");
    pmd_sb_printf(b, "procmesh_workers_ready %u\n", ready);
    metric(b, "procmesh_slot_restarts_total", "counter", "Restarts of each slot.");
    for (unsigned i = 0; i < n && info != NULL; i++)
        pmd_sb_printf(b, "procmesh_slot_restarts_total{slot=\"%u\"} %u\n", i, info[i].restarts_total);
    metric(b, "procmesh_slot_ready", "gauge", "1 when the slot's worker is ready.");
    for (unsigned i = 0; i < n && info != NULL; i++)
        pmd_sb_printf(b, "procmesh_slot_ready{slot=\"%u\"} %d\n", i, info[i].state == PM_SLOT_READY);
    metric(b, "procmesh_slot_heartbeat_age_seconds", "gauge",
           "Time since the slot's worker last made progress; only slots whose worker "
           "heartbeats (a ready mesh worker, a notify worker after WATCHDOG=1).");
    /* Where there is no heartbeat (exec, notify without WATCHDOG=1, a slot
     * not ready) the series is absent: an age since ready would grow
     * without bound and set off any alert on it. */
    for (unsigned i = 0; i < n && info != NULL; i++)
        if (info[i].heartbeat_age_ms > 0)
            pmd_sb_printf(b, "procmesh_slot_heartbeat_age_seconds{slot=\"%u\"} %.3f\n", i,
                          info[i].heartbeat_age_ms / 1000.0);
    free(info);
}

/* Worker exits by cause (the daemon's own counts) and fences by reason. */
static void exit_metrics(pmd_sbuf *b, const pmd_health_state *st, const struct pm_cluster_stats *s)
{
    metric(b, "procmesh_exits_total", "counter", "Worker exits by cause (clean: exited 0, or ended as asked by a stop).");
    pmd_sb_printf(b, "procmesh_exits_total{cause=\"clean\"} %llu\n", (unsigned long long)st->exits_clean);
    pmd_sb_printf(b, "procmesh_exits_total{cause=\"failure\"} %llu\n", (unsigned long long)st->exits_failed);
    pmd_sb_printf(b, "procmesh_exits_total{cause=\"signal\"} %llu\n", (unsigned long long)st->exits_signal);
    pmd_sb_printf(b, "procmesh_exits_total{cause=\"oom\"} %llu\n", (unsigned long long)st->exits_oom);
    pmd_sb_printf(b, "procmesh_exits_total{cause=\"ready_timeout\"} %llu\n",
              (unsigned long long)st->exits_ready_timeout);
    pmd_sb_printf(b, "procmesh_exits_total{cause=\"fenced\"} %llu\n", (unsigned long long)st->exits_fenced);
    metric(b, "procmesh_fences_total", "counter", "Workers fenced, by reason.");
    pmd_sb_printf(b, "procmesh_fences_total{reason=\"heartbeat\"} %llu\n",
              (unsigned long long)s->fences_heartbeat);
    pmd_sb_printf(b, "procmesh_fences_total{reason=\"corrupt-ring\"} %llu\n",
              (unsigned long long)s->fences_corrupt_ring);
    pmd_sb_printf(b, "procmesh_fences_total{reason=\"protocol\"} %llu\n",
              (unsigned long long)s->fences_protocol);
}

/* The hub's traffic, the supervisor's own health and the daemon's HTTP and
 * log counters. */
static void hub_metrics(pmd_sbuf *b, const pmd_health_state *st, const struct pm_cluster_stats *s)
{
    metric(b, "procmesh_frames_relayed_total", "counter", "Frames relayed by the hub.");
    pmd_sb_printf(b, "procmesh_frames_relayed_total %llu\n", (unsigned long long)s->frames_relayed);
    metric(b, "procmesh_bytes_relayed_total", "counter", "Payload bytes relayed by the hub.");
    pmd_sb_printf(b, "procmesh_bytes_relayed_total %llu\n", (unsigned long long)s->bytes_relayed);
    metric(b, "procmesh_malformed_frames_total", "counter", "Malformed frames dropped.");
    pmd_sb_printf(b, "procmesh_malformed_frames_total %llu\n", (unsigned long long)s->malformed_dropped);
    metric(b, "procmesh_undeliverable_total", "counter", "Undeliverable notices sent.");
    pmd_sb_printf(b, "procmesh_undeliverable_total %llu\n", (unsigned long long)s->undeliverable);
    metric(b, "procmesh_ring_full_waits_total", "counter",
           "Times a sender was held back by a full destination.");
    pmd_sb_printf(b, "procmesh_ring_full_waits_total %llu\n", (unsigned long long)s->ring_full_waits);
    metric(b, "procmesh_notify_dropped_total", "counter",
           "Notify datagrams not sent by the slot's own worker, dropped.");
    pmd_sb_printf(b, "procmesh_notify_dropped_total %llu\n", (unsigned long long)s->notify_dropped);
    metric(b, "procmesh_notices_dropped_total", "counter",
           "Undeliverable notices that found no room or no live requester, dropped.");
    pmd_sb_printf(b, "procmesh_notices_dropped_total %llu\n", (unsigned long long)s->notices_dropped);
    metric(b, "procmesh_http_connections_evicted_total", "counter",
           "Idle health connections closed to make room for a new one.");
    pmd_sb_printf(b, "procmesh_http_connections_evicted_total %llu\n",
                  (unsigned long long)st->http_evicted);
    metric(b, "procmesh_http_accept_paused_total", "counter",
           "Times the health endpoint stopped accepting for lack of file descriptors.");
    pmd_sb_printf(b, "procmesh_http_accept_paused_total %llu\n",
                  (unsigned long long)st->http_accept_paused);
    metric(b, "procmesh_log_lines_suppressed_total", "counter",
           "Log lines about a slot not written, past its rate limit.");
    pmd_sb_printf(b, "procmesh_log_lines_suppressed_total %llu\n",
                  (unsigned long long)st->log_suppressed);
    metric(b, "procmesh_not_draining_total", "counter",
           "Times a worker's full ring held frames back past the drain timeout.");
    pmd_sb_printf(b, "procmesh_not_draining_total %llu\n", (unsigned long long)s->not_draining);
    metric(b, "procmesh_input_faults_total", "counter",
           "Workers that died holding one of main's requests (restarted outside the budget).");
    pmd_sb_printf(b, "procmesh_input_faults_total %llu\n", (unsigned long long)s->input_faults);
    metric(b, "procmesh_supervisor_stalls_total", "counter", "Times the supervisor was not running.");
    pmd_sb_printf(b, "procmesh_supervisor_stalls_total %llu\n", (unsigned long long)s->stalls);
    metric(b, "procmesh_supervisor_longest_stall_seconds", "gauge", "Longest supervisor stall.");
    pmd_sb_printf(b, "procmesh_supervisor_longest_stall_seconds %.3f\n", s->longest_stall_ms / 1000.0);
    metric(b, "procmesh_orphans_reaped_total", "counter",
           "Re-parented processes that were not workers, reaped.");
    pmd_sb_printf(b, "procmesh_orphans_reaped_total %llu\n", (unsigned long long)s->orphans_reaped);
}

/* The Prometheus text of the whole cluster into buf (truncated to size);
 * returns its length. */
size_t pmd_health_metrics(pm_cluster *c, const pmd_health_state *st, char *buf, size_t size)
{
    pmd_sbuf b = {buf, size, 0};
    buf[0] = '\0';
    struct pm_cluster_stats s;
    pm_cluster_stats(c, &s);
    slot_metrics(&b, c);
    exit_metrics(&b, st, &s);
    hub_metrics(&b, st, &s);
    peer_metrics(&b, c);
    return b.len;
}

/* ------------------------------------------------------------------ server */

typedef struct conn {
    int fd;
    size_t len;
    uint64_t deadline;
    uint64_t seq; /* accept order: the lowest is the oldest */
    char buf[PMD_HTTP_MAX];
} conn;

struct pmd_health {
    pm_cluster *c;
    int lfd;
    int paused; /* accept stopped for lack of fds (see on_accept) */
    uint64_t seq;
    pmd_health_state *st;
    conn conns[PMD_HTTP_MAX_CONN];
    char *out; /* response buffer */
    size_t outsize;
};

static void on_accept(pm_cluster *c, int lfd, void *arg);

/* Accepting again after a pause for lack of fds. */
static void resume_accept(pmd_health *h)
{
    if (h->paused) {
        h->paused = 0;
        pm_cluster_watch_fd(h->c, h->lfd, on_accept, h);
    }
}

static void conn_close(pmd_health *h, conn *k)
{
    pm_cluster_unwatch_fd(h->c, k->fd);
    close(k->fd);
    k->fd = -1;
    /* An fd is free now: if accept ran out of them, it may go on. */
    resume_accept(h);
}

static void respond(pmd_health *h, conn *k, int code, int head, const char *ctype, const char *body,
                    size_t blen)
{
    static const struct {
        int code;
        const char *text;
    } reasons[] = {{200, "OK"},           {400, "Bad Request"},  {404, "Not Found"},
                   {405, "Method Not Allowed"}, {408, "Request Timeout"}, {413, "Payload Too Large"},
                   {503, "Service Unavailable"}};
    const char *reason = "Error";
    for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
        if (reasons[i].code == code)
            reason = reasons[i].text;
    char hdr[256];
    int n = snprintf(hdr, sizeof(hdr),
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                     "Connection: close\r\n\r\n",
                     code, reason, ctype, blen, code == 405 ? "Allow: GET, HEAD\r\n" : "");
    /* Non-blocking sends: a client that does not read loses its answer,
     * never the loop's time. */
    ssize_t w = send(k->fd, hdr, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w == n && !head && blen > 0)
        w = send(k->fd, body, blen, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    conn_close(h, k);
}

static void serve(pmd_health *h, conn *k, const char *path, size_t plen, int head)
{
    const char *text = "text/plain; charset=utf-8";
    if (plen == 8 && memcmp(path, "/healthz", 8) == 0) {
        /* Unhealthy once starting workers keeps failing (fork, memfd...): the
         * orchestrator should restart the container. */
        int ok = h->st->spawn_failures < 3;
        respond(h, k, ok ? 200 : 503, head, text, ok ? "ok\n" : "cannot start workers\n",
                ok ? 3 : 21);
    } else if (plen == 7 && memcmp(path, "/readyz", 7) == 0) {
        int ok = pmd_health_ready(h->c, h->st);
        respond(h, k, ok ? 200 : 503, head, text, ok ? "ready\n" : "not ready\n", ok ? 6 : 10);
    } else if (plen == 8 && memcmp(path, "/metrics", 8) == 0) {
        size_t n = pmd_health_metrics(h->c, h->st, h->out, h->outsize);
        respond(h, k, 200, head, "text/plain; version=0.0.4; charset=utf-8", h->out, n);
    } else {
        size_t n = pmd_status_json(h->c, pmd_health_ready(h->c, h->st), h->st->draining, h->out,
                                   h->outsize);
        respond(h, k, 200, head, "application/json", h->out, n);
    }
}

static void on_conn(pm_cluster *c, int fd, void *arg);

/* Reads what k's client sent; answers (and closes) once the request is
 * complete or bad, else watches for more. */
static void conn_read(pmd_health *h, conn *k)
{
    ssize_t n = recv(k->fd, k->buf + k->len, sizeof(k->buf) - k->len, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        conn_close(h, k);
        return;
    }
    if (n > 0)
        k->len += (size_t)n;
    const char *path = NULL;
    size_t plen = 0;
    int head = 0;
    int code = pmd_http_parse(k->buf, k->len, &path, &plen, &head);
    if (code == 0) {
        if (pm_cluster_watch_fd(h->c, k->fd, on_conn, h) < 0)
            conn_close(h, k);
        return;
    }
    if (code != 200) {
        char body[32];
        int bl = snprintf(body, sizeof(body), "%d\n", code);
        respond(h, k, code, 0, "text/plain; charset=utf-8", body, (size_t)bl);
        return;
    }
    serve(h, k, path, plen, head);
}

static void on_conn(pm_cluster *c, int fd, void *arg)
{
    (void)c;
    pmd_health *h = arg;
    for (int i = 0; i < PMD_HTTP_MAX_CONN; i++) /* the connection of fd */
        if (h->conns[i].fd == fd) {
            conn_read(h, &h->conns[i]);
            return;
        }
}

/* A place for a new connection: a free one, else the oldest connection's,
 * closed without an answer. Every open connection is idle (a complete
 * request is answered at once), so the oldest is the one that has held its
 * place longest without finishing a request: filling the table with idle
 * connections only ever pushes out idle connections, never a new probe. */
static conn *conn_slot(pmd_health *h)
{
    conn *oldest = NULL;
    for (int j = 0; j < PMD_HTTP_MAX_CONN; j++) {
        conn *k = &h->conns[j];
        if (k->fd < 0)
            return k;
        if (oldest == NULL || k->seq < oldest->seq)
            oldest = k;
    }
    h->st->http_evicted++;
    conn_close(h, oldest);
    return oldest;
}

static void on_accept(pm_cluster *c, int lfd, void *arg)
{
    pmd_health *h = arg;
    /* Accept what is pending, 64 at most per turn so a flood cannot hold
     * the loop. */
    for (int i = 0; i < 64; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* The pending connection stays queued, so the listening
                 * socket stays readable: re-armed now, it would fire again
                 * at once and spin. Stop accepting until a connection of
                 * ours closes (conn_close) or the next tick. */
                h->st->http_accept_paused++;
                h->paused = 1;
                return;
            }
            break; /* EAGAIN: nothing left; ECONNABORTED: the client left */
        }
        conn *k = conn_slot(h);
        k->fd = fd;
        k->len = 0;
        k->seq = h->seq++;
        k->deadline = pmd_now_ms() + PMD_HTTP_TIMEOUT_MS;
        /* A probe sends its request along with the connection: read it now,
         * so it is answered in this turn, before any later connection could
         * take its place. */
        conn_read(h, k);
    }
    pm_cluster_watch_fd(c, lfd, on_accept, h);
}

pmd_health *pmd_health_start(pm_cluster *c, const char *host, unsigned port, pmd_health_state *st)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char p[8];
    snprintf(p, sizeof(p), "%u", port);
    int gai = getaddrinfo(host[0] ? host : NULL, p, &hints, &res);
    if (gai != 0) {
        /* The caller's log line says strerror(errno). */
        errno = gai == EAI_MEMORY ? ENOMEM : gai == EAI_SYSTEM ? errno : EADDRNOTAVAIL;
        return NULL;
    }
    pmd_health *h = calloc(1, sizeof(*h));
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int ok = h != NULL && fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) == 0 &&
             listen(fd, 128) == 0;
    freeaddrinfo(res);
    if (ok) {
        /* + the peer links: at most 64 connections, ~1 KiB each in /metrics. */
        h->outsize = 64 * 1024 + 512 * (size_t)pm_cluster_slots(c) + 64 * 1024;
        h->out = malloc(h->outsize);
        ok = h->out != NULL;
    }
    if (ok) {
        h->c = c;
        h->lfd = fd;
        h->st = st;
        for (int i = 0; i < PMD_HTTP_MAX_CONN; i++)
            h->conns[i].fd = -1;
        /* The first watch allocates the cluster's table: without it the
         * socket would listen and never be answered. */
        int rc = pm_cluster_watch_fd(c, fd, on_accept, h);
        if (rc < 0) {
            (void)pm_cluster_unwatch_fd(c, fd); /* a table entry it may have taken */
            errno = -rc;
        }
        ok = rc == 0;
    }
    if (!ok) {
        int saved = errno;
        if (fd >= 0)
            close(fd);
        if (h != NULL)
            free(h->out);
        free(h);
        errno = saved;
        return NULL;
    }
    return h;
}

void pmd_health_tick(pmd_health *h)
{
    if (h == NULL)
        return;
    /* Out of fds at the last accept: try again, at most once a tick. */
    resume_accept(h);
    uint64_t now = pmd_now_ms();
    for (int i = 0; i < PMD_HTTP_MAX_CONN; i++) {
        conn *k = &h->conns[i];
        if (k->fd >= 0 && now >= k->deadline)
            respond(h, k, 408, 0, "text/plain; charset=utf-8", "408\n", 4);
    }
}

void pmd_health_stop(pmd_health *h)
{
    if (h == NULL)
        return;
    for (int i = 0; i < PMD_HTTP_MAX_CONN; i++)
        if (h->conns[i].fd >= 0)
            conn_close(h, &h->conns[i]);
    pm_cluster_unwatch_fd(h->c, h->lfd);
    close(h->lfd);
    free(h->out);
    free(h);
}
