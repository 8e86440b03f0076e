/* SPDX-License-Identifier: MIT */
/* mesh_accept.c - the mesh's listener: bound and armed, accepting with the per-source handshake rate limit, the bound on unauthenticated connections and the reserve fd for running out of fds. */
#define _GNU_SOURCE
#include "mesh_int.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "os/dep_sodium.h"
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>


int pm__mesh_rate_take(pm__mesh_rate *t, const unsigned char addr[16], uint64_t now_ms)
{
    pm__mesh_rate_src *e = NULL, *lru = &t->src[0];
    for (unsigned i = 0; i < PM__MESH_RATE_SOURCES && e == NULL; i++) {
        pm__mesh_rate_src *s = &t->src[i];
        if (s->last_ms != 0 && memcmp(s->addr, addr, 16) == 0)
            e = s;
        else if (s->last_ms < lru->last_ms)
            lru = s; /* a free entry (0) is the least recent of all */
    }
    const uint32_t full = PM__MESH_RATE_BURST * 1000u;
    if (e == NULL) {
        e = lru; /* a new source starts with a full bucket */
        memcpy(e->addr, addr, 16);
        e->mtokens = full;
    } else if (now_ms > e->last_ms) {
        /* PER_S tokens a second are PER_S thousandths a millisecond. */
        uint64_t add = (now_ms - e->last_ms) * PM__MESH_RATE_PER_S;
        e->mtokens = add >= full - e->mtokens ? full : e->mtokens + (uint32_t)add;
    }
    e->last_ms = now_ms;
    if (e->mtokens < 1000u)
        return 0;
    e->mtokens -= 1000u;
    return 1;
}

/* The rate limit's key for a source address (pm__mesh_rate_src.addr). */
void pm__mesh_rate_key(const struct sockaddr_storage *ss, unsigned char key[16])
{
    memset(key, 0, 16);
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)ss;
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &v4->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)ss;
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        /* A v4-mapped source is that IPv4 host; any other by its /64. */
        memcpy(key, &v6->sin6_addr, memcmp(&v6->sin6_addr, mapped, 12) == 0 ? 16 : 8);
    }
}

/* Takes back the reserve fd after it was spent (single-threaded: the fd
 * just closed is the lowest free one and nobody else can take it first,
 * but a worker start between turns may have). -1 when none is free. */
void pm__mesh_reserve_fd_reopen(pm__mesh *m)
{
    if (m->reserve_fd < 0)
        m->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/*
 * Out of fds (EMFILE, ENFILE), the pending connection stays queued and the
 * listener stays readable: arming it again would wake the loop at once for
 * as long as no fd frees up, and the peer would wait in the backlog for
 * nothing. So the reserve fd held for this moment is given up, the
 * connection is accepted with it and closed at once (the peer sees the
 * close and redials with its backoff), and the reserve fd is taken back: the
 * backlog drains and nothing spins (libuv's uv__emfile_trick). Without a
 * reserve fd (or out of memory, ENOBUFS/ENOMEM) accepting stalls until the next
 * loop turn's flush arms the listener again. 1: the loop may go on
 * accepting; 0: stop.
 */
static int accept_starved(pm__mesh *m)
{
    m->fails[PM__PF_NO_FDS]++;
    if (errno != EMFILE && errno != ENFILE)
        return 0;
    if (m->reserve_fd < 0)
        return 0;
    pm__close(m->reserve_fd);
    m->reserve_fd = -1;
    int fd = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC);
    pm__close(fd);
    pm__mesh_reserve_fd_reopen(m);
    return m->reserve_fd >= 0;
}

/* The listener is readable: accepts what waits (a bounded number). */
void pm__mesh_on_listen(pm__mesh *m)
{
    m->lfd_armed = 0;
    for (int i = 0; i < 16; i++) {
        struct sockaddr_storage from;
        socklen_t flen = sizeof(from);
        memset(&from, 0, sizeof(from));
        int fd = accept4(m->lfd, (struct sockaddr *)&from, &flen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            /* errno only after a failure: a success leaves the last one. */
            if (errno != EMFILE && errno != ENFILE && errno != ENOBUFS && errno != ENOMEM)
                break; /* EAGAIN: none left; a connection that went away */
            if (accept_starved(m))
                continue;
            m->accept_stalled = 1;
            return;
        }
        unsigned char key[16];
        pm__mesh_rate_key(&from, key);
        if (!pm__mesh_rate_take(&m->rate, key, pm__now_ms() | 1u)) {
            /* Over its source's rate: closed before anything is allocated
             * for it, and it takes no unauthenticated slot. */
            pm__close(fd);
            m->fails[PM__PF_RATE]++;
            pm__mesh_refused(m, &from, 0, PM__PF_RATE, NULL);
            continue;
        }
        /* Unauthenticated connections are bounded: the oldest is cut, so a
         * flood cannot keep a real peer out for longer than its handshake. */
        unsigned unauth = 0;
        pm__mesh_conn *oldest = NULL;
        for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
            pm__mesh_conn *o = &m->conns[j];
            if (o->fd < 0 || o->linked || o->lingering || o->peer >= 0)
                continue;
            unauth++;
            if (oldest == NULL || o->since_ms < oldest->since_ms)
                oldest = o;
        }
        if (unauth >= PM__MESH_UNAUTH_MAX && oldest != NULL) {
            pm__pconn_close(&oldest->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
            pm__mesh_conn_close(m, oldest);
        }
        pm__mesh_conn *k = pm__mesh_conn_new(m, fd, -1, 0, &from);
        if (k == NULL) {
            pm__close(fd);
            m->fails[PM__PF_LOCAL]++;
            continue;
        }
        pm__mesh_conn_arm(m, k);
    }
    if (pm__loop_arm(m->env.loop, m->lfd, LISTEN_TAG(m)) == 0)
        m->lfd_armed = 1;
}

int pm__mesh_listen_on(pm__mesh *m)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = pm__mesh_resolve(m->env.cfg.listen, 1, &ss, &len);
    if (rc < 0)
        return rc;
    m->lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (m->lfd < 0)
        return -errno;
    int one = 1;
    /* A restarted supervisor binds again while old connections linger in
     * TIME_WAIT. */
    (void)setsockopt(m->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(m->lfd, (struct sockaddr *)&ss, len) < 0 || listen(m->lfd, 64) < 0)
        return -errno;
    rc = pm__loop_arm(m->env.loop, m->lfd, LISTEN_TAG(m));
    if (rc == 0)
        m->lfd_armed = 1;
    pm__mesh_reserve_fd_reopen(m); /* best effort: without it, accept_starved stalls instead */
    return rc;
}
