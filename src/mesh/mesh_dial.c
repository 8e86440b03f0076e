/* SPDX-License-Identifier: MIT */
/* mesh_dial.c - what the mesh dials: the configured peers and the addresses of --peers-dns (peerdns.c resolves off the loop; the policy is here), non-blocking connects, redial with capped jittered backoff. */
#define _GNU_SOURCE
#include "mesh_int.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "os/dep_sodium.h"
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>


/* "HOST:PORT" or "[v6]:PORT" into its host and port strings. Validated by
 * pm__peer_addr_valid when it was set. */
static int split_addr(const char *s, char *host, size_t hsize, char *port, size_t psize)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL)
        return -EINVAL;
    const char *h = s;
    size_t hl = (size_t)(colon - s);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl + 1 > hsize || strlen(colon + 1) + 1 > psize)
        return -EINVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    strcpy(port, colon + 1);
    return 0;
}

int pm__mesh_resolve(const char *addr, int passive, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[256], port[8];
    if (split_addr(addr, host, sizeof(host), port, sizeof(port)) < 0)
        return -EINVAL;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || res == NULL)
        return -EADDRNOTAVAIL;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* Target i exists and may be dialled. */
int pm__mesh_target_dialable(const pm__mesh *m, int i)
{
    if (i < PM__MAX_PEERS)
        return i < (int)m->env.cfg.npeers;
    const pm__dtarget *t = &m->dt[i - PM__MAX_PEERS];
    return t->live && !t->self;
}

/* A link with host name `host` is up. */
static int host_linked(const pm__mesh *m, const char *host)
{
    for (unsigned j = 0; j < PM__MESH_CONNS; j++)
        if (m->conns[j].fd >= 0 && m->conns[j].linked && strcmp(m->conns[j].pc.peer.host, host) == 0)
            return 1;
    return 0;
}

/* Dials target i (non-blocking). A failure schedules a redial. */
void pm__mesh_dial(pm__mesh *m, int i)
{
    m->redial_at[i] = 0;
    struct sockaddr_storage ss;
    socklen_t len;
    int fd = -1;
    pm__dtarget *t = pm__mesh_dns_target(m, i);
    if (t != NULL) {
        if (t->host[0] != '\0' && host_linked(m, t->host)) {
            /* Another address of the name reaches the same host (a host
             * listening on several), and one link per pair is the rule:
             * look again later, in case that link goes. */
            m->redial_at[i] = pm__now_ms() + pm__mesh_jittered(PM__MESH_REDIAL_MAX_MS, pm__now_ms());
            return;
        }
        memcpy(&ss, &t->a.ss, sizeof(ss));
        len = t->a.len;
    } else if (pm__mesh_resolve(m->env.cfg.peers[i], 0, &ss, &len) < 0) {
        goto fail;
    }
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto fail;
    int rc = connect(fd, (struct sockaddr *)&ss, len);
    if (rc < 0 && errno != EINPROGRESS)
        goto fail;
    pm__mesh_conn *k = pm__mesh_conn_new(m, fd, i, 1, &ss);
    if (k == NULL)
        goto fail;
    k->dialing = rc < 0;
    m->dial_conn[i] = (int)(k - m->conns);
    pm__mesh_conn_arm(m, k);
    return;
fail:
    pm__close(fd);
    pm__mesh_schedule_redial(m, i, pm__now_ms());
}

/* A diagnostic to the mesh's owner. */
__attribute__((format(printf, 3, 4))) static void diag(pm__mesh *m, const char *topic,
                                                       const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    m->env.ops->diag(m->env.owner, topic, msg);
}

/* ---- peers from DNS -----------------------------------------------------
 * The name is resolved at start, then every PM__PEERDNS_REFRESH_MS while it
 * answers, and after a capped, jittered backoff while it fails or answers
 * nothing (each failure counted and written to stderr once per attempt,
 * which the backoff bounds). An address that appears is dialled at once;
 * one that is gone is no longer dialled (a link up to it stays until it
 * ends by itself: the pod may still be draining). Our own address is found
 * by the handshake (the hello's host name is ours: PM__PF_SELF) and never
 * dialled again while it stays in the answer. The result comes back on
 * the loop with tag PM__TAG_PEER_LISTEN, slot 1 (the listener is slot 0). */

static void dns_schedule(pm__mesh *m, int ok, uint64_t now)
{
    if (ok) {
        m->dns_backoff_ms = 0;
        m->dns_at = now + pm__mesh_jittered(PM__PEERDNS_REFRESH_MS, now);
        return;
    }
    uint32_t b = pm__mesh_backoff_next(m->dns_backoff_ms, PM__PEERDNS_RETRY_MIN_MS, PM__PEERDNS_RETRY_MAX_MS);
    m->dns_backoff_ms = b;
    m->dns_at = now + pm__mesh_jittered(b, now);
}

void pm__mesh_dns_resolve(pm__mesh *m, uint64_t now)
{
    m->dns_at = 0;
    if (pm__peerdns_fd(m->dns) >= 0) {
        /* A lookup whose fd the loop could not watch: its result is taken
         * now if it is there, else watched (or looked at again later). */
        pm__mesh_dns_ready(m);
        return;
    }
    int rc = pm__peerdns_start(m->dns);
    if (rc == 0) {
        if (pm__loop_arm(m->env.loop, pm__peerdns_fd(m->dns), DNS_TAG(m)) == 0)
            m->dns_armed = 1;
        else /* not watched: the next dns_resolve takes the result */
            m->dns_at = now + PM__PEERDNS_RETRY_MIN_MS;
        return;
    }
    m->dns_failed++;
    diag(m, "peers_dns_failed", "peers-dns: %s: cannot start a resolution: %s",
         pm__peerdns_name(m->dns), strerror(-rc));
    dns_schedule(m, 0, now);
}

void pm__mesh_dns_merge(pm__mesh *m, const pm__peerdns_addr *a, size_t n)
{
    for (unsigned d = 0; d < PM__PEERDNS_MAX; d++) {
        pm__dtarget *t = &m->dt[d];
        if (!t->live)
            continue;
        int kept = 0;
        for (size_t i = 0; i < n && !kept; i++)
            kept = a[i].len == t->a.len && memcmp(&a[i].ss, &t->a.ss, a[i].len) == 0;
        if (kept)
            continue;
        int j = m->dial_conn[DNS_TARGET(d)];
        if (j >= 0) {
            pm__mesh_conn *k = &m->conns[j];
            k->peer = -1; /* not redialled; it counts as a link of its own now */
            if (!k->linked) {
                pm__pconn_close(&k->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
                pm__mesh_conn_close(m, k);
            }
        }
        memset(t, 0, sizeof(*t));
        m->dial_conn[DNS_TARGET(d)] = -1;
        m->redial_at[DNS_TARGET(d)] = 0;
        m->backoff_ms[DNS_TARGET(d)] = 0;
    }
    for (size_t i = 0; i < n; i++) {
        int have = 0;
        for (unsigned d = 0; d < PM__PEERDNS_MAX && !have; d++)
            have = m->dt[d].live && a[i].len == m->dt[d].a.len && memcmp(&a[i].ss, &m->dt[d].a.ss, a[i].len) == 0;
        if (have)
            continue;
        /* A target not live has no connection: the loop above gave its
         * connection up (dial_conn -1) when it cleared it. */
        unsigned d = 0;
        while (d < PM__PEERDNS_MAX && m->dt[d].live)
            d++;
        if (d == PM__PEERDNS_MAX)
            continue; /* every target taken: the rest of this answer is not dialled */
        m->dt[d].live = 1;
        m->dt[d].a = a[i];
        pm__mesh_dial(m, DNS_TARGET(d));
    }
}

/* The resolution is done (its eventfd is readable). */
void pm__mesh_dns_ready(pm__mesh *m)
{
    m->dns_armed = 0;
    pm__peerdns_addr a[PM__PEERDNS_MAX];
    int gai = 0;
    int n = pm__peerdns_take(m->dns, a, PM__PEERDNS_MAX, &gai);
    if (n == -EAGAIN) {
        if (pm__loop_arm(m->env.loop, pm__peerdns_fd(m->dns), DNS_TAG(m)) == 0)
            m->dns_armed = 1;
        else
            m->dns_at = pm__now_ms() + PM__PEERDNS_RETRY_MIN_MS;
        return;
    }
    uint64_t now = pm__now_ms();
    if (n < 0) {
        /* Keeps the targets of the last answer: a DNS server that is down
         * for a while does not take the links (or their redials) away. */
        m->dns_failed++;
        diag(m, "peers_dns_failed", "peers-dns: %s: %s (attempt %llu; retried with backoff)",
             pm__peerdns_name(m->dns), gai != 0 ? gai_strerror(gai) : "no address",
             (unsigned long long)m->dns_failed);
        dns_schedule(m, 0, now);
        return;
    }
    m->dns_ok++;
    pm__mesh_dns_merge(m, a, (size_t)n);
    dns_schedule(m, 1, now);
}
